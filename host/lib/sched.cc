// Scheduler policies (see oppsched/sched.h for the contract, the papers and the invariants).
#include "oppsched/sched.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "oppsched/validation.h"

namespace oppsched::sched {
namespace {

constexpr std::size_t kMaxUsers = 65536;
// Stamp of a user never served: below every real slot number, ordered by index, so that on a
// tie never-served users go first and among them the lowest index.
constexpr std::int64_t kNeverServed = std::numeric_limits<std::int64_t>::min() / 2;

double alpha_of(const policy_params& p) {
    return std::visit([](const auto& q) { return q.alpha; }, p);
}

// Shared state and mechanics of every kind: the EMA averages (Srinivasan & Baras, eq. 6), the lazy
// initialisation, the service stamps used for tie-breaking, and input checks.
class policy_base : public scheduler_policy {
  public:
    policy_base(std::size_t n, double alpha) : alpha_(alpha) { policy_base::set_num_users(n); }

    const std::vector<double>& averages() const final { return avg_; }
    std::size_t num_users() const final { return avg_.size(); }
    std::int64_t slots() const final { return slot_; }
    double alpha() const final { return alpha_; }

    void set_num_users(std::size_t n) override {
        if (n > kMaxUsers) {
            throw_invalid("sched.num_users: " + std::to_string(n) + " > " +
                          std::to_string(kMaxUsers));
        }
        const std::size_t old = avg_.size();
        avg_.resize(n, 0.0);
        init_.resize(n, 0);
        stamp_.resize(n);
        for (std::size_t i = old; i < n; ++i)
            stamp_[i] = kNeverServed + static_cast<std::int64_t>(i);
    }

    void reset_user(std::size_t u) final {
        if (u >= avg_.size()) {
            throw_invalid("sched.user: " + std::to_string(u) + " not in [0, " +
                          std::to_string(avg_.size()) + ")");
        }
        avg_[u] = 0.0;
        init_[u] = 0;
        stamp_[u] = kNeverServed + static_cast<std::int64_t>(u);
    }

    void update(const std::vector<double>& rate_bps, int served, double served_bps) final {
        check_rates(rate_bps);
        const std::size_t n = avg_.size();
        if (served < kNoUser || served >= static_cast<int>(n)) {
            throw_invalid("sched.served: " + std::to_string(served) + " not in [-1, " +
                          std::to_string(n) + ")");
        }
        if (!(served_bps >= 0.0 && std::isfinite(served_bps))) {
            throw_invalid("sched.served_bps: " + format_number(served_bps) +
                          " not >= 0 and finite");
        }
        const double inv_n = 1.0 / static_cast<double>(n == 0 ? 1 : n);
        const double keep = 1.0 - alpha_;
        for (std::size_t i = 0; i < n; ++i) {
            if (!init_[i]) {
                if (rate_bps[i] > 0.0) {
                    avg_[i] = rate_bps[i] * inv_n;  // lazy initialisation, see sched.h
                    init_[i] = 1;
                } else if (static_cast<int>(i) == served) {
                    avg_[i] = 0.0;  // served at rate 0 (round robin): starts from the floor
                    init_[i] = 1;
                } else {
                    continue;
                }
            }
            // T_i(n) = (1 - alpha) T_i(n-1) + alpha R_i(n)   (Srinivasan & Baras, eq. 6, Andrew &
            // Hanly, CLAMP, §V-C)
            double t = keep * avg_[i];
            if (static_cast<int>(i) == served) t += alpha_ * served_bps;
            avg_[i] = std::max(t, kMinAverageBps);
        }
        if (served != kNoUser) stamp_[static_cast<std::size_t>(served)] = slot_;
        ++slot_;
    }

  protected:
    void check_rates(const std::vector<double>& rate_bps) const {
        if (rate_bps.size() != avg_.size()) {
            throw_invalid("sched.rate_bps: size " + std::to_string(rate_bps.size()) +
                          " != num_users " + std::to_string(avg_.size()));
        }
        for (std::size_t i = 0; i < rate_bps.size(); ++i) {
            if (!(rate_bps[i] >= 0.0 && std::isfinite(rate_bps[i]))) {
                throw_invalid("sched.rate_bps[" + std::to_string(i) +
                              "]: " + format_number(rate_bps[i]) + " not >= 0 and finite");
            }
        }
    }

    void check_inputs(const std::vector<double>& rate_bps,
                      const std::vector<bool>& backlogged) const {
        check_rates(rate_bps);
        if (backlogged.size() != avg_.size()) {
            throw_invalid("sched.backlogged: size " + std::to_string(backlogged.size()) +
                          " != num_users " + std::to_string(avg_.size()));
        }
    }

    // T_i as the metric sees it this slot: the average, or R_i/N before initialisation.
    double average_for_metric(std::size_t i, double rate) const {
        if (init_[i]) return avg_[i];
        return std::max(rate / static_cast<double>(avg_.size()), kMinAverageBps);
    }

    bool initialised(std::size_t i) const { return init_[i] != 0; }

    // Tie-break order: true if a (served at stamp_a) goes before b.
    bool earlier(std::size_t a, std::size_t b) const { return stamp_[a] < stamp_[b]; }

    // argmax of metric(i, R_i) over backlogged users with R_i > 0; ties to the least
    // recently served. O(N).
    template <class Metric>
    int argmax_opportunistic(const std::vector<double>& rate_bps,
                             const std::vector<bool>& backlogged, Metric metric) const {
        check_inputs(rate_bps, backlogged);
        int best = kNoUser;
        double best_m = 0.0;
        for (std::size_t i = 0; i < rate_bps.size(); ++i) {
            if (!backlogged[i] || !(rate_bps[i] > 0.0)) continue;
            const double m = metric(i, rate_bps[i]);
            if (best == kNoUser || m > best_m ||
                (m == best_m && earlier(i, static_cast<std::size_t>(best)))) {
                best = static_cast<int>(i);
                best_m = m;
            }
        }
        return best;
    }

    // Round robin: the backlogged user served least recently, whatever its rate.
    int least_recently_served(const std::vector<double>& rate_bps,
                              const std::vector<bool>& backlogged) const {
        check_inputs(rate_bps, backlogged);
        int best = kNoUser;
        for (std::size_t i = 0; i < backlogged.size(); ++i) {
            if (!backlogged[i]) continue;
            if (best == kNoUser || earlier(i, static_cast<std::size_t>(best))) {
                best = static_cast<int>(i);
            }
        }
        return best;
    }

  private:
    double alpha_;
    std::vector<double> avg_;          // T_i, bit/s
    std::vector<std::uint8_t> init_;   // T_i initialised
    std::vector<std::int64_t> stamp_;  // slot of last service (kNeverServed + i if none)
    std::int64_t slot_ = 0;
};

// Andrew & Hanly, CLAMP, eq. 19 (U_i = mu_i / r_i), Srinivasan & Baras, eq. 5.
class pf_policy final : public policy_base {
  public:
    pf_policy(std::size_t n, const pf_params& p) : policy_base(n, p.alpha) {}
    std::string_view kind() const override { return "pf"; }
    int choose(const std::vector<double>& rate_bps,
               const std::vector<bool>& backlogged) const override {
        return argmax_opportunistic(rate_bps, backlogged, [this](std::size_t i, double r) {
            return r / average_for_metric(i, r);
        });
    }
};

// Srinivasan & Baras, eq. 7: B_i = log R_i - lambda log T_i. At lambda = 0 the metric is R_i itself
// (exp of eq. 7, same ranking), so lambda = 0 is exactly max rate, ties included.
class glambda_policy final : public policy_base {
  public:
    glambda_policy(std::size_t n, const glambda_params& p)
        : policy_base(n, p.alpha), lambda_(p.lambda) {}
    std::string_view kind() const override { return "glambda"; }
    int choose(const std::vector<double>& rate_bps,
               const std::vector<bool>& backlogged) const override {
        if (lambda_ == 0.0) {
            return argmax_opportunistic(rate_bps, backlogged,
                                        [](std::size_t, double r) { return r; });
        }
        const double log_n = std::log(static_cast<double>(num_users()));
        return argmax_opportunistic(rate_bps, backlogged, [&](std::size_t i, double r) {
            // Before initialisation T_i = R_i / N, so B_i = (1 - lambda) log R_i + lambda log N:
            // written this way, lambda = 1 ties every new user exactly, as PF does.
            if (!initialised(i)) return (1.0 - lambda_) * std::log(r) + lambda_ * log_n;
            return std::log(r) - lambda_ * std::log(average_for_metric(i, r));
        });
    }

  private:
    double lambda_;
};

class round_robin_policy final : public policy_base {
  public:
    round_robin_policy(std::size_t n, const round_robin_params& p) : policy_base(n, p.alpha) {}
    std::string_view kind() const override { return "rr"; }
    int choose(const std::vector<double>& rate_bps,
               const std::vector<bool>& backlogged) const override {
        return least_recently_served(rate_bps, backlogged);
    }
};

class max_rate_policy final : public policy_base {
  public:
    max_rate_policy(std::size_t n, const max_rate_params& p) : policy_base(n, p.alpha) {}
    std::string_view kind() const override { return "maxrate"; }
    int choose(const std::vector<double>& rate_bps,
               const std::vector<bool>& backlogged) const override {
        return argmax_opportunistic(rate_bps, backlogged, [](std::size_t, double r) { return r; });
    }
};

class weighted_pf_policy final : public policy_base {
  public:
    weighted_pf_policy(std::size_t n, const weighted_pf_params& p)
        : policy_base(n, p.alpha), weights_(p.weights) {
        weights_.resize(n, 1.0);
    }
    std::string_view kind() const override { return "wpf"; }
    int choose(const std::vector<double>& rate_bps,
               const std::vector<bool>& backlogged) const override {
        return argmax_opportunistic(rate_bps, backlogged, [this](std::size_t i, double r) {
            return weights_[i] * r / average_for_metric(i, r);
        });
    }
    void set_num_users(std::size_t n) override {
        policy_base::set_num_users(n);
        weights_.resize(n, 1.0);
    }

  private:
    std::vector<double> weights_;
};

}  // namespace

namespace {

std::string kind_names() {
    std::string all;
    for (const auto& k : scheduler_kinds()) all += (all.empty() ? "" : ", ") + k.name;
    return all;
}

param_spec alpha_spec() {
    return {"alpha",
            param_type::number,
            kDefaultAlpha,
            param_range::open_closed(0.0, 1.0),
            "per slot",
            "EMA weight of the throughput averages T_i (Srinivasan & Baras, eq. 6); Andrew & "
            "Hanly, CLAMP, use 0.03",
            false};
}

// The range of parameter `name` of the kind at `index` (policy_params' order).
const param_range& range_of(std::size_t index, std::string_view name) {
    for (const auto& p : scheduler_kinds().at(index).params)
        if (p.name == name) return p.range;
    throw std::logic_error("sched: no parameter " + std::string(name));
}

double number_of(const param_map& v, const char* name) { return std::get<double>(v.at(name)); }

}  // namespace

const std::vector<scheduler_kind>& scheduler_kinds() {
    static const std::vector<scheduler_kind> kinds = [] {
        std::vector<scheduler_kind> k;
        k.push_back(
            {"pf",
             "proportional fair, metric R_i / T_i (Andrew & Hanly, CLAMP, eq. 19; "
             "Srinivasan & Baras, eq. 5)",
             {alpha_spec()},
             [](const param_map& v) -> policy_params { return pf_params{number_of(v, "alpha")}; }});
        k.push_back({"glambda",
                     "generalized metric log R_i - lambda log T_i (Srinivasan & Baras, eq. 7)",
                     {alpha_spec(),
                      {"lambda", param_type::number, 1.0, param_range::non_negative(), "",
                       "fairness exponent: 0 is max rate, 1 PF, large values tend to rate "
                       "fairness (Srinivasan & Baras sweep 0..10)",
                       false}},
                     [](const param_map& v) -> policy_params {
                         return glambda_params{number_of(v, "alpha"), number_of(v, "lambda")};
                     }});
        k.push_back({"rr",
                     "round robin among backlogged users, least recently served first, "
                     "whatever the rate; alpha only sets the averages it reports",
                     {alpha_spec()},
                     [](const param_map& v) -> policy_params {
                         return round_robin_params{number_of(v, "alpha")};
                     }});
        k.push_back({"maxrate",
                     "max rate (max C/I), argmax R_i; alpha only sets the averages it reports",
                     {alpha_spec()},
                     [](const param_map& v) -> policy_params {
                         return max_rate_params{number_of(v, "alpha")};
                     }});
        k.push_back({"wpf",
                     "weighted proportional fair, metric w_i R_i / T_i (Kelly's weighted "
                     "proportional fairness)",
                     {alpha_spec(),
                      {"weights", param_type::number_list, std::vector<double>{},
                       param_range::positive(), "", "w_i, one per user", true}},
                     [](const param_map& v) -> policy_params {
                         return weighted_pf_params{number_of(v, "alpha"),
                                                   std::get<std::vector<double>>(v.at("weights"))};
                     }});
        return k;
    }();
    return kinds;
}

const scheduler_kind* find_scheduler_kind(std::string_view name) {
    for (const auto& k : scheduler_kinds())
        if (k.name == name) return &k;
    return nullptr;
}

policy_params policy_params_from(std::string_view kind_name, const param_map& values) {
    const scheduler_kind* kind = find_scheduler_kind(kind_name);
    if (!kind)
        throw_invalid("sched.kind: '" + std::string(kind_name) + "' not one of " + kind_names());
    std::string accepted;
    for (const auto& p : kind->params) accepted += (accepted.empty() ? "" : ", ") + p.name;
    for (const auto& entry : values) {
        const std::string& key = entry.first;  // a lambda may not capture a structured binding
        const bool known = std::any_of(kind->params.begin(), kind->params.end(),
                                       [&](const param_spec& p) { return p.name == key; });
        if (!known)
            throw_invalid("sched.params: '" + key + "' not accepted by kind '" + kind->name +
                          "' (accepted: " + accepted + ")");
    }
    param_map full;
    for (const auto& p : kind->params) {
        const std::string label = "sched." + p.name;
        const auto it = values.find(p.name);
        if (it == values.end()) {
            if (p.required) throw_invalid(label + ": required for kind '" + kind->name + "'");
            full[p.name] = p.default_value;
            continue;
        }
        param_value v = it->second;
        switch (p.type) {
            case param_type::number:
            case param_type::seconds:
                if (const auto* i = std::get_if<std::uint64_t>(&v)) v = static_cast<double>(*i);
                if (!std::holds_alternative<double>(v)) throw_invalid(label + ": not a number");
                check_in_range(label, std::get<double>(v), p.range);
                break;
            case param_type::integer:
                if (!std::holds_alternative<std::uint64_t>(v))
                    throw_invalid(label + ": not a non-negative integer");
                check_in_range(label, static_cast<double>(std::get<std::uint64_t>(v)), p.range);
                break;
            case param_type::number_list: {
                if (!std::holds_alternative<std::vector<double>>(v))
                    throw_invalid(label + ": not a list of numbers");
                const auto& list = std::get<std::vector<double>>(v);
                for (std::size_t i = 0; i < list.size(); ++i)
                    check_in_range(label + "[" + std::to_string(i) + "]", list[i], p.range);
                break;
            }
            case param_type::boolean:
                if (!std::holds_alternative<bool>(v)) throw_invalid(label + ": not a boolean");
                break;
            case param_type::choice:
                if (!std::holds_alternative<std::string>(v)) throw_invalid(label + ": not a name");
                break;
        }
        full[p.name] = std::move(v);
    }
    return kind->build(full);
}

void validate(const scheduler_params& cfg) {
    const std::size_t index = cfg.policy.index();
    check_in_range("sched.alpha", alpha_of(cfg.policy), range_of(index, "alpha"));
    if (cfg.num_users > kMaxUsers) {
        throw_invalid("sched.num_users: " + std::to_string(cfg.num_users) + " > " +
                      std::to_string(kMaxUsers));
    }
    if (const auto* g = std::get_if<glambda_params>(&cfg.policy))
        check_in_range("sched.lambda", g->lambda, range_of(index, "lambda"));
    if (const auto* w = std::get_if<weighted_pf_params>(&cfg.policy)) {
        for (std::size_t i = 0; i < w->weights.size(); ++i)
            check_in_range("sched.weights[" + std::to_string(i) + "]", w->weights[i],
                           range_of(index, "weights"));
        if (cfg.num_users != 0 && !w->weights.empty() && cfg.num_users != w->weights.size()) {
            throw_invalid("sched.num_users: " + std::to_string(cfg.num_users) +
                          " != weights size " + std::to_string(w->weights.size()));
        }
    }
}

std::unique_ptr<scheduler_policy> make_scheduler(const scheduler_params& cfg) {
    validate(cfg);
    const std::size_t n = cfg.num_users;
    return std::visit(
        [n](const auto& p) -> std::unique_ptr<scheduler_policy> {
            using P = std::decay_t<decltype(p)>;
            if constexpr (std::is_same_v<P, pf_params>) {
                return std::make_unique<pf_policy>(n, p);
            } else if constexpr (std::is_same_v<P, glambda_params>) {
                return std::make_unique<glambda_policy>(n, p);
            } else if constexpr (std::is_same_v<P, round_robin_params>) {
                return std::make_unique<round_robin_policy>(n, p);
            } else if constexpr (std::is_same_v<P, max_rate_params>) {
                return std::make_unique<max_rate_policy>(n, p);
            } else {
                static_assert(std::is_same_v<P, weighted_pf_params>);
                return std::make_unique<weighted_pf_policy>(n == 0 ? p.weights.size() : n, p);
            }
        },
        cfg.policy);
}

}  // namespace oppsched::sched
