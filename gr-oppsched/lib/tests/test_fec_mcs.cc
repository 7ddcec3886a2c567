// The MCS table and the TB-size rule the MAC relies on.
#include <gnuradio/oppsched/mcs.h>
#include <gnuradio/oppsched/rate_matcher.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

using namespace gr::oppsched;

TEST(FecMcs, table_lists_the_eight_schemes_with_their_spectral_efficiency) {
    const struct {
        int bps;
        int num, den;
        double se;
    } expect[8] = {{1, 1, 2, 0.5}, {2, 1, 2, 1.0}, {2, 3, 4, 1.5}, {4, 1, 2, 2.0},
                   {4, 3, 4, 3.0}, {6, 2, 3, 4.0}, {6, 3, 4, 4.5}, {6, 5, 6, 5.0}};
    ASSERT_EQ(mcs_set::all().size(), 8u);
    for (int i = 0; i < 8; ++i) {
        const auto& m = mcs_set::get(i);
        EXPECT_EQ(m.index, i);
        EXPECT_EQ(m.bits_per_symbol, expect[i].bps) << m.name;
        EXPECT_EQ(m.rate_num, expect[i].num) << m.name;
        EXPECT_EQ(m.rate_den, expect[i].den) << m.name;
        EXPECT_DOUBLE_EQ(m.spectral_efficiency(), expect[i].se) << m.name;
        const auto& p = pattern_of(m.rate);
        EXPECT_EQ(p.numerator() * m.rate_den, p.denominator() * m.rate_num) << m.name;
    }
    try {
        mcs_set::get(8);
        FAIL() << "mcs 8 accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("mcs: 8"), std::string::npos) << e.what();
    }
    EXPECT_THROW(mcs_set::get(-1), std::invalid_argument);
}

TEST(FecMcs, conv_tb_size_is_payload_res_times_rate_minus_crc_and_tail) {
    for (const auto& name : numerology::profile_names()) {
        for (double fs : {1e6, 5e6}) {
            const auto n = numerology::profile(name, fs, "conv");
            const std::size_t re = static_cast<std::size_t>(n.payload_resource_elements());
            // rate 1/2, no puncturing: C coded bits = 2 (K + 6) at most, K = 8 bytes + 32
            EXPECT_EQ(mcs_set::tb_bytes(0, n), (re / 2 - 6 - 32) / 8);
            EXPECT_EQ(mcs_set::tb_bytes(1, n), (2 * re / 2 - 6 - 32) / 8);
            EXPECT_EQ(mcs_set::tb_bytes(3, n), (4 * re / 2 - 6 - 32) / 8);
            // punctured: about C R info bits; the pattern phase at the end of the codeword
            // (and its worst RV) may cost one byte
            const std::size_t r56 = (6 * re * 5 / 6 - 6 - 32) / 8;
            EXPECT_LE(mcs_set::tb_bytes(7, n), r56);
            EXPECT_GE(mcs_set::tb_bytes(7, n) + 1, r56);
        }
    }
    // evdo at 1 Msps with the default numerology (13 payload symbols of 48 REs)
    const auto n = numerology::profile("evdo", 1e6, "conv");
    ASSERT_EQ(n.payload_resource_elements(), 624);
    EXPECT_EQ(mcs_set::tb_bytes(0, n), 34u);
    EXPECT_EQ(mcs_set::tb_bytes(7, n), 385u);
}

TEST(FecMcs, ldpc_tb_size_is_coded_bits_times_rate_minus_crc_in_whole_bytes) {
    for (const auto& name : numerology::profile_names()) {
        for (double fs : {1e6, 5e6}) {
            const auto n = numerology::profile(name, fs);  // LDPC is the default
            ASSERT_EQ(n.params().fec, fec_scheme::ldpc);
            std::size_t prev = 0;
            for (const auto& m : mcs_set::all()) {
                const std::size_t C = mcs_set::coded_bits(m.index, n);
                const std::size_t cap =
                    C * static_cast<std::size_t>(m.rate_num) / static_cast<std::size_t>(m.rate_den);
                const std::size_t b = mcs_set::tb_bytes(m.index, n);
                EXPECT_EQ(b, (cap - 32) / 8) << name << " " << fs << " " << m.name;
                EXPECT_GT(b, prev) << m.name;
                prev = b;
                EXPECT_EQ(mcs_set::tb_bytes_for_coded_bits(m.index, C, fec_scheme::ldpc), b);
            }
        }
    }
    const auto n = numerology::profile("evdo", 1e6);
    EXPECT_EQ(mcs_set::tb_bytes(0, n), 35u);   // (312 - 32) / 8
    EXPECT_EQ(mcs_set::tb_bytes(7, n), 386u);  // (3120 - 32) / 8
    EXPECT_EQ(mcs_set::tb_bytes_for_coded_bits(0, 70, fec_scheme::ldpc), 0u);
    EXPECT_EQ(mcs_set::tb_bytes_for_coded_bits(0, 80, fec_scheme::ldpc), 1u);
}

TEST(FecMcs, ldpc_harq_capacity_holds_the_soft_bits_of_every_tb_size) {
    for (const auto& name : numerology::profile_names()) {
        const auto n = numerology::profile(name, 1e6);
        const std::size_t cap = mcs_set::max_mother_bits(n);
        std::size_t seen = 0;
        for (const auto& m : mcs_set::all())
            for (std::size_t b = 1; b <= mcs_set::tb_bytes(m.index, n); ++b)
                seen = std::max(seen, mcs_set::soft_bits(b, m.index, n));
        EXPECT_EQ(cap, seen) << name;
    }
}

TEST(FecMcs, fec_names_round_trip_and_unknown_names_are_refused) {
    EXPECT_EQ(fec_from_string("ldpc"), fec_scheme::ldpc);
    EXPECT_EQ(fec_from_string("conv"), fec_scheme::conv);
    EXPECT_STREQ(to_string(fec_scheme::conv), "conv");
    try {
        numerology::profile("evdo", 1e6, "turbo");
        FAIL() << "turbo accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("numerology.fec: 'turbo'"), std::string::npos)
            << e.what();
    }
}

TEST(FecMcs, conv_tb_size_is_maximal_for_every_mcs_profile_and_rate) {
    for (const auto& name : numerology::profile_names()) {
        for (double fs : {1e6, 5e6}) {
            const auto n = numerology::profile(name, fs, "conv");
            std::size_t prev = 0;
            for (const auto& m : mcs_set::all()) {
                const std::size_t b = mcs_set::tb_bytes(m.index, n);
                const std::size_t C = mcs_set::coded_bits(m.index, n);
                ASSERT_GT(b, 0u) << name << " " << fs << " " << m.name;
                EXPECT_GT(b, prev) << "TB size must grow with the MCS: " << m.name;
                prev = b;
                // fits for every RV, one byte more does not
                EXPECT_LE(rate_matcher::max_kept_bits(mcs_set::mother_bits(b), m.rate), C);
                EXPECT_GT(rate_matcher::max_kept_bits(mcs_set::mother_bits(b + 1), m.rate), C);
                // the realised code rate is at most the nominal one
                const double info = 8.0 * (b + 4);
                EXPECT_LE(info / static_cast<double>(C), m.code_rate_value() + 1e-12);
            }
        }
    }
}

TEST(FecMcs, conv_harq_capacity_and_lowest_mcs_lookups) {
    const auto n = numerology::profile("3ms", 1e6, "conv");
    EXPECT_EQ(mcs_set::max_mother_bits(n), mcs_set::mother_bits(mcs_set::tb_bytes(7, n)));
    EXPECT_EQ(mcs_set::lowest_mcs_for_bytes(1, n), 0);
    EXPECT_EQ(mcs_set::lowest_mcs_for_bytes(mcs_set::tb_bytes(0, n) + 1, n), 1);
    EXPECT_EQ(mcs_set::lowest_mcs_for_bytes(mcs_set::tb_bytes(7, n) + 1, n), -1);
    EXPECT_EQ(mcs_set::tb_bytes_for_coded_bits(0, 10), 0u);  // too small for any TB
}
