// Scheduler and AQM plugins in shared libraries (cpp_plugin.h): the loader refuses what it
// cannot use naming the field, the path and the reason; the policy serves the users the plugin
// picks, with PF deciding (and counting) whenever the plugin's answer cannot be used; the AQM
// drops, marks and sends as its plugin says, each drop with its cause. The plugins are
// host/tests/plugins/test_plugin.cc, built by CMake in four variants, and test_aqm_plugin.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "error_of.h"
#include "oppsched/aqm.h"
#include "oppsched/cpp_plugin.h"
#include "oppsched/sched.h"
#include "oppsched/tcpip.h"
#include "test_aqm_packets.h"

using namespace oppsched;

namespace {

cplugin::scheduler_options options(double slot_s = 3e-3) {
    cplugin::scheduler_options o;
    o.slot_s = slot_s;
    o.log = [](const std::string&) {};
    return o;
}

std::unique_ptr<sched::scheduler_policy> load(const std::string& path,
                                              std::vector<cplugin::param> params = {},
                                              std::size_t n = 3,
                                              cplugin::scheduler_options o = options()) {
    return cplugin::load_scheduler(path, params, o, n)(n);
}

std::map<std::string, std::uint64_t> counters(const sched::scheduler_policy& p) {
    std::map<std::string, std::uint64_t> out;
    for (const auto& [k, v] : p.counters()) out[k] = v;
    return out;
}

// Rates that make PF's and round robin's choices differ: user 2 is far better.
const std::vector<double> kRates = {1e5, 2e5, 4e6};
const std::vector<bool> kAll = {true, true, true};

}  // namespace

TEST(cpp_plugin, serves_users_in_the_order_the_plugin_picks) {
    auto p = load(OPPSCHED_TEST_PLUGIN_GOOD);
    EXPECT_EQ(p->kind(), "plugin");
    std::vector<int> served;
    for (int k = 0; k < 7; ++k) served.push_back(p->step(kRates, kAll));
    EXPECT_EQ(served, (std::vector<int>{0, 1, 2, 0, 1, 2, 0}));
    const auto c = counters(*p);
    EXPECT_EQ(c.at("plugin_decisions"), 7u);
    EXPECT_EQ(c.at("plugin_fallbacks"), 0u);
    EXPECT_EQ(c.at("plugin_invalid_decisions"), 0u);
}

TEST(cpp_plugin, select_sees_only_candidates_and_served_hears_a_harq_slot) {
    auto p = load(OPPSCHED_TEST_PLUGIN_GOOD);
    // Only users 0 and 2 are candidates: index 1 of the views is user 2.
    EXPECT_EQ(p->step(kRates, {true, false, true}), 0);
    EXPECT_EQ(p->step(kRates, {true, false, true}), 2);
    // A HARQ retransmission gives the slot to user 0 outside the policy; the plugin hears it
    // through served() and goes on after user 0.
    p->update(kRates, 0, kRates[0]);
    EXPECT_EQ(p->choose(kRates, kAll), 1);
}

TEST(cpp_plugin, params_reach_the_plugin) {
    // "first" makes the plugin start after user first - 1.
    auto p = load(OPPSCHED_TEST_PLUGIN_GOOD, {cplugin::param_from_text("first", "2")});
    EXPECT_EQ(p->step(kRates, kAll), 2);
}

TEST(cpp_plugin, when_the_answer_is_out_of_range_then_pf_decides_and_it_is_counted) {
    auto p = load(OPPSCHED_TEST_PLUGIN_GOOD, {cplugin::param_from_text("mode", "out_of_range")});
    sched::scheduler_params pf_cfg;
    pf_cfg.num_users = 3;
    pf_cfg.policy = sched::pf_params{sched::kDefaultAlpha};
    auto pf = sched::make_scheduler(pf_cfg);
    const std::vector<std::vector<double>> rates = {kRates, {3e6, 1e5, 1e5}, {1e5, 5e6, 2e6}};
    for (int k = 0; k < 30; ++k) {
        const auto& r = rates[static_cast<std::size_t>(k) % rates.size()];
        EXPECT_EQ(p->step(r, kAll), pf->step(r, kAll)) << "slot " << k;
    }
    const auto c = counters(*p);
    EXPECT_EQ(c.at("plugin_invalid_decisions"), 30u);
    EXPECT_EQ(c.at("plugin_fallbacks"), 30u);
    EXPECT_EQ(c.at("plugin_decisions"), 30u);
}

TEST(cpp_plugin, when_select_fails_then_pf_decides_and_it_is_counted_as_an_exception) {
    auto p = load(OPPSCHED_TEST_PLUGIN_GOOD, {cplugin::param_from_text("mode", "error"),
                                              cplugin::param_from_text("first", "1")});
    // PF's first slot: every metric is N (averages start at R_i / N), the tie goes to user 0;
    // the plugin, had it answered, would have picked user 1.
    EXPECT_EQ(p->step(kRates, kAll), 0);
    const auto c = counters(*p);
    EXPECT_EQ(c.at("plugin_exceptions"), 1u);
    EXPECT_EQ(c.at("plugin_fallbacks"), 1u);
    EXPECT_EQ(c.at("plugin_decisions"), 0u);
}

TEST(cpp_plugin, no_user_leaves_the_slot_empty) {
    auto p = load(OPPSCHED_TEST_PLUGIN_GOOD, {cplugin::param_from_text("mode", "none")});
    EXPECT_EQ(p->step(kRates, kAll), sched::kNoUser);
    EXPECT_EQ(counters(*p).at("plugin_fallbacks"), 0u);
}

TEST(cpp_plugin, when_select_is_later_than_the_budget_then_pf_decides_and_it_is_counted) {
    // 0.5 x 1 ms budget; the plugin sleeps 5 ms and would answer user 1, PF answers user 0
    // (its first slot's tie).
    auto p =
        load(OPPSCHED_TEST_PLUGIN_GOOD,
             {cplugin::param_from_text("mode", "slow"), cplugin::param_from_text("first", "1")}, 3,
             options(1e-3));
    EXPECT_EQ(p->step(kRates, kAll), 0);
    const auto c = counters(*p);
    EXPECT_EQ(c.at("plugin_deadline_misses"), 1u);
    EXPECT_EQ(c.at("plugin_fallbacks"), 1u);
    EXPECT_GE(c.at("plugin_decision_ns"), 5'000'000u);
}

TEST(cpp_plugin, refuses_another_abi_version_naming_field_path_and_versions) {
    const std::string path = OPPSCHED_TEST_PLUGIN_ABI2;
    EXPECT_EQ(error_of([&] { load(path); }),
              "scheduler.library: " + path +
                  ": ABI version 2, this oppsched takes 1: rebuild the plugin against "
                  "oppsched/plugin_api.h");
}

TEST(cpp_plugin, refuses_a_plugin_of_another_family) {
    const std::string path = OPPSCHED_TEST_PLUGIN_AQM;
    EXPECT_EQ(
        error_of([&] { load(path); }),
        "scheduler.library: " + path + ": a plugin of family aqm (2), not a scheduler plugin");
}

TEST(cpp_plugin, refuses_a_library_without_the_entry_point) {
    const std::string path = OPPSCHED_TEST_PLUGIN_NOENTRY;
    EXPECT_EQ(error_of([&] {
                  load(path);
              }).rfind("scheduler.library: " + path + ": exports no oppsched_plugin_entry", 0),
              0u);
}

TEST(cpp_plugin, refuses_a_missing_file_and_a_file_that_is_no_library) {
    EXPECT_EQ(error_of([] { load("/nonexistent/librr.so"); }),
              "scheduler.library: /nonexistent/librr.so: no such file");
    EXPECT_EQ(error_of([] { load("/tmp"); }), "scheduler.library: /tmp: not a regular file");
    const std::string text = testing::TempDir() + "oppsched_not_a_library.so";
    std::ofstream(text) << "not an ELF file\n";
    const std::string e = error_of([&] { load(text); });
    EXPECT_EQ(e.rfind("scheduler.library: " + text + ": cannot be opened: ", 0), 0u) << e;
    std::remove(text.c_str());
}

TEST(cpp_plugin, refuses_params_the_plugin_refuses_with_its_reason) {
    const std::string path = OPPSCHED_TEST_PLUGIN_GOOD;
    EXPECT_EQ(error_of([&] { load(path, {cplugin::param_from_text("mode", "fastest")}); }),
              "scheduler.library: " + path +
                  ": plugin test_rr refused its params: mode: 'fastest' not one of rr, "
                  "out_of_range, error, none, slow");
}

TEST(cpp_plugin, param_text_reads_as_a_number_only_when_it_is_one) {
    EXPECT_EQ(cplugin::param_from_text("a", "2.5").number, 2.5);
    EXPECT_TRUE(std::isnan(cplugin::param_from_text("a", "fast").number));
    EXPECT_TRUE(std::isnan(cplugin::param_from_text("a", "0x10").number));
    EXPECT_TRUE(std::isnan(cplugin::param_from_text("a", "").number));
}

// ---- AQM plugins ------------------------------------------------------------------------

namespace {

aqm::aqm_params aqm_config(std::size_t limit_packets, bool ecn = true) {
    aqm::aqm_params c = aqm::default_config(aqm::aqm_kind::droptail);
    c.limits.packets = limit_packets;
    c.limits.bytes = 0;
    c.ecn = ecn;
    return c;
}

std::unique_ptr<aqm::queue_discipline> load_aqm(std::vector<cplugin::param> params = {},
                                                aqm::aqm_params c = aqm_config(10)) {
    return cplugin::load_aqm(OPPSCHED_TEST_AQM_PLUGIN, params, c)(c);
}

ip_packet tcp(std::uint8_t ecn) {
    aqm::testing::tcp_spec t;
    t.ecn = ecn;
    t.payload = 100;
    return ip_packet{aqm::testing::tcp_packet(t)};
}

std::map<std::string, std::uint64_t> counters(const aqm::queue_discipline& q) {
    std::map<std::string, std::uint64_t> out;
    for (const auto& [k, v] : q.counters()) out[k] = v;
    return out;
}

}  // namespace

TEST(cpp_aqm_plugin, its_drops_are_early_drops_and_the_limit_still_overflows) {
    auto q = load_aqm({cplugin::param_from_text("mode", "drop_every_3rd")}, aqm_config(5));
    for (int k = 0; k < 12; ++k) q->enqueue(tcp(tcpip::kNotEct), k);
    const auto s = q->stats();
    // arrivals 3, 6, 9, 12 dropped by the plugin; of the other 8, five fit the limit
    EXPECT_EQ(s.dropped_by(aqm::drop_reason::early_drop), 4u);
    EXPECT_EQ(s.dropped_by(aqm::drop_reason::overflow), 3u);
    EXPECT_EQ(q->packets(), 5u);
    EXPECT_EQ(q->kind(), aqm::aqm_kind::droptail);
}

TEST(cpp_aqm_plugin, mark_sets_ce_on_ecn_capable_packets_and_drops_the_others) {
    auto q = load_aqm({cplugin::param_from_text("mode", "mark")});
    EXPECT_TRUE(q->enqueue(tcp(tcpip::kEct0), 0));
    EXPECT_FALSE(q->enqueue(tcp(tcpip::kNotEct), 1));
    EXPECT_EQ(q->stats().marked, 1u);
    EXPECT_EQ(q->stats().dropped_by(aqm::drop_reason::early_drop), 1u);
    const auto p = q->dequeue(2);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(aqm::ecn_field(p->data), tcpip::kCe);
}

TEST(cpp_aqm_plugin, errors_and_answers_of_the_wrong_verb_are_counted_and_the_packet_passes) {
    for (const char* mode : {"error", "invalid"}) {
        auto q = load_aqm({cplugin::param_from_text("mode", mode)});
        for (int k = 0; k < 3; ++k) EXPECT_TRUE(q->enqueue(tcp(tcpip::kNotEct), k)) << mode;
        for (int k = 0; k < 3; ++k) EXPECT_TRUE(q->dequeue(10 + k).has_value()) << mode;
        const auto c = counters(*q);
        const std::string counted =
            std::string(mode) == "error" ? "plugin_exceptions" : "plugin_invalid_answers";
        EXPECT_EQ(c.at(counted), 6u) << mode;
        EXPECT_EQ(q->stats().dropped_total(), 0u) << mode;
    }
}

TEST(cpp_aqm_plugin, on_empty_is_called_when_a_dequeue_finds_the_queue_empty) {
    auto q = load_aqm({cplugin::param_from_text("mode", "drop_after_empty")});
    q->enqueue(tcp(tcpip::kNotEct), 0);
    EXPECT_TRUE(q->dequeue(1).has_value());  // sent; the queue is now empty, not yet told
    q->enqueue(tcp(tcpip::kNotEct), 2);
    EXPECT_TRUE(q->dequeue(3).has_value());   // still not told: sent
    EXPECT_FALSE(q->dequeue(4).has_value());  // finds it empty: on_empty()
    q->enqueue(tcp(tcpip::kNotEct), 5);
    EXPECT_FALSE(q->dequeue(6).has_value());  // the plugin drops the first packet after it
    EXPECT_EQ(q->stats().dropped_by(aqm::drop_reason::aqm_drop), 1u);
}

TEST(cpp_aqm_plugin, refuses_a_scheduler_plugin_and_params_it_refuses) {
    const std::string sched_path = OPPSCHED_TEST_PLUGIN_GOOD;
    EXPECT_EQ(error_of([&] { load_aqm({}, aqm_config(10)); }), "(no exception)");
    EXPECT_EQ(
        error_of([&] { cplugin::load_aqm(sched_path, {}, aqm_config(10)); }),
        "aqm.library: " + sched_path + ": a plugin of family scheduler (1), not an aqm plugin");
    const std::string aqm_path = OPPSCHED_TEST_AQM_PLUGIN;
    EXPECT_EQ(error_of([&] { load_aqm({cplugin::param_from_text("refuse", "1")}); }),
              "aqm.library: " + aqm_path +
                  ": plugin test_aqm refused its params: refuse: asked "
                  "to refuse");
    // and the scheduler loader refuses the AQM plugin
    EXPECT_EQ(
        error_of([&] { load(aqm_path); }),
        "scheduler.library: " + aqm_path + ": a plugin of family aqm (2), not a scheduler plugin");
}
