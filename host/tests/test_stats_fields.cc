// The one naming of the MAC's statistics (oppsched/stats_fields.h): every field once, in a
// fixed order, under the key the Python tools and the daemons' stats JSON read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "oppsched/stats_fields.h"

namespace oppsched {
namespace {

template <class S>
std::vector<std::string> keys_of(const S& s) {
    std::vector<std::string> keys;
    for_each_field(s, [&](const char* key, const auto&) { keys.emplace_back(key); });
    return keys;
}

template <class S>
std::map<std::string, double> values_of(const S& s) {
    std::map<std::string, double> v;
    for_each_field(
        s, [&](const char* key, const auto& value) { v[key] = static_cast<double>(value); });
    return v;
}

TEST(StatsFields, harq_keys_are_the_ones_the_tools_read_in_order) {
    EXPECT_EQ(keys_of(harq::harq_stats{}),
              (std::vector<std::string>{"tb_sent", "tx_attempts", "acked", "nacks", "failed_final",
                                        "timeouts", "flushed", "stale_feedback", "not_received"}));
}

TEST(StatsFields, harq_values_are_the_fields_of_the_same_name) {
    harq::harq_stats s;
    s.tb_sent = 1;
    s.acked = 2;
    s.nacks = 3;
    s.not_received = 4;
    const auto v = values_of(s);
    EXPECT_EQ(v.at("tb_sent"), 1);
    EXPECT_EQ(v.at("acked"), 2);
    EXPECT_EQ(v.at("nacks"), 3);
    EXPECT_EQ(v.at("not_received"), 4);
    EXPECT_EQ(v.at("timeouts"), 0);
}

TEST(StatsFields, aqm_total_drops_are_dropped_total_and_state_keeps_its_type) {
    aqm::aqm_stats s;
    s.dropped[0] = 2;
    s.dropped[1] = 3;
    s.price = 0.25;
    s.dropping = true;
    s.codel_count = 7;
    s.spared_handshakes = 4;
    s.marked_not_ect = 3;
    const auto v = values_of(s);
    EXPECT_EQ(v.at("dropped_total"), 5);
    EXPECT_EQ(v.at("price"), 0.25);
    EXPECT_EQ(v.at("dropping"), 1);
    EXPECT_EQ(v.at("codel_count"), 7);
    EXPECT_EQ(v.at("spared_handshakes"), 4);
    EXPECT_EQ(v.at("marked_not_ect"), 3);
    EXPECT_EQ(v.count("dropped"), 0u);  // per reason: aqm_stats::dropped, not a scalar key
    int doubles = 0, bools = 0, counters = 0;
    for_each_field(s, [&](const char*, const auto& value) {
        using T = std::decay_t<decltype(value)>;
        doubles += std::is_same_v<T, double>;
        bools += std::is_same_v<T, bool>;
        counters += std::is_same_v<T, std::uint64_t>;
    });
    EXPECT_EQ(doubles, 9);
    EXPECT_EQ(bools, 1);
    EXPECT_EQ(counters, 14);
}

TEST(StatsFields, every_struct_names_each_field_once) {
    auto unique = [](std::vector<std::string> k) {
        const auto n = k.size();
        std::sort(k.begin(), k.end());
        return std::unique(k.begin(), k.end()) == k.end() && n > 0;
    };
    EXPECT_TRUE(unique(keys_of(harq::harq_stats{})));
    EXPECT_TRUE(unique(keys_of(aqm::aqm_stats{})));
    EXPECT_TRUE(unique(keys_of(pdu::segmenter_stats{})));
    EXPECT_TRUE(unique(keys_of(pdu::reassembler_stats{})));
    EXPECT_TRUE(unique(keys_of(tcpip::window_tracker_stats{})));
    EXPECT_TRUE(unique(keys_of(clamp::client_agent_stats{})));
    EXPECT_TRUE(unique(keys_of(clamp::router_agent_stats{})));
    EXPECT_TRUE(unique(keys_of(wire::seq_tracker::seq_stats{})));
    EXPECT_EQ(keys_of(pdu::segmenter_stats{}).size(), 11u);
    EXPECT_EQ(keys_of(pdu::reassembler_stats{}).size(), 18u);
    EXPECT_EQ(keys_of(tcpip::window_tracker_stats{}).size(), 12u);
}

}  // namespace
}  // namespace oppsched
