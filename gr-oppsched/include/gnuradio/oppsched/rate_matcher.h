#pragma once
// Rate matching of the K=7 mother code to one slot, and the definition of the HARQ
// redundancy versions (RV 0..3). Pure functions: no gr::block, no I/O, no state.
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/mcs.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gr {
namespace oppsched {

/*!
 * \brief Selects which mother-code bits one transmission carries, per code rate and RV.
 *
 * Mother codeword: m = 2*(K+6) bits A0 B0 A1 B1 ... (rate 1/2, zero tail).
 *
 * RV r of a code rate with puncturing period P (pattern_of(rate)) is defined by two numbers:
 *  - pattern shift s(rate, r) trellis steps: mother bit j is kept iff bit
 *    ((j - 2 s) mod 2P) of the 802.11 keep mask is set, i.e. the 802.11 pattern delayed by
 *    s steps. A time-shifted pattern is the same punctured code (same free distance), so
 *    every RV decodes on its own as well as RV 0 (self-decodable), while RVs with other
 *    shifts puncture other bits, so combining them adds parity (incremental redundancy):
 *      rate  shifts RV0..3   punctured bits per period (A_i, B_i of step i)
 *      1/2   0 0 0 0         none: every RV carries the whole codeword (IR == chase)
 *      2/3   0 1 1 0         s0: B1          s1: B0           -> s0+s1 = full rate 1/2
 *      3/4   0 2 1 2         s0: B1 A2       s1: A0 B2    s2: B0 A1 -> any two shifts
 *                            cover the whole mother code, three give every bit twice
 *      5/6   0 4 1 2         s0: B1 A2 B3 A4 s1: A0 B2 A3 B4  s4: B0 A1 B2 A3
 *                            s2: B0 A1 B3 A4 -> s0+s1 and s0+s4 each give the full
 *                            mother code
 *    The table is chosen so that the FIRST retransmission is complementary to RV 0 for
 *    both common RV orders, 0,2,3,1 (LTE's, the MAC's default rv_sequence) and 0,1,2,3,
 *    and the first three transmissions use three different shifts where P >= 3.
 *  - start offset k_r = floor(r * S / 4) in the kept sequence of length S: the slot's
 *    coded_bits >= S positions are filled by reading the kept sequence cyclically from
 *    k_r, so every kept bit is sent at least once and the (coded_bits - S) repeated bits
 *    start at a different place for each RV (LTE-style circular buffer, TS 36.212
 *    §5.1.4.2 k0 = RV * N/4, applied to the punctured sequence).
 *
 * Cost: O(coded_bits) per call, no allocation in the *_into variants beyond the output.
 */
class OPPSCHED_API rate_matcher final {
  public:
    static constexpr int num_rvs = 4;

    //! pattern shift s(rate, rv) in trellis steps (throws std::invalid_argument for rv not in 0..3)
    static int pattern_shift(code_rate rate, int rv);
    //! number S of mother bits of an m-bit mother codeword that RV \p rv keeps
    static std::size_t kept_bits(std::size_t mother_bits, code_rate rate, int rv);
    //! max over the 4 RVs of kept_bits(): what the TB size rule must fit into a slot
    static std::size_t max_kept_bits(std::size_t mother_bits, code_rate rate);

    /*!
     * \brief The mother-bit index carried by each of the \p coded_bits transmitted bits.
     * \param mother_bits length of the mother codeword (even, >= 2)
     * \param rate        code rate (puncturing pattern)
     * \param rv          redundancy version 0..3
     * \param coded_bits  bits the slot carries; must be >= kept_bits(...)
     * \throws std::invalid_argument naming the field when the inputs are inconsistent
     */
    static std::vector<std::uint32_t> selection(std::size_t mother_bits, code_rate rate, int rv,
                                                std::size_t coded_bits);
    static void selection_into(std::size_t mother_bits, code_rate rate, int rv,
                               std::size_t coded_bits, std::vector<std::uint32_t>& out);
};

}  // namespace oppsched
}  // namespace gr
