#include <gnuradio/oppsched/conv_code.h>
#include <volk/volk.h>

#if defined(__x86_64__) || defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace gr {
namespace oppsched {

namespace {

constexpr int k_states = 64;
// Tail-biting decoding by wrap-around (the technique of gr-fec's CC_TAILBITING mode):
// the trellis is run over [last W steps | all k steps | first W steps] from an unbiased
// start; the middle k decisions are taken. W = 8 constraint lengths lets the metrics
// converge before and after the block.
constexpr std::size_t k_tb_wrap = 48;
// Start-state bias of the zero-tail decoder: the metric given to the 63 states the
// encoder cannot start in (the start state gets 0). Large, but below the 8-bit ceiling so
// the kernel's saturating adds still order them.
constexpr unsigned char k_start_bias = 160;

inline unsigned parity7(unsigned x) { return static_cast<unsigned>(__builtin_parity(x)); }

// (A << 1 | B) for each 7-bit register value.
struct output_table {
    std::array<std::uint8_t, 128> v{};
    output_table() {
        for (unsigned r = 0; r < 128; ++r)
            v[r] = static_cast<std::uint8_t>((parity7(r & conv_encoder_k7::poly_a) << 1) |
                                             parity7(r & conv_encoder_k7::poly_b));
    }
};
const output_table& outputs() {
    static const output_table t;
    return t;
}

struct volk_deleter {
    void operator()(void* p) const { volk_free(p); }
};
template <class T>
using volk_ptr = std::unique_ptr<T, volk_deleter>;

template <class T>
volk_ptr<T> volk_alloc(std::size_t n) {
    void* p = volk_malloc(n * sizeof(T), volk_get_alignment());
    if (!p) throw std::bad_alloc();
    return volk_ptr<T>(static_cast<T*>(p));
}

void check_k(std::size_t k, termination t) {
    if (t == termination::tail_biting && k < 6)
        throw std::invalid_argument("viterbi.k: " + std::to_string(k) +
                                    " < 6 (tail-biting needs a full register)");
    if (k > (std::size_t(1) << 28))
        throw std::invalid_argument("viterbi.k: " + std::to_string(k) + " too large");
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Encoder

void conv_encoder_k7::encode_zero_tail(const std::uint8_t* bits, std::size_t k, std::uint8_t* out) {
    const auto& o = outputs().v;
    unsigned r = 0;
    for (std::size_t i = 0; i < k + memory; ++i) {
        const unsigned u = i < k ? (bits[i] & 1u) : 0u;
        r = ((r << 1) | u) & 0x7fu;
        out[2 * i] = o[r] >> 1;
        out[2 * i + 1] = o[r] & 1u;
    }
}

std::vector<std::uint8_t> conv_encoder_k7::encode_zero_tail(const std::vector<std::uint8_t>& bits) {
    std::vector<std::uint8_t> out(2 * (bits.size() + memory));
    encode_zero_tail(bits.data(), bits.size(), out.data());
    return out;
}

void conv_encoder_k7::encode_tail_biting(const std::uint8_t* bits, std::size_t k,
                                         std::uint8_t* out) {
    if (k < 6)
        throw std::invalid_argument("conv_encoder.k: " + std::to_string(k) +
                                    " < 6 (tail-biting needs a full register)");
    const auto& o = outputs().v;
    unsigned r = 0;
    for (std::size_t i = k - 6; i < k; ++i)  // preload: state = last 6 info bits
        r = ((r << 1) | (bits[i] & 1u)) & 0x3fu;
    for (std::size_t i = 0; i < k; ++i) {
        r = ((r << 1) | (bits[i] & 1u)) & 0x7fu;
        out[2 * i] = o[r] >> 1;
        out[2 * i + 1] = o[r] & 1u;
    }
}

std::vector<std::uint8_t> conv_encoder_k7::encode_tail_biting(
    const std::vector<std::uint8_t>& bits) {
    std::vector<std::uint8_t> out(2 * bits.size());
    encode_tail_biting(bits.data(), bits.size(), out.data());
    return out;
}

// ---------------------------------------------------------------------------------------
// Quantisers

float viterbi_decoder_k7::quant_scale(const float* llr, std::size_t n, float target) {
    // Pass 1: mean |LLR| over non-erased, finite bits. Pass 2: the same with |LLR| clipped
    // at 4x the first mean (robust against a few huge values, e.g. a tiny noise variance).
    // Long blocks are sampled with a stride of 7 (prime to every puncturing and
    // modulation period, so all bit positions are represented): >= 500 samples, 7x less
    // work. Branch-free loops with 8 partial sums, which the compiler vectorises.
    constexpr float inf = std::numeric_limits<float>::infinity();
    const std::size_t stride = n >= 4096 ? 7 : 1;
    const std::size_t m = (n + stride - 1) / stride;
    float sum[8] = {}, cnt[8] = {};
    for (std::size_t j = 0; j < m; ++j) {
        const float a = std::fabs(llr[j * stride]);
        const bool ok = a > 0.0f && a < inf;
        sum[j & 7] += ok ? a : 0.0f;
        cnt[j & 7] += ok ? 1.0f : 0.0f;
    }
    float s1 = 0.0f, c1 = 0.0f;
    for (int i = 0; i < 8; ++i) {
        s1 += sum[i];
        c1 += cnt[i];
    }
    if (!(c1 > 0.0f) || !(s1 > 0.0f)) return 0.0f;
    const float clip = 4.0f * s1 / c1;
    float sum2[8] = {};
    for (std::size_t j = 0; j < m; ++j) {
        const float a = std::fabs(llr[j * stride]);
        const bool ok = a > 0.0f && a < inf;
        sum2[j & 7] += ok ? std::min(a, clip) : 0.0f;
    }
    float s2 = 0.0f;
    for (int i = 0; i < 8; ++i) s2 += sum2[i];
    return s2 > 0.0f ? target * c1 / s2 : 0.0f;
}

namespace {
// round-half-away(v) saturated to [-lim, lim]; NaN -> 0 (erasure). Branch-free (no libm
// call) so the quantiser loops vectorise.
inline int sat_round(float v, float lim) {
    v = (v == v) ? v : 0.0f;
    v = v < -lim ? -lim : (v > lim ? lim : v);
    return static_cast<int>(v + std::copysign(0.5f, v));
}
}  // namespace
void viterbi_decoder_k7::quantise(const float* llr, std::size_t n, float target,
                                  std::uint8_t* syms) {
    const float q = quant_scale(llr, n, target);
    for (std::size_t i = 0; i < n; ++i)
        syms[i] = static_cast<std::uint8_t>(128 - sat_round(llr[i] * q, 127.0f));
}

void viterbi_decoder_k7::quantise16(const float* llr, std::size_t n, float target,
                                    std::int16_t* out) {
    const float q = quant_scale(llr, n, target);
    const float lim = static_cast<float>(acs16_llr_max);
    std::size_t i = 0;
#if defined(__SSE2__)
    // 8 per iteration: scale, NaN -> 0, clamp, round to nearest, pack to int16.
    const __m128 vq = _mm_set1_ps(q), vlo = _mm_set1_ps(-lim), vhi = _mm_set1_ps(lim);
    for (; i + 8 <= n; i += 8) {
        __m128 a = _mm_mul_ps(_mm_loadu_ps(llr + i), vq);
        __m128 b = _mm_mul_ps(_mm_loadu_ps(llr + i + 4), vq);
        a = _mm_and_ps(a, _mm_cmpord_ps(a, a));
        b = _mm_and_ps(b, _mm_cmpord_ps(b, b));
        a = _mm_min_ps(_mm_max_ps(a, vlo), vhi);
        b = _mm_min_ps(_mm_max_ps(b, vlo), vhi);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         _mm_packs_epi32(_mm_cvtps_epi32(a), _mm_cvtps_epi32(b)));
    }
#endif
    for (; i < n; ++i) out[i] = static_cast<std::int16_t>(sat_round(llr[i] * q, lim));
}

// ---------------------------------------------------------------------------------------
// Decoder

struct viterbi_decoder_k7::workspace {
    // volk8
    volk_ptr<unsigned char> metrics;    // 2 x 64, X then Y
    volk_ptr<unsigned char> branchtab;  // 2 x 32
    volk_ptr<unsigned char> syms8;      // kernel input, 2 per step
    std::vector<std::uint8_t> q8;       // quantised block before wrapping
    // acs16
    std::vector<std::int16_t> syms16, q16;
    std::array<std::int16_t, k_states> final16{};
    // both
    std::vector<std::uint64_t>
        decisions;  // bit s of step i: survivor of state s came from (s>>1)|32
    std::size_t cap_steps = 0;
    unsigned final_best = 0;  // best end state (tail-biting)

    void reserve(std::size_t steps, viterbi_backend b) {
        if (steps > decisions.size()) decisions.resize(steps);
        if (b == viterbi_backend::volk8 && steps > cap_steps) {
            syms8 = volk_alloc<unsigned char>(2 * steps + 16);
            cap_steps = steps;
        }
        if (b == viterbi_backend::acs16 && syms16.size() < 2 * steps) syms16.resize(2 * steps);
    }
};

viterbi_decoder_k7::viterbi_decoder_k7(std::size_t max_info_bits, viterbi_backend backend,
                                       float quant_target)
    : d_ws(std::make_unique<workspace>()), d_backend(backend), d_target(quant_target) {
    const bool volk = backend == viterbi_backend::volk8;
    if (backend != viterbi_backend::volk8 && backend != viterbi_backend::acs16)
        throw std::invalid_argument(
            "viterbi.backend: " + std::to_string(static_cast<int>(backend)) + " unknown");
    if (d_target == 0.0f) d_target = volk ? default_quant_target_volk8 : default_quant_target_acs16;
    const float max = volk ? 127.0f : static_cast<float>(acs16_llr_max);
    if (!(d_target > 0.0f && d_target <= max))
        throw std::invalid_argument("viterbi.quant_target: " + std::to_string(quant_target) +
                                    " not in (0," + std::to_string(static_cast<int>(max)) + "]");
    if (volk) {
        d_ws->metrics = volk_alloc<unsigned char>(2 * k_states);
        d_ws->branchtab = volk_alloc<unsigned char>(k_states);
        // Branchtab[i*32 + s]: expected output i (0 = A, 1 = B) on the transition from
        // state s (s < 32) with input 0, i.e. register 2s; 255 = bit 1 (as gr-fec's
        // create_viterbi).
        for (unsigned s = 0; s < 32; ++s) {
            d_ws->branchtab.get()[s] = parity7((2 * s) & conv_encoder_k7::poly_a) ? 255 : 0;
            d_ws->branchtab.get()[32 + s] = parity7((2 * s) & conv_encoder_k7::poly_b) ? 255 : 0;
        }
    }
    d_ws->reserve(max_info_bits + 2 * k_tb_wrap + 8, backend);
}

viterbi_decoder_k7::~viterbi_decoder_k7() = default;

void viterbi_decoder_k7::run_volk8(std::size_t steps, bool tb) {
    workspace& w = *d_ws;
    unsigned char* X = w.metrics.get();
    unsigned char* Y = X + k_states;
    if (tb) {
        std::memset(X, 0, k_states);  // unbiased: any start state
    } else {
        std::memset(X, k_start_bias, k_states);
        X[0] = 0;  // the encoder starts in state 0 (8-bit metrics are costs: minimised)
    }
    auto* dec = reinterpret_cast<unsigned char*>(w.decisions.data());
    std::memset(dec, 0, 8 * steps);
    // The kernel runs framebits + excess steps; the split is irrelevant to it (gr-fec
    // passes the tail as excess). Decision layout: bit s of the step's 64-bit word.
    volk_8u_x4_conv_k7_r2_8u(Y, X, w.syms8.get(), dec, static_cast<unsigned>(steps - 6), 6,
                             w.branchtab.get());
    // After an even number of steps the final metrics are back in X, else in Y.
    const unsigned char* m = (steps % 2 == 0) ? X : Y;
    w.final_best = static_cast<unsigned>(std::min_element(m, m + k_states) - m);
}

namespace {
// Sign (+1: expected bit 0) of output A / B on the transition i -> 2i (register 2i), i < 32.
struct acs_signs {
    std::array<std::int16_t, 32> a{}, b{};
    acs_signs() {
        for (unsigned i = 0; i < 32; ++i) {
            a[i] = parity7((2 * i) & conv_encoder_k7::poly_a) ? -1 : 1;
            b[i] = parity7((2 * i) & conv_encoder_k7::poly_b) ? -1 : 1;
        }
    }
};
const acs_signs& signs() {
    static const acs_signs s;
    return s;
}
constexpr std::int16_t k_minus_inf16 = -16000;
}  // namespace

// Butterfly i (0..31), branch metric b = sA[i] LA + sB[i] LB (correlation, maximised):
//   new[2i]   = max(M[i] + b, M[i+32] - b)   (register 2i resp. 2i+64: both outputs flip)
//   new[2i+1] = max(M[i] - b, M[i+32] + b)
// decision bit of the new state = 1 when the survivor comes from i+32.
// Each kernel writes one 64-bit decision word per step and the final metrics.
namespace {

using acs_kernel = void (*)(const std::int16_t* sy, std::size_t steps, bool tb, std::uint64_t* dec,
                            std::int16_t* final_metrics);

[[maybe_unused]] void acs16_scalar(const std::int16_t* sy, std::size_t steps, bool tb,
                                   std::uint64_t* dec, std::int16_t* fin) {
    const auto& sg = signs();
    std::array<std::int32_t, k_states> m{}, nm{};
    m.fill(tb ? 0 : k_minus_inf16);
    if (!tb) m[0] = 0;
    for (std::size_t t = 0; t < steps; ++t) {
        const std::int32_t la = sy[2 * t], lb = sy[2 * t + 1];
        std::uint64_t d = 0;
        for (unsigned i = 0; i < 32; ++i) {
            const std::int32_t b = sg.a[i] * la + sg.b[i] * lb;
            const std::int32_t m0 = m[i] + b, m1 = m[i + 32] - b;
            const std::int32_t m2 = m[i] - b, m3 = m[i + 32] + b;
            nm[2 * i] = std::max(m0, m1);
            nm[2 * i + 1] = std::max(m2, m3);
            d |= static_cast<std::uint64_t>(m1 > m0) << (2 * i);
            d |= static_cast<std::uint64_t>(m3 > m2) << (2 * i + 1);
        }
        dec[t] = d;
        const std::int32_t best = *std::max_element(nm.begin(), nm.end());
        for (unsigned s = 0; s < k_states; ++s) m[s] = std::max(nm[s] - best, -30000);
    }
    for (unsigned s = 0; s < k_states; ++s) fin[s] = static_cast<std::int16_t>(m[s]);
}

#if defined(__SSE2__)
void acs16_sse2(const std::int16_t* sy, std::size_t steps, bool tb, std::uint64_t* dec,
                std::int16_t* fin) {
    const auto& sg = signs();
    __m128i lo[4], hi[4], sa[4], sb[4];
    for (int v = 0; v < 4; ++v) {
        sa[v] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sg.a.data() + 8 * v));
        sb[v] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sg.b.data() + 8 * v));
        lo[v] = hi[v] = _mm_set1_epi16(tb ? 0 : k_minus_inf16);
    }
    if (!tb) lo[0] = _mm_insert_epi16(lo[0], 0, 0);  // start state 0
    for (std::size_t t = 0; t < steps; ++t) {
        const __m128i la = _mm_set1_epi16(sy[2 * t]);
        const __m128i lb = _mm_set1_epi16(sy[2 * t + 1]);
        __m128i n[8];
        std::uint64_t d = 0;
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
            const __m128i b = _mm_add_epi16(_mm_mullo_epi16(sa[v], la), _mm_mullo_epi16(sb[v], lb));
            const __m128i m0 = _mm_adds_epi16(lo[v], b), m1 = _mm_subs_epi16(hi[v], b);
            const __m128i m2 = _mm_subs_epi16(lo[v], b), m3 = _mm_adds_epi16(hi[v], b);
            const __m128i ev = _mm_max_epi16(m0, m1), od = _mm_max_epi16(m2, m3);
            const __m128i de = _mm_cmpgt_epi16(m1, m0), dd = _mm_cmpgt_epi16(m3, m2);
            n[2 * v] = _mm_unpacklo_epi16(ev, od);      // states 16v + 0..7
            n[2 * v + 1] = _mm_unpackhi_epi16(ev, od);  // states 16v + 8..15
            const __m128i dp =
                _mm_packs_epi16(_mm_unpacklo_epi16(de, dd), _mm_unpackhi_epi16(de, dd));
            d |= static_cast<std::uint64_t>(static_cast<std::uint16_t>(_mm_movemask_epi8(dp)))
                 << (16 * v);
        }
        dec[t] = d;
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
            lo[v] = n[v];
            hi[v] = n[4 + v];
        }
        if ((t & 3) == 3) {  // renormalise by the best metric
            __m128i mx = _mm_max_epi16(_mm_max_epi16(lo[0], lo[1]), _mm_max_epi16(lo[2], lo[3]));
            mx = _mm_max_epi16(
                mx, _mm_max_epi16(_mm_max_epi16(hi[0], hi[1]), _mm_max_epi16(hi[2], hi[3])));
            mx = _mm_max_epi16(mx, _mm_shuffle_epi32(mx, _MM_SHUFFLE(1, 0, 3, 2)));
            mx = _mm_max_epi16(mx, _mm_shuffle_epi32(mx, _MM_SHUFFLE(2, 3, 0, 1)));
            mx = _mm_max_epi16(mx, _mm_shufflelo_epi16(_mm_shufflehi_epi16(mx, 0xB1), 0xB1));
#pragma GCC unroll 4
            for (int v = 0; v < 4; ++v) {
                lo[v] = _mm_subs_epi16(lo[v], mx);
                hi[v] = _mm_subs_epi16(hi[v], mx);
            }
        }
    }
    for (int v = 0; v < 4; ++v) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(fin + 8 * v), lo[v]);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(fin + 32 + 8 * v), hi[v]);
    }
}
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OPPSCHED_HAVE_AVX2_KERNEL 1
// Same algorithm, 16 butterflies per 256-bit vector (2 vectors). AVX2 unpacks work per
// 128-bit lane, so the interleaved metrics come out as [0..7 | 16..23] and [8..15 | 24..31]
// and a cross-lane permute restores natural order; packs + movemask of the decisions
// produce natural order directly. Compiled for AVX2 only here, chosen at run time.
__attribute__((target("avx2"))) void acs16_avx2(const std::int16_t* sy, std::size_t steps, bool tb,
                                                std::uint64_t* dec, std::int16_t* fin) {
    const auto& sg = signs();
    __m256i lo[2], hi[2], sa[2], sb[2];
    for (int v = 0; v < 2; ++v) {
        sa[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sg.a.data() + 16 * v));
        sb[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sg.b.data() + 16 * v));
        lo[v] = hi[v] = _mm256_set1_epi16(tb ? 0 : k_minus_inf16);
    }
    if (!tb) lo[0] = _mm256_insert_epi16(lo[0], 0, 0);
    for (std::size_t t = 0; t < steps; ++t) {
        const __m256i la = _mm256_set1_epi16(sy[2 * t]);
        const __m256i lb = _mm256_set1_epi16(sy[2 * t + 1]);
        __m256i n[4];
        std::uint64_t d = 0;
#pragma GCC unroll 2
        for (int v = 0; v < 2; ++v) {
            const __m256i b =
                _mm256_add_epi16(_mm256_mullo_epi16(sa[v], la), _mm256_mullo_epi16(sb[v], lb));
            const __m256i m0 = _mm256_adds_epi16(lo[v], b), m1 = _mm256_subs_epi16(hi[v], b);
            const __m256i m2 = _mm256_subs_epi16(lo[v], b), m3 = _mm256_adds_epi16(hi[v], b);
            const __m256i ev = _mm256_max_epi16(m0, m1), od = _mm256_max_epi16(m2, m3);
            const __m256i de = _mm256_cmpgt_epi16(m1, m0), dd = _mm256_cmpgt_epi16(m3, m2);
            const __m256i a = _mm256_unpacklo_epi16(ev, od);       // states [0..7 | 16..23] + 32v
            const __m256i c = _mm256_unpackhi_epi16(ev, od);       // states [8..15 | 24..31] + 32v
            n[2 * v] = _mm256_permute2x128_si256(a, c, 0x20);      // states 32v + 0..15
            n[2 * v + 1] = _mm256_permute2x128_si256(a, c, 0x31);  // states 32v + 16..31
            const __m256i dp =
                _mm256_packs_epi16(_mm256_unpacklo_epi16(de, dd), _mm256_unpackhi_epi16(de, dd));
            d |= static_cast<std::uint64_t>(static_cast<std::uint32_t>(_mm256_movemask_epi8(dp)))
                 << (32 * v);
        }
        dec[t] = d;
        lo[0] = n[0];
        lo[1] = n[1];
        hi[0] = n[2];
        hi[1] = n[3];
        if ((t & 3) == 3) {
            __m256i mx =
                _mm256_max_epi16(_mm256_max_epi16(lo[0], lo[1]), _mm256_max_epi16(hi[0], hi[1]));
            mx = _mm256_max_epi16(mx, _mm256_permute2x128_si256(mx, mx, 0x01));
            mx = _mm256_max_epi16(mx, _mm256_shuffle_epi32(mx, _MM_SHUFFLE(1, 0, 3, 2)));
            mx = _mm256_max_epi16(mx, _mm256_shuffle_epi32(mx, _MM_SHUFFLE(2, 3, 0, 1)));
            mx = _mm256_max_epi16(mx,
                                  _mm256_shufflelo_epi16(_mm256_shufflehi_epi16(mx, 0xB1), 0xB1));
#pragma GCC unroll 2
            for (int v = 0; v < 2; ++v) {
                lo[v] = _mm256_subs_epi16(lo[v], mx);
                hi[v] = _mm256_subs_epi16(hi[v], mx);
            }
        }
    }
    for (int v = 0; v < 2; ++v) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(fin + 16 * v), lo[v]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(fin + 32 + 16 * v), hi[v]);
    }
}
#endif

acs_kernel pick_acs16() {
#if defined(OPPSCHED_HAVE_AVX2_KERNEL)
    if (!std::getenv("OPPSCHED_NO_AVX2") && __builtin_cpu_supports("avx2")) return acs16_avx2;
#endif
#if defined(__SSE2__)
    return acs16_sse2;
#else
    return acs16_scalar;
#endif
}

}  // namespace

const char* viterbi_decoder_k7::acs16_kernel_name() {
    static const char* name = [] {
        const acs_kernel k = pick_acs16();
#if defined(OPPSCHED_HAVE_AVX2_KERNEL)
        if (k == acs16_avx2) return "avx2";
#endif
#if defined(__SSE2__)
        if (k == acs16_sse2) return "sse2";
#endif
        return "scalar";
    }();
    return name;
}

void viterbi_decoder_k7::run_acs16(std::size_t steps, bool tb) {
    static const acs_kernel kernel = pick_acs16();
    workspace& w = *d_ws;
    kernel(w.syms16.data(), steps, tb, w.decisions.data(), w.final16.data());
    w.final_best = static_cast<unsigned>(std::max_element(w.final16.begin(), w.final16.end()) -
                                         w.final16.begin());
}

void viterbi_decoder_k7::decode(const float* llr, std::size_t k, termination t,
                                std::uint8_t* bits) {
    check_k(k, t);
    workspace& w = *d_ws;
    const bool tb = t == termination::tail_biting;
    const std::size_t wrap = tb ? k_tb_wrap : 0;
    const std::size_t block_steps = tb ? k : k + conv_encoder_k7::memory;
    const std::size_t steps = block_steps + 2 * wrap;
    w.reserve(steps, d_backend);

    // Quantise; for tail-biting, wrap: run step i covers block step (i - wrap) mod k.
    auto wrap_index = [&](std::size_t i) { return (i + k - wrap % k) % k; };
    if (d_backend == viterbi_backend::volk8) {
        unsigned char* syms = w.syms8.get();
        if (!tb) {
            quantise(llr, 2 * block_steps, d_target, syms);
        } else {
            w.q8.resize(2 * block_steps);
            quantise(llr, 2 * block_steps, d_target, w.q8.data());
            for (std::size_t i = 0; i < steps; ++i) {
                const std::size_t b = wrap_index(i);
                syms[2 * i] = w.q8[2 * b];
                syms[2 * i + 1] = w.q8[2 * b + 1];
            }
        }
        run_volk8(steps, tb);
    } else {
        std::int16_t* syms = w.syms16.data();
        if (!tb) {
            quantise16(llr, 2 * block_steps, d_target, syms);
        } else {
            w.q16.resize(2 * block_steps);
            quantise16(llr, 2 * block_steps, d_target, w.q16.data());
            for (std::size_t i = 0; i < steps; ++i) {
                const std::size_t b = wrap_index(i);
                syms[2 * i] = w.q16[2 * b];
                syms[2 * i + 1] = w.q16[2 * b + 1];
            }
        }
        run_acs16(steps, tb);
    }

    // Trace-back from state 0 (zero tail) or the best end state (tail-biting). The input
    // bit of step i is the newest register bit of the state after it: s_{i+1} & 1.
    unsigned state = tb ? w.final_best : 0u;
    const std::uint64_t* dec = w.decisions.data();
    const std::size_t first = wrap;
    const std::size_t last = wrap + k;  // info steps [first, last)
    for (std::size_t i = steps; i-- > first;) {
        if (i < last) bits[i - first] = static_cast<std::uint8_t>(state & 1u);
        const unsigned d = static_cast<unsigned>((dec[i] >> state) & 1u);
        state = (state >> 1) | (d << 5);
    }
}

std::vector<std::uint8_t> viterbi_decoder_k7::decode(const std::vector<float>& llr, std::size_t k,
                                                     termination t) {
    const std::size_t need = t == termination::tail_biting ? 2 * k : 2 * (k + 6);
    if (llr.size() != need)
        throw std::invalid_argument("viterbi.llr: " + std::to_string(llr.size()) +
                                    " values, expected " + std::to_string(need));
    std::vector<std::uint8_t> bits(k);
    decode(llr.data(), k, t, bits.data());
    return bits;
}

// ---------------------------------------------------------------------------------------
// Float reference

void viterbi_k7_reference(const float* llr, std::size_t k, termination t, std::uint8_t* bits) {
    check_k(k, t);
    const bool tb = t == termination::tail_biting;
    const std::size_t wrap = tb ? k_tb_wrap : 0;
    const std::size_t block_steps = tb ? k : k + conv_encoder_k7::memory;
    const std::size_t steps = block_steps + 2 * wrap;
    const auto& o = outputs().v;
    constexpr float ninf = -std::numeric_limits<float>::infinity();

    std::array<float, k_states> m{}, nm{};
    if (tb) {
        m.fill(0.0f);
    } else {
        m.fill(ninf);
        m[0] = 0.0f;
    }
    std::vector<std::uint64_t> dec(steps, 0);
    for (std::size_t i = 0; i < steps; ++i) {
        const std::size_t b = tb ? (i + k - wrap % k) % k : i;
        float la = llr[2 * b], lb = llr[2 * b + 1];
        if (!(la == la)) la = 0.0f;
        if (!(lb == lb)) lb = 0.0f;
        std::uint64_t d = 0;
        for (unsigned s = 0; s < k_states; ++s) {
            const unsigned p0 = s >> 1, p1 = p0 | 32u;
            const unsigned r0 = (p0 << 1) | (s & 1u), r1 = (p1 << 1) | (s & 1u);
            const float b0 = ((o[r0] >> 1) ? -la : la) + ((o[r0] & 1u) ? -lb : lb);
            const float b1 = ((o[r1] >> 1) ? -la : la) + ((o[r1] & 1u) ? -lb : lb);
            const float c0 = m[p0] + b0, c1 = m[p1] + b1;
            if (c1 > c0) {
                nm[s] = c1;
                d |= std::uint64_t(1) << s;
            } else {
                nm[s] = c0;
            }
        }
        dec[i] = d;
        // renormalise to keep float precision over long blocks
        const float best = *std::max_element(nm.begin(), nm.end());
        for (unsigned s = 0; s < k_states; ++s) m[s] = nm[s] - best;
    }
    unsigned state = 0;
    if (tb) state = static_cast<unsigned>(std::max_element(m.begin(), m.end()) - m.begin());
    const std::size_t first = wrap, last = wrap + k;
    for (std::size_t i = steps; i-- > 0;) {
        if (i >= first && i < last) bits[i - first] = static_cast<std::uint8_t>(state & 1u);
        const unsigned d = static_cast<unsigned>((dec[i] >> state) & 1u);
        state = (state >> 1) | (d << 5);
        if (i == first) break;
    }
}

}  // namespace oppsched
}  // namespace gr
