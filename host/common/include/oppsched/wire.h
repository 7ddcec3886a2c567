#pragma once
// The one definition of the messages between the PHY and the MAC daemons, and of the
// uplink (wired back channel) messages. They travel over ZeroMQ (one message per ZeroMQ
// frame) and are also written into traces.
//
// Frame layout (all integers big-endian, network order, as in the MAC PDU of pdu.h):
//
//   offset size field
//   0      4    magic 0x4F505053 ("OPPS")
//   4      1    version (kVersion)
//   5      1    type (msg_type)
//   6      2    reserved, 0
//   8      4    seq: per-sender sequence number, +1 per message (gaps are counted)
//   12     4    body_len: bytes of body
//   16     n    body (per type, below)
//   16+n   4    CRC-32 (oppsched/crc32.h, zlib's) of bytes 0 .. 16+n-1
//
// Bodies:
//   slot_request   (PHY -> AP daemon: "what do I send in slot n?")
//                 u64 slot, i64 air_time_ns (start of the slot on the PHY's clock)
//   slot_grant     (AP daemon -> PHY) u64 slot, u8 flags (bit0 = empty slot, bit1 = uplink:
//                 the TB is station `user`'s uplink transmission in this slot, shared
//                 medium), u16 user, u8 mcs, u8 harq_pid, u8 ndi, u8 rv, u16 tb_len, tb_len
//                 bytes (the MAC PDU, oppsched/pdu.h). bit1 is version 1's extension for the
//                 shared medium: a decoder that knows bit0 only rejects it by name (reserved
//                 bits), so an older PHY never sends an uplink TB as a downlink one.
//   rx_indication  (client PHY -> client agent, one per slot heard)
//                 u64 slot, u16 user, u8 mcs, u8 harq_pid, u8 ndi, u8 rv, u8 flags
//                 (bit0 header_ok, bit1 addressed to this client, bit2 crc_ok),
//                 f32 snr_db, u8 cqi, u8 combined (transmissions combined), u16 tb_len, tb bytes
//   cqi_report     (client -> AP) u16 user, u64 slot, f32 snr_db, u8 cqi
//   harq_feedback  (client -> AP) u16 user, u64 slot, u8 harq_pid, u8 ack (1 ACK, 0 NACK)
//   uplink_packet  (client -> AP: an IP packet from the client toward the servers)
//                 u16 user, u16 len, len bytes
//   The station's own uplink queue (medium.station_queue: client; docs/architecture.md,
//   "Shared medium"):
//   uplink_grant   (AP -> client: "send in uplink slot n", LTE's uplink grant)
//                 u16 user, u64 slot, i64 air_time_ns (the slot's start, PHY clock),
//                 u8 mcs, u8 harq_pid, u8 ndi (toggled: a new TB; the same: send the
//                 process's TB again), u8 rv, u16 tb_bytes
//   uplink_tb      (client -> AP: the station's transmission in a granted slot, with its
//                 buffer status after building it) u16 user, u64 slot, u8 harq_pid, u8 ndi,
//                 u64 buffer_bytes, u64 buffer_packets, u16 tb_len, tb_len bytes (the MAC PDU)
//   buffer_status  (client -> AP: a buffer status report) u16 user, u64 last_grant_slot
//                 (the newest grant the station had when it counted), u64 buffer_bytes,
//                 u64 buffer_packets
//
// decode() never trusts a length: every field is bounds-checked, the CRC verified, and an
// error names the field and the value. Frames longer than the caller's limit are rejected
// before anything is read.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <variant>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::wire {

constexpr std::uint32_t kMagic = 0x4F505053u;  // "OPPS"
constexpr std::uint8_t kVersion = 1;
constexpr std::size_t kHeaderLen = 16;
constexpr std::size_t kTrailerLen = 4;
constexpr std::size_t kMaxFrameLen = 70'000;  // an IP packet (64 KiB) + headers
// The user of a slot that carries no TB (an empty slot: preamble and a header addressed to
// nobody), in slot_grant-derived headers and in rx_indication.user. Never a real user's id.
constexpr std::uint16_t kUserNobody = 0xFFFF;

enum class msg_type : std::uint8_t {
    slot_request = 1,
    slot_grant = 2,
    rx_indication = 3,
    cqi_report = 4,
    harq_feedback = 5,
    uplink_packet = 6,
    uplink_grant = 7,
    uplink_tb = 8,
    buffer_status = 9,
};
const char* to_string(msg_type t);

struct slot_request {
    std::uint64_t slot = 0;
    std::int64_t air_time_ns = 0;
    bool operator==(const slot_request&) const;
};

struct slot_grant {
    std::uint64_t slot = 0;
    bool empty = true;  // no TB: preamble and header only (CQI is still measured)
    // The TB is station `user`'s uplink transmission (docs/architecture.md, "Shared medium"):
    // the PHY sends it on the uplink path and the AP's receiver decodes it; the downlink
    // sends no payload in this slot.
    bool uplink = false;
    std::uint16_t user = 0;
    std::uint8_t mcs = 0, harq_pid = 0, ndi = 0, rv = 0;
    std::vector<std::uint8_t> tb;
    bool operator==(const slot_grant&) const;
};

struct rx_indication {
    std::uint64_t slot = 0;
    std::uint16_t user = 0;
    std::uint8_t mcs = 0, harq_pid = 0, ndi = 0, rv = 0;
    bool header_ok = false, addressed = false, crc_ok = false;
    float snr_db = 0;
    std::uint8_t cqi = 0;
    std::uint8_t combined = 0;
    std::vector<std::uint8_t> tb;
    bool operator==(const rx_indication&) const;
};

struct cqi_report {
    std::uint16_t user = 0;
    std::uint64_t slot = 0;
    float snr_db = 0;
    std::uint8_t cqi = 0;
    bool operator==(const cqi_report&) const;
};

struct harq_feedback {
    std::uint16_t user = 0;
    std::uint64_t slot = 0;
    std::uint8_t harq_pid = 0;
    bool ack = false;
    bool operator==(const harq_feedback&) const;
};

struct uplink_packet {
    std::uint16_t user = 0;
    std::vector<std::uint8_t> packet;
    bool operator==(const uplink_packet&) const;
};

struct uplink_grant {
    std::uint16_t user = 0;
    std::uint64_t slot = 0;
    std::int64_t air_time_ns = 0;
    std::uint8_t mcs = 0, harq_pid = 0, ndi = 0, rv = 0;
    std::uint16_t tb_bytes = 0;
    bool operator==(const uplink_grant&) const;
};

struct uplink_tb {
    std::uint16_t user = 0;
    std::uint64_t slot = 0;
    std::uint8_t harq_pid = 0, ndi = 0;
    std::uint64_t buffer_bytes = 0, buffer_packets = 0;
    std::vector<std::uint8_t> tb;
    bool operator==(const uplink_tb&) const;
};

struct buffer_status {
    std::uint16_t user = 0;
    std::uint64_t last_grant_slot = 0;
    std::uint64_t buffer_bytes = 0, buffer_packets = 0;
    bool operator==(const buffer_status&) const;
};

using message = std::variant<slot_request, slot_grant, rx_indication, cqi_report, harq_feedback,
                             uplink_packet, uplink_grant, uplink_tb, buffer_status>;

msg_type type_of(const message& m);
// A default-constructed message of type t (t must be a msg_type value).
message make_message(msg_type t);

// ---------------------------------------------------------------------------------------
// The body of each message, field by field in wire order: the one description of the layout
// above that encode(), decode() and the Python bindings walk. A visitor provides
//   num(name, x)                  x is u8, u16, u64, i64 or f32, by its C++ type
//   flags(name, wire_bit{...}...) one u8 whose bit i is the i-th bool
//   boolean(name, b)              one u8 that must be 0 or 1
//   bytes(len_name, name, v)      a u16 length, then the bytes
// M is the message type, const or not.
template <class B>
struct wire_bit {
    const char* name;
    B& value;  // bool or const bool
};
template <class B>
wire_bit(const char*, B&) -> wire_bit<B>;

template <class M, class T>
using if_message = std::enable_if_t<std::is_same_v<std::remove_const_t<M>, T>>;

template <class M, class V>
if_message<M, slot_request> for_each_wire_field(M& m, V&& v) {
    v.num("slot", m.slot);
    v.num("air_time_ns", m.air_time_ns);
}
template <class M, class V>
if_message<M, slot_grant> for_each_wire_field(M& m, V&& v) {
    v.num("slot", m.slot);
    v.flags("flags", wire_bit{"empty", m.empty}, wire_bit{"uplink", m.uplink});
    v.num("user", m.user);
    v.num("mcs", m.mcs);
    v.num("harq_pid", m.harq_pid);
    v.num("ndi", m.ndi);
    v.num("rv", m.rv);
    v.bytes("tb_len", "tb", m.tb);
}
template <class M, class V>
if_message<M, rx_indication> for_each_wire_field(M& m, V&& v) {
    v.num("slot", m.slot);
    v.num("user", m.user);
    v.num("mcs", m.mcs);
    v.num("harq_pid", m.harq_pid);
    v.num("ndi", m.ndi);
    v.num("rv", m.rv);
    v.flags("flags", wire_bit{"header_ok", m.header_ok}, wire_bit{"addressed", m.addressed},
            wire_bit{"crc_ok", m.crc_ok});
    v.num("snr_db", m.snr_db);
    v.num("cqi", m.cqi);
    v.num("combined", m.combined);
    v.bytes("tb_len", "tb", m.tb);
}
template <class M, class V>
if_message<M, cqi_report> for_each_wire_field(M& m, V&& v) {
    v.num("user", m.user);
    v.num("slot", m.slot);
    v.num("snr_db", m.snr_db);
    v.num("cqi", m.cqi);
}
template <class M, class V>
if_message<M, harq_feedback> for_each_wire_field(M& m, V&& v) {
    v.num("user", m.user);
    v.num("slot", m.slot);
    v.num("harq_pid", m.harq_pid);
    v.boolean("ack", m.ack);
}
template <class M, class V>
if_message<M, uplink_packet> for_each_wire_field(M& m, V&& v) {
    v.num("user", m.user);
    v.bytes("len", "packet", m.packet);
}

template <class M, class V>
if_message<M, uplink_grant> for_each_wire_field(M& m, V&& v) {
    v.num("user", m.user);
    v.num("slot", m.slot);
    v.num("air_time_ns", m.air_time_ns);
    v.num("mcs", m.mcs);
    v.num("harq_pid", m.harq_pid);
    v.num("ndi", m.ndi);
    v.num("rv", m.rv);
    v.num("tb_bytes", m.tb_bytes);
}
template <class M, class V>
if_message<M, uplink_tb> for_each_wire_field(M& m, V&& v) {
    v.num("user", m.user);
    v.num("slot", m.slot);
    v.num("harq_pid", m.harq_pid);
    v.num("ndi", m.ndi);
    v.num("buffer_bytes", m.buffer_bytes);
    v.num("buffer_packets", m.buffer_packets);
    v.bytes("tb_len", "tb", m.tb);
}
template <class M, class V>
if_message<M, buffer_status> for_each_wire_field(M& m, V&& v) {
    v.num("user", m.user);
    v.num("last_grant_slot", m.last_grant_slot);
    v.num("buffer_bytes", m.buffer_bytes);
    v.num("buffer_packets", m.buffer_packets);
}

struct frame {
    std::uint32_t seq = 0;
    message msg;
};

// Serialises one message; throws std::invalid_argument if a payload exceeds its u16 length.
std::vector<std::uint8_t> encode(const message& msg, std::uint32_t seq);

// Parses one frame of at most max_len bytes.
expected<frame> decode(const std::uint8_t* data, std::size_t len,
                       std::size_t max_len = kMaxFrameLen);
inline expected<frame> decode(const std::vector<std::uint8_t>& f,
                              std::size_t max_len = kMaxFrameLen) {
    return decode(f.data(), f.size(), max_len);
}

// Tracks one peer's sequence numbers: counts gaps (lost messages) and reorders/duplicates.
class seq_tracker final {
  public:
    struct seq_stats {
        std::uint64_t received = 0;
        std::uint64_t lost = 0;          // sum of gap sizes
        std::uint64_t out_of_order = 0;  // older than the newest seen (duplicates included)
        std::uint64_t restarts = 0;      // peer restarted (seq went back to 0)
    };
    // Returns the number of messages missing before this one (0 when in sequence).
    std::uint64_t on_receive(std::uint32_t seq);
    const seq_stats& stats() const { return stats_; }

  private:
    bool started_ = false;
    std::uint32_t next_ = 0;
    seq_stats stats_;
};

}  // namespace oppsched::wire
