#include <gnuradio/oppsched/ldpc_rate_matcher.h>
#include <gnuradio/oppsched/rate_matcher.h>
#include <gnuradio/oppsched/scrambler.h>
#include <gnuradio/oppsched/tb_codec.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "oppsched/byte_order.h"
#include "oppsched/crc32.h"  // the one CRC-32 of the project (host MAC library)

namespace gr {
namespace oppsched {

namespace {

void check_rv(int rv) {
    if (rv < 0 || rv > 3)
        throw std::invalid_argument("rv: " + std::to_string(rv) + " not in [0,3]");
}

void check_tb_bytes(std::size_t bytes, int mcs, const numerology& n) {
    const std::size_t max = mcs_set::tb_bytes(mcs, n);
    if (bytes < 1 || bytes > max)
        throw std::invalid_argument("tb_bytes: " + std::to_string(bytes) + " not in [1," +
                                    std::to_string(max) + "] for mcs " + std::to_string(mcs));
}

// Decoded info bits (TB, then CRC-32, MSB first) -> r.bytes and r.crc_ok.
void unpack_tb(const std::vector<std::uint8_t>& bits, std::size_t tb_bytes, tb_decode_result& r) {
    auto byte_at = [&bits](std::size_t i) {
        std::uint8_t v = 0;
        for (std::size_t b = 0; b < 8; ++b)
            v = static_cast<std::uint8_t>((v << 1) | bits[8 * i + b]);
        return v;
    };
    r.bytes.assign(tb_bytes, 0);
    for (std::size_t i = 0; i < tb_bytes; ++i) r.bytes[i] = byte_at(i);
    std::uint8_t rx_crc[4];
    for (std::size_t i = 0; i < 4; ++i) rx_crc[i] = byte_at(tb_bytes + i);
    r.crc_ok = ::oppsched::crc32(r.bytes.data(), r.bytes.size()) == ::oppsched::load_be32(rx_crc);
}

// Adds the covered positions (LLR != 0), the channel bit errors among them (LLR sign against
// the decoded bit) and the sum of |LLR| of n positions. |LLR| is summed in four interleaved
// double partial sums (position t into sum t mod 4; a single running sum is one dependent
// addition per bit), 16 positions per step as bit masks with SSE2.
void codeword_stats(const float* llr, const std::uint8_t* bits, std::size_t n, std::size_t& covered,
                    std::size_t& errors, double& sum_abs) {
    std::size_t cov_n = 0, err_n = 0;
    std::size_t t = 0;
#if defined(__SSE2__)
    __m128d p01 = _mm_setzero_pd(), p23 = _mm_setzero_pd();
    const __m128 zero = _mm_setzero_ps(), sign = _mm_set1_ps(-0.0f);
    for (; t + 16 <= n; t += 16) {
        unsigned neg = 0, cov = 0;
        for (int q = 0; q < 4; ++q) {
            const __m128 l = _mm_loadu_ps(llr + t + 4 * q);
            neg |= static_cast<unsigned>(_mm_movemask_ps(_mm_cmplt_ps(l, zero))) << (4 * q);
            cov |= static_cast<unsigned>(_mm_movemask_ps(_mm_cmpneq_ps(l, zero))) << (4 * q);
            const __m128 a = _mm_andnot_ps(sign, l);
            p01 = _mm_add_pd(p01, _mm_cvtps_pd(a));
            p23 = _mm_add_pd(p23, _mm_cvtps_pd(_mm_movehl_ps(a, a)));
        }
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bits + t));
        const unsigned one =
            static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(b, _mm_setzero_si128()))) ^
            0xFFFFu;
        cov_n += static_cast<std::size_t>(__builtin_popcount(cov));
        err_n += static_cast<std::size_t>(__builtin_popcount(cov & (neg ^ one)));
    }
    alignas(16) double part[4];
    _mm_store_pd(part, p01);
    _mm_store_pd(part + 2, p23);
#else
    double part[4] = {0.0, 0.0, 0.0, 0.0};
#endif
    for (; t < n; ++t) {
        const float l = llr[t];
        const bool cov = l != 0.0f;
        cov_n += cov;
        part[t % 4] += std::fabs(l);
        err_n += cov & ((l < 0.0f) != (bits[t] != 0));
    }
    covered += cov_n;
    errors += err_n;
    sum_abs += (part[0] + part[1]) + (part[2] + part[3]);
}

// Statistics after combining (tb_decode_stats) from the sums over the covered positions.
void set_stats(tb_decode_result& r, int receptions, std::size_t soft_bits, std::size_t info_bits,
               std::size_t covered, double sum_abs, std::size_t errors) {
    r.stats.receptions = receptions;
    r.stats.mother_bits = soft_bits;
    r.stats.covered_bits = covered;
    r.stats.mean_abs_llr = covered ? sum_abs / static_cast<double>(covered) : 0.0;
    r.stats.channel_bit_errors = errors;
    r.stats.effective_code_rate =
        covered ? static_cast<double>(info_bits) / static_cast<double>(covered) : 0.0;
}

std::vector<interleaver> make_interleavers(const numerology& n) {
    std::vector<interleaver> v;
    for (const auto& m : mcs_set::all()) {
        const int ncbps = n.params().data_carriers * m.bits_per_symbol;
        if (ncbps % 16 != 0)
            throw std::invalid_argument(
                "numerology.data_carriers: " + std::to_string(n.params().data_carriers) +
                " gives N_CBPS " + std::to_string(ncbps) + " at " + m.name +
                ", not a multiple of 16 (802.11a interleaver)");
        v.emplace_back(ncbps, m.bits_per_symbol);
    }
    return v;
}

std::vector<qam_mapper> make_mappers() {
    std::vector<qam_mapper> v;
    for (const auto& m : mcs_set::all()) v.emplace_back(m.bits_per_symbol);
    return v;
}

using selection_ptr = std::shared_ptr<const std::vector<std::uint32_t>>;

}  // namespace

// The selections of the last (mother bits, rate, RV, coded bits) combinations: a TX chain
// sends the same few TB sizes over and over, and rebuilding a selection costs as much as
// the rest of the encoding (a counting sort over the slot's coded bits).
struct tb_selection_cache {
    static constexpr std::size_t max_entries = 32;
    std::mutex mutex;
    std::map<std::array<std::size_t, 4>, selection_ptr> entries;

    template <typename Build>
    selection_ptr get(const std::array<std::size_t, 4>& key, Build build) {
        {
            std::lock_guard<std::mutex> lock(mutex);
            auto it = entries.find(key);
            if (it != entries.end()) return it->second;
        }
        auto sel = std::make_shared<std::vector<std::uint32_t>>();
        build(*sel);  // outside the lock
        std::lock_guard<std::mutex> lock(mutex);
        if (entries.size() >= max_entries) entries.clear();
        return entries.emplace(key, std::move(sel)).first->second;
    }
};

namespace {

// Steps 1-5 of the TX chain into `coded` (coded_bits values).
void encode_bits(const std::uint8_t* tb, std::size_t tb_bytes, int mcs, int rv, std::uint8_t seed,
                 const numerology& n, const interleaver& il, tb_selection_cache& cache,
                 std::vector<std::uint8_t>& coded) {
    const mcs_info& m = mcs_set::get(mcs);
    check_rv(rv);
    check_tb_bytes(tb_bytes, mcs, n);
    scrambler scr(seed);  // validates the seed
    const std::vector<std::uint8_t> info = tb_info_bits(tb, tb_bytes);
    const std::size_t C = mcs_set::coded_bits(mcs, n);
    std::vector<std::uint8_t> mother;
    selection_ptr sel;
    if (n.params().fec == fec_scheme::ldpc) {
        // the codewords' info + parity bits, codeword after codeword (ldpc_rate_matcher.h)
        const ldpc_segmentation seg(info.size(), m.rate, C, n.params().ldpc_max_n);
        std::vector<std::uint8_t> cw_in, cw;
        mother.resize(seg.total_bits());
        for (int i = 0; i < seg.codewords(); ++i) {
            const ldpc_code& code = ldpc_code::get(seg.codeword_length(i), m.rate);
            const std::size_t k = seg.codeword_info_bits(i);
            cw_in.assign(static_cast<std::size_t>(code.k()), 0);  // shortened bits: zeros
            cw.resize(static_cast<std::size_t>(code.n()));
            std::copy_n(info.begin() + static_cast<std::ptrdiff_t>(seg.info_offset(i)), k,
                        cw_in.begin());
            code.encode(cw_in.data(), cw.data());
            auto out = mother.begin() + static_cast<std::ptrdiff_t>(seg.offset(i));
            out = std::copy_n(cw.begin(), k, out);
            std::copy(cw.begin() + code.k(), cw.end(), out);
        }
        sel = cache.get({mother.size(), static_cast<std::size_t>(m.rate) + 101,
                         static_cast<std::size_t>(rv), C},
                        [&](std::vector<std::uint32_t>& v) { seg.selection_into(rv, v); });
    } else {
        mother.resize(mcs_set::mother_bits(tb_bytes));
        conv_encoder_k7::encode_zero_tail(info.data(), info.size(), mother.data());
        sel = cache.get(
            {mother.size(), static_cast<std::size_t>(m.rate) + 1, static_cast<std::size_t>(rv), C},
            [&](std::vector<std::uint32_t>& v) {
                rate_matcher::selection_into(mother.size(), m.rate, rv, C, v);
            });
    }
    const std::uint32_t* s = sel->data();
    std::vector<std::uint8_t> matched(C);
    for (std::size_t i = 0; i < C; ++i) matched[i] = mother[s[i]];
    scr.apply(matched.data(), C);
    coded.resize(C);
    il.interleave(matched.data(), coded.data(), C);
}

}  // namespace

std::vector<std::uint8_t> tb_info_bits(const std::uint8_t* tb, std::size_t n) {
    std::uint8_t crc[4];
    ::oppsched::store_be32(crc, ::oppsched::crc32(tb, n));
    std::vector<std::uint8_t> bits(8 * (n + 4));
    auto put = [&bits](std::size_t byte_index, std::uint8_t v) {
        for (int b = 0; b < 8; ++b)
            bits[8 * byte_index + static_cast<std::size_t>(b)] = (v >> (7 - b)) & 1u;
    };
    for (std::size_t i = 0; i < n; ++i) put(i, tb[i]);
    for (std::size_t i = 0; i < 4; ++i) put(n + i, crc[i]);
    return bits;
}

// ---------------------------------------------------------------------------------------

tb_encoder::tb_encoder(const numerology& n)
    : d_num(n),
      d_re(static_cast<std::size_t>(n.payload_resource_elements())),
      d_il(make_interleavers(n)),
      d_map(make_mappers()),
      d_sel(std::make_shared<tb_selection_cache>()) {}

std::vector<std::uint8_t> tb_encoder::coded_bits(const std::vector<std::uint8_t>& tb, int mcs,
                                                 int rv, std::uint8_t seed) const {
    mcs_set::get(mcs);
    std::vector<std::uint8_t> coded;
    encode_bits(tb.data(), tb.size(), mcs, rv, seed, d_num, d_il[static_cast<std::size_t>(mcs)],
                *d_sel, coded);
    return coded;
}

void tb_encoder::encode(const std::uint8_t* tb, std::size_t tb_bytes, int mcs, int rv,
                        std::uint8_t seed, gr_complex* out) const {
    mcs_set::get(mcs);
    std::vector<std::uint8_t> coded;
    encode_bits(tb, tb_bytes, mcs, rv, seed, d_num, d_il[static_cast<std::size_t>(mcs)], *d_sel,
                coded);
    d_map[static_cast<std::size_t>(mcs)].map(coded.data(), coded.size(), out);
}

std::vector<gr_complex> tb_encoder::encode(const std::vector<std::uint8_t>& tb, int mcs, int rv,
                                           std::uint8_t seed) const {
    std::vector<gr_complex> out(d_re);
    encode(tb.data(), tb.size(), mcs, rv, seed, out.data());
    return out;
}

// ---------------------------------------------------------------------------------------

tb_decoder::tb_decoder(const numerology& n, viterbi_backend backend, float quant_target)
    : d_num(n),
      d_re(static_cast<std::size_t>(n.payload_resource_elements())),
      d_max_mother(mcs_set::max_mother_bits(n)),
      d_il(make_interleavers(n)),
      d_map(make_mappers()),
      d_vit(n.params().fec == fec_scheme::conv ? d_max_mother / 2 : 0, backend, quant_target) {
    const std::size_t max_coded = d_re * 6;
    d_llr.reserve(max_coded);
    d_llr2.reserve(max_coded);
    d_sel.reserve(max_coded);
    d_bits.reserve(d_max_mother);
    d_reenc.reserve(d_max_mother);
    d_cw_llr.reserve(1944);
    d_cw_bits.reserve(1944);
}

std::unique_ptr<harq_buffer> tb_decoder::make_harq_buffer() const {
    return std::make_unique<harq_buffer>(d_max_mother);
}

tb_decode_result tb_decoder::decode(const gr_complex* re, const float* noise_var, std::size_t n_re,
                                    const tb_rx_params& p, harq_buffer& harq) {
    const mcs_info& m = mcs_set::get(p.mcs);
    check_rv(p.rv);
    check_tb_bytes(p.tb_bytes, p.mcs, d_num);
    if (n_re != d_re)
        throw std::invalid_argument("tb_decoder.n_re: " + std::to_string(n_re) + " REs, expected " +
                                    std::to_string(d_re));
    scrambler scr(p.scrambler_seed);
    const std::size_t mcs_i = static_cast<std::size_t>(p.mcs);
    const std::size_t C = mcs_set::coded_bits(p.mcs, d_num);
    const std::size_t M = mcs_set::soft_bits(p.tb_bytes, p.mcs, d_num);
    if (M > harq.capacity())
        throw std::invalid_argument("harq_buffer.capacity: " + std::to_string(harq.capacity()) +
                                    " < " + std::to_string(M) + " soft bits of this TB");

    // demap -> deinterleave -> descramble
    d_llr.resize(C);
    d_llr2.resize(C);
    d_map[mcs_i].demap(re, noise_var, n_re, d_llr.data());
    d_il[mcs_i].deinterleave(d_llr.data(), d_llr2.data(), C);
    scr.apply_llr(d_llr2.data(), C);

    if (d_num.params().fec == fec_scheme::ldpc) {
        tb_decode_result r;
        decode_ldpc(p, C, harq, r);
        return r;
    }
    const std::size_t K = M / 2 - conv_encoder_k7::memory;

    // de-rate-match into the HARQ buffer (combining)
    const std::array<std::size_t, 4> key = {M, static_cast<std::size_t>(m.rate) + 1,
                                            static_cast<std::size_t>(p.rv), C};
    if (key != d_sel_key) {  // the same TB size, MCS and RV recur: reuse the selection
        rate_matcher::selection_into(M, m.rate, p.rv, C, d_sel);
        d_sel_key = key;
    }
    harq.begin(p.ndi, M, 0);
    harq.accumulate(d_sel.data(), d_llr2.data(), C);

    // Viterbi over the combined mother codeword
    d_bits.resize(K);
    d_vit.decode(harq.llrs(), K, termination::zero_tail, d_bits.data());

    tb_decode_result r;
    unpack_tb(d_bits, p.tb_bytes, r);

    // statistics after combining
    d_reenc.resize(M);
    conv_encoder_k7::encode_zero_tail(d_bits.data(), K, d_reenc.data());
    const float* L = harq.llrs();
    std::size_t covered = 0, errors = 0;
    double sum_abs = 0.0;
    for (std::size_t j = 0; j < M; ++j) {  // branch-free: erasures (0) add nothing
        const float l = L[j];
        const bool cov = l != 0.0f;
        covered += cov;
        sum_abs += std::fabs(l);
        errors += cov & ((l < 0.0f) != (d_reenc[j] != 0));
    }
    set_stats(r, harq.receptions(), M, K, covered, sum_abs, errors);
    return r;
}

void tb_decoder::decode_ldpc(const tb_rx_params& p, std::size_t C, harq_buffer& harq,
                             tb_decode_result& r) {
    const mcs_info& m = mcs_set::get(p.mcs);
    const std::size_t K = 8 * (p.tb_bytes + 4);
    const ldpc_segmentation seg(K, m.rate, C, d_num.params().ldpc_max_n);
    const std::size_t M = seg.total_bits();
    // de-rate-match into the HARQ buffer (combining); the layout key keeps codewords of
    // another rate from being combined
    const std::array<std::size_t, 4> key = {M, static_cast<std::size_t>(m.rate) + 101,
                                            static_cast<std::size_t>(p.rv), C};
    if (key != d_sel_key) {
        seg.selection_into(p.rv, d_sel);
        d_sel_key = key;
    }
    harq.begin(p.ndi, M, static_cast<std::uint32_t>(m.rate) + 1);
    harq.accumulate(d_sel.data(), d_llr2.data(), C);

    d_bits.resize(K);
    const float* L = harq.llrs();
    std::size_t covered = 0, errors = 0;
    double sum_abs = 0.0;
    int iterations = 0;
    for (int i = 0; i < seg.codewords(); ++i) {
        const ldpc_code& code = ldpc_code::get(seg.codeword_length(i), m.rate);
        const std::size_t kc = static_cast<std::size_t>(code.k());
        d_cw_llr.resize(static_cast<std::size_t>(code.n()));
        d_cw_bits.resize(static_cast<std::size_t>(code.n()));
        seg.codeword_llrs(L, i, d_cw_llr.data());
        iterations += d_ldpc.decode(code, d_cw_llr.data(), d_cw_bits.data()).iterations;
        const std::size_t k = seg.codeword_info_bits(i);
        std::copy_n(d_cw_bits.begin(), k,
                    d_bits.begin() + static_cast<std::ptrdiff_t>(seg.info_offset(i)));
        // statistics over this codeword's buffer positions: its info bits, then its parity
        const float* b = L + seg.offset(i);
        const std::size_t B = seg.buffer_bits(i);
        codeword_stats(b, d_cw_bits.data(), k, covered, errors, sum_abs);
        codeword_stats(b + k, d_cw_bits.data() + kc, B - k, covered, errors, sum_abs);
    }
    unpack_tb(d_bits, p.tb_bytes, r);
    set_stats(r, harq.receptions(), M, K, covered, sum_abs, errors);
    r.stats.fec_iterations = iterations;
}

tb_decode_result tb_decoder::decode(const std::vector<gr_complex>& re,
                                    const std::vector<float>& noise_var, const tb_rx_params& p,
                                    harq_buffer& harq) {
    if (noise_var.size() != re.size())
        throw std::invalid_argument("tb_decoder.noise_var: " + std::to_string(noise_var.size()) +
                                    " values for " + std::to_string(re.size()) + " REs");
    return decode(re.data(), noise_var.data(), re.size(), p, harq);
}

}  // namespace oppsched
}  // namespace gr
