#include <gnuradio/oppsched/interleaver.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gr {
namespace oppsched {

interleaver::interleaver(int n_cbps, int n_bpsc) : d_ncbps(n_cbps), d_nbpsc(n_bpsc) {
    if (n_bpsc < 1 || n_bpsc > 8)
        throw std::invalid_argument("interleaver.n_bpsc: " + std::to_string(n_bpsc) +
                                    " not in [1,8]");
    if (n_cbps < 16 || n_cbps % 16 != 0 || n_cbps % n_bpsc != 0)
        throw std::invalid_argument("interleaver.n_cbps: " + std::to_string(n_cbps) +
                                    " must be a positive multiple of 16 and of n_bpsc");
    const int s = std::max(n_bpsc / 2, 1);
    d_perm.resize(static_cast<std::size_t>(n_cbps));
    for (int k = 0; k < n_cbps; ++k) {
        const int i = (n_cbps / 16) * (k % 16) + k / 16;
        const int j = s * (i / s) + (i + n_cbps - (16 * i) / n_cbps) % s;
        d_perm[static_cast<std::size_t>(k)] = static_cast<std::uint32_t>(j);
    }
}

void interleaver::check_len(std::size_t n) const {
    if (n % static_cast<std::size_t>(d_ncbps) != 0)
        throw std::invalid_argument("interleaver.n: " + std::to_string(n) +
                                    " bits is not a multiple of n_cbps " + std::to_string(d_ncbps));
}

void interleaver::interleave(const std::uint8_t* in, std::uint8_t* out, std::size_t n) const {
    check_len(n);
    const std::size_t b = static_cast<std::size_t>(d_ncbps);
    for (std::size_t off = 0; off < n; off += b)
        for (std::size_t k = 0; k < b; ++k) out[off + d_perm[k]] = in[off + k];
}

void interleaver::deinterleave(const float* in, float* out, std::size_t n) const {
    check_len(n);
    const std::size_t b = static_cast<std::size_t>(d_ncbps);
    for (std::size_t off = 0; off < n; off += b)
        for (std::size_t k = 0; k < b; ++k) out[off + k] = in[off + d_perm[k]];
}

std::vector<std::uint8_t> interleaver::interleave(const std::vector<std::uint8_t>& in) const {
    std::vector<std::uint8_t> out(in.size());
    interleave(in.data(), out.data(), in.size());
    return out;
}

std::vector<float> interleaver::deinterleave(const std::vector<float>& in) const {
    std::vector<float> out(in.size());
    deinterleave(in.data(), out.data(), in.size());
    return out;
}

}  // namespace oppsched
}  // namespace gr
