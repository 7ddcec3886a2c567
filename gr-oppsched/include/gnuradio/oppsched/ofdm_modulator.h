#pragma once
// OFDM modulator of one oppsched slot. Pure class: no gr::block, no I/O.
//
// One slot = preamble (preamble.h) + header_symbols header symbols + payload_symbols()
// payload symbols + guard_samples() zeros, exactly numerology::slot_samples() samples.
// Each data-bearing symbol: data REs on numerology::data_subcarriers() (in increasing k,
// the RE order of the TX/RX interface), BPSK pilots (ofdm_sequences::pilot) on the pilot
// subcarriers, zeros on DC and the edge guards, IFFT (FFTW plan made once), CP.
//
// Power (the SNR convention of numerology.h): with unit-energy REs every occupied
// subcarrier has unit mean energy and every OFDM symbol (training ones included) has mean
// sample power 1; the guard is silent. Es/N0 per occupied subcarrier after a channel
// adding noise of variance sigma^2 per sample is (fft_len/occupied)/sigma^2.
//
// Cost per slot: data_symbols() IFFTs of fft_len + a copy of the precomputed preamble.
#include <gnuradio/fft/fft.h>
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/numerology.h>
#include <gnuradio/oppsched/preamble.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace gr {
namespace oppsched {

class OPPSCHED_API ofdm_modulator final {
  public:
    explicit ofdm_modulator(const numerology& n);
    ~ofdm_modulator();
    ofdm_modulator(ofdm_modulator&&) noexcept;
    ofdm_modulator& operator=(ofdm_modulator&&) noexcept;

    /*!
     * \brief Build one slot.
     * \param header    header REs (constellation points, unit mean energy), at most
     *                  numerology::header_resource_elements()
     * \param n_header  number of header REs given
     * \param payload   payload REs, at most numerology::payload_resource_elements()
     * \param n_payload number of payload REs given
     * \param out       numerology::slot_samples() output samples
     * REs not supplied (a short TB, an empty slot) are filled with the known QPSK padding
     * (ofdm_sequences::padding), so every slot has the same power and pilots.
     * \throws std::invalid_argument naming the argument when too many REs are given.
     */
    void modulate(const gr_complex* header, size_t n_header, const gr_complex* payload,
                  size_t n_payload, gr_complex* out);

    //! Convenience: returns the slot_samples() samples.
    std::vector<gr_complex> modulate(const std::vector<gr_complex>& header,
                                     const std::vector<gr_complex>& payload);

    const numerology& geometry() const { return d_seq.geometry(); }
    const ofdm_sequences& sequences() const { return d_seq; }

  private:
    ofdm_sequences d_seq;
    std::unique_ptr<gr::fft::fft_complex_rev> d_ifft;
    std::vector<int> d_data_bins, d_pilot_bins;  // FFT bins of data / pilot subcarriers
};

}  // namespace oppsched
}  // namespace gr
