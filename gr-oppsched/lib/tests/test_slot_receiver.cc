// slot_receiver: one client's receiver chain on clean (noise-free, seeded) slot streams:
// decoding of addressed TBs, slot numbering from the header and by extrapolation, missed-slot
// reports, HARQ combining and the parameter checks.
#include <gnuradio/oppsched/header_codec.h>
#include <gnuradio/oppsched/mcs.h>
#include <gnuradio/oppsched/ofdm_modulator.h>
#include <gnuradio/oppsched/scrambler.h>
#include <gnuradio/oppsched/slot_receiver.h>
#include <gnuradio/oppsched/tb_codec.h>
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <vector>

#include "fec_test_util.h"
#include "ofdm_test_util.h"

using namespace gr::oppsched;

namespace {

constexpr int k_lead = 400;  // silence before the first slot (the sync's window fills)
constexpr int k_mcs = 2;

//! What goes out in one slot of a test stream.
struct slot_spec {
    header_fields header;
    std::vector<std::uint8_t> tb;  // empty: an empty slot
    bool garbage_header = false;   // header REs replaced by random QPSK (fails its CRC)
    bool silent = false;           // nothing sent at all (the slot is lost)
};

class slot_receiver_test : public ::testing::Test {
  protected:
    numerology num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod{num};
    tb_encoder enc{num};
    header_codec hdr{num};
    std::mt19937_64 rng{7};

    slot_spec addressed(std::uint32_t slot, int user, bool ndi = true, int pid = 0) {
        slot_spec s;
        s.tb = fec_test::random_bytes(mcs_set::tb_bytes(k_mcs, num), rng);
        s.header.user = static_cast<std::uint16_t>(user);
        s.header.mcs = k_mcs;
        s.header.harq_process = static_cast<std::uint8_t>(pid);
        s.header.ndi = ndi;
        s.header.tb_bytes = static_cast<std::uint16_t>(s.tb.size());
        s.header.slot = slot;
        return s;
    }

    std::vector<gr_complex> stream(const std::vector<slot_spec>& slots, int tail_slots = 1) {
        std::vector<gr_complex> x(k_lead, gr_complex(0.0f, 0.0f));
        for (const auto& s : slots) {
            if (s.silent) {
                x.resize(x.size() + static_cast<std::size_t>(num.slot_samples()));
                continue;
            }
            const auto header = s.garbage_header
                                    ? ofdm_test::random_qam(rng, hdr.resource_elements(), 2)
                                    : hdr.encode(s.header);
            const auto payload = s.tb.empty() ? std::vector<gr_complex>{}
                                              : enc.encode(s.tb, s.header.mcs, s.header.rv,
                                                           scrambler::seed_for_slot(s.header.slot));
            const auto y = mod.modulate(header, payload);
            x.insert(x.end(), y.begin(), y.end());
        }
        x.resize(x.size() + static_cast<std::size_t>(tail_slots * num.slot_samples()));
        return x;
    }

    //! Every report of \p x through \p rx, in chunks of 1000 samples, as the block does.
    static std::vector<slot_msg::rx_report> run(slot_receiver& rx,
                                                const std::vector<gr_complex>& x) {
        std::vector<slot_msg::rx_report> reports;
        std::vector<slot_detection> found;
        for (std::size_t i = 0; i < x.size(); i += 1000) {
            found.clear();
            rx.detect(x.data() + i, std::min<std::size_t>(1000, x.size() - i), found);
            for (const auto& d : found) rx.receive(d, reports);
            rx.report_missed(reports);
        }
        return reports;
    }

    //! Reports of slots n, n+1, n+2 to user 3 through \p rx, slot n+1 changed by \p spoil.
    template <class F>
    std::vector<slot_msg::rx_report> around(slot_receiver& rx, std::uint32_t n, F spoil) {
        slot_spec middle = addressed(n + 1, 3);
        spoil(middle);
        return run(rx, stream({addressed(n, 3), middle, addressed(n + 2, 3)}));
    }
};

TEST_F(slot_receiver_test, clean_slots_addressed_to_it_are_decoded_and_reported_in_order) {
    std::vector<slot_spec> slots;
    for (std::uint32_t k = 10; k < 14; ++k) slots.push_back(addressed(k, 3, k % 2 == 0));
    slot_receiver rx(num, 3);
    const auto reports = run(rx, stream(slots));
    ASSERT_EQ(reports.size(), slots.size());
    for (std::size_t i = 0; i < slots.size(); ++i) {
        const auto& r = reports[i];
        EXPECT_EQ(r.slot, slots[i].header.slot);
        EXPECT_TRUE(r.detected);
        EXPECT_FALSE(r.slot_estimated);
        EXPECT_TRUE(r.header_ok);
        EXPECT_TRUE(r.addressed);
        EXPECT_TRUE(r.crc_ok);
        EXPECT_EQ(r.tb, slots[i].tb);
        EXPECT_EQ(r.combined, 1);
        // the synchroniser backs off a few samples into the cyclic prefix
        const auto start = static_cast<double>(k_lead + i * num.slot_samples());
        EXPECT_NEAR(static_cast<double>(r.sample), start - 2.0, 2.0);
        EXPECT_GT(r.snr_db, 30.0);
        EXPECT_EQ(r.cqi, 15);
    }
    const auto& s = rx.stats();
    EXPECT_EQ(s.detected, 4u);
    EXPECT_EQ(s.headers_ok, 4u);
    EXPECT_EQ(s.addressed, 4u);
    EXPECT_EQ(s.tb_ok, 4u);
    EXPECT_EQ(s.tb_failed + s.header_errors + s.missed + s.invalid + s.unnumbered, 0u);
    EXPECT_EQ(s.last_cqi, 15);
}

TEST_F(slot_receiver_test, a_slot_for_another_user_is_reported_but_not_decoded) {
    slot_receiver rx(num, 3);
    std::vector<slot_msg::rx_report> reports = run(rx, stream({addressed(5, 4)}));
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_TRUE(reports[0].header_ok);
    EXPECT_EQ(reports[0].user, 4);
    EXPECT_FALSE(reports[0].addressed);
    EXPECT_FALSE(reports[0].crc_ok);
    EXPECT_TRUE(reports[0].tb.empty());
    EXPECT_EQ(reports[0].combined, 0);
    EXPECT_EQ(rx.stats().addressed, 0u);
}

TEST_F(slot_receiver_test, the_two_stages_say_what_became_of_each_detection) {
    slot_receiver rx(num, 3);
    const auto x = stream({addressed(5, 3)});
    std::vector<slot_detection> found;
    rx.detect(x.data(), x.size(), found);
    ASSERT_EQ(found.size(), 1u);
    std::vector<slot_msg::rx_report> reports;
    const auto& rec = rx.receive(found[0], reports);
    EXPECT_TRUE(rec.valid);
    EXPECT_TRUE(rec.reported);
    EXPECT_TRUE(rec.payload_decoded);
    EXPECT_EQ(rec.header.slot, 5u);
    EXPECT_EQ(rx.payload().size(), static_cast<std::size_t>(num.payload_resource_elements()));
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_EQ(reports[0].slot, rec.report.slot);
}

TEST_F(slot_receiver_test, a_failed_header_before_any_decoded_one_is_counted_not_reported) {
    slot_spec bad = addressed(20, 3);
    bad.garbage_header = true;
    slot_receiver rx(num, 3);
    const auto reports = run(rx, stream({bad, addressed(21, 3)}));
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_EQ(reports[0].slot, 21u);
    EXPECT_EQ(rx.stats().header_errors, 1u);
    EXPECT_EQ(rx.stats().unnumbered, 1u);
}

TEST_F(slot_receiver_test, a_failed_header_after_lock_is_numbered_from_the_stream_position) {
    slot_receiver rx(num, 3);
    const auto reports = around(rx, 30, [](slot_spec& s) { s.garbage_header = true; });
    ASSERT_EQ(reports.size(), 3u);
    EXPECT_EQ(reports[1].slot, 31u);
    EXPECT_TRUE(reports[1].slot_estimated);
    EXPECT_TRUE(reports[1].detected);
    EXPECT_FALSE(reports[1].header_ok);
    EXPECT_GT(reports[1].snr_db, 30.0);  // the SNR is measured whatever the header
    EXPECT_EQ(reports[2].slot, 32u);
}

TEST_F(slot_receiver_test, a_lost_slot_is_reported_as_missed_with_its_number) {
    slot_receiver rx(num, 3);
    const auto reports = around(rx, 40, [](slot_spec& s) { s.silent = true; });
    ASSERT_EQ(reports.size(), 3u);
    EXPECT_EQ(reports[1].slot, 41u);
    EXPECT_FALSE(reports[1].detected);
    EXPECT_TRUE(reports[1].slot_estimated);
    EXPECT_EQ(reports[1].snr_db, -30.0);
    EXPECT_EQ(reports[1].cqi, 0);
    EXPECT_EQ(reports[1].sample,
              reports[0].sample + static_cast<std::uint64_t>(num.slot_samples()));
    EXPECT_EQ(rx.stats().missed, 1u);
}

TEST_F(slot_receiver_test, silence_after_lock_gives_at_most_missed_slots_reports) {
    slot_receiver rx(num, 3, {}, {}, 2);
    const auto reports = run(rx, stream({addressed(50, 3)}, 6));
    ASSERT_EQ(reports.size(), 3u);
    EXPECT_EQ(reports[1].slot, 51u);
    EXPECT_EQ(reports[2].slot, 52u);
    EXPECT_FALSE(reports[1].detected);
    EXPECT_FALSE(reports[2].detected);
    EXPECT_EQ(rx.stats().missed, 2u);

    slot_receiver quiet(num, 3, {}, {}, 0);
    EXPECT_EQ(run(quiet, stream({addressed(50, 3)}, 6)).size(), 1u);
}

TEST_F(slot_receiver_test, a_retransmission_is_combined_unless_the_caller_asks_for_a_fresh_buffer) {
    const slot_spec first = addressed(60, 3, true, 5);
    slot_spec again = first;
    again.header.slot = 62;
    again.header.rv = 2;
    const auto x = stream({first, addressed(61, 3, true, 6), again});
    for (const bool fresh : {false, true}) {
        slot_receiver rx(num, 3);
        std::vector<slot_detection> found;
        rx.detect(x.data(), x.size(), found);
        ASSERT_EQ(found.size(), 3u);
        std::vector<slot_msg::rx_report> reports;
        rx.receive(found[0], reports);
        rx.receive(found[1], reports);
        const auto& rec = rx.receive(found[2], reports, fresh);
        EXPECT_TRUE(rec.report.crc_ok);
        EXPECT_EQ(rec.report.tb, first.tb);
        EXPECT_EQ(rec.report.combined, fresh ? 1 : 2);
    }
}

TEST_F(slot_receiver_test, a_receiver_given_the_recorded_noise_state_goes_on_with_the_same_snr) {
    // What an offline decode of a recording with gaps does: the reports carry the noise
    // average before each slot, and a receiver that starts mid-stream from that state
    // estimates every later slot exactly as the receiver that saw the whole stream.
    std::vector<slot_spec> slots;
    for (std::uint32_t k = 20; k < 27; ++k) slots.push_back(addressed(k, 3, k % 2 == 0));
    auto x = stream(slots);
    ofdm_test::add_awgn(rng, x, 1e-3);
    slot_receiver whole(num, 3);
    const auto all = run(whole, x);
    ASSERT_EQ(all.size(), slots.size());
    EXPECT_EQ(all[0].noise_count_before, 0);  // nothing averaged before the first slot
    EXPECT_EQ(all[0].noise_before, 0.0);
    for (std::size_t i = 1; i < all.size(); ++i) {
        EXPECT_GT(all[i].noise_count_before, 0) << i;
        EXPECT_GT(all[i].noise_before, 0.0) << i;
    }
    const auto [avg, count] = whole.noise_state();
    EXPECT_GT(count, all.back().noise_count_before);  // the last slot counted too
    EXPECT_GT(avg, 0.0);

    // from half a slot before slot 24 (the 5th), as a recording's segment starts
    const std::size_t from = k_lead + 4 * num.slot_samples() - num.slot_samples() / 2;
    const std::vector<gr_complex> tail(x.begin() + static_cast<std::ptrdiff_t>(from), x.end());
    slot_receiver resumed(num, 3), fresh(num, 3);
    resumed.set_noise_state(all[4].noise_before, all[4].noise_count_before);
    const auto r = run(resumed, tail);
    const auto f = run(fresh, tail);
    ASSERT_EQ(r.size(), 3u);
    ASSERT_EQ(f.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        const auto& want = all[4 + i];
        EXPECT_EQ(r[i].slot, want.slot);
        EXPECT_EQ(r[i].sample + from, want.sample);
        EXPECT_EQ(r[i].snr_db, want.snr_db) << i;  // bit for bit
        EXPECT_EQ(r[i].effective_snr_db, want.effective_snr_db) << i;
        EXPECT_EQ(r[i].noise_before, want.noise_before) << i;
        EXPECT_EQ(r[i].tb, want.tb);
    }
    EXPECT_NE(f[0].snr_db, all[4].snr_db);  // without it the first slot starts afresh
    resumed.set_noise_state(123.0, 0);      // no count: no average, as at the start
    EXPECT_EQ(resumed.noise_state().count, 0);
    EXPECT_EQ(resumed.noise_state().average, 0.0);
}

TEST_F(slot_receiver_test, a_bad_user_id_or_missed_slots_is_rejected_by_name) {
    EXPECT_THROW(slot_receiver(num, -1), std::invalid_argument);
    try {
        slot_receiver(num, 0xFFFF);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("user_id"), std::string::npos);
    }
    try {
        slot_receiver(num, 1, {}, {}, -1);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("missed_slots"), std::string::npos);
    }
}

}  // namespace
