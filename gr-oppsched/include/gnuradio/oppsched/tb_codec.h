#pragma once
// The payload bit chain of one slot: TB bytes <-> constellation points (resource elements).
// Pure classes: no gr::block, no I/O, no clocks.
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/conv_code.h>
#include <gnuradio/oppsched/harq_buffer.h>
#include <gnuradio/oppsched/interleaver.h>
#include <gnuradio/oppsched/ldpc.h>
#include <gnuradio/oppsched/mcs.h>
#include <gnuradio/oppsched/numerology.h>
#include <gnuradio/oppsched/qam_mapper.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gr {
namespace oppsched {

/*
 * TX chain (tb_encoder::encode), per slot:
 *   1. TB bytes ++ CRC-32 (oppsched::crc32 of the TB, appended most significant byte
 *      first); bits MSB first: K = 8 (tb_bytes + 4) info bits
 *   2-3, by the numerology's FEC (numerology_params::fec):
 *      ldpc (default): the K bits are cut into N_cw 802.11n LDPC codewords at the MCS's
 *        rate (ldpc_segmentation in ldpc_rate_matcher.h: shortening, length choice),
 *        each encoded (ldpc.h); the soft buffer holds each codeword's info and parity
 *        bits; the slot's coded_bits = payload REs * N_BPSC bits alternate between the
 *        codewords and are read from each one's circular buffer at the RV's start
 *        (puncturing / repetition, incremental redundancy);
 *      conv: 2. K=7 rate-1/2 encoder, zero tail -> mother codeword, 2 (K + 6) bits;
 *        3. rate matching for (code rate, RV) -> coded_bits (puncturing + cyclic
 *        repetition, rate_matcher.h)
 *   4. 802.11 scrambler on the coded bits, seed from the slot (scrambler.h)
 *   5. 802.11a interleaver per OFDM symbol, N_CBPS = data_carriers * N_BPSC
 *   6. Gray QAM mapping, unit average energy
 * -> payload_resource_elements() points in RE order (symbol by symbol, data subcarriers in
 *    increasing index), the order the OFDM modulator consumes.
 * RX chain (tb_decoder::decode): max-log demapping with the per-RE noise variance,
 * deinterleaving, descrambling (LLR sign flips), de-rate-matching into the HARQ buffer
 * (adds LLRs: chase / IR combining and in-slot repetitions), then the layered min-sum
 * LDPC decoder per codeword (ldpc) or the Viterbi decoder over the combined mother codeword
 * (conv), CRC-32 check.
 */

//! What the receiver must know about a slot's payload (all of it is in the header).
struct tb_rx_params {
    int mcs = 0;                      //!< 0..7
    int rv = 0;                       //!< redundancy version 0..3
    std::size_t tb_bytes = 0;         //!< TB size, 1..mcs_set::tb_bytes(mcs, numerology)
    bool ndi = false;                 //!< new-data indicator of the HARQ process
    std::uint8_t scrambler_seed = 1;  //!< 1..127, scrambler::seed_for_slot(slot)
};

//! Decoder statistics after combining (for link curves, CQI checks and traces).
struct tb_decode_stats {
    int receptions = 0;            //!< transmissions combined in the HARQ buffer (>= 1)
    std::size_t mother_bits = 0;   //!< length of the mother codeword
    std::size_t covered_bits = 0;  //!< mother bits with a non-zero LLR after combining
    double mean_abs_llr = 0.0;     //!< mean |LLR| over the covered mother bits
    //! covered mother bits whose hard decision disagrees with the re-encoded decoded
    //! codeword (pre-Viterbi channel bit errors; meaningful when crc_ok)
    std::size_t channel_bit_errors = 0;
    //! info bits (TB + CRC) per covered mother bit: the effective code rate after combining
    double effective_code_rate = 0.0;
    //! LDPC: decoder iterations summed over the TB's codewords (0 with conv)
    int fec_iterations = 0;
};

struct tb_decode_result {
    std::vector<std::uint8_t> bytes;  //!< decoded TB (tb_bytes bytes, also when crc_ok is false)
    bool crc_ok = false;
    tb_decode_stats stats;
};

struct tb_selection_cache;  // tb_codec.cc

/*!
 * \brief Encoder of the payload of one slot of numerology \p n.
 *
 * Thread safety: const methods only; one instance may serve several threads. The
 * rate-matching selections of recent (TB size, MCS, RV) combinations are kept in a small
 * shared cache (built once per combination, guarded by a mutex; copies share it).
 */
class OPPSCHED_API tb_encoder final {
  public:
    /*! \throws std::invalid_argument when data_carriers * N_BPSC is not a multiple of 16 */
    explicit tb_encoder(const numerology& n);

    //! payload REs per slot = numerology::payload_resource_elements()
    std::size_t resource_elements() const { return d_re; }

    /*!
     * \brief Encode one TB.
     * \param tb             TB bytes, 1..mcs_set::tb_bytes(mcs, numerology)
     * \param mcs            0..7
     * \param rv             redundancy version 0..3
     * \param scrambler_seed 1..127 (scrambler::seed_for_slot(slot number))
     * \return resource_elements() constellation points, unit average energy
     * \throws std::invalid_argument naming the field (mcs, rv, tb_bytes, scrambler.seed)
     */
    std::vector<gr_complex> encode(const std::vector<std::uint8_t>& tb, int mcs, int rv,
                                   std::uint8_t scrambler_seed) const;
    //! same, writing resource_elements() points to \p out
    void encode(const std::uint8_t* tb, std::size_t tb_bytes, int mcs, int rv,
                std::uint8_t scrambler_seed, gr_complex* out) const;
    /*!
     * \brief Steps 1-5 only: the interleaved coded bits (coded_bits(mcs) of 0/1) that
     * step 6 maps. For tests and tools.
     */
    std::vector<std::uint8_t> coded_bits(const std::vector<std::uint8_t>& tb, int mcs, int rv,
                                         std::uint8_t scrambler_seed) const;

    const numerology& geometry() const { return d_num; }

  private:
    numerology d_num;
    std::size_t d_re;
    std::vector<interleaver> d_il;  // per MCS
    std::vector<qam_mapper> d_map;  // per MCS
    std::shared_ptr<tb_selection_cache> d_sel;
};

/*!
 * \brief Decoder of the payload of one slot of numerology \p n. Holds the LDPC / Viterbi
 * decoder and scratch buffers (sized for the largest TB at construction), so decode() does not
 * allocate in steady state beyond the result bytes and, with LDPC, the TB's segmentation
 * (a few vectors of N_cw entries); the rate-matching selection is rebuilt only when the
 * TB size, MCS or RV changes.
 *
 * Not thread-safe (scratch state); use one per receiving thread.
 */
class OPPSCHED_API tb_decoder final {
  public:
    /*!
     * \param n            slot geometry
     * \param backend      Viterbi ACS engine (viterbi_decoder_k7)
     * \param quant_target Viterbi quantiser target, 0 = the backend's default
     */
    explicit tb_decoder(const numerology& n, viterbi_backend backend = viterbi_backend::acs16,
                        float quant_target = 0.0f);

    std::size_t resource_elements() const { return d_re; }
    //! soft-buffer capacity a harq_buffer needs for every MCS of this numerology
    std::size_t harq_capacity() const { return d_max_mother; }
    //! a HARQ buffer sized for this numerology (one per HARQ process)
    std::unique_ptr<harq_buffer> make_harq_buffer() const;

    /*!
     * \brief Decode one slot's payload, combining with \p harq.
     * \param re        resource_elements() equalised data REs, in RE order
     * \param noise_var resource_elements() per-RE noise variances N0/|H_k|^2 (linear)
     * \param p         MCS, RV, TB size, NDI and scrambler seed from the header
     * \param harq      the soft buffer of the HARQ process the header names; cleared first
     *                  when p.ndi differs from the NDI it holds
     * \throws std::invalid_argument naming the field for wrong sizes or out-of-range
     * parameters (never for the values of re / noise_var: garbage decodes to crc_ok=false)
     */
    tb_decode_result decode(const gr_complex* re, const float* noise_var, std::size_t n_re,
                            const tb_rx_params& p, harq_buffer& harq);
    tb_decode_result decode(const std::vector<gr_complex>& re, const std::vector<float>& noise_var,
                            const tb_rx_params& p, harq_buffer& harq);

    const numerology& geometry() const { return d_num; }

  private:
    numerology d_num;
    std::size_t d_re;
    std::size_t d_max_mother;
    std::vector<interleaver> d_il;
    std::vector<qam_mapper> d_map;
    viterbi_decoder_k7 d_vit;
    // scratch
    std::vector<float> d_llr, d_llr2;
    std::vector<std::uint32_t> d_sel;
    std::array<std::size_t, 4> d_sel_key{};  // (mother bits, rate, rv, coded bits) of d_sel
    std::vector<std::uint8_t> d_bits, d_reenc;
    ldpc_decoder d_ldpc;
    std::vector<float> d_cw_llr;
    std::vector<std::uint8_t> d_cw_bits;

    void decode_ldpc(const tb_rx_params& p, std::size_t C, harq_buffer& harq, tb_decode_result& r);
};

//! TB bytes + CRC-32 -> K unpacked info bits (step 1 of the TX chain)
OPPSCHED_API std::vector<std::uint8_t> tb_info_bits(const std::uint8_t* tb, std::size_t n);

}  // namespace oppsched
}  // namespace gr
