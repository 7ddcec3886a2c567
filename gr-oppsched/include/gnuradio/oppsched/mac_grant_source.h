#pragma once
// ZeroMQ bridge between slot_tx and the AP daemon (oppsched-apd): requests out, grants in.
#include <gnuradio/block.h>
#include <gnuradio/oppsched/api.h>

#include <cstdint>
#include <string>

namespace gr {
namespace oppsched {

//! false when gnuradio-oppsched was built without ZeroMQ (the bridges' make() then throws)
OPPSCHED_API bool zmq_bridges_available();

/*!
 * \brief Message bridge to the AP daemon: forwards slot_tx's requests as wire slot_request
 * frames and publishes the daemon's slot_grant frames as grant dicts.
 * \ingroup oppsched
 *
 * Pacing: this block has no clock. slot_tx is the clock master: it publishes
 * {slot: n + lead_slots, air_time_ns} on its `request` port when it starts building slot n
 * (docs/daemons.md, "Slot timing"); this block turns each into slot_request(slot,
 * air_time_ns) and pushes it at once. So requests leave exactly lead_slots slots ahead on
 * the stream's own clock (the radio's, or CLOCK_MONOTONIC with slot_tx's realtime), never
 * on a timer of its own that could drift from the samples.
 *
 * Sockets (endpoints as in docs/daemons.md; the daemon binds, the PHY connects):
 *   - PUSH connected to \p requests_endpoint (the apd's `phy_requests` PULL), ZMQ_IMMEDIATE
 *     (nothing queues for a daemon that is not there: such a request is dropped and counted),
 *     non-blocking sends;
 *   - PULL connected to \p grants_endpoint (the apd's `phy_grants` PUSH), read by a thread
 *     of this block, which decodes every frame with oppsched::wire::decode and publishes
 *     a slot_grant as a dict on `grant` ({slot, empty, user, mcs, harq_pid, ndi, rv, tb}).
 * Frames that do not decode (length, magic, CRC...) or are not slot_grants are counted and
 * dropped, never fatal; sequence gaps are counted (oppsched::wire::seq_tracker).
 *
 * Ports: `request` (in, from slot_tx), `grant` (out, to slot_tx).
 */
class OPPSCHED_API mac_grant_source : virtual public gr::block {
  public:
    typedef std::shared_ptr<mac_grant_source> sptr;

    /*!
     * \param requests_endpoint ZeroMQ endpoint of the apd's phy_requests (e.g.
     *                          "ipc:///run/dir/zmq/phy_requests" or "tcp://127.0.0.1:5555")
     * \param grants_endpoint   ZeroMQ endpoint of the apd's phy_grants
     * \param hwm               send/receive high-water marks (messages), >= 1
     * \param reconnect_ms      ZMQ_RECONNECT_IVL (ms), >= 1
     * \param connect_wait_ms   at start, wait at most this long (ms, >= 0) for the daemon's
     *                          sockets, so that the first requests are not dropped (with
     *                          ZMQ_IMMEDIATE a PUSH drops while its connection comes up).
     *                          GNU Radio calls start() before the flowgraph runs, so this
     *                          delays the slot clock's start like the abstract PHY's
     *                          timing.startup_wait_s; the daemon coming later is no error
     * \throws std::invalid_argument naming the parameter; std::runtime_error when built
     * without ZeroMQ
     */
    static sptr make(const std::string& requests_endpoint, const std::string& grants_endpoint,
                     int hwm = 1000, int reconnect_ms = 10, int connect_wait_ms = 1000);

    //! slot_requests pushed
    virtual std::uint64_t requests_sent() const = 0;
    //! requests dropped (no daemon connected, or its queue full)
    virtual std::uint64_t requests_dropped() const = 0;
    //! request messages on the port that were not request dicts
    virtual std::uint64_t requests_malformed() const = 0;
    //! slot_grants received and published
    virtual std::uint64_t grants_received() const = 0;
    //! frames that did not decode
    virtual std::uint64_t grants_malformed() const = 0;
    //! frames that decoded but were not slot_grants
    virtual std::uint64_t grants_wrong_type() const = 0;
    //! grants lost according to the sequence numbers
    virtual std::uint64_t grants_seq_lost() const = 0;
};

}  // namespace oppsched
}  // namespace gr
