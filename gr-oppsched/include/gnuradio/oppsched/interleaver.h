#pragma once
// The 802.11a block interleaver (IEEE 802.11-2016 §17.3.5.7, eqs. 17-17 and 17-18).
#include <gnuradio/oppsched/api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gr {
namespace oppsched {

/*!
 * \brief Two-permutation block interleaver over blocks of n_cbps coded bits.
 *
 * For input index k of a block (802.11-2016 eq. 17-17, 17-18, 16 columns):
 *   i = (n_cbps/16) (k mod 16) + floor(k/16)
 *   j = s floor(i/s) + (i + n_cbps - floor(16 i / n_cbps)) mod s,  s = max(n_bpsc/2, 1)
 * and bit k goes to output position j. The first permutation puts adjacent coded bits on
 * subcarriers n_cbps/(16 n_bpsc) apart, the second alternates them between more and less
 * significant constellation bits.
 *
 * oppsched applies it per OFDM symbol (n_cbps = data_carriers * N_BPSC), exactly as
 * 802.11a. Why not a TB-wide interleaver: a slot (1.7 or 3 ms) is shorter than the coherence
 * time of the fading the testbed emulates (f_d = 0.6 or 60 Hz: T_c ~ 0.4/f_d >= 7 ms),
 * so there is no time diversity inside a slot to collect; what a slot does have is
 * frequency selectivity (tapped-delay-line multipath), which the per-symbol interleaver
 * already spreads over the whole band within every 16 coded bits, and a per-symbol
 * interleaver keeps the known-answer vectors of 802.11a valid. The header codec uses one
 * block over all its REs (n_cbps = header REs * N_BPSC) so that its repeated copies land on
 * other subcarriers.
 *
 * Cost: one table look-up per bit; the table (n_cbps ints) is built once.
 */
class OPPSCHED_API interleaver final {
  public:
    /*!
     * \throws std::invalid_argument naming interleaver.n_cbps / n_bpsc when n_cbps is not
     * a positive multiple of 16 and of n_bpsc, or n_bpsc is not in 1..8
     */
    interleaver(int n_cbps, int n_bpsc);

    int n_cbps() const { return d_ncbps; }
    int n_bpsc() const { return d_nbpsc; }
    //! output position of input bit k of a block
    const std::vector<std::uint32_t>& permutation() const { return d_perm; }

    //! interleave \p n bits (a multiple of n_cbps), block by block: out[perm[k]] = in[k]
    void interleave(const std::uint8_t* in, std::uint8_t* out, std::size_t n) const;
    //! inverse on soft values: out[k] = in[perm[k]]
    void deinterleave(const float* in, float* out, std::size_t n) const;

    std::vector<std::uint8_t> interleave(const std::vector<std::uint8_t>& in) const;
    std::vector<float> deinterleave(const std::vector<float>& in) const;

  private:
    void check_len(std::size_t n) const;
    int d_ncbps;
    int d_nbpsc;
    std::vector<std::uint32_t> d_perm;
};

}  // namespace oppsched
}  // namespace gr
