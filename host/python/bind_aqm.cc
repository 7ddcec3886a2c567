// Python access to the AP queues and AQMs: make_aqm(kind, params, **kwargs), aqm_registry()
// and queue_set.
// Durations are seconds in Python (`*_s` keywords), nanoseconds in C++. Every error raised by
// the C++ configuration check becomes ValueError with the same message.
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "oppsched/aqm.h"
#include "oppsched/cpp_plugin.h"
#include "oppsched/queue.h"
#include "oppsched/validation.h"
#include "python_plugin.h"

namespace oppsched::py {
namespace {

namespace pb = pybind11;
using namespace oppsched::aqm;

time_ns seconds_arg(const char* name, double t_s) {
    if (!std::isfinite(t_s))
        throw_invalid(name, std::to_string(t_s), "is not a finite number of seconds");
    return from_seconds(t_s);
}

// ---- keyword parameters -----------------------------------------------------------------

template <class T>
T cast_arg(const std::string& field, pb::handle h) {
    try {
        if constexpr (std::is_same_v<T, bool>) {
            if (!pb::isinstance<pb::bool_>(h)) throw pb::cast_error("not a bool");
        }
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
            if (!pb::isinstance<pb::int_>(h) || pb::isinstance<pb::bool_>(h))
                throw pb::cast_error("not an int");
            if constexpr (std::is_unsigned_v<T>) {
                if (h.cast<long long>() < 0) throw pb::cast_error("negative");
            }
        }
        return h.cast<T>();
    } catch (const pb::cast_error&) {
        throw_invalid(field + ": " + std::string(pb::str(pb::repr(h))) + " is not a valid " +
                      (std::is_same_v<T, bool> ? "bool"
                       : std::is_integral_v<T> ? "non-negative int"
                                               : "number"));
    }
}

// One keyword through aqm::param_fields, the table the apd's config reader uses too.
void set_param(aqm_params& c, const param_field& f, pb::handle h) {
    switch (f.type) {
        case param_type::boolean:
            f.set(c, cast_arg<bool>(f.label, h));
            break;
        case param_type::number:
            f.set(c, cast_arg<double>(f.label, h));
            break;
        case param_type::integer:
            f.set(c, cast_arg<std::uint64_t>(f.label, h));
            break;
        case param_type::seconds: {
            const double s = cast_arg<double>(f.label, h);
            if (!std::isfinite(s) || std::fabs(s) > 9e9)
                throw_invalid(f.label + ": " + std::to_string(s) + " s is out of range");
            f.set(c, s);
            break;
        }
        case param_type::choice: {
            const std::string v = pb::isinstance<pb::str>(h) ? h.cast<std::string>() : "";
            if (std::find(f.choices.begin(), f.choices.end(), v) == f.choices.end()) {
                std::string all;
                for (const auto& x : f.choices) all += (all.empty() ? "" : ", ") + x;
                throw_invalid(f.label + ": " + std::string(pb::str(pb::repr(h))) +
                              " is not one of " + all);
            }
            f.set(c, v);
            break;
        }
        case param_type::number_list:
            f.set(c, cast_arg<std::vector<double>>(f.label, h));
            break;
    }
}

// The keywords that are not the algorithm's: the queue's limits, ECN and the seed.
const std::map<std::string, std::function<void(aqm_params&, pb::handle)>>& queue_setters() {
    static const std::map<std::string, std::function<void(aqm_params&, pb::handle)>> m = {
        {"limit_packets",
         [](aqm_params& c, pb::handle h) {
             c.limits.packets = cast_arg<std::size_t>("limit_packets", h);
         }},
        {"limit_bytes",
         [](aqm_params& c, pb::handle h) {
             c.limits.bytes = cast_arg<std::size_t>("limit_bytes", h);
         }},
        {"ecn", [](aqm_params& c, pb::handle h) { c.ecn = cast_arg<bool>("ecn", h); }},
        {"spare_handshake",
         [](aqm_params& c, pb::handle h) {
             c.spare_handshake = cast_arg<bool>("spare_handshake", h);
         }},
        {"mark_not_ect",
         [](aqm_params& c, pb::handle h) { c.mark_not_ect = cast_arg<bool>("mark_not_ect", h); }},
        {"seed", [](aqm_params& c, pb::handle h) { c.seed = cast_arg<std::uint64_t>("seed", h); }},
    };
    return m;
}

aqm_params config_from_kwargs(const std::string& kind_name, const pb::dict& params) {
    const auto kind = aqm_kind_from_string(kind_name);
    if (!kind) {
        std::string names;
        for (std::size_t i = 0; i < kAqmKindCount; ++i)
            names += (i ? ", " : "") + std::string(to_string(static_cast<aqm_kind>(i)));
        throw_invalid("aqm.kind: '" + kind_name + "' is not one of " + names);
    }
    aqm_params c = default_config(*kind);
    const auto& fields = param_fields(*kind);
    for (const auto& [key, value] : params) {
        const std::string k = pb::str(key);
        const auto it = std::find_if(fields.begin(), fields.end(),
                                     [&](const param_field& f) { return f.name == k; });
        if (it != fields.end()) {
            set_param(c, *it, value);
        } else if (auto jt = queue_setters().find(k); jt != queue_setters().end()) {
            jt->second(c, value);
        } else {
            throw_invalid(std::string(to_string(*kind)) + "." + k + ": unknown parameter");
        }
    }
    validate(c);
    return c;
}

// ---- results ----------------------------------------------------------------------------

// The scalar fields (stats_fields.h), the drops by reason as a dict, and the occupancy.
pb::dict stats_dict(const aqm_stats& s, std::size_t bytes, std::size_t packets) {
    pb::dict d = stats_to_dict(s);
    pb::dict dropped;
    for (std::size_t i = 0; i < kDropReasonCount; ++i)
        dropped[pb::str(std::string(to_string(static_cast<drop_reason>(i))))] = s.dropped[i];
    d["dropped"] = dropped;
    d["bytes"] = bytes;
    d["packets"] = packets;
    return d;
}

// One AQM with a drop list and packet ids, for Python.
class py_queue_discipline {
  public:
    explicit py_queue_discipline(const aqm_params& c) : py_queue_discipline(make_aqm(c)) {}
    explicit py_queue_discipline(std::unique_ptr<queue_discipline> q) : aqm_(std::move(q)) {
        aqm_->set_drop_sink([this](dropped_packet&& d) {
            drops_.emplace_back(std::string(to_string(d.reason)), d.packet.size());
        });
    }
    bool enqueue(const pb::bytes& packet, double t_s, bool high_priority, std::uint32_t user) {
        ip_packet p;
        p.data = to_vec(packet);
        p.user = user;
        p.id = next_id_++;
        p.high_priority = high_priority;
        return aqm_->enqueue(std::move(p), seconds_arg("t_s", t_s));
    }
    pb::object dequeue(double t_s) {
        auto p = aqm_->dequeue(seconds_arg("t_s", t_s));
        if (!p) return pb::none();
        return to_bytes(p->data);
    }
    pb::object peek() const {
        const ip_packet* p = aqm_->peek();
        if (p == nullptr) return pb::none();
        return to_bytes(p->data);
    }
    pb::list drops() {
        pb::list out;
        for (auto& [r, n] : drops_) out.append(pb::make_tuple(r, n));
        drops_.clear();
        return out;
    }
    void clear(double t_s) { aqm_->clear(seconds_arg("t_s", t_s)); }
    const queue_discipline& aqm() const { return *aqm_; }

  private:
    std::unique_ptr<queue_discipline> aqm_;
    std::vector<std::pair<std::string, std::size_t>> drops_;
    std::uint64_t next_id_ = 0;
};

class py_queue_set {
  public:
    py_queue_set(std::size_t users, const std::string& mode, const std::string& kind,
                 const pb::kwargs& params) {
        queue_set_params c;
        c.users = users;
        if (mode == "per_user") {
            c.mode = queue_mode::per_user;
        } else if (mode == "shared") {
            c.mode = queue_mode::shared;
        } else {
            throw_invalid("queue_set.mode: '" + mode + "' is neither 'per_user' nor 'shared'");
        }
        c.aqm = config_from_kwargs(kind, params);
        set_ = std::make_unique<queue_set>(c);
        set_->set_drop_sink([this](dropped_packet&& d) {
            drops_.push_back(
                pb::make_tuple(std::string(to_string(d.reason)), d.packet.size(), d.packet.user));
        });
    }
    bool enqueue(const pb::bytes& packet, double t_s, std::uint32_t user, bool high_priority) {
        ip_packet p;
        p.data = to_vec(packet);
        p.user = user;
        p.id = next_id_++;
        p.high_priority = high_priority;
        return set_->enqueue(std::move(p), seconds_arg("t_s", t_s));
    }
    pb::object dequeue(std::uint32_t user, double t_s) {
        auto p = set_->dequeue(user, seconds_arg("t_s", t_s));
        if (!p) return pb::none();
        return to_bytes(p->data);
    }
    std::vector<std::uint32_t> backlogged() const {
        std::vector<std::uint32_t> v;
        set_->backlogged_users(v);
        return v;
    }
    std::vector<std::uint32_t> eligible() const {
        std::vector<std::uint32_t> v;
        set_->eligible_users(v);
        return v;
    }
    pb::list drops() {
        pb::list out;
        for (auto& t : drops_) out.append(t);
        drops_.clear();
        return out;
    }
    queue_set& set() { return *set_; }

  private:
    std::unique_ptr<queue_set> set_;
    std::vector<pb::tuple> drops_;
    std::uint64_t next_id_ = 0;
};

}  // namespace

void bind_aqm(pybind11::module_& m) {
    pb::list kinds;
    for (std::size_t i = 0; i < kAqmKindCount; ++i)
        kinds.append(std::string(to_string(static_cast<aqm_kind>(i))));
    m.attr("AQM_KINDS") = pb::tuple(kinds);
    pb::list reasons;
    for (std::size_t i = 0; i < kDropReasonCount; ++i)
        reasons.append(std::string(to_string(static_cast<drop_reason>(i))));
    m.attr("DROP_REASONS") = pb::tuple(reasons);

    m.def(
        "aqm_registry",
        [] {
            pb::list out;
            for (std::size_t i = 0; i < kAqmKindCount; ++i) {
                const auto k = static_cast<aqm_kind>(i);
                const aqm_params defaults = default_config(k);
                const auto& fields = param_fields(k);
                pb::list params;
                for (std::size_t j = 0; j < fields.size(); ++j) {
                    const param_field& f = fields[j];
                    pb::dict d = param_spec_dict(f.name, f.type, f.get(defaults), f.range, f.unit,
                                                 f.help, f.choices, false);
                    d["common"] = j + 3 >= fields.size();  // the rate estimator's, every kind's
                    params.append(d);
                }
                pb::dict kd;
                kd["kind"] = std::string(to_string(k));
                kd["help"] = std::string(describe(k));
                kd["marks_ecn"] = marks_ecn(k);
                kd["params"] = params;
                out.append(kd);
            }
            return out;
        },
        "Every AQM kind (aqm.h) with its parameters, as make_aqm and the apd's aqm.params "
        "take them: [{kind, help, marks_ecn, params: [{name, type, default, min, max, min_open, "
        "max_open, violation, unit, help, choices, required, common}]}].");

    pb::class_<py_queue_discipline>(
        m, "queue_discipline",
        "An AP queue with active queue management (see make_aqm). Times are "
        "seconds on the caller's clock.")
        .def("enqueue", &py_queue_discipline::enqueue, pb::arg("packet"), pb::arg("t_s"),
             pb::arg("high_priority") = false, pb::arg("user") = 0,
             "Offer an IP packet arriving at t_s; True if accepted (maybe CE-marked).")
        .def("dequeue", &py_queue_discipline::dequeue, pb::arg("t_s"),
             "Next packet in service order (bytes), or None.")
        .def("peek", &py_queue_discipline::peek, "The packet dequeue would consider next, or None.")
        .def("clear", &py_queue_discipline::clear, pb::arg("t_s"),
             "Drop every queued packet ('flushed').")
        .def("drops", &py_queue_discipline::drops,
             "Drops since the previous call, oldest first, as (reason, size) tuples.")
        .def_property_readonly("bytes",
                               [](const py_queue_discipline& a) { return a.aqm().bytes(); })
        .def_property_readonly("packets",
                               [](const py_queue_discipline& a) { return a.aqm().packets(); })
        .def_property_readonly(
            "kind",
            [](const py_queue_discipline& a) { return std::string(to_string(a.aqm().kind())); })
        .def_property_readonly("limit_bytes",
                               [](const py_queue_discipline& a) { return a.aqm().limits().bytes; })
        .def_property_readonly(
            "limit_packets", [](const py_queue_discipline& a) { return a.aqm().limits().packets; })
        .def_property_readonly("stats",
                               [](const py_queue_discipline& a) {
                                   return stats_dict(a.aqm().stats(), a.aqm().bytes(),
                                                     a.aqm().packets());
                               })
        .def_property_readonly(
            "plugin_counters",
            [](const py_queue_discipline& a) {
                pb::dict d;
                for (const auto& [k, v] : a.aqm().counters()) d[k.c_str()] = v;
                return d;
            },
            "kinds python and plugin: plugin_exceptions, plugin_invalid_answers; empty for the "
            "built-ins");

    m.def(
        "make_aqm",
        [](const std::string& kind, const pb::object& params, const pb::kwargs& kwargs) {
            pb::dict all;
            if (!params.is_none()) {
                if (!pb::isinstance<pb::dict>(params))
                    throw_invalid("aqm.params: " + std::string(pb::str(pb::repr(params))) +
                                  " is not a dict");
                for (const auto& [k, v] : params.cast<pb::dict>()) all[k] = v;
            }
            for (const auto& [k, v] : kwargs) all[k] = v;
            if (kind == "python") {
                // a plugin (docs/extending.md) on a drop-tail FIFO with the queue's keywords
                pb::dict queue, plugin_params;
                for (const auto& [k, v] : all) {
                    const std::string key = pb::str(k);
                    if (key == "file" || key == "class") continue;
                    if (key == "params") {
                        if (!v.is_none()) plugin_params = v.cast<pb::dict>();
                        continue;
                    }
                    queue[k] = v;
                }
                for (const char* k : {"file", "class"})
                    if (!all.contains(k))
                        throw_invalid("aqm." + std::string(k) + ": required for kind 'python'");
                const aqm_params c = config_from_kwargs("droptail", queue);
                pb::object obj = pyplugin::load_plugin(all["file"].cast<std::string>(),
                                                       all["class"].cast<std::string>(),
                                                       plugin_params, pyplugin::family::aqm);
                return std::make_unique<py_queue_discipline>(
                    std::make_unique<pyplugin::python_aqm>(std::move(obj), c));
            }
            if (kind == "plugin") {
                // a C++ plugin (docs/extending.md, "C++ plugins") on a drop-tail FIFO
                pb::dict queue;
                for (const auto& [k, v] : all) {
                    const std::string key = pb::str(k);
                    if (key != "library" && key != "params") queue[k] = v;
                }
                if (!all.contains("library") || !pb::isinstance<pb::str>(all["library"]))
                    throw_invalid("aqm.library: required for kind 'plugin' (the plugin's .so)");
                const aqm_params c = config_from_kwargs("droptail", queue);
                const auto plugin_params = cpp_plugin_params(
                    all.contains("params") ? pb::object(all["params"]) : pb::object(pb::none()),
                    "aqm.params");
                auto factory =
                    cplugin::load_aqm(all["library"].cast<std::string>(), plugin_params, c);
                return std::make_unique<py_queue_discipline>(factory(c));
            }
            return std::make_unique<py_queue_discipline>(config_from_kwargs(kind, all));
        },
        pb::arg("kind"), pb::arg("params") = pb::none(),
        "make_aqm(kind, params=None, **kwargs) -> Aqm: the AQM `kind` (one of AQM_KINDS) with "
        "its parameters by their registered names, from the dict `params` and the keywords; "
        "names, defaults, ranges and units: aqm_registry() (docs/algorithms.md). The queue's "
        "own keywords: limit_packets (default 50), limit_bytes (0 = none), ecn (True), "
        "spare_handshake (False), mark_not_ect (False), seed.");

    pb::class_<py_queue_set>(m, "queue_set",
                             "Users -> queues: one AQM per user, or one shared FIFO "
                             "(head-of-line blocking).")
        .def(pb::init<std::size_t, const std::string&, const std::string&, const pb::kwargs&>(),
             pb::arg("users"), pb::arg("mode") = "per_user", pb::arg("kind") = "droptail")
        .def("enqueue", &py_queue_set::enqueue, pb::arg("packet"), pb::arg("t_s"), pb::arg("user"),
             pb::arg("high_priority") = false)
        .def("dequeue", &py_queue_set::dequeue, pb::arg("user"), pb::arg("t_s"))
        .def("backlogged_users", &py_queue_set::backlogged)
        .def("eligible_users", &py_queue_set::eligible,
             "Users that can be served now (shared mode: the head-of-line user only).")
        .def("bytes", [](py_queue_set& q, std::uint32_t u) { return q.set().bytes(u); })
        .def("packets", [](py_queue_set& q, std::uint32_t u) { return q.set().packets(u); })
        .def_property_readonly("total_bytes", [](py_queue_set& q) { return q.set().total_bytes(); })
        .def_property_readonly("total_packets",
                               [](py_queue_set& q) { return q.set().total_packets(); })
        .def_property_readonly(
            "mode",
            [](py_queue_set& q) {
                return std::string(q.set().mode() == queue_mode::shared ? "shared" : "per_user");
            })
        .def(
            "queue_stats",
            [](py_queue_set& q, std::size_t i) {
                const queue_discipline& a = q.set().queue(i);
                return stats_dict(a.stats(), a.bytes(), a.packets());
            },
            pb::arg("index"))
        .def_property_readonly("queue_count", [](py_queue_set& q) { return q.set().queue_count(); })
        .def("drops", &py_queue_set::drops,
             "Drops since the previous call as (reason, size, user) tuples.");
}

}  // namespace oppsched::py
