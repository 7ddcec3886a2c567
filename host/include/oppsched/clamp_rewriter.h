#pragma once
// The client's CLAMP half (Andrew & Hanly, CLAMP, §IV-B/C): a table of the TCP connections
// seen from their SYN, one clamp::client_agent each once the handshake completes, fed by the
// downlink data segments with the current price; and the uplink ACKs' advertised window
// rewritten to AWND = min(w, AWND_os) (eq. 17) through a tcpip::window_tracker. Whether to
// clamp and at what price is the caller's (client_core: the price freshness and fail-open
// rule, client_core.h); without a price ACKs go through the tracker with the OS's own
// window. Costs: one parse and up to three hash lookups per packet; the table is bounded by
// max_flows (least recently seen evicted, O(1): the flows are kept in a list in order of
// last use, as in tcpip::window_tracker), and idle flows are forgotten in O(1) each.
//
// What the paper leaves to the implementer (and why):
//  - Flows. A flow is a TCP connection through the client, keyed by its downlink direction
//    (server -> client). Its record is created when its SYN is seen (either direction); its
//    client_agent when the SYN-ACK completes the handshake, with MSS = the smaller of the two
//    MSS options (the "connection's maximum segment size" of §IV-C) unless configured.
//    Connections not seen from their SYN pass unchanged (their window scale is unknown).
//  - s_k (eq. 14/15) is the IP length of downlink segment k (headers included): the AP
//    queues whole IP packets and counts q and mu_c in IP bytes, and eq. 11's equilibrium
//    q* = (k tau + a)/b holds in the AP's unit only if mu_hat counts the same bytes
//    (clamp.h, "One byte unit"). The segment's TCP payload goes with it: the window and
//    the ACK count sequence space, so the agent converts its step into payload bytes and
//    bounds it below by the payload (Delta w >= -s_k keeps the right edge, §IV-B).
//  - AWND_os (eq. 17) is the window the OS put in the ACK being rewritten; on_data() gets
//    the one of the flow's latest ACK (the window in force, for eq. 16).
//  - Uploads. CLAMP clamps a receiver's window. A connection on which the client sends data
//    before any data has come down is an upload (flows[].direction up: the client is TCP's
//    sender, the server's ACKs come down through the AP queue): its uplink segments pass
//    with the OS's window, and nothing of them reaches the agent, until downlink data
//    arrives (a request the server answers: the client is a receiver again). The
//    handshake's last ACK of a connection the client opens is clamped before the direction
//    is known (one segment; a server that sends no data does not use the window).
//  - Duplicate ACKs (§IV-C "three duplicate acknowledgments") are outgoing pure ACKs that
//    repeat the previous ACK number while downlink data beyond it has been received.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "oppsched/clamp.h"
#include "oppsched/common.h"
#include "oppsched/tcpip.h"

namespace oppsched::client {

struct client_core_stats;  // client_core.h: the clamp_* counters are counted there

struct clamp_rewriter_params {
    bool enabled = false;
    // tau (500 B), alpha (1000), beta (0.001), clipping, floor, dupack threshold: §IV-B/C.
    // agent.mss_bytes is the MSS used when mss_bytes is 0 and the handshake carried no MSS.
    clamp::client_agent_params agent;
    // MSS of every flow's agent (§IV-C: w(0) = MSS, +MSS per packet in slow start).
    // 0 = learn it per connection: min(MSS option of the SYN, of the SYN-ACK).
    std::uint32_t mss_bytes = 0;
    // Price freshness: see the header comment. (0, 60 s].
    time_ns price_timeout = 1000 * kNsPerMs;
    std::size_t max_flows = 1024;                 // CLAMP flow records held (LRU eviction beyond)
    time_ns flow_idle_timeout = 300 * kNsPerSec;  // a flow idle this long is forgotten
    std::size_t max_pending_records = 1 << 16;    // window rows/events not yet taken, at most
};

// One row of windows.<user>.csv (docs/daemons.md): an ACK rewritten while clamping.
struct window_record {
    time_ns t = 0;
    std::string flow;  // "server_addr:port>client_addr:port" (IPv6 addresses in brackets)
    double price_s = 0.0;
    double w_bytes = 0.0;                // the agent's w
    std::uint64_t awnd_os_bytes = 0;     // the window the OS advertised
    std::uint64_t advertised_bytes = 0;  // the window now in the ACK (field << shift)
};

// "10.0.0.1:5201>10.1.0.2:40000" / "[2001:db8::1]:5201>[2001:db8::2]:40000".
std::string flow_name(const tcpip::flow_key& k);

class clamp_rewriter final {
  public:
    // `stats` outlives this object (the owning client_core's counters).
    clamp_rewriter(const clamp_rewriter_params& config, client_core_stats& stats);
    ~clamp_rewriter();
    clamp_rewriter(const clamp_rewriter&) = delete;
    clamp_rewriter& operator=(const clamp_rewriter&) = delete;

    // A downlink IP packet delivered to the client. price: the price to feed the agents
    // with, nullopt while not clamping (the segment is then only counted).
    void on_downlink(time_ns now, const std::vector<std::uint8_t>& pkt, std::optional<float> price);
    // An uplink IP packet, its ACK window rewritten in place while price is set (one
    // window_record per rewritten ACK), passed through the tracker unchanged otherwise.
    void on_uplink(time_ns now, std::vector<std::uint8_t>& pkt, std::optional<float> price);
    // Forgets flows idle for flow_idle_timeout, here and in the tracker.
    void expire(time_ns now);

    std::size_t flows() const;
    // The agent of the connection whose downlink direction is `downlink_flow`, if any.
    const clamp::client_agent* agent(const tcpip::flow_key& downlink_flow) const;
    // Window rows since the last call.
    std::vector<window_record> take_records();
    const tcpip::window_tracker_stats& tracker_stats() const { return tracker_.stats(); }

  private:
    struct flow_record;
    using flow_map =
        std::unordered_map<tcpip::flow_key, std::unique_ptr<flow_record>, tcpip::flow_key_hash>;

    flow_record* find_flow(const tcpip::flow_key& downlink);
    // The record of the connection a SYN opens: a new one, or the existing one when the SYN
    // repeats its opener and ISN (a retransmission).
    flow_record& create_flow(time_ns now, const tcpip::flow_key& downlink, bool client_opened,
                             std::uint32_t syn_seq);
    void touch(flow_record& f, time_ns now);  // seen now: to the back of lru_
    void erase_flow(flow_map::iterator it);
    // A RST ends the connection: erased, and its key remembered (the last kClosedKept) so
    // that the ACKs still in flight count as after-close, not as of an unknown connection.
    void close_flow(flow_map::iterator it);
    bool recently_closed(const tcpip::flow_key& downlink) const;
    void ensure_agent(flow_record& f);
    void expire_flows(time_ns now);

    clamp_rewriter_params config_;
    client_core_stats& stats_;
    tcpip::window_tracker tracker_;
    flow_map flows_;
    std::list<flow_record*> lru_;  // every flow once; front = least recently seen
    static constexpr std::size_t kClosedKept = 64;
    std::deque<tcpip::flow_key> closed_;  // newest at the back
    std::vector<window_record> records_;
};

}  // namespace oppsched::client
