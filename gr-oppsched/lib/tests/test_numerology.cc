#include <gnuradio/oppsched/numerology.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

using gr::oppsched::numerology;
using gr::oppsched::numerology_params;

TEST(Numerology, evdo_profile_at_1_msps_has_20_symbols_and_67_guard_samples) {
    const auto n = numerology::profile("evdo", 1e6);
    EXPECT_EQ(n.slot_samples(), 1667);
    EXPECT_EQ(n.symbol_len(), 80);
    EXPECT_EQ(n.symbols_per_slot(), 20);
    EXPECT_EQ(n.guard_samples(), 67);
    // 3 preamble (STF + LTF) + 4 header + 13 payload symbols
    EXPECT_EQ(n.payload_symbols(), 13);
    EXPECT_EQ(n.payload_resource_elements(), 13 * 48);
    EXPECT_EQ(n.data_symbols(), 17);
}

TEST(Numerology, default_allocation_is_802_11a_with_dc_and_edge_guards_empty) {
    const auto n = numerology::profile("evdo", 1e6);
    const std::vector<int> pilots{-21, -7, 7, 21};
    EXPECT_EQ(n.pilot_subcarriers(), pilots);
    ASSERT_EQ(n.data_subcarriers().size(), 48u);
    ASSERT_EQ(n.occupied_subcarriers().size(), 52u);
    EXPECT_EQ(n.occupied_subcarriers().front(), -26);
    EXPECT_EQ(n.occupied_subcarriers().back(), 26);
    EXPECT_EQ(n.data_subcarriers().front(), -26);
    EXPECT_EQ(n.data_subcarriers()[5], -20);  // -21 is a pilot
    for (size_t i = 1; i < n.data_subcarriers().size(); ++i)
        EXPECT_LT(n.data_subcarriers()[i - 1], n.data_subcarriers()[i]);
    for (int k : n.occupied_subcarriers()) {
        EXPECT_NE(k, 0);
        EXPECT_LE(std::abs(k), 26);
    }
    EXPECT_EQ(n.fft_bin(-1), 63);
    EXPECT_EQ(n.fft_bin(26), 26);
}

TEST(Numerology, preamble_layout_is_stf_then_gi_then_two_long_symbols) {
    const auto n = numerology::profile("evdo", 1e6);
    EXPECT_EQ(n.preamble_samples(), 240);
    EXPECT_EQ(n.stf_samples(), 80);
    EXPECT_EQ(n.ltf_gi_samples(), 32);
    EXPECT_EQ(n.ltf_offset(0), 112);
    EXPECT_EQ(n.ltf_offset(1), 176);
    EXPECT_EQ(n.symbol_offset(0), 240);
    EXPECT_EQ(n.symbol_offset(n.data_symbols()) + n.guard_samples(), n.slot_samples());
}

TEST(Numerology, snr_per_subcarrier_is_sample_snr_times_fft_len_over_occupied) {
    const auto n = numerology::profile("evdo", 1e6);
    EXPECT_NEAR(n.subcarrier_snr_gain(), 64.0 / 52.0, 1e-12);
    // Es/N0 = 10 dB per subcarrier <=> sigma^2 = (64/52) / 10 at unit sample power
    EXPECT_NEAR(n.noise_variance_for_snr_db(10.0), 64.0 / 52.0 / 10.0, 1e-12);
}

TEST(Numerology, other_fft_sizes_get_a_symmetric_allocation_with_spread_pilots) {
    numerology_params p;
    p.fft_len = 128;
    p.cp_len = 32;
    p.data_carriers = 96;
    p.pilot_carriers = 8;
    p.slot_duration = 3e-3;
    const numerology n(p);
    EXPECT_EQ(n.occupied_subcarriers().front(), -52);
    EXPECT_EQ(n.occupied_subcarriers().back(), 52);
    EXPECT_EQ(n.pilot_subcarriers().size(), 8u);
    EXPECT_EQ(n.data_subcarriers().size(), 96u);
    EXPECT_GE(n.ltf_gi_samples(), p.cp_len);
}

TEST(Numerology, every_profile_fits_a_slot_at_1_and_5_msps) {
    for (const auto& name : numerology::profile_names()) {
        for (double fs : {1e6, 5e6, 10e6}) {
            const auto n = numerology::profile(name, fs);
            EXPECT_GE(n.payload_symbols(), 1) << name << " at " << fs;
            EXPECT_EQ(n.symbols_per_slot() * n.symbol_len() + n.guard_samples(), n.slot_samples());
            EXPECT_NEAR(n.realised_slot_duration(), n.params().slot_duration, 0.5 / fs);
        }
    }
}

TEST(Numerology, inconsistent_parameters_are_rejected_naming_the_field) {
    numerology_params p;
    p.cp_len = 64;
    try {
        numerology n(p);
        FAIL() << "cp_len == fft_len accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("cp_len: 64"), std::string::npos) << e.what();
    }
    p = numerology_params{};
    p.preamble_symbols = 2;  // no room for STF + LTF guard + two long symbols
    EXPECT_THROW(numerology{p}, std::invalid_argument);
    p = numerology_params{};
    p.slot_duration = 100e-6;  // shorter than preamble + header
    EXPECT_THROW(numerology{p}, std::invalid_argument);
    EXPECT_THROW(numerology::profile("lte"), std::invalid_argument);
    p = numerology_params{};
    p.ldpc_max_n = 1000;
    try {
        numerology n(p);
        FAIL() << "ldpc_max_n 1000 accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("ldpc_max_n: 1000"), std::string::npos) << e.what();
    }
}
