#pragma once
// The AP MAC of oppsched-apd (docs/daemons.md), without any I/O: a slot-clocked class the
// daemon feeds with downlink IP packets (from its TUN), slot_requests (from the PHY) and CQI /
// HARQ feedback (from the clients), and that answers every slot_request with a slot_grant.
//
//   downlink packet --packet_classifier: destination address--> user u (unknown: dropped)
//       --> CLAMP router_agent of u's queue: on_arrival(now, backlog before the packet)
//       --> queue_set/AQM (one queue per user, or one shared FIFO)
//   slot_request(n)
//       --> HARQ: timeouts; a pending retransmission (oldest NACK first) takes the slot
//       --> else the scheduler ranks the users that can be served (backlogged, a free HARQ
//           process, a usable MCS) at the rate their latest CQI gives through link adaptation
//           (mcs_table + OLLA; or eq. 18 with the backoff margin m in link_mode::paper),
//           the winner's TB is built by its Segmenter at the TB size of
//           the MCS, stamped with the CLAMP price of its queue, registered with HARQ
//       --> slot_grant(n) (empty when nobody can be served)
//   cqi_report      --> the user's latest SNR (the CQI the MAC uses is the SNR in dB); TBs
//                      of that user sent in that slot or before without feedback: unheard
//   harq_feedback   --> HARQ (by process and the slot of the transmission) --> OLLA, trace
//                      outcome; a TB dropped after max transmissions drops exactly the
//                      packets its segmentation record says it carried.
//
// Choices (where the design leaves them open), and why:
//  - Slot clock (slot_clock.h). HARQ and the scheduler run on an internal, monotonic slot
//    count that continues at last + 1 when the PHY restarts (the daemon calls
//    on_phy_restart() when the requests' wire sequence restarts at 0); TBs in flight then
//    time out.
//  - Feedback time. "now" for HARQ feedback is the newest slot requested. A TB sent in slot s
//    is answered after it was on air (s), plus the uplink delay, and is acted on in the next
//    grant, at the earliest slot s + lead_slots + 1 + uplink slots; feedback_delay_slots
//    must not exceed that or processes idle. Default lead_slots + 2 (1 ms uplink < 1 slot).
//  - Requests. A repeated request gets its cached grant again or an empty one
//    (slot_clock.h); both are counted, neither is traced. A jump forward counts the skipped
//    slots.
//  - No CQI yet: the lowest MCS (the user can be served before its first report, at the
//    most robust rate). A CQI below the lowest threshold: rate 0 (Srinivasan & Baras, §III, the
//    user "requests zero rate"; channel-aware schedulers skip it, round robin does not, but an MCS
//    must exist to send: such a user is not eligible). OLLA's offset lowers the MCS but never below
//    the lowest one when the report itself meets it: a backoff past the lowest MCS cannot make a TB
//    more robust, it would only leave the slot empty (with a CQI older than the coherence time, as
//    at 60 Hz with 3 ms slots, most slots).
//  - Unheard transmissions. A cqi_report for slot c from a user with a TB sent in a slot
//    <= c that is still awaiting feedback means the client never got that TB (clients send
//    a slot's feedback before its CQI, on one socket): the slot went out empty (its grant
//    reached the PHY late; the PHY does not tell the apd) or the header was lost. HARQ
//    undoes the transmission (harq.h on_not_received: same NDI, same RV, not counted in
//    max_transmissions, at most max_transmissions of them) and it goes again like a NACKed
//    one; the row's outcome is "unheard", OLLA counts it as a failure (the link curves
//    behind the measured tables count missed slots and header errors as TB errors). A
//    retransmission's `retx` counts every earlier slot of the TB, unheard ones included.
//  - Unusable MCS: a TB must hold the PDU's overhead and one byte of data
//    (pdu::min_usable_tb_bytes): 29 bytes in the standard format (header, CRC, one segment
//    header), so that EV-DO below 153.6 kb/s at 1.667 ms counts as rate 0; 5 bytes in the
//    compact format (`pdu_format`), where every rate of Srinivasan & Baras, Table I carries
//    data (38.4 kb/s: 8-byte TBs, 4 bytes of data). TBs are capped at 65535 bytes (pdu.h).
//  - CLAMP mu_c: one clamp::mu_c_estimator per queue (clamp.h), fed as mu_c_mode says (the
//    queue's own service by default). Until it is known, TBs carry
//    no price (PRICE flag clear); it is floored at mu_floor_bps so a starved queue gets a
//    large, finite price. In shared mode the one queue's mu_c is the whole cell's.
//  - HARQ timeouts (no feedback and no later CQI from the client either): the trace says
//    "timeout"; the packets are neither dropped nor resent (the client may have them). OLLA
//    is not updated.
//  - Shared FIFO: only the user owning the head-of-line packet (or one finishing a packet
//    split across TBs) is eligible; per-user queue limits do not apply (one queue).
//
// Cost per slot: O(U) for the scheduler inputs, O(U * P) for the HARQ scans, one copy of the
// TB bytes. Not thread-safe.
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oppsched/aqm.h"
#include "oppsched/clamp.h"
#include "oppsched/clamp_link.h"
#include "oppsched/common.h"
#include "oppsched/harq.h"
#include "oppsched/integrity.h"
#include "oppsched/lead_slots.h"
#include "oppsched/linkadapt.h"
#include "oppsched/queue.h"
#include "oppsched/sched.h"
#include "oppsched/segmentation.h"
#include "oppsched/slot_trace.h"
#include "oppsched/wire.h"

namespace oppsched::ap {

// Andrew & Hanly's eq. 18 (CLAMP's Shannon rule rate = min(W0 log2(1 + N), C_max)) quantised, the
// same table the abstract PHY builds for `mcs_table: shannon` (docs/daemons.md, "Abstract PHY
// configuration"): rate_k = k C_max / levels (k = 1..levels), min_snr_db_k =
// 10 log10(2^(rate_k / W0) - 1). With link_mode::table the paper's adaptive margin m is OLLA's
// offset (10 log10(1 - m) dB); link_mode::paper uses eq. 18 unquantised with m itself.
struct shannon_table_params {
    double w0_hz = 4.3e6;       // W0 (Andrew & Hanly, CLAMP, §V-D; §V-J's low-rate case: 620e3)
    double cmax_bps = 10e6;     // C_max (§V-J: 1.44e6)
    std::uint32_t levels = 32;  // [1, 255]
};
linkadapt::mcs_table shannon_table(const shannon_table_params& p = {});

// The names mcs_table_by_name knows: "evdo", "ofdm_provisional", "shannon".
const std::vector<std::string>& mcs_table_names();

// The tables by name: "evdo", "ofdm_provisional" (with `num`), "shannon" (eq. 18, with
// `clamp`). nullopt for any other name (the daemon then reads it as a CSV path).
std::optional<linkadapt::mcs_table> mcs_table_by_name(const std::string& name,
                                                      const linkadapt::ofdm_numerology& num = {},
                                                      const shannon_table_params& clamp = {});

struct ap_user_params {
    std::string name;                                // trace column names: cqi.<name>, ...
    std::vector<std::string> addresses;              // IPv4/IPv6 destination addresses of this user
    std::optional<std::size_t> queue_limit_bytes;    // per-user override (per_user mode)
    std::optional<std::size_t> queue_limit_packets;  // per-user override (per_user mode)
};

// What CLAMP's mu_c of a queue measures (docs/architecture.md, "Fidelity").
enum class mu_c_mode {
    // The new-data bytes the queue sent per slot in which it was backlogged
    // (clamp::mu_c_estimator): the rate it gets now, given the others' actual backlog.
    measured,
    // Andrew & Hanly, CLAMP, §IV-A: "the average rate ... it could allocate to each user ...
    // if the AP were always backlogged with packets from all users". A shadow of the
    // scheduler (same policy and parameters) runs every slot on the users' current rates
    // with every user that has a usable rate eligible; the queue's sample of the slot is
    // what the shadow's winner would carry (pdu::data_capacity of its TB: less the PDU
    // header, CRC and one segment header, or the compact header and price) if the winner is
    // one of its users, else 0. Same estimator (mean of
    // mu_init_slots slots, then EMA), fed every slot.
    all_backlogged,
};
const char* to_string(mu_c_mode m);

struct ap_clamp_params {
    bool enabled = false;
    mu_c_mode mu = mu_c_mode::measured;
    clamp::router_agent_params
        router{};                      // a_bytes, b, ema_rate_per_s (Andrew & Hanly, CLAMP, §IV-A)
    std::uint32_t mu_init_slots = 32;  // backlogged slots averaged before mu_c is known
    double mu_ema_weight = 0.01;       // EMA weight per backlogged slot, (0, 1]
    double mu_floor_bps = 1000.0;      // > 0
};

// How the MAC chooses the rate of a user's TB (docs/architecture.md, "Fidelity").
enum class link_mode {
    // The highest MCS of `table` whose threshold the user's latest CQI meets, backed off by
    // OLLA when olla_enabled: what a real PHY, whose CQI is necessarily a few slots old,
    // needs. The default.
    table,
    // Andrew & Hanly, CLAMP, §V-B: B(s) = slot_s min(W0 log2(1 + (1 - m) N(s)), C_max) bits
    // (eq. 18) from the SNR N(s) at the start of the granted slot, unquantised: the TB holds
    // floor(B(s) / 8) bytes and names the lowest MCS of `table` that carries them (the PHY's
    // end-of-slot rule judges the TB's own bits). m is the backoff margin of
    // channel::clamp_link, tuned by stochastic approximation until the loss after
    // harq.max_transmissions attempts is target_loss. OLLA is not used. N(s) comes from a
    // PHY that reports, with slot n, the SNR at the start of slot n + cqi_ahead_slots (the
    // abstract PHY's `cqi_ahead_slots`: its channel is a known function of time); the MAC
    // uses the report for the granted slot, or the newest earlier one (counted
    // `link.snr_not_for_slot`). Before a user's first report it is not served.
    paper,
};
const char* to_string(link_mode m);

struct paper_link_params {
    double w0_hz = 4.3e6;       // W0 (Andrew & Hanly, CLAMP, §V-D)
    double cmax_bps = 10e6;     // C_max
    double target_loss = 1e-3;  // the nominal packet loss after retransmissions
    double margin_init = 0.0;   // m at start, [margin_min, margin_max]
    double margin_step = 0.01;  // the stochastic approximation's gain (clamp_link.h)
    double margin_min = channel::kClampMarginMin;  // m may go below 0 (clamp_link.h); 0: never
    double margin_max = 0.99;                      // m stays below 1
    std::uint32_t cqi_ahead_slots = 0;             // the report of slot n gives the SNR of n + this
};

struct ap_core_params {
    std::vector<ap_user_params> users;  // index = user id (the wire `user`)
    aqm::queue_mode queue_mode = aqm::queue_mode::per_user;
    aqm::aqm_params aqm{};  // kind, params, default limits, ecn, seed, rate
    // SPM-AF's high-priority mark (Wu, Gong & Williamson, §6.1) as the senders' marker
    // (host/spm_mark: TCP data sent while snd_cwnd < 4) writes it: a downlink packet whose
    // DSCP (IPv4 TOS >> 2, IPv6 traffic class >> 2) equals this is queued with
    // ip_packet::high_priority set. nullopt: no packet is (config key aqm.priority_dscp).
    std::optional<std::uint8_t> priority_dscp;  // [0, 63]
    ap_clamp_params clamp{};
    sched::policy_params scheduler = sched::pf_params{};
    // A policy made outside the library (a Python plugin: host/pyplugin), called with the
    // number of users; when set it replaces `scheduler` (a CLAMP shadow policy stays
    // `scheduler`). Its counters() appear as scheduler.<name> in counters().
    std::function<std::unique_ptr<sched::scheduler_policy>(std::size_t)> scheduler_factory;
    // The same for the AQM (a Python plugin): called once per user's queue with the queue's
    // aqm_params (limits, ecn, seed) in place of aqm::make_aqm; queue_mode per_user only.
    std::function<std::unique_ptr<aqm::queue_discipline>(const aqm::aqm_params&)> aqm_factory;
    // true: a pending HARQ retransmission takes the slot before the scheduler is asked (as
    // LTE does). false: a user with one competes in the scheduler like a backlogged user,
    // at its current rate, and its oldest retransmission goes before its new data if it is
    // chosen (the papers' models, where a retransmission is just more data to schedule).
    bool harq_first = true;
    harq::harq_params harq{};  // num_users is set from users.size()
    linkadapt::mcs_table table = linkadapt::mcs_table::evdo();
    link_mode link = link_mode::table;
    paper_link_params paper{};  // link == paper
    bool olla_enabled = true;   // link == table
    linkadapt::olla_params olla{};
    double slot_s = 1.667e-3;                      // slot duration, (0, 1]
    std::uint32_t lead_slots = kDefaultLeadSlots;  // the PHY's lead (late accounting)
    std::int64_t restart_backjump_slots = 1000;    // >= 1
    std::uint32_t grant_cache = 64;                // grants kept for duplicate requests, >= 1
    bool record_slots = true;                      // produce SlotRows (slots.csv)
    bool record_packets = false;                   // produce PacketRecords (packets.csv)
    // The MAC PDU format of every TB (pdu.h); the client reads either.
    pdu::pdu_format pdu_format = pdu::pdu_format::standard;
    // The MAC session every user's PDUs announce until the client ACKs one (pdu.h); the apd
    // draws a new one at each start. nullopt: PDUs carry no session.
    std::optional<std::uint16_t> session;
    // The per-run PDU integrity tag (integrity.h): with a key, every new TB is a MAC PDU of
    // tb_bytes - integrity::kTagBytes bytes followed by its SipHash-2-4 tag, so each TB
    // carries 8 bytes less data and the smallest usable TB grows by 8. nullopt: no tag.
    std::optional<integrity::tag_key> integrity_key;

    // Throws std::invalid_argument naming the field (config key) and the value, e.g.
    // "users[1].addresses[0]: '10.0.0.300' is not an IPv4 or IPv6 address".
    void validate() const;
};

// One row of packets.csv.
struct packet_record {
    time_ns t = 0;
    const char* event = "";  // "enqueue", "dequeue", "drop", "mark"
    int user = -1;
    std::uint64_t packet_id = 0;
    std::uint32_t bytes = 0;
    std::string reason;  // drop: drop_reason name, "unknown_destination", "malformed",
                         // "harq_max_tx"
};

struct ap_user_stats {
    std::uint64_t enqueued = 0, enqueued_bytes = 0, dropped = 0;
    std::uint64_t slots_new = 0, slots_retx = 0;
    std::uint64_t data_bytes = 0;  // packet bytes sent in new TBs
    std::uint64_t tb_bytes = 0;    // all TB bytes sent (retransmissions included)
    std::uint64_t harq_dropped_packets = 0;
};

struct ap_core_stats {
    // Downlink packets.
    std::uint64_t downlink_packets = 0, downlink_bytes = 0;
    std::uint64_t unknown_destination = 0;  // no user has that address: dropped
    std::uint64_t malformed_packets = 0;    // not IPv4/IPv6, too short or too long: dropped
    std::uint64_t enqueued = 0;
    std::uint64_t offered = 0;  // for a user's queue (enqueued or dropped on arrival)
    std::array<std::uint64_t, aqm::kDropReasonCount> queue_drops{};  // by aqm::drop_reason
    std::uint64_t marked = 0;
    // Slots.
    std::uint64_t slot_requests = 0;
    std::uint64_t grants_new = 0, grants_retx = 0, grants_empty = 0;
    std::uint64_t requests_duplicate = 0;     // answered from the grant cache
    std::uint64_t requests_out_of_order = 0;  // older than the newest, not cached: empty grant
    std::uint64_t requests_late = 0;
    std::uint64_t slots_skipped = 0;      // slot numbers never requested (gaps)
    std::uint64_t phy_restarts = 0;       // on_phy_restart() calls that took effect
    std::uint64_t slot_backjumps = 0;     // restarts detected from the slot numbers
    std::uint64_t tbs_without_price = 0;  // CLAMP on, mu_c not known yet
    // HARQ results (the harq_entity's own counters are in harq_stats()).
    std::uint64_t harq_dropped_tbs = 0, harq_dropped_packets = 0, harq_timeout_tbs = 0;
    // Uplink control.
    std::uint64_t cqi_reports = 0, cqi_invalid = 0, cqi_unknown_user = 0;
    std::uint64_t feedback = 0, feedback_unknown_user = 0, feedback_invalid_process = 0;
    std::uint64_t feedback_stale = 0;
    // link == paper: grants whose user's newest usable SNR report was for an earlier slot
    // than the granted one (the report for that slot had not arrived yet).
    std::uint64_t snr_not_for_slot = 0;
};

class ap_core final {
  public:
    explicit ap_core(ap_core_params params);  // validates (std::invalid_argument)
    ~ap_core();
    ap_core(const ap_core&) = delete;
    ap_core& operator=(const ap_core&) = delete;

    // An IP packet read from the TUN at `now`. Returns true if it was queued.
    bool on_downlink_packet(time_ns now, std::vector<std::uint8_t> bytes);

    // The PHY asks what to send in `slot` (air time on the PHY's clock); answered at once.
    wire::slot_grant on_slot_request(time_ns now, std::uint64_t slot, time_ns air_time_ns);

    // The PHY restarted (its wire sequence began again at 0): the next request re-bases the
    // slot clock. Idempotent until the next request.
    void on_phy_restart();

    // The latest channel report of `user` (wire cqi_report): snr_db is the CQI the MAC uses.
    void on_cqi(std::uint32_t user, std::uint64_t slot, double snr_db, std::uint8_t cqi);

    // ACK/NACK of the TB sent to `user` in PHY slot `slot` on HARQ process `pid`.
    void on_harq_feedback(std::uint32_t user, std::uint64_t slot, std::uint8_t pid, bool ack);

    // Trace rows completed since the last call (slot rows in slot order, once their outcome
    // is known). final_rows() also hands out the rows still waiting for an outcome (exit).
    std::vector<slot_row> take_slot_rows();
    std::vector<slot_row> final_rows();
    std::vector<packet_record> take_packet_records();

    const ap_core_stats& stats() const;
    // Packets offered to the queues that are neither dropped (with a cause), delivered,
    // queued nor in flight (packet_ledger.h): 0 unless one left without a record.
    std::int64_t unaccounted_packets() const;
    const ap_user_stats& user_stats(std::uint32_t user) const;
    const harq::harq_stats& harq_stats() const;
    // Every counter and gauge as dotted names (for the stats JSON): "queue.<name>.marked",
    // "harq.acked", "olla.<name>.offset_db", ...
    std::vector<std::pair<std::string, std::uint64_t>> counters() const;
    std::vector<std::pair<std::string, double>> gauges() const;

    // Introspection (tests, traces).
    std::size_t users() const;
    const ap_core_params& params() const;
    std::size_t queued_bytes(std::uint32_t user) const;
    std::optional<double> mu_c_bps(std::uint32_t user) const;  // nullopt until known
    std::optional<double> price(std::uint32_t user) const;     // nullopt: none stamped now
    // The MCS and rate the user would get now: link == table from its latest CQI; link ==
    // paper as computed for the latest requested slot.
    int mcs_for(std::uint32_t user) const;      // kNoMcs if none usable
    double rate_bps(std::uint32_t user) const;  // the scheduler's R_i
    double margin(std::uint32_t user) const;    // link == paper: m; else 0
    const clamp::router_agent& router_of(std::uint32_t user) const;
    std::optional<std::uint32_t> classify(const std::vector<std::uint8_t>& packet) const;
    std::uint32_t tb_bytes_for_mcs(int mcs) const;  // 0 if unusable

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace oppsched::ap
