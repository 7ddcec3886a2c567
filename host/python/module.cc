// The `_oppsched_mac` extension module, re-exported as `oppsched.mac`.
// Each area of the MAC library binds itself in its own bind_*.cc file.
#include <pybind11/pybind11.h>

#include "bindings.h"

PYBIND11_MODULE(_oppsched_mac, m) {
    m.doc() =
        "oppsched MAC library: queues, AQMs, schedulers, HARQ, link adaptation, "
        "CLAMP agents, channel models, MAC PDUs and TCP/IP header tools";
    oppsched::py::bind_tcpip(m);
    oppsched::py::bind_pdu(m);
    oppsched::py::bind_aqm(m);
    oppsched::py::bind_sched(m);
    oppsched::py::bind_harq(m);
    oppsched::py::bind_linkadapt(m);
    oppsched::py::bind_clamp(m);
    oppsched::py::bind_channel(m);
    oppsched::py::bind_wire(m);
    oppsched::py::bind_names(m);
}
