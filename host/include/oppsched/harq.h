#pragma once
// HARQ entity of the AP (transmitter side): per user, N stop-and-wait processes.
//
// One process carries one transport block (TB) at a time: a new TB toggles the process's
// NDI (new-data indicator) and starts at rv_sequence[0]; every retransmission keeps the NDI
// and uses the next redundancy version, rv_sequence[k % len] at transmission k (0-based).
// The TB payload is opaque here: an id the MAC chose plus its size; when a TB ends the entity
// reports the id, so the MAC can release (ACK) or drop (failure) exactly the packets it
// carried.
//
// Timing is in slots (the PHY is the clock master; the daemon converts the uplink delay in
// ms to slots). A TB sent in slot s has its feedback due at s + feedback_delay_slots: the
// process cannot be reused, nor the TB retransmitted, before then, even if feedback came
// early. If no feedback has arrived by s + feedback_timeout_slots the process is freed and
// the TB reported as timed out (outcome unknown: the client may have decoded it), so a lost
// uplink message never leaks a process.
//
// Lifecycle of a process:
//   idle --new_transmission--> awaiting_feedback --ACK--> idle             (event acked)
//                                   |  ^         --NACK, n < max--> retx_pending (nacked)
//                                   |  +--retransmit-- retx_pending
//                                   |            --NACK, n == max--> idle  (dropped_max_tx)
//                                   |            --not received--> retx_pending (not_received)
//                                   |            --not received, unheard == max--> idle
//                                   |                                      (dropped_max_tx)
//                                   +--timeout--> idle                     (timed_out)
//   flush_user: any busy process --> idle                                  (flushed)
// A NACKed TB waits in retx_pending until the MAC retransmits it; the MAC offers pending
// retransmissions to the slot before new data (next_retransmission(), oldest NACK first).
//
// A transmission the receiver never got (its slot went out empty because the grant reached
// the PHY late, or the client did not decode the slot's header: the client heard a later
// slot without answering this one, see on_not_received) left the receiver's HARQ state as it
// was. It is undone: it does not count as a transmission (max_transmissions, RV), the NDI
// stays (still new to the receiver, so the next transmission is never mistaken for a
// retransmission of the previous TB), and the TB is sent again like a NACKed one. At most
// max_transmissions such transmissions per TB (counted in `unheard`), then it is dropped.
//
// Invariant (tested): stats.tb_sent == acked + failed_final + timeouts + flushed + in_flight().
//
// Feedback carries the NDI the client decoded; feedback whose NDI does not match the TB the
// process holds, or for a process that is not awaiting feedback (late, after a timeout,
// duplicate), is stale: counted and otherwise ignored.
//
// Costs: new_transmission/free_process O(P), retransmit/on_feedback O(1),
// next_retransmission and expire O(U·P) scans (1024 processes for 64 users x 16: ~1 us).
// No allocation after construction except in set_num_users and in the caller's vectors.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace oppsched::harq {

using slot_t = std::int64_t;

constexpr std::uint32_t kMaxProcesses = 16;  // the control header's process field
constexpr std::uint32_t kMaxTransmissions = 64;

struct harq_params {
    std::uint32_t num_users = 1;
    std::uint32_t num_processes = 8;  // per user, 1..16
    // Transmissions per TB including the first, 1..64. Andrew & Hanly, CLAMP, §V-D: n = 5 attempts
    // in the slow-fading scenario, n = 15 in the fast-fading one.
    std::uint32_t max_transmissions = 5;
    std::vector<std::uint8_t> rv_sequence = {0, 2, 3, 1};  // each 0..3, 1..8 entries
    slot_t feedback_delay_slots = 4;     // >= 1: feedback for slot s is due at s + delay
    slot_t feedback_timeout_slots = 16;  // > delay: no feedback by s + timeout frees the process
};

// The one place where HARQ configuration is checked. Throws std::invalid_argument naming the
// field and the value, e.g. "harq.max_transmissions: 0 not in [1, 64]".
void validate(const harq_params& cfg);

// Opaque transport block: the MAC's id and the payload size.
struct tb_ref {
    std::uint64_t id = 0;
    std::uint32_t bytes = 0;
    bool operator==(const tb_ref& o) const { return id == o.id && bytes == o.bytes; }
};

// What the PHY control header carries for one transmission.
struct tx_grant {
    std::uint32_t user = 0;
    std::uint8_t process = 0;
    bool ndi = false;
    std::uint8_t rv = 0;
    std::uint32_t transmission = 1;  // 1 = first transmission of this TB
    // Earlier transmissions of this TB the receiver never got (not in `transmission`); the
    // slots the TB took before this one are transmission - 1 + unheard.
    std::uint32_t unheard = 0;
    tb_ref tb;
    slot_t slot = 0;
    bool is_retransmission() const { return transmission > 1; }
};

enum class event_kind : std::uint8_t {
    acked,           // TB delivered: release its packets
    nacked,          // TB will be retransmitted (retx pending); nothing to do yet
    not_received,    // the receiver never got the transmission: sent again, NDI kept
    dropped_max_tx,  // NACK on the last allowed transmission: drop the TB's packets
    timed_out,       // no feedback by the timeout: outcome unknown, process freed
    flushed,         // flush_user(): the user left, TB abandoned
    stale_feedback,  // feedback that matched no TB awaiting it: ignored
};
const char* to_string(event_kind k);

struct harq_event {
    event_kind kind = event_kind::stale_feedback;
    std::uint32_t user = 0;
    std::uint8_t process = 0;
    tb_ref tb;                        // zero for stale_feedback
    std::uint32_t transmissions = 0;  // transmissions of this TB so far
    slot_t slot = 0;                  // when the event happened
};

struct harq_stats {
    std::uint64_t tb_sent = 0;      // new TBs
    std::uint64_t tx_attempts = 0;  // every transmission, first ones included (and unheard)
    std::uint64_t acked = 0;
    std::uint64_t nacks = 0;         // every NACK received (incl. the final one)
    std::uint64_t failed_final = 0;  // dropped after max_transmissions
    std::uint64_t timeouts = 0;
    std::uint64_t flushed = 0;
    std::uint64_t stale_feedback = 0;
    std::uint64_t not_received = 0;  // transmissions the receiver never got (undone)
};

enum class process_phase : std::uint8_t { idle, awaiting_feedback, retx_pending };

// Read-only view of one process (traces, tests).
struct process_view {
    process_phase phase = process_phase::idle;
    bool ndi = false;  // NDI of the current/last TB (false before any TB)
    std::uint32_t transmissions = 0;
    std::uint32_t unheard = 0;  // transmissions of this TB the receiver never got
    tb_ref tb;
    slot_t last_tx_slot = 0;
    slot_t ready_slot = 0;  // reusable (idle) / retransmittable (retx_pending) from
};

struct retx_ref {
    std::uint32_t user = 0;
    std::uint8_t process = 0;
    slot_t nack_slot = 0;  // when the NACK arrived (oldest first)
};

class harq_entity final {
  public:
    explicit harq_entity(harq_params cfg);

    const harq_params& config() const { return cfg_; }
    std::uint32_t num_users() const { return cfg_.num_users; }
    // Grows the user set (a client attached). Shrinking is refused: flush_user() first.
    void set_num_users(std::uint32_t n);

    // Lowest-numbered process of `user` that can take a new TB at slot `now`.
    std::optional<std::uint8_t> free_process(std::uint32_t user, slot_t now) const;

    // Starts a new TB on free_process(user, now): toggles NDI, rv = rv_sequence[0].
    // Throws std::invalid_argument if the user has no free process.
    tx_grant new_transmission(std::uint32_t user, tb_ref tb, slot_t now);

    // Oldest pending retransmission (by NACK slot, then user, then process) that may be sent
    // at `now`, over all users or for one user.
    std::optional<retx_ref> next_retransmission(slot_t now) const;
    std::optional<retx_ref> next_retransmission(std::uint32_t user, slot_t now) const;
    // All retransmissions that may be sent at `now`, oldest first (appended to `out`).
    void pending_retransmissions(slot_t now, std::vector<retx_ref>& out) const;

    // Retransmits the NACKed TB of (user, process): same NDI, next RV.
    // Throws std::invalid_argument if no retransmission is pending there at `now`.
    tx_grant retransmit(std::uint32_t user, std::uint8_t process, slot_t now);

    // ACK/NACK from the client for (user, process), with the NDI of the TB it refers to and,
    // if the uplink carries it, the slot of the transmission it answers. The 1-bit NDI alone
    // identifies the TB only if feedback never arrives later than timeout + delay after its
    // transmission (the earliest a process can carry the next-but-one TB); tx_slot removes
    // that limit. Returns acked, nacked, dropped_max_tx or stale_feedback.
    // Throws std::invalid_argument if user or process is out of range.
    harq_event on_feedback(std::uint32_t user, std::uint8_t process, bool ndi, bool ack, slot_t now,
                           std::optional<slot_t> tx_slot = std::nullopt);

    // The receiver never got the transmission of (user, process) sent in `tx_slot`: its slot
    // went out empty (the grant reached the PHY late) or the client did not decode the
    // slot's header. Either way the receiver's HARQ state for the process is unchanged, so
    // the transmission is undone (see the header comment): the TB is pending for
    // retransmission with the same NDI and RV (not_received), or dropped (dropped_max_tx)
    // once max_transmissions transmissions were not received. Returns stale_feedback (and
    // changes nothing) if the process is not awaiting feedback for `tx_slot`.
    // Throws std::invalid_argument if user or process is out of range.
    harq_event on_not_received(std::uint32_t user, std::uint8_t process, slot_t tx_slot,
                               slot_t now);

    // Frees processes whose feedback is overdue at `now`; appends one timed_out per TB.
    // Call once per slot (or more rarely: a timeout is then reported late, never lost).
    void expire(slot_t now, std::vector<harq_event>& out);

    // Abandons every TB of `user` (client left or reset); appends one flushed per TB.
    void flush_user(std::uint32_t user, slot_t now, std::vector<harq_event>& out);

    process_view process(std::uint32_t user, std::uint8_t process) const;
    // Processes busy (awaiting feedback or holding a TB for retransmission).
    std::size_t in_flight() const { return in_flight_; }
    std::size_t in_flight(std::uint32_t user) const;
    const harq_stats& stats() const { return stats_; }

  private:
    struct proc {
        process_phase phase = process_phase::idle;
        bool ndi = false;
        std::uint32_t transmissions = 0;
        std::uint32_t unheard = 0;
        bool redo = false;  // the next retransmit() repeats the undone transmission
        tb_ref tb;
        slot_t last_tx = 0;
        slot_t ready = 0;  // see process_view::ready_slot
        slot_t nack_slot = 0;
    };
    proc& at(std::uint32_t user, std::uint8_t process);
    const proc& at(std::uint32_t user, std::uint8_t process) const;
    void check_user(std::uint32_t user) const;
    tx_grant grant(std::uint32_t user, std::uint8_t process, const proc& p) const;
    void release(proc& p, slot_t ready);
    // After a failed attempt (NACK or not received): drop the TB when `attempts` reached
    // max_transmissions, else mark it for retransmission. Fills ev.kind.
    void retry_or_drop(proc& p, std::uint32_t attempts, event_kind retry_kind, slot_t now,
                       harq_event& ev);

    harq_params cfg_;
    std::vector<proc> procs_;  // user-major: procs_[user * P + process]
    std::size_t in_flight_ = 0;
    harq_stats stats_;
};

}  // namespace oppsched::harq
