// Receiver chain (slot_sync -> ofdm_demodulator -> tb_decoder) through the channel
// emulator: the frequency-smoothed channel estimate on multipath channels within the CP,
// and the smoothed per-symbol gain tracking under fast (60 Hz) flat fading. Seeded.
#include <gnuradio/oppsched/channel_emulator.h>
#include <gnuradio/oppsched/mcs.h>
#include <gnuradio/oppsched/ofdm_demodulator.h>
#include <gnuradio/oppsched/ofdm_modulator.h>
#include <gnuradio/oppsched/scrambler.h>
#include <gnuradio/oppsched/slot_sync.h>
#include <gnuradio/oppsched/tb_codec.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "fec_test_util.h"
#include "ofdm_test_util.h"

using namespace gr::oppsched;

namespace {

struct chain_result {
    int slots = 0;
    int missed = 0;    // not detected by slot_sync
    int crc_fail = 0;  // detected, payload CRC failed
    int errors() const { return missed + crc_fail; }
};

// n_slots back-to-back slots of the largest TB of `mcs` through `user`'s channel, each
// detected slot demodulated and decoded as a first transmission (the header fields are
// taken as known: this measures sync + channel estimation + tracking + FEC).
chain_result run_chain(const numerology& num, int mcs, int n_slots, emulator_user_params user,
                       const ofdm_demodulator_params& dp, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    ofdm_modulator mod(num);
    tb_encoder enc(num);
    const std::size_t bytes = mcs_set::tb_bytes(mcs, num);
    std::vector<std::vector<std::uint8_t>> tbs;
    std::vector<gr_complex> tx(300, gr_complex(0.0f, 0.0f));
    const auto hdr =
        ofdm_test::random_qam(rng, static_cast<size_t>(num.header_resource_elements()), 2);
    for (int k = 0; k < n_slots; ++k) {
        tbs.push_back(fec_test::random_bytes(bytes, rng));
        const auto re =
            enc.encode(tbs.back(), mcs, 0, scrambler::seed_for_slot(static_cast<std::uint64_t>(k)));
        const auto s = mod.modulate(hdr, re);
        tx.insert(tx.end(), s.begin(), s.end());
    }
    tx.resize(tx.size() + 400, gr_complex(0.0f, 0.0f));
    channel_emulator_params ep;
    ep.numerology = num.params();
    ep.seed = seed;
    ep.users = {user};
    channel_emulator em(ep);
    const auto rx = em.process(tx)[0];

    slot_sync sync(num);
    std::vector<slot_detection> found;
    for (size_t i = 0; i < rx.size(); i += 4096)
        sync.push(rx.data() + i, std::min<size_t>(4096, rx.size() - i), found);
    ofdm_demodulator dem(num, dp);
    tb_decoder dec(num);
    chain_result r;
    r.slots = n_slots;
    std::vector<bool> ok(static_cast<size_t>(n_slots), false);
    ofdm_demod_result d;
    for (const auto& f : found) {
        const long k = std::lround((static_cast<double>(f.start) - 300.0) / num.slot_samples());
        if (k < 0 || k >= n_slots) continue;
        dem.demodulate(f.samples.data(), f.samples.size(), d);
        if (!d.valid) continue;
        tb_rx_params p{mcs, 0, bytes, true,
                       scrambler::seed_for_slot(static_cast<std::uint64_t>(k))};
        auto harq = dec.make_harq_buffer();  // a fresh buffer: every TB is new data
        const auto out = dec.decode(d.payload, d.payload_nvar, p, *harq);
        if (out.crc_ok && out.bytes == tbs[static_cast<size_t>(k)])
            ok[static_cast<size_t>(k)] = true;
    }
    std::vector<bool> seen(static_cast<size_t>(n_slots), false);
    for (const auto& f : found) {
        const long k = std::lround((static_cast<double>(f.start) - 300.0) / num.slot_samples());
        if (k >= 0 && k < n_slots) seen[static_cast<size_t>(k)] = true;
    }
    for (int k = 0; k < n_slots; ++k) {
        if (!seen[static_cast<size_t>(k)])
            ++r.missed;
        else if (!ok[static_cast<size_t>(k)])
            ++r.crc_fail;
    }
    return r;
}

emulator_user_params static_multipath(double snr_db) {
    // Three static taps spanning 13 of the 16 CP samples (notches down to about -16 dB).
    emulator_user_params u;
    u.fading = fading_model::none;
    u.mean_snr_db = snr_db;
    u.taps = {{0, 0.0}, {5, -6.0}, {13, -10.0}};
    u.cfo_hz = 700.0;
    return u;
}

emulator_user_params flat_jakes(double snr_db, double fd) {
    emulator_user_params u;
    u.fading = fading_model::jakes;
    u.doppler_hz = fd;
    u.mean_snr_db = snr_db;
    return u;
}

class rx_multipath : public ::testing::TestWithParam<int> {};

}  // namespace

TEST_P(rx_multipath, every_mcs_decodes_at_35_db_over_static_multipath_within_the_cp) {
    // 12 slots per profile, 0 errors: the smoother's delay window covers the channel, so
    // the estimate is unbiased and the notches are equalised.
    const int mcs = GetParam();
    for (const char* prof : {"evdo", "3ms"}) {
        const auto num = numerology::profile(prof, 1e6);
        const auto r = run_chain(num, mcs, 12, static_multipath(35.0), {}, 700 + mcs);
        EXPECT_EQ(r.errors(), 0) << prof << " MCS " << mcs << ": missed " << r.missed << ", CRC "
                                 << r.crc_fail;
    }
}

INSTANTIATE_TEST_SUITE_P(AllMcs, rx_multipath, ::testing::Range(0, 8),
                         [](const ::testing::TestParamInfo<int>& i) {
                             return "mcs" + std::to_string(i.param);
                         });

TEST(RxTracking, mcs7_bler_at_60_hz_flat_jakes_and_35_db_has_no_fading_floor_on_both_profiles) {
    // 200 slots per profile of flat Jakes fading (f_d = 60 Hz, the fast case of Andrew & Hanly,
    // CLAMP) at 35 dB mean SNR, MCS 7 first transmissions. The old receiver (LTF estimate +
    // per-symbol common phase only) failed 46-62% of such TBs (amplitude drift over the slot); with
    // the smoothed complex-gain tracking (and the fade-tolerant sync) the measured BLER is 7/200
    // (evdo) and 10/200 (3ms), all CRC failures of slots whose mean gain is in a deep fade
    // (P(|a|^2 < -13 dB) = 5%: MCS 7 needs ~21 dB), i.e. Rayleigh statistics, not a floor. Bound
    // 14/200 (7%); the phase-only receiver on the same samples fails 114/200 and 151/200 (bound >=
    // 50) so the test shows the difference.
    for (const char* prof : {"evdo", "3ms"}) {
        const auto num = numerology::profile(prof, 1e6);
        const auto r = run_chain(num, 7, 200, flat_jakes(35.0, 60.0), {}, 4242);
        ofdm_demodulator_params phase_only;
        phase_only.track_gain = false;
        const auto old = run_chain(num, 7, 200, flat_jakes(35.0, 60.0), phase_only, 4242);
        EXPECT_LE(r.errors(), 14) << prof << ": missed " << r.missed << ", CRC " << r.crc_fail;
        EXPECT_GE(old.errors(), 50) << prof << " (phase-only tracking)";
    }
}

TEST(RxTracking, robust_mcs_first_transmissions_at_60_hz_and_30_db_have_no_sync_floor) {
    // MCS 0 at 30 dB mean SNR, 60 Hz: the old sync dropped ~1.6% of slots (mid-slot deep
    // fades failed its truncation check). Measured now: 0 missed, 2 CRC failures of 400
    // (slots faded far below the noise). Bounds: <= 1 missed, <= 6 errors (1.5%, the old
    // sync alone missed ~1.6%).
    const auto num = numerology::profile("evdo", 1e6);
    const auto r = run_chain(num, 0, 400, flat_jakes(30.0, 60.0), {}, 99);
    EXPECT_LE(r.missed, 1);
    EXPECT_LE(r.errors(), 6) << "missed " << r.missed << ", CRC " << r.crc_fail;
}
