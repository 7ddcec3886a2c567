// oppsched-delay: the user-space wired-path delay stage (docs/wired.md, "Backends"),
// used where the kernel has no netem. It forwards Ethernet frames between two interfaces
// (normally two veth ends in the run's "wire" namespace) and delays each direction by its
// own one-way delay, optionally behind a rate limit with a byte-limited FIFO.
//
//   server netns S_i --veth-- [a  oppsched-delay  b] --veth-- AP netns
//        direction ab = a -> b (downlink data),  ba = b -> a (uplink ACKs)
//
// Timing: each frame's arrival is its kernel receive timestamp (SO_TIMESTAMPNS, mapped to
// CLOCK_MONOTONIC), so the daemon's own wake-up latency does not add to the delay; frames
// are released by an absolute CLOCK_MONOTONIC timerfd armed for the head frame's due time,
// with the timer slack set to 1 ns. A frame is never sent before its due time; how late it
// goes out is measured per frame (histogram in the stats). Frames of one direction are
// never reordered (delay_line's invariant).
//
// Stats (JSON) go to --stats-file (atomically replaced) on SIGUSR1 and at exit, or to
// stderr without it. SIGTERM/SIGINT end the daemon cleanly (held frames are discarded and
// counted). --ready-file is written once both sockets are bound: the Python runner polls
// for it instead of sleeping.
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "oppsched/daemon/field_spec.h"
#include "oppsched/daemon/seccomp.h"
#include "oppsched/delay_line.h"
#include "oppsched/version.h"
#include "packet_port.h"

namespace po = boost::program_options;
using oppsched::time_ns;
using oppsched::wired::delay_line;
using oppsched::wired::delay_line_params;
using oppsched::wired::enqueue_result;
using oppsched::wired::packet_port;

namespace {

constexpr const char* kProg = "oppsched-delay";
constexpr int kExitUsage = 2;
constexpr int kExitRuntime = 1;
constexpr std::size_t kBufferBytes = 256 * 1024;  // > any GSO super-frame (64 KiB) + header
constexpr int kBurst = 256;                       // frames read per socket per wake-up
constexpr double kMaxDelayMs = 60'000.0;
// Locked memory beyond the frames held: the program, its buffers and the allocator's own.
constexpr rlim_t kLockSlackBytes = 32 << 20;
constexpr double kMaxRate = 1e12;

// Lateness histogram bucket upper edges, in microseconds (last bucket: everything above).
constexpr std::array<time_ns, 8> kLateEdgesUs = {10, 50, 100, 200, 500, 1000, 5000, 50000};

// Process-wide facts reported in the stats (set once in run()).
bool g_rt_applied = false;
std::uint64_t g_stats_writes = 0;

void log_line(const char* level, const std::string& msg) {
    std::fprintf(stderr, "%s: %s: %s\n", kProg, level, msg.c_str());
}

time_ns clock_ns(clockid_t id) {
    timespec ts;
    clock_gettime(id, &ts);
    return static_cast<time_ns>(ts.tv_sec) * oppsched::kNsPerSec + ts.tv_nsec;
}

struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

template <class T>
[[noreturn]] void bad_option(const std::string& option, T value, const std::string& why) {
    std::ostringstream os;
    os << "--" << option << ": " << value << " " << why;
    throw usage_error(os.str());
}

struct delay_options {
    std::string if_a, if_b;
    double delay_ab_ms = 0.0, delay_ba_ms = 0.0;
    double rate_ab_bps = 0.0, rate_ba_bps = 0.0;
    long long limit_ab_bytes = 0, limit_ba_bytes = 0;
    long long hold_bytes = 0;  // this and the ones below: their defaults are delay_fields()'
    double late_us = 0.0;
    int rt_priority = 0;
    long long socket_buffer_bytes = 0;
    std::string stats_file, ready_file;
    double stats_period_s = 0.0;  // stats written this often while running (0: not)
    bool seccomp = true;          // the allow-list of host/daemon/seccomp once set up
};

using oppsched::daemon::field_spec;
using oppsched::daemon::field_type;
using oppsched::daemon::value_range;

// The stage's field table: every option that takes a value, each described once (name,
// type, default, range, unit, help). parse_options() declares the options from it and checks
// each value against its range, and `--schema` prints it (the JSON of the daemons' tables,
// host/daemon/common/oppsched/daemon/field_spec.h), so the experiment schema takes the
// ranges of the values the runner passes (servers[].rtt_ms, rate_bps, limit_bytes,
// topology.rt_priority, security.seccomp) from the checks that apply them.
field_spec integer_option(const char* name, double def, value_range range, const char* unit,
                          const char* help) {
    return oppsched::daemon::integer_field("", name, def, range, unit, help);
}
field_spec number_option(const char* name, double def, value_range range, const char* unit,
                         const char* help) {
    return oppsched::daemon::number_field("", name, def, range, unit, help);
}
field_spec rate_option(const char* name, const char* help) {
    field_spec f = number_option(name, 0.0, value_range::closed(1e3, kMaxRate), "bit/s", help);
    f.zero_off = true;  // 0: unlimited
    return f;
}
field_spec string_option(const char* name, const char* help) {
    field_spec f = oppsched::daemon::choice_field("", name, "", {}, help);
    f.type = field_type::string;
    return f;
}

const std::vector<field_spec>& delay_fields() {
    static const std::vector<field_spec> fields = {
        string_option("if-a", "interface a (e.g. the server side veth end); required"),
        string_option("if-b", "interface b (e.g. the AP side veth end); required"),
        number_option("delay-ms", 0.0, value_range::closed(0, kMaxDelayMs), "ms",
                      "one-way delay of both directions"),
        number_option("delay-ab-ms", 0.0, value_range::closed(0, kMaxDelayMs), "ms",
                      "one-way delay a->b; default --delay-ms"),
        number_option("delay-ba-ms", 0.0, value_range::closed(0, kMaxDelayMs), "ms",
                      "one-way delay b->a; default --delay-ms"),
        rate_option("rate-bps", "link rate of both directions; 0 = unlimited"),
        rate_option("rate-ab-bps", "link rate a->b; default --rate-bps"),
        rate_option("rate-ba-bps", "link rate b->a; default --rate-bps"),
        integer_option("limit-bytes", 0, value_range::non_negative(), "bytes",
                       "FIFO in front of the rate limiter, both directions; 0 = unlimited"),
        integer_option("limit-ab-bytes", 0, value_range::non_negative(), "bytes",
                       "FIFO limit a->b; default --limit-bytes"),
        integer_option("limit-ba-bytes", 0, value_range::non_negative(), "bytes",
                       "FIFO limit b->a; default --limit-bytes"),
        integer_option("hold-bytes", 64.0 * 1024 * 1024, value_range::non_negative(), "bytes",
                       "memory bound per direction on everything held (incl. propagating); "
                       "0 = none"),
        number_option("late-us", 200.0, value_range::non_negative(), "us",
                      "a frame sent more than this after its due time counts as late"),
        integer_option("rt-priority", 0, value_range::closed(0, 99), "",
                       "SCHED_FIFO priority 1..99, best effort (0: normal scheduling)"),
        integer_option("socket-buffer-bytes", 4.0 * 1024 * 1024,
                       value_range::closed(64 * 1024, 1 << 30), "bytes",
                       "SO_RCVBUF/SO_SNDBUF of each packet socket"),
        string_option("stats-file",
                      "JSON counters, written every --stats-period-s, on SIGUSR1 and at exit"),
        number_option("stats-period-s", 2.0, value_range::closed(0, 3600), "s",
                      "seconds between stats writes while running (so a crash leaves recent "
                      "figures); 0: only on SIGUSR1 and at exit"),
        oppsched::daemon::boolean_field("", "seccomp", true,
                                        "1: install the seccomp allow-list once the sockets are "
                                        "open (docs/security.md); 0: not (debugging)"),
        string_option("ready-file", "written (with the pid) once forwarding runs"),
    };
    return fields;
}

// The option's text in --help: its help, unit and range.
std::string option_help(const field_spec& f) {
    std::string s = f.help;
    if (f.type == field_type::integer || f.type == field_type::number)
        s += " (" + (f.unit.empty() ? std::string() : f.unit + ", ") + (f.zero_off ? "0 or " : "") +
             f.range.describe() + ")";
    return s;
}

// Parses and validates every option in one place, through delay_fields(). Returns false for
// --help, --version and --schema.
bool parse_options(int argc, char** argv, delay_options& o) {
    po::options_description desc(
        "oppsched-delay: forwards Ethernet frames between two interfaces, delaying each\n"
        "direction (a->b is 'ab', b->a is 'ba'); per-direction options override the common "
        "ones.\nOptions");
    desc.add_options()("help,h", "this text")("version", "print the version")(
        "schema", "print the field table of the options (JSON) and exit");
    for (const auto& f : delay_fields()) {
        const std::string help = option_help(f);
        switch (f.type) {
            case field_type::integer:
                desc.add_options()(f.name.c_str(), po::value<long long>(), help.c_str());
                break;
            case field_type::number:
                desc.add_options()(f.name.c_str(), po::value<double>(), help.c_str());
                break;
            case field_type::boolean:
                desc.add_options()(f.name.c_str(), po::value<bool>(), help.c_str());
                break;
            default:
                desc.add_options()(f.name.c_str(), po::value<std::string>(), help.c_str());
        }
    }
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    if (vm.count("help")) {
        std::ostringstream os;
        os << desc;
        std::fputs(os.str().c_str(), stdout);
        return false;
    }
    if (vm.count("version")) {
        std::printf("%s %s\n", kProg, oppsched::version());
        return false;
    }
    if (vm.count("schema")) {
        std::fputs(oppsched::daemon::fields_json("delay", delay_fields()).c_str(), stdout);
        return false;
    }
    po::notify(vm);
    for (const char* required : {"if-a", "if-b"})
        if (!vm.count(required)) throw po::required_option(std::string("--") + required);

    // Every value given, checked against its entry's range; absent ones take the default.
    auto spec = [](const std::string& name) -> const field_spec& {
        for (const auto& f : delay_fields())
            if (f.name == name) return f;
        throw std::logic_error(std::string("delay field table: no option ") + name);
    };
    auto number = [&](const std::string& name) -> double {
        const field_spec& f = spec(name);
        if (!vm.count(name)) return f.default_number;
        const double v = f.type == field_type::integer
                             ? static_cast<double>(vm[name].as<long long>())
                             : vm[name].as<double>();
        if (!std::isfinite(v) || !f.accepts(v)) bad_option(name, v, f.violation());
        return v;
    };
    auto integer = [&](const std::string& name) {
        const double v = number(name);  // whole: a long long, or the table's whole default
        return vm.count(name) ? vm[name].as<long long>() : static_cast<long long>(v);
    };
    auto text = [&](const std::string& name) {
        return vm.count(name) ? vm[name].as<std::string>() : spec(name).default_text;
    };
    o.if_a = text("if-a");
    o.if_b = text("if-b");
    const double delay_ms = number("delay-ms"), rate_bps = number("rate-bps");
    const long long limit_bytes = integer("limit-bytes");
    o.delay_ab_ms = vm.count("delay-ab-ms") ? number("delay-ab-ms") : delay_ms;
    o.delay_ba_ms = vm.count("delay-ba-ms") ? number("delay-ba-ms") : delay_ms;
    o.rate_ab_bps = vm.count("rate-ab-bps") ? number("rate-ab-bps") : rate_bps;
    o.rate_ba_bps = vm.count("rate-ba-bps") ? number("rate-ba-bps") : rate_bps;
    o.limit_ab_bytes = vm.count("limit-ab-bytes") ? integer("limit-ab-bytes") : limit_bytes;
    o.limit_ba_bytes = vm.count("limit-ba-bytes") ? integer("limit-ba-bytes") : limit_bytes;
    o.hold_bytes = integer("hold-bytes");
    o.late_us = number("late-us");
    o.rt_priority = static_cast<int>(integer("rt-priority"));
    o.socket_buffer_bytes = integer("socket-buffer-bytes");
    o.stats_file = text("stats-file");
    o.stats_period_s = number("stats-period-s");
    o.seccomp = vm.count("seccomp") ? vm["seccomp"].as<bool>() : spec("seccomp").default_number;
    o.ready_file = text("ready-file");

    auto check_if = [](const char* opt, const std::string& v) {
        if (v.empty() || v.size() > 15 || v.find('/') != std::string::npos)
            bad_option(opt, "'" + v + "'", "is not an interface name (1..15 characters, no '/')");
    };
    check_if("if-a", o.if_a);
    check_if("if-b", o.if_b);
    if (o.if_a == o.if_b) bad_option("if-b", o.if_b, "is the same interface as --if-a");
    return true;
}

// One direction: the delay line plus what only the real-time loop can know.
struct delay_direction {
    const char* name;
    packet_port* in;
    packet_port* out;
    std::unique_ptr<delay_line> line;
    time_ns late_threshold = 0;
    std::uint64_t received = 0, truncated = 0, sent = 0, send_errors = 0, late = 0;
    std::uint64_t discarded_at_exit = 0, kernel_stamps = 0;
    std::uint64_t dropped_memory = 0;  // frames that could not be copied (no memory)
    int last_send_errno = 0;
    time_ns late_max = 0;
    double late_sum = 0.0;  // ns, over sent frames
    std::array<std::uint64_t, kLateEdgesUs.size() + 1> late_hist{};
};

std::string stats_json(const delay_options& o, const delay_direction* dirs, bool final_write) {
    std::ostringstream os;
    os << "{\"program\": \"" << kProg << "\", \"pid\": " << getpid()
       << ", \"seq\": " << ++g_stats_writes << ", \"final\": " << (final_write ? "true" : "false")
       << ", \"rt_priority\": " << o.rt_priority
       << ", \"rt_priority_applied\": " << (g_rt_applied ? "true" : "false") << ", \"if_a\": \""
       << o.if_a << "\", \"if_b\": \"" << o.if_b << "\", \"late_us\": " << o.late_us
       << ", \"late_hist_edges_us\": [";
    for (std::size_t i = 0; i < kLateEdgesUs.size(); ++i) os << (i ? ", " : "") << kLateEdgesUs[i];
    os << "], \"directions\": {";
    for (int i = 0; i < 2; ++i) {
        const delay_direction& d = dirs[i];
        const auto& s = d.line->stats();
        const auto& p = d.line->params();
        os << (i ? ", " : "") << "\"" << d.name << "\": {"
           << "\"delay_ms\": " << static_cast<double>(p.delay) / 1e6
           << ", \"rate_bps\": " << p.rate_bps << ", \"limit_bytes\": " << p.limit_bytes
           << ", \"received\": " << d.received << ", \"forwarded\": " << d.sent
           << ", \"forwarded_bytes\": " << s.released_bytes << ", \"dropped\": "
           << (s.dropped_limit + s.dropped_hold + d.truncated + d.send_errors + d.dropped_memory)
           << ", \"dropped_limit\": " << s.dropped_limit << ", \"dropped_hold\": " << s.dropped_hold
           << ", \"dropped_truncated\": " << d.truncated
           << ", \"dropped_memory\": " << d.dropped_memory << ", \"send_errors\": " << d.send_errors
           << ", \"last_send_errno\": " << d.last_send_errno << ", \"late\": " << d.late
           << ", \"held_frames\": " << d.line->held_frames()
           << ", \"discarded_at_exit\": " << d.discarded_at_exit
           << ", \"clamped_arrivals\": " << s.clamped_arrivals
           << ", \"kernel_timestamps\": " << d.kernel_stamps
           << ", \"in_netdown_events\": " << d.in->netdown_events() << ", \"late_mean_us\": "
           << (d.sent ? d.late_sum / static_cast<double>(d.sent) / 1e3 : 0.0)
           << ", \"late_max_us\": " << static_cast<double>(d.late_max) / 1e3
           << ", \"late_hist\": [";
        for (std::size_t k = 0; k < d.late_hist.size(); ++k)
            os << (k ? ", " : "") << d.late_hist[k];
        os << "]}";
    }
    os << "}}\n";
    return os.str();
}

void write_stats(const delay_options& o, const delay_direction* dirs, bool final_write) {
    const std::string text = stats_json(o, dirs, final_write);
    if (o.stats_file.empty()) {
        std::fputs(text.c_str(), stderr);
        return;
    }
    // Write beside and rename: a reader never sees half a file.
    const std::string tmp = o.stats_file + ".tmp";
    // The final write is fsynced before the rename (after a crash of the host the file is
    // the old figures or the new ones); the periodic ones are not: an fsync waits for the
    // disk, and this loop forwards frames in real time. A crash of the stage itself loses
    // nothing the page cache holds.
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    const bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size() &&
                    std::fflush(f) == 0 && (!final_write || ::fsync(fileno(f)) == 0);
    if (f) std::fclose(f);
    if (!ok) {
        log_line("error", o.stats_file + ": cannot write the stats: " + std::strerror(errno));
        return;
    }
    if (std::rename(tmp.c_str(), o.stats_file.c_str()) != 0)
        log_line("error", o.stats_file + ": rename: " + std::strerror(errno));
}

void write_ready(const std::string& path) {
    if (path.empty()) return;
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::trunc);
        f << getpid() << "\n";
        if (!f) throw std::runtime_error("--ready-file: " + path + ": cannot write");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
        throw std::runtime_error("--ready-file: " + path + ": rename: " + std::strerror(errno));
}

class unique_fd final {
  public:
    explicit unique_fd(int fd) : fd_(fd) {}
    ~unique_fd() {
        if (fd_ >= 0) ::close(fd_);
    }
    unique_fd(const unique_fd&) = delete;
    unique_fd& operator=(const unique_fd&) = delete;
    int get() const { return fd_; }

  private:
    int fd_;
};

// Sends every frame of `d` whose due time has passed.
void release_due(delay_direction& d) {
    for (;;) {
        const time_ns now = clock_ns(CLOCK_MONOTONIC);
        auto f = d.line->pop_due(now);
        if (!f) return;
        const int err = d.out->send(f->data.data(), f->data.size());
        if (err != 0) {
            ++d.send_errors;
            d.last_send_errno = err;
            continue;
        }
        ++d.sent;
        const time_ns late = now - f->due;  // >= 0 by pop_due's contract
        d.late_sum += static_cast<double>(late);
        if (late > d.late_max) d.late_max = late;
        if (late > d.late_threshold) ++d.late;
        std::size_t k = 0;
        while (k < kLateEdgesUs.size() && late > kLateEdgesUs[k] * 1000) ++k;
        ++d.late_hist[k];
    }
}

void receive_burst(delay_direction& d, std::vector<std::uint8_t>& buf) {
    // realtime - monotonic, to map kernel SO_TIMESTAMPNS stamps onto CLOCK_MONOTONIC.
    const time_ns mono0 = clock_ns(CLOCK_MONOTONIC);
    const time_ns offset = clock_ns(CLOCK_REALTIME) - mono0;
    for (int i = 0; i < kBurst; ++i) {
        auto r = d.in->receive(buf);
        if (!r) return;
        ++d.received;
        if (r->truncated) {
            ++d.truncated;
            continue;
        }
        const time_ns now = clock_ns(CLOCK_MONOTONIC);
        time_ns arrival = now;
        if (r->kernel_realtime != 0) {
            const time_ns k = r->kernel_realtime - offset;
            // Trust the stamp only if plausible (a realtime step would make it nonsense).
            if (k <= now && k > now - oppsched::kNsPerSec) {
                arrival = k;
                ++d.kernel_stamps;
            }
        }
        // A frame that cannot be held (no memory: locked pages past RLIMIT_MEMLOCK) is
        // dropped and counted; the stage goes on forwarding the others.
        try {
            std::vector<std::uint8_t> frame(buf.begin(),
                                            buf.begin() + static_cast<long>(r->length));
            const std::size_t wire = packet_port::wire_bytes(frame.data(), frame.size());
            d.line->enqueue(arrival, std::move(frame), wire);
        } catch (const std::bad_alloc&) {
            if (d.dropped_memory++ == 0)
                log_line("warning", std::string(d.name) +
                                        ": out of memory holding a frame: dropped (counted "
                                        "in dropped_memory)");
        }
    }
}

void arm_timer(int tfd, const delay_direction* dirs) {
    time_ns next = -1;
    for (int i = 0; i < 2; ++i)
        if (auto due = dirs[i].line->next_due(); due && (next < 0 || *due < next)) next = *due;
    itimerspec its{};
    if (next >= 0) {
        if (next <= 0) next = 1;  // 0 would disarm
        its.it_value.tv_sec = next / oppsched::kNsPerSec;
        its.it_value.tv_nsec = next % oppsched::kNsPerSec;
    }
    if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr) != 0)
        throw std::runtime_error(std::string("timerfd_settime: ") + std::strerror(errno));
}

// True if the effective capability set holds CAP_IPC_LOCK (locked memory past the limit).
bool has_cap_ipc_lock() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("CapEff:", 0) == 0)
            return (std::stoull(line.substr(7), nullptr, 16) >> 14) & 1ULL;
    return false;
}

// At SCHED_FIFO the stage's pages are locked, so that a page fault never delays a frame.
// Future pages too (MCL_FUTURE: the frames it holds) only where nothing can refuse them:
// RLIMIT_MEMLOCK covers both directions' --hold-bytes and kLockSlackBytes, is unlimited, or
// CAP_IPC_LOCK is held. Under a smaller limit (8 MiB by default; the runner gives the stage no
// CAP_IPC_LOCK) a backlog of held frames would pass it and every allocation after would fail, so
// only the pages mapped now are locked: a frame held later may take a minor page fault, never a
// failure.
void lock_memory(const delay_options& o) {
    rlimit rl{};
    const bool got = getrlimit(RLIMIT_MEMLOCK, &rl) == 0;
    const auto hold = static_cast<rlim_t>(o.hold_bytes);
    const bool covers = got && (rl.rlim_cur == RLIM_INFINITY ||
                                (hold > 0 && rl.rlim_cur >= 2 * hold + kLockSlackBytes));
    if (covers || has_cap_ipc_lock()) {
        if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
            log_line("warning", std::string("mlockall: ") + std::strerror(errno));
        return;
    }
    if (mlockall(MCL_CURRENT) != 0) {
        log_line("warning", std::string("mlockall(MCL_CURRENT): ") + std::strerror(errno));
        return;
    }
    log_line("info", "RLIMIT_MEMLOCK is " + std::to_string(rl.rlim_cur) +
                         " bytes, under 2 x --hold-bytes " + std::to_string(o.hold_bytes) + " + " +
                         std::to_string(kLockSlackBytes) +
                         " and CAP_IPC_LOCK is not held: the pages mapped now are locked, "
                         "frames held later are not");
}

delay_line_params line_params(double delay_ms, double rate, long long limit, long long hold) {
    delay_line_params p;
    p.delay = static_cast<time_ns>(std::llround(delay_ms * 1e6));
    p.rate_bps = rate;
    p.limit_bytes = static_cast<std::size_t>(limit);
    p.hold_bytes = static_cast<std::size_t>(hold);
    return p;
}

int run(const delay_options& o) {
    // Signals are taken synchronously through a signalfd, so they are blocked first.
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&mask, s);
    if (sigprocmask(SIG_BLOCK, &mask, nullptr) != 0)
        throw std::runtime_error(std::string("sigprocmask: ") + std::strerror(errno));
    unique_fd sfd(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
    unique_fd tfd(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    unique_fd efd(epoll_create1(EPOLL_CLOEXEC));
    if (sfd.get() < 0 || tfd.get() < 0 || efd.get() < 0)
        throw std::runtime_error(std::string("signalfd/timerfd/epoll: ") + std::strerror(errno));

    // The default timer slack (50 us) would be most of our error budget.
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    if (o.rt_priority > 0) {
        sched_param sp{};
        sp.sched_priority = o.rt_priority;
        // Best effort: a container may have no real-time budget. The stats say whether
        // it took effect (rt_priority_applied).
        if (sched_setscheduler(0, SCHED_FIFO, &sp) == 0) {
            g_rt_applied = true;
            lock_memory(o);
        } else {
            log_line("warning", "--rt-priority: " + std::to_string(o.rt_priority) +
                                    ": sched_setscheduler: " + std::strerror(errno) +
                                    "; running with normal scheduling");
        }
    }

    const int sockbuf = static_cast<int>(o.socket_buffer_bytes);
    auto port_a = packet_port::open(o.if_a, "--if-a", sockbuf);
    auto port_b = packet_port::open(o.if_b, "--if-b", sockbuf);
    delay_direction dirs[2] = {
        {"ab", port_a.get(), port_b.get(),
         std::make_unique<delay_line>(
             line_params(o.delay_ab_ms, o.rate_ab_bps, o.limit_ab_bytes, o.hold_bytes))},
        {"ba", port_b.get(), port_a.get(),
         std::make_unique<delay_line>(
             line_params(o.delay_ba_ms, o.rate_ba_bps, o.limit_ba_bytes, o.hold_bytes))},
    };
    for (auto& d : dirs) d.late_threshold = static_cast<time_ns>(std::llround(o.late_us * 1e3));

    // epoll data: 0 = a, 1 = b, 2 = timer, 3 = signal.
    const int fds[] = {port_a->fd(), port_b->fd(), tfd.get(), sfd.get()};
    for (std::uint64_t i = 0; i < 4; ++i) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = i;
        if (epoll_ctl(efd.get(), EPOLL_CTL_ADD, fds[i], &ev) != 0)
            throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
    }
    // Everything is open: from here on the loop's system calls only (docs/security.md).
    if (o.seccomp)
        log_line(
            "info",
            oppsched::daemon::install_seccomp(oppsched::daemon::seccomp_profile::delay).summary());
    else
        log_line("warning", "seccomp: off (--seccomp 0)");
    write_ready(o.ready_file);
    log_line("info", "forwarding " + o.if_a + " <-> " + o.if_b);
    const time_ns stats_period = static_cast<time_ns>(o.stats_period_s * 1e9);
    time_ns next_stats = clock_ns(CLOCK_MONOTONIC) + stats_period;

    std::vector<std::uint8_t> buf(kBufferBytes);
    bool running = true;
    while (running) {
        epoll_event events[4];
        int wait_ms = -1;
        if (stats_period > 0 && !o.stats_file.empty()) {
            const time_ns now = clock_ns(CLOCK_MONOTONIC);
            if (now >= next_stats) {  // a crash leaves figures at most stats_period old
                write_stats(o, dirs, false);
                next_stats = now + stats_period;
            }
            wait_ms = static_cast<int>((next_stats - now + 999'999) / 1'000'000);
        }
        const int n = epoll_wait(efd.get(), events, 4, wait_ms);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw std::runtime_error(std::string("epoll_wait: ") + std::strerror(errno));
        }
        for (int i = 0; i < n; ++i) {
            switch (events[i].data.u64) {
                case 0:
                    receive_burst(dirs[0], buf);
                    break;
                case 1:
                    receive_burst(dirs[1], buf);
                    break;
                case 2: {
                    std::uint64_t expirations;
                    (void)!read(tfd.get(), &expirations, sizeof expirations);
                    break;
                }
                case 3: {
                    signalfd_siginfo si;
                    while (read(sfd.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
                        if (si.ssi_signo == SIGUSR1)
                            write_stats(o, dirs, false);
                        else
                            running = false;
                    }
                    break;
                }
            }
        }
        release_due(dirs[0]);
        release_due(dirs[1]);
        arm_timer(tfd.get(), dirs);
    }
    for (auto& d : dirs) d.discarded_at_exit = d.line->held_frames();
    write_stats(o, dirs, true);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    delay_options o;
    try {
        if (!parse_options(argc, argv, o)) return 0;
    } catch (const po::error& e) {
        // Boost's messages name the option and the value ("the argument ('x') for option
        // '--delay-ms' is invalid").
        log_line("error", e.what());
        return kExitUsage;
    } catch (const usage_error& e) {
        log_line("error", e.what());
        return kExitUsage;
    }
    try {
        return run(o);
    } catch (const std::exception& e) {
        log_line("error", e.what());
        return kExitRuntime;
    }
}
