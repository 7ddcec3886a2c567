#pragma once
// oppsched-apd's configuration file (docs/daemons.md, "oppsched-apd configuration"): read
// strictly (unknown keys, wrong types, NaN/inf, out-of-range values and impossible
// combinations are errors naming the dotted field and the value) into the daemon's own
// settings and the ap_core's parameters. Nothing here opens a device or a socket.
#include <map>
#include <optional>
#include <string>

#include "oppsched/ap_core.h"
#include "oppsched/cpp_plugin.h"
#include "oppsched/daemon/config.h"
#include "oppsched/daemon/field_table.h"
#include "oppsched/daemon/zmq_endpoint.h"
#include "oppsched/medium.h"

namespace oppsched::apd {

struct apd_params {
    std::string tun;              // persistent TUN device (made by the runner)
    std::string ep_phy_requests;  // bound PULL
    std::string ep_phy_grants;    // bound PUSH
    std::string ep_uplink;        // bound PULL
    // users[id].uplink: a bound PULL per user ("" = none). A message on user u's endpoint
    // that names another user is dropped and counted (uplink.user_mismatch): the endpoint
    // is the client's identity (docs/daemons.md, "Uplink identity").
    std::vector<std::string> ep_uplink_user;
    // users[id].phy_uplink_rx: a bound PULL per station ("" = none) where the sample PHY's
    // AP-side receiver for that station pushes its rx_indications (medium.uplink_decode
    // phy: every station needs one; the endpoint names the station).
    std::vector<std::string> ep_phy_uplink_rx;
    // users[id].grants: where the apd connects a PUSH to send that station its uplink grants
    // (the client's bound endpoints.grants; medium.station_queue client: every user needs
    // one).
    std::vector<std::string> ep_grants;
    daemon::socket_options zmq;
    // curve.secret_key_file: the uplink sockets (shared and per user) are CURVE servers and
    // a client is the user its key is mapped to (users[].curve_public_key_file; the
    // zap_handler). Only then may an uplink bind a non-loopback address.
    daemon::curve_keys curve;
    std::map<std::string, std::string> curve_users;  // Z85 public key -> user id (decimal)
    std::string trace_slots;                         // "" = off
    std::string trace_packets;                       // "" = off
    std::string trace_medium;                        // "" = off; medium.csv (medium.mode != none)
    std::string stats_path;                          // "" = off
    std::string log_level = "info";
    std::size_t tun_batch = 64;  // TUN packets read per loop turn
    // Exit (kExitWatchdog) when no slot_request came for this many slots once the PHY has
    // sent one; 0 = never.
    std::uint32_t watchdog_slots = 1000;
    // no slot_request from the PHY for watchdog_slots slots: exit 4; no uplink message
    // from a user for client_watchdog_slots slot requests: exit 5 (0 = off)
    std::uint32_t client_watchdog_slots = 1000;
    bool seccomp = true;          // the allow-list of host/daemon/seccomp once set up
    double stats_period_s = 2.0;  // stats and traces written this often while running
    ap::ap_core_params core;
    // scheduler.kind python (docs/extending.md): the plugin the apd loads into its embedded
    // interpreter before it drops privileges; core.scheduler is then PF with the plugin's
    // alpha (its fallback). nullopt: a built-in kind.
    struct python_plugin {
        std::string file;         // as given (the runner gives the copy in the run folder)
        std::string class_name;   // scheduler.class
        std::string params_json;  // scheduler.params as a JSON object, "{}" when absent
        double alpha = sched::kDefaultAlpha;
        double budget_fraction = 0.5;  // a decision's budget: this share of slot_s
    };
    std::optional<python_plugin> python_scheduler;
    // aqm.kind python: the AQM plugin (file, class, params_json; alpha and budget_fraction
    // unused), one instance per user's queue on a drop-tail FIFO; core.aqm is drop-tail with
    // the queue's limits, ecn and seed. nullopt: a built-in kind.
    std::optional<python_plugin> python_aqm;
    // scheduler.kind plugin (docs/extending.md, "C++ plugins"): the shared library the apd
    // dlopens before it drops privileges; core.scheduler is then PF with the plugin's alpha
    // (its fallback). nullopt: another kind.
    struct cpp_plugin {
        std::string library;                 // as given (the runner gives the run folder's copy)
        std::vector<cplugin::param> params;  // scheduler.params, scalars only
        double alpha = sched::kDefaultAlpha;
        double budget_fraction = 0.5;
    };
    std::optional<cpp_plugin> cpp_scheduler;
    // aqm.kind plugin: the AQM plugin's library and params (alpha and budget_fraction unused),
    // one instance per user's queue on a drop-tail FIFO; core.aqm is drop-tail with the
    // queue's limits, ecn and seed. nullopt: another kind.
    std::optional<cpp_plugin> cpp_aqm;
    ap::medium_params medium;  // the shared medium (medium.h); mode none by default

    // traces.mac_pcap (mac_capture.h): "" = off
    std::string trace_mac_pcap;
    std::uint64_t mac_pcap_max_bytes = 256ull << 20;
};

// The apd's field table (daemon/field_table.h): the settings read_apd_config reads through
// it, then every scheduler parameter of the MAC library's registry (sched.h), which
// read_apd_config reads through the registry (`scheduler.alpha`, `scheduler.lambda`). Printed
// by `oppsched-apd --schema`. Number-list parameters (wpf's weights) are left out.
const std::vector<daemon::field_spec>& apd_fields();

// Throws daemon::config_error or std::invalid_argument; the message starts with the dotted
// field of the YAML file.
apd_params load_apd_config(const std::string& path);
// The same, from a parsed document (the fuzz target feeds YAML text through it).
apd_params read_apd_config(const daemon::config_node& root);

}  // namespace oppsched::apd
