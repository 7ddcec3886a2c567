#pragma once
// Per-symbol common gain of an OFDM slot from its pilots, smoothed in time. Pure class.
//
// Why: after the channel estimate from the long training, what still changes within a slot
// is common to all subcarriers of a symbol: flat fading's time variation, residual CFO and
// phase noise. Four pilots per symbol give a noisy estimate of that complex gain; a local
// linear fit over neighbouring symbols (after removing the mean phase step, the residual
// CFO) cuts its noise while following a 60 Hz fade. Measured figures: docs/phy.md,
// "Gain tracking".
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/preamble.h>

#include <complex>
#include <cstddef>
#include <vector>

namespace gr {
namespace oppsched {

/*!
 * \brief Pilot-based tracking of the common complex gain g_s of every data symbol:
 *   raw g_s = sum_p conj(H^_p P_p,s) Y_p,s / sum_p |H^_p|^2 (ML for a common factor),
 * then (track_gain) the mean phase step w is removed, a linear least-squares fit over
 * 2 halfwidth + 1 symbols (shifted inside the slot at its ends) is evaluated at s, and the
 * phase step re-applied; the error variance is the fit's leverage times N0 / sum_p|H^_p|^2
 * plus the pilots' channel-estimation error. Without track_gain: the unit-modulus phase of
 * the raw gain (half the error variance). Without track_phase (or without pilot energy):
 * g_s = 1, variance 0.
 */
class OPPSCHED_API gain_tracker final {
  public:
    /*!
     * \param pilot_pos   positions of the pilot subcarriers in occupied order
     * \param track_phase false: no tracking at all (every gain 1)
     * \param track_gain  false: per-symbol common phase only
     * \param halfwidth   time smoothing: +- symbols of the fit, [0, 64]
     */
    gain_tracker(std::vector<std::size_t> pilot_pos, bool track_phase, bool track_gain,
                 int halfwidth);

    /*!
     * \brief Track the gains of \p n_sym symbols.
     * \param Y     FFT'd data-bearing symbols, n_sym x K (occupied order, rx-scaled)
     * \param h     channel estimate H^_k (K, occupied order)
     * \param mse   its error variance per subcarrier (K, linear)
     * \param K     occupied subcarriers
     * \param n_sym data-bearing symbols in \p Y
     * \param n0    noise variance per RE (linear, relative to unit-energy REs)
     * \param seq   the slot's sequences (pilot values P_p,s)
     */
    void track(const gr_complex* Y, const gr_complex* h, const float* mse, std::size_t K, int n_sym,
               double n0, const ofdm_sequences& seq);

    //! g^_s per symbol of the last track()
    const std::vector<gr_complex>& gain() const { return d_gain; }
    //! error variance of g^_s relative to |g|^2 = 1 (linear) per symbol
    const std::vector<float>& error_var() const { return d_gvar; }

  private:
    std::vector<std::size_t> d_pilot_pos;
    bool d_track_phase, d_track_gain;
    int d_halfwidth;
    std::vector<gr_complex> d_graw;            // raw pilot gains per symbol
    std::vector<std::complex<double>> d_grot;  // the same with the mean phase step removed
    std::vector<gr_complex> d_gain;            // smoothed gains per symbol
    std::vector<float> d_gvar;                 // their error variance
};

}  // namespace oppsched
}  // namespace gr
