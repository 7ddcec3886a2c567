#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "oppsched/crc32.h"
#include "oppsched/wire.h"

using namespace oppsched;
using namespace oppsched::wire;

namespace {
std::vector<message> one_of_each() {
    slot_grant g;
    g.slot = 123456789012ull;
    g.empty = false;
    g.user = 3;
    g.mcs = 5;
    g.harq_pid = 7;
    g.ndi = 1;
    g.rv = 2;
    g.tb = {1, 2, 3, 4, 5};
    rx_indication rx;
    rx.slot = 42;
    rx.user = 2;
    rx.mcs = 7;
    rx.header_ok = rx.addressed = rx.crc_ok = true;
    rx.snr_db = 17.25f;
    rx.cqi = 11;
    rx.combined = 2;
    rx.tb = std::vector<std::uint8_t>(300, 0xab);
    return {slot_request{99, -5},
            g,
            rx,
            cqi_report{4, 77, -3.5f, 2},
            harq_feedback{1, 8, 3, true},
            uplink_packet{9, std::vector<std::uint8_t>(1500, 0x45)},
            uplink_grant{2, 1000, 123456789, 4, 3, 1, 2, 612},
            uplink_tb{2, 1000, 3, 1, 65000, 44, std::vector<std::uint8_t>(612, 0x3c)},
            buffer_status{5, 998, 1ull << 40, 100000}};
}

std::string hex(const std::vector<std::uint8_t>& v) {
    static const char* d = "0123456789abcdef";
    std::string s;
    for (auto b : v) {
        s += d[b >> 4];
        s += d[b & 15];
    }
    return s;
}
}  // namespace

TEST(Wire, every_message_type_round_trips_with_its_sequence_number) {
    std::uint32_t seq = 1000;
    for (const auto& m : one_of_each()) {
        const auto f = encode(m, seq);
        const auto r = decode(f);
        ASSERT_TRUE(r.ok()) << r.error();
        EXPECT_EQ(r->seq, seq);
        EXPECT_EQ(r->msg, m) << to_string(type_of(m));
        ++seq;
    }
}

// Golden vectors: the byte layout documented in wire.h. A change here breaks every peer.
TEST(Wire, golden_cqi_report_and_slot_request_bytes) {
    // Expected bytes made independently with Python: struct.pack(">IBBHII", ...) + zlib.crc32.
    EXPECT_EQ(hex(encode(cqi_report{4, 77, -3.5f, 2}, 7)),
              "4f505053"
              "01"
              "04"
              "0000"
              "00000007"
              "0000000f"  // header
              "0004"
              "000000000000004d"
              "c0600000"
              "02"          // user slot snr cqi
              "68d20488");  // CRC-32
    const auto req = encode(slot_request{1, 1667000}, 0);
    ASSERT_EQ(req.size(), 16u + 16u + 4u);
    EXPECT_EQ(hex(std::vector<std::uint8_t>(req.begin(), req.begin() + 32)),
              "4f5050530101000000000000000000100000000000000001"
              "0000000000196fb8");
    const std::uint32_t crc = crc32(req.data(), 32);
    EXPECT_EQ((std::uint32_t(req[32]) << 24) | (req[33] << 16) | (req[34] << 8) | req[35], crc);
}

TEST(Wire, golden_uplink_slot_grant_bytes) {
    // Station 2's uplink TB in slot 5 (shared medium): flags bit1. Expected bytes made
    // independently with Python: struct.pack(">QBHBBBBH", 5, 2, 2, 3, 1, 1, 2, 3) + tb,
    // after the header, then zlib.crc32 of everything before it.
    slot_grant g;
    g.slot = 5;
    g.empty = false;
    g.uplink = true;
    g.user = 2;
    g.mcs = 3;
    g.harq_pid = 1;
    g.ndi = 1;
    g.rv = 2;
    g.tb = {0xde, 0xad, 0xbe};
    const auto f = encode(g, 3);
    EXPECT_EQ(hex(std::vector<std::uint8_t>(f.begin(), f.end() - 4)),
              "4f505053010200000000000300000014"  // header: type 2, seq 3, body 20
              "0000000000000005"
              "02"
              "0002"
              "03010102"
              "0003"
              "deadbe");  // slot flags(uplink) user mcs pid ndi rv tb_len tb
    const auto r = decode(f);
    ASSERT_TRUE(r.ok()) << r.error();
    const auto& back = std::get<slot_grant>(r->msg);
    EXPECT_TRUE(back.uplink);
    EXPECT_EQ(back, g);
}

TEST(Wire, truncated_flipped_and_garbage_frames_return_errors_never_crash) {
    std::mt19937_64 rng(12345);
    std::size_t rejected = 0, total = 0;
    for (const auto& m : one_of_each()) {
        const auto f = encode(m, 1);
        for (std::size_t cut = 0; cut < f.size(); ++cut, ++total) {
            std::vector<std::uint8_t> t(f.begin(), f.begin() + cut);
            if (!decode(t).ok()) ++rejected;
        }
        for (int i = 0; i < 2000; ++i, ++total) {
            auto t = f;
            t[rng() % t.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
            if (!decode(t).ok()) ++rejected;  // the CRC catches every single-bit flip
        }
    }
    EXPECT_EQ(rejected, total);
    for (int i = 0; i < 5000; ++i) {
        std::vector<std::uint8_t> g(rng() % 200);
        for (auto& b : g) b = static_cast<std::uint8_t>(rng());
        EXPECT_FALSE(decode(g).ok());
    }
}

// The test above stops at the CRC; here it is recomputed after each flip, so the flips reach
// the header and body checks (tests/fuzz/fuzz_wire_decode.cc does the same under libFuzzer).
TEST(Wire, flipped_frames_with_a_recomputed_crc_are_rejected_by_field_or_re_encode_exactly) {
    std::mt19937_64 rng(54321);
    std::size_t body_errors = 0, accepted = 0;
    for (const auto& m : one_of_each()) {
        const auto f = encode(m, 1);
        for (int i = 0; i < 3000; ++i) {
            auto t = f;
            // Flip a bit in the header or the first bytes of the body, not in the CRC.
            const std::size_t span = std::min<std::size_t>(t.size() - kTrailerLen, 40);
            t[rng() % span] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
            const std::uint32_t crc = crc32(t.data(), t.size() - kTrailerLen);
            for (int k = 0; k < 4; ++k)
                t[t.size() - 1 - k] = static_cast<std::uint8_t>(crc >> (8 * k));
            const auto r = decode(t);
            if (!r.ok()) {
                EXPECT_EQ(r.error().find("frame.crc"), std::string::npos) << r.error();
                EXPECT_NE(r.error().find(": "), std::string::npos) << r.error();
                if (r.error().rfind("header.", 0) != 0) ++body_errors;
                continue;
            }
            ++accepted;  // a flip in a value: the frame says something else, exactly
            EXPECT_EQ(encode(r->msg, r->seq), t);
        }
    }
    EXPECT_GT(body_errors, 100u);  // flags, bools and lengths caught by the body decoder
    EXPECT_GT(accepted, 1000u);    // flips in plain values decode
}

TEST(Wire, errors_name_the_field_and_value) {
    auto f = encode(harq_feedback{1, 2, 3, true}, 5);
    f[5] = 77;  // type
    // fix the CRC so the type check is what fails
    const auto crc = crc32(f.data(), f.size() - 4);
    for (int i = 0; i < 4; ++i)
        f[f.size() - 4 + i] = static_cast<std::uint8_t>(crc >> (8 * (3 - i)));
    const auto r = decode(f);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), "header.type: 77 is not a known message type (1..9)");

    const auto big = encode(uplink_packet{1, std::vector<std::uint8_t>(1000)}, 1);
    const auto r2 = decode(big.data(), big.size(), 512);
    ASSERT_FALSE(r2.ok());
    EXPECT_NE(r2.error().find("exceed the limit of 512"), std::string::npos);
}

namespace {
// Sets byte `at` of an encoded frame and recomputes the CRC, so only that byte is wrong.
std::vector<std::uint8_t> with_byte(std::vector<std::uint8_t> f, std::size_t at, std::uint8_t v) {
    f[at] = v;
    const auto crc = crc32(f.data(), f.size() - 4);
    for (int i = 0; i < 4; ++i)
        f[f.size() - 4 + i] = static_cast<std::uint8_t>(crc >> (8 * (3 - i)));
    return f;
}
}  // namespace

TEST(Wire, header_reserved_bits_are_rejected_naming_the_field_and_value) {
    const auto f = encode(harq_feedback{1, 2, 3, true}, 5);
    ASSERT_TRUE(decode(with_byte(f, 6, 0)).ok());
    const auto hi = decode(with_byte(f, 6, 0x80));
    ASSERT_FALSE(hi.ok());
    EXPECT_EQ(hi.error(), "header.reserved: 0x8000 is not 0");
    const auto lo = decode(with_byte(f, 7, 0x01));
    ASSERT_FALSE(lo.ok());
    EXPECT_EQ(lo.error(), "header.reserved: 0x1 is not 0");
}

TEST(Wire, unknown_flag_bits_are_rejected_naming_the_message_field_and_value) {
    // slot_grant.flags (body offset 8: after the u64 slot) knows bits 0 (empty) and 1 (uplink).
    slot_grant g;
    g.slot = 9;
    g.empty = true;
    const auto gf = encode(g, 1);
    ASSERT_EQ(gf[16 + 8], 0x01);
    EXPECT_TRUE(decode(with_byte(gf, 16 + 8, 0x03)).ok());
    const auto rg = decode(with_byte(gf, 16 + 8, 0x05));
    ASSERT_FALSE(rg.ok());
    EXPECT_EQ(rg.error(), "slot_grant.flags: 0x5 sets reserved bits 0x4 (known: 0x3)");

    // rx_indication.flags (body offset 14) knows bits 0..2; bit 7 is reserved.
    rx_indication rx;
    rx.header_ok = rx.addressed = rx.crc_ok = true;
    const auto xf = encode(rx, 1);
    ASSERT_EQ(xf[16 + 14], 0x07);
    EXPECT_TRUE(decode(with_byte(xf, 16 + 14, 0x05)).ok());
    const auto rx_bad = decode(with_byte(xf, 16 + 14, 0x87));
    ASSERT_FALSE(rx_bad.ok());
    EXPECT_EQ(rx_bad.error(), "rx_indication.flags: 0x87 sets reserved bits 0x80 (known: 0x7)");
}

TEST(Wire, oversized_payload_cannot_be_encoded) {
    uplink_packet p{1, std::vector<std::uint8_t>(70000)};
    EXPECT_THROW(encode(p, 1), std::invalid_argument);
}

TEST(seq_tracker, counts_gaps_reordering_and_peer_restarts) {
    seq_tracker t;
    EXPECT_EQ(t.on_receive(10), 0u);
    EXPECT_EQ(t.on_receive(11), 0u);
    EXPECT_EQ(t.on_receive(15), 3u);  // 12, 13, 14 missing
    EXPECT_EQ(t.on_receive(13), 0u);  // late
    EXPECT_EQ(t.on_receive(0), 0u);   // restart
    EXPECT_EQ(t.on_receive(1), 0u);
    EXPECT_EQ(t.stats().lost, 3u);
    EXPECT_EQ(t.stats().out_of_order, 1u);
    EXPECT_EQ(t.stats().restarts, 1u);
    EXPECT_EQ(t.stats().received, 6u);
    seq_tracker w;  // wrap-around is in sequence
    w.on_receive(0xffffffffu);
    EXPECT_EQ(w.on_receive(0), 0u);
    EXPECT_EQ(w.stats().lost, 0u);
}
