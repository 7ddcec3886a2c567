#pragma once
// The wire format of the WRC transport (wrc.h; oppsched-wrc, docs/daemons.md): UDP data
// packets from the paced sender and rate feedback from the receiver (Nandagopal et al.,
// §III-A: "The sender advertises the inter-packet separation in each packet, and assigns
// monotonically increasing congestion control sequence numbers"; the receiver
// "advertises the updated value back to the sender").
//
// Version 1, big-endian. Both messages start with the same 4 bytes and are 32 bytes long;
// a data packet is padded with zeros to the configured packet size (512 bytes in the
// paper's experiments, §IV).
//
//   common   offset size field
//                 0    2 magic        0x5752 ("WR")
//                 2    1 version      1
//                 3    1 type         1 data, 2 feedback
//                 4    4 flow_id      the flow (one rate_controller per flow at the receiver)
//   data          8    4 seq          congestion-control sequence number, +1 per packet
//                12    4 rate_seq     sequence number of the fed-back rate in use (0 before
//                                     any feedback: the sender's initial rate)
//                16    8 send_time_ns sender's CLOCK_MONOTONIC at sending (for one-way
//                                     delay on one host; the algorithm does not use it)
//                24    4 snd_sep_us   the sender's inter-packet separation, microseconds, > 0
//                28    2 weight       the flow's rate weight w, >= 1
//                30    2 reserved     sent as 0, ignored
//                32    - padding      zeros, not checked
//   feedback      8    4 rate_seq     +1 at every change of the receiver's rate
//                12    4 rate_mpps    the rate, milli-packets per second, > 0
//                16    4 echo_seq     the highest data seq received
//                20    4 epoch        the receiver's epoch index
//                24    8 reserved     sent as 0, ignored
//
// Decoding never trusts the input: a short buffer, a wrong magic, version or type, or a
// zero separation, weight or rate is an error naming the field and the value
// ("wrc.magic: 0x1234 is not 0x5752"); the caller counts it and drops the packet.
#include <cstddef>
#include <cstdint>
#include <variant>

#include "oppsched/common.h"

namespace oppsched::wrc {

constexpr std::uint16_t kMagic = 0x5752;
constexpr std::uint8_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 32;
constexpr std::size_t kMaxPacketBytes = 65507;  // a UDP payload over IPv4

enum class packet_type : std::uint8_t { data = 1, feedback = 2 };

struct data_header {
    std::uint32_t flow_id = 0;
    std::uint32_t seq = 0;
    std::uint32_t rate_seq = 0;
    std::uint64_t send_time_ns = 0;
    std::uint32_t snd_sep_us = 1;
    std::uint16_t weight = 1;
};

struct feedback_header {
    std::uint32_t flow_id = 0;
    std::uint32_t rate_seq = 0;
    std::uint32_t rate_mpps = 1;
    std::uint32_t echo_seq = 0;
    std::uint32_t epoch = 0;
};

// Writes h into out[0, kHeaderBytes) and zeros into out[kHeaderBytes, len). len must be
// >= kHeaderBytes (std::invalid_argument otherwise).
void encode(const data_header& h, std::uint8_t* out, std::size_t len);
void encode(const feedback_header& h, std::uint8_t* out, std::size_t len);

using message = std::variant<data_header, feedback_header>;
expected<message> decode(const std::uint8_t* data, std::size_t len);

// Separation in microseconds for a rate in packets/s (rounded, at least 1, at most 2^32-1)
// and a rate in milli-packets/s (rounded, at least 1).
std::uint32_t separation_us(double rate_pps);
std::uint32_t rate_mpps(double rate_pps);

}  // namespace oppsched::wrc
