// How a TB is cut into 802.11n LDPC codewords and read per RV (ldpc_rate_matcher.h), and
// the LDPC payload chain end to end (tb_codec.h with numerology fec = ldpc).
#include <gnuradio/oppsched/ldpc.h>
#include <gnuradio/oppsched/ldpc_rate_matcher.h>
#include <gnuradio/oppsched/tb_codec.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "fec_test_util.h"

using namespace gr::oppsched;
using namespace fec_test;

TEST(LdpcSegmentation, the_fewest_648_bit_units_hold_the_tb_and_grow_while_parity_fits) {
    // 304 info bits at rate 1/2 in 700: one unit (324 info) holds them and its parity fits;
    // two units would not: L = 648
    const ldpc_segmentation a(304, code_rate::r1_2, 700);
    EXPECT_EQ(a.codewords(), 1);
    EXPECT_EQ(a.codeword_length(0), 648);
    EXPECT_EQ(a.shortened_bits(0), 20u);
    EXPECT_EQ(a.total_bits(), 628u);
    EXPECT_EQ(a.punctured_bits(), 0u);
    // with room for it, the same bits take the 1944 code (more parity, no puncturing)
    const ldpc_segmentation b(304, code_rate::r1_2, 1400);
    EXPECT_EQ(b.codeword_length(0), 1944);
    EXPECT_EQ(b.total_bits(), 304u + 972u);
    // 720 bits in 1440: 3 units needed (one codeword), 252 of its 972 parity bits do not
    // fit the slot
    const ldpc_segmentation c(720, code_rate::r1_2, 1440);
    EXPECT_EQ(c.codeword_length(0), 1944);
    EXPECT_EQ(c.total_bits(), 1692u);
    EXPECT_EQ(c.punctured_bits(), 252u);
    // 1248 bits in 2496 (evdo 16QAM 1/2): 4 units in 2 codewords, 2 x 1296 (not 1944 +
    // 648, not 2 x 1944 with 696 parity bits punctured)
    const ldpc_segmentation d(1248, code_rate::r1_2, 2496);
    EXPECT_EQ(d.codewords(), 2);
    EXPECT_EQ(d.codeword_length(0), 1296);
    EXPECT_EQ(d.codeword_length(1), 1296);
    EXPECT_EQ(d.punctured_bits(), 48u);
    // 2160 bits at 3/4 in 2880 (3ms QPSK 3/4): 5 units -> 1944 + 1296, 90 punctured;
    // the slot's bits split in proportion to the buffers (1458 + 486, 972 + 324)
    const ldpc_segmentation e(2160, code_rate::r3_4, 2880);
    ASSERT_EQ(e.codewords(), 2);
    EXPECT_EQ(e.codeword_length(0), 1944);
    EXPECT_EQ(e.codeword_length(1), 1296);
    EXPECT_EQ(e.codeword_info_bits(0), 1296u);
    EXPECT_EQ(e.codeword_info_bits(1), 864u);
    EXPECT_EQ(e.punctured_bits(), 90u);
    EXPECT_EQ(e.slot_bits(0) + e.slot_bits(1), 2880u);
    EXPECT_EQ(e.slot_bits(0), 2880u * 1782u / 2970u);
}

TEST(LdpcSegmentation, long_tbs_split_evenly_over_1944_bit_codewords) {
    // 7200 info bits at 5/6 (1620 per codeword) with room for the parity: 5 codewords of 1440
    const ldpc_segmentation s(7200, code_rate::r5_6, 8820);
    ASSERT_EQ(s.codewords(), 5);
    for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(s.codeword_length(i), 1944);
        EXPECT_EQ(s.parity_bits(i), 324u);
        EXPECT_EQ(s.codeword_info_bits(i), 1440u);
        EXPECT_EQ(s.shortened_bits(i), 180u);
        EXPECT_EQ(s.info_offset(i), 1440u * static_cast<std::size_t>(i));
        EXPECT_EQ(s.offset(i), 1764u * static_cast<std::size_t>(i));
        EXPECT_EQ(s.slot_bits(i), 1764u);
    }
    EXPECT_EQ(s.total_bits(), 5u * 1764u);
    // uneven: the first K mod N_cw codewords take one bit more
    const ldpc_segmentation u(1945, code_rate::r1_2, 5000);
    ASSERT_EQ(u.codewords(), 3);
    EXPECT_EQ(u.codeword_info_bits(0), 649u);
    EXPECT_EQ(u.codeword_info_bits(1), 648u);
    EXPECT_EQ(u.codeword_info_bits(2), 648u);
}

TEST(LdpcSegmentation, a_length_cap_keeps_every_codeword_at_or_below_it) {
    // 3000 bits at 1/2 in 6000: 10 units; uncapped 1944, 1944, 1296, 1296 (above)
    const ldpc_segmentation c648(3000, code_rate::r1_2, 6000, 648);
    ASSERT_EQ(c648.codewords(), 10);  // ceil(3000 / 324)
    for (int i = 0; i < 10; ++i) EXPECT_EQ(c648.codeword_length(i), 648);
    EXPECT_EQ(c648.codeword_info_bits(0), 300u);
    EXPECT_EQ(c648.total_bits(), 3000u + 10u * 324u);
    const ldpc_segmentation c1296(3000, code_rate::r1_2, 6000, 1296);
    ASSERT_EQ(c1296.codewords(), 5);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(c1296.codeword_length(i), 1296);
    // a short TB with room grows only up to the cap
    const ldpc_segmentation b(304, code_rate::r1_2, 1400, 648);
    EXPECT_EQ(b.codewords(), 1);
    EXPECT_EQ(b.codeword_length(0), 648);
    EXPECT_EQ(ldpc_segmentation(304, code_rate::r1_2, 1400, 1944).codeword_length(0), 1944);
    try {
        ldpc_segmentation(304, code_rate::r1_2, 1400, 972);
        FAIL() << "accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("ldpc.max_length: 972"), std::string::npos)
            << e.what();
    }
}

TEST(LdpcSegmentation, codewords_take_turns_over_the_whole_slot_in_proportion) {
    // 3000 bits at 1/2 in 6000: 10 units -> 1944, 1944, 1296, 1296
    const ldpc_segmentation s(3000, code_rate::r1_2, 6000);
    ASSERT_EQ(s.codewords(), 4);
    const auto sel = s.selection(0);
    ASSERT_EQ(sel.size(), 6000u);
    std::vector<std::size_t> total(4, 0);
    std::vector<std::vector<std::size_t>> quarter(4, std::vector<std::size_t>(4, 0));
    for (std::size_t j = 0; j < sel.size(); ++j) {
        int cw = -1;
        for (int i = 0; i < 4; ++i)
            if (sel[j] >= s.offset(i) && sel[j] < s.offset(i) + s.buffer_bits(i)) cw = i;
        ASSERT_GE(cw, 0);
        ++total[static_cast<std::size_t>(cw)];
        ++quarter[static_cast<std::size_t>(cw)][j * 4 / sel.size()];
    }
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(total[static_cast<std::size_t>(i)], s.slot_bits(i));
        for (int q = 0; q < 4; ++q)  // every quarter of the slot gets its share, +-2
            EXPECT_NEAR(static_cast<double>(quarter[static_cast<std::size_t>(i)][q]),
                        s.slot_bits(i) / 4.0, 2.0)
                << "codeword " << i << " quarter " << q;
    }
    // equal codewords alternate bit by bit
    const ldpc_segmentation e(7200, code_rate::r5_6, 8820);
    const auto se = e.selection(0);
    for (std::size_t j = 0; j < 50; ++j)
        EXPECT_EQ((se[j] - e.offset(static_cast<int>(j % 5))) < e.buffer_bits(0), true) << j;
}

TEST(LdpcSegmentation, rv0_leaves_out_the_last_parity_bits_and_rv2_sends_them) {
    const ldpc_segmentation s(720, code_rate::r1_2, 1440);
    const auto r0 = s.selection(0);
    std::set<std::uint32_t> got(r0.begin(), r0.end());
    EXPECT_EQ(got.size(), 1440u);
    EXPECT_EQ(*got.rbegin(), 1439u);  // positions 1440..1691 (last 252 parity) left out
    const auto r2 = s.selection(2);
    EXPECT_EQ(r2.front(), 1692u / 2);  // k0 = floor(2 * 1692 / 4)
    got.insert(r2.begin(), r2.end());
    EXPECT_EQ(got.size(), 1692u);  // together: every info and parity bit
}

TEST(LdpcSegmentation, repetition_starts_at_each_rvs_own_place) {
    const ldpc_segmentation s(300, code_rate::r1_2, 2000);  // 1 codeword, repeated
    for (int rv = 0; rv < 4; ++rv) {
        const auto sel = s.selection(rv);
        const std::size_t B = s.total_bits();
        EXPECT_EQ(sel[0], (static_cast<std::size_t>(rv) * B) / 4);
        for (std::size_t j = 1; j < sel.size(); ++j) EXPECT_EQ(sel[j], (sel[j - 1] + 1) % B);
    }
}

TEST(LdpcSegmentation, infeasible_sizes_and_bad_rvs_are_refused_naming_the_field) {
    try {
        ldpc_segmentation(721, code_rate::r1_2, 1440);
        FAIL() << "accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("ldpc.info_bits: 721"), std::string::npos) << e.what();
    }
    EXPECT_THROW(ldpc_segmentation(0, code_rate::r1_2, 100), std::invalid_argument);
    EXPECT_THROW(ldpc_segmentation(10, code_rate::r1_2, 0), std::invalid_argument);
    const ldpc_segmentation s(100, code_rate::r1_2, 400);
    EXPECT_THROW(s.selection(4), std::invalid_argument);
    EXPECT_THROW(s.selection(-1), std::invalid_argument);
}

TEST(LdpcSegmentation, decoder_input_marks_shortened_bits_known_and_keeps_parity_order) {
    const ldpc_segmentation s(304, code_rate::r1_2, 700);  // 648 code, 20 shortened
    std::vector<float> buf(s.total_bits());
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i + 1);
    std::vector<float> cw(648);
    s.codeword_llrs(buf.data(), 0, cw.data());
    EXPECT_FLOAT_EQ(cw[0], 1.0f);
    EXPECT_FLOAT_EQ(cw[303], 304.0f);
    for (int i = 304; i < 324; ++i) EXPECT_FLOAT_EQ(cw[i], ldpc_decoder::known_zero_llr);
    EXPECT_FLOAT_EQ(cw[324], 305.0f);  // first parity bit
    EXPECT_FLOAT_EQ(cw[647], 628.0f);
}

// ---- the LDPC payload chain ------------------------------------------------------------

TEST(LdpcPayload, every_mcs_and_rv_decodes_bit_exactly_without_noise_in_both_profiles) {
    std::mt19937_64 rng(11);
    for (const char* prof : {"evdo", "3ms"}) {
        const auto n = numerology::profile(prof, 1e6);
        tb_encoder enc(n);
        tb_decoder dec(n);
        auto h = dec.make_harq_buffer();
        const std::vector<float> nv(dec.resource_elements(), 0.05f);
        bool ndi = false;
        for (const auto& m : mcs_set::all()) {
            const std::size_t max = mcs_set::tb_bytes(m.index, n);
            for (std::size_t bytes : {std::size_t{1}, max / 3, max}) {
                for (int rv = 0; rv < 4; ++rv) {
                    const auto tb = random_bytes(bytes, rng);
                    ndi = !ndi;
                    const auto r = dec.decode(enc.encode(tb, m.index, rv, 9), nv,
                                              {m.index, rv, bytes, ndi, 9}, *h);
                    EXPECT_TRUE(r.crc_ok) << prof << " " << m.name << " " << bytes << " rv " << rv;
                    EXPECT_EQ(r.bytes, tb);
                    EXPECT_EQ(r.stats.channel_bit_errors, 0u);
                }
            }
        }
    }
}

TEST(LdpcPayload, a_648_bit_cap_decodes_every_mcs_without_noise_at_5_msps) {
    std::mt19937_64 rng(12);
    auto p = numerology::profile("evdo", 5e6).params();
    p.ldpc_max_n = 648;
    const numerology n(p);
    tb_encoder enc(n);
    tb_decoder dec(n);
    auto h = dec.make_harq_buffer();
    const std::vector<float> nv(dec.resource_elements(), 0.05f);
    bool ndi = false;
    for (const auto& m : mcs_set::all()) {
        const std::size_t max = mcs_set::tb_bytes(m.index, n);
        // the cap does not change the TB size, only how it is cut
        EXPECT_EQ(max, mcs_set::tb_bytes(m.index, numerology::profile("evdo", 5e6)));
        const auto tb = random_bytes(max, rng);
        ndi = !ndi;
        const auto r = dec.decode(enc.encode(tb, m.index, 0, 9), nv, {m.index, 0, max, ndi, 9}, *h);
        EXPECT_TRUE(r.crc_ok) << m.name;
        EXPECT_EQ(r.bytes, tb);
    }
}

TEST(LdpcPayload, a_different_rate_with_the_same_ndi_is_not_combined) {
    // 16QAM 1/2 and QPSK 1/2 at the same TB size share a buffer length only by accident;
    // 64QAM 2/3 vs 3/4 differ in rate: the buffer must clear, not mix two codes
    const auto n = numerology::profile("evdo", 1e6);
    tb_encoder enc(n);
    tb_decoder dec(n);
    auto h = dec.make_harq_buffer();
    std::mt19937_64 rng(5);
    const auto tb = random_bytes(100, rng);
    const std::vector<float> nv(dec.resource_elements(), 0.01f);
    dec.decode(enc.encode(tb, 5, 0, 3), nv, {5, 0, 100, true, 3}, *h);
    const auto r = dec.decode(enc.encode(tb, 6, 0, 4), nv, {6, 0, 100, true, 4}, *h);
    EXPECT_TRUE(r.crc_ok);
    EXPECT_EQ(r.stats.receptions, 1);
}

TEST(LdpcPayload, garbage_input_decodes_to_a_crc_failure_not_a_crash) {
    const auto n = numerology::profile("evdo", 1e6);
    tb_decoder dec(n);
    auto h = dec.make_harq_buffer();
    std::mt19937_64 rng(3);
    std::vector<gr_complex> re(dec.resource_elements());
    std::normal_distribution<float> g;
    for (auto& x : re) x = gr_complex(g(rng), g(rng));
    std::vector<float> nv(re.size(), 1.0f);
    nv[5] = 0.0f;  // infinite LLRs
    re[7] = gr_complex(std::nanf(""), 0.0f);
    const auto r = dec.decode(re, nv, {7, 0, mcs_set::tb_bytes(7, n), false, 1}, *h);
    EXPECT_FALSE(r.crc_ok);
    EXPECT_EQ(r.bytes.size(), mcs_set::tb_bytes(7, n));
}

namespace {
// The selection as first written: the counting sort with one division per coded bit.
std::vector<std::uint32_t> reference_selection(const ldpc_segmentation& s, int rv) {
    const std::size_t n = static_cast<std::size_t>(s.codewords()), C = s.coded_bits();
    std::vector<std::size_t> E(n), size(n), pos(n);
    for (std::size_t i = 0; i < n; ++i) {
        E[i] = s.slot_bits(static_cast<int>(i));
        size[i] = s.buffer_bits(static_cast<int>(i));
        pos[i] = (static_cast<std::size_t>(rv) * size[i]) / 4;
    }
    auto bucket = [C](std::size_t e, std::size_t En) { return ((2 * e + 1) * C) / (2 * En); };
    std::vector<std::uint32_t> first(C + 1, 0), out(C);
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t e = 0; e < E[i]; ++e) ++first[bucket(e, E[i]) + 1];
    for (std::size_t b = 0; b < C; ++b) first[b + 1] += first[b];
    for (std::size_t i = 0; i < n; ++i) {
        std::size_t p = pos[i];
        for (std::size_t e = 0; e < E[i]; ++e) {
            out[first[bucket(e, E[i])]++] =
                static_cast<std::uint32_t>(s.offset(static_cast<int>(i)) + p);
            if (++p == size[i]) p = 0;
        }
    }
    return out;
}
}  // namespace

TEST(LdpcSegmentation, selection_by_integer_steps_equals_the_division_per_bit) {
    std::mt19937_64 rng(31);
    int checked = 0;
    for (int k = 0; k < 300; ++k) {
        const code_rate rate = static_cast<code_rate>(rng() % 4);
        const std::size_t C = 200 + rng() % 60000;
        const auto& m = [&]() -> const mcs_info& {
            for (const auto& x : mcs_set::all())
                if (x.rate == rate) return x;
            throw std::logic_error("rate");
        }();
        const std::size_t cap = C * m.rate_num / m.rate_den;
        const std::size_t K = 1 + rng() % cap;
        const ldpc_segmentation s(K, rate, C);
        for (int rv = 0; rv < 4; ++rv) {
            ASSERT_EQ(s.selection(rv), reference_selection(s, rv)) << K << " " << C << " " << rv;
            ++checked;
        }
    }
    EXPECT_EQ(checked, 1200);
}

TEST(LdpcPayload, encoder_selection_cache_gives_the_bits_of_a_fresh_encoder_also_across_threads) {
    // More layouts than the cache holds (it is cleared and refilled), encoded by one shared
    // encoder from two threads, against a fresh encoder per TB.
    const auto n = numerology::profile("3ms", 2e6);
    const tb_encoder shared(n);
    std::mt19937_64 rng(5);
    struct job {
        std::vector<std::uint8_t> tb;
        int mcs, rv;
        std::vector<std::uint8_t> expect, got;
    };
    std::vector<job> jobs;
    for (int k = 0; k < 80; ++k) {
        const int mcs = static_cast<int>(rng() % 8);
        const std::size_t bytes = 1 + rng() % mcs_set::tb_bytes(mcs, n);
        jobs.push_back({random_bytes(bytes, rng), mcs, static_cast<int>(rng() % 4), {}, {}});
        jobs.back().expect = tb_encoder(n).coded_bits(jobs.back().tb, mcs, jobs.back().rv, 5);
    }
    auto work = [&](std::size_t from) {
        for (int rep = 0; rep < 2; ++rep)
            for (std::size_t j = from; j < jobs.size(); j += 2)
                jobs[j].got = shared.coded_bits(jobs[j].tb, jobs[j].mcs, jobs[j].rv, 5);
    };
    std::thread a(work, 0), b(work, 1);
    a.join();
    b.join();
    for (const auto& j : jobs) EXPECT_EQ(j.got, j.expect) << "mcs " << j.mcs << " rv " << j.rv;
}
