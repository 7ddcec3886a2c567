// Python binding of the slot_tx block (gnuradio.oppsched.slot_tx).
#include <gnuradio/oppsched/slot_tx.h>
#include <pybind11/pybind11.h>

#include "bindings.h"

namespace py = pybind11;

void bind_slot_tx(py::module& m) {
    using gr::oppsched::slot_tx;
    py::class_<slot_tx, gr::sync_block, gr::block, gr::basic_block, std::shared_ptr<slot_tx>>(
        m, "slot_tx", "AP slot framer + OFDM modulator; see slot_tx.h")
        .def(py::init(&slot_tx::make), py::arg("profile") = "evdo", py::arg("sample_rate") = 1e6,
             py::arg("lead_slots") = 3, py::arg("t0_s") = 0.0, py::arg("continuous") = false,
             py::arg("realtime") = false, py::arg("slot_duration_s") = 0.0,
             py::arg("max_pending") = 1024, py::arg("fec") = "ldpc")
        .def("slot_samples", &slot_tx::slot_samples)
        .def("slot_duration", &slot_tx::slot_duration)
        .def("slots", &slot_tx::slots)
        .def("empty", &slot_tx::empty)
        .def("late", &slot_tx::late)
        .def("tb_sent", &slot_tx::tb_sent)
        .def("uplink_tb_sent", &slot_tx::uplink_tb_sent)
        .def("requests", &slot_tx::requests)
        .def("grants_received", &slot_tx::grants_received)
        .def("grants_late", &slot_tx::grants_late)
        .def("grants_duplicate", &slot_tx::grants_duplicate)
        .def("grants_malformed", &slot_tx::grants_malformed)
        .def("grants_overflow", &slot_tx::grants_overflow)
        .def("overruns", &slot_tx::overruns);
}
