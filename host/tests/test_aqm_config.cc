// AQM configuration: defaults, names, validation (bad value -> invalid_argument naming the
// field and the value), and the service-rate estimator.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>

#include "error_of.h"
#include "oppsched/aqm.h"
#include "test_aqm_packets.h"

using namespace oppsched;
using namespace oppsched::aqm;
using namespace oppsched::aqm::testing;

namespace {

TEST(aqm_params, every_kind_builds_from_its_defaults_and_round_trips_its_name) {
    for (std::size_t i = 0; i < kAqmKindCount; ++i) {
        const auto k = static_cast<aqm_kind>(i);
        const aqm_params c = default_config(k);
        EXPECT_EQ(c.kind(), k);
        auto aqm = make_aqm(c);
        EXPECT_EQ(aqm->kind(), k);
        EXPECT_TRUE(aqm->empty());
        EXPECT_EQ(aqm_kind_from_string(to_string(k)), k);
    }
    EXPECT_EQ(aqm_kind_from_string("Drop-Tail"), aqm_kind::droptail);
    EXPECT_EQ(aqm_kind_from_string("SPM-AF"), aqm_kind::spmaf);
    EXPECT_EQ(aqm_kind_from_string("t_las"), aqm_kind::tlas);
    EXPECT_FALSE(aqm_kind_from_string("fq_codel").has_value());
}

TEST(aqm_params, defaults_follow_the_seeds_and_the_published_values) {
    const aqm_params c;
    EXPECT_EQ(c.limits.packets,
              50u);  // the 50-packet buffers of Wang & Song and of Wu, Gong & Williamson
    EXPECT_EQ(c.limits.bytes, 0u);
    EXPECT_TRUE(c.ecn);
    EXPECT_EQ(c.rate.capacity_bps, 0.0);  // measured by default
    EXPECT_EQ(tlas_params{}.threshold_packets, 50u);
    const red_params red;
    EXPECT_EQ(red.min_th, 5.0);
    EXPECT_EQ(red.max_th, 15.0);
    EXPECT_EQ(red.w_q, 0.002);
    EXPECT_EQ(red.max_p, 0.1);
    EXPECT_TRUE(red.gentle);
    const rem_params rem;
    EXPECT_EQ(rem.gamma, 0.001);
    EXPECT_EQ(rem.alpha, 0.1);
    EXPECT_EQ(rem.phi, 1.001);
    EXPECT_EQ(rem.target, 20.0);
    EXPECT_EQ(rem.update_interval, 2 * kNsPerMs);
    const codel_params codel;
    EXPECT_EQ(codel.target, 5 * kNsPerMs);
    EXPECT_EQ(codel.interval, 100 * kNsPerMs);
}

struct bad_case {
    std::function<void(aqm_params&)> mutate;
    aqm_kind kind;
    std::string message;  // exact what()
};

TEST(aqm_params, bad_values_throw_invalid_argument_naming_the_field_and_the_value) {
    const std::vector<bad_case> cases = {
        {[](aqm_params& c) {
             c.limits = {0, 0};
         },
         aqm_kind::droptail,
         "aqm.limits: 0 bytes and 0 packets leave the queue unbounded; set one"},
        {[](aqm_params& c) { c.rate.capacity_bps = -1; }, aqm_kind::rem,
         "rate.capacity_bps: -1 must be >= 0"},
        {[](aqm_params& c) { c.rate.ema_weight = 0; }, aqm_kind::avq,
         "rate.ema_weight: 0 not in (0,1]"},
        {[](aqm_params& c) { c.rate.sample_bytes = 0; }, aqm_kind::pie,
         "rate.sample_bytes: 0 must be > 0"},
        {[](aqm_params& c) { std::get<red_params>(c.params).max_p = 1.5; }, aqm_kind::red,
         "red.max_p: 1.5 not in (0,1]"},
        {[](aqm_params& c) { std::get<red_params>(c.params).max_th = 4; }, aqm_kind::red,
         "red.max_th: 4 must be > min_th (5)"},
        {[](aqm_params& c) { std::get<red_params>(c.params).w_q = 0; }, aqm_kind::red,
         "red.w_q: 0 not in (0,1]"},
        {[](aqm_params& c) { std::get<rem_params>(c.params).phi = 1.0; }, aqm_kind::rem,
         "rem.phi: 1 must be > 1"},
        {[](aqm_params& c) { std::get<rem_params>(c.params).update_interval = 0; }, aqm_kind::rem,
         "rem.update_interval: 0 ns must be > 0"},
        {[](aqm_params& c) { std::get<reaqm_params>(c.params).alpha_prime = 0.1; }, aqm_kind::reaqm,
         "reaqm.alpha_prime: 0.1 must be > alpha (0.11), Wang & Song, REAQM, eq. 5"},
        {[](aqm_params& c) { std::get<reaqm_params>(c.params).gamma = -0.001; }, aqm_kind::reaqm,
         "reaqm.gamma: -0.001 must be > 0"},
        {[](aqm_params& c) { std::get<reaqm_params>(c.params).phi = 0.9; }, aqm_kind::reaqm,
         "reaqm.phi: 0.9 must be > 1"},
        {[](aqm_params& c) { std::get<avq_params>(c.params).gamma = 1.2; }, aqm_kind::avq,
         "avq.gamma: 1.2 not in (0,1]"},
        {[](aqm_params& c) { std::get<codel_params>(c.params).target = 200 * kNsPerMs; },
         aqm_kind::codel, "codel.target: 200000000 ns must be < interval (100000000 ns)"},
        {[](aqm_params& c) { std::get<pie_params>(c.params).mark_ecn_threshold = 2; },
         aqm_kind::pie, "pie.mark_ecn_threshold: 2 not in [0,1]"},
        {[](aqm_params& c) { std::get<pie_params>(c.params).tupdate = -5; }, aqm_kind::pie,
         "pie.tupdate: -5 ns must be > 0"},
        {[](aqm_params& c) { std::get<tlas_params>(c.params).threshold_packets = 0; },
         aqm_kind::tlas, "tlas.threshold_packets: 0 must be >= 1"},
        {[](aqm_params& c) { std::get<las_params>(c.params).flow_idle_timeout = 0; }, aqm_kind::las,
         "las.flow_idle_timeout: 0 ns must be > 0"},
        {[](aqm_params& c) { std::get<las_params>(c.params).max_flows = 0; }, aqm_kind::las,
         "las.max_flows: 0 not in [1,1000000]"},
        {[](aqm_params& c) { std::get<tlas_params>(c.params).max_flows = 1'000'001; },
         aqm_kind::tlas, "tlas.max_flows: 1000001 not in [1,1000000]"},
    };
    for (const auto& bc : cases) {
        aqm_params c = default_config(bc.kind);
        bc.mutate(c);
        try {
            make_aqm(c);
            ADD_FAILURE() << "no exception, expected: " << bc.message;
        } catch (const std::invalid_argument& e) {
            EXPECT_EQ(std::string(e.what()), bc.message);
        }
    }
}

// The one table of parameters by name (param_fields): the apd and Python read through it.
TEST(aqm_params, the_parameter_table_names_each_field_once_and_reaches_the_members) {
    for (std::size_t i = 0; i < kAqmKindCount; ++i) {
        const auto k = static_cast<aqm_kind>(i);
        std::set<std::string> names;
        for (const param_field& f : param_fields(k)) {
            EXPECT_TRUE(names.insert(f.name).second) << to_string(k) << ": " << f.name;
            EXPECT_EQ(f.type == param_type::seconds,
                      f.name.size() > 2 && f.name.substr(f.name.size() - 2) == "_s")
                << f.name;
            EXPECT_EQ(f.type == param_type::choice, !f.choices.empty()) << f.name;
        }
        EXPECT_TRUE(names.count("capacity_bps")) << to_string(k);
    }
    auto find = [](aqm_kind k, const std::string& name) {
        for (const param_field& f : param_fields(k))
            if (f.name == name) return f;
        ADD_FAILURE() << name;
        return param_field{};
    };
    aqm_params c = default_config(aqm_kind::reaqm);
    find(aqm_kind::reaqm, "update").set(c, std::string("per_arrival"));
    find(aqm_kind::reaqm, "update_interval_s").set(c, 0.005);
    find(aqm_kind::reaqm, "modified_update").set(c, false);
    find(aqm_kind::reaqm, "rate_sample_bytes").set(c, std::uint64_t{4096});
    const auto& p = std::get<reaqm_params>(c.params);
    EXPECT_EQ(p.update, price_update::per_arrival);
    EXPECT_EQ(p.update_interval, 5 * kNsPerMs);
    EXPECT_FALSE(p.modified_update);
    EXPECT_EQ(c.rate.sample_bytes, 4096u);
    c = default_config(aqm_kind::tlas);
    find(aqm_kind::tlas, "threshold_packets").set(c, std::uint64_t{7});
    EXPECT_EQ(std::get<tlas_params>(c.params).threshold_packets, 7u);
    find(aqm_kind::tlas, "max_flows").set(c, std::uint64_t{300});
    EXPECT_EQ(std::get<tlas_params>(c.params).max_flows, 300u);
    c = default_config(aqm_kind::las);
    find(aqm_kind::las, "max_flows").set(c, std::uint64_t{200});
    EXPECT_EQ(std::get<las_params>(c.params).max_flows, 200u);
}

TEST(aqm_params, nan_is_rejected_everywhere_a_number_is_checked) {
    aqm_params c = default_config(aqm_kind::red);
    std::get<red_params>(c.params).max_p = std::nan("");
    EXPECT_THROW(validate(c), std::invalid_argument);
    c = default_config(aqm_kind::rem);
    std::get<rem_params>(c.params).gamma = std::nan("");
    EXPECT_THROW(validate(c), std::invalid_argument);
    c = default_config(aqm_kind::reaqm);
    c.rate.capacity_bps = std::nan("");
    EXPECT_THROW(validate(c), std::invalid_argument);
}

TEST(ServiceRate, a_fixed_capacity_is_known_at_once_and_never_changes) {
    service_rate_estimator e(rate_params{2e6, 16384, 0.25});
    EXPECT_TRUE(e.known());
    EXPECT_FALSE(e.measured());
    e.on_dequeue(100000, true, 1);
    e.on_service(100000, 1);
    EXPECT_EQ(e.rate_bps(), 2e6);
}

TEST(ServiceRate, measures_the_rate_while_backlogged_and_ignores_idle_time) {
    service_rate_estimator e(rate_params{});
    time_ns t = 0;
    // Bursts of 5 packets served 1 ms apart (8 Mb/s), separated by 50 ms of empty queue.
    for (int burst = 0; burst < 10; ++burst) {
        for (int i = 0; i < 5; ++i) {
            t += kNsPerMs;
            e.on_dequeue(1000, i == 4, t);
            if (burst * 5 + i + 1 < 17) {
                EXPECT_FALSE(e.known());  // < 16384 B served
            }
        }
        t += 50 * kNsPerMs;
    }
    EXPECT_NEAR(e.rate_bps(), 8e6, 1.0);
}

TEST(ServiceRate, ema_follows_a_rate_change_with_weight_one_quarter) {
    service_rate_estimator e(rate_params{0.0, 16000, 0.25});
    time_ns t = 0;
    // A packet counts once the next dequeue ends its sending time: 17 dequeues, 16 counted.
    for (int i = 0; i < 17; ++i) e.on_dequeue(1000, false, t += kNsPerMs);  // 8 Mb/s
    ASSERT_DOUBLE_EQ(e.rate_bps(), 8e6);
    // The packet dequeued last at 8 Mb/s is sent in the first 2 ms interval.
    for (int i = 0; i < 16; ++i) e.on_dequeue(1000, false, t += 2 * kNsPerMs);  // 4 Mb/s
    EXPECT_DOUBLE_EQ(e.rate_bps(), 0.75 * 8e6 + 0.25 * 4e6);
}

TEST(ServiceRate, packets_leaving_together_count_over_the_interval_that_follows) {
    service_rate_estimator e(rate_params{0.0, 1000, 0.25});
    e.on_dequeue(3000, false, 5);  // a batch at one instant: no sample yet
    e.on_dequeue(1000, false, 5);
    EXPECT_FALSE(e.known());
    e.on_dequeue(1000, false, 5 + kNsPerMs);  // the batch of 4000 B was sent in 1 ms
    EXPECT_DOUBLE_EQ(e.rate_bps(), 4000 * 8 / 1e-3);
}

// The bias this estimator once had: a slotted link dequeues a whole TB at each slot request,
// so counting dequeue to dequeue with the last TB's bytes but not its slot overstated the
// rate by the busy periods' last slots. Here: 10 Mb/s (3750 B per 3 ms slot), busy periods
// of 3 full slots and a gap of 5 slots; the old count gave 15 Mb/s.
TEST(ServiceRate, the_last_batch_of_a_busy_period_never_counts_so_a_slotted_link_reads_its_rate) {
    service_rate_estimator e(rate_params{0.0, 16384, 0.25});
    constexpr time_ns slot = 3 * kNsPerMs;
    time_ns t = 0;
    for (int period = 0; period < 40; ++period) {
        for (int k = 0; k < 3; ++k) {
            for (int i = 0; i < 3; ++i) e.on_dequeue(1250, k == 2 && i == 2, t);
            t += slot;
        }
        t += 5 * slot;
    }
    EXPECT_NEAR(e.rate_bps(), 10e6, 1.0);
}

TEST(ServiceRate, a_slotted_macs_reports_replace_dequeue_times) {
    service_rate_estimator e(rate_params{0.0, 16384, 0.25});
    e.on_dequeue(1000, false, 0);
    e.on_dequeue(1000, false, 1);  // 8e12 b/s if it counted
    EXPECT_FALSE(e.reported());
    // Light load: each TB of a 10 Mb/s link a fifth full, sent in a fifth of a 3 ms slot.
    for (int i = 0; i < 30; ++i) e.on_service(750, 600'000);
    EXPECT_TRUE(e.reported());
    EXPECT_NEAR(e.rate_bps(), 10e6, 1.0);
    for (int i = 0; i < 5; ++i) e.on_dequeue(1000, false, 10 + i);  // ignored from now on
    EXPECT_NEAR(e.rate_bps(), 10e6, 1.0);
    // A queue that waits one slot in two while another user is served gets half the rate.
    for (int i = 0; i < 200; ++i) e.on_service(i % 2 ? 3750 : 0, 3 * kNsPerMs);
    EXPECT_NEAR(e.rate_bps(), 5e6, 0.01 * 5e6);  // samples of >= 16 kB end mid-pattern
}

}  // namespace

// The registry's ranges are what validate() checks: every default lies inside, and a value
// just outside a finite end is refused with the field and the range's own wording.
TEST(aqm_params, every_default_is_in_its_registered_range_and_a_value_just_outside_is_refused) {
    for (std::size_t i = 0; i < kAqmKindCount; ++i) {
        const auto k = static_cast<aqm_kind>(i);
        const aqm_params defaults = default_config(k);
        EXPECT_NO_THROW(validate(defaults)) << to_string(k);
        for (const param_field& f : param_fields(k)) {
            ASSERT_TRUE(f.get) << f.name;
            if (f.type != param_type::number && f.type != param_type::integer &&
                f.type != param_type::seconds)
                continue;
            const param_value d = f.get(defaults);
            const double dv = std::holds_alternative<double>(d)
                                  ? std::get<double>(d)
                                  : static_cast<double>(std::get<std::uint64_t>(d));
            EXPECT_TRUE(f.range.contains(dv)) << to_string(k) << "." << f.name;
            if (!std::isfinite(f.range.min)) continue;
            // Just below the lower end (at it when open); integers below 0 do not exist.
            double bad = f.range.min_open ? f.range.min : f.range.min - 1.0;
            if (f.type == param_type::seconds && !f.range.min_open) bad = f.range.min - 1e-9;
            if (f.type == param_type::integer && bad < 0) continue;
            aqm_params c = defaults;
            if (f.type == param_type::integer) {
                f.set(c, static_cast<std::uint64_t>(bad));
            } else {
                f.set(c, bad);
            }
            const std::string msg = error_of([&] { validate(c); });
            EXPECT_NE(msg.find(f.label + ": "), std::string::npos) << msg;
            EXPECT_NE(msg.find(f.range.violation()), std::string::npos) << msg;
        }
    }
}
