// Python access to the AP queues and AQMs: make_aqm(kind, **params) and QueueSet.
// Durations are seconds in Python (`*_s` keywords), nanoseconds in C++. Every error raised by
// the C++ configuration check becomes ValueError with the same message.
#include <pybind11/stl.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "oppsched/aqm.h"
#include "oppsched/queue.h"
#include "oppsched/validation.h"

namespace oppsched::py {
namespace {

namespace pb = pybind11;
using namespace oppsched::aqm;

time_ns seconds_arg(const char* name, double t_s) {
    if (!std::isfinite(t_s))
        throw_invalid(name, std::to_string(t_s), "is not a finite number of seconds");
    return from_seconds(t_s);
}

std::vector<std::uint8_t> to_vector(const pb::bytes& b) {
    const std::string_view s = b;
    return {s.begin(), s.end()};
}

pb::bytes to_bytes(const std::vector<std::uint8_t>& v) {
    return pb::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

// ---- keyword parameters -----------------------------------------------------------------

using Setter = std::function<void(AqmConfig&, pb::handle)>;

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

template <class P, class T>
Setter field(const std::string& name, T P::*member) {
    return [name, member](AqmConfig& c, pb::handle h) {
        std::get<P>(c.params).*member = cast_arg<T>(name, h);
    };
}

template <class P>
Setter seconds_field(const std::string& name, time_ns P::*member) {
    return [name, member](AqmConfig& c, pb::handle h) {
        const double s = cast_arg<double>(name, h);
        if (!std::isfinite(s) || std::fabs(s) > 9e9)
            throw_invalid(name + ": " + std::to_string(s) + " s is out of range");
        std::get<P>(c.params).*member = from_seconds(s);
    };
}

const std::map<std::string, Setter>& common_setters() {
    static const std::map<std::string, Setter> m = {
        {"limit_packets",
         [](AqmConfig& c, pb::handle h) {
             c.limits.packets = cast_arg<std::size_t>("limit_packets", h);
         }},
        {"limit_bytes",
         [](AqmConfig& c, pb::handle h) {
             c.limits.bytes = cast_arg<std::size_t>("limit_bytes", h);
         }},
        {"ecn", [](AqmConfig& c, pb::handle h) { c.ecn = cast_arg<bool>("ecn", h); }},
        {"seed", [](AqmConfig& c, pb::handle h) { c.seed = cast_arg<std::uint64_t>("seed", h); }},
        {"capacity_bps",
         [](AqmConfig& c, pb::handle h) {
             c.rate.capacity_bps = cast_arg<double>("capacity_bps", h);
         }},
        {"rate_sample_bytes",
         [](AqmConfig& c, pb::handle h) {
             c.rate.sample_bytes = cast_arg<std::size_t>("rate_sample_bytes", h);
         }},
        {"rate_ema_weight",
         [](AqmConfig& c, pb::handle h) {
             c.rate.ema_weight = cast_arg<double>("rate_ema_weight", h);
         }},
    };
    return m;
}

const std::map<std::string, Setter>& kind_setters(AqmKind k) {
    static const std::map<AqmKind, std::map<std::string, Setter>> all = {
        {AqmKind::droptail, {}},
        {AqmKind::red,
         {{"min_th", field("red.min_th", &RedParams::min_th)},
          {"max_th", field("red.max_th", &RedParams::max_th)},
          {"w_q", field("red.w_q", &RedParams::w_q)},
          {"max_p", field("red.max_p", &RedParams::max_p)},
          {"gentle", field("red.gentle", &RedParams::gentle)},
          {"mean_packet_size", field("red.mean_packet_size", &RedParams::mean_packet_size)}}},
        {AqmKind::rem,
         {{"gamma", field("rem.gamma", &RemParams::gamma)},
          {"alpha", field("rem.alpha", &RemParams::alpha)},
          {"phi", field("rem.phi", &RemParams::phi)},
          {"target", field("rem.target", &RemParams::target)},
          {"update_interval_s", seconds_field("rem.update_interval", &RemParams::update_interval)},
          {"input_weight", field("rem.input_weight", &RemParams::input_weight)},
          {"mean_packet_size", field("rem.mean_packet_size", &RemParams::mean_packet_size)}}},
        {AqmKind::reaqm,
         {{"alpha", field("reaqm.alpha", &ReaqmParams::alpha)},
          {"alpha_prime", field("reaqm.alpha_prime", &ReaqmParams::alpha_prime)},
          {"gamma", field("reaqm.gamma", &ReaqmParams::gamma)},
          {"phi", field("reaqm.phi", &ReaqmParams::phi)},
          {"y0_ratio", field("reaqm.y0_ratio", &ReaqmParams::y0_ratio)},
          {"modified_update", field("reaqm.modified_update", &ReaqmParams::modified_update)},
          {"update_interval_s",
           seconds_field("reaqm.update_interval", &ReaqmParams::update_interval)},
          {"mean_packet_size", field("reaqm.mean_packet_size", &ReaqmParams::mean_packet_size)}}},
        {AqmKind::avq,
         {{"gamma", field("avq.gamma", &AvqParams::gamma)},
          {"alpha", field("avq.alpha", &AvqParams::alpha)},
          {"virtual_buffer_bytes",
           field("avq.virtual_buffer_bytes", &AvqParams::virtual_buffer_bytes)},
          {"mean_packet_size", field("avq.mean_packet_size", &AvqParams::mean_packet_size)}}},
        {AqmKind::codel,
         {{"target_s", seconds_field("codel.target", &CodelParams::target)},
          {"interval_s", seconds_field("codel.interval", &CodelParams::interval)},
          {"mtu", field("codel.mtu", &CodelParams::mtu)}}},
        {AqmKind::pie,
         {{"target_s", seconds_field("pie.target", &PieParams::target)},
          {"tupdate_s", seconds_field("pie.tupdate", &PieParams::tupdate)},
          {"alpha", field("pie.alpha", &PieParams::alpha)},
          {"beta", field("pie.beta", &PieParams::beta)},
          {"max_burst_s", seconds_field("pie.max_burst", &PieParams::max_burst)},
          {"mark_ecn_threshold", field("pie.mark_ecn_threshold", &PieParams::mark_ecn_threshold)},
          {"mean_packet_size", field("pie.mean_packet_size", &PieParams::mean_packet_size)},
          {"use_departure_rate", field("pie.use_departure_rate", &PieParams::use_departure_rate)},
          {"derandomize", field("pie.derandomize", &PieParams::derandomize)},
          {"cap_drop_adjustment",
           field("pie.cap_drop_adjustment", &PieParams::cap_drop_adjustment)}}},
        {AqmKind::spmaf, {}},
        {AqmKind::las,
         {{"flow_idle_timeout_s",
           seconds_field("las.flow_idle_timeout", &LasParams::flow_idle_timeout)}}},
        {AqmKind::tlas,
         {{"threshold_packets", field("tlas.threshold_packets", &TlasParams::threshold_packets)},
          {"flow_idle_timeout_s",
           seconds_field("tlas.flow_idle_timeout", &TlasParams::flow_idle_timeout)}}},
    };
    return all.at(k);
}

AqmConfig config_from_kwargs(const std::string& kind_name, const pb::kwargs& params) {
    const auto kind = aqm_kind_from_string(kind_name);
    if (!kind) {
        std::string names;
        for (std::size_t i = 0; i < kAqmKindCount; ++i)
            names += (i ? ", " : "") + std::string(to_string(static_cast<AqmKind>(i)));
        throw_invalid("aqm.kind: '" + kind_name + "' is not one of " + names);
    }
    AqmConfig c = default_config(*kind);
    const auto& specific = kind_setters(*kind);
    for (const auto& [key, value] : params) {
        const std::string k = pb::str(key);
        if (auto it = specific.find(k); it != specific.end()) {
            it->second(c, value);
        } else if (auto jt = common_setters().find(k); jt != common_setters().end()) {
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
pb::dict stats_dict(const AqmStats& s, std::size_t bytes, std::size_t packets) {
    pb::dict d = stats_to_dict(s);
    pb::dict dropped;
    for (std::size_t i = 0; i < kDropReasonCount; ++i)
        dropped[pb::str(std::string(to_string(static_cast<DropReason>(i))))] = s.dropped[i];
    d["dropped"] = dropped;
    d["bytes"] = bytes;
    d["packets"] = packets;
    return d;
}

// One AQM with a drop list and packet ids, for Python.
class PyAqm {
  public:
    explicit PyAqm(const AqmConfig& c) : aqm_(make_aqm(c)) {
        aqm_->set_drop_sink([this](Drop&& d) {
            drops_.emplace_back(std::string(to_string(d.reason)), d.packet.size());
        });
    }
    bool enqueue(const pb::bytes& packet, double t_s, bool high_priority, std::uint32_t user) {
        Packet p;
        p.data = to_vector(packet);
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
        const Packet* p = aqm_->peek();
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
    const Aqm& aqm() const { return *aqm_; }

  private:
    std::unique_ptr<Aqm> aqm_;
    std::vector<std::pair<std::string, std::size_t>> drops_;
    std::uint64_t next_id_ = 0;
};

class PyQueueSet {
  public:
    PyQueueSet(std::size_t users, const std::string& mode, const std::string& kind,
               const pb::kwargs& params) {
        QueueSetConfig c;
        c.users = users;
        if (mode == "per_user") {
            c.mode = QueueMode::per_user;
        } else if (mode == "shared") {
            c.mode = QueueMode::shared;
        } else {
            throw_invalid("queue_set.mode: '" + mode + "' is neither 'per_user' nor 'shared'");
        }
        c.aqm = config_from_kwargs(kind, params);
        set_ = std::make_unique<QueueSet>(c);
        set_->set_drop_sink([this](Drop&& d) {
            drops_.push_back(
                pb::make_tuple(std::string(to_string(d.reason)), d.packet.size(), d.packet.user));
        });
    }
    bool enqueue(const pb::bytes& packet, double t_s, std::uint32_t user, bool high_priority) {
        Packet p;
        p.data = to_vector(packet);
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
    QueueSet& set() { return *set_; }

  private:
    std::unique_ptr<QueueSet> set_;
    std::vector<pb::tuple> drops_;
    std::uint64_t next_id_ = 0;
};

}  // namespace

void bind_aqm(pybind11::module_& m) {
    pb::list kinds;
    for (std::size_t i = 0; i < kAqmKindCount; ++i)
        kinds.append(std::string(to_string(static_cast<AqmKind>(i))));
    m.attr("AQM_KINDS") = pb::tuple(kinds);
    pb::list reasons;
    for (std::size_t i = 0; i < kDropReasonCount; ++i)
        reasons.append(std::string(to_string(static_cast<DropReason>(i))));
    m.attr("DROP_REASONS") = pb::tuple(reasons);

    pb::class_<PyAqm>(m, "Aqm",
                      "An AP queue with active queue management (see make_aqm). Times are "
                      "seconds on the caller's clock.")
        .def("enqueue", &PyAqm::enqueue, pb::arg("packet"), pb::arg("t_s"),
             pb::arg("high_priority") = false, pb::arg("user") = 0,
             "Offer an IP packet arriving at t_s; True if accepted (maybe CE-marked).")
        .def("dequeue", &PyAqm::dequeue, pb::arg("t_s"),
             "Next packet in service order (bytes), or None.")
        .def("peek", &PyAqm::peek, "The packet dequeue would consider next, or None.")
        .def("clear", &PyAqm::clear, pb::arg("t_s"), "Drop every queued packet ('flushed').")
        .def("drops", &PyAqm::drops,
             "Drops since the previous call, oldest first, as (reason, size) tuples.")
        .def_property_readonly("bytes", [](const PyAqm& a) { return a.aqm().bytes(); })
        .def_property_readonly("packets", [](const PyAqm& a) { return a.aqm().packets(); })
        .def_property_readonly(
            "kind", [](const PyAqm& a) { return std::string(to_string(a.aqm().kind())); })
        .def_property_readonly("limit_bytes", [](const PyAqm& a) { return a.aqm().limits().bytes; })
        .def_property_readonly("limit_packets",
                               [](const PyAqm& a) { return a.aqm().limits().packets; })
        .def_property_readonly("stats", [](const PyAqm& a) {
            return stats_dict(a.aqm().stats(), a.aqm().bytes(), a.aqm().packets());
        });

    m.def(
        "make_aqm",
        [](const std::string& kind, const pb::kwargs& params) {
            return std::make_unique<PyAqm>(config_from_kwargs(kind, params));
        },
        pb::arg("kind"),
        "make_aqm(kind, **params) -> Aqm. kind: one of AQM_KINDS. Common params: "
        "limit_packets (default 50), limit_bytes (0 = none), ecn (True), seed, capacity_bps "
        "(0 = measure the service rate), rate_sample_bytes, rate_ema_weight. Per kind: "
        "red: min_th, max_th, w_q, max_p, gentle, mean_packet_size; rem: gamma, alpha, phi, "
        "target, update_interval_s, input_weight, mean_packet_size; reaqm: alpha, alpha_prime, "
        "gamma, phi, y0_ratio, modified_update, update_interval_s, mean_packet_size; avq: "
        "gamma, alpha, virtual_buffer_bytes, mean_packet_size; codel: target_s, interval_s, "
        "mtu; pie: target_s, tupdate_s, alpha, beta, max_burst_s, mark_ecn_threshold, "
        "mean_packet_size, use_departure_rate, derandomize, cap_drop_adjustment; las: "
        "flow_idle_timeout_s; tlas: threshold_packets, flow_idle_timeout_s.");

    pb::class_<PyQueueSet>(m, "QueueSet",
                           "Users -> queues: one AQM per user, or one shared FIFO "
                           "(head-of-line blocking).")
        .def(pb::init<std::size_t, const std::string&, const std::string&, const pb::kwargs&>(),
             pb::arg("users"), pb::arg("mode") = "per_user", pb::arg("kind") = "droptail")
        .def("enqueue", &PyQueueSet::enqueue, pb::arg("packet"), pb::arg("t_s"), pb::arg("user"),
             pb::arg("high_priority") = false)
        .def("dequeue", &PyQueueSet::dequeue, pb::arg("user"), pb::arg("t_s"))
        .def("backlogged_users", &PyQueueSet::backlogged)
        .def("eligible_users", &PyQueueSet::eligible,
             "Users that can be served now (shared mode: the head-of-line user only).")
        .def("bytes", [](PyQueueSet& q, std::uint32_t u) { return q.set().bytes(u); })
        .def("packets", [](PyQueueSet& q, std::uint32_t u) { return q.set().packets(u); })
        .def_property_readonly("total_bytes", [](PyQueueSet& q) { return q.set().total_bytes(); })
        .def_property_readonly("total_packets",
                               [](PyQueueSet& q) { return q.set().total_packets(); })
        .def_property_readonly(
            "mode",
            [](PyQueueSet& q) {
                return std::string(q.set().mode() == QueueMode::shared ? "shared" : "per_user");
            })
        .def(
            "queue_stats",
            [](PyQueueSet& q, std::size_t i) {
                const Aqm& a = q.set().queue(i);
                return stats_dict(a.stats(), a.bytes(), a.packets());
            },
            pb::arg("index"))
        .def_property_readonly("queue_count", [](PyQueueSet& q) { return q.set().queue_count(); })
        .def("drops", &PyQueueSet::drops,
             "Drops since the previous call as (reason, size, user) tuples.");
}

}  // namespace oppsched::py
