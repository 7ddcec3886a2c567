#pragma once
// Policies written in Python (docs/extending.md has the protocol; tools/oppsched/plugin.py its
// type hints). A plugin is a class in a file, named by the experiment:
//
//   scheduler: {kind: python, file: my_sched.py, class: MaxWeight, params: {beta: 2.0}}
//
// load_plugin() imports the file, checks that the class has the family's methods with
// signatures that take the protocol's arguments, and makes one instance with the params as
// keyword arguments; any failure is a plugin_error naming the file, the class and the reason.
//
// python_scheduler is a sched::scheduler_policy (the MAC cannot tell it from a built-in
// kind) around such an instance:
//   - choose() calls select(slot, users): `users` are views of the candidates only (the users
//     the MAC could serve this slot), each with id, backlog_bytes, rate_bps, hol_delay_s and
//     avg_bps; it returns an index into `users` or None (the slot stays empty);
//   - update() calls served(slot, user_id or None, bytes) once per slot, HARQ
//     retransmissions included;
//   - avg_bps is the built-in PF's EMA T_i (sched.h) with the plugin's alpha, kept by a PF
//     policy that also decides whenever the plugin does not:
//       * a decision that took longer than the budget (budget_fraction x slot_s) is replaced
//         by PF's for that slot and counted (plugin_deadline_misses);
//       * an exception is counted (plugin_exceptions), its traceback logged the first time,
//         and PF decides that slot (served(): nothing is replaced);
//       * an answer that is not None nor an index into `users` is counted
//         (plugin_invalid_decisions) and PF decides.
// All calls happen on the caller's thread with the GIL held (the apd's slot loop; Python's
// own thread in the bindings).
#include <pybind11/eval.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "aqm_internal.h"
#include "latency_histogram.h"
#include "oppsched/aqm.h"
#include "oppsched/sched.h"
#include "oppsched/tcpip.h"

namespace oppsched::pyplugin {

// A plugin that cannot be used: "<file>: class <name>: <reason>".
class plugin_error : public std::invalid_argument {
  public:
    using std::invalid_argument::invalid_argument;
};

enum class family { scheduler, aqm };
const char* to_string(family f);

// Imports `file` (its folder goes first on sys.path, for its own helper modules), finds
// `class_name`, checks the family's methods (scheduler: select(slot, users), optional
// served(slot, user, bytes); aqm: enqueue(pkt, queue, now_s), dequeue(pkt, queue, now_s)) and
// returns class_name(**params). Throws plugin_error. Needs a running interpreter and the GIL.
pybind11::object load_plugin(const std::string& file, const std::string& class_name,
                             const pybind11::dict& params, family f);

// The python kind's own parameters (besides file, class and params).
struct python_scheduler_options {
    double alpha = sched::kDefaultAlpha;  // the EMA of avg_bps and of the fallback PF, (0, 1]
    double slot_s = 1.667e-3;             // the slot, (0, 1] s
    double budget_fraction = 0.5;         // a decision's budget as a share of the slot, (0, 1]
    // Where a plugin's first traceback of each method goes (default: stderr).
    std::function<void(const std::string&)> log;

    double budget_s() const { return budget_fraction * slot_s; }
    // Throws std::invalid_argument naming the field ("scheduler.budget_fraction: 2 not in (0,1]").
    void validate() const;
};

class python_scheduler final : public sched::scheduler_policy {
  public:
    python_scheduler(pybind11::object plugin, std::size_t num_users,
                     python_scheduler_options options);
    ~python_scheduler() override;

    std::string_view kind() const override { return "python"; }
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
        std::uint64_t decisions = 0;        // select() calls that returned
        std::uint64_t deadline_misses = 0;  // of those, later than the budget: PF decided
        std::uint64_t exceptions = 0;       // select() or served() raised
        std::uint64_t invalid_decisions = 0;
        std::uint64_t fallbacks = 0;    // slots PF decided (misses, exceptions, invalid)
        std::uint64_t decision_ns = 0;  // total time in select()
        // each decision's time in the slot loop: the users' views, the list and select()
        latency_histogram decision_time;
    };
    const stats& plugin_stats() const { return stats_; }
    const python_scheduler_options& options() const { return opt_; }

  private:
    std::int64_t slot_now() const;
    void log_exception(const char* method, pybind11::error_already_set& e) const;
    void refresh_views(const std::vector<double>& rate_bps) const;

    pybind11::object plugin_;
    pybind11::object select_, served_;  // served_ may be None
    python_scheduler_options opt_;
    std::chrono::nanoseconds budget_;
    std::unique_ptr<sched::scheduler_policy> pf_;
    sched::queue_state state_;
    bool have_state_ = false;
    std::vector<pybind11::object> views_;  // one per user, reused
    mutable std::vector<int> candidates_;
    mutable stats stats_;
    mutable std::vector<std::string> logged_;  // methods whose traceback was logged
};

// An AQM written in Python (docs/extending.md): a drop-tail FIFO with the configured limits
// whose plugin decides each arrival, enqueue(pkt, queue, now_s) -> "accept" | "drop" | "mark",
// and each departure, dequeue(pkt, queue, now_s) -> "send" | "drop" | "mark"; an optional
// on_empty(queue, now_s) is called whenever dequeue finds the queue empty (at once, or after
// drops took its last packet). Every drop has its cause like any AQM's: "drop" at enqueue is
// early_drop, "mark" at enqueue on a packet that cannot be marked (not ECN-capable, ecn off)
// early_drop, an accepted packet beyond the limit overflow, "drop" at dequeue and "mark" at
// dequeue on a packet that cannot be marked aqm_drop. An exception or an answer that is not
// one of the words is counted (plugin_exceptions, plugin_invalid_answers; the first traceback
// of each method logged) and the packet is accepted / sent. The queue view carries bytes,
// packets, limit_bytes, limit_packets and ecn. kind() is droptail: its storage and limit are
// drop-tail's.
// The views are read-only C objects whose fields are written before each call (no Python
// object is made for a call, besides now_s when now changes): the queue view is one object per
// queue, the packet view one per queue while the plugin keeps no reference to it. A packet
// view still referenced when its call returns keeps its packet's values (its flow hashed
// then) and the next call gets a new one, so a kept view stays correct; copy.copy() of a
// view is a snapshot. Calls are vectorcalls of the bound methods resolved at construction;
// answers are matched by identity with the interned words, then by value.
class python_aqm final : public aqm::detail::discipline_base {
  public:
    python_aqm(pybind11::object plugin, const aqm::aqm_params& config,
               std::function<void(const std::string&)> log = {});
    ~python_aqm() override;

    aqm::aqm_kind kind() const override { return aqm::aqm_kind::droptail; }
    bool enqueue(ip_packet p, time_ns now) override;
    std::optional<ip_packet> dequeue(time_ns now) override;
    const ip_packet* peek() const override { return fifo_.empty() ? nullptr : &fifo_.front(); }
    std::size_t bytes() const override { return fifo_.bytes(); }
    std::size_t packets() const override { return fifo_.packets(); }
    void clear(time_ns now) override;
    aqm::aqm_stats stats() const override { return stats_; }
    // plugin_exceptions, plugin_invalid_answers, and per method (enqueue, dequeue) the calls
    // that answered and their time: plugin_<method>_calls, _p50_ns, _p99_ns, _max_ns (the
    // packet's view, the queue's and the call; a call that raised is not timed).
    std::vector<std::pair<std::string, std::uint64_t>> counters() const override;

    struct plugin_stats_t {
        std::uint64_t exceptions = 0;
        std::uint64_t invalid_answers = 0;
        latency_histogram enqueue_time, dequeue_time;
    };
    const plugin_stats_t& plugin_stats() const { return plugin_stats_; }

  private:
    enum class method : std::uint8_t { enqueue, dequeue, on_empty };
    enum class answer : std::uint8_t { raised, invalid, accept, drop, mark, send };
    // The packet's view, filled in for `p` (a new one if the last was kept), and the queue's,
    // updated to the queue now; borrowed references.
    PyObject* packet_view(const ip_packet& p);
    PyObject* queue_view() const;
    // After the call: a packet view still referenced (or `kept`: the call raised) is left to
    // the plugin with its packet's values, and the next call makes a new one.
    void release_packet_view(bool kept);
    PyObject* now_s(time_ns now);  // now in seconds, one float object per distinct now
    answer call(const pybind11::object& fn, method m, const ip_packet& p, time_ns now);
    void log_exception(method m, pybind11::error_already_set& e);

    aqm::packet_fifo fifo_;
    pybind11::object plugin_, enqueue_, dequeue_, on_empty_;  // on_empty_ may be None
    pybind11::object packet_view_;  // reused from call to call while the plugin keeps none
    pybind11::object queue_view_;   // the one view of this queue
    pybind11::object now_s_;
    time_ns now_s_at_ = 0;
    std::function<void(const std::string&)> log_;
    plugin_stats_t plugin_stats_;
    bool logged_[3] = {false, false, false};
};

std::unique_ptr<sched::scheduler_policy> make_python_scheduler(pybind11::object plugin,
                                                               std::size_t num_users,
                                                               python_scheduler_options options);

}  // namespace oppsched::pyplugin
