#pragma once
// ZeroMQ bridge from one client's slot_rx to its client agent (oppsched-client).
#include <gnuradio/block.h>
#include <gnuradio/oppsched/api.h>

#include <cstdint>
#include <string>

namespace gr {
namespace oppsched {

/*!
 * \brief Turns slot_rx's per-slot dicts into wire rx_indication frames and pushes them to
 * the client agent's `rx_<user>` endpoint.
 * \ingroup oppsched
 *
 * Socket: PUSH connected to \p endpoint (the client binds its PULL), ZMQ_IMMEDIATE and
 * non-blocking sends: when no client is connected, or its queue is full, the indication is
 * dropped and counted; the receiver never waits. Each frame carries this socket's own
 * sequence number (oppsched::wire), starting at 0.
 *
 * Mapping (docs/daemons.md): slot, user, mcs, harq_pid, ndi, rv, flags header_ok /
 * addressed / crc_ok, snr_db, cqi (clipped to 0..255), combined, tb (only when addressed and
 * crc_ok). The wire has one SNR field: with \p report_effective_snr it is the effective
 * (MIESM) SNR of the slot, what link adaptation needs on a frequency-selective channel
 * (equal to the plain SNR on a flat one); otherwise the plain mean SNR.
 * Dicts that are not rx reports are counted (malformed) and dropped.
 *
 * Port: `rx` (in).
 */
class OPPSCHED_API rx_indication_sink : virtual public gr::block {
  public:
    typedef std::shared_ptr<rx_indication_sink> sptr;

    /*!
     * \param endpoint             ZeroMQ endpoint of the client's rx socket (e.g.
     *                             "ipc:///run/dir/zmq/rx_0")
     * \param hwm                  send high-water mark (messages), >= 1
     * \param report_effective_snr put the effective SNR (dB) in the wire's snr_db
     * \param reconnect_ms         ZMQ_RECONNECT_IVL (ms), >= 1
     * \param connect_wait_ms      at start, wait at most this long (ms, >= 0) for the
     *                             client, so that the first indications are not dropped
     *                             (delays the flowgraph's start; a later client is no error)
     * \throws std::invalid_argument naming the parameter; std::runtime_error when built
     * without ZeroMQ
     */
    static sptr make(const std::string& endpoint, int hwm = 1000, bool report_effective_snr = true,
                     int reconnect_ms = 10, int connect_wait_ms = 1000);

    //! rx_indications pushed
    virtual std::uint64_t sent() const = 0;
    //! dropped: no client connected or its queue full
    virtual std::uint64_t dropped() const = 0;
    //! messages on the port that were not rx reports
    virtual std::uint64_t malformed() const = 0;
};

}  // namespace oppsched
}  // namespace gr
