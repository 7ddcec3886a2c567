// oppsched-client: the client agent of one user (docs/daemons.md).
//
//   oppsched-client --config client.yaml [--check]
//   oppsched-client --schema
//
// PHY RX --(rx_<user>, PULL, bound here)--> rx_indication --> client::client_core
//   --> delivered IP packets --> TUN (the client's radio interface)
//   --> HARQ feedback, CQI reports --> uplink_delay (uplink_delay_ms) --> uplink PUSH
// TUN --> client_core::on_uplink_packet (CLAMP rewrites ACK windows) --> uplink_delay --> uplink
//
// All the logic is in the MAC library (client_core.h, tested with a fake clock); this file
// is configuration, sockets, the TUN, timers, stats and traces. One thread, one poll loop
// over: the rx socket, the TUN fd, a timerfd (uplink delay line, reassembly timeouts) and a
// signalfd (SIGTERM/SIGINT: stop; SIGUSR1: stats now).
//
// Exit status: 0 after SIGTERM/SIGINT (stats and traces written); 2 for a bad command line
// or configuration (nothing opened); 1 for a start-up failure (TUN, sockets, files).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "client_config.h"
#include "oppsched/client_core.h"
#include "oppsched/daemon/args.h"
#include "oppsched/daemon/config.h"
#include "oppsched/daemon/csv_writer.h"
#include "oppsched/daemon/disk_syncer.h"
#include "oppsched/daemon/log.h"
#include "oppsched/daemon/mac_capture.h"
#include "oppsched/daemon/privileges.h"
#include "oppsched/daemon/seccomp.h"
#include "oppsched/daemon/signals.h"
#include "oppsched/daemon/stats.h"
#include "oppsched/daemon/tun.h"
#include "oppsched/daemon/zmq_endpoint.h"
#include "oppsched/station.h"
#include "oppsched/stats_fields.h"
#include "oppsched/uplink_delay.h"
#include "oppsched/wire.h"

namespace {

using namespace oppsched;

constexpr int kExitConfig = 2;
constexpr int kExitStartup = 1;
// Messages / packets handled per readiness event before the timers get a look: bounds the
// lateness of uplink frames under a burst.
constexpr int kBatch = 64;
// ZeroMQ itself drops (and disconnects) a peer sending more than ZMQ_MAXMSGSIZE without
// telling us; keep that limit well above a wire frame so that oversized garbage reaches
// wire::decode and is counted as malformed.
constexpr std::int64_t kRxZmqMaxMsg = 1 << 20;
constexpr time_ns kHousekeeping = 200 * kNsPerMs;
// Stats written this often while running, so that a crash leaves recent figures.
constexpr time_ns kStatsPeriod = 2 * kNsPerSec;

class timer_fd final {
  public:
    timer_fd() : fd_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {
        if (fd_ < 0)
            throw std::runtime_error(std::string("timerfd_create: ") + std::strerror(errno));
    }
    ~timer_fd() { ::close(fd_); }
    timer_fd(const timer_fd&) = delete;
    timer_fd& operator=(const timer_fd&) = delete;
    int fd() const { return fd_; }
    // Arms at absolute CLOCK_MONOTONIC time `t` (nullopt: disarms). A time in the past
    // fires at once.
    void arm(std::optional<time_ns> t) {
        if (t == armed_) return;
        itimerspec its{};
        if (t) {
            const time_ns v = std::max<time_ns>(*t, 1);
            its.it_value.tv_sec = v / kNsPerSec;
            its.it_value.tv_nsec = v % kNsPerSec;
        }
        ::timerfd_settime(fd_, TFD_TIMER_ABSTIME, &its, nullptr);
        armed_ = t;
    }
    void clear() {
        std::uint64_t n;
        while (::read(fd_, &n, sizeof n) == sizeof n) {
        }
        armed_.reset();
    }

  private:
    int fd_;
    std::optional<time_ns> armed_;
};

std::optional<time_ns> earliest(std::optional<time_ns> a, std::optional<time_ns> b) {
    if (!a) return b;
    if (!b) return a;
    return std::min(*a, *b);
}

struct rx_counters {
    std::uint64_t malformed = 0;   // wire::decode failed (includes oversized frames)
    std::uint64_t oversized = 0;   // of which longer than wire::kMaxFrameLen
    std::uint64_t wrong_type = 0;  // a valid frame that is not an rx_indication
};

class client_daemon final {
  public:
    client_daemon(const client::client_params& cfg, daemon::signal_set& signals)
        : cfg_(cfg), signals_(signals), core_(cfg.core), uplink_delay_(cfg.uplink) {}

    // Opens the TUN and the trace files, drops capabilities, then creates the sockets.
    void start() {
        tun_ = daemon::tun_device::open(cfg_.tun);
        if (!cfg_.windows_trace.empty() && cfg_.core.clamp.enabled)
            windows_ = std::make_unique<daemon::csv_writer>(
                cfg_.windows_trace, std::vector<std::string>{"t_ns", "flow", "price_s", "w_bytes",
                                                             "awnd_os_bytes", "advertised_bytes"});
        if (!cfg_.events_trace.empty())
            events_ = std::make_unique<daemon::csv_writer>(
                cfg_.events_trace, std::vector<std::string>{"t_ns", "event", "detail"});
        if (!cfg_.mac_pcap.empty())
            mac_ = std::make_unique<daemon::mac_capture>(cfg_.mac_pcap, cfg_.mac_pcap_max_bytes,
                                                         cfg_.core.integrity_key.has_value());
        // docs/daemons.md: after opening its TUN the client keeps no capability. Before the
        // ZeroMQ context: its I/O threads would otherwise keep them.
        const auto drop = daemon::drop_all_capabilities();
        spdlog::info("capabilities dropped: {}", drop.summary());
        syncer_ = std::make_unique<daemon::disk_syncer>();  // a thread: after the drop

        ctx_ = std::make_unique<zmq::context_t>(1);
        daemon::socket_options rx_opt;
        rx_opt.recv_hwm = cfg_.hwm;
        rx_opt.send_hwm = cfg_.hwm;
        rx_opt.recv_timeout_ms = cfg_.socket_timeout_ms;
        rx_opt.send_timeout_ms = cfg_.socket_timeout_ms;
        rx_opt.max_msg_size = kRxZmqMaxMsg;
        rx_opt.immediate = false;
        rx_ = std::make_unique<daemon::pull_endpoint>(*ctx_, "endpoints.rx", cfg_.rx_endpoint,
                                                      daemon::socket_role::bind, rx_opt);
        daemon::socket_options up_opt = rx_opt;
        up_opt.max_msg_size = static_cast<std::int64_t>(wire::kMaxFrameLen);
        up_opt.immediate = true;
        up_opt.curve = cfg_.curve;
        up_ = std::make_unique<daemon::push_endpoint>(
            *ctx_, "endpoints.uplink", cfg_.uplink_endpoint, daemon::socket_role::connect, up_opt);
        if (cfg_.station_enabled) {  // the station holds its own uplink queue (station.h)
            station_.emplace(cfg_.station);
            daemon::socket_options g_opt = rx_opt;
            g_opt.max_msg_size = static_cast<std::int64_t>(wire::kMaxFrameLen);
            grants_ = std::make_unique<daemon::pull_endpoint>(
                *ctx_, "endpoints.grants", cfg_.grants_endpoint, daemon::socket_role::bind, g_opt);
        }
        // Everything is open: from here on the loop's system calls only (docs/security.md).
        if (cfg_.seccomp)
            spdlog::info("{}", daemon::install_seccomp(daemon::seccomp_profile::client).summary());
        else
            spdlog::warn("seccomp: off (seccomp: false)");
        started_ns_ = daemon::monotonic_ns();
        spdlog::info(
            "user {} ({}): tun {}, rx {} (bound), uplink {}{}, uplink delay {} ms, clamp {}{}",
            cfg_.user, cfg_.name, cfg_.tun, cfg_.rx_endpoint, cfg_.uplink_endpoint,
            cfg_.curve.enabled() ? " (CURVE)" : "",
            static_cast<double>(cfg_.uplink.delay) / kNsPerMs,
            cfg_.core.clamp.enabled ? "on" : "off",
            cfg_.core.integrity_key ? ", integrity tag on" : "");
    }

    int run() {
        std::vector<std::uint8_t> msg;
        std::vector<std::uint8_t> buf(65536);
        time_ns next_housekeeping = daemon::monotonic_ns() + kHousekeeping;
        time_ns next_stats = daemon::monotonic_ns() + kStatsPeriod;
        for (;;) {
            auto due = earliest(earliest(uplink_delay_.next_due(), core_.next_deadline()),
                                next_housekeeping);
            if (station_) due = earliest(due, station_->next_status_due());
            timer_.arm(due);
            zmq::pollitem_t items[] = {
                rx_->pollitem(),
                {nullptr, tun_->fd(), ZMQ_POLLIN, 0},
                {nullptr, timer_.fd(), ZMQ_POLLIN, 0},
                {nullptr, signals_.fd(), ZMQ_POLLIN, 0},
                grants_ ? grants_->pollitem() : zmq::pollitem_t{nullptr, -1, 0, 0},
            };
            try {
                zmq::poll(items, grants_ ? 5 : 4, std::chrono::milliseconds(-1));
            } catch (const zmq::error_t& e) {
                if (e.num() != EINTR) throw;
            }
            if (items[3].revents & ZMQ_POLLIN) {
                const auto p = signals_.drain();
                if (p.dump_stats) write_stats();
                if (p.stop) {
                    spdlog::info("signal {}: stopping", p.stop_signal);
                    break;
                }
            }
            if (items[0].revents & ZMQ_POLLIN) {
                for (int i = 0; i < kBatch && rx_->receive(msg); ++i) on_rx_frame(msg);
            }
            if (items[1].revents & ZMQ_POLLIN) {
                for (int i = 0; i < kBatch; ++i) {
                    const long n = tun_->read(buf.data(), buf.size());
                    if (n <= 0) {
                        if (n < 0)
                            log_.warn("tun.read", "tun {}: read error: {}", cfg_.tun,
                                      std::strerror(errno));
                        break;
                    }
                    const time_ns now = daemon::monotonic_ns();
                    auto out = core_.on_uplink_packet(
                        now, std::vector<std::uint8_t>(buf.begin(), buf.begin() + n));
                    for (auto& m : out) {
                        auto* pkt = std::get_if<wire::uplink_packet>(&m);
                        if (station_ && pkt)  // it waits for the station's uplink slots
                            station_->on_packet(now, std::move(pkt->packet));
                        else
                            uplink_delay_.enqueue(now, m);
                    }
                }
            }
            if (grants_ && (items[4].revents & ZMQ_POLLIN)) {
                for (int i = 0; i < kBatch && grants_->receive(msg); ++i) on_grant_frame(msg);
            }
            if (items[2].revents & ZMQ_POLLIN) timer_.clear();
            const time_ns now = daemon::monotonic_ns();
            if (station_)
                if (auto bs = station_->take_status(now)) uplink_delay_.enqueue(now, *bs);
            for (const auto& f : uplink_delay_.pop_due(now)) {
                if (mac_)
                    mac_->message(daemon::mac_pcap::direction::sent, daemon::mac_pcap::port::uplink,
                                  f);
                if (!up_->send(f))
                    log_.warn("uplink.send", "uplink: frame not sent (no apd connected?)");
            }
            if (const auto d = core_.next_deadline(); d && *d <= now) to_tun(core_.poll(now));
            if (now >= next_housekeeping) {
                to_tun(core_.poll(now));
                next_housekeeping = now + kHousekeeping;
            }
            if (now >= next_stats) {  // traces on the disk, then the figures (off the loop)
                drain_traces();
                for (auto* w : {windows_.get(), events_.get()})
                    if (w) {
                        w->flush();
                        syncer_->sync_fd(w->fd());
                    }
                if (mac_) {
                    mac_->flush();
                    syncer_->sync_fd(mac_->writer().fd());
                }
                write_stats(/*background=*/true);
                if (syncer_->errors() > syncer_errors_seen_) {
                    syncer_errors_seen_ = syncer_->errors();
                    log_.warn("sync", "{} disk sync(s) of the traces or stats failed so far",
                              syncer_errors_seen_);
                }
                next_stats = now + kStatsPeriod;
            }
            drain_traces();
            if (mac_) mac_->poll();
        }
        drain_traces();
        if (mac_) mac_->flush();
        if (windows_) windows_->flush();
        if (events_) events_->flush();
        syncer_->drain();  // nothing of it still on a descriptor closed below
        // Renamed from NAME.partial to NAME (partial_file.h): whole traces.
        for (auto* w : {windows_.get(), events_.get()})
            if (w && !w->close())
                spdlog::error("{}: cannot finish the trace: {}", w->path(), std::strerror(errno));
        if (mac_ && !mac_->close())
            spdlog::error("{}: cannot finish the capture: {}", mac_->writer().path(),
                          std::strerror(errno));
        write_stats();  // after the close: its counts include the last writes' errors
        return 0;
    }

  private:
    void on_rx_frame(const std::vector<std::uint8_t>& frame) {
        const time_ns now = daemon::monotonic_ns();
        if (mac_)
            mac_->message(daemon::mac_pcap::direction::received, daemon::mac_pcap::port::rx, frame);
        auto r = wire::decode(frame.data(), frame.size(), wire::kMaxFrameLen);
        if (!r) {
            ++rx_counters_.malformed;
            if (frame.size() > wire::kMaxFrameLen) ++rx_counters_.oversized;
            log_.warn("rx.malformed", "{}: malformed frame ({} bytes): {}", cfg_.rx_endpoint,
                      frame.size(), r.error());
            return;
        }
        seq_.on_receive(r->seq);
        const auto* ind = std::get_if<wire::rx_indication>(&r->msg);
        if (!ind) {
            ++rx_counters_.wrong_type;
            log_.warn("rx.type", "{}: unexpected {} message", cfg_.rx_endpoint,
                      wire::to_string(wire::type_of(r->msg)));
            return;
        }
        if (mac_) mac_->pdu_received(*ind);
        auto out = core_.on_rx_indication(now, *ind);
        for (const auto& m : out.uplink) uplink_delay_.enqueue(now, m);
        to_tun(std::move(out.delivered));
    }

    // An uplink grant from the apd: the station's TB for that slot goes up at once (through
    // the uplink delay, like all its messages).
    void on_grant_frame(const std::vector<std::uint8_t>& frame) {
        const time_ns now = daemon::monotonic_ns();
        if (mac_)
            mac_->message(daemon::mac_pcap::direction::received, daemon::mac_pcap::port::grants,
                          frame);
        auto r = wire::decode(frame.data(), frame.size(), wire::kMaxFrameLen);
        if (!r) {
            ++grant_counters_.malformed;
            log_.warn("grants.malformed", "{}: malformed frame ({} bytes): {}",
                      cfg_.grants_endpoint, frame.size(), r.error());
            return;
        }
        grants_seq_.on_receive(r->seq);
        const auto* g = std::get_if<wire::uplink_grant>(&r->msg);
        if (!g) {
            ++grant_counters_.wrong_type;
            log_.warn("grants.type", "{}: unexpected {} message", cfg_.grants_endpoint,
                      wire::to_string(wire::type_of(r->msg)));
            return;
        }
        if (auto tb = station_->on_grant(now, *g)) {
            uplink_delay_.enqueue(now, *tb);
        } else {
            log_.warn("grants.refused",
                      "{}: grant for slot {} refused (user {}, process {}, {} bytes)",
                      cfg_.grants_endpoint, g->slot, g->user, g->harq_pid, g->tb_bytes);
        }
    }

    void to_tun(std::vector<std::vector<std::uint8_t>>&& pkts) {
        for (const auto& p : pkts) {
            if (!tun_->write(p.data(), p.size()))
                log_.warn("tun.write", "tun {}: write failed ({} bytes): {}", cfg_.tun, p.size(),
                          std::strerror(errno));
        }
    }

    void drain_traces() {
        auto rows = core_.take_window_records();
        if (windows_) {
            for (const auto& w : rows) {
                windows_->field(static_cast<std::int64_t>(w.t))
                    .field(std::string_view(w.flow))
                    .field(w.price_s)
                    .field(w.w_bytes)
                    .field(static_cast<std::uint64_t>(w.awnd_os_bytes))
                    .field(static_cast<std::uint64_t>(w.advertised_bytes))
                    .end_row();
            }
        }
        for (const auto& e : core_.take_events()) {
            // Transitions only, so at most one line per change of state.
            if (e.kind == client::clamp_event::event_kind::fail_open)
                spdlog::warn("CLAMP fail open: {}", e.detail);
            else
                spdlog::info("CLAMP resumes: {}", e.detail);
            if (events_)
                events_->field(static_cast<std::int64_t>(e.t))
                    .field(client::to_string(e.kind))
                    .field(std::string_view(e.detail))
                    .end_row();
        }
    }

    // background: through syncer_, after the traces' sync (the periodic write); else now.
    void write_stats(bool background = false) {
        if (cfg_.stats_path.empty()) return;
        daemon::stats_registry s;
        const auto& c = core_.stats();
        const auto& ra = core_.reassembly_stats();
        s.set("user", static_cast<std::uint64_t>(cfg_.user));
        s.set("name", cfg_.name);
        s.set("uptime_s", static_cast<double>(daemon::monotonic_ns() - started_ns_) / kNsPerSec);
        // Malformed messages and gaps by endpoint (docs/daemons.md "Traces").
        s.set("malformed.rx", rx_counters_.malformed + rx_->stats().dropped_oversized +
                                  rx_->stats().dropped_multipart);
        s.set("gaps.rx", seq_.stats().lost);
        s.set("rx.received", rx_->stats().received);
        s.set("rx.decode_errors", rx_counters_.malformed);
        s.set("rx.oversized", rx_counters_.oversized + rx_->stats().dropped_oversized);
        s.set("rx.multipart", rx_->stats().dropped_multipart);
        s.set("rx.wrong_type", rx_counters_.wrong_type);
        s.set_fields("rx.seq.", seq_.stats());
        s.set("phy.slots_heard", c.rx_indications);
        s.set("phy.addressed", c.rx_addressed);
        s.set("phy.header_failed", c.rx_header_failed);
        s.set("phy.crc_ok", c.rx_crc_ok);
        s.set("phy.crc_failed", c.rx_crc_failed);
        s.set("phy.other_user", c.rx_other_user);
        s.set("phy.integrity_failed", c.rx_integrity_failed);
        s.set("harq.acks", c.harq_acks);
        s.set("harq.nacks", c.harq_nacks);
        s.set("cqi.reports", c.cqi_reports);
        s.set("cqi.bad_snr", c.cqi_bad_snr);
        s.set("reassembly.pdu_errors", c.pdu_errors);
        s.set("delivered.packets", c.delivered_packets);
        s.set("delivered.bytes", c.delivered_bytes);
        s.set("residual_loss.dropped_packets", c.residual_dropped_packets);
        s.set("residual_loss.dropped_bytes", c.residual_dropped_bytes);
        s.set_fields("reassembly.", ra);
        s.set("uplink.packets", c.uplink_packets);
        s.set("uplink.bytes", c.uplink_bytes);
        s.set("uplink.dropped_size", c.uplink_dropped_size);
        s.set("uplink.unparsed", c.uplink_unparsed);
        const auto& d = uplink_delay_.stats();
        s.set("uplink.delay.enqueued", d.enqueued);
        s.set("uplink.delay.released", d.released);
        s.set("uplink.delay.dropped", d.dropped);
        s.set("uplink.delay.held", static_cast<std::uint64_t>(uplink_delay_.held_frames()));
        s.set_fields("uplink.zmq.", up_->stats());
        s.set_fields("tun.", tun_->stats());
        if (station_) {
            const auto& st = station_->stats();
            s.set("station.packets_in", st.packets_in);
            s.set("station.bytes_in", st.bytes_in);
            s.set("station.dropped_full", st.dropped_full);
            s.set("station.grants", st.grants);
            s.set("station.tbs_new", st.tbs_new);
            s.set("station.tbs_repeated", st.tbs_repeated);
            s.set("station.grants_refused", st.grants_rejected);
            s.set("station.status_reports", st.status_reports);
            s.set("station.buffered_packets",
                  static_cast<std::uint64_t>(station_->buffered_packets()));
            s.set("station.buffered_bytes", station_->buffered_bytes());
            s.set("malformed.grants", grant_counters_.malformed);
            s.set("grants.wrong_type", grant_counters_.wrong_type);
            s.set_fields("grants.seq.", grants_seq_.stats());
        }
        s.set("clamp.enabled", cfg_.core.clamp.enabled);
        s.set("clamp.clamping", core_.clamping());
        if (const auto p = core_.last_price()) {
            s.set("clamp.last_price_s", static_cast<double>(p->price_s));
        }
        s.set("clamp.flows", static_cast<std::uint64_t>(core_.clamp_flows()));
        s.set("clamp.flows_created", c.clamp_flows_created);
        s.set("clamp.flows_evicted", c.clamp_flows_evicted);
        s.set("clamp.flows_expired", c.clamp_flows_expired);
        s.set("clamp.flows_closed", c.clamp_flows_closed);
        s.set("clamp.agents_created", c.clamp_agents_created);
        s.set("clamp.data_packets", c.clamp_data_packets);
        s.set("clamp.data_unpriced", c.clamp_data_unpriced);
        s.set("clamp.acks_rewritten", c.clamp_acks_rewritten);
        s.set("clamp.acks_reduced", c.clamp_acks_reduced);
        s.set("clamp.acks_fail_open", c.clamp_acks_fail_open);
        s.set("clamp.acks_unknown_flow", c.clamp_acks_unknown);
        s.set("clamp.acks_after_close", c.clamp_acks_after_close);
        s.set("clamp.dupacks", c.clamp_dupacks);
        s.set("clamp.fail_open_events", c.clamp_fail_open_events);
        s.set("clamp.resume_events", c.clamp_resume_events);
        s.set("clamp.records_dropped", c.clamp_records_dropped);
        s.set("clamp.pdus_priced", c.pdus_priced);
        s.set("clamp.pdus_unpriced", c.pdus_unpriced);
        s.set_fields("clamp.tracker.", core_.tracker_stats());
        s.set("traces.windows_rows", windows_ ? windows_->rows() : std::uint64_t{0});
        // Per trace: failed writes and the rows they lost (csv_writer.h); summary.json names
        // every trace with a failed write in its errors (docs/testbed.md, "Reliability").
        for (const auto& [name, w] :
             {std::pair{"windows", windows_.get()}, std::pair{"events", events_.get()}}) {
            if (!w) continue;
            s.set(std::string("traces.") + name + "_errors", w->errors());
            s.set(std::string("traces.") + name + "_rows_lost", w->rows_lost());
        }
        if (events_) s.set("traces.events_rows", events_->rows());
        if (mac_) {
            s.set("traces.mac_pcap_records", mac_->writer().records());
            s.set("traces.mac_pcap_dropped", mac_->writer().dropped());
            s.set("traces.mac_pcap_errors", mac_->writer().errors());
            s.set("traces.mac_pcap_lost", mac_->writer().lost());
        }
        s.set("traces.write_errors", (windows_ ? windows_->errors() : 0) +
                                         (events_ ? events_->errors() : 0) +
                                         (mac_ ? mac_->writer().errors() : 0));
        // fdatasyncs of the traces and background writes of this file that failed
        s.set("traces.sync_errors", syncer_ ? syncer_->errors() : std::uint64_t{0});
        if (background) {
            syncer_->write_file(cfg_.stats_path, s.to_json());
            return;
        }
        syncer_->drain();  // an older write must not land after this one
        if (!s.write_json(cfg_.stats_path))
            spdlog::error("cannot write stats {}: {}", cfg_.stats_path, std::strerror(errno));
    }

    const client::client_params& cfg_;
    daemon::signal_set& signals_;
    client::client_core core_;
    client::uplink_delay uplink_delay_;
    wire::seq_tracker seq_;
    rx_counters rx_counters_;
    std::optional<client::station> station_;  // station.enabled
    wire::seq_tracker grants_seq_;
    rx_counters grant_counters_;
    daemon::rate_limited_log log_;
    timer_fd timer_;
    std::unique_ptr<daemon::tun_device> tun_;
    std::unique_ptr<daemon::csv_writer> windows_, events_;
    std::unique_ptr<daemon::mac_capture> mac_;     // traces.mac_pcap
    std::unique_ptr<daemon::disk_syncer> syncer_;  // fdatasync/fsync off the loop
    std::uint64_t syncer_errors_seen_ = 0;
    std::unique_ptr<zmq::context_t> ctx_;
    std::unique_ptr<daemon::pull_endpoint> rx_;
    std::unique_ptr<daemon::push_endpoint> up_;
    // endpoints.grants (with station_); after ctx_, so closed before the context ends
    std::unique_ptr<daemon::pull_endpoint> grants_;
    time_ns started_ns_ = 0;
};

void usage() {
    spdlog::error(
        "usage: oppsched-client --config client.yaml [--check] | --schema (print the settings "
        "the reader takes, key, type, default, range, unit, help, as JSON)");
}

}  // namespace

int main(int argc, char** argv) {
    // Diagnostics on stderr (the runner collects it into logs/client.<user>.log).
    spdlog::set_default_logger(spdlog::stderr_color_st("client"));
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e [client] %l: %v");
    const auto args = daemon::parse_args(argc, argv);
    if (args.help) {
        usage();
        return 0;
    }
    if (!args.error.empty()) {
        spdlog::error("{}", args.error);
        usage();
        return kExitConfig;
    }
    if (args.schema) {
        std::fputs(daemon::fields_json("client", client::client_fields()).c_str(), stdout);
        return 0;
    }
    const std::string& config_path = args.config;
    const bool check_only = args.check;

    client::client_params cfg;
    try {
        cfg = client::load_client_config(config_path);
    } catch (const std::exception& e) {  // config_error, std::invalid_argument
        spdlog::error("{}: {}", config_path, e.what());
        return kExitConfig;
    }
    spdlog::set_level(spdlog::level::from_str(cfg.log_level));
    if (check_only) {
        spdlog::info("{}: configuration valid", config_path);
        return 0;
    }

    try {
        daemon::signal_set signals;  // before any thread (ZeroMQ's)
        int rc = 0;
        {
            client_daemon d(cfg, signals);
            d.start();
            rc = d.run();
        }
        return rc;  // ~signal_set ignores late SIGTERM/SIGUSR1, so exit 0 stays exit 0
    } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        return kExitStartup;
    }
}
