#pragma once
// The AP's slot framer: grants in (one PMT dict per slot), OFDM slots out.
#include <gnuradio/oppsched/api.h>
#include <gnuradio/sync_block.h>

#include <cstdint>
#include <string>

namespace gr {
namespace oppsched {

/*!
 * \brief Slot framer and OFDM modulator of the AP: one slot of exactly
 * numerology::slot_samples() complex samples per slot, back to back.
 * \ingroup oppsched
 *
 * The PHY is the clock master and this block is where its clock lives: slot n occupies
 * output samples [n S, (n+1) S) (S = slot_samples()), so the stream position IS the slot
 * clock, and its air time is t0 + n T_slot (T_slot = S / sample_rate, the realised slot
 * duration). When the block starts generating slot n it publishes on `request` the dict
 * {slot: n + lead_slots, air_time_ns} (at the very first slot also the requests for slots
 * 0 .. lead_slots-1), then looks up the grant of slot n. A grant must therefore arrive
 * within lead_slots slot durations of its request; one that has not when slot n is built
 * makes slot n an empty slot, counted as late (docs/daemons.md, "Slot timing"). Downstream
 * of this block the samples reach the air after the output buffer and the radio's own
 * buffering; that latency does not change the budget (generation is paced by consumption),
 * only the air time is later than generation, which tx_time makes exact.
 *
 * Pacing: with a radio (UHD) the sink paces the stream. With no hardware clock (channel
 * emulator loopback, ZeroMQ sample transport) set \p realtime: slot n is then not built
 * before t_start + n T_slot on the host's CLOCK_MONOTONIC (t_start = the first call +
 * \p t0_s), and t0 (tx_time, air_time_ns) is that monotonic time, so the AP daemon sees
 * air times on its own clock.
 *
 * Message port `grant` (in): a dict per slot
 *   {slot: uint64, user: int, mcs: 0..7, harq_pid: 0..15, ndi: bool, rv: 0..3,
 *    tb: u8vector (1 .. mcs_set::tb_bytes(mcs) bytes), empty: bool (optional)}.
 * A missing or empty `tb`, or empty = true, is an empty slot. Grants for slots already
 * built are dropped (grants_late), a second grant for the same slot is dropped
 * (grants_duplicate), a grant that fails the checks (types, ranges, TB longer than the
 * MCS carries) is dropped and its slot goes out empty, not late (grants_malformed).
 * At most max_pending grants are held (the oldest slot is dropped beyond that).
 *
 * Message port `request` (out): {slot: uint64, air_time_ns: long}, see above.
 *
 * Each slot: preamble, the control header (header_codec: user, mcs, harq_pid, ndi, rv,
 * tb_bytes, slot mod 2^32) and the payload (tb_encoder, scrambler seed
 * scrambler::seed_for_slot(slot mod 2^32)). An empty slot carries the preamble and a
 * header with user = 0xFFFF ("nobody", the same value the wire and the abstract PHY use),
 * mcs 0, harq_pid 0, ndi 0, rv 0, tb_bytes 0, and the known QPSK padding in the payload
 * (ofdm_sequences::padding), so every slot has the same power and every client measures
 * CQI in every slot.
 *
 * Uplink slots (shared medium, docs/architecture.md "Shared medium"): a grant with
 * `uplink: true` carries station `user`'s uplink TB. The block then has a second output,
 * the stations' side of the one slot clock: output 1 carries, sample-aligned with output 0,
 * each uplink slot as the granted station transmits it (preamble, header addressed to the
 * station, payload), and in every other slot an empty slot (preamble and a header to nobody:
 * the stations' sounding, from which the AP's receivers measure the uplink CQI). In an
 * uplink slot output 0 (the downlink) carries an empty slot (header to nobody, the known
 * padding: no TB), so that the clients still detect the slot and measure CQI. With output 1 not
 * connected an uplink grant is malformed (its slot goes out empty). Every header on output 1
 * has the uplink bit set (header_fields::uplink), every header on output 0 has it clear.
 * Both outputs carry the tags below. Over the air (TDD) each direction's slots leave from
 * their own radio: slot_gate keeps the AP's (uplink_user -1) for the AP radio and station
 * u's uplink slots (uplink_user u) for u's radio, so the AP is silent in uplink slots and a
 * station transmits only in its own.
 *
 * Stream tags (offsets are absolute output item indices, nitems_written based; the same on
 * both outputs):
 *   - on the first sample of slot n: `slot` (uint64 n), `uplink_user` (long: the granted
 *     station in an uplink slot, -1 in a downlink slot) and `tx_time`, UHD's format
 *     (tuple: uint64 full seconds, double fractional seconds) of t0 + n T_slot, computed
 *     exactly in integers: full = t0_full + (n S) div fs, frac = t0_frac + ((n S) mod fs)/fs
 *     (carried into full when >= 1) for an integer sample rate fs;
 *   - burst mode (continuous = false, for UHD timed bursts): `tx_sob` (true) on the first
 *     and `tx_eob` (true) on the last sample of every slot: each slot is its own timed
 *     burst, so a late burst costs only itself;
 *   - continuous mode (loopback, ZeroMQ): `tx_sob` on the first sample of slot 0 only,
 *     never `tx_eob` (one continuous stream, no burst gaps); `slot` and `tx_time` are on
 *     every slot as in burst mode.
 */
class OPPSCHED_API slot_tx : virtual public gr::sync_block {
  public:
    typedef std::shared_ptr<slot_tx> sptr;

    /*!
     * \param profile        numerology profile: "evdo" (1.667 ms) or "3ms" (3 ms)
     * \param sample_rate    complex samples per second (Hz), e.g. 1e6
     * \param lead_slots     slots between a request and the slot it asks for, >= 1 (the
     *                       AP daemon's answer time budget is lead_slots * T_slot)
     * \param t0_s           time of the first sample of slot 0 in seconds: the radio's time
     *                       with realtime = false (set the device time, then e.g. 2.0 s
     *                       ahead); with realtime = true the delay (>= 0 s) after the first
     *                       call to work. Whole seconds + a fraction exact to 1e-16 s.
     * \param continuous     true: continuous stream tags (loopback); false: one timed burst
     *                       per slot (UHD)
     * \param realtime       pace slot starts on CLOCK_MONOTONIC (no hardware clock
     *                       downstream)
     * \param slot_duration_s 0: the profile's; else the slot duration (s), overriding it
     * \param max_pending    grants held for future slots, >= 1
     * \param fec            payload FEC: "ldpc" or "conv" (numerology.h; the receivers
     *                       must use the same)
     * \throws std::invalid_argument naming the parameter and value
     */
    static sptr make(const std::string& profile = "evdo", double sample_rate = 1e6,
                     int lead_slots = 3, double t0_s = 0.0, bool continuous = false,
                     bool realtime = false, double slot_duration_s = 0.0, int max_pending = 1024,
                     const std::string& fec = "ldpc");

    //! samples per slot (numerology::slot_samples())
    virtual int slot_samples() const = 0;
    //! realised slot duration slot_samples() / sample_rate (s)
    virtual double slot_duration() const = 0;

    //! slots started (built) so far
    virtual std::uint64_t slots() const = 0;
    //! slots sent without a TB (empty grants, late and malformed grants)
    virtual std::uint64_t empty() const = 0;
    //! slots whose grant had not arrived when they were built (sent empty)
    virtual std::uint64_t late() const = 0;
    //! slots that carried a TB (downlink, output 0)
    virtual std::uint64_t tb_sent() const = 0;
    //! uplink slots that carried a station's TB (output 1)
    virtual std::uint64_t uplink_tb_sent() const = 0;
    //! requests published
    virtual std::uint64_t requests() const = 0;
    //! grant messages received (all, including the dropped ones)
    virtual std::uint64_t grants_received() const = 0;
    //! grants for slots already built (dropped)
    virtual std::uint64_t grants_late() const = 0;
    //! second grants for a slot (dropped; the first stands)
    virtual std::uint64_t grants_duplicate() const = 0;
    //! grants that failed the checks (dropped; their slot goes out empty)
    virtual std::uint64_t grants_malformed() const = 0;
    //! grants dropped because max_pending were held
    virtual std::uint64_t grants_overflow() const = 0;
    //! with realtime: slots built more than one slot after their due time
    virtual std::uint64_t overruns() const = 0;
};

}  // namespace oppsched
}  // namespace gr
