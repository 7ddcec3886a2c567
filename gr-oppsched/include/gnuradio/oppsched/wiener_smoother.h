#pragma once
// Frequency-domain Wiener (LMMSE) smoothing of an OFDM channel estimate. Pure class.
//
// Why: the least-squares estimate from two long-training symbols has error variance N0/2
// per subcarrier; a channel confined to a known delay window only has L degrees of freedom
// over K occupied subcarriers, so projecting onto them removes most of that noise. The
// robust design (Li, Cimini & Sollenberger, IEEE Trans. Commun. 46(7), 1998) assumes a
// uniform power delay profile over the window, which makes it insensitive to the actual
// profile inside it; it is applied in the low-rank eigen form of Edfors et al. (IEEE Trans.
// Commun. 46(7), 1998). Derivation and measured gains: docs/phy.md, "Channel estimation".
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/numerology.h>

#include <cstddef>
#include <vector>

namespace gr {
namespace oppsched {

/*!
 * \brief Smooths a per-subcarrier channel estimate across the occupied subcarriers:
 * H^ = U diag(lambda_i / (lambda_i + eps)) U^H h, with R = U diag(lambda) U^H the
 * correlation of a channel uniform over the delay window and eps = ls_var / signal_power.
 *
 * Windows (in samples): long [-delay_margin, cp_len + delay_margin]; with
 * \p adaptive_window also a short [-delay_margin, cp_len / 2], chosen per call when the
 * energy the long window adds is consistent with noise alone (a chi-square test).
 * Construction costs an eigen-decomposition per window (O(L^3), L ~ 21: < 1 ms); smooth()
 * costs O(K x rank) and does not allocate after the first call.
 */
class OPPSCHED_API wiener_smoother final {
  public:
    /*!
     * \param n               numerology (occupied subcarriers, fft_len, cp_len)
     * \param delay_margin    samples the window extends beyond [0, cp_len] on each side,
     *                        for timing error, [0, cp_len]
     * \param adaptive_window also build the short window and choose per call
     */
    wiener_smoother(const numerology& n, int delay_margin, bool adaptive_window);

    /*!
     * \brief Smooth \p h in place and write the design error variance of each subcarrier.
     * \param h            K channel estimates (occupied order), replaced by the smoothed
     * \param mse          K outputs: m_k = ls_var sum_i |U_k,i|^2 lambda_i/(lambda_i+eps)
     * \param ls_var       error variance of the input estimate per subcarrier (linear,
     *                     relative to unit-energy REs; N0/2 for two LTF symbols)
     * \param signal_power mean |H_k|^2 (linear)
     * \return the window used: 0 short, 1 long
     */
    int smooth(gr_complex* h, float* mse, double ls_var, double signal_power);

    //! occupied subcarriers K (the length smooth() expects)
    std::size_t subcarriers() const { return d_K; }
    //! number of windows (1, or 2 with the adaptive window)
    std::size_t windows() const { return d_basis.size(); }
    //! rank of window \p w (the numerically nonzero eigen-directions kept)
    std::size_t rank(std::size_t w) const { return d_basis.at(w).lambda.size(); }

  private:
    struct basis {
        std::vector<gr_complex> U;   // R's eigenvectors u_i (row i: occupied order)
        std::vector<float> lambda;   // and eigenvalues (the numerically nonzero ones)
        std::vector<gr_complex> Ut;  // U transposed (row k: u_k,i over i)
        std::vector<float> U2t;      // |U|^2 transposed
    };
    static basis build(const numerology& n, int lo, int hi);  // delay window [lo, hi]

    std::size_t d_K;
    std::vector<basis> d_basis;                    // [short,] long delay window
    std::vector<std::vector<gr_complex>> d_coefs;  // u_i^H h per window (scratch)
    std::vector<float> d_wv;                       // Wiener weights (scratch)
};

}  // namespace oppsched
}  // namespace gr
