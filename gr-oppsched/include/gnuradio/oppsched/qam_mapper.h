#pragma once
// Gray BPSK/QPSK/16QAM/64QAM mapping with unit average energy and the max-log soft
// demapper (IEEE 802.11-2016 §17.3.5.8, Table 17-10 ... 17-13 and Figure 17-10).
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gr {
namespace oppsched {

/*!
 * \brief Mapper and max-log demapper of one Gray QAM constellation.
 *
 * Bits b0..b(m-1) of a symbol: BPSK b0 -> I (Q = 0); otherwise the first m/2 bits select
 * the I level and the last m/2 the Q level, each through the binary-reflected Gray code of
 * 802.11 (Table 17-11 ... 17-13): level = 2 gray^-1(bits) - (2^(m/2) - 1), so e.g. 16QAM
 * I: 00 -> -3, 01 -> -1, 11 -> +1, 10 -> +3; then scaled by K_MOD = 1, 1/sqrt2, 1/sqrt10,
 * 1/sqrt42 for unit average energy (Table 17-10).
 *
 * Demapper: LLR(b) = ln P(b=0|y) / P(b=1|y) with the max-log approximation,
 *   LLR = (min_{s: b=1} |y-s|^2 - min_{s: b=0} |y-s|^2) / N0,
 * positive = bit 0, N0 = the per-RE complex noise variance E|n|^2 after equalisation
 * (N0 / |H_k|^2 from the OFDM receiver). Evaluated per dimension in closed form (exact
 * max-log, piecewise linear in y: e.g. 16QAM b0 = -4(y + sgn y max(|y|-2, 0)), b1 = 4|y|-8
 * in units of the integer grid, divided by K_MOD^-2 N0); branch-free loops the compiler
 * vectorises. Non-finite y, N0 <= 0 or non-finite N0 (garbage, or an RE the equaliser
 * marks unusable with N0 = inf) give LLR 0 (erasure); a positive N0 is floored at 1e-12
 * (LLRs stay finite).
 */
class OPPSCHED_API qam_mapper final {
  public:
    /*! \throws std::invalid_argument "qam_mapper.bits_per_symbol: <v> not one of 1, 2, 4, 6" */
    explicit qam_mapper(int bits_per_symbol);

    int bits_per_symbol() const { return d_m; }
    //! point of symbol value v (b0 = most significant bit of v)
    const std::vector<gr_complex>& constellation() const { return d_points; }

    //! map \p n_bits (multiple of bits_per_symbol) unpacked bits to n_bits/m points
    void map(const std::uint8_t* bits, std::size_t n_bits, gr_complex* out) const;
    std::vector<gr_complex> map(const std::vector<std::uint8_t>& bits) const;

    /*!
     * \brief max-log LLRs of \p n_re symbols, m per symbol, in bit order.
     * \param noise_var per-RE noise variance N0 (linear, complex)
     */
    void demap(const gr_complex* in, const float* noise_var, std::size_t n_re, float* llr) const;
    std::vector<float> demap(const std::vector<gr_complex>& in,
                             const std::vector<float>& noise_var) const;

    /*!
     * \brief Brute-force max-log over all points (reference for tests; O(2^m) per RE).
     */
    void demap_reference(const gr_complex* in, const float* noise_var, std::size_t n_re,
                         float* llr) const;

  private:
    int d_m;
    float d_kmod;  //!< 1/sqrt(K): integer grid -> unit energy
    std::vector<gr_complex> d_points;
};

}  // namespace oppsched
}  // namespace gr
