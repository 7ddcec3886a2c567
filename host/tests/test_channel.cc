// Tests for the fading models (Andrew & Hanly, CLAMP, §V-B Jakes, Srinivasan & Baras, eq. 4) and
// the CLAMP slot error model (Andrew & Hanly, CLAMP, §V-B eq. 18, adaptive backoff margin).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "error_of.h"
#include "oppsched/clamp_link.h"
#include "oppsched/fading.h"

using namespace oppsched;
using namespace oppsched::channel;

namespace {

constexpr double kPi = 3.14159265358979323846;
using cd = std::complex<double>;

// --------------------------------------------------------------------------------------
// Contract tests over every fading_channel implementation.

struct model_case {
    const char* name;
    std::function<fading_params(std::uint64_t seed, double fd)> make;
    // The model's exact ensemble autocorrelation E[h(t+tau) h*(t)] (real part).
    std::function<double(double fd, double tau)> autocorr;
    // How far that may be from J0(2 pi f_d tau), as a function of f_d tau.
    std::function<double(double fd_tau)> j0_tolerance;
};
void PrintTo(const model_case& m, std::ostream* os) { *os << m.name; }

double bessel_j0(double x) { return std::cyl_bessel_j(0.0, x); }

double jakes_autocorr(double fd, double tau, double offset) {
    // (1/G) sum_n cos(w_n tau): theta_n independent uniform, the cross terms vanish.
    const int g = kClampGenerators;
    double s = 0;
    for (int n = 1; n <= g; ++n)
        s += std::cos(2 * kPi * fd * std::cos(kPi / (2.0 * g) * (n + offset)) * tau);
    return s / g;
}

const model_case kModels[] = {
    {"jakes_as_printed",
     [](std::uint64_t seed, double fd) {
         jakes_params p;
         p.seed = seed;
         p.doppler_hz = fd;
         return fading_params{p};
     },
     [](double fd, double tau) { return jakes_autocorr(fd, tau, 0.5); },
     // As printed, the angle set is the midpoint rule's with the line at pi/(4G) replaced
     // by a second copy of its mirror near pi/2: an error of (1 - cos(2 pi f_d tau))/G.
     [](double fd_tau) { return (1 - std::cos(2 * kPi * fd_tau)) / kClampGenerators + 0.005; }},
    {"jakes_dent",
     [](std::uint64_t seed, double fd) {
         jakes_params p;
         p.seed = seed;
         p.doppler_hz = fd;
         p.angle_offset = -0.5;
         return fading_params{p};
     },
     [](double fd, double tau) { return jakes_autocorr(fd, tau, -0.5); },
     [](double) { return 0.005; }},  // the midpoint rule for J0's integral: ~exact
    {"sum_of_sinusoids",
     [](std::uint64_t seed, double fd) {
         sum_of_sinusoids_params p;
         p.seed = seed;
         p.doppler_hz = fd;
         return fading_params{p};
     },
     [](double fd, double tau) { return bessel_j0(2 * kPi * fd * tau); },
     [](double) { return 0.0; }},  // exact
};

class fading_contract : public ::testing::TestWithParam<model_case> {
  protected:
    std::unique_ptr<fading_channel> make(std::uint64_t seed, double fd = 60.0) const {
        return make_fading(GetParam().make(seed, fd));
    }
    // Ensemble samples: `seeds` users, `per_seed` times 37 ms apart (> 2 coherence times at
    // 60 Hz), starting at a seed-dependent offset.
    std::vector<cd> ensemble(int seeds, int per_seed, std::uint64_t first_seed = 1) const {
        std::vector<cd> out;
        for (int s = 0; s < seeds; ++s) {
            auto ch = make(first_seed + s);
            for (int i = 0; i < per_seed; ++i) out.push_back(ch->gain(0.0123 * s + 0.037 * i));
        }
        return out;
    }
};

}  // namespace

TEST_P(fading_contract, mean_power_is_one) {
    const auto h = ensemble(400, 50);
    double p = 0;
    for (const cd& x : h) p += std::norm(x);
    p /= h.size();
    // 20 000 samples of an exponential(1) power: std 0.007; tolerance 0.03.
    EXPECT_NEAR(p, 1.0, 0.03);
}

TEST_P(fading_contract, in_phase_and_quadrature_have_equal_power_and_zero_mean) {
    const auto h = ensemble(400, 50);
    double re2 = 0, im2 = 0, re = 0, im = 0, reim = 0;
    for (const cd& x : h) {
        re += x.real();
        im += x.imag();
        re2 += x.real() * x.real();
        im2 += x.imag() * x.imag();
        reim += x.real() * x.imag();
    }
    const double n = h.size();
    EXPECT_NEAR(re / n, 0.0, 0.02);
    EXPECT_NEAR(im / n, 0.0, 0.02);
    EXPECT_NEAR(re2 / n, 0.5, 0.02);
    EXPECT_NEAR(im2 / n, 0.5, 0.02);
    EXPECT_NEAR(reim / n, 0.0, 0.02);
}

TEST_P(fading_contract, envelope_is_close_to_rayleigh) {
    auto h = ensemble(400, 50);
    std::vector<double> r;
    for (const cd& x : h) r.push_back(std::abs(x));
    std::sort(r.begin(), r.end());
    double d = 0;
    const double n = r.size();
    for (std::size_t i = 0; i < r.size(); ++i) {
        const double f = 1.0 - std::exp(-r[i] * r[i]);  // Rayleigh CDF, E r^2 = 1
        d = std::max({d, std::abs(f - i / n), std::abs(f - (i + 1) / n)});
    }
    // Kolmogorov-Smirnov distance; the 1% critical value for n = 20 000 is 0.0115, the
    // sum-of-20 approximation of a Gaussian adds a little. Bound: 0.02.
    EXPECT_LT(d, 0.02);
    // Deep fades exist at the Rayleigh rate: P(|h|^2 < 0.1) = 1 - e^{-0.1} = 0.095.
    const double deep = std::count_if(r.begin(), r.end(), [](double x) { return x * x < 0.1; }) / n;
    EXPECT_NEAR(deep, 1 - std::exp(-0.1), 0.015);
}

TEST_P(fading_contract, autocorrelation_follows_the_model_and_j0) {
    const double fd = 60.0;
    const int seeds = 1000, per_seed = 20;
    // f_d tau = 0.05 .. 0.3: inside the first lobe, where the PHY's slot-to-slot
    // prediction lives (one 3 ms slot at 60 Hz is f_d tau = 0.18).
    for (double fd_tau : {0.05, 0.1, 0.18, 0.3}) {
        const double tau = fd_tau / fd;
        cd acc{0, 0};
        for (int s = 0; s < seeds; ++s) {
            auto ch = make(1000 + s, fd);
            for (int i = 0; i < per_seed; ++i) {
                const double t = 0.0311 * i + 0.0007 * s;
                acc += ch->gain(t + tau) * std::conj(ch->gain(t));
            }
        }
        acc /= static_cast<double>(seeds * per_seed);
        const double model = GetParam().autocorr(fd, tau);
        const double bessel = bessel_j0(2 * kPi * fd_tau);
        // Sampling noise over 20 000 products: std ~0.007. Model: 0.025.
        EXPECT_NEAR(acc.real(), model, 0.025) << "f_d tau " << fd_tau;
        EXPECT_NEAR(acc.imag(), 0.0, 0.025) << "f_d tau " << fd_tau;
        // The model's own autocorrelation against J0(2 pi f_d tau): exact for the sum of
        // sinusoids; a G = 20 quadrature of J0's integral for Jakes (the printed angles
        // are off by one step: see fading.h), and the measured one against J0 too.
        const double tol = GetParam().j0_tolerance(fd_tau);
        EXPECT_NEAR(model, bessel, tol + 1e-12) << "f_d tau " << fd_tau;
        EXPECT_NEAR(acc.real(), bessel, tol + 0.025) << "f_d tau " << fd_tau;
    }
}

TEST_P(fading_contract, users_with_different_seeds_are_uncorrelated) {
    cd cross{0, 0};
    double p1 = 0, p2 = 0, p12 = 0;
    const int pairs = 1000, per_pair = 20;
    for (int s = 0; s < pairs; ++s) {
        auto a = make(2 * s + 1);
        auto b = make(2 * s + 2);  // adjacent seeds: the usual per-user seeding
        for (int i = 0; i < per_pair; ++i) {
            const double t = 0.041 * i + 0.003 * s;
            const cd ha = a->gain(t), hb = b->gain(t);
            cross += ha * std::conj(hb);
            p1 += std::norm(ha);
            p2 += std::norm(hb);
            p12 += std::norm(ha) * std::norm(hb);
        }
    }
    const double n = pairs * per_pair;
    EXPECT_LT(std::abs(cross / n), 0.03);
    // Power covariance E[|ha|^2 |hb|^2] - E|ha|^2 E|hb|^2 (1 if fully correlated).
    EXPECT_NEAR(p12 / n - (p1 / n) * (p2 / n), 0.0, 0.05);
}

TEST_P(fading_contract, same_seed_gives_the_same_channel_and_another_seed_does_not) {
    auto a = make(42), b = make(42), c = make(43);
    int differ = 0;
    for (int i = 0; i < 100; ++i) {
        const double t = 0.003 * i;
        EXPECT_EQ(a->gain(t), b->gain(t));
        if (a->gain(t) != c->gain(t)) ++differ;
    }
    EXPECT_EQ(differ, 100);
}

TEST_P(fading_contract, batch_matches_pointwise_evaluation) {
    auto ch = make(5);
    const std::size_t n = 3000;                    // crosses two re-anchoring points
    const double t0 = 12.345, dt = 1.0 / 12500.0;  // symbol rate of the 1 Msps loopback
    std::vector<cd> out(n);
    ch->gains(t0, dt, n, out.data());
    for (std::size_t i = 0; i < n; ++i)
        ASSERT_LT(std::abs(out[i] - ch->gain(t0 + i * dt)), 1e-10) << i;
}

TEST_P(fading_contract, snr_is_mean_snr_times_power_gain) {
    auto ch = make(9);
    EXPECT_NEAR(ch->mean_snr_linear(), 4.0, 1e-12);  // 6.02 dB: the paper's SNR_ave = 4
    for (double t : {0.0, 0.5, 17.25}) {
        EXPECT_NEAR(ch->snr_linear(t), 4.0 * std::norm(ch->gain(t)), 1e-12);
        EXPECT_NEAR(ch->snr_db(t), 10 * std::log10(ch->snr_linear(t)), 1e-9);
    }
    EXPECT_EQ(ch->gain_at(from_seconds(0.5)), ch->gain(0.5));
}

TEST_P(fading_contract, slow_fading_barely_moves_within_a_slot_and_fast_fading_does) {
    // Relative change of |h|^2 over one 3 ms slot, median over many slots.
    auto median_change = [&](double fd) {
        auto ch = make(77, fd);
        std::vector<double> c;
        for (int i = 0; i < 4000; ++i) {
            const double t = 0.0173 * i;
            const double a = std::norm(ch->gain(t)), b = std::norm(ch->gain(t + 3e-3));
            c.push_back(std::abs(b - a) / a);
        }
        std::nth_element(c.begin(), c.begin() + c.size() / 2, c.end());
        return c[c.size() / 2];
    };
    EXPECT_LT(median_change(0.6), 0.02);
    EXPECT_GT(median_change(60.0), 0.2);
}

INSTANTIATE_TEST_SUITE_P(Models, fading_contract, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<model_case>& i) {
                             return std::string(i.param.name);
                         });

// --------------------------------------------------------------------------------------
// Model-specific

TEST(jakes_channel, without_random_phases_it_is_the_printed_formula) {
    // N(t) = SNR_ave |sqrt(2/G) sum_{n=1}^{G} cos(w_n t) exp(j pi n/G)|^2,
    // w_n = 2 pi f_d cos(pi/(2G)(n + 0.5)), G = 20 (Andrew & Hanly, CLAMP, §V-B).
    jakes_params p;
    p.random_phases = false;
    p.doppler_hz = 60.0;
    jakes_channel ch(p);
    for (double t : {0.0, 0.001, 0.0173, 1.5}) {
        cd sum{0, 0};
        for (int n = 1; n <= 20; ++n) {
            const double w = 2 * kPi * 60.0 * std::cos(kPi / 40.0 * (n + 0.5));
            sum += std::cos(w * t) * std::exp(cd(0, kPi * n / 20.0));
        }
        const double snr = 4.0 * std::norm(std::sqrt(2.0 / 20) * sum);
        EXPECT_NEAR(ch.snr_linear(t), snr, 1e-9 * snr + 1e-12) << t;
    }
}

TEST(jakes_channel, doppler_lines_are_as_printed_and_distinct_users_share_them) {
    jakes_params p;
    p.doppler_hz = 0.6;
    jakes_channel a(p);
    p.seed = 2;
    jakes_channel b(p);
    ASSERT_EQ(a.omegas().size(), 20u);
    EXPECT_NEAR(a.omegas()[0], 2 * kPi * 0.6 * std::cos(1.5 * kPi / 40), 1e-12);
    EXPECT_NEAR(a.omegas()[19], 2 * kPi * 0.6 * std::cos(20.5 * kPi / 40), 1e-12);
    // As printed, the last line is the mirror of the one before it: |w_20| = |w_19|.
    EXPECT_NEAR(std::abs(a.omegas()[19]), std::abs(a.omegas()[18]), 1e-12);
    EXPECT_EQ(a.omegas(), b.omegas());
    EXPECT_NE(a.phases(), b.phases());
    for (double th : a.phases()) {
        EXPECT_GE(th, 0.0);
        EXPECT_LT(th, 2 * kPi);
    }
}

TEST(jakes_channel, time_averaged_cross_correlation_of_two_users_is_the_phase_term) {
    // The known property of a fixed-frequency Jakes model (fading.h): over one long run,
    // two users' time-averaged h_a h_b* tends to (1/G) sum_n cos(theta_n - theta'_n)
    // (not 0), here checked against that closed form.
    jakes_params p;
    p.doppler_hz = 60.0;
    p.angle_offset = -0.5;  // distinct lines, so the closed form is exact
    jakes_channel a(p);
    p.seed = 2;
    jakes_channel b(p);
    cd acc{0, 0};
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
        const double t = 0.00731 * i;
        acc += a.gain(t) * std::conj(b.gain(t));
    }
    acc /= static_cast<double>(n);
    double expected = 0;
    for (int k = 0; k < 20; ++k) expected += std::cos(a.phases()[k] - b.phases()[k]);
    expected /= 20;
    EXPECT_NEAR(acc.real(), expected, 0.01);
    EXPECT_NEAR(acc.imag(), 0.0, 0.01);
}

TEST(sum_of_sinusoids_channel, two_users_are_uncorrelated_over_one_long_run) {
    sum_of_sinusoids_params p;
    p.doppler_hz = 60.0;
    sum_of_sinusoids_channel a(p);
    p.seed = 2;
    sum_of_sinusoids_channel b(p);
    cd acc{0, 0};
    double pa = 0, pb = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
        const double t = 0.00731 * i;
        const cd ha = a.gain(t), hb = b.gain(t);
        acc += ha * std::conj(hb);
        pa += std::norm(ha);
        pb += std::norm(hb);
    }
    // Normalised time-averaged cross-correlation; random Doppler lines do not line up.
    EXPECT_LT(std::abs(acc) / std::sqrt(pa * pb), 0.02);
}

TEST(FadingParams, invalid_values_throw_naming_the_field) {
    jakes_params j;
    j.generators = 0;
    EXPECT_NE(error_of([&] { make_fading(j); }).find("channel.jakes.generators: 0"),
              std::string::npos);
    j = {};
    j.doppler_hz = -1;
    EXPECT_NE(error_of([&] { make_fading(j); }).find("channel.jakes.doppler_hz: -1"),
              std::string::npos);
    j = {};
    j.mean_snr_db = NAN;
    EXPECT_NE(error_of([&] { make_fading(j); }).find("channel.jakes.mean_snr_db"),
              std::string::npos);
    j = {};
    j.angle_offset = 3;
    EXPECT_NE(error_of([&] { make_fading(j); }).find("channel.jakes.angle_offset"),
              std::string::npos);
    sum_of_sinusoids_params s;
    s.paths = 0;
    EXPECT_NE(error_of([&] { make_fading(s); }).find("channel.sos.paths: 0"), std::string::npos);
    s = {};
    s.doppler_hz = INFINITY;
    EXPECT_NE(error_of([&] { make_fading(s); }).find("channel.sos.doppler_hz"), std::string::npos);
    EXPECT_EQ(error_of([&] { make_fading(jakes_params{}); }), "(no exception)");
}

TEST(fading_channel, zero_doppler_is_a_constant_channel) {
    jakes_params p;
    p.doppler_hz = 0.0;
    jakes_channel ch(p);
    EXPECT_EQ(ch.gain(0.0), ch.gain(123.0));
}

// --------------------------------------------------------------------------------------
// CLAMP slot error model and rate rule (Andrew & Hanly, CLAMP, §V-B).

namespace {

// Runs a single user over a fading channel, one attempt every `gap` slots (the attempt
// starts at t and ends at t + slot). gap 1: scheduled in every slot, the next attempt starts
// where this one ended (the paper's "re-attempt in the next slot"); gap 6: the testbed's
// HARQ round trip (feedback_delay_slots = lead_slots + 2 at lead_slots 4), the earliest a
// TB goes out again.
struct link_run {
    double error_rate, loss_rate, mean_margin, throughput_bps, max_rate_bps;
    std::uint64_t resolved, dropped;  // after burn_in
};
link_run run_link(clamp_link& link, const fading_channel& ch, int slots, int burn_in, int gap = 1) {
    const double slot = link.params().slot_s;
    double snr_prev = ch.snr_linear(0.0);
    double margin_sum = 0, bits = 0, max_rate = 0;
    std::uint64_t err0 = 0, att0 = 0, drop0 = 0, del0 = 0;
    for (int s = 0; s < slots; ++s) {
        if (s == burn_in) {
            err0 = link.stats().errors;
            att0 = link.stats().attempts;
            drop0 = link.stats().dropped;
            del0 = link.stats().delivered;
        }
        const double t = static_cast<double>(s) * gap * slot;
        const double snr_start = gap == 1 ? snr_prev : ch.snr_linear(t);
        const double snr_end = gap == 1 ? ch.snr_linear((s + 1) * slot) : ch.snr_linear(t + slot);
        max_rate = std::max(max_rate, link.rate_bps(snr_start));
        const auto a = link.transmit(snr_start, snr_end);
        if (s >= burn_in) {
            margin_sum += link.margin();
            if (!a.error) bits += a.bits;
        }
        snr_prev = snr_end;
    }
    const auto& st = link.stats();
    const double n = slots - burn_in;
    const std::uint64_t resolved = (st.delivered - del0) + (st.dropped - drop0);
    return {static_cast<double>(st.errors - err0) / static_cast<double>(st.attempts - att0),
            static_cast<double>(st.dropped - drop0) / static_cast<double>(resolved),
            margin_sum / n,
            bits / (n * gap * slot),
            max_rate,
            resolved,
            st.dropped - drop0};
}

jakes_channel clamp_channel(double fd, std::uint64_t seed) {
    jakes_params p;
    p.doppler_hz = fd;
    p.seed = seed;
    return jakes_channel(p);
}

}  // namespace

TEST(clamp_link, rate_is_eq18_with_log2) {
    clamp_link_params p = clamp_link_params::high_rate();
    p.margin_init = 0.2;
    clamp_link link(p);
    for (double snr : {0.0, 0.5, 1.0, 3.0}) {
        const double expect = 3e-3 * std::min(4.3e6 * std::log2(1 + 0.8 * snr), 10e6);
        EXPECT_NEAR(link.rate_bits(snr), expect, 1e-6) << snr;
    }
    EXPECT_DOUBLE_EQ(link.rate_bits(100.0), 3e-3 * 10e6);
}

TEST(clamp_link, cmax_is_the_capacity_at_the_mean_snr_in_both_rate_cases) {
    // 4.3 MHz log2(1 + 4) = 9.98 Mb/s; 620 kHz log2(5) = 1.44 Mb/s: the evidence for log2.
    for (const auto& p : {clamp_link_params::high_rate(), clamp_link_params::low_rate()}) {
        EXPECT_NEAR(p.w0_hz * std::log2(5.0), p.cmax_bps, 0.005 * p.cmax_bps);
        clamp_link link(p);
        EXPECT_NEAR(link.rate_bps(4.0), p.cmax_bps, 0.005 * p.cmax_bps);
    }
    EXPECT_DOUBLE_EQ(clamp_link_params::high_rate().w0_hz, 4.3e6);
    EXPECT_DOUBLE_EQ(clamp_link_params::high_rate().cmax_bps, 10e6);
    EXPECT_DOUBLE_EQ(clamp_link_params::low_rate().w0_hz, 620e3);
    EXPECT_DOUBLE_EQ(clamp_link_params::low_rate().cmax_bps, 1.44e6);
    EXPECT_EQ(clamp_link_params::high_rate(kClampAttemptsFastFading).max_attempts, 15);
    EXPECT_EQ(clamp_link_params::low_rate().max_attempts, 5);
    EXPECT_DOUBLE_EQ(clamp_link_params::high_rate().slot_s, 3e-3);
    EXPECT_DOUBLE_EQ(clamp_link_params::high_rate().target_loss, 1e-3);
}

TEST(clamp_link, rate_never_exceeds_cmax) {
    clamp_link link(clamp_link_params::high_rate());
    for (double snr : {0.0, 1.0, 4.0, 10.0, 1e3, 1e9, double(INFINITY)})
        EXPECT_LE(link.rate_bps(snr), 10e6);
    EXPECT_EQ(link.rate_bps(-1.0), 0.0);
    EXPECT_EQ(link.rate_bps(NAN), 0.0);
    auto ch = clamp_channel(60.0, 3);
    clamp_link_params p = clamp_link_params::high_rate(15);
    clamp_link adaptive(p);
    const link_run r = run_link(adaptive, ch, 20000, 0);
    EXPECT_LE(r.max_rate_bps, 10e6);
    EXPECT_GT(adaptive.stats().capped, 0u);  // the cap is reached, not just never approached
}

TEST(clamp_link, error_iff_the_end_snr_cannot_carry_the_rate) {
    clamp_link_params p = clamp_link_params::high_rate();
    p.margin_init = 0.1;
    clamp_link link(p);
    const double bits = link.rate_bits(2.0);  // (1 - m) N = 1.8
    EXPECT_FALSE(link.is_error(bits, 2.0));
    EXPECT_FALSE(link.is_error(bits, 1.81));
    EXPECT_TRUE(link.is_error(bits, 1.79));
    clamp_link no_margin(clamp_link_params::high_rate());
    EXPECT_FALSE(no_margin.is_error(no_margin.rate_bits(2.0), 2.0));  // equal SNRs: no error
    // Capped rate: an error needs the end SNR to fall below 2^(C_max/W0) - 1 = 4.01.
    const double capped = no_margin.rate_bits(50.0);
    EXPECT_FALSE(no_margin.is_error(capped, 4.1));
    EXPECT_TRUE(no_margin.is_error(capped, 3.9));
}

TEST(clamp_link, n_consecutive_failures_drop_and_a_success_resets_the_count) {
    clamp_link_params p = clamp_link_params::high_rate(3);
    p.margin_step = 0.0;
    clamp_link link(p);
    EXPECT_EQ(link.on_feedback(false), slot_outcome::retry);
    EXPECT_EQ(link.on_feedback(false), slot_outcome::retry);
    EXPECT_EQ(link.on_feedback(true), slot_outcome::delivered);
    EXPECT_EQ(link.on_feedback(false), slot_outcome::retry);
    EXPECT_EQ(link.on_feedback(false), slot_outcome::retry);
    EXPECT_EQ(link.on_feedback(false), slot_outcome::dropped);
    EXPECT_EQ(link.state().consecutive_failures, 0);
    EXPECT_EQ(link.on_feedback(false), slot_outcome::retry);
    EXPECT_EQ(link.stats().dropped, 1u);
    EXPECT_EQ(link.stats().errors, 6u);
    EXPECT_EQ(link.stats().attempts, 7u);
    EXPECT_STREQ(to_string(slot_outcome::dropped), "dropped");
}

TEST(clamp_link, margin_steps_have_the_target_ratio_and_stay_in_bounds) {
    clamp_link_params p = clamp_link_params::high_rate(2);
    p.margin_init = 0.5;
    p.margin_step = 0.01;
    clamp_link link(p);
    link.on_feedback(true);  // resolved success: down gamma * target
    EXPECT_NEAR(link.margin(), 0.5 - 0.01 * 1e-3, 1e-15);
    link.on_feedback(false);  // retry: the paper's scope does not move m
    EXPECT_NEAR(link.margin(), 0.5 - 0.01 * 1e-3, 1e-15);
    link.on_feedback(false);  // dropped: up gamma (1 - target)
    EXPECT_NEAR(link.margin(), 0.5 - 0.01 * 1e-3 + 0.01 * (1 - 1e-3), 1e-15);

    p.scope = margin_scope::per_attempt;
    clamp_link olla(p);
    olla.on_feedback(false);  // every NACK moves m in the OLLA scope
    EXPECT_NEAR(olla.margin(), 0.5 + 0.01 * (1 - 1e-3), 1e-15);

    p.margin_init = 0.99;
    clamp_link top(p);
    for (int i = 0; i < 10; ++i) top.on_feedback(false);
    EXPECT_DOUBLE_EQ(top.margin(), 0.99);
    p.margin_init = 0.0;
    p.margin_min = 0.0;
    clamp_link bottom(p);
    for (int i = 0; i < 10; ++i) bottom.on_feedback(true);
    EXPECT_DOUBLE_EQ(bottom.margin(), 0.0);
}

// The paper's scope: loss after retransmissions -> 1e-3. On 60 Hz fading with n = 5 the
// margin must rise well above 0 to get there. Tolerance: the loss rate over the last
// 400 000 slots (~300 drops) within [0.8e-3, 1.25e-3] for each of three seeds (measured:
// 1.00e-3, 1.00e-3, 1.01e-3, with m ~ 0.12-0.15 and ~36% of attempts failing).
TEST(clamp_link, adaptive_margin_drives_loss_after_retransmissions_to_target_at_60hz) {
    for (std::uint64_t seed : {11u, 12u, 13u}) {
        auto ch = clamp_channel(60.0, seed);
        clamp_link link(clamp_link_params::high_rate(5));
        const link_run r = run_link(link, ch, 500000, 100000);
        EXPECT_GT(r.loss_rate, 0.8e-3) << "seed " << seed;
        EXPECT_LT(r.loss_rate, 1.25e-3) << "seed " << seed;
        EXPECT_GT(r.mean_margin, 0.05) << "seed " << seed;
    }
}

TEST(clamp_link, with_fifteen_attempts_and_the_margin_floored_at_zero_fast_fading_loses_less) {
    // The paper's fast-fading setting (n = 15 at 60 Hz), one user in every slot: 15
    // consecutive failures need the SNR to fall for 45 ms (~2.7 coherence times), which
    // is rarer than 1e-3 even at m = 0. With m kept >= 0 (margin_min = 0, the reading this
    // link had before) the loss stays below the paper's target, and m at its floor.
    auto ch = clamp_channel(60.0, 51);
    clamp_link_params p = clamp_link_params::high_rate(kClampAttemptsFastFading);
    p.margin_min = 0.0;
    clamp_link link(p);
    const link_run r = run_link(link, ch, 200000, 20000);
    EXPECT_LT(r.loss_rate, 1e-3);
    EXPECT_LT(r.mean_margin, 0.01);
    EXPECT_GT(r.error_rate, 0.3);  // while a third of the attempts fail
}

// Andrew & Hanly, CLAMP, Table I and §V-D: "The packet loss rate is 10^-3, which is achieved
// via the fade margin and link layer retransmissions". With 15 attempts at 60 Hz the target
// is reached only below m = 0 (a rate above what the slot's starting SNR supports), which the
// default floor allows: m settles near -1.5 and the loss after retransmissions at 1e-3, not 0
// (measured on seeds 51-53: 0.99e-3-1.01e-3 with gain 0.1, m -1.4 to -1.7; at gain 0.01 m
// needs ~1e6 resolved TBs to get there). The slow-fading cases settle above 0 (0.06-0.11).
TEST(clamp_link, with_fifteen_attempts_at_60hz_the_margin_goes_below_zero_to_meet_the_target) {
    for (std::uint64_t seed : {51u, 52u, 53u}) {
        auto ch = clamp_channel(60.0, seed);
        clamp_link_params p = clamp_link_params::high_rate(kClampAttemptsFastFading);
        p.margin_step = 0.1;
        clamp_link link(p);
        const link_run r = run_link(link, ch, 400000, 100000);
        EXPECT_GT(r.loss_rate, 0.8e-3) << "seed " << seed;
        EXPECT_LT(r.loss_rate, 1.25e-3) << "seed " << seed;
        EXPECT_LT(r.mean_margin, -0.5) << "seed " << seed;
    }
    auto slow = clamp_channel(0.6, 51);
    clamp_link_params p = clamp_link_params::high_rate(kClampAttemptsFastFading);
    p.margin_step = 0.1;
    clamp_link link(p);
    const link_run r = run_link(link, slow, 400000, 100000);
    EXPECT_NEAR(r.loss_rate, 1e-3, 0.25e-3);
    EXPECT_GT(r.mean_margin, 0.0);
}

// The same target with a user's attempts a HARQ round trip apart (6 slots, 18 ms, over 2.5
// coherence times at 60 Hz), as in the testbed, where a TB goes out again only after its
// feedback and PF shares the slots: the attempts fail nearly independently, each at most
// with probability 1 - 1/e (m -> -inf puts every TB at C_max = W0 log2(1 + SNR_avg), which
// fails iff N(e) < SNR_avg, P = 1 - e^-1 for Rayleigh), so 15 in a row lose at most
// (1 - 1/e)^15 = 1.03e-3, the paper's target, reached only in that limit. Measured on seed
// 51 over 400 000 attempts: loss 0 at m = 0, 1.1e-4 at m = -1.5, 4.3e-4 at the floor -9,
// 8.6e-4 at m = -1000 with 61.7 % of the attempts failing. Each bound below is many Poisson
// deviations from its count (71 drops of 164 000 at -9 against the 164 that 1e-3 means).
TEST(clamp_link,
     at_60hz_fifteen_attempts_a_harq_round_trip_apart_stay_below_the_target_above_the_floor) {
    auto ch = clamp_channel(60.0, 51);
    for (const double m : {0.0, -1.5, kClampMarginMin}) {
        clamp_link_params p = clamp_link_params::high_rate(kClampAttemptsFastFading);
        p.margin_step = 0.0;  // m held
        p.margin_init = m;
        clamp_link link(p);
        const link_run r = run_link(link, ch, 400000, 0, 6);
        EXPECT_LT(r.loss_rate, 0.6e-3) << "m " << m;
    }
    clamp_link_params p = clamp_link_params::high_rate(kClampAttemptsFastFading);
    p.margin_step = 0.0;
    p.margin_min = p.margin_init = -1000.0;  // every TB at C_max
    clamp_link link(p);
    const link_run r = run_link(link, ch, 400000, 0, 6);
    EXPECT_NEAR(r.error_rate, 1.0 - std::exp(-1.0), 0.03);  // 0.617: G = 20 is not quite Rayleigh
    EXPECT_GT(r.loss_rate, 0.6e-3);
    EXPECT_LT(r.loss_rate, 1.3e-3);
}

// Andrew & Hanly, CLAMP, Table I, within one run. The margin's update (clamp_link.h) moves m
// by gain (e - target) per resolved TB, so while m stays inside its bounds the drops over N
// TBs are exactly N target + (m_end - m_init) / gain: the loss is at the target up to the
// margin's net move, not up to Poisson noise. At 0.6 Hz with n = 5 the operating point is
// within one step of 0, and from margin_init 0 a run of ~40 000 TBs loses 1.0e-3 (measured
// 1.01e-3, 1.01e-3, 1.03e-3 on seeds 51-53, m ending at 0.04-0.13: a net move of at most
// 1.3 drops). At 60 Hz with n = 15 the approximation has no fixed point above the floor
// (above): started at 0 (before) it loses next to nothing while m falls 1e-4 per TB (m -1.8
// to -2.1 after ~20 000 TBs, 0-2 drops per seed); started at the floor it stays there, at
// the loss closest to the target that this link has (5, 6 and 14 drops of ~16 000 TBs on
// seeds 51-53, 5.2e-4 together: the floor's 4.3e-4 above, and a drop's step of 0.1 up).
TEST(clamp_link, the_margins_drops_over_a_run_are_the_target_up_to_its_net_move) {
    for (std::uint64_t seed : {51u, 52u, 53u}) {
        auto ch = clamp_channel(0.6, seed);
        clamp_link_params p = clamp_link_params::high_rate(kClampAttemptsSlowFading);
        p.margin_step = 0.1;
        clamp_link link(p);
        const link_run r = run_link(link, ch, 40000, 0, 6);
        ASSERT_GT(link.margin(), p.margin_min);  // never at a bound: the identity holds
        ASSERT_LT(link.margin(), p.margin_max);
        const double n = static_cast<double>(r.resolved);
        EXPECT_NEAR(static_cast<double>(r.dropped),
                    n * p.target_loss + (link.margin() - p.margin_init) / p.margin_step, 1e-6)
            << "seed " << seed;
        EXPECT_GT(r.loss_rate, 0.8e-3) << "seed " << seed;
        EXPECT_LT(r.loss_rate, 1.25e-3) << "seed " << seed;
    }
    std::uint64_t from_zero = 0, from_floor = 0, tbs_floor = 0;
    for (std::uint64_t seed : {51u, 52u, 53u}) {
        auto ch = clamp_channel(60.0, seed);
        clamp_link_params p = clamp_link_params::high_rate(kClampAttemptsFastFading);
        p.margin_step = 0.1;
        clamp_link before(p);
        from_zero += run_link(before, ch, 40000, 0, 6).dropped;
        EXPECT_LT(before.margin(), -1.0) << "seed " << seed;  // still falling
        p.margin_init = p.margin_min;
        clamp_link link(p);
        const link_run r = run_link(link, ch, 40000, 0, 6);
        from_floor += r.dropped;
        tbs_floor += r.resolved;
        EXPECT_LT(link.margin(), p.margin_min + 0.3) << "seed " << seed;
    }
    EXPECT_LE(from_zero, 3u);
    const double loss = static_cast<double>(from_floor) / static_cast<double>(tbs_floor);
    EXPECT_GT(loss, 2e-4);  // 5.2e-4 measured: not ~0
    EXPECT_LT(loss, 1e-3);  // and not the target, out of reach
}

TEST(clamp_link, slow_fading_has_almost_no_errors_with_a_small_margin) {
    clamp_link_params p = clamp_link_params::high_rate(5);
    p.margin_init = 0.1;
    p.margin_step = 0.0;  // fixed m = 0.1
    auto slow = clamp_channel(0.6, 21);
    auto fast = clamp_channel(60.0, 21);
    clamp_link a(p), b(p);
    const link_run rs = run_link(a, slow, 200000, 0);
    const link_run rf = run_link(b, fast, 200000, 0);
    EXPECT_LT(rs.error_rate, 0.01);
    EXPECT_GT(rf.error_rate, 0.3);
}

TEST(clamp_link, fast_fading_needs_a_larger_margin_and_gets_less_throughput) {
    auto slow = clamp_channel(0.6, 31);
    auto fast = clamp_channel(60.0, 31);
    clamp_link a(clamp_link_params::high_rate(5)), b(clamp_link_params::high_rate(5));
    const link_run rs = run_link(a, slow, 400000, 100000);
    const link_run rf = run_link(b, fast, 400000, 100000);
    EXPECT_GT(rf.mean_margin, rs.mean_margin);
    EXPECT_LT(rf.throughput_bps, rs.throughput_bps);
}

TEST(clamp_link, per_attempt_scope_drives_the_attempt_error_rate_to_target) {
    // OLLA reading, on slow fading where a per-attempt target is reachable.
    clamp_link_params p = clamp_link_params::high_rate(5);
    p.scope = margin_scope::per_attempt;
    p.target_loss = 0.01;
    auto ch = clamp_channel(0.6, 41);
    clamp_link link(p);
    const link_run r = run_link(link, ch, 400000, 50000);
    EXPECT_NEAR(r.error_rate, 0.01, 0.004);
}

TEST(clamp_link_params, invalid_values_throw_naming_the_field) {
    auto msg = [](auto mutate) {
        clamp_link_params p;
        mutate(p);
        return error_of([&] { clamp_link l(p); });
    };
    EXPECT_NE(
        msg([](clamp_link_params& p) { p.target_loss = 0; }).find("clamp_link.target_loss: 0"),
        std::string::npos);
    EXPECT_NE(msg([](clamp_link_params& p) { p.max_attempts = 0; }).find("clamp_link.max_attempts"),
              std::string::npos);
    EXPECT_NE(msg([](clamp_link_params& p) { p.margin_max = 1.0; }).find("clamp_link.margin_max"),
              std::string::npos);
    EXPECT_NE(
        msg([](clamp_link_params& p) { p.margin_init = 0.995; }).find("clamp_link.margin_init"),
        std::string::npos);
    EXPECT_NE(msg([](clamp_link_params& p) { p.margin_step = -1; }).find("clamp_link.margin_step"),
              std::string::npos);
    EXPECT_NE(msg([](clamp_link_params& p) { p.w0_hz = 0; }).find("clamp_link.w0_hz"),
              std::string::npos);
    EXPECT_NE(msg([](clamp_link_params& p) { p.cmax_bps = -5; }).find("clamp_link.cmax_bps"),
              std::string::npos);
    EXPECT_NE(msg([](clamp_link_params& p) { p.slot_s = 0; }).find("clamp_link.slot_s"),
              std::string::npos);
    EXPECT_EQ(msg([](clamp_link_params&) {}), "(no exception)");
}
