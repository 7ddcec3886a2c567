// LAS and T-LAS (Wu, Gong & Williamson, §6.2) behaviour.
#include <gtest/gtest.h>

#include "oppsched/aqm.h"
#include "test_aqm_packets.h"

using namespace oppsched;
using namespace oppsched::aqm;
using namespace oppsched::aqm::testing;

namespace {

aqm_params las_config(std::size_t limit, std::size_t threshold = 0) {
    aqm_params c = default_config(threshold ? aqm_kind::tlas : aqm_kind::las);
    c.limits = {0, limit};
    if (threshold) std::get<tlas_params>(c.params).threshold_packets = threshold;
    return c;
}

// Flow A = sport 5000, B = 5001, ...
std::vector<std::uint8_t> pkt(int flow) {
    return data_packet(1000, 0, static_cast<std::uint16_t>(5000 + flow));
}

std::vector<int> drain_flows(harness& h) {
    std::vector<int> v;
    while (auto p = h.aqm->dequeue(0)) {
        auto r = tcpip::parse(p->data);
        v.push_back(r->flow.sport - 5000);
    }
    return v;
}

TEST(las_discipline, a_new_flow_is_served_before_a_flow_that_has_had_service) {
    harness h(las_config(100));
    for (int i = 0; i < 10; ++i) h.offer(pkt(0), 0);
    for (int i = 0; i < 5; ++i) h.aqm->dequeue(0);  // A has attained 5000 bytes
    for (int i = 0; i < 3; ++i) h.offer(pkt(1), 1);
    EXPECT_EQ(drain_flows(h), (std::vector<int>{1, 1, 1, 0, 0, 0, 0, 0}));
}

TEST(las_discipline, flows_with_equal_service_alternate) {
    harness h(las_config(100));
    for (int i = 0; i < 3; ++i) h.offer(pkt(0), 0);
    for (int i = 0; i < 3; ++i) h.offer(pkt(1), 0);
    EXPECT_EQ(drain_flows(h), (std::vector<int>{0, 1, 0, 1, 0, 1}));
}

TEST(las_discipline, when_full_the_packet_with_the_most_attained_service_is_evicted) {
    harness h(las_config(5));
    for (int i = 0; i < 5; ++i) h.offer(pkt(0), 0);
    EXPECT_TRUE(h.offer(pkt(1), 0));  // B's first packet outranks A's fifth
    ASSERT_EQ(h.drops.size(), 1u);
    EXPECT_EQ(h.drops[0].reason, drop_reason::evicted_las);
    EXPECT_EQ(h.drops[0].packet.id, 4u);
    // An arrival of the flow with the most service is itself the lowest priority.
    EXPECT_FALSE(h.offer(pkt(0), 0));
    EXPECT_EQ(h.drops.back().reason, drop_reason::overflow);
    // The evicted packet was never served: A's next packet takes its place in the order.
    EXPECT_EQ(drain_flows(h), (std::vector<int>{0, 1, 0, 0, 0}));
}

TEST(Tlas, flows_past_the_threshold_fall_back_to_fifo_behind_new_flows) {
    harness tlas(las_config(100, 5));
    harness las(las_config(100));
    for (harness* h : {&tlas, &las}) {
        for (int i = 0; i < 8; ++i) h->offer(pkt(0), 0);   // A: 5 with priority, 3 FIFO
        for (int i = 0; i < 10; ++i) h->offer(pkt(1), 0);  // B: likewise 5 + 5
    }
    EXPECT_EQ(drain_flows(tlas),
              (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1}));
    // Plain LAS keeps interleaving by attained service.
    EXPECT_EQ(drain_flows(las),
              (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1, 1}));
}

TEST(Tlas, a_full_queue_evicts_the_newest_fifo_packet_for_a_priority_arrival) {
    harness h(las_config(6, 2));
    for (int i = 0; i < 6; ++i) h.offer(pkt(0), 0);  // 2 priority + 4 FIFO
    EXPECT_TRUE(h.offer(pkt(1), 0));
    ASSERT_EQ(h.drops.size(), 1u);
    EXPECT_EQ(h.drops[0].packet.id, 5u);
    EXPECT_EQ(h.drops[0].reason, drop_reason::evicted_las);
    EXPECT_FALSE(h.offer(pkt(0), 0));  // a FIFO-class arrival at a full queue is dropped
}

// A pure ACK of connection `sport` acknowledging up to `ack` (an upstream flow's ACK on its
// way down to the client).
std::vector<std::uint8_t> ack_of(int flow, std::uint32_t ack) {
    tcp_spec t;
    t.sport = static_cast<std::uint16_t>(5000 + flow);
    t.ack = ack;
    return tcp_packet(t);
}

TEST(las_discipline, an_upstream_flows_acks_rank_by_the_data_they_acknowledge) {
    // Wu, Gong & Williamson, §6.2: ns-2's queue ranks by the header's sequence number, an
    // ACK's being its cumulative acknowledgement. Flow 0 has had 3000 bytes sent down;
    // flow 1 is seen only as ACKs, which acknowledge 100000 bytes of its upstream data.
    harness h(las_config(100));
    for (int i = 0; i < 3; ++i) h.offer(pkt(0), 0);
    h.offer(ack_of(1, 1000), 0);  // the first ACK seen: the base, nothing acknowledged yet
    EXPECT_EQ(drain_flows(h), (std::vector<int>{0, 1, 0, 0}));
    h.offer(ack_of(1, 101000), 1);
    h.offer(pkt(0), 1);
    EXPECT_EQ(drain_flows(h), (std::vector<int>{0, 1}));
    // By its own 40-byte packets alone the ACK would have gone first.
    harness bytes_only(las_config(100));
    for (int i = 0; i < 3; ++i) bytes_only.offer(pkt(0), 0);
    drain_flows(bytes_only);
    bytes_only.offer(ack_of(1, 1000), 1);
    bytes_only.offer(pkt(0), 1);
    EXPECT_EQ(drain_flows(bytes_only), (std::vector<int>{1, 0}));
}

TEST(las_discipline, an_old_or_duplicate_ack_does_not_lower_the_attained_service) {
    harness h(las_config(100));
    h.offer(ack_of(1, 1000), 0);
    h.offer(ack_of(1, 51000), 0);  // 50000 acknowledged
    h.offer(ack_of(1, 21000), 0);  // reordered: older
    h.offer(ack_of(1, 51000), 0);  // duplicate
    drain_flows(h);
    for (int i = 0; i < 3; ++i) h.offer(pkt(0), 1);
    h.offer(ack_of(1, 51000), 1);
    EXPECT_EQ(drain_flows(h), (std::vector<int>{0, 0, 0, 1}));
}

TEST(las_discipline, both_directions_of_a_connection_share_one_record) {
    harness h(las_config(100));
    for (int i = 0; i < 5; ++i) h.offer(pkt(0), 0);
    drain_flows(h);  // connection 0 has had 5000 bytes
    tcp_spec back;   // the same connection the other way round
    back.src_host = 2;
    back.dst_host = 1;
    back.sport = 80;
    back.dport = 5000;
    back.payload = 960;
    h.offer(tcp_packet(back), 1);
    h.offer(pkt(1), 1);
    std::vector<std::uint16_t> order;
    while (auto p = h.aqm->dequeue(1)) order.push_back(tcpip::parse(p->data)->flow.sport);
    EXPECT_EQ(order, (std::vector<std::uint16_t>{5001, 80}));
}

TEST(las_discipline, at_max_flows_a_new_flow_replaces_the_least_recently_seen_idle_flow) {
    aqm_params c = las_config(100);
    std::get<las_params>(c.params).max_flows = 2;
    harness h(c);
    for (int i = 0; i < 5; ++i) h.offer(pkt(0), 1);
    while (h.aqm->dequeue(1)) {
    }  // A: 5000 bytes served, idle since t = 1
    h.offer(pkt(1), 2);
    h.aqm->dequeue(2);   // B: 1000 bytes served, idle since t = 2
    h.offer(pkt(2), 3);  // C: the table is full; A, seen least recently, is forgotten
    EXPECT_EQ(h.aqm->stats().flows, 2u);
    EXPECT_EQ(h.aqm->stats().flows_evicted, 1u);
    h.offer(pkt(1), 4);  // B is remembered: priority 1000
    h.offer(pkt(0), 4);  // A is not (and B, C are busy): it starts again at 0
    EXPECT_EQ(h.aqm->stats().shared_flow_packets, 1u);
    // With A's 5000 bytes remembered the order would be C, B, A.
    EXPECT_EQ(drain_flows(h), (std::vector<int>{2, 0, 1}));
}

TEST(las_discipline, flows_beyond_max_flows_while_all_are_busy_rank_as_one_flow) {
    aqm_params c = las_config(100);
    std::get<las_params>(c.params).max_flows = 1;
    harness h(c);
    h.offer(pkt(0), 0);
    h.offer(pkt(0), 0);  // A holds the one record, with packets queued
    h.offer(pkt(1), 0);  // B and C share a record: B at 0 bytes, C behind B's 1000
    h.offer(pkt(2), 0);
    EXPECT_EQ(h.aqm->stats().flows, 1u);
    EXPECT_EQ(h.aqm->stats().flows_evicted, 0u);
    EXPECT_EQ(h.aqm->stats().shared_flow_packets, 2u);
    // A at 0, B at 0 (later), A at 1000, C at 1000 (later): each alone would be at 0.
    EXPECT_EQ(drain_flows(h), (std::vector<int>{0, 1, 0, 2}));
}

TEST(Tlas, the_flow_limit_holds_for_tlas_too) {
    aqm_params c = las_config(2, 5);
    std::get<tlas_params>(c.params).max_flows = 2;
    harness h(c);
    for (int f = 0; f < 12; ++f) h.offer(pkt(f), f);  // one new flow after another
    EXPECT_EQ(h.aqm->stats().flows, 2u);
    EXPECT_EQ(h.aqm->stats().flows_evicted, 0u);  // every held flow has its packet queued
    EXPECT_EQ(h.aqm->stats().shared_flow_packets, 10u);
    drain_flows(h);  // now both are idle: new flows take their places
    h.offer(pkt(20), 20);
    h.offer(pkt(21), 21);
    EXPECT_EQ(h.aqm->stats().flows_evicted, 2u);
    EXPECT_EQ(h.aqm->stats().flows, 2u);
}

TEST(las_discipline, a_new_flow_whose_first_packet_is_dropped_is_still_forgotten_when_idle) {
    aqm_params c = las_config(1);
    std::get<las_params>(c.params).flow_idle_timeout = kNsPerSec;
    harness h(c);
    h.offer(pkt(0), 0);
    EXPECT_FALSE(h.offer(pkt(1), 0));  // B's record is made, its packet ranks below A's
    EXPECT_EQ(h.aqm->stats().flows, 2u);
    drain_flows(h);
    h.offer(pkt(2), 5 * kNsPerSec);  // A and B have been idle for 5 s
    EXPECT_EQ(h.aqm->stats().flows, 1u);
}

TEST(las_discipline, idle_flows_are_forgotten_after_the_timeout) {
    aqm_params c = las_config(100);
    std::get<las_params>(c.params).flow_idle_timeout = kNsPerSec;
    harness h(c);
    for (int i = 0; i < 5; ++i) h.offer(pkt(0), 0);
    drain_flows(h);
    EXPECT_EQ(h.aqm->stats().flows, 1u);
    h.offer(pkt(1), 3 * kNsPerSec);  // the sweep runs: A has been idle for 3 s
    EXPECT_EQ(h.aqm->stats().flows, 1u);
    // A returns as a new flow with no attained service: it ties with B's next packet.
    h.offer(pkt(0), 3 * kNsPerSec);
    h.offer(pkt(1), 3 * kNsPerSec);
    EXPECT_EQ(drain_flows(h), (std::vector<int>{1, 0, 1}));
}

}  // namespace
