#pragma once
// Fading models, shared by the MAC's abstract PHY (tools/, through the bindings) and the
// GNU Radio channel emulator, which evaluates the same gain at symbol rate:
//
//   fading_channel         interface: complex gain h(t) with E|h|^2 = 1, SNR(t) = SNR_avg |h|^2,
//                         at any t (seconds), or a batch on a regular grid.
//   jakes_channel          the Jakes model as Andrew & Hanly, CLAMP, §V-B print it, G = 20
//                         generators, with per-user random oscillator phases.
//   sum_of_sinusoids_channel the random sum of complex sinusoids of Srinivasan & Baras, §III-A,
//                         eq. 4.
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
constexpr int kClampGenerators = 20;          // G, Andrew & Hanly, CLAMP, §V-B
constexpr double kClampSlowDopplerHz = 0.6;   // 0.1 m/s at 1.8 GHz
constexpr double kClampFastDopplerHz = 60.0;  // 10 m/s at 1.8 GHz

double db_to_linear(double db);
double linear_to_db(double x);

// The interface every fading model implements (TEST_P contract tests run over all).
class fading_channel {
  public:
    virtual ~fading_channel() = default;

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

// Andrew & Hanly, CLAMP, §V-B:
//   N(t) = SNR_ave | sqrt(2/G) sum_{n=1}^{G} cos(w_n t) exp(j pi n / G) |^2,
//   w_n = 2 pi f_d cos( pi/(2G) (n + 0.5) ),
// in Dent, Bottomley & Croft's form (1993), users told apart by random oscillator phases
// theta_n ~ U[0, 2 pi) drawn from the seed. The printed angle offset (+0.5) is the
// default; Dent et al.'s -0.5 is offered. docs/mac.md ("Fading models") gives the
// derivation, the difference between the two offsets and the cross-correlation two users
// keep over one long run.
struct jakes_params {
    double doppler_hz = kClampFastDopplerHz;  // f_d
    double mean_snr_db = kClampMeanSnrDb;     // 10 log10 SNR_ave
    std::uint64_t seed = 1;                   // one per user
    int generators = kClampGenerators;        // G
    double angle_offset = 0.5;                // +0.5 as printed; -0.5 = Dent et al.
    bool random_phases = true;                // false: theta_n = 0, the printed formula
    void validate() const;                    // throws std::invalid_argument
};

// Srinivasan & Baras, §III-A, eq. 4:
//   h(t) = sum_{j=0}^{K-1} h_j exp(j 2 pi f_d t cos(2 pi phi_j)),
// h_j complex unit-variance Gaussian, divided by sqrt(K) so that E|h|^2 = 1, and the arrival
// angle 2 pi phi_j uniform on [0, 2 pi) (Clarke): h(t) is exactly complex Gaussian with
// autocorrelation J0(2 pi f_d tau). K is not given in the paper; the default is 20, as G in
// Andrew & Hanly. docs/mac.md ("Fading models") says why these two readings.
struct sum_of_sinusoids_params {
    double doppler_hz = kClampFastDopplerHz;
    double mean_snr_db = kClampMeanSnrDb;
    std::uint64_t seed = 1;
    int paths = 20;  // K
    void validate() const;
};

class jakes_channel final : public fading_channel {
  public:
    explicit jakes_channel(const jakes_params& params);
    std::complex<double> gain(double t_s) const override;
    void gains(double t0_s, double dt_s, std::size_t n, std::complex<double>* out) const override;
    double mean_snr_linear() const override { return snr_avg_; }
    double doppler_hz() const override { return params_.doppler_hz; }
    const jakes_params& params() const { return params_; }
    const std::vector<double>& omegas() const { return omega_; }  // w_n, rad/s
    const std::vector<double>& phases() const { return theta_; }  // theta_n, rad

  private:
    jakes_params params_;
    double snr_avg_;
    double scale_;  // sqrt(2/G)
    std::vector<double> omega_, theta_;
    std::vector<std::complex<double>> beta_;  // exp(j pi n / G)
};

class sum_of_sinusoids_channel final : public fading_channel {
  public:
    explicit sum_of_sinusoids_channel(const sum_of_sinusoids_params& params);
    std::complex<double> gain(double t_s) const override;
    void gains(double t0_s, double dt_s, std::size_t n, std::complex<double>* out) const override;
    double mean_snr_linear() const override { return snr_avg_; }
    double doppler_hz() const override { return params_.doppler_hz; }
    const sum_of_sinusoids_params& params() const { return params_; }

  private:
    sum_of_sinusoids_params params_;
    double snr_avg_;
    std::vector<double> omega_;              // 2 pi f_d cos(angle_j), rad/s
    std::vector<std::complex<double>> amp_;  // h_j / sqrt(K)
};

using fading_params = std::variant<jakes_params, sum_of_sinusoids_params>;
// Validates and builds the model the configuration names.
std::unique_ptr<fading_channel> make_fading(const fading_params& config);

}  // namespace oppsched::channel
