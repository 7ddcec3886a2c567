#pragma once
// Keeps one transmitter's slots of a slot_tx output: the bursts a radio sends over the air.
#include <gnuradio/block.h>
#include <gnuradio/oppsched/api.h>

#include <cstdint>

namespace gr {
namespace oppsched {

/*!
 * \brief Passes the slots of a slot_tx output that one radio transmits and drops the rest:
 * TDD over the air (docs/testbed.md, "Uplink slots over the air").
 * \ingroup oppsched
 *
 * slot_tx tags the first sample of every slot with `uplink_user` (long: the station granted
 * an uplink slot, -1 in a downlink slot). A slot is passed whole, with its tags (`slot`,
 * `tx_time`, `tx_sob`, `tx_eob`: a timed burst for uhd.usrp_sink), when its `uplink_user`
 * equals \p user; else it is consumed and nothing is produced for it, so the radio stays
 * silent and its next burst waits for its own tx_time. user -1 keeps the AP's slots (output
 * 0: the downlink slots, none of the uplink slots); user u keeps station u's uplink slots
 * (output 1). Samples before the first `uplink_user` tag are dropped.
 *
 * In burst mode every slot is its own burst (tx_sob ... tx_eob), so dropping whole slots
 * leaves whole bursts. A continuous-mode stream gated this way would lose its one tx_sob.
 */
class OPPSCHED_API slot_gate : virtual public gr::block {
  public:
    typedef std::shared_ptr<slot_gate> sptr;

    /*!
     * \param user  -1: the AP's (downlink) slots; 0..65534: station \p user's uplink slots
     * \throws std::invalid_argument naming slot_gate.user and the value
     */
    static sptr make(int user = -1);

    virtual int user() const = 0;
    //! slots passed
    virtual std::uint64_t slots_passed() const = 0;
    //! slots dropped (another transmitter's)
    virtual std::uint64_t slots_dropped() const = 0;
};

}  // namespace oppsched
}  // namespace gr
