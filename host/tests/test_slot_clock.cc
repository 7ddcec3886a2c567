// The AP's slot clock and grant cache (oppsched/slot_clock.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>

#include "oppsched/slot_clock.h"

namespace oppsched::ap {
namespace {

using verdict = slot_clock::verdict;

slot_clock make(std::uint32_t lead = 2, std::int64_t backjump = 100, std::uint32_t cache = 8) {
    return slot_clock(slot_clock_params{lead, backjump, cache});
}

wire::slot_grant grant_for(std::uint64_t slot, std::uint16_t user) {
    wire::slot_grant g;
    g.slot = slot;
    g.empty = false;
    g.user = user;
    return g;
}

TEST(SlotClock, when_requests_come_in_order_then_each_is_fresh_and_maps_to_itself) {
    slot_clock c = make();
    for (std::uint64_t s = 5; s < 8; ++s) {
        const auto r = c.on_request(s);
        EXPECT_EQ(r.what, verdict::fresh);
        EXPECT_EQ(r.internal, static_cast<std::int64_t>(s));
        EXPECT_FALSE(r.late);
        EXPECT_EQ(r.skipped, 0u);
    }
    EXPECT_EQ(c.last_internal(), 7);
    EXPECT_EQ(c.internal_of(6), 6);
}

TEST(SlotClock, when_slots_are_skipped_then_the_gap_is_reported) {
    slot_clock c = make();
    c.on_request(1);
    const auto r = c.on_request(5);
    EXPECT_EQ(r.what, verdict::fresh);
    EXPECT_EQ(r.skipped, 3u);
}

TEST(SlotClock, when_a_cached_slot_is_requested_again_then_its_grant_is_returned) {
    slot_clock c = make();
    const auto r = c.on_request(3);
    c.remember(r.internal, grant_for(3, 7));
    c.on_request(4);
    const auto again = c.on_request(3);
    EXPECT_EQ(again.what, verdict::duplicate);
    ASSERT_NE(again.grant, nullptr);
    EXPECT_EQ(again.grant->user, 7);
    EXPECT_EQ(c.last_internal(), 4);  // a duplicate does not move the clock
}

TEST(SlotClock, when_an_old_slot_has_no_cached_grant_then_it_is_out_of_order) {
    slot_clock c = make(2, 100, 2);
    for (std::uint64_t s = 0; s < 5; ++s) c.remember(c.on_request(s).internal, grant_for(s, 1));
    EXPECT_EQ(c.on_request(1).what, verdict::out_of_order);  // overwritten in the ring of 2
    EXPECT_EQ(c.on_request(slot_clock::kMaxPhySlot + 1).what, verdict::out_of_order);
}

TEST(SlotClock, when_a_request_trails_the_newest_by_lead_slots_then_it_is_late) {
    slot_clock c = make(2);
    c.on_request(10);
    c.on_request(12);
    EXPECT_TRUE(c.on_request(10).late);
    EXPECT_FALSE(c.on_request(11).late);
}

TEST(SlotClock, when_the_phy_restarts_then_the_internal_count_continues_at_last_plus_one) {
    slot_clock c = make();
    EXPECT_FALSE(c.on_phy_restart());  // nothing to restart before the first request
    c.on_request(50);
    EXPECT_TRUE(c.on_phy_restart());
    EXPECT_FALSE(c.on_phy_restart());  // already pending
    EXPECT_TRUE(c.restart_pending());
    const auto r = c.on_request(0);
    EXPECT_EQ(r.what, verdict::fresh);
    EXPECT_EQ(r.internal, 51);
    EXPECT_FALSE(r.backjump);
    EXPECT_EQ(c.internal_of(3), 54);
}

TEST(SlotClock, when_a_slot_number_jumps_back_beyond_the_limit_then_it_counts_as_a_restart) {
    slot_clock c = make(2, 100);
    c.on_request(1000);
    EXPECT_EQ(c.on_request(950).what, verdict::out_of_order);  // within the limit: old
    const auto r = c.on_request(10);
    EXPECT_TRUE(r.backjump);
    EXPECT_EQ(r.what, verdict::fresh);
    EXPECT_EQ(r.internal, 1001);
}

TEST(SlotClock, when_a_parameter_is_out_of_range_then_it_throws_naming_it) {
    EXPECT_THROW(make(2, 0, 8), std::invalid_argument);
    EXPECT_THROW(make(2, 100, 0), std::invalid_argument);
    EXPECT_FALSE(make().internal_of(0).has_value());  // no slot yet
}

}  // namespace
}  // namespace oppsched::ap
