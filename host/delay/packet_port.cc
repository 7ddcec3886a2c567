// AF_PACKET port of oppsched-delay. See packet_port.h.
#include "packet_port.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23  // Linux >= 4.20; absent from old headers
#endif

namespace oppsched::wired {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& ifname, const char* step) {
    throw std::runtime_error(what + ": " + ifname + ": " + step + ": " + std::strerror(errno));
}

void set_int(int fd, int level, int opt, int value, const std::string& what,
             const std::string& ifname, const char* step) {
    if (setsockopt(fd, level, opt, &value, sizeof value) != 0) fail(what, ifname, step);
}

}  // namespace

std::unique_ptr<packet_port> packet_port::open(const std::string& ifname, const std::string& what,
                                               int buffer_bytes) {
    const unsigned ifindex = if_nametoindex(ifname.c_str());
    if (ifindex == 0)
        throw std::runtime_error(what + ": " + ifname + ": no such interface in this namespace");
    // Protocol 0 at creation: the socket receives nothing until it is bound to the one
    // interface, so no frame of another interface slips in between.
    const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (fd < 0) fail(what, ifname, "socket(AF_PACKET) (needs CAP_NET_RAW)");
    std::unique_ptr<packet_port> port(new packet_port(fd, ifname));

    set_int(fd, SOL_PACKET, PACKET_VNET_HDR, 1, what, ifname, "PACKET_VNET_HDR");
    // Best effort: older kernels lack it, receive() also skips PACKET_OUTGOING.
    int one = 1;
    (void)setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    set_int(fd, SOL_SOCKET, SO_TIMESTAMPNS, 1, what, ifname, "SO_TIMESTAMPNS");
    // Root may exceed rmem_max/wmem_max; fall back to the capped call otherwise.
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer_bytes, sizeof buffer_bytes) != 0)
        set_int(fd, SOL_SOCKET, SO_RCVBUF, buffer_bytes, what, ifname, "SO_RCVBUF");
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer_bytes, sizeof buffer_bytes) != 0)
        set_int(fd, SOL_SOCKET, SO_SNDBUF, buffer_bytes, what, ifname, "SO_SNDBUF");

    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = static_cast<int>(ifindex);
    if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) fail(what, ifname, "bind");

    // A veth delivers frames for the far end's MAC as PACKET_OTHERHOST, which packet
    // sockets see anyway; promiscuous mode makes that independent of the driver.
    packet_mreq mr{};
    mr.mr_ifindex = static_cast<int>(ifindex);
    mr.mr_type = PACKET_MR_PROMISC;
    if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) != 0)
        fail(what, ifname, "PACKET_MR_PROMISC");
    return port;
}

packet_port::~packet_port() { ::close(fd_); }

std::optional<received_frame> packet_port::receive(std::vector<std::uint8_t>& buf) {
    for (;;) {
        iovec iov{buf.data(), buf.size()};
        sockaddr_ll from{};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec)) + 64];
        msghdr msg{};
        msg.msg_name = &from;
        msg.msg_namelen = sizeof from;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        // MSG_TRUNC: a packet socket then returns the real length of a frame that did not fit.
        const ssize_t n = recvmsg(fd_, &msg, MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return std::nullopt;
            if (errno == EINTR) continue;
            // The socket reports an interface going down once (ENETDOWN); it keeps working
            // when the interface comes back up, so this is not fatal.
            if (errno == ENETDOWN) {
                ++netdown_events_;
                return std::nullopt;
            }
            throw std::runtime_error(name_ + ": recvmsg: " + std::strerror(errno));
        }
        if (from.sll_pkttype == PACKET_OUTGOING) continue;  // our own send, looped back
        received_frame r;
        r.length = static_cast<std::size_t>(n);
        r.truncated =
            r.length > buf.size() || (msg.msg_flags & MSG_TRUNC) != 0 || r.length <= kVnetHdrLen;
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                timespec ts;
                std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
                r.kernel_realtime = ts.tv_sec * kNsPerSec + ts.tv_nsec;
            }
        }
        return r;
    }
}

int packet_port::send(const std::uint8_t* data, std::size_t length) {
    for (;;) {
        // Blocking socket: if the send buffer is full we wait for the veth to drain it
        // (microseconds) rather than drop.
        if (::send(fd_, data, length, 0) >= 0) return 0;
        if (errno == EINTR) continue;
        return errno;
    }
}

std::size_t packet_port::wire_bytes(const std::uint8_t* data, std::size_t length) {
    if (length <= kVnetHdrLen) return 0;
    vnet_hdr h;
    std::memcpy(&h, data, sizeof h);
    const std::size_t frame = length - kVnetHdrLen;
    const std::uint8_t type = h.gso_type & ~kGsoEcn;
    if (type == kGsoNone || h.gso_size == 0) return frame;
    // Headers repeated in every segment: up to the end of the transport header when the
    // checksum offsets tell where it starts (TCP: data offset; UDP: 8 bytes), else the
    // kernel's hdr_len.
    std::size_t hdr = h.hdr_len;
    if ((h.flags & kVnetFlagNeedsCsum) != 0) {
        const std::size_t l4 = h.csum_start;
        if ((type == kGsoTcpV4 || type == kGsoTcpV6) && l4 + 13 <= frame)
            hdr = l4 + 4u * (data[kVnetHdrLen + l4 + 12] >> 4);
        else if (type == kGsoUdp || type == kGsoUdpL4)
            hdr = l4 + 8;
    }
    if (hdr >= frame) return frame;
    const std::size_t payload = frame - hdr;
    const std::size_t segs = (payload + h.gso_size - 1) / h.gso_size;
    return frame + (segs - 1) * hdr;
}

}  // namespace oppsched::wired
