#pragma once
// The soft buffer of one HARQ process (receiver side): LLRs of the rate-1/2 mother
// codeword, combined over the transmissions of one TB. Pure class: no gr::block, no I/O.
#include <gnuradio/oppsched/api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gr {
namespace oppsched {

//! Counters of one HARQ soft buffer.
struct harq_buffer_stats {
    std::uint64_t receptions = 0;            //!< begin() calls
    std::uint64_t new_data_clears = 0;       //!< cleared because NDI toggled (or first use)
    std::uint64_t size_mismatch_clears = 0;  //!< cleared: same NDI but other TB size
    std::uint64_t combined_receptions = 0;   //!< receptions combined with earlier ones
};

/*!
 * \brief Soft buffer of one HARQ process, in the mother-code (rate 1/2, before
 * puncturing) domain.
 *
 * Each reception adds its de-rate-matched LLRs into the mother positions the RV carried
 * (rate_matcher.h): same RV twice = chase combining (every LLR doubled in reliability),
 * different RVs = incremental redundancy (positions punctured in one RV get LLRs from the
 * other; positions never received stay 0 = erasure). Repetitions inside one slot add up
 * the same way. Max-log LLRs of independent receptions add exactly (sum of
 * log-likelihoods), so no weighting is needed.
 *
 * New data: the buffer remembers the NDI of the TB it holds; begin() with a different NDI
 * (toggled: a new TB in this process) or a different mother length (a TB of another size
 * without an NDI toggle: inconsistent, cannot be combined) clears it first.
 *
 * Memory is bounded: capacity mother bits of float are allocated once, in the
 * constructor (mcs_set::max_mother_bits(numerology) covers every MCS); begin() with a
 * longer codeword throws.
 */
class OPPSCHED_API harq_buffer final {
  public:
    /*! \throws std::invalid_argument "harq_buffer.capacity: 0 must be >= 2" */
    explicit harq_buffer(std::size_t capacity_mother_bits);

    /*!
     * \brief Start a reception of a TB with \p mother_bits mother-code bits and NDI \p ndi.
     * \param layout what the positions mean beyond their number (LDPC: the code rate + 1,
     *        since codewords of two rates cannot be combined; conv: 0); a different layout
     *        clears the buffer like a different length
     * \return true when earlier receptions are kept (this one will be combined)
     * \throws std::invalid_argument when mother_bits is 0 or exceeds the capacity
     */
    bool begin(bool ndi, std::size_t mother_bits, std::uint32_t layout = 0);
    //! llrs[idx[i]] += llr[i] for i < n (idx < mother_bits(), unchecked in release builds)
    void accumulate(const std::uint32_t* idx, const float* llr, std::size_t n);
    //! forget everything (e.g. after the MAC gave up on the TB)
    void clear();

    bool empty() const { return d_receptions == 0; }
    bool ndi() const { return d_ndi; }
    std::size_t capacity() const { return d_llr.size(); }
    std::size_t mother_bits() const { return d_mother; }
    //! receptions combined in the current contents
    int receptions() const { return d_receptions; }
    const float* llrs() const { return d_llr.data(); }
    //! copy of the current mother-domain LLRs (mother_bits() values)
    std::vector<float> soft_bits() const;
    //! mother positions with a non-zero LLR (received at least once, not erased)
    std::size_t covered_bits() const;
    const harq_buffer_stats& stats() const { return d_stats; }

  private:
    std::vector<float> d_llr;
    std::size_t d_mother = 0;
    std::uint32_t d_layout = 0;
    int d_receptions = 0;
    bool d_ndi = false;
    harq_buffer_stats d_stats;
};

}  // namespace oppsched
}  // namespace gr
