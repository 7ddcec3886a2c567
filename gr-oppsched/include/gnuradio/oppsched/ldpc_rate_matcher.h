#pragma once
// How one TB is cut into 802.11n LDPC codewords (ldpc.h) and how a slot's coded bits are
// read from them per redundancy version: the LDPC counterpart of rate_matcher.h.
// Pure class: no gr::block, no I/O.
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/mcs.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gr {
namespace oppsched {

/*!
 * \brief The codewords of one TB of K info bits (TB + CRC-32) at code rate R in a slot of
 * C coded bits, and the soft-buffer layout the HARQ process combines into.
 *
 * Segmentation (the 802.11n codes of lengths 648, 1296, 1944 = 1, 2, 3 units of 648 bits;
 * after 802.11n's LDPC PPDU encoding, IEEE 802.11-2016 §19.3.11.7.5, but with the slot's C
 * coded bits fixed instead of rounded up to whole symbols):
 *  - m_min = ceil(K / (648 R)) units hold the K bits; N_cw = ceil(m_min / 3) codewords
 *    (the fewest that can). With room in the slot the codewords grow, up to 3 units each,
 *    as long as all their parity fits unpunctured (K + m 648 (1-R) <= C): a lower-rate
 *    code gains more than repetition does.
 *  - The m units are split as evenly as possible over the N_cw codewords (the first ones
 *    take one more): the weakest codeword decides the TB, so equal lengths beat a mix
 *    (e.g. 2 x 1296 rather than 1944 + 648).
 *  - Codeword i carries k_i = floor(K u_i / m) of the K bits (u_i its units; the bits left
 *    over go one each to the first codewords) and is shortened by L_i R - k_i known zero
 *    bits, which are never sent.
 *  With the largest TB (K = floor(C R)) at most the parity of one 648-bit unit does not
 *  fit the slot: RV 0 leaves out the last parity bits of each codeword (as 802.11n
 *  punctures). Measured against fixed codeword lengths: docs/phy.md, "LDPC rate matching".
 *
 * Soft buffer: codeword i owns the buffer_bits(i) = k_i + L_i(1-R) positions
 * [offset(i), offset(i) + buffer_bits(i)): its k_i info bits, then its parity bits.
 * total_bits() is what a HARQ process stores.
 *
 * Rate matching, per RV: codeword i gets slot_bits(i) = E_i = floor(C B_i / sum B) of the
 * C coded bits (B_i = buffer_bits(i); the bits left over one each to the first codewords);
 * codeword i's e-th bit takes
 * the place (e + 1/2) / E_i of the slot (ties in codeword order), so each codeword spreads
 * uniformly over the whole slot in time and frequency and a fade hits them alike (equal
 * E_i: the codewords alternate bit by bit). Codeword
 * i's e-th bit is its buffer bit (k0 + e) mod buffer_bits(i), k0 = floor(rv
 * buffer_bits(i) / 4): a circular buffer as LTE's (TS 36.212 §5.1.4.2). When RV 0
 * punctures, the other RVs start elsewhere and send what it left out (incremental
 * redundancy); when the slot has room, repetitions start at a different place per RV; a
 * TB that fills its codewords exactly gets the same bits in every RV (chase combining).
 *
 * Feasibility: K <= floor(C R) (mcs_set::tb_bytes keeps to it).
 */
class OPPSCHED_API ldpc_segmentation final {
  public:
    static constexpr int num_rvs = 4;
    static constexpr int unit_bits = 648;  //!< the shortest 802.11n codeword

    /*!
     * \param max_length the longest codeword allowed (648, 1296 or 1944; numerology_params::
     * ldpc_max_n): at most max_length / 648 units per codeword, so N_cw = ceil(m_min /
     * (max_length / 648)). 1944 is the segmentation above; 648 gives every TB 648-bit
     * codewords only (the measurement of what the long codewords gain, docs/phy.md).
     * \throws std::invalid_argument naming the field when info_bits is 0, coded_bits is 0,
     * info_bits > floor(coded_bits R) or max_length is not 648, 1296 or 1944
     */
    ldpc_segmentation(std::size_t info_bits, code_rate rate, std::size_t coded_bits,
                      int max_length = 1944);

    code_rate rate() const { return d_rate; }
    std::size_t info_bits() const { return d_k; }
    std::size_t coded_bits() const { return d_c; }
    int codewords() const { return static_cast<int>(d_ki.size()); }  //!< N_cw
    //! L_i: 648, 1296 or 1944
    int codeword_length(int i) const { return d_len.at(static_cast<std::size_t>(i)); }
    std::size_t codeword_info_bits(int i) const { return d_ki.at(static_cast<std::size_t>(i)); }
    //! first of codeword i's info bits among the K (they are consecutive)
    std::size_t info_offset(int i) const { return d_info_off.at(static_cast<std::size_t>(i)); }
    std::size_t parity_bits(int i) const;     //!< L_i (1 - R)
    std::size_t shortened_bits(int i) const;  //!< L_i R - k_i
    std::size_t buffer_bits(int i) const { return codeword_info_bits(i) + parity_bits(i); }
    std::size_t offset(int i) const { return d_off.at(static_cast<std::size_t>(i)); }
    std::size_t total_bits() const { return d_total; }
    //! E_i: coded bits codeword i gets in a slot
    std::size_t slot_bits(int i) const { return d_ei.at(static_cast<std::size_t>(i)); }
    //! total_bits() - coded_bits() when positive: bits RV 0 leaves out
    std::size_t punctured_bits() const { return d_total > d_c ? d_total - d_c : 0; }

    /*!
     * \brief The soft-buffer index (< total_bits()) each of the coded_bits() bits of RV
     * \p rv carries. O(C + N_cw); construction itself is O(N_cw).
     * \throws std::invalid_argument for rv not in [0, 3]
     */
    void selection_into(int rv, std::vector<std::uint32_t>& out) const;
    std::vector<std::uint32_t> selection(int rv) const;

    /*!
     * \brief The L_i LLRs of codeword \p i for the decoder from the soft buffer \p buf
     * (total_bits() values): info LLRs, known_zero_llr for the shortened bits, parity;
     * channel LLRs are clamped to +-known_zero_llr / 10 and NaN becomes 0 (erasure).
     */
    void codeword_llrs(const float* buf, int i, float* out) const;

  private:
    code_rate d_rate;
    std::size_t d_k, d_c;
    int d_num = 1, d_den = 2;
    std::size_t d_total = 0;
    std::vector<int> d_len;
    std::vector<std::size_t> d_ki, d_info_off, d_off, d_ei;
};

}  // namespace oppsched
}  // namespace gr
