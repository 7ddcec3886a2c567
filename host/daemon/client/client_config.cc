// oppsched-client's configuration file: see client_config.h.
#include "client_config.h"

#include <regex>
#include <string>
#include <vector>

#include "oppsched/daemon/field_table.h"
#include "oppsched/daemon/integrity_keys.h"
#include "oppsched/daemon/zmq_endpoint.h"
#include "oppsched/integrity.h"

namespace oppsched::client {

using daemon::config_node;
using daemon::field_spec;
using daemon::read_field;
using daemon::value_range;

namespace {

// ---- the field table (client_fields()): each entry read below through read_field ----------
const field_spec kUplinkDelay = daemon::number_field(
    "", "uplink_delay_ms", 1.0, value_range::closed(0, 10000), "ms",
    "one-way delay of the uplink (HARQ feedback, CQI, upstream packets) to the AP");
const field_spec kCqiPeriod =
    daemon::integer_field("cqi", "period_slots", 1, value_range::closed(1, 1'000'000), "slots",
                          "a CQI report every this many slots");
const field_spec kStationEnabled = daemon::boolean_field(
    "station", "enabled", false, "the station holds its own uplink queue (station_queue client)");
const field_spec kStationBuffer =
    daemon::integer_field("station", "buffer_packets", 100, value_range::closed(1, 100000),
                          "packets", "the station's uplink buffer");
const field_spec kStationHarq =
    daemon::integer_field("station", "harq_processes", 8, value_range::closed(1, 16), "",
                          "the station's uplink HARQ processes");
const field_spec kStationStatus =
    daemon::number_field("station", "status_period_ms", 10.0, value_range::open_closed(0, 60000),
                         "ms", "the station's buffer status report period");
const field_spec kClampEnabled = daemon::boolean_field(
    "clamp", "enabled", false, "the CLAMP agent (Andrew & Hanly, CLAMP) rewrites the ACKs' window");
const field_spec kClampTau =
    daemon::number_field("clamp", "tau_bytes", 500.0, value_range::positive(), "bytes",
                         "tau, eq. 14 (Andrew & Hanly, CLAMP, Table II)");
const field_spec kClampAlpha =
    daemon::integer_field("clamp", "alpha_packets", 1000, value_range::closed(1, 1e8), "packets",
                          "alpha, eq. 15: the receiver rate's window");
const field_spec kClampBeta = daemon::number_field("clamp", "beta", 0.001, value_range::open(0, 1),
                                                   "", "beta, eq. 16: the price's EMA weight");
const field_spec kClampMaxIncrease =
    daemon::number_field("clamp", "max_increase_bytes", 10000.0, value_range::positive(), "bytes",
                         "the clip of Delta w per ACK (10 kB)");
const field_spec kClampMinWindow =
    daemon::number_field("clamp", "min_window_bytes", 0.0, value_range::non_negative(), "bytes",
                         "the smallest advertised window; 0 = one MSS");
const field_spec kClampSsthresh = daemon::number_field(
    "clamp", "slow_start_threshold_bytes", 0.0, value_range::non_negative(), "bytes",
    "end the receiver's slow start at this window; 0 = none (the paper)");
const field_spec kClampMuSpan = daemon::number_field(
    "clamp", "mu_min_span_s", 0.2, value_range::closed(0, 3600), "s",
    "mu_hat (eq. 15) is used once its window spans this or holds alpha + 1 packets; 0 = the "
    "literal reading");
const field_spec kClampDupacks =
    daemon::integer_field("clamp", "dupack_threshold", 3, value_range::closed(1, 1000), "ACKs",
                          "duplicate ACKs that mark a loss");
const field_spec kClampPriceTimeout =
    daemon::number_field("clamp", "price_timeout_ms", 1000.0, value_range::open_closed(0, 60000),
                         "ms", "without a price for this long the agent fails open");
const field_spec kClampMaxFlows =
    daemon::integer_field("clamp", "max_flows", 1024, value_range::closed(1, 1e6), "flows",
                          "flows the agent tracks at once");
const field_spec kClampIdle =
    daemon::number_field("clamp", "flow_idle_timeout_s", 300.0, value_range::open_closed(0, 86400),
                         "s", "a flow idle this long is forgotten");

const field_spec kStationPduFormat =
    daemon::choice_field("station", "pdu_format", "standard", {"standard", "compact"},
                         "the MAC PDU format of the station's uplink TBs (the apd's pdu.format)");
const field_spec kReassemblyMaxBytes = daemon::integer_field(
    "reassembly", "max_bytes", 1 << 20, value_range::closed(65535, 1ull << 32), "bytes",
    "bytes held beyond a gap in the PDU sequence");
const field_spec kMacPcapMaxBytes = daemon::integer_field(
    "traces", "mac_pcap_max_bytes", 256.0 * (1 << 20), value_range::closed(1024, 1ull << 40),
    "bytes", "size limit of the MAC pcap; later records are left out");
const field_spec kResidualLoss = daemon::number_field(
    "residual_loss", "probability", 0.0, value_range::closed_open(0, 1), "",
    "each delivered IP packet dropped with this probability before CLAMP and the TUN see it "
    "(Andrew & Hanly, CLAMP, Table I: 1e-3 after link-layer retransmissions); 0 = none");
const field_spec kResidualLossSeed =
    daemon::integer_field("residual_loss", "seed", 1, value_range::closed(0, 9.007199254740992e15),
                          "", "seed of residual_loss's draws");
const field_spec kSeccomp = daemon::boolean_field(
    "", "seccomp", true, "install the seccomp allow-list once set up (docs/security.md)");

std::string dirname_of(const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

void check_endpoint(const config_node& n, const std::string& key, const std::string& v) {
    static const std::regex re(R"(^(ipc://.+|tcp://.+:[0-9]+|inproc://.+)$)");
    if (!std::regex_match(v, re))
        n.fail(key, "'" + v + "' is not an ipc://PATH, tcp://HOST:PORT or inproc:// endpoint");
    if (v.rfind("ipc://", 0) == 0 && v.size() - 6 > 107)
        n.fail(key, "'" + v + "' is longer than a Unix socket path (107 bytes)");
}

}  // namespace

const std::vector<field_spec>& client_fields() {
    static const std::vector<field_spec> fields = {
        kUplinkDelay,     kCqiPeriod,        kStationEnabled,     kStationBuffer,  kStationHarq,
        kStationStatus,   kStationPduFormat, kReassemblyMaxBytes, kClampEnabled,   kClampTau,
        kClampAlpha,      kClampBeta,        kClampMaxIncrease,   kClampMinWindow, kClampSsthresh,
        kClampMuSpan,     kClampDupacks,     kClampPriceTimeout,  kClampMaxFlows,  kClampIdle,
        kMacPcapMaxBytes, kResidualLoss,     kResidualLossSeed,   kSeccomp};
    return fields;
}

client_params read_client_config(const daemon::config_node& root) {
    client_params c;
    c.user = root.require<std::uint16_t>("user");
    c.name = root.require<std::string>("name");
    if (!std::regex_match(c.name, std::regex(R"(^[A-Za-z0-9_.-]{1,64}$)")))
        root.fail("name", "'" + c.name + "' is not 1..64 of [A-Za-z0-9_.-]");
    c.tun = root.require<std::string>("tun");
    if (c.tun.empty() || c.tun.size() > 15 || c.tun.find('/') != std::string::npos)
        root.fail("tun", "'" + c.tun + "' is not an interface name (1..15 chars, no '/')");

    const config_node ep = root.child("endpoints");
    c.rx_endpoint = ep.require<std::string>("rx");
    check_endpoint(ep, "rx", c.rx_endpoint);
    if (const auto why = daemon::bind_refusal(c.rx_endpoint); !why.empty())
        ep.fail("rx", why);  // bound by the client
    c.uplink_endpoint = ep.require<std::string>("uplink");
    check_endpoint(ep, "uplink", c.uplink_endpoint);
    c.grants_endpoint = ep.get<std::string>("grants", "");
    if (!c.grants_endpoint.empty()) {
        check_endpoint(ep, "grants", c.grants_endpoint);
        if (const auto why = daemon::bind_refusal(c.grants_endpoint); !why.empty())
            ep.fail("grants", why);  // bound by the client
        if (c.grants_endpoint == c.rx_endpoint)
            ep.fail("grants", "'" + c.grants_endpoint + "' is also endpoints.rx");
    }

    // ---- the station's own uplink queue (medium.station_queue client; station.h) ----
    {
        const config_node st = root.child_or_empty("station");
        c.station_enabled = read_field<bool>(st, kStationEnabled);
        c.station.user = c.user;
        c.station.buffer_packets = read_field<std::uint32_t>(st, kStationBuffer);
        c.station.harq_processes = read_field<std::uint32_t>(st, kStationHarq);
        c.station.format =
            *pdu::pdu_format_from_string(read_field<std::string>(st, kStationPduFormat));
        c.station.status_period =
            static_cast<time_ns>(read_field<double>(st, kStationStatus) * kNsPerMs);
        if (c.station_enabled && c.grants_endpoint.empty())
            ep.fail("grants", "required with station.enabled (the station's uplink grants)");
    }

    // ---- CURVE (docs/security.md, "Runs across machines") ----
    const config_node cv = root.child_or_empty("curve");
    auto key = [&cv](const char* field, bool secret) {
        const std::string path = cv.require<std::string>(field);
        try {
            return daemon::read_curve_key_file(path, secret);
        } catch (const std::runtime_error& e) {
            cv.fail(field, e.what());
        }
    };
    if (cv.has("secret_key_file") || cv.has("server_public_key_file")) {
        if (!daemon::curve_available())
            cv.fail("secret_key_file", "this libzmq was built without CURVE (zmq_has(\"curve\"))");
        c.curve.secret_key = key("secret_key_file", true);
        c.curve.public_key = daemon::curve_public_of(c.curve.secret_key);
        c.curve.server_key = key("server_public_key_file", false);
    }
    // A plain-text uplink across the network would carry forgeable feedback; the apd
    // refuses it anyway (its non-loopback uplinks are CURVE servers).
    if (!c.curve.enabled() && !daemon::bind_refusal(c.uplink_endpoint).empty())
        ep.fail("uplink", "'" + c.uplink_endpoint +
                              "' is not a loopback address: set curve.secret_key_file and "
                              "curve.server_public_key_file (CURVE keys from `oppsched keys "
                              "generate`, docs/security.md)");

    const config_node z = root.child_or_empty("zmq");
    c.hwm = z.get<int>("hwm", 1000, value_range::closed(1, 1e6));
    c.socket_timeout_ms = z.get<int>("timeout_ms", 100, value_range::closed(1, 60000));

    const double delay_ms = read_field<double>(root, kUplinkDelay);
    c.uplink.delay = static_cast<time_ns>(delay_ms * kNsPerMs + 0.5);

    const config_node cqi = root.child_or_empty("cqi");
    c.core.user = c.user;
    c.core.cqi_period_slots = read_field<std::uint32_t>(cqi, kCqiPeriod);

    const config_node ra = root.child_or_empty("reassembly");
    c.core.reassembly.window = ra.get<std::uint32_t>("window", 64, value_range::closed(1, 1 << 20));
    const double ra_timeout_ms =
        ra.get<double>("timeout_ms", 50.0, value_range::open_closed(0, 60000));
    c.core.reassembly.timeout = static_cast<time_ns>(ra_timeout_ms * kNsPerMs + 0.5);
    const double ra_held_ms =
        ra.get<double>("held_timeout_ms", 0.0, value_range::closed(0, 600000));
    c.core.reassembly.held_timeout = static_cast<time_ns>(ra_held_ms * kNsPerMs + 0.5);
    c.core.harq_max_transmissions =
        ra.get<std::uint32_t>("harq_max_transmissions", 0, value_range::closed(0, 64));
    c.core.reassembly.max_bytes =
        static_cast<std::size_t>(read_field<std::uint64_t>(ra, kReassemblyMaxBytes));
    c.core.reassembly.max_ahead =
        ra.get<std::uint32_t>("max_ahead", 1024, value_range::closed(1, 1u << 30));
    // The integrity tag (integrity.h): the apd's pdu.integrity_key_file and
    // pdu.integrity_run_id, from which the downlink key (checked here) and the uplink key
    // (the station's TBs) are derived.
    if (const auto keys = daemon::read_integrity_keys(root)) {
        c.core.integrity_key = keys->downlink;
        c.station.integrity_key = keys->uplink;
    }

    const config_node rl = root.child_or_empty("residual_loss");
    c.core.residual_loss = read_field<double>(rl, kResidualLoss);
    c.core.residual_loss_seed = read_field<std::uint64_t>(rl, kResidualLossSeed);

    const config_node cl = root.child_or_empty("clamp");
    auto& k = c.core.clamp;
    k.enabled = read_field<bool>(cl, kClampEnabled);
    k.agent.tau_bytes = read_field<double>(cl, kClampTau);
    k.agent.alpha_packets = read_field<std::uint32_t>(cl, kClampAlpha);
    k.agent.beta = read_field<double>(cl, kClampBeta);
    k.mss_bytes = cl.get<std::uint32_t>("mss", 0, value_range::closed(0, 65535));
    if (k.mss_bytes != 0 && k.mss_bytes < 64)
        cl.fail("mss", std::to_string(k.mss_bytes) + " not 0 (learn) or in [64, 65535]");
    const double pt_ms = read_field<double>(cl, kClampPriceTimeout);
    k.price_timeout = static_cast<time_ns>(pt_ms * kNsPerMs + 0.5);
    k.agent.max_increase_bytes = read_field<double>(cl, kClampMaxIncrease);
    k.agent.min_window_bytes = read_field<double>(cl, kClampMinWindow);
    k.agent.slow_start_threshold_bytes = read_field<double>(cl, kClampSsthresh);
    k.agent.dupack_threshold = read_field<int>(cl, kClampDupacks);
    k.agent.mu_min_span_s = read_field<double>(cl, kClampMuSpan);
    k.max_flows = read_field<std::uint32_t>(cl, kClampMaxFlows);
    const double idle_s = read_field<double>(cl, kClampIdle);
    k.flow_idle_timeout = static_cast<time_ns>(idle_s * kNsPerSec);

    const config_node tr = root.child_or_empty("traces");
    c.windows_trace = tr.get<std::string>("windows", "");
    c.stats_path = tr.get<std::string>("stats", "");
    c.mac_pcap = tr.get<std::string>("mac_pcap", "");
    c.mac_pcap_max_bytes = read_field<std::uint64_t>(tr, kMacPcapMaxBytes);
    // The fail-open/resume events (client_core.h): by default beside the stats file.
    const std::string events_default =
        (k.enabled && !c.stats_path.empty())
            ? dirname_of(c.stats_path) + "/client." + c.name + ".events.csv"
            : "";
    c.events_trace = tr.get<std::string>("events", events_default);

    c.log_level =
        root.get_choice("log_level", "info", {"trace", "debug", "info", "warn", "error", "off"});
    c.seccomp = read_field<bool>(root, kSeccomp);
    root.check_no_unknown_keys();

    // Second line of defence: the library's own validation (names its fields).
    c.core.validate();
    c.uplink.validate();
    c.station.validate();
    return c;
}

client_params load_client_config(const std::string& path) {
    return read_client_config(config_node::load_file(path));
}

}  // namespace oppsched::client
