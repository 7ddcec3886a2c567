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

// A message's fields as a dict, named as for_each_wire_field names them.
struct dict_writer {
    pybind11::dict& d;
    template <class T>
    void num(const char* name, const T& v) {
        d[name] = v;
    }
    template <class... B>
    void flags(const char*, const wire_bit<B>&... bits) {
        ((d[bits.name] = bits.value), ...);
    }
    void boolean(const char* name, bool b) { d[name] = b; }
    void bytes(const char*, const char* name, const std::vector<std::uint8_t>& v) {
        d[name] = to_bytes(v);
    }
};

// Sets the fields a dict names; the others keep their defaults.
struct dict_reader {
    const pybind11::dict& d;
    template <class T>
    void num(const char* name, T& v) {
        if (d.contains(name)) v = d[name].template cast<T>();
    }
    template <class... B>
    void flags(const char*, const wire_bit<B>&... bits) {
        ((bits.value = d.contains(bits.name) ? d[bits.name].template cast<bool>() : bits.value),
         ...);
    }
    void boolean(const char* name, bool& b) { num(name, b); }
    void bytes(const char*, const char* name, std::vector<std::uint8_t>& v) {
        if (d.contains(name)) v = to_vec(d[name].cast<pybind11::bytes>());
    }
};

message from_dict(const std::string& type, const pybind11::dict& d) {
    for (std::size_t t = 1; t <= std::variant_size_v<message>; ++t) {
        const auto kind = static_cast<msg_type>(t);
        if (type != to_string(kind)) continue;
        message m = make_message(kind);
        std::visit([&](auto& x) { for_each_wire_field(x, dict_reader{d}); }, m);
        // A grant is empty unless it carries a TB or the dict says otherwise.
        if (auto* g = std::get_if<slot_grant>(&m); g && !d.contains("empty"))
            g->empty = g->tb.empty();
        return m;
    }
    throw_invalid("type: '" + type + "' is not a message type");
}

pybind11::dict to_dict(const message& m) {
    pybind11::dict d;
    std::visit([&](const auto& x) { for_each_wire_field(x, dict_writer{d}); }, m);
    return d;
}

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
            return pybind11::make_tuple(f.seq, to_string(type_of(f.msg)), to_dict(f.msg));
        },
        pybind11::arg("frame"), pybind11::arg("max_len") = kMaxFrameLen,
        "Decodes one frame to (seq, type, fields); ValueError names the bad field.");
}

}  // namespace oppsched::py
