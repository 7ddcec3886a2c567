// slot_tx: the AP's slot framer (see include/gnuradio/oppsched/slot_tx.h). The block only
// composes header_codec, tb_encoder and ofdm_modulator and handles the ports and tags.
#include "slot_tx_impl.h"

#include <gnuradio/io_signature.h>
#include <gnuradio/oppsched/mcs.h>
#include <gnuradio/oppsched/scrambler.h>

#include <algorithm>
#include <boost/thread/thread.hpp>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "block_util.h"
#include "oppsched/lead_slots.h"

namespace gr {
namespace oppsched {

namespace {
const pmt::pmt_t k_grant_port = pmt::mp("grant");
const pmt::pmt_t k_request_port = pmt::mp("request");
const pmt::pmt_t k_tx_sob = pmt::mp("tx_sob");
const pmt::pmt_t k_tx_eob = pmt::mp("tx_eob");
const pmt::pmt_t k_tx_time = pmt::mp("tx_time");
const pmt::pmt_t k_slot = pmt::mp("slot");
const pmt::pmt_t k_uplink_user = pmt::mp("uplink_user");

std::int64_t monotonic_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
}  // namespace

slot_tx::sptr slot_tx::make(const std::string& profile, double sample_rate, int lead_slots,
                            double t0_s, bool continuous, bool realtime, double slot_duration_s,
                            int max_pending, const std::string& fec) {
    return gnuradio::make_block_sptr<slot_tx_impl>(
        block_numerology(profile, sample_rate, slot_duration_s, fec), lead_slots, t0_s, continuous,
        realtime, max_pending);
}

slot_tx_impl::slot_tx_impl(const numerology& num, int lead_slots, double t0_s, bool continuous,
                           bool realtime, int max_pending)
    : gr::sync_block("slot_tx", gr::io_signature::make(0, 0, 0),
                     gr::io_signature::make(1, 2, sizeof(gr_complex))),
      d_num(num),
      d_lead(lead_slots),
      d_t0_s(t0_s),
      d_continuous(continuous),
      d_realtime(realtime),
      d_max_pending(static_cast<std::size_t>(std::max(max_pending, 0))),
      d_hdr(num),
      d_enc(num),
      d_mod(num),
      d_clock(static_cast<std::uint64_t>(num.slot_samples()), num.params().sample_rate),
      d_slot_buf(static_cast<std::size_t>(num.slot_samples())),
      d_up_buf(static_cast<std::size_t>(num.slot_samples())),
      d_slot_pos(num.slot_samples()) {
    if (lead_slots < static_cast<int>(::oppsched::kMinLeadSlots) ||
        lead_slots > static_cast<int>(::oppsched::kMaxLeadSlots))
        throw std::invalid_argument("slot_tx.lead_slots: " + std::to_string(lead_slots) +
                                    " not in [" + std::to_string(::oppsched::kMinLeadSlots) + "," +
                                    std::to_string(::oppsched::kMaxLeadSlots) + "]");
    if (max_pending < 1)
        throw std::invalid_argument("slot_tx.max_pending: " + std::to_string(max_pending) +
                                    " must be >= 1");
    if (!std::isfinite(t0_s) || t0_s < 0)
        throw std::invalid_argument("slot_tx.t0_s: " + std::to_string(t0_s) + " must be >= 0");
    if (!realtime) d_clock.set_t0(t0_s);
    d_hdr_re.resize(d_hdr.resource_elements());
    d_pay_re.resize(d_enc.resource_elements());

    message_port_register_in(k_grant_port);
    set_msg_handler(k_grant_port, [this](const pmt::pmt_t& m) { handle_grant(m); });
    message_port_register_out(k_request_port);
    // Our own tags only: there is no input to propagate from.
    set_tag_propagation_policy(TPP_DONT);
}

bool slot_tx_impl::start() {
    d_rt_started = false;
    return true;
}

void slot_tx_impl::handle_grant(const pmt::pmt_t& msg) {
    ++d_grants;
    auto parsed = slot_msg::grant_from_pmt(msg);
    std::string why;
    if (!parsed) {
        why = parsed.error();
    } else if (!parsed->empty) {
        const auto& g = parsed.value();
        if (g.mcs >= mcs_set::size) {
            why = "mcs: " + std::to_string(g.mcs) + " not in [0,7]";
        } else {
            const std::size_t max = mcs_set::tb_bytes(g.mcs, d_num);
            if (g.tb.size() > max)
                why = "tb: " + std::to_string(g.tb.size()) + " bytes exceed the " +
                      std::to_string(max) + " of mcs " + std::to_string(g.mcs);
        }
    }
    if (!why.empty()) {
        ++d_grants_bad;
        if (d_lim_bad.allow()) d_logger->warn("malformed grant dropped ({})", why);
        // Its slot goes out empty, not late, when we can still tell which slot it was.
        const pmt::pmt_t s =
            pmt::is_dict(msg) ? pmt::dict_ref(msg, k_slot, pmt::PMT_NIL) : pmt::PMT_NIL;
        if (pmt::is_uint64(s) || (pmt::is_integer(s) && pmt::to_long(s) >= 0)) {
            const std::uint64_t slot =
                pmt::is_uint64(s) ? pmt::to_uint64(s) : static_cast<std::uint64_t>(pmt::to_long(s));
            if ((!d_started || slot >= d_next_slot) && !d_pending.count(slot) &&
                d_pending.size() < d_max_pending) {
                slot_msg::grant e;
                e.slot = slot;
                d_pending.emplace(slot, std::move(e));
            }
        }
        return;
    }
    slot_msg::grant g = std::move(parsed).value();
    if (d_started && g.slot < d_next_slot) {
        ++d_grants_late;
        if (d_lim_late.allow())
            d_logger->debug("grant for slot {} arrived after the slot was built", g.slot);
        return;
    }
    if (d_pending.count(g.slot)) {
        ++d_grants_dup;
        return;
    }
    if (d_pending.size() >= d_max_pending) {
        // Keep the most urgent grants: drop the furthest slot (possibly this one).
        auto last = std::prev(d_pending.end());
        ++d_grants_overflow;
        if (last->first < g.slot) return;
        d_pending.erase(last);
    }
    d_pending.emplace(g.slot, std::move(g));
}

void slot_tx_impl::publish_request(std::uint64_t slot) {
    slot_msg::request r;
    r.slot = slot;
    r.air_time_ns = d_clock.air_time_ns(slot);
    message_port_pub(k_request_port, slot_msg::to_pmt(r));
    ++d_requests;
}

void slot_tx_impl::build_slot(std::uint64_t n, bool uplink_output) {
    header_fields h;
    h.slot = static_cast<std::uint32_t>(n);  // the header carries slot mod 2^32
    h.user = ::oppsched::wire::kUserNobody;
    header_fields empty_h = h;  // the other direction's slot: preamble and header to nobody
    header_fields up_empty_h = h;
    up_empty_h.uplink = true;
    bool have_tb = false, uplink = false;
    d_uplink_user = -1;
    auto it = d_pending.find(n);
    if (it == d_pending.end()) {
        ++d_late;
    } else if (!it->second.empty && it->second.uplink && !uplink_output) {
        ++d_grants_bad;
        if (d_lim_bad.allow())
            d_logger->warn("uplink grant for slot {} dropped: output 1 (uplink) not connected", n);
    } else if (!it->second.empty) {
        const auto& g = it->second;
        h.user = g.user;
        h.mcs = g.mcs;
        h.harq_process = g.harq_pid;
        h.ndi = g.ndi;
        h.rv = g.rv;
        h.tb_bytes = static_cast<std::uint16_t>(g.tb.size());
        d_enc.encode(g.tb.data(), g.tb.size(), g.mcs, g.rv, scrambler::seed_for_slot(h.slot),
                     d_pay_re.data());
        have_tb = true;
        uplink = g.uplink;
        h.uplink = uplink;
        if (uplink) d_uplink_user = g.user;
    }
    // Grants for slots up to n are used or stale now.
    d_pending.erase(d_pending.begin(), d_pending.upper_bound(n));

    // Output 0, the downlink: the slot, or in an uplink slot an empty slot (no TB goes down
    // while the station transmits). Not silence: slot_rx's detection needs the whole slot
    // (with zeros after the header, every such slot went undetected at 20 dB, CQI -30 dB,
    // and the downlink's link adaptation saw every uplink slot as a deep fade).
    d_hdr.encode(uplink ? empty_h : h, d_hdr_re.data());
    d_mod.modulate(d_hdr_re.data(), d_hdr_re.size(), d_pay_re.data(),
                   have_tb && !uplink ? d_pay_re.size() : 0, d_slot_buf.data());
    if (uplink_output) {  // output 1: the station's slot, or the stations' sounding
        d_hdr.encode(uplink ? h : up_empty_h, d_hdr_re.data());
        d_mod.modulate(d_hdr_re.data(), d_hdr_re.size(), d_pay_re.data(),
                       uplink ? d_pay_re.size() : 0, d_up_buf.data());
    }
    ++d_slots;
    if (have_tb && uplink)
        ++d_up_tb_sent;
    else if (have_tb)
        ++d_tb_sent;
    else
        ++d_empty;
}

void slot_tx_impl::wait_until_due(std::uint64_t n) {
    // Sleep in short steps, draining the grant queue meanwhile: a grant that arrives while
    // we wait for slot n's instant must still count for slot n.
    const std::int64_t due = d_clock.air_time_ns(n);
    for (;;) {
        while (pmt::pmt_t m = delete_head_nowait(k_grant_port)) handle_grant(m);
        const std::int64_t now = monotonic_ns();
        if (now >= due) {
            if (now - due > d_clock.slot_ns()) ++d_overruns;
            return;
        }
        const std::int64_t step = std::min<std::int64_t>(due - now, 200'000);  // <= 0.2 ms
        boost::this_thread::interruption_point();  // the scheduler's stop() (t0_s may be long)
        std::this_thread::sleep_for(std::chrono::nanoseconds(step));
    }
}

int slot_tx_impl::work(int noutput_items, gr_vector_const_void_star&,
                       gr_vector_void_star& output_items) {
    auto* out = static_cast<gr_complex*>(output_items[0]);
    auto* up = output_items.size() > 1 ? static_cast<gr_complex*>(output_items[1]) : nullptr;
    const int S = d_num.slot_samples();
    int produced = 0;
    while (produced < noutput_items) {
        if (d_slot_pos == S) {  // start the next slot
            const std::uint64_t n = d_next_slot;
            // The first slots' requests go out before anything else (in realtime mode
            // before waiting for slot 0, so a daemon answering within t0_s makes slot 0).
            if (n == 0 && !d_initial_requests) {
                if (d_realtime && !d_rt_started) {
                    d_clock.set_t0_ns(monotonic_ns() +
                                      static_cast<std::int64_t>(std::llround(d_t0_s * 1e9)));
                    d_rt_started = true;
                }
                for (int s = 0; s < d_lead; ++s) publish_request(static_cast<std::uint64_t>(s));
                d_initial_requests = true;
            }
            if (d_realtime && !d_rt_started) {
                // restarted after a stop: slot n is due t0_s from now (a pause in the
                // flowgraph is not a backlog to catch up on)
                d_clock.set_t0_ns(0);
                const std::int64_t t0 = monotonic_ns() +
                                        static_cast<std::int64_t>(std::llround(d_t0_s * 1e9)) -
                                        d_clock.air_time_ns(n);
                d_clock.set_t0_ns(std::max<std::int64_t>(t0, 0));
                d_rt_started = true;
            }
            if (d_realtime) {
                // deliver what we have before waiting for the next slot's instant
                if (produced > 0 && monotonic_ns() < d_clock.air_time_ns(n)) break;
                wait_until_due(n);
            } else {
                while (pmt::pmt_t m = delete_head_nowait(k_grant_port)) handle_grant(m);
            }
            publish_request(n + static_cast<std::uint64_t>(d_lead));
            build_slot(n, up != nullptr);
            d_started = true;
            ++d_next_slot;
            d_slot_pos = 0;

            const std::uint64_t off = nitems_written(0) + static_cast<std::uint64_t>(produced);
            const auto t = d_clock.tx_time(n);
            const pmt::pmt_t slot_tag = pmt::from_uint64(n);
            const pmt::pmt_t time_tag =
                pmt::make_tuple(pmt::from_uint64(t.first), pmt::from_double(t.second));
            const pmt::pmt_t owner_tag = pmt::from_long(d_uplink_user);
            for (std::size_t o = 0; o < output_items.size(); ++o) {
                add_item_tag(o, off, k_slot, slot_tag);
                add_item_tag(o, off, k_tx_time, time_tag);
                add_item_tag(o, off, k_uplink_user, owner_tag);
                if (!d_continuous || n == 0) add_item_tag(o, off, k_tx_sob, pmt::PMT_T);
            }
        }
        const int k = std::min(S - d_slot_pos, noutput_items - produced);
        std::memcpy(out + produced, d_slot_buf.data() + d_slot_pos, sizeof(gr_complex) * k);
        if (up) std::memcpy(up + produced, d_up_buf.data() + d_slot_pos, sizeof(gr_complex) * k);
        d_slot_pos += k;
        produced += k;
        if (d_slot_pos == S && !d_continuous)
            for (std::size_t o = 0; o < output_items.size(); ++o)
                add_item_tag(o, nitems_written(0) + static_cast<std::uint64_t>(produced - 1),
                             k_tx_eob, pmt::PMT_T);
    }
    return produced;
}

}  // namespace oppsched
}  // namespace gr
