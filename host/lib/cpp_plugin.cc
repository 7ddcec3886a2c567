// Scheduler policies in shared libraries: see oppsched/cpp_plugin.h.
#include "oppsched/cpp_plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>

#include "aqm_internal.h"
#include "oppsched/tcpip.h"
#include "oppsched/validation.h"

namespace oppsched::cplugin {

class library {
  public:
    library(void* handle, const oppsched_plugin_v1* desc, std::string path)
        : handle_(handle), desc_(desc), path_(std::move(path)), name_(desc->name) {}
    ~library() { dlclose(handle_); }
    library(const library&) = delete;
    library& operator=(const library&) = delete;

    const oppsched_plugin_v1& desc() const { return *desc_; }
    const std::string& path() const { return path_; }
    const std::string& name() const { return name_; }

  private:
    void* handle_;
    const oppsched_plugin_v1* desc_;
    std::string path_;
    std::string name_;
};

namespace {

constexpr std::size_t kErrorLen = 512;

[[noreturn]] void refuse(const std::string& field, const std::string& path,
                         const std::string& why) {
    throw plugin_error(field + ": " + path + ": " + why);
}

const char* family_name(std::uint32_t f) {
    switch (f) {
        case OPPSCHED_FAMILY_SCHEDULER:
            return "scheduler";
        case OPPSCHED_FAMILY_AQM:
            return "aqm";
        default:
            return "unknown";
    }
}

// Opens the library and checks its description against `family`'s table.
std::shared_ptr<const library> open_library(const std::string& path, const std::string& field,
                                            std::uint32_t family) {
    if (path.empty()) throw plugin_error(field + ": must name the plugin's shared library");
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
        refuse(field, path, errno == ENOENT ? "no such file" : std::strerror(errno));
    if (!S_ISREG(st.st_mode)) refuse(field, path, "not a regular file");
    if (::access(path.c_str(), R_OK) != 0)
        refuse(field, path, "not readable by this user (uid " + std::to_string(::getuid()) + ")");
    // dlopen searches the library path for a name without a slash: never for a plugin.
    const std::string where = path.find('/') == std::string::npos ? "./" + path : path;
    dlerror();
    void* handle = dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char* e = dlerror();
        refuse(field, path, std::string("cannot be opened: ") + (e ? e : "dlopen failed"));
    }
    const auto close_and_refuse = [&](const std::string& why) {
        dlclose(handle);
        refuse(field, path, why);
    };
    dlerror();
    void* sym = dlsym(handle, OPPSCHED_PLUGIN_ENTRY_SYMBOL);
    if (!sym)
        close_and_refuse("exports no " OPPSCHED_PLUGIN_ENTRY_SYMBOL
                         " (extern \"C\" const oppsched_plugin_v1* oppsched_plugin_entry(void), "
                         "oppsched/plugin_api.h)");
    oppsched_plugin_entry_fn entry;
    static_assert(sizeof entry == sizeof sym);
    std::memcpy(&entry, &sym, sizeof entry);
    const oppsched_plugin_v1* desc = entry();
    if (!desc) close_and_refuse(OPPSCHED_PLUGIN_ENTRY_SYMBOL "() returned NULL");
    if (desc->abi_version != OPPSCHED_PLUGIN_ABI_VERSION)
        close_and_refuse("ABI version " + std::to_string(desc->abi_version) +
                         ", this oppsched takes " + std::to_string(OPPSCHED_PLUGIN_ABI_VERSION) +
                         ": rebuild the plugin against oppsched/plugin_api.h");
    if (desc->family != family)
        close_and_refuse("a plugin of family " + std::string(family_name(desc->family)) + " (" +
                         std::to_string(desc->family) + "), not " +
                         (family == OPPSCHED_FAMILY_AQM ? "an aqm" : "a scheduler") + " plugin");
    if (!desc->name || !*desc->name) close_and_refuse("the plugin has no name");
    if (family == OPPSCHED_FAMILY_SCHEDULER) {
        const oppsched_scheduler_v1* t = desc->scheduler;
        if (!t) close_and_refuse("the plugin has no scheduler table");
        if (!t->create) close_and_refuse("its scheduler table has no create()");
        if (!t->destroy) close_and_refuse("its scheduler table has no destroy()");
        if (!t->select) close_and_refuse("its scheduler table has no select()");
    } else {
        const oppsched_aqm_v1* t = desc->aqm;
        if (!t) close_and_refuse("the plugin has no aqm table");
        if (!t->create) close_and_refuse("its aqm table has no create()");
        if (!t->destroy) close_and_refuse("its aqm table has no destroy()");
        if (!t->enqueue) close_and_refuse("its aqm table has no enqueue()");
        if (!t->dequeue) close_and_refuse("its aqm table has no dequeue()");
    }
    return std::make_shared<const library>(handle, desc, path);
}

void log_default(const std::string& s) { std::cerr << s << '\n' << std::flush; }

}  // namespace

param param_from_text(std::string key, std::string text) {
    double number = std::numeric_limits<double>::quiet_NaN();
    if (!text.empty()) {
        char* end = nullptr;
        errno = 0;
        const double d = std::strtod(text.c_str(), &end);
        if (end == text.c_str() + text.size() && errno == 0 && std::isfinite(d) &&
            text.find_first_of("xXpP") == std::string::npos)
            number = d;
    }
    return {std::move(key), std::move(text), number};
}

void scheduler_options::validate() const {
    if (!(alpha > 0.0 && alpha <= 1.0))
        throw_invalid("scheduler.alpha: " + format_number(alpha) + " not in (0,1]");
    if (!(slot_s > 0.0 && slot_s <= 1.0))
        throw_invalid("scheduler.slot_s: " + format_number(slot_s) + " not in (0,1]");
    if (!(budget_fraction > 0.0 && budget_fraction <= 1.0))
        throw_invalid("scheduler.budget_fraction: " + format_number(budget_fraction) +
                      " not in (0,1]");
}

cpp_scheduler::cpp_scheduler(std::shared_ptr<const library> lib, const std::vector<param>& params,
                             std::size_t num_users, scheduler_options options)
    : lib_(std::move(lib)), table_(lib_->desc().scheduler), opt_(std::move(options)) {
    opt_.validate();
    if (!opt_.log) opt_.log = log_default;
    budget_ns_ = static_cast<std::int64_t>(std::llround(opt_.budget_s() * 1e9));
    sched::scheduler_params pf;
    pf.num_users = num_users;
    pf.policy = sched::pf_params{opt_.alpha};
    pf_ = sched::make_scheduler(pf);
    std::vector<oppsched_param> c;
    c.reserve(params.size());
    for (const auto& p : params) c.push_back({p.key.c_str(), p.text.c_str(), p.number});
    char error[kErrorLen] = {0};
    self_ = table_->create(c.data(), c.size(), num_users, error, sizeof error);
    if (!self_) {
        error[kErrorLen - 1] = '\0';
        refuse(opt_.field, lib_->path(),
               "plugin " + lib_->name() +
                   " refused its params: " + (error[0] ? error : "create() returned NULL"));
    }
    views_.resize(num_users);
    state_.backlog_bytes.resize(num_users, 0);
    state_.hol_delay_s.resize(num_users, 0.0);
}

cpp_scheduler::~cpp_scheduler() {
    if (self_) table_->destroy(self_);
}

const std::string& cpp_scheduler::plugin_name() const { return lib_->name(); }

void cpp_scheduler::set_num_users(std::size_t n) {
    pf_->set_num_users(n);
    views_.resize(n);
    state_.backlog_bytes.resize(n, 0);
    state_.hol_delay_s.resize(n, 0.0);
    if (table_->set_num_users) table_->set_num_users(self_, n);
}

void cpp_scheduler::set_queue_state(const sched::queue_state& state) {
    state_ = state;
    have_state_ = true;
}

std::int64_t cpp_scheduler::slot_now() const { return have_state_ ? state_.slot : pf_->slots(); }

int cpp_scheduler::choose(const std::vector<double>& rate_bps,
                          const std::vector<bool>& backlogged) const {
    const auto fallback = [&] {
        ++stats_.fallbacks;
        return pf_->choose(rate_bps, backlogged);
    };
    const std::size_t n = num_users();
    if (rate_bps.size() != n || backlogged.size() != n)
        return pf_->choose(rate_bps, backlogged);  // throws, naming the size
    candidates_.clear();
    views_.clear();
    // avg_bps is T_i as PF's metric sees it (sched.h): R_i / N before the first positive rate.
    const auto& avg = pf_->averages();
    for (std::size_t i = 0; i < n; ++i) {
        if (!backlogged[i]) continue;
        candidates_.push_back(static_cast<int>(i));
        oppsched_user_view v{};
        v.id = static_cast<std::uint32_t>(i);
        v.backlog_bytes = have_state_ && i < state_.backlog_bytes.size()
                              ? static_cast<double>(state_.backlog_bytes[i])
                              : std::numeric_limits<double>::infinity();
        v.rate_bps = rate_bps[i];
        v.hol_delay_s = have_state_ && i < state_.hol_delay_s.size() ? state_.hol_delay_s[i] : 0.0;
        v.avg_bps = avg[i] > 0.0
                        ? avg[i]
                        : std::max(rate_bps[i] / static_cast<double>(n), sched::kMinAverageBps);
        views_.push_back(v);
    }
    if (candidates_.empty()) return sched::kNoUser;
    const auto t0 = std::chrono::steady_clock::now();
    const std::int64_t answer = table_->select(self_, slot_now(), views_.data(), views_.size());
    const std::int64_t took =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    if (answer == OPPSCHED_PLUGIN_ERROR) {
        ++stats_.exceptions;
        return fallback();
    }
    ++stats_.decisions;
    stats_.decision_ns += static_cast<std::uint64_t>(took);
    if (took > budget_ns_) {
        ++stats_.deadline_misses;
        return fallback();
    }
    if (answer == OPPSCHED_NO_USER) return sched::kNoUser;
    if (answer >= 0 && static_cast<std::uint64_t>(answer) < candidates_.size())
        return candidates_[static_cast<std::size_t>(answer)];
    ++stats_.invalid_decisions;
    if (!logged_invalid_) {
        logged_invalid_ = true;
        opt_.log("scheduler plugin " + lib_->name() + ": select() answered " +
                 std::to_string(answer) + " with " + std::to_string(candidates_.size()) +
                 " candidate(s) (counted in scheduler.plugin_invalid_decisions; PF decides; "
                 "logged once)");
    }
    return fallback();
}

void cpp_scheduler::update(const std::vector<double>& rate_bps, int served, double served_bps) {
    const std::int64_t slot = slot_now();
    pf_->update(rate_bps, served, served_bps);
    if (!table_->served) return;
    const double bytes = served == sched::kNoUser ? 0.0 : served_bps * opt_.slot_s / 8.0;
    table_->served(self_, slot, served == sched::kNoUser ? OPPSCHED_NO_USER : served,
                   static_cast<std::uint64_t>(std::floor(bytes)));
}

std::vector<std::pair<std::string, std::uint64_t>> cpp_scheduler::counters() const {
    return {{"plugin_decisions", stats_.decisions},
            {"plugin_deadline_misses", stats_.deadline_misses},
            {"plugin_exceptions", stats_.exceptions},
            {"plugin_invalid_decisions", stats_.invalid_decisions},
            {"plugin_fallbacks", stats_.fallbacks},
            {"plugin_decision_ns", stats_.decision_ns}};
}

std::function<std::unique_ptr<sched::scheduler_policy>(std::size_t)> load_scheduler(
    const std::string& path, const std::vector<param>& params, const scheduler_options& options,
    std::size_t num_users) {
    options.validate();
    std::shared_ptr<const library> lib =
        open_library(path, options.field, OPPSCHED_FAMILY_SCHEDULER);
    // One instance now, so that params the plugin refuses are refused at load.
    cpp_scheduler probe(lib, params, num_users, options);
    return [lib, params, options](std::size_t n) -> std::unique_ptr<sched::scheduler_policy> {
        return std::make_unique<cpp_scheduler>(lib, params, n, options);
    };
}

// ---- AQM -------------------------------------------------------------------------------

namespace {

// The C table's instance for one queue, on a drop-tail FIFO with the queue's limits; every
// drop has its cause as with python_aqm (host/pyplugin), which this mirrors answer for answer.
class cpp_aqm final : public aqm::detail::discipline_base {
  public:
    cpp_aqm(std::shared_ptr<const library> lib, const std::vector<param>& params,
            const aqm::aqm_params& config, const std::string& field)
        : discipline_base(config),
          lib_(std::move(lib)),
          table_(lib_->desc().aqm),
          fifo_(config.limits) {
        std::vector<oppsched_param> c;
        c.reserve(params.size());
        for (const auto& p : params) c.push_back({p.key.c_str(), p.text.c_str(), p.number});
        char error[kErrorLen] = {0};
        self_ = table_->create(c.data(), c.size(), error, sizeof error);
        if (!self_) {
            error[kErrorLen - 1] = '\0';
            refuse(field, lib_->path(),
                   "plugin " + lib_->name() +
                       " refused its params: " + (error[0] ? error : "create() returned NULL"));
        }
        queue_.limit_bytes = config.limits.bytes;
        queue_.limit_packets = config.limits.packets;
        queue_.ecn = config.ecn ? 1u : 0u;
    }
    ~cpp_aqm() override {
        if (self_) table_->destroy(self_);
    }
    cpp_aqm(const cpp_aqm&) = delete;
    cpp_aqm& operator=(const cpp_aqm&) = delete;

    aqm::aqm_kind kind() const override { return aqm::aqm_kind::droptail; }
    const ip_packet* peek() const override { return fifo_.empty() ? nullptr : &fifo_.front(); }
    std::size_t bytes() const override { return fifo_.bytes(); }
    std::size_t packets() const override { return fifo_.packets(); }
    aqm::aqm_stats stats() const override { return stats_; }
    std::vector<std::pair<std::string, std::uint64_t>> counters() const override {
        return {{"plugin_exceptions", exceptions_}, {"plugin_invalid_answers", invalid_}};
    }

    bool enqueue(ip_packet p, time_ns now) override {
        ++stats_.offered;
        p.arrival = now;
        const std::int32_t v = call(table_->enqueue, OPPSCHED_AQM_ACCEPT, p, now);
        if (v == OPPSCHED_AQM_DROP) {
            report_drop(std::move(p), aqm::drop_reason::early_drop, now);
            return false;
        }
        if (!fifo_.fits(p.size())) {
            report_drop(std::move(p), aqm::drop_reason::overflow, now);
            return false;
        }
        if (v == OPPSCHED_AQM_MARK && !try_mark(p)) {
            report_drop(std::move(p), aqm::drop_reason::early_drop, now);
            return false;
        }
        count_enqueued(p);
        fifo_.push(std::move(p));
        return true;
    }

    std::optional<ip_packet> dequeue(time_ns now) override {
        while (!fifo_.empty()) {
            ip_packet p = fifo_.pop();
            const std::int32_t v = call(table_->dequeue, OPPSCHED_AQM_SEND, p, now);
            if (v == OPPSCHED_AQM_DROP || (v == OPPSCHED_AQM_MARK && !try_mark(p))) {
                report_drop(std::move(p), aqm::drop_reason::aqm_drop, now);
                continue;
            }
            count_dequeued(p);
            return p;
        }
        if (table_->on_empty) table_->on_empty(self_, &queue_view(), seconds(now));
        return std::nullopt;
    }

    void clear(time_ns now) override {
        while (!fifo_.empty()) report_drop(fifo_.pop(), aqm::drop_reason::flushed, now);
    }

  private:
    using verb_fn = std::int32_t (*)(void*, const oppsched_packet_view*, const oppsched_queue_view*,
                                     double);
    static double seconds(time_ns t) { return static_cast<double>(t) * 1e-9; }
    const oppsched_queue_view& queue_view() {
        queue_.bytes = fifo_.bytes();
        queue_.packets = fifo_.packets();
        return queue_;
    }
    // The plugin's answer: `pass` (ACCEPT at enqueue, SEND at dequeue), DROP or MARK;
    // OPPSCHED_PLUGIN_ERROR and any other answer are counted and read as `pass`.
    std::int32_t call(verb_fn fn, std::int32_t pass, const ip_packet& p, time_ns now) {
        static const tcpip::keyed_flow_hash hash(0);
        oppsched_packet_view v{};
        v.size_bytes = static_cast<std::uint32_t>(p.size());
        v.ecn_capable = aqm::ecn_field(p.data) != tcpip::kNotEct ? 1u : 0u;
        const auto info = tcpip::parse(p.data);
        v.flow = info.ok() ? static_cast<std::uint64_t>(hash(info.value().flow)) : 0u;
        v.arrival_s = seconds(p.arrival);
        const std::int32_t r = fn(self_, &v, &queue_view(), seconds(now));
        if (r == OPPSCHED_PLUGIN_ERROR) {
            ++exceptions_;
            return pass;
        }
        if (r != pass && r != OPPSCHED_AQM_DROP && r != OPPSCHED_AQM_MARK) {
            ++invalid_;
            return pass;
        }
        return r;
    }

    std::shared_ptr<const library> lib_;
    const oppsched_aqm_v1* table_;
    void* self_ = nullptr;
    aqm::packet_fifo fifo_;
    oppsched_queue_view queue_{};
    std::uint64_t exceptions_ = 0;
    std::uint64_t invalid_ = 0;
};

}  // namespace

std::function<std::unique_ptr<aqm::queue_discipline>(const aqm::aqm_params&)> load_aqm(
    const std::string& path, const std::vector<param>& params, const aqm::aqm_params& probe,
    const std::string& field) {
    std::shared_ptr<const library> lib = open_library(path, field, OPPSCHED_FAMILY_AQM);
    cpp_aqm check(lib, params, probe, field);  // params the plugin refuses: refused here
    return
        [lib, params, field](const aqm::aqm_params& c) -> std::unique_ptr<aqm::queue_discipline> {
            return std::make_unique<cpp_aqm>(lib, params, c, field);
        };
}

}  // namespace oppsched::cplugin
