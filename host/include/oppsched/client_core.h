#pragma once
// The client agent's logic (oppsched-client, docs/daemons.md), without any I/O: what the
// daemon does with each rx_indication from its PHY and each packet its TUN gives it.
//
//   downlink  rx_indication --> HARQ feedback (ACK iff crc_ok and, with the integrity tag,
//                              the tag checks) for an addressed TB whose
//                              header decoded; CQI report every cqi_period_slots slots;
//                              the TB (a MAC PDU, pdu.h) --> Reassembler (segmentation.h)
//                              --> IP packets in order, for the TUN. The PDU header's CLAMP
//                              price is remembered with its arrival time.
//   uplink    TUN packet     --> uplink_packet. With CLAMP on, a TCP ACK of a connection seen
//                              from its SYN gets its advertised window rewritten to
//                              AWND = min(w, AWND_os) (Andrew & Hanly, CLAMP, eq. 17), w
//                              from that flow's clamp::client_agent (§IV-B/C, eqs. 14-16),
//                              through tcpip::window_tracker (window scale from the
//                              handshake, right edge never moved left, RFC 1624 checksum).
//
//   Everything sent uplink then waits uplink_delay in an uplink_delay (oppsched/uplink_delay.h).
//
// Plain classes: `now` is passed in (CLOCK_MONOTONIC in the daemon, a fake clock in tests),
// no clock, no globals, no I/O. Params are validated once, in validate(), which throws
// std::invalid_argument naming the field and the value.
//
// CLAMP details the paper leaves to the implementer (and why); the flows, s_k, AWND_os and
// duplicate ACKs are in clamp_rewriter.h:
//  - Price freshness (fail open). The price rides on PDUs, so it can only "stop arriving"
//    while PDUs arrive: when a PDU without a price arrives more than price_timeout after the
//    last PDU with one (or after the first PDU, if none ever had one), CLAMP stops
//    clamping: ACKs pass unchanged and the agents are not fed. One clamp_event (fail_open)
//    marks it; the next priced PDU resumes clamping (clamp_event resume). A silent downlink
//    (no PDU at all, e.g. an idle flow) does not fail open: nothing is stale until a PDU
//    shows the AP stopped stamping. While failed open (or before any price), ACKs of
//    tracked flows still go through window_tracker::rewrite() with the OS window itself, so
//    the tracker keeps the right edge the sender saw and clamping resumes without ever
//    moving it left; the bytes are unchanged (the OS never shrinks its window).
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "oppsched/clamp.h"
#include "oppsched/clamp_rewriter.h"
#include "oppsched/common.h"
#include "oppsched/integrity.h"
#include "oppsched/segmentation.h"
#include "oppsched/tcpip.h"
#include "oppsched/wire.h"

namespace oppsched::client {

struct client_core_params {
    std::uint16_t user = 0;  // this client's user id (wire messages and PDU header)
    // Reordering window, timeout and memory cap (segmentation.h); `user` is forced to the
    // field above, first_seq/first_packet_seq must match the AP's segmenter (both 0).
    pdu::reassembler_params reassembly;
    std::uint32_t cqi_period_slots = 1;  // >= 1: a cqi_report when slot >= last report + this
    // The AP's harq.max_transmissions, [0, 64]: a TB the client NACKed this many times is
    // dropped by the AP, so its gap is not held (reassembly.held_timeout). 0: unknown (a
    // NACKed TB is held until the AP sends a new TB on its process, or held_timeout).
    std::uint32_t harq_max_transmissions = 0;
    clamp_rewriter_params clamp;
    // The run's downlink tag key (integrity.h: run_key(..., downlink)): with a key, a TB
    // whose last 8 bytes are not the SipHash-2-4 tag of the rest is NACKed, dropped before
    // its PDU is parsed and counted (rx_integrity_failed). nullopt: TBs carry no tag.
    std::optional<integrity::tag_key> integrity_key;
    // Residual loss after the link (Andrew & Hanly, CLAMP, Table I: the X-R links' packet
    // loss rate 1e-3, "achieved via the fade margin and link layer retransmissions"): each
    // IP packet the reassembler delivers is dropped with this probability, independently,
    // before the CLAMP agent or the TUN sees it, and counted (residual_dropped_*). [0, 1);
    // 0: none (the link's own losses only). For a link whose HARQ loses less than a paper's
    // stated rate, e.g. attempts a HARQ round trip apart at 60 Hz (docs/architecture.md).
    double residual_loss = 0.0;
    std::uint64_t residual_loss_seed = 1;  // the draws' generator (std::mt19937_64)

    // Throws std::invalid_argument ("client.cqi_period_slots: 0 not in [1, 1000000]").
    void validate() const;
};

struct clamp_event {
    enum class event_kind : std::uint8_t { fail_open, resume };
    time_ns t = 0;
    event_kind kind = event_kind::fail_open;
    std::string detail;  // human readable: why
};
const char* to_string(clamp_event::event_kind k);

struct client_core_stats {
    // Downlink / PHY.
    std::uint64_t rx_indications = 0;    // slots heard
    std::uint64_t rx_addressed = 0;      // addressed to this client, header decoded
    std::uint64_t rx_header_failed = 0;  // addressed, header not decoded: no feedback
    std::uint64_t rx_crc_ok = 0;
    std::uint64_t rx_crc_failed = 0;
    std::uint64_t rx_other_user = 0;  // addressed, but the indication names another user
    std::uint64_t harq_acks = 0;
    std::uint64_t harq_nacks = 0;
    std::uint64_t cqi_reports = 0;
    std::uint64_t cqi_bad_snr = 0;          // slots whose SNR was not finite: no CQI report
    std::uint64_t pdu_errors = 0;           // TBs the reassembler refused (malformed/other user)
    std::uint64_t rx_integrity_failed = 0;  // CRC ok, integrity tag wrong: dropped unparsed
    std::uint64_t pdus_priced = 0;
    std::uint64_t pdus_unpriced = 0;
    std::uint64_t delivered_packets = 0;  // to the TUN (after residual_loss)
    std::uint64_t delivered_bytes = 0;
    std::uint64_t residual_dropped_packets = 0;  // dropped by residual_loss
    std::uint64_t residual_dropped_bytes = 0;
    // Uplink.
    std::uint64_t uplink_packets = 0;
    std::uint64_t uplink_bytes = 0;
    std::uint64_t uplink_dropped_size = 0;  // empty or > 65535 bytes: cannot be framed
    std::uint64_t uplink_unparsed = 0;      // not IPv4/IPv6 we could parse: sent unchanged
    // CLAMP.
    std::uint64_t clamp_flows_created = 0;
    std::uint64_t clamp_flows_evicted = 0;
    std::uint64_t clamp_flows_expired = 0;
    std::uint64_t clamp_flows_closed = 0;  // RST seen
    std::uint64_t clamp_agents_created = 0;
    std::uint64_t clamp_data_packets = 0;      // downlink segments fed to an agent
    std::uint64_t clamp_data_unpriced = 0;     // downlink segments not fed (no fresh price)
    std::uint64_t clamp_acks_rewritten = 0;    // ACKs clamped (one window_record each)
    std::uint64_t clamp_acks_reduced = 0;      // ... whose window is below the OS's
    std::uint64_t clamp_acks_fail_open = 0;    // ACKs of tracked flows passed unchanged
    std::uint64_t clamp_acks_unknown = 0;      // ACKs of connections not seen from their SYN
    std::uint64_t clamp_acks_after_close = 0;  // ACKs of a connection a RST just closed
    std::uint64_t clamp_dupacks = 0;
    std::uint64_t clamp_fail_open_events = 0;
    std::uint64_t clamp_resume_events = 0;
    std::uint64_t clamp_records_dropped = 0;  // rows/events beyond max_pending_records
};

// Output of one downlink event.
struct rx_output {
    std::vector<std::vector<std::uint8_t>> delivered;  // IP packets for the TUN, in order
    std::vector<wire::message> uplink;                 // harq_feedback, cqi_report
};

struct price_sample {
    float price_s = 0.0f;
    time_ns at = 0;             // when the PDU carrying it arrived
    std::uint32_t pdu_seq = 0;  // its MAC sequence number (mod 2^12 if compact)
};

class client_core final {
  public:
    explicit client_core(const client_core_params& params);
    ~client_core();
    client_core(const client_core&) = delete;
    client_core& operator=(const client_core&) = delete;

    // One slot heard by the PHY. Cost: the reassembler's (one CRC over the TB, one copy of
    // its data) plus, with CLAMP on, one parse and two hash lookups per delivered packet.
    rx_output on_rx_indication(time_ns now, const wire::rx_indication& ind);

    // One IP packet read from the TUN (client -> servers). Returns what to send uplink (the
    // packet, its window possibly rewritten; nothing if it cannot be framed). Cost with
    // CLAMP on: one parse, three hash lookups, an O(1) rewrite.
    std::vector<wire::message> on_uplink_packet(time_ns now, std::vector<std::uint8_t> packet);

    // Gives up reassembly gaps that timed out and forgets idle CLAMP flows. Returns packets
    // that became deliverable. Call at next_deadline() (and now and then).
    std::vector<std::vector<std::uint8_t>> poll(time_ns now);
    // When poll() next has something to do (nullopt: nothing pending).
    std::optional<time_ns> next_deadline() const;

    // Trace rows (windows.<user>.csv) and fail-open/resume events since the last call.
    std::vector<window_record> take_window_records();
    std::vector<clamp_event> take_events();

    // True while ACKs are being clamped (CLAMP on, a price seen, not failed open).
    bool clamping() const;
    std::optional<price_sample> last_price() const { return price_; }
    std::size_t clamp_flows() const;
    // The agent of the connection whose downlink direction is `downlink_flow`, if any.
    const clamp::client_agent* agent(const tcpip::flow_key& downlink_flow) const;

    const client_core_params& params() const { return params_; }
    const client_core_stats& stats() const { return stats_; }
    const pdu::reassembler_stats& reassembly_stats() const { return reassembler_.stats(); }
    const tcpip::window_tracker_stats& tracker_stats() const { return rewriter_.tracker_stats(); }

  private:
    void on_pdu_accepted(time_ns now, const std::uint8_t* data, std::size_t len);
    void deliver(time_ns now, pdu::reassembler::delivered_packets&& pkts,
                 std::vector<std::vector<std::uint8_t>>& out);
    // The price the CLAMP agents use now: nullopt unless clamping().
    std::optional<float> clamp_price() const;
    // HARQ state as the client sees it, for the reassembler's held timeout: process `pid`
    // sent a TB with `ndi` that decoded (ack) or not.
    void note_harq(time_ns now, std::uint8_t pid, std::uint8_t ndi, bool ack);
    void push_event(time_ns now, clamp_event::event_kind kind, std::string detail);

    client_core_params params_;
    client_core_stats stats_;
    pdu::reassembler reassembler_;
    std::optional<std::uint64_t> last_cqi_slot_;
    // Per HARQ process, the TB the client NACKed and has not seen the AP move on from (the
    // same NDI decoding, or a new NDI on the process): the AP may still retransmit it.
    struct nacked_tb {
        bool pending = false;
        std::uint8_t ndi = 0;
        std::uint32_t nacks = 0;
        time_ns since = 0;  // its first NACK
    };
    std::array<nacked_tb, 16> nacked_{};

    // CLAMP price state.
    std::optional<price_sample> price_;
    std::optional<time_ns> last_priced_pdu_t_;  // last PDU carrying a price (any seq)
    std::optional<time_ns> first_pdu_t_;
    bool failed_open_ = false;
    std::optional<time_ns> last_expire_;

    clamp_rewriter rewriter_;
    std::vector<clamp_event> events_;
    std::mt19937_64 residual_rng_;  // residual_loss's draws
};

}  // namespace oppsched::client
