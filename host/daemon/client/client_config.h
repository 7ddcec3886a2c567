#pragma once
// oppsched-client's configuration file (docs/daemons.md, "oppsched-client configuration"):
// read strictly (unknown keys, wrong types, NaN/inf, out-of-range values are errors naming
// the dotted field and the value) into the daemon's own settings and the ClientCore's and
// UplinkDelay's parameters, which then validate themselves as well. Nothing here opens a
// device or a socket.
#include <cstdint>
#include <string>

#include "oppsched/client_core.h"
#include "oppsched/daemon/config.h"
#include "oppsched/uplink_delay.h"

namespace oppsched::client {

struct client_config {
    std::uint16_t user = 0;
    std::string name;
    std::string tun;
    std::string rx_endpoint, uplink_endpoint;
    int hwm = 1000;
    int socket_timeout_ms = 100;
    ClientCoreParams core;
    UplinkDelayParams uplink;
    std::string windows_trace, events_trace, stats_path;
    std::string log_level = "info";
};

// Throws daemon::ConfigError or std::invalid_argument; the message starts with the dotted
// field of the YAML file.
client_config read_client_config(const daemon::ConfigNode& root);
client_config load_client_config(const std::string& path);

}  // namespace oppsched::client
