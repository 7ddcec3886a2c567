// Python: make_scheduler(kind, **params) -> Scheduler (see oppsched/sched.h).
#include <pybind11/stl.h>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "oppsched/cpp_plugin.h"
#include "oppsched/sched.h"
#include "oppsched/validation.h"
#include "python_plugin.h"

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

// Python spellings of a parameter whose registered name is a Python keyword: `lambda` cannot
// be a keyword argument, so make_scheduler("glambda", lam=2.0) means lambda = 2.0 (a params
// dict may say "lambda" itself).
constexpr std::pair<const char*, const char*> kKeywordAliases[] = {{"lam", "lambda"}};

// A Python value as the parameter `spec` holds it; a type mismatch is the ValueError every
// other bad parameter gives, with the field named.
param_value value_of(const param_spec& spec, const pybind11::handle& v) {
    const std::string field = "sched." + spec.name;
    const auto wrong = [&]() -> param_value {
        throw_invalid(field + ": " + std::string(pybind11::repr(v)) + " has the wrong type");
    };
    if (pybind11::isinstance<pybind11::bool_>(v) && spec.type != param_type::boolean)
        return wrong();
    try {
        switch (spec.type) {
            case param_type::number:
            case param_type::seconds:
                return v.cast<double>();
            case param_type::integer:
                if (!pybind11::isinstance<pybind11::int_>(v) || v.cast<long long>() < 0)
                    return wrong();
                return v.cast<std::uint64_t>();
            case param_type::boolean:
                return v.cast<bool>();
            case param_type::choice:
                return v.cast<std::string>();
            case param_type::number_list:
                return v.cast<std::vector<double>>();
        }
    } catch (const pybind11::cast_error&) {
    }
    return wrong();
}

// Refuses a keyword argument a plugin kind does not take, naming the ones it does.
void check_plugin_keys(const pybind11::dict& given, std::initializer_list<const char*> keys,
                       const char* kind) {
    std::string accepted;
    for (const char* k : keys) accepted += (accepted.empty() ? "" : ", ") + std::string(k);
    for (const auto& item : given) {
        const std::string key = pybind11::str(item.first);
        if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; }))
            throw_invalid("sched.params: '" + key + "' not accepted by kind '" + kind +
                          "' (accepted: " + accepted + ")");
    }
}

// The plugin wrapper's own options (alpha, slot_s, budget_fraction: both plugin kinds'
// options structs have them), each where given; sched.<key> named on a wrong type.
template <class Options>
void read_wrapper_options(const pybind11::dict& given, Options& opt) {
    const auto number = [&](const char* k, double& out) {
        if (!given.contains(k)) return;
        try {
            out = given[k].cast<double>();
        } catch (const pybind11::cast_error&) {
            throw_invalid("sched." + std::string(k) + ": " + std::string(pybind11::repr(given[k])) +
                          " has the wrong type");
        }
    };
    number("alpha", opt.alpha);
    number("slot_s", opt.slot_s);
    number("budget_fraction", opt.budget_fraction);
    opt.validate();
}

// kind "python" (docs/extending.md): file, class, params (the plugin's own, a dict), alpha,
// slot_s, budget_fraction, num_users.
py_scheduler make_python(const pybind11::dict& given) {
    check_plugin_keys(
        given, {"file", "class", "params", "alpha", "slot_s", "budget_fraction", "num_users"},
        "python");
    for (const char* k : {"file", "class"})
        if (!given.contains(k))
            throw_invalid("sched." + std::string(k) + ": required for kind 'python'");
    pyplugin::python_scheduler_options opt;
    read_wrapper_options(given, opt);
    pybind11::dict plugin_params;
    if (given.contains("params") && !given["params"].is_none()) {
        if (!pybind11::isinstance<pybind11::dict>(given["params"]))
            throw_invalid("sched.params: " + std::string(pybind11::repr(given["params"])) +
                          " is not a dict");
        plugin_params = given["params"].cast<pybind11::dict>();
    }
    const std::size_t n = given.contains("num_users") ? given["num_users"].cast<std::size_t>() : 0;
    pybind11::object obj =
        pyplugin::load_plugin(given["file"].cast<std::string>(), given["class"].cast<std::string>(),
                              plugin_params, pyplugin::family::scheduler);
    return py_scheduler(pyplugin::make_python_scheduler(std::move(obj), n, std::move(opt)));
}

}  // namespace

std::vector<cplugin::param> cpp_plugin_params(const pybind11::object& params,
                                              const std::string& field) {
    std::vector<cplugin::param> out;
    if (params.is_none()) return out;
    if (!pybind11::isinstance<pybind11::dict>(params))
        throw_invalid(field + ": " + std::string(pybind11::repr(params)) + " is not a dict");
    for (const auto& item : params.cast<pybind11::dict>()) {
        const std::string key = pybind11::str(item.first);
        const pybind11::handle v = item.second;
        std::string text;
        if (pybind11::isinstance<pybind11::bool_>(v))
            text = v.cast<bool>() ? "true" : "false";
        else if (pybind11::isinstance<pybind11::int_>(v) ||
                 pybind11::isinstance<pybind11::float_>(v) ||
                 pybind11::isinstance<pybind11::str>(v))
            text = pybind11::str(v);
        else
            throw_invalid(field + "." + key + ": " + std::string(pybind11::repr(v)) +
                          " is not a number or a string (a C++ plugin's params are scalars)");
        out.push_back(cplugin::param_from_text(key, text));
    }
    return out;
}

namespace {

// kind "plugin" (docs/extending.md, "C++ plugins"): library, params (the plugin's own: a dict
// of numbers and strings), alpha, slot_s, budget_fraction, num_users.
py_scheduler make_cpp_plugin(const pybind11::dict& given) {
    check_plugin_keys(
        given, {"library", "params", "alpha", "slot_s", "budget_fraction", "num_users"}, "plugin");
    if (!given.contains("library") || !pybind11::isinstance<pybind11::str>(given["library"]))
        throw_invalid("sched.library: required for kind 'plugin' (the plugin's .so)");
    cplugin::scheduler_options opt;
    read_wrapper_options(given, opt);
    const auto plugin_params =
        cpp_plugin_params(given.contains("params") ? pybind11::object(given["params"])
                                                   : pybind11::object(pybind11::none()),
                          "sched.params");
    const std::size_t n = given.contains("num_users") ? given["num_users"].cast<std::size_t>() : 0;
    auto factory =
        cplugin::load_scheduler(given["library"].cast<std::string>(), plugin_params, opt, n);
    return py_scheduler(factory(n));
}

py_scheduler make(const std::string& kind, const pybind11::object& params,
                  const pybind11::kwargs& kwargs) {
    pybind11::dict given;  // params, then the keyword arguments over them
    if (!params.is_none()) {
        if (!pybind11::isinstance<pybind11::dict>(params))
            throw_invalid("sched.params: " + std::string(pybind11::repr(params)) +
                          " is not a dict");
        for (const auto& item : params.cast<pybind11::dict>()) given[item.first] = item.second;
    }
    for (const auto& item : kwargs) given[item.first] = item.second;
    if (kind == "python") return make_python(given);
    if (kind == "plugin") return make_cpp_plugin(given);
    const scheduler_kind* spec = find_scheduler_kind(kind);
    scheduler_params cfg;
    param_map values;
    for (const auto& item : given) {
        std::string key = pybind11::str(item.first);
        if (key == "num_users") {
            try {
                cfg.num_users = item.second.cast<std::size_t>();
            } catch (const pybind11::cast_error&) {
                throw_invalid("sched.num_users: " + std::string(pybind11::repr(item.second)) +
                              " has the wrong type");
            }
            continue;
        }
        const param_spec* p = nullptr;
        if (spec) {
            for (const auto& entry : kKeywordAliases) {
                // A named variable, not a structured binding: clang 14 refuses a lambda
                // that captures one.
                const char* const name = entry.second;
                if (key == entry.first &&
                    std::any_of(spec->params.begin(), spec->params.end(),
                                [&](const param_spec& q) { return q.name == name; }))
                    key = name;
            }
            for (const auto& q : spec->params)
                if (q.name == key) p = &q;
        }
        // Unknown kinds and parameters: policy_params_from names them.
        values[key] = p ? value_of(*p, item.second) : param_value{0.0};
    }
    cfg.policy = policy_params_from(kind, values);
    return py_scheduler(make_scheduler(cfg));
}

pybind11::list registry() {
    pybind11::list out;
    for (const auto& k : scheduler_kinds()) {
        pybind11::list params;
        for (const auto& p : k.params)
            params.append(param_spec_dict(p.name, p.type, p.default_value, p.range, p.unit, p.help,
                                          {}, p.required));
        pybind11::dict d;
        d["kind"] = k.name;
        d["help"] = k.help;
        d["params"] = params;
        out.append(d);
    }
    return out;
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
        .def(
            "set_queue_state",
            [](py_scheduler& s, std::int64_t slot, std::vector<std::uint64_t> backlog_bytes,
               std::vector<double> hol_delay_s) {
                s.policy().set_queue_state(
                    {slot, std::move(backlog_bytes), std::move(hol_delay_s)});
            },
            pybind11::arg("slot"), pybind11::arg("backlog_bytes"), pybind11::arg("hol_delay_s"),
            "The queues a python-kind policy's next select() sees (the apd sets them every "
            "slot); ignored by the built-in kinds.")
        .def_property_readonly(
            "counters",
            [](py_scheduler& s) {
                pybind11::dict d;
                for (const auto& [k, v] : s.policy().counters()) d[k.c_str()] = v;
                return d;
            },
            "The policy's own counters (python and plugin kinds: plugin_decisions, "
            "plugin_deadline_misses, "
            "plugin_exceptions, plugin_invalid_decisions, plugin_fallbacks, plugin_decision_ns); "
            "empty for the built-in kinds.")
        .def("__repr__", [](py_scheduler& s) {
            return "<Scheduler " + std::string(s.policy().kind()) +
                   " users=" + std::to_string(s.policy().num_users()) + ">";
        });

    m.def("make_scheduler", &make, pybind11::arg("kind"),
          pybind11::arg("params") = pybind11::none(),
          "make_scheduler(kind, params=None, **kwargs): the policy `kind` (one of "
          "scheduler_registry()'s kinds) with its parameters by their registered names, from the "
          "dict `params` and the keywords (lam= stands for lambda, a Python keyword); every kind "
          "also takes num_users (default: learnt from the first slot). Defaults and ranges: "
          "scheduler_registry().");
    m.def(
        "load_plugin",
        [](const std::string& file, const std::string& cls, const pybind11::object& params,
           const std::string& family) {
            if (family != "scheduler" && family != "aqm")
                throw_invalid("family: '" + family + "' not one of scheduler, aqm");
            pybind11::dict p;
            if (!params.is_none()) {
                if (!pybind11::isinstance<pybind11::dict>(params))
                    throw pyplugin::plugin_error(
                        file + ": class " + cls +
                        ": params: " + std::string(pybind11::repr(params)) + " is not a mapping");
                p = params.cast<pybind11::dict>();
            }
            return pyplugin::load_plugin(
                file, cls, p,
                family == "aqm" ? pyplugin::family::aqm : pyplugin::family::scheduler);
        },
        pybind11::arg("file"), pybind11::arg("cls"), pybind11::arg("params") = pybind11::none(),
        pybind11::arg("family") = "scheduler",
        "The plugin instance the apd would make: imports `file`, checks class `cls` against the "
        "family's protocol (docs/extending.md) and calls cls(**params). ValueError "
        "'<file>: class <cls>: <reason>' if it cannot be used.");
    m.def("scheduler_registry", &registry,
          "Every scheduler kind (sched.h) with its parameters: [{kind, help, params: [{name, type, "
          "default, min, max, min_open, max_open, violation, unit, help, choices, required}]}].");
}

}  // namespace oppsched::py
