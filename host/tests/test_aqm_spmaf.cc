// SPM-AF (Wu, Gong & Williamson, §6.1): ACK filtering and priority eviction.
#include <gtest/gtest.h>

#include "oppsched/aqm.h"
#include "test_aqm_packets.h"

using namespace oppsched;
using namespace oppsched::aqm;
using namespace oppsched::aqm::testing;

namespace {

aqm_params spmaf_config(std::size_t limit_packets = 50) {
    aqm_params c = default_config(aqm_kind::spmaf);
    c.limits = {0, limit_packets};
    return c;
}

std::vector<std::uint8_t> ack(std::uint32_t a, std::uint8_t flags = tcpip::kAck,
                              std::vector<std::pair<std::uint32_t, std::uint32_t>> sack = {},
                              std::uint16_t dport = 6000, std::size_t payload = 0) {
    tcp_spec t;
    t.sport = 80;
    t.dport = dport;
    t.ack = a;
    t.flags = flags;
    t.sack = std::move(sack);
    t.payload = payload;
    return tcp_packet(t);
}

TEST(spm_af_discipline, a_newer_pure_ack_removes_the_superseded_one) {
    harness h(spmaf_config());
    ASSERT_TRUE(h.offer(ack(1000), 0));
    ASSERT_TRUE(h.offer(ack(2000), 1));
    ASSERT_EQ(h.drops.size(), 1u);
    EXPECT_EQ(h.drops[0].reason, drop_reason::superseded_ack);
    EXPECT_EQ(h.drops[0].packet.id, 0u);
    EXPECT_EQ(h.aqm->packets(), 1u);
    EXPECT_EQ(h.aqm->dequeue(2)->id, 1u);
}

TEST(spm_af_discipline, every_older_ack_of_the_connection_goes_but_not_other_connections) {
    harness h(spmaf_config());
    h.offer(ack(1000), 0);
    h.offer(data_packet(1500), 0);
    h.offer(ack(2000), 0);
    h.offer(ack(1500, tcpip::kAck, {}, 6001), 0);  // another connection
    h.offer(ack(3000), 0);
    EXPECT_EQ(h.drops_with(drop_reason::superseded_ack), 2u);
    EXPECT_EQ(h.aqm->packets(), 3u);
    std::vector<std::uint64_t> order;
    while (auto p = h.aqm->dequeue(1)) order.push_back(p->id);
    EXPECT_EQ(order, (std::vector<std::uint64_t>{1, 3, 4}));  // FIFO among the survivors
}

TEST(spm_af_discipline, keeps_syn_fin_rst_and_duplicate_acks) {
    for (std::uint8_t f :
         {std::uint8_t(tcpip::kSyn | tcpip::kAck), std::uint8_t(tcpip::kFin | tcpip::kAck),
          std::uint8_t(tcpip::kRst | tcpip::kAck)}) {
        harness h(spmaf_config());
        h.offer(ack(1000, f), 0);
        h.offer(ack(2000), 0);
        EXPECT_TRUE(h.drops.empty()) << "flags " << int(f);
    }
    harness dup(spmaf_config());
    dup.offer(ack(1000), 0);
    dup.offer(ack(1000), 0);  // a duplicate ACK is information for fast retransmit
    EXPECT_TRUE(dup.drops.empty());
}

TEST(spm_af_discipline, keeps_an_ack_whose_sack_information_the_new_ack_lacks) {
    harness h(spmaf_config());
    h.offer(ack(1000, tcpip::kAck, {{3000, 4000}}), 0);
    h.offer(ack(2000), 0);  // does not cover 3000-4000
    EXPECT_TRUE(h.drops.empty());
    h.offer(ack(2500, tcpip::kAck, {{3000, 5000}}), 0);  // covers it: both earlier ACKs go
    EXPECT_EQ(h.drops_with(drop_reason::superseded_ack), 2u);
    harness below(spmaf_config());
    below.offer(ack(1000, tcpip::kAck, {{3000, 4000}}), 0);
    below.offer(ack(4000), 0);  // the block is now below the cumulative ACK
    EXPECT_EQ(below.drops_with(drop_reason::superseded_ack), 1u);
}

TEST(spm_af_discipline, keeps_an_ack_with_an_ece_change_or_a_payload) {
    harness ece(spmaf_config());
    ece.offer(ack(1000, tcpip::kAck | tcpip::kEce), 0);
    ece.offer(ack(2000), 0);
    EXPECT_TRUE(ece.drops.empty());
    ece.offer(ack(3000, tcpip::kAck | tcpip::kEce), 0);  // same ECE as the first: it goes
    EXPECT_EQ(ece.drops_with(drop_reason::superseded_ack), 1u);
    EXPECT_EQ(ece.drops[0].packet.id, 0u);

    harness data(spmaf_config());
    data.offer(ack(1000, tcpip::kAck | tcpip::kPsh, {}, 6000, 100), 0);
    data.offer(ack(2000), 0);
    EXPECT_TRUE(data.drops.empty());
}

TEST(spm_af_discipline, the_old_acks_stay_if_the_new_one_is_dropped) {
    harness h(spmaf_config(2));
    h.offer(ack(1000), 0);
    h.offer(data_packet(1500), 0);
    // Full; the new ACK frees a slot by superseding ack(1000), so it is queued.
    EXPECT_TRUE(h.offer(ack(2000), 0));
    EXPECT_EQ(h.drops_with(drop_reason::superseded_ack), 1u);
    // With a byte limit a larger ACK may not fit even then: nothing is removed.
    aqm_params c = spmaf_config(0);
    c.limits.bytes = 1500 + 40;
    harness b(c);
    b.offer(ack(1000), 0);
    b.offer(data_packet(1500), 0);
    EXPECT_FALSE(b.offer(ack(2000, tcpip::kAck, {{3000, 4000}}), 0));  // 52 B > 40 B freed
    EXPECT_EQ(b.drops_with(drop_reason::superseded_ack), 0u);
    EXPECT_EQ(b.drops_with(drop_reason::overflow), 1u);
    EXPECT_EQ(b.aqm->packets(), 2u);
}

TEST(spm_af_discipline, a_high_priority_arrival_at_a_full_queue_evicts_a_low_priority_packet) {
    harness h(spmaf_config(3));
    for (int i = 0; i < 3; ++i) h.offer(data_packet(1500), 0);
    EXPECT_FALSE(h.offer(data_packet(1500), 0));  // low priority: dropped
    EXPECT_TRUE(h.offer(data_packet(1500), 0, true));
    ASSERT_EQ(h.drops.size(), 2u);
    EXPECT_EQ(h.drops[0].reason, drop_reason::overflow);
    EXPECT_EQ(h.drops[1].reason, drop_reason::evicted_low_priority);
    EXPECT_EQ(h.drops[1].packet.id, 0u);  // the oldest
    EXPECT_EQ(h.aqm->packets(), 3u);
}

TEST(spm_af_discipline, an_ack_is_evicted_before_a_low_priority_data_packet) {
    harness h(spmaf_config(3));
    h.offer(data_packet(1500), 0);
    h.offer(ack(1000), 0);
    h.offer(data_packet(1500), 0);
    EXPECT_TRUE(h.offer(data_packet(1500), 0, true));
    ASSERT_EQ(h.drops.size(), 1u);
    EXPECT_EQ(h.drops[0].packet.id, 1u);
    EXPECT_EQ(h.drops[0].reason, drop_reason::evicted_low_priority);
}

TEST(spm_af_discipline, a_high_priority_arrival_is_dropped_when_only_high_priority_data_is_queued) {
    harness h(spmaf_config(2));
    h.offer(data_packet(1500), 0, true);
    h.offer(data_packet(1500), 0, true);
    EXPECT_FALSE(h.offer(data_packet(1500), 0, true));
    ASSERT_EQ(h.drops.size(), 1u);
    EXPECT_EQ(h.drops[0].reason, drop_reason::overflow);
    EXPECT_EQ(h.drops[0].packet.id, 2u);
}

}  // namespace
