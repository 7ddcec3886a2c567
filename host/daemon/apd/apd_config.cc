// Reading apd.yaml: see apd_config.h and docs/daemons.md "oppsched-apd configuration".
#include "apd_config.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>

#include "oppsched/daemon/config.h"
#include "oppsched/daemon/integrity_keys.h"
#include "oppsched/daemon/json.h"
#include "oppsched/daemon/zmq_endpoint.h"
#include "oppsched/integrity.h"
#include "oppsched/lead_slots.h"
#include "oppsched/pdu.h"
#include "oppsched/validation.h"
#include "oppsched/wire.h"

namespace oppsched::apd {
namespace {

using daemon::config_node;
using daemon::field_spec;
using daemon::field_type;
using daemon::read_field;
using daemon::value_range;

// ---- the field table (apd_fields()): each entry read below through read_field -------------

const field_spec kLeadSlots = daemon::integer_field(
    "", "lead_slots", kDefaultLeadSlots, value_range::closed(kMinLeadSlots, kMaxLeadSlots), "slots",
    "slot_request n comes this many slots before slot n (the PHY's lead)");
const field_spec kWatchdogSlots =
    daemon::integer_field("", "watchdog_slots", 1000, value_range::closed(0, 10'000'000), "slots",
                          "exit 4 when no slot_request came for this many slots; 0 = never");
const field_spec kStatsPeriod =
    daemon::number_field("", "stats_period_s", 2.0, value_range::open_closed(0, 3600), "s",
                         "stats and traces written this often while running");
const field_spec kQueueMode = daemon::choice_field(
    "queue", "mode", "per_user", {"per_user", "shared"}, "one queue per user, or one shared FIFO");
const field_spec kClampEnabled =
    daemon::boolean_field("clamp", "enabled", false, "the CLAMP router (Andrew & Hanly, CLAMP)");
const field_spec kClampA = daemon::number_field(
    "clamp", "a_bytes", 5500.0, value_range::non_negative(), "bytes", "a, eq. 13 (router)");
const field_spec kClampMuC =
    daemon::choice_field("clamp", "mu_c", "measured", {"measured", "all_backlogged"},
                         "mu_c of eq. 13: measured or all_backlogged");
const field_spec kHarqProcesses =
    daemon::integer_field("harq", "processes", 8, value_range::closed(1, harq::kMaxProcesses), "",
                          "HARQ processes per user");
const field_spec kHarqFeedbackTimeout =
    daemon::integer_field("harq", "feedback_timeout_slots", 16, value_range::closed(2, 1e6),
                          "slots", "a transmission with no feedback this long is a NACK");
const field_spec kPduFormat = daemon::choice_field(
    "pdu", "format", "standard", {"standard", "compact"}, "the MAC PDU format (pdu.h)");
const field_spec kClientWatchdogSlots = daemon::integer_field(
    "", "client_watchdog_slots", 1000, value_range::closed(0, 10'000'000), "slot requests",
    "exit 5 when a client sent nothing on the uplink for this many slot requests; 0 = never; "
    "absent: watchdog_slots");
const field_spec kSeccomp = daemon::boolean_field(
    "", "seccomp", true, "install the seccomp allow-list once set up (docs/security.md)");
const field_spec kQueueLimitBytes =
    daemon::integer_field("queue", "limit_bytes", 0, value_range::closed(0, 1e12), "bytes",
                          "each queue's limit (users[].queue_limit_bytes: one user's); 0 = none");
const field_spec kQueueLimitPackets =
    daemon::integer_field("queue", "limit_packets", 50, value_range::closed(0, 1e9), "packets",
                          "each queue's packet limit; 0 = none");
const field_spec kUserQueueLimitBytes =
    daemon::integer_field("users[]", "queue_limit_bytes", 0, value_range::closed(0, 1e12), "bytes",
                          "this user's queue limit; absent: queue.limit_bytes");
const field_spec kAqmEcn =
    daemon::boolean_field("aqm", "ecn", true, "mark ECN-capable packets instead of dropping them");
const field_spec kAqmSpareHandshake = daemon::boolean_field(
    "aqm", "spare_handshake", false,
    "a TCP SYN or SYN-ACK (never ECN-capable) is not early-dropped by an AQM that decides at "
    "arrival, only when the buffer is full (ns-2's one-way agents open no connection)");
const field_spec kAqmMarkNotEct = daemon::boolean_field(
    "aqm", "mark_not_ect", false,
    "a Not-ECT TCP segment other than a SYN (a retransmission or a pure ACK, RFC 3168 "
    "6.1.4-6.1.5) is CE-marked by the AQM's signal instead of dropped, as if ECN-capable: "
    "ns-2's ECN agents send every data packet ECT and no ACK through the queue (an ablation)");
const field_spec kHarqFirst = daemon::boolean_field(
    "scheduler", "harq_first", true,
    "a pending HARQ retransmission takes the slot before the scheduler chooses");
const field_spec kClampB =
    daemon::number_field("clamp", "b", 1.0, value_range::positive(), "", "b, eq. 7 (router)");
const field_spec kClampEmaRate = daemon::number_field(
    "clamp", "ema_rate_per_s", 2.0, value_range::positive(), "1/s", "q(n) = exp(-2I) (§IV-A)");
const field_spec kLinkMode =
    daemon::choice_field("link_adaptation", "mode", "table", {"table", "paper"},
                         "table: the MCS the CQI meets, with OLLA; paper: eq. 18 with a margin");
const field_spec kOlla = daemon::boolean_field("link_adaptation", "olla", true,
                                               "mode table: outer-loop offset from ACK/NACK");
const field_spec kTargetBler =
    daemon::number_field("link_adaptation", "target_bler", 0.1, value_range::open(0, 0.5), "",
                         "OLLA's per-attempt target");
const field_spec kMediumMode =
    daemon::choice_field("medium", "mode", "none", {"none", "scheduled", "node_fair"},
                         "the shared medium's uplink slots: none, scheduled or node_fair");
const field_spec kMediumStationBuffer =
    daemon::integer_field("medium", "station_buffer_packets", 100, value_range::closed(1, 100000),
                          "packets", "each station's uplink queue");
const field_spec kMediumStationQueue = daemon::choice_field(
    "medium", "station_queue", "ap", {"ap", "client"}, "where each station's uplink queue lives");
const field_spec kMacPcapMaxBytes = daemon::integer_field(
    "traces", "mac_pcap_max_bytes", 256.0 * (1 << 20), value_range::closed(1024, 1ull << 40),
    "bytes", "size limit of the MAC pcap; later records are left out");

// A registered scheduler parameter (sched.h) by name: the spec every kind that takes it shares.
const sched::param_spec& scheduler_param(std::string_view name) {
    for (const auto& k : sched::scheduler_kinds())
        for (const auto& p : k.params)
            if (p.name == name) return p;
    throw std::logic_error("apd: no scheduler parameter " + std::string(name));
}

value_range range_of(const param_range& r) { return {r.min, r.max, r.min_open, r.max_open}; }

// The plugin kinds' alpha (their fallback PF's): the registry's default and range.
double read_plugin_alpha(const config_node& s) {
    const sched::param_spec& a = scheduler_param("alpha");
    return s.get<double>("alpha", std::get<double>(a.default_value), range_of(a.range));
}

// The MAC library's validators name fields in their own terms ("red.max_p", "sched.alpha");
// rename the prefix to the YAML path so every error names the key the user wrote.
[[noreturn]] void rethrow_renamed(const std::invalid_argument& e,
                                  const std::vector<std::pair<std::string, std::string>>& map) {
    std::string msg = e.what();
    for (const auto& [from, to] : map) {
        if (msg.compare(0, from.size(), from) == 0) {
            msg = to + msg.substr(from.size());
            break;
        }
    }
    throw_invalid(msg);
}

// An old name still accepted: one warning line naming the field, the old and the new name.
void deprecated(const std::string& field, const std::string& old_name,
                const std::string& new_name) {
    spdlog::warn("{}: {} is deprecated, use {}", field, old_name, new_name);
}

// ---- aqm.params: aqm::param_fields, the keys Python's oppsched.mac.make_aqm takes too ------

void set_aqm_param(aqm::aqm_params& c, const aqm::param_field& f, const config_node& n,
                   const std::string& key) {
    switch (f.type) {
        case aqm::param_type::boolean:
            f.set(c, n.require<bool>(key));
            break;
        case aqm::param_type::number:
            f.set(c, n.require<double>(key));
            break;
        case aqm::param_type::integer:
            f.set(c, n.require<std::uint64_t>(key));
            break;
        case aqm::param_type::seconds: {
            // Its range is the registry's (validate()); here only what a time_ns can hold.
            const double t = n.require<double>(key);
            if (!(std::fabs(t) <= 9e9)) n.fail(key, format_number(t) + " s is out of range");
            f.set(c, t);
            break;
        }
        case aqm::param_type::choice:
            f.set(c, n.get_choice(key, f.choices.front(), f.choices));
            break;
        case aqm::param_type::number_list:
            f.set(c, n.require<std::vector<double>>(key));
            break;
    }
}

// The validators' labels ("reaqm.update_interval") as the config keys they check
// ("aqm.params.update_interval_s"), from the one parameter table.
std::vector<std::pair<std::string, std::string>> aqm_renames(aqm::aqm_kind kind) {
    std::vector<std::pair<std::string, std::string>> m;
    const std::string k(aqm::to_string(kind));
    for (const auto& f : aqm::param_fields(kind))
        if (f.label.rfind(k + ".", 0) == 0 && f.label != k + "." + f.name)
            m.emplace_back(f.label + ":", "aqm.params." + f.name + ":");
    m.emplace_back(k + ".", "aqm.params.");
    m.emplace_back("rate.capacity_bps", "aqm.params.capacity_bps");
    m.emplace_back("rate.sample_bytes", "aqm.params.rate_sample_bytes");
    m.emplace_back("rate.ema_weight", "aqm.params.rate_ema_weight");
    m.emplace_back("aqm.limits", "queue.limit_bytes/limit_packets");
    return m;
}

std::string json_of(const config_node& n);

// A C++ plugin's library and params (docs/extending.md, "C++ plugins"): each param a scalar,
// passed as its text and, when it reads as one, a number.
void read_cpp_library(const config_node& s, apd_params::cpp_plugin& p) {
    p.library = s.require<std::string>("library");
    if (p.library.empty()) s.fail("library", "must name the plugin's shared library (.so)");
    if (const auto params = s.optional_child("params"); params && !params->is_null()) {
        if (!params->is_map()) s.fail("params", "must be a mapping of the plugin's parameters");
        for (const auto& key : params->keys()) {
            params->mark_read(key);
            const config_node value = params->child(key);
            const YAML::Node& v = value.yaml();
            if (!v.IsScalar())
                params->fail(key,
                             "must be a number or a string (a C++ plugin's params are "
                             "scalars)");
            p.params.push_back(cplugin::param_from_text(key, v.Scalar()));
        }
    }
    s.mark_read("params");
}

// aqm.kind plugin: library, params; the queue is drop-tail's.
aqm::aqm_params read_cpp_aqm(const config_node& root, const config_node& a,
                             std::optional<apd_params::cpp_plugin>& plugin) {
    apd_params::cpp_plugin p;
    read_cpp_library(a, p);
    plugin = p;
    aqm::aqm_params c = aqm::default_config(aqm::aqm_kind::droptail);
    c.ecn = read_field<bool>(a, kAqmEcn);
    c.spare_handshake = read_field<bool>(a, kAqmSpareHandshake);  // no early drops to spare
    c.mark_not_ect = read_field<bool>(a, kAqmMarkNotEct);
    c.seed = root.get<std::uint64_t>("seed", 1);
    return c;
}

// aqm.kind python (docs/extending.md): file, class, params; the queue is drop-tail's.
aqm::aqm_params read_python_aqm(const config_node& root, const config_node& a,
                                std::optional<apd_params::python_plugin>& plugin) {
    apd_params::python_plugin p;
    p.file = a.require<std::string>("file");
    if (p.file.empty()) a.fail("file", "must name the plugin's .py file");
    p.class_name = a.require<std::string>("class");
    if (p.class_name.empty()) a.fail("class", "must name the plugin's class");
    p.params_json = "{}";
    if (const auto params = a.optional_child("params"); params && !params->is_null()) {
        if (!params->is_map()) a.fail("params", "must be a mapping of the plugin's parameters");
        p.params_json = json_of(*params);
    }
    a.mark_read("params");
    plugin = p;
    aqm::aqm_params c = aqm::default_config(aqm::aqm_kind::droptail);
    c.ecn = read_field<bool>(a, kAqmEcn);
    c.spare_handshake = read_field<bool>(a, kAqmSpareHandshake);  // no early drops to spare
    c.mark_not_ect = read_field<bool>(a, kAqmMarkNotEct);
    c.seed = root.get<std::uint64_t>("seed", 1);
    return c;
}

aqm::aqm_params read_aqm(const config_node& root, std::optional<apd_params::python_plugin>& plugin,
                         std::optional<apd_params::cpp_plugin>& cpp) {
    const config_node a = root.child_or_empty("aqm");
    std::vector<std::string> kinds;
    for (std::size_t i = 0; i < aqm::kAqmKindCount; ++i)
        kinds.emplace_back(aqm::to_string(static_cast<aqm::aqm_kind>(i)));
    kinds.emplace_back("python");
    kinds.emplace_back("plugin");
    const std::string kind_name = a.get<std::string>("kind", "droptail");
    if (kind_name == "python") return read_python_aqm(root, a, plugin);
    if (kind_name == "plugin") return read_cpp_aqm(root, a, cpp);
    const auto kind = aqm::aqm_kind_from_string(kind_name);
    if (!kind) {
        std::string all;
        for (const auto& k : kinds) all += (all.empty() ? "" : ", ") + k;
        a.fail("kind", "'" + kind_name + "' not one of " + all);
    }
    aqm::aqm_params c = aqm::default_config(*kind);
    c.ecn = read_field<bool>(a, kAqmEcn);
    c.spare_handshake = read_field<bool>(a, kAqmSpareHandshake);
    c.mark_not_ect = read_field<bool>(a, kAqmMarkNotEct);
    c.seed = root.get<std::uint64_t>("seed", 1);
    const config_node params = a.child_or_empty("params");
    if (!params.is_map()) a.fail("params", "must be a mapping");
    const auto& fields = aqm::param_fields(*kind);
    for (const auto& key : params.keys()) {
        const auto it = std::find_if(fields.begin(), fields.end(),
                                     [&](const aqm::param_field& f) { return f.name == key; });
        if (it != fields.end()) {
            set_aqm_param(c, *it, params, key);
            continue;
        }
        std::string known;
        for (const auto& f : fields) known += (known.empty() ? "" : ", ") + f.name;
        params.fail(key, "unknown parameter for aqm kind " + std::string(aqm::to_string(*kind)) +
                             " (known: " + known + ")");
    }
    return c;
}

// A YAML value as JSON (a plugin's params), every key under it marked read. Unquoted
// scalars that read as integers, numbers, booleans or null are those; anything else a string.
std::string json_of(const config_node& n) {
    const YAML::Node& y = n.yaml();
    if (y.IsMap()) {
        std::string out = "{";
        for (const auto& key : n.keys()) {
            n.mark_read(key);
            out += (out.size() > 1 ? ", " : "") + daemon::json_string(key) + ": " +
                   json_of(n.child(key));
        }
        return out + "}";
    }
    if (y.IsSequence()) {
        std::string out = "[";
        for (const auto& e : n.items()) out += (out.size() > 1 ? ", " : "") + json_of(e);
        return out + "]";
    }
    if (!y.IsDefined() || y.IsNull()) return "null";
    const std::string& v = y.Scalar();
    if (y.Tag() != "!") {
        if (v == "true" || v == "True" || v == "TRUE") return "true";
        if (v == "false" || v == "False" || v == "FALSE") return "false";
        char* end = nullptr;
        errno = 0;
        const double d = std::strtod(v.c_str(), &end);
        if (!v.empty() && end == v.c_str() + v.size() && errno == 0 && std::isfinite(d) &&
            v.find_first_of("xXpP") == std::string::npos)
            return v;
    }
    return daemon::json_string(v);
}

// scheduler.kind python: file, class, params, alpha, budget_fraction (docs/extending.md).
apd_params::python_plugin read_python_scheduler(const config_node& s) {
    apd_params::python_plugin p;
    p.file = s.require<std::string>("file");
    if (p.file.empty()) s.fail("file", "must name the plugin's .py file");
    p.class_name = s.require<std::string>("class");
    if (p.class_name.empty()) s.fail("class", "must name the plugin's class");
    p.alpha = read_plugin_alpha(s);
    p.budget_fraction = s.get<double>("budget_fraction", 0.5);
    if (!(p.budget_fraction > 0.0 && p.budget_fraction <= 1.0))
        s.fail("budget_fraction", format_number(p.budget_fraction) + " not in (0,1]");
    p.params_json = "{}";
    if (const auto params = s.optional_child("params"); params && !params->is_null()) {
        if (!params->is_map()) s.fail("params", "must be a mapping of the plugin's parameters");
        p.params_json = json_of(*params);
    }
    s.mark_read("params");
    return p;
}

// scheduler.kind plugin: library, params (scalars: each passed as its text and, when it reads
// as one, a number), alpha, budget_fraction (docs/extending.md, "C++ plugins").
apd_params::cpp_plugin read_cpp_scheduler(const config_node& s) {
    apd_params::cpp_plugin p;
    read_cpp_library(s, p);
    p.alpha = read_plugin_alpha(s);
    p.budget_fraction = s.get<double>("budget_fraction", 0.5);
    if (!(p.budget_fraction > 0.0 && p.budget_fraction <= 1.0))
        s.fail("budget_fraction", format_number(p.budget_fraction) + " not in (0,1]");
    return p;
}

// The policy, its kind and parameters read through the scheduler registry (sched.h), which
// checks the ranges; `harq_first` gets scheduler.harq_first (ap_core_params). Kind python:
// `plugin` gets the plugin, the policy is its fallback PF; kind plugin: `cpp` the same.
sched::policy_params read_scheduler(const config_node& root, std::size_t n_users, bool& harq_first,
                                    std::optional<apd_params::python_plugin>& plugin,
                                    std::optional<apd_params::cpp_plugin>& cpp) {
    const config_node s = root.child_or_empty("scheduler");
    harq_first = read_field<bool>(s, kHarqFirst);
    std::vector<std::string> kinds;
    for (const auto& k : sched::scheduler_kinds()) kinds.push_back(k.name);
    kinds.push_back("python");
    kinds.push_back("plugin");
    const std::string kind = s.get_choice("kind", "pf", kinds);
    if (kind == "python") {
        plugin = read_python_scheduler(s);
        return sched::pf_params{plugin->alpha};
    }
    if (kind == "plugin") {
        cpp = read_cpp_scheduler(s);
        return sched::pf_params{cpp->alpha};
    }
    const sched::scheduler_kind& spec = *sched::find_scheduler_kind(kind);
    const auto takes = [](const sched::scheduler_kind& k, const std::string& name) {
        return std::any_of(k.params.begin(), k.params.end(),
                           [&](const sched::param_spec& p) { return p.name == name; });
    };
    // Another kind's parameter: say which kinds take it.
    for (const auto& other : sched::scheduler_kinds())
        for (const auto& p : other.params)
            if (s.has(p.name) && !takes(spec, p.name)) {
                std::string with;
                for (const auto& k : sched::scheduler_kinds())
                    if (takes(k, p.name)) with += (with.empty() ? "" : ", ") + k.name;
                s.fail(p.name, "only valid with kind " + with);
            }
    sched::param_map values;
    for (const auto& p : spec.params) {
        if (!s.has(p.name)) continue;
        switch (p.type) {
            case param_type::number:
            case param_type::seconds:
                values[p.name] = s.require<double>(p.name);
                break;
            case param_type::integer:
                values[p.name] = s.require<std::uint64_t>(p.name);
                break;
            case param_type::boolean:
                values[p.name] = s.require<bool>(p.name);
                break;
            case param_type::choice:
                values[p.name] = s.require<std::string>(p.name);
                break;
            case param_type::number_list:
                values[p.name] = s.require<std::vector<double>>(p.name);
                break;
        }
    }
    sched::policy_params p;
    try {
        p = sched::policy_params_from(kind, values);
    } catch (const std::invalid_argument& e) {
        rethrow_renamed(e, {{"sched.", "scheduler."}});
    }
    if (const auto* w = std::get_if<sched::weighted_pf_params>(&p);
        w && w->weights.size() != n_users)
        s.fail("weights", std::to_string(w->weights.size()) + " weights for " +
                              std::to_string(n_users) + " users");
    return p;
}

}  // namespace

namespace {
// Every endpoint of the apd is bound. `curve`: the socket is a CURVE server (the uplinks
// with curve.secret_key_file), which may bind a non-loopback address.
void check_endpoint(const config_node& n, const char* key, const std::string& v, bool curve = false,
                    bool curve_applies = false) {
    if (v.rfind("ipc://", 0) != 0 && v.rfind("tcp://", 0) != 0 && v.rfind("inproc://", 0) != 0)
        n.fail(key, "'" + v + "' is not an ipc://, tcp:// or inproc:// endpoint");
    if (v.rfind("ipc://", 0) == 0 && v.size() - 6 > 107)
        n.fail(key, "'" + v + "' is longer than a Unix socket path (107 bytes)");
    if (const auto why = daemon::bind_refusal(v); !why.empty() && !curve)
        n.fail(key, why + (curve_applies ? "; or set curve.secret_key_file (CURVE keys from "
                                           "`oppsched keys generate`)"
                                         : "; the PHY's sockets stay on the AP host"));
}

// A key file field: its error names the field.
std::string key_file(const config_node& n, const std::string& key, bool secret) {
    const std::string path = n.require<std::string>(key);
    try {
        return daemon::read_curve_key_file(path, secret);
    } catch (const std::runtime_error& e) {
        n.fail(key, e.what());
    }
}
}  // namespace

const std::vector<field_spec>& apd_fields() {
    static const std::vector<field_spec> fields = [] {
        std::vector<field_spec> f = {kLeadSlots,
                                     kWatchdogSlots,
                                     kClientWatchdogSlots,
                                     kStatsPeriod,
                                     kSeccomp,
                                     kQueueMode,
                                     kQueueLimitBytes,
                                     kQueueLimitPackets,
                                     kUserQueueLimitBytes,
                                     kAqmEcn,
                                     kAqmSpareHandshake,
                                     kAqmMarkNotEct,
                                     kClampEnabled,
                                     kClampA,
                                     kClampB,
                                     kClampEmaRate,
                                     kClampMuC,
                                     kHarqProcesses,
                                     kHarqFeedbackTimeout,
                                     kPduFormat,
                                     kLinkMode,
                                     kOlla,
                                     kTargetBler,
                                     kMediumMode,
                                     kMediumStationBuffer,
                                     kMediumStationQueue,
                                     kMacPcapMaxBytes,
                                     kHarqFirst};
        std::vector<std::string> seen;
        for (const auto& k : sched::scheduler_kinds())
            for (const auto& p : k.params) {
                if (p.type == param_type::number_list ||
                    std::find(seen.begin(), seen.end(), p.name) != seen.end())
                    continue;
                seen.push_back(p.name);
                field_spec e;
                e.section = "scheduler";
                e.name = p.name;
                e.unit = p.unit;
                e.help = p.help;
                e.range = range_of(p.range);
                switch (p.type) {
                    case param_type::integer:
                        e.type = field_type::integer;
                        e.default_number =
                            static_cast<double>(std::get<std::uint64_t>(p.default_value));
                        break;
                    case param_type::boolean:
                        e.type = field_type::boolean;
                        e.default_number = std::get<bool>(p.default_value) ? 1.0 : 0.0;
                        break;
                    case param_type::choice:
                        e.type = field_type::choice;
                        e.default_text = std::get<std::string>(p.default_value);
                        break;
                    default:
                        e.type = field_type::number;
                        e.default_number = std::get<double>(p.default_value);
                }
                f.push_back(e);
            }
        return f;
    }();
    return fields;
}

apd_params load_apd_config(const std::string& path) {
    return read_apd_config(config_node::load_file(path));
}

apd_params read_apd_config(const config_node& root) {
    apd_params c;
    ap::ap_core_params& core = c.core;

    c.tun = root.require<std::string>("tun");
    if (c.tun.empty() || c.tun.size() > 15) root.fail("tun", "'" + c.tun + "' not a device name");
    core.slot_s = root.require<double>("slot_s", value_range::open_closed(0, 1));
    core.lead_slots = read_field<std::uint32_t>(root, kLeadSlots);
    c.log_level = root.get_choice("log_level", "info",
                                  {"trace", "debug", "info", "warn", "error", "critical", "off"});
    root.get<std::uint64_t>("seed", 1);  // read again in read_aqm
    c.watchdog_slots = read_field<std::uint32_t>(root, kWatchdogSlots);
    c.stats_period_s = read_field<double>(root, kStatsPeriod);
    c.client_watchdog_slots = daemon::read_optional_field<std::uint32_t>(root, kClientWatchdogSlots)
                                  .value_or(c.watchdog_slots);
    c.seccomp = read_field<bool>(root, kSeccomp);

    // ---- CURVE (docs/security.md, "Runs across machines") ----
    const config_node cv = root.child_or_empty("curve");
    if (cv.has("secret_key_file")) {
        if (!daemon::curve_available())
            cv.fail("secret_key_file", "this libzmq was built without CURVE (zmq_has(\"curve\"))");
        c.curve.secret_key = key_file(cv, "secret_key_file", true);
        c.curve.public_key = daemon::curve_public_of(c.curve.secret_key);
    }
    const bool curve = c.curve.enabled();

    const config_node ep = root.child("endpoints");
    c.ep_phy_requests = ep.require<std::string>("phy_requests");
    c.ep_phy_grants = ep.require<std::string>("phy_grants");
    c.ep_uplink = ep.require<std::string>("uplink");
    check_endpoint(ep, "phy_requests", c.ep_phy_requests);
    check_endpoint(ep, "phy_grants", c.ep_phy_grants);
    check_endpoint(ep, "uplink", c.ep_uplink, curve, true);
    if (c.ep_phy_requests == c.ep_phy_grants || c.ep_phy_requests == c.ep_uplink ||
        c.ep_phy_grants == c.ep_uplink)
        root.fail("endpoints", "the three endpoints must differ");

    // The same keys as oppsched-client's `zmq` section.
    const config_node z = root.child_or_empty("zmq");
    c.zmq.send_hwm = c.zmq.recv_hwm = z.get<int>("hwm", 1000, value_range::closed(1, 1e6));
    c.zmq.send_timeout_ms = c.zmq.recv_timeout_ms =
        z.get<int>("timeout_ms", 100, value_range::closed(1, 60000));
    c.zmq.max_msg_size =
        z.get<std::int64_t>("max_msg_bytes", static_cast<std::int64_t>(wire::kMaxFrameLen),
                            value_range::closed(64, 16e6));
    c.tun_batch = z.get<std::size_t>("tun_batch", 64, value_range::closed(1, 100000));

    // ---- users ----
    const config_node users = root.child("users");
    const auto items = users.items();
    if (items.empty()) users.fail("", "must list at least one user");
    core.users.assign(items.size(), ap::ap_user_params{});
    std::vector<bool> seen(items.size(), false);
    for (const auto& it : items) {
        const auto id = it.require<std::uint32_t>("id", value_range::closed(0, 65535));
        if (id >= items.size())
            it.fail("id", std::to_string(id) + " not in [0," + std::to_string(items.size() - 1) +
                              "] (ids are 0..N-1)");
        if (seen[id]) it.fail("id", std::to_string(id) + " is used twice");
        seen[id] = true;
        ap::ap_user_params& u = core.users[id];
        u.name = it.require<std::string>("name");
        if (c.ep_uplink_user.size() < items.size()) c.ep_uplink_user.resize(items.size());
        const std::string up = it.get<std::string>("uplink", "");
        if (!up.empty()) {
            check_endpoint(it, "uplink", up, curve, true);
            for (const std::string* other : {&c.ep_phy_requests, &c.ep_phy_grants, &c.ep_uplink})
                if (up == *other) it.fail("uplink", "'" + up + "' is also another endpoint");
            for (const auto& o : c.ep_uplink_user)
                if (up == o) it.fail("uplink", "'" + up + "' is the uplink of another user");
        }
        c.ep_uplink_user[id] = up;
        if (curve) {
            if (!it.has("curve_public_key_file"))
                it.fail("curve_public_key_file", "required with curve.secret_key_file");
            const std::string pub = key_file(it, "curve_public_key_file", false);
            if (pub == c.curve.public_key)
                it.fail("curve_public_key_file", "is the apd's own public key");
            if (!c.curve_users.emplace(pub, std::to_string(id)).second)
                it.fail("curve_public_key_file", "the same key as another user's");
        } else if (it.has("curve_public_key_file")) {
            it.fail("curve_public_key_file", "only valid with curve.secret_key_file");
        }
        if (c.ep_phy_uplink_rx.size() < items.size()) c.ep_phy_uplink_rx.resize(items.size());
        const std::string urx = it.get<std::string>("phy_uplink_rx", "");
        if (!urx.empty()) {
            check_endpoint(it, "phy_uplink_rx", urx);
            for (const std::string* other : {&c.ep_phy_requests, &c.ep_phy_grants, &c.ep_uplink})
                if (urx == *other)
                    it.fail("phy_uplink_rx", "'" + urx + "' is also another endpoint");
            for (const auto& o : c.ep_uplink_user)
                if (urx == o) it.fail("phy_uplink_rx", "'" + urx + "' is also a user's uplink");
            for (const auto& o : c.ep_phy_uplink_rx)
                if (urx == o)
                    it.fail("phy_uplink_rx", "'" + urx + "' is the phy_uplink_rx of another user");
        }
        c.ep_phy_uplink_rx[id] = urx;
        if (c.ep_grants.size() < items.size()) c.ep_grants.resize(items.size());
        const std::string gr = it.get<std::string>("grants", "");
        if (!gr.empty()) {
            check_endpoint(it, "grants", gr);
            for (const std::string* other : {&c.ep_phy_requests, &c.ep_phy_grants, &c.ep_uplink})
                if (gr == *other) it.fail("grants", "'" + gr + "' is also another endpoint");
            for (const auto& o : c.ep_grants)
                if (gr == o)
                    it.fail("grants", "'" + gr + "' is the grants endpoint of another user");
        }
        c.ep_grants[id] = gr;
        u.addresses = it.get<std::vector<std::string>>("addresses", {});
        u.queue_limit_bytes =  // kUserQueueLimitBytes (one table entry for every users[i])
            it.get_optional<std::size_t>(kUserQueueLimitBytes.name, kUserQueueLimitBytes.range);
        u.queue_limit_packets =
            it.get_optional<std::size_t>("queue_limit_packets", value_range::closed(0, 1e9));
    }

    // ---- queues and AQM ----
    const config_node q = root.child_or_empty("queue");
    const std::string mode = read_field<std::string>(q, kQueueMode);
    core.queue_mode = mode == "shared" ? aqm::queue_mode::shared : aqm::queue_mode::per_user;
    core.aqm = read_aqm(root, c.python_aqm, c.cpp_aqm);
    // SPM-AF's high-priority mark as the senders' marker writes it (ap_core_params).
    if (const auto d = root.child_or_empty("aqm").get_optional<std::uint32_t>(
            "priority_dscp", value_range::closed(0, 63)))
        core.priority_dscp = static_cast<std::uint8_t>(*d);
    core.aqm.limits.bytes = daemon::read_optional_field<std::size_t>(q, kQueueLimitBytes)
                                .value_or(kQueueLimitBytes.default_number);
    core.aqm.limits.packets = daemon::read_optional_field<std::size_t>(q, kQueueLimitPackets)
                                  .value_or(kQueueLimitPackets.default_number);
    try {
        aqm::validate(core.aqm);
    } catch (const std::invalid_argument& e) {
        rethrow_renamed(e, aqm_renames(core.aqm.kind()));
    }
    if (core.queue_mode == aqm::queue_mode::per_user) {
        for (std::size_t i = 0; i < items.size(); ++i) {
            const auto& u = core.users[i];
            aqm::aqm_params uc = core.aqm;
            if (u.queue_limit_bytes) uc.limits.bytes = *u.queue_limit_bytes;
            if (u.queue_limit_packets) uc.limits.packets = *u.queue_limit_packets;
            try {
                aqm::validate(uc);
            } catch (const std::invalid_argument& e) {
                auto m = aqm_renames(core.aqm.kind());
                m.back().second = "users[id " + std::to_string(i) + "].queue_limit_bytes/packets";
                rethrow_renamed(e, m);
            }
        }
    }

    // ---- CLAMP ----
    const config_node cl = root.child_or_empty("clamp");
    core.clamp.enabled = read_field<bool>(cl, kClampEnabled);
    core.clamp.router.a_bytes = read_field<double>(cl, kClampA);
    core.clamp.router.b = read_field<double>(cl, kClampB);
    core.clamp.router.ema_rate_per_s = read_field<double>(cl, kClampEmaRate);
    core.clamp.mu_init_slots =
        cl.get<std::uint32_t>("mu_init_slots", 32, value_range::closed(1, 1e7));
    core.clamp.mu_ema_weight =
        cl.get<double>("mu_ema_weight", 0.01, value_range::open_closed(0, 1));
    core.clamp.mu_floor_bps = cl.get<double>("mu_floor_bps", 1000.0, value_range::positive());
    core.clamp.mu = read_field<std::string>(cl, kClampMuC) == "all_backlogged"
                        ? ap::mu_c_mode::all_backlogged
                        : ap::mu_c_mode::measured;
    try {
        core.clamp.router.validate();
    } catch (const std::invalid_argument& e) {
        rethrow_renamed(e, {{"clamp.router.", "clamp."}});
    }

    // ---- scheduler ----
    core.scheduler = read_scheduler(root, core.users.size(), core.harq_first, c.python_scheduler,
                                    c.cpp_scheduler);
    try {
        sched::scheduler_params sc;
        sc.num_users = core.users.size();
        sc.policy = core.scheduler;
        sched::validate(sc);
    } catch (const std::invalid_argument& e) {
        rethrow_renamed(e, {{"sched.", "scheduler."}});
    }

    // ---- HARQ ----
    const config_node h = root.child_or_empty("harq");
    core.harq.num_processes = read_field<std::uint32_t>(h, kHarqProcesses);
    core.harq.max_transmissions = h.get<std::uint32_t>(
        "max_transmissions", 5, value_range::closed(1, harq::kMaxTransmissions));
    core.harq.rv_sequence =
        h.get<std::vector<std::uint8_t>>("rv_sequence", {0, 2, 3, 1}, value_range::closed(0, 3));
    core.harq.feedback_timeout_slots = read_field<std::int64_t>(h, kHarqFeedbackTimeout);
    // Default: the earliest slot the feedback of slot s can act on (ap_core.h), below the timeout.
    const std::int64_t delay_default =
        std::min<std::int64_t>(core.lead_slots + 2, core.harq.feedback_timeout_slots - 1);
    core.harq.feedback_delay_slots =
        h.get<std::int64_t>("feedback_delay_slots", delay_default, value_range::closed(1, 1e6));
    try {
        harq::harq_params hc = core.harq;
        hc.num_users = static_cast<std::uint32_t>(core.users.size());
        harq::validate(hc);
    } catch (const std::invalid_argument& e) {
        rethrow_renamed(e, {{"harq.num_processes", "harq.processes"}});
    }

    // ---- link adaptation ----
    const config_node la = root.child_or_empty("link_adaptation");
    std::string table = la.get<std::string>("table", "evdo");
    if (table == "clamp") {  // "clamp" names the CLAMP algorithm only: the old name
        deprecated(la.field("table"), "value 'clamp'", "'shannon'");
        table = "shannon";
    }
    linkadapt::ofdm_numerology num;
    num.sample_rate_hz = la.get<double>("ofdm_sample_rate_hz", 1e6, value_range::positive());
    // The abstract PHY's `shannon` section (same names, same defaults): both sides must build
    // the same `shannon` table. `clamp` is its old name.
    if (la.has("clamp") && la.has("shannon"))
        la.fail("clamp", "renamed to 'shannon', which is given too; keep 'shannon'");
    if (la.has("clamp")) deprecated(la.field("clamp"), "key 'clamp'", "'shannon'");
    const config_node lc = la.child_or_empty(la.has("clamp") ? "clamp" : "shannon");
    ap::shannon_table_params ct;
    ct.w0_hz = lc.get<double>("w0_hz", ct.w0_hz, value_range::closed(1, 1e12));
    ct.cmax_bps = lc.get<double>("cmax_bps", ct.cmax_bps, value_range::closed(1, 1e12));
    ct.levels = lc.get<std::uint32_t>("levels", ct.levels, value_range::closed(1, 255));
    try {
        if (auto t = ap::mcs_table_by_name(table, num, ct)) {
            core.table = *t;
        } else {
            std::ifstream in(table);
            if (!in)
                la.fail("table", "'" + table +
                                     "' is neither evdo, ofdm_provisional, shannon nor a "
                                     "readable CSV file");
            std::stringstream ss;
            ss << in.rdbuf();
            auto r = linkadapt::mcs_table::from_csv(ss.str(), table);
            if (!r) la.fail("table", "'" + table + "': " + r.error());
            core.table = r.value();
        }
    } catch (const daemon::config_error&) {
        throw;
    } catch (const std::invalid_argument& e) {
        la.fail("table", "'" + table + "': " + e.what());
    }
    const std::string link = read_field<std::string>(la, kLinkMode);
    core.link = link == "paper" ? ap::link_mode::paper : ap::link_mode::table;
    // link_mode::paper: eq. 18 with the W0 and C_max of the `shannon` section.
    core.paper.w0_hz = ct.w0_hz;
    core.paper.cmax_bps = ct.cmax_bps;
    const config_node lp = la.child_or_empty("paper");
    core.paper.target_loss =
        lp.get<double>("target_loss", core.paper.target_loss, value_range::open(0, 1));
    core.paper.margin_step =
        lp.get<double>("margin_step", core.paper.margin_step, value_range::closed(0, 1));
    core.paper.margin_max =
        lp.get<double>("margin_max", core.paper.margin_max, value_range::closed_open(0, 1));
    core.paper.margin_min =
        lp.get<double>("margin_min", core.paper.margin_min,
                       value_range::closed_open(channel::kClampMarginFloor, core.paper.margin_max));
    core.paper.margin_init =
        lp.get<double>("margin_init", core.paper.margin_init,
                       value_range::closed(core.paper.margin_min, core.paper.margin_max));
    core.paper.cqi_ahead_slots =
        lp.get<std::uint32_t>("cqi_ahead_slots", 0, value_range::closed(0, 1e6));
    core.olla_enabled = read_field<bool>(la, kOlla);
    core.olla.target_bler = read_field<double>(la, kTargetBler);
    core.olla.delta_down_db = la.get<double>("delta_down_db", 0.5);
    core.olla.delta_up_db = la.get<double>("delta_up_db", 0.0);
    core.olla.min_offset_db = la.get<double>("min_offset_db", -10.0);
    core.olla.max_offset_db = la.get<double>("max_offset_db", 10.0);
    core.olla.initial_offset_db = la.get<double>("initial_offset_db", 0.0);
    try {
        linkadapt::olla check(core.olla);
    } catch (const std::invalid_argument& e) {
        rethrow_renamed(e, {{"olla.", "link_adaptation."}});
    }

    // ---- slot clock ----
    const config_node sc = root.child_or_empty("slot_clock");
    core.restart_backjump_slots =
        sc.get<std::int64_t>("restart_backjump_slots", 1000, value_range::closed(1, 1e12));
    core.grant_cache = sc.get<std::uint32_t>("grant_cache", 64, value_range::closed(1, 1e6));

    // ---- MAC PDU format (pdu.h): compact lets the smallest TBs carry data ----
    const config_node pd = root.child_or_empty("pdu");
    core.pdu_format = *pdu::pdu_format_from_string(read_field<std::string>(pd, kPduFormat));
    // The integrity tag (integrity.h): the testbed key the clients hold too, and the run's id
    // (the runner draws one per run and gives it to every daemon), from which the downlink
    // key (the core's) and the uplink key (the medium's, below) are derived.
    std::optional<integrity::tag_key> uplink_key;
    if (const auto keys = daemon::read_integrity_keys(pd)) {
        core.integrity_key = keys->downlink;
        uplink_key = keys->uplink;
    }

    // ---- the shared medium (medium.h) ----
    {
        const config_node md = root.child_or_empty("medium");
        ap::medium_params& mp = c.medium;
        mp.mode = *ap::medium_mode_from(read_field<std::string>(md, kMediumMode));
        mp.station_buffer_packets = read_field<std::uint32_t>(md, kMediumStationBuffer);
        mp.uplink_mean_snr_db =
            md.get<double>("uplink_mean_snr_db", 20.0, value_range::closed(-50, 100));
        mp.uplink_doppler_hz =
            md.get<double>("uplink_doppler_hz", 0.6, value_range::closed(0, 10000));
        mp.max_transmissions = md.get<std::uint32_t>(
            "max_transmissions", core.harq.max_transmissions, value_range::closed(1, 64));
        mp.pf_alpha = md.get<double>("pf_alpha", 0.01, value_range::open_closed(0, 1));
        mp.seed = root.get<std::uint64_t>("seed", 1);
        mp.lead_slots = core.lead_slots;
        mp.olla_enabled = core.olla_enabled;
        mp.olla = core.olla;
        // model: the abstract PHY's SNR threshold in the apd; phy: the sample PHY decodes
        // the uplink TBs (users[].phy_uplink_rx carries its reports).
        mp.decode = md.get_choice("uplink_decode", "model", {"model", "phy"}) == "phy"
                        ? ap::uplink_decode::phy
                        : ap::uplink_decode::model;
        mp.harq_processes = md.get<std::uint32_t>("harq_processes", 8, value_range::closed(1, 16));
        mp.feedback_timeout_slots =
            md.get<std::uint32_t>("feedback_timeout_slots", 100, value_range::closed(1, 100000));
        mp.queue = read_field<std::string>(md, kMediumStationQueue) == "client"
                       ? ap::station_queue::client
                       : ap::station_queue::ap;
        mp.integrity_key = uplink_key;
        if (mp.queue == ap::station_queue::client && mp.mode != ap::medium_mode::none)
            for (std::size_t u = 0; u < c.ep_grants.size(); ++u)
                if (c.ep_grants[u].empty())
                    md.fail("station_queue", "'client' needs users[id " + std::to_string(u) +
                                                 "].grants (where the station gets its uplink "
                                                 "grants)");
        if (mp.decode == ap::uplink_decode::phy && mp.mode != ap::medium_mode::none)
            for (std::size_t u = 0; u < c.ep_phy_uplink_rx.size(); ++u)
                if (c.ep_phy_uplink_rx[u].empty())
                    md.fail("uplink_decode",
                            "'phy' needs users[id " + std::to_string(u) +
                                "].phy_uplink_rx (the PHY's receiver reports for that station)");
    }

    // ---- traces ----
    const config_node tr = root.child_or_empty("traces");
    c.trace_slots = tr.get<std::string>("slots", "");
    c.trace_packets = tr.get<std::string>("packets", "");
    c.trace_medium = tr.get<std::string>("medium", "");
    c.stats_path = tr.get<std::string>("stats", "");
    c.trace_mac_pcap = tr.get<std::string>("mac_pcap", "");
    c.mac_pcap_max_bytes = read_field<std::uint64_t>(tr, kMacPcapMaxBytes);
    core.record_slots = !c.trace_slots.empty();
    core.record_packets = !c.trace_packets.empty();

    root.check_no_unknown_keys();
    core.validate();  // the combinations (addresses, limits, table vs slot)

    // Every grant must fit a message: frame header 16 + slot_grant fields 17 + TB + CRC 4.
    std::size_t max_tb = 0;
    for (std::size_t m = 0; m < core.table.size(); ++m)
        max_tb = std::max<std::size_t>(
            max_tb,
            std::min<std::size_t>(core.table.bytes_per_slot(static_cast<int>(m), core.slot_s),
                                  pdu::kMaxPduBytes));
    const std::size_t max_grant = wire::kHeaderLen + 17 + max_tb + wire::kTrailerLen;
    if (static_cast<std::size_t>(c.zmq.max_msg_size) < max_grant)
        z.fail("max_msg_bytes", std::to_string(c.zmq.max_msg_size) + " < " +
                                    std::to_string(max_grant) + ", the largest slot_grant (table " +
                                    core.table.name() + ", slot_s " + std::to_string(core.slot_s) +
                                    ")");
    return c;
}

}  // namespace oppsched::apd
