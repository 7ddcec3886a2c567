#pragma once
// The client's uplink delay (docs/daemons.md "Uplink"): every message waits `delay` before it
// is pushed. Messages are encoded at enqueue time with the uplink socket's next sequence
// number, so a message dropped here (hold_bytes) is a gap the AP counts. O(1) per message
// over a wired::delay_line; the memory bound is hold_bytes of encoded frames.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "oppsched/common.h"
#include "oppsched/delay_line.h"
#include "oppsched/wire.h"

namespace oppsched::client {

struct uplink_delay_params {
    time_ns delay =
        1 * kNsPerMs;  // uplink_delay_ms (Andrew & Hanly, CLAMP, Table I: 1 ms), [0, 10 s]
    std::size_t hold_bytes = 4u << 20;  // memory bound on frames waiting; >= 70000
    void validate() const;  // throws std::invalid_argument naming the field and the value
};

struct uplink_delay_stats {
    std::uint64_t enqueued = 0;
    std::uint64_t released = 0;
    std::uint64_t dropped = 0;  // hold_bytes exceeded
    std::uint64_t encode_errors = 0;
};

class uplink_delay final {
  public:
    explicit uplink_delay(const uplink_delay_params& params = {});
    // Encodes `m` with the next sequence number and holds it until now + delay. false if
    // dropped (memory bound) or not encodable (counted).
    bool enqueue(time_ns now, const wire::message& m);
    // Frames due at `now`, in order.
    std::vector<std::vector<std::uint8_t>> pop_due(time_ns now);
    std::optional<time_ns> next_due() const { return line_.next_due(); }
    std::size_t held_frames() const { return line_.held_frames(); }
    std::uint32_t next_seq() const { return next_seq_; }
    const uplink_delay_stats& stats() const { return stats_; }

  private:
    uplink_delay_params params_;
    wired::delay_line line_;
    std::uint32_t next_seq_ = 0;
    uplink_delay_stats stats_;
};

}  // namespace oppsched::client
