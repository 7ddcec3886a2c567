#include <gnuradio/oppsched/qam_mapper.h>

#include <algorithm>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace gr {
namespace oppsched {

namespace {
constexpr float k_min_noise_var = 1e-12f;

// Gray-coded PAM level (odd integer) of the md bits bits[0..md-1] (bits[0] = MSB).
int pam_level(const std::uint8_t* bits, int md) {
    unsigned g = 0;
    for (int i = 0; i < md; ++i) g = (g << 1) | (bits[i] & 1u);
    unsigned b = g;  // Gray -> binary
    for (unsigned s = g >> 1; s; s >>= 1) b ^= s;
    return 2 * static_cast<int>(b) - ((1 << md) - 1);
}

// 1 / (K N0) per RE, or 0 for an unusable RE (erasure).
inline float inv_scale(float re, float im, float nv, float k) {
    const bool ok = std::isfinite(re) && std::isfinite(im) && nv > 0.0f && std::isfinite(nv);
    return ok ? 1.0f / (k * std::max(nv, k_min_noise_var)) : 0.0f;
}
inline float finite_or_zero(float v) { return std::isfinite(v) ? v : 0.0f; }
}  // namespace

qam_mapper::qam_mapper(int m) : d_m(m), d_kmod(1.0f) {
    if (m != 1 && m != 2 && m != 4 && m != 6)
        throw std::invalid_argument("qam_mapper.bits_per_symbol: " + std::to_string(m) +
                                    " not one of 1, 2, 4, 6");
    const double k = m == 1 ? 1.0 : m == 2 ? 2.0 : m == 4 ? 10.0 : 42.0;
    d_kmod = static_cast<float>(1.0 / std::sqrt(k));
    std::vector<gr_complex> pts(std::size_t(1) << m);
    std::vector<std::uint8_t> bits(static_cast<std::size_t>(m));
    for (unsigned v = 0; v < pts.size(); ++v) {
        for (int i = 0; i < m; ++i) bits[static_cast<std::size_t>(i)] = (v >> (m - 1 - i)) & 1u;
        map(bits.data(), bits.size(), &pts[v]);  // d_points still empty: computes the levels
    }
    d_points = std::move(pts);
}

void qam_mapper::map(const std::uint8_t* bits, std::size_t n_bits, gr_complex* out) const {
    const std::size_t m = static_cast<std::size_t>(d_m);
    if (n_bits % m != 0)
        throw std::invalid_argument("qam_mapper.n_bits: " + std::to_string(n_bits) +
                                    " not a multiple of " + std::to_string(d_m));
    const std::size_t n = n_bits / m;
    if (d_points.size() < (std::size_t(1) << d_m)) {
        // building the table (constructor): from the Gray levels
        if (d_m == 1) {
            for (std::size_t i = 0; i < n; ++i) out[i] = gr_complex(bits[i] ? 1.0f : -1.0f, 0.0f);
            return;
        }
        const int md = d_m / 2;
        for (std::size_t i = 0; i < n; ++i) {
            const std::uint8_t* b = bits + i * m;
            out[i] = gr_complex(d_kmod * static_cast<float>(pam_level(b, md)),
                                d_kmod * static_cast<float>(pam_level(b + md, md)));
        }
        return;
    }
    // table look-up: symbol value v = b0 b1 ... (b0 most significant)
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint8_t* b = bits + i * m;
        unsigned v = 0;
        for (std::size_t k = 0; k < m; ++k) v = (v << 1) | (b[k] & 1u);
        out[i] = d_points[v];
    }
}

std::vector<gr_complex> qam_mapper::map(const std::vector<std::uint8_t>& bits) const {
    std::vector<gr_complex> out(bits.size() / static_cast<std::size_t>(d_m));
    map(bits.data(), bits.size(), out.data());
    return out;
}

namespace {
// Per-dimension max-log LLRs in units of the integer grid (u = y sqrt(K)), multiplied by
// c = 1 / (K N0). Exact max-log for Gray PAM (derivation: nearest point of each bit set).
inline void pam4_llr(float u, float c, float* o) {
    const float a = std::fabs(u);
    o[0] = -4.0f * (u + std::copysign(std::max(a - 2.0f, 0.0f), u)) * c;
    o[1] = (4.0f * a - 8.0f) * c;
}
inline void pam8_llr(float u, float c, float* o) {
    const float a = std::fabs(u);
    const float ext =
        std::max(a - 2.0f, 0.0f) + std::max(a - 4.0f, 0.0f) + std::max(a - 6.0f, 0.0f);
    o[0] = -4.0f * (u + std::copysign(ext, u)) * c;
    o[1] =
        (4.0f * (a - 4.0f) + 4.0f * std::min(a - 2.0f, 0.0f) + 4.0f * std::max(a - 6.0f, 0.0f)) * c;
    o[2] = 4.0f * (std::fabs(a - 4.0f) - 2.0f) * c;
}

#if defined(__SSE2__)
inline __m128 v_abs(__m128 x) { return _mm_andnot_ps(_mm_set1_ps(-0.0f), x); }
inline __m128 v_copysign(__m128 mag, __m128 sgn) {
    const __m128 m = _mm_set1_ps(-0.0f);
    return _mm_or_ps(_mm_andnot_ps(m, mag), _mm_and_ps(m, sgn));
}
#endif

constexpr std::size_t k_block = 64;  // REs per block of the demapper
}  // namespace

// Two passes per block of 64 REs: (1) validity and scale c = 1/(K N0) per RE, invalid REs
// get c = 0 and y = 0 (erasures, no NaN can leak into the LLRs); (2) branch-free
// per-dimension formulas, 4 dimensions (2 REs) per SSE2 vector for 16QAM and 64QAM.
void qam_mapper::demap(const gr_complex* in, const float* nv, std::size_t n, float* llr) const {
    const float* y = reinterpret_cast<const float*>(in);
    const float g = 1.0f / d_kmod;  // u = g y
    const float k = g * g;          // K
    const std::size_t m = static_cast<std::size_t>(d_m);
    alignas(16) float c[k_block];
    alignas(16) float ys[2 * k_block];
    for (std::size_t b0 = 0; b0 < n; b0 += k_block) {
        const std::size_t nb = std::min(k_block, n - b0);
        for (std::size_t i = 0; i < nb; ++i) {
            const float re = y[2 * (b0 + i)], im = y[2 * (b0 + i) + 1];
            c[i] = inv_scale(re, im, nv[b0 + i], k);
            const bool ok = c[i] != 0.0f;
            ys[2 * i] = ok ? g * re : 0.0f;
            ys[2 * i + 1] = ok ? g * im : 0.0f;
        }
        float* out = llr + b0 * m;
        std::size_t i = 0;
        switch (d_m) {
            case 1:
                for (; i < nb; ++i) out[i] = -4.0f * ys[2 * i] * c[i];
                break;
            case 2:
                for (; i < nb; ++i) {
                    out[2 * i] = -4.0f * ys[2 * i] * c[i];
                    out[2 * i + 1] = -4.0f * ys[2 * i + 1] * c[i];
                }
                break;
            case 4:
#if defined(__SSE2__)
                for (; i + 2 <= nb; i += 2) {
                    const __m128 u = _mm_load_ps(ys + 2 * i);  // I0 Q0 I1 Q1
                    const __m128 cc =
                        _mm_castpd_ps(_mm_load1_pd(reinterpret_cast<const double*>(c + i)));
                    const __m128 cv = _mm_unpacklo_ps(cc, cc);  // c0 c0 c1 c1
                    const __m128 a = v_abs(u);
                    const __m128 ext =
                        _mm_max_ps(_mm_sub_ps(a, _mm_set1_ps(2.0f)), _mm_setzero_ps());
                    const __m128 b0v = _mm_mul_ps(
                        _mm_mul_ps(_mm_set1_ps(-4.0f), _mm_add_ps(u, v_copysign(ext, u))), cv);
                    const __m128 b1v = _mm_mul_ps(
                        _mm_sub_ps(_mm_mul_ps(_mm_set1_ps(4.0f), a), _mm_set1_ps(8.0f)), cv);
                    _mm_storeu_ps(out + 4 * i, _mm_unpacklo_ps(b0v, b1v));  // RE i: bI0 bI1 bQ0 bQ1
                    _mm_storeu_ps(out + 4 * i + 4, _mm_unpackhi_ps(b0v, b1v));  // RE i+1
                }
#endif
                for (; i < nb; ++i) {
                    pam4_llr(ys[2 * i], c[i], out + 4 * i);
                    pam4_llr(ys[2 * i + 1], c[i], out + 4 * i + 2);
                }
                break;
            case 6:
#if defined(__SSE2__)
                for (; i + 2 <= nb; i += 2) {
                    const __m128 u = _mm_load_ps(ys + 2 * i);
                    const __m128 cc =
                        _mm_castpd_ps(_mm_load1_pd(reinterpret_cast<const double*>(c + i)));
                    const __m128 cv = _mm_unpacklo_ps(cc, cc);
                    const __m128 zero = _mm_setzero_ps(), two = _mm_set1_ps(2.0f),
                                 four = _mm_set1_ps(4.0f), six = _mm_set1_ps(6.0f);
                    const __m128 a = v_abs(u);
                    const __m128 a2 = _mm_sub_ps(a, two), a4 = _mm_sub_ps(a, four),
                                 a6 = _mm_sub_ps(a, six);
                    const __m128 ext =
                        _mm_add_ps(_mm_add_ps(_mm_max_ps(a2, zero), _mm_max_ps(a4, zero)),
                                   _mm_max_ps(a6, zero));
                    alignas(16) float t0[4], t1[4], t2[4];
                    _mm_store_ps(t0, _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(-4.0f),
                                                           _mm_add_ps(u, v_copysign(ext, u))),
                                                cv));
                    _mm_store_ps(
                        t1,
                        _mm_mul_ps(_mm_mul_ps(four, _mm_add_ps(_mm_add_ps(a4, _mm_min_ps(a2, zero)),
                                                               _mm_max_ps(a6, zero))),
                                   cv));
                    _mm_store_ps(t2, _mm_mul_ps(_mm_mul_ps(four, _mm_sub_ps(v_abs(a4), two)), cv));
                    float* o = out + 6 * i;
                    for (int d = 0; d < 4; ++d) {
                        o[3 * d] = t0[d];
                        o[3 * d + 1] = t1[d];
                        o[3 * d + 2] = t2[d];
                    }
                }
#endif
                for (; i < nb; ++i) {
                    pam8_llr(ys[2 * i], c[i], out + 6 * i);
                    pam8_llr(ys[2 * i + 1], c[i], out + 6 * i + 3);
                }
                break;
            default:
                break;
        }
    }
}

std::vector<float> qam_mapper::demap(const std::vector<gr_complex>& in,
                                     const std::vector<float>& noise_var) const {
    if (noise_var.size() != in.size())
        throw std::invalid_argument("qam_mapper.noise_var: " + std::to_string(noise_var.size()) +
                                    " values for " + std::to_string(in.size()) + " REs");
    std::vector<float> llr(in.size() * static_cast<std::size_t>(d_m));
    demap(in.data(), noise_var.data(), in.size(), llr.data());
    return llr;
}

void qam_mapper::demap_reference(const gr_complex* in, const float* nv, std::size_t n,
                                 float* llr) const {
    const std::size_t m = static_cast<std::size_t>(d_m);
    for (std::size_t i = 0; i < n; ++i) {
        const float c = inv_scale(in[i].real(), in[i].imag(), nv[i], 1.0f);
        for (std::size_t b = 0; b < m; ++b) {
            float d0 = std::numeric_limits<float>::infinity(), d1 = d0;
            for (unsigned v = 0; v < d_points.size(); ++v) {
                const float d = std::norm(in[i] - d_points[v]);
                if ((v >> (m - 1 - b)) & 1u)
                    d1 = std::min(d1, d);
                else
                    d0 = std::min(d0, d);
            }
            llr[i * m + b] = c == 0.0f ? 0.0f : finite_or_zero((d1 - d0) * c);
        }
    }
}

}  // namespace oppsched
}  // namespace gr
