// Scheduler policies: one contract over every kind (TEST_P), then the behaviour each kind
// promises (Srinivasan & Baras, §III-B, §VI; Andrew & Hanly, CLAMP, §V-C).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "error_of.h"
#include "oppsched/sched.h"

using namespace oppsched::sched;

namespace {

constexpr double kBandwidthHz = 1e6;

// i.i.d. Rayleigh block fading per slot: SNR exponential with the user's mean; rate
// B log2(1 + SNR) (Shannon, as Srinivasan & Baras, §VI: "proportional to log(1 + SNR)").
class rayleigh_rates {
  public:
    rayleigh_rates(std::vector<double> mean_snr_db, std::uint64_t seed) : rng_(seed), exp_(1.0) {
        for (double db : mean_snr_db) mean_.push_back(std::pow(10.0, db / 10.0));
    }
    const std::vector<double>& next() {
        rate_.resize(mean_.size());
        for (std::size_t i = 0; i < mean_.size(); ++i) {
            rate_[i] = kBandwidthHz * std::log2(1.0 + mean_[i] * exp_(rng_));
        }
        return rate_;
    }

  private:
    std::mt19937_64 rng_;
    std::exponential_distribution<double> exp_;
    std::vector<double> mean_;
    std::vector<double> rate_;
};

struct run_result {
    std::vector<double> share;       // fraction of slots
    std::vector<double> throughput;  // bit/s averaged over the run
};

// Runs `slots` slots with every user backlogged; rates from `gen`.
template <class Gen>
run_result run_backlogged(scheduler_policy& p, std::size_t slots, Gen&& gen) {
    const std::size_t n = p.num_users();
    std::vector<bool> all(n, true);
    run_result r{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
    for (std::size_t s = 0; s < slots; ++s) {
        const std::vector<double>& rate = gen();
        const int u = p.step(rate, all);
        if (u >= 0) {
            r.share[static_cast<std::size_t>(u)] += 1.0;
            r.throughput[static_cast<std::size_t>(u)] += rate[static_cast<std::size_t>(u)];
        }
    }
    for (std::size_t i = 0; i < n; ++i) {
        r.share[i] /= static_cast<double>(slots);
        r.throughput[i] /= static_cast<double>(slots);
    }
    return r;
}

std::unique_ptr<scheduler_policy> make(std::size_t n, policy_params p) {
    return make_scheduler(scheduler_params{n, std::move(p)});
}

double min_over_max(const std::vector<double>& v) {
    return *std::min_element(v.begin(), v.end()) / *std::max_element(v.begin(), v.end());
}

// ---------------------------------------------------------------------------------------
// The contract every kind honours.

struct kind_case {
    std::string name;
    policy_params params;
    bool opportunistic;  // skips zero-rate users
    bool symmetric;      // identical users have identical metrics (ties)
};

void PrintTo(const kind_case& c, std::ostream* os) { *os << c.name; }

constexpr std::size_t kContractUsers = 6;

std::vector<kind_case> all_kinds() {
    return {
        {"pf", pf_params{0.03}, true, true},
        {"pf_alpha_1", pf_params{1.0}, true, true},
        {"glambda_0", glambda_params{0.03, 0.0}, true, true},
        {"glambda_0_5", glambda_params{0.01, 0.5}, true, true},
        {"glambda_10", glambda_params{0.01, 10.0}, true, true},
        {"rr", round_robin_params{}, false, true},
        {"maxrate", max_rate_params{}, true, true},
        {"wpf_equal", weighted_pf_params{0.03, std::vector<double>(kContractUsers, 2.0)}, true,
         true},
        {"wpf", weighted_pf_params{0.03, {1, 2, 3, 4, 5, 6}}, true, false},
    };
}

class scheduler_contract : public ::testing::TestWithParam<kind_case> {
  protected:
    std::unique_ptr<scheduler_policy> fresh() const {
        return make(kContractUsers, GetParam().params);
    }
};

// EV-DO Table I rates (Srinivasan & Baras): quantised, so exact metric ties do happen.
const std::vector<double> kEvdoRates = {38400,  76800,  153600,  204800,  307200,
                                        614400, 921600, 1228800, 1843200, 2457600};

TEST_P(scheduler_contract, never_picks_a_user_without_data_and_none_iff_none_backlogged) {
    auto p = fresh();
    std::mt19937_64 rng(11);
    std::uniform_int_distribution<std::size_t> pick_rate(0, kEvdoRates.size() - 1);
    std::bernoulli_distribution has_data(0.3);
    std::vector<double> rate(kContractUsers);
    std::vector<bool> backlogged(kContractUsers);
    int none_count = 0;
    for (int s = 0; s < 5000; ++s) {
        for (std::size_t i = 0; i < kContractUsers; ++i) {
            rate[i] = kEvdoRates[pick_rate(rng)];  // every rate > 0
            backlogged[i] = has_data(rng);
        }
        const bool any =
            std::any_of(backlogged.begin(), backlogged.end(), [](bool b) { return b; });
        const int u = p->step(rate, backlogged);
        if (u == kNoUser) {
            ++none_count;
            EXPECT_FALSE(any) << "slot " << s << ": none chosen while a user had data";
        } else {
            ASSERT_GE(u, 0);
            ASSERT_LT(u, static_cast<int>(kContractUsers));
            EXPECT_TRUE(backlogged[static_cast<std::size_t>(u)]) << "slot " << s;
        }
    }
    // 0.7^6 = 12% of the slots have nobody backlogged: the none branch was exercised.
    EXPECT_GT(none_count, 300);
    EXPECT_EQ(p->slots(), 5000);
}

TEST_P(scheduler_contract, choice_is_a_deterministic_function_of_inputs_and_history) {
    auto a = fresh();
    auto b = fresh();
    rayleigh_rates ch({0, 3, 6, 9, 12, 15}, 5);
    std::mt19937_64 rng(6);
    std::bernoulli_distribution has_data(0.8);
    std::vector<bool> backlogged(kContractUsers);
    for (int s = 0; s < 3000; ++s) {
        const std::vector<double> rate = ch.next();
        for (std::size_t i = 0; i < kContractUsers; ++i) backlogged[i] = has_data(rng);
        const int first = a->choose(rate, backlogged);
        EXPECT_EQ(a->choose(rate, backlogged), first) << "choose() changed state";
        ASSERT_EQ(b->choose(rate, backlogged), first) << "slot " << s;
        a->update(rate, first, first >= 0 ? rate[static_cast<std::size_t>(first)] : 0.0);
        b->step(rate, backlogged);
    }
    EXPECT_EQ(a->averages(), b->averages());
}

TEST_P(scheduler_contract, ties_go_to_the_least_recently_served_user) {
    if (!GetParam().symmetric) GTEST_SKIP() << "unequal weights: identical users do not tie";
    auto p = fresh();
    // Identical users, constant equal rate: every metric ties at every slot, so service
    // must cycle 0, 1, ..., N-1, 0, 1, ... (never served users first, by index).
    const std::vector<double> rate(kContractUsers, 614400.0);
    const std::vector<bool> all(kContractUsers, true);
    for (int s = 0; s < 3 * static_cast<int>(kContractUsers); ++s) {
        EXPECT_EQ(p->step(rate, all), s % static_cast<int>(kContractUsers)) << "slot " << s;
    }
}

TEST_P(scheduler_contract, zero_rate_users_are_skipped_only_by_opportunistic_kinds) {
    auto p = fresh();
    std::vector<double> rate(kContractUsers, 0.0);
    rate[3] = 307200.0;
    std::vector<bool> all(kContractUsers, true);
    int chose_zero_rate = 0;
    for (int s = 0; s < 50; ++s) {
        const int u = p->step(rate, all);
        ASSERT_NE(u, kNoUser);
        if (u != 3) ++chose_zero_rate;
    }
    if (GetParam().opportunistic) {
        EXPECT_EQ(chose_zero_rate, 0);
        // Nobody with data has a positive rate: nothing worth sending.
        std::vector<bool> only_zero(kContractUsers, true);
        only_zero[3] = false;
        EXPECT_EQ(p->choose(rate, only_zero), kNoUser);
    } else {
        // Round robin is channel-agnostic (Srinivasan & Baras, Fig. 2): 5 of every 6 slots at rate
        // 0.
        EXPECT_GT(chose_zero_rate, 0);
    }
}

TEST_P(scheduler_contract, every_average_decays_every_slot_and_the_served_user_is_credited) {
    auto p = fresh();
    const double a = p->alpha();
    const std::vector<double> rate = {38400, 76800, 153600, 307200, 614400, 1228800};
    const std::vector<bool> all(kContractUsers, true);
    const int u0 = p->step(rate, all);
    ASSERT_NE(u0, kNoUser);
    // First slot: every user initialised to R_i / N, then one EMA step.
    for (std::size_t i = 0; i < kContractUsers; ++i) {
        const double init = rate[i] / kContractUsers;
        const double served = static_cast<int>(i) == u0 ? rate[i] : 0.0;
        EXPECT_NEAR(p->averages()[i], std::max((1 - a) * init + a * served, kMinAverageBps),
                    1e-9 * rate[i])
            << i;
    }
    const std::vector<double> before = p->averages();
    const std::vector<bool> none(kContractUsers, false);
    EXPECT_EQ(p->step(rate, none), kNoUser);
    for (std::size_t i = 0; i < kContractUsers; ++i) {
        EXPECT_DOUBLE_EQ(p->averages()[i], std::max((1 - a) * before[i], kMinAverageBps)) << i;
    }
}

TEST_P(scheduler_contract, harq_retransmission_served_outside_the_policy_is_credited) {
    auto p = fresh();
    const std::vector<double> rate(kContractUsers, 614400.0);
    const std::vector<bool> all(kContractUsers, true);
    p->step(rate, all);
    const std::vector<double> before = p->averages();
    // The MAC gave this slot to a HARQ retransmission for user 4 (TB sized at 921.6 kb/s).
    p->update(rate, 4, 921600.0);
    const double a = p->alpha();
    EXPECT_DOUBLE_EQ(p->averages()[4], (1 - a) * before[4] + a * 921600.0);
    EXPECT_DOUBLE_EQ(p->averages()[0], std::max((1 - a) * before[0], kMinAverageBps));
    EXPECT_EQ(p->slots(), 2);
}

TEST_P(scheduler_contract, malformed_slot_inputs_are_rejected_with_the_field_named) {
    auto p = fresh();
    const std::vector<bool> all(kContractUsers, true);
    try {
        p->choose(std::vector<double>(kContractUsers - 1, 1e5), all);
        FAIL() << "size mismatch accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), "sched.rate_bps: size 5 != num_users 6");
    }
    std::vector<double> rate(kContractUsers, 1e5);
    rate[2] = -1.0;
    EXPECT_THROW(p->choose(rate, all), std::invalid_argument);
    rate[2] = std::nan("");
    EXPECT_THROW(p->choose(rate, all), std::invalid_argument);
    rate[2] = 1e5;
    EXPECT_THROW(p->choose(rate, std::vector<bool>(3, true)), std::invalid_argument);
    EXPECT_THROW(p->update(rate, 6, 1e5), std::invalid_argument);
    EXPECT_THROW(p->update(rate, -2, 0.0), std::invalid_argument);
    EXPECT_THROW(p->update(rate, 1, -5.0), std::invalid_argument);
    EXPECT_EQ(p->slots(), 0) << "a rejected update must not end the slot";
}

INSTANTIATE_TEST_SUITE_P(all_kinds, scheduler_contract, ::testing::ValuesIn(all_kinds()),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------
// Proportional fair (Andrew & Hanly, CLAMP, eq. 19; Srinivasan & Baras, eq. 5-6).

// Srinivasan & Baras, §III-B: "The PF scheduler is fundamentally resource fair". With i.i.d.
// Rayleigh channels of unequal means each user gets about 1/N of the slots. (Exactly 1/N only when
// the rate is linear in the SNR; with log2(1+SNR) the low-SNR user, whose rate fluctuates more in
// relative terms, needs fewer slots: about 0.22 vs 0.28 here, well inside 15%.)
TEST(sched_pf, gives_each_rayleigh_user_one_nth_of_the_slots_within_15_percent) {
    for (double alpha : {0.1, 0.03, 0.001}) {
        auto p = make(4, pf_params{alpha});
        rayleigh_rates ch({0, 5, 10, 15}, 42);
        // >= 200 time constants 1/alpha (Srinivasan & Baras, §IV: run orders of magnitude longer).
        const run_result r = run_backlogged(*p, 200000, [&] { return ch.next(); });
        for (std::size_t i = 0; i < 4; ++i) {
            EXPECT_NEAR(r.share[i], 0.25, 0.15 * 0.25) << "alpha " << alpha << " user " << i;
        }
        // ... while throughput follows the channel (Srinivasan & Baras, §V: user B vs user W).
        EXPECT_LT(r.throughput[0], r.throughput[3] / 2);
    }
}

TEST(sched_pf, uses_the_seed_000_average_0_97_0_03) {
    auto p = make(2, pf_params{});
    const std::vector<double> rate = {1e6, 1e6};
    p->step(rate, {true, true});  // serves user 0 (tie, lowest index)
    EXPECT_DOUBLE_EQ(p->averages()[0], 0.97 * 0.5e6 + 0.03 * 1e6);
    EXPECT_DOUBLE_EQ(p->averages()[1], 0.97 * 0.5e6);
}

TEST(sched_pf, long_idle_user_average_stays_above_the_floor_and_it_is_served_first) {
    auto p = make(2, pf_params{0.1});
    const std::vector<double> rate = {1e6, 1e6};
    for (int s = 0; s < 20000; ++s) p->step(rate, {true, false});  // 0.9^20000 underflows
    EXPECT_DOUBLE_EQ(p->averages()[1], kMinAverageBps);
    EXPECT_EQ(p->choose(rate, {true, true}), 1);
}

TEST(sched_pf, alpha_must_be_in_0_1) {
    for (double bad : std::vector<double>{0.0, -0.03, 1.5, std::nan(""), INFINITY}) {
        EXPECT_THROW(make(4, pf_params{bad}), std::invalid_argument) << bad;
    }
    try {
        make(4, pf_params{0.0});
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), "sched.alpha: 0 not in (0,1]");
    }
    try {
        make(4, glambda_params{1.5, 1.0});
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), "sched.alpha: 1.5 not in (0,1]");
    }
    EXPECT_NO_THROW(make(4, pf_params{1.0}));
    EXPECT_NO_THROW(make(4, pf_params{0.001}));
    EXPECT_NO_THROW(make(4, round_robin_params{1e-6}));
}

TEST(sched_pf, users_added_later_start_uninitialised_and_win_ties) {
    auto p = make(2, pf_params{});
    const std::vector<bool> all2(2, true);
    for (int s = 0; s < 10; ++s) p->step({1e6, 1e6}, all2);
    p->set_num_users(3);
    EXPECT_EQ(p->num_users(), 3u);
    EXPECT_EQ(p->averages()[2], 0.0);
    // New user: metric R/(R/N) = N = 3 beats the incumbents' ~2.
    EXPECT_EQ(p->choose({1e6, 1e6, 1e6}, {true, true, true}), 2);
    p->reset_user(0);
    EXPECT_EQ(p->averages()[0], 0.0);
    EXPECT_THROW(p->reset_user(3), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------
// Generalized metric log R - lambda log T (Srinivasan & Baras, eq. 7, §VI).

TEST(sched_glambda, lambda_zero_behaves_exactly_as_max_rate) {
    auto g = make(8, glambda_params{0.01, 0.0});
    auto m = make(8, max_rate_params{0.01});
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<std::size_t> pick_rate(0, kEvdoRates.size() - 1);
    std::bernoulli_distribution has_data(0.7);
    std::vector<double> rate(8);
    std::vector<bool> backlogged(8);
    int ties = 0;
    for (int s = 0; s < 20000; ++s) {
        for (std::size_t i = 0; i < 8; ++i) {
            rate[i] = kEvdoRates[pick_rate(rng) / 2];  // 5 levels: many exact ties
            backlogged[i] = has_data(rng);
        }
        const double best = [&] {
            double b = -1;
            for (std::size_t i = 0; i < 8; ++i)
                if (backlogged[i]) b = std::max(b, rate[i]);
            return b;
        }();
        ties += std::count_if(rate.begin(), rate.end(), [&](double r) { return r == best; }) > 1;
        ASSERT_EQ(g->step(rate, backlogged), m->step(rate, backlogged)) << "slot " << s;
    }
    EXPECT_GT(ties, 1000) << "the tie-breaking path was exercised";
    EXPECT_EQ(g->averages(), m->averages());
}

TEST(sched_glambda, lambda_one_is_the_pf_metric) {
    // Srinivasan & Baras, §VI: "When lambda = 1, this is identical to the proportional fair
    // metric".
    auto g = make(4, glambda_params{0.03, 1.0});
    auto p = make(4, pf_params{0.03});
    rayleigh_rates ch({0, 5, 10, 15}, 3);
    const std::vector<bool> all(4, true);
    for (int s = 0; s < 20000; ++s) {
        const std::vector<double>& rate = ch.next();
        ASSERT_EQ(g->step(rate, all), p->step(rate, all)) << "slot " << s;
    }
}

// Srinivasan & Baras, §VI, Fig. 9-13: lambda trades throughput for fairness. lambda = 0 starves the
// weak users; as lambda grows the per-user throughputs T_i equalise (the policy is the
// gradient scheduler of the alpha-fair utility with exponent lambda, max-min fair as
// lambda -> infinity). Stated tolerance: at lambda = 10 every user's throughput is within
// 20% of the mean throughput, and the aggregate falls monotonically with lambda.
TEST(sched_glambda, large_lambda_approaches_rate_fairness) {
    const std::vector<double> lambdas = {0.0, 0.5, 1.0, 2.0, 5.0, 10.0};
    std::vector<double> fairness, total;
    run_result at10;
    for (double lambda : lambdas) {
        auto g =
            make(4, glambda_params{0.01, lambda});  // Srinivasan & Baras, §VI, use alpha = 0.01
        rayleigh_rates ch({0, 5, 10, 15}, 99);
        const run_result r = run_backlogged(*g, 100000, [&] { return ch.next(); });
        fairness.push_back(min_over_max(r.throughput));
        total.push_back(std::accumulate(r.throughput.begin(), r.throughput.end(), 0.0));
        if (lambda == 10.0) at10 = r;
    }
    for (std::size_t k = 1; k < lambdas.size(); ++k) {
        EXPECT_GT(fairness[k], fairness[k - 1]) << "lambda " << lambdas[k];
        EXPECT_LT(total[k], total[k - 1]) << "lambda " << lambdas[k];
    }
    EXPECT_LT(fairness[0], 0.01) << "lambda = 0 starves the 0 dB user";
    const double mean = total.back() / 4.0;
    for (std::size_t i = 0; i < 4; ++i) {
        EXPECT_NEAR(at10.throughput[i], mean, 0.20 * mean) << "user " << i;
    }
    // Rate fairness is bought with slots: the weakest user now gets the most of them.
    EXPECT_GT(at10.share[0], at10.share[3]);
}

TEST(sched_glambda, lambda_must_be_non_negative_and_finite) {
    for (double bad : std::vector<double>{-0.5, std::nan(""), INFINITY}) {
        EXPECT_THROW(make(4, glambda_params{0.03, bad}), std::invalid_argument) << bad;
    }
    try {
        make(4, glambda_params{0.03, -1.0});
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), "sched.lambda: -1 must be >= 0");
    }
    EXPECT_NO_THROW(make(4, glambda_params{0.03, 100.0}));
}

// ---------------------------------------------------------------------------------------
// Round robin.

TEST(sched_rr, gives_exactly_one_nth_of_the_slots_when_all_are_backlogged) {
    auto p = make(5, round_robin_params{});
    rayleigh_rates ch({-5, 0, 5, 10, 15}, 1);
    const run_result r = run_backlogged(*p, 5 * 2000, [&] { return ch.next(); });
    for (double s : r.share) EXPECT_DOUBLE_EQ(s, 0.2);
}

TEST(sched_rr, serves_only_backlogged_users_in_cyclic_order) {
    auto p = make(4, round_robin_params{});
    const std::vector<double> rate(4, 1e5);
    std::vector<int> order;
    for (int s = 0; s < 6; ++s) order.push_back(p->step(rate, {true, false, true, true}));
    EXPECT_EQ(order, (std::vector<int>{0, 2, 3, 0, 2, 3}));
}

TEST(sched_rr, a_harq_slot_counts_as_that_users_turn) {
    auto p = make(3, round_robin_params{});
    const std::vector<double> rate(3, 1e5);
    const std::vector<bool> all(3, true);
    EXPECT_EQ(p->step(rate, all), 0);
    p->update(rate, 1, 1e5);  // HARQ retransmission for user 1 took the slot
    EXPECT_EQ(p->step(rate, all), 2);
    EXPECT_EQ(p->step(rate, all), 0);
    EXPECT_EQ(p->step(rate, all), 1);
}

// ---------------------------------------------------------------------------------------
// Max rate.

TEST(sched_maxrate, picks_the_highest_rate_among_users_with_data) {
    auto p = make(4, max_rate_params{});
    EXPECT_EQ(p->step({1e5, 9e5, 3e5, 2e6}, {true, true, true, false}), 1);
    EXPECT_EQ(p->step({1e5, 9e5, 3e5, 2e6}, {true, true, true, true}), 3);
}

// ---------------------------------------------------------------------------------------
// Weighted PF.

// Constant rates (no fading): the metrics w_i R_i / T_i equalise at T_i = s_i R_i, so the
// slot share is s_i = w_i / sum_j w_j whatever the rates (see sched.h). This holds as
// alpha -> 0: the policy compares T_i just before a service, which for a user served every
// k slots is k alpha (1-alpha)^(k-1) / (1 - (1-alpha)^k) times its mean (0.87 for k = 10 at
// alpha = 0.03, 0.996 at alpha = 0.001), so at alpha = 0.03 the smallest-weight user gets
// ~8% more than w_i / sum w. Hence alpha = 0.001 here.
TEST(sched_wpf, slot_shares_equal_normalised_weights_on_constant_channels) {
    const std::vector<double> w = {1, 2, 3, 4};
    auto p = make(4, weighted_pf_params{0.001, w});
    const std::vector<double> rate = {0.2e6, 1e6, 0.5e6, 3e6};
    const run_result r =
        run_backlogged(*p, 100000, [&]() -> const std::vector<double>& { return rate; });
    for (std::size_t i = 0; i < 4; ++i) EXPECT_NEAR(r.share[i], w[i] / 10.0, 0.005) << i;
}

// Fading: the long-run throughputs T* maximise sum_i w_i log T_i over the achievable region
// (Kelly; the metric is its gradient), so no other policy's throughput vector T' improves the
// first-order condition: sum_i w_i T'_i / T*_i <= sum_i w_i. Checked against RR, max rate,
// unweighted PF and weighted PF with the weights reversed (1% slack for finite alpha and run).
TEST(sched_wpf, throughputs_maximise_the_weighted_log_utility_under_fading) {
    const std::vector<double> w = {1, 2, 3, 4};
    const std::vector<double> snr = {0, 5, 10, 15};
    constexpr std::size_t kSlots = 100000;
    auto wpf = make(4, weighted_pf_params{0.01, w});
    rayleigh_rates ch0(snr, 77);
    const run_result best = run_backlogged(*wpf, kSlots, [&] { return ch0.next(); });
    // The slot shares still follow the weights' order, roughly proportionally.
    for (std::size_t i = 1; i < 4; ++i) EXPECT_GT(best.share[i], best.share[i - 1]);
    const double sum_w = std::accumulate(w.begin(), w.end(), 0.0);
    const std::vector<policy_params> others = {round_robin_params{}, max_rate_params{},
                                               pf_params{0.01},
                                               weighted_pf_params{0.01, {4, 3, 2, 1}}};
    for (const auto& o : others) {
        auto q = make(4, o);
        rayleigh_rates ch(snr, 77);  // the same channel realisation
        const run_result alt = run_backlogged(*q, kSlots, [&] { return ch.next(); });
        double lhs = 0;
        for (std::size_t i = 0; i < 4; ++i) lhs += w[i] * alt.throughput[i] / best.throughput[i];
        EXPECT_LE(lhs, 1.01 * sum_w) << q->kind();
    }
}

TEST(sched_wpf, weights_must_be_positive_and_match_the_users) {
    try {
        make(3, weighted_pf_params{0.03, {1.0, 0.0, 2.0}});
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), "sched.weights[1]: 0 must be > 0");
    }
    try {
        make(2, weighted_pf_params{0.03, {1.0, 2.0, 3.0}});
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), "sched.num_users: 2 != weights size 3");
    }
    auto p = make(0, weighted_pf_params{0.03, {1.0, 2.0, 3.0}});
    EXPECT_EQ(p->num_users(), 3u);
    EXPECT_EQ(p->kind(), "wpf");
}

TEST(sched_factory, builds_the_kind_the_config_names) {
    EXPECT_EQ(make(2, pf_params{})->kind(), "pf");
    EXPECT_EQ(make(2, glambda_params{})->kind(), "glambda");
    EXPECT_EQ(make(2, round_robin_params{})->kind(), "rr");
    EXPECT_EQ(make(2, max_rate_params{})->kind(), "maxrate");
    EXPECT_EQ(make(2, weighted_pf_params{0.03, {1, 1}})->kind(), "wpf");
    EXPECT_DOUBLE_EQ(make(2, pf_params{})->alpha(), 0.03);
}

}  // namespace

// ---- the registry ---------------------------------------------------------------------------

TEST(sched_registry, lists_every_kind_once_in_policy_params_order_and_builds_it_by_name) {
    const auto& kinds = scheduler_kinds();
    ASSERT_EQ(kinds.size(), std::variant_size_v<policy_params>);
    for (std::size_t i = 0; i < kinds.size(); ++i) {
        param_map values;
        if (kinds[i].name == "wpf") values["weights"] = std::vector<double>{1.0, 2.0};
        const policy_params p = policy_params_from(kinds[i].name, values);
        EXPECT_EQ(p.index(), i) << kinds[i].name;
        EXPECT_EQ(make_scheduler({2, p})->kind(), kinds[i].name);
        EXPECT_EQ(find_scheduler_kind(kinds[i].name), &kinds[i]);
    }
    EXPECT_EQ(find_scheduler_kind("edf"), nullptr);
}

TEST(sched_registry, defaults_are_those_of_the_params_structs) {
    const auto g = std::get<glambda_params>(policy_params_from("glambda", {}));
    EXPECT_EQ(g.alpha, glambda_params{}.alpha);
    EXPECT_EQ(g.lambda, glambda_params{}.lambda);
    EXPECT_EQ(std::get<pf_params>(policy_params_from("pf", {})).alpha, pf_params{}.alpha);
}

TEST(sched_registry, values_outside_the_registered_range_are_refused_naming_field_and_range) {
    EXPECT_EQ(error_of([] {
                  policy_params_from("glambda", {{"lambda", -1.0}});
              }),
              "sched.lambda: -1 must be >= 0");
    EXPECT_EQ(error_of([] {
                  policy_params_from("pf", {{"alpha", 0.0}});
              }),
              "sched.alpha: 0 not in (0,1]");
    EXPECT_EQ(error_of([] {
                  policy_params_from("pf", {{"lambda", 1.0}});
              }),
              "sched.params: 'lambda' not accepted by kind 'pf' (accepted: alpha)");
    EXPECT_EQ(error_of([] { policy_params_from("wpf", {}); }),
              "sched.weights: required for kind 'wpf'");
    EXPECT_EQ(error_of([] { policy_params_from("edf", {}); }),
              "sched.kind: 'edf' not one of pf, glambda, rr, maxrate, wpf");
    // validate() checks the same ranges on a policy built in C++.
    EXPECT_EQ(error_of([] {
                  make_scheduler({2, glambda_params{0.03, -1.0}});
              }),
              "sched.lambda: -1 must be >= 0");
    // A large lambda is allowed: the range has no upper end.
    EXPECT_NO_THROW(policy_params_from("glambda", {{"lambda", 1e6}}));
}

TEST(sched_registry, every_registered_kind_has_a_row_in_the_contract) {
    const auto rows = all_kinds();
    for (std::size_t i = 0; i < scheduler_kinds().size(); ++i) {
        const bool covered = std::any_of(rows.begin(), rows.end(),
                                         [i](const kind_case& c) { return c.params.index() == i; });
        EXPECT_TRUE(covered) << scheduler_kinds()[i].name << " has no all_kinds() row";
    }
}
