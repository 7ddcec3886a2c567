// Persistent TUN device: see oppsched/daemon/tun.h.
#include "oppsched/daemon/tun.h"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>  // (not linux/if.h: the two conflict)
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace oppsched::daemon {

std::unique_ptr<tun_device> tun_device::open(const std::string& name) {
    auto fail = [&](const std::string& why) -> std::runtime_error {
        return std::runtime_error("tun.name: '" + name + "': " + why);
    };
    if (name.empty() || name.size() >= IFNAMSIZ) throw fail("invalid interface name");
    // Never create a device: TUNSETIFF on a missing name would make a new (non-persistent)
    // one. The runner makes it with `ip tuntap add mode tun name X`.
    if (::if_nametoindex(name.c_str()) == 0)
        throw fail("no such interface (the runner must create the persistent TUN first)");
    {
        std::ifstream flags("/sys/class/net/" + name + "/tun_flags");
        if (!flags) throw fail("is not a TUN/TAP device");
        unsigned long f = 0;
        flags >> std::hex >> f;
        if ((f & IFF_TUN) == 0) throw fail("is a TAP device, not a TUN");
    }
    const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw fail(std::string("cannot open /dev/net/tun: ") + std::strerror(errno));
    struct ifreq ifr {};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
    if (::ioctl(fd, TUNSETIFF, &ifr) < 0) {
        const int e = errno;
        ::close(fd);
        throw fail(std::string("TUNSETIFF: ") + std::strerror(e) +
                   (e == EBUSY ? " (already attached by another process?)" : ""));
    }
    return std::unique_ptr<tun_device>(new tun_device(fd, name));
}

tun_device::~tun_device() {
    if (fd_ >= 0) ::close(fd_);
}

long tun_device::read(std::uint8_t* buf, std::size_t cap) {
    const ssize_t n = ::read(fd_, buf, cap);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
        ++stats_.rx_errors;
        return -1;
    }
    if (n == 0) return 0;
    ++stats_.rx_packets;
    stats_.rx_bytes += static_cast<std::uint64_t>(n);
    return static_cast<long>(n);
}

bool tun_device::write(const std::uint8_t* data, std::size_t len) {
    const ssize_t n = ::write(fd_, data, len);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            ++stats_.tx_would_block;
        else
            ++stats_.tx_errors;
        return false;
    }
    if (static_cast<std::size_t>(n) != len) {
        ++stats_.tx_errors;
        return false;
    }
    ++stats_.tx_packets;
    stats_.tx_bytes += len;
    return true;
}

}  // namespace oppsched::daemon
