#pragma once
// The 802.11 frame scrambler, x^7 + x^4 + 1 (IEEE 802.11-2016 §17.3.5.5, Figure 17-7).
#include <gnuradio/oppsched/api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gr {
namespace oppsched {

/*!
 * \brief 802.11 scrambler / descrambler (self-inverse XOR with an LFSR sequence).
 *
 * State: 7-bit integer, bit k-1 holds register x_k; output = x7 XOR x4, then the register
 * shifts (x_{k+1} = x_k) and x1 takes the output. Seed 0x7F (all ones) gives the
 * standard's 127-bit sequence 00001110 11110010 11001001 ...; seed 0 (the all-zero state)
 * would give no scrambling and is rejected.
 *
 * Where oppsched uses it (tb_codec.h): on the CODED bits after rate matching, with the
 * seed derived from the slot number (seed_for_slot()). Scrambling after the encoder, not
 * before it as 802.11 does, keeps the mother codeword of a TB independent of the slot it
 * is sent in, so HARQ retransmissions in later slots (other seeds) still combine; the
 * receiver descrambles by flipping LLR signs. Every TB is whitened (no long runs of equal
 * constellation points, whatever the payload).
 */
class OPPSCHED_API scrambler final {
  public:
    /*! \throws std::invalid_argument "scrambler.seed: <v> not in [1,127]" */
    explicit scrambler(std::uint8_t seed);

    //! next sequence bit (0/1)
    std::uint8_t next() {
        const std::uint8_t out = static_cast<std::uint8_t>(((d_state >> 6) ^ (d_state >> 3)) & 1u);
        d_state = static_cast<std::uint8_t>(((d_state << 1) | out) & 0x7fu);
        return out;
    }
    //! XOR \p n unpacked bits (0/1) in place with the sequence
    void apply(std::uint8_t* bits, std::size_t n);
    //! flip the sign of the LLRs whose sequence bit is 1 (descrambling of soft bits)
    void apply_llr(float* llr, std::size_t n);
    std::uint8_t state() const { return d_state; }

    //! the first \p n bits of the sequence of \p seed
    static std::vector<std::uint8_t> sequence(std::uint8_t seed, std::size_t n);
    //! the scrambler seed of a slot: 1 + (slot mod 127), never 0
    static std::uint8_t seed_for_slot(std::uint32_t slot_number) {
        return static_cast<std::uint8_t>(1u + slot_number % 127u);
    }

  private:
    std::uint8_t d_state;
};

}  // namespace oppsched
}  // namespace gr
