#pragma once
// Downlink scheduler policies: one interface, five kinds.
//
// As in srsRAN's scheduler_policy, a policy only RANKS the users that could be served in a
// slot and names the winner; it allocates nothing and knows nothing of HARQ. The MAC serves
// pending HARQ retransmissions first (host/include/oppsched/harq.h) and asks the policy only
// when the slot is free for new data; either way it ends every slot with exactly one
// update() so the throughput averages stay right.
//
// Per slot:
//   int u = policy.choose(rate_bps, backlogged);     // const: ranks, changes nothing
//   policy.update(rate_bps, u, u >= 0 ? rate_bps[u] : 0.0);
// or, when the MAC gave the slot to a HARQ retransmission of user h credited at r bit/s:
//   policy.update(rate_bps, h, r);                    // no choose() that slot
// step() does the first form in one call.
//
// Averages (all kinds keep them; PF, weighted PF and generalized use them in their metric):
//   T_i(n) = (1 - alpha) T_i(n-1) + alpha R_i(n)                       (Srinivasan & Baras, eq. 6)
// with R_i(n) the rate user i was served at in slot n (0 when not served): every user's
// average decays every slot, backlogged or not, as in both papers (Andrew & Hanly, CLAMP, §V-C:
// r_i(n) = 0.97 r_i(n-1) + 0.03 mu_i(n)).
//
// Initialisation of T_i: lazily, in the first slot user i reports a positive rate, to
// R_i / N (N = number of users). Why: R_i/N is the average a user gets when it is served in
// 1/N of the slots at its current rate, which is what PF converges to (Srinivasan & Baras, §III-B:
// PF is resource fair), so the EMA starts near its fixed point. Starting at 0 would make R/T
// infinite (division by zero) and, with any tiny epsilon instead, the first users would hog
// the channel for ~1/alpha slots (33 slots at alpha = 0.03, 1000 at 0.001) while their
// averages climb. Until initialised a user's average reads 0 and choose() uses R_i/N.
// Averages are floored at kMinAverageBps so that the metric stays finite for users idle so
// long that (1 - alpha)^n underflows; such users then all sit at the floor and rank by rate.
//
// Eligibility: a user is a candidate iff it is backlogged. The opportunistic kinds (PF,
// weighted PF, generalized, max rate) also skip users whose rate is 0: Srinivasan & Baras, §III,
// "any reasonable opportunistic scheduler will not select a user whose requested rate is zero".
// Round robin is channel-agnostic and serves a backlogged user even at rate 0 (Srinivasan & Baras
// Fig. 2 shows RR slots at zero rate). choose() returns kNoUser iff there is no candidate.
//
// Ties (equal metric, compared exactly) go to the candidate served least recently; users
// never served rank by index. Every served user gets a distinct slot stamp, so the order is
// total: the choice is a deterministic function of the inputs and the policy's history.
//
// Cost: choose() and update() are O(N) with no allocation (two logs per candidate for
// the generalized metric). Not thread-safe; one policy per cell.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "oppsched/param_spec.h"

namespace oppsched::sched {

constexpr int kNoUser = -1;
constexpr double kMinAverageBps = 1e-3;  // floor of T_i (bit/s), see above
constexpr double kDefaultAlpha =
    0.03;  // Andrew & Hanly, CLAMP, §V-C and Srinivasan & Baras baseline

// Proportional fair, metric R_i / T_i (Andrew & Hanly, CLAMP, eq. 19, U_i = mu_i / r_i; Srinivasan
// & Baras, eq. 5 with the rate R_i standing for log C_i). Andrew & Hanly use alpha = 0.03 per slot;
// Srinivasan & Baras sweep it over 0.1..0.001 (Fig. 4).
struct pf_params {
    double alpha = kDefaultAlpha;  // EMA weight per slot, (0, 1]
};

// Generalized metric B_i = log R_i - lambda log T_i (Srinivasan & Baras, eq. 7), T_i the EMA of the
// throughput (eq. 6). lambda = 0: max rate; 1: PF; large: towards rate (throughput)
// fairness. Srinivasan & Baras sweeps lambda 0..10 with alpha = 0.01.
struct glambda_params {
    double alpha = kDefaultAlpha;  // EMA weight per slot, (0, 1]
    double lambda = 1.0;           // fairness exponent, >= 0, finite
};

// Round robin among backlogged users (least recently served first); alpha only sets the
// averages it reports.
struct round_robin_params {
    double alpha = kDefaultAlpha;
};

// Max rate (max C/I): argmax R_i; alpha only sets the averages it reports.
struct max_rate_params {
    double alpha = kDefaultAlpha;
};

// Weighted PF, metric w_i R_i / T_i: the gradient scheduler of sum_i w_i log T_i (Kelly's
// weighted proportional fairness). Theory: with constant rates its fixed point gives slot
// shares w_i / sum_j w_j exactly (metrics equalise: w_i R_i / (s_i R_i) = w_i / s_i); with
// fading the long-run throughputs T* maximise sum_i w_i log T_i over the achievable region,
// i.e. sum_i w_i T'_i / T*_i <= sum_i w_i for any achievable T', and the slot shares are
// only approximately proportional to the weights.
struct weighted_pf_params {
    double alpha = kDefaultAlpha;
    std::vector<double> weights;  // one per user, each > 0 and finite
};

using policy_params = std::variant<pf_params, glambda_params, round_robin_params, max_rate_params,
                                   weighted_pf_params>;

struct scheduler_params {
    // Users at start. 0 is allowed (users added later with set_num_users); for weighted PF,
    // 0 means weights.size(), otherwise it must equal weights.size().
    std::size_t num_users = 0;
    policy_params policy = pf_params{};
};

// The one place where scheduler configuration is checked, against the ranges of the
// registry below. Throws std::invalid_argument naming the field and the value, e.g.
// "sched.alpha: 0 not in (0,1]".
void validate(const scheduler_params& cfg);

// ---- The registry: every kind once, with its parameters ----------------------------------
//
// A parameter's spec (param_spec.h) is what the apd's YAML reader, the Python bindings
// (oppsched.mac.scheduler_registry(), make_scheduler), the experiment schema, macsim and
// docs/algorithms.md use; validate() checks the same ranges. A new kind is a policy class in
// sched.cc, its *_params alternative above and one entry in the registry.
struct param_spec {
    std::string name;  // "alpha", "lambda": the papers' symbols spelled out
    param_type type = param_type::number;
    param_value default_value = 0.0;
    param_range range;  // of the value, or of each element of a number_list
    std::string unit;   // "" when dimensionless
    std::string help;
    bool required = false;  // no default: the configuration must give it
};

using param_map = std::map<std::string, param_value, std::less<>>;

struct scheduler_kind {
    std::string name;  // scheduler_policy::kind(): "pf", "glambda", ...
    std::string help;
    std::vector<param_spec> params;
    // The kind's policy_params from checked values (every parameter present).
    std::function<policy_params(const param_map&)> build;
};

// Every kind, in policy_params' order.
const std::vector<scheduler_kind>& scheduler_kinds();
// The kind named `name`, or nullptr.
const scheduler_kind* find_scheduler_kind(std::string_view name);

// The policy of kind `kind` with `values` (a missing parameter takes its default), checked
// against the registry: an unknown kind or parameter, a value of the wrong type or outside its
// range throws std::invalid_argument naming it ("sched.lambda: -1 must be >= 0").
policy_params policy_params_from(std::string_view kind, const param_map& values);

// What a policy may see of the queues besides the rates, for policies written outside the
// library (a Python plugin, docs/extending.md): the MAC fills it before choose() when the
// policy's uses_queue_state() is true. The built-in kinds do not use it.
struct queue_state {
    std::int64_t slot = 0;                     // the MAC's slot number (internal, from 0)
    std::vector<std::uint64_t> backlog_bytes;  // per user: queued bytes (a partial packet's too)
    std::vector<double> hol_delay_s;  // per user: age of its oldest queued packet, 0 if none
};

class scheduler_policy {
  public:
    virtual ~scheduler_policy() = default;

    // Queue state (above): true if the policy wants set_queue_state() before each choose().
    virtual bool uses_queue_state() const { return false; }
    virtual void set_queue_state(const queue_state& /*state*/) {}
    // The policy's own counters as dotted names without the family prefix (the apd reports
    // them as scheduler.<name>, e.g. scheduler.plugin_deadline_misses); none for built-ins.
    virtual std::vector<std::pair<std::string, std::uint64_t>> counters() const { return {}; }

    // "pf", "glambda", "rr", "maxrate" or "wpf".
    virtual std::string_view kind() const = 0;

    // The user to serve this slot, or kNoUser. Does not change any state.
    // rate_bps[i]: the rate user i can be served at this slot (from its CQI), >= 0.
    // backlogged[i]: user i has data (and, for the MAC, a free HARQ process).
    // Throws std::invalid_argument if a size differs from num_users() or a rate is < 0/NaN.
    virtual int choose(const std::vector<double>& rate_bps,
                       const std::vector<bool>& backlogged) const = 0;

    // Ends the slot: `served` (or kNoUser) was served at served_bps; every average decays.
    // Call exactly once per slot, also when a HARQ retransmission (served outside the
    // policy) took the slot: then served = that user, served_bps = the rate credited to it.
    virtual void update(const std::vector<double>& rate_bps, int served, double served_bps) = 0;

    // choose() then update() with the chosen user at its rate; returns the chosen user.
    int step(const std::vector<double>& rate_bps, const std::vector<bool>& backlogged) {
        const int u = choose(rate_bps, backlogged);
        update(rate_bps, u, u >= 0 ? rate_bps[static_cast<std::size_t>(u)] : 0.0);
        return u;
    }

    // T_i in bit/s (0 until user i is initialised, see above).
    virtual const std::vector<double>& averages() const = 0;
    virtual std::size_t num_users() const = 0;
    // Grows or shrinks the user set. New users start uninitialised and never served (they win
    // ties against every served user); weighted PF gives them weight 1.
    virtual void set_num_users(std::size_t n) = 0;
    // Forgets user u's history (a client re-attached): uninitialised, never served.
    virtual void reset_user(std::size_t u) = 0;
    // Slots ended so far (update() calls).
    virtual std::int64_t slots() const = 0;
    virtual double alpha() const = 0;
};

// Builds the policy the configuration names. Validates first (see validate()).
std::unique_ptr<scheduler_policy> make_scheduler(const scheduler_params& cfg);

}  // namespace oppsched::sched
