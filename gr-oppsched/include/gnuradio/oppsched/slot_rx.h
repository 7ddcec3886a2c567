#pragma once
// One client's receiver: samples in, one PMT dict per slot out.
#include <gnuradio/oppsched/api.h>
#include <gnuradio/sync_block.h>

#include <cstdint>
#include <string>

namespace gr {
namespace oppsched {

/*!
 * \brief Receiver of one client: slot detection, OFDM demodulation, SNR/CQI, control
 * header, and (only for the slots addressed to this client) payload decoding with HARQ
 * soft combining.
 * \ingroup oppsched
 *
 * A thin block over slot_receiver (slot_receiver.h), which does the work: slot_sync ->
 * ofdm_demodulator (with its snr_estimator) -> header_codec -> header-aided channel
 * estimation -> tb_decoder, with one harq_buffer per HARQ process. The same class is what
 * `oppsched linkcurves` measures, so the MCS tables describe this receiver. The block feeds
 * the stream in and publishes the reports; its statistics are those of the receiver as of
 * the last work() call.
 *
 * Input: one complex stream (any chunking; stream tags are ignored).
 *
 * Message port `rx` (out): a dict for every slot detected, and for every slot expected but
 * not detected while locked (see \p missed_slots):
 *   slot (uint64; from the header, unwrapped from its 32 bits; extrapolated from the last
 *        decoded header when the header failed, then slot_estimated = true; a slot whose
 *        number cannot be known, i.e. no header has decoded yet, is counted, not reported),
 *   slot_estimated, detected (false: expected but not found: snr_db = effective_snr_db =
 *        -30, cqi 0, so the MAC sees the deep fade instead of a stale CQI),
 *   header_ok, user, mcs, harq_pid, ndi, rv, tb_bytes (header fields; 0xFFFF/0 when the
 *        header failed or the slot was empty),
 *   addressed (header_ok and header user == \p user_id), crc_ok (addressed, with a TB, and
 *        its CRC-32 passed), combined (transmissions combined in the HARQ buffer, 0 if not
 *        decoded), tb (u8vector, only when addressed and crc_ok),
 *   snr_db, effective_snr_db (MIESM), cqi (0..15) from the two long training symbols,
 *   reported for every slot whoever it addresses; cfo_hz; sample (stream index of the slot
 *   start at this receiver).
 *
 * Message port `symbols` (out): for slots addressed to this client with a TB, a PDU
 * (meta {slot, mcs}, c32vector of the equalised payload REs) for a constellation display.
 * Built only when something is connected to it.
 *
 * Bad input never stops the block: truncated bursts (slot_sync rejects them), corrupted
 * headers (CRC-16 fails: reported with header_ok false), slots without usable signal,
 * non-finite samples and inconsistent header fields are counted and dropped.
 */
class OPPSCHED_API slot_rx : virtual public gr::sync_block {
  public:
    typedef std::shared_ptr<slot_rx> sptr;

    /*!
     * \param profile             numerology profile: "evdo" or "3ms"
     * \param sample_rate         complex samples per second (Hz)
     * \param user_id             this client's user id (the header's `user`), 0..65534
     * \param detection_threshold Schmidl & Cox metric that starts a peak search, (0, 1)
     * \param ltf_threshold       long-training correlation energy to accept a slot, (0, 4]
     * \param missed_slots        once a slot was seen, report up to this many consecutive
     *                            slots expected but not detected (0 = never)
     * \param noise_ema           EMA weight of a slot's noise estimate, (0, 1]
     * \param slot_duration_s     0: the profile's; else the slot duration (s)
     * \param fec                 payload FEC: "ldpc" or "conv", as the transmitter's
     * \param uplink              the direction received (the header's uplink bit): false
     *                            the AP's slots (a client's receiver), true a station's (the
     *                            AP's receiver of station \p user_id); slots of the other
     *                            direction are not reported (slot_receiver.h)
     * \param own_slots_only      report only slots addressed to \p user_id, none missed:
     *                            over the air the AP's receiver for one station
     * \throws std::invalid_argument naming the parameter and value
     */
    static sptr make(const std::string& profile = "evdo", double sample_rate = 1e6, int user_id = 0,
                     double detection_threshold = 0.08, double ltf_threshold = 0.35,
                     int missed_slots = 600, double noise_ema = 0.1, double slot_duration_s = 0.0,
                     const std::string& fec = "ldpc", bool uplink = false,
                     bool own_slots_only = false);

    virtual int user_id() const = 0;
    virtual int slot_samples() const = 0;

    //! slots found by the synchroniser (and delivered to the demodulator)
    virtual std::uint64_t slots_detected() const = 0;
    //! slots reported as expected but not detected
    virtual std::uint64_t slots_missed() const = 0;
    //! headers decoded (CRC-16 and field checks passed)
    virtual std::uint64_t headers_ok() const = 0;
    //! detected slots whose header failed
    virtual std::uint64_t header_errors() const = 0;
    //! decoded headers addressed to this client with a TB
    virtual std::uint64_t addressed() const = 0;
    //! of those, TBs whose CRC-32 passed
    virtual std::uint64_t tb_ok() const = 0;
    //! of those, TBs whose CRC-32 failed
    virtual std::uint64_t tb_failed() const = 0;
    //! tb_failed / addressed (0 before the first)
    virtual double bler() const = 0;
    //! detected slots the demodulator found no usable signal in (dropped)
    virtual std::uint64_t invalid() const = 0;
    //! verified slots the synchroniser dropped as cut short (truncated bursts)
    virtual std::uint64_t truncated() const = 0;
    //! non-finite input samples (replaced by 0)
    virtual std::uint64_t nonfinite() const = 0;
    //! headers that decoded but could not be used (payload decoder refused them)
    virtual std::uint64_t decode_errors() const = 0;
    //! detected slots of the other direction (not reported)
    virtual std::uint64_t other_direction() const = 0;
    //! with own_slots_only: detected slots addressed elsewhere or unreadable (not reported)
    virtual std::uint64_t not_own() const = 0;
    //! detected slots not reported because no slot number was known yet
    virtual std::uint64_t unnumbered() const = 0;
    //! last reported SNR (dB), effective SNR (dB) and CQI
    virtual double last_snr_db() const = 0;
    virtual double last_effective_snr_db() const = 0;
    virtual int last_cqi() const = 0;
};

}  // namespace oppsched
}  // namespace gr
