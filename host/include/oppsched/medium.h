#pragma once
// The shared medium of oppsched-apd (docs/architecture.md, "Shared medium"): which slot of the
// one slotted air interface (TDD) is downlink (the AP sends, ap_core picks the user) and which
// is uplink from station u, and the stations' uplink transmissions themselves.
//
//   medium.mode none       every slot is downlink; upstream packets reach the servers as soon
//                          as the side channel delivers them (the behaviour without a medium).
//   medium.mode node_fair  equal slot shares between the AP (when a downlink queue holds data)
//                          and every station with uplink backlog, as 802.11 DCF gives them on
//                          average (Wu, Gong & Williamson, 802.11 fairness, §3: the AP gets
//                          1/(N+1) of the transmission opportunities). Deterministic round
//                          robin over the contenders of each slot (DCF's shares, not its
//                          randomness): sched.h's rr over the stations and the AP (the
//                          contender served least recently; at the start station 0 first,
//                          the AP last).
//   medium.mode scheduled  proportional fair over the downlink queues and the uplink queues
//                          together: sched.h's pf over the 2N links, link l's metric R_l / T_l,
//                          T_l the EMA (pf_alpha) of its service, initialised at R_l / 2N and
//                          ties to the least recently served link (sched.h's reasons). A
//                          downlink winner gives the slot to the AP, whose
//                          configured scheduler then picks the user (with PF usually the
//                          same one; HARQ retransmissions first).
//
// Where the uplink queue lives: by default (station_queue ap) the AP daemon holds each
// station's uplink queue on the station's behalf (station_buffer_packets, drop-tail); with
// station_queue client the client daemon does (station.h) and this class keeps only the
// stations' reported backlogs, their grants and HARQ processes (see station_queue below). The
// client hands its upstream packets over on the side channel (uplink_packet, after the client's
// uplink delay); they leave that queue only in uplink slots granted to the station. What differs
// from a real station: the AP knows the backlog exactly and at once (no buffer status report, no
// grant in the downlink).
//
// An uplink slot: the station's TB is built by its own pdu::segmenter (the same MAC PDU and
// segmentation as the downlink) at the TB size of the MCS link adaptation chooses (the same
// mcs_table and OLLA rules) from the uplink CQI the AP measured when it granted the slot:
// the SNR of the station's uplink channel (its own Jakes fading process, seeded apart from
// the downlink's) at the start of slot `slot - lead_slots` (the AP measures the uplink on
// every slot, as from LTE sounding references). The TB is received when the SNR at the start
// of the granted slot meets the MCS threshold (the abstract PHY's threshold model). HARQ: one
// stop-and-wait process per station; a failed TB goes again, unchanged, in the station's next
// uplink slot, at most max_transmissions times, then the AP's reassembler gives it up. The
// decoded packets are released toward the servers at the end of the slot's air time.
// Feedback for uplink slots stays at the AP (it decodes them itself); downlink feedback stays
// on the side channel. Not thread-safe.
//
// Two ways an uplink TB is received (medium_params::decode):
//   uplink_decode::model  (the abstract PHY) the SNR threshold above; one stop-and-wait
//                         HARQ process per station.
//   uplink_decode::phy    (the sample PHY) the TB goes to the PHY in the slot's grant
//                         (take_uplink_grant: wire::slot_grant with uplink set), the PHY
//                         carries it through the station's transmitter, the uplink channel
//                         and the AP's receiver, and reports every slot the AP's receiver
//                         for station u heard (on_uplink_rx: wire::rx_indication). Those
//                         reports give the uplink CQI (the SNR the AP measured, from the
//                         station's sounding in every slot) and the decode result: CRC ok ->
//                         ACK and the decoded bytes go to the reassembler; CRC failed, the
//                         header not addressed to the station, or a later slot heard first
//                         -> NACK. harq_processes stop-and-wait processes per station (the
//                         result of slot n arrives a few slots after the grant), NDI toggled
//                         per new TB, rv_sequence 0, 2, 3, 1 (harq.h); the AP's receiver
//                         combines the transmissions of a TB. No report for
//                         feedback_timeout_slots: a NACK.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "oppsched/common.h"
#include "oppsched/integrity.h"
#include "oppsched/lead_slots.h"
#include "oppsched/linkadapt.h"
#include "oppsched/pdu.h"
#include "oppsched/wire.h"

namespace oppsched::ap {

enum class medium_mode { none, scheduled, node_fair };
enum class uplink_decode { model, phy };
// Where a station's uplink queue lives (medium.station_queue).
//   ap      the apd holds it on the station's behalf (the AP knows each backlog exactly);
//   client  the client daemon holds it (client::station): the AP learns the backlog from
//           the stations' buffer status reports, grants uplink slots on the downlink control
//           channel (wire::uplink_grant, lead_slots before the slot), and the station sends
//           its TB (wire::uplink_tb), built from its own buffer, which must reach the AP by
//           the slot's air time. HARQ: harq_processes stop-and-wait processes per station;
//           the grant's NDI, toggled or not, tells the station to send a new TB or the
//           process's TB again. uplink_decode::model: the model decides at the TB's
//           arrival; phy: the TB, once it came in time, is the PHY's uplink grant for the
//           slot (take_uplink_grant after on_uplink_tb) and the AP's receiver's report
//           decides (on_uplink_rx), as with the apd's own queue.
enum class station_queue { ap, client };
const char* to_string(medium_mode m);
// "none", "scheduled", "node_fair"; nullopt for anything else.
std::optional<medium_mode> medium_mode_from(std::string_view name);

struct medium_params {
    medium_mode mode = medium_mode::none;
    // Each station's uplink buffer, packets (Wu, Gong & Williamson, §4: the laptops'
    // "maximum queue size was 100 packets"). [1, 100000]
    std::uint32_t station_buffer_packets = 100;
    // The uplink channels: Jakes (Andrew & Hanly, CLAMP, §V-B) with these statistics, one
    // process per station seeded from (seed, station).
    double uplink_mean_snr_db = 20.0;  // [-50, 100]
    double uplink_doppler_hz = 0.6;    // [0, 10000]
    std::uint64_t seed = 1;
    std::uint32_t max_transmissions = 5;           // uplink HARQ, [1, 64]
    double pf_alpha = 0.01;                        // scheduled: EMA weight per slot, (0, 1]
    std::uint32_t lead_slots = kDefaultLeadSlots;  // the grant's lead: the CQI's age at air time
    bool olla_enabled = true;
    linkadapt::olla_params olla{};
    uplink_decode decode = uplink_decode::model;  // medium.uplink_decode: model | phy
    std::uint32_t harq_processes = 8;             // phy: per station, [1, 16]
    std::uint32_t feedback_timeout_slots = 100;   // phy: no report this long = NACK, [1, 100000]
    station_queue queue = station_queue::ap;      // medium.station_queue
    // The run's uplink tag key (integrity.h: run_key(..., uplink); the apd derives it with the
    // downlink one). With it every uplink TB is a MAC PDU of tb_bytes - 8 bytes and its
    // SipHash-2-4 tag: the TBs the medium builds on a station's behalf are tagged, and every
    // TB received (the AP's receiver's decoded bytes, a station's uplink_tb) is checked before
    // its PDU is parsed. A wrong tag (forged, or recorded in another run) is a NACK, counted
    // (up.<station>.integrity_failed, outcome "integrity"), and nothing of it is delivered.
    // The caller keeps tb_bytes_of_mcs at 0 for TBs under min usable + 8 bytes (ap_core does).
    std::optional<integrity::tag_key> integrity_key;
    // Throws std::invalid_argument naming the config key (medium.*) and the value.
    void validate() const;
};

enum class slot_direction { down, up };

// One row of medium.csv (mode != none): every slot the AP answers.
struct medium_row {
    std::uint64_t slot = 0;
    time_ns t_ns = 0;
    slot_direction direction = slot_direction::down;
    int station = -1;              // up: the station; down: -1
    std::uint32_t contenders = 0;  // the AP (if backlogged) + stations with backlog
    int mcs = -1;                  // up only
    std::uint32_t tb_bytes = 0;    // up only
    int retx = 0;                  // up only: earlier transmissions of this TB
    // up: "ack", "nack", "dropped"; phy: also "missed" (the AP's receiver did not hear the
    // station's header: a NACK) and "timeout" (no report: a NACK); with the integrity key also
    // "integrity" (decoded, its tag wrong: a NACK); down: ""
    const char* outcome = "";
    const char* decoded_by = "";  // up: "model" (SNR threshold) or "phy" (the receiver)
    int harq_pid = -1;            // up, phy: the station's HARQ process
    double cqi_db = 0.0;          // up: the uplink CQI the MCS came from
    double snr_db = 0.0;  // up: the SNR at the start of the slot (phy: the AP's measurement)
    std::vector<std::uint32_t> queue;  // packets in each station's uplink queue
};

struct medium_station_stats {
    std::uint64_t packets_in = 0, bytes_in = 0;
    std::uint64_t dropped_full = 0;  // the station buffer was full
    std::uint64_t delivered = 0, delivered_bytes = 0;
    std::uint64_t slots = 0, tbs_ok = 0, tbs_failed = 0, tbs_dropped = 0;
    std::uint64_t rx_reports = 0;        // phy: reports of the AP's receiver for this station
    std::uint64_t missed = 0;            // phy: transmissions the receiver did not hear
    std::uint64_t timeouts = 0;          // phy: transmissions with no report
    std::uint64_t integrity_failed = 0;  // decoded (CRC ok) but the tag is wrong: a NACK
    // client: the station's messages
    std::uint64_t grants = 0;          // uplink grants sent to the station
    std::uint64_t tbs_late = 0;        // its TB came after the slot's air time (or never)
    std::uint64_t tbs_unexpected = 0;  // a TB for no grant outstanding (dropped)
    std::uint64_t status_reports = 0;  // buffer status (alone or with a TB)
    std::uint64_t reported_bytes = 0;  // the last status: bytes buffered at the station
};

struct medium_stats {
    std::uint64_t slots = 0, slots_down = 0, slots_up = 0;
    std::uint64_t slots_idle = 0;  // nobody contended (the slot goes to the AP anyway)
};

class medium final {
  public:
    // `tb_bytes_of_mcs[m]`: the TB size of MCS m (0: unusable), as ap_core computes it.
    medium(medium_params params, std::vector<std::string> station_names, linkadapt::mcs_table table,
           std::vector<std::uint32_t> tb_bytes_of_mcs, pdu::pdu_format format, double slot_s);
    ~medium();
    medium(const medium&) = delete;
    medium& operator=(const medium&) = delete;

    medium_mode mode() const;

    // An upstream IP packet of `station` (side channel). Queued, or dropped when the
    // station's buffer is full (returns false). Only for mode != none.
    bool on_uplink_packet(time_ns now, std::uint32_t station, std::vector<std::uint8_t> bytes);

    // Who gets slot `slot` (air time `air_time_ns`). down_backlogged[u]: downlink queue of
    // user u holds data; down_rate_bps[u]: its rate now (scheduled only). An uplink slot's
    // transmission is carried out here (its packets wait in take_received until the end of
    // the slot). Call once per fresh slot, in increasing slot order.
    slot_direction on_slot(std::uint64_t slot, time_ns air_time_ns,
                           const std::vector<bool>& down_backlogged,
                           const std::vector<double>& down_rate_bps);

    // phy: the uplink slot on_slot just gave a station (wire::slot_grant with uplink set, the
    // station's TB, MCS, HARQ process, NDI, RV), once; nullopt after a downlink slot. With
    // station_queue client it comes after on_uplink_tb instead (the station's TB in time).
    std::optional<wire::slot_grant> take_uplink_grant();
    // client: the uplink grant on_slot just gave a station, to be sent to it; nullopt after
    // a downlink slot.
    std::optional<wire::uplink_grant> take_station_grant();
    // client: a station's TB for a granted slot, received at `now` (the PHY's clock). Too
    // late for the slot's air time: a NACK (tbs_late). Returns false (and ignores it) for a
    // TB no grant is waiting for, or when the station queue is not the client's.
    bool on_uplink_tb(time_ns now, std::uint32_t station, const wire::uplink_tb& tb);
    // client: a station's buffer status report.
    bool on_buffer_status(time_ns now, std::uint32_t station, const wire::buffer_status& bs);
    // phy: one report of the AP's receiver for `station` (every slot it heard). Returns false
    // (and ignores it) when the station is unknown or the mode is not phy.
    bool on_uplink_rx(time_ns now, std::uint32_t station, const wire::rx_indication& rx);

    // Packets received in uplink slots whose air time ended by `now`, in order.
    std::vector<std::vector<std::uint8_t>> take_received(time_ns now);
    // When the next received packet is due (nullopt: none waiting).
    std::optional<time_ns> next_release() const;

    std::vector<medium_row> take_rows();
    std::size_t stations() const;
    std::size_t queued_packets(std::uint32_t station) const;
    bool uplink_backlogged(std::uint32_t station) const;
    const medium_stats& stats() const;
    const medium_station_stats& station_stats(std::uint32_t station) const;
    std::vector<std::pair<std::string, std::uint64_t>> counters() const;
    std::vector<std::pair<std::string, double>> gauges() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace oppsched::ap
