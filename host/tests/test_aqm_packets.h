#pragma once
// Hand-built IPv4/IPv6 TCP and UDP packets for the queue and AQM tests (and the benchmark).
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "oppsched/aqm.h"
#include "oppsched/common.h"
#include "oppsched/tcpip.h"

namespace oppsched::aqm::testing {

// ECN-capable transport, as the AQM tests' data packets carry it.
constexpr std::uint8_t kEct = tcpip::kEct0;

struct tcp_spec {
    std::uint8_t ip_version = 4;
    std::uint8_t ecn = tcpip::kNotEct;
    std::uint8_t src_host = 1;  // last byte of 10.0.0.x / fd00::x
    std::uint8_t dst_host = 2;
    std::uint16_t sport = 5000;
    std::uint16_t dport = 80;
    std::uint32_t seq = 1;
    std::uint32_t ack = 0;
    std::uint8_t flags = tcpip::kAck;
    std::uint16_t window = 65535;
    std::size_t payload = 0;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> sack;
};

inline void put16(std::vector<std::uint8_t>& b, std::size_t off, std::uint16_t v) {
    b[off] = static_cast<std::uint8_t>(v >> 8);
    b[off + 1] = static_cast<std::uint8_t>(v);
}
inline void put32(std::vector<std::uint8_t>& b, std::size_t off, std::uint32_t v) {
    put16(b, off, static_cast<std::uint16_t>(v >> 16));
    put16(b, off + 2, static_cast<std::uint16_t>(v));
}

inline std::uint16_t ipv4_checksum(const std::vector<std::uint8_t>& b) {
    std::uint32_t s = 0;
    for (std::size_t i = 0; i < 20; i += 2)
        if (i != 10) s += (std::uint32_t{b[i]} << 8) | b[i + 1];
    while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
    return static_cast<std::uint16_t>(~s);
}

inline std::vector<std::uint8_t> tcp_packet(const tcp_spec& t) {
    std::size_t opt = 0;
    if (!t.sack.empty()) opt = 2 + 2 + 8 * t.sack.size();  // NOP NOP SACK
    const std::size_t tcp_len = 20 + opt;
    const std::size_t ip_len = t.ip_version == 4 ? 20 : 40;
    std::vector<std::uint8_t> b(ip_len + tcp_len + t.payload, 0);
    if (t.ip_version == 4) {
        b[0] = 0x45;
        b[1] = t.ecn & 3u;
        put16(b, 2, static_cast<std::uint16_t>(b.size()));
        b[8] = 64;
        b[9] = tcpip::kProtoTcp;
        b[12] = 10, b[15] = t.src_host;
        b[16] = 10, b[19] = t.dst_host;
        put16(b, 10, ipv4_checksum(b));
    } else {
        b[0] = 0x60;
        b[1] = static_cast<std::uint8_t>((t.ecn & 3u) << 4);
        put16(b, 4, static_cast<std::uint16_t>(tcp_len + t.payload));
        b[6] = tcpip::kProtoTcp;
        b[7] = 64;
        b[8] = 0xfd, b[23] = t.src_host;
        b[24] = 0xfd, b[39] = t.dst_host;
    }
    const std::size_t o = ip_len;
    put16(b, o, t.sport);
    put16(b, o + 2, t.dport);
    put32(b, o + 4, t.seq);
    put32(b, o + 8, t.ack);
    b[o + 12] = static_cast<std::uint8_t>((tcp_len / 4) << 4);
    b[o + 13] = t.flags;
    put16(b, o + 14, t.window);
    if (!t.sack.empty()) {
        b[o + 20] = 1;
        b[o + 21] = 1;
        b[o + 22] = 5;
        b[o + 23] = static_cast<std::uint8_t>(2 + 8 * t.sack.size());
        for (std::size_t i = 0; i < t.sack.size(); ++i) {
            put32(b, o + 24 + 8 * i, t.sack[i].first);
            put32(b, o + 28 + 8 * i, t.sack[i].second);
        }
    }
    return b;
}

// An IPv4 UDP packet of `total` bytes (>= 28).
inline std::vector<std::uint8_t> udp_packet(std::size_t total, std::uint8_t ecn = 0,
                                            std::uint16_t sport = 7000) {
    std::vector<std::uint8_t> b(total, 0);
    b[0] = 0x45;
    b[1] = ecn & 3u;
    put16(b, 2, static_cast<std::uint16_t>(total));
    b[8] = 64;
    b[9] = tcpip::kProtoUdp;
    b[12] = 10, b[15] = 1;
    b[16] = 10, b[19] = 3;
    put16(b, 10, ipv4_checksum(b));
    put16(b, 20, sport);
    put16(b, 22, 9000);
    put16(b, 24, static_cast<std::uint16_t>(total - 20));
    return b;
}

// A TCP data segment of `total` IP bytes (IPv4, no options).
inline std::vector<std::uint8_t> data_packet(std::size_t total, std::uint8_t ecn = 0,
                                             std::uint16_t sport = 5000, std::uint32_t seq = 1) {
    tcp_spec t;
    t.ecn = ecn;
    t.sport = sport;
    t.seq = seq;
    t.flags = tcpip::kAck | tcpip::kPsh;
    t.payload = total - 40;
    return tcp_packet(t);
}

inline ip_packet make_packet(std::vector<std::uint8_t> data, std::uint64_t id,
                             std::uint32_t user = 0, bool high_priority = false) {
    ip_packet p;
    p.data = std::move(data);
    p.id = id;
    p.user = user;
    p.high_priority = high_priority;
    return p;
}

inline std::uint8_t ecn_of(const ip_packet& p) {
    auto r = tcpip::parse(p.data);
    return r ? r->ecn : 0;
}

// An AQM with a drop recorder and packet ids.
struct harness {
    explicit harness(const aqm_params& c) : aqm(make_aqm(c)) {
        aqm->set_drop_sink([this](dropped_packet&& d) { drops.push_back(std::move(d)); });
    }
    harness(const harness&) = delete;
    harness& operator=(const harness&) = delete;

    bool offer(std::vector<std::uint8_t> data, time_ns t, bool high_priority = false) {
        return aqm->enqueue(make_packet(std::move(data), next_id++, 0, high_priority), t);
    }
    std::size_t drops_with(drop_reason r) const {
        std::size_t n = 0;
        for (const auto& d : drops) n += d.reason == r;
        return n;
    }

    std::unique_ptr<queue_discipline> aqm;
    std::vector<dropped_packet> drops;
    std::uint64_t next_id = 0;
};

}  // namespace oppsched::aqm::testing
