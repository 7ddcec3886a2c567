#pragma once
#include <pybind11/pybind11.h>

#include "oppsched/stats_fields.h"

namespace oppsched::py {

// A stats struct as a dict, keyed as oppsched/stats_fields.h names its fields.
template <class S>
pybind11::dict stats_to_dict(const S& s) {
    pybind11::dict d;
    for_each_field(s, [&d](const char* key, const auto& value) { d[key] = value; });
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
}  // namespace oppsched::py
