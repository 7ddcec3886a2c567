#pragma once
// OFDM demodulator of one oppsched slot. Pure class: no gr::block, no I/O.
//
// Input: the slot_samples() samples of one slot as slot_sync delivers them (CFO already
// removed, the sample at index 0 being the slot start, a few samples early at most: the
// sync's timing backoff puts every FFT window slightly inside the CP, which the channel
// estimate absorbs as a linear phase).
//
// Steps (per slot: 2 + data_symbols() FFTs of fft_len, O(occupied) per symbol):
//  1. FFT of the two long-training symbols; least-squares channel estimate and the SNR
//     (snr_estimator.h).
//  2. Wiener smoothing of the estimate across subcarriers (wiener_smoother.h).
//  3. FFT of every data-bearing symbol; per-symbol common gain from the pilots, smoothed
//     in time (gain_tracker.h).
//  4. Zero-forcing equalisation (in SISO OFDM the unbiased MMSE equaliser is ZF).
//  5. Noise variance per RE, with the channel-estimation and gain-tracking errors.
//  6. Optional: header-aided channel estimation (refine_with_header) once the header
//     decoded, with its symbols as extra training.
// Formulas, derivations and measured gains: docs/phy.md, "OFDM demodulation".
//
// Output REs are in the interface order (numerology.h): symbol by symbol, data
// subcarriers in increasing k; header REs (header_resource_elements()) and payload REs
// (payload_resource_elements()) separately.
#include <gnuradio/fft/fft.h>
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/gain_tracker.h>
#include <gnuradio/oppsched/numerology.h>
#include <gnuradio/oppsched/preamble.h>
#include <gnuradio/oppsched/snr_estimator.h>
#include <gnuradio/oppsched/wiener_smoother.h>

#include <complex>
#include <cstddef>
#include <memory>
#include <vector>

namespace gr {
namespace oppsched {

struct ofdm_demodulator_params {
    bool track_phase = true;     //!< pilot-based tracking per symbol (false: none at all)
    bool track_gain = true;      //!< track a smoothed common complex GAIN (false: phase only)
    int tracking_halfwidth = 4;  //!< time smoothing of the pilot gains: +- symbols, [0, 64]
    bool smooth_channel = true;  //!< Wiener smoothing of H^ across subcarriers (false: LS)
    int chest_delay_margin = 2;  //!< smoother's delay window [-m, cp_len + m], [0, cp_len]
    //! per slot, use the short window [-m, cp_len/2] when the energy the long one adds
    //! is consistent with noise alone (see step 2)
    bool chest_adaptive_window = true;
    //! refine_with_header() re-estimates the channel with the decoded header (step 6);
    //! false: it is a no-op
    bool header_aided_chest = true;
    snr_estimator_params snr;  //!< noise averaging, CQI table, effective-SNR method
    //! throws std::invalid_argument naming the field ("ofdm_demodulator.tracking_halfwidth: ...")
    void validate() const;
};

struct ofdm_demod_result {
    //! false: the slot is too short or holds no usable signal (zeros, non-finite);
    //! the REs are then 0 with noise variance ofdm_demodulator::max_noise_var
    bool valid = false;
    std::vector<gr_complex> header;   //!< equalised header REs
    std::vector<float> header_nvar;   //!< their noise variances
    std::vector<gr_complex> payload;  //!< equalised payload REs (empty if not asked)
    std::vector<float> payload_nvar;
    snr_estimate snr;                 //!< SNR, N0, effective SNR, CQI of the slot
    std::vector<gr_complex> channel;  //!< H^_k per occupied subcarrier (occupied order)
    std::vector<float> phase;         //!< common phase correction per data symbol (rad)
    std::vector<gr_complex> gain;     //!< common complex gain g^_s per data symbol (1 untracked)
    std::vector<float> channel_error_var;  //!< design error variance m_k of H^_k (occupied)
    int chest_window = -1;  //!< smoother window used: 0 short, 1 long (-1: LS / invalid)
};

class OPPSCHED_API ofdm_demodulator final {
  public:
    //! noise variance reported for REs that carry no information (|H^| ~ 0, invalid slot)
    static constexpr float max_noise_var = 1e9f;

    explicit ofdm_demodulator(const numerology& n, const ofdm_demodulator_params& p = {});
    ~ofdm_demodulator();
    ofdm_demodulator(ofdm_demodulator&&) noexcept;
    ofdm_demodulator& operator=(ofdm_demodulator&&) noexcept;

    /*!
     * \brief Demodulate one slot.
     * \param slot    samples from the slot start (CFO-corrected)
     * \param n       number of samples available; fewer than slot_samples() -> invalid
     * \param out     result; its vectors are resized (reuse it to avoid allocations)
     * \param payload false: header, channel and SNR only (a client that is not addressed)
     */
    void demodulate(const gr_complex* slot, size_t n, ofdm_demod_result& out, bool payload = true);
    ofdm_demod_result demodulate(const std::vector<gr_complex>& slot, bool payload = true);

    /*!
     * \brief Finish a header-only demodulate(slot, n, out, false) as the whole slot: FFT
     * the payload symbols, then redo the gain tracking and equalisation over every symbol.
     * `out` (header and payload REs, gain, phase) is then bit for bit what
     * demodulate(slot, n, out, true) gives, without estimating the SNR a second time (its
     * noise average moves once per slot). A receiver demodulates the header alone, and
     * the rest only for a slot addressed to it (or whose header failed).
     * No-op when the last demodulate() was invalid or already had the payload.
     * \param slot, n the samples given to that demodulate()
     * \param out     its result
     */
    void complete_payload(const gr_complex* slot, size_t n, ofdm_demod_result& out);

    /*!
     * \brief Header-aided channel estimation (step 6): re-estimate the channel with the
     * LTF and the header symbols as training, then redo the smoothing, gain tracking,
     * equalisation and noise variances of `out` (header and payload REs, channel, gain,
     * phase, channel_error_var, chest_window; snr is kept). Call it after demodulate(...,
     * out) once the header decoded with a good CRC; uses the FFTs that call kept.
     * O(occupied x (header_symbols + window)) + the equalisation; no FFT, no allocation.
     * No-op when header_aided_chest is false or the last slot was invalid.
     * \param header_re the transmitted header REs in interface order
     *                  (header_codec::encode of the decoded fields)
     * \param n         their number; must be header_resource_elements()
     * \param out       the result of the last demodulate() of this demodulator
     * \throws std::invalid_argument naming header_re (wrong size) or out (not the last
     *         demodulate()'s result)
     */
    void refine_with_header(const gr_complex* header_re, size_t n, ofdm_demod_result& out);

    //! the SNR estimator (its noise average persists across slots; reset() it between
    //! SNR points of a sweep)
    snr_estimator& estimator() { return d_est; }
    const numerology& geometry() const { return d_seq.geometry(); }
    const ofdm_sequences& sequences() const { return d_seq; }

  private:
    void fft_at(const gr_complex* time, gr_complex* occ_out);  // occupied values, rx-scaled
    // d_h, d_mse from the LS d_h whose error variance is ls_var per subcarrier
    void smooth_channel(double ls_var, double signal_power);
    void track(int n_sym, double n0);                             // d_tracker's gains from d_Y
    bool finish_channel(ofdm_demod_result& out);                  // d_inv_h*; false: not finite
    void equalise(ofdm_demod_result& out, int n_sym, double n0);  // steps 4-5 from d_Y

    ofdm_demodulator_params d_p;
    ofdm_sequences d_seq;
    snr_estimator d_est;
    std::unique_ptr<gr::fft::fft_complex_fwd> d_fft;
    std::vector<int> d_occ_bins;
    std::vector<size_t> d_data_pos, d_pilot_pos;  // positions in occupied order
    gain_tracker d_tracker;                       // step 3
    std::unique_ptr<wiener_smoother> d_smoother;  // step 2 (null: LS only)
    int d_window = -1;                            // smoother window of this slot
    std::vector<gr_complex> d_z1, d_z2, d_h;
    std::vector<gr_complex> d_Y;      // FFT'd data symbols, n_sym x occupied
    std::vector<float> d_inv_h2;      // 1/|H^_k|^2 (0 where unusable)
    std::vector<gr_complex> d_inv_h;  // 1/H^_k
    std::vector<float> d_mse;         // m_k, channel-estimation error variance
    // state of the last demodulate() kept for refine_with_header()
    bool d_ready = false;            // d_z1, d_z2, d_Y, the gains belong to a valid slot
    int d_nsym = 0;                  // data-bearing symbols FFT'd in d_Y
    double d_n0 = 0.0, d_sig = 0.0;  // its N0 and signal power (LTF)
    std::vector<gr_complex> d_hg;    // decision-directed gains of the header symbols
};

}  // namespace oppsched
}  // namespace gr
