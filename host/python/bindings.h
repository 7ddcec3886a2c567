#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "oppsched/cpp_plugin.h"
#include "oppsched/param_spec.h"
#include "oppsched/stats_fields.h"

namespace oppsched::py {

// Python bytes <-> the byte vectors of the MAC library.
inline std::vector<std::uint8_t> to_vec(const pybind11::bytes& b) {
    const std::string_view s = b;
    return {s.begin(), s.end()};
}
inline pybind11::bytes to_bytes(const std::vector<std::uint8_t>& v) {
    return pybind11::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

// A stats struct as a dict, keyed as oppsched/stats_fields.h names its fields.
template <class S>
pybind11::dict stats_to_dict(const S& s) {
    pybind11::dict d;
    for_each_field(s, [&d](const char* key, const auto& value) { d[key] = value; });
    return d;
}

// A parameter's value as Python sees it (bool, int, float, str or list of floats).
inline pybind11::object param_to_python(const param_value& v) {
    return std::visit([](const auto& x) { return pybind11::cast(x); }, v);
}

// A parameter's spec (param_spec.h) as the dict the registries export: name, type, default,
// min, max (None when unbounded), min_open, max_open, violation (the range as an error states
// it), unit, help, choices, required.
inline pybind11::dict param_spec_dict(const std::string& name, param_type type,
                                      const param_value& def, const param_range& r,
                                      const std::string& unit, const std::string& help,
                                      const std::vector<std::string>& choices, bool required) {
    pybind11::dict d;
    d["name"] = name;
    d["type"] = std::string(to_string(type));
    d["default"] = required ? pybind11::none() : param_to_python(def);
    const bool ranged = type == param_type::number || type == param_type::integer ||
                        type == param_type::seconds || type == param_type::number_list;
    d["min"] = ranged && std::isfinite(r.min) ? pybind11::cast(r.min) : pybind11::none();
    d["max"] = ranged && std::isfinite(r.max) ? pybind11::cast(r.max) : pybind11::none();
    d["min_open"] = r.min_open;
    d["max_open"] = r.max_open;
    d["violation"] = ranged ? pybind11::cast(r.violation()) : pybind11::none();
    d["unit"] = unit;
    d["help"] = help;
    d["choices"] = choices;
    d["required"] = required;
    return d;
}

// One function per area of the MAC library, each in its own bind_<area>.cc.
void bind_tcpip(pybind11::module_& m);      // TCP/IP header parsing and window rewriting
void bind_pdu(pybind11::module_& m);        // MAC PDU, segmentation, reassembly, CRC-32
void bind_aqm(pybind11::module_& m);        // queues and AQMs
void bind_sched(pybind11::module_& m);      // schedulers
void bind_harq(pybind11::module_& m);       // HARQ entity
void bind_linkadapt(pybind11::module_& m);  // CQI -> MCS tables, OLLA
void bind_clamp(pybind11::module_& m);      // CLAMP router and client agents
void bind_channel(
    pybind11::module_& m);  // fading_channel (Jakes, sum of sinusoids), CLAMP slot error model
void bind_wire(pybind11::module_& m);   // PHY-MAC and uplink messages
void bind_names(pybind11::module_& m);  // C++ enumerations' names and defaults
// A C++ plugin's params (docs/extending.md, "C++ plugins") from a dict of numbers, strings
// and booleans (None: none); anything else throws std::invalid_argument naming
// "<field>.<key>" (bind_sched.cc).
std::vector<cplugin::param> cpp_plugin_params(const pybind11::object& params,
                                              const std::string& field);

}  // namespace oppsched::py
