#pragma once
// The PHY control header of a slot: the one definition of its wire format, encoder and
// decoder. Pure class: no gr::block, no I/O.
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/conv_code.h>
#include <gnuradio/oppsched/interleaver.h>
#include <gnuradio/oppsched/numerology.h>
#include <gnuradio/oppsched/qam_mapper.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "oppsched/common.h"  // oppsched::Result / Error: the project's untrusted-input result

namespace gr {
namespace oppsched {

//! The fields of the control header.
struct header_fields {
    std::uint16_t user = 0;         //!< addressed user (16 bit)
    std::uint8_t mcs = 0;           //!< payload MCS 0..7 (4-bit field)
    std::uint8_t harq_process = 0;  //!< HARQ process 0..15 (4 bit)
    bool ndi = false;               //!< new-data indicator (1 bit)
    std::uint8_t rv = 0;            //!< redundancy version 0..3 (2 bit)
    std::uint16_t tb_bytes = 0;     //!< TB size in bytes (16 bit); 0 = no payload in this slot
    std::uint32_t slot = 0;         //!< slot number (32 bit, wraps)
    bool uplink = false;            //!< direction: a station's transmission to the AP (1 bit)
    bool operator==(const header_fields& o) const {
        return user == o.user && mcs == o.mcs && harq_process == o.harq_process && ndi == o.ndi &&
               rv == o.rv && tb_bytes == o.tb_bytes && slot == o.slot && uplink == o.uplink;
    }
    bool operator!=(const header_fields& o) const { return !(*this == o); }
};

/*!
 * \brief Control-header codec: 96 info bits, K=7 rate-1/2 tail-biting code, 192 coded bits,
 * BPSK, spread over exactly header_symbols * data_carriers REs.
 *
 * Wire format (info bits, MSB first, 12 bytes):
 *   bits  0..15 user | 16..19 mcs | 20..23 harq_process | 24 ndi | 25..26 rv |
 *   27..42 tb_bytes | 43..74 slot | 75 uplink | 76..79 reserved (0) |
 *   80..95 CRC-16 of bytes 0..9
 * `uplink` tells the directions apart on one frequency (TDD over the air): a slot a
 * station sends to the AP has it set, a slot the AP sends has it clear. A receiver hears
 * both (a client its neighbours' uplink slots and its own, the AP its own downlink), and
 * slot_receiver keeps only its direction's.
 * CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, no final XOR;
 * crc16("123456789") = 0x29B1). Why CRC-16 and not CRC-8: every client decodes every
 * slot's header, hundreds per second, also in empty or missed slots; a CRC-8 would accept
 * about 1 garbage header in 256 (several per second), a CRC-16 about 1 in 65536, and the
 * field checks below (reserved bits zero, mcs <= 7, tb_bytes within the MCS's TB size) cut
 * that by another factor > 1000.
 *
 * Coding: 76 field bits + 4 reserved + 16 CRC = 96 bits, tail-biting (no 6-bit tail, so
 * the 96 bits fill exactly 192 coded bits = 4 BPSK symbols of 48 carriers; a zero tail
 * would need 204), scrambled with the 802.11 scrambler (fixed seed header_scrambler_seed:
 * avoids an all-equal, high-PAPR symbol for an all-zero header), spread over the
 * header REs by cyclic repetition, and interleaved with one 802.11a block interleaver
 * over all header coded bits (so repeated copies land on other subcarriers). The
 * receiver adds the LLRs of the copies and runs the wrap-around tail-biting Viterbi.
 *
 * Modulation: BPSK (the robust interface) needs header REs >= 192, i.e.
 * header_symbols >= 4 at 48 data carriers. With fewer REs (the numerology default of 2
 * header symbols = 96 REs) the same 192 coded bits go on QPSK; bits_per_symbol() says
 * which. Fewer than 96 REs cannot hold the header and throw. A 2-symbol QPSK header is
 * about 2 dB less robust than the MCS 0 payload it announces (docs/phy.md, "Control
 * header"), so at the lowest MCS it would limit the link; hence
 * header_symbols = 4 is recommended (cost: 2 of 20 symbols of an evdo slot at 1 Msps).
 */
class OPPSCHED_API header_codec final {
  public:
    static constexpr int field_bits = 76;
    static constexpr int reserved_bits = 4;
    static constexpr int crc_bits = 16;
    static constexpr int info_bits = 96;    //!< field + reserved + CRC
    static constexpr int coded_bits = 192;  //!< rate 1/2 tail-biting
    static constexpr std::size_t packed_bytes = 12;
    static constexpr std::uint8_t header_scrambler_seed = 0x5D;  //!< 1011101, 802.11a Annex G's

    /*!
     * \throws std::invalid_argument naming numerology.header_symbols when the header REs
     * cannot carry 192 coded bits with QPSK, or when the interleaver block is not a
     * multiple of 16
     */
    explicit header_codec(const numerology& n);

    //! header_symbols * data_carriers
    std::size_t resource_elements() const { return d_re; }
    //! 1 (BPSK, header REs >= 192) or 2 (QPSK fallback with fewer REs)
    int bits_per_symbol() const { return d_bps; }

    /*!
     * \brief Encode the header into resource_elements() constellation points (unit mean
     * energy), in interface order.
     * \throws std::invalid_argument naming the field when a field is out of range
     */
    std::vector<gr_complex> encode(const header_fields& h) const;
    //! same, writing resource_elements() points to \p out
    void encode(const header_fields& h, gr_complex* out) const;

    /*!
     * \brief Decode the header REs. Never throws and never crashes on garbage: wrong sizes,
     * NaN/inf, a bad CRC, non-zero reserved bits or out-of-range fields give an Error.
     * \param re        equalised header REs (interface order)
     * \param noise_var per-RE noise variance (linear, relative to unit-energy REs; as for
     *                  the payload)
     * \param n_re      number of REs; must be resource_elements()
     */
    ::oppsched::expected<header_fields> decode(const gr_complex* re, const float* noise_var,
                                               std::size_t n_re);
    ::oppsched::expected<header_fields> decode(const std::vector<gr_complex>& re,
                                               const std::vector<float>& noise_var);

    //! the field checks encode() applies (throws std::invalid_argument naming the field)
    void validate(const header_fields& h) const;
    //! 12 bytes: fields, reserved, CRC-16 (validate()s first)
    std::array<std::uint8_t, packed_bytes> pack(const header_fields& h) const;
    //! CRC, reserved-bit and field checks; Error names what failed
    ::oppsched::expected<header_fields> unpack(const std::uint8_t* bytes) const;

    //! CRC-16/CCITT-FALSE
    static std::uint16_t crc16(const std::uint8_t* data, std::size_t len);

  private:
    numerology d_num;
    std::size_t d_re;
    int d_bps;
    interleaver d_il;
    qam_mapper d_map;
    viterbi_decoder_k7 d_vit;
    std::vector<float> d_llr, d_llr2, d_fold;
    std::vector<std::uint8_t> d_bits;
};

}  // namespace oppsched
}  // namespace gr
