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

using byte_buffer = std::vector<std::uint8_t>;
constexpr time_ns kMs = kNsPerMs;

TEST(uplink_delay, when_the_delay_or_the_memory_bound_is_out_of_range_then_it_throws) {
    EXPECT_THROW(uplink_delay(uplink_delay_params{-1, 1 << 20}), std::invalid_argument);
    EXPECT_THROW(uplink_delay(uplink_delay_params{11 * kNsPerSec, 1 << 20}), std::invalid_argument);
    EXPECT_THROW(uplink_delay(uplink_delay_params{kMs, 100}), std::invalid_argument);
    EXPECT_NO_THROW(uplink_delay(uplink_delay_params{0, wire::kMaxFrameLen}));
}

TEST(uplink_delay, messages_leave_after_the_delay_in_order_with_consecutive_seqs) {
    uplink_delay d(uplink_delay_params{1 * kMs, 1 << 20});
    EXPECT_TRUE(d.enqueue(10 * kMs, wire::cqi_report{1, 5, 3.0f, 7}));
    EXPECT_TRUE(d.enqueue(10 * kMs + 200'000, wire::harq_feedback{1, 5, 2, true}));
    ASSERT_TRUE(d.next_due().has_value());
    EXPECT_EQ(*d.next_due(), 11 * kMs);
    EXPECT_TRUE(d.pop_due(11 * kMs - 1).empty());
    auto f1 = d.pop_due(11 * kMs);
    ASSERT_EQ(f1.size(), 1u);
    auto r1 = wire::decode(f1[0]);
    ASSERT_TRUE(r1.ok()) << r1.error();
    EXPECT_EQ(r1->seq, 0u);
    EXPECT_TRUE(std::holds_alternative<wire::cqi_report>(r1->msg));
    auto f2 = d.pop_due(12 * kMs);
    ASSERT_EQ(f2.size(), 1u);
    auto r2 = wire::decode(f2[0]);
    ASSERT_TRUE(r2.ok());
    EXPECT_EQ(r2->seq, 1u);
    EXPECT_EQ(std::get<wire::harq_feedback>(r2->msg), (wire::harq_feedback{1, 5, 2, true}));
    EXPECT_EQ(d.held_frames(), 0u);
}

TEST(uplink_delay, a_message_dropped_for_memory_still_consumes_its_seq) {
    uplink_delay d(uplink_delay_params{1 * kMs, 70000});
    wire::uplink_packet big{0, byte_buffer(60000, 1)};
    EXPECT_TRUE(d.enqueue(0, big));
    EXPECT_FALSE(d.enqueue(0, big));  // 2 x 60 kB > 70 kB held
    EXPECT_TRUE(d.enqueue(2 * kMs, wire::cqi_report{}));
    auto frames = d.pop_due(3 * kMs);
    ASSERT_EQ(frames.size(), 2u);
    EXPECT_EQ(wire::decode(frames[1])->seq, 2u);  // the AP sees a gap of one
    EXPECT_EQ(d.stats().dropped, 1u);
}

}  // namespace
