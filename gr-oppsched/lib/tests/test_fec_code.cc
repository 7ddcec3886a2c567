// Known-answer and behaviour tests of the bit chain's building blocks: CRC, scrambler,
// K=7 encoder, puncturing / rate matching, Viterbi, interleaver. Golden vectors: IEEE
// 802.11a-1999 Annex G (SIGNAL field: Tables G.7-G.9; first DATA symbol of the 36 Mb/s
// example: G.13, G.16, G.18, G.21, G.22), bits listed in transmission order.
#include <gnuradio/oppsched/conv_code.h>
#include <gnuradio/oppsched/header_codec.h>
#include <gnuradio/oppsched/interleaver.h>
#include <gnuradio/oppsched/mcs.h>
#include <gnuradio/oppsched/qam_mapper.h>
#include <gnuradio/oppsched/rate_matcher.h>
#include <gnuradio/oppsched/scrambler.h>
#include <gnuradio/oppsched/tb_codec.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>

#include "fec_test_util.h"
#include "oppsched/crc32.h"

using namespace gr::oppsched;
using namespace fec_test;

namespace {
// Table G.7: SIGNAL field (RATE 36 Mb/s = 1011, LENGTH 100, parity, tail)
const char* k_g7 = "1011 0001 0011 0000 0000 0000";
// Table G.8: SIGNAL after rate-1/2 encoding
const char* k_g8 = "1101 0001 1010 0001 0000 0010 0011 1110 0111 0000 0000 0000";
// Table G.9: SIGNAL after interleaving (BPSK, N_CBPS = 48)
const char* k_g9 = "1001 0100 1101 0000 0001 0100 1000 0011 0010 0100 1001 0100";
// Table G.13: first 144 DATA bits (SERVICE + first 16 octets, LSB first)
const std::vector<std::uint8_t> k_g13 = {0x00, 0x00, 0x20, 0x40, 0x00, 0x74, 0x00, 0x06, 0x10,
                                         0xb3, 0xec, 0x65, 0x00, 0x04, 0x6b, 0x80, 0x3c, 0x8f};
// Table G.16: the same bits scrambled with seed 1011101
const std::vector<std::uint8_t> k_g16 = {0x6c, 0x19, 0x89, 0x8f, 0x68, 0x21, 0xf4, 0xa5, 0x61,
                                         0x4f, 0xd7, 0xae, 0x24, 0x0c, 0xf3, 0x3a, 0xe4, 0xbc};
// Table G.18: coded bits of the first DATA symbol (rate 3/4, 192 bits)
const std::vector<std::uint8_t> k_g18 = {0x2b, 0x08, 0xa1, 0xf0, 0x9d, 0xb5, 0x9a, 0x1d,
                                         0x4a, 0xfb, 0xe8, 0xc2, 0x8f, 0xc0, 0xc8, 0x73,
                                         0xc0, 0x43, 0xe0, 0x19, 0xe0, 0xd3, 0xeb, 0xb2};
// Table G.21: interleaved bits of the first DATA symbol (16QAM, N_CBPS = 192)
const std::vector<std::uint8_t> k_g21 = {0x77, 0xf0, 0xef, 0xc4, 0x73, 0x00, 0xbf, 0x11,
                                         0x10, 0x9a, 0x1d, 0x12, 0x6e, 0x38, 0xf5, 0x69,
                                         0x1b, 0x6b, 0x98, 0x43, 0x00, 0x0d, 0xb3, 0x6d};

std::vector<float> hard_llrs(const std::vector<std::uint8_t>& bits, float mag = 1.0f) {
    std::vector<float> l(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) l[i] = bits[i] ? -mag : mag;
    return l;
}
}  // namespace

// ---- CRC ------------------------------------------------------------------------------

TEST(FecCrc, tb_crc32_is_the_shared_ieee_crc_with_known_answer_cbf43926) {
    const char* s = "123456789";
    const auto* p = reinterpret_cast<const std::uint8_t*>(s);
    EXPECT_EQ(::oppsched::crc32(p, 9), 0xCBF43926u);
    // the TB chain appends exactly that CRC, most significant byte first
    const auto bits = tb_info_bits(p, 9);
    ASSERT_EQ(bits.size(), 8u * 13u);
    std::uint32_t crc = 0;
    for (std::size_t i = 72; i < 104; ++i) crc = (crc << 1) | bits[i];
    EXPECT_EQ(crc, 0xCBF43926u);
    EXPECT_EQ(bits[0], 0u);  // '1' = 0x31 = 0011 0001, MSB first
    EXPECT_EQ(bits[2], 1u);
}

TEST(FecCrc, header_crc16_ccitt_false_known_answer_29b1) {
    const auto* p = reinterpret_cast<const std::uint8_t*>("123456789");
    EXPECT_EQ(header_codec::crc16(p, 9), 0x29B1);
}

// ---- scrambler ------------------------------------------------------------------------

TEST(FecScrambler, all_ones_seed_gives_the_802_11_sequence_with_period_127) {
    const auto seq = scrambler::sequence(0x7F, 254);
    const auto expect = bits_from_string("00001110 11110010 11001001 00000010 00100110");
    for (std::size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(seq[i], expect[i]) << i;
    for (std::size_t i = 0; i < 127; ++i) EXPECT_EQ(seq[i], seq[i + 127]);
    EXPECT_EQ(std::count(seq.begin(), seq.begin() + 127, 1), 64);  // m-sequence balance
}

TEST(FecScrambler, annex_g_data_bits_scramble_to_table_g16_and_back) {
    auto bits = bits_msb(k_g13);
    scrambler s(0b1011101);
    s.apply(bits.data(), bits.size());
    EXPECT_EQ(bits, bits_msb(k_g16));
    scrambler d(0b1011101);
    d.apply(bits.data(), bits.size());
    EXPECT_EQ(bits, bits_msb(k_g13));
}

TEST(FecScrambler, llr_descrambling_flips_signs_where_the_sequence_is_one) {
    std::vector<float> l(20, 1.0f);
    scrambler s(0x7F);
    s.apply_llr(l.data(), l.size());
    const auto seq = scrambler::sequence(0x7F, 20);
    for (std::size_t i = 0; i < l.size(); ++i) EXPECT_EQ(l[i], seq[i] ? -1.0f : 1.0f);
}

TEST(FecScrambler, seed_zero_is_rejected_and_slot_seeds_are_never_zero) {
    EXPECT_THROW(scrambler(0), std::invalid_argument);
    EXPECT_THROW(scrambler(128), std::invalid_argument);
    for (std::uint32_t slot : {0u, 126u, 127u, 0xffffffffu}) {
        const auto seed = scrambler::seed_for_slot(slot);
        EXPECT_GE(seed, 1);
        EXPECT_LE(seed, 127);
    }
    EXPECT_NE(scrambler::seed_for_slot(5), scrambler::seed_for_slot(6));
}

// ---- convolutional encoder ------------------------------------------------------------

TEST(FecConvEncoder, signal_field_encodes_to_annex_g_table_g8) {
    const auto in = bits_from_string(k_g7);
    // the SIGNAL field carries its own 6 tail bits: encode the 18 leading bits with a
    // zero tail, which appends exactly those 6 zeros
    const std::vector<std::uint8_t> head(in.begin(), in.begin() + 18);
    EXPECT_EQ(conv_encoder_k7::encode_zero_tail(head), bits_from_string(k_g8));
}

TEST(FecConvEncoder, first_data_symbol_encodes_and_punctures_to_table_g18_at_rate_3_4) {
    const auto in = bits_msb(k_g16);  // 144 scrambled bits
    const auto mother = conv_encoder_k7::encode_zero_tail(in);
    const auto sel =
        rate_matcher::selection(mother.size(), code_rate::r3_4, 0,
                                rate_matcher::kept_bits(mother.size(), code_rate::r3_4, 0));
    std::vector<std::uint8_t> punct;
    for (std::size_t i = 0; i < 192; ++i) punct.push_back(mother[sel[i]]);
    EXPECT_EQ(punct, bits_msb(k_g18));
}

TEST(FecConvEncoder, tail_biting_codeword_has_equal_start_and_end_state) {
    std::mt19937_64 rng(11);
    const auto bits = random_bits(96, rng);
    const auto tb = conv_encoder_k7::encode_tail_biting(bits);
    // the zero-tail codeword of the same bits differs only in the first 6 steps (start
    // state) and the tail
    const auto zt = conv_encoder_k7::encode_zero_tail(bits);
    ASSERT_EQ(tb.size(), 192u);
    for (std::size_t i = 12; i < 192; ++i) EXPECT_EQ(tb[i], zt[i]) << i;
    EXPECT_THROW(conv_encoder_k7::encode_tail_biting(std::vector<std::uint8_t>(5)),
                 std::invalid_argument);
}

// ---- puncturing and rate matching -----------------------------------------------------

TEST(FecPuncturing, patterns_are_the_802_11_ones_with_the_stated_rates) {
    struct expect_t {
        code_rate r;
        const char* kept;  // over one period, A0 B0 A1 B1 ...
    };
    const expect_t e[] = {{code_rate::r1_2, "11"},
                          {code_rate::r2_3, "1110"},
                          {code_rate::r3_4, "111001"},
                          {code_rate::r5_6, "1110011001"}};
    for (const auto& x : e) {
        const auto& p = pattern_of(x.r);
        const auto k = bits_from_string(x.kept);
        ASSERT_EQ(k.size(), 2u * static_cast<unsigned>(p.period));
        for (std::size_t i = 0; i < k.size(); ++i)
            EXPECT_EQ((p.keep_mask >> i) & 1u, k[i]) << static_cast<int>(x.r) << " bit " << i;
        EXPECT_EQ(p.kept, std::count(k.begin(), k.end(), 1));
    }
}

TEST(FecPuncturing, kept_bits_follow_the_code_rate_for_every_rv) {
    const std::size_t M = 2 * 600;  // 600 steps: a multiple of every period
    EXPECT_EQ(rate_matcher::kept_bits(M, code_rate::r1_2, 3), 1200u);
    for (int rv = 0; rv < 4; ++rv) {
        EXPECT_EQ(rate_matcher::kept_bits(M, code_rate::r2_3, rv), 900u);
        EXPECT_EQ(rate_matcher::kept_bits(M, code_rate::r3_4, rv), 800u);
        EXPECT_EQ(rate_matcher::kept_bits(M, code_rate::r5_6, rv), 720u);
    }
}

TEST(FecPuncturing, first_retransmission_is_complementary_for_rv_orders_0231_and_0123) {
    const std::size_t M = 2 * 300;
    for (auto r : {code_rate::r2_3, code_rate::r3_4, code_rate::r5_6}) {
        for (int second : {1, 2}) {
            std::set<std::uint32_t> covered;
            for (int rv : {0, second})
                for (auto j : rate_matcher::selection(M, r, rv, rate_matcher::kept_bits(M, r, rv)))
                    covered.insert(j);
            EXPECT_EQ(covered.size(), M) << "rate " << static_cast<int>(r) << " rv " << second;
        }
        // a single RV does not cover the mother code (it is punctured)
        EXPECT_LT(rate_matcher::kept_bits(M, r, 0), M);
    }
}

TEST(FecPuncturing, every_rv_is_the_rv0_pattern_delayed_by_its_shift) {
    const std::size_t M = 2 * 60;
    for (auto r : {code_rate::r2_3, code_rate::r3_4, code_rate::r5_6}) {
        const auto& p = pattern_of(r);
        for (int rv = 0; rv < 4; ++rv) {
            const int s = rate_matcher::pattern_shift(r, rv);
            const auto sel = rate_matcher::selection(M, r, rv, rate_matcher::kept_bits(M, r, rv));
            std::vector<std::uint8_t> kept(M, 0);
            for (auto j : sel) kept[j] = 1;
            for (std::size_t j = 0; j < M; ++j) {
                const std::size_t len = 2 * static_cast<std::size_t>(p.period);
                const std::size_t pos = (j + len * 10 - 2 * static_cast<std::size_t>(s)) % len;
                EXPECT_EQ(kept[j], (p.keep_mask >> pos) & 1u);
            }
        }
    }
}

TEST(FecRateMatching, fills_the_slot_by_cyclic_repetition_from_the_rv_start) {
    const std::size_t M = 2 * 30;  // 60 mother bits, rate 1/2 keeps all
    const auto sel = rate_matcher::selection(M, code_rate::r1_2, 2, 100);
    ASSERT_EQ(sel.size(), 100u);
    EXPECT_EQ(sel[0], 30u);  // k0 = 2 * 60 / 4
    for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(sel[i], (30u + i) % 60u);
    EXPECT_THROW(rate_matcher::selection(M, code_rate::r1_2, 0, 59), std::invalid_argument);
    EXPECT_THROW(rate_matcher::selection(M, code_rate::r1_2, 4, 60), std::invalid_argument);
}

// ---- Viterbi (contract tests over both ACS backends) -----------------------------------

class fec_viterbi : public ::testing::TestWithParam<viterbi_backend> {};

INSTANTIATE_TEST_SUITE_P(Backends, fec_viterbi,
                         ::testing::Values(viterbi_backend::acs16, viterbi_backend::volk8),
                         [](const auto& info) {
                             return info.param == viterbi_backend::acs16 ? "acs16" : "volk8";
                         });

TEST_P(fec_viterbi, noiseless_zero_tail_and_tail_biting_codewords_decode_exactly) {
    std::mt19937_64 rng(1);
    viterbi_decoder_k7 vit(0, GetParam());
    for (std::size_t k : {1u, 7u, 100u, 4000u}) {
        const auto bits = random_bits(k, rng);
        const auto l = hard_llrs(conv_encoder_k7::encode_zero_tail(bits), 3.0f);
        EXPECT_EQ(vit.decode(l, k, termination::zero_tail), bits) << k;
        std::vector<std::uint8_t> ref(k);
        viterbi_k7_reference(l.data(), k, termination::zero_tail, ref.data());
        EXPECT_EQ(ref, bits) << k;
    }
    for (std::size_t k : {6u, 40u, 96u, 500u}) {
        const auto bits = random_bits(k, rng);
        const auto l = hard_llrs(conv_encoder_k7::encode_tail_biting(bits));
        EXPECT_EQ(vit.decode(l, k, termination::tail_biting), bits) << k;
    }
}

TEST_P(fec_viterbi, corrects_40_isolated_hard_errors_in_a_4000_bit_block) {
    // d_free = 10 for 133/171: any 4 errors inside a span of a few constraint lengths are
    // correctable; errors 100 coded bits apart are isolated.
    std::mt19937_64 rng(2);
    const auto bits = random_bits(2000, rng);
    auto l = hard_llrs(conv_encoder_k7::encode_zero_tail(bits));
    for (std::size_t e = 0; e < 40; ++e) l[50 + 100 * e] = -l[50 + 100 * e];
    viterbi_decoder_k7 vit(0, GetParam());
    EXPECT_EQ(vit.decode(l, bits.size(), termination::zero_tail), bits);
    std::vector<std::uint8_t> ref(bits.size());
    viterbi_k7_reference(l.data(), bits.size(), termination::zero_tail, ref.data());
    EXPECT_EQ(ref, bits);
}

TEST_P(fec_viterbi, corrects_four_adjacent_errors_but_not_a_burst_of_twelve) {
    std::mt19937_64 rng(3);
    const auto bits = random_bits(400, rng);
    const auto code = conv_encoder_k7::encode_zero_tail(bits);
    viterbi_decoder_k7 vit(0, GetParam());
    auto l = hard_llrs(code);
    for (std::size_t i = 300; i < 304; ++i)  // 4 < d_free / 2
        l[i] = -l[i];
    EXPECT_EQ(vit.decode(l, bits.size(), termination::zero_tail), bits);
    auto b = hard_llrs(code);
    for (std::size_t i = 300; i < 312; ++i)  // beyond the code's correction capability
        b[i] = -b[i];
    EXPECT_NE(vit.decode(b, bits.size(), termination::zero_tail), bits);
}

TEST_P(fec_viterbi, punctured_erasures_decode_at_every_code_rate) {
    std::mt19937_64 rng(4);
    viterbi_decoder_k7 vit(0, GetParam());
    for (auto r : {code_rate::r2_3, code_rate::r3_4, code_rate::r5_6}) {
        const auto bits = random_bits(600, rng);
        const auto code = conv_encoder_k7::encode_zero_tail(bits);
        std::vector<float> l(code.size(), 0.0f);  // depunctured: erasures = 0
        for (auto j :
             rate_matcher::selection(code.size(), r, 1, rate_matcher::kept_bits(code.size(), r, 1)))
            l[j] = code[j] ? -1.0f : 1.0f;
        EXPECT_EQ(vit.decode(l, bits.size(), termination::zero_tail), bits);
    }
}

TEST_P(fec_viterbi, quantised_decoder_loses_little_against_the_float_reference) {
    // BPSK, rate 1/2, 300-bit blocks at Eb/N0 = 2.5 dB (BLER of tens of percent): the
    // quantised decoder may not be worse than the float max-log reference by more than 10
    // blocks in 150 (about 1.5 standard deviations of either count).
    std::mt19937_64 rng(5);
    viterbi_decoder_k7 vit(0, GetParam());
    const float ebn0 = std::pow(10.0f, 0.25f);
    const float sigma = std::sqrt(1.0f / (2.0f * 0.5f * ebn0));  // rate 1/2, Es = 1
    std::normal_distribution<float> g(0.0f, sigma);
    int err_volk = 0, err_ref = 0;
    for (int t = 0; t < 150; ++t) {
        const auto bits = random_bits(300, rng);
        const auto code = conv_encoder_k7::encode_zero_tail(bits);
        std::vector<float> l(code.size());
        for (std::size_t i = 0; i < code.size(); ++i)
            l[i] = 2.0f * ((code[i] ? -1.0f : 1.0f) + g(rng)) / (sigma * sigma);
        std::vector<std::uint8_t> ref(bits.size());
        viterbi_k7_reference(l.data(), bits.size(), termination::zero_tail, ref.data());
        err_ref += ref != bits;
        err_volk += vit.decode(l, bits.size(), termination::zero_tail) != bits;
    }
    EXPECT_GT(err_ref, 5);  // the SNR is in the waterfall, so the comparison means something
    EXPECT_LT(err_ref, 140);
    EXPECT_LE(err_volk, err_ref + 10) << "ref " << err_ref;
}

TEST(FecQuantiser, volk8_symbols_saturate_map_erasures_to_128_and_ignore_nan) {
    // 100 LLRs of +/-1 set the scale; outliers saturate instead of squashing the rest.
    std::vector<float> l;
    for (int i = 0; i < 50; ++i) {
        l.push_back(1.0f);
        l.push_back(-1.0f);
    }
    const float extra[] = {0.0f, 1000.0f, -1000.0f, NAN, INFINITY};
    l.insert(l.end(), std::begin(extra), std::end(extra));
    std::vector<std::uint8_t> s(l.size());
    viterbi_decoder_k7::quantise(l.data(), l.size(), 48.0f, s.data());
    EXPECT_LT(s[0], 128 - 10);  // bit 0 -> small symbol, well away from the erasure
    EXPECT_EQ(static_cast<int>(s[0]) + static_cast<int>(s[1]), 256);  // symmetric
    EXPECT_EQ(s[100], 128);                                           // erasure
    EXPECT_EQ(s[101], 1);                                             // saturated
    EXPECT_EQ(s[102], 255);
    EXPECT_EQ(s[103], 128);  // NaN -> erasure
    EXPECT_EQ(s[104], 1);    // +inf saturates
    // the scale does not depend on the overall LLR magnitude (1/N0)
    std::vector<float> l10(l.begin(), l.begin() + 100);
    for (auto& v : l10) v *= 10.0f;
    std::vector<std::uint8_t> s10(100);
    viterbi_decoder_k7::quantise(l10.data(), 100, 48.0f, s10.data());
    std::vector<std::uint8_t> s1(100);
    viterbi_decoder_k7::quantise(l.data(), 100, 48.0f, s1.data());
    EXPECT_EQ(s10, s1);
    EXPECT_EQ(s1[0], 128 - 48);
    std::vector<std::int16_t> q16(l.size());
    viterbi_decoder_k7::quantise16(l.data(), l.size(), 64.0f, q16.data());
    EXPECT_GT(q16[0], 0);
    EXPECT_EQ(q16[0], -q16[1]);
    EXPECT_EQ(q16[100], 0);
    EXPECT_EQ(q16[101], 511);
    EXPECT_EQ(q16[102], -511);
    EXPECT_EQ(q16[103], 0);
    EXPECT_THROW(viterbi_decoder_k7(0, viterbi_backend::volk8, 200.0f), std::invalid_argument);
    EXPECT_THROW(viterbi_decoder_k7(0, viterbi_backend::acs16, -1.0f), std::invalid_argument);
    EXPECT_NO_THROW(viterbi_decoder_k7(0, viterbi_backend::acs16, 200.0f));
}

// ---- interleaver ----------------------------------------------------------------------

TEST(FecInterleaver, signal_field_interleaves_to_table_g9) {
    interleaver il(48, 1);
    EXPECT_EQ(il.interleave(bits_from_string(k_g8)), bits_from_string(k_g9));
}

TEST(FecInterleaver, first_data_symbol_interleaves_to_table_g21_16qam) {
    interleaver il(192, 4);
    EXPECT_EQ(il.interleave(bits_msb(k_g18)), bits_msb(k_g21));
}

TEST(FecInterleaver, is_a_permutation_and_deinterleave_inverts_it_per_symbol) {
    for (int bpsc : {1, 2, 4, 6}) {
        interleaver il(48 * bpsc, bpsc);
        std::vector<std::uint32_t> p = il.permutation();
        std::sort(p.begin(), p.end());
        for (std::size_t i = 0; i < p.size(); ++i) ASSERT_EQ(p[i], i);
        std::vector<float> x(3 * 48 * static_cast<std::size_t>(bpsc));
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
        // interleave the indices (as floats) with the permutation, then deinterleave
        std::vector<float> y(x.size());
        for (std::size_t off = 0; off < x.size(); off += p.size())
            for (std::size_t k = 0; k < p.size(); ++k) y[off + il.permutation()[k]] = x[off + k];
        EXPECT_EQ(il.deinterleave(y), x);
    }
    EXPECT_THROW(interleaver(40, 1), std::invalid_argument);
    EXPECT_THROW(interleaver(48, 5), std::invalid_argument);  // 48 bits are not whole symbols
    EXPECT_THROW(interleaver(48, 9), std::invalid_argument);
}

TEST(FecMapper, annex_g_interleaved_bits_map_to_table_g22_data_subcarriers) {
    // Table G.22 (frequency domain of the first DATA symbol), data subcarriers -26..26
    // without the pilots at -21, -7, 7, 21, in increasing order.
    const float a = 0.316f, b = 0.949f;
    const gr_complex expect[48] = {
        {-a, a},  {-a, a},  {a, a},   {-b, -b}, {a, b},   {a, a},   {a, -b},  {-a, -b},
        {-a, a},  {-b, a},  {-b, -b}, {-b, -b}, {b, a},   {a, a},   {-b, -a}, {-b, -a},
        {-b, -a}, {-b, -b}, {b, -a},  {b, b},   {-b, -a}, {a, -a},  {-b, -a}, {-b, b},
        {-a, b},  {a, b},   {-b, a},  {b, -b},  {a, a},   {-a, -a}, {-a, b},  {b, -a},
        {-b, -a}, {b, a},   {-a, b},  {b, a},   {b, -a},  {b, -b},  {-a, -b}, {-b, a},
        {-b, -b}, {-b, -b}, {-b, -b}, {a, -a},  {b, a},   {-b, a},  {-a, b},  {a, -a},
    };
    qam_mapper m(4);
    const auto pts = m.map(bits_msb(k_g21));
    ASSERT_EQ(pts.size(), 48u);
    for (std::size_t i = 0; i < 48; ++i) {
        EXPECT_NEAR(pts[i].real(), expect[i].real(), 1e-3) << i;
        EXPECT_NEAR(pts[i].imag(), expect[i].imag(), 1e-3) << i;
    }
}
