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
//   5      1    type (MsgType)
//   6      2    reserved, 0
//   8      4    seq: per-sender sequence number, +1 per message (gaps are counted)
//   12     4    body_len: bytes of body
//   16     n    body (per type, below)
//   16+n   4    CRC-32 (oppsched/crc32.h, zlib's) of bytes 0 .. 16+n-1
//
// Bodies:
//   SlotRequest   (PHY -> AP daemon: "what do I send in slot n?")
//                 u64 slot, i64 air_time_ns (start of the slot on the PHY's clock)
//   SlotGrant     (AP daemon -> PHY) u64 slot, u8 flags (bit0 = empty slot),
//                 u16 user, u8 mcs, u8 harq_pid, u8 ndi, u8 rv, u16 tb_len, tb_len bytes
//                 (the MAC PDU, oppsched/pdu.h)
//   RxIndication  (client PHY -> client agent, one per slot heard)
//                 u64 slot, u16 user, u8 mcs, u8 harq_pid, u8 ndi, u8 rv, u8 flags
//                 (bit0 header_ok, bit1 addressed to this client, bit2 crc_ok),
//                 f32 snr_db, u8 cqi, u8 combined (transmissions combined), u16 tb_len, tb bytes
//   CqiReport     (client -> AP) u16 user, u64 slot, f32 snr_db, u8 cqi
//   HarqFeedback  (client -> AP) u16 user, u64 slot, u8 harq_pid, u8 ack (1 ACK, 0 NACK)
//   UplinkPacket  (client -> AP: an IP packet from the client toward the servers)
//                 u16 user, u16 len, len bytes
//
// decode() never trusts a length: every field is bounds-checked, the CRC verified, and an
// error names the field and the value. Frames longer than the caller's limit are rejected
// before anything is read.
#include <cstddef>
#include <cstdint>
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
// nobody), in SlotGrant-derived headers and in RxIndication.user. Never a real user's id.
constexpr std::uint16_t kUserNobody = 0xFFFF;

enum class MsgType : std::uint8_t {
    slot_request = 1,
    slot_grant = 2,
    rx_indication = 3,
    cqi_report = 4,
    harq_feedback = 5,
    uplink_packet = 6,
};
const char* to_string(MsgType t);

struct SlotRequest {
    std::uint64_t slot = 0;
    std::int64_t air_time_ns = 0;
    bool operator==(const SlotRequest&) const;
};

struct SlotGrant {
    std::uint64_t slot = 0;
    bool empty = true;  // no TB: preamble and header only (CQI is still measured)
    std::uint16_t user = 0;
    std::uint8_t mcs = 0, harq_pid = 0, ndi = 0, rv = 0;
    std::vector<std::uint8_t> tb;
    bool operator==(const SlotGrant&) const;
};

struct RxIndication {
    std::uint64_t slot = 0;
    std::uint16_t user = 0;
    std::uint8_t mcs = 0, harq_pid = 0, ndi = 0, rv = 0;
    bool header_ok = false, addressed = false, crc_ok = false;
    float snr_db = 0;
    std::uint8_t cqi = 0;
    std::uint8_t combined = 0;
    std::vector<std::uint8_t> tb;
    bool operator==(const RxIndication&) const;
};

struct CqiReport {
    std::uint16_t user = 0;
    std::uint64_t slot = 0;
    float snr_db = 0;
    std::uint8_t cqi = 0;
    bool operator==(const CqiReport&) const;
};

struct HarqFeedback {
    std::uint16_t user = 0;
    std::uint64_t slot = 0;
    std::uint8_t harq_pid = 0;
    bool ack = false;
    bool operator==(const HarqFeedback&) const;
};

struct UplinkPacket {
    std::uint16_t user = 0;
    std::vector<std::uint8_t> packet;
    bool operator==(const UplinkPacket&) const;
};

using Message =
    std::variant<SlotRequest, SlotGrant, RxIndication, CqiReport, HarqFeedback, UplinkPacket>;

MsgType type_of(const Message& m);

struct Frame {
    std::uint32_t seq = 0;
    Message msg;
};

// Serialises one message; throws std::invalid_argument if a payload exceeds its u16 length.
std::vector<std::uint8_t> encode(const Message& msg, std::uint32_t seq);

// Parses one frame of at most max_len bytes.
Result<Frame> decode(const std::uint8_t* data, std::size_t len, std::size_t max_len = kMaxFrameLen);
inline Result<Frame> decode(const std::vector<std::uint8_t>& f,
                            std::size_t max_len = kMaxFrameLen) {
    return decode(f.data(), f.size(), max_len);
}

// Tracks one peer's sequence numbers: counts gaps (lost messages) and reorders/duplicates.
class SeqTracker final {
  public:
    struct Stats {
        std::uint64_t received = 0;
        std::uint64_t lost = 0;          // sum of gap sizes
        std::uint64_t out_of_order = 0;  // older than the newest seen (duplicates included)
        std::uint64_t restarts = 0;      // peer restarted (seq went back to 0)
    };
    // Returns the number of messages missing before this one (0 when in sequence).
    std::uint64_t on_receive(std::uint32_t seq);
    const Stats& stats() const { return stats_; }

  private:
    bool started_ = false;
    std::uint32_t next_ = 0;
    Stats stats_;
};

}  // namespace oppsched::wire
