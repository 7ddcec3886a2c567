#pragma once
// The MAC PDU: the one definition of the bytes a transport block (TB) carries on the
// downlink. The AP daemon builds PDUs with pdu::Segmenter (oppsched/segmentation.h), the
// PHY carries them opaquely (it has its own control header and per-TB CRC), the client
// parses them with pdu::Reassembler; the Wireshark dissector and Python bindings follow
// this page.
//
// Two formats, chosen at the AP (oppsched-apd `pdu.format`, ap_core_params::pdu_format); the
// client tells them apart by the first byte (format_of()): 0x01 is the standard format
// (version 1), 0x80..0xBF the compact one (below). Every other first byte is invalid.
//
// Standard format, version 1. Multi-byte fields are big-endian (network order). A PDU fills
// its TB exactly: tb_bytes = 16 + payload_len + padding + 4.
//
//   offset  size  field
//   ------  ----  -----------------------------------------------------------------------
//        0     1  version       1
//        1     1  flags         bit 0 PRICE: the price field carries a CLAMP price.
//                               bit 1 SESSION: a 2-byte session trailer precedes the CRC.
//                               bits 2..7 reserved, sent as 0, rejected if set.
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
//   16 + payload_len  padding   up to the session or the CRC; written as zeros, not checked
//   tb_bytes - 6   2  session       only with SESSION: the AP's MAC session (below)
//   tb_bytes - 4   4  crc32         CRC-32 (oppsched/crc32.h, IEEE 802.3) of bytes
//                                   [0, tb_bytes - 4), big-endian
//
// Overhead: 20 bytes per PDU + 8 per segment (+ 2 with SESSION). Smallest PDU: 20 bytes (no
// segments).
//
// Compact format (`pdu.format: compact`), an RLC-UM-style byte stream: the packets of one
// user back to back, cut wherever a TB ends, with no per-packet overhead, as in Srinivasan &
// Baras, §III-C, whose packets go out as 8-byte link-layer segments with nothing added. Packet
// boundaries come from the IP headers themselves. Big-endian.
//
//   offset  size  field
//   ------  ----  -----------------------------------------------------------------------
//        0     1  bits 7..6   format     0b10: compact, version 1 (so byte 0 is 0x80..0xBF,
//                                        never format 1's 0x01)
//                 bit 5       PRICE      the 4-byte price follows the header
//                 bit 4       SESSION    the last 2 bytes of the TB are the session (below)
//                 bits 3..0   seq[11:8]
//        1     1  seq[7:0]    PDU sequence number, +1 for each new TB of the user, repeated
//                             by HARQ retransmissions, wraps mod 2^12 (below: why 12 bits)
//        2     2  first       where, counted from the start of the payload, the bytes that
//                             continue the packet begun in an earlier PDU end: the first
//                             packet starting in this PDU, or the padding; 0 if nothing
//                             continues. 0xFFFF (kCompactNoStart): every payload byte
//                             continues that packet (no packet starts here, no padding).
//                             Otherwise first < payload length.
//        4     4  price       only with PRICE: as in format 1 (binary32 seconds, finite, >= 0)
//   4 or 8     -  payload     to the end of the TB (to its last 2 bytes with SESSION):
//                   [0, first)   the rest (or more) of the packet in progress
//                   from first   packets back to back, each as long as its IP header says
//                                (IPv4: total length, >= 4 * IHL >= 20; IPv6: 40 + payload
//                                length, <= 65535); the last may run past the end of the TB
//                                and then continues at the start of the next PDU of the user,
//                                even if only its first byte fits here
//                   padding      from a zero byte where a packet would start (IP version 0)
//                                to the end of the payload; written as zeros, the first checked
//   tb_bytes - 2   2  session     only with SESSION (below)
//
// Overhead: 4 bytes a PDU, nothing per packet: an 8-byte TB (38.4 kb/s at 1.667 ms,
// Srinivasan & Baras, Table I) carries 4 bytes of packets. A priced PDU is 4 bytes bigger
// (8 with the price); the segmenter leaves the price out of a TB where it would leave no
// byte for packets (segmenter_stats::prices_omitted), so an 8-byte TB is never priced.
// Smallest PDU: 5 bytes (9 with PRICE): the header and one payload byte.
//
// No CRC: the PHY's control header (user, MCS, HARQ fields) has its own CRC and every TB its
// CRC-32, and the client only hands a TB to the reassembler when that CRC checked. The PDU
// has no user field either: the PHY's header addresses the TB.
//
// Sequence number: 12 bits, as NR RLC UM's long SN (3GPP TS 38.322). The client compares
// them with serial arithmetic mod 2^12, so a PDU more than 2048 ahead or behind is
// ambiguous: its reordering window is at most 2048 PDUs (reassembler_params::window above
// that is used as 2048). HARQ reorders a user's PDUs by at most max_transmissions HARQ round
// trips' worth of that user's slots (15 x 8 slots = 120 for the CLAMP paper's fast fading),
// and the client's timeout gives a gap up long before 2048 of them; 12 bits fit beside the
// flags in 2 bytes, where 8 would not cover 15 transmissions of 16 processes.
//
// What the compact format gives up: the client cannot count packets lost whole inside a lost
// PDU (no packet numbers); the AP counts them exactly (harq.dropped_packets).
//
// MAC session (both formats). The AP daemon draws a 16-bit session identifier at start
// (ap_core_params::session) and its segmenters start every user's PDU and packet sequence
// numbers at 0. Each segmenter writes the session as a 2-byte trailer (the SESSION flag) in
// every PDU of its user until the AP hears a HARQ ACK for one that carried it (then the
// client knows it), and omits it afterwards, so that a PDU costs nothing more once a session
// is established. A reassembler that sees a session other than the one it holds knows the AP
// restarted: it gives up what it buffered (counted as dropped_restart) and starts again at
// sequence 0 (reassembler_stats::session_restarts). A PDU without the trailer belongs to the
// session it holds. Without the session, a restarted AP's PDUs (seq 0, 1, ...) would all look
// old to a client that had reached seq 50000, and be discarded while HARQ ACKs them. A compact
// TB too short for the trailer and a data byte (under 7 bytes, 11 priced) goes without it
// (segmenter_stats::sessions_omitted). A late PDU of the replaced session is dropped if it
// carries the trailer (reassembler_stats::stale_session); one without it cannot be told from
// the new session's, which is why the trailer is sent until ACKed: the links from the PHY to
// the client keep order, so only a reordering link could deliver one after the new session's
// first PDU.
//
// Parsing never trusts a length field: every length is checked against the buffer and
// against each other; malformed input yields an Error naming the field and the value.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::pdu {

// The two PDU formats (above).
enum class pdu_format : std::uint8_t { standard, compact };
const char* to_string(pdu_format f);  // "standard", "compact"
// nullopt for any other name.
std::optional<pdu_format> pdu_format_from_string(const std::string& name);

constexpr std::uint8_t kVersion = 1;
constexpr std::uint8_t kFlagPrice = 0x01;
constexpr std::uint8_t kFlagSession = 0x02;
constexpr std::uint8_t kFlagsKnown = kFlagPrice | kFlagSession;
constexpr std::size_t kSessionBytes = 2;  // the session trailer (both formats)
constexpr std::size_t kHeaderBytes = 16;
constexpr std::size_t kSegmentHeaderBytes = 8;
constexpr std::size_t kCrcBytes = 4;
constexpr std::size_t kMinPduBytes = kHeaderBytes + kCrcBytes;  // 20
constexpr std::size_t kMaxPduBytes = 65535;                     // a TB size the PHY can name
constexpr std::size_t kMaxPacketBytes = 65535;

struct pdu_header {
    std::uint16_t user = 0;
    std::uint32_t seq = 0;
    std::optional<float> price_s;          // CLAMP price in seconds; nullopt = PRICE flag clear
    std::optional<std::uint16_t> session;  // MAC session; nullopt = SESSION flag clear
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

// ---------------------------------------------------------------------------------------
// Compact format

constexpr std::uint8_t kCompactMarker = 0x80;  // bits 7..6 of byte 0 = 0b10
constexpr std::uint8_t kCompactMarkerMask = 0xC0;
constexpr std::uint8_t kCompactFlagPrice = 0x20;
constexpr std::uint8_t kCompactFlagSession = 0x10;
constexpr unsigned kCompactSeqBits = 12;
constexpr std::uint32_t kCompactSeqMask = (1u << kCompactSeqBits) - 1;    // 0x0FFF
constexpr std::uint32_t kCompactMaxWindow = 1u << (kCompactSeqBits - 1);  // 2048
constexpr std::size_t kCompactHeaderBytes = 4;
constexpr std::size_t kCompactPriceBytes = 4;
constexpr std::uint16_t kCompactNoStart = 0xFFFF;
constexpr std::size_t kCompactMinPduBytes = kCompactHeaderBytes + 1;  // 5

// The format byte 0 names (nullopt: neither).
std::optional<pdu_format> format_of(std::uint8_t first_byte);

// The smallest TB that carries one byte of packet data: standard 29 (header, CRC, one
// segment header, 1 byte), compact 5 (header, 1 byte). MCSs below it count as rate 0.
constexpr std::size_t min_usable_tb_bytes(pdu_format f) {
    return f == pdu_format::compact ? kCompactMinPduBytes : kMinPduBytes + kSegmentHeaderBytes + 1;
}
// Packet bytes a full TB of `tb_bytes` carries (one segment in the standard format; the
// price only where it leaves a data byte in the compact one); 0 if unusable.
std::size_t data_capacity(pdu_format f, std::size_t tb_bytes, bool priced);

// The length of the IP packet whose first `avail` bytes are at `p` (avail >= 1), from its
// header: IPv4 total length (>= 4 * IHL, IHL >= 5), IPv6 40 + payload length (<= 65535).
// nullopt (as a value) when avail is too short to hold the length field (IPv4 < 4 bytes,
// IPv6 < 6); an error naming `field_prefix` + the header field and the value if invalid.
expected<std::optional<std::size_t>> ip_packet_length(const std::uint8_t* p, std::size_t avail,
                                                      const std::string& field_prefix = "");

// A packet that starts in a compact PDU, as it sits in a parsed buffer.
struct compact_packet_view {
    std::size_t offset = 0;                 // of its first byte, in the payload
    std::size_t bytes = 0;                  // of it in this PDU
    std::optional<std::size_t> packet_len;  // from its IP header; nullopt: header cut off
    bool complete() const { return packet_len && bytes == *packet_len; }
};

struct compact_view {
    std::uint16_t seq = 0;                 // 0..4095
    std::optional<float> price_s;          // nullopt: PRICE clear
    std::optional<std::uint16_t> session;  // nullopt: SESSION clear
    std::size_t header_bytes = 0;          // 4, or 8 with the price
    const std::uint8_t* payload = nullptr;
    std::size_t payload_len = 0;  // tb_bytes - header_bytes (- 2 with SESSION; padding included)
    std::optional<std::uint16_t> first;  // nullopt: kCompactNoStart
    std::size_t continuation = 0;        // payload[0, continuation) continues an earlier packet
    std::vector<compact_packet_view> packets;  // packets starting here, in order
    std::size_t padding = 0;                   // at the end of the payload
};

// An owning compact PDU, for tools, tests and bindings.
struct compact_pdu {
    std::uint16_t seq = 0;  // 0..4095
    std::optional<float> price_s;
    std::optional<std::uint16_t> session;  // the trailer (SESSION flag) when set
    // Bytes continuing an earlier packet. Filling the payload alone, they are written with
    // first = kCompactNoStart; shorter, they end that packet (first = their length).
    std::vector<std::uint8_t> continuation;
    // Packets starting in this PDU; every one whole except perhaps the last, which may be
    // only its first bytes and must then fill the TB to its end.
    std::vector<std::vector<std::uint8_t>> packets;
};

// Serialises into exactly `tb_bytes` bytes (zero padding). Errors name the field and value:
// tb_bytes outside [5 (9 with a price), 65535], more bytes than fit, a packet whose IP header
// is invalid or disagrees with its length, a cut packet that does not reach the TB's end.
expected<std::vector<std::uint8_t>> serialize_compact(const compact_pdu& pdu, std::size_t tb_bytes);

// Parses one compact PDU on its own (the views point into `data`): header, first, then the
// IP length of every packet that starts in it, and the padding's first byte. Whether the
// continuation fits the packet it continues is the reassembler's check (it knows that
// packet). O(packets).
expected<compact_view> parse_compact_view(const std::uint8_t* data, std::size_t len);
expected<compact_pdu> parse_compact(const std::uint8_t* data, std::size_t len);
inline expected<compact_pdu> parse_compact(const std::vector<std::uint8_t>& b) {
    return parse_compact(b.data(), b.size());
}

// Writes the compact header (and the price, if given) at `buf`, which has room for it; used
// by the segmenter, which writes the payload in place. `seq` is taken mod 2^12.
// With `session`, also sets the SESSION flag; the caller writes the trailer
// (write_session_trailer).
void write_compact_header(std::uint8_t* buf, std::uint32_t seq, std::optional<float> price_s,
                          std::uint16_t first, bool session = false);
// Writes the 2-byte session trailer of a TB of `tb_bytes` bytes: before the CRC (standard) or
// at the end (compact). The standard format's CRC must be written after it.
void write_session_trailer(std::uint8_t* buf, std::size_t tb_bytes, pdu_format f,
                           std::uint16_t session);

// The header fields both formats share, read without checking the rest (for a PDU the
// reassembler has already accepted): the format, the sequence number and the price.
struct header_summary {
    pdu_format format = pdu_format::standard;
    std::uint32_t seq = 0;
    std::optional<float> price_s;
    std::optional<std::uint16_t> session;
};
expected<header_summary> peek_header(const std::uint8_t* data, std::size_t len);

}  // namespace oppsched::pdu
