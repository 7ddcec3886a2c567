// Known signals of the oppsched slot; see preamble.h.
#include <gnuradio/oppsched/preamble.h>

#include <cmath>
#include <complex>

namespace gr {
namespace oppsched {

namespace {

constexpr double kPi = 3.14159265358979323846;

// IEEE 802.11-2016 eq. 17-8: L_-26..26 (0 at DC).
constexpr int kL80211a[53] = {1,  1,  -1, -1, 1,  1, -1, 1,  -1, 1, 1,  1,  1,  1, 1,  -1, -1, 1,
                              1,  -1, 1,  -1, 1,  1, 1,  1,  0,  1, -1, -1, 1,  1, -1, 1,  -1, 1,
                              -1, -1, -1, -1, -1, 1, 1,  -1, -1, 1, -1, 1,  -1, 1, 1,  1,  1};

constexpr unsigned kStfSeed = 87;        // lowest-PAPR seed for the default STF (3.9 dB)
constexpr unsigned kLtfSeed = 127;       // generic numerologies only
constexpr unsigned kPolaritySeed = 127;  // 802.11a pilot polarity: all ones
constexpr unsigned kPaddingSeed = 93;

// Time signal of one OFDM symbol body (no CP): scale * sum_k X_k exp(j 2 pi k n / N),
// computed directly in double (construction only).
std::vector<gr_complex> synthesise(const numerology& num, const std::vector<gr_complex>& occ_values,
                                   double scale) {
    const int n_fft = num.params().fft_len;
    std::vector<gr_complex> out(static_cast<size_t>(n_fft));
    const auto& occ = num.occupied_subcarriers();
    for (int n = 0; n < n_fft; ++n) {
        std::complex<double> acc{0.0, 0.0};
        for (size_t i = 0; i < occ.size(); ++i) {
            const double ph = 2.0 * kPi * occ[i] * n / n_fft;
            acc += std::complex<double>(occ_values[i]) * std::polar(1.0, ph);
        }
        acc *= scale;
        out[static_cast<size_t>(n)] =
            gr_complex(static_cast<float>(acc.real()), static_cast<float>(acc.imag()));
    }
    return out;
}

}  // namespace

std::vector<int> ofdm_sequences::scrambler_bits(unsigned seed, size_t n) {
    // x^7 + x^4 + 1: the output (and feedback) bit is x7 xor x4 of the 7-bit state.
    unsigned state = seed & 0x7Fu;
    std::vector<int> bits(n);
    for (size_t i = 0; i < n; ++i) {
        const unsigned b = ((state >> 6) ^ (state >> 3)) & 1u;
        state = ((state << 1) | b) & 0x7Fu;
        bits[i] = static_cast<int>(b);
    }
    return bits;
}

ofdm_sequences::ofdm_sequences(const numerology& n)
    : d_num(n),
      d_tx_scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(n.occupied_carriers())))),
      d_rx_scale(static_cast<float>(std::sqrt(static_cast<double>(n.occupied_carriers())) /
                                    n.params().fft_len)) {
    const auto& occ = n.occupied_subcarriers();
    const size_t n_occ = occ.size();
    const int n_fft = n.params().fft_len;

    // LTF: 802.11a's L on -26..26, else scrambler BPSK.
    d_ltf.resize(n_occ);
    const bool wifi = (n_occ == 52 && occ.front() == -26 && occ.back() == 26);
    const auto ltf_bits = scrambler_bits(kLtfSeed, n_occ);
    for (size_t i = 0; i < n_occ; ++i) {
        const float v = wifi ? static_cast<float>(kL80211a[occ[i] + 26])
                             : static_cast<float>(1 - 2 * ltf_bits[i]);
        d_ltf[i] = gr_complex(v, 0.0f);
    }

    // STF: BPSK sqrt(2) on even k only -> period fft_len/2 in time.
    d_stf.assign(n_occ, gr_complex(0.0f, 0.0f));
    size_t n_even = 0;
    for (int k : occ) n_even += (k % 2 == 0) ? 1 : 0;
    const auto stf_bits = scrambler_bits(kStfSeed, n_even);
    // Energy per even tone so that the sample power is 1: n_occ / n_even (2 for 52/26).
    const float amp = static_cast<float>(std::sqrt(static_cast<double>(n_occ) / n_even));
    size_t e = 0;
    for (size_t i = 0; i < n_occ; ++i) {
        if (occ[i] % 2 == 0) {
            d_stf[i] = gr_complex(amp * static_cast<float>(1 - 2 * stf_bits[e]), 0.0f);
            ++e;
        }
    }

    // Pilots.
    const int n_pil = n.params().pilot_carriers;
    d_pilot_base.assign(static_cast<size_t>(n_pil), 1.0f);
    if (n_pil > 0) d_pilot_base.back() = -1.0f;
    const auto pol = scrambler_bits(kPolaritySeed, 127);
    d_polarity.resize(127);
    for (size_t i = 0; i < 127; ++i) d_polarity[i] = static_cast<float>(1 - 2 * pol[i]);

    // Padding QPSK for every data RE of the slot.
    const size_t n_re =
        static_cast<size_t>(n.header_resource_elements() + n.payload_resource_elements());
    const auto pad_bits = scrambler_bits(kPaddingSeed, 2 * n_re);
    d_padding.resize(n_re);
    const float r = static_cast<float>(1.0 / std::sqrt(2.0));
    for (size_t i = 0; i < n_re; ++i)
        d_padding[i] = gr_complex(r * static_cast<float>(1 - 2 * pad_bits[2 * i]),
                                  r * static_cast<float>(1 - 2 * pad_bits[2 * i + 1]));

    // Time domain: STF (CP + body), GI + two long symbols.
    const int cp = n.params().cp_len;
    const auto stf_body = synthesise(n, d_stf, d_tx_scale);
    d_ltf_time = synthesise(n, d_ltf, d_tx_scale);
    d_preamble.clear();
    d_preamble.reserve(static_cast<size_t>(n.preamble_samples()));
    for (int i = n_fft - cp; i < n_fft; ++i) d_preamble.push_back(stf_body[static_cast<size_t>(i)]);
    d_preamble.insert(d_preamble.end(), stf_body.begin(), stf_body.end());
    const int gi = n.ltf_gi_samples();
    // The GI is the cyclic extension of the long symbol (it may exceed fft_len when the
    // numerology gives the preamble more symbols: wrap around).
    for (int i = 0; i < gi; ++i) {
        const int idx = ((n_fft - gi + i) % n_fft + n_fft) % n_fft;
        d_preamble.push_back(d_ltf_time[static_cast<size_t>(idx)]);
    }
    d_preamble.insert(d_preamble.end(), d_ltf_time.begin(), d_ltf_time.end());
    d_preamble.insert(d_preamble.end(), d_ltf_time.begin(), d_ltf_time.end());
    d_ltf_pair.assign(d_preamble.end() - 2 * n_fft, d_preamble.end());
}

}  // namespace oppsched
}  // namespace gr
