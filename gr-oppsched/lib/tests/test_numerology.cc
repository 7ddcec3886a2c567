#include <gnuradio/oppsched/numerology.h>
#include <gtest/gtest.h>

#include <stdexcept>

using gr::oppsched::numerology;
using gr::oppsched::numerology_params;

TEST(Numerology, evdo_profile_at_1_msps_has_20_symbols_and_67_guard_samples)
{
    const auto n = numerology::profile("evdo", 1e6);
    EXPECT_EQ(n.slot_samples(), 1667);
    EXPECT_EQ(n.symbol_len(), 80);
    EXPECT_EQ(n.symbols_per_slot(), 20);
    EXPECT_EQ(n.guard_samples(), 67);
    EXPECT_EQ(n.payload_symbols(), 16);
    EXPECT_EQ(n.payload_resource_elements(), 16 * 48);
}

TEST(Numerology, every_profile_fits_a_slot_at_1_and_5_msps)
{
    for (const auto& name : numerology::profile_names()) {
        for (double fs : { 1e6, 5e6, 10e6 }) {
            const auto n = numerology::profile(name, fs);
            EXPECT_GE(n.payload_symbols(), 1) << name << " at " << fs;
            EXPECT_EQ(n.symbols_per_slot() * n.symbol_len() + n.guard_samples(),
                      n.slot_samples());
            EXPECT_NEAR(n.realised_slot_duration(), n.params().slot_duration, 0.5 / fs);
        }
    }
}

TEST(Numerology, inconsistent_parameters_are_rejected_naming_the_field)
{
    numerology_params p;
    p.cp_len = 64;
    try {
        numerology n(p);
        FAIL() << "cp_len == fft_len accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("cp_len: 64"), std::string::npos) << e.what();
    }
    p = numerology_params{};
    p.slot_duration = 100e-6; // shorter than preamble + header
    EXPECT_THROW(numerology{ p }, std::invalid_argument);
    EXPECT_THROW(numerology::profile("lte"), std::invalid_argument);
}
