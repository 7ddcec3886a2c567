// Python: make_scheduler(kind, **params) -> Scheduler (see oppsched/sched.h).
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "oppsched/sched.h"
#include "oppsched/validation.h"

namespace oppsched::py {
namespace {

using namespace oppsched::sched;

// Owns a policy; sizes it from the first slot's inputs when it was made without num_users
// (the Python API takes no user count: `step` learns it).
class py_scheduler {
  public:
    explicit py_scheduler(std::unique_ptr<scheduler_policy> p) : p_(std::move(p)) {}

    int step(const std::vector<double>& rates, const std::vector<bool>& backlogged) {
        size_from(rates);
        return p_->step(rates, backlogged);
    }
    int choose(const std::vector<double>& rates, const std::vector<bool>& backlogged) {
        size_from(rates);
        return p_->choose(rates, backlogged);
    }
    void update(const std::vector<double>& rates, int served, double served_bps) {
        size_from(rates);
        p_->update(rates, served, served_bps);
    }
    scheduler_policy& policy() { return *p_; }

  private:
    void size_from(const std::vector<double>& rates) {
        if (p_->num_users() == 0 && !rates.empty()) p_->set_num_users(rates.size());
    }
    std::unique_ptr<scheduler_policy> p_;
};

// Casts a keyword argument, turning a type mismatch into the ValueError every other bad
// parameter gives, with the field named.
template <class T>
T arg_as(const pybind11::handle& v, const std::string& field) {
    try {
        return v.cast<T>();
    } catch (const pybind11::cast_error&) {
        throw_invalid(field + ": " + std::string(pybind11::repr(v)) + " has the wrong type");
    }
}

[[noreturn]] void reject(const std::string& kind, const std::string& key, const char* accepted) {
    throw_invalid("sched.params: '" + key + "' not accepted by kind '" + kind +
                  "' (accepted: " + accepted + ")");
}

py_scheduler make(const std::string& kind, const pybind11::kwargs& params) {
    scheduler_params cfg;
    double alpha = kDefaultAlpha;
    double lambda = 1.0;
    std::vector<double> weights;
    bool have_weights = false;
    const char* accepted = "";
    if (kind == "pf" || kind == "rr" || kind == "maxrate") {
        accepted = "alpha, num_users";
    } else if (kind == "glambda") {
        accepted = "alpha, lam, num_users";
    } else if (kind == "wpf") {
        accepted = "alpha, weights, num_users";
    } else {
        throw_invalid("sched.kind: '" + kind + "' not one of pf, glambda, rr, maxrate, wpf");
    }
    for (const auto& item : params) {
        const std::string key = pybind11::str(item.first);
        const pybind11::handle v = item.second;
        if (key == "alpha") {
            alpha = arg_as<double>(v, "sched.alpha");
        } else if (key == "num_users") {
            cfg.num_users = arg_as<std::size_t>(v, "sched.num_users");
        } else if (key == "lam" && kind == "glambda") {
            lambda = arg_as<double>(v, "sched.lambda");
        } else if (key == "weights" && kind == "wpf") {
            weights = arg_as<std::vector<double>>(v, "sched.weights");
            have_weights = true;
        } else {
            reject(kind, key, accepted);
        }
    }
    if (kind == "pf") cfg.policy = pf_params{alpha};
    if (kind == "glambda") cfg.policy = glambda_params{alpha, lambda};
    if (kind == "rr") cfg.policy = round_robin_params{alpha};
    if (kind == "maxrate") cfg.policy = max_rate_params{alpha};
    if (kind == "wpf") {
        if (!have_weights) {
            throw_invalid("sched.weights: required for kind 'wpf'");
        }
        cfg.policy = weighted_pf_params{alpha, weights};
    }
    return py_scheduler(make_scheduler(cfg));
}

}  // namespace

void bind_sched(pybind11::module_& m) {
    m.attr("NO_USER") = kNoUser;
    pybind11::class_<py_scheduler>(m, "scheduler",
                                   "A downlink scheduler policy: ranks backlogged users per slot "
                                   "and keeps the throughput averages T_i (EMA alpha).")
        .def("step", &py_scheduler::step, pybind11::arg("rates_bps"), pybind11::arg("backlogged"),
             "Index of the user served this slot (-1 if none); updates the averages as if it "
             "were served at its rate.")
        .def("choose", &py_scheduler::choose, pybind11::arg("rates_bps"),
             pybind11::arg("backlogged"), "The user step() would pick; changes nothing.")
        .def("update", &py_scheduler::update, pybind11::arg("rates_bps"), pybind11::arg("served"),
             pybind11::arg("served_bps"),
             "Ends a slot whose user was chosen outside the policy (e.g. a HARQ "
             "retransmission): `served` got served_bps; every average decays.")
        .def_property_readonly(
            "averages", [](py_scheduler& s) { return s.policy().averages(); },
            "T_i in bit/s (0 until a user first reports a positive rate).")
        .def_property_readonly("num_users", [](py_scheduler& s) { return s.policy().num_users(); })
        .def_property_readonly("kind",
                               [](py_scheduler& s) { return std::string(s.policy().kind()); })
        .def_property_readonly("alpha", [](py_scheduler& s) { return s.policy().alpha(); })
        .def_property_readonly("slots", [](py_scheduler& s) { return s.policy().slots(); })
        .def(
            "set_num_users", [](py_scheduler& s, std::size_t n) { s.policy().set_num_users(n); },
            pybind11::arg("n"))
        .def(
            "reset_user", [](py_scheduler& s, std::size_t u) { s.policy().reset_user(u); },
            pybind11::arg("user"))
        .def("__repr__", [](py_scheduler& s) {
            return "<Scheduler " + std::string(s.policy().kind()) +
                   " users=" + std::to_string(s.policy().num_users()) + ">";
        });

    m.def("make_scheduler", &make, pybind11::arg("kind"),
          "make_scheduler(kind, **params): kind 'pf' (alpha), 'glambda' (alpha, lam), 'rr', "
          "'maxrate', 'wpf' (alpha, weights); every kind also takes num_users (default: learnt "
          "from the first slot). alpha defaults to 0.03 (Andrew & Hanly, CLAMP), lam to 1.");
}

}  // namespace oppsched::py
