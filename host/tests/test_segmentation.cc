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
    // The late TB delivers nothing: counted late (its packet was counted at the give-up).
    EXPECT_TRUE(r.on_pdu(tbs[0].bytes, 12 * kNsPerMs).empty());
    EXPECT_EQ(r.stats().tbs_late, 1u);
    EXPECT_EQ(r.stats().dropped_late, 0u);
    EXPECT_EQ(r.stats().duplicates, 0u);
}

TEST(reassembler, a_given_up_tb_arriving_late_is_counted_late_and_its_second_copy_a_duplicate) {
    test_queue q;
    for (int i = 0; i < 4; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 50));
    segmenter s;
    std::vector<built_tb> tbs;
    for (int i = 0; i < 4; ++i) tbs.push_back(s.build(kOneEach, q.source()));
    reassembler r(params(16, 10 * kNsPerMs));
    EXPECT_EQ(r.on_pdu(tbs[0].bytes, 0).size(), 1u);
    EXPECT_TRUE(r.on_pdu(tbs[2].bytes, 1 * kNsPerMs).empty());
    EXPECT_EQ(r.on_pdu(tbs[3].bytes, 11 * kNsPerMs).size(), 2u);  // gives TB 1 up
    EXPECT_EQ(r.stats().dropped_timeout, 1u);
    EXPECT_TRUE(r.on_pdu(tbs[1].bytes, 12 * kNsPerMs).empty());  // HARQ got it through late
    EXPECT_TRUE(r.on_pdu(tbs[1].bytes, 13 * kNsPerMs).empty());  // and a second time
    EXPECT_TRUE(r.on_pdu(tbs[0].bytes, 14 * kNsPerMs).empty());  // delivered long ago
    const auto& st = r.stats();
    EXPECT_EQ(st.tbs_late, 1u);
    EXPECT_EQ(st.duplicates, 2u);
    // Standard format: the sequence gap counted its packet already, none twice.
    EXPECT_EQ(st.dropped_late + st.dropped_late_perhaps, 0u);
    EXPECT_EQ(st.delivered + dropped(st), 4u);
}

TEST(reassembler, a_gap_is_held_for_the_held_timeout_while_harq_may_still_deliver_it) {
    test_queue q;
    for (int i = 0; i < 3; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 50));
    segmenter s;
    std::vector<built_tb> tbs;
    for (int i = 0; i < 3; ++i) tbs.push_back(s.build(kOneEach, q.source()));
    reassembler_params rp = params(16, 10 * kNsPerMs);
    rp.held_timeout = 500 * kNsPerMs;
    reassembler r(rp);
    // TB 0 failed at 0 ms (a NACK pending), TB 1 arrived at 1 ms: it waits the held timeout.
    r.set_harq_pending_since(0);
    EXPECT_TRUE(r.on_pdu(tbs[1].bytes, 1 * kNsPerMs).empty());
    EXPECT_EQ(r.next_deadline(), 501 * kNsPerMs);
    EXPECT_TRUE(r.poll(200 * kNsPerMs).empty());
    // The retransmission decodes 300 ms later: nothing lost.
    r.set_harq_pending_since(std::nullopt);
    EXPECT_EQ(r.on_pdu(tbs[0].bytes, 300 * kNsPerMs).size(), 2u);
    EXPECT_EQ(dropped(r.stats()) + r.stats().tbs_given_up, 0u);
    EXPECT_EQ(r.on_pdu(tbs[2].bytes, 310 * kNsPerMs).size(), 1u);
    // A NACK newer than the PDU waiting cannot be the gap's TB: the plain timeout.
    reassembler r2(rp);
    r2.set_harq_pending_since(5 * kNsPerMs);
    EXPECT_TRUE(r2.on_pdu(tbs[1].bytes, 1 * kNsPerMs).empty());
    EXPECT_EQ(r2.next_deadline(), 11 * kNsPerMs);
    EXPECT_EQ(r2.poll(11 * kNsPerMs).size(), 1u);
    EXPECT_EQ(r2.stats().tbs_given_up, 1u);
    // Nothing pending any more: the held gap falls back to the timeout.
    reassembler r3(rp);
    r3.set_harq_pending_since(0);
    EXPECT_TRUE(r3.on_pdu(tbs[1].bytes, 1 * kNsPerMs).empty());
    r3.set_harq_pending_since(std::nullopt);
    EXPECT_EQ(r3.poll(11 * kNsPerMs).size(), 1u);
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

TEST(reassembler, held_bytes_charge_each_buffered_entry_its_overhead_and_segments) {
    test_queue q;
    for (int i = 0; i < 3; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 50));
    segmenter s;
    std::vector<built_tb> tbs;
    for (int i = 0; i < 3; ++i) tbs.push_back(s.build(kOneEach, q.source()));
    reassembler r(params(16, kNsPerSec));
    EXPECT_TRUE(r.on_pdu(tbs[1].bytes, 1).empty());  // waits behind TB 0
    constexpr std::size_t one = reassembler::kEntryOverheadBytes + 50 +
                                reassembler::kSegmentOverheadBytes;  // one segment of 50 bytes
    EXPECT_EQ(r.held_bytes(), one);
    EXPECT_TRUE(r.on_lost(5, 2).empty());  // a loss report holds no packet byte
    EXPECT_EQ(r.held_bytes(), one + reassembler::kEntryOverheadBytes);
    EXPECT_TRUE(r.on_pdu(tbs[2].bytes, 3).empty());
    EXPECT_EQ(r.held_bytes(), 2 * one + reassembler::kEntryOverheadBytes);
    EXPECT_EQ(r.on_pdu(tbs[0].bytes, 4).size(), 3u);
    EXPECT_EQ(r.held_bytes(), reassembler::kEntryOverheadBytes);  // the loss report of 5
}

TEST(reassembler, loss_reports_alone_reach_the_memory_cap_and_are_given_up_counted) {
    // Loss reports carry no packet bytes: only their per-entry cost bounds them.
    reassembler_params p = params(4096, kNsPerSec);
    p.max_bytes = 65535;
    reassembler r(p);
    const std::size_t fit = p.max_bytes / reassembler::kEntryOverheadBytes;  // 255
    const std::size_t reports = fit + 10;
    for (std::size_t i = 0; i < reports; ++i) {  // PDUs 1, 3, 5, ...: a gap before each
        const auto seq = static_cast<std::uint32_t>(2 * i + 1);
        r.on_lost(seq, static_cast<time_ns>(seq));
        ASSERT_LE(r.held_bytes(), p.max_bytes) << "seq " << seq;
    }
    EXPECT_EQ(r.stats().tbs_lost_reported, reports);
    EXPECT_EQ(r.buffered_pdus(), fit);
    // The cap gave up the one-PDU gap before each of the 10 oldest reports.
    EXPECT_EQ(r.stats().tbs_given_up, reports - fit);
    EXPECT_EQ(r.stats().dropped_timeout, 0u);
}

TEST(reassembler, a_timeout_scan_reads_the_expired_entries_not_every_buffered_one) {
    constexpr int n = 1000;
    test_queue q;
    for (int i = 0; i <= n; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 50));
    segmenter s;
    std::vector<built_tb> tbs;
    for (int i = 0; i <= n; ++i) tbs.push_back(s.build(kOneEach, q.source()));
    reassembler r(params(4096, 10 * kNsPerMs));
    // TB 0 is missing; TBs 1..n wait behind it, all arrived by t = n ns.
    for (int i = 1; i <= n; ++i) ASSERT_TRUE(r.on_pdu(tbs[i].bytes, i).empty());
    ASSERT_EQ(r.buffered_pdus(), static_cast<std::size_t>(n));
    const std::uint64_t before = r.timeout_scan_visits();
    for (int k = 0; k < 100; ++k) ASSERT_TRUE(r.poll(5 * kNsPerMs + k).empty());
    EXPECT_EQ(r.timeout_scan_visits() - before, 100u);  // one read per poll, not n
    const std::uint64_t at_expiry = r.timeout_scan_visits();
    EXPECT_EQ(r.poll(10 * kNsPerMs + 1).size(), static_cast<std::size_t>(n));
    EXPECT_EQ(r.timeout_scan_visits() - at_expiry, 1u);  // the one expired entry
    EXPECT_EQ(r.stats().dropped_timeout, 1u);
    EXPECT_EQ(r.held_bytes(), 0u);
}

TEST(reassembler, a_timeout_scan_stops_at_the_first_gap_whose_pdus_have_not_expired) {
    // Gaps at 0, 10, 20, ...: the PDUs of block b (10b+1 .. 10b+9) arrive at b ms.
    test_queue q;
    for (int i = 0; i < 50; ++i) q.q.push_back(make_packet(static_cast<std::uint64_t>(i), 50));
    segmenter s;
    std::vector<built_tb> tbs;
    for (int i = 0; i < 50; ++i) tbs.push_back(s.build(kOneEach, q.source()));
    reassembler r(params(64, 10 * kNsPerMs));
    for (int i = 0; i < 50; ++i) {
        if (i % 10 != 0) {
            ASSERT_TRUE(r.on_pdu(tbs[i].bytes, (i / 10) * kNsPerMs).empty());
        }
    }
    const std::uint64_t before = r.timeout_scan_visits();
    // At 11.5 ms blocks 0 and 1 have waited >= 10 ms, blocks 2..4 have not.
    EXPECT_EQ(r.poll(11 * kNsPerMs + kNsPerMs / 2).size(), 18u);
    EXPECT_EQ(r.timeout_scan_visits() - before, 3u);  // two expired gaps + the first live one
    EXPECT_EQ(r.stats().dropped_timeout, 2u);
    EXPECT_EQ(r.buffered_pdus(), 27u);
    ASSERT_TRUE(r.next_deadline());
    EXPECT_EQ(*r.next_deadline(), 12 * kNsPerMs);
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

// ---- Compact format (pdu.h): packets back to back, boundaries from the IP headers ---------

namespace {

// A valid IPv4 (size >= 20) or IPv6 (size >= 40) packet of `size` bytes, bytes after the
// length fields distinct per id.
ip_packet make_ip_packet(std::uint64_t id, std::size_t size, bool v6 = false) {
    ip_packet p = make_packet(id, size);
    if (v6) {
        p.data[0] = 0x60;
        p.data[4] = static_cast<std::uint8_t>((size - 40) >> 8);
        p.data[5] = static_cast<std::uint8_t>(size - 40);
    } else {
        p.data[0] = 0x45;
        p.data[2] = static_cast<std::uint8_t>(size >> 8);
        p.data[3] = static_cast<std::uint8_t>(size);
    }
    return p;
}

std::vector<ip_packet> make_ip_packets(std::mt19937_64& rng, int n, std::size_t max_size) {
    std::vector<ip_packet> v;
    for (int i = 0; i < n; ++i) {
        const bool v6 = rng() % 3 == 0;
        const std::size_t lo = v6 ? 40 : 20;
        v.push_back(
            make_ip_packet(static_cast<std::uint64_t>(i), lo + rng() % (max_size - lo + 1), v6));
    }
    return v;
}

segmenter compact_segmenter() {
    segmenter_params p;
    p.format = pdu_format::compact;
    return segmenter(p);
}

std::vector<built_tb> compact_all(const std::vector<ip_packet>& packets, std::size_t tb_bytes) {
    test_queue q;
    q.q.assign(packets.begin(), packets.end());
    segmenter s = compact_segmenter();
    std::vector<built_tb> tbs;
    while (!q.q.empty() || s.has_partial()) tbs.push_back(s.build(tb_bytes, q.source()));
    return tbs;
}

std::vector<byte_buffer> data_of(const std::vector<ip_packet>& packets) {
    std::vector<byte_buffer> v;
    for (const auto& p : packets) v.push_back(p.data);
    return v;
}

}  // namespace

TEST(compact, packets_of_many_sizes_round_trip_through_8_16_and_32_byte_tbs) {
    std::mt19937_64 rng(7);
    const auto packets = make_ip_packets(rng, 120, 300);
    for (std::size_t tb : {8u, 16u, 32u}) {
        const auto tbs = compact_all(packets, tb);
        reassembler r(params());
        reassembler::delivered_packets out;
        time_ns now = 0;
        for (std::size_t i = 0; i < tbs.size(); ++i) {
            ASSERT_EQ(tbs[i].bytes.size(), tb);
            // Every TB but the last is full: tb - 4 bytes of packets, no per-packet overhead.
            if (i + 1 < tbs.size()) {
                EXPECT_EQ(tbs[i].record.data_bytes, tb - 4) << i;
            }
            append(out, r.on_pdu(tbs[i].bytes, now += kNsPerMs));
        }
        EXPECT_EQ(out, data_of(packets)) << tb;
        EXPECT_EQ(r.stats().malformed + r.stats().inconsistent + dropped(r.stats()), 0u);
        EXPECT_EQ(r.held_bytes(), 0u);
        EXPECT_EQ(r.format(), pdu_format::compact);
    }
}

TEST(compact, a_packet_split_across_many_tbs_is_delivered_whole_and_recorded_exactly) {
    // An IPv6 packet of 1500 bytes in 8-byte TBs: 375 TBs, its length field (bytes 4..5) in
    // the second one.
    const ip_packet big = make_ip_packet(1, 1500, true);
    const auto tbs = compact_all({big}, 8);
    ASSERT_EQ(tbs.size(), 375u);
    reassembler r(params());
    reassembler::delivered_packets out;
    std::size_t next_offset = 0;
    for (std::size_t i = 0; i < tbs.size(); ++i) {
        const auto& rec = tbs[i].record;
        ASSERT_EQ(rec.segments.size(), 1u);
        EXPECT_EQ(rec.segments[0].packet_id, 1u);
        EXPECT_EQ(rec.segments[0].offset, next_offset);
        EXPECT_EQ(rec.segments[0].seg_len, 4u);
        next_offset += 4;
        EXPECT_EQ(rec.seq, i);
        const auto v = parse_compact_view(tbs[i].bytes.data(), tbs[i].bytes.size());
        ASSERT_TRUE(v.ok()) << v.error();
        // Only the first TB starts a packet; the last one ends it exactly at its end.
        EXPECT_EQ(v->first.has_value(), i == 0) << i;
        append(out, r.on_pdu(tbs[i].bytes, static_cast<time_ns>(i)));
        EXPECT_EQ(out.empty(), i + 1 < tbs.size());
    }
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], big.data);
}

TEST(compact, a_lost_pdu_discards_the_packet_spanning_it_and_the_next_one_is_delivered) {
    // A (20 B), B (100 B), C (60 B) in 16-byte TBs (12 bytes each): TB 4 is inside B.
    const std::vector<ip_packet> pk = {make_ip_packet(0, 20), make_ip_packet(1, 100),
                                       make_ip_packet(2, 60)};
    const auto tbs = compact_all(pk, 16);
    const std::size_t lost = 4;
    ASSERT_EQ(carried(tbs[lost]), std::set<std::uint64_t>{1});
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
        EXPECT_EQ(out, (std::vector<byte_buffer>{pk[0].data, pk[2].data}))
            << (reported ? "reported" : "timeout");
        const auto& st = r.stats();
        EXPECT_EQ(reported ? st.dropped_incomplete : st.dropped_timeout, 1u);
        EXPECT_EQ(dropped(st), 1u);
        EXPECT_EQ(r.held_bytes(), 0u);
    }
}

TEST(compact, a_lost_pdu_carrying_a_packets_head_discards_its_tail_too) {
    // 10 packets of 30 B in 8-byte TBs; lose the TB where packet 3 starts (and 2 ends).
    std::vector<ip_packet> pk;
    for (int i = 0; i < 10; ++i) pk.push_back(make_ip_packet(static_cast<std::uint64_t>(i), 30));
    const auto tbs = compact_all(pk, 8);
    std::size_t lost = 0;
    while (carried(tbs[lost]) != std::set<std::uint64_t>{2, 3}) ++lost;
    reassembler r(params());
    reassembler::delivered_packets out;
    time_ns now = 0;
    for (std::size_t i = 0; i < tbs.size(); ++i)
        if (i != lost) append(out, r.on_pdu(tbs[i].bytes, now += kNsPerMs));
    append(out, r.poll(now + kNsPerSec));
    std::vector<byte_buffer> expect;
    for (int i = 0; i < 10; ++i)
        if (i != 2 && i != 3) expect.push_back(pk[static_cast<std::size_t>(i)].data);
    EXPECT_EQ(out, expect);
    // 2's head was held and is counted; 3's tail cannot be told from 2's (no packet numbers):
    // the count is a lower bound (segmentation.h), the delivery exact.
    EXPECT_EQ(r.stats().dropped_timeout, 1u);
}

TEST(compact, a_harq_drop_record_names_exactly_the_packets_the_tb_carried) {
    // 40-byte TBs (36 bytes of data) and 20-byte packets: TB 1 carries stream bytes
    // [36, 72): the tail of packet 1 ([16, 20)), packet 2 whole, the head of 3 ([0, 12)).
    std::vector<ip_packet> pk;
    for (int i = 0; i < 6; ++i) pk.push_back(make_ip_packet(static_cast<std::uint64_t>(i), 20));
    const auto tbs = compact_all(pk, 40);
    const auto& rec = tbs[1].record;
    ASSERT_EQ(rec.segments.size(), 3u);
    EXPECT_EQ(rec.segments[0].packet_id, 1u);
    EXPECT_EQ(rec.segments[0].offset, 16u);
    EXPECT_TRUE(rec.segments[0].last());
    EXPECT_EQ(rec.segments[1].packet_id, 2u);
    EXPECT_TRUE(rec.segments[1].first() && rec.segments[1].last());
    EXPECT_EQ(rec.segments[2].packet_id, 3u);
    EXPECT_TRUE(rec.segments[2].first() && !rec.segments[2].last());
    EXPECT_EQ(rec.segments[2].seg_len, 12u);
    EXPECT_EQ(rec.data_bytes, 36u);
    // The client loses exactly those packets when the TB is reported dropped.
    reassembler r(params());
    reassembler::delivered_packets out;
    for (std::size_t i = 0; i < tbs.size(); ++i) {
        if (i == 1)
            append(out, r.on_lost(rec.seq, 1));
        else
            append(out, r.on_pdu(tbs[i].bytes, 1));
    }
    EXPECT_EQ(out, (std::vector<byte_buffer>{pk[0].data, pk[4].data, pk[5].data}));
}

TEST(compact, random_tb_losses_drop_exactly_the_packets_they_carried) {
    std::mt19937_64 rng(44);
    for (int trial = 0; trial < 20; ++trial) {
        const auto packets = make_ip_packets(rng, 150, 400);
        test_queue q;
        q.q.assign(packets.begin(), packets.end());
        segmenter s = compact_segmenter();
        std::vector<built_tb> tbs;
        while (!q.q.empty() || s.has_partial()) tbs.push_back(s.build(8 + rng() % 120, q.source()));
        std::set<std::uint64_t> victims;
        std::vector<bool> lost(tbs.size());
        for (std::size_t i = 0; i < tbs.size(); ++i) {
            lost[i] = rng() % 10 == 0;
            if (lost[i])
                for (auto id : carried(tbs[i])) victims.insert(id);
        }
        const bool report = trial % 2 == 0;
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
        EXPECT_LE(dropped(r.stats()), victims.size());  // a lower bound (segmentation.h)
        EXPECT_EQ(r.stats().inconsistent + r.stats().malformed, 0u);
    }
}

TEST(compact, a_late_pdu_counts_exactly_the_packets_no_counter_had_counted) {
    // 10 packets of 30 B in 8-byte TBs (4 bytes of packet each). Three runs of three TBs
    // given up by the timeout (each cuts packets differently), then delivered late, last
    // first.
    std::vector<ip_packet> pk;
    for (int i = 0; i < 10; ++i) pk.push_back(make_ip_packet(static_cast<std::uint64_t>(i), 30));
    const auto tbs = compact_all(pk, 8);
    for (std::size_t first : {20u, 21u, 26u}) {
        const std::size_t stop = first + 3;
        std::set<std::uint64_t> victims;
        for (std::size_t i = first; i < stop; ++i)
            for (auto id : carried(tbs[i])) victims.insert(id);
        reassembler r(params(64, 5 * kNsPerMs));
        reassembler::delivered_packets out;
        time_ns now = 0;
        for (std::size_t i = 0; i < tbs.size(); ++i)
            if (i < first || i >= stop) append(out, r.on_pdu(tbs[i].bytes, now += kNsPerMs));
        append(out, r.poll(now += kNsPerSec));
        const std::uint64_t at_loss = dropped(r.stats());
        EXPECT_LE(at_loss, victims.size());
        for (std::size_t i = stop; i-- > first;)
            EXPECT_TRUE(r.on_pdu(tbs[i].bytes, now += kNsPerMs).empty());
        const auto& st = r.stats();
        EXPECT_EQ(st.tbs_late, 3u) << first;
        EXPECT_EQ(st.duplicates, 0u) << first;
        EXPECT_EQ(st.dropped_late_perhaps, 0u) << first;
        EXPECT_EQ(at_loss + st.dropped_late, victims.size()) << first;
        EXPECT_EQ(st.delivered + at_loss + st.dropped_late, pk.size()) << first;
        EXPECT_TRUE(r.on_pdu(tbs[first].bytes, now += kNsPerMs).empty());
        EXPECT_EQ(r.stats().duplicates, 1u);  // a second late copy
    }
}

TEST(compact, late_pdus_of_random_given_up_runs_complete_the_count_of_lost_packets) {
    std::mt19937_64 rng(45);
    std::uint64_t late_total = 0, perhaps_total = 0;
    for (int trial = 0; trial < 30; ++trial) {
        const auto packets = make_ip_packets(rng, 150, 400);
        test_queue q;
        q.q.assign(packets.begin(), packets.end());
        segmenter s = compact_segmenter();
        std::vector<built_tb> tbs;
        while (!q.q.empty() || s.has_partial()) tbs.push_back(s.build(8 + rng() % 120, q.source()));
        std::set<std::uint64_t> victims;
        std::vector<std::size_t> lost;
        for (std::size_t i = 0; i + 1 < tbs.size(); ++i) {  // the last one arrives
            if (rng() % 8 == 0) {
                // A burst of 1..4 TBs (HARQ losses come in runs over a fade).
                for (std::size_t n = 1 + rng() % 4; n > 0 && i + 1 < tbs.size(); --n, ++i) {
                    lost.push_back(i);
                    for (auto id : carried(tbs[i])) victims.insert(id);
                }
            }
        }
        reassembler r(params(512, 5 * kNsPerMs));
        time_ns now = 0;
        std::size_t n_delivered = 0;
        std::size_t li = 0;
        for (std::size_t i = 0; i < tbs.size(); ++i) {
            now += kNsPerMs;
            if (li < lost.size() && lost[li] == i) {
                ++li;
                continue;
            }
            n_delivered += r.on_pdu(tbs[i].bytes, now).size();
            n_delivered += r.poll(now += 10 * kNsPerMs).size();  // every gap given up
        }
        const std::uint64_t at_loss = dropped(r.stats());
        // Late, in an order that is exact (last first) or not (shuffled).
        const bool exact = trial % 2 == 0;
        if (exact)
            std::reverse(lost.begin(), lost.end());
        else
            std::shuffle(lost.begin(), lost.end(), rng);
        for (std::size_t i : lost) n_delivered += r.on_pdu(tbs[i].bytes, now += kNsPerMs).size();
        const auto& st = r.stats();
        ASSERT_EQ(n_delivered, packets.size() - victims.size()) << trial;
        EXPECT_EQ(st.tbs_late, lost.size()) << trial;
        EXPECT_EQ(st.duplicates, 0u) << trial;
        EXPECT_LE(at_loss + st.dropped_late, victims.size()) << trial;
        EXPECT_GE(at_loss + st.dropped_late + st.dropped_late_perhaps, victims.size()) << trial;
        if (exact) {
            EXPECT_EQ(st.dropped_late_perhaps, 0u) << trial;
            EXPECT_EQ(at_loss + st.dropped_late, victims.size()) << trial;
        }
        late_total += st.dropped_late;
        perhaps_total += st.dropped_late_perhaps;
    }
    // Both kinds occur: packets only the late PDU shows, and ones the shuffled order leaves open.
    EXPECT_GT(late_total, 100u);
    EXPECT_GT(perhaps_total, 0u);
}

TEST(compact, malformed_pdus_are_refused_naming_the_field_and_nothing_accepted_is_lost) {
    // A 30-byte packet, split: 4 bytes in PDU 0, the rest after the bad PDUs in PDU 1.
    const ip_packet p = make_ip_packet(9, 30);
    const auto tbs = compact_all({p}, 8);
    reassembler r(params());
    EXPECT_TRUE(r.on_pdu(tbs[0].bytes, 0).empty());
    const std::vector<std::pair<byte_buffer, std::string>> bad = {
        {{0x80, 0x01, 0x00}, "pdu.length: 3"},
        {{0x90, 0x01, 0x00, 0x00, 0x45}, "pdu.length: 5 bytes, need >= 7 with SESSION set"},
        {{0x42, 0x01, 0x00, 0x00, 0x45}, "pdu.format: byte 0 0x42"},
        {{0xA0, 0x01, 0x00, 0x00, 0x7f, 0x80, 0x00, 0x00, 0x00}, "pdu.price: 0x7f800000"},
        {{0x80, 0x01, 0x00, 0x04, 0x45, 0, 0, 0}, "pdu.first: 4"},
        {{0x80, 0x01, 0x00, 0x00, 0x55, 0, 0, 0}, "pdu.packet[0].version: 5"},
        {{0x80, 0x01, 0x00, 0x00, 0x43, 0, 0, 0}, "pdu.packet[0].ipv4_ihl: 3"},
        {{0x80, 0x01, 0x00, 0x00, 0x45, 0, 0x00, 0x13}, "pdu.packet[0].ipv4_total_length: 19"},
        {{0x80, 0x01, 0x00, 0x00, 0x60, 0, 0, 0, 0xff, 0xff},
         "pdu.packet[0].ipv6_payload_length: 65535"},
        {{0x01, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
         "pdu.format: a standard PDU"},
    };
    for (const auto& [bytes, what] : bad) {
        std::string error;
        EXPECT_TRUE(r.on_pdu(bytes.data(), bytes.size(), 0, &error).empty());
        EXPECT_NE(error.find(what), std::string::npos) << "want " << what << ", got " << error;
    }
    EXPECT_EQ(r.stats().malformed, bad.size());
    reassembler::delivered_packets out;
    for (std::size_t i = 1; i < tbs.size(); ++i) append(out, r.on_pdu(tbs[i].bytes, 0));
    EXPECT_EQ(out, std::vector<byte_buffer>{p.data});
    EXPECT_EQ(dropped(r.stats()), 0u);
}

TEST(compact, a_continuation_disagreeing_with_the_ip_length_is_dropped_and_the_stream_resumes) {
    // PDU 0 starts a 30-byte packet (its first 12 bytes); PDU 1 says the packet ends after 5
    // more bytes (first = 5), 13 short of its IP total length, then a whole 20-byte packet.
    const ip_packet a = make_ip_packet(1, 30), b = make_ip_packet(2, 20);
    compact_pdu p0;
    p0.packets = {byte_buffer(a.data.begin(), a.data.begin() + 12)};
    compact_pdu p1;
    p1.seq = 1;
    p1.continuation = byte_buffer(a.data.begin() + 12, a.data.begin() + 17);
    p1.packets = {b.data};
    const auto t0 = serialize_compact(p0, 16), t1 = serialize_compact(p1, 40);
    ASSERT_TRUE(t0.ok() && t1.ok());
    reassembler r(params());
    EXPECT_TRUE(r.on_pdu(t0.value(), 0).empty());
    std::string error;
    const auto out = r.on_pdu(t1.value().data(), t1.value().size(), 0, &error);
    EXPECT_EQ(out, std::vector<byte_buffer>{b.data});
    EXPECT_NE(error.find("pdu.first: 5 ends the packet at 17 bytes, short of the 30"),
              std::string::npos)
        << error;
    EXPECT_EQ(r.stats().inconsistent, 1u);
    EXPECT_EQ(r.stats().dropped_incomplete, 1u);
    EXPECT_EQ(r.held_bytes(), 0u);
}

TEST(compact, the_segmenter_rejects_packets_whose_ip_header_disagrees_with_their_length) {
    test_queue q;
    ip_packet liar = make_ip_packet(1, 40);
    liar.data[3] = 50;  // says 50 bytes
    ip_packet not_ip = make_packet(2, 30);
    not_ip.data[0] = 0x20;
    q.q = {liar, not_ip, make_ip_packet(3, 20)};
    segmenter s = compact_segmenter();
    const built_tb tb = s.build(64, q.source());
    EXPECT_EQ(s.stats().packets_rejected, 2u);
    ASSERT_EQ(tb.record.segments.size(), 1u);
    EXPECT_EQ(tb.record.segments[0].packet_id, 3u);
    EXPECT_EQ(tb.record.padding, 64u - 4 - 20);
}

TEST(compact, the_price_is_stamped_where_it_leaves_a_data_byte_and_omitted_in_8_byte_tbs) {
    test_queue q;
    q.q = {make_ip_packet(1, 100)};
    segmenter s = compact_segmenter();
    const built_tb small = s.build(8, q.source(), 0.25f);
    EXPECT_EQ(small.record.data_bytes, 4u);
    EXPECT_EQ(s.stats().prices_omitted, 1u);
    EXPECT_EQ(small.bytes[0] & kCompactFlagPrice, 0);
    const built_tb nine = s.build(9, q.source(), 0.25f);
    EXPECT_EQ(nine.record.data_bytes, 1u);  // 4 header + 4 price + 1
    const auto v = parse_compact_view(nine.bytes.data(), nine.bytes.size());
    ASSERT_TRUE(v.ok()) << v.error();
    EXPECT_EQ(v->price_s, 0.25f);
    EXPECT_EQ(s.stats().prices_omitted, 1u);
    EXPECT_THROW(s.build(4, q.source()), std::invalid_argument);
}

TEST(compact, sequence_numbers_wrap_at_4096_and_a_pdu_2048_ahead_counts_as_old) {
    segmenter_params sp;
    sp.format = pdu_format::compact;
    sp.first_seq = 4094;
    segmenter s(sp);
    std::vector<ip_packet> pk;
    for (int i = 0; i < 4; ++i) pk.push_back(make_ip_packet(static_cast<std::uint64_t>(i), 20));
    test_queue q;
    q.q.assign(pk.begin(), pk.end());
    std::vector<built_tb> tbs;
    while (!q.q.empty()) tbs.push_back(s.build(24, q.source()));
    ASSERT_EQ(tbs.size(), 4u);
    EXPECT_EQ(tbs[1].record.seq, 4095u);
    EXPECT_EQ(tbs[2].record.seq, 0u);
    reassembler_params rp = params(1u << 20);
    rp.first_seq = 4094;
    reassembler r(rp);
    reassembler::delivered_packets out;
    for (std::size_t i : {1u, 3u, 0u, 2u}) append(out, r.on_pdu(tbs[i].bytes, 0));
    EXPECT_EQ(out, data_of(pk));
    EXPECT_EQ(r.next_seq(), 2u);
    // A PDU 2048 ahead is behind in 12-bit serial arithmetic: a duplicate, not a jump.
    compact_pdu far;
    far.seq = 2 + 2048;
    far.packets = {make_ip_packet(9, 20).data};
    EXPECT_TRUE(r.on_pdu(serialize_compact(far, 24).value(), 0).empty());
    EXPECT_EQ(r.stats().duplicates, 1u);
    // 2047 ahead: the farthest a 12-bit stream can look (the window of 2^20 acts as 2048).
    far.seq = 2 + 2047;
    EXPECT_TRUE(r.on_pdu(serialize_compact(far, 24).value(), 0).empty());
    EXPECT_EQ(r.stats().tbs_given_up, 0u);
    EXPECT_EQ(r.buffered_pdus(), 1u);
    sp.first_seq = 4096;
    EXPECT_THROW(segmenter{sp}, std::invalid_argument);
}

// HARQ as the air gives it: each TB arrives after 0-3 retransmissions (8 slots each), so
// later TBs overtake it, or is lost after the last one (reported lost then, or never).
// Over 12 000 packets in small TBs the compact format's 12-bit sequence wraps several
// times. Whatever the order, what comes out is exactly the packets no lost TB carried,
// byte for byte and in order: no packet glued from the segments of two.
TEST(SegmentationRoundTrip, reordered_and_lost_tbs_across_sequence_wraps_never_mix_packets) {
    for (const bool compact : {true, false}) {
        for (const bool report : {true, false}) {
            std::mt19937_64 rng(compact * 2 + report + 71);
            const auto packets = make_ip_packets(rng, 12000, 600);
            test_queue q;
            q.q.assign(packets.begin(), packets.end());
            segmenter s = compact ? compact_segmenter() : segmenter();
            std::vector<built_tb> tbs;
            while (!q.q.empty() || s.has_partial())
                tbs.push_back(s.build(40 + rng() % 200, q.source()));
            ASSERT_GT(tbs.size(), 3 * 4096u);
            struct arrival {
                time_ns at;
                std::size_t tb;
                bool lost;
            };
            std::vector<arrival> air;
            std::set<std::uint64_t> victims;
            for (std::size_t i = 0; i < tbs.size(); ++i) {
                int retx = 0;
                while (retx < 3 && rng() % 5 == 0) ++retx;
                const bool lost = retx == 3 && rng() % 4 == 0;
                if (lost)
                    for (auto id : carried(tbs[i])) victims.insert(id);
                air.push_back({static_cast<time_ns>(i + 8 * retx) * kNsPerMs, i, lost});
            }
            std::stable_sort(air.begin(), air.end(),
                             [](const arrival& a, const arrival& b) { return a.at < b.at; });
            reassembler r(params(64, 40 * kNsPerMs));
            reassembler::delivered_packets out;
            for (const auto& a : air) {
                if (!a.lost)
                    append(out, r.on_pdu(tbs[a.tb].bytes, a.at));
                else if (report)
                    append(out, r.on_lost(tbs[a.tb].record.seq, a.at));
                append(out, r.poll(a.at));
            }
            append(out, r.poll(air.back().at + kNsPerSec));
            std::vector<byte_buffer> expect;
            for (const auto& p : packets)
                if (!victims.count(p.id)) expect.push_back(p.data);
            ASSERT_FALSE(victims.empty());
            ASSERT_EQ(out.size(), expect.size()) << "compact " << compact << " report " << report;
            ASSERT_EQ(out, expect) << "compact " << compact << " report " << report;
            EXPECT_EQ(r.stats().inconsistent + r.stats().malformed, 0u);
        }
    }
}
