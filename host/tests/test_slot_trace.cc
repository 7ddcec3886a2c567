// The AP's slots.csv rows (oppsched/slot_trace.h): slot order, outcomes, and the exit flush.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "oppsched/slot_trace.h"

namespace oppsched::ap {
namespace {

slot_row row(std::uint64_t slot) {
    slot_row r;
    r.slot = slot;
    return r;
}

std::vector<std::uint64_t> slots_of(const std::vector<slot_row>& rows) {
    std::vector<std::uint64_t> s;
    for (const auto& r : rows) s.push_back(r.slot);
    return s;
}

TEST(SlotTrace, when_only_empty_slots_are_added_then_rows_leave_at_once) {
    slot_trace t(2, 4);
    t.add_empty(row(1));
    t.add_empty(row(2));
    EXPECT_EQ(slots_of(t.take()), (std::vector<std::uint64_t>{1, 2}));
    EXPECT_TRUE(t.take().empty());
}

TEST(SlotTrace, when_a_transmission_is_unresolved_then_later_rows_wait_behind_it) {
    slot_trace t(2, 4);
    t.add_transmission(row(1), 0, 2);
    t.add_empty(row(2));
    EXPECT_TRUE(t.take().empty());
    t.resolve(0, 2, "ack");
    const auto rows = t.take();
    EXPECT_EQ(slots_of(rows), (std::vector<std::uint64_t>{1, 2}));
    EXPECT_EQ(rows[0].outcome, "ack");
    EXPECT_EQ(rows[1].outcome, "");
}

TEST(SlotTrace, when_a_row_is_resolved_twice_then_the_first_outcome_stays) {
    slot_trace t(1, 2);
    t.add_transmission(row(1), 0, 1);
    t.add_transmission(row(2), 0, 0);
    t.resolve(0, 1, "nack");
    t.resolve(0, 1, "timeout");  // the row already left
    t.resolve(0, 0, "unheard");
    const auto rows = t.take();
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].outcome, "nack");
    EXPECT_EQ(rows[1].outcome, "unheard");
}

TEST(SlotTrace, when_a_process_is_reused_then_only_its_last_transmission_is_resolved) {
    slot_trace t(1, 1);
    t.add_transmission(row(1), 0, 0);
    t.add_transmission(row(2), 0, 0);
    t.resolve(0, 0, "ack");  // row 2; row 1 still waits in front
    EXPECT_TRUE(t.take().empty());
    const auto rows = t.take_all();
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].outcome, "");
    EXPECT_EQ(rows[1].outcome, "ack");
}

TEST(SlotTrace, when_nothing_was_transmitted_then_resolve_does_nothing) {
    slot_trace t(2, 2);
    t.resolve(1, 1, "ack");
    EXPECT_TRUE(t.take_all().empty());
}

}  // namespace
}  // namespace oppsched::ap
