// PIE (RFC 8033) behaviour with a fake clock.
#include <gtest/gtest.h>

#include <algorithm>

#include "oppsched/aqm.h"
#include "test_aqm_packets.h"

using namespace oppsched;
using namespace oppsched::aqm;
using namespace oppsched::aqm::testing;

namespace {

// Departure-rate mode at a fixed 1 Mb/s: qdelay = queued bytes x 8 / 1e6 exactly.
aqm_params pie_rate_config() {
    aqm_params c = default_config(aqm_kind::pie);
    c.limits = {0, 1000};
    c.rate.capacity_bps = 1e6;
    std::get<pie_params>(c.params).use_departure_rate = true;
    return c;
}

// Every ms: one departure, then arrivals until `hold` packets are queued (at most 4 tries).
void hold_queue(harness& h, std::size_t hold, time_ns& t, time_ns until, std::uint8_t ecn) {
    while (t < until) {
        t += kNsPerMs;
        h.aqm->dequeue(t);
        for (int i = 0; i < 4 && h.aqm->packets() < hold; ++i) h.offer(data_packet(1000, ecn), t);
    }
}

TEST(pie_discipline, defaults_are_the_rfcs) {
    const pie_params p;
    EXPECT_EQ(p.target, 15 * kNsPerMs);
    EXPECT_EQ(p.tupdate, 15 * kNsPerMs);
    EXPECT_DOUBLE_EQ(p.alpha, 0.125);
    EXPECT_DOUBLE_EQ(p.beta, 1.25);
    EXPECT_EQ(p.max_burst, 150 * kNsPerMs);
}

TEST(pie_discipline, drop_probability_rises_while_the_delay_exceeds_target) {
    harness h(pie_rate_config());
    time_ns t = 0;
    while (h.aqm->packets() < 10) h.offer(data_packet(1000, kEct), t);  // 80 ms of delay
    hold_queue(h, 10, t, 300 * kNsPerMs, kEct);
    const double p1 = h.aqm->stats().drop_probability;
    hold_queue(h, 10, t, kNsPerSec, kEct);
    const aqm_stats s = h.aqm->stats();
    EXPECT_GT(p1, 0.0);
    EXPECT_GT(s.drop_probability, p1);
    EXPECT_NEAR(s.queue_delay_s, 0.080, 0.009);
    // ECN (§5.1): ECT packets are marked while drop_prob <= 10 %, dropped above it.
    EXPECT_GT(s.marked, 0u);
    EXPECT_GT(s.dropped_by(drop_reason::early_drop), 0u);
    EXPECT_GT(s.drop_probability, 0.1);
}

TEST(pie_discipline, no_early_drop_while_burst_allowance_remains) {
    harness h(pie_rate_config());
    time_ns t = 0;
    for (int i = 0; i < 250; ++i) h.offer(data_packet(1000), 0);  // 2 s of delay at once
    ASSERT_TRUE(h.drops.empty());
    hold_queue(h, 250, t, 100 * kNsPerMs, tcpip::kNotEct);
    aqm_stats s = h.aqm->stats();
    EXPECT_GT(s.drop_probability, 0.1);  // already high ...
    EXPECT_GT(s.burst_allowance_s, 0.0);
    EXPECT_EQ(s.dropped_by(drop_reason::early_drop), 0u);  // ... yet the burst passes
    hold_queue(h, 250, t, kNsPerSec, tcpip::kNotEct);
    s = h.aqm->stats();
    EXPECT_EQ(s.burst_allowance_s, 0.0);
    EXPECT_GT(s.dropped_by(drop_reason::early_drop), 50u);
}

TEST(pie_discipline, probability_is_clamped_at_one_and_decays_to_zero_once_the_queue_empties) {
    harness h(pie_rate_config());
    time_ns t = 0;
    for (int i = 0; i < 500; ++i) h.offer(data_packet(1000), 0);  // 4 s of delay
    // The step is capped at 0.02 per update above 10 %: 1.0 is reached after ~0.6 s.
    double max_seen = 0;
    while (t < 700 * kNsPerMs) {
        hold_queue(h, 500, t, t + kNsPerMs, tcpip::kNotEct);
        max_seen = std::max(max_seen, h.aqm->stats().drop_probability);
    }
    EXPECT_EQ(h.aqm->stats().drop_probability, 1.0);
    EXPECT_EQ(max_seen, 1.0);  // clamped, never above
    while (h.aqm->dequeue(t)) {
    }
    h.aqm->dequeue(t + 20 * kNsPerSec);  // 20 s of empty queue, processed at this event
    const aqm_stats s = h.aqm->stats();
    EXPECT_EQ(s.drop_probability, 0.0);
    EXPECT_DOUBLE_EQ(s.burst_allowance_s, 0.150);  // reset: drop_prob 0 and delay low
}

TEST(pie_discipline, timestamp_mode_measures_the_sojourn_of_departing_packets) {
    aqm_params c = default_config(aqm_kind::pie);
    c.limits = {0, 1000};
    harness h(c);
    for (int ms = 0; ms < 600; ++ms) {  // departures lag arrivals by 60 ms
        const time_ns t = ms * kNsPerMs;
        h.offer(data_packet(1000, kEct), t);
        if (ms >= 60) h.aqm->dequeue(t);
    }
    const aqm_stats s = h.aqm->stats();
    EXPECT_NEAR(s.queue_delay_s, 0.060, 0.002);
    EXPECT_GT(s.drop_probability, 0.0);
    EXPECT_EQ(s.service_rate_bps, 0.0);  // no rate needed in this mode
}

TEST(pie_discipline, below_half_the_target_nothing_is_dropped) {
    aqm_params c = default_config(aqm_kind::pie);
    c.limits = {0, 1000};
    harness h(c);
    for (int ms = 0; ms < 5000; ++ms) {  // 5 ms sojourn
        const time_ns t = ms * kNsPerMs;
        h.offer(data_packet(1000), t);
        if (ms >= 5) h.aqm->dequeue(t);
    }
    EXPECT_TRUE(h.drops.empty());
    EXPECT_EQ(h.aqm->stats().drop_probability, 0.0);
}

}  // namespace
