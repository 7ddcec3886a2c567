// Tests of oppsched/segmentation.h: the segmenter fills TBs from a packet source, the
// reassembler delivers in order despite reordering, loss, duplicates, timeouts and its
// memory cap, and drops exactly the packets a lost TB carried.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <set>
#include <stdexcept>
#include <string>

#include "oppsched/segmentation.h"

using namespace oppsched;
using namespace oppsched::pdu;

namespace {

using byte_buffer = std::vector<std::uint8_t>;

ip_packet make_packet(std::uint64_t id, std::size_t size, std::uint8_t fill = 0) {
    ip_packet p;
    p.id = id;
    p.data.resize(size);
    for (std::size_t i = 0; i < size; ++i)
        p.data[i] = static_cast<std::uint8_t>(fill + id * 31 + i);  // distinct per packet
    return p;
}

// A FIFO of packets with a source callback, as a queue/AQM would provide.
struct test_queue {
    std::deque<ip_packet> q;
    int calls = 0;
    packet_source source() {
        return [this]() -> std::optional<ip_packet> {
            ++calls;
            if (q.empty()) return std::nullopt;
            ip_packet p = std::move(q.front());
            q.pop_front();
            return p;
        };
    }
};

std::vector<ip_packet> make_packets(std::mt19937_64& rng, int n, std::size_t max_size) {
    std::vector<ip_packet> v;
    for (int i = 0; i < n; ++i) {
        ip_packet p = make_packet(static_cast<std::uint64_t>(i), 1 + rng() % max_size);
        for (auto& b : p.data) b = static_cast<std::uint8_t>(rng());
        v.push_back(std::move(p));
    }
    return v;
}

// Segments all packets into TBs of random sizes in [min_tb, max_tb].
std::vector<built_tb> segment_all(std::mt19937_64& rng, const std::vector<ip_packet>& packets,
                                  std::size_t min_tb, std::size_t max_tb) {
    test_queue q;
    q.q.assign(packets.begin(), packets.end());
    segmenter s;
    std::vector<built_tb> tbs;
    while (!q.q.empty() || s.has_partial())
        tbs.push_back(s.build(min_tb + rng() % (max_tb - min_tb + 1), q.source()));
    return tbs;
}

// Packet ids a TB carried any part of.
std::set<std::uint64_t> carried(const built_tb& tb) {
    std::set<std::uint64_t> ids;
    for (const auto& s : tb.record.segments) ids.insert(s.packet_id);
    return ids;
}

reassembler_params params(std::uint32_t window = 16, time_ns timeout = 10 * kNsPerMs) {
    reassembler_params p;
    p.window = window;
    p.timeout = timeout;
    return p;
}

void append(reassembler::delivered_packets& out, reassembler::delivered_packets more) {
    for (auto& p : more) out.push_back(std::move(p));
}

// A TB of this size carries exactly one 50-byte packet: 16 + 8 + 50 + 4.
constexpr std::size_t kOneEach = 78;

std::uint64_t dropped(const reassembler_stats& s) {
    return s.dropped_incomplete + s.dropped_timeout + s.dropped_memory;
}

}  // namespace

// ---- Segmenter -------------------------------------------------------------------------

TEST(segmenter, several_packets_share_one_tb_with_padding_when_the_queue_runs_dry) {
    test_queue q;
    for (int i = 0; i < 3; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 40));
    segmenter s(segmenter_params{4, 100, 0});
    const built_tb tb = s.build(200, q.source(), 0.125f);
    ASSERT_EQ(tb.bytes.size(), 200u);
    ASSERT_EQ(tb.record.segments.size(), 3u);
    for (const auto& r : tb.record.segments) EXPECT_TRUE(r.first() && r.last());
    EXPECT_EQ(tb.record.data_bytes, 120u);
    EXPECT_EQ(tb.record.padding, 200u - 16 - 3 * 48 - 4);
    EXPECT_EQ(tb.record.seq, 100u);
    auto p = parse(tb.bytes);
    ASSERT_TRUE(p.ok()) << p.error();
    EXPECT_EQ(p->header.user, 4);
    EXPECT_EQ(p->header.price_s, 0.125f);
    EXPECT_EQ(p->segments[2].data, make_packet(2, 40).data);
    // Padding is zeros.
    for (std::size_t i = 16 + 3 * 48; i < 196; ++i) ASSERT_EQ(tb.bytes[i], 0) << i;
    EXPECT_EQ(s.next_seq(), 101u);
    EXPECT_EQ(s.stats().padding_bytes, tb.record.padding);
}

TEST(segmenter, a_partially_sent_packet_continues_at_the_start_of_the_next_tb) {
    test_queue q;
    q.q.push_back(make_packet(0, 30));
    q.q.push_back(make_packet(1, 100));
    q.q.push_back(make_packet(2, 10));
    segmenter s;
    const built_tb a = s.build(100, q.source());  // 80 bytes usable: 8+30, then 8+34 of #1
    ASSERT_EQ(a.record.segments.size(), 2u);
    EXPECT_EQ(a.record.segments[1].packet_id, 1u);
    EXPECT_EQ(a.record.segments[1].seg_len, 34);
    EXPECT_FALSE(a.record.segments[1].last());
    EXPECT_EQ(a.record.padding, 0u);
    EXPECT_EQ(s.partial_remaining(), 66u);
    const built_tb b = s.build(100, q.source());  // 8+66 rest of #1, then 8+10... no: 6 left
    ASSERT_GE(b.record.segments.size(), 1u);
    EXPECT_EQ(b.record.segments[0].packet_id, 1u);
    EXPECT_EQ(b.record.segments[0].offset, 34);
    EXPECT_TRUE(b.record.segments[0].last());
    // 80 - 74 = 6 bytes left: not enough for a segment header and a byte, so packet #2
    // is not pulled from the queue (a pulled packet always starts in the TB).
    EXPECT_EQ(b.record.segments.size(), 1u);
    EXPECT_EQ(q.q.size(), 1u);
    EXPECT_EQ(b.record.padding, 6u);
    const built_tb c = s.build(100, q.source());
    ASSERT_EQ(c.record.segments.size(), 1u);
    EXPECT_EQ(c.record.segments[0].packet_id, 2u);
    EXPECT_EQ(c.record.segments[0].packet_seq, 2);
}

TEST(segmenter, an_empty_queue_gives_a_padding_only_pdu) {
    test_queue q;
    segmenter s;
    const built_tb tb = s.build(64, q.source());
    EXPECT_TRUE(tb.record.segments.empty());
    EXPECT_EQ(tb.record.padding, 44u);
    EXPECT_TRUE(parse(tb.bytes).ok());
    EXPECT_EQ(s.build(64, nullptr).record.seq, 1u);  // no source at all is fine too
}

TEST(segmenter, empty_and_oversized_packets_are_rejected_not_sent) {
    test_queue q;
    q.q.push_back(make_packet(0, 0));
    q.q.push_back(make_packet(1, 70000));
    q.q.push_back(make_packet(2, 5));
    segmenter s;
    const built_tb tb = s.build(64, q.source());
    ASSERT_EQ(tb.record.segments.size(), 1u);
    EXPECT_EQ(tb.record.segments[0].packet_id, 2u);
    EXPECT_EQ(tb.record.segments[0].packet_seq, 0);  // rejected packets take no number
    EXPECT_EQ(s.stats().packets_rejected, 2u);
}

TEST(segmenter, tb_size_and_price_are_validated_naming_the_field) {
    segmenter s;
    try {
        s.build(19, nullptr);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("segmenter.tb_bytes: 19"), std::string::npos);
    }
    EXPECT_THROW(s.build(65536, nullptr), std::invalid_argument);
    EXPECT_THROW(s.build(100, nullptr, -1.0f), std::invalid_argument);
    EXPECT_EQ(s.next_seq(), 0u);  // nothing was built
}

// ---- Reassembler -----------------------------------------------------------------------

TEST(reassembler, in_order_tbs_deliver_every_packet_in_order) {
    std::mt19937_64 rng(1);
    const auto packets = make_packets(rng, 50, 400);
    const auto tbs = segment_all(rng, packets, 60, 300);
    reassembler r(params());
    reassembler::delivered_packets out;
    time_ns now = 0;
    for (const auto& tb : tbs) append(out, r.on_pdu(tb.bytes, now += kNsPerMs));
    ASSERT_EQ(out.size(), packets.size());
    for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], packets[i].data);
    EXPECT_EQ(r.stats().delivered, 50u);
    EXPECT_EQ(dropped(r.stats()), 0u);
    EXPECT_EQ(r.held_bytes(), 0u);
}

TEST(reassembler, out_of_order_tbs_within_the_window_are_delivered_in_order) {
    test_queue q;
    for (int i = 0; i < 4; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 50));
    segmenter s;
    std::vector<built_tb> tbs;
    for (int i = 0; i < 4; ++i) tbs.push_back(s.build(kOneEach, q.source()));
    reassembler r(params());
    EXPECT_TRUE(r.on_pdu(tbs[2].bytes, 1).empty());
    EXPECT_TRUE(r.on_pdu(tbs[1].bytes, 2).empty());
    EXPECT_EQ(r.buffered_pdus(), 2u);
    const auto out = r.on_pdu(tbs[0].bytes, 3);
    ASSERT_EQ(out.size(), 3u);
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(out[static_cast<std::size_t>(i)],
                  make_packet(static_cast<std::uint64_t>(i), 50).data);
    EXPECT_EQ(r.on_pdu(tbs[3].bytes, 4).size(), 1u);
    EXPECT_EQ(r.stats().delivered, 4u);
}

TEST(reassembler, losing_a_tb_with_a_split_packet_drops_exactly_that_packet) {
    // TB1 carries the end of packet 0... : packets 60 B each in 100-byte TBs (80 usable).
    test_queue q;
    for (int i = 0; i < 6; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 60));
    segmenter s;
    std::vector<built_tb> tbs;
    while (!q.q.empty() || s.has_partial()) tbs.push_back(s.build(100, q.source()));
    // Find a TB that carries a packet's middle or end and also a whole-or-started other.
    const std::size_t lost = 1;
    const std::set<std::uint64_t> victims = carried(tbs[lost]);
    ASSERT_GE(victims.size(), 2u);  // a split packet's tail and the start of the next
    for (bool reported : {true, false}) {
        reassembler r(params());
        reassembler::delivered_packets out;
        time_ns now = 0;
        for (std::size_t i = 0; i < tbs.size(); ++i) {
            now += kNsPerMs;
            if (i == lost) {
                if (reported) append(out, r.on_lost(tbs[i].record.seq, now));
                continue;
            }
            append(out, r.on_pdu(tbs[i].bytes, now));
        }
        append(out, r.poll(now + 20 * kNsPerMs));
        std::vector<byte_buffer> expect;
        for (int i = 0; i < 6; ++i)
            if (!victims.count(static_cast<std::uint64_t>(i)))
                expect.push_back(make_packet(static_cast<std::uint64_t>(i), 60).data);
        EXPECT_EQ(out, expect) << (reported ? "reported" : "timeout");
        const auto& st = r.stats();
        EXPECT_EQ(reported ? st.dropped_incomplete : st.dropped_timeout, victims.size());
        EXPECT_EQ(dropped(st), victims.size());
        EXPECT_EQ(r.held_bytes(), 0u);
    }
}

TEST(reassembler, packets_carried_whole_by_a_lost_tb_are_counted_from_the_sequence_gap) {
    test_queue q;
    for (int i = 0; i < 9; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 20));
    segmenter s;
    std::vector<built_tb> tbs;
    for (int i = 0; i < 3; ++i) tbs.push_back(s.build(20 + 3 * 28, q.source()));  // 3 per TB
    ASSERT_EQ(carried(tbs[1]), (std::set<std::uint64_t>{3, 4, 5}));
    reassembler r(params());
    EXPECT_EQ(r.on_pdu(tbs[0].bytes, 1).size(), 3u);
    EXPECT_TRUE(r.on_lost(tbs[1].record.seq, 2).empty());
    EXPECT_EQ(r.on_pdu(tbs[2].bytes, 3).size(), 3u);
    EXPECT_EQ(r.stats().dropped_incomplete, 3u);
    EXPECT_EQ(r.stats().delivered, 6u);
}

TEST(reassembler, a_missing_tb_holds_later_packets_back_at_most_the_timeout) {
    test_queue q;
    for (int i = 0; i < 3; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 50));
    segmenter s;
    std::vector<built_tb> tbs;
    for (int i = 0; i < 3; ++i) tbs.push_back(s.build(kOneEach, q.source()));
    reassembler r(params(16, 10 * kNsPerMs));
    EXPECT_TRUE(r.on_pdu(tbs[1].bytes, 1 * kNsPerMs).empty());
    EXPECT_TRUE(r.on_pdu(tbs[2].bytes, 5 * kNsPerMs).empty());
    ASSERT_TRUE(r.next_deadline());
    EXPECT_EQ(*r.next_deadline(), 11 * kNsPerMs);
    EXPECT_TRUE(r.poll(11 * kNsPerMs - 1).empty());
    const auto out = r.poll(11 * kNsPerMs);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0], make_packet(1, 50).data);
    EXPECT_EQ(r.stats().dropped_timeout, 1u);
    EXPECT_EQ(r.stats().tbs_given_up, 1u);
    EXPECT_FALSE(r.next_deadline());
    // The late TB is now a duplicate and delivers nothing.
    EXPECT_TRUE(r.on_pdu(tbs[0].bytes, 12 * kNsPerMs).empty());
    EXPECT_EQ(r.stats().duplicates, 1u);
}

TEST(reassembler, a_harq_duplicate_tb_is_delivered_once) {
    test_queue q;
    for (int i = 0; i < 2; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 50));
    segmenter s;
    const built_tb a = s.build(kOneEach, q.source()), b = s.build(kOneEach, q.source());
    reassembler r(params());
    EXPECT_TRUE(r.on_pdu(b.bytes, 1).empty());
    EXPECT_TRUE(r.on_pdu(b.bytes, 2).empty());  // duplicate while buffered
    EXPECT_EQ(r.on_pdu(a.bytes, 3).size(), 2u);
    EXPECT_TRUE(r.on_pdu(a.bytes, 4).empty());  // duplicate after delivery
    EXPECT_EQ(r.stats().delivered, 2u);
    EXPECT_EQ(r.stats().duplicates, 2u);
}

TEST(reassembler, memory_cap_gives_up_the_gap_and_never_holds_more_than_the_cap) {
    test_queue q;
    for (int i = 0; i < 200; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 972));
    segmenter s;
    std::vector<built_tb> tbs;
    for (int i = 0; i < 200; ++i) tbs.push_back(s.build(1000, q.source()));  // one each
    reassembler_params p = params(1000, kNsPerSec);
    p.max_bytes = 65535;
    reassembler r(p);
    std::size_t delivered = 0;
    for (std::size_t i = 1; i < tbs.size(); ++i) {  // TB 0 never arrives
        delivered += r.on_pdu(tbs[i].bytes, static_cast<time_ns>(i)).size();
        ASSERT_LE(r.held_bytes(), p.max_bytes);
    }
    EXPECT_EQ(r.stats().dropped_memory, 1u);  // packet 0, with TB 0
    EXPECT_EQ(delivered, 199u);
    EXPECT_EQ(r.stats().dropped_timeout, 0u);
}

TEST(reassembler, a_tb_beyond_the_window_gives_up_the_oldest_gap) {
    test_queue q;
    for (int i = 0; i < 6; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 50));
    segmenter s;
    std::vector<built_tb> tbs;
    for (int i = 0; i < 6; ++i) tbs.push_back(s.build(kOneEach, q.source()));
    reassembler r(params(4, kNsPerSec));
    for (int i = 1; i <= 3; ++i)
        EXPECT_TRUE(r.on_pdu(tbs[static_cast<std::size_t>(i)].bytes, i).empty());
    const auto out = r.on_pdu(tbs[4].bytes, 4);  // seq 4 >= 0 + window: seq 0 given up
    EXPECT_EQ(out.size(), 4u);
    EXPECT_EQ(r.stats().dropped_timeout, 1u);
    EXPECT_EQ(r.next_seq(), 5u);
}

TEST(reassembler, malformed_and_foreign_pdus_are_counted_and_ignored) {
    test_queue q;
    q.q.push_back(make_packet(0, 10));
    segmenter s(segmenter_params{7, 0, 0});
    built_tb tb = s.build(64, q.source());
    reassembler_params p = params();
    p.user = 3;
    reassembler r(p);
    std::string error;
    EXPECT_TRUE(r.on_pdu(tb.bytes.data(), tb.bytes.size(), 1, &error).empty());
    EXPECT_NE(error.find("pdu.user: 7"), std::string::npos) << error;
    byte_buffer bad = tb.bytes;
    bad[30] ^= 0xFF;
    EXPECT_TRUE(r.on_pdu(bad.data(), bad.size(), 2, &error).empty());
    EXPECT_NE(error.find("pdu.crc32"), std::string::npos) << error;
    EXPECT_EQ(r.stats().malformed, 2u);
    EXPECT_EQ(r.next_seq(), 0u);
}

TEST(reassembler, a_loss_report_for_a_received_tb_is_ignored) {
    test_queue q;
    q.q.push_back(make_packet(0, 10));
    segmenter s;
    const built_tb tb = s.build(64, q.source());
    reassembler r(params());
    EXPECT_EQ(r.on_pdu(tb.bytes, 1).size(), 1u);
    EXPECT_TRUE(r.on_lost(0, 2).empty());
    EXPECT_EQ(r.stats().tbs_lost_reported, 0u);
    EXPECT_EQ(dropped(r.stats()), 0u);
}

TEST(reassembler, sequence_numbers_wrap_around) {
    test_queue q;
    for (int i = 0; i < 4; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 50));
    segmenter s(segmenter_params{0, 0xFFFFFFFEu, 0xFFFE});
    std::vector<built_tb> tbs;
    for (int i = 0; i < 4; ++i) tbs.push_back(s.build(kOneEach, q.source()));
    reassembler_params p = params();
    p.first_seq = 0xFFFFFFFEu;
    p.first_packet_seq = 0xFFFE;
    reassembler r(p);
    EXPECT_TRUE(r.on_pdu(tbs[3].bytes, 1).empty());  // seq 1 after the wrap
    EXPECT_TRUE(r.on_pdu(tbs[1].bytes, 2).empty());  // seq 0xFFFFFFFF
    EXPECT_EQ(r.on_pdu(tbs[0].bytes, 3).size(), 2u);
    EXPECT_EQ(r.on_pdu(tbs[2].bytes, 4).size(), 2u);
    EXPECT_EQ(r.next_seq(), 2u);
    EXPECT_EQ(dropped(r.stats()), 0u);
}

TEST(reassembler, bad_params_throw_naming_the_field) {
    reassembler_params p;
    p.window = 0;
    try {
        reassembler r(p);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("reassembler.window: 0"), std::string::npos);
    }
    reassembler_params t;
    t.timeout = 0;
    EXPECT_THROW(reassembler{t}, std::invalid_argument);
    reassembler_params m;
    m.max_bytes = 1000;
    EXPECT_THROW(reassembler{m}, std::invalid_argument);
}

// ---- Randomised round trips ------------------------------------------------------------

TEST(SegmentationRoundTrip, shuffled_within_window_and_duplicated_tbs_give_back_the_packets) {
    std::mt19937_64 rng(42);
    for (int trial = 0; trial < 20; ++trial) {
        const auto packets = make_packets(rng, 300, 1500);
        auto tbs = segment_all(rng, packets, 40, 1200);
        const std::size_t window = 8;
        // Shuffle within consecutive blocks of `window` TBs: every TB arrives within the
        // window, as with `window` HARQ processes.
        for (std::size_t b = 0; b < tbs.size(); b += window)
            std::shuffle(tbs.begin() + static_cast<long>(b),
                         tbs.begin() + static_cast<long>(std::min(b + window, tbs.size())), rng);
        reassembler r(params(static_cast<std::uint32_t>(window), kNsPerSec));
        reassembler::delivered_packets out;
        time_ns now = 0;
        for (const auto& tb : tbs) {
            append(out, r.on_pdu(tb.bytes, now += kNsPerMs));
            if (rng() % 10 == 0) append(out, r.on_pdu(tb.bytes, now));  // HARQ duplicate
        }
        ASSERT_EQ(out.size(), packets.size()) << "trial " << trial;
        for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], packets[i].data);
        EXPECT_EQ(dropped(r.stats()), 0u);
        EXPECT_EQ(r.held_bytes(), 0u);
    }
}

TEST(SegmentationRoundTrip, random_tb_losses_drop_exactly_the_packets_they_carried) {
    std::mt19937_64 rng(43);
    for (int trial = 0; trial < 20; ++trial) {
        const auto packets = make_packets(rng, 200, 600);
        auto tbs = segment_all(rng, packets, 40, 500);
        std::set<std::uint64_t> victims;
        std::vector<bool> lost(tbs.size());
        for (std::size_t i = 0; i < tbs.size(); ++i) {
            lost[i] = rng() % 8 == 0;
            if (lost[i])
                for (auto id : carried(tbs[i])) victims.insert(id);
        }
        const bool report = trial % 2 == 0;  // else the timeout finds the losses
        reassembler r(params(8, 5 * kNsPerMs));
        reassembler::delivered_packets out;
        time_ns now = 0;
        for (std::size_t i = 0; i < tbs.size(); ++i) {
            now += kNsPerMs;
            if (lost[i]) {
                if (report) append(out, r.on_lost(tbs[i].record.seq, now));
            } else {
                append(out, r.on_pdu(tbs[i].bytes, now));
            }
        }
        append(out, r.poll(now + kNsPerSec));
        std::vector<byte_buffer> expect;
        for (const auto& p : packets)
            if (!victims.count(p.id)) expect.push_back(p.data);
        ASSERT_EQ(out, expect) << "trial " << trial;
        // The trailing lost TBs (nothing after them) are not detectable; the rest is exact.
        std::size_t tail = tbs.size();
        while (tail > 0 && lost[tail - 1]) --tail;
        std::set<std::uint64_t> detectable;
        for (std::size_t i = 0; i < tail; ++i)
            if (lost[i])
                for (auto id : carried(tbs[i])) detectable.insert(id);
        EXPECT_LE(dropped(r.stats()), victims.size());
        EXPECT_GE(dropped(r.stats()), detectable.size());
        EXPECT_EQ(report ? r.stats().dropped_timeout : r.stats().dropped_incomplete, 0u);
    }
}
