// gnuradio.oppsched bindings: the module entry point. Each class or block binds itself in
// its own bind_*.cc, declared in bindings.h.
#include <pybind11/pybind11.h>

#include "bindings.h"

namespace py = pybind11;

PYBIND11_MODULE(oppsched_python, m) {
    // The blocks derive from gnuradio.gr types; import them first so pybind11 knows them.
    py::module::import("gnuradio.gr");
    m.doc() = "oppsched PHY: slotted OFDM downlink, HARQ, CQI, channel emulator";
    bind_numerology(m);
    bind_fec(m);
    bind_ofdm(m);
    bind_emulator(m);
    bind_slot_tx(m);
    bind_slot_rx(m);
    bind_slot_gate(m);
    bind_slot_receiver(m);
    bind_channel_emulator_cc(m);
    bind_mac_grant_source(m);
    bind_rx_indication_sink(m);
}
