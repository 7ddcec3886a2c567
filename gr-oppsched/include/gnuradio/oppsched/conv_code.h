#pragma once
// The K=7 rate-1/2 convolutional code of 802.11 (generators 133 and 171 octal,
// IEEE 802.11-2016 §17.3.5.6): encoder and soft-decision Viterbi decoder.
// Pure classes: no gr::block, no I/O.
#include <gnuradio/oppsched/api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gr {
namespace oppsched {

/*!
 * \brief Encoder of the K=7, rate-1/2 code with generators g0 = 133, g1 = 171 (octal).
 *
 * Register convention (shared with the decoder and with VOLK's / Karn's trellis): the
 * 7-bit register r holds the newest input bit in bit 0 (r = (r << 1 | u) & 0x7f); outputs
 * A = parity(r & 0x6D) (133 octal read from the newest tap) and B = parity(r & 0x4F) (171),
 * emitted as A0 B0 A1 B1 ... This reproduces the 802.11a Annex G example (Table G.8).
 */
class OPPSCHED_API conv_encoder_k7 final {
  public:
    static constexpr int constraint_length = 7;
    static constexpr int memory = 6;               //!< tail bits of zero termination
    static constexpr std::uint32_t poly_a = 0x6D;  //!< 133 octal, bit-reversed
    static constexpr std::uint32_t poly_b = 0x4F;  //!< 171 octal, bit-reversed

    /*!
     * \brief Zero-tail encoding: \p k info bits (0/1) plus 6 zero tail bits from state 0
     * give 2*(k+6) coded bits written to \p out.
     */
    static void encode_zero_tail(const std::uint8_t* bits, std::size_t k, std::uint8_t* out);
    static std::vector<std::uint8_t> encode_zero_tail(const std::vector<std::uint8_t>& bits);
    /*!
     * \brief Tail-biting encoding: the register starts with the last 6 info bits, so the
     * start and end states agree and no tail is sent: 2*k coded bits (k >= 6).
     */
    static void encode_tail_biting(const std::uint8_t* bits, std::size_t k, std::uint8_t* out);
    static std::vector<std::uint8_t> encode_tail_biting(const std::vector<std::uint8_t>& bits);
};

enum class termination : std::uint8_t { zero_tail, tail_biting };

//! Add-compare-select engines of viterbi_decoder_k7.
enum class viterbi_backend : std::uint8_t {
    acs16,  //!< oppsched's own: SSE2, 16-bit path metrics, 11-bit LLRs (default)
    volk8,  //!< VOLK's volk_8u_x4_conv_k7_r2_8u (gr-fec's cc_decoder kernel), 8-bit metrics
};

/*!
 * \brief Soft-decision Viterbi decoder of conv_encoder_k7 (64 states), with our own
 * trace-back over one of two add-compare-select (ACS) engines:
 *
 *  - acs16 (default): 32 butterflies per step, AVX2 (two 16-lane vectors, chosen at run
 *    time when the CPU has it) or SSE2 (four 8-lane vectors; scalar C off x86),
 *    saturating 16-bit path metrics (correlation, maximised), LLRs
 *    quantised to [-511, 511], renormalised every 4 steps by the best metric (spread of
 *    the 64 metrics < 6 x 2 x 1022 < 2^14, so no overflow). Quantisation loss is
 *    negligible (within the statistical noise of the float reference in the BLER test).
 *  - volk8: VOLK's kernel (SSE3 "spiral", NEON or generic C). Its branch metric keeps only
 *    6 bits of the average of the two 8-bit symbols (>> 2), which costs up to ~0.3 dB at
 *    64QAM 5/6 against the float reference, and it is slower here than acs16 (bench_fec).
 *    Kept selectable for comparison.
 * Measured (bench_fec, this machine): see gr-oppsched/lib/bench/bench_fec.md.
 *
 * Input: mother-code LLRs A0 B0 A1 B1 ..., float, positive = bit 0, 0 = erasure (a
 * punctured or never-received bit). Viterbi decisions are invariant to a common positive
 * scale of all LLRs, so the quantiser only has to set the integer range well: each LLR is
 * scaled by q = target / mean|LLR| (mean over non-erased bits, with outliers above
 * 4 x mean clipped in a second pass so that a few huge LLRs cannot squash the rest),
 * rounded and saturated. The per-RE noise variance is already inside the LLRs (demapper:
 * LLR ~ 1/N0_k), so this factor is noise-aware: it maps the codeword's typical
 * reliability to a fixed level of the metric range and keeps the relative reliability of
 * every RE. Targets (BLER-tuned against the float reference over BPSK..64QAM and rates
 * 1/2..5/6): acs16 64 of 511 (saturation at 8x the mean), volk8 96 of 127 (its 6-bit
 * branch metrics need the weak bits of 64QAM pushed up; saturation costs less).
 *
 * Memory: 8 bytes of decisions + 4 bytes of symbols per trellis step, grown on demand and
 * kept (never shrunk), so steady-state decoding does not allocate.
 * Cost: one 64-state ACS per step + O(steps) trace-back.
 */
class OPPSCHED_API viterbi_decoder_k7 final {
  public:
    static constexpr float default_quant_target_acs16 = 64.0f;
    static constexpr float default_quant_target_volk8 = 96.0f;
    static constexpr int acs16_llr_max = 511;

    /*!
     * \param max_info_bits initial workspace (more is allocated on demand)
     * \param backend       ACS engine
     * \param quant_target  mean |LLR| is mapped to this level; 0 = the backend's default
     * \throws std::invalid_argument naming viterbi.quant_target when outside
     * (0, max level] (127 for volk8, 511 for acs16)
     */
    explicit viterbi_decoder_k7(std::size_t max_info_bits = 0,
                                viterbi_backend backend = viterbi_backend::acs16,
                                float quant_target = 0.0f);
    ~viterbi_decoder_k7();
    viterbi_decoder_k7(const viterbi_decoder_k7&) = delete;
    viterbi_decoder_k7& operator=(const viterbi_decoder_k7&) = delete;

    viterbi_backend backend() const { return d_backend; }
    //! the acs16 kernel chosen for this CPU: "avx2", "sse2" or "scalar"
    //! (environment variable OPPSCHED_NO_AVX2 forces sse2, for comparisons)
    static const char* acs16_kernel_name();
    float quant_target() const { return d_target; }

    /*!
     * \brief Decode \p k info bits.
     * \param llr 2*(k+6) LLRs for termination::zero_tail, 2*k for tail_biting (k >= 6)
     * \param bits output, k bytes of 0/1
     */
    void decode(const float* llr, std::size_t k, termination t, std::uint8_t* bits);
    std::vector<std::uint8_t> decode(const std::vector<float>& llr, std::size_t k, termination t);

    //! the scale q described above (0 when every LLR is erased)
    static float quant_scale(const float* llr, std::size_t n, float target);
    /*!
     * \brief volk8 quantiser: \p n LLRs to kernel symbols 0..255 (128 - round(q LLR),
     * saturated to 1..255; 128 = erasure). Non-finite LLRs: NaN = erasure, inf saturates.
     */
    static void quantise(const float* llr, std::size_t n, float target, std::uint8_t* syms);
    //! acs16 quantiser: round(q LLR) saturated to [-511, 511]
    static void quantise16(const float* llr, std::size_t n, float target, std::int16_t* out);

  private:
    struct workspace;
    std::unique_ptr<workspace> d_ws;
    viterbi_backend d_backend;
    float d_target;
    void run_volk8(std::size_t steps, bool tail_biting);
    void run_acs16(std::size_t steps, bool tail_biting);
};

/*!
 * \brief Reference soft Viterbi (float metrics, scalar, no quantisation): maximises the
 * correlation sum of +/-LLR over the trellis. Slow; for tests and benchmarks, to check
 * the VOLK decoder's quantisation loss and correctness. Same arguments as
 * viterbi_decoder_k7::decode.
 */
OPPSCHED_API void viterbi_k7_reference(const float* llr, std::size_t k, termination t,
                                       std::uint8_t* bits);

}  // namespace oppsched
}  // namespace gr
