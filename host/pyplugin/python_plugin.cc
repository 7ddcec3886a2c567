// Policies written in Python: see python_plugin.h.
#include "python_plugin.h"

#include <structmember.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <type_traits>

#include "oppsched/validation.h"

namespace oppsched::pyplugin {
namespace py = pybind11;

namespace {

// A Python exception's traceback as Python prints it (its message alone if that fails).
std::string traceback_text(py::error_already_set& e) {
    try {
        py::object lines = py::module_::import("traceback")
                               .attr("format_exception")(e.type(), e.value(), e.trace());
        return py::str("").attr("join")(lines).cast<std::string>();
    } catch (...) {
        return std::string(e.what()) + "\n";
    }
}

// The loader and the user view, run in the interpreter once (the apd has no oppsched package
// on its path, so nothing here imports it).
constexpr const char* kHelpers = R"PY(
import importlib.util, inspect, os, sys

class PluginError(Exception):
    pass

class UserView:
    """One candidate of a slot (docs/extending.md): reused from slot to slot."""
    __slots__ = ("id", "backlog_bytes", "rate_bps", "hol_delay_s", "avg_bps")
    def __repr__(self):
        return ("UserView(id=%r, backlog_bytes=%r, rate_bps=%r, hol_delay_s=%r, avg_bps=%r)"
                % (self.id, self.backlog_bytes, self.rate_bps, self.hol_delay_s, self.avg_bps))

PROTOCOL = {
    "scheduler": [("select", ("slot", "users"), True), ("served", ("slot", "user", "bytes"), False)],
    "aqm": [("enqueue", ("pkt", "queue", "now_s"), True), ("dequeue", ("pkt", "queue", "now_s"), True),
            ("on_empty", ("queue", "now_s"), False)],
}

def load(path, class_name, params, family):
    where = "%s: class %s" % (path, class_name)
    def fail(reason):
        raise PluginError("%s: %s" % (where, reason))
    if not os.path.exists(path):
        fail("no such file")
    if not os.path.isfile(path):
        fail("not a regular file")
    if not os.access(path, os.R_OK):
        fail("not readable by this user (uid %d)" % os.getuid())
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    stem = os.path.splitext(os.path.basename(path))[0]
    name = "oppsched_plugin_%s_%s" % (family, "".join(c if c.isalnum() else "_" for c in stem))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        fail("not a Python source file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        fail("syntax error at line %s: %s" % (e.lineno, e.msg))
    except BaseException as e:
        fail("importing the file raised %s: %s" % (type(e).__name__, e))
    cls = getattr(module, class_name, None)
    if cls is None:
        fail("the file defines no class %s" % class_name)
    if not inspect.isclass(cls):
        fail("%s is not a class" % class_name)
    for method, args, required in PROTOCOL[family]:
        m = getattr(cls, method, None)
        if m is None:
            if required:
                fail("no method %s(self, %s) (every %s plugin has it)" % (method, ", ".join(args), family))
            continue
        if not callable(m):
            fail("%s is not a method" % method)
        try:
            sig = inspect.signature(m)
        except (TypeError, ValueError):
            continue
        try:
            sig.bind(None, *args)
        except TypeError as e:
            fail("%s%s cannot be called as %s(self, %s): %s" % (method, sig, method, ", ".join(args), e))
    if not isinstance(params, dict):
        fail("params: %r is not a mapping" % (params,))
    try:
        return cls(**params)
    except BaseException as e:
        fail("%s(**%r) raised %s: %s" % (class_name, params, type(e).__name__, e))
)PY";

py::dict& helpers() {
    // Leaked on purpose: the interpreter may be finalised before static destructors run.
    static py::dict* d = [] {
        auto* g = new py::dict();
        (*g)["__builtins__"] = py::module_::import("builtins");
        (*g)["__name__"] = "oppsched_plugin_helpers";
        py::exec(kHelpers, *g);
        return g;
    }();
    return *d;
}

void log_default(const std::string& s) { std::cerr << s << std::flush; }

// ---- the AQM's views ------------------------------------------------------------------------
// Plain C objects whose fields the wrapper writes before each call: updating a view allocates
// nothing, and a plugin's read makes only the one value it reads. Read-only from Python.

// The packet offered to (enqueue) or leaving (dequeue) the queue. One per queue, reused from
// call to call while the plugin keeps no reference to it; a view that is still referenced when
// its call returns is left with its packet's values (flow included) and the next call gets a
// new one (python_aqm::release_packet_view), so a kept view stays correct.
struct packet_view_object {
    PyObject_HEAD unsigned long long size_bytes;
    unsigned long long flow;  // valid when flow_known
    double arrival_s;
    char ecn_capable;         // T_BOOL
    char flow_known;          // flow is hashed on the first read (or when kept)
    const ip_packet* packet;  // while its call runs, for the flow
};

// The queue as the packet finds it: one per queue, updated in place before each call.
struct queue_view_object {
    PyObject_HEAD unsigned long long bytes, packets, limit_bytes, limit_packets;
    char ecn;
};

std::uint64_t flow_of(const ip_packet& p) {
    static const tcpip::keyed_flow_hash hash(0);
    const auto info = tcpip::parse(p.data);
    return info.ok() ? static_cast<std::uint64_t>(hash(info.value().flow)) : 0u;
}

void settle_flow(packet_view_object* v) {
    if (v->flow_known) return;
    v->flow = v->packet != nullptr ? flow_of(*v->packet) : 0u;
    v->flow_known = 1;
}

PyObject* packet_view_flow(PyObject* self, void*) {
    auto* v = reinterpret_cast<packet_view_object*>(self);
    settle_flow(v);
    return PyLong_FromUnsignedLongLong(v->flow);
}

PyObject* packet_view_repr(PyObject* self) {
    auto* v = reinterpret_cast<packet_view_object*>(self);
    settle_flow(v);
    py::float_ arrival(v->arrival_s);
    return PyUnicode_FromFormat(
        "PacketView(size_bytes=%llu, flow=%llu, ecn_capable=%s, arrival_s=%R)", v->size_bytes,
        v->flow, v->ecn_capable ? "True" : "False", arrival.ptr());
}

PyObject* queue_view_repr(PyObject* self) {
    auto* v = reinterpret_cast<queue_view_object*>(self);
    return PyUnicode_FromFormat(
        "QueueView(bytes=%llu, packets=%llu, limit_bytes=%llu, limit_packets=%llu, ecn=%s)",
        v->bytes, v->packets, v->limit_bytes, v->limit_packets, v->ecn ? "True" : "False");
}

// copy.copy() and copy.deepcopy() of a view: a new view with the same values, not updated
// by later calls (a packet view's flow is hashed first).
template <class View>
PyObject* view_copy(PyObject* self, PyObject* /*memo*/) {
    auto* from = reinterpret_cast<View*>(self);
    if constexpr (std::is_same_v<View, packet_view_object>) settle_flow(from);
    PyTypeObject* type = Py_TYPE(self);
    PyObject* o = type->tp_alloc(type, 0);
    if (o == nullptr) return nullptr;
    auto* to = reinterpret_cast<View*>(o);
    const auto head = sizeof(PyObject);  // PyObject_HEAD comes first
    std::memcpy(reinterpret_cast<char*>(to) + head, reinterpret_cast<const char*>(from) + head,
                sizeof(View) - head);
    if constexpr (std::is_same_v<View, packet_view_object>) to->packet = nullptr;
    return o;
}

template <class View>
PyMethodDef* view_methods() {
    static PyMethodDef methods[] = {{"__copy__", view_copy<View>, METH_NOARGS, nullptr},
                                    {"__deepcopy__", view_copy<View>, METH_O, nullptr},
                                    {nullptr, nullptr, 0, nullptr}};
    return methods;
}

#define OPPSCHED_VIEW_MEMBER(type, name, kind)                                                   \
    PyMemberDef {                                                                                \
        const_cast<char*>(#name), kind, static_cast<Py_ssize_t>(offsetof(type, name)), READONLY, \
            nullptr                                                                              \
    }

struct view_types {
    PyTypeObject* packet;
    PyTypeObject* queue;
};

const view_types& aqm_view_types() {
    // Leaked on purpose, as helpers() is.
    static const view_types* t = [] {
        static PyMemberDef packet_members[] = {
            OPPSCHED_VIEW_MEMBER(packet_view_object, size_bytes, T_ULONGLONG),
            OPPSCHED_VIEW_MEMBER(packet_view_object, ecn_capable, T_BOOL),
            OPPSCHED_VIEW_MEMBER(packet_view_object, arrival_s, T_DOUBLE),
            {nullptr, 0, 0, 0, nullptr}};
        static PyGetSetDef packet_getset[] = {
            {const_cast<char*>("flow"), packet_view_flow, nullptr,
             const_cast<char*>("SipHash of the 5-tuple under a fixed key"), nullptr},
            {nullptr, nullptr, nullptr, nullptr, nullptr}};
        static PyType_Slot packet_slots[] = {
            {Py_tp_members, packet_members},
            {Py_tp_methods, view_methods<packet_view_object>()},
            {Py_tp_getset, packet_getset},
            {Py_tp_repr, reinterpret_cast<void*>(packet_view_repr)},
            {Py_tp_doc, const_cast<char*>("One packet offered to (enqueue) or leaving (dequeue) "
                                          "a Python AQM; valid as it is for the call it was "
                                          "passed to.")},
            {0, nullptr}};
        static PyType_Spec packet_spec = {
            "oppsched_plugin_helpers.PacketView", sizeof(packet_view_object), 0,
            Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, packet_slots};
        static PyMemberDef queue_members[] = {
            OPPSCHED_VIEW_MEMBER(queue_view_object, bytes, T_ULONGLONG),
            OPPSCHED_VIEW_MEMBER(queue_view_object, packets, T_ULONGLONG),
            OPPSCHED_VIEW_MEMBER(queue_view_object, limit_bytes, T_ULONGLONG),
            OPPSCHED_VIEW_MEMBER(queue_view_object, limit_packets, T_ULONGLONG),
            OPPSCHED_VIEW_MEMBER(queue_view_object, ecn, T_BOOL),
            {nullptr, 0, 0, 0, nullptr}};
        static PyType_Slot queue_slots[] = {
            {Py_tp_members, queue_members},
            {Py_tp_methods, view_methods<queue_view_object>()},
            {Py_tp_repr, reinterpret_cast<void*>(queue_view_repr)},
            {Py_tp_doc, const_cast<char*>("The queue as the packet finds it (enqueue: before it "
                                          "joins; dequeue: after it left); the same object at "
                                          "every call of its queue.")},
            {0, nullptr}};
        static PyType_Spec queue_spec = {
            "oppsched_plugin_helpers.QueueView", sizeof(queue_view_object), 0,
            Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, queue_slots};
        auto* packet = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&packet_spec));
        if (packet == nullptr) throw py::error_already_set();
        auto* queue = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&queue_spec));
        if (queue == nullptr) throw py::error_already_set();
        return new view_types{packet, queue};
    }();
    return *t;
}
#undef OPPSCHED_VIEW_MEMBER

py::object new_view(PyTypeObject* type) {
    PyObject* o = type->tp_alloc(type, 0);  // zeroed
    if (o == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(o);
}

packet_view_object* as_packet_view(const py::object& o) {
    return reinterpret_cast<packet_view_object*>(o.ptr());
}
queue_view_object* as_queue_view(const py::object& o) {
    return reinterpret_cast<queue_view_object*>(o.ptr());
}

// The answers, interned: a plugin's string constants are the same objects, so most answers
// are told apart by identity; any other str is compared by value.
struct answer_words {
    PyObject *accept, *drop, *mark, *send;
};
const answer_words& words() {
    static const answer_words* w =
        new answer_words{PyUnicode_InternFromString("accept"), PyUnicode_InternFromString("drop"),
                         PyUnicode_InternFromString("mark"), PyUnicode_InternFromString("send")};
    return *w;
}

}  // namespace

const char* to_string(family f) { return f == family::scheduler ? "scheduler" : "aqm"; }

py::object load_plugin(const std::string& file, const std::string& class_name,
                       const py::dict& params, family f) {
    py::dict& h = helpers();
    try {
        return h["load"](file, class_name, params, to_string(f));
    } catch (py::error_already_set& e) {
        if (e.matches(h["PluginError"])) throw plugin_error(py::str(e.value()).cast<std::string>());
        throw plugin_error(file + ": class " + class_name + ": " + e.what());
    }
}

void python_scheduler_options::validate() const {
    // alpha's range is the registry's (sched.cc), the one the built-in kinds are checked against.
    for (const auto& p : sched::find_scheduler_kind("pf")->params)
        if (p.name == "alpha") check_in_range("scheduler.alpha", alpha, p.range);
    if (!(slot_s > 0.0 && slot_s <= 1.0))
        throw_invalid("scheduler.slot_s: " + format_number(slot_s) + " not in (0,1]");
    if (!(budget_fraction > 0.0 && budget_fraction <= 1.0))
        throw_invalid("scheduler.budget_fraction: " + format_number(budget_fraction) +
                      " not in (0,1]");
}

python_scheduler::python_scheduler(py::object plugin, std::size_t num_users,
                                   python_scheduler_options options)
    : plugin_(std::move(plugin)), opt_(std::move(options)) {
    opt_.validate();
    if (!opt_.log) opt_.log = log_default;
    budget_ =
        std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(opt_.budget_s() * 1e9)));
    select_ = plugin_.attr("select");
    served_ = py::hasattr(plugin_, "served") ? py::object(plugin_.attr("served"))
                                             : py::object(py::none());
    sched::scheduler_params pf;
    pf.num_users = num_users;
    pf.policy = sched::pf_params{opt_.alpha};
    pf_ = sched::make_scheduler(pf);
    set_num_users(num_users);
}

python_scheduler::~python_scheduler() = default;

void python_scheduler::set_num_users(std::size_t n) {
    pf_->set_num_users(n);
    py::object cls = helpers()["UserView"];
    while (views_.size() < n) {
        py::object v = cls();
        v.attr("id") = views_.size();
        v.attr("backlog_bytes") = std::numeric_limits<double>::infinity();
        v.attr("hol_delay_s") = 0.0;
        v.attr("rate_bps") = 0.0;
        v.attr("avg_bps") = 0.0;
        views_.push_back(std::move(v));
    }
    views_.resize(n);
    state_.backlog_bytes.resize(n, 0);
    state_.hol_delay_s.resize(n, 0.0);
}

void python_scheduler::set_queue_state(const sched::queue_state& state) {
    state_ = state;
    have_state_ = true;
}

std::int64_t python_scheduler::slot_now() const { return have_state_ ? state_.slot : pf_->slots(); }

void python_scheduler::log_exception(const char* method, py::error_already_set& e) const {
    ++stats_.exceptions;
    for (const auto& m : logged_)
        if (m == method) return;
    logged_.emplace_back(method);
    const std::string text = traceback_text(e);
    opt_.log("scheduler plugin: " + std::string(method) +
             "() raised (counted in scheduler.plugin_exceptions; PF decides when select() "
             "raises; logged once per method):\n" +
             text);
}

void python_scheduler::refresh_views(const std::vector<double>& rate_bps) const {
    // Interned once and never freed (an embedding program may finalise the interpreter
    // before static destructors run).
    static const py::str& k_backlog = *new py::str("backlog_bytes");
    static const py::str& k_rate = *new py::str("rate_bps");
    static const py::str& k_hol = *new py::str("hol_delay_s");
    static const py::str& k_avg = *new py::str("avg_bps");
    // avg_bps is T_i as PF's metric sees it (sched.h): R_i / N before the first positive rate.
    const auto& avg = pf_->averages();
    const double n = static_cast<double>(views_.size());
    for (const int i : candidates_) {
        const auto u = static_cast<std::size_t>(i);
        const py::object& v = views_[u];
        if (have_state_) {
            v.attr(k_backlog) = py::int_(state_.backlog_bytes[u]);
            v.attr(k_hol) = py::float_(state_.hol_delay_s[u]);
        }
        v.attr(k_rate) = py::float_(rate_bps[u]);
        v.attr(k_avg) =
            py::float_(avg[u] > 0.0 ? avg[u] : std::max(rate_bps[u] / n, sched::kMinAverageBps));
    }
}

int python_scheduler::choose(const std::vector<double>& rate_bps,
                             const std::vector<bool>& backlogged) const {
    // The fallback checks the inputs as every policy does (sizes, rates).
    const auto fallback = [&] {
        ++stats_.fallbacks;
        return pf_->choose(rate_bps, backlogged);
    };
    if (rate_bps.size() != views_.size() || backlogged.size() != views_.size())
        return pf_->choose(rate_bps, backlogged);  // throws, naming the size
    candidates_.clear();
    for (std::size_t i = 0; i < backlogged.size(); ++i)
        if (backlogged[i]) candidates_.push_back(static_cast<int>(i));
    if (candidates_.empty()) return sched::kNoUser;
    const auto t_views = std::chrono::steady_clock::now();
    refresh_views(rate_bps);
    py::list users(candidates_.size());
    for (std::size_t k = 0; k < candidates_.size(); ++k)
        users[k] = views_[static_cast<std::size_t>(candidates_[k])];
    py::object answer;
    const auto t0 = std::chrono::steady_clock::now();
    try {
        answer = select_(slot_now(), users);
    } catch (py::error_already_set& e) {
        log_exception("select", e);
        return fallback();
    }
    const auto t1 = std::chrono::steady_clock::now();
    const auto took = t1 - t0;
    stats_.decision_time.add(static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t_views).count()));
    ++stats_.decisions;
    stats_.decision_ns += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(took).count());
    if (took > budget_) {
        ++stats_.deadline_misses;
        return fallback();
    }
    if (answer.is_none()) return sched::kNoUser;
    if (!py::isinstance<py::bool_>(answer) && PyIndex_Check(answer.ptr())) {
        const Py_ssize_t k = PyNumber_AsSsize_t(answer.ptr(), nullptr);
        if (PyErr_Occurred()) PyErr_Clear();
        if (k >= 0 && static_cast<std::size_t>(k) < candidates_.size())
            return candidates_[static_cast<std::size_t>(k)];
    }
    ++stats_.invalid_decisions;
    return fallback();
}

void python_scheduler::update(const std::vector<double>& rate_bps, int served, double served_bps) {
    const std::int64_t slot = slot_now();
    pf_->update(rate_bps, served, served_bps);
    if (served_.is_none()) return;
    try {
        py::object user = served == sched::kNoUser ? py::object(py::none()) : py::int_(served);
        const double bytes = served == sched::kNoUser ? 0.0 : served_bps * opt_.slot_s / 8.0;
        served_(slot, user, py::int_(static_cast<std::int64_t>(std::floor(bytes))));
    } catch (py::error_already_set& e) {
        log_exception("served", e);
    }
}

std::vector<std::pair<std::string, std::uint64_t>> python_scheduler::counters() const {
    return {{"plugin_decisions", stats_.decisions},
            {"plugin_deadline_misses", stats_.deadline_misses},
            {"plugin_exceptions", stats_.exceptions},
            {"plugin_invalid_decisions", stats_.invalid_decisions},
            {"plugin_fallbacks", stats_.fallbacks},
            {"plugin_decision_ns", stats_.decision_ns},
            {"plugin_decision_p50_ns", stats_.decision_time.quantile_ns(0.5)},
            {"plugin_decision_p99_ns", stats_.decision_time.quantile_ns(0.99)},
            {"plugin_decision_max_ns", stats_.decision_time.max_ns()}};
}

// ---- AQM -------------------------------------------------------------------------------

python_aqm::python_aqm(py::object plugin, const aqm::aqm_params& config,
                       std::function<void(const std::string&)> log)
    : discipline_base(config),
      fifo_(config.limits),
      plugin_(std::move(plugin)),
      log_(log ? std::move(log) : log_default) {
    enqueue_ = plugin_.attr("enqueue");
    dequeue_ = plugin_.attr("dequeue");
    on_empty_ = py::hasattr(plugin_, "on_empty") ? py::object(plugin_.attr("on_empty"))
                                                 : py::object(py::none());
    words();
    queue_view_ = new_view(aqm_view_types().queue);
    auto* q = as_queue_view(queue_view_);
    q->limit_bytes = config.limits.bytes;
    q->limit_packets = config.limits.packets;
    q->ecn = config.ecn ? 1 : 0;
}

python_aqm::~python_aqm() = default;

PyObject* python_aqm::queue_view() const {
    auto* q = as_queue_view(queue_view_);
    q->bytes = fifo_.bytes();
    q->packets = fifo_.packets();
    return queue_view_.ptr();
}

PyObject* python_aqm::packet_view(const ip_packet& p) {
    if (!packet_view_) packet_view_ = new_view(aqm_view_types().packet);
    auto* v = as_packet_view(packet_view_);
    v->size_bytes = p.size();
    v->ecn_capable = aqm::ecn_field(p.data) != tcpip::kNotEct ? 1 : 0;
    v->arrival_s = static_cast<double>(p.arrival) * 1e-9;
    v->flow_known = 0;
    v->packet = &p;
    return packet_view_.ptr();
}

void python_aqm::release_packet_view(bool kept) {
    auto* v = as_packet_view(packet_view_);
    // Still referenced after its call (stored by the plugin, or held by a traceback): it keeps
    // its packet's values, and the next call gets a view of its own.
    if (kept || Py_REFCNT(packet_view_.ptr()) > 1) {
        settle_flow(v);
        v->packet = nullptr;
        packet_view_ = py::object();
        return;
    }
    v->packet = nullptr;
}

PyObject* python_aqm::now_s(time_ns now) {
    if (!now_s_ || now != now_s_at_) {
        now_s_ = py::float_(static_cast<double>(now) * 1e-9);
        now_s_at_ = now;
    }
    return now_s_.ptr();
}

void python_aqm::log_exception(method m, py::error_already_set& e) {
    static constexpr const char* kNames[] = {"enqueue", "dequeue", "on_empty"};
    static constexpr const char* kThen[] = {"the packet is accepted", "the packet is sent",
                                            "nothing else happens"};
    ++plugin_stats_.exceptions;
    const auto i = static_cast<std::size_t>(m);
    if (logged_[i]) return;
    logged_[i] = true;
    const std::string text = traceback_text(e);
    log_("aqm plugin: " + std::string(kNames[i]) +
         "() raised (counted in aqm.<queue>.plugin_exceptions; " + kThen[i] +
         "; logged once per method):\n" + text);
}

std::vector<std::pair<std::string, std::uint64_t>> python_aqm::counters() const {
    std::vector<std::pair<std::string, std::uint64_t>> out = {
        {"plugin_exceptions", plugin_stats_.exceptions},
        {"plugin_invalid_answers", plugin_stats_.invalid_answers}};
    for (const auto& [name, h] : {std::pair{"enqueue", &plugin_stats_.enqueue_time},
                                  std::pair{"dequeue", &plugin_stats_.dequeue_time}}) {
        const std::string k = std::string("plugin_") + name;
        out.emplace_back(k + "_calls", h->count());
        out.emplace_back(k + "_p50_ns", h->quantile_ns(0.5));
        out.emplace_back(k + "_p99_ns", h->quantile_ns(0.99));
        out.emplace_back(k + "_max_ns", h->max_ns());
    }
    return out;
}

python_aqm::answer python_aqm::call(const py::object& fn, method m, const ip_packet& p,
                                    time_ns now) {
    const auto t0 = std::chrono::steady_clock::now();
    // args[0] is scratch room for the bound method's self (PY_VECTORCALL_ARGUMENTS_OFFSET)
    PyObject* args[4] = {nullptr, packet_view(p), queue_view(), now_s(now)};
    PyObject* r =
        PyObject_Vectorcall(fn.ptr(), args + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
    if (r == nullptr) {
        py::error_already_set e;
        release_packet_view(true);
        log_exception(m, e);
        return answer::raised;
    }
    release_packet_view(false);
    auto& h = m == method::enqueue ? plugin_stats_.enqueue_time : plugin_stats_.dequeue_time;
    h.add(static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count()));
    const py::object result = py::reinterpret_steal<py::object>(r);
    const answer_words& w = words();
    if (r == w.accept) return answer::accept;
    if (r == w.send) return answer::send;
    if (r == w.drop) return answer::drop;
    if (r == w.mark) return answer::mark;
    if (!PyUnicode_Check(r)) return answer::invalid;
    for (const auto& [word, a] :
         {std::pair{w.accept, answer::accept}, std::pair{w.send, answer::send},
          std::pair{w.drop, answer::drop}, std::pair{w.mark, answer::mark}}) {
        const int eq = PyUnicode_Compare(r, word);
        if (eq == -1 && PyErr_Occurred()) PyErr_Clear();
        if (eq == 0) return a;
    }
    return answer::invalid;
}

bool python_aqm::enqueue(ip_packet p, time_ns now) {
    ++stats_.offered;
    p.arrival = now;
    answer v = call(enqueue_, method::enqueue, p, now);
    if (v != answer::accept && v != answer::drop && v != answer::mark) {
        if (v != answer::raised) ++plugin_stats_.invalid_answers;
        v = answer::accept;  // the default: drop-tail
    }
    if (v == answer::drop) {
        report_drop(std::move(p), aqm::drop_reason::early_drop, now);
        return false;
    }
    if (!fifo_.fits(p.size())) {
        report_drop(std::move(p), aqm::drop_reason::overflow, now);
        return false;
    }
    // "mark" on a packet that is not ECN-capable (or with ecn off) drops it, as every AQM does
    if (v == answer::mark && !try_mark(p)) {
        report_drop(std::move(p), aqm::drop_reason::early_drop, now);
        return false;
    }
    count_enqueued(p);
    fifo_.push(std::move(p));
    return true;
}

std::optional<ip_packet> python_aqm::dequeue(time_ns now) {
    while (!fifo_.empty()) {
        ip_packet p = fifo_.pop();
        answer v = call(dequeue_, method::dequeue, p, now);
        if (v != answer::send && v != answer::drop && v != answer::mark) {
            if (v != answer::raised) ++plugin_stats_.invalid_answers;
            v = answer::send;
        }
        // "mark" sends the packet with CE; one that cannot be marked is dropped, as at enqueue
        // (CoDel's dequeue, RFC 8289 with ECN as Linux codel_impl.h has it)
        if (v == answer::drop || (v == answer::mark && !try_mark(p))) {
            report_drop(std::move(p), aqm::drop_reason::aqm_drop, now);
            continue;
        }
        count_dequeued(p);
        return p;
    }
    // Found empty, at once or after drops: what RFC 8289's dodequeue learns from no packet
    // (after a flush, say, which empties the queue without a dequeue).
    if (!on_empty_.is_none()) {
        PyObject* args[3] = {nullptr, queue_view(), now_s(now)};
        PyObject* r = PyObject_Vectorcall(on_empty_.ptr(), args + 1,
                                          2 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
        if (r == nullptr) {
            py::error_already_set e;
            log_exception(method::on_empty, e);
        } else {
            Py_DECREF(r);
        }
    }
    return std::nullopt;
}

void python_aqm::clear(time_ns now) {
    while (!fifo_.empty()) report_drop(fifo_.pop(), aqm::drop_reason::flushed, now);
}

std::unique_ptr<sched::scheduler_policy> make_python_scheduler(py::object plugin,
                                                               std::size_t num_users,
                                                               python_scheduler_options options) {
    return std::make_unique<python_scheduler>(std::move(plugin), num_users, std::move(options));
}

}  // namespace oppsched::pyplugin
