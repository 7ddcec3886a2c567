// HARQ entity (see oppsched/harq.h for the state machine, timing rules and invariants).
#include "oppsched/harq.h"

#include <algorithm>
#include <string>

#include "oppsched/validation.h"

namespace oppsched::harq {
namespace {

constexpr std::uint32_t kMaxUsers = 65536;
constexpr std::size_t kMaxRvSequence = 8;

}  // namespace

const char* to_string(event_kind k) {
    switch (k) {
        case event_kind::acked:
            return "acked";
        case event_kind::nacked:
            return "nacked";
        case event_kind::not_received:
            return "not_received";
        case event_kind::dropped_max_tx:
            return "dropped_max_tx";
        case event_kind::timed_out:
            return "timed_out";
        case event_kind::flushed:
            return "flushed";
        case event_kind::stale_feedback:
            return "stale_feedback";
    }
    return "?";
}

void validate(const harq_params& cfg) {
    if (cfg.num_users > kMaxUsers) {
        throw_invalid("harq.num_users: " + std::to_string(cfg.num_users) + " > " +
                      std::to_string(kMaxUsers));
    }
    if (cfg.num_processes < 1 || cfg.num_processes > kMaxProcesses) {
        throw_invalid("harq.num_processes: " + std::to_string(cfg.num_processes) + " not in [1, " +
                      std::to_string(kMaxProcesses) + "]");
    }
    if (cfg.max_transmissions < 1 || cfg.max_transmissions > kMaxTransmissions) {
        throw_invalid("harq.max_transmissions: " + std::to_string(cfg.max_transmissions) +
                      " not in [1, " + std::to_string(kMaxTransmissions) + "]");
    }
    if (cfg.rv_sequence.empty() || cfg.rv_sequence.size() > kMaxRvSequence) {
        throw_invalid("harq.rv_sequence: " + std::to_string(cfg.rv_sequence.size()) +
                      " entries not in [1, " + std::to_string(kMaxRvSequence) + "]");
    }
    for (std::size_t i = 0; i < cfg.rv_sequence.size(); ++i) {
        if (cfg.rv_sequence[i] > 3) {
            throw_invalid("harq.rv_sequence[" + std::to_string(i) +
                          "]: " + std::to_string(cfg.rv_sequence[i]) + " not in [0, 3]");
        }
    }
    if (cfg.feedback_delay_slots < 1) {
        throw_invalid("harq.feedback_delay_slots: " + std::to_string(cfg.feedback_delay_slots) +
                      " not >= 1");
    }
    if (cfg.feedback_timeout_slots <= cfg.feedback_delay_slots) {
        throw_invalid("harq.feedback_timeout_slots: " + std::to_string(cfg.feedback_timeout_slots) +
                      " not > feedback_delay_slots " + std::to_string(cfg.feedback_delay_slots));
    }
}

harq_entity::harq_entity(harq_params cfg) : cfg_(std::move(cfg)) {
    validate(cfg_);
    procs_.resize(static_cast<std::size_t>(cfg_.num_users) * cfg_.num_processes);
}

void harq_entity::set_num_users(std::uint32_t n) {
    if (n < cfg_.num_users) {
        throw_invalid("harq.num_users: " + std::to_string(n) + " < current " +
                      std::to_string(cfg_.num_users) + " (users are only added)");
    }
    if (n > kMaxUsers) {
        throw_invalid("harq.num_users: " + std::to_string(n) + " > " + std::to_string(kMaxUsers));
    }
    cfg_.num_users = n;
    procs_.resize(static_cast<std::size_t>(n) * cfg_.num_processes);
}

void harq_entity::check_user(std::uint32_t user) const {
    if (user >= cfg_.num_users) {
        throw_invalid("harq.user: " + std::to_string(user) + " not in [0, " +
                      std::to_string(cfg_.num_users) + ")");
    }
}

harq_entity::proc& harq_entity::at(std::uint32_t user, std::uint8_t process) {
    return const_cast<proc&>(static_cast<const harq_entity&>(*this).at(user, process));
}

const harq_entity::proc& harq_entity::at(std::uint32_t user, std::uint8_t process) const {
    check_user(user);
    if (process >= cfg_.num_processes) {
        throw_invalid("harq.process: " + std::to_string(process) + " not in [0, " +
                      std::to_string(cfg_.num_processes) + ")");
    }
    return procs_[static_cast<std::size_t>(user) * cfg_.num_processes + process];
}

std::optional<std::uint8_t> harq_entity::free_process(std::uint32_t user, slot_t now) const {
    check_user(user);
    const proc* base = &procs_[static_cast<std::size_t>(user) * cfg_.num_processes];
    for (std::uint32_t k = 0; k < cfg_.num_processes; ++k) {
        if (base[k].phase == process_phase::idle && now >= base[k].ready) {
            return static_cast<std::uint8_t>(k);
        }
    }
    return std::nullopt;
}

tx_grant harq_entity::grant(std::uint32_t user, std::uint8_t process, const proc& p) const {
    tx_grant g;
    g.user = user;
    g.process = process;
    g.ndi = p.ndi;
    // Transmission k (1-based) uses rv_sequence[(k - 1) mod len]: 0, 2, 3, 1, 0, ... by default.
    g.rv = cfg_.rv_sequence[(p.transmissions - 1) % cfg_.rv_sequence.size()];
    g.transmission = p.transmissions;
    g.unheard = p.unheard;
    g.tb = p.tb;
    g.slot = p.last_tx;
    return g;
}

tx_grant harq_entity::new_transmission(std::uint32_t user, tb_ref tb, slot_t now) {
    const auto k = free_process(user, now);
    if (!k) {
        throw_invalid("harq.new_transmission: user " + std::to_string(user) +
                      " has no free process at slot " + std::to_string(now));
    }
    proc& p = at(user, *k);
    p.phase = process_phase::awaiting_feedback;
    p.ndi = !p.ndi;  // new data: toggle
    p.transmissions = 1;
    p.unheard = 0;
    p.redo = false;
    p.tb = tb;
    p.last_tx = now;
    p.ready = now + cfg_.feedback_delay_slots;
    ++in_flight_;
    ++stats_.tb_sent;
    ++stats_.tx_attempts;
    return grant(user, *k, p);
}

std::optional<retx_ref> harq_entity::next_retransmission(slot_t now) const {
    std::optional<retx_ref> best;
    for (std::uint32_t u = 0; u < cfg_.num_users; ++u) {
        if (auto r = next_retransmission(u, now); r && (!best || r->nack_slot < best->nack_slot)) {
            best = r;
        }
    }
    return best;
}

std::optional<retx_ref> harq_entity::next_retransmission(std::uint32_t user, slot_t now) const {
    check_user(user);
    std::optional<retx_ref> best;
    const proc* base = &procs_[static_cast<std::size_t>(user) * cfg_.num_processes];
    for (std::uint32_t k = 0; k < cfg_.num_processes; ++k) {
        const proc& p = base[k];
        if (p.phase != process_phase::retx_pending || now < p.ready) continue;
        if (!best || p.nack_slot < best->nack_slot) {
            best = retx_ref{user, static_cast<std::uint8_t>(k), p.nack_slot};
        }
    }
    return best;
}

void harq_entity::pending_retransmissions(slot_t now, std::vector<retx_ref>& out) const {
    const std::size_t first = out.size();
    for (std::uint32_t u = 0; u < cfg_.num_users; ++u) {
        for (std::uint32_t k = 0; k < cfg_.num_processes; ++k) {
            const proc& p = procs_[static_cast<std::size_t>(u) * cfg_.num_processes + k];
            if (p.phase == process_phase::retx_pending && now >= p.ready) {
                out.push_back(retx_ref{u, static_cast<std::uint8_t>(k), p.nack_slot});
            }
        }
    }
    std::stable_sort(
        out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
        [](const retx_ref& a, const retx_ref& b) { return a.nack_slot < b.nack_slot; });
}

tx_grant harq_entity::retransmit(std::uint32_t user, std::uint8_t process, slot_t now) {
    proc& p = at(user, process);
    if (p.phase != process_phase::retx_pending || now < p.ready) {
        throw_invalid("harq.retransmit: user " + std::to_string(user) + " process " +
                      std::to_string(process) + " has no retransmission due at slot " +
                      std::to_string(now));
    }
    p.phase = process_phase::awaiting_feedback;
    if (p.redo) {
        p.redo = false;  // the receiver never got the last one: same NDI, same RV again
    } else {
        ++p.transmissions;  // same NDI, next RV
    }
    p.last_tx = now;
    p.ready = now + cfg_.feedback_delay_slots;
    ++stats_.tx_attempts;
    return grant(user, process, p);
}

void harq_entity::release(proc& p, slot_t ready) {
    p.phase = process_phase::idle;
    p.ready = ready;
    --in_flight_;
}

harq_event harq_entity::on_feedback(std::uint32_t user, std::uint8_t process, bool ndi, bool ack,
                                    slot_t now, std::optional<slot_t> tx_slot) {
    proc& p = at(user, process);
    harq_event ev;
    ev.user = user;
    ev.process = process;
    ev.slot = now;
    if (p.phase != process_phase::awaiting_feedback || ndi != p.ndi ||
        (tx_slot && *tx_slot != p.last_tx)) {
        ++stats_.stale_feedback;
        ev.kind = event_kind::stale_feedback;
        return ev;
    }
    ev.tb = p.tb;
    ev.transmissions = p.transmissions;
    // Feedback may arrive before it is due (a faster uplink than configured); the process
    // still becomes usable only at last_tx + feedback_delay (p.ready).
    if (ack) {
        ++stats_.acked;
        ev.kind = event_kind::acked;
        release(p, p.ready);
        return ev;
    }
    ++stats_.nacks;
    // Andrew & Hanly, CLAMP, §V-B: "If n consecutive attempts to a given destination fail, then all
    // packets which would have been completed by that transmission are dropped."
    retry_or_drop(p, p.transmissions, event_kind::nacked, now, ev);
    return ev;
}

void harq_entity::retry_or_drop(proc& p, std::uint32_t attempts, event_kind retry_kind, slot_t now,
                                harq_event& ev) {
    if (attempts >= cfg_.max_transmissions) {
        ++stats_.failed_final;
        ev.kind = event_kind::dropped_max_tx;
        release(p, p.ready);
        return;
    }
    p.phase = process_phase::retx_pending;
    p.nack_slot = now;
    ev.kind = retry_kind;
}

harq_event harq_entity::on_not_received(std::uint32_t user, std::uint8_t process, slot_t tx_slot,
                                        slot_t now) {
    proc& p = at(user, process);
    harq_event ev;
    ev.user = user;
    ev.process = process;
    ev.slot = now;
    if (p.phase != process_phase::awaiting_feedback || tx_slot != p.last_tx) {
        ev.kind = event_kind::stale_feedback;
        return ev;
    }
    ++stats_.not_received;
    ++p.unheard;
    ev.tb = p.tb;
    ev.transmissions = p.transmissions;
    // Bounded like NACKs, so a client that never decodes the header cannot hold the
    // process (and, retransmissions going first, the slots) forever.
    retry_or_drop(p, p.unheard, event_kind::not_received, now, ev);
    if (ev.kind == event_kind::not_received) p.redo = true;
    return ev;
}

void harq_entity::expire(slot_t now, std::vector<harq_event>& out) {
    for (std::size_t i = 0; i < procs_.size(); ++i) {
        proc& p = procs_[i];
        if (p.phase != process_phase::awaiting_feedback ||
            now < p.last_tx + cfg_.feedback_timeout_slots) {
            continue;
        }
        ++stats_.timeouts;
        harq_event ev;
        ev.kind = event_kind::timed_out;
        ev.user = static_cast<std::uint32_t>(i / cfg_.num_processes);
        ev.process = static_cast<std::uint8_t>(i % cfg_.num_processes);
        ev.tb = p.tb;
        ev.transmissions = p.transmissions;
        ev.slot = now;
        out.push_back(ev);
        release(p, now);  // now >= last_tx + timeout > last_tx + delay
    }
}

void harq_entity::flush_user(std::uint32_t user, slot_t now, std::vector<harq_event>& out) {
    check_user(user);
    for (std::uint32_t k = 0; k < cfg_.num_processes; ++k) {
        proc& p = procs_[static_cast<std::size_t>(user) * cfg_.num_processes + k];
        if (p.phase == process_phase::idle) continue;
        ++stats_.flushed;
        harq_event ev;
        ev.kind = event_kind::flushed;
        ev.user = user;
        ev.process = static_cast<std::uint8_t>(k);
        ev.tb = p.tb;
        ev.transmissions = p.transmissions;
        ev.slot = now;
        out.push_back(ev);
        release(p, p.ready);
    }
}

process_view harq_entity::process(std::uint32_t user, std::uint8_t process) const {
    const proc& p = at(user, process);
    process_view v;
    v.phase = p.phase;
    v.ndi = p.ndi;
    v.transmissions = p.transmissions;
    v.unheard = p.unheard;
    v.tb = p.tb;
    v.last_tx_slot = p.last_tx;
    v.ready_slot = p.ready;
    return v;
}

std::size_t harq_entity::in_flight(std::uint32_t user) const {
    check_user(user);
    std::size_t n = 0;
    for (std::uint32_t k = 0; k < cfg_.num_processes; ++k) {
        n += procs_[static_cast<std::size_t>(user) * cfg_.num_processes + k].phase !=
             process_phase::idle;
    }
    return n;
}

}  // namespace oppsched::harq
