// The client's uplink delay (oppsched/uplink_delay.h): delay, order, sequence numbers and
// the memory bound.
#include <gtest/gtest.h>

#include <stdexcept>
#include <variant>
#include <vector>

#include "oppsched/uplink_delay.h"
#include "oppsched/wire.h"

using namespace oppsched;
using namespace oppsched::client;

namespace {

using Bytes = std::vector<std::uint8_t>;
constexpr time_ns kMs = kNsPerMs;

TEST(UplinkDelay, when_the_delay_or_the_memory_bound_is_out_of_range_then_it_throws) {
    EXPECT_THROW(UplinkDelay(UplinkDelayParams{-1, 1 << 20}), std::invalid_argument);
    EXPECT_THROW(UplinkDelay(UplinkDelayParams{11 * kNsPerSec, 1 << 20}), std::invalid_argument);
    EXPECT_THROW(UplinkDelay(UplinkDelayParams{kMs, 100}), std::invalid_argument);
    EXPECT_NO_THROW(UplinkDelay(UplinkDelayParams{0, wire::kMaxFrameLen}));
}

TEST(UplinkDelay, messages_leave_after_the_delay_in_order_with_consecutive_seqs) {
    UplinkDelay d(UplinkDelayParams{1 * kMs, 1 << 20});
    EXPECT_TRUE(d.enqueue(10 * kMs, wire::CqiReport{1, 5, 3.0f, 7}));
    EXPECT_TRUE(d.enqueue(10 * kMs + 200'000, wire::HarqFeedback{1, 5, 2, true}));
    ASSERT_TRUE(d.next_due().has_value());
    EXPECT_EQ(*d.next_due(), 11 * kMs);
    EXPECT_TRUE(d.pop_due(11 * kMs - 1).empty());
    auto f1 = d.pop_due(11 * kMs);
    ASSERT_EQ(f1.size(), 1u);
    auto r1 = wire::decode(f1[0]);
    ASSERT_TRUE(r1.ok()) << r1.error();
    EXPECT_EQ(r1->seq, 0u);
    EXPECT_TRUE(std::holds_alternative<wire::CqiReport>(r1->msg));
    auto f2 = d.pop_due(12 * kMs);
    ASSERT_EQ(f2.size(), 1u);
    auto r2 = wire::decode(f2[0]);
    ASSERT_TRUE(r2.ok());
    EXPECT_EQ(r2->seq, 1u);
    EXPECT_EQ(std::get<wire::HarqFeedback>(r2->msg), (wire::HarqFeedback{1, 5, 2, true}));
    EXPECT_EQ(d.held_frames(), 0u);
}

TEST(UplinkDelay, a_message_dropped_for_memory_still_consumes_its_seq) {
    UplinkDelay d(UplinkDelayParams{1 * kMs, 70000});
    wire::UplinkPacket big{0, Bytes(60000, 1)};
    EXPECT_TRUE(d.enqueue(0, big));
    EXPECT_FALSE(d.enqueue(0, big));  // 2 x 60 kB > 70 kB held
    EXPECT_TRUE(d.enqueue(2 * kMs, wire::CqiReport{}));
    auto frames = d.pop_due(3 * kMs);
    ASSERT_EQ(frames.size(), 2u);
    EXPECT_EQ(wire::decode(frames[1])->seq, 2u);  // the AP sees a gap of one
    EXPECT_EQ(d.stats().dropped, 1u);
}

}  // namespace
