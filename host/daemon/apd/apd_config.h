#pragma once
// oppsched-apd's configuration file (docs/daemons.md, "oppsched-apd configuration"): read
// strictly (unknown keys, wrong types, NaN/inf, out-of-range values and impossible
// combinations are errors naming the dotted field and the value) into the daemon's own
// settings and the ap_core's parameters. Nothing here opens a device or a socket.
#include <string>

#include "oppsched/ap_core.h"
#include "oppsched/daemon/config.h"
#include "oppsched/daemon/zmq_endpoint.h"

namespace oppsched::apd {

struct apd_params {
    std::string tun;              // persistent TUN device (made by the runner)
    std::string ep_phy_requests;  // bound PULL
    std::string ep_phy_grants;    // bound PUSH
    std::string ep_uplink;        // bound PULL
    daemon::socket_options zmq;
    std::string trace_slots;    // "" = off
    std::string trace_packets;  // "" = off
    std::string stats_path;     // "" = off
    std::string log_level = "info";
    std::size_t tun_batch = 64;  // TUN packets read per loop turn
    ap::ap_core_params core;
};

// Throws daemon::config_error or std::invalid_argument; the message starts with the dotted
// field of the YAML file.
apd_params load_apd_config(const std::string& path);
// The same, from a parsed document (the fuzz target feeds YAML text through it).
apd_params read_apd_config(const daemon::config_node& root);

}  // namespace oppsched::apd
