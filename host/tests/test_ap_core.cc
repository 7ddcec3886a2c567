// ap_core (oppsched/ap_core.h): the AP MAC, driven slot by slot with a fake clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>

#include "oppsched/ap_core.h"
#include "oppsched/client_core.h"
#include "oppsched/pdu.h"
#include "test_aqm_packets.h"

namespace oppsched::ap {
namespace {

constexpr double kSlot = 0.01;  // 10 ms: the test table gives 125 / 500 byte TBs

linkadapt::mcs_table test_table() {
    return linkadapt::mcs_table("test", {{"low", 0.0, 100e3, 0, 0.0},      // 125 B / slot
                                         {"high", 10.0, 400e3, 0, 0.0}});  // 500 B / slot
}

// A minimal IPv4 packet of `size` bytes to 10.0.0.<host> (UDP-less: protocol 253).
std::vector<std::uint8_t> ipv4_to(std::uint8_t host, std::size_t size, std::uint8_t fill = 0xab) {
    std::vector<std::uint8_t> p(size, fill);
    p[0] = 0x45;
    p[1] = 0;
    p[2] = static_cast<std::uint8_t>(size >> 8);
    p[3] = static_cast<std::uint8_t>(size);
    p[8] = 64;
    p[9] = 253;
    p[12] = 10, p[13] = 9, p[14] = 9, p[15] = 9;
    p[16] = 10, p[17] = 0, p[18] = 0, p[19] = host;
    return p;
}

std::vector<std::uint8_t> ipv6_to_fd00(std::uint8_t last, std::size_t size) {
    std::vector<std::uint8_t> p(size, 0x5a);
    p[0] = 0x60;
    p[1] = p[2] = p[3] = 0;
    p[4] = static_cast<std::uint8_t>((size - 40) >> 8);
    p[5] = static_cast<std::uint8_t>(size - 40);
    p[6] = 253;
    p[7] = 64;
    for (int i = 8; i < 40; ++i) p[i] = 0;
    p[24] = 0xfd;
    p[39] = last;
    return p;
}

ap_core_params two_users() {
    ap_core_params p;
    p.users = {{"ue0", {"10.0.0.1", "fd00::1"}, {}, {}}, {"ue1", {"10.0.0.2"}, {}, {}}};
    p.table = test_table();
    p.slot_s = kSlot;
    p.lead_slots = 2;
    p.harq.num_processes = 4;
    p.harq.max_transmissions = 3;
    p.harq.feedback_delay_slots = 1;
    p.harq.feedback_timeout_slots = 8;
    p.aqm.limits = {0, 100};
    p.record_packets = true;
    return p;
}

time_ns t_of(std::uint64_t slot) { return static_cast<time_ns>(slot) * 10 * kNsPerMs; }

wire::slot_grant request(ap_core& ap, std::uint64_t slot) {
    return ap.on_slot_request(t_of(slot), slot, t_of(slot) + 20 * kNsPerMs);
}

pdu::mac_pdu parse_ok(const wire::slot_grant& g) {
    auto r = pdu::parse(g.tb);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error());
    return r.ok() ? r.value() : pdu::mac_pdu{};
}

// Constructing an ap_core from `p` throws std::invalid_argument whose message holds `what`.
void expect_error(const ap_core_params& p, const std::string& what) {
    try {
        ap_core ap(p);
        ADD_FAILURE() << "no error for " << what;
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
}

TEST(ap_core, when_backlogged_then_every_slot_carries_one_tb_of_the_mcs_size) {
    ap_core ap(two_users());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(ap.on_downlink_packet(0, ipv4_to(1, 100)));
    ap.on_cqi(0, 0, 20.0, 0);  // high MCS
    std::uint32_t prev_seq = 0;
    for (std::uint64_t s = 0; s < 4; ++s) {
        const auto g = request(ap, s);
        ASSERT_FALSE(g.empty);
        EXPECT_EQ(g.slot, s);
        EXPECT_EQ(g.user, 0);
        EXPECT_EQ(g.mcs, 1);
        EXPECT_EQ(g.tb.size(), 500u);
        EXPECT_EQ(g.tb.size(), ap.tb_bytes_for_mcs(1));
        const auto pdu = parse_ok(g);
        EXPECT_EQ(pdu.header.user, 0);
        if (s > 0) {
            EXPECT_EQ(pdu.header.seq, prev_seq + 1);
        }
        prev_seq = pdu.header.seq;
        ap.on_harq_feedback(0, s, g.harq_pid, true);
    }
    EXPECT_EQ(ap.stats().grants_new, 4u);
    EXPECT_EQ(ap.harq_stats().acked, 4u);
}

TEST(ap_core, when_no_cqi_yet_then_the_lowest_mcs_is_used) {
    ap_core ap(two_users());
    ASSERT_TRUE(ap.on_downlink_packet(0, ipv4_to(2, 300)));
    EXPECT_EQ(ap.mcs_for(1), 0);
    const auto g = request(ap, 0);
    ASSERT_FALSE(g.empty);
    EXPECT_EQ(g.user, 1);
    EXPECT_EQ(g.mcs, 0);
    EXPECT_EQ(g.tb.size(), 125u);
}

TEST(ap_core, when_cqi_below_every_threshold_then_the_user_is_not_served) {
    ap_core ap(two_users());
    ASSERT_TRUE(ap.on_downlink_packet(0, ipv4_to(2, 300)));
    ap.on_cqi(1, 0, -5.0, 0);
    EXPECT_EQ(ap.mcs_for(1), linkadapt::kNoMcs);
    EXPECT_TRUE(request(ap, 0).empty);
    ap.on_cqi(1, 1, 3.0, 0);
    EXPECT_FALSE(request(ap, 1).empty);
}

TEST(ap_core, when_olla_backs_off_past_the_lowest_mcs_then_a_user_reporting_it_keeps_it) {
    ap_core_params p = two_users();
    p.olla.initial_offset_db = -8.0;  // as after many NACKs at the higher MCS
    ap_core ap(p);
    ap.on_downlink_packet(0, ipv4_to(1, 60));
    ap.on_cqi(0, 0, 5.0, 0);  // meets "low" (0 dB) by itself, not with the -8 dB offset
    EXPECT_EQ(ap.mcs_for(0), 0);
    EXPECT_FALSE(request(ap, 0).empty);
    ap.on_cqi(0, 0, 15.0, 0);  // 15 - 8 = 7 dB: still the low MCS, not the high one
    EXPECT_EQ(ap.mcs_for(0), 0);
    ap.on_cqi(0, 0, -1.0, 0);  // the user itself reports zero rate: not served
    EXPECT_EQ(ap.mcs_for(0), linkadapt::kNoMcs);
}

TEST(ap_core, when_nacked_then_the_retransmission_preempts_new_data) {
    ap_core ap(two_users());
    for (int i = 0; i < 10; ++i) {
        ap.on_downlink_packet(0, ipv4_to(1, 200));
        ap.on_downlink_packet(0, ipv4_to(2, 200));
    }
    ap.on_cqi(0, 0, 20.0, 0);
    ap.on_cqi(1, 0, 20.0, 0);
    const auto first = request(ap, 0);
    ASSERT_FALSE(first.empty);
    ap.on_harq_feedback(first.user, 0, first.harq_pid, false);  // NACK
    const auto second = request(ap, 1);                         // due at 0 + feedback_delay (1)
    ASSERT_FALSE(second.empty);
    EXPECT_EQ(second.user, first.user);
    EXPECT_EQ(second.harq_pid, first.harq_pid);
    EXPECT_EQ(second.ndi, first.ndi);
    EXPECT_EQ(second.tb, first.tb);
    EXPECT_EQ(second.rv, 2);  // rv_sequence {0, 2, 3, 1}
    EXPECT_EQ(ap.stats().grants_retx, 1u);
    ap.on_harq_feedback(second.user, 1, second.harq_pid, true);
    const auto third = request(ap, 2);
    ASSERT_FALSE(third.empty);
    EXPECT_NE(third.tb, first.tb);
}

TEST(ap_core, when_max_transmissions_reached_then_exactly_the_carried_packets_are_dropped) {
    auto p = two_users();
    p.harq.max_transmissions = 2;
    ap_core ap(p);
    // Low MCS: 125-byte TBs. 16 header + 4 CRC leave 105: a 60-byte packet (8 + 60) and
    // 29 bytes of the next one (8 + 29). The third packet is not touched.
    for (int i = 0; i < 3; ++i) ap.on_downlink_packet(0, ipv4_to(1, 60));
    const auto enq = ap.take_packet_records();
    ASSERT_EQ(enq.size(), 3u);
    const auto g = request(ap, 0);
    ASSERT_FALSE(g.empty);
    const auto pdu = parse_ok(g);
    ASSERT_EQ(pdu.segments.size(), 2u);
    EXPECT_TRUE(pdu.segments[0].first() && pdu.segments[0].last());
    EXPECT_FALSE(pdu.segments[1].last());
    std::set<std::uint64_t> carried;
    for (const auto& r : ap.take_packet_records())
        if (std::string(r.event) == "dequeue") carried.insert(r.packet_id);
    ASSERT_EQ(carried.size(), 2u);

    ap.on_harq_feedback(0, 0, g.harq_pid, false);
    const auto retx = request(ap, 1);
    ASSERT_EQ(retx.tb, g.tb);
    ap.on_harq_feedback(0, 1, retx.harq_pid, false);  // 2nd NACK: max_transmissions
    EXPECT_EQ(ap.stats().harq_dropped_tbs, 1u);
    EXPECT_EQ(ap.stats().harq_dropped_packets, 2u);
    std::set<std::uint64_t> dropped;
    for (const auto& r : ap.take_packet_records()) {
        if (std::string(r.event) == "drop") {
            EXPECT_EQ(r.reason, "harq_max_tx");
            dropped.insert(r.packet_id);
        }
    }
    EXPECT_EQ(dropped, carried);
    EXPECT_NE(dropped.count(enq[2].packet_id), 1u);
    const auto rows = ap.final_rows();
    ASSERT_GE(rows.size(), 2u);
    EXPECT_EQ(rows[0].outcome, "nack");
    EXPECT_EQ(rows[1].outcome, "dropped");
    EXPECT_EQ(rows[1].retx, 1);
}

// Andrew & Hanly, CLAMP, §IV-A: mu_c is the rate the queue would get if every user were
// backlogged. Two users at the same rate, only ue0 with data: it is served every slot
// (measured mu_c = a whole TB's data per slot), but PF with both backlogged alternates, so
// all_backlogged gives half of that.
TEST(ap_core,
     when_mu_c_is_all_backlogged_then_an_alone_backlogged_queue_counts_only_its_fair_share) {
    for (const auto mode : {mu_c_mode::measured, mu_c_mode::all_backlogged}) {
        auto p = two_users();
        p.clamp.enabled = true;
        p.clamp.mu = mode;
        p.clamp.mu_init_slots = 32;
        ap_core ap(p);
        for (int i = 0; i < 100; ++i) ap.on_downlink_packet(0, ipv4_to(1, 472));
        for (std::uint64_t s = 0; s < 32; ++s) {
            ap.on_cqi(0, s, 20.0, 0);
            ap.on_cqi(1, s, 20.0, 0);
            const auto g = request(ap, s);
            ASSERT_FALSE(g.empty);
            ASSERT_EQ(g.user, 0);  // ue1 has nothing to send
            ap.on_harq_feedback(0, s, g.harq_pid, true);
        }
        ASSERT_TRUE(ap.mu_c_bps(0).has_value()) << to_string(mode);
        const double whole = (500.0 - 20 - 8) * 8 / kSlot;  // one 472-byte packet per TB
        EXPECT_NEAR(*ap.mu_c_bps(0), mode == mu_c_mode::measured ? whole : whole / 2, 1e-6)
            << to_string(mode);
    }
}

TEST(ap_core, when_clamp_is_on_then_the_pdu_carries_the_router_agents_price) {
    auto p = two_users();
    p.clamp.enabled = true;
    p.clamp.router.a_bytes = 0.0;  // any backlog gives a positive price
    p.clamp.mu_init_slots = 2;
    ap_core ap(p);
    ap.on_cqi(0, 0, 20.0, 0);
    for (int i = 0; i < 40; ++i) ap.on_downlink_packet(t_of(0) + i, ipv4_to(1, 400));
    const auto g0 = request(ap, 0);  // mu_c not known yet: no price
    EXPECT_FALSE(parse_ok(g0).header.price_s.has_value());
    EXPECT_EQ(ap.stats().tbs_without_price, 1u);
    ap.on_harq_feedback(0, 0, g0.harq_pid, true);
    ap.on_harq_feedback(0, 1, request(ap, 1).harq_pid, true);
    ASSERT_TRUE(ap.mu_c_bps(0).has_value());
    EXPECT_NEAR(*ap.mu_c_bps(0), (500.0 - 20 - 16) * 8 / kSlot, 1000.0);  // ~ data bytes/slot
    for (std::uint64_t s = 2; s < 5; ++s) {
        const double mu = std::max(*ap.mu_c_bps(0), p.clamp.mu_floor_bps);
        const double expected = ap.router_of(0).peek_price(mu / 8.0);
        ASSERT_GT(expected, 0.0);
        EXPECT_EQ(ap.price(0).value(), expected);
        const auto g = request(ap, s);
        const auto pdu = parse_ok(g);
        ASSERT_TRUE(pdu.header.price_s.has_value());
        EXPECT_EQ(*pdu.header.price_s, static_cast<float>(expected));
        ap.on_harq_feedback(0, s, g.harq_pid, true);
    }
    EXPECT_EQ(ap.router_of(0).stats().prices, 3u);  // slots 0 and 1 had no mu_c yet
    EXPECT_EQ(ap.stats().tbs_without_price, 2u);
    EXPECT_EQ(ap.router_of(0).stats().arrivals, 40u);
}

TEST(ap_core, when_clamp_is_off_then_no_price_is_stamped) {
    ap_core ap(two_users());
    ap.on_downlink_packet(0, ipv4_to(1, 100));
    EXPECT_FALSE(parse_ok(request(ap, 0)).header.price_s.has_value());
    EXPECT_FALSE(ap.price(0).has_value());
}

TEST(ap_core, when_destination_is_unknown_then_the_packet_is_dropped_and_counted) {
    ap_core ap(two_users());
    EXPECT_FALSE(ap.on_downlink_packet(0, ipv4_to(77, 100)));
    EXPECT_FALSE(ap.on_downlink_packet(0, {0x45, 0x00}));  // truncated
    EXPECT_EQ(ap.stats().unknown_destination, 1u);
    EXPECT_EQ(ap.stats().malformed_packets, 1u);
    EXPECT_EQ(ap.queued_bytes(0) + ap.queued_bytes(1), 0u);
    const auto recs = ap.take_packet_records();
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[0].reason, "unknown_destination");
    EXPECT_EQ(recs[0].user, -1);
    EXPECT_TRUE(request(ap, 0).empty);
}

TEST(ap_core, when_destination_is_ipv6_then_it_is_classified_by_its_address) {
    ap_core ap(two_users());
    EXPECT_EQ(ap.classify(ipv6_to_fd00(1, 80)), std::optional<std::uint32_t>(0));
    EXPECT_EQ(ap.classify(ipv6_to_fd00(9, 80)), std::nullopt);
    EXPECT_TRUE(ap.on_downlink_packet(0, ipv6_to_fd00(1, 80)));
    EXPECT_EQ(ap.queued_bytes(0), 80u);
}

// SPM-AF's priority from the senders' DSCP mark (ap_core_params::priority_dscp).

// A TCP data packet of 1000 IP bytes from 10.0.0.9 / fd00::9 to user 0 (10.0.0.1 /
// fd00::1) carrying `dscp`, ECN field ECT(0), the IPv4 header checksum valid.
std::vector<std::uint8_t> tcp_data_to_user0(std::uint8_t dscp, std::uint8_t ip_version = 4) {
    aqm::testing::tcp_spec t;
    t.ip_version = ip_version;
    t.src_host = 9;
    t.dst_host = 1;
    t.ecn = tcpip::kEct0;
    t.flags = tcpip::kAck | tcpip::kPsh;
    t.payload = 1000 - 20 - (ip_version == 4 ? 20 : 40);
    auto b = aqm::testing::tcp_packet(t);
    const std::uint8_t tos = static_cast<std::uint8_t>(dscp << 2 | tcpip::kEct0);
    if (ip_version == 4) {
        b[1] = tos;
        aqm::testing::put16(b, 10, aqm::testing::ipv4_checksum(b));
    } else {  // the traffic class straddles bytes 0 and 1
        b[0] = static_cast<std::uint8_t>(0x60 | tos >> 4);
        b[1] = static_cast<std::uint8_t>((tos & 0x0f) << 4 | (b[1] & 0x0f));
    }
    return b;
}

// SPM-AF with room for 3 packets, full of unmarked data for user 0.
ap_core_params full_spmaf(std::optional<std::uint8_t> priority_dscp) {
    auto p = two_users();
    p.aqm = aqm::default_config(aqm::aqm_kind::spmaf);
    p.aqm.limits = {0, 3};
    p.priority_dscp = priority_dscp;
    return p;
}

std::uint64_t evicted(const ap_core& ap) {
    return ap.stats().queue_drops[static_cast<std::size_t>(aqm::drop_reason::evicted_low_priority)];
}
std::uint64_t overflowed(const ap_core& ap) {
    return ap.stats().queue_drops[static_cast<std::size_t>(aqm::drop_reason::overflow)];
}

TEST(ap_core, when_a_packet_carries_the_priority_dscp_then_spmaf_queues_it_as_high_priority) {
    for (const std::uint8_t v : {4, 6}) {
        ap_core ap(full_spmaf(3));
        for (int i = 0; i < 3; ++i) ASSERT_TRUE(ap.on_downlink_packet(0, tcp_data_to_user0(0, v)));
        // Marked: the queue is full, so only a high-priority packet gets in, evicting the
        // oldest low-priority one (Wu, Gong & Williamson, §6.1).
        EXPECT_TRUE(ap.on_downlink_packet(1, tcp_data_to_user0(3, v))) << "IPv" << int(v);
        EXPECT_EQ(evicted(ap), 1u);
        EXPECT_EQ(overflowed(ap), 0u);
        // Other code points are low priority: dropped at the full queue.
        for (const std::uint8_t other : {0, 2, 8, 12, 63})
            EXPECT_FALSE(ap.on_downlink_packet(2, tcp_data_to_user0(other, v))) << int(other);
        EXPECT_EQ(evicted(ap), 1u);
        EXPECT_EQ(overflowed(ap), 5u);
    }
}

TEST(ap_core, when_the_priority_dscp_is_another_code_point_then_only_that_one_is_high_priority) {
    ap_core ap(full_spmaf(46));
    for (int i = 0; i < 3; ++i) ap.on_downlink_packet(0, tcp_data_to_user0(0));
    EXPECT_FALSE(ap.on_downlink_packet(1, tcp_data_to_user0(3)));
    EXPECT_TRUE(ap.on_downlink_packet(1, tcp_data_to_user0(46)));
    EXPECT_EQ(evicted(ap), 1u);
}

TEST(ap_core, when_priority_dscp_is_null_then_no_packet_is_high_priority) {
    ap_core ap(full_spmaf(std::nullopt));
    for (int i = 0; i < 3; ++i) ap.on_downlink_packet(0, tcp_data_to_user0(0));
    for (const std::uint8_t d : {0, 3, 46, 63})
        EXPECT_FALSE(ap.on_downlink_packet(1, tcp_data_to_user0(d)));
    EXPECT_EQ(evicted(ap), 0u);
    EXPECT_EQ(overflowed(ap), 4u);
}

TEST(ap_core, when_priority_dscp_is_not_a_code_point_then_the_error_names_it) {
    auto p = two_users();
    p.priority_dscp = 64;
    try {
        ap_core ap(p);
        FAIL() << "accepted priority_dscp 64";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("priority_dscp: 64"), std::string::npos) << e.what();
    }
}

TEST(ap_core, when_queue_is_shared_then_the_head_of_line_user_blocks_the_better_one) {
    for (const auto mode : {aqm::queue_mode::per_user, aqm::queue_mode::shared}) {
        auto p = two_users();
        p.queue_mode = mode;
        p.scheduler = sched::max_rate_params{};
        ap_core ap(p);
        ap.on_cqi(0, 0, 1.0, 0);                    // poor: low MCS
        ap.on_cqi(1, 0, 20.0, 0);                   // good: max rate would pick it
        ap.on_downlink_packet(0, ipv4_to(1, 100));  // user 0 at the head of line
        ap.on_downlink_packet(1, ipv4_to(2, 100));
        const auto g = request(ap, 0);
        ASSERT_FALSE(g.empty);
        EXPECT_EQ(g.user, mode == aqm::queue_mode::shared ? 0 : 1);
    }
}

TEST(ap_core, when_harq_first_is_off_then_a_retransmission_waits_until_the_scheduler_picks_it) {
    for (const bool harq_first : {true, false}) {
        SCOPED_TRACE(harq_first);
        auto p = two_users();
        p.scheduler = sched::max_rate_params{};
        p.harq_first = harq_first;
        ap_core ap(p);
        ap.on_cqi(0, 0, 1.0, 0);
        ap.on_cqi(1, 0, 20.0, 0);  // the better user: max-rate picks it whenever it can
        ap.on_downlink_packet(0, ipv4_to(1, 100));
        const auto first = request(ap, 0);
        ASSERT_EQ(first.user, 0);
        ap.on_harq_feedback(0, 0, first.harq_pid, false);  // NACK: due from slot 1
        ap.on_downlink_packet(0, ipv4_to(2, 100));         // one TB's worth for user 1
        const auto second = request(ap, 1);
        if (harq_first) {
            EXPECT_EQ(second.user, 0);
            EXPECT_EQ(second.tb, first.tb);
            continue;
        }
        EXPECT_EQ(second.user, 1);  // the retransmission competed and lost
        ap.on_harq_feedback(1, 1, second.harq_pid, true);
        const auto third = request(ap, 2);  // user 1 has nothing left: user 0 is chosen
        EXPECT_EQ(third.user, 0);
        EXPECT_EQ(third.tb, first.tb);
        EXPECT_EQ(third.ndi, first.ndi);
        EXPECT_EQ(ap.stats().grants_retx, 1u);
    }
}

TEST(ap_core, when_only_one_user_is_backlogged_then_the_scheduler_serves_only_it) {
    auto p = two_users();
    p.scheduler = sched::max_rate_params{};
    ap_core ap(p);
    ap.on_cqi(0, 0, 1.0, 0);
    ap.on_cqi(1, 0, 20.0, 0);  // better, but nothing queued
    for (int i = 0; i < 3; ++i) ap.on_downlink_packet(0, ipv4_to(1, 100));
    const auto g = request(ap, 0);
    ASSERT_FALSE(g.empty);
    EXPECT_EQ(g.user, 0);
    ap.on_harq_feedback(0, 0, g.harq_pid, true);
    // 3 x 100 bytes at the low MCS: 125-byte TBs carry 97 data bytes each with one segment
    // header, 86 + 3 with two: 4 TBs, then empty slots.
    for (std::uint64_t s = 1; s < 10; ++s) {
        const auto gs = request(ap, s);
        EXPECT_EQ(gs.empty, s >= 4) << s;
        if (!gs.empty) {
            EXPECT_EQ(gs.user, 0);
            ap.on_harq_feedback(0, s, gs.harq_pid, true);
        }
    }
    EXPECT_EQ(ap.stats().grants_new, 4u);
    EXPECT_EQ(ap.user_stats(1).slots_new, 0u);
    EXPECT_EQ(ap.user_stats(0).data_bytes, 300u);
}

// The capacity c a rate-based AQM measures (aqm.h, rate_params) on a constant 10 Mb/s link
// (one MCS, no errors, 3 ms slots: 3750-byte TBs) fed by 1000-byte packets at random times:
// the slot's service reports give c within 2 % of the link rate at light and at heavy load.
// Counting dequeue to dequeue (the estimator before) cannot: every packet of a TB leaves at
// the slot request, so a busy period's last TB was counted without its slot (on
// experiments/reaqm's 10 Mb/s link it read 12.4-31.1 Mb/s).
double measured_capacity_bps(double load, std::uint64_t seed) {
    ap_core_params p;
    p.users = {{"ue0", {"10.0.0.1"}, {}, {}}};
    p.table = linkadapt::mcs_table("const", {{"only", -100.0, 10e6, 0, 0.0}});
    p.slot_s = 3e-3;
    p.lead_slots = 2;
    p.harq.max_transmissions = 1;
    p.aqm = aqm::default_config(aqm::aqm_kind::reaqm);
    p.aqm.limits = {0, 1000};
    ap_core ap(p);
    ap.on_cqi(0, 0, 30.0, 0);
    constexpr time_ns slot = 3 * kNsPerMs;
    const double packets_per_s = load * 10e6 / (8.0 * 1000.0);
    std::mt19937_64 rng(seed);
    std::exponential_distribution<double> gap(packets_per_s);
    time_ns next_arrival = 0;
    for (std::uint64_t s = 0; s < 20000; ++s) {  // 60 s
        const time_ns t = static_cast<time_ns>(s) * slot;
        while (next_arrival < t) {
            ap.on_downlink_packet(next_arrival, ipv4_to(1, 1000));
            next_arrival += static_cast<time_ns>(gap(rng) * 1e9);
        }
        const auto g = ap.on_slot_request(t, s, t + 2 * slot);
        if (!g.empty) ap.on_harq_feedback(0, s, g.harq_pid, true);
    }
    for (const auto& [name, value] : ap.gauges())
        if (name == "aqm.ue0.service_rate_bps") return value;
    ADD_FAILURE() << "no aqm.ue0.service_rate_bps gauge";
    return 0.0;
}

TEST(ap_core, a_measured_capacity_is_the_constant_links_rate_at_light_and_heavy_load) {
    for (const double load : {0.2, 0.5, 0.9}) {
        const double c = measured_capacity_bps(load, 7);
        // IP bytes over the time they filled: 10 Mb/s less the PDU's headers and CRC (~1 %).
        EXPECT_NEAR(c, 10e6, 0.02 * 10e6) << "load " << load;
        EXPECT_LE(c, 10e6) << "load " << load;
    }
}

// The slot trace's aqm_price: REM's and REAQM's link price p in every row, so p(t) can be
// plotted. 1000-byte packets at 1.5 times a constant 10 Mb/s link for 3 s: the price rises
// from 0 in the first rows and the last row's is the aqm.ue0.price gauge; RED keeps no
// price and its rows say NaN.
struct price_run {
    std::vector<slot_row> rows;
    double gauge = -1.0;
};
price_run aqm_price_rows(aqm::aqm_kind kind) {
    ap_core_params p;
    p.users = {{"ue0", {"10.0.0.1"}, {}, {}}};
    p.table = linkadapt::mcs_table("const", {{"only", -100.0, 10e6, 0, 0.0}});
    p.slot_s = 3e-3;
    p.lead_slots = 2;
    p.harq.max_transmissions = 1;
    p.aqm = aqm::default_config(kind);
    p.aqm.limits = {0, 50};
    ap_core ap(p);
    ap.on_cqi(0, 0, 30.0, 0);
    constexpr time_ns slot = 3 * kNsPerMs;
    const time_ns gap = static_cast<time_ns>(1e9 / (1.5 * 10e6 / 8000.0));
    time_ns next_arrival = 0;
    price_run out;
    for (std::uint64_t s = 0; s < 1000; ++s) {
        const time_ns t = static_cast<time_ns>(s) * slot;
        for (; next_arrival < t; next_arrival += gap)
            ap.on_downlink_packet(next_arrival, ipv4_to(1, 1000));
        const auto g = ap.on_slot_request(t, s, t + 2 * slot);
        if (!g.empty) ap.on_harq_feedback(0, s, g.harq_pid, true);
        for (auto& r : ap.take_slot_rows()) out.rows.push_back(std::move(r));
    }
    for (auto& r : ap.final_rows()) out.rows.push_back(std::move(r));
    for (const auto& [name, value] : ap.gauges())
        if (name == "aqm.ue0.price") out.gauge = value;
    return out;
}

TEST(ap_core, the_slot_trace_carries_rem_and_reaqm_link_price_and_nan_for_red) {
    for (const auto kind : {aqm::aqm_kind::reaqm, aqm::aqm_kind::rem}) {
        const auto run = aqm_price_rows(kind);
        ASSERT_GE(run.rows.size(), 900u) << aqm::to_string(kind);
        ASSERT_EQ(run.rows.front().aqm_price.size(), 1u);
        EXPECT_EQ(run.rows.front().aqm_price[0], 0.0) << aqm::to_string(kind);
        EXPECT_GT(run.gauge, 0.0) << aqm::to_string(kind);
        EXPECT_EQ(run.rows.back().aqm_price[0], run.gauge) << aqm::to_string(kind);
        for (std::size_t i = 1; i < run.rows.size(); ++i)
            ASSERT_FALSE(std::isnan(run.rows[i].aqm_price[0]))
                << aqm::to_string(kind) << " row " << i;
    }
    const auto red = aqm_price_rows(aqm::aqm_kind::red);
    ASSERT_FALSE(red.rows.empty());
    for (const auto& r : red.rows) ASSERT_TRUE(std::isnan(r.aqm_price[0]));
}

TEST(ap_core, when_every_harq_process_waits_then_the_user_is_not_eligible) {
    auto p = two_users();
    p.harq.num_processes = 2;
    p.harq.feedback_delay_slots = 3;
    ap_core ap(p);
    for (int i = 0; i < 20; ++i) ap.on_downlink_packet(0, ipv4_to(1, 100));
    EXPECT_FALSE(request(ap, 0).empty);
    EXPECT_FALSE(request(ap, 1).empty);
    EXPECT_TRUE(request(ap, 2).empty);  // both processes await feedback
}

TEST(ap_core, when_requests_are_duplicate_late_or_out_of_order_then_they_are_counted) {
    ap_core ap(two_users());
    for (int i = 0; i < 50; ++i) ap.on_downlink_packet(0, ipv4_to(1, 100));
    const auto g10 = request(ap, 10);
    const auto g11 = request(ap, 11);
    ASSERT_FALSE(g10.empty);
    EXPECT_EQ(request(ap, 11), g11);  // duplicate: the same grant again
    EXPECT_EQ(ap.stats().requests_duplicate, 1u);
    EXPECT_TRUE(request(ap, 5).empty);  // never granted, older than the newest
    EXPECT_EQ(ap.stats().requests_out_of_order, 1u);
    request(ap, 20);  // 12..19 skipped
    EXPECT_EQ(ap.stats().slots_skipped, 8u);
    EXPECT_EQ(request(ap, 10), g10);          // cached and late (20 >= 10 + lead 2)
    EXPECT_EQ(ap.stats().requests_late, 2u);  // slot 5 (after 11) and slot 10 (after 20)
    EXPECT_EQ(ap.stats().slot_requests, 6u);
    EXPECT_EQ(ap.stats().grants_new, 3u);
}

TEST(ap_core, when_the_phy_restarts_then_slot_numbers_from_zero_are_granted_again) {
    ap_core ap(two_users());
    for (int i = 0; i < 50; ++i) ap.on_downlink_packet(0, ipv4_to(1, 100));
    for (std::uint64_t s = 100; s < 105; ++s) {
        const auto g = request(ap, s);
        ap.on_harq_feedback(g.user, s, g.harq_pid, true);
    }
    ap.on_phy_restart();
    ap.on_phy_restart();  // idempotent until the next request
    EXPECT_EQ(ap.stats().phy_restarts, 1u);
    const auto g = request(ap, 0);
    EXPECT_FALSE(g.empty);
    EXPECT_EQ(g.slot, 0u);
    EXPECT_EQ(ap.stats().requests_out_of_order, 0u);
    // Without a sequence restart, a jump back beyond restart_backjump_slots is one too.
    auto p = two_users();
    p.restart_backjump_slots = 10;
    ap_core ap2(p);
    for (int i = 0; i < 50; ++i) ap2.on_downlink_packet(0, ipv4_to(1, 100));
    request(ap2, 500);
    EXPECT_TRUE(request(ap2, 495).empty);  // within the window: out of order
    EXPECT_FALSE(request(ap2, 3).empty);   // far back: restart
    EXPECT_EQ(ap2.stats().slot_backjumps, 1u);
}

TEST(ap_core, when_feedback_never_comes_then_the_tb_times_out_and_the_row_says_so) {
    ap_core ap(two_users());
    ap.on_downlink_packet(0, ipv4_to(1, 60));  // one TB
    const auto g = request(ap, 0);
    ASSERT_FALSE(g.empty);
    for (std::uint64_t s = 1; s <= 8; ++s) request(ap, s);
    EXPECT_EQ(ap.stats().harq_timeout_tbs, 1u);
    const auto rows = ap.take_slot_rows();
    ASSERT_EQ(rows.size(), 9u);
    EXPECT_EQ(rows[0].outcome, "timeout");
    EXPECT_EQ(rows[0].user, 0);
    EXPECT_EQ(rows[1].user, -1);
    EXPECT_EQ(rows[1].mcs, -1);
    EXPECT_EQ(rows[1].outcome, "");
    // Late feedback for it is stale.
    ap.on_harq_feedback(0, 0, g.harq_pid, true);
    EXPECT_EQ(ap.stats().feedback_stale, 1u);
}

// The late-grant hazard (docs/daemons.md "Slot timing"): a grant that reaches the PHY late
// makes its slot go out empty, so the client answers nothing for it but still reports the
// CQI of that slot. The TB must go again on its process with the NDI it was given (new to
// the receiver); were it counted as sent, the next TB would carry the NDI of the last TB on
// air, the receiver would deliver that one again, and the new TB would be ACKed and lost.
TEST(ap_core, when_the_client_reports_a_slot_without_feedback_then_the_tb_goes_again_same_ndi) {
    ap_core_params p = two_users();
    p.harq.num_processes = 1;
    ap_core ap(p);
    for (int i = 0; i < 3; ++i) ap.on_downlink_packet(0, ipv4_to(1, 90));
    ap.on_cqi(0, 0, 5.0, 0);  // low MCS: 125-byte TBs, one 90-byte packet each
    const auto z = request(ap, 0);
    ASSERT_FALSE(z.empty);
    ap.on_harq_feedback(0, 0, z.harq_pid, true);  // feedback first, then the slot's CQI
    ap.on_cqi(0, 0, 5.0, 1);
    EXPECT_EQ(ap.harq_stats().not_received, 0u);
    const auto a = request(ap, 1);  // its grant is late at the PHY: slot 1 goes out empty
    ASSERT_FALSE(a.empty);
    ASSERT_NE(a.ndi, z.ndi);
    ap.on_cqi(0, 1, 5.0, 1);  // the client heard slot 1 (addressed to nobody): no feedback
    EXPECT_EQ(ap.harq_stats().not_received, 1u);
    const auto a2 = request(ap, 2);
    ASSERT_FALSE(a2.empty);
    EXPECT_EQ(a2.harq_pid, a.harq_pid);
    EXPECT_EQ(a2.ndi, a.ndi);  // never toggled back to the NDI the receiver holds
    EXPECT_EQ(a2.rv, a.rv);    // the undone transmission is repeated, not the next RV
    EXPECT_EQ(a2.tb, a.tb);
    EXPECT_EQ(ap.harq_stats().acked, 1u);  // only Z so far
    ap.on_harq_feedback(0, 2, a2.harq_pid, true);
    EXPECT_EQ(ap.harq_stats().acked, 2u);
    const auto b = request(ap, 3);
    ASSERT_FALSE(b.empty);
    EXPECT_NE(b.tb, a.tb);
    EXPECT_NE(b.ndi, a.ndi);
    const auto rows = ap.take_slot_rows();
    ASSERT_GE(rows.size(), 3u);
    EXPECT_EQ(rows[0].outcome, "ack");
    EXPECT_EQ(rows[1].outcome, "unheard");
    EXPECT_EQ(rows[1].retx, 0);
    EXPECT_EQ(rows[2].outcome, "ack");
    EXPECT_EQ(rows[2].retx, 1);  // the TB's second slot
    EXPECT_EQ(ap.stats().harq_timeout_tbs, 0u);
}

TEST(ap_core, when_the_cqi_is_for_an_earlier_slot_then_the_tb_still_waits_for_its_feedback) {
    ap_core ap(two_users());
    ap.on_downlink_packet(0, ipv4_to(1, 60));
    request(ap, 0);
    const auto g = request(ap, 1);  // nothing else queued: slot 0 carried the TB
    EXPECT_TRUE(g.empty);
    ap.on_cqi(0, 0, 20.0, 1);  // CQI of slot 0 without feedback: not received
    EXPECT_EQ(ap.harq_stats().not_received, 1u);
    const auto again = request(ap, 2);
    ASSERT_FALSE(again.empty);
    ap.on_cqi(0, 1, 20.0, 1);  // slot 1 is before the retransmission (slot 2): no effect
    ap.on_cqi(1, 5, 20.0, 1);  // another user's report: no effect
    EXPECT_EQ(ap.harq_stats().not_received, 1u);
    ap.on_harq_feedback(0, 2, again.harq_pid, true);
    EXPECT_EQ(ap.harq_stats().acked, 1u);
}

TEST(ap_core, when_feedback_is_invalid_then_it_is_counted_and_ignored) {
    ap_core ap(two_users());
    ap.on_harq_feedback(0, 0, 0, true);   // before any slot
    ap.on_harq_feedback(7, 0, 0, true);   // no such user
    ap.on_harq_feedback(0, 0, 15, true);  // no such process
    ap.on_cqi(9, 0, 1.0, 0);
    ap.on_cqi(0, 0, std::nan(""), 0);
    EXPECT_EQ(ap.stats().feedback_stale, 1u);
    EXPECT_EQ(ap.stats().feedback_unknown_user, 1u);
    EXPECT_EQ(ap.stats().feedback_invalid_process, 1u);
    EXPECT_EQ(ap.stats().cqi_unknown_user, 1u);
    EXPECT_EQ(ap.stats().cqi_invalid, 1u);
}

TEST(ap_core, when_rows_complete_then_they_leave_in_slot_order_with_their_outcomes) {
    ap_core ap(two_users());
    for (int i = 0; i < 10; ++i) ap.on_downlink_packet(0, ipv4_to(1, 100));
    ap.on_cqi(1, 0, 12.0, 0);
    const auto g0 = request(ap, 0);
    const auto g1 = request(ap, 1);
    EXPECT_TRUE(ap.take_slot_rows().empty());  // both wait for feedback
    ap.on_harq_feedback(0, 1, g1.harq_pid, true);
    EXPECT_TRUE(ap.take_slot_rows().empty());  // slot 0 still open
    ap.on_harq_feedback(0, 0, g0.harq_pid, false);
    const auto rows = ap.take_slot_rows();
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].slot, 0u);
    EXPECT_EQ(rows[0].outcome, "nack");
    EXPECT_EQ(rows[1].outcome, "ack");
    EXPECT_EQ(rows[0].t_ns, t_of(0) + 20 * kNsPerMs);
    ASSERT_EQ(rows[0].cqi.size(), 2u);
    EXPECT_TRUE(std::isnan(rows[0].cqi[0]));
    EXPECT_EQ(rows[0].cqi[1], 12.0);
    EXPECT_EQ(rows[0].queue[0], 1000u);
    EXPECT_EQ(ap.harq_stats().nacks, 1u);
}

TEST(ap_core, when_params_are_invalid_then_the_error_names_the_field_and_value) {
    auto p = two_users();
    p.users[1].addresses = {"10.0.0.300"};
    expect_error(p, "users[1].addresses[0]: '10.0.0.300'");
    p = two_users();
    p.users[1].addresses = {"10.0.0.1"};
    expect_error(p, "users[1].addresses[0]: '10.0.0.1' is also an address of users[0]");
    p = two_users();
    p.users.clear();
    expect_error(p, "users");
    p = two_users();
    p.slot_s = std::nan("");
    expect_error(p, "slot_s: nan");
    p = two_users();
    p.harq.max_transmissions = 0;
    expect_error(p, "harq.max_transmissions: 0");
    p = two_users();
    p.slot_s = 1e-5;  // 125 bytes/s x 10 us: no MCS carries a PDU
    expect_error(p, "link_adaptation.table");
}

TEST(ap_core, when_table_is_evdo_then_mcs_too_small_for_a_pdu_are_unusable) {
    auto p = two_users();
    p.table = linkadapt::mcs_table::evdo();
    p.slot_s = 1.667e-3;
    ap_core ap(p);
    EXPECT_EQ(ap.tb_bytes_for_mcs(0), 0u);  // 38.4 kb/s: 8 bytes
    EXPECT_EQ(ap.tb_bytes_for_mcs(1), 0u);  // 16 bytes
    EXPECT_EQ(ap.tb_bytes_for_mcs(2), 32u);
    ap.on_cqi(0, 0, -12.0, 0);
    EXPECT_EQ(ap.mcs_for(0), linkadapt::kNoMcs);
    EXPECT_EQ(ap.rate_bps(0), 0.0);
}

TEST(ap_core, clamp_table_is_eq18_quantised_as_the_phy_builds_it) {
    const auto t = shannon_table({});
    ASSERT_EQ(t.size(), 32u);
    EXPECT_EQ(t.entries().back().rate_bps, 10e6);
    EXPECT_NEAR(t.entries().back().min_snr_db, 6.03, 0.01);  // W0 log2(1 + N) = C_max
    EXPECT_NEAR(t[0].rate_bps, 312.5e3, 1e-6);
    EXPECT_NEAR(t[0].min_snr_db, -12.9, 0.05);  // docs/daemons.md: 312.5 kb/s at -12.9 dB
    EXPECT_EQ(t.name(), "shannon");
    EXPECT_EQ(t[0].name, "shannon 1/32");
    for (const auto& name : mcs_table_names())
        EXPECT_TRUE(mcs_table_by_name(name).has_value()) << name;
    EXPECT_EQ(mcs_table_by_name("shannon")->name(), "shannon");
    EXPECT_FALSE(mcs_table_by_name("clamp").has_value());  // the apd's config reads the alias
    EXPECT_FALSE(mcs_table_by_name("nope").has_value());
}

TEST(ap_core, counters_and_gauges_use_the_stats_fields_names_under_their_prefixes) {
    ap_core ap(two_users());
    ASSERT_TRUE(ap.on_downlink_packet(0, ipv4_to(1, 100)));
    ap.on_cqi(0, 0, 20.0, 0);
    ASSERT_FALSE(request(ap, 0).empty);
    std::map<std::string, std::uint64_t> c;
    for (const auto& [k, v] : ap.counters()) c[k] = v;
    std::map<std::string, double> g;
    for (const auto& [k, v] : ap.gauges()) g[k] = v;
    EXPECT_EQ(c.at("harq.tb_sent"), 1u);
    EXPECT_EQ(c.at("harq.acked"), 0u);
    EXPECT_EQ(c.at("harq.in_flight"), 1u);
    EXPECT_EQ(c.at("aqm.ue0.offered"), 1u);
    EXPECT_EQ(c.at("aqm.ue0.dropped_total"), 0u);
    EXPECT_EQ(c.count("aqm.ue0.dropped"), 0u);
    EXPECT_EQ(c.at("users.ue0.segmenter.tbs"), 1u);
    EXPECT_EQ(c.at("users.ue0.segmenter.packets_completed"), 1u);
    EXPECT_EQ(g.count("aqm.ue1.price"), 1u);
    EXPECT_EQ(g.at("aqm.ue1.dropping"), 0.0);
    EXPECT_EQ(c.count("aqm.ue1.price"), 0u);  // state is a gauge, never a counter
}

// ---- link_mode::paper (Andrew & Hanly, CLAMP, §V-B) ----

// One user on eq. 18 at the paper's W0 and C_max, 10 ms slots, reports 3 slots ahead.
ap_core_params paper_user(double margin_step = 0.01, double target_loss = 1e-3) {
    ap_core_params p = two_users();
    p.users.resize(1);
    p.table = shannon_table({4.3e6, 10e6, 32});
    p.link = link_mode::paper;
    p.paper.cqi_ahead_slots = 3;
    p.paper.margin_step = margin_step;
    p.paper.target_loss = target_loss;
    p.paper.margin_min = 0.0;  // m never below 0: the arithmetic below starts at the floor
    return p;
}

// floor(slot W0 log2(1 + (1 - m) N) / 8), eq. 18 in whole bytes (below C_max).
std::uint32_t eq18_bytes(double snr_db, double margin = 0.0) {
    const double n = std::pow(10.0, snr_db / 10.0);
    return static_cast<std::uint32_t>(
        std::floor(kSlot * 4.3e6 * std::log2(1.0 + (1.0 - margin) * n) / 8.0));
}

void backlog(ap_core& ap, int packets) {
    for (int i = 0; i < packets; ++i) ASSERT_TRUE(ap.on_downlink_packet(0, ipv4_to(1, 1500)));
}

TEST(ap_core, when_link_mode_is_paper_then_each_tb_holds_the_eq18_bits_of_its_own_slot_snr) {
    ap_core ap(paper_user());
    backlog(ap, 60);
    ap.on_cqi(0, 0, 3.0, 0);  // the SNR at the start of slot 3
    ap.on_cqi(0, 1, 5.0, 0);  // ... of slot 4 (below C_max: 8.9 Mb/s)
    ap.on_cqi(0, 2, 1.0, 0);  // ... of slot 5
    const auto shannon = shannon_table({4.3e6, 10e6, 32});
    for (const auto& [slot, db] :
         std::vector<std::pair<std::uint64_t, double>>{{3, 3.0}, {4, 5.0}, {5, 1.0}}) {
        const auto g = request(ap, slot);
        ASSERT_FALSE(g.empty) << slot;
        const std::uint32_t want = eq18_bytes(db);
        EXPECT_EQ(g.tb.size(), want) << slot;  // unquantised: not the MCS's size
        // the MCS named is the lowest table level that carries the TB
        EXPECT_GE(shannon.bytes_per_slot(g.mcs, kSlot), want);
        if (g.mcs > 0) {
            EXPECT_LT(shannon.bytes_per_slot(g.mcs - 1, kSlot), want);
        }
        EXPECT_NEAR(ap.rate_bps(0), 4.3e6 * std::log2(1.0 + std::pow(10.0, db / 10.0)), 1e-3);
        ap.on_harq_feedback(0, slot, g.harq_pid, true);
    }
    EXPECT_EQ(ap.stats().snr_not_for_slot, 0u);
    // No report for slot 6 yet: the newest earlier one (slot 5's) is used, and counted.
    const auto g6 = request(ap, 6);
    ASSERT_FALSE(g6.empty);
    EXPECT_EQ(g6.tb.size(), eq18_bytes(1.0));
    EXPECT_EQ(ap.stats().snr_not_for_slot, 1u);
    // Above C_max's SNR (6.02 dB): eq. 18 caps the rate at C_max.
    ap.on_cqi(0, 4, 9.0, 0);  // for slot 7
    const auto g7 = request(ap, 7);
    EXPECT_EQ(g7.tb.size(), 12500u);
    EXPECT_DOUBLE_EQ(ap.rate_bps(0), 10e6);
}

TEST(ap_core, when_link_mode_is_paper_then_a_user_without_a_report_for_the_slot_is_not_served) {
    ap_core ap(paper_user());
    backlog(ap, 2);
    EXPECT_TRUE(request(ap, 0).empty);  // no report at all
    ap.on_cqi(0, 0, 10.0, 0);           // for slot 3
    EXPECT_TRUE(request(ap, 1).empty);  // a report only for a later slot
    EXPECT_EQ(ap.mcs_for(0), linkadapt::kNoMcs);
    EXPECT_FALSE(request(ap, 3).empty);
    // Below what a PDU can carry (29 bytes): rate 0, the user waits (not an idle backoff).
    ap.on_cqi(0, 1, -30.0, 0);  // for slot 4
    EXPECT_TRUE(request(ap, 4).empty);
}

TEST(
    ap_core,
    when_link_mode_is_paper_then_a_drop_after_n_attempts_raises_the_margin_and_deliveries_lower_it) {
    // gain 0.1, target 0.1: a drop moves m up by 0.1 (1 - 0.1) = 0.09, a delivery down by 0.01.
    ap_core ap(paper_user(0.1, 0.1));
    backlog(ap, 60);
    std::uint64_t slot = 0;
    auto send = [&](bool ack) {
        for (;; ++slot) {
            ap.on_cqi(0, slot, 6.0, 0);  // for slot + 3
            if (slot < 3) continue;
            const auto g = request(ap, slot);
            if (g.empty) continue;
            ap.on_harq_feedback(0, slot, g.harq_pid, ack);
            const std::size_t bytes = g.tb.size();
            ++slot;
            return bytes;
        }
    };
    EXPECT_EQ(send(true), eq18_bytes(6.0));
    EXPECT_DOUBLE_EQ(ap.margin(0), 0.0);                // a delivery at m = 0: m stays at its floor
    for (std::uint32_t k = 0; k < 3; ++k) send(false);  // n = 3 failed attempts: dropped
    EXPECT_EQ(ap.stats().harq_dropped_tbs, 1u);
    EXPECT_NEAR(ap.margin(0), 0.09, 1e-12);
    // The next new TB is sized with (1 - m) N.
    EXPECT_EQ(send(true), eq18_bytes(6.0, 0.09));
    EXPECT_NEAR(ap.margin(0), 0.08, 1e-12);
    const auto g = ap.gauges();
    const auto it = std::find_if(g.begin(), g.end(),
                                 [](const auto& kv) { return kv.first == "users.ue0.margin"; });
    ASSERT_NE(it, g.end());
    EXPECT_NEAR(it->second, 0.08, 1e-12);
}

TEST(ap_core, when_link_mode_is_paper_then_bad_paper_parameters_name_their_key) {
    auto p = paper_user();
    p.paper.target_loss = 1.0;
    expect_error(p, "link_adaptation.paper.target_loss: 1");
    p = paper_user();
    p.paper.margin_init = 0.995;
    expect_error(p, "link_adaptation.paper.margin_init: 0.995");
    p = paper_user();
    p.paper.w0_hz = 0.0;
    expect_error(p, "link_adaptation.shannon.w0_hz: 0");
    p = paper_user();
    p.paper.margin_max = 1.0;
    expect_error(p, "link_adaptation.paper.margin_max: 1");
    p = paper_user();
    p.paper.margin_step = std::numeric_limits<double>::quiet_NaN();
    expect_error(p, "link_adaptation.paper.margin_step: nan");
}

TEST(ap_core, when_the_cqi_supports_only_38_4_kbps_then_compact_pdus_serve_the_user_intact) {
    // Srinivasan & Baras, Table I at 1.667 ms: 38.4 kb/s is an 8-byte TB. The standard PDU
    // (29 bytes at least) cannot use it; the compact one carries 4 bytes of packets in it.
    std::vector<std::vector<std::uint8_t>> packets;
    for (std::size_t k = 0; k < 5; ++k)
        packets.push_back(ipv4_to(1, 20 + 10 * k, static_cast<std::uint8_t>(0x30 + k)));
    packets.push_back(ipv6_to_fd00(1, 61));
    for (const auto format : {pdu::pdu_format::standard, pdu::pdu_format::compact}) {
        SCOPED_TRACE(pdu::to_string(format));
        ap_core_params p;
        p.users = {{"ue0", {"10.0.0.1", "fd00::1"}, {}, {}}};
        p.table = linkadapt::mcs_table::evdo();
        p.slot_s = 1.667e-3;
        p.lead_slots = 2;
        p.harq.num_processes = 4;
        p.harq.max_transmissions = 3;
        p.harq.feedback_delay_slots = 1;
        p.harq.feedback_timeout_slots = 8;
        p.aqm.limits = {0, 100};
        p.olla_enabled = false;  // ACKs must not lift the MCS above the CQI's
        p.pdu_format = format;
        ap_core ap(p);
        const bool compact = format == pdu::pdu_format::compact;
        EXPECT_EQ(ap.tb_bytes_for_mcs(0), compact ? 8u : 0u);
        for (const auto& pk : packets) ASSERT_TRUE(ap.on_downlink_packet(0, pk));
        client::client_core_params cp;
        cp.user = 0;
        client::client_core client(cp);
        std::vector<std::vector<std::uint8_t>> delivered;
        constexpr double kSnrDb = -11.0;  // above 38.4 kb/s's -12.5 dB, below 76.8's -9.5
        for (std::uint64_t s = 0; s < 200; ++s) {
            ap.on_cqi(0, s, kSnrDb, 0);
            EXPECT_EQ(ap.mcs_for(0), compact ? 0 : linkadapt::kNoMcs);
            const auto g = request(ap, s);
            if (g.empty) continue;
            EXPECT_EQ(g.tb.size(), 8u);
            EXPECT_EQ(g.mcs, 0);
            wire::rx_indication ind;
            ind.slot = s;
            ind.user = g.user;
            ind.mcs = g.mcs;
            ind.harq_pid = g.harq_pid;
            ind.header_ok = ind.addressed = ind.crc_ok = true;
            ind.snr_db = static_cast<float>(kSnrDb);
            ind.tb = g.tb;
            for (auto& pk : client.on_rx_indication(t_of(s), ind).delivered)
                delivered.push_back(std::move(pk));
            ap.on_harq_feedback(0, s, g.harq_pid, true);
        }
        if (compact) {
            // 20+30+40+50+60+61 = 261 bytes in 66 TBs of 4 data bytes.
            EXPECT_EQ(ap.stats().grants_new, 66u);
            EXPECT_EQ(delivered, packets);
            EXPECT_EQ(client.reassembly_stats().malformed, 0u);
        } else {
            EXPECT_EQ(ap.stats().grants_new, 0u);
            EXPECT_TRUE(delivered.empty());
        }
        EXPECT_EQ(ap.queued_bytes(0), compact ? 0u : 261u);
    }
}

TEST(ap_core, the_usable_tb_minimum_and_its_error_follow_the_pdu_format) {
    ap_core_params p = two_users();
    p.table = linkadapt::mcs_table("tiny", {{"a", 0.0, 4000.0, 0, 0.0}});  // 10 ms: 5 bytes
    try {
        ap_core ap(p);
        ADD_FAILURE() << "a 5-byte TB accepted with the standard format";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("has no MCS carrying >= 29 bytes (pdu.format "
                                             "standard)"),
                  std::string::npos)
            << e.what();
    }
    p.pdu_format = pdu::pdu_format::compact;
    ap_core ap(p);
    EXPECT_EQ(ap.tb_bytes_for_mcs(0), 5u);
}

// A policy made outside the library (ap_core_params::scheduler_factory): PF's choices, the
// queue state it was given, and a counter the apd reports as scheduler.<name>.
class queue_state_recorder final : public sched::scheduler_policy {
  public:
    explicit queue_state_recorder(std::size_t n) {
        sched::scheduler_params p;
        p.num_users = n;
        pf_ = sched::make_scheduler(p);
    }
    std::string_view kind() const override { return "recorder"; }
    int choose(const std::vector<double>& r, const std::vector<bool>& b) const override {
        return pf_->choose(r, b);
    }
    void update(const std::vector<double>& r, int u, double bps) override {
        pf_->update(r, u, bps);
    }
    const std::vector<double>& averages() const override { return pf_->averages(); }
    std::size_t num_users() const override { return pf_->num_users(); }
    void set_num_users(std::size_t n) override { pf_->set_num_users(n); }
    void reset_user(std::size_t u) override { pf_->reset_user(u); }
    std::int64_t slots() const override { return pf_->slots(); }
    double alpha() const override { return pf_->alpha(); }
    bool uses_queue_state() const override { return true; }
    void set_queue_state(const sched::queue_state& s) override { states.push_back(s); }
    std::vector<std::pair<std::string, std::uint64_t>> counters() const override {
        return {{"recorded_states", states.size()}};
    }
    std::vector<sched::queue_state> states;

  private:
    std::unique_ptr<sched::scheduler_policy> pf_;
};

TEST(ap_core, when_a_policy_asks_for_the_queue_state_then_it_sees_backlog_and_head_of_line_age) {
    ap_core_params p = two_users();
    queue_state_recorder* made = nullptr;
    p.scheduler_factory = [&made](std::size_t n) {
        auto r = std::make_unique<queue_state_recorder>(n);
        made = r.get();
        return r;
    };
    ap_core ap(p);
    ASSERT_NE(made, nullptr);
    ASSERT_TRUE(ap.on_downlink_packet(t_of(0), ipv4_to(1, 100)));
    ASSERT_TRUE(ap.on_downlink_packet(t_of(1), ipv4_to(1, 60)));
    ap.on_cqi(0, 0, 20.0, 0);
    request(ap, 3);
    ASSERT_EQ(made->states.size(), 1u);
    const sched::queue_state& s = made->states[0];
    EXPECT_EQ(s.backlog_bytes, (std::vector<std::uint64_t>{160, 0}));
    EXPECT_DOUBLE_EQ(s.hol_delay_s[0], 0.03);  // the first packet arrived 3 slots of 10 ms ago
    EXPECT_EQ(s.hol_delay_s[1], 0.0);
    bool reported = false;
    for (const auto& [k, v] : ap.counters())
        if (k == "scheduler.recorded_states") reported = v == 1;
    EXPECT_TRUE(reported);
}

TEST(ap_core, when_the_factory_makes_a_policy_for_another_user_count_then_it_is_refused) {
    ap_core_params p = two_users();
    p.scheduler_factory = [](std::size_t) { return std::make_unique<queue_state_recorder>(3); };
    expect_error(p, "scheduler: the policy made for 2 users has 3");
}

}  // namespace
}  // namespace oppsched::ap
