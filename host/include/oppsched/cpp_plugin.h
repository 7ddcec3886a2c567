#pragma once
// Scheduler policies and AQMs in shared libraries (docs/extending.md, "C++ plugins"): the
// loader of plugins written against oppsched/plugin_api.h, the scheduler_policy around a
// scheduler plugin and (load_aqm, at the end) the queue discipline around an AQM plugin.
//
//   scheduler: {kind: plugin, library: /path/libmysched.so, params: {beta: 2.0}}
//
// load_scheduler() dlopens the library (RTLD_NOW: a missing symbol fails here, not in a
// slot), finds oppsched_plugin_entry, checks the ABI version, the family and the table, and
// makes one instance with the params to check them; any failure is a plugin_error naming the
// field, the path and the reason ("scheduler.library: /x/librr.so: ABI version 2, this
// oppsched takes 1: rebuild ..."). The apd calls it before it drops its capabilities and
// installs its seccomp filter, as it loads Python plugins.
//
// cpp_scheduler is a sched::scheduler_policy that the MAC cannot tell from a built-in kind,
// with the Python plugins' deadline and fallbacks (python_plugin.h): a built-in PF with the
// plugin's alpha keeps avg_bps and decides every slot the plugin does not:
//   - select() later than the budget (budget_fraction x slot_s): plugin_deadline_misses;
//   - select() answered OPPSCHED_PLUGIN_ERROR: plugin_exceptions;
//   - select() answered neither OPPSCHED_NO_USER nor an index into the candidates:
//     plugin_invalid_decisions (the first such answer logged).
// The library stays loaded while a policy or a factory made from it is alive.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "oppsched/aqm.h"
#include "oppsched/plugin_api.h"
#include "oppsched/sched.h"

namespace oppsched::cplugin {

// A library that cannot be used: "<field>: <path>: <reason>".
class plugin_error : public std::invalid_argument {
  public:
    using std::invalid_argument::invalid_argument;
};

// One entry of the plugin's params (oppsched_param): the value as written and, when it reads
// as a number, that number (NaN otherwise).
struct param {
    std::string key;
    std::string text;
    double number;
};

// A param from a scalar as written: number = strtod of the whole text if finite, else NaN.
param param_from_text(std::string key, std::string text);

struct scheduler_options {
    std::string field = "scheduler.library";  // names the library in errors
    double alpha = sched::kDefaultAlpha;      // the EMA of avg_bps and of the fallback PF
    double slot_s = 1.667e-3;
    double budget_fraction = 0.5;
    // Where the first invalid answer is reported (default: stderr).
    std::function<void(const std::string&)> log;

    double budget_s() const { return budget_fraction * slot_s; }
    // Throws std::invalid_argument naming the field ("scheduler.alpha: 2 not in (0,1]").
    void validate() const;
};

// A dlopened library and its description (dlclose when the last owner goes).
class library;

class cpp_scheduler final : public sched::scheduler_policy {
  public:
    // Throws plugin_error if the plugin's create() refuses the params.
    cpp_scheduler(std::shared_ptr<const library> lib, const std::vector<param>& params,
                  std::size_t num_users, scheduler_options options);
    ~cpp_scheduler() override;
    cpp_scheduler(const cpp_scheduler&) = delete;
    cpp_scheduler& operator=(const cpp_scheduler&) = delete;

    std::string_view kind() const override { return "plugin"; }
    // The name the library gives itself (oppsched_plugin_v1::name).
    const std::string& plugin_name() const;
    int choose(const std::vector<double>& rate_bps,
               const std::vector<bool>& backlogged) const override;
    void update(const std::vector<double>& rate_bps, int served, double served_bps) override;
    const std::vector<double>& averages() const override { return pf_->averages(); }
    std::size_t num_users() const override { return pf_->num_users(); }
    void set_num_users(std::size_t n) override;
    void reset_user(std::size_t u) override { pf_->reset_user(u); }
    std::int64_t slots() const override { return pf_->slots(); }
    double alpha() const override { return pf_->alpha(); }

    bool uses_queue_state() const override { return true; }
    void set_queue_state(const sched::queue_state& state) override;
    std::vector<std::pair<std::string, std::uint64_t>> counters() const override;

    struct stats {
        std::uint64_t decisions = 0;        // select() calls that returned an answer
        std::uint64_t deadline_misses = 0;  // of those, later than the budget: PF decided
        std::uint64_t exceptions = 0;       // select() answered OPPSCHED_PLUGIN_ERROR
        std::uint64_t invalid_decisions = 0;
        std::uint64_t fallbacks = 0;    // slots PF decided (misses, exceptions, invalid)
        std::uint64_t decision_ns = 0;  // total time in select()
    };
    const stats& plugin_stats() const { return stats_; }
    const scheduler_options& options() const { return opt_; }

  private:
    std::int64_t slot_now() const;

    std::shared_ptr<const library> lib_;
    const oppsched_scheduler_v1* table_;
    void* self_ = nullptr;
    scheduler_options opt_;
    std::int64_t budget_ns_;
    std::unique_ptr<sched::scheduler_policy> pf_;
    sched::queue_state state_;
    bool have_state_ = false;
    mutable std::vector<oppsched_user_view> views_;
    mutable std::vector<int> candidates_;
    mutable stats stats_;
    mutable bool logged_invalid_ = false;
};

// Opens the library at `path` and checks it (see above); throws plugin_error naming
// options.field, the path and the reason. The factory makes a cpp_scheduler per call
// (ap_core_params::scheduler_factory), each with its own instance of the plugin; one instance
// for num_users users is made and destroyed here to check the params.
std::function<std::unique_ptr<sched::scheduler_policy>(std::size_t)> load_scheduler(
    const std::string& path, const std::vector<param>& params, const scheduler_options& options,
    std::size_t num_users);

// aqm: {kind: plugin, library, params}: opens the AQM plugin's library as load_scheduler()
// does (refusals name `field`, the path and the reason) and makes one instance with `probe`'s
// queue parameters to check the params. The factory gives each queue its own instance
// (ap_core_params::aqm_factory) on a drop-tail FIFO with that queue's limits and aqm.ecn:
// enqueue() ACCEPT / DROP (early_drop) / MARK (CE, or early_drop when it cannot be marked),
// a packet beyond the limit overflow; dequeue() SEND / DROP (aqm_drop) / MARK (CE, or
// aqm_drop); on_empty() when a dequeue finds the queue empty. OPPSCHED_PLUGIN_ERROR and
// answers not among the verb's are counted (counters(): plugin_exceptions,
// plugin_invalid_answers) and the packet accepted or sent. kind() is droptail.
std::function<std::unique_ptr<aqm::queue_discipline>(const aqm::aqm_params&)> load_aqm(
    const std::string& path, const std::vector<param>& params, const aqm::aqm_params& probe,
    const std::string& field = "aqm.library");

}  // namespace oppsched::cplugin
