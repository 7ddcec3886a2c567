#include <gnuradio/oppsched/ldpc.h>
#include <gnuradio/oppsched/ldpc_rate_matcher.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gr {
namespace oppsched {

namespace {
// info bits of a length-n codeword at `rate`: n R exactly (n is a multiple of 24)
std::size_t info_of(int n, const mcs_info& m) {
    return static_cast<std::size_t>(n) * static_cast<std::size_t>(m.rate_num) /
           static_cast<std::size_t>(m.rate_den);
}
const mcs_info& info_for_rate(code_rate r) {
    for (const auto& m : mcs_set::all())
        if (m.rate == r) return m;
    throw std::invalid_argument("code_rate: " + std::to_string(static_cast<int>(r)) +
                                " not in [0,3]");
}

// The buckets floor((2e + 1) C / (2E)) for e = 0, 1, ..., E - 1 by exact integer steps
// (quotient and remainder of the numerator advance by 2C each step): the same values as
// the division, without a division per coded bit.
struct bucket_walk {
    std::size_t e = 0, q, r;
    const std::size_t den, dq, dr;
    bucket_walk(std::size_t C, std::size_t E)
        : q(C / (2 * E)),
          r(C % (2 * E)),
          den(2 * E),
          dq((2 * C) / (2 * E)),
          dr((2 * C) % (2 * E)) {}
    void next() {
        ++e;
        q += dq;
        r += dr;
        if (r >= den) {
            ++q;
            r -= den;
        }
    }
};
}  // namespace

ldpc_segmentation::ldpc_segmentation(std::size_t info_bits, code_rate rate, std::size_t coded_bits,
                                     int max_length)
    : d_rate(rate), d_k(info_bits), d_c(coded_bits) {
    if (max_length != unit_bits && max_length != 2 * unit_bits && max_length != 3 * unit_bits)
        throw std::invalid_argument("ldpc.max_length: " + std::to_string(max_length) +
                                    " is not one of 648, 1296, 1944");
    const std::size_t u_max = static_cast<std::size_t>(max_length / unit_bits);
    const mcs_info& m = info_for_rate(rate);
    d_num = m.rate_num;
    d_den = m.rate_den;
    if (info_bits == 0) throw std::invalid_argument("ldpc.info_bits: 0 must be >= 1");
    if (coded_bits == 0) throw std::invalid_argument("ldpc.coded_bits: 0 must be >= 1");
    const std::size_t cap =
        coded_bits * static_cast<std::size_t>(m.rate_num) / static_cast<std::size_t>(m.rate_den);
    if (info_bits > cap)
        throw std::invalid_argument("ldpc.info_bits: " + std::to_string(info_bits) + " > " +
                                    std::to_string(cap) + " = floor(" + std::to_string(coded_bits) +
                                    " coded bits x " + std::to_string(m.rate_num) + "/" +
                                    std::to_string(m.rate_den) + ") (TB too large for the slot)");
    // units of 648 bits: unit_k info + unit_p parity (648 R is whole for every rate)
    const std::size_t unit_k = info_of(unit_bits, m);
    const std::size_t unit_p = static_cast<std::size_t>(unit_bits) - unit_k;
    const std::size_t m_min = (info_bits + unit_k - 1) / unit_k;
    const std::size_t ncw = (m_min + u_max - 1) / u_max;
    const std::size_t m_fit = (coded_bits - info_bits) / unit_p;  // units without puncturing
    const std::size_t units = std::max(m_min, std::min(u_max * ncw, m_fit));

    d_len.resize(ncw);
    d_ki.resize(ncw);
    d_info_off.resize(ncw);
    d_off.resize(ncw);
    d_ei.resize(ncw);
    std::size_t k_left = info_bits, ioff = 0, boff = 0;
    for (std::size_t i = 0; i < ncw; ++i) {
        const std::size_t u = units / ncw + (i < units % ncw ? 1 : 0);
        d_len[i] = static_cast<int>(u) * unit_bits;
        d_ki[i] = info_bits * u / units;
        k_left -= d_ki[i];
    }
    for (std::size_t i = 0; k_left > 0; ++i, --k_left) ++d_ki[i];  // < ncw left over
    for (std::size_t i = 0; i < ncw; ++i) {
        d_info_off[i] = ioff;
        d_off[i] = boff;
        ioff += d_ki[i];
        boff += d_ki[i] + parity_bits(static_cast<int>(i));
    }
    d_total = boff;
    // coded bits per codeword in proportion to its buffer
    std::size_t e_left = coded_bits;
    for (std::size_t i = 0; i < ncw; ++i) {
        d_ei[i] = coded_bits * buffer_bits(static_cast<int>(i)) / d_total;
        e_left -= d_ei[i];
    }
    for (std::size_t i = 0; e_left > 0; i = (i + 1) % ncw, --e_left) ++d_ei[i];
}

std::size_t ldpc_segmentation::parity_bits(int i) const {
    const std::size_t n = static_cast<std::size_t>(codeword_length(i));
    return n - n * static_cast<std::size_t>(d_num) / static_cast<std::size_t>(d_den);
}

std::size_t ldpc_segmentation::shortened_bits(int i) const {
    const std::size_t n = static_cast<std::size_t>(codeword_length(i));
    return n * static_cast<std::size_t>(d_num) / static_cast<std::size_t>(d_den) -
           codeword_info_bits(i);
}

void ldpc_segmentation::selection_into(int rv, std::vector<std::uint32_t>& out) const {
    if (rv < 0 || rv >= num_rvs)
        throw std::invalid_argument("rv: " + std::to_string(rv) + " not in [0,3]");
    const std::size_t n = d_ki.size();
    std::vector<std::size_t> pos(n), size(n);
    for (std::size_t i = 0; i < n; ++i) {
        size[i] = buffer_bits(static_cast<int>(i));
        pos[i] = (static_cast<std::size_t>(rv) * size[i]) / num_rvs;
    }
    // Codeword i's e-th bit belongs at the fraction (e + 1/2) / E_i of the slot; a counting
    // sort by that position (ties in codeword order) spreads every codeword uniformly over
    // the slot in O(C + N) (equal E_i: 0, 1, ..., N-1, 0, 1, ...).
    const std::size_t C = d_c;
    std::vector<std::uint32_t> first(C + 1, 0);
    for (std::size_t i = 0; i < n; ++i)
        if (d_ei[i] > 0)
            for (bucket_walk b(C, d_ei[i]); b.e < d_ei[i]; b.next()) ++first[b.q + 1];
    for (std::size_t b = 0; b < C; ++b) first[b + 1] += first[b];
    out.resize(C);
    for (std::size_t i = 0; i < n; ++i) {
        if (d_ei[i] == 0) continue;
        std::size_t p = pos[i];
        for (bucket_walk b(C, d_ei[i]); b.e < d_ei[i]; b.next()) {
            out[first[b.q]++] = static_cast<std::uint32_t>(d_off[i] + p);
            if (++p == size[i]) p = 0;
        }
    }
}

std::vector<std::uint32_t> ldpc_segmentation::selection(int rv) const {
    std::vector<std::uint32_t> v;
    selection_into(rv, v);
    return v;
}

void ldpc_segmentation::codeword_llrs(const float* buf, int i, float* out) const {
    const std::size_t k = codeword_info_bits(i);
    const std::size_t np = parity_bits(i);
    const std::size_t kc = static_cast<std::size_t>(codeword_length(i)) - np;
    const float* b = buf + offset(i);
    // channel LLRs are bounded well below known_zero_llr (the shortened bits stay the most
    // reliable); NaN (garbage input) becomes an erasure
    auto clamp = [](float x) {
        constexpr float lim = 0.1f * ldpc_decoder::known_zero_llr;
        return x > lim ? lim : (x < -lim ? -lim : (x == x ? x : 0.0f));
    };
    std::transform(b, b + k, out, clamp);
    std::fill(out + k, out + kc, ldpc_decoder::known_zero_llr);
    std::transform(b + k, b + k + np, out + kc, clamp);
}

}  // namespace oppsched
}  // namespace gr
