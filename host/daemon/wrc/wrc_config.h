#pragma once
// oppsched-wrc's configuration files (docs/daemons.md, "oppsched-wrc configuration"): one
// for `send`, one for `recv`, read strictly (unknown keys, wrong types, NaN/inf and
// out-of-range values are errors naming the dotted field and the value); the library's
// params then validate themselves as well. Nothing here opens a socket.
#include <netinet/in.h>

#include <cstdint>
#include <string>

#include "oppsched/daemon/config.h"
#include "oppsched/wrc.h"

namespace oppsched::wrc_daemon {

// "A.B.C.D:PORT" (IPv4). Throws config_error naming the field when it is not one.
sockaddr_in parse_ipv4_endpoint(const daemon::config_node& n, const std::string& key,
                                const std::string& value, bool port_may_be_zero);
std::string to_string(const sockaddr_in& a);

struct sender_params {
    std::uint32_t flow_id = 1;
    std::uint16_t weight = 1;
    sockaddr_in destination{};
    sockaddr_in bind{};
    std::uint32_t packet_bytes = 512;  // Nandagopal et al., §IV
    wrc::pacer_params pacer;
    double duration_s = 0.0;      // 0: no limit
    std::uint64_t max_bytes = 0;  // 0: no limit (whole packets, padding included)
    std::string rates_trace, stats_path;
    std::string log_level = "info";
};

struct receiver_params {
    sockaddr_in bind{};
    wrc::rate_controller_params wrc;  // its weight: see weight_override
    // 0: each flow's weight from its packets (an integer >= 1); else every flow's weight,
    // any real > 0 (the testbed runs one receiver per flow and gives it the flow's weight).
    double weight_override = 0.0;
    std::uint32_t max_flows = 64;
    std::uint32_t feedback_every = 1;  // packets per feedback (+ one at every rate change)
    double idle_timeout_s = 0.0;       // 0: run until a signal
    std::string epochs_trace, stats_path;
    std::string log_level = "info";
};

sender_params read_sender_config(const daemon::config_node& root);
receiver_params read_receiver_config(const daemon::config_node& root);

}  // namespace oppsched::wrc_daemon
