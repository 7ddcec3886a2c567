#pragma once
// The one naming of the MAC's statistics. for_each_field(stats, f) calls f(key, value) once
// per field, in a fixed order, with the value as std::uint64_t (counters), double (state)
// or bool (flags). The daemons' stats JSON (under their prefixes, e.g. "core.harq.acked"),
// the Python bindings' stats dicts and ap_core::counters()/gauges() are all written through
// these functions, so a key is spelled in one place and the three cannot drift apart.
// Each overload sits in its struct's namespace, so an unqualified call finds it by
// argument-dependent lookup from anywhere (the daemons add their own types the same way).
#include <cstdint>

#include "oppsched/aqm.h"
#include "oppsched/clamp.h"
#include "oppsched/harq.h"
#include "oppsched/segmentation.h"
#include "oppsched/tcpip.h"
#include "oppsched/wire.h"

namespace oppsched::harq {

template <class F>
void for_each_field(const harq_stats& s, F&& f) {
    f("tb_sent", s.tb_sent);
    f("tx_attempts", s.tx_attempts);
    f("acked", s.acked);
    f("nacks", s.nacks);
    f("failed_final", s.failed_final);
    f("timeouts", s.timeouts);
    f("flushed", s.flushed);
    f("stale_feedback", s.stale_feedback);
    f("not_received", s.not_received);
}

}  // namespace oppsched::harq

namespace oppsched::aqm {

// The scalar fields; the per-reason drops are aqm_stats::dropped, indexed by drop_reason and
// named by aqm::to_string(drop_reason).
template <class F>
void for_each_field(const aqm_stats& s, F&& f) {
    f("offered", s.offered);
    f("enqueued", s.enqueued);
    f("dequeued", s.dequeued);
    f("enqueued_bytes", s.enqueued_bytes);
    f("dequeued_bytes", s.dequeued_bytes);
    f("marked", s.marked);
    f("spared_handshakes", s.spared_handshakes);
    f("marked_not_ect", s.marked_not_ect);
    f("dropped_total", s.dropped_total());
    f("dropped_bytes", s.dropped_bytes);
    f("drop_probability", s.drop_probability);
    f("price", s.price);
    f("avg_queue", s.avg_queue);
    f("input_rate", s.input_rate);
    f("service_rate_bps", s.service_rate_bps);
    f("virtual_capacity_bps", s.virtual_capacity_bps);
    f("virtual_queue_bytes", s.virtual_queue_bytes);
    f("queue_delay_s", s.queue_delay_s);
    f("burst_allowance_s", s.burst_allowance_s);
    f("dropping", s.dropping);
    f("codel_count", std::uint64_t{s.codel_count});
    f("flows", static_cast<std::uint64_t>(s.flows));
    f("flows_evicted", s.flows_evicted);
    f("shared_flow_packets", s.shared_flow_packets);
}

}  // namespace oppsched::aqm

namespace oppsched::pdu {

template <class F>
void for_each_field(const segmenter_stats& s, F&& f) {
    f("tbs", s.tbs);
    f("packets_started", s.packets_started);
    f("packets_completed", s.packets_completed);
    f("packets_rejected", s.packets_rejected);
    f("packets_abandoned", s.packets_abandoned);
    f("data_bytes", s.data_bytes);
    f("overhead_bytes", s.overhead_bytes);
    f("padding_bytes", s.padding_bytes);
    f("prices_omitted", s.prices_omitted);
    f("sessions_sent", s.sessions_sent);
    f("sessions_omitted", s.sessions_omitted);
}

template <class F>
void for_each_field(const reassembler_stats& s, F&& f) {
    f("delivered", s.delivered);
    f("delivered_bytes", s.delivered_bytes);
    f("dropped_incomplete", s.dropped_incomplete);
    f("dropped_timeout", s.dropped_timeout);
    f("dropped_memory", s.dropped_memory);
    f("duplicates", s.duplicates);
    f("malformed", s.malformed);
    f("tbs_received", s.tbs_received);
    f("tbs_lost_reported", s.tbs_lost_reported);
    f("tbs_given_up", s.tbs_given_up);
    f("inconsistent", s.inconsistent);
    f("session_restarts", s.session_restarts);
    f("dropped_restart", s.dropped_restart);
    f("far_ahead", s.far_ahead);
    f("stale_session", s.stale_session);
    f("tbs_late", s.tbs_late);
    f("dropped_late", s.dropped_late);
    f("dropped_late_perhaps", s.dropped_late_perhaps);
}

}  // namespace oppsched::pdu

namespace oppsched::tcpip {

template <class F>
void for_each_field(const window_tracker_stats& s, F&& f) {
    f("syns", s.syns);
    f("syn_retransmits", s.syn_retransmits);
    f("syn_acks", s.syn_acks);
    f("scale_clamped", s.scale_clamped);
    f("rewritten", s.rewritten);
    f("unchanged_unknown", s.unchanged_unknown);
    f("unchanged_syn", s.unchanged_syn);
    f("unchanged_other", s.unchanged_other);
    f("right_edge_held", s.right_edge_held);
    f("window_clamped", s.window_clamped);
    f("evicted", s.evicted);
    f("expired", s.expired);
}

}  // namespace oppsched::tcpip

namespace oppsched::clamp {

template <class F>
void for_each_field(const client_agent_stats& s, F&& f) {
    f("packets", s.packets);
    f("slow_start_exits_delta_w", s.slow_start_exits_delta_w);
    f("slow_start_exits_dupack", s.slow_start_exits_dupack);
    f("slow_start_exits_threshold", s.slow_start_exits_threshold);
    f("clipped_high", s.clipped_high);
    f("clipped_low", s.clipped_low);
    f("floored", s.floored);
    f("os_limited", s.os_limited);
}

template <class F>
void for_each_field(const router_agent_stats& s, F&& f) {
    f("arrivals", s.arrivals);
    f("prices", s.prices);
    f("positive_prices", s.positive_prices);
}

}  // namespace oppsched::clamp

namespace oppsched::wire {

template <class F>
void for_each_field(const seq_tracker::seq_stats& s, F&& f) {
    f("received", s.received);
    f("lost", s.lost);
    f("out_of_order", s.out_of_order);
    f("restarts", s.restarts);
}

}  // namespace oppsched::wire
