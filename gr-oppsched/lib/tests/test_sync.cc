// Slot synchronisation on continuous streams: detection, timing, CFO, robustness.
#include <gnuradio/oppsched/ofdm_demodulator.h>
#include <gnuradio/oppsched/ofdm_modulator.h>
#include <gnuradio/oppsched/slot_sync.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "ofdm_test_util.h"

using namespace gr::oppsched;
using namespace ofdm_test;

namespace {

struct stream {
    std::vector<gr_complex> x;
    std::vector<std::uint64_t> starts;              // true slot starts
    std::vector<std::vector<gr_complex>> payloads;  // payload REs of each slot
};

// n slots separated by random silences of [gap_min, gap_max] samples, one CFO for the
// whole link (continuous phase), optional static multipath, then AWGN everywhere.
stream make_stream(ofdm_modulator& mod, std::mt19937_64& rng, int n, int gap_min, int gap_max,
                   double snr_db, double cfo, const std::vector<int>& d = {0},
                   const std::vector<gr_complex>& g = {{1.0f, 0.0f}}) {
    const auto& num = mod.geometry();
    stream s;
    std::uniform_int_distribution<int> gap(gap_min, gap_max);
    for (int i = 0; i < n; ++i) {
        s.x.resize(s.x.size() + static_cast<size_t>(gap(rng)), gr_complex(0, 0));
        s.starts.push_back(s.x.size());
        auto hdr = random_qam(rng, static_cast<size_t>(num.header_resource_elements()), 2);
        auto pay = random_qam(rng, static_cast<size_t>(num.payload_resource_elements()), 2);
        const auto slot = mod.modulate(hdr, pay);
        s.payloads.push_back(pay);
        s.x.insert(s.x.end(), slot.begin(), slot.end());
    }
    s.x.resize(s.x.size() + static_cast<size_t>(gap_max) + 500, gr_complex(0, 0));
    if (d.size() > 1 || d[0] != 0 || g[0] != gr_complex(1, 0)) s.x = convolve(s.x, d, g);
    apply_cfo(s.x, cfo, num.params().fft_len);
    if (std::isfinite(snr_db)) add_awgn(rng, s.x, num.noise_variance_for_snr_db(snr_db));
    return s;
}

std::vector<slot_detection> push_in_chunks(slot_sync& sync, const std::vector<gr_complex>& x,
                                           std::mt19937_64& rng, int max_chunk = 5000) {
    std::vector<slot_detection> found;
    std::uniform_int_distribution<int> c(1, max_chunk);
    size_t i = 0;
    while (i < x.size()) {
        const size_t n = std::min(x.size() - i, static_cast<size_t>(c(rng)));
        sync.push(x.data() + i, n, found);
        i += n;
    }
    return found;
}

}  // namespace

TEST(SlotSync, finds_every_slot_of_a_long_stream_with_random_gaps_and_cfo_once) {
    // 40 slots, silences of 0..3000 samples, Es/N0 10 dB, CFO +0.27 and -0.31 spacings
    // (4.2 and -4.8 kHz at 1 Msps), random chunking. Measured: 40/40 found each time,
    // start 2 samples early (the backoff), CFO error RMS 0.0067 / 0.0061 spacing (theory
    // for the 64-sample lag correlation at 9.1 dB per sample: 0.007), max 0.016.
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    for (double cfo : {0.27, -0.31}) {
        std::mt19937_64 rng(cfo > 0 ? 21 : 22);
        const auto s = make_stream(mod, rng, 40, 0, 3000, 10.0, cfo);
        slot_sync sync(num);
        ofdm_demodulator dem(num);
        const auto found = push_in_chunks(sync, s.x, rng);
        ASSERT_EQ(found.size(), s.starts.size()) << "cfo " << cfo;
        double se = 0, err = 0, nvar = 0;
        for (size_t i = 0; i < found.size(); ++i) {
            const auto off =
                static_cast<std::int64_t>(found[i].start) - static_cast<std::int64_t>(s.starts[i]);
            EXPECT_LE(off, 1) << i;
            EXPECT_GE(off, -4) << i;
            EXPECT_NEAR(found[i].cfo, cfo, 0.03) << i;
            EXPECT_NEAR(found[i].cfo_hz, found[i].cfo * num.subcarrier_spacing(), 1e-6);
            se += (found[i].cfo - cfo) * (found[i].cfo - cfo);
            const auto r = dem.demodulate(found[i].samples);
            ASSERT_TRUE(r.valid);
            // 10 dB: 1.5 N0 (+CPE) ~ 0.17-0.19 expected error variance of the QPSK REs
            const double m = mse(r.payload, s.payloads[i]);
            EXPECT_LT(m, 0.3) << i;
            err += m;
            for (float v : r.payload_nvar) nvar += v / r.payload_nvar.size();
        }
        EXPECT_LT(std::sqrt(se / found.size()), 0.01);
        // the equalised REs are as good as the demodulator says (sync adds nothing)
        EXPECT_NEAR(err / nvar, 1.0, 0.15);
        EXPECT_EQ(sync.stats().detections, 40u);
        EXPECT_EQ(sync.stats().rejected_truncated, 0u);
    }
}

TEST(SlotSync, back_to_back_tdma_slots_are_all_found_one_slot_apart) {
    const auto num = numerology::profile("3ms", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(23);
    const auto s = make_stream(mod, rng, 50, 0, 0, 15.0, 0.12);
    slot_sync sync(num);
    const auto found = push_in_chunks(sync, s.x, rng, 800);
    ASSERT_EQ(found.size(), 50u);
    for (size_t i = 1; i < found.size(); ++i) {
        const auto step = static_cast<std::int64_t>(found[i].start - found[i - 1].start);
        EXPECT_NEAR(static_cast<double>(step), num.slot_samples(), 2.0);
    }
}

TEST(SlotSync, cfo_estimate_error_is_below_0_03_spacing_over_plus_minus_0_9) {
    // Es/N0 10 dB, 6 slots per CFO; the coarse S&C range is +-1 spacing. Bound: max error
    // 0.03 spacing (4 sigma of the fine estimate), RMS 0.01.
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    double worst = 0, se = 0;
    int n = 0;
    for (double cfo : {-0.9, -0.45, -0.1, 0.0, 0.05, 0.2, 0.45, 0.9}) {
        std::mt19937_64 rng(static_cast<std::uint64_t>(100 + 100 * cfo));
        const auto s = make_stream(mod, rng, 6, 100, 600, 10.0, cfo);
        slot_sync sync(num);
        const auto found = sync.push(s.x);
        ASSERT_EQ(found.size(), 6u) << cfo;
        for (const auto& f : found) {
            worst = std::max(worst, std::abs(f.cfo - cfo));
            se += (f.cfo - cfo) * (f.cfo - cfo);
            ++n;
        }
    }
    EXPECT_LT(worst, 0.03);
    EXPECT_LT(std::sqrt(se / n), 0.01);
}

TEST(SlotSync, multipath_and_cfo_slots_are_found_and_demodulated) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(24);
    const std::vector<int> d{0, 3, 8};
    const std::vector<gr_complex> g{{0.5f, 0.3f}, {0.6f, -0.2f}, {-0.3f, 0.25f}};
    const auto s = make_stream(mod, rng, 20, 50, 2000, 15.0, -0.22, d, g);
    slot_sync sync(num);
    ofdm_demodulator dem(num);
    const auto found = push_in_chunks(sync, s.x, rng);
    ASSERT_EQ(found.size(), 20u);
    // On a selective channel the ZF error is dominated by the notch, 1.5 N0 / |H^_k|^2,
    // which the demodulator reports: the measured error matches the reported variance.
    double m = 0, nv = 0;
    for (size_t i = 0; i < found.size(); ++i) {
        const auto r = dem.demodulate(found[i].samples);
        ASSERT_TRUE(r.valid);
        EXPECT_NEAR(found[i].cfo, -0.22, 0.03);
        m += mse(r.payload, s.payloads[i]);
        for (float v : r.payload_nvar) nv += v / r.payload_nvar.size();
    }
    EXPECT_NEAR(m / nv, 1.0, 0.2);
}

TEST(SlotSync, pure_noise_and_zeros_give_no_detection) {
    // 3e6 samples of unit-power complex noise: the S&C pre-filter threshold is crossed
    // often (about one peak search per 160 samples, each verified against the LTF and
    // rejected), no slot is reported. (A 3e7-sample run: 191082 searches, 0 detections.)
    const auto num = numerology::profile("evdo", 1e6);
    slot_sync sync(num);
    std::mt19937_64 rng(25);
    std::normal_distribution<float> g(0.0f, std::sqrt(0.5f));
    std::vector<slot_detection> found;
    std::vector<gr_complex> buf(100000);
    for (int b = 0; b < 30; ++b) {
        for (auto& v : buf) v = gr_complex(g(rng), g(rng));
        sync.push(buf.data(), buf.size(), found);
    }
    EXPECT_TRUE(found.empty());
    EXPECT_EQ(sync.stats().detections, 0u);
    // every peak search was rejected (the last one may still wait for samples)
    EXPECT_GT(sync.stats().triggers, 0u);
    EXPECT_GE(sync.stats().rejected_ltf + sync.stats().rejected_truncated + 1,
              sync.stats().triggers);
    EXPECT_LT(sync.buffered(), 20000u) << "buffer must not grow on noise";

    slot_sync zs(num);
    std::vector<gr_complex> zeros(300000, gr_complex(0, 0));
    zs.push(zeros.data(), zeros.size(), found);
    EXPECT_TRUE(found.empty());
    EXPECT_EQ(zs.stats().triggers, 0u);
}

TEST(SlotSync, truncated_slots_are_not_reported_and_the_next_full_slot_is) {
    // Slot A cut after its first header symbol, slot B cut inside its LTF, slot C whole;
    // silence between, 20 dB.
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(26);
    std::vector<gr_complex> x(500, gr_complex(0, 0));
    auto slot = [&]() {
        return mod.modulate(random_qam(rng, num.header_resource_elements(), 2),
                            random_qam(rng, num.payload_resource_elements(), 2));
    };
    auto a = slot();
    a.resize(static_cast<size_t>(num.symbol_offset(1)));
    x.insert(x.end(), a.begin(), a.end());
    x.resize(x.size() + 2500, gr_complex(0, 0));
    auto b = slot();
    b.resize(static_cast<size_t>(num.ltf_offset(1) + 20));
    x.insert(x.end(), b.begin(), b.end());
    x.resize(x.size() + 2500, gr_complex(0, 0));
    const std::uint64_t c_start = x.size();
    const auto c = slot();
    x.insert(x.end(), c.begin(), c.end());
    x.resize(x.size() + 2500, gr_complex(0, 0));
    add_awgn(rng, x, num.noise_variance_for_snr_db(20.0));
    slot_sync sync(num);
    const auto found = sync.push(x);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_NEAR(static_cast<double>(found[0].start), static_cast<double>(c_start), 4.0);
    EXPECT_GE(sync.stats().rejected_truncated + sync.stats().rejected_ltf, 1u);
    EXPECT_GE(sync.stats().rejected_truncated, 1u);
}

TEST(SlotSync, a_deep_fade_in_the_middle_of_a_slot_does_not_drop_it) {
    // 30 dB, the slot's amplitude falls linearly to 0 at the middle of the payload and
    // rises back over +-400 samples (a Rayleigh null, as 60 Hz Jakes makes them): ~4
    // symbols are at the noise floor. The old check (every symbol >= sigma^2 + 0.05 P)
    // dropped such slots; now it is delivered and its header symbols (before the fade)
    // are demodulated cleanly.
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(31);
    const auto hdr = random_qam(rng, static_cast<size_t>(num.header_resource_elements()), 2);
    auto s =
        mod.modulate(hdr, random_qam(rng, static_cast<size_t>(num.payload_resource_elements()), 2));
    const double mid = num.symbol_offset(num.data_symbols() / 2 + 2);
    for (size_t n = 0; n < s.size(); ++n)
        s[n] *= static_cast<float>(std::min(1.0, std::abs(static_cast<double>(n) - mid) / 400.0));
    std::vector<gr_complex> x(700, gr_complex(0, 0));
    const std::uint64_t start = x.size();
    x.insert(x.end(), s.begin(), s.end());
    x.resize(x.size() + 700, gr_complex(0, 0));
    add_awgn(rng, x, num.noise_variance_for_snr_db(30.0));
    slot_sync sync(num);
    const auto found = sync.push(x);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_NEAR(static_cast<double>(found[0].start), static_cast<double>(start), 4.0);
    EXPECT_EQ(sync.stats().rejected_truncated, 0u);
    ofdm_demodulator dem(num);
    const auto r = dem.demodulate(found[0].samples, false);
    ASSERT_TRUE(r.valid);
    EXPECT_LT(mse(r.header, hdr), 0.02);
}

TEST(SlotSync, a_slot_cut_mid_way_and_followed_at_once_by_the_next_does_not_hide_it) {
    // Slot A cut after 6 data symbols, 200 samples of silence, then slot B starts inside
    // A's span: B must be found (the search resumes at A's first silent symbol).
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(32);
    auto slot = [&]() {
        return mod.modulate(
            random_qam(rng, static_cast<size_t>(num.header_resource_elements()), 2),
            random_qam(rng, static_cast<size_t>(num.payload_resource_elements()), 2));
    };
    std::vector<gr_complex> x(500, gr_complex(0, 0));
    auto a = slot();
    a.resize(static_cast<size_t>(num.symbol_offset(6)));
    x.insert(x.end(), a.begin(), a.end());
    x.resize(x.size() + 200, gr_complex(0, 0));
    const std::uint64_t b_start = x.size();
    const auto b = slot();
    x.insert(x.end(), b.begin(), b.end());
    x.resize(x.size() + 2000, gr_complex(0, 0));
    add_awgn(rng, x, num.noise_variance_for_snr_db(20.0));
    slot_sync sync(num);
    const auto found = sync.push(x);
    ASSERT_GE(found.size(), 1u);
    EXPECT_NEAR(static_cast<double>(found.back().start), static_cast<double>(b_start), 4.0);
}

TEST(SlotSync, a_stream_that_ends_mid_slot_reports_nothing_until_the_slot_completes) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(27);
    const auto s = make_stream(mod, rng, 1, 300, 300, 20.0, 0.0);
    slot_sync sync(num);
    std::vector<slot_detection> found;
    sync.push(s.x.data(), 300 + 1000, found);  // preamble and part of the slot
    EXPECT_TRUE(found.empty());
    sync.push(s.x.data() + 1300, s.x.size() - 1300, found);
    EXPECT_EQ(found.size(), 1u);
}

TEST(SlotSync, non_finite_samples_are_replaced_and_counted) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(28);
    auto s = make_stream(mod, rng, 3, 1000, 1000, 15.0, 0.1);
    // garbage in the silence before the second slot
    for (size_t i = 0; i < 50; ++i)
        s.x[s.starts[1] - 400 + i] = gr_complex(std::numeric_limits<float>::quiet_NaN(),
                                                std::numeric_limits<float>::infinity());
    slot_sync sync(num);
    const auto found = sync.push(s.x);
    EXPECT_EQ(sync.stats().nonfinite, 50u);
    EXPECT_EQ(found.size(), 3u);
}

TEST(SlotSync, detections_do_not_depend_on_how_the_stream_is_chunked) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(29);
    const auto s = make_stream(mod, rng, 8, 0, 2000, 12.0, 0.15);
    slot_sync whole(num), pieces(num);
    const auto a = whole.push(s.x);
    const auto b = push_in_chunks(pieces, s.x, rng, 300);
    ASSERT_EQ(a.size(), 8u);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].start, b[i].start);
        EXPECT_EQ(a[i].cfo, b[i].cfo);
        EXPECT_EQ(a[i].samples, b[i].samples);
    }
}

TEST(SlotSync, bad_parameters_are_rejected_naming_the_field) {
    const auto num = numerology::profile("evdo", 1e6);
    slot_sync_params p;
    p.timing_backoff = 16;
    try {
        slot_sync s(num, p);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("slot_sync.timing_backoff: 16"), std::string::npos)
            << e.what();
    }
    p = slot_sync_params{};
    p.detection_threshold = 1.5f;
    EXPECT_THROW(slot_sync(num, p), std::invalid_argument);
    p = slot_sync_params{};
    p.ltf_search = 0;
    EXPECT_THROW(slot_sync(num, p), std::invalid_argument);
}

TEST(SlotSync, a_128_point_numerology_with_the_generic_allocation_works_end_to_end) {
    numerology_params p;
    p.sample_rate = 2e6;
    p.slot_duration = 3e-3;
    p.fft_len = 128;
    p.cp_len = 32;
    p.data_carriers = 96;
    p.pilot_carriers = 8;
    const numerology num(p);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(30);
    const auto s = make_stream(mod, rng, 5, 200, 2000, 20.0, -0.35);
    slot_sync sync(num);
    ofdm_demodulator dem(num);
    const auto found = sync.push(s.x);
    ASSERT_EQ(found.size(), 5u);
    for (size_t i = 0; i < found.size(); ++i) {
        EXPECT_NEAR(found[i].cfo, -0.35, 0.03);
        const auto r = dem.demodulate(found[i].samples);
        ASSERT_TRUE(r.valid);
        EXPECT_NEAR(r.snr.snr_db, 20.0, 1.5);
        EXPECT_LT(mse(r.payload, s.payloads[i]), 0.05);
    }
}
