#pragma once
// The MAC's unit of queueing: an IP packet and what the AP knows about it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "oppsched/common.h"

namespace oppsched {

// A downlink (or uplink) IP packet as it sits in a queue: the real bytes plus metadata.
struct ip_packet {
    std::vector<std::uint8_t> data;  // the IPv4 or IPv6 packet, as on the wire
    std::uint32_t user = 0;          // destination user (index of its queue)
    std::uint64_t id = 0;            // unique per packet within a run (traces)
    time_ns arrival = 0;             // when it reached the AP queue
    bool high_priority = false;      // SPM-AF priority mark (Wu, Gong & Williamson, §5)
    std::size_t size() const { return data.size(); }
};

}  // namespace oppsched
