// The MAC session (pdu.h): the trailer in both formats (golden vectors), the segmenter that
// announces it until the client ACKs a PDU carrying it, and the reassembler that resynchronises
// on a new session (an AP restart) and drops, never skips to, a PDU far ahead.
#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <fstream>
#include <string>
#include <vector>

#include "oppsched/pdu.h"
#include "oppsched/segmentation.h"

using namespace oppsched;
using namespace oppsched::pdu;

namespace {

using byte_buffer = std::vector<std::uint8_t>;

byte_buffer vector_file(const std::string& name) {
    std::ifstream f(std::string(OPPSCHED_MAC_TEST_VECTORS) + "/" + name);
    EXPECT_TRUE(f.good()) << name;
    std::string h;
    std::getline(f, h);
    byte_buffer b;
    for (std::size_t i = 0; i + 1 < h.size(); i += 2)
        b.push_back(static_cast<std::uint8_t>(std::stoul(h.substr(i, 2), nullptr, 16)));
    return b;
}

byte_buffer str_bytes(const char* s) {
    return byte_buffer(s, s + std::char_traits<char>::length(s));
}

// An IPv4 packet of `size` bytes (the compact format reads lengths from IP headers), its
// payload distinct per id.
ip_packet ip(std::uint64_t id, std::size_t size) {
    ip_packet p;
    p.id = id;
    p.data.assign(size, 0);
    p.data[0] = 0x45;
    p.data[2] = static_cast<std::uint8_t>(size >> 8);
    p.data[3] = static_cast<std::uint8_t>(size);
    for (std::size_t i = 20; i < size; ++i) p.data[i] = static_cast<std::uint8_t>(id * 7 + i);
    return p;
}

struct fifo {
    std::deque<ip_packet> q;
    packet_source source() {
        return [this]() -> std::optional<ip_packet> {
            if (q.empty()) return std::nullopt;
            ip_packet p = std::move(q.front());
            q.pop_front();
            return p;
        };
    }
};

segmenter make_segmenter(pdu_format f, std::optional<std::uint16_t> session) {
    segmenter_params p;
    p.format = f;
    p.session = session;
    return segmenter(p);
}

reassembler_params rparams() {
    reassembler_params p;
    p.window = 16;
    p.timeout = 10 * kNsPerMs;
    return p;
}

}  // namespace

TEST(PduGolden, standard_session_vector_parses_to_its_fields_and_serialises_back) {
    const byte_buffer b = vector_file("pdu_v1_session.hex");
    ASSERT_EQ(b.size(), 40u);
    const auto v = parse_view(b.data(), b.size());
    ASSERT_TRUE(v.ok()) << v.error();
    EXPECT_EQ(v->header.user, 2);
    EXPECT_EQ(v->header.seq, 0u);
    EXPECT_FALSE(v->header.price_s);
    EXPECT_EQ(v->header.session, 0xBEEF);
    ASSERT_EQ(v->segments.size(), 1u);
    EXPECT_EQ(byte_buffer(v->segments[0].data, v->segments[0].data + 5), str_bytes("hello"));
    EXPECT_EQ(v->padding, 5u);
    EXPECT_EQ(peek_header(b.data(), b.size()).value().session, 0xBEEF);
    const auto p = parse(b);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(serialize(p.value(), 40).value(), b);
}

TEST(PduGolden, compact_session_vector_parses_to_its_fields_and_serialises_back) {
    const byte_buffer b = vector_file("pdu_compact_session.hex");
    ASSERT_EQ(b.size(), 12u);
    const auto v = parse_compact_view(b.data(), b.size());
    ASSERT_TRUE(v.ok()) << v.error();
    EXPECT_EQ(v->seq, 0);
    EXPECT_EQ(v->session, 0xBEEF);
    EXPECT_FALSE(v->first);
    EXPECT_EQ(v->payload_len, 6u);  // 12 - 4 header - 2 trailer
    EXPECT_EQ(v->continuation, 6u);
    EXPECT_EQ(peek_header(b.data(), b.size()).value().session, 0xBEEF);
    const auto p = parse_compact(b);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->continuation, str_bytes("abcdef"));
    EXPECT_EQ(serialize_compact(p.value(), 12).value(), b);
}

TEST(mac_session, a_pdu_too_short_for_its_session_trailer_is_refused_naming_the_length) {
    byte_buffer c = {0x90, 0x00, 0xFF, 0xFF, 0x61, 0xBE};  // SESSION set, 6 bytes
    const auto v = parse_compact_view(c.data(), c.size());
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.error().find("pdu.length: 6"), std::string::npos) << v.error();
    // A standard PDU whose trailer would overlap its segments: payload_len too long.
    mac_pdu p;
    p.header.session = 1;
    pdu_segment s;
    s.packet_len = 5;
    s.data = str_bytes("hello");
    p.segments = {s};
    EXPECT_FALSE(serialize(p, 34).ok());  // 16 + 13 + 2 + 4 = 35 needed
    EXPECT_TRUE(serialize(p, 35).ok());
}

TEST(segmenter, announces_the_session_in_every_pdu_until_one_carrying_it_is_acked) {
    for (const pdu_format f : {pdu_format::standard, pdu_format::compact}) {
        fifo q;
        q.q.push_back(ip(0, 1000));  // one packet longer than the TBs: each TB is full
        segmenter s = make_segmenter(f, 0x1234);
        const built_tb a = s.build(64, q.source());
        const built_tb b = s.build(64, q.source());
        EXPECT_TRUE(a.record.session);
        EXPECT_TRUE(b.record.session);
        EXPECT_EQ(peek_header(a.bytes.data(), a.bytes.size()).value().session, 0x1234);
        s.session_acked();
        const built_tb c = s.build(64, q.source());
        EXPECT_FALSE(c.record.session);
        EXPECT_FALSE(peek_header(c.bytes.data(), c.bytes.size()).value().session);
        EXPECT_EQ(s.stats().sessions_sent, 2u);
        // The trailer takes 2 data bytes from the TBs that carry it, nothing from the others.
        EXPECT_EQ(a.record.data_bytes + 2, c.record.data_bytes) << to_string(f);
    }
    // Without a session nothing is ever written.
    fifo q;
    q.q.push_back(ip(0, 40));
    segmenter none = make_segmenter(pdu_format::standard, std::nullopt);
    EXPECT_FALSE(none.build(64, q.source()).record.session);
}

TEST(segmenter, a_compact_tb_without_room_for_the_trailer_and_a_byte_goes_without_it) {
    fifo q;
    q.q.push_back(ip(0, 40));
    segmenter s = make_segmenter(pdu_format::compact, 7);
    EXPECT_FALSE(s.build(6, q.source()).record.session);  // 4 + 2 leaves no data byte
    EXPECT_EQ(s.stats().sessions_omitted, 1u);
    const built_tb t = s.build(8, q.source());  // 4 + 2 + 2 data bytes
    EXPECT_TRUE(t.record.session);
    EXPECT_EQ(t.record.data_bytes, 2u);
}

// An AP runs session 1 to sequence 40 with a packet split across TBs, dies, and comes back
// as session 2 from sequence 0: the client resynchronises and delivers the new session's
// packets, and counts the packet in progress as lost by the restart.
TEST(reassembler, a_new_session_restarts_the_stream_at_0_and_counts_what_it_gave_up) {
    for (const pdu_format f : {pdu_format::standard, pdu_format::compact}) {
        SCOPED_TRACE(to_string(f));
        segmenter_params sp;
        sp.format = f;
        sp.session = 1;
        segmenter old(sp);
        fifo q;
        for (int i = 0; i < 200; ++i) q.q.push_back(ip(static_cast<std::uint64_t>(i), 30));
        reassembler r(rparams());
        std::size_t delivered = 0;
        time_ns t = 0;
        for (int k = 0; k < 41; ++k) {
            const built_tb tb = old.build(k == 0 ? 64 : 40, q.source());
            if (k == 0) old.session_acked();  // the client ACKed the first TB
            delivered += r.on_pdu(tb.bytes, ++t).size();
        }
        ASSERT_TRUE(old.has_partial());  // a packet is split: its tail never comes
        const std::size_t before = delivered;
        EXPECT_EQ(r.session(), 1);

        segmenter_params np = sp;
        np.session = 2;
        segmenter fresh(np);
        fifo q2;
        for (int i = 0; i < 5; ++i) q2.q.push_back(ip(100 + static_cast<std::uint64_t>(i), 30));
        std::vector<built_tb> tbs;
        for (int k = 0; k < 5; ++k) tbs.push_back(fresh.build(64, q2.source()));
        // HARQ reorders: seq 1 arrives before seq 0; both carry the new session.
        delivered += r.on_pdu(tbs[1].bytes, ++t).size();
        delivered += r.on_pdu(tbs[0].bytes, ++t).size();
        fresh.session_acked();
        for (int k = 2; k < 5; ++k)
            delivered += r.on_pdu(tbs[static_cast<std::size_t>(k)].bytes, ++t).size();
        EXPECT_EQ(delivered - before, 5u);
        EXPECT_EQ(r.stats().session_restarts, 1u);
        EXPECT_EQ(r.stats().dropped_restart, 1u);  // the old session's packet in progress
        EXPECT_EQ(r.stats().duplicates, 0u);
        EXPECT_EQ(r.session(), 2);
        // A repeat of the new session's first PDU is a HARQ duplicate, not another restart.
        EXPECT_TRUE(r.on_pdu(tbs[0].bytes, ++t).empty());
        EXPECT_EQ(r.stats().session_restarts, 1u);
    }
}

TEST(reassembler, a_pdu_far_ahead_is_dropped_and_counted_never_skipped_to) {
    segmenter s = make_segmenter(pdu_format::standard, std::nullopt);
    fifo q;
    for (int i = 0; i < 4; ++i) q.q.push_back(ip(static_cast<std::uint64_t>(i), 30));
    std::vector<built_tb> tbs;
    for (int k = 0; k < 4; ++k) tbs.push_back(s.build(64, q.source()));
    reassembler r(rparams());
    EXPECT_EQ(r.on_pdu(tbs[0].bytes, 1).size(), 1u);
    EXPECT_TRUE(r.on_pdu(tbs[2].bytes, 2).empty());  // seq 1 missing: buffered
    // A forged (or stale) PDU 5000 ahead, valid in every field.
    mac_pdu forged;
    forged.header.seq = 5000;
    pdu_segment seg;
    seg.packet_seq = 4000;
    seg.data = ip(99, 30).data;
    seg.packet_len = 30;
    forged.segments = {seg};
    EXPECT_TRUE(r.on_pdu(serialize(forged, 64).value(), 3).empty());
    EXPECT_TRUE(r.on_lost(6000, 3).empty());  // a far loss report is dropped as well
    EXPECT_EQ(r.stats().far_ahead, 2u);
    EXPECT_EQ(r.stats().tbs_given_up, 0u);
    EXPECT_EQ(r.next_seq(), 1u);
    // The stream goes on where it was: seq 1 fills the gap, 2 and 3 follow.
    EXPECT_EQ(r.on_pdu(tbs[1].bytes, 4).size(), 2u);
    EXPECT_EQ(r.on_pdu(tbs[3].bytes, 5).size(), 1u);
    EXPECT_EQ(r.stats().dropped_timeout + r.stats().dropped_incomplete, 0u);
    EXPECT_THROW(
        [] {
            reassembler_params bad;
            bad.max_ahead = 0;
            reassembler{bad};
        }(),
        std::invalid_argument);
}

TEST(reassembler, a_late_pdu_of_the_replaced_session_is_dropped_and_does_not_flip_the_stream_back) {
    fifo q;
    for (int i = 0; i < 8; ++i) q.q.push_back(ip(static_cast<std::uint64_t>(i), 30));
    segmenter a = make_segmenter(pdu_format::standard, 1);
    const built_tb a0 = a.build(64, q.source());
    const built_tb a1 = a.build(64, q.source());  // delayed on its way
    segmenter b = make_segmenter(pdu_format::standard, 2);
    const built_tb b0 = b.build(64, q.source());
    const built_tb b1 = b.build(64, q.source());
    reassembler r(rparams());
    EXPECT_EQ(r.on_pdu(a0.bytes, 1).size(), 1u);
    EXPECT_EQ(r.on_pdu(b0.bytes, 2).size(), 1u);
    EXPECT_TRUE(r.on_pdu(a1.bytes, 3).empty());
    EXPECT_EQ(r.stats().stale_session, 1u);
    EXPECT_EQ(r.session(), 2);
    EXPECT_EQ(r.on_pdu(b1.bytes, 4).size(), 1u);
    EXPECT_EQ(r.stats().session_restarts, 1u);
}
