#pragma once
// The quasi-cyclic LDPC codes of IEEE 802.11n (HT, IEEE 802.11-2016 §19.3.11.7 and
// Annex F, Tables F-1..F-3): codeword lengths 648, 1296 and 1944 bits (circulant size
// Z = 27, 54, 81) at rates 1/2, 2/3, 3/4 and 5/6; a systematic linear-time encoder and a
// layered normalized min-sum decoder. Base matrices: ldpc_tables.cc. Pure classes: no
// gr::block, no I/O.
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/mcs.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gr {
namespace oppsched {

/*!
 * \brief One 802.11n LDPC code: a 24-column base matrix of circulant shifts (-1 = zero
 * block) lifted by Z = n / 24.
 *
 * Codeword layout (802.11n): the k = n R information bits first, then the n - k parity
 * bits. The parity part of every base matrix is 802.11n's dual-diagonal structure (a
 * weight-3 first parity column, then a staircase), so encoding is linear in n.
 *
 * Thread safety: immutable after construction; get() returns shared instances.
 */
class OPPSCHED_API ldpc_code final {
  public:
    static constexpr int base_cols = 24;
    static constexpr int lengths[3] = {648, 1296, 1944};

    /*! \throws std::invalid_argument naming ldpc.n when n is not 648, 1296 or 1944 */
    ldpc_code(int n, code_rate rate);
    //! the shared instance of one of the 12 codes (constructed once, thread-safe)
    static const ldpc_code& get(int n, code_rate rate);

    int n() const { return d_n; }
    int k() const { return d_k; }
    int z() const { return d_z; }
    int base_rows() const { return d_rows; }
    code_rate rate() const { return d_rate; }
    //! base matrix, row-major base_rows() x 24, shift in [0, Z) or -1
    const std::vector<int>& base() const { return d_base; }

    /*!
     * \brief Systematic encoding: \p info k() bits (0/1) -> \p codeword n() bits
     * (info bits, then parity).
     */
    void encode(const std::uint8_t* info, std::uint8_t* codeword) const;
    std::vector<std::uint8_t> encode(const std::vector<std::uint8_t>& info) const;
    //! true when every parity check of H is satisfied by the n() bits of \p codeword
    //! (cost: one pass over the edges, no allocation)
    bool check(const std::uint8_t* codeword) const;

    //! one nonzero circulant of the base matrix: block column and shift
    struct edge {
        int col;
        int shift;
    };
    //! the nonzero circulants, block row by block row (edges of row r:
    //! [row_start()[r], row_start()[r + 1]))
    const std::vector<edge>& edges() const { return d_edges; }
    const std::vector<int>& row_start() const { return d_row_start; }
    //! largest number of nonzero circulants in one block row
    int max_row_degree() const { return d_max_row_degree; }

  private:
    int d_n, d_k, d_z, d_rows;
    code_rate d_rate;
    std::vector<int> d_base;
    std::vector<edge> d_edges;
    std::vector<int> d_row_start;
    int d_max_row_degree = 0;
    int d_mid_row = 0;    // the row whose first-parity-column circulant is unmatched
    int d_mid_shift = 0;  // its shift (0 in every 802.11n table)
};

struct ldpc_decode_stats {
    int iterations = 0;      //!< full layered iterations run
    bool converged = false;  //!< all parity checks satisfied by the output codeword
};

/*!
 * \brief Layered (row-block serial) normalized min-sum decoder of the 802.11n codes.
 *
 * Input: n() channel LLRs, positive = bit 0 (the demapper's convention), 0 = erasure (a
 * punctured or never-received bit); NaN is treated as 0 and values are clamped to
 * +-known_zero_llr. Shortened (known zero) information bits are passed as known_zero_llr.
 * Each block row is one layer of Z checks; a check-to-variable message is
 * scale * (product of the other signs) * (smallest other |LLR|) (normalized min-sum,
 * Chen & Fossorier 2002; layered schedule, Hocevar 2004). Stops after the first
 * iteration whose hard decisions satisfy every check.
 *
 * Defaults: scale 0.8125 = 13/16, 15 iterations, within a quarter dB of float sum-product
 * at a bounded worst-case time (the decoder runs in real time in several receivers);
 * the measured comparison: docs/phy.md, "LDPC decoder".
 *
 * Not thread-safe (scratch state); one per receiving thread. Steady state does not
 * allocate (scratch is sized for the largest code at construction).
 */
class OPPSCHED_API ldpc_decoder final {
  public:
    static constexpr float known_zero_llr = 1.0e4f;

    /*!
     * \param max_iterations full layered iterations at most, >= 1
     * \param scale          min-sum normalization factor (multiplies every check-to-variable
     *                       magnitude), in (0, 1]; 1 = plain min-sum
     * \throws std::invalid_argument naming ldpc.max_iterations / ldpc.scale
     */
    explicit ldpc_decoder(int max_iterations = 15, float scale = 0.8125f);

    int max_iterations() const { return d_max_iter; }
    float scale() const { return d_scale; }

    //! true when this CPU runs the 8-lane (AVX2) build of the layer loop
    static bool wide_lanes_available();
    /*!
     * \brief Choose the layer loop's lane width: 8 (AVX2, the default where the CPU has it)
     * or 4 (SSE2, \p on = false). Both give bit-identical results; for tests and benchmarks.
     */
    void use_wide_lanes(bool on);
    bool wide_lanes() const { return d_wide; }

    /*!
     * \brief Decode one codeword of \p code.
     * \param llr       code.n() LLRs
     * \param codeword  out: code.n() hard-decision bits (0/1), info bits first (the
     *                  last iteration's decisions when not converged)
     */
    ldpc_decode_stats decode(const ldpc_code& code, const float* llr, std::uint8_t* codeword);

  private:
    int d_max_iter;
    float d_scale;
    bool d_wide;                // 8-lane AVX2 layer loop
    std::vector<float> d_post;  // posterior LLRs
    // check-to-variable messages, one per edge (edge-major, Z lanes padded to the lane count)
    std::vector<float> d_msg;
    std::vector<float> d_tmp;  // variable-to-check messages of one layer (degree x padded Z)
    // per-lane layer state: two smallest |t|, index of the smallest and sign-bit
    // accumulator (int32 bit patterns stored in float slots, same vector width)
    std::vector<float> d_min1, d_min2, d_argmin, d_sign;
};

}  // namespace oppsched
}  // namespace gr
