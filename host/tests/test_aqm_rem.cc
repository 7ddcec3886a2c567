// REAQM (Wang & Song, REAQM, §3.1, eqs 1-5) and REM behaviour, with a fake clock and fixed
// capacity.
#include <gtest/gtest.h>

#include <cmath>

#include "oppsched/aqm.h"
#include "test_aqm_packets.h"

using namespace oppsched;
using namespace oppsched::aqm;
using namespace oppsched::aqm::testing;

namespace {

constexpr time_ns kT = 2 * kNsPerMs;  // update interval
// 8 Mb/s serves 2000 bytes per 2 ms: c = 2 packets of 1000 bytes per interval.
constexpr double kCap8M = 8e6;

aqm_params reaqm_config(double capacity_bps, std::size_t limit_packets = 50) {
    aqm_params c = default_config(aqm_kind::reaqm);
    c.limits = {0, limit_packets};
    c.rate.capacity_bps = capacity_bps;
    return c;
}

double marking(double price) { return 1.0 - std::pow(1.001, -price); }

TEST(reaqm_discipline, defaults_are_the_seed_parameters) {
    const reaqm_params p;
    EXPECT_DOUBLE_EQ(p.alpha, 0.11);
    EXPECT_DOUBLE_EQ(p.gamma, 0.001);
    EXPECT_DOUBLE_EQ(p.phi, 1.001);
    EXPECT_TRUE(p.modified_update);
    EXPECT_EQ(default_config(aqm_kind::reaqm).limits.packets, 50u);
}

TEST(reaqm_discipline, positive_rate_mismatch_uses_the_modified_update_eq5) {
    harness h(reaqm_config(kCap8M));
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
    h.aqm->dequeue(kT);  // closes the first interval: q = 5, y = 5, c = 2
    // p = gamma (alpha' q (y - y0) / c + y - c), y0 = c
    const double expected = 0.001 * (0.22 * 5 * (5 - 2) / 2.0 + 5 - 2);
    const aqm_stats s = h.aqm->stats();
    EXPECT_NEAR(s.price, expected, 1e-15);
    EXPECT_DOUBLE_EQ(s.input_rate, 5.0);
    EXPECT_NEAR(s.drop_probability, marking(expected), 1e-15);  // eq. 1
}

TEST(reaqm_discipline, without_the_modification_the_update_is_eq4) {
    aqm_params c = reaqm_config(kCap8M);
    std::get<reaqm_params>(c.params).modified_update = false;
    harness h(c);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
    h.aqm->dequeue(kT);
    // p = gamma ((alpha q / c + 1) y - c)
    EXPECT_NEAR(h.aqm->stats().price, 0.001 * ((0.11 * 5 / 2.0 + 1) * 5 - 2), 1e-15);
}

TEST(reaqm_discipline, rate_below_capacity_uses_eq4_and_idle_intervals_subtract_gamma_c) {
    aqm_params c = reaqm_config(kCap8M, 1000);
    std::get<reaqm_params>(c.params).gamma = 0.1;
    harness h(c);
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
    h.aqm->dequeue(kT);  // q = 40, y = 40
    const double p1 = 0.1 * (0.22 * 40 * (40 - 2) / 2.0 + 40 - 2);
    ASSERT_NEAR(h.aqm->stats().price, p1, 1e-9);
    h.offer(data_packet(1000, kEct), kT + kNsPerMs);  // y = 1 in (2, 4] ms; q = 40 at 4 ms
    h.aqm->dequeue(2 * kT);
    const double p2 = p1 + 0.1 * ((0.11 * 40 / 2.0 + 1) * 1 - 2);
    ASSERT_NEAR(h.aqm->stats().price, p2, 1e-9);
    // Three intervals with no arrival: 3 x (f(q) 0 - c).
    h.aqm->dequeue(5 * kT);
    EXPECT_NEAR(h.aqm->stats().price, p2 - 3 * 0.1 * 2, 1e-9);
    // A long idle spell clamps the price at 0 ([.]+), not below.
    h.aqm->dequeue(5 * kT + 10 * kNsPerSec);
    EXPECT_EQ(h.aqm->stats().price, 0.0);
    EXPECT_EQ(h.aqm->stats().drop_probability, 0.0);
}

// Open-loop overload at twice the capacity, then underload at half of it. At 12 Mb/s the
// link serves c = 3 packets of 1000 B per 2 ms interval; with a full 50-packet queue eq. 5
// raises the price by about gamma (alpha' 50 + 1) 3 = 0.036 per interval, and underload
// lowers it by about gamma (c - y) = 0.0015 per interval.
TEST(reaqm_discipline,
     price_rises_under_overload_stays_bounded_and_decays_to_zero_when_underloaded) {
    const double cap = 12e6;
    harness h(reaqm_config(cap));
    time_ns t = 0;
    const time_ns service = from_seconds(1000 * 8 / cap);  // 0.667 ms per packet
    time_ns next_service = service;
    double price_1s = 0;
    auto run = [&](time_ns until, time_ns inter_arrival) {
        time_ns next_arrival = t;
        while (t < until) {
            t = std::min(next_arrival, next_service);
            if (t == next_arrival) {
                h.offer(data_packet(1000, kEct), t);
                next_arrival += inter_arrival;
            }
            if (t == next_service) {
                h.aqm->dequeue(t);
                next_service += service;
            }
            ASSERT_LE(h.aqm->packets(), 50u);
            if (t >= kNsPerSec && price_1s == 0) price_1s = h.aqm->stats().price;
        }
    };
    run(3 * kNsPerSec, service / 2);
    const aqm_stats over = h.aqm->stats();
    EXPECT_GT(price_1s, 0.0);
    EXPECT_GT(over.price, price_1s);  // still rising: the mismatch persists
    EXPECT_GT(over.marked, 0u);
    EXPECT_NEAR(over.drop_probability, marking(over.price), 1e-12);
    // ECN traffic: REAQM drops only on a full buffer.
    EXPECT_EQ(over.dropped_by(drop_reason::early_drop), 0u);
    EXPECT_GT(over.dropped_by(drop_reason::overflow), 0u);

    run(60 * kNsPerSec, service * 2);
    const aqm_stats under = h.aqm->stats();
    EXPECT_EQ(under.price, 0.0);
    EXPECT_EQ(under.drop_probability, 0.0);
}

TEST(reaqm_discipline, marking_fraction_is_one_minus_phi_to_the_minus_price) {
    aqm_params c = reaqm_config(kCap8M, 100000);
    std::get<reaqm_params>(c.params).gamma = 1.0;
    harness h(c);
    for (int i = 0; i < 60; ++i) h.offer(data_packet(1000, kEct), 0);
    h.aqm->dequeue(kT);  // one update with q = 60, y = 60
    const double price = h.aqm->stats().price;
    const double m = marking(price);
    ASSERT_GT(m, 0.2);
    ASSERT_LT(m, 0.8);
    const auto marked0 = h.aqm->stats().marked;
    constexpr int kN = 20000;
    for (int i = 0; i < kN; ++i) h.offer(data_packet(1000, kEct), kT + 1);  // same interval
    const double frac = static_cast<double>(h.aqm->stats().marked - marked0) / kN;
    EXPECT_EQ(h.aqm->stats().price, price);  // no update inside the interval
    EXPECT_NEAR(frac, m, 4 * std::sqrt(m * (1 - m) / kN));
}

TEST(reaqm_discipline, non_ect_packets_are_dropped_where_ect_ones_are_marked) {
    aqm_params c = reaqm_config(kCap8M, 100000);
    std::get<reaqm_params>(c.params).gamma = 1.0;
    harness h(c);
    for (int i = 0; i < 60; ++i) h.offer(data_packet(1000, kEct), 0);
    h.aqm->dequeue(kT);
    const double m = marking(h.aqm->stats().price);  // ~0.36
    for (int i = 0; i < 1000; ++i) h.offer(data_packet(1000), kT + 1);
    EXPECT_NEAR(h.drops_with(drop_reason::early_drop) / 1000.0, m, 0.07);

    c.ecn = false;
    harness off(c);
    for (int i = 0; i < 60; ++i) off.offer(data_packet(1000, kEct), 0);
    EXPECT_EQ(off.aqm->stats().marked, 0u);
}

TEST(reaqm_discipline, measured_capacity_holds_the_price_until_the_first_sample) {
    aqm_params c = reaqm_config(0.0);  // measure
    harness h(c);
    for (int i = 0; i < 20; ++i) h.offer(data_packet(1000, kEct), 0);
    // Serve 1000 B per ms while backlogged: a packet counts once the next dequeue ends its
    // sending time, so eight intervals pass before 16 kB have been sent.
    for (int i = 1; i <= 17; ++i) h.aqm->dequeue(i * kNsPerMs);
    EXPECT_EQ(h.aqm->stats().price, 0.0);
    EXPECT_EQ(h.aqm->stats().service_rate_bps, 0.0);
    // 17 000 B sent in 17 ms; the interval's update ran first, with c unknown: q = 2, y = 0.
    h.aqm->dequeue(18 * kNsPerMs);
    EXPECT_DOUBLE_EQ(h.aqm->stats().service_rate_bps, 8e6);
    EXPECT_EQ(h.aqm->stats().price, 0.0);
    h.offer(data_packet(1000, kEct), 18 * kNsPerMs);
    for (int i = 0; i < 10; ++i) h.offer(data_packet(1000, kEct), 19 * kNsPerMs);
    h.aqm->dequeue(20 * kNsPerMs);  // q = 13, y = 11 > c = 2
    EXPECT_GT(h.aqm->stats().price, 0.0);
}

// Wang & Song, REAQM, §3.1: "at each packet arrival epoch, the price is updated". The period
// is the gap since the previous arrival: y = the arriving packet, c = capacity x gap, and the
// queue in f(q) and eq. 5 is scaled by c_T, the packets the link serves in T.
TEST(reaqm_discipline, per_arrival_updates_the_price_at_each_arrival_over_the_gap_since_the_last) {
    aqm_params c = reaqm_config(kCap8M);
    std::get<reaqm_params>(c.params).update = price_update::per_arrival;
    harness h(c);
    const time_ns gap = kNsPerMs / 2;  // c = 0.5 packets per gap, c_T = 2
    ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
    EXPECT_EQ(h.aqm->stats().price, 0.0);  // the first arrival only opens a period
    ASSERT_TRUE(h.offer(data_packet(1000, kEct), gap));
    // q = 1 (the packet before this one), y = 1 > c = 0.5: eq. 5 with y0 = c.
    const double p1 = 0.001 * (0.22 * 1 * (1 - 0.5) / 2.0 + 1 - 0.5);
    EXPECT_NEAR(h.aqm->stats().price, p1, 1e-15);
    EXPECT_DOUBLE_EQ(h.aqm->stats().input_rate, 4.0);  // 1 packet per 0.5 ms: 4 per T
    ASSERT_TRUE(h.offer(data_packet(1000, kEct), 2 * gap));
    const double p2 = p1 + 0.001 * (0.22 * 2 * (1 - 0.5) / 2.0 + 1 - 0.5);
    EXPECT_NEAR(h.aqm->stats().price, p2, 1e-15);
    EXPECT_NEAR(h.aqm->stats().drop_probability, marking(p2), 1e-15);
    // Dequeues and period boundaries change nothing: only arrivals update.
    h.aqm->dequeue(10 * kT);
    EXPECT_NEAR(h.aqm->stats().price, p2, 1e-15);
    // A long gap is a period of little input: p <- [p + gamma (f(q) 1 - c)]+ , clamped at 0.
    ASSERT_TRUE(h.offer(data_packet(1000, kEct), 20 * kT));
    EXPECT_EQ(h.aqm->stats().price, 0.0);
}

// Both modes see the same traffic (one packet every 0.5 ms at 8 Mb/s, served at once, so
// q = 0 and y - c = 1 - 0.5 per arrival, 4 - 2 per T): the price drifts at the same rate.
TEST(reaqm_discipline, per_arrival_and_interval_updates_drift_alike_on_the_same_traffic) {
    double price[2];
    for (const price_update u : {price_update::interval, price_update::per_arrival}) {
        aqm_params c = reaqm_config(kCap8M);
        std::get<reaqm_params>(c.params).update = u;
        harness h(c);
        for (time_ns t = 0; t < 100 * kT; t += kNsPerMs / 2) {
            ASSERT_TRUE(h.offer(data_packet(1000, kEct), t));
            h.aqm->dequeue(t);
        }
        h.aqm->dequeue(100 * kT);
        price[static_cast<int>(u)] = h.aqm->stats().price;
    }
    EXPECT_NEAR(price[0], 100 * 0.001 * (4 - 2), 1e-9);  // 100 periods of gamma (y - c)
    // Per arrival: 399 updates of gamma (1 - 0.5) (the first arrival opens the first period).
    EXPECT_NEAR(price[1], 399 * 0.001 * (1 - 0.5), 1e-9);
}

TEST(reaqm_discipline, update_names_its_mode) {
    EXPECT_EQ(to_string(price_update::per_arrival), "per_arrival");
    EXPECT_EQ(price_update_from_string("interval"), price_update::interval);
    EXPECT_EQ(price_update_from_string("per-arrival"), std::nullopt);
    EXPECT_EQ(reaqm_params{}.update, price_update::interval);
}

TEST(rem_discipline, update_follows_the_price_equation) {
    aqm_params c = default_config(aqm_kind::rem);
    c.limits = {0, 100};
    c.rate.capacity_bps = kCap8M;
    harness h(c);
    for (int i = 0; i < 30; ++i) ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
    h.aqm->dequeue(kT);  // b = 30, x = 30, c = 2
    const double p1 = 0.001 * (0.1 * (30 - 20) + 30 - 2);
    EXPECT_NEAR(h.aqm->stats().price, p1, 1e-15);
    EXPECT_NEAR(h.aqm->stats().drop_probability, marking(p1), 1e-15);
    h.aqm->dequeue(2 * kT);  // b = 29, x = 0
    EXPECT_NEAR(h.aqm->stats().price, p1 + 0.001 * (0.1 * (29 - 20) - 2), 1e-15);
}

TEST(rem_discipline, price_rises_with_a_standing_queue_and_returns_to_zero_below_target) {
    aqm_params c = default_config(aqm_kind::rem);
    c.limits = {0, 100};
    c.rate.capacity_bps = kCap8M;
    std::get<rem_params>(c.params).gamma = 0.01;
    harness h(c);
    // Arrivals match the capacity but 60 packets stand in the queue (b - b* = 40).
    for (int i = 0; i < 60; ++i) h.offer(data_packet(1000, kEct), 0);
    time_ns t = 0;
    for (int i = 0; i < 2000; ++i) {
        t += kNsPerMs;
        h.offer(data_packet(1000, kEct), t);
        h.aqm->dequeue(t);
    }
    const double high = h.aqm->stats().price;
    EXPECT_GT(high, 30.0);  // ~ 1000 updates x gamma x 0.1 x 40
    // Drain to below b* and keep the input below capacity: the price falls to 0.
    while (h.aqm->packets() > 5) h.aqm->dequeue(t);
    for (int i = 0; i < 4000; ++i) {
        t += kNsPerMs;
        if (i % 2 == 0) h.offer(data_packet(1000, kEct), t);
        h.aqm->dequeue(t);
    }
    EXPECT_EQ(h.aqm->stats().price, 0.0);
}

}  // namespace
