#pragma once
// The delay line of the wired-path emulator (oppsched-delay): one direction of a wired
// link, modelled as a FIFO transmitter of rate R (optional) followed by a propagation
// delay d. It replaces netem on kernels that lack it (docs/wired.md, "Backends").
//
// Frame k arriving at t_k with L_k bytes on the wire finishes serialisation at
//     e_k = max(t_k, e_{k-1}) + 8 L_k / R          (e_k = t_k when there is no rate limit)
// and is released to the far side at
//     due_k = e_k + d.
// Invariants: t_k is made non-decreasing (a timestamp older than the previous arrival is
// taken as the previous arrival), hence e_k and due_k are non-decreasing: a direction never
// reorders its frames, and a frame is never released before t_k + d.
//
// Two limits, both in bytes, both tail drop:
//   limit_bytes: capacity of the transmit FIFO in front of the rate limiter (frames still
//     waiting or being serialised at the arrival instant), i.e. the router buffer of the
//     emulated link. Frames already "on the wire" (in propagation) do not count, unlike
//     netem's limit, so that a long delay does not need a BDP-sized buffer. Without a
//     rate limit nothing ever waits and this limit never drops.
//   hold_bytes: memory bound on everything held (waiting, serialising or propagating).
//
// Plain algorithm: no I/O, no clock (`now` is passed in, CLOCK_MONOTONIC in the daemon, a
// fake clock in the tests), no globals. Costs: enqueue and pop are O(1) amortised (two
// deques; the release order is the arrival order, so no heap is needed).
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::wired {

struct delay_line_params {
    // One-way propagation delay d, ns, in [0, 60 s].
    time_ns delay = 0;
    // Rate R of the emulated link in bit/s (on-wire bytes of each frame); 0 = unlimited.
    // When > 0, in [1e3, 1e12].
    double rate_bps = 0.0;
    // Transmit FIFO capacity, bytes; 0 = unlimited. See the header comment.
    std::size_t limit_bytes = 0;
    // Bound on all bytes held by the line; 0 = unlimited.
    std::size_t hold_bytes = 0;

    // Throws std::invalid_argument naming the field and the value
    // ("delay_line.rate_bps: -5 not 0 or in [1e3, 1e12]").
    void validate() const;
};

struct delay_line_stats {
    std::uint64_t enqueued = 0;  // frames accepted
    std::uint64_t enqueued_bytes = 0;
    std::uint64_t released = 0;  // frames handed back by pop_due()
    std::uint64_t released_bytes = 0;
    std::uint64_t dropped_limit = 0;     // tail drops because of limit_bytes
    std::uint64_t dropped_hold = 0;      // tail drops because of hold_bytes
    std::uint64_t clamped_arrivals = 0;  // arrivals older than the previous one (see above)
};

struct delayed_frame {
    std::vector<std::uint8_t> data;  // opaque to the line (the daemon stores header + frame)
    std::size_t wire_bytes = 0;      // bytes this frame occupies on the emulated link
    time_ns arrival = 0;             // t_k after clamping
    time_ns due = 0;                 // release time, e_k + d
};

enum class enqueue_result { accepted, dropped_limit, dropped_hold };

class delay_line final {
  public:
    explicit delay_line(const delay_line_params& params);

    // Frame arriving at `now`. `wire_bytes` is what the rate limiter and limit_bytes count
    // (for a GSO super-frame: the sum of its segments); hold_bytes counts data.size().
    enqueue_result enqueue(time_ns now, std::vector<std::uint8_t> data, std::size_t wire_bytes);
    enqueue_result enqueue(time_ns now, std::vector<std::uint8_t> data) {
        const std::size_t n = data.size();
        return enqueue(now, std::move(data), n);
    }

    // Release time of the head frame, if any. Non-decreasing across calls.
    std::optional<time_ns> next_due() const;

    // Removes and returns the head frame if its due time is <= now. Call until empty to
    // get every due frame, in arrival order.
    std::optional<delayed_frame> pop_due(time_ns now);

    // Bytes of frames still waiting or being serialised at `now` (what limit_bytes bounds).
    std::size_t backlog_bytes(time_ns now);
    std::size_t held_bytes() const { return held_bytes_; }
    std::size_t held_frames() const { return frames_.size(); }

    const delay_line_params& params() const { return params_; }
    const delay_line_stats& stats() const { return stats_; }

  private:
    struct in_service {
        time_ns end;  // e_k
        std::size_t wire_bytes;
    };
    void expire_serialised(time_ns now);

    delay_line_params params_;
    delay_line_stats stats_;
    std::deque<delayed_frame> frames_;    // held frames, arrival (= release) order
    std::deque<in_service> serialising_;  // frames with e_k > now at the last look
    std::size_t held_bytes_ = 0;
    std::size_t serialising_bytes_ = 0;
    time_ns last_arrival_ = 0;
    time_ns last_end_ = 0;  // e_{k-1}
    bool any_arrival_ = false;
    // Serialisation times are whole nanoseconds; the fraction dropped from each is carried
    // into the next, so that a long busy period at a fixed rate does not drift.
    double ns_per_byte_ = 0.0;
    double carry_ns_ = 0.0;
};

}  // namespace oppsched::wired
