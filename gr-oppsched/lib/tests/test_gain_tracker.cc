// gain_tracker: per-symbol common gain from the pilots, on synthetic FFT'd symbols
// Y_s,k = g_s H_k X_s,k (+ noise), X the pilots on pilot subcarriers. Seeded.
#include <gnuradio/oppsched/gain_tracker.h>
#include <gnuradio/oppsched/numerology.h>
#include <gnuradio/oppsched/preamble.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <random>
#include <stdexcept>
#include <vector>

#include "ofdm_test_util.h"

using namespace gr::oppsched;

namespace {

constexpr double kPi = 3.14159265358979323846;

class gain_tracker_test : public ::testing::Test {
  protected:
    numerology num = numerology::profile("evdo", 1e6);
    ofdm_sequences seq{num};
    std::size_t K = num.occupied_subcarriers().size();
    int n_sym = num.data_symbols();
    std::vector<std::size_t> pilots;
    std::vector<gr_complex> H;
    std::vector<float> mse;

    void SetUp() override {
        const auto& occ = num.occupied_subcarriers();
        for (int k : num.pilot_subcarriers())
            pilots.push_back(
                static_cast<std::size_t>(std::find(occ.begin(), occ.end(), k) - occ.begin()));
        const auto h = ofdm_test::response(num, {0, 4}, {{0.9f, 0.2f}, {0.1f, -0.3f}});
        H.assign(h.begin(), h.end());
        mse.assign(K, 0.0f);
    }

    //! Y for gains g (one per symbol), with complex noise of variance n0 per RE.
    std::vector<gr_complex> symbols(const std::vector<gr_complex>& g, double n0,
                                    std::mt19937_64& rng) const {
        std::vector<gr_complex> Y(static_cast<std::size_t>(n_sym) * K, gr_complex(0.0f, 0.0f));
        for (int s = 0; s < n_sym; ++s)
            for (std::size_t i = 0; i < pilots.size(); ++i) {
                const std::size_t q = pilots[i];
                Y[static_cast<std::size_t>(s) * K + q] =
                    g[static_cast<std::size_t>(s)] * H[q] * seq.pilot(s, static_cast<int>(i));
            }
        if (n0 > 0) ofdm_test::add_awgn(rng, Y, n0);
        return Y;
    }

    //! g_s = a e^{j (phi0 + w s)}: a constant amplitude with a residual CFO
    std::vector<gr_complex> rotating(float a, double phi0, double w) const {
        std::vector<gr_complex> g;
        for (int s = 0; s < n_sym; ++s)
            g.push_back(std::polar(a, static_cast<float>(phi0 + w * s)));
        return g;
    }

    //! \p tr after tracking noise-free symbols of the gains \p g
    void track_clean(gain_tracker& tr, const std::vector<gr_complex>& g) const {
        std::mt19937_64 rng(1);
        const auto Y = symbols(g, 0.0, rng);
        tr.track(Y.data(), H.data(), mse.data(), K, n_sym, 1e-6, seq);
    }
};

TEST_F(gain_tracker_test, a_residual_cfo_ramp_is_followed_exactly_without_noise) {
    const auto g = rotating(0.8f, 0.3, 0.05);
    gain_tracker tr(pilots, true, true, 4);
    track_clean(tr, g);
    ASSERT_EQ(tr.gain().size(), static_cast<std::size_t>(n_sym));
    EXPECT_LT(ofdm_test::max_abs_error(tr.gain(), g), 1e-4);
    for (float v : tr.error_var()) EXPECT_LT(v, 1e-5f);
}

TEST_F(gain_tracker_test, the_fit_cuts_the_noise_of_the_raw_pilot_gains) {
    const auto g = rotating(1.0f, -0.4, 0.02);
    const double n0 = 0.05;
    std::mt19937_64 rng(3);
    gain_tracker smooth(pilots, true, true, 4);
    gain_tracker raw(pilots, true, true, 0);
    double e_smooth = 0.0, e_raw = 0.0, reported = 0.0;
    for (int t = 0; t < 200; ++t) {
        const auto Y = symbols(g, n0, rng);
        smooth.track(Y.data(), H.data(), mse.data(), K, n_sym, n0, seq);
        raw.track(Y.data(), H.data(), mse.data(), K, n_sym, n0, seq);
        e_smooth += ofdm_test::mse(smooth.gain(), g);
        e_raw += ofdm_test::mse(raw.gain(), g);
        for (float v : smooth.error_var()) reported += v;
    }
    reported /= static_cast<double>(n_sym);
    EXPECT_LT(e_smooth, 0.3 * e_raw);
    EXPECT_NEAR(e_smooth, reported, 0.3 * reported);
}

TEST_F(gain_tracker_test, phase_only_tracking_gives_unit_gains_with_the_symbol_phase) {
    const auto g = rotating(0.5f, 1.0, 0.1);
    gain_tracker tr(pilots, true, false, 4);
    track_clean(tr, g);
    for (int s = 0; s < n_sym; ++s) {
        const gr_complex x = tr.gain()[static_cast<std::size_t>(s)];
        EXPECT_NEAR(std::abs(x), 1.0f, 1e-5f);
        EXPECT_NEAR(std::remainder(std::arg(x) - (1.0 + 0.1 * s), 2 * kPi), 0.0, 1e-4);
    }
}

TEST_F(gain_tracker_test, without_phase_tracking_every_gain_is_one_with_no_error) {
    const auto g = rotating(0.5f, 1.0, 0.1);
    std::mt19937_64 rng(1);
    const auto Y = symbols(g, 0.01, rng);
    gain_tracker tr(pilots, false, true, 4);
    tr.track(Y.data(), H.data(), mse.data(), K, n_sym, 0.01, seq);
    for (const auto& x : tr.gain()) EXPECT_EQ(x, gr_complex(1.0f, 0.0f));
    for (float v : tr.error_var()) EXPECT_EQ(v, 0.0f);
}

TEST_F(gain_tracker_test, a_halfwidth_outside_0_to_64_is_rejected_by_name) {
    try {
        gain_tracker(pilots, true, true, 65);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("halfwidth"), std::string::npos);
    }
    EXPECT_THROW(gain_tracker(pilots, true, true, -1), std::invalid_argument);
}

}  // namespace
