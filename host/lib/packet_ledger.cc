// The AP's per-packet account from dequeue to fate: see oppsched/packet_ledger.h.
#include "oppsched/packet_ledger.h"

#include <algorithm>

namespace oppsched::ap {

std::string_view to_string(loss_cause c) {
    switch (c) {
        case loss_cause::harq_max_tx:
            return "harq_max_tx";
        case loss_cause::harq_timeout:
            return "harq_timeout";
        case loss_cause::harq_flush:
            return "harq_flush";
        case loss_cause::rejected:
            return "rejected";
    }
    return "unknown";
}

std::uint64_t packet_ledger_stats::dropped_total() const {
    std::uint64_t n = 0;
    for (const auto d : dropped) n += d;
    return n;
}

void packet_ledger::settle(std::uint64_t id, entry& e, bool delivered, loss_cause cause,
                           std::vector<packet_fate>& out) {
    out.push_back(packet_fate{id, e.user, e.bytes, delivered, cause});
    --in_flight_;
    if (delivered) {
        ++stats_.delivered;
    } else {
        e.lost = true;
        ++stats_.dropped[static_cast<std::size_t>(cause)];
    }
}

std::vector<packet_fate> packet_ledger::on_tb_built(
    const pdu::tb_record& record,
    const std::vector<std::pair<std::uint64_t, std::uint32_t>>& pulled) {
    std::vector<packet_fate> out;
    for (const pdu::segment_record& s : record.segments) {
        auto [it, fresh] = packets_.try_emplace(s.packet_id);
        entry& e = it->second;
        if (fresh) {
            e.user = record.user;
            e.bytes = s.packet_len;
            ++in_flight_;
        }
        ++e.outstanding;
        if (s.last()) e.last_sent = true;
    }
    for (const auto& [id, bytes] : pulled) {
        const bool carried = std::any_of(record.segments.begin(), record.segments.end(),
                                         [pid = id](const auto& s) { return s.packet_id == pid; });
        if (carried) continue;
        out.push_back(packet_fate{id, record.user, bytes, false, loss_cause::rejected});
        ++stats_.dropped[static_cast<std::size_t>(loss_cause::rejected)];
    }
    return out;
}

std::vector<packet_fate> packet_ledger::on_tb_done(const pdu::tb_record& record, tb_fate fate) {
    std::vector<packet_fate> out;
    const loss_cause cause = fate == tb_fate::dropped_max_tx ? loss_cause::harq_max_tx
                             : fate == tb_fate::timed_out    ? loss_cause::harq_timeout
                                                             : loss_cause::harq_flush;
    for (const pdu::segment_record& s : record.segments) {
        auto it = packets_.find(s.packet_id);
        if (it == packets_.end()) continue;  // a TB finished twice: nothing more to settle
        entry& e = it->second;
        if (e.outstanding > 0) --e.outstanding;
        if (!e.lost && fate != tb_fate::acked) {
            settle(it->first, e, false, cause, out);
        } else if (!e.lost && e.last_sent && e.outstanding == 0) {
            settle(it->first, e, true, cause, out);
        }
        if (e.last_sent && e.outstanding == 0) packets_.erase(it);
    }
    return out;
}

}  // namespace oppsched::ap
