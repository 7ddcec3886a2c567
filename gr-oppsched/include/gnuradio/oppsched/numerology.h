#pragma once
// The OFDM numerology of one oppsched PHY configuration, shared by TX and RX so that both
// derive every length from the same place. Pure class: no gr::block, no I/O.
#include <gnuradio/oppsched/api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gr {
namespace oppsched {

/*!
 * \brief The payload's forward error correction (tb_codec.h):
 *  - ldpc (default): the 802.11n QC-LDPC codes (ldpc.h), n = 648/1296/1944, one code per
 *    code rate, several codewords per TB (ldpc_segmentation in rate_matcher.h);
 *  - conv: the K=7 rate-1/2 convolutional code punctured to the MCS rate (conv_code.h).
 * TX and RX must agree (the header does not carry it): it is part of the numerology.
 */
enum class fec_scheme : std::uint8_t { ldpc = 0, conv = 1 };

//! "ldpc" / "conv"
OPPSCHED_API const char* to_string(fec_scheme f);
/*! \throws std::invalid_argument "numerology.fec: 'x' is not one of ldpc, conv" */
OPPSCHED_API fec_scheme fec_from_string(const std::string& name);
//! The names of every fec_scheme, in enum order: "ldpc", "conv"
OPPSCHED_API std::vector<std::string> fec_names();

struct numerology_params {
    double sample_rate = 1e6;         //!< complex samples per second (Hz)
    double slot_duration = 1.667e-3;  //!< seconds per slot (EV-DO 1.667 ms, or 3 ms)
    int fft_len = 64;                 //!< FFT size
    int cp_len = 16;                  //!< cyclic prefix, samples
    int data_carriers = 48;           //!< data subcarriers per OFDM symbol
    int pilot_carriers = 4;           //!< pilot subcarriers per OFDM symbol
    //! OFDM-symbol durations taken by the preamble: one short-training symbol (cp + fft) and
    //! the long training (guard interval + two fft-long symbols) in the rest, so at least 3
    //! (the guard interval must be >= cp_len). See preamble.h.
    int preamble_symbols = 3;
    //! OFDM symbols carrying the control header. 4 lets the 192 coded header bits go out
    //! as BPSK (about 1 dB more robust than MCS 0); with 2-3 the codec must use QPSK, about
    //! 2 dB less robust than MCS 0, and the header would limit the lowest MCS.
    int header_symbols = 4;
    //! payload FEC (both ends must use the same)
    fec_scheme fec = fec_scheme::ldpc;
    //! longest LDPC codeword a TB may use: 648, 1296 or 1944 bits (ldpc_segmentation; both
    //! ends must use the same). 1944 (default) lets long TBs use the longer 802.11n
    //! codewords; 648 caps them at the shortest, to measure what the long ones gain.
    int ldpc_max_n = 1944;
};

/*!
 * \brief Slot geometry derived from numerology_params.
 *
 * A slot is slot_samples() = round(slot_duration * sample_rate) samples: the preamble,
 * the header symbols, payload_symbols() payload symbols and guard_samples() of silence at
 * the end (absorbs timing offsets and burst ramp-down).
 *
 * Time layout of one slot (sample offsets from the slot start, default numerology):
 * \code
 *   0    STF: cp_len + fft_len samples, only even subcarriers -> two identical halves
 *   80   LTF guard interval: ltf_gi_samples() (= 32), the tail of the long symbol
 *   112  LTF symbol 0 (fft_len)            ltf_offset(0)
 *   176  LTF symbol 1 (fft_len, identical) ltf_offset(1)
 *   240  data-bearing symbol 0 (header)    symbol_offset(0), CP first
 *   ...  header_symbols header symbols, then payload_symbols() payload symbols
 *        guard_samples() zeros
 * \endcode
 *
 * Frequency layout: subcarriers are named by their signed index k in
 * [-fft_len/2, fft_len/2), k = 0 is DC (never used); fft_bin(k) maps k to the FFT bin.
 * With fft_len 64, 48 data and 4 pilots the allocation is 802.11a's (IEEE 802.11-2016
 * §17.3.5.10): occupied k = -26..-1, 1..26, pilots at -21, -7, 7, 21, DC and the 11 edge
 * carriers (-32..-27, 27..31) empty. Other sizes: the occupied carriers are the
 * data + pilot carriers closest to DC on both sides (floor(n/2) below DC, the rest above),
 * the pilots spread evenly over them.
 *
 * SNR convention (one definition for the modulator, the channel emulator, the SNR/CQI
 * estimator and the link curves): the SNR is the mean Es/N0 per occupied subcarrier.
 * The modulator gives every occupied subcarrier unit mean energy and scales the IFFT so
 * that the mean power per sample of an OFDM symbol is 1; with white noise of variance
 * sigma^2 per complex sample, Es/N0 = (fft_len / occupied_carriers()) / sigma^2, i.e.
 * SNR_subcarrier_dB = SNR_sample_dB + 10 log10(fft_len / occupied) (+0.902 dB for 64/52).
 */
class OPPSCHED_API numerology final {
  public:
    /*! \throws std::invalid_argument naming the field and value when inconsistent. */
    explicit numerology(const numerology_params& p);

    /*!
     * \brief The named profiles of the papers: "evdo" (1.667 ms slots, Srinivasan & Baras) and
     * "3ms" (3 ms slots, as Andrew & Hanly, CLAMP use), at the given sample rate (Hz), with
     * payload FEC \p fec ("ldpc" or "conv"). The old name "clamp" of "3ms" is still accepted,
     * with a deprecation warning on the GNU Radio log.
     */
    static numerology profile(const std::string& name, double sample_rate = 1e6,
                              const std::string& fec = "ldpc");
    static std::vector<std::string> profile_names();

    const numerology_params& params() const { return d_p; }
    int symbol_len() const { return d_p.fft_len + d_p.cp_len; }  //!< samples
    int slot_samples() const { return d_slot_samples; }
    int symbols_per_slot() const { return d_slot_samples / symbol_len(); }
    int guard_samples() const { return d_slot_samples - symbols_per_slot() * symbol_len(); }
    int payload_symbols() const {
        return symbols_per_slot() - d_p.preamble_symbols - d_p.header_symbols;
    }
    //! data subcarrier-symbols available to the payload in one slot
    int payload_resource_elements() const { return payload_symbols() * d_p.data_carriers; }
    double subcarrier_spacing() const { return d_p.sample_rate / d_p.fft_len; }  //!< Hz
    //! the slot duration actually realised at this sample rate (s)
    double realised_slot_duration() const { return d_slot_samples / d_p.sample_rate; }

    // ---- frequency layout (signed subcarrier indices, DC = 0) ----
    //! data subcarriers in increasing k: the order of the REs within one OFDM symbol
    const std::vector<int>& data_subcarriers() const { return d_data; }
    //! pilot subcarriers in increasing k
    const std::vector<int>& pilot_subcarriers() const { return d_pilots; }
    //! data and pilot subcarriers together, increasing k
    const std::vector<int>& occupied_subcarriers() const { return d_occupied; }
    int occupied_carriers() const { return d_p.data_carriers + d_p.pilot_carriers; }
    //! FFT bin of signed subcarrier k (k in [-fft_len/2, fft_len/2))
    int fft_bin(int k) const { return k < 0 ? k + d_p.fft_len : k; }

    // ---- time layout of a slot (sample offsets from the slot's first sample) ----
    int preamble_samples() const { return d_p.preamble_symbols * symbol_len(); }
    //! short training field: cp_len + fft_len samples, periodic with period fft_len/2
    int stf_samples() const { return symbol_len(); }
    //! guard interval in front of the two long-training symbols (>= cp_len)
    int ltf_gi_samples() const { return preamble_samples() - stf_samples() - 2 * d_p.fft_len; }
    //! first sample of long-training symbol i (0 or 1), i.e. where its FFT window starts
    int ltf_offset(int i) const { return stf_samples() + ltf_gi_samples() + i * d_p.fft_len; }
    //! OFDM symbols carrying data REs: header_symbols + payload_symbols()
    int data_symbols() const { return d_p.header_symbols + payload_symbols(); }
    //! first sample (start of the CP) of data-bearing symbol s (0 = first header symbol)
    int symbol_offset(int s) const { return preamble_samples() + s * symbol_len(); }
    //! data REs of the header symbols: header_symbols * data_carriers
    int header_resource_elements() const { return d_p.header_symbols * d_p.data_carriers; }

    // ---- SNR convention (see the class comment) ----
    //! Es/N0 per occupied subcarrier over SNR per sample: fft_len / occupied_carriers()
    double subcarrier_snr_gain() const {
        return static_cast<double>(d_p.fft_len) / occupied_carriers();
    }
    //! per-sample noise variance that gives Es/N0 = snr_db per occupied subcarrier when
    //! the OFDM symbols have mean sample power \p signal_power (1 for the modulator)
    double noise_variance_for_snr_db(double snr_db, double signal_power = 1.0) const;

  private:
    void build_subcarriers();

    numerology_params d_p;
    int d_slot_samples;
    std::vector<int> d_data, d_pilots, d_occupied;
};

}  // namespace oppsched
}  // namespace gr
