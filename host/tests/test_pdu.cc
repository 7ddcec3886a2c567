// Tests of oppsched/crc32.h and oppsched/pdu.h: CRC known answers, the MAC PDU golden
// vectors (host/tests/vectors/), round trips, and malformed input.
#include <gtest/gtest.h>

#include <boost/crc.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>

#include "oppsched/crc32.h"
#include "oppsched/pdu.h"
#include "tcp_test_packets.h"

using namespace oppsched;
using namespace oppsched::pdu;
using namespace oppsched::test;

namespace {

byte_buffer from_hex(const std::string& h) {
    byte_buffer b;
    for (std::size_t i = 0; i + 1 < h.size(); i += 2) {
        if (!std::isxdigit(static_cast<unsigned char>(h[i]))) break;
        b.push_back(static_cast<std::uint8_t>(std::stoul(h.substr(i, 2), nullptr, 16)));
    }
    return b;
}

// The vectors live beside this file, in the folder CMake names (OPPSCHED_MAC_TEST_VECTORS),
// so the tests find them from any working directory.
byte_buffer vector_file(const std::string& name) {
    const std::string path = std::string(OPPSCHED_MAC_TEST_VECTORS) + "/" + name;
    std::ifstream f(path);
    EXPECT_TRUE(f.good()) << path;
    std::string line;
    std::getline(f, line);
    return from_hex(line);
}

byte_buffer str_bytes(const char* s) { return byte_buffer(s, s + std::strlen(s)); }

// Recomputes the trailing CRC after a test edited the bytes, so the field checks run.
void refix_crc(byte_buffer& b) { put32(b, b.size() - 4, crc32(b.data(), b.size() - 4)); }

pdu_segment seg(std::uint16_t ps, std::uint16_t plen, std::uint16_t off, byte_buffer data) {
    pdu_segment s;
    s.packet_seq = ps;
    s.packet_len = plen;
    s.offset = off;
    s.data = std::move(data);
    return s;
}

byte_buffer two_packets_pdu() {
    mac_pdu p;
    p.header.user = 3;
    p.header.seq = 0x01020304;
    p.header.price_s = 0.25f;
    p.segments = {seg(7, 5, 0, str_bytes("ABCDE")), seg(8, 10, 0, str_bytes("WXYZ"))};
    return serialize(p, 64).value();
}

}  // namespace

// ---- CRC-32 ----------------------------------------------------------------------------

TEST(Crc32, known_answer_123456789_is_cbf43926) {
    const byte_buffer b = str_bytes("123456789");
    EXPECT_EQ(crc32(b), 0xCBF43926u);
    EXPECT_EQ(crc32_bitwise(b.data(), b.size()), 0xCBF43926u);
    EXPECT_EQ(crc32(nullptr, 0), 0u);
}

TEST(Crc32, slicing_by_8_matches_boost_and_bitwise_for_every_length_and_alignment) {
    std::mt19937_64 rng(7);
    byte_buffer buf(2100);
    for (auto& x : buf) x = static_cast<std::uint8_t>(rng());
    for (std::size_t len = 0; len < 300; ++len) {
        for (std::size_t start : {0, 1, 3, 7}) {
            boost::crc_32_type ref;
            ref.process_bytes(buf.data() + start, len);
            ASSERT_EQ(crc32(buf.data() + start, len), ref.checksum()) << len << "@" << start;
            ASSERT_EQ(crc32(buf.data() + start, len), crc32_bitwise(buf.data() + start, len));
        }
    }
    boost::crc_32_type ref;
    ref.process_bytes(buf.data(), buf.size());
    EXPECT_EQ(crc32(buf), ref.checksum());
}

TEST(Crc32, chaining_equals_one_pass) {
    const byte_buffer a = str_bytes("12345"), b = str_bytes("6789");
    EXPECT_EQ(crc32(b, crc32(a)), 0xCBF43926u);
}

// ---- Golden vectors ----------------------------------------------------------------------

TEST(PduGolden, two_packets_vector_parses_to_its_fields) {
    const byte_buffer b = vector_file("pdu_v1_two_packets.hex");
    ASSERT_EQ(b.size(), 64u);
    auto r = parse(b);
    ASSERT_TRUE(r.ok()) << r.error();
    const mac_pdu& p = r.value();
    EXPECT_EQ(p.header.user, 3);
    EXPECT_EQ(p.header.seq, 0x01020304u);
    ASSERT_TRUE(p.header.price_s);
    EXPECT_EQ(*p.header.price_s, 0.25f);
    ASSERT_EQ(p.segments.size(), 2u);
    EXPECT_EQ(p.segments[0].packet_seq, 7);
    EXPECT_EQ(p.segments[0].packet_len, 5);
    EXPECT_EQ(p.segments[0].offset, 0);
    EXPECT_EQ(p.segments[0].data, str_bytes("ABCDE"));
    EXPECT_TRUE(p.segments[0].first() && p.segments[0].last());
    EXPECT_EQ(p.segments[1].packet_seq, 8);
    EXPECT_EQ(p.segments[1].packet_len, 10);
    EXPECT_EQ(p.segments[1].data, str_bytes("WXYZ"));
    EXPECT_TRUE(p.segments[1].first());
    EXPECT_FALSE(p.segments[1].last());
    EXPECT_EQ(parse_view(b.data(), b.size())->padding, 19u);
    EXPECT_EQ(two_packets_pdu(), b);  // serialise reproduces the vector byte for byte
}

TEST(PduGolden, continuation_vector_without_price_parses_to_its_fields) {
    const byte_buffer b = vector_file("pdu_v1_continuation_no_price.hex");
    auto r = parse(b);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->header.user, 0);
    EXPECT_EQ(r->header.seq, 0xFFFFFFFFu);
    EXPECT_FALSE(r->header.price_s);
    ASSERT_EQ(r->segments.size(), 1u);
    EXPECT_EQ(r->segments[0].packet_seq, 8);
    EXPECT_EQ(r->segments[0].offset, 4);
    EXPECT_EQ(r->segments[0].data, str_bytes("abcdef"));
    EXPECT_FALSE(r->segments[0].first());
    EXPECT_TRUE(r->segments[0].last());
    mac_pdu p;
    p.header.seq = 0xFFFFFFFF;
    p.segments = {seg(8, 10, 4, str_bytes("abcdef"))};
    EXPECT_EQ(serialize(p, 34).value(), b);
}

TEST(PduGolden, empty_vector_is_the_smallest_pdu) {
    const byte_buffer b = vector_file("pdu_v1_empty.hex");
    ASSERT_EQ(b.size(), kMinPduBytes);
    auto r = parse(b);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->header.user, 1);
    EXPECT_EQ(r->header.seq, 5u);
    EXPECT_EQ(r->header.price_s, 0.0f);
    EXPECT_TRUE(r->segments.empty());
}

// ---- Round trips and errors -------------------------------------------------------------

TEST(mac_pdu, random_pdus_round_trip) {
    std::mt19937_64 rng(99);
    for (int k = 0; k < 2000; ++k) {
        mac_pdu p;
        p.header.user = static_cast<std::uint16_t>(rng());
        p.header.seq = static_cast<std::uint32_t>(rng());
        if (rng() & 1) p.header.price_s = static_cast<float>(rng() % 100000) * 1e-4f;
        const int n = static_cast<int>(rng() % 6);
        std::uint16_t ps = static_cast<std::uint16_t>(rng());
        for (int i = 0; i < n; ++i) {
            const std::uint16_t len = static_cast<std::uint16_t>(1 + rng() % 300);
            byte_buffer d(len);
            for (auto& x : d) x = static_cast<std::uint8_t>(rng());
            // First segment may be a continuation, last may be unfinished.
            std::uint16_t plen = len, off = 0;
            if (i == 0 && (rng() & 1))
                off = static_cast<std::uint16_t>(rng() % 100),
                plen = static_cast<std::uint16_t>(plen + off);
            if (i == n - 1 && (rng() & 1))
                plen = static_cast<std::uint16_t>(plen + 1 + rng() % 100);
            p.segments.push_back(seg(ps++, plen, off, d));
        }
        const std::size_t tb = pdu_min_bytes(p) + rng() % 50;
        auto b = serialize(p, tb);
        ASSERT_TRUE(b.ok()) << b.error();
        ASSERT_EQ(b->size(), tb);
        auto q = parse(b.value());
        ASSERT_TRUE(q.ok()) << q.error();
        EXPECT_EQ(q->header.user, p.header.user);
        EXPECT_EQ(q->header.seq, p.header.seq);
        EXPECT_EQ(q->header.price_s, p.header.price_s);
        ASSERT_EQ(q->segments.size(), p.segments.size());
        for (std::size_t i = 0; i < p.segments.size(); ++i) {
            EXPECT_EQ(q->segments[i].packet_seq, p.segments[i].packet_seq);
            EXPECT_EQ(q->segments[i].packet_len, p.segments[i].packet_len);
            EXPECT_EQ(q->segments[i].offset, p.segments[i].offset);
            EXPECT_EQ(q->segments[i].data, p.segments[i].data);
        }
    }
}

struct bad_pdu {
    const char* name;
    std::function<void(byte_buffer&)> corrupt;  // edits the 64-byte two-packet PDU
    bool fix_crc;
    const char* expect;  // substring of the error: field and value
};

class pdu_malformed : public ::testing::TestWithParam<bad_pdu> {};

TEST_P(pdu_malformed, parse_error_names_the_field_and_value) {
    byte_buffer b = two_packets_pdu();
    GetParam().corrupt(b);
    if (GetParam().fix_crc) refix_crc(b);
    auto r = parse(b);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find(GetParam().expect), std::string::npos) << r.error();
}

INSTANTIATE_TEST_SUITE_P(
    mac_pdu, pdu_malformed,
    ::testing::Values(
        bad_pdu{"too_short", [](byte_buffer& b) { b.resize(19); }, false, "pdu.length: 19"},
        bad_pdu{"crc", [](byte_buffer& b) { b[20] ^= 1; }, false, "pdu.crc32: 0x4b449f17"},
        bad_pdu{"version", [](byte_buffer& b) { b[0] = 2; }, true, "pdu.version: 2"},
        bad_pdu{"flags", [](byte_buffer& b) { b[1] = 0x81; }, true, "pdu.flags: 129"},
        bad_pdu{"nan_price", [](byte_buffer& b) { put32(b, 8, 0x7FC00000); }, true,
                "pdu.price: 0x7fc00000"},
        bad_pdu{"negative_price", [](byte_buffer& b) { put32(b, 8, 0xBF800000); }, true,
                "pdu.price: 0xbf800000"},
        bad_pdu{"payload_len", [](byte_buffer& b) { put16(b, 14, 45); }, true,
                "pdu.payload_len: 45"},
        bad_pdu{"payload_len_short", [](byte_buffer& b) { put16(b, 14, 30); }, true,
                "pdu.payload_len: 30"},
        bad_pdu{"n_segments_many", [](byte_buffer& b) { put16(b, 12, 60000); }, true,
                "pdu.n_segments: 60000"},
        bad_pdu{"n_segments_one", [](byte_buffer& b) { put16(b, 12, 1); }, true,
                "pdu.payload_len: 25"},
        bad_pdu{"seg_len_past_payload", [](byte_buffer& b) { put16(b, 22, 200); }, true,
                "pdu.segment[0].seg_len: 200"},
        bad_pdu{"seg_len_zero", [](byte_buffer& b) { put16(b, 22, 0); }, true,
                "pdu.segment[0].seg_len: 0"},
        bad_pdu{"past_packet_len", [](byte_buffer& b) { put16(b, 18, 4); }, true,
                "pdu.segment[0].seg_len: 5"},
        bad_pdu{"packet_len_zero", [](byte_buffer& b) { put16(b, 18, 0); }, true,
                "pdu.segment[0].packet_len: 0"},
        bad_pdu{"continuation_not_first", [](byte_buffer& b) { put16(b, 33, 1); }, true,
                "pdu.segment[1].offset: 1"},
        bad_pdu{"unfinished_not_last", [](byte_buffer& b) { put16(b, 18, 6); }, true,
                "pdu.segment[0].seg_len: 5"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(mac_pdu, fuzzed_pdus_with_valid_crc_never_overread) {
    std::mt19937_64 rng(5);
    const byte_buffer base = two_packets_pdu();
    int ok = 0, bad = 0;
    for (int k = 0; k < 20000; ++k) {
        byte_buffer b = base;
        const int flips = 1 + static_cast<int>(rng() % 3);
        for (int f = 0; f < flips; ++f)
            b[rng() % (b.size() - 4)] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
        if (rng() % 4 == 0) b.resize(kMinPduBytes + rng() % (b.size() - kMinPduBytes));
        refix_crc(b);
        expected<pdu_view> r = error_info{""};
        ASSERT_NO_THROW(r = parse_view(b.data(), b.size()));
        if (!r.ok()) {
            ++bad;
            EXPECT_NE(r.error().find(": "), std::string::npos);
            continue;
        }
        ++ok;
        for (const segment_view& s : r->segments) {
            EXPECT_GE(s.data, b.data() + kHeaderBytes + kSegmentHeaderBytes);
            EXPECT_LE(s.data + s.seg_len, b.data() + b.size() - kCrcBytes);
            EXPECT_LE(std::size_t{s.offset} + s.seg_len, s.packet_len);
        }
    }
    EXPECT_GT(ok, 100);
    EXPECT_GT(bad, 100);
}

TEST(mac_pdu, serialize_rejects_bad_sizes_prices_and_segments) {
    mac_pdu p;
    p.segments = {seg(1, 10, 0, byte_buffer(10, 1))};
    EXPECT_NE(serialize(p, 19).error().find("pdu.tb_bytes: 19"), std::string::npos);
    EXPECT_NE(serialize(p, 70000).error().find("pdu.tb_bytes: 70000"), std::string::npos);
    EXPECT_NE(serialize(p, 37).error().find("pdu.tb_bytes: 37"), std::string::npos);  // needs 38
    EXPECT_TRUE(serialize(p, 38).ok());
    p.header.price_s = std::numeric_limits<float>::infinity();
    EXPECT_NE(serialize(p, 38).error().find("pdu.price"), std::string::npos);
    p.header.price_s = 0.5f;
    p.segments = {seg(1, 20, 0, byte_buffer(10, 1)), seg(2, 10, 0, byte_buffer(10, 1))};
    EXPECT_NE(serialize(p, 100).error().find("pdu.segment[0].seg_len: 10"), std::string::npos);
    p.segments = {seg(1, 10, 0, byte_buffer(10, 1)), seg(2, 20, 5, byte_buffer(10, 1))};
    EXPECT_NE(serialize(p, 100).error().find("pdu.segment[1].offset: 5"), std::string::npos);
}

// ---- Compact format ---------------------------------------------------------------------

namespace {

byte_buffer ipv4_packet(std::size_t size, std::uint8_t fill = 0x11) {
    byte_buffer p(size, fill);
    p[0] = 0x45;
    p[2] = static_cast<std::uint8_t>(size >> 8);
    p[3] = static_cast<std::uint8_t>(size);
    return p;
}

byte_buffer ipv6_packet(std::size_t size, std::uint8_t fill = 0x66) {
    byte_buffer p(size, fill);
    p[0] = 0x60;
    p[4] = static_cast<std::uint8_t>((size - 40) >> 8);
    p[5] = static_cast<std::uint8_t>(size - 40);
    return p;
}

}  // namespace

TEST(PduGolden, compact_priced_vector_parses_to_its_fields) {
    const byte_buffer b = vector_file("pdu_compact_priced.hex");
    ASSERT_EQ(b.size(), 36u);
    EXPECT_EQ(format_of(b[0]), pdu_format::compact);
    const auto v = parse_compact_view(b.data(), b.size());
    ASSERT_TRUE(v.ok()) << v.error();
    EXPECT_EQ(v->seq, 0x123);
    EXPECT_EQ(v->price_s, 0.25f);
    EXPECT_EQ(v->header_bytes, 8u);
    EXPECT_EQ(v->first, 3);
    EXPECT_EQ(v->continuation, 3u);
    ASSERT_EQ(v->packets.size(), 1u);
    EXPECT_EQ(v->packets[0].offset, 3u);
    EXPECT_EQ(v->packets[0].packet_len, 20u);
    EXPECT_TRUE(v->packets[0].complete());
    EXPECT_EQ(v->padding, 5u);
    // Serialising the parsed PDU gives the vector back.
    const auto p = parse_compact(b);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->continuation, str_bytes("abc"));
    EXPECT_EQ(serialize_compact(p.value(), 36).value(), b);
}

TEST(PduGolden, compact_vectors_with_a_cut_ipv6_header_and_a_bare_continuation) {
    const byte_buffer head = vector_file("pdu_compact_ipv6_head.hex");
    auto v = parse_compact_view(head.data(), head.size());
    ASSERT_TRUE(v.ok()) << v.error();
    EXPECT_EQ(v->seq, 0xFFF);
    EXPECT_FALSE(v->price_s);
    ASSERT_EQ(v->packets.size(), 1u);
    EXPECT_FALSE(v->packets[0].packet_len);  // bytes 4..5 are in the next PDU
    EXPECT_EQ(v->packets[0].bytes, 4u);
    const byte_buffer cont = vector_file("pdu_compact_continuation.hex");
    v = parse_compact_view(cont.data(), cont.size());
    ASSERT_TRUE(v.ok()) << v.error();
    EXPECT_EQ(v->seq, 7);
    EXPECT_FALSE(v->first);
    EXPECT_EQ(v->continuation, 4u);
    EXPECT_TRUE(v->packets.empty());
    compact_pdu p;
    p.seq = 7;
    p.continuation = str_bytes("wxyz");
    EXPECT_EQ(serialize_compact(p, 8).value(), cont);  // filling the payload: first = 0xFFFF
}

TEST(compact_pdu, the_first_byte_tells_the_formats_apart) {
    for (int b = 0; b < 256; ++b) {
        const auto f = format_of(static_cast<std::uint8_t>(b));
        if (b == 0x01)
            EXPECT_EQ(f, pdu_format::standard);
        else if (b >= 0x80 && b <= 0xBF)
            EXPECT_EQ(f, pdu_format::compact) << b;
        else
            EXPECT_FALSE(f) << b;
    }
    EXPECT_EQ(format_of(two_packets_pdu()[0]), pdu_format::standard);
}

TEST(compact_pdu, an_8_byte_tb_carries_4_bytes_and_the_usable_minimum_follows_the_format) {
    EXPECT_EQ(min_usable_tb_bytes(pdu_format::standard), 29u);
    EXPECT_EQ(min_usable_tb_bytes(pdu_format::compact), 5u);
    EXPECT_EQ(data_capacity(pdu_format::compact, 8, false), 4u);
    EXPECT_EQ(data_capacity(pdu_format::compact, 8, true), 4u);  // price left out
    EXPECT_EQ(data_capacity(pdu_format::compact, 16, true), 8u);
    EXPECT_EQ(data_capacity(pdu_format::compact, 4, false), 0u);
    EXPECT_EQ(data_capacity(pdu_format::standard, 28, true), 0u);
    EXPECT_EQ(data_capacity(pdu_format::standard, 32, true), 4u);
    EXPECT_EQ(pdu_format_from_string("compact"), pdu_format::compact);
    EXPECT_FALSE(pdu_format_from_string("tiny"));
}

TEST(compact_pdu, ip_packet_length_reads_ipv4_and_ipv6_headers_and_names_bad_fields) {
    const byte_buffer v4 = ipv4_packet(1500), v6 = ipv6_packet(1280);
    EXPECT_EQ(ip_packet_length(v4.data(), v4.size()).value(), 1500u);
    EXPECT_EQ(ip_packet_length(v4.data(), 3).value(), std::nullopt);  // length at bytes 2..3
    EXPECT_EQ(ip_packet_length(v6.data(), v6.size()).value(), 1280u);
    EXPECT_EQ(ip_packet_length(v6.data(), 5).value(), std::nullopt);  // length at bytes 4..5
    auto bad = [](byte_buffer b, const std::string& what) {
        const auto r = ip_packet_length(b.data(), b.size(), "p.");
        ASSERT_FALSE(r.ok()) << what;
        EXPECT_NE(r.error().find(what), std::string::npos) << r.error();
    };
    bad({0x00}, "p.version: 0");
    bad({0x44, 0, 0, 20}, "p.ipv4_ihl: 4");
    bad({0x46, 0, 0, 20}, "p.ipv4_total_length: 20 is below the header's 24 bytes");
    bad({0x60, 0, 0, 0, 0xff, 0xd8}, "p.ipv6_payload_length: 65496");
}

TEST(compact_pdu, random_pdus_round_trip) {
    std::mt19937_64 rng(11);
    for (int trial = 0; trial < 300; ++trial) {
        compact_pdu p;
        p.seq = static_cast<std::uint16_t>(rng() % 4096);
        if (rng() % 2) p.price_s = static_cast<float>(rng() % 1000) / 100.0f;
        p.continuation.resize(rng() % 30);
        for (auto& b : p.continuation) b = static_cast<std::uint8_t>(rng());
        std::size_t bytes = p.continuation.size();
        const int n = static_cast<int>(rng() % 4);
        for (int i = 0; i < n; ++i) {
            p.packets.push_back(rng() % 2 ? ipv4_packet(20 + rng() % 100)
                                          : ipv6_packet(40 + rng() % 100));
            bytes += p.packets.back().size();
        }
        const std::size_t hdr = p.price_s ? 8 : 4;
        const bool cut = !p.packets.empty() && rng() % 2;
        std::size_t tb = hdr + std::max<std::size_t>(bytes, 1) + (cut ? 0 : rng() % 20);
        if (cut) {  // the last packet keeps only its head and runs to the TB's end
            const std::size_t keep = 1 + rng() % (p.packets.back().size() - 1);
            tb -= p.packets.back().size() - keep;
            p.packets.back().resize(keep);
        }
        if (bytes == 0) p.continuation = {0x42}, tb = std::max(tb, hdr + 1);
        const auto s = serialize_compact(p, tb);
        ASSERT_TRUE(s.ok()) << trial << ": " << s.error();
        ASSERT_EQ(s.value().size(), tb);
        const auto back = parse_compact(s.value());
        ASSERT_TRUE(back.ok()) << trial << ": " << back.error();
        EXPECT_EQ(back->seq, p.seq);
        EXPECT_EQ(back->price_s, p.price_s);
        EXPECT_EQ(back->continuation, p.continuation) << trial;
        EXPECT_EQ(back->packets, p.packets) << trial;
    }
}

TEST(compact_pdu, serialize_rejects_what_the_client_could_not_parse_naming_the_field) {
    auto expect_error = [](const compact_pdu& p, std::size_t tb, const std::string& what) {
        const auto r = serialize_compact(p, tb);
        ASSERT_FALSE(r.ok()) << what;
        EXPECT_NE(r.error().find(what), std::string::npos) << r.error();
    };
    compact_pdu p;
    expect_error(p, 4, "pdu.tb_bytes: 4 not in [5, 65535]");
    p.price_s = 1.0f;
    expect_error(p, 8, "pdu.tb_bytes: 8 not in [9, 65535]");
    p.price_s = -1.0f;
    expect_error(p, 20, "pdu.price: -1");
    p = compact_pdu{};
    p.seq = 4096;
    expect_error(p, 8, "pdu.seq: 4096");
    p = compact_pdu{};
    p.packets = {ipv4_packet(20)};
    expect_error(p, 23, "pdu.tb_bytes: 23 is below the 24 bytes");
    const byte_buffer p30 = ipv4_packet(30);
    const byte_buffer head(p30.begin(), p30.begin() + 10);
    p.packets = {head, ipv4_packet(20)};
    expect_error(p, 64, "pdu.packet[0].length: 10 bytes: only the last packet may be cut");
    p.packets = {head};
    expect_error(p, 64, "pdu.packet[0].length: 10 bytes: a cut packet must run to the end");
    byte_buffer longer = ipv4_packet(20);
    longer.push_back(0);
    p.packets = {longer};
    expect_error(p, 64, "pdu.packet[0].length: 21 bytes exceed the 20 its IP header gives");
    p.packets = {byte_buffer{0x50, 1, 2, 3}};
    expect_error(p, 64, "pdu.packet[0].version: 5");
}
