// Weighted receiver-based rate control (Nandagopal et al., Fig. 3, §III, §IV) with a fake
// clock: the receiver's epoch decisions, the graded decrease, the loss classification, the
// sender's pacing, the packet format, and two weighted flows through a simulated bottleneck.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <queue>
#include <random>
#include <vector>

#include "error_of.h"
#include "oppsched/wrc.h"
#include "oppsched/wrc_packet.h"

using namespace oppsched;
using namespace oppsched::wrc;

namespace {

time_ns ns_of(double s) { return static_cast<time_ns>(std::llround(s * 1e9)); }

// One flow seen by the receiver, the sender answering every feedback at once: packets are
// sent at the controller's rate (advertising 1/rate and its rate_seq) and arrive `ratio`
// times as far apart as they were sent, plus optional jitter.
struct fake_flow {
    explicit fake_flow(const rate_controller_params& p, double initial_rate_pps,
                       time_ns start = kNsPerSec)
        : rc(p), t(start), rate(initial_rate_pps) {}

    rate_controller rc;
    time_ns t;
    double rate;  // the sender's rate until the receiver has one
    std::uint32_t seq = 0;
    std::uint32_t rate_seq = 0;
    std::vector<rate_record> events;  // loss events seen

    double sender_rate() const { return rc.started() ? rc.rate_pps() : rate; }
    std::uint32_t sender_rate_seq() const { return rc.started() ? rc.rate_seq() : rate_seq; }

    void deliver(time_ns at, std::uint32_t s, double snd_sep_s, std::uint32_t rseq) {
        t = at;
        for (const auto& r : rc.on_packet(at, {s, snd_sep_s, rseq})) {
            if (r.what == decision::random_loss || r.what == decision::congestion_loss ||
                r.what == decision::congestion_ignored)
                events.push_back(r);
            else
                ADD_FAILURE() << "an epoch ended inside deliver()";
        }
    }

    // Sends packets until the current epoch ends; returns that epoch's record. Each packet
    // arrives ratio * (its send separation) + jitter after the previous one.
    rate_record run_epoch(double ratio, std::mt19937_64* rng = nullptr, double jitter_s = 0.0) {
        if (!rc.started()) deliver(t, seq++, 1.0 / rate, rate_seq);
        for (;;) {
            const double sep = 1.0 / sender_rate();
            double gap = ratio * sep;
            if (rng) gap += std::uniform_real_distribution<double>(-jitter_s, jitter_s)(*rng);
            const time_ns at = t + ns_of(gap);
            if (at >= *rc.next_epoch_end()) {
                auto rs = rc.on_timer(*rc.next_epoch_end());
                EXPECT_EQ(rs.size(), 1u);
                return rs.back();
            }
            deliver(at, seq++, sep, sender_rate_seq());
        }
    }
};

rate_controller_params paper() { return {}; }

pacer_params pacing(double initial_rate_pps) {
    pacer_params p;
    p.initial_rate_pps = initial_rate_pps;
    return p;
}

// ---------------------------------------------------------------------------------------
// Parameters: the paper's, and their validation.

TEST(wrc_params, defaults_are_the_papers_experiment_parameters) {
    const rate_controller_params p;
    EXPECT_DOUBLE_EQ(p.epoch_s, 0.350);           // §IV: epoch 350 ms
    EXPECT_DOUBLE_EQ(p.alpha_pps, 0.1);           // §IV: 0.1 * rate_weight packets/s
    EXPECT_DOUBLE_EQ(p.delta_initial, 0.1);       // Fig. 3 line 23
    EXPECT_DOUBLE_EQ(p.delta_max, 0.5);           // §III-B: maximum of 50 %
    EXPECT_EQ(p.lavg_epochs, 6u);                 // Fig. 3 line 16
    EXPECT_DOUBLE_EQ(p.lavg_weight, 0.125);       // Fig. 3 line 17
    EXPECT_DOUBLE_EQ(p.loss_band_deviations, 2);  // §III-A.4 (a)
    EXPECT_DOUBLE_EQ(p.congestion_loss_factor, 0.5);
    EXPECT_EQ(p.mode, differentiation::weighted_increase);
}

TEST(wrc_params, validation_names_the_field_and_the_value) {
    auto with = [](auto f) {
        rate_controller_params p;
        f(p);
        return error_of([&] { p.validate(); });
    };
    EXPECT_EQ(with([](auto& p) { p.epoch_s = 0; }), "wrc.epoch_s: 0 not in (0, inf)");
    EXPECT_EQ(with([](auto& p) { p.weight = -1; }), "wrc.weight: -1 not in (0, inf)");
    EXPECT_EQ(with([](auto& p) { p.alpha_pps = std::nan(""); }),
              "wrc.alpha_pps: nan not in (0, inf)");
    EXPECT_EQ(with([](auto& p) { p.delta_initial = 1.5; }), "wrc.delta_initial: 1.5 not in (0, 1)");
    EXPECT_EQ(with([](auto& p) { p.delta_max = 0.05; }),
              "wrc.delta_max: 0.05 not in [delta_initial, 1) (delta_initial = 0.1)");
    EXPECT_EQ(with([](auto& p) { p.lavg_epochs = 0; }), "wrc.lavg_epochs: 0 not in [1, 1000]");
    EXPECT_EQ(with([](auto& p) { p.lavg_weight = 0; }), "wrc.lavg_weight: 0 not in (0, 1]");
    EXPECT_EQ(with([](auto& p) { p.loss_band_deviations = -2; }),
              "wrc.loss_band_deviations: -2 not in [0, inf)");
    EXPECT_EQ(with([](auto& p) { p.congestion_loss_factor = 0; }),
              "wrc.congestion_loss_factor: 0 not in (0, 1]");
    EXPECT_EQ(with([](auto& p) { p.min_rate_pps = 0; }), "wrc.min_rate_pps: 0 not in (0, inf)");
    EXPECT_EQ(with([](auto& p) { p.max_rate_pps = 0.5; }),
              "wrc.max_rate_pps: 0.5 not 0 (none) or >= min_rate_pps (1)");
    EXPECT_EQ(with([](auto& p) {
                  p.mode = differentiation::weighted_decrease;
                  p.weight = 0.5;
              }),
              "wrc.weight: 0.5 too small for weighted_decrease: delta_max / weight = 1 not < 1");
    EXPECT_EQ(with([](auto&) {}), "(no exception)");
    rate_controller_params zero = paper();
    zero.weight = 0;
    EXPECT_THROW(rate_controller{zero}, std::invalid_argument);

    pacer_params q;
    q.initial_rate_pps = 0;
    EXPECT_EQ(error_of([&] { q.validate(); }),
              "wrc.pacer.initial_rate_pps: 0 not in [min_rate_pps, max_rate_pps] = [0.01, "
              "1e+06]");
    q = {};
    q.max_rate_pps = 0.001;
    EXPECT_EQ(error_of([&] { q.validate(); }),
              "wrc.pacer.max_rate_pps: 0.001 not in [min_rate_pps, inf) (min_rate_pps = 0.01)");
}

// ---------------------------------------------------------------------------------------
// Epoch decisions (Fig. 3 lines 12-26).

TEST(rate_controller, uncongested_path_increases_the_rate_by_exactly_alpha_w_per_epoch) {
    for (const double w : {1.0, 2.0, 5.0}) {
        rate_controller_params p = paper();
        p.weight = w;
        fake_flow f(p, 20.0);
        for (int e = 0; e < 20; ++e) {
            const rate_record r = f.run_epoch(1.0);
            ASSERT_EQ(r.what, decision::increase) << "w " << w << " epoch " << e;
            EXPECT_NEAR(r.rate_pps - r.rate_before_pps, 0.1 * w, 1e-9);
            EXPECT_DOUBLE_EQ(r.delta, 0.1);
            EXPECT_GT(r.samples, 0u);
        }
        EXPECT_NEAR(f.rc.rate_pps(), 20.0 + 20 * 0.1 * w, 1e-9);
        EXPECT_EQ(f.rc.stats().increases, 20u);
        EXPECT_EQ(f.rc.stats().decreases, 0u);
    }
}

TEST(rate_controller, congested_path_decreases_by_10_20_40_50_50_percent_on_consecutive_epochs) {
    fake_flow f(paper(), 1000.0);
    const double expected_delta[] = {0.1, 0.2, 0.4, 0.5, 0.5};
    for (const double d : expected_delta) {
        // Receive separation 1.5 x the send separation: far beyond 1 + alpha w r_sep.
        const rate_record r = f.run_epoch(1.5);
        ASSERT_EQ(r.what, decision::decrease);
        EXPECT_DOUBLE_EQ(r.delta, d);
        EXPECT_NEAR(r.rate_pps, r.rate_before_pps * (1.0 - d), 1e-9);
        EXPECT_GT(r.lavg_ratio, r.threshold);
    }
    EXPECT_EQ(f.rc.stats().decreases, 5u);
}

TEST(rate_controller, an_increase_resets_the_graded_decrease_to_10_percent) {
    fake_flow f(paper(), 1000.0);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(f.run_epoch(1.5).what, decision::decrease);
    EXPECT_DOUBLE_EQ(f.rc.delta(), 0.5);  // 0.1 -> 0.2 -> 0.4 -> (min 0.5)
    // Uncongested: decreases go on while the 6-epoch average still holds the 1.5s, then the
    // first increase comes once they have left it.
    int epochs = 0;
    rate_record r;
    do {
        r = f.run_epoch(1.0);
        ++epochs;
        ASSERT_LE(epochs, 7);
    } while (r.what != decision::increase);
    EXPECT_GE(epochs, 2);
    EXPECT_DOUBLE_EQ(f.rc.delta(), 0.1);
    // Congestion again: the first decrease is 10 % again.
    do {
        r = f.run_epoch(3.0);
    } while (r.what == decision::increase);
    EXPECT_EQ(r.what, decision::decrease);
    EXPECT_DOUBLE_EQ(r.delta, 0.1);
}

TEST(rate_controller, threshold_is_one_plus_average_receive_separation_times_alpha_w) {
    // Line 20: with w = 4, alpha = 0.1, rate 10 pps (send sep 0.1 s) and ratio 1.03 the
    // threshold is 1 + 1.03 * 0.1 * 0.4 = 1.0412 > 1.03: an increase. Ratio 1.05: decrease.
    rate_controller_params p = paper();
    p.weight = 4;
    fake_flow a(p, 10.0);
    rate_record r = a.run_epoch(1.03);
    EXPECT_EQ(r.what, decision::increase);
    EXPECT_NEAR(r.threshold, 1.0 + r.savg_ratio * 0.1 * 0.1 * 4, 1e-9);
    EXPECT_NEAR(r.savg_ratio, 1.03, 1e-6);
    fake_flow b(p, 10.0);
    EXPECT_EQ(b.run_epoch(1.05).what, decision::decrease);
}

TEST(rate_controller, long_term_average_weighs_the_last_six_epochs_0_125_normalised) {
    // Ratios far above the threshold keep every decision a decrease; the rate floor is
    // irrelevant at these rates.
    fake_flow f(paper(), 1e5);
    const std::vector<double> ratios = {2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0};
    std::vector<double> savg;
    for (std::size_t k = 0; k < ratios.size(); ++k) {
        const rate_record r = f.run_epoch(ratios[k]);
        savg.push_back(r.savg_ratio);
        double num = 0, den = 0, w = 0.125;
        for (std::size_t j = 0; j < std::min<std::size_t>(6, savg.size()); ++j) {
            num += w * savg[savg.size() - 1 - j];
            den += w;
            w *= 0.875;
        }
        EXPECT_NEAR(r.lavg_ratio, num / den, 1e-9) << "epoch " << k;
        EXPECT_NEAR(r.savg_ratio, ratios[k], 1e-3);
    }
    // The newest epoch's share once six are there: 0.125 / (1 - 0.875^6) ~ 0.227 (§V: 0.25).
    EXPECT_NEAR(0.125 / (1 - std::pow(0.875, 6)), 0.2268, 1e-4);
}

TEST(rate_controller, epoch_without_samples_changes_nothing) {
    fake_flow f(paper(), 20.0);
    f.run_epoch(1.0);
    const double rate = f.rc.rate_pps();
    const auto rs = f.rc.on_timer(*f.rc.next_epoch_end() + 2 * ns_of(0.35));
    ASSERT_EQ(rs.size(), 3u);
    for (const auto& r : rs) {
        EXPECT_EQ(r.what, decision::none);
        EXPECT_EQ(r.samples, 0u);
        EXPECT_EQ(r.rate_pps, rate);
    }
    EXPECT_EQ(f.rc.stats().empty_epochs, 3u);
    EXPECT_EQ(f.rc.rate_pps(), rate);
}

TEST(rate_controller, packets_sent_at_an_older_rate_give_no_samples) {
    rate_controller rc(paper());
    const time_ns t0 = kNsPerSec;
    const double sep = 0.05;
    rc.on_packet(t0, {0, sep, 0});
    // 3 packets in the first epoch at ratio 2: a decrease, rate_seq 0 -> 1.
    for (std::uint32_t s = 1; s <= 3; ++s)
        EXPECT_TRUE(rc.on_packet(t0 + s * ns_of(2 * sep), {s, sep, 0}).empty());
    auto rs = rc.on_timer(*rc.next_epoch_end());
    ASSERT_EQ(rs.size(), 1u);
    ASSERT_EQ(rs[0].what, decision::decrease);
    ASSERT_EQ(rc.rate_seq(), 1u);
    // The sender has not heard of it yet: its packets still echo rate_seq 0.
    const auto before = rc.stats().samples;
    for (std::uint32_t s = 4; s <= 6; ++s)
        EXPECT_TRUE(rc.on_packet(rs[0].t + (s - 3) * ns_of(sep), {s, sep, 0}).empty());
    EXPECT_EQ(rc.stats().samples, before);
    EXPECT_EQ(rc.stats().stale_rate, 3u);
    rs = rc.on_timer(*rc.next_epoch_end());
    EXPECT_EQ(rs[0].what, decision::none);  // line 13: no samples, no decision
}

TEST(rate_controller, first_packet_sets_the_rate_the_sender_advertises_clamped_to_the_floor) {
    rate_controller rc(paper());
    EXPECT_FALSE(rc.next_epoch_end());
    rc.on_packet(5 * kNsPerSec, {100, 0.04, 7});
    EXPECT_NEAR(rc.rate_pps(), 25.0, 1e-12);
    EXPECT_EQ(rc.rate_seq(), 7u);
    EXPECT_EQ(rc.expected_seq(), 101u);
    EXPECT_EQ(*rc.next_epoch_end(), 5 * kNsPerSec + 350 * kNsPerMs);
    rate_controller slow(paper());
    slow.on_packet(0, {0, 10.0, 0});  // 0.1 pps < the 1 pps floor
    EXPECT_DOUBLE_EQ(slow.rate_pps(), 1.0);
}

TEST(rate_controller, rate_never_falls_below_the_floor_or_rises_above_the_ceiling) {
    rate_controller_params p = paper();
    p.min_rate_pps = 5;
    p.max_rate_pps = 6;
    fake_flow f(p, 5.5);
    for (int i = 0; i < 10; ++i) EXPECT_GE(f.run_epoch(4.0).rate_pps, 5.0);
    EXPECT_DOUBLE_EQ(f.rc.rate_pps(), 5.0);
    for (int i = 0; i < 30; ++i) EXPECT_LE(f.run_epoch(1.0).rate_pps, 6.0);
    EXPECT_DOUBLE_EQ(f.rc.rate_pps(), 6.0);
}

TEST(rate_controller, weighted_decrease_increases_by_alpha_and_decreases_by_delta_over_w) {
    rate_controller_params p = paper();
    p.mode = differentiation::weighted_decrease;
    p.weight = 4;
    fake_flow f(p, 1000.0);
    rate_record r = f.run_epoch(1.5);
    ASSERT_EQ(r.what, decision::decrease);
    EXPECT_DOUBLE_EQ(r.delta, 0.1 / 4);
    EXPECT_NEAR(r.rate_pps, r.rate_before_pps * (1 - 0.025), 1e-9);
    fake_flow g(p, 20.0);
    r = g.run_epoch(1.0);
    ASSERT_EQ(r.what, decision::increase);
    EXPECT_NEAR(r.rate_pps - r.rate_before_pps, 0.1, 1e-9);
    EXPECT_NEAR(r.threshold, 1.0 + r.savg_ratio * 0.05 * 0.1, 1e-9);
}

// ---------------------------------------------------------------------------------------
// Losses (§III-A.4, heuristic (a)).

TEST(rate_controller, loss_within_two_mean_deviations_is_a_channel_error_and_does_not_decrease) {
    std::mt19937_64 rng(1);
    fake_flow f(paper(), 50.0);  // send separation 20 ms
    for (int e = 0; e < 4; ++e) f.run_epoch(1.0, &rng, 0.002);
    const double rate = f.rc.rate_pps();
    const std::uint32_t rseq = f.rc.rate_seq();
    // One packet lost on the channel: it took its 20 ms, the next one arrives 40 ms later.
    const std::uint32_t s = f.seq;
    f.seq += 2;
    f.deliver(f.t + ns_of(0.040), s + 1, 0.02, rseq);
    ASSERT_EQ(f.events.size(), 1u);
    const rate_record& r = f.events[0];
    EXPECT_EQ(r.what, decision::random_loss);
    EXPECT_EQ(r.lost, 1u);
    EXPECT_NEAR(r.per_pktsep_s, 0.020, 1e-9);
    EXPECT_LE(r.band_lo_s, r.per_pktsep_s);
    EXPECT_GE(r.band_hi_s, r.per_pktsep_s);
    EXPECT_NEAR(r.band_hi_s - r.band_lo_s, 4 * f.rc.separation_mdev_s(), 1e-12);
    EXPECT_EQ(f.rc.rate_pps(), rate);
    EXPECT_EQ(f.rc.rate_seq(), rseq);
    EXPECT_EQ(f.rc.stats().random_losses, 1u);
    EXPECT_EQ(f.rc.stats().lost, 1u);
    // The epoch still ends in an increase: the loss is not a congestion signal.
    EXPECT_EQ(f.run_epoch(1.0, &rng, 0.002).what, decision::increase);
}

// Four epochs of a flow at 50 packets/s with a little receive jitter, so that the loss
// band has a mean and a deviation.
void settle(fake_flow& f) {
    std::mt19937_64 rng(2);
    for (int e = 0; e < 4; ++e) f.run_epoch(1.0, &rng, 0.002);
}

// `lost` packets dropped at a full buffer, sent at rate `rseq`: they never took the link,
// so the next one arrives one separation (20 ms) later, per_pktsep far below the band.
void drop_at_full_buffer(fake_flow& f, std::uint32_t lost, std::uint32_t rseq) {
    f.deliver(f.t + ns_of(0.020), f.seq + lost, 0.02, rseq);
    f.seq += lost + 1;
}

TEST(rate_controller, loss_outside_the_band_is_congestion_and_halves_the_rate_once) {
    fake_flow f(paper(), 50.0);
    settle(f);
    const double rate = f.rc.rate_pps();
    const std::uint32_t rseq = f.rc.rate_seq();
    drop_at_full_buffer(f, 5, rseq);
    ASSERT_EQ(f.events.size(), 1u);
    EXPECT_EQ(f.events[0].what, decision::congestion_loss);
    EXPECT_EQ(f.events[0].lost, 5u);
    EXPECT_LT(f.events[0].per_pktsep_s, f.events[0].band_lo_s);
    EXPECT_DOUBLE_EQ(f.rc.rate_pps(), rate * 0.5);
    EXPECT_EQ(f.rc.rate_seq(), rseq + 1);
    // Another such gap in packets the sender sent before it heard of the halving: ignored.
    drop_at_full_buffer(f, 3, rseq);
    ASSERT_EQ(f.events.size(), 2u);
    EXPECT_EQ(f.events[1].what, decision::congestion_ignored);
    EXPECT_DOUBLE_EQ(f.rc.rate_pps(), rate * 0.5);
    EXPECT_EQ(f.rc.stats().congestion_losses, 1u);
    EXPECT_EQ(f.rc.stats().congestion_stale, 1u);
    EXPECT_EQ(f.rc.stats().lost, 8u);
}

TEST(rate_controller, with_stale_congestion_acted_on_a_gap_in_older_packets_halves_again) {
    // Fig. 3 as printed (stale_congestion_loss: act): the second gap of the test above,
    // in packets sent before the sender heard of the first halving, halves the rate again.
    rate_controller_params p = paper();
    p.ignore_stale_congestion = false;
    fake_flow f(p, 50.0);
    settle(f);
    const double rate = f.rc.rate_pps();
    const std::uint32_t rseq = f.rc.rate_seq();
    drop_at_full_buffer(f, 5, rseq);
    drop_at_full_buffer(f, 3, rseq);
    ASSERT_EQ(f.events.size(), 2u);
    EXPECT_EQ(f.events[1].what, decision::congestion_loss);
    EXPECT_DOUBLE_EQ(f.rc.rate_pps(), rate * 0.25);
    EXPECT_EQ(f.rc.stats().congestion_losses, 2u);
    EXPECT_EQ(f.rc.stats().congestion_stale, 0u);
}

TEST(rate_controller, loss_before_any_separation_sample_is_taken_as_random) {
    rate_controller rc(paper());
    rc.on_packet(0, {0, 0.01, 0});
    const auto rs = rc.on_packet(ns_of(0.001), {9, 0.01, 0});
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].what, decision::random_loss);
    EXPECT_DOUBLE_EQ(rc.rate_pps(), 100.0);
}

TEST(rate_controller, late_and_duplicate_packets_are_counted_and_ignored) {
    rate_controller rc(paper());
    rc.on_packet(0, {10, 0.01, 0});
    rc.on_packet(ns_of(0.01), {11, 0.01, 0});
    const auto before = rc.stats();
    EXPECT_TRUE(rc.on_packet(ns_of(0.02), {11, 0.01, 0}).empty());
    EXPECT_TRUE(rc.on_packet(ns_of(0.03), {3, 0.01, 0}).empty());
    EXPECT_EQ(rc.stats().late, 2u);
    EXPECT_EQ(rc.stats().samples, before.samples);
    EXPECT_EQ(rc.expected_seq(), 12u);
    // A bad separation (the codec refuses it; the class guards itself too).
    rc.on_packet(ns_of(0.04), {12, 0.0, 0});
    rc.on_packet(ns_of(0.04), {12, std::nan(""), 0});
    EXPECT_EQ(rc.stats().invalid, 2u);
    EXPECT_EQ(rc.expected_seq(), 12u);
}

TEST(rate_controller, sequence_numbers_wrap) {
    rate_controller rc(paper());
    rc.on_packet(0, {0xfffffffeu, 0.01, 0});
    rc.on_packet(ns_of(0.01), {0xffffffffu, 0.01, 0});
    rc.on_packet(ns_of(0.02), {0u, 0.01, 0});
    EXPECT_EQ(rc.stats().in_sequence, 3u);
    EXPECT_EQ(rc.stats().gaps, 0u);
    EXPECT_EQ(rc.stats().samples, 2u);
}

// ---------------------------------------------------------------------------------------
// Sender pacing.

TEST(pacer, spaces_packets_by_the_inverse_of_the_rate) {
    pacer p(pacing(40.0));
    p.start(kNsPerSec);
    EXPECT_EQ(p.next_send(), kNsPerSec);
    time_ns t = kNsPerSec;
    for (int i = 0; i < 10; ++i) {
        EXPECT_EQ(p.next_send(), kNsPerSec + i * 25 * kNsPerMs);
        t = p.next_send();
        p.on_sent(t);
    }
    EXPECT_DOUBLE_EQ(p.separation_s(), 0.025);
    EXPECT_EQ(p.stats().sent, 10u);
}

TEST(pacer, adopts_only_newer_feedback_and_spaces_from_the_previous_packet) {
    pacer p(pacing(10.0));
    p.start(0);
    p.on_sent(0);                          // next at 100 ms
    EXPECT_FALSE(p.on_feedback(20.0, 0));  // the initial rate's own number
    EXPECT_TRUE(p.on_feedback(20.0, 1));
    EXPECT_EQ(p.next_send(), 50 * kNsPerMs);
    EXPECT_FALSE(p.on_feedback(5.0, 1));   // repeated
    EXPECT_FALSE(p.on_feedback(5.0, 0));   // older
    EXPECT_FALSE(p.on_feedback(-1.0, 2));  // nonsense
    EXPECT_TRUE(p.on_feedback(4.0, 0x80000000u));
    EXPECT_TRUE(p.on_feedback(8.0, 0x80000001u));  // serial arithmetic
    EXPECT_FALSE(p.on_feedback(8.0, 5u));          // more than 2^31 behind
    EXPECT_DOUBLE_EQ(p.rate_pps(), 8.0);
    EXPECT_EQ(p.stats().rate_changes, 3u);
    EXPECT_EQ(p.stats().feedback_stale, 5u);
}

TEST(pacer, does_not_burst_to_catch_up_after_a_stall) {
    pacer p(pacing(100.0));
    p.start(0);
    p.on_sent(0);
    p.on_sent(95 * kNsPerMs);                 // due at 10 ms, sent 85 ms late
    EXPECT_EQ(p.next_send(), 95 * kNsPerMs);  // one goes at once ...
    p.on_sent(95 * kNsPerMs);
    EXPECT_EQ(p.next_send(), 105 * kNsPerMs);  // ... then spacing resumes
    EXPECT_EQ(p.stats().late_sends, 1u);
}

// ---------------------------------------------------------------------------------------
// Packet format.

TEST(wrc_packet, data_and_feedback_round_trip_big_endian) {
    std::vector<std::uint8_t> b(512, 0xaa);
    data_header d{7, 0x01020304, 9, 0x1122334455667788ull, 20000, 3};
    encode(d, b.data(), b.size());
    EXPECT_EQ(b[0], 0x57);
    EXPECT_EQ(b[1], 0x52);
    EXPECT_EQ(b[3], 1);
    EXPECT_EQ(b[8], 0x01);
    EXPECT_EQ(b[11], 0x04);
    EXPECT_EQ(b[16], 0x11);
    EXPECT_TRUE(std::all_of(b.begin() + 32, b.end(), [](auto x) { return x == 0; }));
    auto m = decode(b.data(), b.size());
    ASSERT_TRUE(m.ok()) << m.error();
    const auto& g = std::get<data_header>(m.value());
    EXPECT_EQ(g.flow_id, 7u);
    EXPECT_EQ(g.seq, 0x01020304u);
    EXPECT_EQ(g.rate_seq, 9u);
    EXPECT_EQ(g.send_time_ns, 0x1122334455667788ull);
    EXPECT_EQ(g.snd_sep_us, 20000u);
    EXPECT_EQ(g.weight, 3u);

    std::vector<std::uint8_t> f(32);
    encode(feedback_header{7, 12, 25500, 99, 4}, f.data(), f.size());
    auto n = decode(f.data(), f.size());
    ASSERT_TRUE(n.ok()) << n.error();
    const auto& h = std::get<feedback_header>(n.value());
    EXPECT_EQ(h.rate_seq, 12u);
    EXPECT_EQ(h.rate_mpps, 25500u);
    EXPECT_EQ(h.echo_seq, 99u);
    EXPECT_EQ(h.epoch, 4u);
    EXPECT_EQ(separation_us(50.0), 20000u);
    EXPECT_EQ(rate_mpps(25.5), 25500u);
    EXPECT_EQ(error_of([&] { encode(d, b.data(), 31); }),
              "wrc.packet_bytes: 31 < the 32-byte header");
}

TEST(wrc_packet, bad_packets_are_errors_naming_the_field_and_value) {
    std::vector<std::uint8_t> b(64);
    encode(data_header{1, 2, 3, 4, 5, 6}, b.data(), b.size());
    EXPECT_EQ(decode(b.data(), 31).error(), "wrc.length: 31 bytes < the 32-byte header");
    auto c = b;
    c[0] = 0x12;
    c[1] = 0x34;
    EXPECT_EQ(decode(c.data(), c.size()).error(), "wrc.magic: 0x1234 is not 0x5752");
    c = b;
    c[2] = 9;
    EXPECT_EQ(decode(c.data(), c.size()).error(), "wrc.version: 9 is not 1");
    c = b;
    c[3] = 7;
    EXPECT_EQ(decode(c.data(), c.size()).error(), "wrc.type: 7 is not 1 (data) or 2 (feedback)");
    c = b;
    std::fill(c.begin() + 24, c.begin() + 28, 0);
    EXPECT_EQ(decode(c.data(), c.size()).error(), "wrc.snd_sep_us: 0 is not > 0");
    c = b;
    c[28] = c[29] = 0;
    EXPECT_EQ(decode(c.data(), c.size()).error(), "wrc.weight: 0 is not >= 1");
    encode(feedback_header{1, 2, 0, 3, 4}, c.data(), c.size());
    EXPECT_EQ(decode(c.data(), c.size()).error(), "wrc.rate_mpps: 0 is not > 0");
    EXPECT_FALSE(decode(nullptr, 0).ok());
}

TEST(wrc_packet, random_bytes_never_crash_the_decoder) {
    std::mt19937_64 rng(3);
    std::size_t ok = 0;
    for (int i = 0; i < 20000; ++i) {
        std::vector<std::uint8_t> b(rng() % 80);
        for (auto& x : b) x = static_cast<std::uint8_t>(rng());
        if (b.size() >= 4 && i % 2) {  // half of them with a valid prefix
            b[0] = 0x57;
            b[1] = 0x52;
            b[2] = 1;
            b[3] = static_cast<std::uint8_t>(1 + rng() % 2);
        }
        const auto m = decode(b.data(), b.size());
        ok += m.ok();
        if (!m.ok()) {
            EXPECT_EQ(m.error().rfind("wrc.", 0), 0u);
        }
    }
    EXPECT_GT(ok, 0u);
}

// ---------------------------------------------------------------------------------------
// Two weighted flows through one fixed-capacity bottleneck (a tiny discrete-event
// simulation): weights 1 and 2 must get rates in ratio 1:2 (Nandagopal et al., §IV-B).

struct sim_event {
    time_ns t;
    std::uint64_t order;
    std::function<void()> run;
    bool operator>(const sim_event& o) const { return t != o.t ? t > o.t : order > o.order; }
};

class simulator {
  public:
    void at(time_ns t, std::function<void()> f) { q_.push({t, n_++, std::move(f)}); }
    void run_until(time_ns end) {
        while (!q_.empty() && q_.top().t <= end) {
            auto e = q_.top();
            q_.pop();
            now_ = e.t;
            e.run();
        }
    }
    time_ns now() const { return now_; }

  private:
    std::priority_queue<sim_event, std::vector<sim_event>, std::greater<>> q_;
    std::uint64_t n_ = 0;
    time_ns now_ = 0;
};

struct sim_flow {
    sim_flow(double w, double initial_rate)
        : rc([w] {
              rate_controller_params p;
              p.weight = w;
              return p;
          }()),
          tx(pacing(initial_rate)) {}
    rate_controller rc;
    pacer tx;
    std::uint32_t seq = 0;
    std::uint64_t gen = 0;
    std::uint64_t sent = 0, received = 0, received_after_warmup = 0;
};

struct sim_packet {
    int flow;
    std::uint32_t seq;
    double sep_s;
    std::uint32_t rate_seq;
};

struct bottleneck_result {
    std::vector<double> rate_pps;  // received packets/s after the warm-up, per flow
    double utilisation = 0;
    std::uint64_t drops = 0, sent = 0, received = 0;
    std::vector<std::uint64_t> decreases, lost;
};

// Flows with the given weights, paced by their pacers at the rates their receivers feed back
// (feedback with every packet, the paper's worst case), through one FIFO link of
// capacity_pps with a drop-tail buffer of 50 packets (§IV), the same one-way delay each way
// for all, and up to 0.5 ms of seeded jitter after the link (less than a service time: no
// reordering). Rates are measured over the last 60 % of the run.
bottleneck_result run_bottleneck(const std::vector<double>& weights, double capacity_pps,
                                 time_ns one_way, time_ns end, std::uint64_t seed) {
    constexpr std::size_t kBuffer = 50;
    const time_ns service = ns_of(1.0 / capacity_pps);
    const time_ns warmup = end * 2 / 5;
    simulator sim;
    std::mt19937_64 rng(seed);
    std::vector<sim_flow> flows;
    for (const double w : weights) flows.emplace_back(w, 5.0);
    std::deque<sim_packet> queue;
    bool busy = false;
    std::uint64_t drops = 0;

    std::function<void(int)> arm;  // (re)arms flow i's send timer, below
    std::function<void()> serve = [&] {
        if (queue.empty()) {
            busy = false;
            return;
        }
        busy = true;
        const sim_packet p = queue.front();
        queue.pop_front();
        const time_ns jitter = static_cast<time_ns>(rng() % (500 * 1000));
        sim.at(sim.now() + service + one_way + jitter, [&, p] {
            sim_flow& f = flows[p.flow];
            ++f.received;
            if (sim.now() >= warmup) ++f.received_after_warmup;
            f.rc.on_packet(sim.now(), {p.seq, p.sep_s, p.rate_seq});
            const double r = f.rc.rate_pps();
            const std::uint32_t s = f.rc.rate_seq();
            sim.at(sim.now() + one_way, [&, r, s, i = p.flow] {
                if (flows[i].tx.on_feedback(r, s)) arm(i);
            });
        });
        sim.at(sim.now() + service, serve);
    };
    std::function<void(int)> send = [&](int i) {
        sim_flow& f = flows[i];
        const sim_packet p{i, f.seq++, f.tx.separation_s(), f.tx.rate_seq()};
        f.tx.on_sent(sim.now());
        ++f.sent;
        if (queue.size() + (busy ? 1 : 0) >= kBuffer) {
            ++drops;
        } else {
            queue.push_back(p);
            if (!busy) serve();
        }
        arm(i);
    };
    // The sender's timer, re-armed whenever feedback moves its next departure (`gen` makes
    // the superseded timer a no-op), as oppsched-wrc re-arms its timerfd.
    arm = [&](int i) {
        const std::uint64_t g = ++flows[i].gen;
        sim.at(std::max(flows[i].tx.next_send(), sim.now()), [&, i, g] {
            if (flows[i].gen == g) send(i);
        });
    };
    std::function<void(int)> epoch_timer = [&](int i) {
        flows[i].rc.on_timer(sim.now());
        sim.at(sim.now() + 10 * kNsPerMs, [&, i] { epoch_timer(i); });
    };
    for (int i = 0; i < static_cast<int>(flows.size()); ++i) {
        const time_ns t0 = i * 7 * kNsPerMs;
        flows[i].tx.start(t0);
        sim.at(t0, [&, i] { arm(i); });
        sim.at(kNsPerSec, [&, i] { epoch_timer(i); });
    }
    sim.run_until(end);

    bottleneck_result r;
    double total = 0;
    for (const auto& f : flows) {
        r.rate_pps.push_back(f.received_after_warmup / to_seconds(end - warmup));
        total += r.rate_pps.back();
        r.sent += f.sent;
        r.received += f.received;
        r.decreases.push_back(f.rc.stats().decreases);
        r.lost.push_back(f.rc.stats().lost);
    }
    r.utilisation = total / capacity_pps;
    r.drops = drops;
    return r;
}

TEST(rate_controller, five_flows_weighted_1_to_5_on_the_papers_link_get_shares_near_their_weights) {
    // §IV-B, Table I: 300 kb/s of 512-byte packets (73 packets/s), buffer 50, flow i of
    // weight i, equal RTTs (100 ms here). The paper's flows got 0.86..1.03 of their ideal
    // share w_i C / sum w (its 601-1500 s column) with no loss.
    const std::vector<double> w = {1, 2, 3, 4, 5};
    const double c = 73.0;
    for (const std::uint64_t seed : {1u, 2u}) {
        const auto r = run_bottleneck(w, c, 50 * kNsPerMs, 2000 * kNsPerSec, seed);
        EXPECT_GT(r.utilisation, 0.85) << "seed " << seed;
        for (std::size_t i = 0; i < w.size(); ++i) {
            const double ideal = w[i] * c / 15.0;
            EXPECT_GT(r.rate_pps[i] / ideal, 0.6) << "w " << w[i] << " seed " << seed;
            EXPECT_LT(r.rate_pps[i] / ideal, 1.25) << "w " << w[i] << " seed " << seed;
            if (i > 0) {
                EXPECT_GT(r.rate_pps[i], r.rate_pps[i - 1] * 1.2);
            }
            EXPECT_GT(r.decreases[i], 100u);  // the flows do find the link's limit
        }
        // Sent = received + dropped + in flight at the end; receivers see exactly the
        // bottleneck's drops as gaps (tail drops aside).
        EXPECT_LE(r.received + r.drops, r.sent);
        EXPECT_GE(r.received + r.drops + 50 + 20, r.sent);
        std::uint64_t lost = 0;
        for (const auto l : r.lost) lost += l;
        EXPECT_LE(lost, r.drops);
    }
}

TEST(rate_controller, two_flows_weighted_1_and_2_alone_stay_below_the_link_with_the_heavier_ahead) {
    // Weights 1 and 2 alone on the same link do NOT reach the paper's 1:2 at full link:
    // a packet of one flow waits up to one service time (1/C) behind the other's, so an
    // epoch's savg_ratio carries noise of the order of 1/(C * epoch) (§V: the distortion
    // must stay below the threshold's margin alpha w r_sep), while the margin at the fair
    // share is alpha (sum of weights) / C. With a weight sum of 3 the noise is several times
    // the margin and both flows settle where their margins match it (5-8 and 25-30
    // packets/s, about half the link, the lighter flow with fewer samples per epoch doing
    // worse); with the paper's sum of 15 (test above) the margin dominates. This pins the
    // behaviour (docs/architecture.md, Fidelity).
    for (const std::uint64_t seed : {1u, 2u}) {
        const auto r = run_bottleneck({1, 2}, 73.0, 50 * kNsPerMs, 2000 * kNsPerSec, seed);
        const double ratio = r.rate_pps[1] / r.rate_pps[0];
        EXPECT_GT(ratio, 1.6) << "seed " << seed;
        EXPECT_LT(ratio, 6.0) << "seed " << seed;
        EXPECT_GT(r.utilisation, 0.3) << "seed " << seed;
        EXPECT_LT(r.utilisation, 0.75) << "seed " << seed;
    }
}

}  // namespace
