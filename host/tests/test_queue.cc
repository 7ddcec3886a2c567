// packet_fifo and queue_set: per-user queues and the shared (802.11-like) FIFO.
#include <gtest/gtest.h>

#include <stdexcept>

#include "oppsched/queue.h"
#include "test_aqm_packets.h"

using namespace oppsched;
using namespace oppsched::aqm;
using namespace oppsched::aqm::testing;

namespace {

ip_packet for_user(std::uint32_t user, std::uint64_t id, std::size_t size = 1000) {
    return make_packet(data_packet(size, 0, static_cast<std::uint16_t>(5000 + user)), id, user);
}

queue_set_params set_config(std::size_t users, queue_mode mode, std::size_t limit_packets) {
    queue_set_params c;
    c.users = users;
    c.mode = mode;
    c.aqm.limits = {0, limit_packets};
    return c;
}

TEST(packet_fifo, counts_bytes_and_packets_against_both_limits) {
    packet_fifo f(queue_limits{2500, 3});
    EXPECT_TRUE(f.fits(2500));
    EXPECT_FALSE(f.fits(2501));
    f.push(for_user(0, 0, 1000));
    f.push(for_user(0, 1, 1000));
    EXPECT_EQ(f.bytes(), 2000u);
    EXPECT_EQ(f.packets(), 2u);
    EXPECT_FALSE(f.fits(600));
    EXPECT_TRUE(f.fits(500));
    f.push(for_user(0, 2, 500));
    EXPECT_FALSE(f.fits(0));  // packet limit
    EXPECT_EQ(f.pop().id, 0u);
    EXPECT_EQ(f.front().id, 1u);
    EXPECT_EQ(f.bytes(), 1500u);
}

TEST(queue_set, per_user_queues_are_independent_and_report_backlog) {
    queue_set q(set_config(3, queue_mode::per_user, 2));
    EXPECT_EQ(q.queue_count(), 3u);
    EXPECT_TRUE(q.enqueue(for_user(0, 0), 0));
    EXPECT_TRUE(q.enqueue(for_user(2, 1), 0));
    EXPECT_TRUE(q.enqueue(for_user(2, 2), 0));
    EXPECT_FALSE(q.enqueue(for_user(2, 3), 0));  // user 2's own limit
    EXPECT_TRUE(q.enqueue(for_user(0, 4), 0));   // user 0 unaffected
    std::vector<std::uint32_t> users;
    q.backlogged_users(users);
    EXPECT_EQ(users, (std::vector<std::uint32_t>{0, 2}));
    q.eligible_users(users);
    EXPECT_EQ(users, (std::vector<std::uint32_t>{0, 2}));
    std::vector<bool> mask;
    q.eligible_mask(mask);
    EXPECT_EQ(mask, (std::vector<bool>{true, false, true}));
    EXPECT_EQ(q.bytes(2), 2000u);
    EXPECT_EQ(q.packets(0), 2u);
    EXPECT_EQ(q.total_packets(), 4u);
    EXPECT_EQ(q.dequeue(2, 1)->id, 1u);
    EXPECT_FALSE(q.dequeue(1, 1).has_value());
    EXPECT_EQ(q.packets(2), 1u);
    const auto drops = q.take_drops();
    ASSERT_EQ(drops.size(), 1u);
    EXPECT_EQ(drops[0].packet.id, 3u);
}

TEST(queue_set, shared_fifo_serves_only_the_head_of_line_user) {
    queue_set q(set_config(3, queue_mode::shared, 10));
    EXPECT_EQ(q.queue_count(), 1u);
    q.enqueue(for_user(1, 0), 0);
    q.enqueue(for_user(0, 1), 0);
    q.enqueue(for_user(1, 2), 0);
    std::vector<std::uint32_t> users;
    q.backlogged_users(users);
    EXPECT_EQ(users, (std::vector<std::uint32_t>{0, 1}));
    q.eligible_users(users);
    EXPECT_EQ(users, (std::vector<std::uint32_t>{1}));  // head-of-line blocking
    EXPECT_TRUE(q.eligible(1));
    EXPECT_FALSE(q.eligible(0));
    EXPECT_FALSE(q.dequeue(0, 1).has_value());
    EXPECT_EQ(q.dequeue(1, 1)->id, 0u);
    EXPECT_TRUE(q.eligible(0));
    EXPECT_EQ(q.dequeue(0, 2)->id, 1u);
    EXPECT_EQ(q.dequeue(1, 3)->id, 2u);
    EXPECT_EQ(q.total_packets(), 0u);
}

TEST(queue_set, shared_fifo_has_one_limit_for_all_users) {
    queue_set q(set_config(2, queue_mode::shared, 3));
    for (std::uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(q.enqueue(for_user(0, i), 0));
    EXPECT_FALSE(q.enqueue(for_user(1, 3), 0));
    EXPECT_EQ(q.packets(1), 0u);
    EXPECT_EQ(q.bytes(0), 3000u);
}

TEST(queue_set, per_user_counts_follow_evictions_inside_the_shared_queue) {
    queue_set_params c = set_config(2, queue_mode::shared, 2);
    c.aqm.params = spm_af_params{};
    queue_set q(c);
    q.enqueue(for_user(0, 0), 0);
    q.enqueue(for_user(0, 1), 0);
    ip_packet hp = for_user(1, 2);
    hp.high_priority = true;
    EXPECT_TRUE(q.enqueue(std::move(hp), 0));  // evicts user 0's oldest packet
    EXPECT_EQ(q.packets(0), 1u);
    EXPECT_EQ(q.packets(1), 1u);
    EXPECT_EQ(q.bytes(0), 1000u);
    const auto drops = q.take_drops();
    ASSERT_EQ(drops.size(), 1u);
    EXPECT_EQ(drops[0].reason, drop_reason::evicted_low_priority);
}

TEST(queue_set, shared_codel_keeps_a_new_head_of_line_when_it_drops_the_old_one) {
    queue_set_params c = set_config(2, queue_mode::shared, 1000);
    c.aqm.params = codel_params{};
    c.aqm.ecn = false;
    queue_set q(c);
    // Two packets of user 0, one of user 1, three of user 0, all queued at t = 0.
    std::uint64_t id = 0;
    for (; id < 2; ++id) q.enqueue(for_user(0, id), 0);
    q.enqueue(for_user(1, id++), 0);
    for (int i = 0; i < 3; ++i) q.enqueue(for_user(0, id++), 0);
    ASSERT_TRUE(q.dequeue(0, 200 * kNsPerMs).has_value());  // sojourn above target: armed
    // One interval later CoDel drops user 0's head at dequeue and hands out user 1's packet,
    // which becomes the head of line held by the set: user 0 gets nothing.
    const time_ns t = 300 * kNsPerMs;
    EXPECT_FALSE(q.dequeue(0, t).has_value());
    const std::size_t served = 1;
    EXPECT_FALSE(q.eligible(0));
    ASSERT_TRUE(q.eligible(1));
    EXPECT_EQ(q.packets(1), 1u);
    EXPECT_EQ(q.total_packets(), q.packets(0) + q.packets(1));
    auto p = q.dequeue(1, t);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->user, 1u);
    const auto drops = q.take_drops();
    EXPECT_EQ(served + drops.size() + 1 + q.total_packets(), id);
}

TEST(queue_set, bad_users_are_rejected) {
    EXPECT_THROW(queue_set(set_config(0, queue_mode::per_user, 10)), std::invalid_argument);
    queue_set q(set_config(2, queue_mode::per_user, 10));
    EXPECT_THROW(q.enqueue(for_user(2, 0), 0), std::out_of_range);
    EXPECT_THROW(q.dequeue(5, 0), std::out_of_range);
    queue_set_params bad = set_config(2, queue_mode::per_user, 0);
    EXPECT_THROW(queue_set{bad}, std::invalid_argument);
}

}  // namespace
