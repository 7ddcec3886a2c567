// Fading models (Andrew & Hanly, CLAMP, §V-B Jakes; Srinivasan & Baras, §III-A, eq. 4).
// See fading.h.
#include "oppsched/fading.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "oppsched/validation.h"

namespace oppsched::channel {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kTwoPi = 2.0 * kPi;
// The batch recurrence is re-anchored with exact trigonometry this often.
constexpr std::size_t kReanchorEvery = 1024;

// Uniform on [0, 1) from the top 53 bits: the same on every standard library (the
// std:: distributions' algorithms are implementation-defined).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// A pair of independent standard normals (Box-Muller), portable for the same reason.
std::pair<double, double> normal_pair(std::mt19937_64& rng) {
    const double u1 = 1.0 - uniform01(rng);  // (0, 1]: log() finite
    const double u2 = uniform01(rng);
    const double r = std::sqrt(-2.0 * std::log(u1));
    return {r * std::cos(kTwoPi * u2), r * std::sin(kTwoPi * u2)};
}

void check_common(const char* prefix_doppler, double doppler_hz, const char* prefix_snr,
                  double mean_snr_db) {
    if (!std::isfinite(doppler_hz) || doppler_hz < 0.0)
        throw_invalid(prefix_doppler, doppler_hz, "not in [0, inf) Hz");
    if (!std::isfinite(mean_snr_db) || mean_snr_db < -100.0 || mean_snr_db > 100.0)
        throw_invalid(prefix_snr, mean_snr_db, "not in [-100, 100] dB");
}

}  // namespace

double db_to_linear(double db) { return std::pow(10.0, db / 10.0); }
double linear_to_db(double x) { return 10.0 * std::log10(x); }

// ---------------------------------------------------------------------------------------
// jakes_channel (Andrew & Hanly, CLAMP)

void jakes_params::validate() const {
    check_common("channel.jakes.doppler_hz", doppler_hz, "channel.jakes.mean_snr_db", mean_snr_db);
    if (generators < 1 || generators > 4096)
        throw_invalid("channel.jakes.generators", generators, "not in [1, 4096]");
    if (!std::isfinite(angle_offset) || angle_offset < -1.0 || angle_offset > 1.0)
        throw_invalid("channel.jakes.angle_offset", angle_offset, "not in [-1, 1]");
}

jakes_channel::jakes_channel(const jakes_params& params) : params_(params) {
    params_.validate();
    snr_avg_ = db_to_linear(params_.mean_snr_db);
    const int g = params_.generators;
    scale_ = std::sqrt(2.0 / g);
    omega_.resize(g);
    theta_.assign(g, 0.0);
    beta_.resize(g);
    std::mt19937_64 rng(params_.seed);
    for (int i = 0; i < g; ++i) {
        const int n = i + 1;  // the paper's n = 1..G
        // w_n = 2 pi f_d cos(pi/(2G) (n + 0.5)), as printed (see fading.h on the offset).
        omega_[i] =
            kTwoPi * params_.doppler_hz * std::cos(kPi / (2.0 * g) * (n + params_.angle_offset));
        // exp(j pi n / G): Dent et al.'s beta_n = pi n / N0, which gives the in-phase and
        // quadrature parts equal power and no cross-correlation.
        beta_[i] = std::polar(1.0, kPi * n / g);
        if (params_.random_phases) theta_[i] = kTwoPi * uniform01(rng);
    }
}

std::complex<double> jakes_channel::gain(double t_s) const {
    std::complex<double> acc{0.0, 0.0};
    for (std::size_t i = 0; i < omega_.size(); ++i)
        acc += std::cos(omega_[i] * t_s + theta_[i]) * beta_[i];
    return scale_ * acc;
}

void jakes_channel::gains(double t0_s, double dt_s, std::size_t n,
                          std::complex<double>* out) const {
    const std::size_t g = omega_.size();
    std::vector<std::complex<double>> u(g), step(g);
    for (std::size_t k = 0; k < g; ++k) step[k] = std::polar(1.0, omega_[k] * dt_s);
    for (std::size_t i = 0; i < n; ++i) {
        if (i % kReanchorEvery == 0) {
            const double t = t0_s + static_cast<double>(i) * dt_s;
            for (std::size_t k = 0; k < g; ++k) u[k] = std::polar(1.0, omega_[k] * t + theta_[k]);
        }
        std::complex<double> acc{0.0, 0.0};
        for (std::size_t k = 0; k < g; ++k) {
            acc += u[k].real() * beta_[k];  // cos(w_k t + theta_k) exp(j pi k / G)
            u[k] *= step[k];
        }
        out[i] = scale_ * acc;
    }
}

// ---------------------------------------------------------------------------------------
// sum_of_sinusoids_channel (Srinivasan & Baras)

void sum_of_sinusoids_params::validate() const {
    check_common("channel.sos.doppler_hz", doppler_hz, "channel.sos.mean_snr_db", mean_snr_db);
    if (paths < 1 || paths > 4096) throw_invalid("channel.sos.paths", paths, "not in [1, 4096]");
}

sum_of_sinusoids_channel::sum_of_sinusoids_channel(const sum_of_sinusoids_params& params)
    : params_(params) {
    params_.validate();
    snr_avg_ = db_to_linear(params_.mean_snr_db);
    const int k = params_.paths;
    omega_.resize(k);
    amp_.resize(k);
    std::mt19937_64 rng(params_.seed);
    const double norm = 1.0 / std::sqrt(2.0 * k);  // CN(0, 1) parts have variance 1/2; / sqrt(K)
    for (int j = 0; j < k; ++j) {
        const auto [x, y] = normal_pair(rng);
        amp_[j] = {x * norm, y * norm};
        omega_[j] = kTwoPi * params_.doppler_hz * std::cos(kTwoPi * uniform01(rng));
    }
}

std::complex<double> sum_of_sinusoids_channel::gain(double t_s) const {
    std::complex<double> acc{0.0, 0.0};
    for (std::size_t j = 0; j < omega_.size(); ++j)
        acc += amp_[j] * std::polar(1.0, omega_[j] * t_s);
    return acc;
}

void sum_of_sinusoids_channel::gains(double t0_s, double dt_s, std::size_t n,
                                     std::complex<double>* out) const {
    const std::size_t k = omega_.size();
    std::vector<std::complex<double>> u(k), step(k);
    for (std::size_t j = 0; j < k; ++j) step[j] = std::polar(1.0, omega_[j] * dt_s);
    for (std::size_t i = 0; i < n; ++i) {
        if (i % kReanchorEvery == 0) {
            const double t = t0_s + static_cast<double>(i) * dt_s;
            for (std::size_t j = 0; j < k; ++j) u[j] = amp_[j] * std::polar(1.0, omega_[j] * t);
        }
        std::complex<double> acc{0.0, 0.0};
        for (std::size_t j = 0; j < k; ++j) {
            acc += u[j];
            u[j] *= step[j];
        }
        out[i] = acc;
    }
}

std::unique_ptr<fading_channel> make_fading(const fading_params& config) {
    struct visitor {
        std::unique_ptr<fading_channel> operator()(const jakes_params& p) const {
            return std::make_unique<jakes_channel>(p);
        }
        std::unique_ptr<fading_channel> operator()(const sum_of_sinusoids_params& p) const {
            return std::make_unique<sum_of_sinusoids_channel>(p);
        }
    };
    return std::visit(visitor{}, config);
}

}  // namespace oppsched::channel
