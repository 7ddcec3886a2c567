#pragma once
// The paper's link model for the abstract PHY (Andrew & Hanly, CLAMP, §V-B): the slot rate
// rule of eq. 18, the end-of-slot error rule, the adaptive backoff margin m (a stochastic
// approximation towards the target loss) and the "n consecutive failed attempts -> drop"
// rule. The fading that feeds it is in oppsched/fading.h.
#include <cstdint>

namespace oppsched::channel {

// ---------------------------------------------------------------------------------------
// Andrew & Hanly, CLAMP, §V-B: slot rate rule, error rule and adaptive backoff margin.

constexpr int kClampAttemptsSlowFading = 5;   // n, 0.6 Hz (§V-D)
constexpr int kClampAttemptsFastFading = 15;  // n, 60 Hz (§V-D)
// The margin's default floor: (1 - m) N at most 10 N, 10 dB above the SNR at the slot's start.
constexpr double kClampMarginMin = -9.0;
constexpr double kClampMarginFloor = -1000.0;  // the lowest margin_min accepted

// What the margin's stochastic approximation drives to target_loss.
enum class margin_scope {
    // The paper: "m is ... adaptively tuned such that the packet error rate after
    // retransmissions is approximately a target": one observation per transmission that
    // is resolved, success (0) or the n-th consecutive failure, i.e. a drop (1).
    after_retransmissions,
    // OLLA style: one observation per attempt, NACK (1) or ACK (0).
    per_attempt,
};

struct clamp_link_params {
    double slot_s = 3e-3;                         // tau_slot
    double w0_hz = 4.3e6;                         // W0
    double cmax_bps = 10e6;                       // C_max
    double target_loss = 1e-3;                    // the nominal packet loss rate (Table I)
    int max_attempts = kClampAttemptsSlowFading;  // n
    margin_scope scope = margin_scope::after_retransmissions;
    // Stochastic approximation (Robbins-Monro, constant gain so it keeps tracking):
    //   m <- clamp(m + margin_step (e - target_loss), margin_min, margin_max),
    // e = 1 on a loss event, 0 on a success: up margin_step (1 - target) on a loss, down
    // margin_step target on a success, the OLLA step ratio target/(1 - target). Its fixed
    // point is P(loss | m) = target. margin_step = 0 freezes m at margin_init.
    // m < 0 is allowed (eq. 18 does not bound it): (1 - m) N > N, a rate above what the SNR
    // at the slot's start supports, where the channel is better than the target needs (fast
    // fading with 15 attempts: at m = 0 the loss after retransmissions is far below 1e-3,
    // and the target is reached only by backing off less than nothing). margin_min = 0 is the
    // reading that never goes above the SNR (kept as an option).
    double margin_init = 0.0;
    double margin_step = 0.01;
    double margin_min = kClampMarginMin;
    double margin_max = 0.99;  // < 1: (1 - m) N must stay > 0

    // The paper's two rate cases (§V-D and §V-J): W0 = 4.3 MHz, C_max = 10 Mb/s, and
    // W0 = 620 kHz, C_max = 1.44 Mb/s. Note C_max = W0 log2(1 + SNR_ave) in both
    // (4.3e6 log2 5 = 9.98e6, 620e3 log2 5 = 1.44e6): the rate saturates at the mean
    // SNR's capacity, which is what identifies eq. 18's log as log2 (Shannon).
    static clamp_link_params high_rate(int max_attempts = kClampAttemptsSlowFading);
    static clamp_link_params low_rate(int max_attempts = kClampAttemptsSlowFading);

    void validate() const;  // throws std::invalid_argument naming the field
};

enum class slot_outcome {
    delivered,  // the attempt succeeded
    retry,      // it failed; fewer than n consecutive failures so far: try again
    dropped,    // the n-th consecutive failure: drop what it would have completed
};
const char* to_string(slot_outcome o);

struct clamp_link_state {
    double margin = 0.0;           // m
    int consecutive_failures = 0;  // towards this destination
};

struct clamp_link_stats {
    std::uint64_t attempts = 0;
    std::uint64_t errors = 0;  // failed attempts
    std::uint64_t delivered = 0;
    std::uint64_t dropped = 0;
    std::uint64_t capped = 0;  // attempts whose rate was C_max
    double bits_delivered = 0.0;
    double loss_rate() const {  // dropped / resolved transmissions
        const auto n = delivered + dropped;
        return n ? static_cast<double>(dropped) / static_cast<double>(n) : 0.0;
    }
    double error_rate() const {  // failed / all attempts
        return attempts ? static_cast<double>(errors) / static_cast<double>(attempts) : 0.0;
    }
};

// One per destination (the margin and the failure count are per user). O(1), one log2
// per rate or error evaluation.
class clamp_link final {
  public:
    explicit clamp_link(const clamp_link_params& params = {});

    // Eq. 18 rate in bits/s for start-of-slot SNR N(s) (linear), with the current m:
    //   min(W0 log2(1 + (1 - m) N(s)), C_max). Never above C_max.
    double rate_bps(double snr_start) const;
    // Eq. 18: B(s) = tau_slot min(W0 log2(1 + (1 - m) N(s)), C_max), bits.
    double rate_bits(double snr_start) const { return params_.slot_s * rate_bps(snr_start); }
    // What the end-of-slot SNR N(e) carries: tau_slot W0 log2(1 + N(e)), bits (no cap, no
    // margin, as printed).
    double capacity_bits(double snr_end) const;
    // The error rule: B(s) > tau_slot W0 log2(1 + N(e)).
    bool is_error(double bits, double snr_end) const { return bits > capacity_bits(snr_end); }

    // ACK/NACK of one attempt: counts consecutive failures (n of them drop the data and
    // reset the count), and moves m as `scope` says.
    slot_outcome on_feedback(bool success);

    // One observation of the margin's stochastic approximation, for a caller that keeps its
    // own attempt count (the AP's HARQ, ap_core's link_mode::paper): loss = the event m is
    // tuned against (a drop after n attempts with scope after_retransmissions, a failed
    // attempt with per_attempt); false = a success. Moves m only, no counters.
    void adapt(bool loss) { observe(loss ? 1.0 : 0.0); }

    // Convenience for the abstract PHY: rate at slot start, error at slot end, feedback.
    struct attempt {
        double bits;
        bool error;
        slot_outcome outcome;
    };
    attempt transmit(double snr_start, double snr_end);

    double margin() const { return state_.margin; }
    const clamp_link_params& params() const { return params_; }
    const clamp_link_state& state() const { return state_; }
    const clamp_link_stats& stats() const { return stats_; }
    void reset();

  private:
    void observe(double e);

    clamp_link_params params_;
    clamp_link_state state_;
    clamp_link_stats stats_;
};

}  // namespace oppsched::channel
