// OFDM demodulator; see ofdm_demodulator.h.
#include <gnuradio/oppsched/ofdm_demodulator.h>

#include <algorithm>
#include <cmath>

namespace gr {
namespace oppsched {

namespace {
// Channel-estimation error factor: two LTF symbols averaged -> error variance N0/2.
constexpr float kChestFactor = 1.5f;
}  // namespace

ofdm_demodulator::ofdm_demodulator(const numerology& n, const ofdm_demodulator_params& p)
    : d_p(p),
      d_seq(n),
      d_est(p.snr),
      d_fft(std::make_unique<gr::fft::fft_complex_fwd>(n.params().fft_len)) {
    d_p.validate();
    const auto& occ = n.occupied_subcarriers();
    for (int k : occ) d_occ_bins.push_back(n.fft_bin(k));
    // Positions of the data and pilot subcarriers within the occupied list.
    for (int k : n.data_subcarriers())
        d_data_pos.push_back(
            static_cast<size_t>(std::find(occ.begin(), occ.end(), k) - occ.begin()));
    for (int k : n.pilot_subcarriers())
        d_pilot_pos.push_back(
            static_cast<size_t>(std::find(occ.begin(), occ.end(), k) - occ.begin()));
    const size_t K = occ.size();
    d_z1.resize(K);
    d_z2.resize(K);
    d_y.resize(K);
    d_h.resize(K);
    d_inv_h2.resize(K);
    d_inv_h.resize(K);
}

ofdm_demodulator::~ofdm_demodulator() = default;
ofdm_demodulator::ofdm_demodulator(ofdm_demodulator&&) noexcept = default;
ofdm_demodulator& ofdm_demodulator::operator=(ofdm_demodulator&&) noexcept = default;

void ofdm_demodulator::fft_at(const gr_complex* time, gr_complex* occ_out) {
    const int n_fft = geometry().params().fft_len;
    gr_complex* in = d_fft->get_inbuf();
    std::copy(time, time + n_fft, in);
    d_fft->execute();
    const gr_complex* out = d_fft->get_outbuf();
    const float sc = d_seq.rx_scale();
    for (size_t i = 0; i < d_occ_bins.size(); ++i) occ_out[i] = sc * out[d_occ_bins[i]];
}

void ofdm_demodulator::equalise_symbol(int s, const gr_complex* slot, double n0, gr_complex* re,
                                       float* nvar, float* phase) {
    const numerology& num = geometry();
    fft_at(slot + num.symbol_offset(s) + num.params().cp_len, d_y.data());

    // Common phase error from the pilots, channel-weighted (ML for a common rotation).
    gr_complex rot(1.0f, 0.0f);
    float ph = 0.0f;
    if (d_p.track_phase && !d_pilot_pos.empty()) {
        gr_complex c(0.0f, 0.0f);
        for (size_t i = 0; i < d_pilot_pos.size(); ++i) {
            const size_t q = d_pilot_pos[i];
            c += std::conj(d_h[q] * d_seq.pilot(s, static_cast<int>(i))) * d_y[q];
        }
        const float a = std::abs(c);
        if (a > 0.0f && std::isfinite(a)) {
            rot = std::conj(c) / a;
            ph = std::arg(c);
        }
    }
    *phase = ph;
    const float n0f = static_cast<float>(n0) * kChestFactor;
    // The CPE estimate's phase error (variance 1.5 N0 / (2 sum_p |H_p|^2)) rotates every
    // RE of the symbol: it adds that much to each RE's error variance (unit-energy REs).
    const float cpe_var =
        (d_p.track_phase && d_pilot_energy > 0.0f) ? 0.5f * n0f / d_pilot_energy : 0.0f;
    for (size_t i = 0; i < d_data_pos.size(); ++i) {
        const size_t q = d_data_pos[i];
        if (d_inv_h2[q] > 0.0f) {
            re[i] = d_y[q] * rot * d_inv_h[q];
            nvar[i] = std::min(max_noise_var, n0f * d_inv_h2[q] + cpe_var);
        } else {
            re[i] = gr_complex(0.0f, 0.0f);
            nvar[i] = max_noise_var;
        }
    }
}

void ofdm_demodulator::demodulate(const gr_complex* slot, size_t n, ofdm_demod_result& out,
                                  bool payload) {
    const numerology& num = geometry();
    const size_t n_hdr = static_cast<size_t>(num.header_resource_elements());
    const size_t n_pay = payload ? static_cast<size_t>(num.payload_resource_elements()) : 0;
    const size_t K = d_occ_bins.size();
    const int n_sym = payload ? num.data_symbols() : num.params().header_symbols;

    out.header.assign(n_hdr, gr_complex(0.0f, 0.0f));
    out.header_nvar.assign(n_hdr, max_noise_var);
    out.payload.assign(n_pay, gr_complex(0.0f, 0.0f));
    out.payload_nvar.assign(n_pay, max_noise_var);
    out.channel.assign(K, gr_complex(0.0f, 0.0f));
    out.phase.assign(static_cast<size_t>(n_sym), 0.0f);
    out.valid = false;
    out.snr = snr_estimate{};
    out.snr.snr_per_subcarrier.assign(K, 0.0f);
    if (slot == nullptr || n < static_cast<size_t>(num.slot_samples())) return;

    // 1-2: LTF, channel estimate, SNR.
    fft_at(slot + num.ltf_offset(0), d_z1.data());
    fft_at(slot + num.ltf_offset(1), d_z2.data());
    const auto& ltf = d_seq.ltf_freq();
    for (size_t k = 0; k < K; ++k) {
        // L_k = +-1: multiplying by conj(L_k) removes it.
        d_z1[k] *= std::conj(ltf[k]);
        d_z2[k] *= std::conj(ltf[k]);
        d_h[k] = 0.5f * (d_z1[k] + d_z2[k]);
    }
    out.snr = d_est.estimate(d_z1.data(), d_z2.data(), K);
    if (!out.snr.valid) return;
    // Subcarriers whose estimate is 60 dB below the mean carry nothing usable.
    const float floor = static_cast<float>(out.snr.signal_power * 1e-6 + 1e-30);
    bool finite = true;
    for (size_t k = 0; k < K; ++k) {
        const float p = std::norm(d_h[k]);
        finite = finite && std::isfinite(p);
        if (p > floor && std::isfinite(p)) {
            d_inv_h2[k] = 1.0f / p;
            d_inv_h[k] = std::conj(d_h[k]) / p;
        } else {
            d_inv_h2[k] = 0.0f;
            d_inv_h[k] = gr_complex(0.0f, 0.0f);
        }
    }
    if (!finite) {
        out.snr.valid = false;
        return;
    }
    d_pilot_energy = 0.0f;
    for (size_t q : d_pilot_pos) d_pilot_energy += std::norm(d_h[q]);
    std::copy(d_h.begin(), d_h.end(), out.channel.begin());

    // 3-5: data-bearing symbols.
    const size_t n_data = d_data_pos.size();
    const int hs = num.params().header_symbols;
    for (int s = 0; s < n_sym; ++s) {
        gr_complex* re;
        float* nv;
        if (s < hs) {
            re = out.header.data() + static_cast<size_t>(s) * n_data;
            nv = out.header_nvar.data() + static_cast<size_t>(s) * n_data;
        } else {
            re = out.payload.data() + static_cast<size_t>(s - hs) * n_data;
            nv = out.payload_nvar.data() + static_cast<size_t>(s - hs) * n_data;
        }
        equalise_symbol(s, slot, out.snr.noise_var, re, nv, &out.phase[static_cast<size_t>(s)]);
    }
    out.valid = true;
}

ofdm_demod_result ofdm_demodulator::demodulate(const std::vector<gr_complex>& slot, bool payload) {
    ofdm_demod_result r;
    demodulate(slot.data(), slot.size(), r, payload);
    return r;
}

}  // namespace oppsched
}  // namespace gr
