#pragma once
// Per-slot SNR estimation from the two long-training symbols, effective SNR for
// frequency-selective channels, and the CQI table. Pure classes: no gr::block, no I/O.
//
// SNR: mean Es/N0 per occupied subcarrier (numerology.h), from the two LTF observations of
// each occupied subcarrier (their difference is noise only, their mean signal plus half the
// noise). N0 is averaged over slots (the noise floor is stationary). Effective SNR (MIESM by
// default, or EESM) summarises a frequency-selective slot in one number, with a bias
// correction for the noisy per-subcarrier values; the CQI (0..15) counts the thresholds it
// reaches. Derivations and measured accuracy: docs/phy.md, "SNR, effective SNR and CQI".
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
    bool bias_correction = true;  //!< second-order correction for noisy g_k (docs/phy.md)

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
     * \param z1, z2 known-symbol-removed LTF subcarrier values z_i,k = Y_i,k conj(L_k), n each,
     *               occupied order
     * \param n      occupied_carriers()
     * Updates the noise EMA when the slot's noise estimate is usable.
     */
    snr_estimate estimate(const gr_complex* z1, const gr_complex* z2, size_t n);
    //! Forget the noise average (e.g. between SNR points of a sweep).
    void reset() { d_have_noise = false; }
    double noise_average() const { return d_have_noise ? d_noise : 0.0; }
    //! The noise average's whole state: the average and the slots it counts (0: none yet,
    //! average 0). What an offline decode of a recording that starts mid-stream needs to
    //! go on where the online receiver was.
    struct noise_state {
        double average = 0.0;
        long count = 0;
    };
    noise_state state() const {
        return d_have_noise ? noise_state{d_noise, d_noise_count} : noise_state{};
    }
    //! Restore a state() (count <= 0: no average, as after reset()).
    void set_state(const noise_state& s) {
        d_have_noise = s.count > 0;
        d_noise = d_have_noise ? s.average : 0.0;
        d_noise_count = d_have_noise ? s.count : 0;
    }
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
