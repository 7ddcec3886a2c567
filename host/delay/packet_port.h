#pragma once
// One side of oppsched-delay: an AF_PACKET socket bound to one interface (normally a veth
// end inside the run's "wire" namespace), carrying whole Ethernet frames.
//
// The socket is opened with PACKET_VNET_HDR: every frame comes with a virtio_net_hdr that
// describes checksum-offload (CHECKSUM_PARTIAL) and GSO state, and the same header is given
// back on send. So the stage forwards frames unchanged whatever the offload settings of the
// veths are: without it a sender's partial checksum would reach the receiver unfinished
// (and be dropped there), and a TSO super-frame could not be sent at all.
// Frames this socket itself sends are not looped back to it (PACKET_IGNORE_OUTGOING, and
// PACKET_OUTGOING frames are skipped as a fallback).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::wired {

// struct virtio_net_hdr of <linux/virtio_net.h> (a stable ABI: 10 bytes, fields in host
// byte order for packet sockets on little-endian machines). That header does not compile
// as C++ (a member is named `class`), so the layout and constants are repeated here.
struct vnet_hdr {
    std::uint8_t flags;
    std::uint8_t gso_type;
    std::uint16_t hdr_len;
    std::uint16_t gso_size;
    std::uint16_t csum_start;
    std::uint16_t csum_offset;
};
static_assert(sizeof(vnet_hdr) == 10, "virtio_net_hdr is 10 bytes");
constexpr std::uint8_t kVnetFlagNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
constexpr std::uint8_t kGsoNone = 0;            // VIRTIO_NET_HDR_GSO_NONE
constexpr std::uint8_t kGsoTcpV4 = 1;
constexpr std::uint8_t kGsoUdp = 3;
constexpr std::uint8_t kGsoTcpV6 = 4;
constexpr std::uint8_t kGsoUdpL4 = 5;
constexpr std::uint8_t kGsoEcn = 0x80;

struct received_frame {
    std::size_t length = 0;       // bytes in the buffer: virtio_net_hdr + Ethernet frame
    time_ns kernel_realtime = 0;  // SO_TIMESTAMPNS (CLOCK_REALTIME), 0 if none came
    bool truncated = false;       // larger than the buffer: must be dropped
};

class packet_port final {
  public:
    static constexpr std::size_t kVnetHdrLen = sizeof(vnet_hdr);

    // Opens and binds; throws std::runtime_error("--if-a: veth9: no such interface") with
    // `what` naming the option the interface came from.
    static std::unique_ptr<packet_port> open(const std::string& ifname, const std::string& what,
                                             int buffer_bytes);
    ~packet_port();
    packet_port(const packet_port&) = delete;
    packet_port& operator=(const packet_port&) = delete;

    int fd() const { return fd_; }
    const std::string& name() const { return name_; }

    // Non-blocking receive into buf (resized by the caller to the largest frame expected).
    // nullopt when nothing is waiting. Throws std::runtime_error on a socket error.
    std::optional<received_frame> receive(std::vector<std::uint8_t>& buf);

    // Sends virtio_net_hdr + frame. Returns 0 or the errno of the failure.
    int send(const std::uint8_t* data, std::size_t length);

    // Bytes the emulated link is busy for this frame: the Ethernet frame, or for a GSO
    // super-frame the sum of the segments it stands for (headers repeated per segment).
    // Times the interface was reported down (ENETDOWN) while we were reading.
    std::uint64_t netdown_events() const { return netdown_events_; }

    static std::size_t wire_bytes(const std::uint8_t* data, std::size_t length);

  private:
    packet_port(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
    int fd_;
    std::string name_;
    std::uint64_t netdown_events_ = 0;
};

}  // namespace oppsched::wired
