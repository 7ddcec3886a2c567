#pragma once
// Channel models for the PHY abstraction (and reusable by the GNU Radio channel emulator,
// which evaluates the same gain at symbol rate):
//
//   FadingChannel        interface: complex gain h(t) with E|h|^2 = 1, SNR(t) = SNR_avg |h|^2,
//                        at any t (seconds), or a batch on a regular grid.
//   JakesChannel         the Jakes model exactly as seed 000 (Andrew & Hanly, §V-B) prints
//                        it, G = 20 generators, with per-user random oscillator phases.
//   SumOfSinusoidsChannel the random sum of complex sinusoids of seed 002 (Srinivasan &
//                        Baras, §III-A, eq. 4).
//   ClampLink            seed 000's slot rate rule (eq. 18), its end-of-slot error rule, the
//                        adaptive backoff margin m (stochastic approximation towards the
//                        target loss) and the "n consecutive failed attempts -> drop" rule.
//
// Every random draw comes from std::mt19937_64 seeded by the caller (one seed per user),
// through our own uniform/Gaussian transforms so the draws are identical on every
// standard library. The models are const after construction: evaluating h(t) has no side
// effects, so any t, in any order, from any thread.
#include <complex>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <variant>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::channel {

// 10 log10(4): the paper's SNR_ave = 4 ("= 6 dB"); we keep the exact 4.
constexpr double kClampMeanSnrDb = 6.020599913279624;
constexpr int kClampGenerators = 20;          // G, seed 000 §V-B
constexpr double kClampSlowDopplerHz = 0.6;   // 0.1 m/s at 1.8 GHz
constexpr double kClampFastDopplerHz = 60.0;  // 10 m/s at 1.8 GHz

double db_to_linear(double db);
double linear_to_db(double x);

// The interface every fading model implements (TEST_P contract tests run over all).
class FadingChannel {
  public:
    virtual ~FadingChannel() = default;

    // Complex gain h(t), normalised so that E|h|^2 = 1 over the ensemble of seeds.
    virtual std::complex<double> gain(double t_s) const = 0;
    // h(t0 + i dt) for i = 0..n-1 into out[0..n-1]. Same values as gain() to ~1e-12
    // (a rotating-phasor recurrence, re-anchored exactly every 1024 samples). Cost per
    // sample: one complex multiply per oscillator, no trigonometry.
    virtual void gains(double t0_s, double dt_s, std::size_t n,
                       std::complex<double>* out) const = 0;

    virtual double mean_snr_linear() const = 0;
    virtual double doppler_hz() const = 0;

    // SNR(t) = SNR_avg |h(t)|^2 (linear).
    double snr_linear(double t_s) const { return mean_snr_linear() * std::norm(gain(t_s)); }
    double snr_db(double t_s) const { return linear_to_db(snr_linear(t_s)); }
    std::complex<double> gain_at(time_ns t) const { return gain(to_seconds(t)); }
    double snr_linear_at(time_ns t) const { return snr_linear(to_seconds(t)); }
};

// Seed 000, §V-B:
//   N(t) = SNR_ave | sqrt(2/G) sum_{n=1}^{G} cos(w_n t) exp(j pi n / G) |^2,
//   w_n = 2 pi f_d cos( pi/(2G) (n + 0.5) ).
// This is Dent, Bottomley & Croft's "Jakes fading model revisited" (Electron. Lett.
// 1993) form (N0 = G oscillators, beta_n = pi n / N0), which gets distinct users from
// random oscillator phases theta_n: cos(w_n t + theta_n). The paper does not say how its
// users differ; we draw theta_n ~ U[0, 2 pi) per user (per seed), which makes h(t) a
// zero-mean process with E|h|^2 = 1, autocorrelation (1/G) sum_n cos(w_n tau) ~ J0(2 pi
// f_d tau), and envelope close to Rayleigh (a sum of G independent terms).
//
// The angles: as printed, n = 1..G with (n + 0.5), so the last angle passes pi/2 and
// |w_G| = |w_{G-1}| (one Doppler line twice, the one at angle pi/(4G) missing). Dent et
// al. have (n - 0.5). We reproduce the print by default (angle_offset = 0.5) and offer
// -0.5. The autocorrelations differ by (1/G)[cos(w_d tau sin(pi/4G)) - cos(w_d tau
// cos(pi/4G))] ~ (1 - cos(2 pi f_d tau))/G <= 2/G (0.065 at f_d tau = 0.3); mean power
// and envelope distribution are the same.
//
// Known property of this (and any fixed-frequency) Jakes form: two users share the same
// Doppler lines, so over ONE long run their time-averaged cross-correlation is
// (1/G) sum cos(theta_n - theta'_n) (std 1/sqrt(2G) = 0.16 over user pairs), although it
// is zero over the ensemble. SumOfSinusoidsChannel has no such term (random frequencies).
struct JakesParams {
    double doppler_hz = kClampFastDopplerHz;  // f_d
    double mean_snr_db = kClampMeanSnrDb;     // 10 log10 SNR_ave
    std::uint64_t seed = 1;                   // one per user
    int generators = kClampGenerators;        // G
    double angle_offset = 0.5;                // +0.5 as printed; -0.5 = Dent et al.
    bool random_phases = true;                // false: theta_n = 0, the printed formula
    void validate() const;                    // throws std::invalid_argument
};

// Seed 002, §III-A, eq. 4:
//   h(t) = sum_{j=0}^{K-1} h_j exp(j 2 pi f_d t cos(2 pi phi_j)),
// h_j complex unit-variance Gaussian, phi_j uniform. Two readings we make explicit:
//  - normalisation: as printed E|h|^2 = K, but the paper's SNR C = h^2/sigma^2 against the
//    nominal C_NOM = 1/sigma^2 implies E|h|^2 = 1, so we divide by sqrt(K);
//  - "phi_j uniformly distributed in [0, 2 pi)" inside cos(2 pi phi_j) would wrap the
//    angle 2 pi times; we take the arrival angle 2 pi phi_j uniform on [0, 2 pi), the
//    standard (Clarke) construction, which makes E[h(t+tau) h*(t)] = J0(2 pi f_d tau)
//    exactly and h(t) exactly complex Gaussian (Rayleigh envelope) at every t.
// K is not given in seed 002; default 20, as G in seed 000.
struct SumOfSinusoidsParams {
    double doppler_hz = kClampFastDopplerHz;
    double mean_snr_db = kClampMeanSnrDb;
    std::uint64_t seed = 1;
    int paths = 20;  // K
    void validate() const;
};

class JakesChannel final : public FadingChannel {
  public:
    explicit JakesChannel(const JakesParams& params);
    std::complex<double> gain(double t_s) const override;
    void gains(double t0_s, double dt_s, std::size_t n, std::complex<double>* out) const override;
    double mean_snr_linear() const override { return snr_avg_; }
    double doppler_hz() const override { return params_.doppler_hz; }
    const JakesParams& params() const { return params_; }
    const std::vector<double>& omegas() const { return omega_; }  // w_n, rad/s
    const std::vector<double>& phases() const { return theta_; }  // theta_n, rad

  private:
    JakesParams params_;
    double snr_avg_;
    double scale_;  // sqrt(2/G)
    std::vector<double> omega_, theta_;
    std::vector<std::complex<double>> beta_;  // exp(j pi n / G)
};

class SumOfSinusoidsChannel final : public FadingChannel {
  public:
    explicit SumOfSinusoidsChannel(const SumOfSinusoidsParams& params);
    std::complex<double> gain(double t_s) const override;
    void gains(double t0_s, double dt_s, std::size_t n, std::complex<double>* out) const override;
    double mean_snr_linear() const override { return snr_avg_; }
    double doppler_hz() const override { return params_.doppler_hz; }
    const SumOfSinusoidsParams& params() const { return params_; }

  private:
    SumOfSinusoidsParams params_;
    double snr_avg_;
    std::vector<double> omega_;              // 2 pi f_d cos(angle_j), rad/s
    std::vector<std::complex<double>> amp_;  // h_j / sqrt(K)
};

using FadingConfig = std::variant<JakesParams, SumOfSinusoidsParams>;
// Validates and builds the model the configuration names.
std::unique_ptr<FadingChannel> make_fading(const FadingConfig& config);

// ---------------------------------------------------------------------------------------
// Seed 000 §V-B: slot rate rule, error rule and adaptive backoff margin.

constexpr int kClampAttemptsSlowFading = 5;   // n, 0.6 Hz (§V-D)
constexpr int kClampAttemptsFastFading = 15;  // n, 60 Hz (§V-D)

// What the margin's stochastic approximation drives to target_loss.
enum class MarginScope {
    // The paper: "m is ... adaptively tuned such that the packet error rate after
    // retransmissions is approximately a target": one observation per transmission that
    // is resolved, success (0) or the n-th consecutive failure, i.e. a drop (1).
    after_retransmissions,
    // OLLA style: one observation per attempt, NACK (1) or ACK (0).
    per_attempt,
};

struct ClampLinkParams {
    double slot_s = 3e-3;                         // tau_slot
    double w0_hz = 4.3e6;                         // W0
    double cmax_bps = 10e6;                       // C_max
    double target_loss = 1e-3;                    // the nominal packet loss rate (Table I)
    int max_attempts = kClampAttemptsSlowFading;  // n
    MarginScope scope = MarginScope::after_retransmissions;
    // Stochastic approximation (Robbins-Monro, constant gain so it keeps tracking):
    //   m <- clamp(m + margin_step (e - target_loss), margin_min, margin_max),
    // e = 1 on a loss event, 0 on a success: up margin_step (1 - target) on a loss, down
    // margin_step target on a success, the OLLA step ratio target/(1 - target). Its fixed
    // point is P(loss | m) = target. margin_step = 0 freezes m at margin_init.
    double margin_init = 0.0;
    double margin_step = 0.01;
    double margin_min = 0.0;
    double margin_max = 0.99;  // < 1: (1 - m) N must stay > 0

    // The paper's two rate cases (§V-D and §V-J): W0 = 4.3 MHz, C_max = 10 Mb/s, and
    // W0 = 620 kHz, C_max = 1.44 Mb/s. Note C_max = W0 log2(1 + SNR_ave) in both
    // (4.3e6 log2 5 = 9.98e6, 620e3 log2 5 = 1.44e6): the rate saturates at the mean
    // SNR's capacity, which is what identifies eq. 18's log as log2 (Shannon).
    static ClampLinkParams high_rate(int max_attempts = kClampAttemptsSlowFading);
    static ClampLinkParams low_rate(int max_attempts = kClampAttemptsSlowFading);

    void validate() const;  // throws std::invalid_argument naming the field
};

enum class SlotOutcome {
    delivered,  // the attempt succeeded
    retry,      // it failed; fewer than n consecutive failures so far: try again
    dropped,    // the n-th consecutive failure: drop what it would have completed
};
const char* to_string(SlotOutcome o);

struct ClampLinkState {
    double margin = 0.0;           // m
    int consecutive_failures = 0;  // towards this destination
};

struct ClampLinkStats {
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
class ClampLink final {
  public:
    explicit ClampLink(const ClampLinkParams& params = {});

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
    SlotOutcome on_feedback(bool success);

    // Convenience for the abstract PHY: rate at slot start, error at slot end, feedback.
    struct Attempt {
        double bits;
        bool error;
        SlotOutcome outcome;
    };
    Attempt transmit(double snr_start, double snr_end);

    double margin() const { return state_.margin; }
    const ClampLinkParams& params() const { return params_; }
    const ClampLinkState& state() const { return state_; }
    const ClampLinkStats& stats() const { return stats_; }
    void reset();

  private:
    void observe(double e);

    ClampLinkParams params_;
    ClampLinkState state_;
    ClampLinkStats stats_;
};

}  // namespace oppsched::channel
