// SNR estimation, effective SNR and CQI; see snr_estimator.h.
#include <gnuradio/oppsched/snr_estimator.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "oppsched/validation.h"

namespace gr {
namespace oppsched {

namespace {

constexpr double kSnrFloorDb = -30.0;
constexpr double kLn2 = 0.69314718055994530942;

double to_db_floored(double lin) {
    if (!(lin > 0.0)) return kSnrFloorDb;
    return std::max(kSnrFloorDb, 10.0 * std::log10(lin));
}

}  // namespace

std::vector<double> cqi_params::default_thresholds_db() {
    std::vector<double> t;
    for (int k = 0; k < 15; ++k) t.push_back(-4.0 + 2.0 * k);  // -4, -2, ..., 24 dB
    return t;
}

void cqi_params::validate() const {
    if (thresholds_db.size() != 15)
        ::oppsched::throw_invalid("cqi.thresholds_db", thresholds_db.size(), "entries, need 15");
    for (size_t i = 0; i < thresholds_db.size(); ++i) {
        if (!std::isfinite(thresholds_db[i]))
            ::oppsched::throw_invalid("cqi.thresholds_db[" + std::to_string(i) + "]",
                                      thresholds_db[i], "not finite");
        if (i > 0 && !(thresholds_db[i] > thresholds_db[i - 1]))
            ::oppsched::throw_invalid("cqi.thresholds_db[" + std::to_string(i) + "]",
                                      thresholds_db[i], "not above the previous threshold");
    }
    if (!(eesm_beta > 0.0) || !std::isfinite(eesm_beta))
        ::oppsched::throw_invalid("cqi.eesm_beta", eesm_beta, "not in (0, inf)");
    if (smoothing < 0 || smoothing > 16)
        ::oppsched::throw_invalid("cqi.smoothing", smoothing, "not in [0, 16]");
}

void snr_estimator_params::validate() const {
    if (!(noise_ema > 0.0 && noise_ema <= 1.0))
        ::oppsched::throw_invalid("snr_estimator.noise_ema", noise_ema, "not in (0, 1]");
    cqi.validate();
}

double effective_snr(const float* g, size_t n, effective_snr_method m, double beta) {
    if (n == 0) return 0.0;
    double acc = 0.0;
    if (m == effective_snr_method::miesm) {
        for (size_t i = 0; i < n; ++i)
            acc += std::log2(1.0 + std::max(0.0, static_cast<double>(g[i])));
        return std::exp2(acc / n) - 1.0;
    }
    for (size_t i = 0; i < n; ++i)
        acc += std::exp(-std::max(0.0, static_cast<double>(g[i])) / beta);
    return -beta * std::log(acc / n);
}

int cqi_from_snr_db(double snr_db, const std::vector<double>& thresholds_db) {
    if (std::isnan(snr_db)) return 0;
    int c = 0;
    for (double t : thresholds_db) c += (snr_db >= t) ? 1 : 0;
    return c;
}

double cqi_lower_snr_db(int cqi, const std::vector<double>& thresholds_db) {
    if (cqi <= 0) return -std::numeric_limits<double>::infinity();
    const size_t i = std::min(static_cast<size_t>(cqi), thresholds_db.size()) - 1;
    return thresholds_db[i];
}

snr_estimator::snr_estimator(const snr_estimator_params& p) : d_p(p) { d_p.validate(); }

snr_estimate snr_estimator::estimate(const gr_complex* z1, const gr_complex* z2, size_t n) {
    snr_estimate r;
    r.snr_per_subcarrier.assign(n, 0.0f);
    if (n == 0) return r;

    // Noise from the difference, signal from the mean (see header).
    double dsum = 0.0, msum = 0.0;
    d_pow.resize(n);
    for (size_t k = 0; k < n; ++k) {
        const gr_complex d = z1[k] - z2[k];
        const gr_complex m = 0.5f * (z1[k] + z2[k]);
        dsum += static_cast<double>(std::norm(d));
        const double pm = static_cast<double>(std::norm(m));
        d_pow[k] = static_cast<float>(pm);
        msum += pm;
    }
    const double n0_slot = dsum / (2.0 * n);
    const double mean_pow = msum / n;
    if (!std::isfinite(n0_slot) || !std::isfinite(mean_pow) || !(mean_pow > 0.0))
        return r;  // zeros or garbage: not valid, CQI 0

    // A numerically noiseless slot (simulation): keep N0 strictly positive.
    const double n0_meas = std::max(n0_slot, mean_pow * 1e-10);
    r.noise_var_slot = n0_meas;
    if (!d_have_noise || n0_meas > 4.0 * d_noise || n0_meas < 0.25 * d_noise) {
        d_noise = n0_meas;  // first slot, or a step in the noise level: restart
        d_have_noise = true;
        d_noise_count = 1;
    } else {
        // Running mean over the first 1/noise_ema slots, then the EMA: the first slot's
        // error does not linger with weight (1 - ema)^k.
        ++d_noise_count;
        const double w = std::max(d_p.noise_ema, 1.0 / static_cast<double>(d_noise_count));
        d_noise += w * (n0_meas - d_noise);
    }
    const double n0 = d_noise;
    r.noise_var = n0;
    r.signal_power = std::max(0.0, mean_pow - 0.5 * n0);
    r.snr_db = to_db_floored(r.signal_power / n0);
    r.valid = true;

    // Per-subcarrier SNR, smoothed over +-w neighbours in occupied order.
    const int w = d_p.cqi.smoothing;
    const bool miesm = d_p.cqi.method == effective_snr_method::miesm;
    const double beta = d_p.cqi.eesm_beta;
    double facc = 0.0;
    for (size_t k = 0; k < n; ++k) {
        const size_t lo = k >= static_cast<size_t>(w) ? k - static_cast<size_t>(w) : 0;
        const size_t hi = std::min(n - 1, k + static_cast<size_t>(w));
        double p = 0.0;
        for (size_t j = lo; j <= hi; ++j) p += d_pow[j];
        const double cnt = static_cast<double>(hi - lo + 1);
        p /= cnt;
        const double g = std::max(0.0, p / n0 - 0.5);
        r.snr_per_subcarrier[k] = static_cast<float>(g);
        // var(g^) = (g + 1/4) / cnt for |zbar|^2/N0 with zbar ~ CN(H, N0/2).
        const double var = (g + 0.25) / cnt;
        if (miesm) {
            double f = std::log2(1.0 + g);
            if (d_p.cqi.bias_correction) f += 0.5 * var / ((1.0 + g) * (1.0 + g) * kLn2);
            facc += f;
        } else {
            double f = std::exp(-g / beta);
            if (d_p.cqi.bias_correction) f = std::max(f * 1e-3, f - 0.5 * var * f / (beta * beta));
            facc += f;
        }
    }
    const double geff = miesm ? std::exp2(facc / n) - 1.0 : -beta * std::log(facc / n);
    r.effective_snr_db = to_db_floored(geff);
    r.cqi = cqi_from_snr_db(r.effective_snr_db, d_p.cqi.thresholds_db);
    return r;
}

}  // namespace oppsched
}  // namespace gr
