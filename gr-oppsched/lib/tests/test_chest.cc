// Channel estimation, SNR estimation, effective SNR and the CQI table.
#include <gnuradio/oppsched/ofdm_demodulator.h>
#include <gnuradio/oppsched/ofdm_modulator.h>
#include <gnuradio/oppsched/snr_estimator.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "ofdm_test_util.h"

using namespace gr::oppsched;
using namespace ofdm_test;

namespace {

std::vector<gr_complex> random_slot(ofdm_modulator& mod, std::mt19937_64& rng) {
    const auto& n = mod.geometry();
    return mod.modulate(random_qam(rng, static_cast<size_t>(n.header_resource_elements()), 2),
                        random_qam(rng, static_cast<size_t>(n.payload_resource_elements()), 4));
}

}  // namespace

TEST(SnrEstimation, awgn_estimate_is_within_1_db_over_0_to_30_db) {
    // Seeded AWGN at Es/N0 = 0, 5, ..., 30 dB, default estimator (noise averaged over
    // slots: running mean, then EMA 0.1): after 10 warm-up slots, 40 slots per point. Measured:
    // |mean error| <= 0.16 dB from 5 dB up (0.36 dB at 0 dB), every slot within +-1 dB
    // from 5 dB up (worst 0.80 dB), 33 of 40 at 0 dB (there the 52-subcarrier signal
    // estimate alone has a 0.7 dB standard deviation).
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    for (int snr = 0; snr <= 30; snr += 5) {
        ofdm_demodulator dem(num);
        std::mt19937_64 rng(1000 + snr);
        double sum = 0;
        int within = 0, n = 0;
        for (int k = 0; k < 50; ++k) {
            auto y = random_slot(mod, rng);
            add_awgn(rng, y, num.noise_variance_for_snr_db(snr));
            const auto r = dem.demodulate(y, false);
            ASSERT_TRUE(r.valid);
            if (k < 10) continue;
            const double e = r.snr.snr_db - snr;
            sum += e;
            within += std::abs(e) <= 1.0 ? 1 : 0;
            ++n;
        }
        EXPECT_LT(std::abs(sum / n), 0.5) << snr << " dB";
        if (snr >= 5)
            EXPECT_EQ(within, n) << snr << " dB";
        else
            EXPECT_GE(within, 0.75 * n) << snr << " dB";
    }
}

TEST(SnrEstimation, per_slot_estimate_without_noise_averaging_is_unbiased) {
    // noise_ema = 1: every slot on its own (52 noise DOF -> 0.6 dB std); the mean of 40
    // slots is within 0.5 dB of the truth over 0..30 dB.
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    ofdm_demodulator_params p;
    p.snr.noise_ema = 1.0;
    for (int snr = 0; snr <= 30; snr += 10) {
        ofdm_demodulator dem(num, p);
        std::mt19937_64 rng(2000 + snr);
        double sum = 0;
        for (int k = 0; k < 40; ++k) {
            auto y = random_slot(mod, rng);
            add_awgn(rng, y, num.noise_variance_for_snr_db(snr));
            sum += dem.demodulate(y, false).snr.snr_db - snr;
        }
        EXPECT_LT(std::abs(sum / 40), 0.5) << snr << " dB";
    }
}

TEST(SnrEstimation, noise_average_restarts_on_a_step_in_the_noise_level) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    ofdm_demodulator dem(num);
    std::mt19937_64 rng(3);
    for (int k = 0; k < 10; ++k) {
        auto y = random_slot(mod, rng);
        add_awgn(rng, y, num.noise_variance_for_snr_db(25));
        dem.demodulate(y, false);
    }
    auto y = random_slot(mod, rng);
    add_awgn(rng, y, num.noise_variance_for_snr_db(10));  // noise up 15 dB
    EXPECT_NEAR(dem.demodulate(y, false).snr.snr_db, 10.0, 1.5);
    dem.estimator().reset();
    EXPECT_EQ(dem.estimator().noise_average(), 0.0);
}

namespace {
// Mean E|H^ - H|^2 and the mean reported design error variance over 40 seeded slots of a
// 3-tap channel (delays 0, 2, 7) at `snr` dB.
std::pair<double, double> chest_mse(const ofdm_demodulator_params& p, double snr, int seed) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    ofdm_demodulator dem(num, p);
    const std::vector<int> d{0, 2, 7};
    const std::vector<gr_complex> g{{0.7f, 0.2f}, {-0.4f, 0.3f}, {0.1f, -0.35f}};
    const auto H = response(num, d, g);
    std::mt19937_64 rng(seed);
    double err = 0, rep = 0;
    int n = 0;
    for (int k = 0; k < 40; ++k) {
        auto y = convolve(random_slot(mod, rng), d, g);
        add_awgn(rng, y, num.noise_variance_for_snr_db(snr));
        const auto r = dem.demodulate(y, false);
        for (size_t i = 0; i < H.size(); ++i, ++n) {
            err += std::norm(std::complex<double>(r.channel[i]) - H[i]);
            rep += r.channel_error_var[i];
        }
    }
    return {err / n, rep / n};
}
}  // namespace

TEST(ChannelEstimation, ls_estimate_error_is_half_the_noise_variance) {
    // Smoothing off: two LTF symbols averaged, E|H^ - H|^2 = N0/2, N0 = 10^(-SNR/10).
    ofdm_demodulator_params p;
    p.smooth_channel = false;
    const auto [mse, reported] = chest_mse(p, 20.0, 4);
    EXPECT_NEAR(mse / (0.5 * std::pow(10, -2.0)), 1.0, 0.15);
    EXPECT_NEAR(reported / (0.5 * std::pow(10, -2.0)), 1.0, 0.15);  // N0/2 from the estimator
}

TEST(ChannelEstimation, smoothed_estimate_error_is_below_half_the_ls_error_and_as_reported) {
    // The Wiener smoother over the delay window [-2, 18] (21 of 64 delays): at high SNR
    // a projection, error (21/52) N0/2 on average; at low SNR lower still. Measured on the
    // same seeded slots: 0.40 x LS at 20 dB, ~0.3 x LS at 5 dB. Bounds: < 0.5 x LS, and the
    // reported design variance (used for the LLR noise variances) within 25% of the truth.
    for (double snr : {5.0, 20.0}) {
        ofdm_demodulator_params ls;
        ls.smooth_channel = false;
        const auto [mse_ls, rep_ls] = chest_mse(ls, snr, 40 + static_cast<int>(snr));
        const auto [mse_sm, rep_sm] = chest_mse({}, snr, 40 + static_cast<int>(snr));
        (void)rep_ls;
        EXPECT_LT(mse_sm, 0.5 * mse_ls) << snr << " dB";
        EXPECT_NEAR(rep_sm / mse_sm, 1.0, 0.25) << snr << " dB";
    }
}

TEST(ChannelEstimation, adaptive_window_is_short_on_a_flat_channel_and_long_with_a_late_path) {
    // 30 seeded slots per case. Flat channel (2 samples early, as the sync delivers): the
    // long window's extra energy is noise, the short window is chosen (measured 30, 29
    // and 30 of 30 at 0, 10 and 30 dB). A path 13 samples late at -10 dB: the long window
    // from 10 dB up (measured 30/30 at 10 and 30 dB). Bounds: >= 28 of 30.
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(8);
    for (double snr : {0.0, 10.0, 30.0}) {
        ofdm_demodulator dem(num);
        int shorts = 0, longs = 0;
        for (int k = 0; k < 30; ++k) {
            auto flat = convolve(random_slot(mod, rng), {2}, {{0.6f, -0.8f}});
            add_awgn(rng, flat, num.noise_variance_for_snr_db(snr));
            shorts += dem.demodulate(flat, false).chest_window == 0 ? 1 : 0;
            if (snr < 10.0) continue;
            auto late = convolve(random_slot(mod, rng), {2, 15}, {{0.95f, 0.0f}, {0.0f, 0.3f}});
            add_awgn(rng, late, num.noise_variance_for_snr_db(snr));
            longs += dem.demodulate(late, false).chest_window == 1 ? 1 : 0;
        }
        EXPECT_GE(shorts, 28) << snr << " dB";
        if (snr >= 10.0) EXPECT_GE(longs, 28) << snr << " dB";
    }
}

TEST(ChannelEstimation, bad_parameters_are_rejected_naming_the_field) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_demodulator_params p;
    p.tracking_halfwidth = -1;
    try {
        ofdm_demodulator d(num, p);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("ofdm_demodulator.tracking_halfwidth: -1"),
                  std::string::npos)
            << e.what();
    }
    p = ofdm_demodulator_params{};
    p.chest_delay_margin = 17;  // above cp_len 16
    EXPECT_THROW(ofdm_demodulator(num, p), std::invalid_argument);
}

TEST(EffectiveSnr, flat_channel_effective_snr_equals_the_snr) {
    const std::vector<float> g(52, 10.0f);
    EXPECT_NEAR(effective_snr(g.data(), g.size(), effective_snr_method::miesm, 1), 10.0, 1e-5);
    EXPECT_NEAR(effective_snr(g.data(), g.size(), effective_snr_method::eesm, 4), 10.0, 1e-4);
    // a deep notch costs more than the mean says: both mappings stay below the mean
    std::vector<float> sel(52, 100.0f);
    for (size_t i = 0; i < 13; ++i) sel[i] = 0.1f;
    const double mean = (39 * 100.0 + 13 * 0.1) / 52;
    const double mi = effective_snr(sel.data(), sel.size(), effective_snr_method::miesm, 1);
    const double ee = effective_snr(sel.data(), sel.size(), effective_snr_method::eesm, 4);
    EXPECT_LT(mi, mean);
    EXPECT_GT(mi, 10.0);
    EXPECT_LT(ee, mi);  // EESM with a small beta is dominated by the weak subcarriers
}

TEST(EffectiveSnr, estimated_effective_snr_tracks_the_true_one_on_a_selective_channel) {
    // 3-tap channel with a notch: the estimate (MIESM, smoothing + bias correction)
    // averaged over 30 slots is within 1 dB of the MIESM of the true per-subcarrier SNRs.
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    const std::vector<int> d{0, 3, 5};
    const std::vector<gr_complex> g{{0.6f, 0.0f}, {0.0f, 0.55f}, {-0.4f, 0.1f}};
    const auto H = response(num, d, g);
    for (double snr : {5.0, 15.0, 25.0}) {
        std::vector<float> gt;
        for (const auto& h : H)
            gt.push_back(static_cast<float>(std::norm(h) * std::pow(10, snr / 10)));
        const double truth =
            10 * std::log10(effective_snr(gt.data(), gt.size(), effective_snr_method::miesm, 1));
        ofdm_demodulator dem(num);
        std::mt19937_64 rng(5 + static_cast<int>(snr));
        double sum = 0;
        for (int k = 0; k < 30; ++k) {
            auto y = convolve(random_slot(mod, rng), d, g);
            add_awgn(rng, y, num.noise_variance_for_snr_db(snr));
            sum += dem.demodulate(y, false).snr.effective_snr_db;
        }
        EXPECT_NEAR(sum / 30, truth, 1.0) << snr << " dB";
    }
}

TEST(Cqi, default_table_is_15_thresholds_from_minus_4_to_24_db_in_2_db_steps) {
    const auto t = cqi_params::default_thresholds_db();
    ASSERT_EQ(t.size(), 15u);
    EXPECT_EQ(t.front(), -4.0);
    EXPECT_EQ(t.back(), 24.0);
    EXPECT_EQ(cqi_from_snr_db(-4.01, t), 0);
    EXPECT_EQ(cqi_from_snr_db(-4.0, t), 1);
    EXPECT_EQ(cqi_from_snr_db(9.99, t), 7);
    EXPECT_EQ(cqi_from_snr_db(10.0, t), 8);
    EXPECT_EQ(cqi_from_snr_db(24.0, t), 15);
    EXPECT_EQ(cqi_from_snr_db(60.0, t), 15);
    EXPECT_EQ(cqi_from_snr_db(std::nan(""), t), 0);
    EXPECT_EQ(cqi_lower_snr_db(8, t), 10.0);
    EXPECT_TRUE(std::isinf(cqi_lower_snr_db(0, t)));
    int prev = 0;
    for (double s = -10; s < 30; s += 0.25) {
        const int c = cqi_from_snr_db(s, t);
        EXPECT_GE(c, prev);
        prev = c;
    }
}

TEST(Cqi, bad_tables_and_parameters_are_rejected_naming_the_field) {
    cqi_params p;
    p.thresholds_db[3] = p.thresholds_db[2];
    try {
        p.validate();
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("cqi.thresholds_db[3]"), std::string::npos)
            << e.what();
    }
    p = cqi_params{};
    p.thresholds_db.pop_back();
    EXPECT_THROW(p.validate(), std::invalid_argument);
    snr_estimator_params sp;
    sp.noise_ema = 0.0;
    try {
        snr_estimator e(sp);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("snr_estimator.noise_ema: 0"), std::string::npos);
    }
    sp = snr_estimator_params{};
    sp.cqi.eesm_beta = -1;
    EXPECT_THROW(snr_estimator{sp}, std::invalid_argument);
}

TEST(Cqi, cqi_rises_with_the_channel_and_is_0_for_zeros) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    ofdm_demodulator_params p;
    p.snr.noise_ema = 1.0;
    ofdm_demodulator dem(num, p);
    std::mt19937_64 rng(6);
    int prev = -1;
    for (int snr = -2; snr <= 26; snr += 4) {
        int sum = 0;
        for (int k = 0; k < 5; ++k) {
            auto y = random_slot(mod, rng);
            add_awgn(rng, y, num.noise_variance_for_snr_db(snr));
            sum += dem.demodulate(y, false).snr.cqi;
        }
        const int c = (sum + 2) / 5;
        EXPECT_GE(c, prev) << snr;
        // within one bin of the table's value for the true SNR
        EXPECT_LE(std::abs(c - cqi_from_snr_db(snr + 0.01, cqi_params::default_thresholds_db())), 1)
            << snr;
        prev = c;
    }
    std::vector<gr_complex> zeros(static_cast<size_t>(num.slot_samples()));
    EXPECT_EQ(dem.demodulate(zeros, false).snr.cqi, 0);
}
