// Python bindings of oppsched/tcpip.h: parse_packet, rewrite_window, mark_ce,
// tcp_checksum, window_field_for and window_tracker. Errors become ValueError with the
// C++ message (field and value).
#include <arpa/inet.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "bindings.h"
#include "oppsched/tcpip.h"
#include "oppsched/validation.h"

namespace oppsched::py {
namespace {

using tcpip::packet_info;

packet_info parse_or_throw(const std::vector<std::uint8_t>& p) {
    auto r = tcpip::parse(p);
    if (!r) throw_invalid(r.error());
    return std::move(r).value();
}

std::string addr_str(const std::array<std::uint8_t, 16>& a, int version) {
    char buf[INET6_ADDRSTRLEN] = {0};
    inet_ntop(version == 6 ? AF_INET6 : AF_INET, a.data(), buf, sizeof buf);
    return buf;
}

pybind11::dict info_dict(const packet_info& i) {
    pybind11::dict d;
    d["ip_version"] = i.ip_version;
    d["ip_header_len"] = i.ip_header_len;
    d["total_len"] = i.total_len;
    d["ecn"] = i.ecn;
    d["proto"] = i.flow.proto;
    d["src"] = addr_str(i.flow.src, i.ip_version);
    d["dst"] = addr_str(i.flow.dst, i.ip_version);
    d["sport"] = i.flow.sport;
    d["dport"] = i.flow.dport;
    d["is_fragment"] = i.is_fragment;
    if (i.tcp) {
        const tcpip::tcp_header& t = *i.tcp;
        pybind11::dict td;
        td["offset"] = t.offset;
        td["header_len"] = t.header_len;
        td["payload_len"] = t.payload_len;
        td["seq"] = t.seq;
        td["ack"] = t.ack;
        td["window"] = t.window;
        td["checksum"] = t.checksum;
        td["flags"] = t.flags;
        td["wscale"] = t.wscale ? pybind11::cast(*t.wscale) : pybind11::none();
        td["mss"] = t.mss ? pybind11::cast(*t.mss) : pybind11::none();
        td["sack_permitted"] = t.sack_permitted;
        td["sack_blocks"] = t.sack_blocks;
        td["timestamp"] = t.timestamp ? pybind11::cast(*t.timestamp) : pybind11::none();
        d["tcp"] = td;
    } else {
        d["tcp"] = pybind11::none();
    }
    return d;
}

std::uint8_t check_shift(int wscale) {
    if (wscale < 0 || wscale > 255)
        throw_invalid("wscale: " + std::to_string(wscale) + " not in [0, 255]");
    return static_cast<std::uint8_t>(wscale > tcpip::kMaxWindowShift ? tcpip::kMaxWindowShift
                                                                     : wscale);
}
std::uint64_t check_window(long long window_bytes) {
    if (window_bytes < 0)
        throw_invalid("window_bytes: " + std::to_string(window_bytes) + " is negative");
    return static_cast<std::uint64_t>(window_bytes);
}

const char* outcome_name(tcpip::rewrite_outcome o) {
    switch (o) {
        case tcpip::rewrite_outcome::rewritten:
            return "rewritten";
        case tcpip::rewrite_outcome::unknown_flow:
            return "unknown_flow";
        case tcpip::rewrite_outcome::syn:
            return "syn";
        case tcpip::rewrite_outcome::not_applicable:
            return "not_applicable";
    }
    return "?";
}

}  // namespace

void bind_tcpip(pybind11::module_& m) {
    m.def(
        "parse_packet",
        [](const pybind11::bytes& packet) { return info_dict(parse_or_throw(to_vec(packet))); },
        pybind11::arg("packet"),
        "Parse an IPv4/IPv6 packet (extension headers, TCP options) into a dict; "
        "ValueError naming the field and value if malformed.");

    m.def(
        "rewrite_window",
        [](const pybind11::bytes& packet, long long window_bytes, int wscale) {
            std::vector<std::uint8_t> p = to_vec(packet);
            const packet_info info = parse_or_throw(p);
            if (!info.tcp) throw_invalid("tcp: packet has no TCP header");
            if (info.is_fragment) throw_invalid("ip.fragment: 1 (fragments are not rewritten)");
            auto r = tcpip::set_window(p.data(), p.size(), info, check_window(window_bytes),
                                       check_shift(wscale));
            if (!r) throw_invalid(r.error());
            return to_bytes(p);
        },
        pybind11::arg("packet"), pybind11::arg("window_bytes"), pybind11::arg("wscale"),
        "Same packet with the TCP window set to window_bytes rounded up to 2**wscale "
        "(clamped to 65535 << wscale; wscale > 14 used as 14; SYN windows unscaled) and the "
        "checksum updated incrementally (RFC 1624 eqn. 3). ValueError on malformed input.");

    m.def(
        "mark_ce",
        [](const pybind11::bytes& packet) -> pybind11::object {
            std::vector<std::uint8_t> p = to_vec(packet);
            if (!tcpip::mark_ce(p)) return pybind11::none();
            return to_bytes(p);
        },
        pybind11::arg("packet"),
        "The packet with ECN CE set (IPv4 checksum fixed), or None if not ECN-capable or "
        "malformed.");

    m.def(
        "tcp_checksum",
        [](const pybind11::bytes& packet) {
            std::vector<std::uint8_t> p = to_vec(packet);
            const packet_info info = parse_or_throw(p);
            if (!info.tcp) throw_invalid("tcp: packet has no TCP header");
            return tcpip::tcp_checksum(p.data(), info);
        },
        pybind11::arg("packet"), "Full TCP checksum of the packet (field taken as zero).");

    m.def(
        "window_field_for",
        [](long long window_bytes, int wscale) {
            return tcpip::window_field_for(check_window(window_bytes), check_shift(wscale));
        },
        pybind11::arg("window_bytes"), pybind11::arg("wscale"),
        "ceil(window_bytes / 2**wscale) clamped to 65535.");

    pybind11::class_<tcpip::window_tracker>(m, "window_tracker",
                                            "Per-connection window-scale tracking and "
                                            "advertised-window rewriting (right edge never "
                                            "moves left).")
        .def(pybind11::init([](std::size_t max_flows, time_ns idle_timeout_ns) {
                 tcpip::window_tracker_params p;
                 p.max_flows = max_flows;
                 p.idle_timeout = idle_timeout_ns;
                 return std::make_unique<tcpip::window_tracker>(p);
             }),
             pybind11::kw_only(), pybind11::arg("max_flows") = 65536,
             pybind11::arg("idle_timeout_ns") = 300 * kNsPerSec)
        .def(
            "learn",
            [](tcpip::window_tracker& t, const pybind11::bytes& packet, time_ns now_ns) {
                t.learn(parse_or_throw(to_vec(packet)), now_ns);
            },
            pybind11::arg("packet"), pybind11::arg("now_ns"))
        .def(
            "rewrite",
            [](tcpip::window_tracker& t, const pybind11::bytes& packet, long long window_bytes,
               time_ns now_ns) {
                std::vector<std::uint8_t> p = to_vec(packet);
                const packet_info info = parse_or_throw(p);
                const auto o =
                    t.rewrite(p.data(), p.size(), info, check_window(window_bytes), now_ns);
                return pybind11::make_tuple(outcome_name(o), to_bytes(p));
            },
            pybind11::arg("packet"), pybind11::arg("window_bytes"), pybind11::arg("now_ns"),
            "Returns (outcome, packet): outcome is 'rewritten', 'unknown_flow', 'syn' or "
            "'not_applicable'.")
        .def(
            "shift",
            [](const tcpip::window_tracker& t, const pybind11::bytes& packet) {
                return t.shift(parse_or_throw(to_vec(packet)).flow);
            },
            pybind11::arg("packet"), "Shift for windows sent in this packet's direction, or None.")
        .def("expire", &tcpip::window_tracker::expire, pybind11::arg("now_ns"))
        .def("__len__", &tcpip::window_tracker::size)
        .def_property_readonly(
            "stats", [](const tcpip::window_tracker& t) { return stats_to_dict(t.stats()); });
}

}  // namespace oppsched::py
