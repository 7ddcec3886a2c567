#pragma once
// Slot detection, timing and CFO estimation on a continuous sample stream. Pure class:
// no gr::block, no I/O. The RX block feeds it whatever chunks the scheduler gives and
// gets back each slot found, CFO-corrected and aligned for ofdm_demodulator.
//
// Algorithm (preamble layout in preamble.h):
//  1. Detection and coarse timing: the Schmidl & Cox timing metric (Schmidl & Cox, IEEE
//     Trans. Commun. 45(12), 1997, eqs. 5-8) on the STF's period L = fft_len/2,
//        P(d) = sum_{m<W} conj(r[d+m]) r[d+m+L],
//        M(d) = |P(d)|^2 / (E1(d) E2(d)),  E1 = sum |r[d+m]|^2, E2 = sum |r[d+m+L]|^2,
//     with the window W = cp_len + L (= 48) that covers the whole periodic STF including
//     its CP (S&C use W = L and R(d) = E2; the Cauchy-Schwarz normalisation E1 E2 keeps
//     M in [0, 1], so silence-to-signal edges cannot exceed 1). M is maintained with
//     running sums (O(1) per sample, double precision, recomputed every 1024 samples).
//     Noise alone: M ~ Exp(1)/W; at per-sample SNR s the peak is (s/(1+s))^2 (0.2 at
//     0 dB Es/N0, -0.9 dB per sample). But M is estimated from only W = 48 sample pairs:
//     at 0 dB its correlation sqrt(M) ~ 0.45 has a standard deviation of ~(1-0.2)/sqrt(48)
//     = 0.12, so a fixed threshold near the mean loses many slots (0.15 lost 7.5% of
//     the slots at 0 dB and 29% at -1 dB in the MCS 0 link curve). detection_threshold
//     is therefore only a PRE-FILTER, set low (0.08: P(M > 0.08) = e^{-3.8} per noise
//     sample; measured one peak search per ~160 noise samples), and the LTF verification
//     (step 3) is the decision (S&C use M to locate the training symbol; whether a
//     slot is present is decided here by the known-LTF cross-correlation, whose 128
//     samples average far more noise than M's 48 pairs). A crossing of
//     detection_threshold starts a peak search over W + L positions (extended once if
//     M is still rising at its end); the arg max is the coarse STF start. When the
//     verification rejects it, the scan resumes right after that arg max (not after
//     the search window), so a noise maximum that won the search cannot hide a real STF
//     peak in the same window.
//  2. Coarse CFO: eps_c = angle(P) / pi subcarrier spacings (S&C eq. 39 with L = N/2),
//     range +-1 spacing.
//  3. Verification, fine timing: the coarse-CFO-corrected samples are cross-correlated
//     with the two known long symbols (2 fft_len samples) at +-ltf_search positions
//     around where the LTF should be; C(d) = |sum r ref*|^2 / (sum|r|^2 sum|ref|^2).
//     The detection is kept only if the correlation energy within +-cp_len/2 of the peak
//     exceeds ltf_threshold (noise alone: each C ~ Exp(1)/128, the sum of 17 exceeds
//     0.35 with probability ~1e-7; a slot at 0 dB Es/N0 gives ~0.55), AND the peak is
//     not an alias: the preamble is self-similar at multiples of 32 samples (STF period,
//     GI = half a long symbol), so a coarse position from a noise trigger 64..140 samples
//     before a slot can put the search on a partial match (C up to ~0.56 of the true
//     peak); the peak must beat every C up to 2 fft_len later (beyond cp_len). Fine
//     timing: the earliest position within cp_len/2 before the peak whose C >= first_path_fraction
//     of the peak (the first significant path), minus timing_backoff samples so
//     every FFT window starts inside the CP.
//  4. Fine CFO: angle of the lag-fft_len autocorrelation of the two long symbols
//     (range +-0.5 spacing around eps_c). CFO = eps_c + eps_f. The two must agree,
//     |eps_f| <= 0.25 spacing (> 2.7 sigma of the S&C estimate at -2 dB), else the
//     detection is rejected as in step 3: a coarse position from noise has a random
//     eps_c and is caught here when its LTF search hit a preamble alias.
//  5. Truncation check: a slot cut short (burst ended early) is dropped. The two long
//     symbols must have energies within a factor 2 (a cut inside the LTF). From the LTF
//     the per-sample noise sigma^2 (difference of the two symbols) and signal power P
//     (their mean) are known; if P/sigma^2 >= truncation_min_snr_db, a data-bearing symbol
//     is SILENT when its power is below 2 sigma^2 + truncation_fraction P (the noise floor
//     with a margin of 5.6 standard deviations of the two 64-sample estimates). The slot
//     is dropped only when a silent run of >= truncation_min_symbols symbols reaches its
//     end (the burst stopped); the search then resumes at its second long symbol (no
//     new burst can start earlier; re-searching its LTF would only find aliases).
//     A silent stretch that is followed by signal again -- a deep fade in the middle
//     of the slot (60 Hz Jakes), or a cut slot followed at once by the next burst --
//     does not drop the slot: it is delivered (the header and payload CRCs
//     decide) and the search resumes at the first silent symbol, so a burst starting
//     there is still found. Below truncation_min_snr_db a truncation cannot be told from
//     noise and the slot is delivered (the header CRC rejects it).
//  6. The slot's samples from the estimated start, CFO-corrected with the phase origin at
//     the slot start, are delivered; the search resumes just before the next possible
//     slot start (start + slot_samples - (W + L)/2), so a slot is never found twice.
//
// Measured (MCS 0 link curve, evdo, 1 Msps, back-to-back slots, seed 1): missed
// detections 26/208 slots at -2 dB Es/N0, 22/412 at -1 dB, 16/2355 at 0 dB, 15/4000 at
// 0.5 dB, 2/4000 at 1 dB, 0/4000 at 1.5 dB (the former detection_threshold 0.15:
// 94/207, 88/307, 85/1132, 84/1840, 73/4000, 24/4000). Of the misses left at 0 dB about
// half never reach M >= 0.08, the rest fail the LTF stage. Pure noise, 3e7 samples:
// 191082 peak searches, 0 detections (0.15: 5999 searches); the verification costs
// ~2.5 s of CPU per 3e7 noise samples here.
// Robustness: non-finite input samples are replaced by 0 (counted); zeros give M = 0;
// pure noise is rejected by the LTF verification; nothing here throws on data.
// Latency: a slot is reported once its last sample (plus ltf_search + 2 cp_len) arrived.
// Memory: O(slot_samples) buffered.
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/numerology.h>
#include <gnuradio/oppsched/preamble.h>

#include <complex>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gr {
namespace oppsched {

struct slot_sync_params {
    //! S&C metric M that starts a peak search, (0,1): a pre-filter, the LTF decides
    float detection_threshold = 0.08f;
    float ltf_threshold = 0.35f;       //!< LTF correlation energy to accept, (0, 4]
    int ltf_search = 32;               //!< +- samples searched around the coarse LTF position
    float first_path_fraction = 0.2f;  //!< (0,1]: first path = first C >= this * peak
    int timing_backoff = 2;            //!< samples the FFT windows start inside the CP, [0, cp_len)
    //! a symbol is silent below 2 sigma^2 + this * P, [0, 1) (0: the noise floor alone;
    //! a relative term makes deep fades count as silence)
    float truncation_fraction = 0.0f;
    int truncation_min_symbols = 4;      //!< trailing silent symbols that drop a slot, >= 1
    double truncation_min_snr_db = 7.0;  //!< per-sample SNR above which truncation is checked
    //! throws std::invalid_argument naming the field ("slot_sync.ltf_search: -1 ...")
    void validate(const numerology& n) const;
};

struct slot_detection {
    std::uint64_t start = 0;          //!< stream index (0 = first sample pushed) of the slot start
    double cfo = 0.0;                 //!< carrier frequency offset, subcarrier spacings
    double cfo_hz = 0.0;              //!< the same in Hz
    float sc_metric = 0.0f;           //!< S&C metric M at the coarse peak, [0, 1]
    float ltf_metric = 0.0f;          //!< LTF correlation C at the fine-timing peak, [0, 1]
    float snr_db = 0.0f;              //!< per-sample SNR seen in the LTF (time domain, diagnostic)
    std::vector<gr_complex> samples;  //!< slot_samples() samples from start, CFO-corrected
};

struct slot_sync_stats {
    std::uint64_t samples = 0;             //!< samples pushed
    std::uint64_t triggers = 0;            //!< S&C threshold crossings (peak searches)
    std::uint64_t detections = 0;          //!< slots delivered
    std::uint64_t rejected_ltf = 0;        //!< triggers the LTF verification rejected
    std::uint64_t rejected_truncated = 0;  //!< verified slots dropped as cut short
    std::uint64_t nonfinite = 0;           //!< non-finite input samples replaced by 0
};

class OPPSCHED_API slot_sync final {
  public:
    slot_sync(const numerology& n, const slot_sync_params& p = {});

    /*!
     * \brief Consume \p n samples; append every slot completed so far to \p found.
     * \return number of detections appended
     */
    size_t push(const gr_complex* in, size_t n, std::vector<slot_detection>& found);
    std::vector<slot_detection> push(const std::vector<gr_complex>& in);

    //! Forget the stream (the next sample pushed has index 0 again); stats are kept.
    void reset();

    const slot_sync_stats& stats() const { return d_stats; }
    const slot_sync_params& params() const { return d_p; }
    const numerology& geometry() const { return d_seq.geometry(); }
    //! samples held back (waiting for the rest of a slot or the metric window)
    size_t buffered() const { return d_buf.size(); }

  private:
    enum class state { search, peak, verify };
    float metric_at(std::uint64_t d);  // updates the running sums to position d
    //! state verify, all samples present: LTF match, fine CFO, extraction, truncation
    //! checks; appends the slot to \p found when it passes them
    bool verify(std::vector<slot_detection>& found);
    //! what the LTF search around the coarse position found
    struct ltf_match {
        double eps_c = 0.0;          // coarse CFO (spacings)
        std::int64_t seg_start = 0;  // stream index of d_seg[0] (coarse-corrected copy)
        std::int64_t t0 = 0;         // first path of the LTF, minus the timing backoff
        float ltf_metric = 0.0f;     // C at the correlation peak
    };
    //! the two received long symbols' noise and signal levels (time domain, linear)
    struct ltf_levels {
        double sigma2 = 0.0, p_sig = 0.0, snr = 0.0;
    };
    //! LTF cross-correlation around the coarse position, threshold and alias checks,
    //! first-path timing; false: no LTF there
    bool match_ltf(ltf_match& m);
    double fine_cfo(const ltf_match& m) const;  // from the two long symbols (spacings)
    //! the slot's samples, CFO-corrected; false: its start was never received
    bool extract(const ltf_match& m, double eps, slot_detection& det) const;
    //! false: the long symbols' energies disagree (a burst cut or begun inside the LTF)
    bool measure_ltf(const slot_detection& det, ltf_levels& lv) const;
    //! true: a silent run reaches the end of the slot; \p first_silent: the first silent
    //! symbol's offset in the slot (-1: none)
    bool cut_short(const slot_detection& det, const ltf_levels& lv,
                   std::int64_t& first_silent) const;
    bool reject_ltf();                         // counts; resumes after the rejected peak
    void advance_scan_to(std::uint64_t next);  // moves the scan forward, never back
    const gr_complex* at(std::uint64_t abs) const {
        return &d_buf[static_cast<size_t>(abs - d_base)];
    }
    void trim();

    slot_sync_params d_p;
    ofdm_sequences d_seq;
    int d_L, d_W;
    std::vector<gr_complex> d_buf;  // samples [d_base, d_base + size)
    std::uint64_t d_base = 0;
    std::uint64_t d_scan = 0;  // next metric position
    // running sums for the window at d_sum_pos
    bool d_sums_valid = false;
    std::uint64_t d_sum_pos = 0;
    int d_since_recompute = 0;
    std::complex<double> d_P{0.0, 0.0};
    double d_E1 = 0.0, d_E2 = 0.0;
    // peak search
    state d_state = state::search;
    std::uint64_t d_peak_end = 0, d_best_pos = 0, d_trigger_pos = 0;
    float d_best_m = 0.0f;
    std::complex<double> d_best_P{0.0, 0.0};
    slot_sync_stats d_stats;
    std::vector<gr_complex> d_seg, d_corr_scratch;  // scratch
    std::vector<float> d_c;
};

}  // namespace oppsched
}  // namespace gr
