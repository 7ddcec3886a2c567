// IEEE 802.11n LDPC codes (802.11-2016 §19.3.11.7, Annex F): systematic dual-diagonal
// encoder and layered normalized min-sum decoder. See ldpc.h.
#include <gnuradio/oppsched/ldpc.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gr {
namespace oppsched {

namespace ldpc_detail {
// ldpc_tables.cc: the Annex F base matrices (nullptr for an unknown n).
const std::int8_t* base_table(int n, code_rate rate);
}  // namespace ldpc_detail

namespace {

constexpr int max_z = 81;  // Z of n = 1944, the largest circulant
// Decoder lane block: Z is rounded up to a multiple of this (28, 56, 84) and the per-lane
// loops step one vector at a time.
constexpr int lanes = 4;
// Scratch is laid out for the widest lane block (AVX2, 8 lanes: Z rounded up to 32, 56, 88).
constexpr int max_lanes = 8;
constexpr int padded_max(int z) { return (z + max_lanes - 1) / max_lanes * max_lanes; }

// 4-lane float / int32 vectors (GCC/Clang vector extensions: one SSE2 / NEON register,
// the x86-64 baseline, so no -march flag is needed), and 8-lane ones for the AVX2 build of
// the layer loop (selected at run time). Branch-free lane arithmetic; loads and stores
// through memcpy (unaligned, no aliasing assumptions). The 8-lane helpers are only ever
// inlined into the function compiled for AVX2 (always_inline).
#define OPPSCHED_LANE_INLINE inline __attribute__((always_inline))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // 32-byte vectors never cross a call boundary
typedef float v4f __attribute__((vector_size(16)));
typedef std::int32_t v4i __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));
typedef std::int32_t v8i __attribute__((vector_size(32)));
static_assert(sizeof(v4f) == lanes * sizeof(float), "lane block");
static_assert(sizeof(v8f) == max_lanes * sizeof(float), "lane block");

template <typename V>
OPPSCHED_LANE_INLINE V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <typename V>
OPPSCHED_LANE_INLINE void store(float* p, V v) {
    std::memcpy(p, &v, sizeof v);
}
template <typename F, typename I>
OPPSCHED_LANE_INLINE F as_f(I v) {
    F f;
    std::memcpy(&f, &v, sizeof f);
    return f;
}
template <typename I, typename F>
OPPSCHED_LANE_INLINE I as_i(F v) {
    I i;
    std::memcpy(&i, &v, sizeof i);
    return i;
}
constexpr std::int32_t sign_bit = INT32_MIN;
template <typename I, typename F>
OPPSCHED_LANE_INLINE I sign_bits(F v) {
    return as_i<I>(v) & sign_bit;
}
template <typename I, typename F>
OPPSCHED_LANE_INLINE F abs_of(F v) {
    return as_f<F>(as_i<I>(v) & INT32_MAX);
}
template <typename I, typename F>
OPPSCHED_LANE_INLINE F with_sign_flipped(F v, I bits) {
    return as_f<F>(as_i<I>(v) ^ bits);
}
//! lane-wise mask ? a : b (mask lanes all ones or all zeros)
template <typename I, typename F>
OPPSCHED_LANE_INLINE F select(I mask, F a, F b) {
    return as_f<F>((mask & as_i<I>(a)) | (~mask & as_i<I>(b)));
}
template <typename I>
OPPSCHED_LANE_INLINE I select_i(I mask, I a, I b) {
    return (mask & a) | (~mask & b);
}

int rate_index(code_rate rate) {
    const int r = static_cast<int>(rate);
    if (r < 0 || r > 3)
        throw std::invalid_argument("ldpc.rate: " + std::to_string(r) + " not a code_rate");
    return r;
}

// Block rows of the base matrix: 24 (1 - R) = 12, 8, 6, 4 for R = 1/2, 2/3, 3/4, 5/6.
int rows_of(code_rate rate) {
    static constexpr int rows[4] = {12, 8, 6, 4};
    return rows[rate_index(rate)];
}

// dst[z] ^= src[(z + s) mod Z]: the product of the circulant P^s with a Z-bit block, as
// two contiguous segments so the loops vectorise.
inline void rot_xor(std::uint8_t* dst, const std::uint8_t* src, int s, int z) {
    const int head = z - s;
    for (int i = 0; i < head; ++i) dst[i] ^= src[i + s];
    for (int i = head; i < z; ++i) dst[i] ^= src[i - head];
}

// Solves P^s dst = src: dst[w] = src[(w - s) mod Z] (two contiguous segments).
inline void unrot_copy(std::uint8_t* dst, const std::uint8_t* src, int s, int z) {
    const int back = (z - s) % z;  // dst[w] = src[(w + back) mod Z]
    const int head = z - back;
    for (int i = 0; i < head; ++i) dst[i] = src[i + back];
    for (int i = head; i < z; ++i) dst[i] = src[i - head];
}

// Early termination: H c = 0 for the hard decisions c = (post < 0) (NaN and -0 give 0, as
// in the output codeword), on Z-bit words: block column c packed into one 128-bit word
// (bit w = variable c Z + w, Z <= 81), the circulant P^s a rotation by s. The same answer
// as ldpc_code::check on the hard decisions, at ~2 word operations per edge instead of Z
// byte operations, and without writing the decisions every iteration.
typedef unsigned __int128 u128;
inline u128 column_bits(const float* p, int z) {
    u128 w = 0;
    int i = 0;
#if defined(__SSE2__)
    const __m128 zero = _mm_setzero_ps();
    for (; i + 4 <= z; i += 4)
        w |= static_cast<u128>(
                 static_cast<unsigned>(_mm_movemask_ps(_mm_cmplt_ps(_mm_loadu_ps(p + i), zero))))
             << i;
#endif
    for (; i < z; ++i) w |= static_cast<u128>(p[i] < 0.0f) << i;
    return w;
}
// bit w of the result = bit (w + s) mod Z of x (x has Z bits; 0 <= s < Z)
inline u128 rotate_bits(u128 x, int s, int z) { return (x >> s) | (x << (z - s)); }

// out[i] = llr[i] clamped to [-lim, lim], NaN -> 0 (an erasure); 4 lanes at a time, the
// same comparisons as the scalar tail (std::max, then std::min).
void clamp_llrs(const float* llr, int n, float lim, float* out) {
    int i = 0;
    const v4f hi = v4f{} + lim, lo = v4f{} - lim;
    for (; i + lanes <= n; i += lanes) {
        v4f v = load<v4f>(llr + i);
        v = select(v == v, v, v4f{});
        v = select(v < lo, lo, v);
        store(out + i, select(hi < v, hi, v));
    }
    for (; i < n; ++i) {
        float v = llr[i];
        v = (v == v) ? v : 0.0f;
        out[i] = std::min(std::max(v, -lim), lim);
    }
}

// out[i] = post[i] < 0 (NaN and -0 give 0), 16 at a time with SSE2.
void hard_decisions(const float* post, int n, std::uint8_t* out) {
    int i = 0;
#if defined(__SSE2__)
    const __m128 zero = _mm_setzero_ps();
    const __m128i one = _mm_set1_epi8(1);
    for (; i + 16 <= n; i += 16) {
        const __m128i a = _mm_castps_si128(_mm_cmplt_ps(_mm_loadu_ps(post + i), zero));
        const __m128i b = _mm_castps_si128(_mm_cmplt_ps(_mm_loadu_ps(post + i + 4), zero));
        const __m128i c = _mm_castps_si128(_mm_cmplt_ps(_mm_loadu_ps(post + i + 8), zero));
        const __m128i d = _mm_castps_si128(_mm_cmplt_ps(_mm_loadu_ps(post + i + 12), zero));
        const __m128i bytes = _mm_packs_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, d));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_and_si128(bytes, one));
    }
#endif
    for (; i < n; ++i) out[i] = post[i] < 0.0f ? 1 : 0;
}

bool parity_ok(const ldpc_code& code, const float* post) {
    const int z = code.z();
    u128 col[ldpc_code::base_cols];
    for (int c = 0; c < ldpc_code::base_cols; ++c) col[c] = column_bits(post + c * z, z);
    const u128 mask = (static_cast<u128>(1) << z) - 1;
    const auto& edges = code.edges();
    const auto& row_start = code.row_start();
    for (int r = 0; r < code.base_rows(); ++r) {
        u128 acc = 0;
        for (int e = row_start[r]; e < row_start[r + 1]; ++e)
            acc ^= rotate_bits(col[edges[e].col], edges[e].shift, z);
        if (acc & mask) return false;
    }
    return true;
}

// The layers of one decode (see ldpc_decoder::decode) on lane blocks of VF / VI: 4 lanes
// (SSE2, the baseline) or 8 (AVX2). The float operations per lane are the same in both, so
// the results are bit-identical; Z is padded to a multiple of the lane count.
template <typename VF, typename VI>
OPPSCHED_LANE_INLINE ldpc_decode_stats layers(const ldpc_code& code, int max_iter, float scale,
                                              float* post, float* msg, float* tmp, float* min1,
                                              float* min2, float* sign, float* argmin) {
    constexpr int L = static_cast<int>(sizeof(VF) / sizeof(float));
    const int z = code.z();
    const int zp = (z + L - 1) / L * L;
    const auto& edges = code.edges();
    const auto& row_start = code.row_start();
    const VF vbig = VF{} + 3.0e38f;
    const VF vscale = VF{} + scale;
    ldpc_decode_stats st;
    for (int it = 1; it <= max_iter; ++it) {
        const bool first = it == 1;
        for (int r = 0; r < code.base_rows(); ++r) {
            const int e0 = row_start[r];
            const int deg = row_start[r + 1] - e0;
            for (int b = 0; b < zp; b += L) {
                store(min1 + b, vbig);
                store(min2 + b, vbig);
                store(sign + b, VI{});
                store(argmin + b, VI{});
            }
            for (int j = 0; j < deg; ++j) {
                const float* p = post + edges[e0 + j].col * z;
                const float* m = msg + static_cast<std::size_t>(e0 + j) * zp;
                float* t = tmp + j * zp;
                const int s = edges[e0 + j].shift;
                std::copy(p + s, p + z, t);        // lanes [0, Z - s)
                std::copy(p, p + s, t + (z - s));  // lanes [Z - s, Z)
                const VI vj = VI{} + j;
                for (int b = 0; b < zp; b += L) {
                    // first iteration: msg = 0 and t - 0 = t exactly (also for -0), so the
                    // messages are neither cleared nor read
                    const VF tv = first ? load<VF>(t + b) : load<VF>(t + b) - load<VF>(m + b);
                    store(t + b, tv);
                    const VF av = abs_of<VI>(tv);
                    const VF m1 = load<VF>(min1 + b);
                    const VI lt = av < m1;
                    const VF hi = select(lt, m1, av);  // max(|t|, min1)
                    const VF m2 = load<VF>(min2 + b);
                    store(min2 + b, select(hi < m2, hi, m2));
                    store(min1 + b, select(lt, av, m1));
                    store(argmin + b, select_i(lt, vj, load<VI>(argmin + b)));
                    store(sign + b, load<VI>(sign + b) ^ sign_bits<VI>(tv));
                }
            }
            for (int j = 0; j < deg; ++j) {
                float* p = post + edges[e0 + j].col * z;
                float* m = msg + static_cast<std::size_t>(e0 + j) * zp;
                float* t = tmp + j * zp;
                const VI vj = VI{} + j;
                for (int b = 0; b < zp; b += L) {
                    const VF tv = load<VF>(t + b);
                    const VF mag = vscale * select(load<VI>(argmin + b) == vj, load<VF>(min2 + b),
                                                   load<VF>(min1 + b));
                    // sign of the product over the other edges = total sign ^ own sign
                    const VF mv = with_sign_flipped(mag, load<VI>(sign + b) ^ sign_bits<VI>(tv));
                    store(m + b, mv);
                    store(t + b, tv + mv);  // new posterior
                }
                const int s = edges[e0 + j].shift;
                std::copy(t, t + (z - s), p + s);
                std::copy(t + (z - s), t + z, p);
            }
        }
        st.iterations = it;
        if (parity_ok(code, post)) {
            st.converged = true;
            break;
        }
    }
    return st;
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2"))) ldpc_decode_stats layers_avx2(const ldpc_code& code, int max_iter,
                                                              float scale, float* post, float* msg,
                                                              float* tmp, float* min1, float* min2,
                                                              float* sign, float* argmin) {
    return layers<v8f, v8i>(code, max_iter, scale, post, msg, tmp, min1, min2, sign, argmin);
}
#endif
#pragma GCC diagnostic pop

}  // namespace

constexpr int ldpc_code::lengths[3];

ldpc_code::ldpc_code(int n, code_rate rate) : d_n(n), d_rate(rate) {
    const std::int8_t* table = ldpc_detail::base_table(n, rate);
    if (n != 648 && n != 1296 && n != 1944)
        throw std::invalid_argument("ldpc.n: " + std::to_string(n) + " not in {648, 1296, 1944}");
    d_rows = rows_of(rate);
    d_z = n / base_cols;
    d_k = n - d_rows * d_z;
    d_base.assign(table, table + d_rows * base_cols);

    d_row_start.reserve(d_rows + 1);
    for (int r = 0; r < d_rows; ++r) {
        d_row_start.push_back(static_cast<int>(d_edges.size()));
        for (int c = 0; c < base_cols; ++c) {
            const int s = d_base[r * base_cols + c];
            if (s >= 0) d_edges.push_back({c, s});
        }
        d_max_row_degree =
            std::max(d_max_row_degree, static_cast<int>(d_edges.size()) - d_row_start.back());
    }
    d_row_start.push_back(static_cast<int>(d_edges.size()));

    // The encoder relies on 802.11n's parity structure (§19.3.11.7.3 / Annex F): the first
    // parity column kb has three circulants, the top and bottom ones equal (they cancel when
    // all block rows are summed); columns kb+1.. are a staircase of identities. Checked here
    // once, the tables being data (test_ldpc.cc pins the same property).
    const int kb = base_cols - d_rows;
    const int top = d_base[kb];
    const int bottom = d_base[(d_rows - 1) * base_cols + kb];
    int mids = 0;
    for (int r = 1; r + 1 < d_rows; ++r) {
        const int s = d_base[r * base_cols + kb];
        if (s >= 0) {
            d_mid_row = r;
            d_mid_shift = s;
            ++mids;
        }
    }
    bool ok = top >= 0 && top == bottom && mids == 1;
    for (int r = 0; r < d_rows && ok; ++r)
        for (int c = kb + 1; c < base_cols; ++c) {
            const int s = d_base[r * base_cols + c];
            const bool on_stair = (c == kb + r + 1) || (c == kb + r);
            ok = ok && (on_stair ? s == 0 : s == -1);
        }
    if (!ok)
        throw std::logic_error("ldpc: base matrix " + std::to_string(n) + " rate index " +
                               std::to_string(static_cast<int>(rate)) +
                               " lacks the dual-diagonal parity structure");
}

const ldpc_code& ldpc_code::get(int n, code_rate rate) {
    // Constructed once (thread-safe static initialisation); never destroyed before exit.
    static const std::vector<ldpc_code> codes = [] {
        std::vector<ldpc_code> v;
        v.reserve(12);
        for (int len : lengths)
            for (int r = 0; r < 4; ++r) v.emplace_back(len, static_cast<code_rate>(r));
        return v;
    }();
    const int ri = rate_index(rate);
    for (int i = 0; i < 3; ++i)
        if (lengths[i] == n) return codes[i * 4 + ri];
    throw std::invalid_argument("ldpc.n: " + std::to_string(n) + " not in {648, 1296, 1944}");
}

void ldpc_code::encode(const std::uint8_t* info, std::uint8_t* codeword) const {
    // Linear-time systematic encoding over the dual-diagonal H = [H_info | H_parity]:
    //   lambda_r = sum over info circulants of row r of P^s u_c          (per block row)
    //   sum_r lambda_r = P^{s_mid} p_0 (top and bottom P^{s} p_0 cancel, staircase pairs
    //   cancel), so p_0 = P^{-s_mid} sum_r lambda_r;
    //   then back-substitution down the staircase: row r gives p_{r+1}.
    // Cost: one pass over the edges, O(n).
    const int z = d_z;
    const int kb = base_cols - d_rows;
    std::array<std::uint8_t, 12 * max_z> lambda{};
    std::array<std::uint8_t, max_z> sum{};

    std::copy(info, info + d_k, codeword);
    for (int r = 0; r < d_rows; ++r) {
        std::uint8_t* lam = lambda.data() + r * z;
        for (int e = d_row_start[r]; e < d_row_start[r + 1]; ++e)
            if (d_edges[e].col < kb) rot_xor(lam, info + d_edges[e].col * z, d_edges[e].shift, z);
        for (int i = 0; i < z; ++i) sum[i] ^= lam[i];
    }
    std::uint8_t* parity = codeword + d_k;
    for (int i = 0; i < z; ++i) sum[i] &= 1;
    unrot_copy(parity, sum.data(), d_mid_shift, z);

    std::array<std::uint8_t, max_z> acc{};
    for (int r = 0; r + 1 < d_rows; ++r) {
        std::copy(lambda.data() + r * z, lambda.data() + (r + 1) * z, acc.data());
        // known parity circulants of row r: p_0 (any row) and p_r (r >= 1)
        for (int e = d_row_start[r]; e < d_row_start[r + 1]; ++e) {
            const int c = d_edges[e].col;
            if (c >= kb && c <= kb + r) rot_xor(acc.data(), codeword + c * z, d_edges[e].shift, z);
        }
        // p_{r+1} sits under an identity (shift 0) on the staircase
        unrot_copy(parity + (r + 1) * z, acc.data(), d_base[r * base_cols + kb + r + 1], z);
    }
    for (int i = d_k; i < d_n; ++i) codeword[i] &= 1;
}

std::vector<std::uint8_t> ldpc_code::encode(const std::vector<std::uint8_t>& info) const {
    if (static_cast<int>(info.size()) != d_k)
        throw std::invalid_argument("ldpc.info: " + std::to_string(info.size()) +
                                    " bits, expected k = " + std::to_string(d_k));
    std::vector<std::uint8_t> cw(d_n);
    encode(info.data(), cw.data());
    return cw;
}

bool ldpc_code::check(const std::uint8_t* codeword) const {
    const int z = d_z;
    std::array<std::uint8_t, max_z> acc;
    for (int r = 0; r < d_rows; ++r) {
        std::fill(acc.begin(), acc.begin() + z, 0);
        for (int e = d_row_start[r]; e < d_row_start[r + 1]; ++e)
            rot_xor(acc.data(), codeword + d_edges[e].col * z, d_edges[e].shift, z);
        std::uint8_t any = 0;
        for (int i = 0; i < z; ++i) any |= acc[i];
        if (any & 1) return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------

bool ldpc_decoder::wide_lanes_available() {
#if defined(__x86_64__) || defined(__i386__)
    static const bool avx2 = __builtin_cpu_supports("avx2");
    return avx2;
#else
    return false;
#endif
}

void ldpc_decoder::use_wide_lanes(bool on) { d_wide = on && wide_lanes_available(); }

ldpc_decoder::ldpc_decoder(int max_iterations, float scale)
    : d_max_iter(max_iterations), d_scale(scale), d_wide(wide_lanes_available()) {
    if (max_iterations < 1)
        throw std::invalid_argument("ldpc.max_iterations: " + std::to_string(max_iterations) +
                                    " not >= 1");
    if (!(scale > 0.0f && scale <= 1.0f))
        throw std::invalid_argument("ldpc.scale: " + std::to_string(scale) + " not in (0,1]");
    // Scratch for the largest of the 12 codes, so decode() never allocates.
    std::size_t n = 0, msgs = 0, tmp = 0;
    for (int len : ldpc_code::lengths)
        for (int r = 0; r < 4; ++r) {
            const ldpc_code& c = ldpc_code::get(len, static_cast<code_rate>(r));
            n = std::max<std::size_t>(n, c.n());
            msgs = std::max<std::size_t>(msgs, c.edges().size() * padded_max(c.z()));
            tmp = std::max<std::size_t>(
                tmp, static_cast<std::size_t>(c.max_row_degree()) * padded_max(c.z()));
        }
    d_post.assign(n, 0.0f);
    d_msg.assign(msgs, 0.0f);
    d_tmp.assign(tmp, 0.0f);
    d_min1.assign(padded_max(max_z), 0.0f);
    d_min2.assign(padded_max(max_z), 0.0f);
    d_sign.assign(padded_max(max_z), 0.0f);
    d_argmin.assign(padded_max(max_z), 0.0f);
}

ldpc_decode_stats ldpc_decoder::decode(const ldpc_code& code, const float* llr,
                                       std::uint8_t* codeword) {
    // Layered (row-block serial) normalized min-sum: each block row is one layer of Z
    // independent checks, processed lane-parallel. For check lane z of layer r and its
    // circulant (col, s), the variable is bit col*Z + (z + s) mod Z. Per layer:
    //   t   = post - msg                     (variable-to-check, extrinsic)
    //   msg = scale * prod sign(t') * min |t'| over the other edges t' of the check
    //   post = t + msg
    // The rotation is two contiguous copies (memcpy); the arithmetic runs over Z rounded
    // up to a multiple of `lanes` with explicit 4-lane vectors (padding lanes hold
    // t = msg = 0 and are never written back).
    // Cost per iteration: ~3 passes over the E*Z edges of H; stops after the first
    // iteration whose hard decisions satisfy H c = 0.
    const int n = code.n();
    float* post = d_post.data();
    clamp_llrs(llr, n, known_zero_llr, post);

    const ldpc_decode_stats st =
#if defined(__x86_64__) || defined(__i386__)
        d_wide
            ? layers_avx2(code, d_max_iter, d_scale, d_post.data(), d_msg.data(), d_tmp.data(),
                          d_min1.data(), d_min2.data(), d_sign.data(), d_argmin.data())
            :
#endif
            layers<v4f, v4i>(code, d_max_iter, d_scale, d_post.data(), d_msg.data(), d_tmp.data(),
                             d_min1.data(), d_min2.data(), d_sign.data(), d_argmin.data());
    hard_decisions(post, n, codeword);
    return st;
}

}  // namespace oppsched
}  // namespace gr
