#pragma once
// The known signals of an oppsched slot: the preamble (short and long training), the
// pilots and the padding of unused data REs. Shared by the modulator, the synchroniser
// and the demodulator so that all three use one definition. Pure class: no gr::block.
//
// Preamble (numerology::preamble_samples() = 3 symbol durations = 240 samples at the
// default numerology; sample offsets from the slot start):
//
//   [0, 80)     STF  one OFDM symbol (cp_len + fft_len) carrying BPSK (amplitude sqrt 2) on
//                    the EVEN occupied subcarriers only, so its fft_len-sample body is two
//                    identical halves of fft_len/2 = 32 samples (Schmidl & Cox, IEEE Trans.
//                    Commun. 45(12), 1997, §III: "first training symbol"), and, the CP being
//                    the tail of the second half, the whole 80 samples are periodic with
//                    period 32. Used for detection (S&C timing metric), coarse timing and
//                    coarse CFO (S&C eq. 39: phi = angle(P), range +-1 subcarrier spacing).
//   [80, 112)   LTF guard interval: the last ltf_gi_samples() = 32 samples of the long
//                    symbol (802.11a's GI2).
//   [112, 240)  two identical long symbols: 802.11a's L sequence (IEEE 802.11-2016
//                    eq. 17-8) on all 52 occupied subcarriers (BPSK +-1). Used to verify a
//                    detection (cross-correlation with the known symbols), for fine timing,
//                    fine CFO (lag fft_len autocorrelation, range +-0.5 spacing), the
//                    channel estimate (mean of the two) and the noise estimate (their
//                    difference).
//
// Every training and data symbol has mean sample power 1 (see numerology.h, SNR
// convention): the STF's 26 tones carry energy 2 each, the LTF's 52 tones energy 1.
//
// Bit source for every sequence that is not taken from 802.11a: the 802.11 scrambler
// x^7 + x^4 + 1 (IEEE 802.11-2016 §17.3.5.5), with the seed stated at each use.
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/numerology.h>

#include <cstddef>
#include <vector>

namespace gr {
namespace oppsched {

class OPPSCHED_API ofdm_sequences final {
  public:
    explicit ofdm_sequences(const numerology& n);

    const numerology& geometry() const { return d_num; }

    //! STF value on every occupied subcarrier (occupied order; 0 on odd k). For the
    //! default numerology BPSK sqrt(2)*(+-1) from the scrambler seeded with 87 (the seed
    //! of lowest PAPR, 3.9 dB, among the 127); other numerologies use the same bits.
    const std::vector<gr_complex>& stf_freq() const { return d_stf; }
    //! LTF value (+-1) on every occupied subcarrier, occupied order (802.11a's L_-26..26
    //! for 52 occupied; scrambler bits, seed 127, otherwise)
    const std::vector<gr_complex>& ltf_freq() const { return d_ltf; }
    //! pilot value of pilot i (pilot order) in data-bearing symbol s (0 = first header
    //! symbol): base_i * p_(s mod 127), base = (1, 1, 1, -1) and p the 802.11a pilot
    //! polarity sequence (IEEE 802.11-2016 eq. 17-25: the scrambler, seed all ones,
    //! 0 -> +1, 1 -> -1). Generic pilot counts: base +1 except the last, -1.
    gr_complex pilot(int s, int i) const {
        return d_pilot_base[static_cast<size_t>(i)] * d_polarity[static_cast<size_t>(s % 127)];
    }
    //! QPSK value (unit energy) that fills data RE \p re (header REs first, then payload)
    //! when the caller supplies fewer REs than the slot holds: the scrambler (seed 93)
    //! bit pairs, (1-2a + j(1-2b))/sqrt(2). Keeps the transmitted power constant.
    gr_complex padding(size_t re) const { return d_padding[re]; }

    //! The whole preamble in time, preamble_samples() samples, sample power 1.
    const std::vector<gr_complex>& preamble() const { return d_preamble; }
    //! One long-training symbol in time (fft_len samples), as transmitted.
    const std::vector<gr_complex>& ltf_symbol() const { return d_ltf_time; }
    //! The two long symbols back to back (2 fft_len samples): the sync's reference.
    const std::vector<gr_complex>& ltf_pair() const { return d_ltf_pair; }

    //! IFFT scale of the modulator: 1/sqrt(occupied_carriers()) on an unnormalised IFFT
    float tx_scale() const { return d_tx_scale; }
    //! FFT scale of the demodulator: sqrt(occupied)/fft_len, so that a noiseless unit
    //! channel returns exactly the transmitted subcarrier values
    float rx_scale() const { return d_rx_scale; }

    //! n bits of the 802.11 scrambler x^7 + x^4 + 1 from a 7-bit seed (1..127)
    static std::vector<int> scrambler_bits(unsigned seed, size_t n);

  private:
    numerology d_num;
    std::vector<gr_complex> d_stf, d_ltf;
    std::vector<float> d_pilot_base, d_polarity;
    std::vector<gr_complex> d_padding;
    std::vector<gr_complex> d_preamble, d_ltf_time, d_ltf_pair;
    float d_tx_scale, d_rx_scale;
};

}  // namespace oppsched
}  // namespace gr
