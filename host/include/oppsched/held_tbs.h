#pragma once
// The TBs the AP holds while HARQ holds them (for retransmission, OLLA and drops), and what
// each HARQ event means for them, decided in one place:
//   acked, nacked         the row's outcome (ack, nack), an OLLA observation at the TB's MCS;
//                         an acked TB is forgotten, a NACKed one waits for its retransmission
//   dropped_max_tx        outcome "dropped", an OLLA failure, and the packets the TB carried
//                         (each once, in order) are dropped (Andrew & Hanly, CLAMP, §V-B:
//                         "all packets which would have been completed by that transmission
//                         are dropped"); the TB is forgotten
//   not_received          outcome "unheard" and an OLLA failure: the client never got the TB
//                         (slot empty on air, or header lost), HARQ sends it again with the
//                         same NDI; the measured link curves behind the MCS table count missed
//                         slots and header errors as TB errors too (docs/architecture.md)
//   timed_out, flushed    outcome "timeout"; the TB is forgotten
//   stale_feedback        nothing but the count
// O(1) per event, O(segments) for a drop.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "oppsched/harq.h"
#include "oppsched/packet_ledger.h"
#include "oppsched/segmentation.h"

namespace oppsched::ap {

struct held_tb {
    std::uint32_t user = 0;
    int mcs = 0;
    std::vector<std::uint8_t> bytes;  // the MAC PDU as sent
    pdu::tb_record record;            // what it carries
};

struct harq_event_effect {
    const char* outcome = nullptr;  // slots.csv outcome of the transmission's row; nullptr: none
    bool olla_observed = false;     // OLLA observes (olla_success, at mcs)
    bool olla_success = false;
    int mcs = -1;
    bool tb_dropped = false;                   // dropped after max transmissions
    std::vector<pdu::segment_record> dropped;  // one segment per packet it carried
    bool timed_out = false;                    // no feedback in time, or flushed
    bool stale = false;                        // feedback for a transmission HARQ no longer holds
    bool acked_session = false;  // an ACKed TB whose PDU carried the session trailer (pdu.h)
    // HARQ is done with a held TB (acked, dropped, timed out, flushed): how, and its record
    // (moved out of the TB, which is forgotten), for the packet ledger (packet_ledger.h).
    std::optional<tb_fate> fate;
    pdu::tb_record record;
};

class held_tbs final {
  public:
    // Holds `tb` under HARQ's TB id; returns it as stored.
    const held_tb& add(std::uint64_t id, held_tb tb);
    // The TB HARQ retransmits (it is held until HARQ is done with it).
    const held_tb& at(std::uint64_t id) const { return tbs_.at(id); }
    std::size_t size() const { return tbs_.size(); }

    harq_event_effect on_event(const harq::harq_event& ev);

  private:
    std::unordered_map<std::uint64_t, held_tb> tbs_;
};

}  // namespace oppsched::ap
