// oppsched-apd: the AP MAC daemon (docs/daemons.md).
//
//   oppsched-apd --config apd.yaml [--check]
//   oppsched-apd --schema
//
// Order of start-up (each step needs the previous one, see the common library's headers):
//   1. configuration (strict; any error: message naming the field, exit 2, nothing opened);
//      --check stops here with exit 0;
//   2. signals blocked + signalfd (before any thread exists);
//   3. the persistent TUN opened by name, the trace files opened;
//   4. every capability dropped (single-threaded: capabilities are per thread);
//   5. ZeroMQ context and sockets (phy_requests PULL, phy_grants PUSH, uplink PULL, all bound).
// Main loop: zmq::poll over uplink, phy_requests, the TUN fd and the signal fd. A malformed
// message is counted per endpoint and logged at most once a second; a dead PHY or client
// only means nothing arrives (grants are sent non-blocking and counted when nobody takes
// them). SIGTERM/SIGINT: the current message is finished, traces flushed, stats written,
// exit 0. SIGUSR1: stats written now.
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "apd_config.h"
#include "embedded.h"
#include "oppsched/ap_core.h"
#include "oppsched/cpp_plugin.h"
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
#include "oppsched/medium.h"
#include "oppsched/stats_fields.h"
#include "oppsched/version.h"
#include "oppsched/wire.h"

namespace oppsched::apd {
namespace {

constexpr int kExitConfig = 2;
constexpr int kExitRuntime = 1;
constexpr int kExitWatchdog = 4;        // no slot_request for watchdog_slots slots
constexpr int kExitClientWatchdog = 5;  // a user silent for client_watchdog_slots slot requests
constexpr std::size_t kMaxMessagesPerTurn = 256;  // per socket, so no input starves another

void usage(std::FILE* f) {
    std::fprintf(f,
                 "usage: oppsched-apd --config apd.yaml [--check] | --schema\n"
                 "  --config FILE  the daemon's configuration (docs/daemons.md)\n"
                 "  --check        validate the configuration and exit (0 valid, 2 invalid)\n"
                 "  --schema       print the settings the reader takes (key, type, default,\n"
                 "                 range, unit, help) as JSON and exit\n");
}

class ap_daemon final {
  public:
    explicit ap_daemon(apd_params cfg) : cfg_(std::move(cfg)) {}

    int run();

  private:
    void open_traces();
    void write_traces(bool final);
    // The traces flushed (page cache) and handed to syncer_ for fdatasync: a crash keeps them.
    void sync_traces();
    void close_traces();  // renamed from NAME.partial to NAME (partial_file.h)
    // background: the periodic write, through syncer_ after the traces' sync (off the loop);
    // else now (start, SIGUSR1, exit).
    void write_stats(bool background = false);
    void fill_stats();
    void on_phy_message(const std::vector<std::uint8_t>& msg);
    // bound_user: the user whose own endpoint (users[].uplink) it came in on, if any;
    // key_user: the user whose CURVE key the connection authenticated with (the
    // zap_handler's User-Id), "" without CURVE.
    void on_uplink_message(const std::vector<std::uint8_t>& msg, int bound_user = -1,
                           const std::string& key_user = {});
    // A report of the sample PHY's AP-side receiver for `station` (users[].phy_uplink_rx).
    void on_phy_uplink_rx(const std::vector<std::uint8_t>& msg, std::uint32_t station);
    void read_tun();
    void release_uplink();
    int poll_timeout_ms() const;
    void send_grant(const wire::slot_grant& g);
    // station_queue client with the sample PHY: an uplink slot's grant waits for the
    // station's TB until shortly before the slot is built (slot -> when to send it empty).
    void flush_deferred_grants();
    bool station_queue_phy() const {
        return medium_ && medium_->mode() != ap::medium_mode::none &&
               cfg_.medium.queue == ap::station_queue::client &&
               cfg_.medium.decode == ap::uplink_decode::phy;
    }
    std::map<std::uint64_t, time_ns> deferred_grants_;
    // Between loop turns: the periodic stats and traces, and the watchdogs. Returns 0, or the
    // exit status when a watchdog fired (kExitWatchdog, kExitClientWatchdog).
    int housekeeping();
    void malformed(const char* endpoint, const std::string& why);

    apd_params cfg_;
    std::unique_ptr<ap::ap_core> core_;
    std::unique_ptr<ap::medium> medium_;  // medium.mode != none
    std::unique_ptr<daemon::csv_writer> medium_csv_;
    std::optional<std::uint64_t> medium_last_slot_;  // the newest slot the medium decided
    std::unique_ptr<daemon::signal_set> signals_;
    std::unique_ptr<daemon::tun_device> tun_;
    std::unique_ptr<daemon::csv_writer> slots_csv_;
    std::unique_ptr<daemon::csv_writer> packets_csv_;
    std::unique_ptr<daemon::mac_capture> mac_;     // traces.mac_pcap
    std::unique_ptr<daemon::disk_syncer> syncer_;  // fdatasync/fsync off the loop
    std::uint64_t syncer_errors_seen_ = 0;
    std::unique_ptr<zmq::context_t> ctx_;
    std::unique_ptr<daemon::zap_handler> zap_;  // curve.secret_key_file
    std::unique_ptr<daemon::pull_endpoint> phy_requests_;
    std::unique_ptr<daemon::push_endpoint> phy_grants_;
    std::unique_ptr<daemon::pull_endpoint> uplink_;
    std::vector<std::unique_ptr<daemon::pull_endpoint>> uplink_user_;    // per user, or null
    std::vector<std::unique_ptr<daemon::pull_endpoint>> phy_uplink_rx_;  // per station, or null
    std::vector<std::unique_ptr<daemon::push_endpoint>> grants_;  // per station (station_queue
                                                                  // client), or null
    std::uint32_t station_grant_seq_ = 0;
    daemon::stats_registry stats_;
    daemon::rate_limited_log rlog_;
    wire::seq_tracker phy_seq_;
    std::vector<wire::seq_tracker> uplink_seq_;  // per user
    std::uint64_t phy_restarts_seen_ = 0;
    std::uint32_t grant_seq_ = 0;
    std::vector<std::uint8_t> buf_;
    time_ns started_ = 0;
    time_ns last_request_ = 0;  // when the last slot_request came; 0 = none yet
    std::uint64_t last_request_slot_ = 0;
    // The client watchdog: per user, slot requests since its last uplink message (a live
    // client sends a cqi_report every cqi.period_slots slots it hears); armed by its first.
    std::vector<std::uint64_t> requests_since_uplink_;
    std::vector<bool> uplink_heard_;
    time_ns next_stats_ = 0;
};

int ap_daemon::housekeeping() {
    const time_ns now = daemon::monotonic_ns();
    for (std::size_t u = 0; cfg_.client_watchdog_slots > 0 && u < uplink_heard_.size(); ++u) {
        if (!uplink_heard_[u] || requests_since_uplink_[u] < cfg_.client_watchdog_slots) continue;
        const auto& name = core_->params().users[u].name;
        spdlog::error(
            "watchdog: user {} (id {}) sent nothing on the uplink for {} slot requests "
            "(client_watchdog_slots {}) up to slot {}: its client is hung or gone",
            name, u, requests_since_uplink_[u], cfg_.client_watchdog_slots, last_request_slot_);
        ++stats_.counter("watchdog.client_fired");
        stats_.set("watchdog.client_user", name);
        stats_.set("watchdog.client_silent_slots", requests_since_uplink_[u]);
        return kExitClientWatchdog;
    }
    if (cfg_.watchdog_slots > 0 && last_request_ > 0) {
        const double silent_slots = to_seconds(now - last_request_) / cfg_.core.slot_s;
        if (silent_slots >= cfg_.watchdog_slots) {
            spdlog::error(
                "watchdog: no slot_request for {:.0f} slots ({:.2f} s; watchdog_slots {}) since "
                "slot {}: the PHY is hung or gone",
                silent_slots, to_seconds(now - last_request_), cfg_.watchdog_slots,
                last_request_slot_);
            ++stats_.counter("watchdog.fired");
            return kExitWatchdog;
        }
    }
    if (now >= next_stats_) {  // a crash leaves figures at most stats_period_s old
        write_traces(false);
        sync_traces();
        write_stats(/*background=*/true);
        next_stats_ = now + static_cast<time_ns>(cfg_.stats_period_s * 1e9);
        if (syncer_ && syncer_->errors() > syncer_errors_seen_) {
            syncer_errors_seen_ = syncer_->errors();
            rlog_.warn("sync", "{} disk sync(s) of the traces or stats failed so far",
                       syncer_errors_seen_);
        }
    }
    return 0;
}

void ap_daemon::malformed(const char* endpoint, const std::string& why) {
    ++stats_.counter(std::string("malformed.") + endpoint);
    rlog_.warn(std::string("malformed.") + endpoint, "{}: malformed message dropped: {}", endpoint,
               why);
}

void ap_daemon::open_traces() {
    if (!cfg_.trace_slots.empty()) {
        std::vector<std::string> h = {"slot", "t_ns", "user", "mcs",     "tb_bytes", "harq_pid",
                                      "rv",   "ndi",  "retx", "outcome", "late"};
        for (const auto& u : core_->params().users) {
            h.push_back("cqi." + u.name);
            h.push_back("queue." + u.name);
            h.push_back("price." + u.name);
            h.push_back("aqm_price." + u.name);
        }
        slots_csv_ = std::make_unique<daemon::csv_writer>(cfg_.trace_slots, h);
    }
    if (medium_ && !cfg_.trace_medium.empty()) {
        std::vector<std::string> h = {"slot",   "t_ns",     "direction",  "station", "contenders",
                                      "mcs",    "tb_bytes", "retx",       "outcome", "feedback",
                                      "cqi_db", "snr_db",   "decoded_by", "harq_pid"};
        for (const auto& u : core_->params().users) h.push_back("upq." + u.name);
        medium_csv_ = std::make_unique<daemon::csv_writer>(cfg_.trace_medium, h);
    }
    if (!cfg_.trace_packets.empty())
        packets_csv_ = std::make_unique<daemon::csv_writer>(
            cfg_.trace_packets,
            std::vector<std::string>{"t_ns", "event", "user", "packet_id", "bytes", "reason"});
    if (!cfg_.trace_mac_pcap.empty())
        mac_ = std::make_unique<daemon::mac_capture>(cfg_.trace_mac_pcap, cfg_.mac_pcap_max_bytes,
                                                     cfg_.core.integrity_key.has_value());
}

void ap_daemon::write_traces(bool final) {
    if (slots_csv_) {
        auto rows = final ? core_->final_rows() : core_->take_slot_rows();
        for (const auto& r : rows) {
            auto& w = *slots_csv_;
            w.field(r.slot).field(std::int64_t{r.t_ns}).field(r.user).field(r.mcs);
            w.field(std::uint64_t{r.tb_bytes}).field(r.harq_pid).field(r.rv).field(r.ndi);
            w.field(r.retx).field(std::string_view(r.outcome)).field(r.late ? 1 : 0);
            for (std::size_t u = 0; u < r.cqi.size(); ++u)
                w.field(r.cqi[u]).field(r.queue[u]).field(r.price[u]).field(r.aqm_price[u]);
            w.end_row();
        }
    }
    if (medium_) {
        for (const auto& r : medium_->take_rows()) {
            if (!medium_csv_) continue;
            auto& w = *medium_csv_;
            const bool up = r.direction == ap::slot_direction::up;
            w.field(r.slot).field(std::int64_t{r.t_ns}).field(std::string_view(up ? "up" : "down"));
            w.field(r.station).field(std::uint64_t{r.contenders});
            if (up) {
                // An uplink TB's ACK/NACK stays at the AP, which decodes it; a downlink TB's
                // comes back on the side channel (harq_feedback).
                w.field(r.mcs).field(std::uint64_t{r.tb_bytes}).field(r.retx);
                w.field(std::string_view(r.outcome)).field(std::string_view("ap"));
                w.field(r.cqi_db).field(r.snr_db);
                w.field(std::string_view(r.decoded_by));
                if (r.harq_pid >= 0)
                    w.field(r.harq_pid);
                else
                    w.field(std::string_view(""));
            } else {
                w.field(std::string_view("")).field(std::string_view(""));
                w.field(std::string_view("")).field(std::string_view(""));
                w.field(std::string_view("side_channel"));
                w.field(std::string_view("")).field(std::string_view(""));
                w.field(std::string_view("")).field(std::string_view(""));
            }
            for (auto q : r.queue) w.field(std::uint64_t{q});
            w.end_row();
        }
    }
    if (packets_csv_) {
        for (const auto& r : core_->take_packet_records()) {
            packets_csv_->field(std::int64_t{r.t}).field(r.event).field(r.user);
            packets_csv_->field(r.packet_id)
                .field(std::uint64_t{r.bytes})
                .field(std::string_view(r.reason));
            packets_csv_->end_row();
        }
    }
    if (mac_ && final) mac_->flush();
    if (mac_ && !final) mac_->poll();
    if (final) {
        if (medium_csv_) medium_csv_->flush();
        if (slots_csv_) slots_csv_->flush();
        if (packets_csv_) packets_csv_->flush();
    }
}

void ap_daemon::sync_traces() {
    for (auto* w : {slots_csv_.get(), packets_csv_.get(), medium_csv_.get()}) {
        if (!w) continue;
        w->flush();
        if (syncer_) syncer_->sync_fd(w->fd());
    }
    if (mac_) {
        mac_->flush();
        if (syncer_) syncer_->sync_fd(mac_->writer().fd());
    }
}

void ap_daemon::close_traces() {
    if (syncer_) syncer_->drain();  // nothing of it still on a descriptor closed below
    for (auto* w : {slots_csv_.get(), packets_csv_.get(), medium_csv_.get()})
        if (w && !w->close())
            spdlog::error("{}: cannot finish the trace: {}", w->path(), std::strerror(errno));
    // Its capture renamed too; the writer stays for its counts in the final stats.
    if (mac_ && !mac_->close())
        spdlog::error("{}: cannot finish the capture: {}", mac_->writer().path(),
                      std::strerror(errno));
}

void ap_daemon::write_stats(bool background) {
    if (cfg_.stats_path.empty()) return;
    try {
        fill_stats();
    } catch (const std::exception& e) {  // e.g. user names that nest into each other
        rlog_.warn("stats.fill", "stats: {}", e.what());
    }
    if (background && syncer_) {
        syncer_->write_file(cfg_.stats_path, stats_.to_json());
        return;
    }
    if (syncer_) syncer_->drain();  // an older write must not land after this one
    if (!stats_.write_json(cfg_.stats_path))
        rlog_.warn("stats", "cannot write {}: {}", cfg_.stats_path, std::strerror(errno));
}

void ap_daemon::fill_stats() {
    daemon::stats_registry& s = stats_;
    s.set("version", std::string(oppsched::version()));
    s.set("uptime_s", to_seconds(daemon::monotonic_ns() - started_));
    for (const auto& [k, v] : core_->counters()) s.set("core." + k, v);
    for (const auto& [k, v] : core_->gauges()) s.set("core." + k, v);
    if (medium_) {
        s.set("medium.mode", std::string(ap::to_string(medium_->mode())));
        for (const auto& [k, v] : medium_->counters()) s.set("medium." + k, v);
        for (const auto& [k, v] : medium_->gauges()) s.set("medium." + k, v);
    }
    auto pull = [&s](const std::string& n, const daemon::pull_endpoint* ep) {
        if (ep) s.set_fields("zmq." + n + ".", ep->stats());
    };
    pull("phy_requests", phy_requests_.get());
    pull("uplink", uplink_.get());
    for (std::size_t u = 0; u < uplink_user_.size(); ++u)
        pull("uplink." + core_->params().users[u].name, uplink_user_[u].get());
    for (std::size_t u = 0; u < phy_uplink_rx_.size(); ++u)
        pull("phy_uplink_rx." + core_->params().users[u].name, phy_uplink_rx_[u].get());
    if (phy_grants_) s.set_fields("zmq.phy_grants.", phy_grants_->stats());
    auto seq = [&s](const std::string& n, const wire::seq_tracker& t) {
        s.set_fields("seq." + n + ".", t.stats());
    };
    seq("phy_requests", phy_seq_);
    for (std::size_t u = 0; u < uplink_seq_.size(); ++u)
        seq("uplink." + core_->params().users[u].name, uplink_seq_[u]);
    if (tun_) s.set_fields("tun.", tun_->stats());
    if (zap_) s.set_fields("zap.", zap_->stats());
    // Per trace: rows given, failed writes and the rows they lost (csv_writer.h); summary.json
    // names every trace with a failed write in its errors (docs/testbed.md, "Reliability").
    auto trace = [&s](const char* name, const daemon::csv_writer* w) {
        if (!w) return;
        s.set(std::string("traces.") + name + "_rows", w->rows());
        s.set(std::string("traces.") + name + "_errors", w->errors());
        s.set(std::string("traces.") + name + "_rows_lost", w->rows_lost());
    };
    trace("slots", slots_csv_.get());
    trace("packets", packets_csv_.get());
    trace("medium", medium_csv_.get());
    if (mac_) {
        s.set("traces.mac_pcap_records", mac_->writer().records());
        s.set("traces.mac_pcap_dropped", mac_->writer().dropped());
        s.set("traces.mac_pcap_errors", mac_->writer().errors());
        s.set("traces.mac_pcap_lost", mac_->writer().lost());
    }
    // fdatasyncs of the traces and background writes of this file that failed (disk_syncer)
    s.set("traces.sync_errors", syncer_ ? syncer_->errors() : std::uint64_t{0});
    // Every counter the loop may touch exists from the start (0 rather than absent).
    for (const char* ep : {"phy_requests", "uplink", "phy_uplink_rx"}) {
        s.counter(std::string("malformed.") + ep);
        s.counter(std::string("unexpected_type.") + ep);
    }
    s.counter("uplink.unknown_user");
    s.counter("watchdog.fired");
    s.counter("watchdog.client_fired");
    s.counter("uplink.user_mismatch");
}

void ap_daemon::on_phy_message(const std::vector<std::uint8_t>& msg) {
    using namespace daemon::mac_pcap;
    if (mac_) mac_->message(direction::received, port::phy_requests, msg);
    auto r = wire::decode(msg, static_cast<std::size_t>(cfg_.zmq.max_msg_size));
    if (!r) return malformed("phy_requests", r.error());
    phy_seq_.on_receive(r->seq);
    if (phy_seq_.stats().restarts > phy_restarts_seen_) {
        phy_restarts_seen_ = phy_seq_.stats().restarts;
        spdlog::info("phy_requests: the PHY restarted (sequence back at 0)");
        core_->on_phy_restart();
        medium_last_slot_.reset();
        deferred_grants_.clear();
    }
    const auto* req = std::get_if<wire::slot_request>(&r->msg);
    if (!req) {
        ++stats_.counter("unexpected_type.phy_requests");
        rlog_.warn("unexpected.phy_requests", "phy_requests: unexpected {} message dropped",
                   wire::to_string(wire::type_of(r->msg)));
        return;
    }
    last_request_ = daemon::monotonic_ns();
    last_request_slot_ = req->slot;
    for (auto& n : requests_since_uplink_) ++n;
    wire::slot_grant g;
    bool uplink_slot = false;
    // A slot number far behind the newest is a PHY restart the core re-bases on (its
    // restart_backjump_slots): the medium starts again from it too.
    if (medium_last_slot_ &&
        req->slot + static_cast<std::uint64_t>(cfg_.core.restart_backjump_slots) <=
            *medium_last_slot_)
        medium_last_slot_.reset();
    if (medium_ && (!medium_last_slot_ || req->slot > *medium_last_slot_)) {
        // A fresh slot: the medium decides its direction first (repeats go to the core,
        // which answers them from its grant cache or empty).
        medium_last_slot_ = req->slot;
        const std::size_t n = core_->users();
        std::vector<bool> backlog(n);
        std::vector<double> rates(n);
        for (std::uint32_t u = 0; u < n; ++u) {
            backlog[u] = core_->queued_bytes(u) > 0;
            rates[u] = core_->rate_bps(u);
        }
        uplink_slot =
            medium_->on_slot(req->slot, req->air_time_ns, backlog, rates) == ap::slot_direction::up;
        // The station that holds its own queue is told of its slot (its uplink grant).
        if (auto sg = medium_->take_station_grant()) {
            const auto gb = wire::encode(*sg, station_grant_seq_++);
            if (mac_) mac_->message(direction::sent, port::grants, gb);
            auto* ep = sg->user < grants_.size() ? grants_[sg->user].get() : nullptr;
            if (!ep || !ep->send(gb))
                rlog_.warn("grants.send", "users[id {}].grants: uplink grant for slot {} not sent",
                           sg->user, sg->slot);
        }
    }
    if (uplink_slot && station_queue_phy()) {
        // The station holds the TB: the PHY's grant waits for it (on_uplink_message), and
        // goes out empty if it has not come shortly before the slot is built.
        const time_ns margin =
            std::max<time_ns>(kNsPerMs, static_cast<time_ns>(cfg_.core.slot_s * 0.25 * kNsPerSec));
        deferred_grants_[req->slot] = req->air_time_ns - margin;
        return;
    }
    if (uplink_slot) {
        // The downlink is silent in an uplink slot (the station's transmission is the
        // medium's; ap_core counts the slot as skipped). With uplink_decode phy the grant
        // carries the station's TB for the PHY to transmit and decode; with model the
        // medium has simulated it and the PHY gets an empty slot.
        if (auto ug = medium_->take_uplink_grant()) {
            g = std::move(*ug);
        } else {
            g.slot = req->slot;
            g.empty = true;
            g.user = wire::kUserNobody;
        }
    } else {
        g = core_->on_slot_request(last_request_, req->slot, req->air_time_ns);
    }
    send_grant(g);
}

void ap_daemon::send_grant(const wire::slot_grant& g) {
    using namespace daemon::mac_pcap;
    const auto bytes = wire::encode(g, grant_seq_++);
    if (mac_) {
        // An uplink grant's TB is the station's to send: its PDU is recorded when the AP's
        // receiver decodes it (on_phy_uplink_rx).
        if (!g.uplink) mac_->pdu_sent(g);
        mac_->message(direction::sent, port::phy_grants, bytes);
    }
    if (!phy_grants_->send(bytes))
        rlog_.warn("grant_not_sent", "phy_grants: grant for slot {} not sent (no PHY connected?)",
                   g.slot);
}

void ap_daemon::flush_deferred_grants() {
    const time_ns now = daemon::monotonic_ns();
    for (auto it = deferred_grants_.begin(); it != deferred_grants_.end();) {
        if (it->second > now) {
            ++it;
            continue;
        }
        wire::slot_grant g;  // the station's TB has not come: the slot goes out empty
        g.slot = it->first;
        g.empty = true;
        g.user = wire::kUserNobody;
        ++stats_.counter("medium.grants_without_tb");
        send_grant(g);
        it = deferred_grants_.erase(it);
    }
}

void ap_daemon::on_uplink_message(const std::vector<std::uint8_t>& msg, int bound_user,
                                  const std::string& key_user) {
    using namespace daemon::mac_pcap;
    if (mac_) mac_->message(direction::received, port::uplink, msg);
    auto r = wire::decode(msg, static_cast<std::size_t>(cfg_.zmq.max_msg_size));
    if (!r) return malformed("uplink", r.error());
    const auto* cqi = std::get_if<wire::cqi_report>(&r->msg);
    const auto* fb = std::get_if<wire::harq_feedback>(&r->msg);
    const auto* pkt = std::get_if<wire::uplink_packet>(&r->msg);
    const auto* utb = std::get_if<wire::uplink_tb>(&r->msg);
    const auto* bsr = std::get_if<wire::buffer_status>(&r->msg);
    if (!cqi && !fb && !pkt && !utb && !bsr) {
        ++stats_.counter("unexpected_type.uplink");
        rlog_.warn("unexpected.uplink", "uplink: unexpected {} message dropped",
                   wire::to_string(wire::type_of(r->msg)));
        return;
    }
    const std::uint16_t user = cqi   ? cqi->user
                               : fb  ? fb->user
                               : pkt ? pkt->user
                               : utb ? utb->user
                                     : bsr->user;
    if (!key_user.empty()) {
        // CURVE: the connection is the user its key maps to (decimal, from the zap_handler).
        const int key_id = std::stoi(key_user);
        if (bound_user >= 0 && bound_user != key_id) {
            ++stats_.counter("uplink.user_mismatch");
            rlog_.warn("uplink.key_mismatch",
                       "uplink: user {}'s key on user {}'s endpoint: {} dropped", key_id,
                       bound_user, wire::to_string(wire::type_of(r->msg)));
            return;
        }
        bound_user = key_id;
    }
    if (user >= uplink_seq_.size()) {
        ++stats_.counter("uplink.unknown_user");
        rlog_.warn("uplink.unknown_user", "uplink: message from unknown user {} dropped", user);
        return;
    }
    if (bound_user >= 0 && user != bound_user) {
        ++stats_.counter("uplink.user_mismatch");
        rlog_.warn("uplink.user_mismatch",
                   "uplink: {} naming user {} arrived on user {}'s endpoint{}: dropped",
                   wire::to_string(wire::type_of(r->msg)), user, bound_user,
                   key_user.empty() ? "" : " (CURVE key)");
        return;
    }
    uplink_seq_[user].on_receive(r->seq);
    uplink_heard_[user] = true;  // its client is alive (the client watchdog)
    requests_since_uplink_[user] = 0;
    const bool station_queue = medium_ && medium_->mode() != ap::medium_mode::none &&
                               cfg_.medium.queue == ap::station_queue::client;
    if (cqi) {
        core_->on_cqi(cqi->user, cqi->slot, cqi->snr_db, cqi->cqi);
    } else if (fb) {
        core_->on_harq_feedback(fb->user, fb->slot, fb->harq_pid, fb->ack);
    } else if (utb || bsr) {
        if (!station_queue)
            return malformed("uplink", std::string(wire::to_string(wire::type_of(r->msg))) +
                                           " from user " + std::to_string(user) +
                                           ", but medium.station_queue is not 'client'");
        const time_ns now = daemon::monotonic_ns();
        if (utb && !medium_->on_uplink_tb(now, user, *utb))
            rlog_.warn("uplink.tb_unexpected",
                       "uplink: user {}'s TB for slot {} (process {}) matches no grant: dropped",
                       user, utb->slot, utb->harq_pid);
        if (auto g = medium_->take_uplink_grant()) {  // phy: the station's TB, in time
            const auto it = deferred_grants_.find(g->slot);
            if (it != deferred_grants_.end()) {  // (else its slot went out empty already)
                deferred_grants_.erase(it);
                send_grant(*g);
            }
        }
        if (bsr) medium_->on_buffer_status(now, user, *bsr);
    } else {
        // Toward the servers: the kernel routes it out of the AP namespace.
        if (pkt->packet.empty()) return malformed("uplink", "empty uplink_packet");
        if (station_queue)
            return malformed("uplink", "uplink_packet from user " + std::to_string(user) +
                                           ": with medium.station_queue 'client' a station "
                                           "sends its packets in its TBs");
        if (medium_) {  // it waits in the station's uplink queue for an uplink slot
            medium_->on_uplink_packet(daemon::monotonic_ns(), pkt->user, pkt->packet);
            return;
        }
        if (!tun_->write(pkt->packet.data(), pkt->packet.size()))
            rlog_.warn("tun.write", "{}: write failed: {}", tun_->name(), std::strerror(errno));
    }
}

void ap_daemon::on_phy_uplink_rx(const std::vector<std::uint8_t>& msg, std::uint32_t station) {
    auto r = wire::decode(msg, static_cast<std::size_t>(cfg_.zmq.max_msg_size));
    if (!r) return malformed("phy_uplink_rx", r.error());
    const auto* rx = std::get_if<wire::rx_indication>(&r->msg);
    if (!rx) {
        ++stats_.counter("unexpected_type.phy_uplink_rx");
        rlog_.warn("unexpected.phy_uplink_rx", "phy_uplink_rx: unexpected {} message dropped",
                   wire::to_string(wire::type_of(r->msg)));
        return;
    }
    if (rx->addressed && rx->user != station)
        return malformed("phy_uplink_rx", "rx_indication.user " + std::to_string(rx->user) +
                                              " addressed on station " + std::to_string(station) +
                                              "'s endpoint");
    if (mac_ && rx->addressed && rx->crc_ok) mac_->pdu_received(*rx);
    if (medium_) medium_->on_uplink_rx(daemon::monotonic_ns(), station, *rx);
}

void ap_daemon::release_uplink() {
    if (!medium_) return;
    for (const auto& p : medium_->take_received(daemon::monotonic_ns()))
        if (!tun_->write(p.data(), p.size()))
            rlog_.warn("tun.write", "{}: write failed: {}", tun_->name(), std::strerror(errno));
}

int ap_daemon::poll_timeout_ms() const {
    if (!medium_) return 200;
    auto next = medium_->next_release();
    for (const auto& [slot, due] : deferred_grants_)
        if (!next || due < *next) next = due;
    if (!next) return 200;
    const time_ns wait = *next - daemon::monotonic_ns();
    if (wait <= 0) return 0;
    return static_cast<int>(std::min<time_ns>(200, (wait + kNsPerMs - 1) / kNsPerMs));
}

void ap_daemon::read_tun() {
    buf_.resize(65536);
    for (std::size_t i = 0; i < cfg_.tun_batch; ++i) {
        const long n = tun_->read(buf_.data(), buf_.size());
        if (n == 0) return;
        if (n < 0) {
            rlog_.warn("tun.read", "{}: read failed: {}", tun_->name(), std::strerror(errno));
            return;
        }
        core_->on_downlink_packet(daemon::monotonic_ns(),
                                  std::vector<std::uint8_t>(buf_.begin(), buf_.begin() + n));
    }
}

int ap_daemon::run() {
    started_ = daemon::monotonic_ns();
    core_ = std::make_unique<ap::ap_core>(cfg_.core);
    uplink_seq_.assign(core_->users(), wire::seq_tracker{});
    requests_since_uplink_.assign(core_->users(), 0);
    uplink_heard_.assign(core_->users(), false);
    if (cfg_.medium.mode != ap::medium_mode::none) {
        std::vector<std::string> names;
        for (const auto& u : core_->params().users) names.push_back(u.name);
        std::vector<std::uint32_t> tbs;
        for (std::size_t m = 0; m < core_->params().table.size(); ++m)
            tbs.push_back(core_->tb_bytes_for_mcs(static_cast<int>(m)));
        medium_ = std::make_unique<ap::medium>(cfg_.medium, names, core_->params().table, tbs,
                                               core_->params().pdu_format, core_->params().slot_s);
    }
    try {
        signals_ = std::make_unique<daemon::signal_set>();
        tun_ = daemon::tun_device::open(cfg_.tun);
        open_traces();
        const auto dropped = daemon::drop_all_capabilities();
        spdlog::info("{}", dropped.summary());
        syncer_ = std::make_unique<daemon::disk_syncer>();  // a thread: after the drop
        ctx_ = std::make_unique<zmq::context_t>(1);
        // The ZAP handler first: a CURVE server's handshakes need it (zmq_endpoint.h).
        daemon::socket_options up_opt = cfg_.zmq;
        if (cfg_.curve.enabled()) {
            zap_ = std::make_unique<daemon::zap_handler>(*ctx_, cfg_.curve_users);
            up_opt.curve = cfg_.curve;
        }
        phy_requests_ = std::make_unique<daemon::pull_endpoint>(
            *ctx_, "phy_requests", cfg_.ep_phy_requests, daemon::socket_role::bind, cfg_.zmq);
        phy_grants_ = std::make_unique<daemon::push_endpoint>(
            *ctx_, "phy_grants", cfg_.ep_phy_grants, daemon::socket_role::bind, cfg_.zmq);
        uplink_ = std::make_unique<daemon::pull_endpoint>(*ctx_, "uplink", cfg_.ep_uplink,
                                                          daemon::socket_role::bind, up_opt);
        uplink_user_.resize(core_->users());
        for (std::size_t u = 0; u < cfg_.ep_uplink_user.size() && u < uplink_user_.size(); ++u)
            if (!cfg_.ep_uplink_user[u].empty())
                uplink_user_[u] = std::make_unique<daemon::pull_endpoint>(
                    *ctx_, "users[id " + std::to_string(u) + "].uplink", cfg_.ep_uplink_user[u],
                    daemon::socket_role::bind, up_opt);
        phy_uplink_rx_.resize(core_->users());
        for (std::size_t u = 0; u < cfg_.ep_phy_uplink_rx.size() && u < phy_uplink_rx_.size(); ++u)
            if (!cfg_.ep_phy_uplink_rx[u].empty())
                phy_uplink_rx_[u] = std::make_unique<daemon::pull_endpoint>(
                    *ctx_, "users[id " + std::to_string(u) + "].phy_uplink_rx",
                    cfg_.ep_phy_uplink_rx[u], daemon::socket_role::bind, cfg_.zmq);
        grants_.resize(core_->users());
        if (cfg_.medium.queue == ap::station_queue::client)
            for (std::size_t u = 0; u < cfg_.ep_grants.size() && u < grants_.size(); ++u)
                if (!cfg_.ep_grants[u].empty())
                    grants_[u] = std::make_unique<daemon::push_endpoint>(
                        *ctx_, "users[id " + std::to_string(u) + "].grants", cfg_.ep_grants[u],
                        daemon::socket_role::connect, cfg_.zmq);
        // Everything is open and bound: from here on the loop's system calls only.
        if (cfg_.seccomp)
            spdlog::info("{}", daemon::install_seccomp(daemon::seccomp_profile::apd).summary());
        else
            spdlog::warn("seccomp: off (seccomp: false)");
    } catch (const std::exception& e) {
        spdlog::error("start-up failed: {}", e.what());
        return kExitRuntime;
    }
    spdlog::info(
        "oppsched-apd {}: {} users on {}, requests {}, grants {}, uplink {}{}, medium {}{}",
        oppsched::version(), core_->users(), cfg_.tun, cfg_.ep_phy_requests, cfg_.ep_phy_grants,
        cfg_.ep_uplink, cfg_.curve.enabled() ? " (CURVE)" : "", ap::to_string(cfg_.medium.mode),
        cfg_.core.integrity_key ? ", integrity tag on" : "");
    write_stats();
    next_stats_ = started_ + static_cast<time_ns>(cfg_.stats_period_s * 1e9);
    std::vector<std::uint8_t> msg;
    bool stop = false;
    int stop_signal = 0;
    while (!stop) {
        std::vector<zmq::pollitem_t> items = {
            uplink_->pollitem(),
            phy_requests_->pollitem(),
            {nullptr, tun_->fd(), ZMQ_POLLIN, 0},
            {nullptr, signals_->fd(), ZMQ_POLLIN, 0},
        };
        for (auto& ep : uplink_user_)
            if (ep) items.push_back(ep->pollitem());
        if (zap_) items.push_back(zap_->pollitem());
        for (auto& ep : phy_uplink_rx_)
            if (ep) items.push_back(ep->pollitem());
        try {
            zmq::poll(items.data(), items.size(), std::chrono::milliseconds(poll_timeout_ms()));
        } catch (const zmq::error_t& e) {
            if (e.num() != EINTR) {
                spdlog::error("zmq::poll: {}", e.what());
                return kExitRuntime;
            }
            continue;
        }
        if (items[3].revents & ZMQ_POLLIN) {
            const auto p = signals_->drain();
            if (p.dump_stats) {  // stats now, and the traces so far readable
                write_traces(false);
                sync_traces();
                write_stats();
            }
            if (p.stop) {
                stop = true;
                stop_signal = p.stop_signal;
            }
        }
        if (zap_) zap_->serve();  // CURVE handshakes wait for it
        // Feedback first: it frees HARQ processes for the grants answered just after.
        for (std::size_t i = 0; i < kMaxMessagesPerTurn && uplink_->receive(msg); ++i)
            on_uplink_message(msg, -1, uplink_->peer_user_id());
        for (std::size_t u = 0; u < uplink_user_.size(); ++u)
            for (std::size_t i = 0;
                 uplink_user_[u] && i < kMaxMessagesPerTurn && uplink_user_[u]->receive(msg); ++i)
                on_uplink_message(msg, static_cast<int>(u), uplink_user_[u]->peer_user_id());
        // The AP's receivers' results before the grants: they free uplink HARQ processes.
        for (std::size_t u = 0; u < phy_uplink_rx_.size(); ++u)
            for (std::size_t i = 0;
                 phy_uplink_rx_[u] && i < kMaxMessagesPerTurn && phy_uplink_rx_[u]->receive(msg);
                 ++i)
                on_phy_uplink_rx(msg, static_cast<std::uint32_t>(u));
        for (std::size_t i = 0; i < kMaxMessagesPerTurn && phy_requests_->receive(msg); ++i)
            on_phy_message(msg);
        if (items[2].revents & ZMQ_POLLIN) read_tun();
        release_uplink();
        flush_deferred_grants();
        write_traces(false);
        if (const int rc = housekeeping(); rc != 0) {
            write_traces(true);
            close_traces();
            write_stats();  // after the close: its counts include the last writes' errors
            return rc;
        }
    }
    spdlog::info("signal {} ({}): stopping", stop_signal, strsignal(stop_signal));
    write_traces(true);
    close_traces();
    write_stats();  // after the close: its counts include the last writes' errors
    return 0;
}

}  // namespace
}  // namespace oppsched::apd

int main(int argc, char** argv) {
    using namespace oppsched;
    const auto args = daemon::parse_args(argc, argv);
    if (args.help) {
        apd::usage(stdout);
        return 0;
    }
    if (!args.error.empty()) {
        std::fprintf(stderr, "oppsched-apd: %s\n", args.error.c_str());
        apd::usage(stderr);
        return apd::kExitConfig;
    }
    if (args.schema) {
        std::fputs(daemon::fields_json("apd", apd::apd_fields()).c_str(), stdout);
        return 0;
    }
    daemon::init_logging("apd");
    const std::string& config = args.config;
    const bool check = args.check;
    apd::apd_params cfg;
    try {
        cfg = apd::load_apd_config(config);
        // A new MAC session at every start, so that clients tell a restarted AP (pdu.h); two
        // starts draw the same one with probability 2^-16.
        cfg.core.session = static_cast<std::uint16_t>(std::random_device{}());
        daemon::init_logging("apd", cfg.log_level);
        ap::ap_core validate_only(cfg.core);  // every combination, before anything is opened
        cfg.medium.validate();
    } catch (const std::exception& e) {
        spdlog::error("{}: {}", config, e.what());
        return apd::kExitConfig;
    }
    // scheduler.kind / aqm.kind python: the plugins are loaded (and checked, with --check) in
    // an embedded interpreter now, while the apd may still read their files; their calls later
    // run in the slot loop under the seccomp allow-list (docs/extending.md).
    std::unique_ptr<pyplugin::embedded_interpreter> python;
    const auto drop_plugins = [&cfg] {  // their Python objects go before the interpreter
        cfg.core.scheduler_factory = nullptr;
        cfg.core.aqm_factory = nullptr;
    };
    if (cfg.python_scheduler || cfg.python_aqm) {
        const char* what = "scheduler";
        try {
            python = std::make_unique<pyplugin::embedded_interpreter>();
            if (const auto& ps = cfg.python_scheduler) {
                pyplugin::embedded_scheduler_options opt;
                opt.alpha = ps->alpha;
                opt.slot_s = cfg.core.slot_s;
                opt.budget_fraction = ps->budget_fraction;
                opt.log = [](const std::string& m) { spdlog::warn("{}", m); };
                cfg.core.scheduler_factory =
                    pyplugin::load_python_scheduler(ps->file, ps->class_name, ps->params_json, opt);
                spdlog::info("scheduler: python plugin {} class {} (budget {} us of each slot)",
                             ps->file, ps->class_name, ps->budget_fraction * cfg.core.slot_s * 1e6);
            }
            what = "aqm";
            if (const auto& pa = cfg.python_aqm) {
                cfg.core.aqm_factory =
                    pyplugin::load_python_aqm(pa->file, pa->class_name, pa->params_json,
                                              [](const std::string& m) { spdlog::warn("{}", m); });
                spdlog::info("aqm: python plugin {} class {}", pa->file, pa->class_name);
            }
            what = "plugin";
            ap::ap_core validate_only(cfg.core);
        } catch (const std::exception& e) {
            drop_plugins();
            spdlog::error("{}: {}: {}", config, what, e.what());
            return apd::kExitConfig;
        }
    }
    // scheduler.kind plugin: the shared library is dlopened and checked now (ABI version,
    // family, entry point, its params), as the Python plugins are loaded: before the apd
    // opens anything, drops its capabilities or installs its seccomp filter.
    if (const auto& cs = cfg.cpp_scheduler) {
        try {
            cplugin::scheduler_options opt;
            opt.alpha = cs->alpha;
            opt.slot_s = cfg.core.slot_s;
            opt.budget_fraction = cs->budget_fraction;
            opt.log = [](const std::string& m) { spdlog::warn("{}", m); };
            cfg.core.scheduler_factory =
                cplugin::load_scheduler(cs->library, cs->params, opt, cfg.core.users.size());
            ap::ap_core validate_only(cfg.core);
            spdlog::info("scheduler: plugin {} (budget {} us of each slot)", cs->library,
                         cs->budget_fraction * cfg.core.slot_s * 1e6);
        } catch (const std::exception& e) {
            drop_plugins();
            spdlog::error("{}: {}", config, e.what());
            return apd::kExitConfig;
        }
    }
    if (const auto& ca = cfg.cpp_aqm) {  // aqm.kind plugin: the same, one instance per queue
        try {
            cfg.core.aqm_factory = cplugin::load_aqm(ca->library, ca->params, cfg.core.aqm);
            ap::ap_core validate_only(cfg.core);
            spdlog::info("aqm: plugin {}", ca->library);
        } catch (const std::exception& e) {
            drop_plugins();
            spdlog::error("{}: {}", config, e.what());
            return apd::kExitConfig;
        }
    }
    if (check) {
        drop_plugins();
        spdlog::info("{}: valid", config);
        return 0;
    }
    try {
        // The daemon (and the plugin's objects it holds) ends before `python`.
        return apd::ap_daemon(std::move(cfg)).run();
    } catch (const std::exception& e) {
        spdlog::critical("fatal: {}", e.what());
        return apd::kExitRuntime;
    }
}
