// oppsched-wrc's configuration files: see wrc_config.h.
#include "wrc_config.h"

#include <arpa/inet.h>

#include <regex>
#include <string>

#include "oppsched/wrc_packet.h"

namespace oppsched::wrc_daemon {

using daemon::config_node;
using daemon::value_range;

sockaddr_in parse_ipv4_endpoint(const config_node& n, const std::string& key,
                                const std::string& value, bool port_may_be_zero) {
    static const std::regex re(R"(^([0-9.]+):([0-9]{1,5})$)");
    std::smatch m;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    if (!std::regex_match(value, m, re) ||
        ::inet_pton(AF_INET, m[1].str().c_str(), &a.sin_addr) != 1)
        n.fail(key, "'" + value + "' is not an IPv4 A.B.C.D:PORT");
    const unsigned long port = std::stoul(m[2].str());
    if (port > 65535 || (port == 0 && !port_may_be_zero))
        n.fail(key, "'" + value + "': port " + m[2].str() +
                        (port_may_be_zero ? " not in [0, 65535]" : " not in [1, 65535]"));
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    return a;
}

std::string to_string(const sockaddr_in& a) {
    char b[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &a.sin_addr, b, sizeof b);
    return std::string(b) + ":" + std::to_string(ntohs(a.sin_port));
}

namespace {

const std::vector<std::string> kLevels = {"trace", "debug", "info", "warn", "error", "off"};

}  // namespace

sender_params read_sender_config(const config_node& root) {
    sender_params c;
    c.flow_id = root.get<std::uint32_t>("flow_id", 1);
    c.weight = root.get<std::uint16_t>("weight", 1, value_range::closed(1, 65535));
    c.destination =
        parse_ipv4_endpoint(root, "destination", root.require<std::string>("destination"), false);
    c.bind = parse_ipv4_endpoint(root, "bind", root.get<std::string>("bind", "0.0.0.0:0"), true);
    c.packet_bytes = root.get<std::uint32_t>(
        "packet_bytes", 512,
        value_range::closed(wrc::kHeaderBytes, static_cast<double>(wrc::kMaxPacketBytes)));
    c.pacer.initial_rate_pps = root.get<double>("initial_rate_pps", 1.0, value_range::positive());
    c.pacer.min_rate_pps = root.get<double>("min_rate_pps", 0.01, value_range::positive());
    c.pacer.max_rate_pps = root.get<double>("max_rate_pps", 1e6, value_range::positive());
    c.duration_s = root.get<double>("duration_s", 0.0, value_range::closed(0, 1e7));
    c.max_bytes = root.get<std::uint64_t>("max_bytes", 0);
    const config_node tr = root.child_or_empty("traces");
    c.rates_trace = tr.get<std::string>("rates", "");
    c.stats_path = tr.get<std::string>("stats", "");
    c.log_level = root.get_choice("log_level", "info", kLevels);
    root.check_no_unknown_keys();
    c.pacer.validate();
    return c;
}

receiver_params read_receiver_config(const config_node& root) {
    receiver_params c;
    c.bind = parse_ipv4_endpoint(root, "bind", root.require<std::string>("bind"), true);
    c.weight_override = root.get<double>("weight", 0.0, value_range::closed(0, 65535));
    const config_node w = root.child_or_empty("wrc");
    auto& p = c.wrc;
    p.epoch_s = w.get<double>("epoch_ms", 350.0, value_range::open_closed(0, 1e6)) / 1e3;
    p.alpha_pps = w.get<double>("alpha_pps", 0.1, value_range::positive());
    p.delta_initial = w.get<double>("delta_initial", 0.1, value_range::open(0, 1));
    p.delta_max = w.get<double>("delta_max", 0.5, value_range::open(0, 1));
    p.lavg_epochs = w.get<std::uint32_t>("lavg_epochs", 6, value_range::closed(1, 1000));
    p.lavg_weight = w.get<double>("lavg_weight", 0.125, value_range::open_closed(0, 1));
    p.loss_band_deviations =
        w.get<double>("loss_band_deviations", 2.0, value_range::non_negative());
    p.congestion_loss_factor =
        w.get<double>("congestion_loss_factor", 0.5, value_range::open_closed(0, 1));
    p.ignore_stale_congestion =
        w.get_choice("stale_congestion_loss", "ignore", {"ignore", "act"}) == "ignore";
    p.min_rate_pps = w.get<double>("min_rate_pps", 1.0, value_range::positive());
    p.max_rate_pps = w.get<double>("max_rate_pps", 0.0, value_range::non_negative());
    const std::string mode = w.get_choice("differentiation", "weighted_increase",
                                          {"weighted_increase", "weighted_decrease"});
    p.mode = *wrc::differentiation_from_string(mode);
    c.max_flows = root.get<std::uint32_t>("max_flows", 64, value_range::closed(1, 1e6));
    c.feedback_every = root.get<std::uint32_t>("feedback_every", 1, value_range::closed(1, 1e6));
    c.idle_timeout_s = root.get<double>("idle_timeout_s", 0.0, value_range::closed(0, 1e7));
    const config_node tr = root.child_or_empty("traces");
    c.epochs_trace = tr.get<std::string>("epochs", "");
    c.stats_path = tr.get<std::string>("stats", "");
    c.log_level = root.get_choice("log_level", "info", kLevels);
    root.check_no_unknown_keys();
    // The weight is the override, or each flow's from its packets (>= 1): validating with
    // the override, else with 1, the smallest a packet carries, covers weighted_decrease's
    // delta_max / w < 1.
    p.weight = c.weight_override > 0 ? c.weight_override : 1.0;
    p.validate();
    return c;
}

}  // namespace oppsched::wrc_daemon
