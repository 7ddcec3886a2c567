#pragma once
// The modulation and coding scheme (MCS) table of the oppsched payload and the transport
// block (TB) size each MCS carries in one slot. Pure class: no gr::block, no I/O.
//
// The MCS set is 802.11a's (IEEE 802.11-2016 §17.3.2.3, Table 17-4) plus 64QAM 5/6 from
// 802.11n (HT, 802.11-2016 §19.3.11.6.2): one K=7 rate-1/2 convolutional mother code
// (133/171 octal), punctured to 2/3, 3/4 and 5/6, Gray QAM with unit average energy.
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/numerology.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gr {
namespace oppsched {

//! Code rates of the punctured K=7 code.
enum class code_rate : std::uint8_t { r1_2 = 0, r2_3 = 1, r3_4 = 2, r5_6 = 3 };

/*!
 * \brief The puncturing pattern of one code rate (802.11-2016 §17.3.5.6, Figure 17-9;
 * the HT rate-5/6 pattern for 5/6).
 *
 * The mother code emits A0 B0 A1 B1 ... (A from 133, B from 171). Over `period` trellis
 * steps (2*period mother bits) the pattern keeps the bits whose bit i of `keep_mask`
 * (i = 0 for A0, 1 for B0, 2 for A1, ...) is set: 2/3 keeps A0 B0 A1, 3/4 keeps
 * A0 B0 A1 B2, 5/6 keeps A0 B0 A1 B2 A3 B4.
 */
struct puncture_pattern {
    int period;               //!< trellis steps (= input bits) per pattern period
    int kept;                 //!< mother bits kept per period
    std::uint32_t keep_mask;  //!< bit i: mother bit i of the period is transmitted
    int numerator() const { return period; }
    int denominator() const { return kept; }
};

OPPSCHED_API const puncture_pattern& pattern_of(code_rate r);

//! One MCS: a Gray QAM constellation and a code rate.
struct mcs_info {
    int index;            //!< 0..7
    const char* name;     //!< e.g. "16QAM 3/4"
    int bits_per_symbol;  //!< N_BPSC: 1 BPSK, 2 QPSK, 4 16QAM, 6 64QAM
    code_rate rate;       //!< punctured code rate
    int rate_num;         //!< code rate numerator (1, 2, 3, 5)
    int rate_den;         //!< code rate denominator (2, 3, 4, 6)
    double code_rate_value() const { return static_cast<double>(rate_num) / rate_den; }
    //! info bits per data subcarrier per OFDM symbol = bits_per_symbol * code rate
    double spectral_efficiency() const { return bits_per_symbol * code_rate_value(); }
};

/*!
 * \brief The 8-entry MCS table and the TB size arithmetic the MAC asks about.
 *
 * TB layout on the air (see tb_codec.h): TB bytes, then a CRC-32 (4 bytes): K = 8*(tb_bytes+4)
 * info bits. The TB size depends on the numerology's FEC (numerology_params::fec):
 *  - ldpc: K <= floor(coded_bits() R), the 802.11n LDPC codewords of ldpc_rate_matcher.h;
 *    tb_bytes() = floor((floor(coded_bits() R) - 32) / 8).
 *  - conv: 6 zero
 * tail bits follow; the mother codeword of K = 8*(tb_bytes+4) info bits has 2*(K+6) bits; the
 * rate matcher (rate_matcher.h) keeps the bits the RV's puncturing pattern selects and
 * repeats them cyclically to fill exactly coded_bits() = payload REs * bits_per_symbol.
 * tb_bytes() is the largest TB whose punctured codeword fits coded_bits() for every RV,
 * so any TB of 1..tb_bytes() bytes can be sent (smaller ones get more repetition).
 */
class OPPSCHED_API mcs_set final {
  public:
    static constexpr int size = 8;
    static constexpr int crc_bits = 32;  //!< CRC-32 per TB
    static constexpr int tail_bits = 6;  //!< zero tail of the K=7 code

    /*! \throws std::invalid_argument "mcs: <index> not in [0,7]" */
    static const mcs_info& get(int index);
    static const std::array<mcs_info, size>& all();

    //! coded bits one slot carries at this MCS: payload_resource_elements * N_BPSC
    static std::size_t coded_bits(int index, const numerology& n);
    /*!
     * \brief Bytes of the largest TB that fits one slot of \p n at MCS \p index (0 when
     * even a 1-byte TB does not fit).
     */
    static std::size_t tb_bytes(int index, const numerology& n);
    //! tb_bytes() for a raw coded-bit budget (the numerology-free core of tb_bytes())
    static std::size_t tb_bytes_for_coded_bits(int index, std::size_t coded_bits,
                                               fec_scheme fec = fec_scheme::conv);
    //! conv: mother-codeword length 2*(8*(tb_bytes+4)+6) of a TB of \p tb_bytes bytes
    static std::size_t mother_bits(std::size_t tb_bytes);
    /*!
     * \brief Soft-buffer bits of a TB of \p tb_bytes at MCS \p index in \p n: the conv
     * mother codeword (mother_bits()) or the LDPC codewords' sent-able bits
     * (ldpc_segmentation::total_bits()). \throws std::invalid_argument when the TB does
     * not fit.
     */
    static std::size_t soft_bits(std::size_t tb_bytes, int index, const numerology& n);
    //! the largest soft_bits() any MCS's largest TB needs in \p n (HARQ buffer capacity)
    static std::size_t max_mother_bits(const numerology& n);
    //! the most robust (lowest) MCS whose TB holds at least \p bytes, or -1 if none does
    static int lowest_mcs_for_bytes(std::size_t bytes, const numerology& n);
};

}  // namespace oppsched
}  // namespace gr
