// slot_rx: one client's receiver (see include/gnuradio/oppsched/slot_rx.h). The block only
// composes slot_sync, ofdm_demodulator, header_codec and tb_decoder and handles the ports.
#include "slot_rx_impl.h"

#include <gnuradio/io_signature.h>
#include <gnuradio/oppsched/scrambler.h>

#include <cmath>
#include <stdexcept>

#include "block_util.h"

namespace gr {
namespace oppsched {

namespace {
const pmt::pmt_t k_rx_port = pmt::mp("rx");
const pmt::pmt_t k_symbols_port = pmt::mp("symbols");
const pmt::pmt_t k_slot = pmt::mp("slot");
const pmt::pmt_t k_mcs = pmt::mp("mcs");
}  // namespace

slot_rx::sptr slot_rx::make(const std::string& profile, double sample_rate, int user_id,
                            double detection_threshold, double ltf_threshold, int missed_slots,
                            double noise_ema, double slot_duration_s, const std::string& fec) {
    const numerology num = block_numerology(profile, sample_rate, slot_duration_s, fec);
    slot_sync_params sp;
    sp.detection_threshold = static_cast<float>(detection_threshold);
    sp.ltf_threshold = static_cast<float>(ltf_threshold);
    sp.validate(num);
    ofdm_demodulator_params dp;
    dp.snr.noise_ema = noise_ema;
    dp.validate();
    return gnuradio::make_block_sptr<slot_rx_impl>(num, user_id, sp, dp, missed_slots);
}

slot_rx_impl::slot_rx_impl(const numerology& num, int user_id, const slot_sync_params& sp,
                           const ofdm_demodulator_params& dp, int missed_slots)
    : gr::sync_block("slot_rx", gr::io_signature::make(1, 1, sizeof(gr_complex)),
                     gr::io_signature::make(0, 0, 0)),
      d_num(num),
      d_user(user_id),
      d_S(num.slot_samples()),
      d_missed_limit(missed_slots),
      d_sync(num, sp),
      d_demod(num, dp),
      d_hdr(num),
      d_dec(num) {
    if (user_id < 0 || user_id >= slot_msg::user_nobody)
        throw std::invalid_argument("slot_rx.user_id: " + std::to_string(user_id) +
                                    " not in [0,65534]");
    if (missed_slots < 0)
        throw std::invalid_argument("slot_rx.missed_slots: " + std::to_string(missed_slots) +
                                    " must be >= 0");
    d_hdr_re.resize(d_hdr.resource_elements());
    message_port_register_out(k_rx_port);
    message_port_register_out(k_symbols_port);
}

harq_buffer& slot_rx_impl::harq(int pid) {
    auto& b = d_harq.at(static_cast<std::size_t>(pid));
    if (!b) b = d_dec.make_harq_buffer();
    return *b;
}

std::uint64_t slot_rx_impl::unwrap(std::uint32_t s) const {
    // The header carries slot mod 2^32; take the 64-bit value closest to the last one seen
    // (at 600 slots/s the 32 bits wrap after 83 days, so this is for long runs only).
    if (!d_have_header) return s;
    constexpr std::uint64_t span = 1ull << 32;
    const std::uint64_t base = d_last_header_slot & ~(span - 1);
    const std::uint64_t cand = base | s;
    auto dist = [&](std::uint64_t c) {
        return c > d_last_header_slot ? c - d_last_header_slot : d_last_header_slot - c;
    };
    std::uint64_t best = cand;
    if (cand >= span && dist(cand - span) < dist(best)) best = cand - span;
    if (dist(cand + span) < dist(best)) best = cand + span;
    return best;
}

void slot_rx_impl::report(const slot_msg::rx_report& r) {
    d_last_snr = r.snr_db;
    d_last_esnr = r.effective_snr_db;
    d_last_cqi = r.cqi;
    message_port_pub(k_rx_port, slot_msg::to_pmt(r));
}

void slot_rx_impl::report_missed_until(std::uint64_t slot) {
    // Slots between the last report and \p slot that nobody found: a deep fade (or the AP
    // stopped). Report them as CQI 0 so the MAC does not keep scheduling on a stale CQI.
    while (d_next_report < slot && d_missed_run < d_missed_limit) {
        slot_msg::rx_report m;
        m.slot = d_next_report;
        m.slot_estimated = true;
        m.detected = false;
        m.sample =
            d_anchor_start + (d_next_report - d_anchor_slot) * static_cast<std::uint64_t>(d_S);
        report(m);
        ++d_missed;
        ++d_missed_run;
        ++d_next_report;
    }
}

void slot_rx_impl::check_missed(std::uint64_t pos) {
    if (!d_locked || d_missed_limit == 0) return;
    // slot_sync reports a slot once its last sample plus ltf_search + 2 cp_len arrived;
    // half a slot more is a generous margin.
    while (d_missed_run < d_missed_limit && d_next_report >= d_anchor_slot) {
        const std::uint64_t expected =
            d_anchor_start + (d_next_report - d_anchor_slot) * static_cast<std::uint64_t>(d_S);
        if (pos < expected + static_cast<std::uint64_t>(d_S + d_S / 2)) break;
        report_missed_until(d_next_report + 1);
    }
}

void slot_rx_impl::process(const slot_detection& det) {
    ++d_detected;
    d_demod.demodulate(det.samples.data(), det.samples.size(), d_res, true);
    if (!d_res.valid) {
        ++d_invalid;
        return;
    }
    slot_msg::rx_report r;
    r.sample = det.start;
    r.cfo_hz = det.cfo_hz;
    r.snr_db = d_res.snr.snr_db;
    r.effective_snr_db = d_res.snr.effective_snr_db;
    r.cqi = d_res.snr.cqi;

    auto h = d_hdr.decode(d_res.header.data(), d_res.header_nvar.data(), d_res.header.size());
    if (h) {
        ++d_headers_ok;
        r.header_ok = true;
        r.slot = unwrap(h->slot);
        d_have_header = true;
        d_last_header_slot = r.slot;
        r.user = h->user;
        r.mcs = h->mcs;
        r.harq_pid = h->harq_process;
        r.ndi = h->ndi;
        r.rv = h->rv;
        r.tb_bytes = h->tb_bytes;
        r.addressed = h->user == d_user;
        if (r.addressed && h->tb_bytes > 0) {
            ++d_addressed;
            try {
                // Header-aided channel estimation: the CRC-checked header is known
                // training (ofdm_demodulator.h step 6), before the TB decode.
                d_hdr.encode(h.value(), d_hdr_re.data());
                d_demod.refine_with_header(d_hdr_re.data(), d_hdr_re.size(), d_res);
                tb_rx_params p;
                p.mcs = h->mcs;
                p.rv = h->rv;
                p.tb_bytes = h->tb_bytes;
                p.ndi = h->ndi;
                p.scrambler_seed = scrambler::seed_for_slot(h->slot);
                auto res = d_dec.decode(d_res.payload.data(), d_res.payload_nvar.data(),
                                        d_res.payload.size(), p, harq(h->harq_process));
                r.crc_ok = res.crc_ok;
                r.combined = res.stats.receptions;
                if (res.crc_ok) r.tb = std::move(res.bytes);
            } catch (const std::exception& e) {
                // The header passed its CRC and field checks, so this is a header the
                // decoder cannot use (e.g. a garbage header that happened to pass).
                ++d_decode_errors;
                r.crc_ok = false;
            }
            if (r.crc_ok)
                ++d_tb_ok;
            else
                ++d_tb_failed;
            if (!pmt::is_null(message_subscribers(k_symbols_port))) {
                pmt::pmt_t meta = pmt::make_dict();
                meta = pmt::dict_add(meta, k_slot, pmt::from_uint64(r.slot));
                meta = pmt::dict_add(meta, k_mcs, pmt::from_long(r.mcs));
                message_port_pub(k_symbols_port,
                                 pmt::cons(meta, pmt::init_c32vector(d_res.payload.size(),
                                                                     d_res.payload.data())));
            }
        }
    } else {
        ++d_header_errors;
        if (!d_locked) {
            ++d_unnumbered;  // no slot number to give it
            return;
        }
        const double k = std::round(
            (static_cast<double>(det.start) - static_cast<double>(d_anchor_start)) / d_S);
        if (k < 1) {
            ++d_unnumbered;  // overlaps the last slot: cannot be a new one
            return;
        }
        r.slot = d_anchor_slot + static_cast<std::uint64_t>(k);
        r.slot_estimated = true;
    }
    if (d_locked && r.slot > d_next_report) {
        // Fill the gap only when the slot number agrees with the stream position (not after
        // the AP restarted its slot count, nor for a garbage header that passed its CRC).
        const double k = std::round(
            (static_cast<double>(det.start) - static_cast<double>(d_anchor_start)) / d_S);
        if (k >= 1 && r.slot - d_anchor_slot == static_cast<std::uint64_t>(k))
            report_missed_until(r.slot);
    }
    report(r);
    d_locked = true;
    d_anchor_slot = r.slot;
    d_anchor_start = det.start;
    d_next_report = r.slot + 1;
    d_missed_run = 0;
}

int slot_rx_impl::work(int noutput_items, gr_vector_const_void_star& input_items,
                       gr_vector_void_star&) {
    const auto* in = static_cast<const gr_complex*>(input_items[0]);
    d_found.clear();
    d_sync.push(in, static_cast<size_t>(noutput_items), d_found);
    for (const auto& det : d_found) process(det);
    d_found.clear();
    d_truncated = d_sync.stats().rejected_truncated;
    d_nonfinite = d_sync.stats().nonfinite;
    check_missed(nitems_read(0) + static_cast<std::uint64_t>(noutput_items));
    return noutput_items;
}

}  // namespace oppsched
}  // namespace gr
