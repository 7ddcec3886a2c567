// Costs of the CLAMP agents and the channel models, per event:
//   router agent per arrival (one exp) and per price, client agent per packet (ring buffer
//   of alpha+1 packets), Jakes / sum-of-sinusoids per sample (pointwise and batched), and
//   the CLAMP slot model per slot. Results are written down in the area report.
#include <benchmark/benchmark.h>

#include <complex>
#include <vector>

#include "oppsched/clamp.h"
#include "oppsched/clamp_link.h"
#include "oppsched/fading.h"

using namespace oppsched;

static void BM_clamp_router_on_arrival(benchmark::State& state) {
    clamp::router_agent r;
    time_ns t = 0;
    std::size_t q = 0;
    for (auto _ : state) {
        t += 1'200'000;  // 1.2 ms: a 1500 B packet at 10 Mb/s
        q = (q + 1500) % 30000;
        r.on_arrival(t, q);
        benchmark::DoNotOptimize(r.average_queue_bytes());
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_clamp_router_on_arrival);

static void BM_clamp_router_price(benchmark::State& state) {
    clamp::router_agent r;
    r.on_arrival(0, 9000);
    double mu = 1.25e6;
    for (auto _ : state) {
        mu += 1.0;
        benchmark::DoNotOptimize(r.price(mu));
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_clamp_router_price);

static void BM_clamp_client_on_data(benchmark::State& state) {
    clamp::client_agent c;  // alpha = 1000
    time_ns t = 0;
    for (int i = 0; i < 2000; ++i) c.on_data(t += 1'200'000, 1448, 0.0, 1u << 30);
    c.on_dupack();
    c.on_dupack();
    c.on_dupack();  // out of slow start: the full eq. 14-17 path
    double p = 0.0;
    for (auto _ : state) {
        t += 1'200'000;
        p = p > 1e-3 ? 0.0 : p + 1e-6;
        benchmark::DoNotOptimize(c.on_data(t, 1448, p, 1u << 30));
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_clamp_client_on_data);

template <class Params>
static void BM_fading_gain(benchmark::State& state) {
    Params p;
    p.seed = 3;
    auto ch = channel::make_fading(p);
    double t = 0.0;
    for (auto _ : state) {
        t += 8e-5;  // one OFDM symbol at the 1 Msps loopback rate
        benchmark::DoNotOptimize(ch->snr_linear(t));
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_fading_gain<channel::jakes_params>)->Name("BM_jakes_snr_per_sample");
BENCHMARK(BM_fading_gain<channel::sum_of_sinusoids_params>)
    ->Name("BM_sum_of_sinusoids_snr_per_sample");

template <class Params>
static void BM_fading_batch(benchmark::State& state) {
    Params p;
    p.seed = 3;
    auto ch = channel::make_fading(p);
    std::vector<std::complex<double>> out(4096);
    double t0 = 0.0;
    for (auto _ : state) {
        ch->gains(t0, 8e-5, out.size(), out.data());
        t0 += 4096 * 8e-5;
        benchmark::DoNotOptimize(out.data());
    }
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(out.size()));
}
BENCHMARK(BM_fading_batch<channel::jakes_params>)->Name("BM_jakes_gains_batch_per_sample");
BENCHMARK(BM_fading_batch<channel::sum_of_sinusoids_params>)
    ->Name("BM_sum_of_sinusoids_gains_batch_per_sample");

static void BM_clamp_link_slot(benchmark::State& state) {
    channel::jakes_params jp;
    jp.seed = 4;
    channel::jakes_channel ch(jp);
    channel::clamp_link link(channel::clamp_link_params::high_rate(5));
    double t = 0.0;
    double snr = ch.snr_linear(t);
    for (auto _ : state) {
        t += 3e-3;
        const double end = ch.snr_linear(t);
        benchmark::DoNotOptimize(link.transmit(snr, end));
        snr = end;
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_clamp_link_slot)->Name("BM_clamp_link_slot_with_jakes");
