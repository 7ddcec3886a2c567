// oppsched-wrc: the weighted receiver-based rate control transport (Nandagopal et al.,
// §III; docs/daemons.md, "oppsched-wrc").
//
//   oppsched-wrc send --config send.yaml [--check]   paced UDP sender of one flow
//   oppsched-wrc recv --config recv.yaml [--check]   receiver: rate control, feedback, traces
//
// send: packets of packet_bytes (header of wrc_packet.h, zero padding) every 1/rate seconds
//   (wrc::pacer), to `destination`; feedback packets from the receiver set the rate. Stops
//   after duration_s, after max_bytes, or on SIGTERM/SIGINT.
// recv: one wrc::rate_controller per flow id; feedback to the address each flow's packets
//   come from, every feedback_every packets and at once when the rate changes; the per-epoch
//   trace (epochs.csv) and the stats JSON. Stops on SIGTERM/SIGINT or after idle_timeout_s
//   without a packet (once one has arrived).
//
// All the logic is in the MAC library (wrc.h, wrc_packet.h, tested with a fake clock); this
// file is configuration, one UDP socket, a timerfd, a signalfd, traces and stats. A bad
// packet is counted (malformed.<field>) and logged at most once a second; it never stops the
// program.
//
// Exit status: 0 after a stop condition or SIGTERM/SIGINT (stats and traces written); 2 for
// a bad command line or configuration (nothing opened); 1 for a start-up failure.
#include <poll.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oppsched/daemon/args.h"
#include "oppsched/daemon/config.h"
#include "oppsched/daemon/csv_writer.h"
#include "oppsched/daemon/log.h"
#include "oppsched/daemon/signals.h"
#include "oppsched/daemon/stats.h"
#include "oppsched/wrc.h"
#include "oppsched/wrc_packet.h"
#include "wrc_config.h"

namespace {

using namespace oppsched;
using namespace oppsched::wrc_daemon;

constexpr int kExitConfig = 2;
constexpr int kExitStartup = 1;
constexpr int kBatch = 64;  // datagrams read per readiness event

class fd_guard final {
  public:
    explicit fd_guard(int fd) : fd_(fd) {}
    ~fd_guard() {
        if (fd_ >= 0) ::close(fd_);
    }
    fd_guard(const fd_guard&) = delete;
    fd_guard& operator=(const fd_guard&) = delete;
    int get() const { return fd_; }

  private:
    int fd_;
};

int open_udp(const sockaddr_in& bind_to) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&bind_to), sizeof bind_to) != 0) {
        const int e = errno;
        ::close(fd);
        throw std::runtime_error("bind " + to_string(bind_to) + ": " + std::strerror(e));
    }
    return fd;
}

sockaddr_in local_address(int fd) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    return a;
}

int open_timer() {
    const int fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0) throw std::runtime_error(std::string("timerfd_create: ") + std::strerror(errno));
    return fd;
}

void arm_timer(int fd, time_ns at) {
    itimerspec its{};
    const time_ns v = std::max<time_ns>(at, 1);
    its.it_value.tv_sec = v / kNsPerSec;
    its.it_value.tv_nsec = v % kNsPerSec;
    ::timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, nullptr);
}

void clear_timer(int fd) {
    std::uint64_t n;
    while (::read(fd, &n, sizeof n) == sizeof n) {
    }
}

// The field an error message names: "wrc.magic: ..." -> "magic".
std::string field_of(const std::string& error) {
    const auto dot = error.find('.');
    const auto colon = error.find(':');
    if (dot == std::string::npos || colon == std::string::npos || colon < dot) return "other";
    return error.substr(dot + 1, colon - dot - 1);
}

struct malformed_counts {
    std::uint64_t total = 0;
    std::map<std::string, std::uint64_t> by_field;
    void count(const std::string& error) {
        ++total;
        ++by_field[field_of(error)];
    }
    void write(daemon::stats_registry& s) const {
        s.set("malformed.total", total);
        for (const auto& [k, v] : by_field) s.set("malformed.by_field." + k, v);
    }
};

// ---------------------------------------------------------------------------------------
// send

int run_sender(const sender_params& cfg, daemon::signal_set& signals) {
    fd_guard sock(open_udp(cfg.bind));
    fd_guard timer(open_timer());
    std::unique_ptr<daemon::csv_writer> rates;
    if (!cfg.rates_trace.empty())
        rates = std::make_unique<daemon::csv_writer>(
            cfg.rates_trace, std::vector<std::string>{"t_s", "rate_pps", "rate_seq"});
    wrc::pacer pacer(cfg.pacer);
    daemon::rate_limited_log log;
    malformed_counts malformed;
    std::uint64_t wrong_type = 0, other_flow = 0, send_errors = 0, bytes = 0;
    std::vector<std::uint8_t> out(cfg.packet_bytes), in(wrc::kMaxPacketBytes + 1);

    const time_ns start = daemon::monotonic_ns();
    // No duration: never (the largest time).
    const time_ns stop_at = cfg.duration_s > 0 ? start + from_seconds(cfg.duration_s)
                                               : std::numeric_limits<time_ns>::max();
    pacer.start(start);
    if (rates) rates->field(0.0).field(pacer.rate_pps()).field(std::uint64_t{0}).end_row();
    spdlog::info("flow {} (weight {}): {} -> {}, {} B packets, initial rate {} pps", cfg.flow_id,
                 cfg.weight, to_string(local_address(sock.get())), to_string(cfg.destination),
                 cfg.packet_bytes, cfg.pacer.initial_rate_pps);
    std::string stop_reason = "signal";
    std::uint32_t seq = 0;
    for (;;) {
        arm_timer(timer.get(), std::min(pacer.next_send(), stop_at));
        pollfd fds[] = {
            {sock.get(), POLLIN, 0}, {timer.get(), POLLIN, 0}, {signals.fd(), POLLIN, 0}};
        if (::poll(fds, 3, -1) < 0 && errno != EINTR)
            throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
        if (fds[2].revents & POLLIN) {
            const auto p = signals.drain();
            if (p.stop) {
                spdlog::info("signal {}: stopping", p.stop_signal);
                break;
            }
        }
        if (fds[1].revents & POLLIN) clear_timer(timer.get());
        if (fds[0].revents & POLLIN) {
            for (int i = 0; i < kBatch; ++i) {
                const ssize_t n = ::recv(sock.get(), in.data(), in.size(), 0);
                if (n < 0) break;
                auto m = wrc::decode(in.data(), static_cast<std::size_t>(n));
                if (!m) {
                    malformed.count(m.error());
                    log.warn("malformed", "malformed feedback ({} bytes): {}", n, m.error());
                    continue;
                }
                const auto* fb = std::get_if<wrc::feedback_header>(&m.value());
                if (!fb) {
                    ++wrong_type;
                    continue;
                }
                if (fb->flow_id != cfg.flow_id) {
                    ++other_flow;
                    log.warn("flow", "feedback for flow {} (we are {}): ignored", fb->flow_id,
                             cfg.flow_id);
                    continue;
                }
                if (pacer.on_feedback(fb->rate_mpps / 1000.0, fb->rate_seq) && rates)
                    rates->field(to_seconds(daemon::monotonic_ns() - start))
                        .field(pacer.rate_pps())
                        .field(static_cast<std::uint64_t>(pacer.rate_seq()))
                        .end_row();
            }
        }
        time_ns now = daemon::monotonic_ns();
        if (now >= stop_at) {
            stop_reason = "duration";
            break;
        }
        bool done = false;
        while (now >= pacer.next_send()) {
            wrc::data_header h;
            h.flow_id = cfg.flow_id;
            h.seq = seq;
            h.rate_seq = pacer.rate_seq();
            h.send_time_ns = static_cast<std::uint64_t>(now);
            h.snd_sep_us = wrc::separation_us(pacer.rate_pps());
            h.weight = cfg.weight;
            wrc::encode(h, out.data(), out.size());
            const ssize_t n = ::sendto(sock.get(), out.data(), out.size(), 0,
                                       reinterpret_cast<const sockaddr*>(&cfg.destination),
                                       sizeof cfg.destination);
            // A packet the kernel refused is a loss the receiver sees as a gap, like any other.
            if (n != static_cast<ssize_t>(out.size())) {
                ++send_errors;
                log.warn("send", "sendto {}: {}", to_string(cfg.destination), std::strerror(errno));
            }
            ++seq;
            bytes += out.size();
            pacer.on_sent(now);
            if (cfg.max_bytes > 0 && bytes >= cfg.max_bytes) {
                done = true;
                break;
            }
            now = daemon::monotonic_ns();
        }
        if (done) {
            stop_reason = "max_bytes";
            break;
        }
    }
    const double elapsed = to_seconds(daemon::monotonic_ns() - start);
    spdlog::info("flow {}: sent {} packets ({} B) in {:.3f} s, final rate {:.3f} pps ({})",
                 cfg.flow_id, pacer.stats().sent, bytes, elapsed, pacer.rate_pps(), stop_reason);
    // Closed (renamed from its partial name) before the stats, which count its failed writes.
    if (rates && !rates->close())
        spdlog::error("{}: cannot finish the trace: {}", rates->path(), std::strerror(errno));
    if (!cfg.stats_path.empty()) {
        daemon::stats_registry s;
        s.set("flow_id", static_cast<std::uint64_t>(cfg.flow_id));
        s.set("weight", static_cast<std::uint64_t>(cfg.weight));
        s.set("elapsed_s", elapsed);
        s.set("stop_reason", stop_reason);
        s.set("sent.packets", pacer.stats().sent);
        s.set("sent.bytes", bytes);
        s.set("sent.errors", send_errors);
        s.set("sent.late", pacer.stats().late_sends);
        s.set("feedback.received", pacer.stats().feedback);
        s.set("feedback.not_adopted", pacer.stats().feedback_stale);
        s.set("feedback.rate_changes", pacer.stats().rate_changes);
        s.set("feedback.wrong_type", wrong_type);
        s.set("feedback.other_flow", other_flow);
        malformed.write(s);
        s.set("rate.final_pps", pacer.rate_pps());
        s.set("rate.final_seq", static_cast<std::uint64_t>(pacer.rate_seq()));
        s.set("rate.mean_pps", elapsed > 0 ? pacer.stats().sent / elapsed : 0.0);
        if (rates) {  // summary.json names a trace with failed writes (csv_writer.h)
            s.set("traces.rates_rows", rates->rows());
            s.set("traces.rates_errors", rates->errors());
            s.set("traces.rates_rows_lost", rates->rows_lost());
        }
        if (!s.write_json(cfg.stats_path))
            spdlog::error("cannot write stats {}: {}", cfg.stats_path, std::strerror(errno));
    }
    return 0;
}

// ---------------------------------------------------------------------------------------
// recv

struct flow_state {
    flow_state(const wrc::rate_controller_params& p, double w) : rc(p), weight(w) {}
    wrc::rate_controller rc;
    double weight;
    sockaddr_in peer{};
    std::uint32_t last_seq = 0;
    std::uint32_t fed_back_seq = 0;
    bool fed_back = false;
    std::uint64_t since_feedback = 0;
    std::uint64_t received = 0, bytes = 0, feedback_sent = 0, weight_mismatch = 0;
    time_ns first = 0, last = 0;
};

class receiver final {
  public:
    receiver(const receiver_params& cfg, daemon::signal_set& signals)
        : cfg_(cfg), signals_(signals), sock_(open_udp(cfg.bind)), timer_(open_timer()) {
        if (!cfg_.epochs_trace.empty())
            epochs_ = std::make_unique<daemon::csv_writer>(
                cfg_.epochs_trace,
                std::vector<std::string>{"t_s", "flow", "epoch", "decision", "samples",
                                         "savg_ratio", "lavg_ratio", "threshold", "rate_before_pps",
                                         "rate_pps", "delta", "lost", "per_pktsep_s", "received"});
    }

    int run() {
        start_ = daemon::monotonic_ns();
        spdlog::info("listening on {}", to_string(local_address(sock_.get())));
        std::vector<std::uint8_t> in(wrc::kMaxPacketBytes + 1);
        for (;;) {
            std::optional<time_ns> wake;
            for (const auto& [id, f] : flows_)
                if (const auto t = f->rc.next_epoch_end(); t && (!wake || *t < *wake)) wake = t;
            if (cfg_.idle_timeout_s > 0 && last_packet_) {
                const time_ns idle = *last_packet_ + from_seconds(cfg_.idle_timeout_s);
                if (!wake || idle < *wake) wake = idle;
            }
            if (wake) arm_timer(timer_.get(), *wake);
            pollfd fds[] = {
                {sock_.get(), POLLIN, 0}, {timer_.get(), POLLIN, 0}, {signals_.fd(), POLLIN, 0}};
            if (::poll(fds, 3, -1) < 0 && errno != EINTR)
                throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
            if (fds[2].revents & POLLIN) {
                const auto p = signals_.drain();
                if (p.dump_stats) write_stats();
                if (p.stop) {
                    spdlog::info("signal {}: stopping", p.stop_signal);
                    stop_reason_ = "signal";
                    break;
                }
            }
            if (fds[1].revents & POLLIN) clear_timer(timer_.get());
            if (fds[0].revents & POLLIN) {
                for (int i = 0; i < kBatch; ++i) {
                    sockaddr_in from{};
                    socklen_t len = sizeof from;
                    const ssize_t n = ::recvfrom(sock_.get(), in.data(), in.size(), 0,
                                                 reinterpret_cast<sockaddr*>(&from), &len);
                    if (n < 0) break;
                    on_datagram(daemon::monotonic_ns(), in.data(), static_cast<std::size_t>(n),
                                from);
                }
            }
            const time_ns now = daemon::monotonic_ns();
            for (auto& [id, f] : flows_) {
                trace(id, f->rc.on_timer(now), f->received);
                maybe_feedback(*f, id, false);
            }
            if (cfg_.idle_timeout_s > 0 && last_packet_ &&
                now >= *last_packet_ + from_seconds(cfg_.idle_timeout_s)) {
                spdlog::info("no packet for {} s: stopping", cfg_.idle_timeout_s);
                stop_reason_ = "idle";
                break;
            }
        }
        // Closed (renamed from its partial name) before the stats, which count its failed
        // writes.
        if (epochs_ && !epochs_->close())
            spdlog::error("{}: cannot finish the trace: {}", epochs_->path(), std::strerror(errno));
        write_stats();
        for (const auto& [id, f] : flows_) {
            const auto& s = f->rc.stats();
            spdlog::info(
                "flow {}: received {}, lost {}, late {}, epochs {} ({} up, {} down), "
                "rate {:.3f} pps",
                id, f->received, s.lost, s.late, s.epochs, s.increases, s.decreases,
                f->rc.rate_pps());
        }
        return 0;
    }

  private:
    void on_datagram(time_ns now, const std::uint8_t* p, std::size_t n, const sockaddr_in& from) {
        auto m = wrc::decode(p, n);
        if (!m) {
            malformed_.count(m.error());
            log_.warn("malformed", "{}: malformed packet ({} bytes): {}", to_string(from), n,
                      m.error());
            return;
        }
        const auto* h = std::get_if<wrc::data_header>(&m.value());
        if (!h) {
            ++wrong_type_;
            return;
        }
        auto it = flows_.find(h->flow_id);
        if (it == flows_.end()) {
            if (flows_.size() >= cfg_.max_flows) {
                ++flows_refused_;
                log_.warn("max_flows", "flow {} from {}: max_flows {} reached, ignored", h->flow_id,
                          to_string(from), cfg_.max_flows);
                return;
            }
            auto params = cfg_.wrc;
            const double w = cfg_.weight_override > 0 ? cfg_.weight_override : h->weight;
            params.weight = w;
            it = flows_.emplace(h->flow_id, std::make_unique<flow_state>(params, w)).first;
            it->second->first = now;
            spdlog::info("flow {} from {}: weight {}, initial rate {:.3f} pps", h->flow_id,
                         to_string(from), w, 1e6 / h->snd_sep_us);
        }
        flow_state& f = *it->second;
        if (h->weight != f.weight && cfg_.weight_override == 0) ++f.weight_mismatch;
        f.peer = from;
        const std::uint64_t received_before = f.received;
        ++f.received;
        f.bytes += n;
        f.last = now;
        last_packet_ = now;
        f.last_seq = std::max(f.last_seq, h->seq);
        trace(h->flow_id, f.rc.on_packet(now, {h->seq, h->snd_sep_us * 1e-6, h->rate_seq}),
              received_before);
        ++f.since_feedback;
        maybe_feedback(f, h->flow_id, f.since_feedback >= cfg_.feedback_every);
    }

    // Feedback when asked (every feedback_every packets) or when the rate changed since the
    // last feedback: "advertises the updated value back to the sender" (§III-A).
    void maybe_feedback(flow_state& f, std::uint32_t id, bool due) {
        if (!f.rc.started() || f.peer.sin_family != AF_INET) return;
        if (!due && f.fed_back && f.fed_back_seq == f.rc.rate_seq()) return;
        wrc::feedback_header h;
        h.flow_id = id;
        h.rate_seq = f.rc.rate_seq();
        h.rate_mpps = wrc::rate_mpps(f.rc.rate_pps());
        h.echo_seq = f.last_seq;
        h.epoch = static_cast<std::uint32_t>(f.rc.epoch());
        std::uint8_t b[wrc::kHeaderBytes];
        wrc::encode(h, b, sizeof b);
        if (::sendto(sock_.get(), b, sizeof b, 0, reinterpret_cast<const sockaddr*>(&f.peer),
                     sizeof f.peer) != static_cast<ssize_t>(sizeof b)) {
            ++feedback_errors_;
            log_.warn("feedback", "feedback to {}: {}", to_string(f.peer), std::strerror(errno));
        }
        ++f.feedback_sent;
        f.fed_back = true;
        f.fed_back_seq = h.rate_seq;
        f.since_feedback = 0;
    }

    // `received`: the flow's packets received before the records' event (an epoch end
    // that a packet's arrival runs does not count that packet), so that differences between
    // epoch rows give the packets received in each epoch.
    void trace(std::uint32_t id, const std::vector<wrc::rate_record>& rs, std::uint64_t received) {
        if (!epochs_) return;
        for (const auto& r : rs) {
            const bool epoch_end = r.what == wrc::decision::none ||
                                   r.what == wrc::decision::increase ||
                                   r.what == wrc::decision::decrease;
            epochs_->field(to_seconds(r.t - start_))
                .field(static_cast<std::uint64_t>(id))
                .field(static_cast<std::uint64_t>(r.epoch))
                .field(wrc::to_string(r.what))
                .field(static_cast<std::uint64_t>(r.samples));
            if (epoch_end && r.samples > 0)
                epochs_->field(r.savg_ratio).field(r.lavg_ratio).field(r.threshold);
            else
                epochs_->empty().empty().empty();
            epochs_->field(r.rate_before_pps).field(r.rate_pps).field(r.delta);
            if (epoch_end)
                epochs_->empty().empty();
            else
                epochs_->field(static_cast<std::uint64_t>(r.lost)).field(r.per_pktsep_s);
            epochs_->field(received);
            epochs_->end_row();
        }
    }

    void write_stats() {
        if (cfg_.stats_path.empty()) return;
        daemon::stats_registry s;
        s.set("uptime_s", to_seconds(daemon::monotonic_ns() - start_));
        s.set("stop_reason", stop_reason_);
        malformed_.write(s);
        s.set("wrong_type", wrong_type_);
        s.set("flows_refused", flows_refused_);
        s.set("feedback_errors", feedback_errors_);
        std::uint64_t received = 0, lost = 0;
        for (const auto& [id, f] : flows_) {
            const std::string k = "flows." + std::to_string(id) + ".";
            const auto& st = f->rc.stats();
            received += f->received;
            lost += st.lost;
            s.set(k + "weight", f->weight);
            s.set(k + "received", f->received);
            s.set(k + "bytes", f->bytes);
            s.set(k + "highest_seq", static_cast<std::uint64_t>(f->last_seq));
            s.set(k + "feedback_sent", f->feedback_sent);
            s.set(k + "weight_mismatch", f->weight_mismatch);
            s.set(k + "duration_s", to_seconds(f->last - f->first));
            s.set(k + "rate_pps", f->rc.rate_pps());
            s.set(k + "rate_seq", static_cast<std::uint64_t>(f->rc.rate_seq()));
            s.set(k + "lavg_ratio", f->rc.lavg_ratio());
            s.set(k + "in_sequence", st.in_sequence);
            s.set(k + "samples", st.samples);
            s.set(k + "stale_rate", st.stale_rate);
            s.set(k + "gaps", st.gaps);
            s.set(k + "lost", st.lost);
            s.set(k + "late", st.late);
            s.set(k + "invalid", st.invalid);
            s.set(k + "random_losses", st.random_losses);
            s.set(k + "congestion_losses", st.congestion_losses);
            s.set(k + "congestion_ignored", st.congestion_stale);
            s.set(k + "epochs", st.epochs);
            s.set(k + "empty_epochs", st.empty_epochs);
            s.set(k + "increases", st.increases);
            s.set(k + "decreases", st.decreases);
        }
        s.set("total.received", received);
        s.set("total.lost", lost);
        s.set("traces.epochs_rows", epochs_ ? epochs_->rows() : std::uint64_t{0});
        if (epochs_) {  // summary.json names a trace with failed writes (csv_writer.h)
            s.set("traces.epochs_errors", epochs_->errors());
            s.set("traces.epochs_rows_lost", epochs_->rows_lost());
        }
        if (!s.write_json(cfg_.stats_path))
            spdlog::error("cannot write stats {}: {}", cfg_.stats_path, std::strerror(errno));
    }

    const receiver_params& cfg_;
    daemon::signal_set& signals_;
    fd_guard sock_, timer_;
    std::unique_ptr<daemon::csv_writer> epochs_;
    std::map<std::uint32_t, std::unique_ptr<flow_state>> flows_;
    daemon::rate_limited_log log_;
    malformed_counts malformed_;
    std::uint64_t wrong_type_ = 0, flows_refused_ = 0, feedback_errors_ = 0;
    std::optional<time_ns> last_packet_;
    time_ns start_ = 0;
    std::string stop_reason_ = "signal";
};

void usage() { spdlog::error("usage: oppsched-wrc send|recv --config FILE.yaml [--check]"); }

}  // namespace

int main(int argc, char** argv) {
    spdlog::set_default_logger(spdlog::stderr_color_st("wrc"));
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e [wrc] %l: %v");
    if (argc >= 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
        usage();
        return 0;
    }
    if (argc < 2 || (std::string(argv[1]) != "send" && std::string(argv[1]) != "recv")) {
        spdlog::error("mode: '{}' is not send or recv", argc < 2 ? "" : argv[1]);
        usage();
        return kExitConfig;
    }
    const bool send_mode = std::string(argv[1]) == "send";
    // The rest is the daemons' common command line (its argv[0] is the mode).
    const auto args = daemon::parse_args(argc - 1, argv + 1);
    if (args.help) {
        usage();
        return 0;
    }
    if (!args.error.empty()) {
        spdlog::error("{}", args.error);
        usage();
        return kExitConfig;
    }
    sender_params scfg;
    receiver_params rcfg;
    std::string level;
    try {
        const auto root = daemon::config_node::load_file(args.config);
        if (send_mode) {
            scfg = read_sender_config(root);
            level = scfg.log_level;
        } else {
            rcfg = read_receiver_config(root);
            level = rcfg.log_level;
        }
    } catch (const std::exception& e) {  // config_error, std::invalid_argument
        spdlog::error("{}: {}", args.config, e.what());
        return kExitConfig;
    }
    spdlog::set_level(spdlog::level::from_str(level));
    if (args.check) {
        spdlog::info("{}: configuration valid", args.config);
        return 0;
    }
    try {
        daemon::signal_set signals;
        if (send_mode) return run_sender(scfg, signals);
        receiver r(rcfg, signals);
        return r.run();
    } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        return kExitStartup;
    }
}
