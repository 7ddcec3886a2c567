// latency_histogram (latency_histogram.h): the quantiles a run reports for a plugin's calls.
#include <gtest/gtest.h>

#include <cstdint>

#include "latency_histogram.h"

using oppsched::pyplugin::latency_histogram;

TEST(LatencyHistogram, when_empty_then_every_quantile_is_zero) {
    const latency_histogram h;
    EXPECT_EQ(h.count(), 0u);
    EXPECT_EQ(h.quantile_ns(0.5), 0u);
    EXPECT_EQ(h.quantile_ns(0.99), 0u);
    EXPECT_EQ(h.max_ns(), 0u);
}

TEST(LatencyHistogram, a_quantile_is_the_upper_edge_of_its_100_ns_bin_below_100_us) {
    latency_histogram h;
    for (std::uint64_t i = 1; i <= 100; ++i) h.add(i * 1000);  // 1, 2, ..., 100 us
    EXPECT_EQ(h.count(), 100u);
    EXPECT_EQ(h.quantile_ns(0.5), 50'100u);  // the 50th call, 50 us, in [50.0, 50.1) us
    EXPECT_EQ(h.quantile_ns(0.99), 99'100u);
    EXPECT_EQ(h.quantile_ns(1.0), 100'000u);  // 100 us: the first coarse bin, capped at the max
    EXPECT_EQ(h.max_ns(), 100'000u);
}

TEST(LatencyHistogram, a_few_slow_calls_move_the_p99_and_not_the_median) {
    latency_histogram h;
    for (int i = 0; i < 990; ++i) h.add(20'000);    // 20 us
    for (int i = 0; i < 10; ++i) h.add(3'000'000);  // 3 ms
    EXPECT_EQ(h.quantile_ns(0.5), 20'100u);
    EXPECT_EQ(h.quantile_ns(0.99), 20'100u);      // the 990th call
    EXPECT_EQ(h.quantile_ns(0.995), 3'000'000u);  // 10 us bins above 100 us, capped at the max
    EXPECT_EQ(h.max_ns(), 3'000'000u);
}

TEST(LatencyHistogram, calls_beyond_10_ms_share_the_last_bin_and_keep_the_exact_max) {
    latency_histogram h;
    h.add(50'000'000);  // 50 ms
    h.add(1'000);
    EXPECT_EQ(h.quantile_ns(0.5), 1'100u);
    EXPECT_EQ(h.quantile_ns(1.0), 50'000'000u);
    EXPECT_EQ(h.max_ns(), 50'000'000u);
}

TEST(LatencyHistogram, a_quantile_is_never_below_the_true_value) {
    latency_histogram h;
    for (std::uint64_t ns : {150u, 250u, 99'999u, 100'001u, 123'456u}) h.add(ns);
    EXPECT_GE(h.quantile_ns(0.2), 150u);
    EXPECT_GE(h.quantile_ns(0.6), 99'999u);
    EXPECT_GE(h.quantile_ns(0.8), 100'001u);
    EXPECT_EQ(h.quantile_ns(1.0), 123'456u);
}
