// Python access to the PHY-MAC and uplink messages (oppsched/wire.h): encode a dict, decode
// bytes to (seq, type, dict). Used by the flowgraph blocks' tests, the Wireshark-side tools
// and fault-injection tests.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "oppsched/validation.h"
#include "oppsched/wire.h"

namespace py = pybind11;
using namespace oppsched::wire;

namespace oppsched::py {
namespace {

std::vector<std::uint8_t> to_vec(const pybind11::bytes& b) {
    const std::string s = b;
    return {s.begin(), s.end()};
}
pybind11::bytes to_bytes(const std::vector<std::uint8_t>& v) {
    return pybind11::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

template <class T>
T get(const pybind11::dict& d, const char* key, T def) {
    return d.contains(key) ? d[key].cast<T>() : def;
}

message from_dict(const std::string& type, const pybind11::dict& d) {
    if (type == "slot_request")
        return slot_request{get<std::uint64_t>(d, "slot", 0),
                            get<std::int64_t>(d, "air_time_ns", 0)};
    if (type == "slot_grant") {
        slot_grant m;
        m.slot = get<std::uint64_t>(d, "slot", 0);
        m.user = get<std::uint16_t>(d, "user", 0);
        m.mcs = get<std::uint8_t>(d, "mcs", 0);
        m.harq_pid = get<std::uint8_t>(d, "harq_pid", 0);
        m.ndi = get<std::uint8_t>(d, "ndi", 0);
        m.rv = get<std::uint8_t>(d, "rv", 0);
        if (d.contains("tb")) m.tb = to_vec(d["tb"].cast<pybind11::bytes>());
        m.empty = get<bool>(d, "empty", m.tb.empty());
        return m;
    }
    if (type == "rx_indication") {
        rx_indication m;
        m.slot = get<std::uint64_t>(d, "slot", 0);
        m.user = get<std::uint16_t>(d, "user", 0);
        m.mcs = get<std::uint8_t>(d, "mcs", 0);
        m.harq_pid = get<std::uint8_t>(d, "harq_pid", 0);
        m.ndi = get<std::uint8_t>(d, "ndi", 0);
        m.rv = get<std::uint8_t>(d, "rv", 0);
        m.header_ok = get<bool>(d, "header_ok", false);
        m.addressed = get<bool>(d, "addressed", false);
        m.crc_ok = get<bool>(d, "crc_ok", false);
        m.snr_db = get<float>(d, "snr_db", 0.f);
        m.cqi = get<std::uint8_t>(d, "cqi", 0);
        m.combined = get<std::uint8_t>(d, "combined", 0);
        if (d.contains("tb")) m.tb = to_vec(d["tb"].cast<pybind11::bytes>());
        return m;
    }
    if (type == "cqi_report")
        return cqi_report{get<std::uint16_t>(d, "user", 0), get<std::uint64_t>(d, "slot", 0),
                          get<float>(d, "snr_db", 0.f), get<std::uint8_t>(d, "cqi", 0)};
    if (type == "harq_feedback")
        return harq_feedback{get<std::uint16_t>(d, "user", 0), get<std::uint64_t>(d, "slot", 0),
                             get<std::uint8_t>(d, "harq_pid", 0), get<bool>(d, "ack", false)};
    if (type == "uplink_packet") {
        uplink_packet m;
        m.user = get<std::uint16_t>(d, "user", 0);
        if (d.contains("packet")) m.packet = to_vec(d["packet"].cast<pybind11::bytes>());
        return m;
    }
    throw_invalid("type: '" + type + "' is not a message type");
}

struct to_dict {
    pybind11::dict operator()(const slot_request& m) const {
        pybind11::dict d;
        d["slot"] = m.slot;
        d["air_time_ns"] = m.air_time_ns;
        return d;
    }
    pybind11::dict operator()(const slot_grant& m) const {
        pybind11::dict d;
        d["slot"] = m.slot;
        d["empty"] = m.empty;
        d["user"] = m.user;
        d["mcs"] = m.mcs;
        d["harq_pid"] = m.harq_pid;
        d["ndi"] = m.ndi;
        d["rv"] = m.rv;
        d["tb"] = to_bytes(m.tb);
        return d;
    }
    pybind11::dict operator()(const rx_indication& m) const {
        pybind11::dict d;
        d["slot"] = m.slot;
        d["user"] = m.user;
        d["mcs"] = m.mcs;
        d["harq_pid"] = m.harq_pid;
        d["ndi"] = m.ndi;
        d["rv"] = m.rv;
        d["header_ok"] = m.header_ok;
        d["addressed"] = m.addressed;
        d["crc_ok"] = m.crc_ok;
        d["snr_db"] = m.snr_db;
        d["cqi"] = m.cqi;
        d["combined"] = m.combined;
        d["tb"] = to_bytes(m.tb);
        return d;
    }
    pybind11::dict operator()(const cqi_report& m) const {
        pybind11::dict d;
        d["user"] = m.user;
        d["slot"] = m.slot;
        d["snr_db"] = m.snr_db;
        d["cqi"] = m.cqi;
        return d;
    }
    pybind11::dict operator()(const harq_feedback& m) const {
        pybind11::dict d;
        d["user"] = m.user;
        d["slot"] = m.slot;
        d["harq_pid"] = m.harq_pid;
        d["ack"] = m.ack;
        return d;
    }
    pybind11::dict operator()(const uplink_packet& m) const {
        pybind11::dict d;
        d["user"] = m.user;
        d["packet"] = to_bytes(m.packet);
        return d;
    }
};

}  // namespace

void bind_wire(pybind11::module_& m) {
    auto w = m.def_submodule("wire", "PHY-MAC and uplink messages (oppsched/wire.h)");
    w.attr("USER_NOBODY") = kUserNobody;
    w.attr("MAX_FRAME_LEN") = kMaxFrameLen;
    w.def(
        "encode",
        [](const std::string& type, std::uint32_t seq, const pybind11::dict& fields) {
            return to_bytes(encode(from_dict(type, fields), seq));
        },
        pybind11::arg("type"), pybind11::arg("seq"), pybind11::arg("fields"),
        "Encodes one message of `type` (slot_request, slot_grant, rx_indication, cqi_report, "
        "harq_feedback, uplink_packet) from a dict of its fields.");
    w.def(
        "decode",
        [](const pybind11::bytes& frame, std::size_t max_len) {
            const auto v = to_vec(frame);
            auto r = decode(v.data(), v.size(), max_len);
            if (!r.ok()) throw_invalid(r.error());
            const auto& f = r.value();
            return pybind11::make_tuple(f.seq, to_string(type_of(f.msg)),
                                        std::visit(to_dict{}, f.msg));
        },
        pybind11::arg("frame"), pybind11::arg("max_len") = kMaxFrameLen,
        "Decodes one frame to (seq, type, fields); ValueError names the bad field.");
}

}  // namespace oppsched::py
