// Python binding of the rx_indication_sink ZeroMQ bridge (gnuradio.oppsched.rx_indication_sink).
#include <gnuradio/oppsched/rx_indication_sink.h>
#include <pybind11/pybind11.h>

#include "bindings.h"

namespace py = pybind11;

void bind_rx_indication_sink(py::module& m) {
    using gr::oppsched::rx_indication_sink;
    py::class_<rx_indication_sink, gr::block, gr::basic_block, std::shared_ptr<rx_indication_sink>>(
        m, "rx_indication_sink", "ZeroMQ bridge slot_rx -> client agent; see rx_indication_sink.h")
        .def(py::init(&rx_indication_sink::make), py::arg("endpoint"), py::arg("hwm") = 1000,
             py::arg("report_effective_snr") = true, py::arg("reconnect_ms") = 10,
             py::arg("connect_wait_ms") = 1000)
        .def("sent", &rx_indication_sink::sent)
        .def("dropped", &rx_indication_sink::dropped)
        .def("malformed", &rx_indication_sink::malformed);
}
