// Tests for the wired-path delay line (oppsched-delay's core), on a fake clock.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "oppsched/delay_line.h"

using namespace oppsched;
using namespace oppsched::wired;

namespace {

constexpr time_ns kMs = kNsPerMs;

std::vector<std::uint8_t> frame(std::size_t n, std::uint8_t tag) {
    return std::vector<std::uint8_t>(n, tag);
}

delay_line_params delay_only(time_ns d) {
    delay_line_params p;
    p.delay = d;
    return p;
}

delay_line_params rate_limited(time_ns d, double rate_bps, std::size_t limit = 0) {
    delay_line_params p;
    p.delay = d;
    p.rate_bps = rate_bps;
    p.limit_bytes = limit;
    return p;
}

std::string invalid_message(const delay_line_params& p) {
    try {
        delay_line line(p);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "(no exception)";
}

}  // namespace

TEST(delay_line, when_not_rate_limited_then_frame_is_released_exactly_delay_after_arrival) {
    delay_line line(delay_only(65 * kMs));
    ASSERT_EQ(line.enqueue(1'000'123, frame(100, 1)), enqueue_result::accepted);
    ASSERT_TRUE(line.next_due().has_value());
    EXPECT_EQ(*line.next_due(), 1'000'123 + 65 * kMs);
    EXPECT_FALSE(line.pop_due(1'000'123 + 65 * kMs - 1).has_value());
    auto f = line.pop_due(1'000'123 + 65 * kMs);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->data, frame(100, 1));
    EXPECT_EQ(f->arrival, 1'000'123);
    EXPECT_EQ(f->due, 1'000'123 + 65 * kMs);
    EXPECT_FALSE(line.next_due().has_value());
    EXPECT_EQ(line.held_bytes(), 0u);
    EXPECT_EQ(line.stats().released, 1u);
}

TEST(delay_line, when_zero_delay_then_frame_is_due_at_arrival) {
    delay_line line(delay_only(0));
    line.enqueue(42, frame(60, 1));
    EXPECT_TRUE(line.pop_due(42).has_value());
}

TEST(delay_line, frames_are_released_in_arrival_order_also_with_equal_timestamps) {
    delay_line line(delay_only(10 * kMs));
    for (std::uint8_t i = 0; i < 5; ++i) line.enqueue(kMs, frame(64, i));
    std::vector<std::uint8_t> order;
    while (auto f = line.pop_due(11 * kMs)) order.push_back(f->data[0]);
    EXPECT_EQ(order, (std::vector<std::uint8_t>{0, 1, 2, 3, 4}));
}

TEST(delay_line, only_frames_that_are_due_are_released) {
    delay_line line(delay_only(10 * kMs));
    line.enqueue(0, frame(64, 0));
    line.enqueue(3 * kMs, frame(64, 1));
    ASSERT_TRUE(line.pop_due(12 * kMs).has_value());
    EXPECT_FALSE(line.pop_due(12 * kMs).has_value());
    EXPECT_EQ(*line.next_due(), 13 * kMs);
    EXPECT_EQ(line.held_frames(), 1u);
}

TEST(delay_line, when_arrival_time_goes_backwards_then_it_is_clamped_and_order_is_kept) {
    delay_line line(delay_only(5 * kMs));
    line.enqueue(10 * kMs, frame(64, 0));
    line.enqueue(9 * kMs, frame(64, 1));  // e.g. a kernel timestamp from another CPU
    EXPECT_EQ(line.stats().clamped_arrivals, 1u);
    auto a = line.pop_due(15 * kMs);
    auto b = line.pop_due(15 * kMs);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->data[0], 0);
    EXPECT_EQ(b->data[0], 1);
    EXPECT_EQ(b->due, 15 * kMs);  // not 14 ms: never ahead of the frame before it
}

TEST(delay_line, when_rate_limited_then_back_to_back_frames_are_serialised_one_after_another) {
    // 1000 bytes at 8 Mb/s take exactly 1 ms.
    delay_line line(rate_limited(20 * kMs, 8e6));
    for (std::uint8_t i = 0; i < 3; ++i) line.enqueue(0, frame(1000, i));
    EXPECT_EQ(line.pop_due(21 * kMs)->due, 21 * kMs);
    EXPECT_FALSE(line.pop_due(22 * kMs - 1).has_value());
    EXPECT_EQ(line.pop_due(22 * kMs)->due, 22 * kMs);
    EXPECT_EQ(line.pop_due(23 * kMs)->due, 23 * kMs);
}

TEST(delay_line, when_link_is_idle_then_serialisation_starts_at_arrival) {
    delay_line line(rate_limited(20 * kMs, 8e6));
    line.enqueue(0, frame(1000, 0));
    line.enqueue(50 * kMs, frame(1000, 1));  // link idle since 1 ms
    line.pop_due(100 * kMs);
    EXPECT_EQ(line.pop_due(100 * kMs)->due, 50 * kMs + kMs + 20 * kMs);
}

TEST(delay_line, rate_counts_wire_bytes_not_stored_bytes) {
    // A GSO super-frame: 100 stored bytes standing for 2000 bytes of segments.
    delay_line line(rate_limited(0, 8e6));
    line.enqueue(0, frame(100, 0), 2000);
    EXPECT_EQ(*line.next_due(), 2 * kMs);
    EXPECT_EQ(line.held_bytes(), 100u);
}

TEST(delay_line, long_busy_period_does_not_drift_from_rounding) {
    // 1 byte at 3 Gb/s is 8/3 ns: 3000 frames take exactly 8000 ns.
    delay_line line(rate_limited(0, 3e9));
    for (int i = 0; i < 3000; ++i) line.enqueue(0, frame(1, 0));
    time_ns last = 0;
    while (auto f = line.pop_due(kNsPerSec)) last = f->due;
    EXPECT_GE(last, 7999);
    EXPECT_LE(last, 8000);
}

TEST(delay_line, when_transmit_fifo_is_full_then_arriving_frame_is_dropped) {
    // 8 Mb/s, 1000-byte frames (1 ms each), FIFO of 2500 bytes: two fit, the third not.
    delay_line line(rate_limited(30 * kMs, 8e6, 2500));
    EXPECT_EQ(line.enqueue(0, frame(1000, 0)), enqueue_result::accepted);
    EXPECT_EQ(line.enqueue(0, frame(1000, 1)), enqueue_result::accepted);
    EXPECT_EQ(line.enqueue(0, frame(1000, 2)), enqueue_result::dropped_limit);
    EXPECT_EQ(line.backlog_bytes(0), 2000u);
    // After 1 ms the first frame is on the wire and no longer in the FIFO.
    EXPECT_EQ(line.enqueue(kMs, frame(1000, 3)), enqueue_result::accepted);
    EXPECT_EQ(line.stats().dropped_limit, 1u);
    EXPECT_EQ(line.stats().enqueued, 3u);
    std::vector<std::uint8_t> order;
    while (auto f = line.pop_due(kNsPerSec)) order.push_back(f->data[0]);
    EXPECT_EQ(order, (std::vector<std::uint8_t>{0, 1, 3}));
}

TEST(delay_line, frames_in_propagation_do_not_count_against_the_fifo_limit) {
    // 1000 bytes at 1 Gb/s = 8 us; one second of delay holds far more than the limit.
    delay_line line(rate_limited(kNsPerSec, 1e9, 3000));
    for (int i = 0; i < 100; ++i)
        ASSERT_EQ(line.enqueue(i * 10'000, frame(1000, 0)), enqueue_result::accepted) << i;
    EXPECT_EQ(line.held_frames(), 100u);
}

TEST(delay_line, when_not_rate_limited_then_fifo_limit_never_drops) {
    delay_line_params p = delay_only(kNsPerSec);
    p.limit_bytes = 100;
    delay_line line(p);
    for (int i = 0; i < 10; ++i)
        EXPECT_EQ(line.enqueue(0, frame(1500, 0)), enqueue_result::accepted);
}

TEST(delay_line, when_hold_bytes_reached_then_arriving_frame_is_dropped) {
    delay_line_params p = delay_only(kNsPerSec);
    p.hold_bytes = 3000;
    delay_line line(p);
    EXPECT_EQ(line.enqueue(0, frame(1500, 0)), enqueue_result::accepted);
    EXPECT_EQ(line.enqueue(0, frame(1500, 1)), enqueue_result::accepted);
    EXPECT_EQ(line.enqueue(0, frame(1, 2)), enqueue_result::dropped_hold);
    EXPECT_EQ(line.stats().dropped_hold, 1u);
    line.pop_due(kNsPerSec);
    EXPECT_EQ(line.enqueue(1, frame(1, 3)), enqueue_result::accepted);
}

TEST(delay_line, bad_parameters_are_rejected_naming_field_and_value) {
    delay_line_params p;
    p.delay = -1;
    EXPECT_EQ(invalid_message(p), "delay_line.delay: -1 ns not in [0, 60 s]");
    p.delay = 61 * kNsPerSec;
    EXPECT_NE(invalid_message(p).find("delay_line.delay: 61000000000"), std::string::npos);
    p = delay_line_params{};
    p.rate_bps = 5;
    EXPECT_EQ(invalid_message(p), "delay_line.rate_bps: 5 not 0 (unlimited) or in [1e3, 1e12]");
    p.rate_bps = -1e6;
    EXPECT_NE(invalid_message(p).find("delay_line.rate_bps: -1e+06"), std::string::npos);
    p.rate_bps = 1e6;
    EXPECT_EQ(invalid_message(p), "(no exception)");
}

// Contract over several configurations: random arrivals (seeded), then every accepted frame
// comes out once, in arrival order, never before arrival + delay, and never before the
// frame ahead of it.
class delay_line_contract : public ::testing::TestWithParam<delay_line_params> {};

TEST_P(delay_line_contract, random_arrivals_come_out_in_order_and_never_early) {
    const delay_line_params p = GetParam();
    delay_line line(p);
    std::mt19937_64 rng(20240601);
    std::uniform_int_distribution<time_ns> gap(0, 300'000);
    std::uniform_int_distribution<std::size_t> len(60, 1514);
    std::uniform_int_distribution<int> back(0, 19);
    time_ns now = 0;
    std::uint64_t accepted = 0, next_expected = 0, out = 0;
    time_ns last_due = 0;
    auto drain = [&](time_ns t) {
        while (auto f = line.pop_due(t)) {
            std::uint64_t seq = 0;
            for (int i = 0; i < 8; ++i) seq |= std::uint64_t{f->data[i]} << (8 * i);
            ASSERT_GE(seq, next_expected);  // dropped frames leave gaps, never reorder
            next_expected = seq + 1;
            ASSERT_GE(f->due, f->arrival + p.delay);
            ASSERT_GE(f->due, last_due);
            ASSERT_LE(f->due, t);
            last_due = f->due;
            ++out;
        }
    };
    for (std::uint64_t seq = 0; seq < 5000; ++seq) {
        now += gap(rng);
        // Now and then a timestamp slightly in the past.
        const time_ns stamp = back(rng) == 0 ? now - 50'000 : now;
        std::vector<std::uint8_t> d(len(rng));
        for (int i = 0; i < 8; ++i) d[i] = static_cast<std::uint8_t>(seq >> (8 * i));
        if (line.enqueue(stamp, std::move(d)) == enqueue_result::accepted) ++accepted;
        drain(now);
    }
    drain(now + 100 * kNsPerSec);
    EXPECT_EQ(out, accepted);
    EXPECT_EQ(line.held_bytes(), 0u);
    EXPECT_EQ(line.stats().enqueued + line.stats().dropped_limit + line.stats().dropped_hold,
              5000u);
}

INSTANTIATE_TEST_SUITE_P(Configurations, delay_line_contract,
                         ::testing::Values(delay_only(0), delay_only(15 * kMs),
                                           rate_limited(90 * kMs, 10e6),
                                           rate_limited(5 * kMs, 20e6, 20'000),
                                           delay_line_params{65 * kMs, 50e6, 30'000, 200'000}));
