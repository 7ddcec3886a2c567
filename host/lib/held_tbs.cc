// The AP's TBs in HARQ and what a HARQ event means for them: see oppsched/held_tbs.h.
#include "oppsched/held_tbs.h"

#include <algorithm>
#include <utility>

namespace oppsched::ap {

const held_tb& held_tbs::add(std::uint64_t id, held_tb tb) {
    return tbs_.emplace(id, std::move(tb)).first->second;
}

harq_event_effect held_tbs::on_event(const harq::harq_event& ev) {
    harq_event_effect e;
    auto it = tbs_.find(ev.tb.id);
    const bool held = it != tbs_.end();
    switch (ev.kind) {
        case harq::event_kind::acked:
        case harq::event_kind::nacked:
        case harq::event_kind::dropped_max_tx: {
            const bool ack = ev.kind == harq::event_kind::acked;
            if (held) {
                e.olla_observed = true;
                e.olla_success = ack;
                e.mcs = it->second.mcs;
            }
            e.outcome = ack ? "ack" : (ev.kind == harq::event_kind::nacked ? "nack" : "dropped");
            if (ack && held) e.acked_session = it->second.record.session;
            if (ev.kind == harq::event_kind::dropped_max_tx && held) {
                e.tb_dropped = true;
                for (const auto& s : it->second.record.segments)
                    if (std::none_of(e.dropped.begin(), e.dropped.end(),
                                     [&](const auto& d) { return d.packet_id == s.packet_id; }))
                        e.dropped.push_back(s);
            }
            if (ev.kind != harq::event_kind::nacked && held) {
                e.fate = ack ? tb_fate::acked : tb_fate::dropped_max_tx;
                e.record = std::move(it->second.record);
                tbs_.erase(it);
            }
            break;
        }
        case harq::event_kind::not_received:
            if (held) {
                e.olla_observed = true;
                e.olla_success = false;
                e.mcs = it->second.mcs;
            }
            e.outcome = "unheard";
            break;
        case harq::event_kind::timed_out:
        case harq::event_kind::flushed:
            e.timed_out = true;
            e.outcome = "timeout";
            if (held) {
                e.fate =
                    ev.kind == harq::event_kind::flushed ? tb_fate::flushed : tb_fate::timed_out;
                e.record = std::move(it->second.record);
                tbs_.erase(it);
            }
            break;
        case harq::event_kind::stale_feedback:
            e.stale = true;
            break;
    }
    return e;
}

}  // namespace oppsched::ap
