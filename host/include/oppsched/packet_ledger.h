#pragma once
// The AP's account of every packet it took from a queue into a TB, until the packet's fate is
// known: delivered (every TB that carried part of it was ACKed) or dropped, with the cause.
// With the queues' own drop counts (aqm::drop_reason) it closes the AP's conservation law
//
//   offered = queue drops (by reason) + delivered + dropped here (by cause)
//             + still queued + in flight (taken into TBs, fate not known yet)
//
// which ap_core reports (counters "conservation.*", gauge "conservation.unaccounted", which
// must be 0) and writes into packets.csv: each packet's "enqueue" row is followed by exactly
// one "drop" (reason = cause) or "deliver" row, or by none while it is queued or in flight.
//
// Causes of a drop after dequeue (the TB's HARQ fate, held_tbs.h):
//   harq_max_tx    a TB carrying part of it failed its last transmission
//   harq_timeout   no feedback came for a TB carrying part of it (its fate at the client is
//                  unknown: the AP counts it lost, the client may have delivered it)
//   harq_flush     HARQ flushed such a TB (the user's processes were reset)
//   rejected       the segmenter refused it (empty, > 65535 bytes, or a compact-format IP
//                  length that disagrees): never sent
// A packet split across TBs is dropped once, with the cause of the first of its TBs lost.
// Cost: O(segments) per TB, O(1) memory per packet in flight.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oppsched/segmentation.h"

namespace oppsched::ap {

enum class loss_cause : std::uint8_t { harq_max_tx, harq_timeout, harq_flush, rejected };
constexpr std::size_t kLossCauseCount = 4;
std::string_view to_string(loss_cause c);  // the names above

// How HARQ finished with a TB.
enum class tb_fate : std::uint8_t { acked, dropped_max_tx, timed_out, flushed };

struct packet_fate {
    std::uint64_t packet_id = 0;
    std::uint32_t user = 0;
    std::uint32_t bytes = 0;
    bool delivered = false;  // else dropped with `cause`
    loss_cause cause = loss_cause::harq_max_tx;
};

struct packet_ledger_stats {
    std::uint64_t delivered = 0;
    std::array<std::uint64_t, kLossCauseCount> dropped{};  // by loss_cause
    std::uint64_t dropped_total() const;
};

class packet_ledger final {
  public:
    // A TB was built: `record` lists what it carries; `pulled` are the (id, bytes) of the
    // packets the segmenter took from the queue while building it (those missing from the
    // record were rejected, and are returned as dropped).
    std::vector<packet_fate> on_tb_built(
        const pdu::tb_record& record,
        const std::vector<std::pair<std::uint64_t, std::uint32_t>>& pulled);
    // HARQ is done with a TB: returns the packets whose fate this settles.
    std::vector<packet_fate> on_tb_done(const pdu::tb_record& record, tb_fate fate);

    // Packets taken into TBs whose fate is not known yet (not counting those already dropped
    // but with segments still in flight).
    std::size_t in_flight() const { return in_flight_; }
    const packet_ledger_stats& stats() const { return stats_; }

  private:
    struct entry {
        std::uint32_t user = 0;
        std::uint16_t bytes = 0;
        std::uint32_t outstanding = 0;  // TBs carrying part of it that HARQ still holds
        bool last_sent = false;         // its last byte is in a TB
        bool lost = false;
    };
    void settle(std::uint64_t id, entry& e, bool delivered, loss_cause cause,
                std::vector<packet_fate>& out);

    std::unordered_map<std::uint64_t, entry> packets_;
    std::size_t in_flight_ = 0;
    packet_ledger_stats stats_;
};

}  // namespace oppsched::ap
