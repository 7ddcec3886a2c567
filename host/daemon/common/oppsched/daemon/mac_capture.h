#pragma once
// The MAC capture (`capture.mac`, docs/testbed.md): a pcap file per daemon holding every MAC
// PDU the daemon sends or receives and every PHY-MAC message crossing its ZeroMQ sockets,
// each record a pseudo-header and the bytes. Wireshark reads it with
// tools/wireshark/oppsched.lua.
//
// Link type: LINKTYPE_USER0 (147, DLT_USER0; Wireshark's "USER 0").
//
// Pseudo-header, 24 bytes, big-endian (network order, as the PDU and the wire frames):
//
//   offset size field
//   0      1    version      1
//   1      1    header_len   24: the payload starts here (a later version may add fields)
//   2      1    kind         1 MAC PDU (payload: the TB, pdu.h), 2 PHY-MAC message (payload:
//                            the whole wire frame, wire.h)
//   3      1    direction    0 sent by this daemon, 1 received by it
//   4      1    port         0 the air (PDUs), 1 phy_requests, 2 phy_grants, 3 uplink,
//                            4 rx (the client's PHY socket)
//   5      1    flags        bit 0 SLOT: slot is valid; bit 1 USER: user is valid;
//                            bit 2 HARQ: harq_pid, ndi, rv, mcs and tb_len are valid;
//                            bit 3 CRC: the TB's CRC result is known; bit 4 CRC_OK: it
//                            checked; bit 5 BAD_MESSAGE: the message failed wire::decode
//                            (its fields are not filled in); bit 6 TAG: the daemon's
//                            TBs carry the integrity tag (pdu.integrity_tag): the TB of a
//                            PDU record, slot_grant, rx_indication or uplink_tb ends in
//                            its 8 bytes, not part of the MAC PDU (set on every record of
//                            such a daemon); bit 7 reserved, 0
//   6      2    user
//   8      8    slot
//   16     1    harq_pid
//   17     1    ndi
//   18     1    rv
//   19     1    mcs
//   20     2    tb_len       bytes of the TB
//   22     2    reserved     0
//
// A record of a message carries the fields the message itself has (a slot_request only its
// slot), so one display filter (oppsched.user == 1) finds a user's PDUs and messages alike.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "oppsched/daemon/pcap_writer.h"
#include "oppsched/wire.h"

namespace oppsched::daemon {

namespace mac_pcap {
constexpr std::uint32_t kLinktype = 147;  // LINKTYPE_USER0
constexpr std::uint8_t kVersion = 1;
constexpr std::size_t kHeaderLen = 24;

enum class kind : std::uint8_t { pdu = 1, message = 2 };
enum class direction : std::uint8_t { sent = 0, received = 1 };
enum class port : std::uint8_t {
    air = 0,
    phy_requests = 1,
    phy_grants = 2,
    uplink = 3,
    rx = 4,
    grants = 5,  // uplink grants, AP -> station (medium.station_queue client)
};

constexpr std::uint8_t kFlagSlot = 0x01;
constexpr std::uint8_t kFlagUser = 0x02;
constexpr std::uint8_t kFlagHarq = 0x04;
constexpr std::uint8_t kFlagCrc = 0x08;
constexpr std::uint8_t kFlagCrcOk = 0x10;
constexpr std::uint8_t kFlagBadMessage = 0x20;
constexpr std::uint8_t kFlagTag = 0x40;

struct record_header {
    kind k = kind::pdu;
    direction dir = direction::sent;
    port p = port::air;
    std::uint8_t flags = 0;
    std::uint16_t user = 0;
    std::uint64_t slot = 0;
    std::uint8_t harq_pid = 0, ndi = 0, rv = 0, mcs = 0;
    std::uint16_t tb_len = 0;
};

std::array<std::uint8_t, kHeaderLen> encode(const record_header& h);
// The pseudo-header of a record of `frame`: the fields its message carries, or BAD_MESSAGE.
record_header message_header(direction dir, port p, const std::uint8_t* frame, std::size_t len);
}  // namespace mac_pcap

class mac_capture final {
  public:
    // Throws as pcap_writer does. integrity_tag: the daemon's TBs carry the integrity tag
    // (every record gets the TAG flag).
    mac_capture(const std::string& path, std::uint64_t max_bytes, bool integrity_tag = false);

    // The TB of a grant (apd, per granted TB; nothing for an empty slot).
    void pdu_sent(const wire::slot_grant& g);
    // The TB of an rx_indication (client; nothing if the PHY handed no TB bytes).
    void pdu_received(const wire::rx_indication& ind);
    // A wire frame as it crossed a socket (malformed ones too).
    void message(mac_pcap::direction dir, mac_pcap::port p, const std::uint8_t* frame,
                 std::size_t len);
    void message(mac_pcap::direction dir, mac_pcap::port p, const std::vector<std::uint8_t>& f) {
        message(dir, p, f.data(), f.size());
    }

    void poll() { w_.poll(); }
    bool flush() { return w_.flush(); }
    bool close() { return w_.close(); }  // pcap_writer::close
    const pcap_writer& writer() const { return w_; }

  private:
    void write(const mac_pcap::record_header& h, const std::uint8_t* payload, std::size_t len);
    pcap_writer w_;
    std::uint8_t tag_flag_ = 0;
};

}  // namespace oppsched::daemon
