#include <benchmark/benchmark.h>

#include "oppsched/common.h"

// Reference point for the other benchmarks: the cost of the time conversions used per packet.
static void BM_time_conversion(benchmark::State& state) {
    double s = 1.0;
    for (auto _ : state) {
        s += 1e-9;
        benchmark::DoNotOptimize(oppsched::from_seconds(s));
    }
}
BENCHMARK(BM_time_conversion);
