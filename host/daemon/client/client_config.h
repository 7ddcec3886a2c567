#pragma once
// oppsched-client's configuration file (docs/daemons.md, "oppsched-client configuration"):
// read strictly (unknown keys, wrong types, NaN/inf, out-of-range values are errors naming
// the dotted field and the value) into the daemon's own settings and the client_core's and
// uplink_delay's parameters, which then validate themselves as well. Nothing here opens a
// device or a socket.
#include <cstdint>
#include <string>
#include <vector>

#include "oppsched/client_core.h"
#include "oppsched/daemon/config.h"
#include "oppsched/daemon/field_table.h"
#include "oppsched/daemon/zmq_endpoint.h"
#include "oppsched/station.h"
#include "oppsched/uplink_delay.h"

namespace oppsched::client {

struct client_params {
    std::uint16_t user = 0;
    std::string name;
    std::string tun;
    std::string rx_endpoint, uplink_endpoint;
    // station: the station holds its own uplink queue (medium.station_queue client): its
    // upstream packets wait here for uplink grants, which come on endpoints.grants (bound).
    bool station_enabled = false;
    station_params station;
    std::string grants_endpoint;
    // curve.secret_key_file + curve.server_public_key_file: the uplink is a CURVE client
    // (docs/security.md); required to connect to a non-loopback tcp:// uplink.
    daemon::curve_keys curve;
    int hwm = 1000;
    int socket_timeout_ms = 100;
    client_core_params core;
    uplink_delay_params uplink;
    std::string windows_trace, events_trace, stats_path;
    std::string mac_pcap;  // "" = off (mac_capture.h)
    std::uint64_t mac_pcap_max_bytes = 256ull << 20;
    std::string log_level = "info";
    bool seccomp = true;  // the allow-list of host/daemon/seccomp once set up
};

// Throws daemon::config_error or std::invalid_argument; the message starts with the dotted
// field of the YAML file.
client_params read_client_config(const daemon::config_node& root);
client_params load_client_config(const std::string& path);

// The settings read_client_config reads through its field table (field_table.h), as printed
// by `oppsched-client --schema`: the scalar ones an experiment maps onto (endpoints, names,
// keys and trace paths are the runner's, not an experiment's, and are left out).
const std::vector<daemon::field_spec>& client_fields();

}  // namespace oppsched::client
