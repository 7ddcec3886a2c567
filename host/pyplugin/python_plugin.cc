// Policies written in Python: see python_plugin.h.
#include "python_plugin.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>

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

class PacketView:
    """One packet offered to (enqueue) or leaving (dequeue) a Python AQM."""
    __slots__ = ("size_bytes", "flow", "ecn_capable", "arrival_s")
    def __repr__(self):
        return ("PacketView(size_bytes=%r, flow=%r, ecn_capable=%r, arrival_s=%r)"
                % (self.size_bytes, self.flow, self.ecn_capable, self.arrival_s))

class QueueView:
    """The queue as the packet finds it (enqueue: before it joins; dequeue: after it left)."""
    __slots__ = ("bytes", "packets", "limit_bytes", "limit_packets", "ecn")
    def __repr__(self):
        return ("QueueView(bytes=%r, packets=%r, limit_bytes=%r, limit_packets=%r, ecn=%r)"
                % (self.bytes, self.packets, self.limit_bytes, self.limit_packets, self.ecn))

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
    queue_view_ = helpers()["QueueView"]();
    queue_view_.attr("limit_bytes") = config.limits.bytes;
    queue_view_.attr("limit_packets") = config.limits.packets;
    queue_view_.attr("ecn") = config.ecn;
}

python_aqm::~python_aqm() = default;

py::object python_aqm::queue_view() const {
    queue_view_.attr("bytes") = fifo_.bytes();
    queue_view_.attr("packets") = fifo_.packets();
    return queue_view_;
}

py::object python_aqm::packet_view(const ip_packet& p) const {
    static const tcpip::keyed_flow_hash hash(0);
    py::object v = helpers()["PacketView"]();
    v.attr("size_bytes") = p.size();
    const auto info = tcpip::parse(p.data);
    v.attr("flow") = info.ok() ? static_cast<std::uint64_t>(hash(info.value().flow)) : 0u;
    v.attr("ecn_capable") = aqm::ecn_field(p.data) != tcpip::kNotEct;
    v.attr("arrival_s") = static_cast<double>(p.arrival) * 1e-9;
    return v;
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

std::string python_aqm::call(const py::object& fn, method m, const ip_packet& p, time_ns now) {
    const auto t0 = std::chrono::steady_clock::now();
    auto& h = m == method::enqueue ? plugin_stats_.enqueue_time : plugin_stats_.dequeue_time;
    const auto timed = [&] {
        h.add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now() - t0)
                                             .count()));
    };
    try {
        py::object r = fn(packet_view(p), queue_view(), static_cast<double>(now) * 1e-9);
        timed();
        if (py::isinstance<py::str>(r)) return r.cast<std::string>();
        ++plugin_stats_.invalid_answers;
        return {};
    } catch (py::error_already_set& e) {
        log_exception(m, e);
        return {};
    }
}

bool python_aqm::enqueue(ip_packet p, time_ns now) {
    ++stats_.offered;
    p.arrival = now;
    std::string v = call(enqueue_, method::enqueue, p, now);
    if (v != "accept" && v != "drop" && v != "mark") {
        if (!v.empty()) ++plugin_stats_.invalid_answers;
        v = "accept";  // the default: drop-tail
    }
    if (v == "drop") {
        report_drop(std::move(p), aqm::drop_reason::early_drop, now);
        return false;
    }
    if (!fifo_.fits(p.size())) {
        report_drop(std::move(p), aqm::drop_reason::overflow, now);
        return false;
    }
    // "mark" on a packet that is not ECN-capable (or with ecn off) drops it, as every AQM does
    if (v == "mark" && !try_mark(p)) {
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
        std::string v = call(dequeue_, method::dequeue, p, now);
        if (v != "send" && v != "drop" && v != "mark") {
            if (!v.empty()) ++plugin_stats_.invalid_answers;
            v = "send";
        }
        // "mark" sends the packet with CE; one that cannot be marked is dropped, as at enqueue
        // (CoDel's dequeue, RFC 8289 with ECN as Linux codel_impl.h has it)
        if (v == "drop" || (v == "mark" && !try_mark(p))) {
            report_drop(std::move(p), aqm::drop_reason::aqm_drop, now);
            continue;
        }
        count_dequeued(p);
        return p;
    }
    // Found empty, at once or after drops: what RFC 8289's dodequeue learns from no packet
    // (after a flush, say, which empties the queue without a dequeue).
    if (!on_empty_.is_none()) {
        try {
            on_empty_(queue_view(), static_cast<double>(now) * 1e-9);
        } catch (py::error_already_set& e) {
            log_exception(method::on_empty, e);
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
