#pragma once
// A station's own uplink queue on a shared medium (medium.station_queue: client;
// docs/architecture.md, "Shared medium"): what the client daemon holds when the station,
// not the AP, queues its upstream packets, as an LTE UE or an 802.11 station does.
//
//   upstream IP packet --> on_packet: the station's buffer (buffer_packets, drop-tail)
//   wire::uplink_grant --> on_grant: the TB for the granted slot -> wire::uplink_tb
//                          NDI toggled against the process's last: a new TB of exactly
//                          tb_bytes from the buffer (its pdu::segmenter, the same MAC PDU and
//                          segmentation as the downlink; a packet may continue in the next
//                          TB); the same NDI: the process's TB again, unchanged (the AP did
//                          not decode it: HARQ). The AP acknowledges a TB by toggling the NDI
//                          of the process's next grant, and gives a TB up the same way.
//   buffer status      every uplink_tb carries the buffer after its TB was built (LTE's
//                      BSR in a MAC control element); take_status reports it by itself
//                      (wire::buffer_status) when data arrives in an empty buffer that the AP
//                      last heard was empty (LTE's regular BSR, 36.321 5.4.5), and again
//                      every status_period while the buffer holds data (its periodic BSR).
//
// "Buffered" counts what waits in the buffer and the unsent rest of a packet the last TB
// began (not TBs awaiting a retransmission, which the AP knows of). Not thread-safe.
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "oppsched/common.h"
#include "oppsched/integrity.h"
#include "oppsched/packet.h"
#include "oppsched/pdu.h"
#include "oppsched/segmentation.h"
#include "oppsched/wire.h"

namespace oppsched::client {

struct station_params {
    std::uint16_t user = 0;
    std::uint32_t buffer_packets = 100;  // [1, 100000] (Wu, Gong & Williamson, §4: 100)
    std::uint32_t harq_processes = 8;    // [1, 16]
    pdu::pdu_format format = pdu::pdu_format::standard;
    time_ns status_period = 10 * kNsPerMs;  // periodic buffer status while backlogged, > 0
    // The run's uplink tag key (integrity.h: run_key(..., uplink)): with it, every new TB is a
    // MAC PDU of tb_bytes - integrity::kTagBytes bytes followed by its tag, which the AP's
    // medium checks. nullopt: TBs carry no tag.
    std::optional<integrity::tag_key> integrity_key;
    // Throws std::invalid_argument naming the key (medium.*) and the value.
    void validate() const;
};

struct station_stats {
    std::uint64_t packets_in = 0, bytes_in = 0;
    std::uint64_t dropped_full = 0;  // the buffer was full
    std::uint64_t grants = 0;
    std::uint64_t tbs_new = 0, tbs_repeated = 0;
    std::uint64_t grants_rejected = 0;  // wrong user, process out of range, size unusable
    std::uint64_t status_reports = 0;   // buffer_status messages (not those in uplink_tb)
};

class station final {
  public:
    explicit station(station_params p);

    // An upstream IP packet: buffered, or dropped when the buffer is full (false).
    bool on_packet(time_ns now, std::vector<std::uint8_t> packet);
    // The station's transmission in the granted slot; nullopt (counted) for a grant that is
    // not this station's, names a process it does not have, or a size no PDU fits.
    std::optional<wire::uplink_tb> on_grant(time_ns now, const wire::uplink_grant& g);
    // A buffer status report due now, if any (see above).
    std::optional<wire::buffer_status> take_status(time_ns now);
    // When take_status next has something to say (nullopt: not before a packet arrives).
    std::optional<time_ns> next_status_due() const;

    std::uint64_t buffered_bytes() const;
    std::size_t buffered_packets() const { return queue_.size(); }
    const station_stats& stats() const { return stats_; }
    const station_params& params() const { return p_; }

  private:
    struct process {
        bool used = false;
        std::uint8_t ndi = 0;
        std::vector<std::uint8_t> tb;
    };
    station_params p_;
    pdu::segmenter seg_;
    std::deque<ip_packet> queue_;
    std::uint64_t queued_bytes_ = 0;
    std::vector<process> procs_;
    std::uint64_t next_id_ = 1;
    std::uint64_t last_grant_slot_ = 0;
    bool ap_thinks_empty_ = true;         // the last status the AP got said 0 bytes
    std::optional<time_ns> last_report_;  // when the AP last got our buffer status
    station_stats stats_;
};

}  // namespace oppsched::client
