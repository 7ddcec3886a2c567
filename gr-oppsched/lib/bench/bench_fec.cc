// Benchmarks of the PHY bit chain: Viterbi (both ACS engines, and the float reference),
// encoder, demapper and the whole TB pipeline per MCS. Rates are in bits of the stage's
// natural unit per second (info bits for encoder/decoder, coded bits for the demapper),
// reported as the "bits/s" counter. Results on the project machine: bench_fec.md.
#include <benchmark/benchmark.h>
#include <gnuradio/oppsched/conv_code.h>
#include <gnuradio/oppsched/header_codec.h>
#include <gnuradio/oppsched/qam_mapper.h>
#include <gnuradio/oppsched/tb_codec.h>

#include <cmath>
#include <random>
#include <vector>

using namespace gr::oppsched;

namespace {

// Soft mother-code LLRs of k random bits, BPSK at Eb/N0 = 4 dB (a realistic decoding load:
// the ACS work does not depend on the SNR, the trace-back barely).
std::vector<float> noisy_llrs(std::size_t k, std::vector<std::uint8_t>& bits) {
    std::mt19937_64 rng(1);
    bits.resize(k);
    for (auto& b : bits) b = rng() & 1u;
    const auto code = conv_encoder_k7::encode_zero_tail(bits);
    std::normal_distribution<float> g(0.0f, 0.6f);
    std::vector<float> l(code.size());
    for (std::size_t i = 0; i < code.size(); ++i)
        l[i] = 2.0f * ((code[i] ? -1.0f : 1.0f) + g(rng)) / 0.36f;
    return l;
}

void set_rate(benchmark::State& s, double bits_per_iter) {
    s.counters["bits/s"] =
        benchmark::Counter(bits_per_iter, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_viterbi(benchmark::State& s, viterbi_backend b) {
    const std::size_t k = static_cast<std::size_t>(s.range(0));
    std::vector<std::uint8_t> bits, out(k);
    const auto l = noisy_llrs(k, bits);
    viterbi_decoder_k7 v(k, b);
    for (auto _ : s) {
        v.decode(l.data(), k, termination::zero_tail, out.data());
        benchmark::DoNotOptimize(out.data());
    }
    set_rate(s, static_cast<double>(k));
    s.SetLabel(b == viterbi_backend::acs16 ? viterbi_decoder_k7::acs16_kernel_name() : "volk");
}
BENCHMARK_CAPTURE(BM_viterbi, acs16, viterbi_backend::acs16)->Arg(1000)->Arg(44000);
BENCHMARK_CAPTURE(BM_viterbi, volk8, viterbi_backend::volk8)->Arg(1000)->Arg(44000);

void BM_viterbi_float_reference(benchmark::State& s) {
    const std::size_t k = static_cast<std::size_t>(s.range(0));
    std::vector<std::uint8_t> bits, out(k);
    const auto l = noisy_llrs(k, bits);
    for (auto _ : s) {
        viterbi_k7_reference(l.data(), k, termination::zero_tail, out.data());
        benchmark::DoNotOptimize(out.data());
    }
    set_rate(s, static_cast<double>(k));
}
BENCHMARK(BM_viterbi_float_reference)->Arg(4000);

void BM_conv_encode(benchmark::State& s) {
    const std::size_t k = 44000;
    std::mt19937_64 rng(2);
    std::vector<std::uint8_t> bits(k), out(2 * (k + 6));
    for (auto& b : bits) b = rng() & 1u;
    for (auto _ : s) {
        conv_encoder_k7::encode_zero_tail(bits.data(), k, out.data());
        benchmark::DoNotOptimize(out.data());
    }
    set_rate(s, static_cast<double>(k));
}
BENCHMARK(BM_conv_encode);

void BM_demap(benchmark::State& s) {
    const int bps = static_cast<int>(s.range(0));
    qam_mapper m(bps);
    const std::size_t n = 8736;  // payload REs of a 3ms slot at 5 Msps
    std::mt19937_64 rng(3);
    std::normal_distribution<float> g(0.0f, 0.7f);
    std::vector<gr_complex> y(n);
    for (auto& v : y) v = gr_complex(g(rng), g(rng));
    std::vector<float> nv(n, 0.1f), llr(n * static_cast<std::size_t>(bps));
    for (auto _ : s) {
        m.demap(y.data(), nv.data(), n, llr.data());
        benchmark::DoNotOptimize(llr.data());
    }
    set_rate(s, static_cast<double>(n * static_cast<std::size_t>(bps)));
}
BENCHMARK(BM_demap)->Arg(1)->Arg(2)->Arg(4)->Arg(6);

// Whole chain for the largest TB of each MCS in a 3ms slot at 5 Msps (3 ms, 8736 REs):
// the worst case a receiver must sustain in real time (one slot per 3 ms).
void BM_tb_encode(benchmark::State& s) {
    const int mcs = static_cast<int>(s.range(0));
    const auto n = numerology::profile("3ms", 5e6);
    tb_encoder enc(n);
    const std::size_t bytes = mcs_set::tb_bytes(mcs, n);
    std::vector<std::uint8_t> tb(bytes, 0x5a);
    std::vector<gr_complex> out(enc.resource_elements());
    for (auto _ : s) {
        enc.encode(tb.data(), tb.size(), mcs, 0, 7, out.data());
        benchmark::DoNotOptimize(out.data());
    }
    set_rate(s, 8.0 * static_cast<double>(bytes));
    s.SetLabel(mcs_set::get(mcs).name);
}
BENCHMARK(BM_tb_encode)->DenseRange(0, 7);

void BM_tb_decode(benchmark::State& s) {
    const int mcs = static_cast<int>(s.range(0));
    const auto n = numerology::profile("3ms", 5e6);
    tb_encoder enc(n);
    tb_decoder dec(n);
    auto harq = dec.make_harq_buffer();
    const std::size_t bytes = mcs_set::tb_bytes(mcs, n);
    std::mt19937_64 rng(4);
    std::vector<std::uint8_t> tb(bytes);
    for (auto& b : tb) b = static_cast<std::uint8_t>(rng());
    auto re = enc.encode(tb, mcs, 0, 7);
    const float n0 = 0.01f;  // 20 dB
    std::normal_distribution<float> g(0.0f, std::sqrt(n0 / 2));
    for (auto& v : re) v += gr_complex(g(rng), g(rng));
    const std::vector<float> nv(re.size(), n0);
    bool ndi = false;
    for (auto _ : s) {
        ndi = !ndi;
        auto r = dec.decode(re, nv, {mcs, 0, bytes, ndi, 7}, *harq);
        benchmark::DoNotOptimize(r.crc_ok);
    }
    set_rate(s, 8.0 * static_cast<double>(bytes));
    s.SetLabel(mcs_set::get(mcs).name);
}
BENCHMARK(BM_tb_decode)->DenseRange(0, 7);

void BM_header_decode(benchmark::State& s) {
    auto p = numerology::profile("evdo", 1e6).params();
    p.header_symbols = 4;
    header_codec c{numerology(p)};
    header_fields f;
    f.user = 7;
    f.slot = 99;
    const auto re = c.encode(f);
    const std::vector<float> nv(re.size(), 0.1f);
    for (auto _ : s) {
        auto r = c.decode(re, nv);
        benchmark::DoNotOptimize(r.ok());
    }
}
BENCHMARK(BM_header_decode);

}  // namespace
