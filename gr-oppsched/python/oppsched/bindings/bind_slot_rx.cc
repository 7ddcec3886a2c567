// Python binding of the slot_rx block (gnuradio.oppsched.slot_rx).
#include <gnuradio/oppsched/slot_rx.h>
#include <pybind11/pybind11.h>

#include "bindings.h"

namespace py = pybind11;

void bind_slot_rx(py::module& m) {
    using gr::oppsched::slot_rx;
    py::class_<slot_rx, gr::sync_block, gr::block, gr::basic_block, std::shared_ptr<slot_rx>>(
        m, "slot_rx", "One client's receiver (sync, demod, header, HARQ decode); see slot_rx.h")
        .def(py::init(&slot_rx::make), py::arg("profile") = "evdo", py::arg("sample_rate") = 1e6,
             py::arg("user_id") = 0, py::arg("detection_threshold") = 0.08,
             py::arg("ltf_threshold") = 0.35, py::arg("missed_slots") = 600,
             py::arg("noise_ema") = 0.1, py::arg("slot_duration_s") = 0.0, py::arg("fec") = "ldpc",
             py::arg("uplink") = false, py::arg("own_slots_only") = false)
        .def("user_id", &slot_rx::user_id)
        .def("slot_samples", &slot_rx::slot_samples)
        .def("slots_detected", &slot_rx::slots_detected)
        .def("slots_missed", &slot_rx::slots_missed)
        .def("headers_ok", &slot_rx::headers_ok)
        .def("header_errors", &slot_rx::header_errors)
        .def("addressed", &slot_rx::addressed)
        .def("tb_ok", &slot_rx::tb_ok)
        .def("tb_failed", &slot_rx::tb_failed)
        .def("bler", &slot_rx::bler)
        .def("invalid", &slot_rx::invalid)
        .def("truncated", &slot_rx::truncated)
        .def("nonfinite", &slot_rx::nonfinite)
        .def("decode_errors", &slot_rx::decode_errors)
        .def("unnumbered", &slot_rx::unnumbered)
        .def("other_direction", &slot_rx::other_direction)
        .def("not_own", &slot_rx::not_own)
        .def("last_snr_db", &slot_rx::last_snr_db)
        .def("last_effective_snr_db", &slot_rx::last_effective_snr_db)
        .def("last_cqi", &slot_rx::last_cqi);
}
