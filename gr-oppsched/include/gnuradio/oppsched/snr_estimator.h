#pragma once
// Per-slot SNR estimation from the two long-training symbols, effective SNR for
// frequency-selective channels, and the CQI table. Pure classes: no gr::block, no I/O.
//
// SNR definition (numerology.h): mean Es/N0 per occupied subcarrier. The demodulator hands
// the estimator, for each occupied subcarrier k, the two LTF observations with the known
// symbol removed, z_i,k = Y_i,k conj(L_k) = H_k + w_i,k, w ~ CN(0, N0), in units where a
// unit channel gives z = 1 (ofdm_sequences::rx_scale). Then
//   noise     N0_slot = sum_k |z_1,k - z_2,k|^2 / (2 K)        (E|w1 - w2|^2 = 2 N0)
//   signal    S = sum_k |zbar_k|^2 / K - N0 / 2,  zbar = (z_1 + z_2)/2   (E|zbar|^2 = |H|^2 + N0/2)
//   SNR       S / N0
// with K = occupied_carriers() (52: 52 complex noise samples, so one slot's N0 has a
// relative standard deviation of 1/sqrt(52), 0.6 dB). Because the receiver's noise floor
// is stationary, N0 is smoothed over slots: a running mean over the first 1/noise_ema
// slots, then an EMA with weight noise_ema (1 = this slot only); a slot whose N0 differs
// by more than 6 dB from the average restarts it (a step in the noise level; with 52 DOF
// that never happens by chance).
//
// Effective SNR (one number for a frequency-selective slot):
//  - miesm (default): mutual-information effective SNR with the Gaussian-input
//    (Shannon) mapping I(g) = log2(1 + g): g_eff = 2^(mean_k I(g_k)) - 1. It does not
//    depend on the MCS (the CQI is computed before an MCS is chosen; the MAC maps CQI to
//    MCS with measured link curves that use this same g_eff, which absorbs the
//    constellation-specific mismatch). Flat channel: g_eff = g.
//  - eesm: exponential effective SNR, g_eff = -beta ln(mean_k exp(-g_k / beta)), with a
//    single configurable beta (per-MCS betas belong to the link-curve tool, which can call
//    effective_snr() with its own beta).
// The per-subcarrier g_k = (|zbar_k|^2 averaged over +-smoothing neighbours - N0/2) / N0
// are noisy at low SNR, and both mappings are concave/convex, so a plain average is
// biased (MIESM by -0.8 dB at 0 dB SNR with no smoothing). We smooth over 3 subcarriers
// (coherence bandwidth at CP-limited delay spread is >= 4 subcarriers) and apply the
// second-order (delta-method) correction E f(g^) ~ f(g) + f''(g) var(g^)/2 with
// var(g^_k) = (g_k + 1/4)/n_k, which removes the bias to within 0.15 dB over -3..30 dB.
//
// CQI: index 0..15 from the effective SNR in dB through 15 increasing thresholds:
// CQI = number of thresholds <= g_eff_dB (0 = below the first, or no slot detected).
// Default thresholds: -4, -2, 0, ..., 24 dB (2 dB steps). The MAC's link adaptation maps
// CQI -> MCS from measured link curves; cqi_lower_snr_db() gives the lower edge of a bin.
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/api.h>

#include <cstddef>
#include <vector>

namespace gr {
namespace oppsched {

enum class effective_snr_method { miesm, eesm };

struct cqi_params {
    //! 15 strictly increasing effective-SNR thresholds (dB): CQI k >= 1 needs >= [k-1]
    std::vector<double> thresholds_db = default_thresholds_db();
    effective_snr_method method = effective_snr_method::miesm;
    double eesm_beta = 4.0;       //!< EESM beta (linear, > 0); used when method == eesm
    int smoothing = 1;            //!< per-subcarrier SNR averaged over +-smoothing carriers
    bool bias_correction = true;  //!< second-order correction for noisy g_k (see above)

    static std::vector<double> default_thresholds_db();
    //! throws std::invalid_argument naming the field ("cqi.thresholds_db[3]: ...")
    void validate() const;
};

struct snr_estimator_params {
    //! EMA weight of the newest slot's noise estimate, (0, 1]; 1 = per-slot only.
    double noise_ema = 0.1;
    cqi_params cqi;
    void validate() const;
};

struct snr_estimate {
    bool valid = false;                     //!< false: no usable signal (zeros, non-finite input)
    double noise_var = 0.0;                 //!< N0 used (smoothed), per occupied subcarrier
    double noise_var_slot = 0.0;            //!< N0 measured in this slot alone
    double signal_power = 0.0;              //!< mean |H_k|^2 over occupied subcarriers (>= 0)
    double snr_db = -30.0;                  //!< 10 log10(signal_power / noise_var), floored at -30
    double effective_snr_db = -30.0;        //!< see method; floored at -30
    int cqi = 0;                            //!< 0..15
    std::vector<float> snr_per_subcarrier;  //!< g_k (linear), occupied order
};

/*!
 * \brief Effective SNR (linear) of per-subcarrier SNRs \p g (linear), no bias correction:
 * miesm: 2^(mean log2(1+g)) - 1; eesm: -beta ln(mean exp(-g/beta)). Used by the link-curve
 * tool on true or estimated per-subcarrier SNRs. Returns 0 for n == 0.
 */
OPPSCHED_API double effective_snr(const float* g, size_t n, effective_snr_method m, double beta);
//! CQI 0..15 of an effective SNR in dB (NaN -> 0).
OPPSCHED_API int cqi_from_snr_db(double snr_db, const std::vector<double>& thresholds_db);
//! lower edge (dB) of CQI \p cqi's bin (-inf for 0)
OPPSCHED_API double cqi_lower_snr_db(int cqi, const std::vector<double>& thresholds_db);

class OPPSCHED_API snr_estimator final {
  public:
    explicit snr_estimator(const snr_estimator_params& p = {});

    /*!
     * \brief Estimate from the two LTF observations of one slot.
     * \param z1, z2 known-symbol-removed LTF subcarrier values (see above), n each,
     *               occupied order
     * \param n      occupied_carriers()
     * Updates the noise EMA when the slot's noise estimate is usable.
     */
    snr_estimate estimate(const gr_complex* z1, const gr_complex* z2, size_t n);
    //! Forget the noise average (e.g. between SNR points of a sweep).
    void reset() { d_have_noise = false; }
    double noise_average() const { return d_have_noise ? d_noise : 0.0; }
    const snr_estimator_params& params() const { return d_p; }

  private:
    snr_estimator_params d_p;
    bool d_have_noise = false;
    double d_noise = 0.0;
    long d_noise_count = 0;
    std::vector<float> d_pow;  // scratch
};

}  // namespace oppsched
}  // namespace gr
