// Cost of the wired-path delay line per frame (oppsched-delay's core): one enqueue and one
// pop of a 1500-byte frame in steady state, with and without the rate limiter. The frame
// copy (allocation) is included, as in the daemon.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "oppsched/delay_line.h"

using namespace oppsched;
using namespace oppsched::wired;

namespace {

void run_line(benchmark::State& state, const delay_line_params& p) {
    delay_line line(p);
    const std::vector<std::uint8_t> frame(1500, 0xab);
    time_ns now = 0;
    constexpr time_ns kGap = 120'000;  // 100 Mb/s of 1500-byte frames
    // Fill the line to its steady state (delay / gap frames in flight).
    for (time_ns t = 0; t < p.delay + 10 * kGap; t += kGap) {
        line.enqueue(now, frame);
        now += kGap;
        while (line.pop_due(now)) {
        }
    }
    for (auto _ : state) {
        line.enqueue(now, frame);
        now += kGap;
        while (auto f = line.pop_due(now)) benchmark::DoNotOptimize(f->data.data());
    }
    state.SetItemsProcessed(state.iterations());
    state.counters["held_frames"] = static_cast<double>(line.held_frames());
}

void BM_delay_line_delay_only(benchmark::State& state) {
    delay_line_params p;
    p.delay = 90 * kNsPerMs;  // d_4/2 of Andrew & Hanly, CLAMP
    run_line(state, p);
}
BENCHMARK(BM_delay_line_delay_only);

void BM_delay_line_rate_limited(benchmark::State& state) {
    delay_line_params p;
    p.delay = 90 * kNsPerMs;
    p.rate_bps = 100e6;  // Andrew & Hanly, CLAMP, Table I
    p.limit_bytes = 64 * 1024;
    run_line(state, p);
}
BENCHMARK(BM_delay_line_rate_limited);

}  // namespace
