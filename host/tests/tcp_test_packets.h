#pragma once
// An independent TCP/IP packet builder and checksum for the MAC tests and benchmarks (not the
// code under test): segments of one connection between a server and the client, IPv4 or
// IPv6, byte edits for malformed-input tests, and MAC PDUs carrying packets.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "oppsched/byte_order.h"
#include "oppsched/pdu.h"
#include "oppsched/tcpip.h"

namespace oppsched::test {

using byte_buffer = std::vector<std::uint8_t>;

inline void put16(byte_buffer& p, std::size_t off, std::uint16_t v) { store_be16(&p[off], v); }
inline void put32(byte_buffer& p, std::size_t off, std::uint32_t v) { store_be32(&p[off], v); }
inline std::uint16_t get16(const byte_buffer& p, std::size_t off) { return load_be16(&p[off]); }
inline std::uint32_t ref_sum(const std::uint8_t* p, std::size_t n, std::uint32_t s = 0) {
    for (std::size_t i = 0; i < n; ++i) s += (i % 2 == 0) ? (p[i] << 8) : p[i];
    return s;
}
inline std::uint16_t ref_fold(std::uint32_t s) {
    while (s > 0xFFFF) s = (s & 0xFFFF) + (s >> 16);
    return static_cast<std::uint16_t>(s);
}
inline std::size_t tcp_offset(const byte_buffer& p) { return (p[0] >> 4) == 6 ? 40 : 20; }
// Pseudo-header + segment sum, checksum field included as it is; the TCP header starts at
// tcp_off (after IPv6 extension headers, say).
inline std::uint32_t ref_tcp_sum(const byte_buffer& pkt, std::size_t tcp_off) {
    const bool v6 = (pkt[0] >> 4) == 6;
    const std::size_t total = v6 ? 40 + get16(pkt, 4) : get16(pkt, 2);
    const std::size_t seg = total - tcp_off;
    std::uint32_t s = v6 ? ref_sum(&pkt[8], 32) : ref_sum(&pkt[12], 8);
    s += 6 + static_cast<std::uint32_t>(seg);
    return ref_sum(&pkt[tcp_off], seg, s);
}
inline std::uint32_t ref_tcp_sum(const byte_buffer& pkt) {
    return ref_tcp_sum(pkt, tcp_offset(pkt));
}
// The correct checksum value, computed as RFC 793 says (field taken as zero).
inline std::uint16_t ref_tcp_checksum(byte_buffer pkt, std::size_t tcp_off) {
    pkt[tcp_off + 16] = pkt[tcp_off + 17] = 0;
    return static_cast<std::uint16_t>(~ref_fold(ref_tcp_sum(pkt, tcp_off)));
}
inline bool checksum_valid(const byte_buffer& p) { return ref_fold(ref_tcp_sum(p)) == 0xFFFF; }

struct tcp_endpoint {
    std::array<std::uint8_t, 16> addr{};
    std::uint16_t port = 0;
};

// A TCP segment from `from` to `to`, with a correct checksum (and IPv4 header checksum).
inline byte_buffer tcp_segment(int ipv, const tcp_endpoint& from, const tcp_endpoint& to,
                               std::uint8_t flags, std::uint32_t seq, std::uint32_t ack,
                               std::uint16_t window, const byte_buffer& options,
                               std::size_t payload) {
    const std::size_t ip_len = ipv == 4 ? 20 : 40;
    const std::size_t tcp_len = 20 + options.size();
    byte_buffer p(ip_len + tcp_len + payload, 0);
    if (ipv == 4) {
        p[0] = 0x45;
        put16(p, 2, static_cast<std::uint16_t>(p.size()));
        p[8] = 64;
        p[9] = tcpip::kProtoTcp;
        std::copy(from.addr.begin(), from.addr.begin() + 4, p.begin() + 12);
        std::copy(to.addr.begin(), to.addr.begin() + 4, p.begin() + 16);
        put16(p, 10, static_cast<std::uint16_t>(~ref_fold(ref_sum(p.data(), 20))));
    } else {
        p[0] = 0x60;
        put16(p, 4, static_cast<std::uint16_t>(p.size() - 40));
        p[6] = tcpip::kProtoTcp;
        p[7] = 64;
        std::copy(from.addr.begin(), from.addr.end(), p.begin() + 8);
        std::copy(to.addr.begin(), to.addr.end(), p.begin() + 24);
    }
    const std::size_t o = ip_len;
    put16(p, o, from.port);
    put16(p, o + 2, to.port);
    put32(p, o + 4, seq);
    put32(p, o + 8, ack);
    p[o + 12] = static_cast<std::uint8_t>((tcp_len / 4) << 4);
    p[o + 13] = flags;
    put16(p, o + 14, window);
    std::copy(options.begin(), options.end(), p.begin() + static_cast<long>(o + 20));
    for (std::size_t i = 0; i < payload; ++i)
        p[o + tcp_len + i] = static_cast<std::uint8_t>(i * 7 + 1);
    put16(p, o + 16, static_cast<std::uint16_t>(~ref_fold(ref_tcp_sum(p))));
    return p;
}

inline byte_buffer udp_packet(std::size_t payload) {
    byte_buffer p(28 + payload, 0);
    p[0] = 0x45;
    put16(p, 2, static_cast<std::uint16_t>(p.size()));
    p[8] = 64;
    p[9] = tcpip::kProtoUdp;
    p[12] = 10, p[15] = 2;
    p[16] = 10, p[19] = 1;
    put16(p, 10, static_cast<std::uint16_t>(~ref_fold(ref_sum(p.data(), 20))));
    put16(p, 20, 4000);
    put16(p, 22, 53);
    put16(p, 24, static_cast<std::uint16_t>(8 + payload));
    return p;
}

// One TCP connection between a server (downlink sender) and the client.
struct conn {
    int ipv = 4;
    tcp_endpoint server, client;
    std::optional<std::uint8_t> ws_client = 7, ws_server = 7;
    std::uint16_t mss_client = 1460, mss_server = 1460;
    std::uint32_t client_isn = 1000, server_isn = 700000;

    explicit conn(int v, std::uint16_t client_port = 40000) : ipv(v) {
        if (v == 4) {
            server.addr[0] = 10, server.addr[3] = 1;
            client.addr[0] = 10, client.addr[1] = 1, client.addr[3] = 2;
        } else {
            server.addr[0] = 0x20, server.addr[1] = 0x01, server.addr[15] = 1;
            client.addr[0] = 0x20, client.addr[1] = 0x01, client.addr[2] = 1, client.addr[15] = 2;
        }
        server.port = 5201;
        client.port = client_port;
    }
    static byte_buffer syn_options(std::uint16_t mss, std::optional<std::uint8_t> ws) {
        byte_buffer o = {2, 4, static_cast<std::uint8_t>(mss >> 8), static_cast<std::uint8_t>(mss)};
        if (ws) o.insert(o.end(), {1, 3, 3, *ws});
        return o;
    }
    // Uplink (client -> server).
    byte_buffer client_syn() const {
        return tcp_segment(ipv, client, server, tcpip::kSyn, client_isn, 0, 64240,
                           syn_options(mss_client, ws_client), 0);
    }
    byte_buffer client_ack(std::uint32_t acked_bytes, std::uint16_t window_field,
                           std::size_t payload = 0) const {
        return tcp_segment(ipv, client, server, tcpip::kAck, client_isn + 1,
                           server_isn + 1 + acked_bytes, window_field, {}, payload);
    }
    byte_buffer client_synack() const {  // for a server-opened connection
        return tcp_segment(ipv, client, server, tcpip::kSyn | tcpip::kAck, client_isn,
                           server_isn + 1, 65160, syn_options(mss_client, ws_client), 0);
    }
    // Downlink (server -> client).
    byte_buffer server_synack() const {
        return tcp_segment(ipv, server, client, tcpip::kSyn | tcpip::kAck, server_isn,
                           client_isn + 1, 65160, syn_options(mss_server, ws_server), 0);
    }
    byte_buffer server_syn() const {
        return tcp_segment(ipv, server, client, tcpip::kSyn, server_isn, 0, 64240,
                           syn_options(mss_server, ws_server), 0);
    }
    byte_buffer server_data(std::uint32_t offset, std::size_t len) const {
        return tcp_segment(ipv, server, client, tcpip::kAck | tcpip::kPsh, server_isn + 1 + offset,
                           client_isn + 1, 502, {}, len);
    }
    byte_buffer server_rst() const {
        return tcp_segment(ipv, server, client, tcpip::kRst, server_isn + 1, 0, 0, {}, 0);
    }
    tcpip::flow_key downlink_key() const {
        auto r = tcpip::parse(server_data(0, 1));
        return r.value().flow;
    }
};

// The advertised window of an uplink segment in bytes, with the given shift.
inline std::uint64_t window_of(const byte_buffer& p, std::uint8_t shift) {
    return std::uint64_t{get16(p, tcp_offset(p) + 14)} << shift;
}
inline std::uint32_t ack_of(const byte_buffer& p) {
    const std::size_t o = tcp_offset(p) + 8;
    return (std::uint32_t{get16(p, o)} << 16) | get16(p, o + 2);
}

// A MAC PDU of `user` carrying each packet whole in one segment, numbered from packet_seq
// (advanced past them), in the smallest TB that holds it.
inline byte_buffer pdu_bytes(std::uint16_t user, std::uint32_t seq, std::uint16_t& packet_seq,
                             const std::vector<byte_buffer>& pkts, std::optional<float> price) {
    pdu::mac_pdu pd;
    pd.header.user = user;
    pd.header.seq = seq;
    pd.header.price_s = price;
    for (const byte_buffer& b : pkts) {
        pdu::pdu_segment s;
        s.packet_seq = packet_seq++;
        s.packet_len = static_cast<std::uint16_t>(b.size());
        s.data = b;
        pd.segments.push_back(std::move(s));
    }
    return pdu::serialize(pd, pdu::pdu_min_bytes(pd)).value();
}

}  // namespace oppsched::test
