// Scheduler plugins in shared libraries (cpp_plugin.h): the loader refuses what it cannot use
// naming the field, the path and the reason, and the policy serves the users the plugin picks,
// with PF deciding (and counting) whenever the plugin's answer cannot be used. The plugins are
// host/tests/plugins/test_plugin.cc, built by CMake in four variants.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "error_of.h"
#include "oppsched/cpp_plugin.h"
#include "oppsched/sched.h"

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
