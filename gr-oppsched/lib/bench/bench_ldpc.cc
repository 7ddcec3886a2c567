// Benchmarks of the 802.11n LDPC codes (ldpc.h): encoder and layered min-sum decoder
// throughput in info bits per second ("bits/s" counter), and the frame error rate (FER)
// curves behind the decoder's defaults: BPSK over real AWGN (Es = 1, sigma^2 = N0/2,
// seeded), min-sum at several (scale, max_iterations) against a float layered
// sum-product reference written here (exact phi(x) = -ln tanh(x/2) check update).
// The FER family (BM_ldpc_fer, ~30 s) reports counters FER and avg_iter; the table in
// ldpc.h comes from it. Skip it with --benchmark_filter='BM_ldpc_(encode|decode)'.
#include <benchmark/benchmark.h>
#include <gnuradio/oppsched/ldpc.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace gr::oppsched;

namespace {

std::vector<float> bpsk_awgn_llr(const std::vector<std::uint8_t>& cw, double es_n0_db,
                                 std::mt19937_64& rng) {
    const double sigma2 = 0.5 / std::pow(10.0, es_n0_db / 10.0);
    std::normal_distribution<double> noise(0.0, std::sqrt(sigma2));
    std::vector<float> llr(cw.size());
    for (std::size_t i = 0; i < cw.size(); ++i)
        llr[i] = static_cast<float>(2.0 * ((cw[i] ? -1.0 : 1.0) + noise(rng)) / sigma2);
    return llr;
}

std::vector<std::uint8_t> random_codeword(const ldpc_code& c, std::mt19937_64& rng) {
    std::vector<std::uint8_t> info(c.k());
    for (auto& b : info) b = rng() & 1u;
    return c.encode(info);
}

// ---- float layered sum-product reference (test/bench only) -----------------------------

// phi(x) = -ln(tanh(x/2)) = ln((e^x + 1) / (e^x - 1)), its own inverse on x > 0.
double phi(double x) {
    x = std::min(std::max(x, 1e-12), 40.0);
    return std::log((std::exp(x) + 1.0) / std::expm1(x));
}

class spa_reference final {
  public:
    explicit spa_reference(int max_iterations) : d_max_iter(max_iterations) {}

    //! iterations run (stops at the first all-checks-satisfied iteration)
    int decode(const ldpc_code& c, const float* llr, std::uint8_t* out) {
        const int z = c.z();
        const auto& edges = c.edges();
        const auto& rs = c.row_start();
        d_post.assign(llr, llr + c.n());
        d_msg.assign(edges.size() * z, 0.0);
        std::vector<double> t(c.max_row_degree());
        for (int it = 0; it < d_max_iter; ++it) {
            for (int r = 0; r < c.base_rows(); ++r) {
                const int e0 = rs[r], deg = rs[r + 1] - rs[r];
                for (int lane = 0; lane < z; ++lane) {
                    double sum_phi = 0.0;
                    int neg = 0;
                    for (int j = 0; j < deg; ++j) {
                        const auto& e = edges[e0 + j];
                        const int v = e.col * z + (lane + e.shift) % z;
                        t[j] = d_post[v] - d_msg[(e0 + j) * z + lane];
                        sum_phi += phi(std::fabs(t[j]));
                        neg ^= t[j] < 0.0;
                    }
                    for (int j = 0; j < deg; ++j) {
                        const auto& e = edges[e0 + j];
                        const int v = e.col * z + (lane + e.shift) % z;
                        const double mag = phi(sum_phi - phi(std::fabs(t[j])));
                        const bool s = neg ^ (t[j] < 0.0);
                        const double m = s ? -mag : mag;
                        d_msg[(e0 + j) * z + lane] = m;
                        d_post[v] = t[j] + m;
                    }
                }
            }
            for (int i = 0; i < c.n(); ++i) out[i] = d_post[i] < 0.0;
            if (c.check(out)) return it + 1;
        }
        return d_max_iter;
    }

  private:
    int d_max_iter;
    std::vector<double> d_post, d_msg;
};

const ldpc_code& code_of(int idx) {
    static const int n[] = {1944, 1944, 648};
    static const code_rate r[] = {code_rate::r1_2, code_rate::r5_6, code_rate::r1_2};
    return ldpc_code::get(n[idx], r[idx]);
}

// ---- FER curves ------------------------------------------------------------------------
// Args: code (0 = 1944 R1/2, 1 = 1944 R5/6, 2 = 648 R1/2), decoder (0 = sum-product 20
// iterations, 1.. = min-sum settings below), Es/N0 in centi-dB. One iteration = 400 frames.
struct ms_setting {
    float scale;
    int iters;
};
constexpr ms_setting ms_settings[] = {
    {0.0f, 20},                                  // 0: sum-product reference
    {0.75f, 20},   {0.8125f, 20}, {0.875f, 20},  // 1..3: scale
    {0.8125f, 10}, {0.8125f, 15}, {0.875f, 12},  // 4..6: iteration budget
    {1.0f, 20},                                  // 7: plain min-sum
};

void BM_ldpc_fer(benchmark::State& s) {
    const ldpc_code& c = code_of(static_cast<int>(s.range(0)));
    const int dec_idx = static_cast<int>(s.range(1));
    const double snr = s.range(2) / 100.0;
    constexpr int frames = 400;
    ldpc_decoder ms(ms_settings[dec_idx].iters, dec_idx ? ms_settings[dec_idx].scale : 1.0f);
    spa_reference spa(ms_settings[0].iters);
    std::vector<std::uint8_t> out(c.n());
    int errors = 0;
    long iters = 0;
    for (auto _ : s) {
        std::mt19937_64 rng(42);  // same frames and noise for every decoder
        for (int f = 0; f < frames; ++f) {
            const auto cw = random_codeword(c, rng);
            const auto llr = bpsk_awgn_llr(cw, snr, rng);
            if (dec_idx == 0) {
                iters += spa.decode(c, llr.data(), out.data());
            } else {
                iters += ms.decode(c, llr.data(), out.data()).iterations;
            }
            errors += out != cw;
        }
    }
    s.counters["FER"] = static_cast<double>(errors) / (frames * s.iterations());
    s.counters["avg_iter"] = static_cast<double>(iters) / (frames * s.iterations());
}

void fer_args(benchmark::internal::Benchmark* b) {
    // Es/N0 grids around each code's waterfall (centi-dB).
    const std::vector<std::vector<int>> grid = {
        {-225, -200, -175, -150, -125, -100},
        {150, 175, 200, 225, 250, 275},
        {-225, -200, -175, -150, -125, -100},
    };
    for (int code = 0; code < 3; ++code)
        for (int dec = 0; dec < 8; ++dec)
            for (int snr : grid[code]) b->Args({code, dec, snr});
}
BENCHMARK(BM_ldpc_fer)->Apply(fer_args)->Iterations(1)->Unit(benchmark::kMillisecond);

// ---- throughput ------------------------------------------------------------------------

void set_rate(benchmark::State& s, double bits_per_iter) {
    s.counters["bits/s"] =
        benchmark::Counter(bits_per_iter, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: code (0 = 1944 R1/2, 1 = 1944 R5/6).
void BM_ldpc_encode(benchmark::State& s) {
    const ldpc_code& c = code_of(static_cast<int>(s.range(0)));
    std::mt19937_64 rng(3);
    std::vector<std::uint8_t> info(c.k()), cw(c.n());
    for (auto& b : info) b = rng() & 1u;
    for (auto _ : s) {
        c.encode(info.data(), cw.data());
        benchmark::DoNotOptimize(cw.data());
        info[0] ^= 1;
    }
    set_rate(s, c.k());
}
BENCHMARK(BM_ldpc_encode)->Arg(0)->Arg(1);

// Args: code (0 = 1944 R1/2, 1 = 1944 R5/6), Es/N0 in centi-dB. Cycles through 64
// pre-computed noisy frames with the default decoder.
void BM_ldpc_decode(benchmark::State& s) {
    const ldpc_code& c = code_of(static_cast<int>(s.range(0)));
    const double snr = s.range(1) / 100.0;
    std::mt19937_64 rng(4);
    std::vector<std::vector<float>> frames;
    for (int f = 0; f < 64; ++f) frames.push_back(bpsk_awgn_llr(random_codeword(c, rng), snr, rng));
    ldpc_decoder dec;
    std::vector<std::uint8_t> out(c.n());
    std::size_t f = 0;
    long iters = 0;
    for (auto _ : s) {
        iters += dec.decode(c, frames[f].data(), out.data()).iterations;
        f = (f + 1) % frames.size();
    }
    set_rate(s, c.k());
    s.counters["avg_iter"] = static_cast<double>(iters) / s.iterations();
}
BENCHMARK(BM_ldpc_decode)
    ->Args({0, 100})   // 1944 R1/2, high SNR
    ->Args({0, -165})  // 1944 R1/2, FER 10% of the default decoder
    ->Args({1, 500})   // 1944 R5/6, high SNR
    ->Args({1, 245});  // 1944 R5/6, FER 10% of the default decoder

}  // namespace
