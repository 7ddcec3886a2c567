// Throughput of the OFDM PHY classes in samples per second ("items_per_second" = sps;
// divide by 1e6 for Msps). Run: phy_bench --benchmark_filter='Ofdm|Sync|Emulator'.
// The loopback default is 1 Msps per stream; these numbers say how many streams one core
// carries.
#include <benchmark/benchmark.h>
#include <gnuradio/oppsched/channel_emulator.h>
#include <gnuradio/oppsched/gaussian_noise.h>
#include <gnuradio/oppsched/ofdm_demodulator.h>
#include <gnuradio/oppsched/ofdm_modulator.h>
#include <gnuradio/oppsched/slot_sync.h>

#include <random>

using namespace gr::oppsched;

namespace {

std::vector<gr_complex> qpsk(std::mt19937_64& rng, size_t n) {
    std::vector<gr_complex> v(n);
    const float a = 0.70710678f;
    for (auto& x : v) x = gr_complex(rng() & 1 ? a : -a, rng() & 1 ? a : -a);
    return v;
}

// A received stream: n slots back to back through an AWGN emulator at 15 dB.
std::vector<gr_complex> rx_stream(const numerology& num, int n) {
    ofdm_modulator mod(num);
    std::mt19937_64 rng(1);
    std::vector<gr_complex> tx;
    for (int k = 0; k < n; ++k) {
        const auto s =
            mod.modulate(qpsk(rng, static_cast<size_t>(num.header_resource_elements())),
                         qpsk(rng, static_cast<size_t>(num.payload_resource_elements())));
        tx.insert(tx.end(), s.begin(), s.end());
    }
    tx.resize(tx.size() + 200, gr_complex(0, 0));
    channel_emulator_params p;
    p.numerology = num.params();
    emulator_user_params u;
    u.fading = fading_model::none;
    u.mean_snr_db = 15;
    u.cfo_hz = 1000;
    p.users = {u};
    channel_emulator em(p);
    return em.process(tx)[0];
}

}  // namespace

static void BM_OfdmModulator(benchmark::State& state) {
    const auto num = numerology::profile("evdo", 1e6);
    ofdm_modulator mod(num);
    std::mt19937_64 rng(1);
    const auto hdr = qpsk(rng, static_cast<size_t>(num.header_resource_elements()));
    const auto pay = qpsk(rng, static_cast<size_t>(num.payload_resource_elements()));
    std::vector<gr_complex> out(static_cast<size_t>(num.slot_samples()));
    for (auto _ : state) {
        mod.modulate(hdr.data(), hdr.size(), pay.data(), pay.size(), out.data());
        benchmark::DoNotOptimize(out.data());
    }
    state.SetItemsProcessed(state.iterations() * num.slot_samples());
}
BENCHMARK(BM_OfdmModulator);

static void BM_OfdmDemodulator(benchmark::State& state) {
    const auto num = numerology::profile("evdo", 1e6);
    const auto rx = rx_stream(num, 1);
    ofdm_demodulator dem(num);
    ofdm_demod_result r;
    for (auto _ : state) {
        dem.demodulate(rx.data(), rx.size(), r);
        benchmark::DoNotOptimize(r.payload.data());
    }
    state.SetItemsProcessed(state.iterations() * num.slot_samples());
}
BENCHMARK(BM_OfdmDemodulator);

// One slot of the 3ms profile at 5 Msps, demodulated whole (arg 1) or only as far as the
// header (arg 0: what a receiver needs for a slot addressed to another user).
static void BM_OfdmDemodulator3ms(benchmark::State& state) {
    const auto num = numerology::profile("3ms", 5e6);
    const auto rx = rx_stream(num, 1);
    ofdm_demodulator dem(num);
    ofdm_demod_result r;
    const bool payload = state.range(0) != 0;
    for (auto _ : state) {
        dem.demodulate(rx.data(), rx.size(), r, payload);
        benchmark::DoNotOptimize(r.header.data());
    }
    state.SetItemsProcessed(state.iterations() * num.slot_samples());
}
BENCHMARK(BM_OfdmDemodulator3ms)->Arg(0)->Arg(1);

// Continuous stream (every slot occupied, the worst case): sync + demod of every slot.
static void BM_SyncDemod(benchmark::State& state) {
    const auto num = numerology::profile("evdo", 1e6);
    const auto rx = rx_stream(num, 50);
    ofdm_demodulator dem(num);
    ofdm_demod_result r;
    std::vector<slot_detection> found;
    size_t slots = 0;
    for (auto _ : state) {
        slot_sync sync(num);
        found.clear();
        for (size_t i = 0; i < rx.size(); i += 4096)
            sync.push(rx.data() + i, std::min<size_t>(4096, rx.size() - i), found);
        for (const auto& f : found) dem.demodulate(f.samples.data(), f.samples.size(), r);
        slots += found.size();
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * rx.size()));
    state.counters["slots_per_iter"] = static_cast<double>(slots) / state.iterations();
}
BENCHMARK(BM_SyncDemod);

// Sync alone on pure noise (the idle case).
static void BM_SyncNoise(benchmark::State& state) {
    const auto num = numerology::profile("evdo", 1e6);
    std::mt19937_64 rng(2);
    std::normal_distribution<float> g(0.0f, 0.7071f);
    std::vector<gr_complex> x(1 << 16);
    for (auto& v : x) v = gr_complex(g(rng), g(rng));
    slot_sync sync(num);
    std::vector<slot_detection> found;
    for (auto _ : state) sync.push(x.data(), x.size(), found);
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * x.size()));
}
BENCHMARK(BM_SyncNoise);

// Emulator per user: arg 0 = flat Jakes + AWGN; 1 = 3 faded taps + CFO + AWGN;
// 2 = AWGN only. Items = samples x users.
static void BM_EmulatorPerUser(benchmark::State& state) {
    const int mode = static_cast<int>(state.range(0));
    const int users = static_cast<int>(state.range(1));
    channel_emulator_params p;
    emulator_user_params u;
    u.mean_snr_db = 15;
    if (mode == 1) {
        u.taps = {{0, 0.0}, {3, -3.0}, {7, -6.0}};
        u.cfo_hz = 2000;
    } else if (mode == 2) {
        u.fading = fading_model::none;
    }
    p.users.assign(static_cast<size_t>(users), u);
    channel_emulator em(p);
    std::mt19937_64 rng(3);
    const auto x = qpsk(rng, 8192);
    std::vector<std::vector<gr_complex>> out(static_cast<size_t>(users),
                                             std::vector<gr_complex>(x.size()));
    std::vector<gr_complex*> ptr;
    for (auto& o : out) ptr.push_back(o.data());
    for (auto _ : state) {
        em.process(x.data(), ptr.data(), x.size());
        benchmark::DoNotOptimize(out[0].data());
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * x.size() * users));
}
BENCHMARK(BM_EmulatorPerUser)->Args({0, 1})->Args({1, 1})->Args({2, 1})->Args({0, 4});

// The emulator's noise: fill() (the generator inlined, its state in registers) against
// one normal() call per deviate. Items = real deviates.
static void BM_GaussianNoise(benchmark::State& state) {
    gaussian_generator g(9);
    std::vector<float> out(4096);
    const bool fill = state.range(0) != 0;
    for (auto _ : state) {
        if (fill) {
            g.fill(out.data(), out.size(), 0.5f);
        } else {
            for (auto& v : out) v = 0.5f * g.normal();
        }
        benchmark::DoNotOptimize(out.data());
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * out.size()));
}
BENCHMARK(BM_GaussianNoise)->Arg(0)->Arg(1);
