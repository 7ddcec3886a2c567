#pragma once
// Slot detection, timing and CFO estimation on a continuous sample stream. Pure class:
// no gr::block, no I/O. The RX block feeds it whatever chunks the scheduler gives and
// gets back each slot found, CFO-corrected and aligned for ofdm_demodulator.
//
// Why a two-stage detector: the Schmidl & Cox metric over 48 sample pairs is too noisy at
// 0 dB to decide alone, so it only pre-filters (a low threshold) and the cross-correlation
// with the known long training symbols decides; coarse and fine CFO must agree, and a slot
// cut short is dropped. Algorithm, thresholds and measured miss rates: docs/phy.md, "Slot
// synchronisation".
//
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
    /*!
     * \param n numerology of the link (sample rate, preamble, slot length)
     * \param p detection parameters
     * \throws std::invalid_argument naming the field of \p p out of range
     */
    slot_sync(const numerology& n, const slot_sync_params& p = {});

    /*!
     * \brief Consume \p n samples; append every slot completed so far to \p found.
     * \param in    complex baseband samples at the numerology's sample rate (any chunking;
     *              non-finite values are replaced by 0 and counted)
     * \param n     number of samples
     * \param found detections appended, in stream order
     * \return number of detections appended
     */
    size_t push(const gr_complex* in, size_t n, std::vector<slot_detection>& found);
    //! same, returning the detections
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
    slot_sync_stats d_stats;
    std::vector<gr_complex> d_seg, d_corr_scratch;  // scratch
    std::vector<float> d_c;
};

}  // namespace oppsched
}  // namespace gr
