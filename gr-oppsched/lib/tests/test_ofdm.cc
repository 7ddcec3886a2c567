// OFDM modulator / demodulator: slot structure, power, round trip, equalisation.
#include <gnuradio/oppsched/ofdm_demodulator.h>
#include <gnuradio/oppsched/ofdm_modulator.h>
#include <gtest/gtest.h>

#include <stdexcept>

#include "ofdm_test_util.h"

using namespace gr::oppsched;
using namespace ofdm_test;

namespace {

struct slot_data {
    std::vector<gr_complex> header, payload, samples;
};

slot_data make_slot(ofdm_modulator& mod, std::mt19937_64& rng, int bits = 4) {
    const auto& n = mod.geometry();
    slot_data s;
    s.header = random_qam(rng, static_cast<size_t>(n.header_resource_elements()), 2);
    s.payload = random_qam(rng, static_cast<size_t>(n.payload_resource_elements()), bits);
    s.samples = mod.modulate(s.header, s.payload);
    return s;
}

// Every profile at 1 Msps and the 3 ms profile at 5 Msps: the round trip is exact.
class ofdm_round_trip : public ::testing::TestWithParam<std::pair<const char*, double>> {};

}  // namespace

TEST_P(ofdm_round_trip, noiseless_modulate_then_demodulate_returns_the_res_within_1e_4) {
    const auto num = numerology::profile(GetParam().first, GetParam().second);
    ofdm_modulator mod(num);
    ofdm_demodulator dem(num);
    std::mt19937_64 rng(11);
    for (int bits : {2, 4, 6}) {
        const auto s = make_slot(mod, rng, bits);
        ASSERT_EQ(s.samples.size(), static_cast<size_t>(num.slot_samples()));
        const auto r = dem.demodulate(s.samples);
        ASSERT_TRUE(r.valid);
        ASSERT_EQ(r.header.size(), s.header.size());
        ASSERT_EQ(r.payload.size(), s.payload.size());
        EXPECT_LT(max_abs_error(r.header, s.header), 1e-4);
        EXPECT_LT(max_abs_error(r.payload, s.payload), 1e-4);
        EXPECT_GT(r.snr.snr_db, 60.0);
        EXPECT_EQ(r.snr.cqi, 15);
        for (float v : r.payload_nvar) EXPECT_LT(v, 1e-5f);
    }
}

INSTANTIATE_TEST_SUITE_P(Profiles, ofdm_round_trip,
                         ::testing::Values(std::make_pair("evdo", 1e6), std::make_pair("3ms", 1e6),
                                           std::make_pair("3ms", 5e6)));

TEST(Ofdm, slot_is_preamble_then_symbols_then_silent_guard) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(1);
    const auto s = make_slot(mod, rng);
    // preamble verbatim
    const auto& pre = mod.sequences().preamble();
    for (size_t i = 0; i < pre.size(); ++i) ASSERT_EQ(s.samples[i], pre[i]);
    // STF: periodic with period fft_len/2 over all of its cp + fft samples
    for (int i = 0; i + 32 < num.stf_samples(); ++i)
        EXPECT_LT(std::abs(s.samples[i] - s.samples[i + 32]), 1e-5f) << i;
    // LTF: guard interval = tail of the long symbol, two identical long symbols
    for (int i = 0; i < 64; ++i)
        EXPECT_LT(std::abs(s.samples[num.ltf_offset(0) + i] - s.samples[num.ltf_offset(1) + i]),
                  1e-6f);
    for (int i = 0; i < num.ltf_gi_samples(); ++i)
        EXPECT_LT(std::abs(s.samples[num.stf_samples() + i] -
                           s.samples[num.ltf_offset(1) + 64 - num.ltf_gi_samples() + i]),
                  1e-6f);
    // each data symbol's CP is the tail of its body
    for (int sym = 0; sym < num.data_symbols(); ++sym) {
        const int o = num.symbol_offset(sym);
        for (int i = 0; i < 16; ++i) EXPECT_EQ(s.samples[o + i], s.samples[o + 64 + i]);
    }
    // guard silent
    for (int i = num.symbol_offset(num.data_symbols()); i < num.slot_samples(); ++i)
        EXPECT_EQ(s.samples[i], gr_complex(0.0f, 0.0f));
}

TEST(Ofdm, every_ofdm_symbol_has_unit_mean_sample_power) {
    // The SNR convention rests on this: unit energy per occupied subcarrier <=> unit
    // sample power. Averaged over 20 slots of random 16QAM.
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(2);
    double stf = 0, ltf = 0, data = 0;
    int slots = 20;
    for (int k = 0; k < slots; ++k) {
        const auto s = make_slot(mod, rng);
        for (int i = 0; i < num.stf_samples(); ++i) stf += std::norm(s.samples[i]);
        for (int i = num.stf_samples(); i < num.preamble_samples(); ++i)
            ltf += std::norm(s.samples[i]);
        for (int i = num.preamble_samples(); i < num.symbol_offset(num.data_symbols()); ++i)
            data += std::norm(s.samples[i]);
    }
    // the training fields are the same in every slot: Parseval holds exactly on their
    // fft_len bodies; the CP / GI parts are a fixed portion of the same periodic signal
    double stf_body = 0, ltf_body = 0;
    const auto& pre = mod.sequences().preamble();
    for (int i = 16; i < 80; ++i) stf_body += std::norm(pre[i]);
    for (int i = num.ltf_offset(0); i < num.ltf_offset(1) + 64; ++i) ltf_body += std::norm(pre[i]);
    EXPECT_NEAR(stf_body / 64, 1.0, 1e-4);
    EXPECT_NEAR(ltf_body / 128, 1.0, 1e-4);
    EXPECT_NEAR(stf / (slots * num.stf_samples()), 1.0, 0.03);
    EXPECT_NEAR(ltf / (slots * (num.preamble_samples() - num.stf_samples())), 1.0, 0.03);
    EXPECT_NEAR(data / (slots * num.data_symbols() * num.symbol_len()), 1.0, 0.02);
}

TEST(Ofdm, unused_res_are_padded_so_a_short_or_empty_slot_keeps_its_power_and_pilots) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    ofdm_demodulator dem(num);
    std::mt19937_64 rng(3);
    const auto hdr = random_qam(rng, 10, 2);
    const auto pay = random_qam(rng, 100, 4);
    const auto x = mod.modulate(hdr, pay);
    const auto r = dem.demodulate(x);
    ASSERT_TRUE(r.valid);
    for (size_t i = 0; i < hdr.size(); ++i) EXPECT_LT(std::abs(r.header[i] - hdr[i]), 1e-4f);
    for (size_t i = 0; i < pay.size(); ++i) EXPECT_LT(std::abs(r.payload[i] - pay[i]), 1e-4f);
    // the rest is the known padding
    const size_t nh = static_cast<size_t>(num.header_resource_elements());
    EXPECT_LT(std::abs(r.header[nh - 1] - mod.sequences().padding(nh - 1)), 1e-4f);
    EXPECT_LT(std::abs(r.payload.back() - mod.sequences().padding(nh + r.payload.size() - 1)),
              1e-4f);
    // empty slot: same power as a full one
    const auto e = mod.modulate({}, {});
    double p = 0;
    for (int i = num.preamble_samples(); i < num.symbol_offset(num.data_symbols()); ++i)
        p += std::norm(e[i]);
    EXPECT_NEAR(p / (num.data_symbols() * num.symbol_len()), 1.0, 0.01);
}

TEST(Ofdm, too_many_res_are_rejected_naming_the_argument) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::vector<gr_complex> big(static_cast<size_t>(num.payload_resource_elements() + 1));
    try {
        mod.modulate({}, big);
        FAIL() << "accepted";
    } catch (const std::invalid_argument& e) {
        const auto want = "ofdm_modulator.payload: " + std::to_string(big.size());
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    std::vector<gr_complex> h(static_cast<size_t>(num.header_resource_elements() + 1));
    EXPECT_THROW(mod.modulate(h, {}), std::invalid_argument);
}

TEST(Ofdm, static_multipath_within_the_cp_is_equalised_exactly_even_with_early_timing) {
    // 3 taps spanning 9 samples, and the demodulator given the slot 2 samples early (the
    // sync's timing backoff): still exact because every FFT window stays inside the CP.
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    ofdm_demodulator dem(num);
    std::mt19937_64 rng(4);
    const auto s = make_slot(mod, rng, 6);
    std::vector<gr_complex> x(2, gr_complex(0, 0));
    x.insert(x.end(), s.samples.begin(), s.samples.end());
    const auto y = convolve(x, {0, 3, 9}, {{0.8f, 0.1f}, {-0.3f, 0.4f}, {0.2f, -0.15f}});
    const auto r = dem.demodulate(y);
    ASSERT_TRUE(r.valid);
    EXPECT_LT(max_abs_error(r.payload, s.payload), 1e-3);
    EXPECT_LT(max_abs_error(r.header, s.header), 1e-3);
    // the estimate is the frequency response of the channel delayed by the 2 samples
    const auto& occ = num.occupied_subcarriers();
    for (size_t i = 0; i < occ.size(); ++i) {
        std::complex<double> H = 0;
        const int d[3] = {0, 3, 9};
        const std::complex<double> g[3] = {{0.8, 0.1}, {-0.3, 0.4}, {0.2, -0.15}};
        for (int l = 0; l < 3; ++l)
            H += g[l] * std::polar(1.0, -2 * kPi * occ[i] * (d[l] + 2) / 64.0);
        EXPECT_LT(std::abs(std::complex<double>(r.channel[i]) - H), 1e-4) << occ[i];
    }
}

TEST(Ofdm, pilot_tracking_removes_a_residual_cfo_that_breaks_the_untracked_receiver) {
    // 0.01 subcarrier spacing left after CFO correction rotates the last symbol by
    // 2 pi 0.01 * 1620/64 = 1.6 rad relative to the LTF.
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    ofdm_demodulator_params tracked, untracked;
    untracked.track_phase = false;
    ofdm_demodulator dem_t(num, tracked), dem_u(num, untracked);
    std::mt19937_64 rng(5);
    const auto s = make_slot(mod, rng, 4);
    auto y = s.samples;
    apply_cfo(y, 0.01, 64);
    const auto rt = dem_t.demodulate(y);
    const auto ru = dem_u.demodulate(y);
    // residual ICI of a 0.01 offset is ~ -35 dB: the tracked EVM stays below -25 dB
    EXPECT_LT(mse(rt.payload, s.payload), 3e-3);
    EXPECT_GT(mse(ru.payload, s.payload), 0.3);
    // the tracked phase grows linearly, 2 pi eps symbol_len / N per symbol
    const double step = 2 * kPi * 0.01 * 80 / 64;
    EXPECT_NEAR(rt.phase[5] - rt.phase[4], step, 0.01);
}

TEST(Ofdm, reported_noise_variance_matches_the_measured_error_of_the_equalised_res) {
    // AWGN at 15 dB Es/N0 and a 2-tap channel: E|x^ - x|^2 / nvar ~ 1 (the interface's
    // N0/|H|^2 with the channel-estimation and CPE errors included).
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    ofdm_demodulator_params dp;
    dp.snr.noise_ema = 1.0;
    ofdm_demodulator dem(num, dp);
    std::mt19937_64 rng(6);
    double ratio = 0;
    size_t cnt = 0;
    for (int k = 0; k < 30; ++k) {
        const auto s = make_slot(mod, rng, 2);
        auto y = convolve(s.samples, {0, 4}, {{0.9f, 0.0f}, {0.3f, 0.3f}});
        add_awgn(rng, y, num.noise_variance_for_snr_db(15.0));
        const auto r = dem.demodulate(y);
        ASSERT_TRUE(r.valid);
        for (size_t i = 0; i < s.payload.size(); ++i) {
            ratio += std::norm(r.payload[i] - s.payload[i]) / r.payload_nvar[i];
            ++cnt;
        }
    }
    EXPECT_NEAR(ratio / cnt, 1.0, 0.15);
}

TEST(Ofdm, zeros_and_short_input_give_an_invalid_slot_with_erased_res) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_demodulator dem(num);
    std::vector<gr_complex> zeros(static_cast<size_t>(num.slot_samples()), gr_complex(0, 0));
    auto r = dem.demodulate(zeros);
    EXPECT_FALSE(r.valid);
    EXPECT_EQ(r.snr.cqi, 0);
    ASSERT_EQ(r.payload.size(), static_cast<size_t>(num.payload_resource_elements()));
    EXPECT_EQ(r.payload_nvar[0], ofdm_demodulator::max_noise_var);
    EXPECT_EQ(r.payload[0], gr_complex(0, 0));
    std::vector<gr_complex> shortv(100, gr_complex(1, 0));
    r = dem.demodulate(shortv);
    EXPECT_FALSE(r.valid);
    // header only: no payload produced
    ofdm_modulator mod(num);
    std::mt19937_64 rng(7);
    const auto s = make_slot(mod, rng);
    r = dem.demodulate(s.samples, false);
    EXPECT_TRUE(r.valid);
    EXPECT_TRUE(r.payload.empty());
    EXPECT_LT(max_abs_error(r.header, s.header), 1e-4);
}
