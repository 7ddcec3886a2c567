// Python binding of the mac_grant_source ZeroMQ bridge (gnuradio.oppsched.mac_grant_source).
#include <gnuradio/oppsched/mac_grant_source.h>
#include <pybind11/pybind11.h>

#include "bindings.h"

namespace py = pybind11;

void bind_mac_grant_source(py::module& m) {
    using gr::oppsched::mac_grant_source;
    m.def("zmq_bridges_available", &gr::oppsched::zmq_bridges_available,
          "False when gnuradio-oppsched was built without ZeroMQ");
    py::class_<mac_grant_source, gr::block, gr::basic_block, std::shared_ptr<mac_grant_source>>(
        m, "mac_grant_source", "ZeroMQ bridge slot_tx <-> AP daemon; see mac_grant_source.h")
        .def(py::init(&mac_grant_source::make), py::arg("requests_endpoint"),
             py::arg("grants_endpoint"), py::arg("hwm") = 1000, py::arg("reconnect_ms") = 10,
             py::arg("connect_wait_ms") = 1000)
        .def("requests_sent", &mac_grant_source::requests_sent)
        .def("requests_dropped", &mac_grant_source::requests_dropped)
        .def("requests_malformed", &mac_grant_source::requests_malformed)
        .def("grants_received", &mac_grant_source::grants_received)
        .def("grants_malformed", &mac_grant_source::grants_malformed)
        .def("grants_wrong_type", &mac_grant_source::grants_wrong_type)
        .def("grants_seq_lost", &mac_grant_source::grants_seq_lost);
}
