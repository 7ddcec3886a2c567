// wiener_smoother: the frequency-domain Wiener channel smoother on its own, fed LS channel
// estimates (true response + complex Gaussian error of known variance). Seeded.
#include <gnuradio/oppsched/numerology.h>
#include <gnuradio/oppsched/wiener_smoother.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "ofdm_test_util.h"

using namespace gr::oppsched;

namespace {

const numerology& evdo() {
    static const numerology n = numerology::profile("evdo", 1e6);
    return n;
}

std::vector<gr_complex> to_float(const std::vector<std::complex<double>>& h) {
    return std::vector<gr_complex>(h.begin(), h.end());
}

std::vector<gr_complex> noisy(const std::vector<gr_complex>& h, double var, std::mt19937_64& rng) {
    std::vector<gr_complex> x = h;
    ofdm_test::add_awgn(rng, x, var);
    return x;
}

TEST(WienerSmoother, a_noise_free_channel_inside_the_window_is_left_unchanged_at_high_snr) {
    const auto& num = evdo();
    const auto H =
        to_float(ofdm_test::response(num, {0, 3, 9}, {{0.8f, 0.1f}, {0.4f, -0.3f}, {0.0f, 0.2f}}));
    wiener_smoother sm(num, 2, false);
    auto h = H;
    std::vector<float> mse(h.size());
    EXPECT_EQ(sm.smooth(h.data(), mse.data(), 1e-9, 1.0), 1);
    EXPECT_LT(ofdm_test::max_abs_error(h, H), 1e-3);
}

TEST(WienerSmoother, smoothing_removes_most_of_the_ls_error_and_reports_it) {
    const auto& num = evdo();
    const auto H = to_float(ofdm_test::response(num, {0, 5}, {{0.7f, 0.0f}, {0.0f, 0.5f}}));
    const double ls_var = 0.05;  // N0/2 at 10 dB
    wiener_smoother sm(num, 2, false);
    std::mt19937_64 rng(11);
    double err = 0.0, reported = 0.0;
    const int trials = 400;
    std::vector<float> mse(H.size());
    for (int t = 0; t < trials; ++t) {
        auto h = noisy(H, ls_var, rng);
        sm.smooth(h.data(), mse.data(), ls_var, 0.74);
        err += ofdm_test::mse(h, H);
        for (float m : mse) reported += m;
    }
    err /= trials;
    reported /= trials * static_cast<double>(H.size());
    // the long window holds ~21 of 52 degrees of freedom: well below half the LS error
    EXPECT_LT(err, 0.5 * ls_var);
    EXPECT_NEAR(err, reported, 0.25 * reported);
    for (float m : mse) EXPECT_LT(m, ls_var);
}

TEST(WienerSmoother, adaptive_window_is_short_on_a_flat_channel_and_long_with_a_late_path) {
    const auto& num = evdo();
    const int cp = num.params().cp_len;
    wiener_smoother sm(num, 2, true);
    ASSERT_EQ(sm.windows(), 2u);
    EXPECT_LT(sm.rank(0), sm.rank(1));
    const double ls_var = 0.005;  // 20 dB
    std::mt19937_64 rng(5);
    std::vector<float> mse(sm.subcarriers());
    const auto flat = to_float(ofdm_test::response(num, {0}, {{1.0f, 0.0f}}));
    const auto late = to_float(ofdm_test::response(num, {0, cp - 2}, {{0.8f, 0.0f}, {0.0f, 0.6f}}));
    int flat_short = 0, late_long = 0;
    for (int t = 0; t < 50; ++t) {
        auto h = noisy(flat, ls_var, rng);
        flat_short += sm.smooth(h.data(), mse.data(), ls_var, 1.0) == 0;
        h = noisy(late, ls_var, rng);
        late_long += sm.smooth(h.data(), mse.data(), ls_var, 1.0) == 1;
    }
    EXPECT_GE(flat_short, 48);
    EXPECT_EQ(late_long, 50);
}

TEST(WienerSmoother, a_delay_margin_outside_the_cyclic_prefix_is_rejected_by_name) {
    const auto& num = evdo();
    try {
        wiener_smoother(num, num.params().cp_len + 1, true);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("delay_margin"), std::string::npos);
    }
    EXPECT_THROW(wiener_smoother(num, -1, false), std::invalid_argument);
}

}  // namespace
