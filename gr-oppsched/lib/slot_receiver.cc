// slot_receiver: one client's receiver chain (see include/gnuradio/oppsched/slot_receiver.h).
#include <gnuradio/oppsched/scrambler.h>
#include <gnuradio/oppsched/slot_receiver.h>

#include <cmath>
#include <stdexcept>

#include "oppsched/validation.h"

namespace gr {
namespace oppsched {

slot_receiver::slot_receiver(const numerology& num, int user_id, const slot_sync_params& sync,
                             const ofdm_demodulator_params& demod, int missed_slots, bool uplink,
                             bool own_slots_only)
    : d_num(num),
      d_user(user_id),
      d_S(num.slot_samples()),
      d_missed_limit(own_slots_only ? 0 : missed_slots),
      d_uplink(uplink),
      d_own_only(own_slots_only),
      d_sync(num, sync),
      d_demod(num, demod),
      d_hdr(num),
      d_dec(num) {
    if (user_id < 0 || user_id >= ::oppsched::wire::kUserNobody)
        ::oppsched::throw_invalid("slot_receiver.user_id", user_id, "not in [0,65534]");
    if (missed_slots < 0)
        ::oppsched::throw_invalid("slot_receiver.missed_slots", missed_slots, "must be >= 0");
    d_hdr_re.resize(d_hdr.resource_elements());
}

harq_buffer& slot_receiver::harq(int pid) {
    auto& b = d_harq.at(static_cast<std::size_t>(pid));
    if (!b) b = d_dec.make_harq_buffer();
    return *b;
}

std::uint64_t slot_receiver::unwrap(std::uint32_t s) const {
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

double slot_receiver::slots_since_anchor(std::uint64_t start) const {
    return std::round((static_cast<double>(start) - static_cast<double>(d_anchor_start)) / d_S);
}

void slot_receiver::add_report(const slot_msg::rx_report& r,
                               std::vector<slot_msg::rx_report>& reports) {
    d_stats.last_snr_db = r.snr_db;
    d_stats.last_effective_snr_db = r.effective_snr_db;
    d_stats.last_cqi = r.cqi;
    reports.push_back(r);
}

void slot_receiver::report_missed_until(std::uint64_t slot,
                                        std::vector<slot_msg::rx_report>& reports) {
    // Slots between the last report and \p slot that nobody found: a deep fade (or the AP
    // stopped).
    while (d_next_report < slot && d_missed_run < d_missed_limit) {
        slot_msg::rx_report m;
        m.slot = d_next_report;
        m.slot_estimated = true;
        m.detected = false;
        m.sample =
            d_anchor_start + (d_next_report - d_anchor_slot) * static_cast<std::uint64_t>(d_S);
        add_report(m, reports);
        ++d_stats.missed;
        ++d_missed_run;
        ++d_next_report;
    }
}

void slot_receiver::report_missed(std::vector<slot_msg::rx_report>& reports) {
    if (!d_locked || d_missed_limit == 0) return;
    // slot_sync reports a slot once its last sample plus ltf_search + 2 cp_len arrived;
    // half a slot more is a generous margin.
    while (d_missed_run < d_missed_limit && d_next_report >= d_anchor_slot) {
        const std::uint64_t expected =
            d_anchor_start + (d_next_report - d_anchor_slot) * static_cast<std::uint64_t>(d_S);
        if (d_position < expected + static_cast<std::uint64_t>(d_S + d_S / 2)) break;
        report_missed_until(d_next_report + 1, reports);
    }
}

void slot_receiver::detect(const gr_complex* in, std::size_t n,
                           std::vector<slot_detection>& found) {
    d_sync.push(in, n, found);
    d_position += n;
    d_stats.truncated = d_sync.stats().rejected_truncated;
    d_stats.nonfinite = d_sync.stats().nonfinite;
}

void slot_receiver::decode_payload(const header_fields& h, bool fresh_harq) {
    auto& r = d_rec.report;
    try {
        // Header-aided channel estimation: the CRC-checked header is known training
        // (ofdm_demodulator.h, step 6), before the TB decode.
        d_hdr.encode(h, d_hdr_re.data());
        d_demod.refine_with_header(d_hdr_re.data(), d_hdr_re.size(), d_res);
        tb_rx_params p;
        p.mcs = h.mcs;
        p.rv = h.rv;
        p.tb_bytes = h.tb_bytes;
        p.ndi = h.ndi;
        p.scrambler_seed = scrambler::seed_for_slot(h.slot);
        harq_buffer& buffer = harq(h.harq_process);
        if (fresh_harq) buffer.clear();
        auto res = d_dec.decode(d_res.payload.data(), d_res.payload_nvar.data(),
                                d_res.payload.size(), p, buffer);
        r.crc_ok = res.crc_ok;
        r.combined = res.stats.receptions;
        if (res.crc_ok) r.tb = std::move(res.bytes);
    } catch (const std::exception&) {
        // The header passed its CRC and field checks, so this is a header the decoder
        // cannot use (e.g. a garbage header that happened to pass).
        ++d_stats.decode_errors;
        r.crc_ok = false;
    }
    if (r.crc_ok)
        ++d_stats.tb_ok;
    else
        ++d_stats.tb_failed;
    d_rec.payload_decoded = true;
}

const slot_reception& slot_receiver::receive(const slot_detection& det,
                                             std::vector<slot_msg::rx_report>& reports,
                                             bool fresh_harq) {
    d_rec = slot_reception{};
    ++d_stats.detected;
    const auto noise_before = d_demod.estimator().state();  // before this slot updates it
    // The header first (LTF, SNR, header symbols): most slots are addressed to another
    // user, and their payload symbols need no FFT. The whole slot, exactly as if
    // demodulated at once, for one addressed to us and for a header that failed (the gain
    // tracking over all symbols may still decode it).
    const gr_complex* x = det.samples.data();
    const std::size_t nx = det.samples.size();
    d_demod.demodulate(x, nx, d_res, false);
    if (!d_res.valid) {
        ++d_stats.invalid;
        return d_rec;
    }
    auto h = d_hdr.decode(d_res.header.data(), d_res.header_nvar.data(), d_res.header.size());
    if (!h || (h->user == d_user && h->uplink == d_uplink && h->tb_bytes > 0)) {
        d_demod.complete_payload(x, nx, d_res);
        h = d_hdr.decode(d_res.header.data(), d_res.header_nvar.data(), d_res.header.size());
    }
    d_rec.valid = true;
    auto& r = d_rec.report;
    r.sample = det.start;
    r.noise_before = noise_before.average;
    r.noise_count_before = noise_before.count;
    r.cfo_hz = det.cfo_hz;
    r.snr_db = d_res.snr.snr_db;
    r.effective_snr_db = d_res.snr.effective_snr_db;
    r.cqi = d_res.snr.cqi;
    if (h) {
        ++d_stats.headers_ok;
        d_rec.header = h.value();
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
        r.addressed = h->user == d_user && h->uplink == d_uplink;
        if (h->uplink != d_uplink || (d_own_only && !r.addressed)) {
            // Not this receiver's: numbered (so it is not reported missed), not reported.
            ++(h->uplink != d_uplink ? d_stats.other_direction : d_stats.not_own);
            anchor(r.slot, det.start);
            return d_rec;
        }
        if (r.addressed && h->tb_bytes > 0) {
            ++d_stats.addressed;
            decode_payload(h.value(), fresh_harq);
        }
    } else {
        ++d_stats.header_errors;
        if (d_own_only) {  // whose slot it was is unknown: not this station's to report
            ++d_stats.not_own;
            return d_rec;
        }
        if (!d_locked) {
            ++d_stats.unnumbered;  // no slot number to give it
            return d_rec;
        }
        const double k = slots_since_anchor(det.start);
        if (k < 1) {
            ++d_stats.unnumbered;  // overlaps the last slot: cannot be a new one
            return d_rec;
        }
        r.slot = d_anchor_slot + static_cast<std::uint64_t>(k);
        r.slot_estimated = true;
    }
    if (d_locked && r.slot > d_next_report) {
        // Fill the gap only when the slot number agrees with the stream position (not after
        // the AP restarted its slot count, nor for a garbage header that passed its CRC).
        const double k = slots_since_anchor(det.start);
        if (k >= 1 && r.slot - d_anchor_slot == static_cast<std::uint64_t>(k))
            report_missed_until(r.slot, reports);
    }
    add_report(r, reports);
    d_rec.reported = true;
    anchor(r.slot, det.start);
    return d_rec;
}

void slot_receiver::anchor(std::uint64_t slot, std::uint64_t start) {
    d_locked = true;
    d_anchor_slot = slot;
    d_anchor_start = start;
    d_next_report = slot + 1;
    d_missed_run = 0;
}

}  // namespace oppsched
}  // namespace gr
