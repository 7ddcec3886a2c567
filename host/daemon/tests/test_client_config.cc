// oppsched-client's configuration reader (client/client_config.h): defaults, units, and every
// error naming the dotted field and the value, before anything is opened.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
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
    EXPECT_EQ(c.core.reassembly.held_timeout, 0);
    EXPECT_EQ(c.core.harq_max_transmissions, 0u);
    EXPECT_FALSE(c.core.clamp.enabled);
    EXPECT_EQ(c.core.clamp.price_timeout, kNsPerSec);
    EXPECT_EQ(c.log_level, "info");
    EXPECT_EQ(c.events_trace, "");
}

TEST(ClientConfig, when_times_are_given_in_ms_or_s_then_they_are_read_in_ns) {
    const client_params c = read(kMinimal +
                                 "uplink_delay_ms: 2.5\n"
                                 "reassembly: {timeout_ms: 20, held_timeout_ms: 1500, "
                                 "harq_max_transmissions: 4}\n"
                                 "clamp: {enabled: true, price_timeout_ms: 300, "
                                 "flow_idle_timeout_s: 2}\n");
    EXPECT_EQ(c.uplink.delay, 2'500'000);
    EXPECT_EQ(c.core.reassembly.timeout, 20 * kNsPerMs);
    EXPECT_EQ(c.core.reassembly.held_timeout, 1500 * kNsPerMs);
    EXPECT_EQ(c.core.harq_max_transmissions, 4u);
    EXPECT_EQ(c.core.clamp.price_timeout, 300 * kNsPerMs);
    EXPECT_EQ(c.core.clamp.flow_idle_timeout, 2 * kNsPerSec);
}

TEST(ClientConfig, when_a_residual_loss_is_given_then_the_core_drops_at_that_rate_and_seed) {
    EXPECT_EQ(read(kMinimal).core.residual_loss, 0.0);  // none by default
    const client_params c = read(kMinimal + "residual_loss: {probability: 6.7e-4, seed: 1007}\n");
    EXPECT_DOUBLE_EQ(c.core.residual_loss, 6.7e-4);
    EXPECT_EQ(c.core.residual_loss_seed, 1007u);
    const std::string e = error_of(kMinimal + "residual_loss: {probability: 1.0}\n");
    EXPECT_NE(e.find("residual_loss.probability"), std::string::npos) << e;
    EXPECT_NE(e.find("1"), std::string::npos) << e;
    EXPECT_NE(error_of(kMinimal + "residual_loss: {probability: -1e-3}\n")
                  .find("residual_loss.probability"),
              std::string::npos);
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
    // the uplink is connected, not bound: loopback in plain text, else with CURVE keys only
    EXPECT_EQ(error_of("user: 1\nname: ue1\ntun: radio0\n"
                       "endpoints: {rx: 'tcp://127.0.0.1:6000', uplink: 'tcp://127.0.0.1:5555'}\n"),
              "");
    const std::string lan =
        "user: 1\nname: ue1\ntun: radio0\n"
        "endpoints: {rx: 'tcp://127.0.0.1:6000', uplink: 'tcp://10.0.0.1:5555'}\n";
    EXPECT_EQ(error_of(lan).rfind("endpoints.uplink: 'tcp://10.0.0.1:5555' is not a loopback "
                                  "address: set curve.secret_key_file",
                                  0),
              0u)
        << error_of(lan);
}

std::string key_file(const std::string& name, const std::string& text, mode_t mode) {
    const std::string p =
        ::testing::TempDir() + "/oppsched_client_config_" + std::to_string(::getpid()) + "_" + name;
    ::unlink(p.c_str());
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p;
}

TEST(ClientConfig, when_curve_keys_are_given_then_a_lan_uplink_is_a_curve_client) {
    const auto server = daemon::curve_keypair();
    const auto me = daemon::curve_keypair();
    const std::string sec = key_file("ue1.secret", me.second, 0600);
    const std::string srv = key_file("apd.public", server.first, 0644);
    const std::string base =
        "user: 1\nname: ue1\ntun: radio0\n"
        "endpoints: {rx: 'ipc:///tmp/x/rx_1', uplink: 'tcp://10.253.1.1:5600'}\n";
    const client_params c = read(base + "curve: {secret_key_file: '" + sec +
                                 "', server_public_key_file: '" + srv + "'}\n");
    EXPECT_EQ(c.curve.secret_key, me.second);
    EXPECT_EQ(c.curve.public_key, me.first);
    EXPECT_EQ(c.curve.server_key, server.first);
    // a secret key others can read is refused, naming the field and the file
    const std::string open = key_file("open.secret", me.second, 0644);
    const std::string e = error_of(base + "curve: {secret_key_file: '" + open +
                                   "', server_public_key_file: '" + srv + "'}\n");
    EXPECT_EQ(e.rfind("curve.secret_key_file: secret key file " + open, 0), 0u) << e;
    EXPECT_EQ(e.find(me.second), std::string::npos) << "the message shows the key";
    EXPECT_NE(error_of(base + "curve: {secret_key_file: '" + sec + "'}\n")
                  .find("curve.server_public_key_file"),
              std::string::npos);
}

TEST(ClientConfig,
     when_an_integrity_key_file_and_run_id_are_given_then_core_and_station_use_the_runs_keys) {
    const std::string ik = key_file("integrity.key", "000102030405060708090a0b0c0d0e0f\n", 0600);
    const std::string run = "integrity_run_id: '00112233445566778899aabbccddeeff'\n";
    const client_params c = read(kMinimal + "integrity_key_file: '" + ik + "'\n" + run);
    ASSERT_TRUE(c.core.integrity_key);
    ASSERT_TRUE(c.station.integrity_key);
    const auto testbed = integrity::key_from_hex("000102030405060708090a0b0c0d0e0f");
    const auto id = integrity::run_id_from_hex("00112233445566778899aabbccddeeff");
    EXPECT_EQ(*c.core.integrity_key,
              integrity::run_key(testbed, id, integrity::link_direction::downlink));
    EXPECT_EQ(*c.station.integrity_key,
              integrity::run_key(testbed, id, integrity::link_direction::uplink));
    EXPECT_NE(*c.core.integrity_key, testbed) << "the long-term key is never used as it is";
    EXPECT_FALSE(read(kMinimal).core.integrity_key);
    EXPECT_FALSE(read(kMinimal).station.integrity_key);
    const std::string bad = key_file("bad.key", "0001\n", 0600);
    EXPECT_EQ(error_of(kMinimal + "integrity_key_file: '" + bad + "'\n" + run)
                  .rfind("integrity_key_file: key file " + bad, 0),
              0u);
    // without the run's id the tag would not be bound to the run: refused, naming the key
    EXPECT_EQ(
        error_of(kMinimal + "integrity_key_file: '" + ik + "'\n").rfind("integrity_run_id: ", 0),
        0u);
    EXPECT_EQ(error_of(kMinimal + "integrity_key_file: '" + ik + "'\nintegrity_run_id: 'abc'\n")
                  .rfind("integrity_run_id: ", 0),
              0u);
}

TEST(ClientConfig, when_the_station_holds_its_queue_then_grants_come_on_their_own_endpoint) {
    EXPECT_FALSE(read(kMinimal).station_enabled);
    const std::string eps =
        "user: 1\nname: ue1\ntun: radio0\n"
        "endpoints: {rx: 'ipc:///tmp/x/rx_1', uplink: 'ipc:///tmp/x/uplink', "
        "grants: 'ipc:///tmp/x/grants_1'}\n";
    const client_params c = read(eps +
                                 "station: {enabled: true, buffer_packets: 30, "
                                 "pdu_format: compact, status_period_ms: 2.5}\n");
    EXPECT_TRUE(c.station_enabled);
    EXPECT_EQ(c.grants_endpoint, "ipc:///tmp/x/grants_1");
    EXPECT_EQ(c.station.user, 1);
    EXPECT_EQ(c.station.buffer_packets, 30u);
    EXPECT_EQ(c.station.format, pdu::pdu_format::compact);
    EXPECT_EQ(c.station.status_period, 2'500'000);
    EXPECT_EQ(error_of(kMinimal + "station: {enabled: true}\n")
                  .rfind("endpoints.grants: required with station.enabled", 0),
              0u);
    EXPECT_EQ(error_of(eps + "station: {enabled: true, buffer_packets: 0}\n")
                  .rfind("station.buffer_packets: 0", 0),
              0u);
    EXPECT_EQ(error_of("user: 1\nname: ue1\ntun: radio0\n"
                       "endpoints: {rx: 'ipc:///a', uplink: 'ipc:///b', grants: 'ipc:///a'}\n")
                  .rfind("endpoints.grants: 'ipc:///a' is also endpoints.rx", 0),
              0u);
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
