// Gray QAM mapper and max-log soft demapper (contract tests over BPSK/QPSK/16QAM/64QAM).
#include <gnuradio/oppsched/qam_mapper.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

#include "fec_test_util.h"

using namespace gr::oppsched;
using namespace fec_test;

class mapper_test : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Constellations, mapper_test, ::testing::Values(1, 2, 4, 6),
                         [](const auto& info) { return "bps" + std::to_string(info.param); });

TEST_P(mapper_test, constellation_has_unit_average_energy) {
    qam_mapper m(GetParam());
    double e = 0.0;
    for (const auto& p : m.constellation()) e += std::norm(p);
    EXPECT_NEAR(e / static_cast<double>(m.constellation().size()), 1.0, 1e-6);
}

TEST_P(mapper_test, nearest_neighbours_differ_in_exactly_one_bit_gray) {
    qam_mapper m(GetParam());
    const auto& c = m.constellation();
    float dmin = 1e9f;
    for (std::size_t a = 0; a < c.size(); ++a)
        for (std::size_t b = a + 1; b < c.size(); ++b) dmin = std::min(dmin, std::abs(c[a] - c[b]));
    int pairs = 0;
    for (std::size_t a = 0; a < c.size(); ++a)
        for (std::size_t b = a + 1; b < c.size(); ++b)
            if (std::abs(c[a] - c[b]) < dmin * 1.01f) {
                ++pairs;
                EXPECT_EQ(__builtin_popcount(static_cast<unsigned>(a ^ b)), 1) << a << " " << b;
            }
    EXPECT_GT(pairs, 0);
}

TEST_P(mapper_test, closed_form_llrs_equal_brute_force_max_log) {
    qam_mapper m(GetParam());
    std::mt19937_64 rng(10 + static_cast<unsigned>(GetParam()));
    std::normal_distribution<float> g(0.0f, 0.8f);
    std::uniform_real_distribution<float> u(0.01f, 2.0f);
    const std::size_t n = 2000;
    std::vector<gr_complex> y(n);
    std::vector<float> nv(n);
    for (std::size_t i = 0; i < n; ++i) {
        y[i] = gr_complex(g(rng), g(rng));
        nv[i] = u(rng);
    }
    const auto fast = m.demap(y, nv);
    std::vector<float> ref(fast.size());
    m.demap_reference(y.data(), nv.data(), n, ref.data());
    for (std::size_t i = 0; i < fast.size(); ++i)
        ASSERT_NEAR(fast[i], ref[i], 1e-3f * (1.0f + std::fabs(ref[i]))) << i;
}

TEST_P(mapper_test, llr_signs_match_the_bits_positive_meaning_zero) {
    qam_mapper m(GetParam());
    std::mt19937_64 rng(20);
    const auto bits = random_bits(static_cast<std::size_t>(GetParam()) * 500, rng);
    auto y = m.map(bits);
    add_awgn(y, 1e-4f, rng);  // 40 dB: noise std 0.007 << half the 64QAM distance 0.154
    const auto l = m.demap(y, std::vector<float>(y.size(), 1e-4f));
    ASSERT_EQ(l.size(), bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) ASSERT_EQ(l[i] < 0.0f, bits[i] == 1) << i;
}

TEST_P(mapper_test, llr_magnitude_scales_with_one_over_noise_variance) {
    qam_mapper m(GetParam());
    std::mt19937_64 rng(30);
    std::normal_distribution<float> g(0.0f, 0.7f);
    std::vector<gr_complex> y(100);
    for (auto& v : y) v = gr_complex(g(rng), g(rng));
    const auto l1 = m.demap(y, std::vector<float>(y.size(), 1.0f));
    const auto l4 = m.demap(y, std::vector<float>(y.size(), 0.25f));
    for (std::size_t i = 0; i < l1.size(); ++i)
        EXPECT_NEAR(l4[i], 4.0f * l1[i], 1e-4f * (1.0f + std::fabs(l4[i])));
}

TEST_P(mapper_test, unusable_res_become_erasures) {
    qam_mapper m(GetParam());
    const std::vector<gr_complex> y = {
        {NAN, 0.0f}, {0.5f, INFINITY}, {0.5f, 0.5f}, {0.5f, 0.5f}, {0.5f, 0.5f}};
    const std::vector<float> nv = {1.0f, 1.0f, INFINITY, -1.0f, NAN};  // (0 is too)
    for (float v : m.demap(y, nv)) EXPECT_EQ(v, 0.0f);
    for (float v : m.demap({m.constellation()[0]}, {0.0f})) EXPECT_EQ(v, 0.0f);
    // a tiny positive noise variance is floored: finite, correctly signed LLRs
    const auto l = m.demap({m.constellation()[0]}, {1e-30f});
    for (float v : l) {
        EXPECT_TRUE(std::isfinite(v));
        EXPECT_GT(v, 0.0f);  // constellation point 0 = all bits 0
    }
}

TEST(MapperTables, points_follow_802_11_gray_tables) {
    const float s2 = 1.0f / std::sqrt(2.0f), s10 = 1.0f / std::sqrt(10.0f),
                s42 = 1.0f / std::sqrt(42.0f);
    auto pt = [](int bps, const char* bits) {
        return qam_mapper(bps).map(bits_from_string(bits))[0];
    };
    EXPECT_EQ(pt(1, "0"), gr_complex(-1.0f, 0.0f));
    EXPECT_EQ(pt(1, "1"), gr_complex(1.0f, 0.0f));
    EXPECT_NEAR(std::abs(pt(2, "01") - gr_complex(-s2, s2)), 0.0f, 1e-6f);
    // 16QAM I: 00 -3, 01 -1, 11 +1, 10 +3 (Table 17-12)
    EXPECT_NEAR(std::abs(pt(4, "0010") - gr_complex(-3 * s10, 3 * s10)), 0.0f, 1e-6f);
    EXPECT_NEAR(std::abs(pt(4, "1101") - gr_complex(1 * s10, -1 * s10)), 0.0f, 1e-6f);
    // 64QAM I: 000 -7, 001 -5, 011 -3, 010 -1, 110 1, 111 3, 101 5, 100 7 (Table 17-13)
    const char* levels[8] = {"000", "001", "011", "010", "110", "111", "101", "100"};
    for (int i = 0; i < 8; ++i) {
        const std::string b = std::string(levels[i]) + "000";
        EXPECT_NEAR(pt(6, b.c_str()).real(), static_cast<float>(2 * i - 7) * s42, 1e-6f) << b;
        EXPECT_NEAR(pt(6, b.c_str()).imag(), -7.0f * s42, 1e-6f);
    }
    EXPECT_THROW(qam_mapper(3), std::invalid_argument);
    EXPECT_THROW(qam_mapper(4).map(std::vector<std::uint8_t>(6)), std::invalid_argument);
}
