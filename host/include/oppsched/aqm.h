#pragma once
// Active queue management at the AP: one interface, ten disciplines.
//
// Every AQM owns its packet storage (SPM-AF removes ACKs from the middle of the queue, LAS
// reorders it), takes `now` on enqueue and dequeue, and never reads a clock. The contract
// every implementation keeps, and that tests/test_aqm_contract.cc checks for each kind:
//
//   * the limit (bytes and/or packets) is never exceeded;
//   * every packet passed to enqueue() leaves exactly once: returned by dequeue(), or
//     reported as a Drop (rejected at arrival, dropped by the AQM later, evicted, flushed);
//   * FIFO disciplines (all but LAS and T-LAS) deliver in arrival order; LAS and T-LAS keep
//     each flow's packets in order.
//
// Where an AQM decides to signal congestion it marks an ECN-capable packet CE (RFC 3168,
// via tcpip::mark_ce) and drops a packet that is not ECN-capable; with ecn = false it always
// drops. Two rules of the papers refine this: PIE drops even ECN-capable packets once its
// drop probability exceeds mark_ecn_threshold (RFC 8033 §5.1), and REAQM, which marks only,
// drops ECN-capable packets only on a full buffer (Wang & Song, REAQM, §3.1).
//
// Rate-based disciplines (REM, REAQM, AVQ, PIE with use_departure_rate, RED's idle decay)
// need the link capacity c. rate_params::capacity_bps > 0 fixes it; the default (0) measures
// the service rate this queue actually gets from its dequeues (service_rate_estimator). The
// measured rate is the default because on an opportunistic downlink a user's rate changes
// with its channel and with the share the scheduler gives it, so no configured constant is
// right for a wireless user; a fixed capacity is for wired or deterministic links.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "oppsched/packet.h"
#include "oppsched/param_spec.h"

namespace oppsched::aqm {

// ---------------------------------------------------------------------------------------
// Limits, drops, statistics

// Queue capacity. 0 means "no limit of this kind"; at least one must be set.
struct queue_limits {
    std::size_t bytes = 0;     // sum of Packet::size() (IP bytes)
    std::size_t packets = 50;  // Wang & Song, REAQM, §4, use 50-packet buffers
};

enum class drop_reason : std::uint8_t {
    overflow,              // arrival rejected: it would exceed the limit (tail drop)
    early_drop,            // arrival dropped by the AQM's probabilistic test (not ECT, or ecn off)
    aqm_drop,              // queued packet dropped by the AQM at dequeue (CoDel)
    superseded_ack,        // queued pure ACK made redundant by a newer ACK (SPM-AF filter)
    evicted_low_priority,  // queued ACK / low-priority packet pushed out by a high-priority one
    evicted_las,           // queued packet with the most attained service pushed out (LAS)
    flushed,               // queued packet discarded by clear()
};
constexpr std::size_t kDropReasonCount = 7;
std::string_view to_string(drop_reason r);
// True for the reasons that remove a packet that had been accepted into the queue.
constexpr bool removes_queued_packet(drop_reason r) {
    return r != drop_reason::overflow && r != drop_reason::early_drop;
}

struct dropped_packet {
    ip_packet packet;
    drop_reason reason = drop_reason::overflow;
    time_ns at = 0;
};
// Receives every drop as it happens. Without a sink, drops are kept until take_drops().
using drop_sink = std::function<void(dropped_packet&&)>;

// Counters common to every AQM plus the algorithm state worth plotting. Fields that do not
// apply to a discipline stay 0.
struct aqm_stats {
    std::uint64_t offered = 0;   // enqueue() calls
    std::uint64_t enqueued = 0;  // accepted arrivals
    std::uint64_t dequeued = 0;
    std::uint64_t enqueued_bytes = 0;
    std::uint64_t dequeued_bytes = 0;
    std::uint64_t marked = 0;             // packets marked CE by this AQM
    std::uint64_t spared_handshakes = 0;  // SYNs a signal would have dropped (spare_handshake)
    std::uint64_t marked_not_ect = 0;     // Not-ECT segments marked (mark_not_ect)
    std::array<std::uint64_t, kDropReasonCount> dropped{};  // by drop_reason
    std::uint64_t dropped_bytes = 0;
    std::uint64_t dropped_total() const;
    std::uint64_t dropped_by(drop_reason r) const { return dropped[static_cast<std::size_t>(r)]; }

    // Algorithm state.
    double drop_probability = 0;      // RED p_b, REM/REAQM 1 - phi^-p, PIE drop_prob
    double price = 0;                 // REM, REAQM: the link price p
    double avg_queue = 0;             // RED: EWMA queue length (packets)
    double input_rate = 0;            // REM, REAQM: y of the last period (mean-size packets per T)
    double service_rate_bps = 0;      // capacity in use (configured or measured); 0 = unknown
    double virtual_capacity_bps = 0;  // AVQ: C~
    double virtual_queue_bytes = 0;   // AVQ: VQ
    double queue_delay_s = 0;         // PIE: current_qdelay; CoDel: sojourn of the last dequeue
    double burst_allowance_s = 0;     // PIE
    bool dropping = false;            // CoDel: in the dropping state
    std::uint32_t codel_count = 0;    // CoDel: drops in the current dropping state
    std::size_t flows = 0;            // LAS, T-LAS: flows with state
    std::uint64_t flows_evicted = 0;  // LAS, T-LAS: idle flows forgotten at max_flows
    std::uint64_t shared_flow_packets = 0;  // LAS, T-LAS: arrivals of flows beyond max_flows
};

// ---------------------------------------------------------------------------------------
// Configuration

// Link capacity for rate-based AQMs: fixed (capacity_bps > 0) or measured (0, the default).
// The measure is the bytes the link carried for this queue over the time the link spent
// carrying them, never the idle time; samples of at least sample_bytes are averaged:
//   rate <- (1 - ema_weight) * rate + ema_weight * sample      (the first sample sets rate),
// and the rate is unknown (0) until the first sample. Two sources of (bytes, time):
//   * a slotted MAC's reports (queue_discipline::on_service), once per slot: the bytes its TB
//     carried over the slot's share they filled, and whole slots in which the queue waited
//     (other users served) or its TB was retransmitted. This is what ap_core does; it gives
//     the configured rate of a constant link at any load.
//   * otherwise the dequeue times of a work-conserving packet link (after RFC 8033 §5.2's
//     departure-rate estimator): the time between two dequeues is the sending time of the
//     earlier one, so a packet counts only once the next dequeue of the same busy period
//     ends it. Packets dequeued at one instant (a batch) count together over the interval
//     that follows; the last batch of a busy period never counts (its sending time is not
//     known). Counting dequeue to dequeue with the last packet's bytes but not its time
//     (this estimator before) read a slotted link's rate 1.1-3.1 times too high (11.1-31.1
//     Mb/s on a 10 Mb/s link): every packet of a TB leaves at the slot request.
struct rate_params {
    double capacity_bps = 0.0;         // > 0: fixed capacity; 0: measure
    std::size_t sample_bytes = 16384;  // RFC 8033 DQ_THRESHOLD (2^14 bytes)
    double ema_weight = 0.25;          // RFC 8033: DQ_THRESHOLD / 2^16
};

// Drop-tail: no AQM, the baseline of both seeds.
struct drop_tail_params {};

// RED with Floyd's "gentle" modification (Floyd & Jacobson 1993; Floyd 2000, "Recommendation
// on using the gentle variant of RED"). Thresholds in packets. Defaults: ns-2's RED defaults.
struct red_params {
    double min_th = 5.0;            // packets
    double max_th = 15.0;           // packets (3 x min_th, Floyd's rule of thumb)
    double w_q = 0.002;             // EWMA weight
    double max_p = 0.1;             // drop probability at max_th (ns-2 linterm_ = 10)
    bool gentle = true;             // p_b rises linearly from max_p at max_th to 1 at 2 max_th
    double mean_packet_size = 500;  // bytes of a "small packet" for the idle decay (ns-2)
};

// REM (Athuraliya, Low, Li, Yin, IEEE Network 2001): per update interval T
//   p <- [p + gamma (alpha (b - b*) + x - c)]+ ,  mark with probability 1 - phi^-p.
// b, x and c are in packets of mean_packet_size bytes (b: queue, x: arrivals in T, c: bytes the
// link can serve in T), as in the ns-2 REM code. Defaults: the paper's / ns-2's.
struct rem_params {
    double gamma = 0.001;
    double alpha = 0.1;
    double phi = 1.001;
    double target = 20.0;  // b*, packets
    time_ns update_interval = 2 * kNsPerMs;
    double input_weight = 1.0;       // EWMA weight on x (1 = no smoothing, ns-2 inw_)
    double mean_packet_size = 1000;  // bytes per "packet" unit
};

// When REAQM updates its price. interval: once per update interval T, with y the bytes that
// arrived in T (the ns-2 REM code's timer, which REAQM was compared against). per_arrival: at
// each packet arrival, as the paper's §3.1 states ("at each packet arrival epoch"), with the
// period being the time since the previous arrival.
enum class price_update : std::uint8_t { interval, per_arrival };
std::string_view to_string(price_update u);
std::optional<price_update> price_update_from_string(std::string_view name);

// REAQM (Wang & Song, REAQM, §3.1, eqs. 1-5). At each update:
//   f(q) = alpha q / c_T + 1                                         (3)
//   y <= c or !modified_update: p <- [p + gamma (f(q) y - c)]+      (2), (4)
//   y >  c and  modified_update: p <- [p + gamma (alpha' q (y - y0)/c_T + y - c)]+   (5)
//   mark with probability m = 1 - phi^-p                             (1)
// and drop only on a full buffer (for ECN-capable traffic, the paper's setting).
// Units as REM: q in packets of mean_packet_size bytes; y the packets that arrived in the
// period and c the packets the link serves in it; c_T the packets it serves in the update
// interval T. With update = interval the period is T (c = c_T): eqs. 2-5 as printed, in
// packets per T. With update = per_arrival the period is the gap since the previous arrival
// (y = the arriving packet, c = capacity x gap), so the drift of p over any stretch of time
// is the interval mode's, while q / c_T keeps alpha's meaning (the queue in units of T's
// service) independent of how often packets arrive.
// The paper gives alpha, gamma, phi and the 50-packet buffer; it gives no value for alpha'
// (only "larger than alpha") nor y0, so alpha' = 2 alpha and y0 = c (y0_ratio = 1) are ours.
struct reaqm_params {
    double alpha = 0.11;
    double alpha_prime = 0.22;  // alpha' > alpha (eq. 5)
    double gamma = 0.001;
    double phi = 1.001;
    double y0_ratio = 1.0;        // y0 = y0_ratio * c (eq. 5)
    bool modified_update = true;  // use eq. 5 when y > c (the paper's experiments do)
    price_update update = price_update::interval;
    time_ns update_interval = 2 * kNsPerMs;  // T
    double mean_packet_size = 1000;          // bytes; the seed's TCP packets are 1000 bytes
};

// AVQ (Kunniyur & Srikant, IEEE/ACM ToN 2004, Fig. 1). At each arrival of b bytes at time t:
//   VQ <- max(VQ - C~ (t - s), 0);  if VQ + b > B: mark/drop  else VQ <- VQ + b
//   C~ <- max(min(C~ + alpha gamma C (t - s), C) - alpha b, 0);  s <- t
// B = the real buffer (virtual_buffer_bytes = 0) or the given size. Defaults: the paper's.
struct avq_params {
    double gamma = 0.98;                   // desired utilisation
    double alpha = 0.15;                   // damping / smoothing
    std::size_t virtual_buffer_bytes = 0;  // 0: the byte limit, else packets x mean_packet_size
    double mean_packet_size = 1000;
};

// CoDel (RFC 8289): head drop at dequeue; ECN marking as in Linux codel_impl.h.
struct codel_params {
    time_ns target = 5 * kNsPerMs;
    time_ns interval = 100 * kNsPerMs;
    std::size_t mtu = 1500;  // RFC 8289 MAXPACKET ("SHOULD use interface MTU")
};

// PIE (RFC 8033: basic algorithm §4 / Appendix A; ECN §5.1, departure-rate delay §5.2,
// de-randomisation §5.4, cap on the drop adjustment §5.5). Defaults: the RFC's.
struct pie_params {
    time_ns target = 15 * kNsPerMs;      // QDELAY_REF
    time_ns tupdate = 15 * kNsPerMs;     // T_UPDATE
    double alpha = 0.125;                // 1/s
    double beta = 1.25;                  // 1/s
    time_ns max_burst = 150 * kNsPerMs;  // MAX_BURST
    double mark_ecn_threshold = 0.1;     // mark ECT only while drop_prob <= this (§5.1)
    double mean_packet_size = 1500;      // MEAN_PKTSIZE of the 2-packet safeguard
    bool use_departure_rate = false;     // qdelay = bytes / rate (else timestamps, as Linux)
    bool derandomize = false;            // §5.4 accumulated probability
    bool cap_drop_adjustment = true;     // §5.5: step <= 0.02 once drop_prob >= 0.1 (as Linux)
};

// SPM-AF (Wu, Gong & Williamson, §6.1): FIFO with ACK filtering and priority eviction.
struct spm_af_params {};

// LAS (Wu, Gong & Williamson, §6.2; Rai et al. 2003/2004): serve the flow with the least attained
// service.
// Flow state is bounded by max_flows: at the limit a new flow replaces the least recently seen
// flow with nothing queued, or, if every flow has packets queued, shares one record with the
// other flows beyond the limit (aqm_las.cc; counted in flows_evicted and shared_flow_packets).
struct las_params {
    time_ns flow_idle_timeout = 30 * kNsPerSec;  // forget idle flows with nothing queued
    std::size_t max_flows = 4096;                // flow records held, [1, 1000000]
};

// T-LAS (Wu, Gong & Williamson, §6.2): LAS for a flow's first threshold_packets packets, then FIFO.
struct tlas_params {
    std::size_t threshold_packets = 50;  // Wu, Gong & Williamson: "e.g., 50 packets"
    time_ns flow_idle_timeout = 30 * kNsPerSec;
    std::size_t max_flows = 4096;  // as las_params::max_flows
};

enum class aqm_kind : std::uint8_t { droptail, red, rem, reaqm, avq, codel, pie, spmaf, las, tlas };
constexpr std::size_t kAqmKindCount = 10;
std::string_view to_string(aqm_kind k);
// One line on what the kind is and where it comes from (docs/algorithms.md shows it).
std::string_view describe(aqm_kind k);
// Accepts the names above, case-insensitive, ignoring '-' and '_' ("drop-tail", "SPM-AF").
std::optional<aqm_kind> aqm_kind_from_string(std::string_view name);

using algorithm_params =
    std::variant<drop_tail_params, red_params, rem_params, reaqm_params, avq_params, codel_params,
                 pie_params, spm_af_params, las_params, tlas_params>;

struct aqm_params {
    algorithm_params params = drop_tail_params{};  // the kind is the alternative held
    queue_limits limits{};
    bool ecn = true;  // mark ECN-capable packets instead of dropping them
    // A TCP segment with SYN set (SYN, SYN-ACK) is never early-dropped by an AQM that
    // decides at arrival (RED, REM, REAQM, AVQ, PIE): it is queued, or dropped only when the
    // buffer is full. A handshake is never ECN-capable (RFC 3168 §6.1.1), so an AQM that
    // marks most packets drops that share of SYNs; ns-2's one-way agents, which the AQM
    // papers simulate, open no connection. Off by default (a real network's behaviour).
    bool spare_handshake = false;
    // A Not-ECT TCP segment other than a SYN or SYN-ACK (spare_handshake's) is CE-marked by
    // the AQM's signal instead of dropped (with ecn on), as if it were ECN-capable: Linux
    // sends a retransmission and a pure ACK Not-ECT (RFC 3168 §6.1.4-6.1.5), which an AQM
    // marking most packets drops at that rate; ns-2's ECN agents send every data packet ECT
    // and none of their ACKs cross the queue. A receiver of an ECN connection echoes a mark
    // on data; one on a pure ACK has no effect. An ablation: off by default (a real
    // network's behaviour).
    bool mark_not_ect = false;
    std::uint64_t seed = 1;  // of the AQM's own std::mt19937_64
    rate_params rate{};
    aqm_kind kind() const { return static_cast<aqm_kind>(params.index()); }
};

// A configuration with the defaults of `kind`.
aqm_params default_config(aqm_kind kind);

// Throws std::invalid_argument naming the field and the value ("red.max_p: 1.5 not in (0,1]").
// The only place configuration is checked; make_aqm calls it.
void validate(const aqm_params& config);

// Every tunable parameter by the name configuration files and Python keywords give it (times
// in seconds, with the suffix _s), with its range, unit and help (param_spec.h): the one
// registry the apd's config reader, the Python bindings (make_aqm, aqm_registry()) and
// docs/algorithms.md go through, and whose ranges validate() checks. Each front end checks a
// value's type in its own terms and calls set(). Constraints between two parameters (RED's
// max_th > min_th, REAQM's alpha_prime > alpha, CoDel's target < interval) are validate()'s
// and named in the help.
using oppsched::param_range;
using oppsched::param_type;
using oppsched::param_value;
struct param_field {
    std::string name;   // "max_p", "update_interval_s"
    std::string label;  // in error messages: "red.max_p", "reaqm.update_interval"
    param_type type = param_type::number;
    std::vector<std::string> choices;  // the values a param_type::choice takes
    // Stores the value, of the alternative `type` names (seconds and number: double).
    std::function<void(aqm_params&, const param_value&)> set;
    // The value in `c` (seconds for param_type::seconds); the default is get(default_config()).
    std::function<param_value(const aqm_params&)> get;
    param_range range;  // of the value (seconds for param_type::seconds); validate() checks it
    std::string unit;   // "" when dimensionless
    std::string help;
};
const std::vector<param_field>& param_fields(aqm_kind kind);

// ---------------------------------------------------------------------------------------
// The interface

class queue_discipline {
  public:
    virtual ~queue_discipline() = default;
    virtual aqm_kind kind() const = 0;

    // Offers a packet that arrives at `now` (sets packet.arrival = now: sojourn times are
    // measured from here). Returns true if it was accepted (possibly marked CE, possibly after
    // other packets were removed); false if it was dropped, in which case it has been reported
    // to the drop sink.
    virtual bool enqueue(ip_packet packet, time_ns now) = 0;
    // The next packet in service order, or nothing if the queue is empty (or the AQM dropped
    // every queued packet at this dequeue). Segmentation pulls whole packets with this.
    virtual std::optional<ip_packet> dequeue(time_ns now) = 0;
    // The packet dequeue() would consider next; nullptr if empty. Dequeue-time AQMs (CoDel)
    // may still drop it.
    virtual const ip_packet* peek() const = 0;

    virtual std::size_t bytes() const = 0;
    virtual std::size_t packets() const = 0;
    bool empty() const { return packets() == 0; }
    virtual const queue_limits& limits() const = 0;
    virtual aqm_stats stats() const = 0;

    // Drops every queued packet with reason `flushed`.
    virtual void clear(time_ns now) = 0;

    virtual void set_drop_sink(drop_sink sink) = 0;

    // The link's service of this queue, reported by a slotted MAC (ap_core) once per slot in
    // which the queue had data waiting or on the air: `bytes` of its packets were carried in
    // `busy` of link time (a slot's share that its TB filled, or a whole slot spent waiting
    // or on a retransmission). A rate-based AQM that measures its capacity then takes these
    // reports as its measure and no longer its dequeue times (service_rate_estimator). Other
    // disciplines ignore them.
    virtual void on_service(std::size_t /*bytes*/, time_ns /*busy*/) {}
    // Drops recorded since the last call (only when no sink is set).
    virtual std::vector<dropped_packet> take_drops() = 0;
    // Counters of a discipline made outside the library (a Python plugin: plugin_exceptions,
    // ...), reported by the apd as aqm.<queue>.<name>; none for the built-in kinds.
    virtual std::vector<std::pair<std::string, std::uint64_t>> counters() const { return {}; }
};

// Validates `config` and builds the AQM it describes.
std::unique_ptr<queue_discipline> make_aqm(const aqm_params& config);

// ---------------------------------------------------------------------------------------
// Building blocks shared by the AQMs (public so that other parts of the MAC can reuse them).

// The service rate a queue receives, fixed or measured (see rate_params). O(1) per call.
class service_rate_estimator final {
  public:
    explicit service_rate_estimator(const rate_params& config);
    // A packet of `size` bytes served at `now`; `queue_now_empty`: nothing is left behind it.
    // Ignored once on_service has been called.
    void on_dequeue(std::size_t size, bool queue_now_empty, time_ns now);
    // A slotted MAC's report: `bytes` carried in `busy` of link time (queue_discipline).
    void on_service(std::size_t bytes, time_ns busy);
    // Whether the measure comes from a MAC's reports (on_service) rather than dequeues.
    bool reported() const { return reported_; }
    // Bits per second; 0 while unknown (measuring, no sample yet).
    double rate_bps() const { return rate_bps_; }
    bool known() const { return rate_bps_ > 0.0; }
    bool measured() const { return measuring_; }

  private:
    bool measuring_;
    std::size_t sample_bytes_;
    double weight_;
    double rate_bps_ = 0.0;
    bool reported_ = false;
    // Dequeue measure: bytes dequeued at last_dequeue_ (a batch) whose sending time the next
    // dequeue of the busy period will end; 0 when the queue went empty.
    std::uint64_t pending_bytes_ = 0;
    time_ns last_dequeue_ = 0;
    std::uint64_t acc_bytes_ = 0;
    time_ns acc_time_ = 0;
    void add(std::uint64_t bytes, time_ns time);
};

// ECN field of an IPv4/IPv6 packet (RFC 3168 codepoint), 0 (Not-ECT) if too short or neither.
inline std::uint8_t ecn_field(const std::vector<std::uint8_t>& p) {
    if (p.size() < 2) return 0;
    const unsigned v = p[0] >> 4;
    if (v == 4) return p[1] & 0x03u;
    if (v == 6) return (p[1] >> 4) & 0x03u;
    return 0;
}

// Whether an AQM of kind `k` signals congestion by marking ECN-capable packets CE (ecn on):
// RED, REM, REAQM, AVQ, CoDel and PIE. Drop-tail, SPM-AF, LAS and T-LAS only drop. A testbed
// run negotiates ECN in TCP where the AQM marks (tcp.ecn auto, docs/testbed.md).
bool marks_ecn(aqm_kind k);

}  // namespace oppsched::aqm
