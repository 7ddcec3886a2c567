// CoDel (RFC 8289) behaviour with a fake clock: one arrival and one departure per ms, the
// sojourn time set by how far departures lag behind arrivals.
#include <gtest/gtest.h>

#include <cmath>

#include "oppsched/aqm.h"
#include "test_aqm_packets.h"

using namespace oppsched;
using namespace oppsched::aqm;
using namespace oppsched::aqm::testing;

namespace {

aqm_params codel_config(bool ecn = false) {
    aqm_params c = default_config(aqm_kind::codel);
    c.limits = {0, 10000};
    c.ecn = ecn;
    return c;
}

// Arrivals every ms from t = 0; departures every ms from t = lag_ms. Returns the time of
// each drop.
std::vector<time_ns> run_lagged(harness& h, int lag_ms, int total_ms, std::uint8_t ecn = 0) {
    std::vector<time_ns> drops;
    for (int ms = 0; ms < total_ms; ++ms) {
        const time_ns t = ms * kNsPerMs;
        h.offer(data_packet(1000, ecn), t);
        if (ms >= lag_ms) {
            const std::size_t before = h.drops.size();
            h.aqm->dequeue(t);
            for (std::size_t i = before; i < h.drops.size(); ++i) drops.push_back(h.drops[i].at);
        }
    }
    return drops;
}

TEST(codel_discipline, never_drops_while_the_sojourn_time_is_below_target) {
    harness h(codel_config());
    run_lagged(h, 4, 10000);  // sojourn 4 ms < 5 ms, 4 kB > MTU queued
    EXPECT_TRUE(h.drops.empty());
    EXPECT_FALSE(h.aqm->stats().dropping);
    EXPECT_NEAR(h.aqm->stats().queue_delay_s, 0.004, 1e-12);
}

TEST(codel_discipline, enters_dropping_one_interval_after_the_sojourn_first_exceeds_target) {
    harness h(codel_config());
    const auto drops = run_lagged(h, 20, 400);
    ASSERT_FALSE(drops.empty());
    // The first departure (t = 20 ms) sees 20 ms > target: first_above_time = 120 ms.
    EXPECT_EQ(drops.front(), 120 * kNsPerMs);
    EXPECT_EQ(h.drops.front().reason, drop_reason::aqm_drop);
    EXPECT_TRUE(h.aqm->stats().dropping);
}

TEST(codel_discipline, drop_spacing_follows_interval_over_sqrt_count) {
    harness h(codel_config());
    // 300 ms of standing queue: each drop shortens it by 1 ms, so it stays above target.
    const auto drops = run_lagged(h, 300, 1500);
    ASSERT_GE(drops.size(), 10u);
    double scheduled = 0.400;  // first drop: the first departure (300 ms) + one interval
    for (std::size_t n = 0; n < 10; ++n) {
        // Departures are 1 ms apart: a drop happens at the first one at or after its time.
        const double at = to_seconds(drops[n]);
        EXPECT_GE(at, scheduled - 1e-9) << "drop " << n;
        EXPECT_LT(at, scheduled + 1e-3) << "drop " << n;
        scheduled += 0.100 / std::sqrt(static_cast<double>(n + 1));
    }
    EXPECT_GE(h.aqm->stats().codel_count, 10u);
}

TEST(codel_discipline, leaves_dropping_when_the_sojourn_falls_below_target) {
    harness h(codel_config());
    run_lagged(h, 20, 400);
    ASSERT_TRUE(h.aqm->stats().dropping);
    // Serve faster than arrivals until the queue is short.
    time_ns t = 400 * kNsPerMs;
    for (int i = 0; i < 200 && h.aqm->packets() > 2; ++i) h.aqm->dequeue(t += 100'000);
    const std::size_t drops = h.drops.size();
    for (int ms = 0; ms < 1000; ++ms) {  // then 1 ms sojourn
        t += kNsPerMs;
        h.offer(data_packet(1000), t);
        h.aqm->dequeue(t);
    }
    EXPECT_FALSE(h.aqm->stats().dropping);
    EXPECT_LE(h.drops.size(), drops + 2);
}

TEST(codel_discipline, does_not_drop_with_at_most_one_mtu_queued) {
    harness h(codel_config());
    for (int k = 0; k < 200; ++k) {  // one packet at a time, each waiting 40 ms
        const time_ns t = k * 50 * kNsPerMs;
        h.offer(data_packet(1000), t);
        ASSERT_TRUE(h.aqm->dequeue(t + 40 * kNsPerMs).has_value());
    }
    EXPECT_TRUE(h.drops.empty());
}

TEST(codel_discipline, marks_ect_packets_instead_of_dropping_them) {
    harness h(codel_config(true));
    std::size_t ce = 0;
    for (int ms = 0; ms < 3000; ++ms) {
        const time_ns t = ms * kNsPerMs;
        h.offer(data_packet(1000, kEct), t);
        if (ms >= 50) {
            auto p = h.aqm->dequeue(t);
            ASSERT_TRUE(p.has_value());  // nothing is dropped, so a packet always comes out
            ce += ecn_of(*p) == tcpip::kCe;
        }
    }
    EXPECT_TRUE(h.drops.empty());
    EXPECT_GT(ce, 10u);
    EXPECT_EQ(h.aqm->stats().marked, ce);
}

}  // namespace
