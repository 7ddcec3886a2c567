// End-to-end payload chain: tb_encoder -> (noiseless / AWGN) -> tb_decoder, for every MCS,
// both slot profiles and both sample rates, with the largest TB and with small ones.
#include <gnuradio/oppsched/scrambler.h>
#include <gnuradio/oppsched/tb_codec.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>

#include "fec_test_util.h"

using namespace gr::oppsched;
using namespace fec_test;

namespace {
// SNR (Es/N0, dB) at which every MCS decodes a full slot with margin: 802.11a needs
// about 24 dB for 64QAM 3/4 at 10% PER on 1000-byte frames; 5/6 a little more.
constexpr double k_high_snr_db = 30.0;

struct geom {
    const char* profile;
    double fs;
};

class fec_pipeline : public ::testing::TestWithParam<std::tuple<geom, int>> {
  protected:
    numerology num() const {
        const auto g = std::get<0>(GetParam());
        return numerology::profile(g.profile, g.fs);
    }
    int mcs() const { return std::get<1>(GetParam()); }
};

std::string name_of(const ::testing::TestParamInfo<std::tuple<geom, int>>& info) {
    const auto g = std::get<0>(info.param);
    return std::string(g.profile) + "_" + std::to_string(static_cast<int>(g.fs / 1e6)) +
           "msps_mcs" + std::to_string(std::get<1>(info.param));
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(AllMcs, fec_pipeline,
                         ::testing::Combine(::testing::Values(geom{"evdo", 1e6}, geom{"evdo", 5e6},
                                                              geom{"3ms", 1e6}, geom{"3ms", 5e6}),
                                            ::testing::Range(0, 8)),
                         name_of);

TEST_P(fec_pipeline, full_tb_round_trips_noiseless_and_at_high_snr_awgn) {
    const auto n = num();
    tb_encoder enc(n);
    tb_decoder dec(n);
    const std::size_t bytes = mcs_set::tb_bytes(mcs(), n);
    std::mt19937_64 rng(1000 + static_cast<unsigned>(mcs()));
    const auto tb = random_bytes(bytes, rng);
    const std::uint8_t seed = scrambler::seed_for_slot(12345);
    auto re = enc.encode(tb, mcs(), 0, seed);
    ASSERT_EQ(re.size(), static_cast<std::size_t>(n.payload_resource_elements()));
    double energy = 0.0;
    for (const auto& x : re) energy += std::norm(x);
    // unit average energy (scrambled data: the mean of >= 720 points is within 0.1 of 1
    // by more than 4 standard deviations even for 64QAM)
    EXPECT_NEAR(energy / static_cast<double>(re.size()), 1.0, 0.1);

    auto harq = dec.make_harq_buffer();
    tb_rx_params p;
    p.mcs = mcs();
    p.rv = 0;
    p.tb_bytes = bytes;
    p.ndi = false;
    p.scrambler_seed = seed;
    const std::vector<float> nv_clean(re.size(), 1e-3f);
    auto r = dec.decode(re, nv_clean, p, *harq);
    EXPECT_TRUE(r.crc_ok);
    EXPECT_EQ(r.bytes, tb);
    EXPECT_EQ(r.stats.channel_bit_errors, 0u);
    EXPECT_EQ(r.stats.receptions, 1);

    const float n0 = n0_of_snr_db(k_high_snr_db);
    add_awgn(re, n0, rng);
    p.ndi = true;  // new data: the buffer is cleared
    const std::vector<float> nv(re.size(), n0);
    r = dec.decode(re, nv, p, *harq);
    EXPECT_TRUE(r.crc_ok);
    EXPECT_EQ(r.bytes, tb);
    EXPECT_EQ(r.stats.receptions, 1);
    EXPECT_LE(r.stats.effective_code_rate, mcs_set::get(mcs()).code_rate_value() + 1e-9);
}

TEST_P(fec_pipeline, small_tbs_and_every_rv_round_trip) {
    const auto n = num();
    tb_encoder enc(n);
    tb_decoder dec(n);
    auto harq = dec.make_harq_buffer();
    std::mt19937_64 rng(2000 + static_cast<unsigned>(mcs()));
    const std::size_t max = mcs_set::tb_bytes(mcs(), n);
    bool ndi = false;
    for (std::size_t bytes : {std::size_t(1), max / 2, max - 1}) {
        for (int rv = 0; rv < 4; ++rv) {
            const auto tb = random_bytes(bytes, rng);
            const std::uint8_t seed = static_cast<std::uint8_t>(1 + rng() % 127);
            const auto re = enc.encode(tb, mcs(), rv, seed);
            ndi = !ndi;
            tb_rx_params p{mcs(), rv, bytes, ndi, seed};
            const auto r = dec.decode(re, std::vector<float>(re.size(), 0.01f), p, *harq);
            EXPECT_TRUE(r.crc_ok) << bytes << " bytes rv " << rv;
            EXPECT_EQ(r.bytes, tb);
        }
    }
}

TEST(FecPipelineErrors, wrong_scrambler_seed_or_tb_size_fails_the_crc) {
    const auto n = numerology::profile("evdo", 1e6);
    tb_encoder enc(n);
    tb_decoder dec(n);
    auto harq = dec.make_harq_buffer();
    std::mt19937_64 rng(3);
    const auto tb = random_bytes(60, rng);
    const auto re = enc.encode(tb, 2, 0, 7);
    const std::vector<float> nv(re.size(), 0.01f);
    EXPECT_FALSE(dec.decode(re, nv, {2, 0, 60, false, 8}, *harq).crc_ok);
    EXPECT_FALSE(dec.decode(re, nv, {2, 0, 61, true, 7}, *harq).crc_ok);
    EXPECT_TRUE(dec.decode(re, nv, {2, 0, 60, false, 7}, *harq).crc_ok);
}

TEST(FecPipelineErrors, garbage_res_decode_to_a_failed_crc_without_crashing) {
    const auto n = numerology::profile("3ms", 1e6);
    tb_decoder dec(n);
    auto harq = dec.make_harq_buffer();
    const std::size_t N = dec.resource_elements();
    std::vector<gr_complex> re(N, gr_complex(NAN, INFINITY));
    std::vector<float> nv(N, NAN);
    auto r = dec.decode(re, nv, {7, 0, 100, false, 1}, *harq);
    EXPECT_FALSE(r.crc_ok);
    EXPECT_EQ(r.bytes.size(), 100u);
    EXPECT_EQ(r.stats.covered_bits, 0u);  // everything was an erasure
    std::mt19937_64 rng(4);
    std::normal_distribution<float> g(0.0f, 3.0f);
    for (auto& x : re) x = gr_complex(g(rng), g(rng));
    std::fill(nv.begin(), nv.end(), 0.0f);  // zero noise variance is floored, not a crash
    r = dec.decode(re, nv, {3, 1, 50, true, 9}, *harq);
    EXPECT_FALSE(r.crc_ok);
}

TEST(FecPipelineErrors, bad_parameters_throw_naming_the_field) {
    const auto n = numerology::profile("evdo", 1e6);
    tb_encoder enc(n);
    tb_decoder dec(n);
    auto harq = dec.make_harq_buffer();
    auto expect_msg = [](auto&& f, const std::string& what) {
        try {
            f();
            ADD_FAILURE() << "no exception, expected " << what;
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    const std::vector<std::uint8_t> tb(10, 0xab);
    expect_msg([&] { enc.encode(tb, 8, 0, 1); }, "mcs: 8");
    expect_msg([&] { enc.encode(tb, 0, 4, 1); }, "rv: 4");
    expect_msg([&] { enc.encode(tb, 0, 0, 0); }, "scrambler.seed: 0");
    expect_msg([&] { enc.encode(std::vector<std::uint8_t>(44), 0, 0, 1); }, "tb_bytes: 44");
    expect_msg([&] { enc.encode(std::vector<std::uint8_t>(), 0, 0, 1); }, "tb_bytes: 0");
    const std::vector<gr_complex> re(10);
    const std::vector<float> nv(10, 1.0f);
    expect_msg([&] { dec.decode(re, nv, {0, 0, 10, false, 1}, *harq); }, "n_re: 10");
    harq_buffer tiny(16);
    const auto ok = enc.encode(tb, 0, 0, 1);
    expect_msg(
        [&] {
            dec.decode(ok, std::vector<float>(ok.size(), 1.0f), {0, 0, 10, false, 1}, tiny);
        },
        "harq_buffer.capacity");
}

TEST(FecPipelineErrors, data_carriers_not_giving_whole_interleaver_blocks_are_rejected) {
    numerology_params p;
    p.data_carriers = 40;  // BPSK N_CBPS 40 is not a multiple of 16
    p.pilot_carriers = 4;
    EXPECT_THROW(tb_encoder{numerology(p)}, std::invalid_argument);
}
