// Downlink packet classification by destination address (oppsched/packet_classifier.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "oppsched/packet_classifier.h"

namespace oppsched::ap {
namespace {

using byte_buffer = std::vector<std::uint8_t>;

byte_buffer ipv4_to(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
    byte_buffer p(20, 0);
    p[0] = 0x45;
    p[16] = a;
    p[17] = b;
    p[18] = c;
    p[19] = d;
    return p;
}

byte_buffer ipv6_to_fd00_last(std::uint8_t last) {
    byte_buffer p(40, 0);
    p[0] = 0x60;
    p[24] = 0xfd;
    p[39] = last;
    return p;
}

TEST(PacketClassifier, when_the_destination_is_a_users_address_then_that_user_is_returned) {
    packet_classifier c;
    EXPECT_FALSE(c.add(*parse_address("10.0.0.1"), 0).has_value());
    EXPECT_FALSE(c.add(*parse_address("fd00::1"), 0).has_value());
    EXPECT_FALSE(c.add(*parse_address("10.0.0.2"), 1).has_value());
    const auto r4 = c.classify(ipv4_to(10, 0, 0, 2));
    EXPECT_EQ(r4.what, packet_classifier::outcome::user);
    EXPECT_EQ(r4.user, 1u);
    const auto r6 = c.classify(ipv6_to_fd00_last(1));
    EXPECT_EQ(r6.what, packet_classifier::outcome::user);
    EXPECT_EQ(r6.user, 0u);
}

TEST(PacketClassifier, when_the_destination_is_nobodys_then_it_is_unknown) {
    packet_classifier c;
    c.add(*parse_address("10.0.0.1"), 0);
    EXPECT_EQ(c.classify(ipv4_to(10, 0, 0, 9)).what,
              packet_classifier::outcome::unknown_destination);
    // The IPv4 address bytes inside an IPv6 key do not match the IPv4 address.
    EXPECT_EQ(c.classify(ipv6_to_fd00_last(1)).what,
              packet_classifier::outcome::unknown_destination);
}

TEST(PacketClassifier, when_the_ip_header_is_truncated_or_not_ip_then_it_is_malformed) {
    packet_classifier c;
    c.add(*parse_address("10.0.0.1"), 0);
    EXPECT_EQ(c.classify({}).what, packet_classifier::outcome::malformed);
    EXPECT_EQ(c.classify({0x45, 0x00}).what, packet_classifier::outcome::malformed);
    byte_buffer short_ihl = ipv4_to(10, 0, 0, 1);
    short_ihl[0] = 0x44;  // IHL 4 < 5
    EXPECT_EQ(c.classify(short_ihl).what, packet_classifier::outcome::malformed);
    EXPECT_EQ(c.classify(byte_buffer(39, 0x60)).what, packet_classifier::outcome::malformed);
    byte_buffer v5 = ipv4_to(10, 0, 0, 1);
    v5[0] = 0x55;
    EXPECT_EQ(c.classify(v5).what, packet_classifier::outcome::malformed);
}

TEST(PacketClassifier, when_an_address_is_added_twice_then_the_first_user_keeps_it) {
    packet_classifier c;
    c.add(*parse_address("10.0.0.1"), 3);
    const auto other = c.add(*parse_address("10.0.0.1"), 5);
    ASSERT_TRUE(other.has_value());
    EXPECT_EQ(*other, 3u);
    EXPECT_EQ(c.classify(ipv4_to(10, 0, 0, 1)).user, 3u);
    EXPECT_EQ(c.size(), 1u);
}

TEST(PacketClassifier, when_text_is_not_an_address_then_parse_address_refuses_it) {
    EXPECT_FALSE(parse_address("10.0.0").has_value());
    EXPECT_FALSE(parse_address("ue0").has_value());
    EXPECT_EQ((*parse_address("10.1.2.3"))[0], 4);
    EXPECT_EQ((*parse_address("::1"))[0], 6);
    EXPECT_EQ((*parse_address("::1"))[16], 1);
}

}  // namespace
}  // namespace oppsched::ap
