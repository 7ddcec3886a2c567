// AVQ (Kunniyur & Srikant 2004) behaviour, with a fake clock and fixed capacity.
#include <gtest/gtest.h>

#include "oppsched/aqm.h"
#include "test_aqm_packets.h"

using namespace oppsched;
using namespace oppsched::aqm;
using namespace oppsched::aqm::testing;

namespace {

aqm_params avq_config(double capacity_bps, std::size_t limit_packets = 1000) {
    aqm_params c = default_config(aqm_kind::avq);
    c.limits = {0, limit_packets};
    c.rate.capacity_bps = capacity_bps;
    std::get<avq_params>(c.params).virtual_buffer_bytes = 50000;
    return c;
}

TEST(avq_discipline, defaults_are_the_papers) {
    const avq_params p;
    EXPECT_DOUBLE_EQ(p.gamma, 0.98);
    EXPECT_DOUBLE_EQ(p.alpha, 0.15);
}

TEST(avq_discipline, marks_exactly_when_the_virtual_queue_would_overflow) {
    harness h(avq_config(10e6));
    // A burst at one instant: the virtual queue does not drain, 50 x 1000 B fill it.
    for (int i = 0; i < 60; ++i) {
        const auto before = h.aqm->stats().marked;
        ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
        EXPECT_EQ(h.aqm->stats().marked - before, i < 50 ? 0u : 1u) << "arrival " << i;
    }
    const aqm_stats s = h.aqm->stats();
    EXPECT_DOUBLE_EQ(s.virtual_queue_bytes, 50000.0);
    // C~ = C - 60 alpha b (every arrival, marked or not, lowers it).
    EXPECT_NEAR(s.virtual_capacity_bps, (10e6 / 8 - 60 * 0.15 * 1000) * 8, 1e-6);
}

// Arrivals at `load` x capacity, service at capacity, for `seconds`.
void run(harness& h, double cap, double load, double seconds, time_ns& t) {
    const time_ns service = from_seconds(1000 * 8 / cap);
    const time_ns arrival = static_cast<time_ns>(static_cast<double>(service) / load);
    time_ns next_a = t, next_s = t + service;
    const time_ns end = t + from_seconds(seconds);
    while (t < end) {
        t = std::min(next_a, next_s);
        if (t == next_a) {
            h.offer(data_packet(1000, kEct), t);
            next_a += arrival;
        }
        if (t == next_s) {
            h.aqm->dequeue(t);
            next_s += service;
        }
    }
}

TEST(avq_discipline, does_not_mark_below_the_desired_utilisation) {
    harness h(avq_config(1e6));
    time_ns t = 0;
    run(h, 1e6, 0.5, 20.0, t);
    EXPECT_EQ(h.aqm->stats().marked, 0u);
    // C~ is capped at C.
    EXPECT_LE(h.aqm->stats().virtual_capacity_bps, 1e6 + 1e-6);
}

TEST(avq_discipline, open_loop_overload_drives_virtual_capacity_to_zero_and_marks_almost_all) {
    harness h(avq_config(1e6, 100000));  // the real queue must not overflow in this test
    time_ns t = 0;
    // C~ falls by alpha b (1 - gamma / 1.5) per arrival: zero after ~2400 arrivals (~13 s).
    run(h, 1e6, 1.5, 20.0, t);
    const auto m0 = h.aqm->stats().marked;
    const auto o0 = h.aqm->stats().offered;
    run(h, 1e6, 1.5, 2.0, t);
    const aqm_stats s = h.aqm->stats();
    EXPECT_EQ(s.virtual_capacity_bps, 0.0);  // clamped at 0, never negative
    EXPECT_GT(static_cast<double>(s.marked - m0) / static_cast<double>(s.offered - o0), 0.9);
}

TEST(avq_discipline, non_ect_arrivals_at_an_overflowing_virtual_queue_are_dropped) {
    harness h(avq_config(10e6));
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(h.offer(data_packet(1000), 0));
    EXPECT_FALSE(h.offer(data_packet(1000), 0));
    ASSERT_EQ(h.drops.size(), 1u);
    EXPECT_EQ(h.drops[0].reason, drop_reason::early_drop);
}

}  // namespace
