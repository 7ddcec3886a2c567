// oppsched-client's configuration reader (client/client_config.h): defaults, units, and every
// error naming the dotted field and the value, before anything is opened.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "client_config.h"

namespace oppsched::client {
namespace {

const std::string kMinimal =
    "user: 1\n"
    "name: ue1\n"
    "tun: radio0\n"
    "endpoints: {rx: 'ipc:///tmp/x/rx_1', uplink: 'ipc:///tmp/x/uplink'}\n";

client_params read(const std::string& yaml) {
    return read_client_config(daemon::config_node::parse(yaml, "client.yaml"));
}

// The error message ("" if the configuration is accepted).
std::string error_of(const std::string& yaml) {
    try {
        read(yaml);
    } catch (const std::invalid_argument& e) {  // daemon::config_error is one too
        return e.what();
    }
    return "";
}

TEST(ClientConfig, when_only_the_required_keys_are_given_then_the_documented_defaults_apply) {
    const client_params c = read(kMinimal);
    EXPECT_EQ(c.user, 1);
    EXPECT_EQ(c.core.user, 1);
    EXPECT_EQ(c.name, "ue1");
    EXPECT_EQ(c.tun, "radio0");
    EXPECT_EQ(c.rx_endpoint, "ipc:///tmp/x/rx_1");
    EXPECT_EQ(c.hwm, 1000);
    EXPECT_EQ(c.socket_timeout_ms, 100);
    EXPECT_EQ(c.uplink.delay, kNsPerMs);
    EXPECT_EQ(c.core.cqi_period_slots, 1u);
    EXPECT_EQ(c.core.reassembly.window, 64u);
    EXPECT_EQ(c.core.reassembly.timeout, 50 * kNsPerMs);
    EXPECT_FALSE(c.core.clamp.enabled);
    EXPECT_EQ(c.core.clamp.price_timeout, kNsPerSec);
    EXPECT_EQ(c.log_level, "info");
    EXPECT_EQ(c.events_trace, "");
}

TEST(ClientConfig, when_times_are_given_in_ms_or_s_then_they_are_read_in_ns) {
    const client_params c = read(kMinimal +
                                 "uplink_delay_ms: 2.5\n"
                                 "reassembly: {timeout_ms: 20}\n"
                                 "clamp: {enabled: true, price_timeout_ms: 300, "
                                 "flow_idle_timeout_s: 2}\n");
    EXPECT_EQ(c.uplink.delay, 2'500'000);
    EXPECT_EQ(c.core.reassembly.timeout, 20 * kNsPerMs);
    EXPECT_EQ(c.core.clamp.price_timeout, 300 * kNsPerMs);
    EXPECT_EQ(c.core.clamp.flow_idle_timeout, 2 * kNsPerSec);
}

TEST(ClientConfig, when_clamp_is_on_then_the_events_trace_defaults_beside_the_stats_file) {
    const client_params c =
        read(kMinimal + "clamp: {enabled: true}\ntraces: {stats: /run/a/client.ue1.stats.json}\n");
    EXPECT_EQ(c.events_trace, "/run/a/client.ue1.events.csv");
    EXPECT_EQ(read(kMinimal + "traces: {stats: /run/a/s.json}\n").events_trace, "");
}

TEST(ClientConfig, when_a_mac_pcap_is_named_then_it_is_written_within_its_limit) {
    EXPECT_EQ(read(kMinimal).mac_pcap, "");  // off by default
    const client_params c =
        read(kMinimal + "traces: {mac_pcap: /tmp/m.pcap, mac_pcap_max_bytes: 4096}\n");
    EXPECT_EQ(c.mac_pcap, "/tmp/m.pcap");
    EXPECT_EQ(c.mac_pcap_max_bytes, 4096u);
    const std::string e = error_of(kMinimal + "traces: {mac_pcap_max_bytes: 100}\n");
    EXPECT_NE(e.find("traces.mac_pcap_max_bytes"), std::string::npos) << e;
    EXPECT_NE(e.find("100"), std::string::npos) << e;
}

TEST(ClientConfig, when_rx_binds_beyond_loopback_then_the_error_names_the_field) {
    const std::string y =
        "user: 1\nname: ue1\ntun: radio0\n"
        "endpoints: {rx: 'tcp://0.0.0.0:6000', uplink: 'tcp://10.0.0.1:5555'}\n";
    EXPECT_EQ(error_of(y).rfind("endpoints.rx: 'tcp://0.0.0.0:6000' binds a non-loopback", 0), 0u)
        << error_of(y);
    // the uplink is connected, not bound: any address
    EXPECT_EQ(error_of("user: 1\nname: ue1\ntun: radio0\n"
                       "endpoints: {rx: 'tcp://127.0.0.1:6000', uplink: 'tcp://10.0.0.1:5555'}\n"),
              "");
}

TEST(ClientConfig, when_a_value_is_out_of_range_then_the_error_names_the_field_and_value) {
    EXPECT_EQ(error_of(kMinimal + "clamp: {beta: 1.5}\n").rfind("clamp.beta: 1.5 not in (0,1)", 0),
              0u);
    EXPECT_EQ(error_of(kMinimal + "uplink_delay_ms: -1\n")
                  .rfind("uplink_delay_ms: -1 not in [0,10000]", 0),
              0u);
    EXPECT_EQ(error_of(kMinimal + "cqi: {period_slots: 0}\n").rfind("cqi.period_slots: 0", 0), 0u);
    EXPECT_EQ(error_of(kMinimal + "clamp: {mss: 10}\n").rfind("clamp.mss: 10", 0), 0u);
}

TEST(ClientConfig, when_a_key_is_unknown_or_missing_then_it_is_named) {
    EXPECT_EQ(error_of(kMinimal + "bogus: 1\n").rfind("bogus: unknown key", 0), 0u);
    EXPECT_EQ(error_of(kMinimal + "clamp: {tau: 500}\n").rfind("clamp.tau: unknown key", 0), 0u);
    EXPECT_EQ(error_of("user: 1\ntun: radio0\nendpoints: {rx: 'ipc:///a', uplink: 'ipc:///b'}\n")
                  .rfind("name: missing", 0),
              0u);
}

TEST(ClientConfig, when_a_name_endpoint_or_interface_is_malformed_then_it_is_rejected) {
    EXPECT_EQ(error_of("user: 1\nname: 'a b'\ntun: radio0\n"
                       "endpoints: {rx: 'ipc:///a', uplink: 'ipc:///b'}\n")
                  .rfind("name: 'a b'", 0),
              0u);
    EXPECT_EQ(error_of("user: 1\nname: ue1\ntun: a-very-long-interface-name\n"
                       "endpoints: {rx: 'ipc:///a', uplink: 'ipc:///b'}\n")
                  .rfind("tun: 'a-very-long-interface-name'", 0),
              0u);
    EXPECT_EQ(error_of("user: 1\nname: ue1\ntun: radio0\n"
                       "endpoints: {rx: 'ipc:///a', uplink: 'http://x'}\n")
                  .rfind("endpoints.uplink: 'http://x'", 0),
              0u);
}

}  // namespace
}  // namespace oppsched::client
