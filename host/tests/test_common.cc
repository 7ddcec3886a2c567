#include <gtest/gtest.h>

#include "oppsched/common.h"

using namespace oppsched;

TEST(expected, holds_value_or_error_naming_the_field) {
    expected<int> good = 7;
    ASSERT_TRUE(good.ok());
    EXPECT_EQ(good.value(), 7);
    expected<int> bad = error_info{"ip.version: 5 is neither 4 nor 6"};
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error(), "ip.version: 5 is neither 4 nor 6");
}

TEST(Time, seconds_round_trip_at_nanosecond_resolution) {
    EXPECT_EQ(from_seconds(1.667e-3), 1'667'000);
    EXPECT_DOUBLE_EQ(to_seconds(3 * kNsPerMs), 3e-3);
}
