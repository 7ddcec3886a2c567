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
