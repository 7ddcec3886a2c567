#pragma once
// OFDM demodulator of one oppsched slot. Pure class: no gr::block, no I/O.
//
// Input: the slot_samples() samples of one slot as slot_sync delivers them (CFO already
// removed, the sample at index 0 being the slot start, a few samples early at most: the
// sync's timing backoff puts every FFT window slightly inside the CP, which the channel
// estimate absorbs as a linear phase).
//
// Steps (costs per slot: 2 + data_symbols() FFTs of fft_len, O(occupied x window) once
// for the channel smoother, O(occupied) per symbol):
//  1. FFT of the two long-training symbols; z_i,k = Y_i,k conj(L_k) (L = +-1).
//  2. Least-squares estimate h_k = (z_1,k + z_2,k)/2 (error variance N0/2), then smoothed
//     across subcarriers by a robust frequency-domain Wiener (LMMSE) filter (Li, Cimini &
//     Sollenberger, "Robust channel estimation for OFDM systems with rapid dispersive fading
//     channels", IEEE Trans. Commun. 46(7), 1998: the robust design assumes a UNIFORM power
//     delay profile over the longest delay window expected and is insensitive to the
//     actual profile inside it), in the low-rank (eigen-decomposition) form of Edfors et
//     al. ("OFDM channel estimation by singular value decomposition", IEEE Trans. Commun.
//     46(7), 1998):
//        R = F F^H / L = U diag(lambda) U^H,  F_k,tau = e^{-j 2 pi k tau / N},
//        tau in [-chest_delay_margin, cp_len + chest_delay_margin] (L delays: the sync puts
//        the first path timing_backoff samples into the CP, so the channel occupies
//        [timing_backoff, cp_len + timing_backoff) plus a margin for timing error),
//        H^ = U diag(lambda_i / (lambda_i + eps)) U^H h,  eps = (N0/2) / S (S = mean |H|^2).
//     The design error variance per subcarrier is
//        m_k = (N0/2) sum_i |U_k,i|^2 lambda_i / (lambda_i + eps),
//     i.e. at high SNR the leverage of a projection onto the L-dimensional delay window:
//     mean L/K = 21/52 of the LS error (N0/2 -> 0.2 N0: 0.97 dB at high SNR), less at low
//     SNR (eps large: the weak eigen-directions are dropped). Unbiased at high SNR for ANY
//     channel within the window; a channel longer than the window is smoothed (biased).
//     Adaptive window (chest_adaptive_window): a second, short window [-margin, cp_len/2]
//     (11 delays: 11/52 of the LS error at high SNR, another 0.35 dB) is used for the slot
//     when the energy the long window's extra eigen-directions capture is consistent with
//     noise alone (below (N0/2)(d + 4 sqrt d), d = the rank difference, 10: a chi-square
//     test, false alarm ~1e-3 on a short channel). Flat and short channels thus get the
//     short window; a significant path beyond cp_len/2 selects the long one.
//     SNR, N0, effective SNR and CQI from snr_estimator (snr_estimator.h), on the LS
//     observations (unchanged).
//  3. All data-bearing symbols are FFT'd first; per symbol s the pilots give the common
//     complex gain relative to the LTF (ML for a common complex factor given H^),
//        g_s = sum_p conj(H^_p P_p,s) Y_p,s / sum_p |H^_p|^2,   var = N0 / sum_p |H^_p|^2,
//     which is flat fading's time variation plus residual CFO and phase noise. The noisy
//     g_s (4 pilots) are smoothed in time: the mean phase step (residual CFO)
//     w = angle(sum_s g_s+1 conj(g_s)) is removed, a local LINEAR least-squares fit over
//     2 tracking_halfwidth + 1 symbols (the window shifted inside the slot at its ends) is
//     evaluated at s, and the phase step re-applied. Its noise variance is the fit's
//     leverage times var (1/9 mid-slot, <= 0.38 at the ends for the default 4), and its
//     model error for 60 Hz Jakes over 9 symbols (720 us) is ~ -40 dB, so at low SNR the
//     tracking costs less than the old per-symbol phase alone and at high SNR it follows
//     the fade. (track_gain = false: the old per-symbol common phase only.)
//  4. Zero-forcing equalisation x^_k = Y_k / (H^_k g^_s). In SISO OFDM the unbiased
//     per-subcarrier MMSE equaliser is exactly ZF (the MMSE gain |H|^2/(|H|^2+N0) is only
//     a bias that the soft demapper would have to undo), so ZF is what the demapper wants.
//  5. Post-equalisation noise variance per RE (unit-energy REs: every error term adds):
//        nvar_k,s = (N0 / |g^_s|^2 + m_k) / |H^_k|^2 + v_s / |g^_s|^2,
//     the interface's N0/|H_k|^2 at symbol s with the channel-estimation error m_k and the
//     gain-tracking error v_s = lev_s N0 / sum_p|H^_p|^2 + sum_p m_p |H^_p|^2/(sum_p|H^_p|^2)^2
//     included (without smoothing or tracking: the old 1.5 N0/|H^_k|^2 + CPE term).
//  6. Header-aided channel estimation (refine_with_header, header_aided_chest): once the
//     header has decoded with a good CRC its REs are known (header_codec::encode), as are
//     the pilots of the header symbols, so the header symbols become extra training
//     symbols, as 802.11 receivers re-use the decoded SIGNAL field (decision-directed
//     estimation). The LS estimate per occupied subcarrier is then the ML combination of
//     the two LTF observations and the header_symbols observations Y_s,k = H_k g_s X_s,k
//     + n (X_s,k the known header RE or pilot; g_s the symbol's common gain, estimated
//     per header symbol from all its 52 known REs with the first-pass H^,
//        g_s = sum_k conj(H^_k X_s,k) Y_s,k / sum_k |H^_k X_s,k|^2,
//     not from the 4 pilots of step 3, whose channel-estimation error would enter every
//     subcarrier coherently: measured 1.45 x the ideal LS error with the pilot gains):
//        h_k = (z_1,k + z_2,k + sum_s conj(g_s X_s,k) Y_s,k) / (2 + sum_s |g_s X_s,k|^2),
//     error variance N0 / (2 + sum_s |g_s X_s,k|^2): N0/6 for 4 unit-energy header
//     symbols instead of N0/2. Then steps 2 (smoothing, window choice, eps and m_k with the
//     new LS error), 3 (tracking), 4 and 5 are redone on the FFTs kept from demodulate()
//     (no new FFT, no allocation). The SNR estimate and CQI stay on the LTF. An undetected
//     header error (CRC passed on a wrong header) would make the estimate worse; the
//     16-bit CRC plus the field checks make that rare, and such a slot is lost anyway.
//     Measured: channel-estimate MSE 0.35 (flat) / 0.38 (3 taps) of the first pass at
//     20 dB (theory 1/3; test_header_chest.cc). SNR at 10% BLER (linkcurves, evdo 1 Msps,
//     LDPC, AWGN, same seeds, without -> with): MCS 7 18.10 -> 17.77 dB, MCS 3 7.57 ->
//     7.25 dB, MCS 0 0.53 -> 0.53 dB (header-limited); flat Jakes 60 Hz MCS 4: BLER equal
//     or lower at every point 20..30 dB. The header REs are re-equalised too, with an
//     estimate that contains them (their noise variances are then optimistic; they are
//     not decoded again).
//
// Output REs are in the interface order (phy_common.md): symbol by symbol, data
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
     * \brief Header-aided channel estimation (step 6): re-estimate the channel with the
     * LTF and the header symbols as training, then redo the smoothing, gain tracking,
     * equalisation and noise variances of `out` (header and payload REs, channel, gain,
     * phase, channel_error_var, chest_window; snr is kept). Call it after demodulate(...,
     * out) once the header decoded with a good CRC; uses the FFTs that call kept.
     * O(occupied x (header_symbols + window)) + the equalisation; no FFT, no allocation.
     * No-op when header_aided_chest is false or the last slot was invalid.
     * Measured gain: ~0.33 dB at MCS 7 on AWGN (step 6 of the file comment).
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
