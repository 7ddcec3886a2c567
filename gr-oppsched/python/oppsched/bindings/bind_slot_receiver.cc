// Python binding of slot_receiver (gnuradio.oppsched.slot_receiver): the receiver chain of
// slot_rx without a flowgraph, as the link-curve measurement runs it.
#include <gnuradio/oppsched/slot_receiver.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bind_ofdm_util.h"
#include "bindings.h"

namespace py = pybind11;

void bind_slot_receiver(py::module& m) {
    using namespace gr::oppsched;
    using ofdm_bind::carray;
    using report = slot_msg::rx_report;

    py::class_<report>(m, "rx_report", "What the receiver learnt about one slot (slot_rx `rx`)")
        .def_readonly("slot", &report::slot)
        .def_readonly("slot_estimated", &report::slot_estimated)
        .def_readonly("detected", &report::detected)
        .def_readonly("header_ok", &report::header_ok)
        .def_readonly("user", &report::user)
        .def_readonly("mcs", &report::mcs)
        .def_readonly("harq_pid", &report::harq_pid)
        .def_readonly("rv", &report::rv)
        .def_readonly("ndi", &report::ndi)
        .def_readonly("tb_bytes", &report::tb_bytes)
        .def_readonly("addressed", &report::addressed)
        .def_readonly("crc_ok", &report::crc_ok)
        .def_readonly("snr_db", &report::snr_db)
        .def_readonly("effective_snr_db", &report::effective_snr_db)
        .def_readonly("cqi", &report::cqi)
        .def_readonly("combined", &report::combined)
        .def_readonly("cfo_hz", &report::cfo_hz)
        .def_readonly("sample", &report::sample)
        .def_readonly("noise_before", &report::noise_before)
        .def_readonly("noise_count_before", &report::noise_count_before)
        .def_property_readonly("tb", [](const report& r) {
            return py::bytes(reinterpret_cast<const char*>(r.tb.data()), r.tb.size());
        });

    py::class_<slot_reception>(m, "slot_reception")
        .def_readonly("valid", &slot_reception::valid)
        .def_readonly("reported", &slot_reception::reported)
        .def_readonly("payload_decoded", &slot_reception::payload_decoded)
        .def_readonly("header", &slot_reception::header)
        .def_readonly("report", &slot_reception::report);

    py::class_<slot_receiver_stats>(m, "slot_receiver_stats")
        .def_readonly("detected", &slot_receiver_stats::detected)
        .def_readonly("missed", &slot_receiver_stats::missed)
        .def_readonly("headers_ok", &slot_receiver_stats::headers_ok)
        .def_readonly("header_errors", &slot_receiver_stats::header_errors)
        .def_readonly("addressed", &slot_receiver_stats::addressed)
        .def_readonly("tb_ok", &slot_receiver_stats::tb_ok)
        .def_readonly("tb_failed", &slot_receiver_stats::tb_failed)
        .def_readonly("invalid", &slot_receiver_stats::invalid)
        .def_readonly("truncated", &slot_receiver_stats::truncated)
        .def_readonly("nonfinite", &slot_receiver_stats::nonfinite)
        .def_readonly("decode_errors", &slot_receiver_stats::decode_errors)
        .def_readonly("unnumbered", &slot_receiver_stats::unnumbered)
        .def_readonly("last_snr_db", &slot_receiver_stats::last_snr_db)
        .def_readonly("last_effective_snr_db", &slot_receiver_stats::last_effective_snr_db)
        .def_readonly("last_cqi", &slot_receiver_stats::last_cqi);

    py::class_<slot_receiver>(m, "slot_receiver",
                              "One client's receiver: sync, demod, header, header-aided "
                              "channel estimation, HARQ decode; see slot_receiver.h")
        .def(py::init<const numerology&, int, const slot_sync_params&,
                      const ofdm_demodulator_params&, int>(),
             py::arg("numerology"), py::arg("user_id"), py::arg("sync") = slot_sync_params{},
             py::arg("demod") = ofdm_demodulator_params{}, py::arg("missed_slots") = 600)
        .def(
            "detect",
            [](slot_receiver& r, const carray& x) {
                std::vector<slot_detection> found;
                r.detect(x.data(), static_cast<size_t>(x.size()), found);
                return found;
            },
            py::arg("samples"),
            "Consume samples; returns the slots completed so far (list of slot_detection).")
        .def(
            "receive",
            [](slot_receiver& r, const slot_detection& det, bool fresh_harq) {
                std::vector<report> reports;
                const slot_reception& rec = r.receive(det, reports, fresh_harq);
                return py::make_tuple(rec, reports);
            },
            py::arg("detection"), py::arg("fresh_harq") = false,
            "Demodulate and decode one detection -> (slot_reception, [rx_report]): the reports "
            "are the missed slots before it and its own (when numbered).")
        .def(
            "report_missed",
            [](slot_receiver& r) {
                std::vector<report> reports;
                r.report_missed(reports);
                return reports;
            },
            "Reports of the slots expected but not detected by the stream position reached.")
        .def_property_readonly(
            "noise_state",
            [](slot_receiver& r) {
                const auto s = r.noise_state();
                return py::make_tuple(s.average, static_cast<std::int64_t>(s.count));
            },
            "(average, slots counted) of the noise average now (0 slots: none yet)")
        .def("set_noise_state", &slot_receiver::set_noise_state, py::arg("average"),
             py::arg("count"),
             "Go on from a recorded noise average (rx_report.noise_before, "
             "noise_count_before); count <= 0: none")
        .def_property_readonly(
            "payload", [](const slot_receiver& r) { return ofdm_bind::to_numpy(r.payload()); })
        .def_property_readonly("stats", &slot_receiver::stats)
        .def_property_readonly("user_id", &slot_receiver::user_id)
        .def_property_readonly("numerology", &slot_receiver::geometry);
}
