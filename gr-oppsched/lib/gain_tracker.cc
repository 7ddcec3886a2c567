// Pilot-based gain tracking; see gain_tracker.h.
#include <gnuradio/oppsched/gain_tracker.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "oppsched/validation.h"

namespace gr {
namespace oppsched {

gain_tracker::gain_tracker(std::vector<std::size_t> pilot_pos, bool track_phase, bool track_gain,
                           int halfwidth)
    : d_pilot_pos(std::move(pilot_pos)),
      d_track_phase(track_phase),
      d_track_gain(track_gain),
      d_halfwidth(halfwidth) {
    if (halfwidth < 0 || halfwidth > 64)
        ::oppsched::throw_invalid("gain_tracker.halfwidth", halfwidth, "not in [0, 64]");
}

void gain_tracker::track(const gr_complex* Y, const gr_complex* h, const float* mse, std::size_t K,
                         int n_sym, double n0, const ofdm_sequences& seq) {
    float pilot_energy = 0.0f;  // sum_p |H^_p|^2
    for (size_t q : d_pilot_pos) pilot_energy += std::norm(h[q]);
    const size_t S = static_cast<size_t>(n_sym);
    d_graw.assign(S, gr_complex(0.0f, 0.0f));
    d_gain.assign(S, gr_complex(1.0f, 0.0f));
    d_gvar.assign(S, 0.0f);
    if (!d_track_phase || d_pilot_pos.empty() || !(pilot_energy > 0.0f)) return;
    for (size_t s = 0; s < S; ++s) {
        const gr_complex* y = Y + s * K;
        gr_complex c(0.0f, 0.0f);
        for (size_t i = 0; i < d_pilot_pos.size(); ++i) {
            const size_t q = d_pilot_pos[i];
            c += std::conj(h[q] * seq.pilot(static_cast<int>(s), static_cast<int>(i))) * y[q];
        }
        d_graw[s] = c / pilot_energy;
    }
    // Pilot-side channel-estimation error, common to every symbol of the slot.
    double pil_err = 0.0;
    for (size_t q : d_pilot_pos) pil_err += mse[q] * std::norm(h[q]);
    pil_err /= static_cast<double>(pilot_energy) * pilot_energy;
    const double raw_var = n0 / pilot_energy;

    if (!d_track_gain) {
        // Per-symbol common phase only (ML common rotation); its phase error has half the
        // complex error variance.
        for (size_t s = 0; s < S; ++s) {
            const float a = std::abs(d_graw[s]);
            d_gain[s] = (a > 0.0f && std::isfinite(a)) ? d_graw[s] / a : gr_complex(1.0f, 0.0f);
            d_gvar[s] = static_cast<float>(0.5 * (raw_var + pil_err));
        }
        return;
    }
    // Residual CFO: the mean phase step between symbols, removed before the fit.
    std::complex<double> acc(0.0, 0.0);
    for (size_t s = 0; s + 1 < S; ++s)
        acc += std::complex<double>(d_graw[s + 1] * std::conj(d_graw[s]));
    const double w = std::abs(acc) > 0.0 ? std::arg(acc) : 0.0;
    const size_t m = std::min(S, static_cast<size_t>(2 * d_halfwidth + 1));
    const size_t hw = static_cast<size_t>(d_halfwidth);
    // derotated gains d_t = g_t e^{-j w t} (phasor recursion: one sincos per slot)
    d_grot.resize(S);
    const std::complex<double> step = std::polar(1.0, -w);
    std::complex<double> rot(1.0, 0.0);
    for (size_t t = 0; t < S; ++t) {
        d_grot[t] = std::complex<double>(d_graw[t]) * rot;
        rot *= step;
    }
    rot = 1.0;
    for (size_t s = 0; s < S; ++s) {
        // window [a, a + m) of m symbols around s, shifted inside the slot
        const size_t a = std::min(s > hw ? s - hw : 0, S - m);
        const double tbar = static_cast<double>(a) + 0.5 * static_cast<double>(m - 1);
        std::complex<double> mean(0.0, 0.0), slope(0.0, 0.0);
        double sxx = 0.0;
        for (size_t t = a; t < a + m; ++t) {
            const double dt = static_cast<double>(t) - tbar;
            mean += d_grot[t];
            slope += dt * d_grot[t];
            sxx += dt * dt;
        }
        mean /= static_cast<double>(m);
        const double ds = static_cast<double>(s) - tbar;
        std::complex<double> g = mean;
        double lev = 1.0 / static_cast<double>(m);
        if (sxx > 0.0) {
            g += (slope / sxx) * ds;
            lev += ds * ds / sxx;
        }
        g *= std::conj(rot);  // e^{+j w s}
        rot *= step;
        d_gain[s] = gr_complex(static_cast<float>(g.real()), static_cast<float>(g.imag()));
        d_gvar[s] = static_cast<float>(lev * raw_var + pil_err);
    }
}

}  // namespace oppsched
}  // namespace gr
