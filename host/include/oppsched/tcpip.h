#pragma once
// TCP/IP header tools: defensive parsing of IPv4/IPv6 (with extension headers) and TCP
// (with options), ECN marking, per-flow window-scale tracking and advertised-window
// rewriting with the RFC 1624 incremental checksum update.
//
// Parsing never trusts a length field: every offset is checked against the buffer, and
// malformed input yields an Error naming the field and the value.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::tcpip {

constexpr std::uint8_t kProtoTcp = 6;
constexpr std::uint8_t kProtoUdp = 17;

// TCP flag bits (byte 13 of the TCP header).
constexpr std::uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10,
                       kUrg = 0x20, kEce = 0x40, kCwr = 0x80;

// ECN codepoints (RFC 3168), the low two bits of the IPv4 TOS / IPv6 traffic class.
constexpr std::uint8_t kNotEct = 0, kEct1 = 1, kEct0 = 2, kCe = 3;

// A transport 5-tuple; v4 addresses occupy the first 4 bytes of the arrays.
struct FlowKey {
    std::uint8_t ip_version = 4;
    std::uint8_t proto = 0;
    std::array<std::uint8_t, 16> src{};
    std::array<std::uint8_t, 16> dst{};
    std::uint16_t sport = 0, dport = 0;
    bool operator==(const FlowKey& o) const;
    bool operator!=(const FlowKey& o) const { return !(*this == o); }
    FlowKey reversed() const;  // the same connection seen in the other direction
};
struct FlowKeyHash {
    std::size_t operator()(const FlowKey& k) const;
};

struct TcpHeader {
    std::size_t offset = 0;        // offset of the TCP header in the packet
    std::size_t header_len = 0;    // data offset * 4
    std::size_t payload_len = 0;   // TCP payload bytes
    std::uint32_t seq = 0, ack = 0;
    std::uint16_t window = 0;      // raw 16-bit field (unscaled)
    std::uint8_t flags = 0;
    std::optional<std::uint8_t> wscale;  // window-scale option, as sent (SYN only)
    std::optional<std::uint16_t> mss;
    bool sack_permitted = false;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> sack_blocks;  // left, right edges
    std::optional<std::pair<std::uint32_t, std::uint32_t>> timestamp;  // TSval, TSecr
};

struct PacketInfo {
    std::uint8_t ip_version = 4;
    std::size_t ip_header_len = 0;   // including IPv6 extension headers
    std::size_t total_len = 0;       // from the IP length field, checked against the buffer
    std::uint8_t ecn = kNotEct;
    FlowKey flow;                    // ports 0 for non-TCP/UDP
    std::optional<TcpHeader> tcp;    // present iff proto == TCP and the header parsed
    bool is_fragment = false;        // non-first fragments carry no transport header
};

// Parses an IPv4 or IPv6 packet. Bytes past the IP length field are allowed (padding).
Result<PacketInfo> parse(const std::uint8_t* data, std::size_t len);
inline Result<PacketInfo> parse(const std::vector<std::uint8_t>& p) {
    return parse(p.data(), p.size());
}

// Sets CE on an ECN-capable packet (ECT(0)/ECT(1)/CE) and fixes the IPv4 header checksum.
// Returns false, and leaves the packet untouched, if it is not ECN-capable or malformed.
bool mark_ce(std::vector<std::uint8_t>& packet);

}  // namespace oppsched::tcpip
