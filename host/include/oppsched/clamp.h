#pragma once
// CLAMP: receiver-side window clamping driven by an explicit congestion price from the
// access point. Andrew & Hanly, "Active Queue Management for Fair Resource Allocation in
// Wireless Networks" (Andrew & Hanly, CLAMP), §III-B (fluid model) and §IV (the protocol).
//
//   router_agent  (§IV-A, one per AP queue): exponential moving average of the queue length
//                at each arrival, and the price p = max((b q - a)/mu_c, 0) (eqs. 7 and 13)
//                that the AP stamps on every packet it sends to that queue's user.
//   client_agent  (§IV-B/C, one per TCP flow at the receiver): rate estimate (eq. 15), RTT
//                estimate (eq. 16), window update (eq. 14) with its clipping, receiver
//                slow start, and the advertised window AWND = min(w, AWND_os) (eq. 17).
//
// Both are plain algorithms: no I/O, no clock (`now` is passed in), no globals. Each has
// params (configuration, validated once in the constructor; a bad value throws
// std::invalid_argument naming the field and the value), state and stats.
//
// In equilibrium with k flows sharing one queue of service rate mu_c, each flow gets
// mu_c/k whatever its RTT, and the averaged queue settles at q* = (k tau + a)/b (eq. 11).
//
// One byte unit: IP bytes. The AP queues whole IP packets, so q, a and mu_c count IP bytes
// (header included); the price p = (b q - a)/mu_c is then in seconds whatever the unit, but
// the balance the client drives to, p mu_hat = tau (eq. 14 at Delta w = 0), gives eq. 11 in
// the AP's unit only if mu_hat and tau count the same bytes: so s_k (eq. 15) is the IP
// length of data packet k and tau is IP bytes in the AP queue. Counting TCP payload instead
// puts the queue at a + k tau (IP size / payload size), 3.6 % more k tau with 1448-byte
// segments in 1500-byte packets. The window w and AWND stay in TCP sequence space (payload
// bytes: what the ACK's window field counts); client_agent converts between the two with
// the flow's own ratio of payload to IP bytes (see on_data), which changes only the loop's
// gain, never the equilibrium.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::clamp {

// ---------------------------------------------------------------------------------------
// Router (access point) agent, §IV-A.

struct router_agent_params {
    // a (bytes), eq. 7/13: shifts the equilibrium queue, q* = (k tau + a)/b. The paper's
    // deterministic-link experiment (Fig. 2) uses 5500 B; in the fading runs it is swept.
    double a_bytes = 5500.0;
    // b (dimensionless), eq. 7: the controller's reactivity. Theorem 1: the fluid loop
    // converges iff b < pi/2; the paper uses b = 1 throughout (Table II).
    double b = 1.0;
    // The constant in q(n) = exp(-c I) q(n-1) + (1 - exp(-c I)) Q(n), in 1/s. The paper
    // writes exp(-2I) with I the inter-arrival time in seconds, so c = 2 /s: the average
    // forgets with a time constant of 0.5 s, independent of the packet rate.
    double ema_rate_per_s = 2.0;

    // Throws std::invalid_argument ("clamp.router.b: 2 not in (0, pi/2)") on a bad field.
    void validate() const;
};

struct router_agent_state {
    double q_bytes = 0.0;      // the moving average q(n), bytes
    time_ns last_arrival = 0;  // time of arrival n-1 (valid iff arrivals > 0)
    bool has_arrival = false;
};

struct router_agent_stats {
    std::uint64_t arrivals = 0;
    std::uint64_t prices = 0;           // price() calls
    std::uint64_t positive_prices = 0;  // of which p > 0 (the EMA was above a/b)
};

// Per queue. Cost: one exp() per arrival, O(1) per price; no allocation.
class router_agent final {
  public:
    explicit router_agent(const router_agent_params& params = {});

    // Arrival n of a packet at this queue at time `now`, finding `queue_bytes` (Q(n)) in
    // the queue. The paper says only "the current queue size at packet arrival n"; pass
    // the backlog the packet finds, excluding itself, so that q estimates the
    // time-average queue (arrivals see time averages) that the fluid model's q(t) is.
    // That holds for arrivals spread in time; with slotted service, ACK-clocked arrivals
    // come in bursts soon after a TB is dequeued and q sits below the time average (by
    // about 0.7 TB on a constant 10 Mb/s link, experiments/clamp/README.md).
    // The first arrival has no interval I; it is taken as I = infinity (q(1) = Q(1)),
    // i.e. there is no history to weigh. `now` must not go backwards (a negative I is
    // treated as 0: the EMA is left unchanged by a repeated timestamp's weight).
    void on_arrival(time_ns now, std::size_t queue_bytes);

    // The price (seconds) to stamp on a packet sent now, eq. 13 with eq. 7's b:
    //   p = max((b q - a) / mu_c, 0).
    // (Eq. 13 is printed as (q - a)/mu_c: the paper's b = 1. Eq. 7 has b q; we keep b so
    // that q* = (k tau + a)/b, eq. 11, holds for any b.) mu_c is the rate in bytes/s the
    // scheduler could give this queue if it were always backlogged; the caller measures
    // it. Throws std::invalid_argument if mu_c is not finite and > 0.
    double price(double mu_c_bytes_per_s);
    // The same without counting it in the stats.
    double peek_price(double mu_c_bytes_per_s) const;

    double average_queue_bytes() const { return state_.q_bytes; }
    const router_agent_params& params() const { return params_; }
    const router_agent_state& state() const { return state_; }
    const router_agent_stats& stats() const { return stats_; }
    void reset();

  private:
    router_agent_params params_;
    router_agent_state state_;
    router_agent_stats stats_;
};

// mu_c of one AP queue, the service rate the router agent's price divides by (Andrew &
// Hanly, CLAMP, eq. 13: "the rate the queue would get if it were always backlogged"). It is
// measured over the slots in which the queue had data at the start of the slot, as the new
// data bytes served in each (0 when another user or a retransmission took the slot): the
// mean of the first init_slots such slots, then an EMA with weight ema_weight per
// backlogged slot. Unknown (no price) until init_slots have been seen. O(1) per slot.
struct mu_c_params {
    std::uint32_t init_slots = 32;  // backlogged slots averaged before mu_c is known, >= 1
    double ema_weight = 0.01;       // EMA weight per backlogged slot, (0, 1]
    double slot_s = 1.667e-3;       // slot length, seconds, > 0
    // Throws std::invalid_argument ("clamp.mu_init_slots: 0 not >= 1").
    void validate() const;
};

class mu_c_estimator final {
  public:
    explicit mu_c_estimator(const mu_c_params& params = {});

    // One slot in which the queue was backlogged at the start and served_bytes of new data
    // left it.
    void on_backlogged_slot(std::uint64_t served_bytes);
    // bits/s; nullopt until init_slots backlogged slots have been seen.
    std::optional<double> bps() const;

  private:
    mu_c_params params_;
    bool known_ = false;
    double bps_ = 0;
    std::uint32_t n_ = 0;
    double acc_bytes_ = 0;
};

// ---------------------------------------------------------------------------------------
// Client (receiver) agent, §IV-B and §IV-C.

struct client_agent_params {
    double tau_bytes = 500.0;             // tau, eq. 14: IP bytes each flow aims to keep queued
    std::size_t alpha_packets = 1000;     // alpha, eq. 15: rate-estimator window, packets
    double beta = 0.001;                  // beta, eq. 16: RTT-estimator gain, in (0, 1)
    std::uint32_t mss_bytes = 1448;       // MSS: initial window and slow-start increment
    double max_increase_bytes = 10000.0;  // "Delta w is clipped to a maximum of 10 kbytes"
    // Floor on w. Not in the paper: Delta w >= -s_k alone lets w reach 0 under a sustained
    // high price; a zero window stops the ACK clock, and with it every CLAMP update
    // (they run per received packet), so the flow would stall until TCP's persist timer.
    // One MSS keeps one segment in flight. 0 means "one MSS".
    double min_window_bytes = 0.0;
    // Receiver slow-start threshold (§IV-C: "in practice, a receiver-side threshold would
    // also need to be used"; the paper's simulations do without). When w reaches it,
    // slow start ends WITHOUT halving, as TCP's ssthresh does. 0 = none (the paper).
    double slow_start_threshold_bytes = 0.0;
    int dupack_threshold = 3;  // "three duplicate acknowledgments"
    // Eq. 15 at start-up, before alpha packets have arrived, sums "all packets so far". Read
    // literally (mu_min_span_s = 0), two packets of one slot's TB, a millisecond apart, give
    // a rate many times the flow's: p mu_hat > tau then ends the receiver's slow start in its
    // first round trip, and a long-RTT flow needs longer than a run to recover. The paper asks
    // the algorithm to work during the transient (§IV-C); so by default mu_hat is not used
    // (for d_hat, Delta w, or ending slow start) until its window spans mu_min_span_s or
    // holds alpha + 1 packets. 0.2 s is longer than the paper's longest round trip
    // (180 ms, Table II), so the estimate spans a round trip's worth of bursts.
    double mu_min_span_s = 0.2;

    // Throws std::invalid_argument ("clamp.client.beta: 1.5 not in (0, 1)").
    void validate() const;
};

struct client_agent_state {
    double w_bytes = 0.0;     // w(t_k), the CLAMP window (before the min with AWND_os), seq bytes
    double awnd_bytes = 0.0;  // AWND(t_k) of eq. 17, the last window advertised, seq bytes
    bool slow_start = true;
    double mu_hat = 0.0;  // eq. 15, IP bytes/s (valid iff mu_valid)
    bool mu_valid = false;
    double d_hat = 0.0;  // eq. 16, seconds (valid iff d_valid)
    bool d_valid = false;
    // Delta w(t_k) of eq. 14 before clipping, IP bytes (0 if undefined); w moves by it
    // times the flow's payload/IP ratio (on_data).
    double last_delta_w = 0.0;
    time_ns last_t = 0;         // t_{k-1} (valid iff packets > 0)
    std::uint64_t packets = 0;  // k
    int dupacks = 0;            // consecutive duplicate ACKs sent (slow start only)
};

struct client_agent_stats {
    std::uint64_t packets = 0;
    std::uint64_t slow_start_exits_delta_w = 0;    // slow start ended on Delta w < 0
    std::uint64_t slow_start_exits_dupack = 0;     // ... on the dupack threshold
    std::uint64_t slow_start_exits_threshold = 0;  // ... on slow_start_threshold_bytes
    std::uint64_t clipped_high = 0;                // Delta w clipped to max_increase_bytes
    std::uint64_t clipped_low = 0;                 // Delta w clipped to -s_k
    std::uint64_t floored = 0;                     // w held at min_window_bytes
    std::uint64_t os_limited = 0;                  // AWND_os < w: the OS window advertised
};

// Per flow. Cost per packet: O(1) (a ring buffer of alpha+1 (time, IP size, payload size)
// entries, allocated once in the constructor: 16 (alpha+1) bytes).
class client_agent final {
  public:
    explicit client_agent(const client_agent_params& params = {});

    // Packet k received at t_k = now, carrying price p (seconds): size_bytes = s_k, its IP
    // length (the AP's unit, see the header comment); seq_bytes = the TCP sequence space
    // it carries (its payload: what the ACK advances by and the window counts), 0 meaning
    // "the same as size_bytes" (one unit, as in the paper's model). The receiver's OS would
    // advertise awnd_os_bytes. Returns AWND(t_k) = min(w, AWND_os) (eq. 17), floored to
    // whole bytes: the window to write into the ACK.
    //
    // Order of the computation at t_k (the paper leaves it implicit):
    //  1. mu_hat(t_k), eq. 15, over the packets k-alpha..k (fewer at the start), IP bytes/s.
    //     Over the same packets, r = (their payload bytes) / (their IP bytes).
    //  2. d_hat(t_k), eq. 16, using AWND as advertised before this packet, i.e. the window
    //     actually in force at t_k. Eq. 16 names AWND(t_k), which eq. 17 defines from
    //     w(t_k), which needs Delta w(t_k), which needs d_hat(t_k): a cycle; the window in
    //     force is the causal reading. The first time mu_hat exists, d_hat starts at that
    //     sample (the paper gives no initial value). AWND counts payload bytes, so the
    //     sample is AWND / (r mu_hat): the RTT in seconds, as the paper means it.
    //  3. Delta w(t_k), eq. 14, with p and t_k - t_{k-1}: IP bytes.
    //  4. Slow start: w += MSS, unless Delta w < 0 (then w <- w/2 and slow start ends).
    //     Otherwise w += clip(r Delta w, -seq_bytes, 10 kB): the step in the window's unit,
    //     bounded below by the packet's payload so that the right edge (ack + window) does
    //     not move left (§IV-B).
    //  5. AWND(t_k) = min(w, AWND_os).
    std::uint32_t on_data(time_ns now, std::uint32_t size_bytes, double price_s,
                          std::uint32_t awnd_os_bytes, std::uint32_t seq_bytes = 0);

    // The receiver sent a duplicate ACK. The dupack_threshold-th consecutive one during
    // slow start ends it and halves w (§IV-C); after slow start CLAMP ignores loss.
    void on_dupack();
    // The receiver sent an ACK that advanced (not a duplicate): resets the dupack count.
    // Callers that cannot tell may skip it; dupacks then count cumulatively.
    void on_new_ack();

    double window() const { return state_.w_bytes; }         // w, bytes
    double advertised() const { return state_.awnd_bytes; }  // AWND(t_k), bytes
    bool in_slow_start() const { return state_.slow_start; }
    double mu_hat() const { return state_.mu_hat; }  // bytes/s, 0 until known
    double d_hat() const { return state_.d_hat; }    // seconds, 0 until known
    double last_delta_w() const { return state_.last_delta_w; }
    const client_agent_params& params() const { return params_; }
    const client_agent_state& state() const { return state_; }
    const client_agent_stats& stats() const { return stats_; }
    void reset();

  private:
    void end_slow_start_halving();
    double min_window() const;

    client_agent_params params_;
    client_agent_state state_;
    client_agent_stats stats_;
    // Ring buffer of the last alpha+1 packets (eq. 15 sums s_{k-alpha}..s_k).
    std::vector<time_ns> ring_t_;
    std::vector<std::uint32_t> ring_s_;    // IP bytes, s_i
    std::vector<std::uint32_t> ring_seq_;  // payload bytes of the same packets
    std::size_t ring_head_ = 0;            // index of the oldest entry
    std::size_t ring_count_ = 0;
    std::uint64_t ring_bytes_ = 0;      // sum of ring_s_
    std::uint64_t ring_seq_bytes_ = 0;  // sum of ring_seq_
};

}  // namespace oppsched::clamp
