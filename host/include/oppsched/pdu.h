#pragma once
// The MAC PDU: the one definition of the bytes a transport block (TB) carries on the
// downlink. The AP daemon builds PDUs with pdu::Segmenter (oppsched/segmentation.h), the
// PHY carries them opaquely (it has its own control header and per-TB CRC), the client
// parses them with pdu::Reassembler; the Wireshark dissector and Python bindings follow
// this page.
//
// Wire format, version 1. Multi-byte fields are big-endian (network order). A PDU fills
// its TB exactly: tb_bytes = 16 + payload_len + padding + 4.
//
//   offset  size  field
//   ------  ----  -----------------------------------------------------------------------
//        0     1  version       1
//        1     1  flags         bit 0 PRICE: the price field carries a CLAMP price.
//                               bits 1..7 reserved, sent as 0, rejected if set.
//        2     2  user          destination user (queue index), 0..65535
//        4     4  seq           MAC sequence number of this PDU for this user: +1 for each
//                               new TB, repeated by HARQ retransmissions, wraps mod 2^32.
//                               The client delivers packets in this order.
//        8     4  price         CLAMP congestion price p = max((q - a)/mu_c, 0) (Andrew &
//                               Hanly, CLAMP, eq. 13), in SECONDS, IEEE-754 binary32.
//                               Finite and >= 0; 0.0 when PRICE is clear.
//       12     2  n_segments    number of segments that follow
//       14     2  payload_len   bytes of segments (their headers and data) after offset 16
//       16     -  segments, n_segments times, back to back:
//                   +0  2  packet_seq   per-user packet counter, +1 per IP packet, mod 2^16;
//                                       a gap at the client counts packets lost whole
//                   +2  2  packet_len   length of the whole IP packet, 1..65535
//                   +4  2  offset       offset of this segment's first byte in the packet
//                   +6  2  seg_len      data bytes in this segment, >= 1,
//                                       offset + seg_len <= packet_len
//                   +8  seg_len  data   the packet bytes [offset, offset + seg_len)
//                 A segment with offset 0 starts a packet (first); one with offset +
//                 seg_len == packet_len ends it (last). Only the first segment of a PDU
//                 may continue a packet (offset > 0) and only the last may leave it
//                 unfinished: a packet split across TBs continues at the start of the
//                 next TB of that user.
//   16 + payload_len  padding   up to the CRC; written as zeros, not checked
//   tb_bytes - 4   4  crc32         CRC-32 (oppsched/crc32.h, IEEE 802.3) of bytes
//                                   [0, tb_bytes - 4), big-endian
//
// Overhead: 20 bytes per PDU + 8 per segment. Smallest PDU: 20 bytes (no segments).
//
// Parsing never trusts a length field: every length is checked against the buffer and
// against each other; malformed input yields an Error naming the field and the value.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::pdu {

constexpr std::uint8_t kVersion = 1;
constexpr std::uint8_t kFlagPrice = 0x01;
constexpr std::uint8_t kFlagsKnown = kFlagPrice;
constexpr std::size_t kHeaderBytes = 16;
constexpr std::size_t kSegmentHeaderBytes = 8;
constexpr std::size_t kCrcBytes = 4;
constexpr std::size_t kMinPduBytes = kHeaderBytes + kCrcBytes;  // 20
constexpr std::size_t kMaxPduBytes = 65535;                     // a TB size the PHY can name
constexpr std::size_t kMaxPacketBytes = 65535;

struct pdu_header {
    std::uint16_t user = 0;
    std::uint32_t seq = 0;
    std::optional<float> price_s;  // CLAMP price in seconds; nullopt = PRICE flag clear
};

// A segment as it sits in a parsed buffer (data points into that buffer).
struct segment_view {
    std::uint16_t packet_seq = 0;
    std::uint16_t packet_len = 0;
    std::uint16_t offset = 0;
    std::uint16_t seg_len = 0;
    const std::uint8_t* data = nullptr;
    bool first() const { return offset == 0; }
    bool last() const { return std::size_t{offset} + seg_len == packet_len; }
};

struct pdu_view {
    pdu_header header;
    std::vector<segment_view> segments;  // in wire order
    std::size_t padding = 0;             // bytes between the segments and the CRC
};

// An owning PDU, for tools, tests and bindings.
struct pdu_segment {
    std::uint16_t packet_seq = 0;
    std::uint16_t packet_len = 0;
    std::uint16_t offset = 0;
    std::vector<std::uint8_t> data;
    bool first() const { return offset == 0; }
    bool last() const { return std::size_t{offset} + data.size() == packet_len; }
};

struct mac_pdu {
    pdu_header header;
    std::vector<pdu_segment> segments;
};

// Bytes a PDU with these segments needs at least (header + segments + CRC).
std::size_t pdu_min_bytes(const mac_pdu& pdu);

// Serialises `pdu` into exactly `tb_bytes` bytes (zero padding). Errors if tb_bytes is
// outside [20, 65535], the segments do not fit, or a segment breaks the rules above.
expected<std::vector<std::uint8_t>> serialize(const mac_pdu& pdu, std::size_t tb_bytes);

// Parses without copying: the segment views point into `data`, which must outlive them.
// Checks the CRC first, then every field. Cost: one pass over the header and segment
// headers plus the CRC over all bytes.
expected<pdu_view> parse_view(const std::uint8_t* data, std::size_t len);

// Parses into an owning Pdu.
expected<mac_pdu> parse(const std::uint8_t* data, std::size_t len);
inline expected<mac_pdu> parse(const std::vector<std::uint8_t>& b) {
    return parse(b.data(), b.size());
}

// Writes the 16-byte header and the CRC of a buffer whose segments are already in place
// (used by the segmenter, which writes segments in place). `buf` has tb_bytes bytes.
void write_header_and_crc(std::uint8_t* buf, std::size_t tb_bytes, const pdu_header& h,
                          std::uint16_t n_segments, std::uint16_t payload_len);

}  // namespace oppsched::pdu
