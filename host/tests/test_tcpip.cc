// Tests of oppsched/tcpip.h: parsing (valid, malformed, fuzzed), ECN marking, the RFC 1624
// incremental checksum against a full recomputation, and window-scale tracking.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "oppsched/tcpip.h"
#include "tcp_test_packets.h"

using namespace oppsched;
using namespace oppsched::tcpip;
using namespace oppsched::test;

namespace {

struct ext_case {
    std::uint8_t type;
    std::size_t len;  // bytes (multiple of 8; AH: multiple of 4 >= 12)
};

struct packet_spec {
    int ipv = 4;
    std::uint8_t ecn = kNotEct;
    std::uint8_t flags = kAck;
    std::uint32_t seq = 1000, ack = 5000;
    std::uint16_t window = 1000;
    std::uint16_t sport = 40000, dport = 5201;
    std::uint8_t src_last = 1, dst_last = 2;
    byte_buffer options;  // already padded to a multiple of 4
    byte_buffer payload;
    std::vector<ext_case> ext;  // IPv6 extension headers, in order
};

// Builds the packet with a correct TCP (and IPv4 header) checksum; returns the TCP offset.
byte_buffer build(const packet_spec& s, std::size_t* tcp_off_out = nullptr) {
    const std::size_t tcp_len = 20 + s.options.size() + s.payload.size();
    byte_buffer p;
    std::size_t tcp_off;
    if (s.ipv == 4) {
        tcp_off = 20;
        p.assign(20 + tcp_len, 0);
        p[0] = 0x45;
        p[1] = s.ecn;
        put16(p, 2, static_cast<std::uint16_t>(p.size()));
        put16(p, 4, 0x1234);
        p[8] = 64;
        p[9] = kProtoTcp;
        p[12] = 10, p[15] = s.src_last;
        p[16] = 10, p[19] = s.dst_last;
        put16(p, 10, static_cast<std::uint16_t>(~ref_fold(ref_sum(p.data(), 20))));
    } else {
        std::size_t ext_len = 0;
        for (const auto& e : s.ext) ext_len += e.len;
        tcp_off = 40 + ext_len;
        p.assign(tcp_off + tcp_len, 0);
        p[0] = 0x60;
        p[1] = static_cast<std::uint8_t>(s.ecn << 4);
        put16(p, 4, static_cast<std::uint16_t>(p.size() - 40));
        p[7] = 64;
        p[8] = 0x20, p[9] = 0x01, p[23] = s.src_last;
        p[24] = 0x20, p[25] = 0x01, p[39] = s.dst_last;
        std::size_t nh_pos = 6, off = 40;
        for (const auto& e : s.ext) {
            p[nh_pos] = e.type;
            if (e.type == kIpv6Ah) {
                p[off + 1] = static_cast<std::uint8_t>(e.len / 4 - 2);
            } else if (e.type != kIpv6Fragment) {
                p[off + 1] = static_cast<std::uint8_t>(e.len / 8 - 1);
            }
            nh_pos = off;
            off += e.len;
        }
        p[nh_pos] = kProtoTcp;
    }
    put16(p, tcp_off, s.sport);
    put16(p, tcp_off + 2, s.dport);
    put32(p, tcp_off + 4, s.seq);
    put32(p, tcp_off + 8, s.ack);
    p[tcp_off + 12] = static_cast<std::uint8_t>(((20 + s.options.size()) / 4) << 4);
    p[tcp_off + 13] = s.flags;
    put16(p, tcp_off + 14, s.window);
    std::copy(s.options.begin(), s.options.end(), p.begin() + static_cast<long>(tcp_off + 20));
    std::copy(s.payload.begin(), s.payload.end(),
              p.begin() + static_cast<long>(tcp_off + 20 + s.options.size()));
    put16(p, tcp_off + 16, ref_tcp_checksum(p, tcp_off));
    if (tcp_off_out) *tcp_off_out = tcp_off;
    return p;
}

byte_buffer pad4(byte_buffer o) {
    while (o.size() % 4) o.push_back(1);  // NOP
    return o;
}

// Random, valid TCP options (<= 40 bytes).
byte_buffer random_options(std::mt19937_64& rng) {
    byte_buffer o;
    std::uniform_int_distribution<int> kind(0, 7);
    const int n = std::uniform_int_distribution<int>(0, 6)(rng);
    for (int i = 0; i < n; ++i) {
        byte_buffer add;
        switch (kind(rng)) {
            case 0:
                add = {1};
                break;
            case 1:
                add = {2, 4, 0x05, 0xB4};
                break;
            case 2:
                add = {3, 3, static_cast<std::uint8_t>(rng() % 16)};
                break;
            case 3:
                add = {4, 2};
                break;
            case 4:
                add = {8, 10};
                for (int k = 0; k < 8; ++k) add.push_back(static_cast<std::uint8_t>(rng()));
                break;
            case 5: {
                const int blocks = 1 + static_cast<int>(rng() % 3);
                add = {5, static_cast<std::uint8_t>(2 + 8 * blocks)};
                for (int k = 0; k < 8 * blocks; ++k)
                    add.push_back(static_cast<std::uint8_t>(rng()));
                break;
            }
            case 6:
                add = {30, 4, 0xAB, 0xCD};
                break;  // unknown kind, skipped
            default:
                add = {1, 1};
                break;
        }
        if (o.size() + add.size() > 39) break;
        o.insert(o.end(), add.begin(), add.end());
    }
    if (rng() % 4 == 0 && o.size() < 40) o.push_back(0);  // EOL, then padding
    while (o.size() % 4) o.push_back(0);
    return o;
}

packet_spec random_spec(std::mt19937_64& rng) {
    packet_spec s;
    s.ipv = (rng() & 1) ? 6 : 4;
    s.options = random_options(rng);
    s.payload.resize(rng() % 64);
    for (auto& b : s.payload) b = static_cast<std::uint8_t>(rng());
    s.window = static_cast<std::uint16_t>(rng());
    s.seq = static_cast<std::uint32_t>(rng());
    s.ack = static_cast<std::uint32_t>(rng());
    s.sport = static_cast<std::uint16_t>(rng());
    s.dport = static_cast<std::uint16_t>(rng());
    s.src_last = static_cast<std::uint8_t>(rng());
    s.dst_last = static_cast<std::uint8_t>(rng());
    s.flags = static_cast<std::uint8_t>(kAck | (rng() & (kPsh | kFin | kEce | kCwr | kUrg)));
    if (s.ipv == 6 && rng() % 3 == 0) s.ext = {{kIpv6HopByHop, 8}, {kIpv6DestOpts, 16}};
    return s;
}

// A payload word that makes the full checksum equal `target` (target != 0xFFFF).
void force_checksum(byte_buffer& p, std::size_t tcp_off, std::size_t word_off,
                    std::uint16_t target) {
    put16(p, word_off, 0);
    put16(p, tcp_off + 16, 0);
    const std::uint16_t s0 = ref_fold(ref_tcp_sum(p, tcp_off));
    // Need fold(s0 + w) == ~target (one's complement), so w = ~target - s0.
    const std::uint16_t want = static_cast<std::uint16_t>(~target);
    const std::uint16_t w = ref_fold(std::uint32_t{want} + static_cast<std::uint16_t>(~s0));
    put16(p, word_off, w);
    put16(p, tcp_off + 16, ref_tcp_checksum(p, tcp_off));
}

bool checksum_valid(const byte_buffer& p, std::size_t tcp_off) {
    return ref_fold(ref_tcp_sum(p, tcp_off)) == 0xFFFF;
}

byte_buffer syn(int ipv, std::optional<std::uint8_t> ws, bool ack = false, bool reverse = false) {
    packet_spec s;
    s.ipv = ipv;
    s.flags = static_cast<std::uint8_t>(kSyn | (ack ? kAck : 0));
    s.window = 65535;
    if (ws)
        s.options = pad4({2, 4, 0x05, 0xB4, 3, 3, *ws});
    else
        s.options = pad4({2, 4, 0x05, 0xB4});
    if (reverse) {
        std::swap(s.sport, s.dport);
        std::swap(s.src_last, s.dst_last);
    }
    return build(s);
}
byte_buffer ack_pkt(int ipv, std::uint32_t ack, std::uint16_t window, bool reverse = false) {
    packet_spec s;
    s.ipv = ipv;
    s.ack = ack;
    s.window = window;
    s.options = pad4({1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2});
    if (reverse) {
        std::swap(s.sport, s.dport);
        std::swap(s.src_last, s.dst_last);
    }
    return build(s);
}
packet_info parsed(const byte_buffer& p) {
    auto r = parse(p);
    EXPECT_TRUE(r.ok()) << r.error();
    return r.value();
}

}  // namespace

// ---- Parsing ----------------------------------------------------------------------------

TEST(TcpipParse, ipv4_tcp_with_every_option_kind_is_parsed) {
    packet_spec s;
    s.seq = 0x01020304;
    s.ack = 0xA0B0C0D0;
    s.window = 4321;
    s.flags = kAck | kPsh;
    s.ecn = kEct0;
    s.options = pad4({2, 4,  0x05, 0xB4, 1, 3, 3, 7, 4, 2, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8,
                      5, 18, 0,    0,    0, 1, 0, 0, 0, 2, 0, 0,  0, 3, 0, 0, 0, 4, 0});
    s.payload = {1, 2, 3, 4, 5};
    const byte_buffer p = build(s);
    const packet_info info = parsed(p);
    EXPECT_EQ(info.ip_version, 4);
    EXPECT_EQ(info.ip_header_len, 20u);
    EXPECT_EQ(info.total_len, p.size());
    EXPECT_EQ(info.ecn, kEct0);
    EXPECT_EQ(info.flow.proto, kProtoTcp);
    EXPECT_EQ(info.flow.sport, 40000);
    EXPECT_EQ(info.flow.dport, 5201);
    EXPECT_EQ(info.flow.src[3], 1);
    EXPECT_FALSE(info.is_fragment);
    ASSERT_TRUE(info.tcp);
    const tcp_header& t = *info.tcp;
    EXPECT_EQ(t.offset, 20u);
    EXPECT_EQ(t.header_len, 20 + s.options.size());
    EXPECT_EQ(t.payload_len, 5u);
    EXPECT_EQ(t.seq, 0x01020304u);
    EXPECT_EQ(t.ack, 0xA0B0C0D0u);
    EXPECT_EQ(t.window, 4321);
    EXPECT_EQ(t.flags, kAck | kPsh);
    EXPECT_EQ(t.mss, 1460);
    EXPECT_EQ(t.wscale, 7);
    EXPECT_TRUE(t.sack_permitted);
    ASSERT_TRUE(t.timestamp);
    EXPECT_EQ(t.timestamp->first, 9u);
    EXPECT_EQ(t.timestamp->second, 8u);
    ASSERT_EQ(t.sack_blocks.size(), 2u);
    EXPECT_EQ(t.sack_blocks[1], std::make_pair(3u, 4u));
    EXPECT_EQ(t.checksum, get16(p, 36));
    EXPECT_EQ(tcp_checksum(p.data(), info), get16(p, 36));
}

TEST(TcpipParse, ipv6_extension_headers_are_walked_to_tcp) {
    packet_spec s;
    s.ipv = 6;
    s.ecn = kEct1;
    s.ext = {{kIpv6HopByHop, 8},
             {kIpv6Routing, 24},
             {kIpv6Fragment, 8},
             {kIpv6Ah, 24},
             {kIpv6DestOpts, 16}};
    s.options = pad4({3, 3, 2});
    s.flags = kSyn;
    std::size_t tcp_off = 0;
    const byte_buffer p = build(s, &tcp_off);
    const packet_info info = parsed(p);
    EXPECT_EQ(info.ip_version, 6);
    EXPECT_EQ(info.ip_header_len, 40u + 8 + 24 + 8 + 24 + 16);
    EXPECT_EQ(info.ecn, kEct1);
    EXPECT_EQ(info.flow.proto, kProtoTcp);
    EXPECT_FALSE(info.is_fragment);  // an atomic fragment (offset 0, M clear) is whole
    ASSERT_TRUE(info.tcp);
    EXPECT_EQ(info.tcp->offset, tcp_off);
    EXPECT_EQ(info.tcp->wscale, 2);
    EXPECT_EQ(tcp_checksum(p.data(), info), get16(p, tcp_off + 16));
}

TEST(TcpipParse, ipv6_parsing_stops_at_esp_and_no_next_header) {
    for (std::uint8_t stop : {kIpv6Esp, kIpv6NoNext}) {
        byte_buffer p(40 + 8 + 16, 0);
        p[0] = 0x60;
        put16(p, 4, 24);
        p[6] = kIpv6HopByHop;
        p[40] = stop;  // hop-by-hop's next header
        const packet_info info = parsed(p);
        EXPECT_EQ(info.flow.proto, stop);
        EXPECT_EQ(info.ip_header_len, 48u);
        EXPECT_FALSE(info.tcp);
    }
}

TEST(TcpipParse, non_first_fragments_have_no_transport_header) {
    packet_spec s;
    s.payload.assign(16, 0);
    byte_buffer v4 = build(s);
    put16(v4, 6, 0x0002);  // fragment offset 2 (16 bytes), MF clear
    packet_info i4 = parsed(v4);
    EXPECT_TRUE(i4.is_fragment);
    EXPECT_FALSE(i4.tcp);
    EXPECT_EQ(i4.flow.sport, 0);

    packet_spec s6;
    s6.ipv = 6;
    s6.ext = {{kIpv6Fragment, 8}};
    std::size_t off = 0;
    byte_buffer v6 = build(s6, &off);
    put16(v6, 42, static_cast<std::uint16_t>((3 << 3) | 1));  // offset 3, M set
    packet_info i6 = parsed(v6);
    EXPECT_TRUE(i6.is_fragment);
    EXPECT_FALSE(i6.tcp);
    EXPECT_EQ(i6.flow.proto, kProtoTcp);
}

TEST(TcpipParse, udp_ports_are_read) {
    byte_buffer p(28, 0);
    p[0] = 0x45;
    put16(p, 2, 28);
    p[9] = kProtoUdp;
    put16(p, 20, 53);
    put16(p, 22, 5353);
    const packet_info info = parsed(p);
    EXPECT_EQ(info.flow.proto, kProtoUdp);
    EXPECT_EQ(info.flow.sport, 53);
    EXPECT_EQ(info.flow.dport, 5353);
    EXPECT_FALSE(info.tcp);
}

TEST(TcpipParse, bytes_past_the_ip_length_are_padding) {
    byte_buffer p = build(packet_spec{});
    const std::size_t n = p.size();
    p.resize(n + 6, 0xEE);
    const packet_info info = parsed(p);
    EXPECT_EQ(info.total_len, n);
    EXPECT_EQ(info.tcp->payload_len, 0u);
}

struct malformed_case {
    const char* name;
    std::function<void(byte_buffer&)> corrupt;
    const char* field;  // the error must name this field
    std::string value;  // ... and this value
};

class tcpip_malformed : public ::testing::TestWithParam<malformed_case> {};

TEST_P(tcpip_malformed, malformed_length_gives_error_naming_field_and_value) {
    packet_spec s;
    s.options = pad4({2, 4, 0x05, 0xB4});
    byte_buffer p = build(s);
    GetParam().corrupt(p);
    auto r = parse(p);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find(GetParam().field), std::string::npos) << r.error();
    EXPECT_NE(r.error().find(GetParam().value), std::string::npos) << r.error();
}

INSTANTIATE_TEST_SUITE_P(
    Tcpip, tcpip_malformed,
    ::testing::Values(
        malformed_case{"version", [](byte_buffer& p) { p[0] = 0x55; }, "ip.version", "5"},
        malformed_case{"ihl", [](byte_buffer& p) { p[0] = 0x43; }, "ipv4.ihl", "3"},
        malformed_case{"total_length", [](byte_buffer& p) { put16(p, 2, 999); },
                       "ipv4.total_length", "999"},
        malformed_case{"total_below_ihl", [](byte_buffer& p) { put16(p, 2, 12); },
                       "ipv4.total_length", "12"},
        malformed_case{"data_offset_small", [](byte_buffer& p) { p[32] = 0x40; }, "tcp.data_offset",
                       "4"},
        malformed_case{"data_offset_big", [](byte_buffer& p) { p[32] = 0xF0; }, "tcp.data_offset",
                       "15"},
        malformed_case{"option_len_0", [](byte_buffer& p) { p[41] = 0; }, "tcp.option.length", "0"},
        malformed_case{"option_len_1", [](byte_buffer& p) { p[41] = 1; }, "tcp.option.length", "1"},
        malformed_case{"option_past_header", [](byte_buffer& p) { p[41] = 9; }, "tcp.option.length",
                       "9"},
        malformed_case{"mss_len",
                       [](byte_buffer& p) {
                           p[40] = 2, p[41] = 3;
                           p[42] = 1;
                       },
                       "tcp.option.mss.length", "3"},
        malformed_case{"wscale_len", [](byte_buffer& p) { p[40] = 3, p[41] = 4; },
                       "tcp.option.wscale.length", "4"},
        malformed_case{"ts_len", [](byte_buffer& p) { p[40] = 8, p[41] = 4; },
                       "tcp.option.timestamp.length", "4"},
        malformed_case{"sackp_len", [](byte_buffer& p) { p[40] = 4, p[41] = 4; },
                       "tcp.option.sack_permitted.length", "4"},
        malformed_case{"sack_len", [](byte_buffer& p) { p[40] = 5, p[41] = 4; },
                       "tcp.option.sack.length", "4"},
        malformed_case{"no_length_byte",
                       [](byte_buffer& p) { p[40] = 1, p[41] = 1, p[42] = 1, p[43] = 2; },
                       "tcp.option.length", "2"},
        malformed_case{"truncated_tcp", [](byte_buffer& p) { put16(p, 2, 30); }, "tcp.header",
                       "10"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(TcpipParse, ipv6_extension_header_running_past_the_payload_is_an_error) {
    packet_spec s;
    s.ipv = 6;
    s.ext = {{kIpv6HopByHop, 8}};
    byte_buffer p = build(s);
    p[41] = 20;  // (20 + 1) * 8 = 168 bytes
    auto r = parse(p);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("ipv6.ext_header.length: 168"), std::string::npos) << r.error();

    byte_buffer q = build(s);
    put16(q, 4, 300);
    auto r2 = parse(q);
    ASSERT_FALSE(r2.ok());
    EXPECT_NE(r2.error().find("ipv6.payload_length: 300"), std::string::npos) << r2.error();
}

TEST(TcpipParse, every_truncation_of_a_valid_packet_is_an_error) {
    std::mt19937_64 rng(11);
    for (int k = 0; k < 200; ++k) {
        const byte_buffer p = build(random_spec(rng));
        for (std::size_t n = 0; n < p.size(); ++n) {
            expected<packet_info> r = error_info{""};
            EXPECT_NO_THROW(r = parse(p.data(), n));
            EXPECT_FALSE(r.ok()) << "prefix " << n << " of " << p.size();
        }
    }
}

TEST(TcpipParse, random_byte_flips_never_overread_and_keep_invariants) {
    std::mt19937_64 rng(12);
    int errors = 0, oks = 0;
    for (int k = 0; k < 20000; ++k) {
        const byte_buffer orig = build(random_spec(rng));
        // An exact-size heap copy: an overread would leave the allocation, which ASan reports
        // when this test runs in a -DOPPSCHED_SANITIZE=address,undefined build (and in the
        // fuzz target tests/fuzz/fuzz_tcpip_clamp.cc); here the invariants below must hold.
        byte_buffer p = orig;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f)
            p[rng() % std::min<std::size_t>(p.size(), 80)] ^=
                static_cast<std::uint8_t>(1u << (rng() % 8));
        expected<packet_info> r = error_info{""};
        ASSERT_NO_THROW(r = parse(p));
        if (!r.ok()) {
            ++errors;
            EXPECT_FALSE(r.error().empty());
            EXPECT_NE(r.error().find(": "), std::string::npos) << r.error();
            continue;
        }
        ++oks;
        const packet_info& i = r.value();
        EXPECT_LE(i.total_len, p.size());
        EXPECT_LE(i.ip_header_len, i.total_len);
        if (i.tcp) {
            EXPECT_LE(i.tcp->offset + i.tcp->header_len + i.tcp->payload_len, i.total_len);
            EXPECT_LE(i.tcp->sack_blocks.size(), 16u);
        }
    }
    EXPECT_GT(errors, 100);  // flips in length fields were caught ...
    EXPECT_GT(oks, 100);     // ... and flips elsewhere still parse
}

// ---- ECN marking ----------------------------------------------------------------------

TEST(TcpipEcn, mark_ce_sets_ce_and_keeps_the_ipv4_header_checksum_valid) {
    for (std::uint8_t ecn : {kEct0, kEct1, kCe}) {
        packet_spec s;
        s.ecn = ecn;
        byte_buffer p = build(s);
        ASSERT_TRUE(mark_ce(p));
        EXPECT_EQ(p[1] & 3, kCe);
        EXPECT_EQ(ref_fold(ref_sum(p.data(), 20)), 0xFFFF);  // header checksum verifies
        EXPECT_EQ(ipv4_header_checksum(p.data(), 20), get16(p, 10));
    }
}

TEST(TcpipEcn, mark_ce_refuses_not_ect_and_malformed_packets_untouched) {
    byte_buffer p = build(packet_spec{});
    const byte_buffer before = p;
    EXPECT_FALSE(mark_ce(p));
    EXPECT_EQ(p, before);
    packet_spec s;
    s.ecn = kEct0;
    byte_buffer bad = build(s);
    put16(bad, 2, 9999);
    const byte_buffer bad_before = bad;
    EXPECT_FALSE(mark_ce(bad));
    EXPECT_EQ(bad, bad_before);
}

TEST(TcpipEcn, mark_ce_sets_the_ipv6_traffic_class_ce_bits) {
    packet_spec s;
    s.ipv = 6;
    s.ecn = kEct0;
    byte_buffer p = build(s);
    ASSERT_TRUE(mark_ce(p));
    EXPECT_EQ((p[1] >> 4) & 3, kCe);
    EXPECT_EQ(parsed(p).ecn, kCe);
}

// ---- Incremental checksum --------------------------------------------------------------

TEST(TcpipChecksum, rfc1624_eqn3_matches_full_recomputation_on_1e5_random_packets) {
    std::mt19937_64 rng(2024);
    int special = 0, zero_after = 0;
    for (int k = 0; k < 100000; ++k) {
        packet_spec s = random_spec(rng);
        const int mode = static_cast<int>(rng() % 8);  // 0..2: force a checksum near 0/FFFF
        if (mode < 3 && s.payload.size() < 2) s.payload.resize(2);
        std::size_t off = 0;
        byte_buffer p = build(s, &off);
        const std::uint8_t shift = static_cast<std::uint8_t>(rng() % 15);
        const std::uint64_t wb = rng() % (std::uint64_t{1} << 31);
        const std::uint16_t expect_field = window_field_for(wb, shift);
        const std::size_t word = off + 20 + s.options.size();  // first payload word
        if (mode < 3) {
            ++special;
            const std::uint16_t targets[] = {0x0000, 0x0001, 0xFFFE};
            const std::uint16_t target = targets[rng() % 3];
            if (mode == 0) {
                force_checksum(p, off, word, target);  // before the rewrite
            } else {
                // After the rewrite: force it with the new window, then restore the old.
                put16(p, off + 14, expect_field);
                force_checksum(p, off, word, target);
                put16(p, off + 14, s.window);
                put16(p, off + 16, ref_tcp_checksum(p, off));
            }
        }
        const packet_info info = parsed(p);
        ASSERT_TRUE(info.tcp);
        auto r = set_window(p.data(), p.size(), info, wb, shift);
        ASSERT_TRUE(r.ok()) << r.error();
        ASSERT_EQ(r.value(), expect_field);
        ASSERT_EQ(get16(p, off + 14), expect_field);
        const std::uint16_t full = ref_tcp_checksum(p, off);
        ASSERT_EQ(get16(p, off + 16), full) << "packet " << k << " v" << s.ipv;
        ASSERT_TRUE(checksum_valid(p, off));
        ASSERT_EQ(tcp_checksum(p.data(), parsed(p)), full);
        if (full == 0) ++zero_after;
    }
    EXPECT_GT(special, 30000);
    EXPECT_GT(zero_after, 1000);  // the 0x0000 edge was exercised
}

TEST(TcpipChecksum, a_non_canonical_0xffff_checksum_still_verifies_after_rewrite) {
    packet_spec s;
    s.payload.assign(2, 0);
    std::size_t off = 0;
    byte_buffer p = build(s, &off);
    force_checksum(p, off, off + 20, 0x0000);
    put16(p, off + 16, 0xFFFF);  // -0: the same one's-complement value
    ASSERT_TRUE(checksum_valid(p, off));
    ASSERT_TRUE(set_window(p.data(), p.size(), parsed(p), 777, 0).ok());
    EXPECT_TRUE(checksum_valid(p, off));
    EXPECT_EQ(get16(p, off + 16), ref_tcp_checksum(p, off));
}

TEST(TcpipChecksum, checksum_update16_follows_rfc1624_example) {
    // RFC 1624 §4: HC = 0xDD2F, m = 0x5555 -> m' = 0x3285 gives HC' = 0x0000 (eqn. 3),
    // where eqn. 2 would give 0xFFFF.
    EXPECT_EQ(checksum_update16(0xDD2F, 0x5555, 0x3285), 0x0000);
}

TEST(TcpipChecksum, set_window_rounds_up_clamps_and_leaves_syn_unscaled) {
    byte_buffer p = ack_pkt(4, 1, 1);
    const packet_info i = parsed(p);
    EXPECT_EQ(set_window(p.data(), p.size(), i, 1000, 7).value(), 8);  // ceil(1000/128)
    EXPECT_EQ(set_window(p.data(), p.size(), i, 1024, 7).value(), 8);
    EXPECT_EQ(set_window(p.data(), p.size(), i, 1025, 7).value(), 9);
    EXPECT_EQ(set_window(p.data(), p.size(), i, 1u << 30, 2).value(), 0xFFFF);
    EXPECT_EQ(set_window(p.data(), p.size(), i, 1u << 30, 15).value(), 0xFFFF);
    EXPECT_EQ(set_window(p.data(), p.size(), i, 16385, 15).value(), 2);  // 15 used as 14
    byte_buffer sy = syn(4, 7);
    EXPECT_EQ(set_window(sy.data(), sy.size(), parsed(sy), 1000, 7).value(), 1000);
    packet_info udp;
    EXPECT_FALSE(set_window(p.data(), p.size(), udp, 1000, 0).ok());
}

// ---- Window-scale tracking -------------------------------------------------------------

namespace {

// Client (10.0.0.2 / ::2, port 5201) opened the connection to the server (port 40000):
// `syn(.., reverse=true)` is the client's SYN. Client ACKs go client -> server.
struct handshake {
    window_tracker tracker;
    explicit handshake(int ipv, std::optional<std::uint8_t> client_ws,
                       std::optional<std::uint8_t> server_ws, window_tracker_params p = {})
        : tracker(p) {
        tracker.learn(parsed(syn(ipv, client_ws, false, true)), 0);
        tracker.learn(parsed(syn(ipv, server_ws, true, false)), 1);
    }
    rewrite_outcome client_ack(byte_buffer& p, std::uint64_t wb, time_ns now = 2) {
        const packet_info i = parsed(p);
        return tracker.rewrite(p.data(), p.size(), i, wb, now);
    }
};

}  // namespace

TEST(TcpipWindowTracker, shift_above_14_is_used_as_14) {
    handshake h(4, 15, 3);
    const flow_key client_to_server = parsed(ack_pkt(4, 0, 0, true)).flow;
    EXPECT_EQ(h.tracker.shift(client_to_server), 14);
    EXPECT_EQ(h.tracker.shift(client_to_server.reversed()), 3);
    EXPECT_EQ(h.tracker.stats().scale_clamped, 1u);
    byte_buffer a = ack_pkt(4, 100, 1, true);
    ASSERT_EQ(h.client_ack(a, 20000), rewrite_outcome::rewritten);
    EXPECT_EQ(get16(a, 34), 2);  // ceil(20000 / 16384)
}

TEST(TcpipWindowTracker, flow_not_seen_from_its_syn_passes_unchanged) {
    window_tracker t;
    byte_buffer a = ack_pkt(4, 100, 1234, true);
    const byte_buffer before = a;
    EXPECT_EQ(t.rewrite(a.data(), a.size(), parsed(a), 10, 0), rewrite_outcome::unknown_flow);
    EXPECT_EQ(a, before);
    EXPECT_EQ(t.stats().unchanged_unknown, 1u);
    // A SYN alone is not enough: the SYN-ACK decides whether scaling is on.
    t.learn(parsed(syn(4, 5, false, true)), 0);
    EXPECT_EQ(t.rewrite(a.data(), a.size(), parsed(a), 10, 1), rewrite_outcome::unknown_flow);
    EXPECT_EQ(a, before);
}

TEST(TcpipWindowTracker, syn_and_syn_ack_windows_are_never_rewritten) {
    window_tracker t;
    byte_buffer s = syn(4, 7, false, true);
    const byte_buffer s_before = s;
    EXPECT_EQ(t.rewrite(s.data(), s.size(), parsed(s), 100, 0), rewrite_outcome::not_applicable);
    EXPECT_EQ(s, s_before);
    byte_buffer sa = syn(4, 7, true, false);
    const byte_buffer sa_before = sa;
    EXPECT_EQ(t.rewrite(sa.data(), sa.size(), parsed(sa), 100, 1), rewrite_outcome::syn);
    EXPECT_EQ(sa, sa_before);
    EXPECT_EQ(t.stats().unchanged_syn, 1u);
    EXPECT_EQ(t.shift(parsed(sa).flow), 7);  // ... but the SYN-ACK was learnt from
}

TEST(TcpipWindowTracker, scaling_is_off_unless_both_sides_offer_it) {
    handshake h(4, 7, std::nullopt);
    const flow_key c2s = parsed(ack_pkt(4, 0, 0, true)).flow;
    EXPECT_EQ(h.tracker.shift(c2s), 0);
    EXPECT_EQ(h.tracker.shift(c2s.reversed()), 0);
    byte_buffer a = ack_pkt(4, 100, 1, true);
    ASSERT_EQ(h.client_ack(a, 1000), rewrite_outcome::rewritten);
    EXPECT_EQ(get16(a, 34), 1000);
}

TEST(TcpipWindowTracker, window_is_rounded_up_to_the_scale_granularity) {
    handshake h(6, 7, 2);
    byte_buffer a = ack_pkt(6, 100, 1, true);
    ASSERT_EQ(h.client_ack(a, 1000), rewrite_outcome::rewritten);
    EXPECT_EQ(get16(a, 54), 8);  // 8 * 128 = 1024 >= 1000
    EXPECT_TRUE(checksum_valid(a, 40));
    byte_buffer b = ack_pkt(6, 2000, 1, true);
    ASSERT_EQ(h.client_ack(b, 1024), rewrite_outcome::rewritten);
    EXPECT_EQ(get16(b, 54), 8);  // exact multiple: no rounding
}

TEST(TcpipWindowTracker, right_edge_never_moves_left) {
    handshake h(4, 4, 4);  // granularity 16
    byte_buffer a = ack_pkt(4, 1000, 1, true);
    ASSERT_EQ(h.client_ack(a, 8000), rewrite_outcome::rewritten);
    EXPECT_EQ(get16(a, 34), 500);  // right edge 1000 + 8000 = 9000
    // The next ACK advances by 1000 but CLAMP wants 2000 bytes: the right edge would move
    // to 4000 < 9000, so the window stays at 9000 - 2000 = 7000 (437.5 -> 438 units).
    byte_buffer b = ack_pkt(4, 2000, 1, true);
    ASSERT_EQ(h.client_ack(b, 2000), rewrite_outcome::rewritten);
    EXPECT_EQ(get16(b, 34), 438);
    EXPECT_GE(2000u + 438u * 16u, 9000u);
    EXPECT_EQ(h.tracker.stats().right_edge_held, 1u);
    EXPECT_TRUE(checksum_valid(b, 20));
    // Once the ACK passes the old right edge, the window may shrink to what CLAMP asks.
    byte_buffer c = ack_pkt(4, 10000, 1, true);
    ASSERT_EQ(h.client_ack(c, 160), rewrite_outcome::rewritten);
    EXPECT_EQ(get16(c, 34), 10);
    // A reordered older ACK still cannot pull the edge (10160) left.
    byte_buffer d = ack_pkt(4, 9000, 1, true);
    ASSERT_EQ(h.client_ack(d, 0), rewrite_outcome::rewritten);
    EXPECT_GE(9000u + get16(d, 34) * 16u, 10160u);
}

TEST(TcpipWindowTracker, right_edge_is_tracked_across_sequence_wraparound) {
    handshake h(4, 0, 0);
    byte_buffer a = ack_pkt(4, 0xFFFFFF00u, 1, true);
    ASSERT_EQ(h.client_ack(a, 1000), rewrite_outcome::rewritten);  // edge wraps to 0x2E8
    byte_buffer b = ack_pkt(4, 0x00000010u, 1, true);
    ASSERT_EQ(h.client_ack(b, 10), rewrite_outcome::rewritten);
    EXPECT_EQ(get16(b, 34), 0x2E8 - 0x10);
}

TEST(TcpipWindowTracker, window_is_clamped_to_65535_shifted) {
    handshake h(4, 2, 2);
    byte_buffer a = ack_pkt(4, 100, 1, true);
    ASSERT_EQ(h.client_ack(a, 10'000'000), rewrite_outcome::rewritten);
    EXPECT_EQ(get16(a, 34), 0xFFFF);
    EXPECT_EQ(h.tracker.stats().window_clamped, 1u);
}

TEST(TcpipWindowTracker, server_direction_uses_the_server_shift) {
    handshake h(4, 3, 9);
    byte_buffer a = ack_pkt(4, 100000, 1, false);  // server -> client, past the SYN-ACK's edge
    ASSERT_EQ(h.client_ack(a, 5000), rewrite_outcome::rewritten);
    EXPECT_EQ(get16(a, 34), 10);  // ceil(5000 / 512)
}

TEST(TcpipWindowTracker, the_syn_ack_window_is_the_first_right_edge_of_its_sender) {
    handshake h(4, 7, 2);  // the SYN-ACK (ack 5000, window 65535) advertised edge 70535
    byte_buffer a = ack_pkt(4, 6000, 1, false);
    ASSERT_EQ(h.client_ack(a, 1000), rewrite_outcome::rewritten);
    EXPECT_EQ(get16(a, 34), 16134);  // ceil((70535 - 6000) / 4)
    EXPECT_GE(6000u + 16134u * 4u, 70535u);
}

TEST(TcpipWindowTracker, advertised_bytes_scales_the_raw_field_once_the_scale_is_known) {
    handshake h(4, 7, 2);
    EXPECT_EQ(h.tracker.advertised_bytes(parsed(ack_pkt(4, 1, 3, true))), 3u << 7);
    EXPECT_EQ(h.tracker.advertised_bytes(parsed(ack_pkt(4, 1, 3, false))), 3u << 2);
    EXPECT_EQ(h.tracker.advertised_bytes(parsed(syn(4, 7, false, true))), 65535u);
    window_tracker fresh;
    EXPECT_FALSE(fresh.advertised_bytes(parsed(ack_pkt(4, 1, 3, true))));
}

TEST(TcpipWindowTracker, a_retransmitted_syn_keeps_the_connection_and_a_new_isn_restarts_it) {
    handshake h(4, 7, 7);
    const flow_key c2s = parsed(ack_pkt(4, 0, 0, true)).flow;
    // Read after the SYN-ACK that answered the first (the two crossed): no SYN-ACK follows.
    h.tracker.learn(parsed(syn(4, 7, false, true)), 5);
    EXPECT_EQ(h.tracker.shift(c2s), 7);
    EXPECT_EQ(h.tracker.stats().syn_retransmits, 1u);
    EXPECT_EQ(h.tracker.stats().syns, 1u);
    byte_buffer a = ack_pkt(4, 100, 1000, true);
    EXPECT_EQ(h.client_ack(a, 5000, 6), rewrite_outcome::rewritten);
    // The same four-tuple with a new ISN is a new connection: its scale is not known yet.
    packet_spec reused;
    reused.flags = kSyn;
    reused.seq = 99999;
    reused.window = 65535;
    reused.options = pad4({2, 4, 0x05, 0xB4, 3, 3, 7});
    std::swap(reused.sport, reused.dport);
    std::swap(reused.src_last, reused.dst_last);
    h.tracker.learn(parsed(build(reused)), 7);
    EXPECT_FALSE(h.tracker.shift(c2s));
    EXPECT_EQ(h.tracker.stats().syns, 2u);
}

TEST(TcpipWindowTracker, idle_entries_expire_and_rst_forgets) {
    window_tracker_params p;
    p.idle_timeout = 10 * kNsPerSec;
    handshake h(4, 1, 1, p);
    const flow_key c2s = parsed(ack_pkt(4, 0, 0, true)).flow;
    ASSERT_TRUE(h.tracker.shift(c2s));
    h.tracker.expire(5 * kNsPerSec);
    EXPECT_TRUE(h.tracker.shift(c2s));
    h.tracker.expire(12 * kNsPerSec);
    EXPECT_FALSE(h.tracker.shift(c2s));
    EXPECT_EQ(h.tracker.stats().expired, 1u);

    handshake g(4, 1, 1);
    packet_spec rst;
    rst.flags = kRst | kAck;
    g.tracker.learn(parsed(build(rst)), 3);
    EXPECT_FALSE(g.tracker.shift(c2s));
    EXPECT_EQ(g.tracker.size(), 0u);
}

TEST(TcpipWindowTracker, memory_is_bounded_by_max_flows_with_lru_eviction) {
    window_tracker_params p;
    p.max_flows = 8;
    window_tracker t(p);
    for (int i = 0; i < 100; ++i) {
        packet_spec s;
        s.flags = kSyn;
        s.sport = static_cast<std::uint16_t>(1000 + i);
        t.learn(parsed(build(s)), i);
        EXPECT_LE(t.size(), 8u);
    }
    EXPECT_EQ(t.stats().evicted, 92u);
    packet_spec newest;
    newest.sport = 1099;
    EXPECT_FALSE(t.shift(parsed(build(newest)).flow));  // present but no SYN-ACK yet
    EXPECT_EQ(t.size(), 8u);
}

TEST(TcpipWindowTracker, bad_params_throw_naming_the_field) {
    window_tracker_params p;
    p.max_flows = 0;
    try {
        window_tracker t(p);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("window_tracker.max_flows: 0"), std::string::npos);
    }
    window_tracker_params q;
    q.idle_timeout = -1;
    EXPECT_THROW(window_tracker{q}, std::invalid_argument);
}

TEST(TcpipKeyedHash, the_same_seed_gives_the_same_hashes_and_another_seed_other_ones) {
    std::mt19937_64 rng(7);
    std::vector<tcpip::flow_key> keys(200);
    for (std::size_t i = 0; i < keys.size(); ++i) {
        tcpip::flow_key& k = keys[i];
        k.ip_version = i % 2 ? 6 : 4;
        k.proto = 6;
        const std::size_t n = k.ip_version == 6 ? 16 : 4;
        for (std::size_t b = 0; b < n; ++b) {
            k.src[b] = static_cast<std::uint8_t>(rng());
            k.dst[b] = static_cast<std::uint8_t>(rng());
        }
        k.sport = static_cast<std::uint16_t>(rng());
        k.dport = 5201;
    }
    const tcpip::keyed_flow_hash a(1), a_again(1), b(2);
    std::size_t differ = 0;
    for (const auto& k : keys) {
        EXPECT_EQ(a(k), a_again(k));  // one seed: the same table layout on every run
        differ += a(k) != b(k);
    }
    EXPECT_EQ(differ, keys.size());  // the seed keys every hash
    // Each field takes part: changing one port or one address byte changes the hash.
    tcpip::flow_key k = keys[0];
    const std::size_t h = a(k);
    k.sport ^= 1;
    EXPECT_NE(a(k), h);
    k = keys[0];
    k.dst[3] ^= 0x80;
    EXPECT_NE(a(k), h);
    k = keys[0];
    k.proto = 17;
    EXPECT_NE(a(k), h);
}
