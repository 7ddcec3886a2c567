// Python binding of the slot_gate block (gnuradio.oppsched.slot_gate).
#include <gnuradio/oppsched/slot_gate.h>
#include <pybind11/pybind11.h>

#include "bindings.h"

namespace py = pybind11;

void bind_slot_gate(py::module& m) {
    using gr::oppsched::slot_gate;
    py::class_<slot_gate, gr::block, gr::basic_block, std::shared_ptr<slot_gate>>(
        m, "slot_gate", "One radio's slots of a slot_tx output (TDD); see slot_gate.h")
        .def(py::init(&slot_gate::make), py::arg("user") = -1)
        .def("user", &slot_gate::user)
        .def("slots_passed", &slot_gate::slots_passed)
        .def("slots_dropped", &slot_gate::slots_dropped);
}
