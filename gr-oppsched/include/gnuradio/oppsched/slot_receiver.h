#pragma once
// One client's receiver as a plain class: the DSP chain of the slot_rx block, also what the
// link-curve measurement (`oppsched linkcurves`) runs, so the MCS tables measure the very
// receiver the testbed uses.
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/harq_buffer.h>
#include <gnuradio/oppsched/header_codec.h>
#include <gnuradio/oppsched/numerology.h>
#include <gnuradio/oppsched/ofdm_demodulator.h>
#include <gnuradio/oppsched/slot_sync.h>
#include <gnuradio/oppsched/tb_codec.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "oppsched/wire.h"

namespace gr {
namespace oppsched {
namespace slot_msg {

//! What one client's receiver learnt about one slot (the `rx` message of slot_rx).
struct rx_report {
    std::uint64_t slot = 0;
    bool slot_estimated = false;  //!< slot number extrapolated (header not decoded)
    bool detected = true;         //!< false: the slot was expected but not found (deep fade)
    bool header_ok = false;
    std::uint16_t user = ::oppsched::wire::kUserNobody;
    std::uint8_t mcs = 0, harq_pid = 0, rv = 0;
    bool ndi = false;
    std::uint32_t tb_bytes = 0;
    bool addressed = false, crc_ok = false;
    double snr_db = -30.0, effective_snr_db = -30.0;  //!< dB
    int cqi = 0;
    int combined = 0;  //!< transmissions combined in the HARQ buffer (0: not decoded)
    double cfo_hz = 0.0;
    std::uint64_t sample = 0;      //!< stream index of the slot start at this receiver
    std::vector<std::uint8_t> tb;  //!< only when addressed and crc_ok
    //! The receiver's noise average before this slot (N0 per occupied subcarrier) and the
    //! slots it counts (0: none yet): its state, recorded with each slot so that an offline
    //! decode of a recording with gaps goes on where the online receiver was. 0 and 0 in
    //! a missed slot's report (detected false), made whenever the stream position passes
    //! it, so that no state is tied to how the stream was cut into chunks.
    double noise_before = 0.0;
    std::int64_t noise_count_before = 0;
};

}  // namespace slot_msg

//! Counters of a slot_receiver (see slot_rx.h for each one's meaning).
struct slot_receiver_stats {
    std::uint64_t detected = 0, missed = 0, headers_ok = 0, header_errors = 0, addressed = 0,
                  tb_ok = 0, tb_failed = 0, invalid = 0, truncated = 0, nonfinite = 0,
                  decode_errors = 0, unnumbered = 0, other_direction = 0, not_own = 0;
    double last_snr_db = -30.0, last_effective_snr_db = -30.0;  //!< of the last report (dB)
    int last_cqi = 0;
};

//! What the receiver made of one detected slot, whether or not it was reported.
struct slot_reception {
    bool valid = false;            //!< the demodulator found usable signal
    bool reported = false;         //!< `report` went out (false: invalid or not numbered)
    bool payload_decoded = false;  //!< an addressed TB was decoded: payload() holds its REs
    header_fields header;          //!< the decoded header (when report.header_ok)
    slot_msg::rx_report report;
};

/*!
 * \brief One client's receiver: slot_sync -> ofdm_demodulator (with its snr_estimator) ->
 * header_codec -> header-aided channel estimation -> tb_decoder, with one harq_buffer per
 * HARQ process (16: the header's 4-bit field; made on first use), and the slot numbering
 * and missed-slot reports of the slot_rx block.
 *
 * Two stages, so that a caller may look at a detection before it is demodulated (the
 * link-curve measurement assigns each detection to the slot it sent):
 *   detect(samples) -> slot_detection list; receive(detection) -> reports.
 * After each chunk of samples, report_missed() adds the slots expected but not found.
 *
 * Slot numbers: from the header (unwrapped from its 32 bits to the value closest to the
 * last one seen); when the header fails, extrapolated from the last numbered slot and the
 * stream position (slot_estimated). Before any header decoded, a slot cannot be numbered
 * and is counted (unnumbered), not reported. Once locked, a gap between the last report
 * and a detection whose number agrees with the stream position, or a stream position past
 * an expected slot, is filled with `detected = false` reports (SNR -30 dB, CQI 0) so the
 * MAC sees a deep fade instead of a stale CQI, at most \p missed_slots in a row.
 *
 * Direction (\p uplink): a slot whose header names the other direction (header_fields::uplink)
 * is numbered but neither reported nor decoded (other_direction): over the air a client
 * hears the stations' uplink slots, its own among them, and the AP its own downlink.
 * With \p own_slots_only only the slots whose header is addressed to \p user_id are
 * reported (the others, and failed headers, are counted as not_own), and no slot is
 * reported missed: the AP's receiver for a station over the air, which hears every
 * station's slots and must take its CQI and TBs from that station's alone.
 *
 * HARQ: the decoder clears a process's buffer when the header's NDI differs from the one it
 * holds (a new TB), and combines otherwise (harq_buffer.h).
 *
 * Bad input never throws: truncated bursts, failed headers, slots without usable signal,
 * non-finite samples and headers the decoder cannot use are counted (stats()).
 */
class OPPSCHED_API slot_receiver final {
  public:
    static constexpr int harq_processes = 16;  //!< the header's 4-bit field

    /*!
     * \param num          numerology of the link (profile, sample rate, FEC)
     * \param user_id      this client's user id (the header's `user`), 0..65534
     * \param sync         slot detection parameters (validated against \p num)
     * \param demod        demodulator parameters (validated)
     * \param missed_slots once locked, report up to this many consecutive slots expected
     *                     but not detected (0 = never)
     * \param uplink       the direction received: false the AP's slots (a client), true
     *                     the stations' (the AP's receiver of one station)
     * \param own_slots_only report only slots addressed to \p user_id (see above)
     * \throws std::invalid_argument naming the parameter and value
     */
    slot_receiver(const numerology& num, int user_id, const slot_sync_params& sync = {},
                  const ofdm_demodulator_params& demod = {}, int missed_slots = 600,
                  bool uplink = false, bool own_slots_only = false);

    /*!
     * \brief Consume \p n samples (any chunking); append the slots completed so far.
     * \param in    complex baseband samples at the numerology's sample rate
     * \param n     number of samples
     * \param found detections appended (cleared by the caller)
     */
    void detect(const gr_complex* in, std::size_t n, std::vector<slot_detection>& found);

    /*!
     * \brief Demodulate, decode and number one detection; append to \p reports the
     * missed-slot reports before it and its own report (when it can be numbered).
     * \param det         a detection of this receiver's detect()
     * \param reports     reports appended, in slot order
     * \param fresh_harq  decode this slot's TB from an empty soft buffer: for a caller that
     *                    knows the slot starts a new TB (the 1-bit NDI cannot tell when
     *                    the process's previous TB was never received)
     * \return what became of the detection (valid until the next call)
     */
    const slot_reception& receive(const slot_detection& det,
                                  std::vector<slot_msg::rx_report>& reports,
                                  bool fresh_harq = false);

    //! Append reports of the slots expected but not detected by the stream position
    //! detect() reached (half a slot of margin beyond the synchroniser's own delay).
    void report_missed(std::vector<slot_msg::rx_report>& reports);

    //! The noise average's state (rx_report::noise_before, noise_count_before) now, and
    //! a state to go on from: an offline decode restores the recorded one where its
    //! recording has a gap (count <= 0: no average yet).
    snr_estimator::noise_state noise_state() { return d_demod.estimator().state(); }
    void set_noise_state(double average, std::int64_t count) {
        d_demod.estimator().set_state({average, static_cast<long>(count)});
    }

    //! Equalised payload REs of the last receive() whose payload_decoded was true.
    const std::vector<gr_complex>& payload() const { return d_res.payload; }

    const slot_receiver_stats& stats() const { return d_stats; }
    int user_id() const { return d_user; }
    bool uplink() const { return d_uplink; }
    bool own_slots_only() const { return d_own_only; }
    const numerology& geometry() const { return d_num; }

  private:
    void decode_payload(const header_fields& h, bool fresh_harq);
    void add_report(const slot_msg::rx_report& r, std::vector<slot_msg::rx_report>& reports);
    //! reports of the slots [next unreported, \p slot) as not detected
    void report_missed_until(std::uint64_t slot, std::vector<slot_msg::rx_report>& reports);
    //! slots since the last numbered one at stream position \p start (rounded)
    double slots_since_anchor(std::uint64_t start) const;
    //! \p slot, which started at stream position \p start, is the last one seen
    void anchor(std::uint64_t slot, std::uint64_t start);
    std::uint64_t unwrap(std::uint32_t s) const;
    harq_buffer& harq(int pid);

    numerology d_num;
    int d_user;
    int d_S;
    int d_missed_limit;
    bool d_uplink;
    bool d_own_only;
    slot_sync d_sync;
    ofdm_demodulator d_demod;
    header_codec d_hdr;
    tb_decoder d_dec;
    std::array<std::unique_ptr<harq_buffer>, harq_processes> d_harq;
    ofdm_demod_result d_res;
    std::vector<gr_complex> d_hdr_re;  // the decoded header re-encoded (header-aided chest)
    slot_reception d_rec;
    std::uint64_t d_position = 0;  // samples consumed by detect()

    // slot numbering: the last slot seen (header or extrapolated) and where it started
    bool d_locked = false;
    std::uint64_t d_anchor_slot = 0, d_anchor_start = 0;
    std::uint64_t d_next_report = 0;  // first slot number not reported yet
    int d_missed_run = 0;             // consecutive missed reports since the last detection
    bool d_have_header = false;
    std::uint64_t d_last_header_slot = 0;

    slot_receiver_stats d_stats;
};

}  // namespace oppsched
}  // namespace gr
