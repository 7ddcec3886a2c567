#pragma once
// TCP/IP header tools: defensive parsing of IPv4/IPv6 (with extension headers) and TCP
// (with options), ECN marking, per-flow window-scale tracking and advertised-window
// rewriting with the RFC 1624 incremental checksum update.
//
// Parsing never trusts a length field: every offset is checked against the buffer, and
// malformed input yields an Error naming the field and the value.
//
// Who uses what:
//   - AQMs (ECN marking): parse() then mark_ce().
//   - CLAMP client agent (Andrew & Hanly, CLAMP, §IV-B, eq. 17: AWND = min(w, AWND_OS)):
//     window_tracker::learn() on every packet of both directions (learns the window-scale
//     shifts from SYN / SYN-ACK) and window_tracker::rewrite() on every outgoing ACK.
//   - Stateless tools/tests: set_window() (the window scale is given by the caller).
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::tcpip {

constexpr std::uint8_t kProtoTcp = 6;
constexpr std::uint8_t kProtoUdp = 17;

// IPv6 next-header values the parser walks (RFC 8200 §4, RFC 4302) or stops at.
constexpr std::uint8_t kIpv6HopByHop = 0, kIpv6Routing = 43, kIpv6Fragment = 44, kIpv6Esp = 50,
                       kIpv6Ah = 51, kIpv6NoNext = 59, kIpv6DestOpts = 60;

// TCP flag bits (byte 13 of the TCP header).
constexpr std::uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10, kUrg = 0x20,
                       kEce = 0x40, kCwr = 0x80;

// ECN codepoints (RFC 3168), the low two bits of the IPv4 TOS / IPv6 traffic class.
constexpr std::uint8_t kNotEct = 0, kEct1 = 1, kEct0 = 2, kCe = 3;

// RFC 7323 §2.3: a shift count above 14 is used as 14.
constexpr std::uint8_t kMaxWindowShift = 14;

// A transport 5-tuple; v4 addresses occupy the first 4 bytes of the arrays.
struct flow_key {
    std::uint8_t ip_version = 4;
    std::uint8_t proto = 0;
    std::array<std::uint8_t, 16> src{};
    std::array<std::uint8_t, 16> dst{};
    std::uint16_t sport = 0, dport = 0;
    bool operator==(const flow_key& o) const;
    bool operator!=(const flow_key& o) const { return !(*this == o); }
    flow_key reversed() const;  // the same connection seen in the other direction
};
struct flow_key_hash {
    std::size_t operator()(const flow_key& k) const;
};
// A keyed hash of a flow_key: SipHash-2-4 (libsodium's crypto_shorthash) of the key's
// fields, under a 128-bit key derived from `seed`. For tables whose keys come from the
// traffic (the LAS flow table): without the seed nobody can pick 5-tuples that share a
// bucket, and one seed gives the same hashes on every run. About 25 ns an IPv4 key, 35 ns
// an IPv6 key (BM_keyed_flow_hash).
class keyed_flow_hash {
  public:
    explicit keyed_flow_hash(std::uint64_t seed = 0);
    std::size_t operator()(const flow_key& k) const;

  private:
    std::array<std::uint8_t, 16> key_{};
};

struct tcp_header {
    std::size_t offset = 0;       // offset of the TCP header in the packet
    std::size_t header_len = 0;   // data offset * 4
    std::size_t payload_len = 0;  // TCP payload bytes (of this IP fragment)
    std::uint32_t seq = 0, ack = 0;
    std::uint16_t window = 0;    // raw 16-bit field (unscaled)
    std::uint16_t checksum = 0;  // raw checksum field
    std::uint8_t flags = 0;
    // Window-scale option as sent. Reported wherever it appears; it is only meaningful on
    // a SYN (RFC 7323 §2.2), and window_tracker only learns it from SYNs.
    std::optional<std::uint8_t> wscale;
    std::optional<std::uint16_t> mss;
    bool sack_permitted = false;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> sack_blocks;  // left, right edges
    std::optional<std::pair<std::uint32_t, std::uint32_t>> timestamp;  // TSval, TSecr
};

struct packet_info {
    std::uint8_t ip_version = 4;
    std::size_t ip_header_len = 0;  // including IPv6 extension headers
    std::size_t total_len = 0;      // from the IP length field, checked against the buffer
    std::uint8_t ecn = kNotEct;
    flow_key flow;                  // ports 0 for non-TCP/UDP; proto = upper-layer protocol
                                    // (or 50 ESP / 59 no-next-header, where parsing stops)
    std::optional<tcp_header> tcp;  // present iff proto == TCP and the header parsed
    bool is_fragment = false;       // non-first fragments carry no transport header
};

// Parses an IPv4 or IPv6 packet. Bytes past the IP length field are allowed (padding).
// IPv6 extension headers walked: hop-by-hop, routing, fragment, destination options, AH;
// parsing stops at ESP and no-next-header. TCP options parsed: EOL, NOP, MSS, window
// scale, SACK-permitted, SACK blocks (1..4), timestamps; unknown kinds are skipped by
// their length. An option whose length is < 2, runs past the header, or is wrong for
// its kind is an error. Cost: O(header bytes), one allocation only if SACK blocks exist.
expected<packet_info> parse(const std::uint8_t* data, std::size_t len);
inline expected<packet_info> parse(const std::vector<std::uint8_t>& p) {
    return parse(p.data(), p.size());
}

// Sets CE on an ECN-capable packet (ECT(0)/ECT(1)/CE) and fixes the IPv4 header checksum.
// Returns false, and leaves the packet untouched, if it is not ECN-capable or malformed.
// With not_ect_too a Not-ECT packet is marked as well: only for aqm_params::
// mark_not_ect, an ablation that treats a segment as ns-2's ECN agents would send it.
bool mark_ce(std::vector<std::uint8_t>& packet, bool not_ect_too = false);

// ---------------------------------------------------------------------------------------
// Checksums.

// RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), one's-complement arithmetic, for one 16-bit
// word m changed to m'. Unlike eqn. 2 it never yields 0xFFFF where a full computation
// gives 0x0000, so the result equals a full recomputation (for TCP and IPv4 headers,
// whose sums are never all-zero).
constexpr std::uint16_t checksum_update16(std::uint16_t hc, std::uint16_t m, std::uint16_t m_new) {
    std::uint32_t s = static_cast<std::uint16_t>(~hc);
    s += static_cast<std::uint16_t>(~m);
    s += m_new;
    s = (s & 0xFFFFu) + (s >> 16);
    s = (s & 0xFFFFu) + (s >> 16);
    return static_cast<std::uint16_t>(~s);
}

// Full TCP checksum (RFC 793 / RFC 8200 §8.1 pseudo-header) of a parsed packet, computed
// as if the checksum field were zero. The IPv6 pseudo-header uses the fixed header's
// destination (a routing header with segments left would name another final destination;
// such packets are not rewritten by this project). Not valid for IP fragments.
std::uint16_t tcp_checksum(const std::uint8_t* data, const packet_info& info);
// IPv4 header checksum computed with the checksum field as zero.
std::uint16_t ipv4_header_checksum(const std::uint8_t* data, std::size_t ihl_bytes);

// ---------------------------------------------------------------------------------------
// Advertised-window rewriting.

// The 16-bit window field that advertises at least `window_bytes` under scale `shift`:
// ceil(window_bytes / 2^shift) clamped to 65535, i.e. rounded UP to the granularity.
constexpr std::uint16_t window_field_for(std::uint64_t window_bytes, std::uint8_t shift) {
    const std::uint64_t g = std::uint64_t{1} << shift;
    const std::uint64_t f = (window_bytes + g - 1) >> shift;
    return static_cast<std::uint16_t>(f > 0xFFFFu ? 0xFFFFu : f);
}

// Writes `field` into the window of the TCP header at `tcp` and updates its checksum
// incrementally (RFC 1624 eqn. 3); valid for v4 and v6 since the window is not part of
// the pseudo-header. The caller guarantees tcp[0..20) is inside the packet. ~1 ns.
inline void write_window_field(std::uint8_t* tcp, std::uint16_t field) {
    const std::uint16_t old_w = static_cast<std::uint16_t>((tcp[14] << 8) | tcp[15]);
    const std::uint16_t hc = static_cast<std::uint16_t>((tcp[16] << 8) | tcp[17]);
    const std::uint16_t nc = checksum_update16(hc, old_w, field);
    tcp[14] = static_cast<std::uint8_t>(field >> 8);
    tcp[15] = static_cast<std::uint8_t>(field);
    tcp[16] = static_cast<std::uint8_t>(nc >> 8);
    tcp[17] = static_cast<std::uint8_t>(nc);
}

// Stateless rewrite: sets the window of the TCP segment in `packet` (already parsed into
// `info`) to `window_bytes` rounded up to 2^shift and clamped to 65535 << shift. shift >
// 14 is used as 14. Returns the new raw field, or an Error if `info` has no TCP header
// or the packet is too short for it. SYN windows are never scaled (RFC 7323 §2.2), so
// for a SYN `shift` is ignored (treated as 0).
expected<std::uint16_t> set_window(std::uint8_t* packet, std::size_t len, const packet_info& info,
                                   std::uint64_t window_bytes, std::uint8_t shift);

struct window_tracker_params {
    std::size_t max_flows = 65536;           // entries held at most (LRU eviction beyond)
    time_ns idle_timeout = 300 * kNsPerSec;  // an entry idle this long is forgotten
    void validate() const;  // throws std::invalid_argument naming the field and value
};

struct window_tracker_stats {
    std::uint64_t syns = 0;               // SYNs learnt from (each new one resets its connection)
    std::uint64_t syn_retransmits = 0;    // SYNs repeating the open connection's ISN: kept
    std::uint64_t syn_acks = 0;           // SYN-ACKs that completed a connection's scale
    std::uint64_t scale_clamped = 0;      // shift > 14 received and used as 14
    std::uint64_t rewritten = 0;          // ACKs whose window field was rewritten
    std::uint64_t unchanged_unknown = 0;  // ACKs of flows whose SYN/SYN-ACK was not seen
    std::uint64_t unchanged_syn = 0;      // SYN segments passed through (never rewritten)
    std::uint64_t unchanged_other = 0;    // non-TCP, fragments, segments without ACK
    std::uint64_t right_edge_held = 0;    // window raised to keep the right edge
    std::uint64_t window_clamped = 0;     // window_bytes above 65535 << shift
    std::uint64_t evicted = 0;            // entries dropped because max_flows was reached
    std::uint64_t expired = 0;            // entries dropped after idle_timeout
};

// What rewrite() did to one packet.
enum class rewrite_outcome : std::uint8_t {
    rewritten,       // the window field (and checksum) now advertise the new window
    unknown_flow,    // scale unknown (SYN/SYN-ACK not seen, or forgotten): unchanged
    syn,             // SYN / SYN-ACK: never rewritten
    not_applicable,  // not TCP, fragment, or no ACK flag: unchanged
};

// Per-connection window-scale state and advertised right edges.
//
// Window scaling (RFC 7323 §2) is in effect only if both the SYN and the SYN-ACK carry
// the option; then windows sent by the SYN's sender are scaled by the shift in its SYN,
// and windows sent by the other side by the shift in the SYN-ACK. Otherwise both shifts
// are 0. A connection's scale is known once its SYN and SYN-ACK were both seen; ACKs of
// connections not seen from their SYN pass unchanged (their scale is unknown, and a
// guessed scale could shrink the window by up to 2^14).
//
// Right edge: for each direction the tracker remembers the largest right edge (ack +
// window << shift, mod 2^32) it has let out (starting with the SYN-ACK's unscaled one), and never
// advertises a smaller one: shrinking the window is discouraged by RFC 793/RFC 7323 §2.4 (and the
// CLAMP paper's footnote on Δw ≥ −s_k, Andrew & Hanly, CLAMP, §IV-B). All ACKs of a rewritten
// direction must go through rewrite().
//
// Memory is bounded: at most max_flows entries, LRU-evicted, and entries idle longer than
// idle_timeout are forgotten. A RST forgets its connection. learn()/rewrite() cost one hash
// lookup; no allocation except when a connection is inserted.
class window_tracker final {
  public:
    explicit window_tracker(window_tracker_params params = {});

    // Learns from any packet of either direction: the SYN starts (or restarts) a
    // connection, the SYN-ACK completes its scale, RST forgets it; other packets refresh
    // its idle timer. Never modifies the packet.
    void learn(const packet_info& info, time_ns now);

    // learn() then, for a non-SYN TCP ACK of a connection with known scale, set its window
    // to `window_bytes` rounded up to 2^shift, raised so that the right edge does not move
    // left of the largest one already advertised in that direction, clamped to
    // 65535 << shift; the checksum is updated incrementally. `packet`/`len` are the bytes
    // `info` was parsed from.
    rewrite_outcome rewrite(std::uint8_t* packet, std::size_t len, const packet_info& info,
                            std::uint64_t window_bytes, time_ns now);

    // Shift applied to windows sent in the direction of `flow`, if known.
    std::optional<std::uint8_t> shift(const flow_key& flow) const;

    // Window in bytes that `info` advertises as sent (raw field << shift; SYNs unscaled),
    // if its connection's scale is known: the "AWND from the OS" of CLAMP eq. 17.
    std::optional<std::uint64_t> advertised_bytes(const packet_info& info) const;

    // Forgets entries idle for longer than idle_timeout. Called by learn() as well, so an
    // explicit call is only needed when traffic stops.
    void expire(time_ns now);

    std::size_t size() const { return map_.size(); }
    const window_tracker_stats& stats() const { return stats_; }
    const window_tracker_params& params() const { return params_; }

  private:
    struct direction_state {
        std::optional<std::uint8_t> ws_option;  // as sent in this side's SYN / SYN-ACK
        bool has_edge = false;
        std::uint32_t max_right_edge = 0;
    };
    struct lru_node {
        flow_key key;  // the entry's key (the SYN's direction)
        time_ns last_seen = 0;
    };
    struct flow_entry {
        direction_state initiator, responder;  // initiator = the SYN's sender (key direction)
        bool syn_ack_seen = false;
        std::uint32_t syn_seq = 0;  // the SYN's ISN: a SYN repeating it is a retransmission
        std::list<lru_node>::iterator lru;
    };
    using flow_map = std::unordered_map<flow_key, flow_entry, flow_key_hash>;

    // Entry of the connection `flow` belongs to; `is_initiator` says which side sent it.
    flow_map::iterator find(const flow_key& flow, bool& is_initiator);
    // learn() returning the packet's entry (or end) and side, so rewrite() looks up once.
    flow_map::iterator learn_find(const packet_info& info, time_ns now, bool& is_initiator);
    void touch(flow_map::iterator it, time_ns now);
    void erase(flow_map::iterator it);
    static std::uint8_t shift_of(const flow_entry& e, bool initiator_side);

    window_tracker_params params_;
    flow_map map_;
    std::list<lru_node> lru_;  // front = most recently seen; back = oldest
    window_tracker_stats stats_;
};

}  // namespace oppsched::tcpip
