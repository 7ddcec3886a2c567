// Channel emulator: fading statistics, SNR calibration, determinism, taps, CFO, traces,
// and the Gaussian noise generator.
#include <gnuradio/oppsched/channel_emulator.h>
#include <gnuradio/oppsched/gaussian_noise.h>
#include <gnuradio/oppsched/ofdm_demodulator.h>
#include <gnuradio/oppsched/ofdm_modulator.h>
#include <gnuradio/oppsched/slot_sync.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "ofdm_test_util.h"

using namespace gr::oppsched;
using namespace ofdm_test;

namespace {

// 100 kHz keeps long fading runs cheap: 1e6 samples = 10 s = 600 periods of 60 Hz.
channel_emulator_params slow_rate_params(fading_model m, int users, double fd = 60.0) {
    channel_emulator_params p;
    p.numerology.sample_rate = 100e3;
    p.numerology.slot_duration = 10e-3;
    emulator_user_params u;
    u.fading = m;
    u.doppler_hz = fd;
    u.add_noise = false;
    p.users.assign(static_cast<size_t>(users), u);
    p.seed = 7;
    return p;
}

// Kolmogorov-Smirnov distance of envelope samples r against Rayleigh with E r^2 = pw.
double ks_rayleigh(std::vector<double> r, double pw) {
    std::sort(r.begin(), r.end());
    double ks = 0;
    const double n = static_cast<double>(r.size());
    for (size_t i = 0; i < r.size(); ++i) {
        const double f = 1.0 - std::exp(-r[i] * r[i] / pw);
        ks = std::max({ks, std::abs(f - i / n), std::abs(f - (i + 1) / n)});
    }
    return ks;
}

// Normalised time autocorrelation Re E[h(t+lag) h*(t)] / E|h|^2.
double autocorr(const std::vector<gr_complex>& h, size_t lag) {
    std::complex<double> acc = 0;
    double e = 0;
    for (size_t i = 0; i + lag < h.size(); i += 10) {
        acc += std::complex<double>(h[i + lag]) * std::conj(std::complex<double>(h[i]));
        e += std::norm(h[i]);
    }
    return (acc / e).real();
}

double mean_power(const std::vector<gr_complex>& x) {
    double s = 0;
    for (const auto& v : x) s += std::norm(v);
    return s / static_cast<double>(x.size());
}

}  // namespace

TEST(Emulator, jakes_envelope_is_rayleigh_ks_distance_below_0_04) {
    // G = 20, f_d = 60 Hz (Andrew & Hanly, CLAMP), 4 users x 10 s, envelope sampled every symbol
    // (12500 samples, ~1400 independent ones). Measured KS: 0.014, 0.027, 0.016, 0.020.
    auto p = slow_rate_params(fading_model::jakes, 4);
    channel_emulator em(p);
    const std::vector<gr_complex> ones(1000000, gr_complex(1, 0));
    const auto h = em.process(ones);
    for (int u = 0; u < 4; ++u) {
        std::vector<double> r;
        double pw = 0;
        for (size_t i = 0; i < h[u].size(); i += 80) {
            r.push_back(std::abs(h[u][i]));
            pw += std::norm(h[u][i]);
        }
        pw /= static_cast<double>(r.size());
        EXPECT_LT(ks_rayleigh(r, pw), 0.04) << "user " << u;
        // with distinct Doppler lines the long-run mean power is the ensemble's: 1
        EXPECT_NEAR(10 * std::log10(pw), 0.0, 0.2) << "user " << u;
    }
}

TEST(Emulator, jakes_autocorrelation_is_j0_of_2_pi_fd_tau) {
    // Lags f_d tau = 0.05 .. 0.5 at f_d = 60 Hz; measured |R - J0| <= 0.008.
    auto p = slow_rate_params(fading_model::jakes, 2);
    channel_emulator em(p);
    const std::vector<gr_complex> ones(1000000, gr_complex(1, 0));
    const auto h = em.process(ones);
    for (int u = 0; u < 2; ++u) {
        for (double fdt : {0.05, 0.1, 0.2, 0.3, 0.5}) {
            const size_t lag = static_cast<size_t>(std::lround(fdt / 60.0 * 100e3));
            EXPECT_NEAR(autocorr(h[u], lag), std::cyl_bessel_j(0.0, 2 * kPi * fdt), 0.03)
                << "user " << u << " f_d tau " << fdt;
        }
    }
}

TEST(Emulator, printed_jakes_offset_is_available_and_repeats_a_doppler_line) {
    // jakes_angle_offset = +0.5 is Andrew & Hanly, CLAMP as printed: still unit power over the
    // ensemble, but a single run's mean power is 1 + (2/G) cos(pi/G) cos(theta_19+theta_20)
    // (within +-0.46 dB), not 1.
    auto p = slow_rate_params(fading_model::jakes, 4);
    for (auto& u : p.users) u.jakes_angle_offset = 0.5;
    channel_emulator em(p);
    const std::vector<gr_complex> ones(400000, gr_complex(1, 0));
    const auto h = em.process(ones);
    double spread = 0;
    for (int u = 0; u < 4; ++u) {
        const double db = 10 * std::log10(mean_power(h[u]));
        EXPECT_LT(std::abs(db), 0.6);
        spread = std::max(spread, std::abs(db));
    }
    EXPECT_GT(spread, 0.1);  // the printed form's seed-dependent mean power shows
}

TEST(Emulator, sum_of_sinusoids_is_rayleigh_with_j0_autocorrelation_over_users) {
    // The model of Srinivasan & Baras (eq. 4) is non-ergodic (random amplitudes): check the
    // ensemble, 16 users x 2 s pooled, normalised by the pooled power.
    auto p = slow_rate_params(fading_model::sum_of_sinusoids, 16);
    channel_emulator em(p);
    const std::vector<gr_complex> ones(200000, gr_complex(1, 0));
    const auto h = em.process(ones);
    std::vector<double> r;
    double pw = 0;
    for (const auto& hu : h)
        for (size_t i = 0; i < hu.size(); i += 80) {
            r.push_back(std::abs(hu[i]));
            pw += std::norm(hu[i]);
        }
    pw /= static_cast<double>(r.size());
    EXPECT_LT(ks_rayleigh(r, pw), 0.04);
    EXPECT_NEAR(10 * std::log10(pw), 0.0, 0.5);  // ensemble mean power
    for (double fdt : {0.1, 0.2}) {
        const size_t lag = static_cast<size_t>(std::lround(fdt / 60.0 * 100e3));
        double acc = 0;
        for (const auto& hu : h) acc += autocorr(hu, lag) * mean_power(hu);
        EXPECT_NEAR(acc / (16 * pw), std::cyl_bessel_j(0.0, 2 * kPi * fdt), 0.06) << fdt;
    }
}

TEST(Emulator, users_fade_and_are_noised_independently) {
    // Jakes users share Doppler lines: their SNRs (|h|^2) are nearly uncorrelated
    // (measured |rho| <= 0.05 over 6 pairs), their complex gains keep the known
    // (1/G) sum cos(dtheta) term (std 0.16). Sum-of-sinusoids users: complex correlation
    // <= 0.05. Noise: cross-correlation ~ 1/sqrt(N).
    for (auto m : {fading_model::jakes, fading_model::sum_of_sinusoids}) {
        auto p = slow_rate_params(m, 4);
        channel_emulator em(p);
        const std::vector<gr_complex> ones(1000000, gr_complex(1, 0));
        const auto h = em.process(ones);
        for (int a = 0; a < 4; ++a)
            for (int b = a + 1; b < 4; ++b) {
                std::complex<double> c = 0;
                double ea = 0, eb = 0, pa = 0, pb = 0, pab = 0, pa2 = 0, pb2 = 0;
                double n = 0;
                for (size_t i = 0; i < h[a].size(); i += 10, n += 1) {
                    const std::complex<double> x(h[a][i]), y(h[b][i]);
                    c += x * std::conj(y);
                    ea += std::norm(x);
                    eb += std::norm(y);
                    pa += std::norm(x);
                    pb += std::norm(y);
                    pab += std::norm(x) * std::norm(y);
                    pa2 += std::norm(x) * std::norm(x);
                    pb2 += std::norm(y) * std::norm(y);
                }
                const double rho =
                    (pab / n - pa / n * pb / n) /
                    std::sqrt((pa2 / n - pa * pa / (n * n)) * (pb2 / n - pb * pb / (n * n)));
                EXPECT_LT(std::abs(rho), 0.1) << a << "," << b;
                if (m == fading_model::sum_of_sinusoids)
                    EXPECT_LT(std::abs(c) / std::sqrt(ea * eb), 0.05) << a << "," << b;
            }
    }
    // noise only: zero input, two users
    channel_emulator_params p;
    emulator_user_params u;
    u.fading = fading_model::none;
    u.mean_snr_db = 0;
    p.users = {u, u};
    channel_emulator em(p);
    const std::vector<gr_complex> zeros(200000, gr_complex(0, 0));
    const auto w = em.process(zeros);
    std::complex<double> c = 0;
    for (size_t i = 0; i < zeros.size(); ++i)
        c += std::complex<double>(w[0][i]) * std::conj(std::complex<double>(w[1][i]));
    EXPECT_LT(std::abs(c) / std::sqrt(mean_power(w[0]) * mean_power(w[1])) / zeros.size(), 0.01);
}

TEST(Emulator, same_seed_gives_identical_samples_for_any_chunking) {
    channel_emulator_params p;
    emulator_user_params u;
    u.mean_snr_db = 12;
    u.taps = {{0, 0.0}, {3, -3.0}, {7, -6.0}};
    u.cfo_hz = 2100.0;
    p.users = {u, u};
    p.users[1].fading = fading_model::sum_of_sinusoids;
    p.seed = 99;
    std::mt19937_64 rng(8);
    const auto x = random_qam(rng, 20000, 4);
    channel_emulator a(p), b(p);
    const auto ya = a.process(x);
    // b: random chunk sizes
    std::vector<std::vector<gr_complex>> yb(2, std::vector<gr_complex>(x.size()));
    std::uniform_int_distribution<size_t> c(1, 3000);
    size_t i = 0;
    while (i < x.size()) {
        const size_t n = std::min(x.size() - i, c(rng));
        gr_complex* outs[2] = {yb[0].data() + i, yb[1].data() + i};
        b.process(x.data() + i, outs, n);
        i += n;
    }
    EXPECT_EQ(ya[0], yb[0]);
    EXPECT_EQ(ya[1], yb[1]);
    EXPECT_NE(ya[0], ya[1]);
    p.seed = 100;
    channel_emulator other(p);
    EXPECT_NE(other.process(x)[0], ya[0]);
}

TEST(Emulator, coefficients_are_interpolated_linearly_between_symbol_rate_grid_points) {
    // Noiseless, constant input: between two grid points (every symbol_len = 80 samples)
    // the gain is exactly the straight line between them.
    channel_emulator_params p;
    emulator_user_params u;
    u.add_noise = false;
    u.doppler_hz = 300;
    p.users = {u};
    channel_emulator em(p);
    const std::vector<gr_complex> ones(4000, gr_complex(1, 0));
    const auto h = em.process(ones)[0];
    for (size_t k = 0; k + 80 < h.size(); k += 80)
        for (size_t m = 1; m < 80; m += 13) {
            const gr_complex line = h[k] + (h[k + 80] - h[k]) * (static_cast<float>(m) / 80.0f);
            EXPECT_LT(std::abs(h[k + m] - line), 1e-5f) << k << "+" << m;
        }
    EXPECT_NEAR(std::abs(em.tap_gain(0, 0, 1234)), std::abs(h[1234]), 1e-6);
}

TEST(Emulator, mean_snr_is_realised_per_occupied_subcarrier_within_0_5_db) {
    // (a) the noise level: sigma^2 = (64/52) 10^(-SNR/10) measured on silence
    channel_emulator_params p;
    emulator_user_params u;
    u.fading = fading_model::none;
    u.mean_snr_db = 10;
    p.users = {u};
    {
        channel_emulator em(p);
        const std::vector<gr_complex> zeros(200000, gr_complex(0, 0));
        const double n0 = mean_power(em.process(zeros)[0]);
        EXPECT_NEAR(10 * std::log10(n0 / (64.0 / 52.0 * 0.1)), 0.0, 0.05);
        EXPECT_NEAR(em.noise_variance(0), 64.0 / 52.0 * 0.1, 1e-12);
    }
    // (b) through the OFDM receiver: the estimated Es/N0 averaged over 40 slots is the
    // configured mean SNR (AWGN, 5 / 15 / 25 dB)
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(9);
    for (double snr : {5.0, 15.0, 25.0}) {
        p.users[0].mean_snr_db = snr;
        channel_emulator em(p);
        ofdm_demodulator dem(num);
        double sum = 0;
        for (int k = 0; k < 40; ++k) {
            const auto x = mod.modulate(random_qam(rng, num.header_resource_elements(), 2),
                                        random_qam(rng, num.payload_resource_elements(), 4));
            const auto y = em.process(x)[0];
            sum += dem.demodulate(y, false).snr.snr_db;
        }
        EXPECT_NEAR(sum / 40, snr, 0.5) << snr;
    }
    // (c) Jakes at 60 Hz, mean 8 dB: the long-run mean instantaneous SNR is 8 dB
    auto pj = slow_rate_params(fading_model::jakes, 2);
    for (auto& uj : pj.users) uj.mean_snr_db = 8.0;
    channel_emulator ej(pj);
    for (int uu = 0; uu < 2; ++uu) {
        double g = 0;
        int n = 0;
        for (std::uint64_t s = 0; s < 1000000; s += 160, ++n) g += ej.power_gain(uu, s);
        EXPECT_NEAR(10 * std::log10(g / n), 0.0, 0.5) << uu;
    }
}

TEST(Emulator, end_to_end_estimated_snr_tracks_the_emulated_instantaneous_snr) {
    // Modulator -> emulator (2 users, Jakes 0.6 Hz, mean 15 dB, CFO) -> sync -> demod:
    // each slot's estimated Es/N0 is within 1.5 dB of the emulator's instantaneous SNR.
    const auto num = numerology::profile("evdo", 1e6);
    channel_emulator_params p;
    p.numerology = num.params();
    emulator_user_params u;
    u.mean_snr_db = 15;
    u.doppler_hz = 0.6;
    u.cfo_hz = 3000;
    p.users = {u, u};
    p.users[1].cfo_hz = -1500;
    p.seed = 3;
    channel_emulator em(p);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(10);
    std::vector<gr_complex> tx;
    for (int k = 0; k < 30; ++k) {
        const auto x = mod.modulate(random_qam(rng, num.header_resource_elements(), 2),
                                    random_qam(rng, num.payload_resource_elements(), 4));
        tx.insert(tx.end(), x.begin(), x.end());
    }
    tx.resize(tx.size() + 500, gr_complex(0, 0));
    const auto rx = em.process(tx);
    for (int uu = 0; uu < 2; ++uu) {
        slot_sync sync(num);
        ofdm_demodulator dem(num);
        const auto found = sync.push(rx[uu]);
        ASSERT_EQ(found.size(), 30u) << uu;
        for (const auto& f : found) {
            const auto r = dem.demodulate(f.samples, false);
            const double truth =
                15.0 + 10 * std::log10(em.power_gain(uu, f.start + num.ltf_offset(0)));
            EXPECT_NEAR(r.snr.snr_db, truth, 1.5);
            // 0.03 spacing (470 Hz): 4 sigma of the fine CFO estimate at ~6 dB, where user
            // 1 sits in a fade during this run
            EXPECT_NEAR(f.cfo_hz, uu == 0 ? 3000.0 : -1500.0, 470.0);
        }
    }
}

TEST(Emulator, taps_have_their_delays_and_normalised_powers) {
    channel_emulator_params p;
    emulator_user_params u;
    u.fading = fading_model::none;
    u.add_noise = false;
    u.taps = {{0, 0.0}, {4, -3.0}, {11, -10.0}};
    p.users = {u};
    channel_emulator em(p);
    std::vector<gr_complex> imp(64, gr_complex(0, 0));
    imp[5] = gr_complex(1, 0);
    const auto y = em.process(imp)[0];
    const double s = 1 + std::pow(10, -0.3) + 0.1;
    EXPECT_NEAR(std::abs(y[5]), std::sqrt(1 / s), 1e-6);
    EXPECT_NEAR(std::abs(y[9]), std::sqrt(std::pow(10, -0.3) / s), 1e-6);
    EXPECT_NEAR(std::abs(y[16]), std::sqrt(0.1 / s), 1e-6);
    EXPECT_NEAR(mean_power(y) * 64, 1.0, 1e-5);
    // delays cross process() calls
    channel_emulator em2(p);
    std::vector<gr_complex> a(6, gr_complex(0, 0)), b(58, gr_complex(0, 0));
    a[5] = gr_complex(1, 0);
    em2.process(a);
    const auto yb = em2.process(b)[0];
    EXPECT_NEAR(std::abs(yb[16 - 6]), std::sqrt(0.1 / s), 1e-6);
    // each tap fades on its own
    p.users[0].fading = fading_model::jakes;
    channel_emulator em3(p);
    EXPECT_NE(em3.tap_gain(0, 0, 0), em3.tap_gain(0, 1, 0));
    const auto snr = em3.subcarrier_snr(0, 0);
    EXPECT_EQ(snr.size(), 52u);
}

TEST(Emulator, cfo_rotates_the_output_at_exactly_f_over_fs) {
    channel_emulator_params p;
    emulator_user_params u;
    u.fading = fading_model::none;
    u.add_noise = false;
    u.cfo_hz = -4321.0;
    p.users = {u};
    channel_emulator em(p);
    const std::vector<gr_complex> ones(100000, gr_complex(1, 0));
    const auto y = em.process(ones)[0];
    for (size_t n : {size_t(0), size_t(1), size_t(777), size_t(99999)}) {
        const double ph = 2 * kPi * -4321.0 * static_cast<double>(n) / 1e6;
        EXPECT_LT(std::abs(std::complex<double>(y[n]) - std::polar(1.0, ph)), 1e-5) << n;
    }
}

TEST(Emulator, snr_trace_is_replayed_interpolated_and_looped) {
    const std::string csv = "time,snr_db\n# ramp\n0.0, 10\n0.5, 20\n1.0, 10\n";
    const auto tr = parse_snr_trace_csv(csv);
    ASSERT_EQ(tr.size(), 3u);
    channel_emulator_params p;
    emulator_user_params u;
    u.fading = fading_model::none;
    u.add_noise = false;
    u.mean_snr_db = 10;
    u.snr_trace = tr;
    p.users = {u};
    channel_emulator em(p);
    EXPECT_NEAR(10 * std::log10(em.power_gain(0, 0)), 0.0, 1e-6);
    EXPECT_NEAR(10 * std::log10(em.power_gain(0, 500000)), 10.0, 1e-6);
    EXPECT_NEAR(10 * std::log10(em.power_gain(0, 250000)), 5.0, 1e-6);
    EXPECT_NEAR(10 * std::log10(em.power_gain(0, 1250000)), 5.0, 1e-6);  // looped
    // the samples follow: power 10 dB above the input at t = 0.5 s
    std::vector<gr_complex> ones(500080, gr_complex(1, 0));
    const auto y = em.process(ones)[0];
    EXPECT_NEAR(10 * std::log10(std::norm(y[500000])), 10.0, 1e-3);
    // hold instead of loop
    p.users[0].loop_trace = false;
    channel_emulator held(p);
    EXPECT_NEAR(10 * std::log10(held.power_gain(0, 1250000)), 0.0, 1e-6);
}

TEST(Emulator, malformed_traces_are_rejected_with_the_line_number) {
    try {
        parse_snr_trace_csv("time,snr_db\n0,1\n0.5,x\n");
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
    }
    EXPECT_THROW(parse_snr_trace_csv("0,1\n0,2\n"), std::invalid_argument);  // not increasing
    EXPECT_THROW(parse_snr_trace_csv("0;1\n"), std::invalid_argument);
    EXPECT_THROW(load_snr_trace_csv("/nonexistent/trace.csv"), std::invalid_argument);
}

TEST(Emulator, bad_parameters_are_rejected_naming_the_field) {
    channel_emulator_params p;
    EXPECT_THROW(channel_emulator{p}, std::invalid_argument);  // no users
    emulator_user_params u;
    p.users = {u, u};
    p.users[1].cfo_hz = 6e5;
    try {
        channel_emulator em(p);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("channel_emulator.users[1].cfo_hz: 600000"),
                  std::string::npos)
            << e.what();
    }
    p.users[1] = u;
    p.users[1].doppler_hz = 2000;  // 2000 * 80 / 1e6 = 0.16 > 0.1
    EXPECT_THROW(channel_emulator{p}, std::invalid_argument);
    p.users[1] = u;
    p.users[1].taps = {{-1, 0.0}};
    EXPECT_THROW(channel_emulator{p}, std::invalid_argument);
    p.users[1] = u;
    p.numerology.cp_len = 100;
    EXPECT_THROW(channel_emulator{p}, std::invalid_argument);
}

TEST(GaussianNoise, ziggurat_output_is_standard_normal) {
    // 1e6 deviates: mean, variance, skewness, kurtosis and KS against Phi, plus the tail
    // (|x| > 3.44, the Ziggurat's base strip) in proportion.
    gaussian_generator g(12345);
    const size_t n = 1000000;
    std::vector<double> x(n);
    double s1 = 0, s2 = 0, s3 = 0, s4 = 0;
    size_t tail = 0;
    for (auto& v : x) {
        v = g.normal();
        s1 += v;
        s2 += v * v;
        s3 += v * v * v;
        s4 += v * v * v * v;
        tail += std::abs(v) > 3.442619855899 ? 1 : 0;
    }
    EXPECT_NEAR(s1 / n, 0.0, 0.005);
    EXPECT_NEAR(s2 / n, 1.0, 0.005);
    EXPECT_NEAR(s3 / n, 0.0, 0.02);
    EXPECT_NEAR(s4 / n, 3.0, 0.05);
    EXPECT_NEAR(static_cast<double>(tail) / n, std::erfc(3.442619855899 / std::sqrt(2.0)), 1.5e-4);
    std::sort(x.begin(), x.end());
    double ks = 0;
    for (size_t i = 0; i < n; i += 7) {
        const double f = 0.5 * std::erfc(-x[i] / std::sqrt(2.0));
        ks = std::max(ks, std::abs(f - static_cast<double>(i) / n));
    }
    EXPECT_LT(ks, 1.63 / std::sqrt(static_cast<double>(n)));  // 1% KS critical value
    // seeded: same seed, same stream
    gaussian_generator a(5), b(5), c(6);
    EXPECT_EQ(a.normal(), b.normal());
    EXPECT_NE(a.normal(), c.normal());
}

// fill() is normal() with the generator's state kept in registers: the same deviates, bit
// for bit, and the same state after it (over enough draws to take the tail and the
// wedges' slow path many times, and split at odd lengths).
TEST(GaussianNoise, fill_gives_the_same_deviates_as_normal_bit_for_bit) {
    gaussian_generator a(77), b(77);
    std::vector<float> got(100003);
    size_t done = 0;
    for (size_t len : {1u, 2u, 4095u, 50000u, 45905u}) {
        a.fill(got.data() + done, len, 0.37f);
        done += len;
    }
    ASSERT_EQ(done, got.size());
    size_t slow = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const float v = b.normal();
        ASSERT_EQ(got[i], 0.37f * v) << "deviate " << i;
        slow += std::abs(v) > 3.0f;
    }
    EXPECT_GT(slow, 100u);  // the tail (|x| > 3.44) and the outer wedges were taken
    EXPECT_EQ(a.next_u64(), b.next_u64());
}
