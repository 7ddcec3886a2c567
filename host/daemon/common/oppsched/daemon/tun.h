#pragma once
// A persistent TUN device opened by name (IFF_TUN | IFF_NO_PI, O_NONBLOCK). The runner creates
// and configures the device (`ip tuntap add mode tun name X`, addresses, routes, up); a
// daemon only attaches to it, so it never creates one: open() fails if no interface of that
// name exists. Each read()/write() is one IP packet (IPv4 or IPv6), no packet-info header.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace oppsched::daemon {

class tun_device final {
  public:
    struct tun_stats {
        std::uint64_t rx_packets = 0, rx_bytes = 0, rx_errors = 0;
        std::uint64_t tx_packets = 0, tx_bytes = 0, tx_errors = 0;
        std::uint64_t tx_would_block = 0;  // kernel queue full: packet dropped
    };
    // Throws std::runtime_error("tun.name: '<name>' ...: <reason>") if the device does not
    // exist, is not a TUN, or cannot be attached (EBUSY: another process holds it, EPERM).
    static std::unique_ptr<tun_device> open(const std::string& name);
    ~tun_device();
    tun_device(const tun_device&) = delete;
    tun_device& operator=(const tun_device&) = delete;

    int fd() const { return fd_; }  // for poll (ZMQ_POLLIN on a raw fd in zmq::poll)
    const std::string& name() const { return name_; }

    // One packet into buf (cap should be >= the MTU; 65535 is always enough). Returns its
    // length, 0 if nothing is pending (EAGAIN), -1 on error (counted; errno preserved).
    long read(std::uint8_t* buf, std::size_t cap);
    // Writes one packet; false on error or EAGAIN (counted in stats()).
    bool write(const std::uint8_t* data, std::size_t len);
    const tun_stats& stats() const { return stats_; }

  private:
    tun_device(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
    int fd_;
    std::string name_;
    tun_stats stats_;
};

template <class F>
void for_each_field(const tun_device::tun_stats& s, F&& f) {
    f("rx_packets", s.rx_packets);
    f("rx_bytes", s.rx_bytes);
    f("rx_errors", s.rx_errors);
    f("tx_packets", s.tx_packets);
    f("tx_bytes", s.tx_bytes);
    f("tx_errors", s.tx_errors);
    f("tx_would_block", s.tx_would_block);
}

}  // namespace oppsched::daemon
