// Python bindings of the OFDM PHY: modulator, demodulator, slot sync, SNR/CQI estimation.
// Sample and RE arrays are numpy complex64, noise variances / SNRs float32. Parameter
// structs take keyword arguments (e.g. slot_sync_params(detection_threshold=0.2)); an
// unknown keyword raises AttributeError. C++ std::invalid_argument -> ValueError.
#include <gnuradio/oppsched/ofdm_demodulator.h>
#include <gnuradio/oppsched/ofdm_modulator.h>
#include <gnuradio/oppsched/slot_sync.h>
#include <gnuradio/oppsched/snr_estimator.h>
#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bind_ofdm_util.h"
#include "bindings.h"

namespace py = pybind11;
using namespace gr::oppsched;
using namespace ofdm_bind;

void bind_ofdm(py::module& m) {
    // ---- SNR / CQI ----
    py::enum_<effective_snr_method>(m, "effective_snr_method")
        .value("miesm", effective_snr_method::miesm)
        .value("eesm", effective_snr_method::eesm);

    py::class_<cqi_params> cq(m, "cqi_params");
    cq.def_readwrite("thresholds_db", &cqi_params::thresholds_db)
        .def_readwrite("method", &cqi_params::method)
        .def_readwrite("eesm_beta", &cqi_params::eesm_beta)
        .def_readwrite("smoothing", &cqi_params::smoothing)
        .def_readwrite("bias_correction", &cqi_params::bias_correction)
        .def("validate", &cqi_params::validate)
        .def_static("default_thresholds_db", &cqi_params::default_thresholds_db);
    kwargs_init(cq);

    py::class_<snr_estimator_params> sp(m, "snr_estimator_params");
    sp.def_readwrite("noise_ema", &snr_estimator_params::noise_ema)
        .def_readwrite("cqi", &snr_estimator_params::cqi)
        .def("validate", &snr_estimator_params::validate);
    kwargs_init(sp);

    py::class_<snr_estimate>(m, "snr_estimate")
        .def(py::init<>())
        .def_readonly("valid", &snr_estimate::valid)
        .def_readonly("noise_var", &snr_estimate::noise_var)
        .def_readonly("noise_var_slot", &snr_estimate::noise_var_slot)
        .def_readonly("signal_power", &snr_estimate::signal_power)
        .def_readonly("snr_db", &snr_estimate::snr_db)
        .def_readonly("effective_snr_db", &snr_estimate::effective_snr_db)
        .def_readonly("cqi", &snr_estimate::cqi)
        .def_property_readonly("snr_per_subcarrier",
                               [](const snr_estimate& e) { return to_numpy(e.snr_per_subcarrier); })
        .def("__repr__", [](const snr_estimate& e) {
            return "<snr_estimate valid=" + std::to_string(e.valid) +
                   " snr_db=" + std::to_string(e.snr_db) +
                   " effective_snr_db=" + std::to_string(e.effective_snr_db) +
                   " cqi=" + std::to_string(e.cqi) + ">";
        });

    py::class_<snr_estimator>(m, "snr_estimator")
        .def(py::init<const snr_estimator_params&>(), py::arg("params") = snr_estimator_params{})
        .def(
            "estimate",
            [](snr_estimator& s, const carray& z1, const carray& z2) {
                if (z1.size() != z2.size())
                    throw std::invalid_argument(
                        "snr_estimator.estimate: z1 and z2 differ in length");
                return s.estimate(z1.data(), z2.data(), static_cast<size_t>(z1.size()));
            },
            py::arg("z1"), py::arg("z2"),
            "Estimate from the two LTF observations (known symbol removed), occupied order.")
        .def("reset", &snr_estimator::reset)
        .def_property_readonly("noise_average", &snr_estimator::noise_average);

    m.def(
        "effective_snr",
        [](const farray& g, effective_snr_method method, double beta) {
            return effective_snr(g.data(), static_cast<size_t>(g.size()), method, beta);
        },
        py::arg("snr_linear"), py::arg("method") = effective_snr_method::miesm,
        py::arg("beta") = 1.0, "Effective SNR (linear) of per-subcarrier linear SNRs.");
    m.def(
        "cqi_from_snr_db",
        [](double snr_db, const py::object& thr) {
            return cqi_from_snr_db(snr_db, thr.is_none() ? cqi_params::default_thresholds_db()
                                                         : thr.cast<std::vector<double>>());
        },
        py::arg("snr_db"), py::arg("thresholds_db") = py::none());
    m.def(
        "cqi_lower_snr_db",
        [](int cqi, const py::object& thr) {
            return cqi_lower_snr_db(cqi, thr.is_none() ? cqi_params::default_thresholds_db()
                                                       : thr.cast<std::vector<double>>());
        },
        py::arg("cqi"), py::arg("thresholds_db") = py::none());

    // ---- modulator ----
    py::class_<ofdm_modulator>(m, "ofdm_modulator")
        .def(py::init<const numerology&>(), py::arg("numerology"))
        .def(
            "modulate",
            [](ofdm_modulator& mod, const carray& header, const carray& payload) {
                std::vector<gr_complex> out(static_cast<size_t>(mod.geometry().slot_samples()));
                mod.modulate(header.data(), static_cast<size_t>(header.size()), payload.data(),
                             static_cast<size_t>(payload.size()), out.data());
                return to_numpy(out);
            },
            py::arg("header") = carray(0), py::arg("payload") = carray(0),
            "One slot (slot_samples complex64 samples) from header and payload REs.")
        .def_property_readonly(
            "preamble",
            [](const ofdm_modulator& mod) { return to_numpy(mod.sequences().preamble()); })
        .def_property_readonly(
            "ltf_symbol",
            [](const ofdm_modulator& mod) { return to_numpy(mod.sequences().ltf_symbol()); })
        .def_property_readonly(
            "ltf_freq",
            [](const ofdm_modulator& mod) { return to_numpy(mod.sequences().ltf_freq()); })
        .def(
            "pilot",
            [](const ofdm_modulator& mod, int s, int i) { return mod.sequences().pilot(s, i); },
            py::arg("symbol"), py::arg("index"))
        .def(
            "padding",
            [](const ofdm_modulator& mod, size_t re) { return mod.sequences().padding(re); },
            py::arg("re"))
        .def_property_readonly("numerology", &ofdm_modulator::geometry);

    // ---- demodulator ----
    py::class_<ofdm_demodulator_params> dp(m, "ofdm_demodulator_params");
    dp.def_readwrite("track_phase", &ofdm_demodulator_params::track_phase)
        .def_readwrite("track_gain", &ofdm_demodulator_params::track_gain)
        .def_readwrite("tracking_halfwidth", &ofdm_demodulator_params::tracking_halfwidth)
        .def_readwrite("smooth_channel", &ofdm_demodulator_params::smooth_channel)
        .def_readwrite("chest_delay_margin", &ofdm_demodulator_params::chest_delay_margin)
        .def_readwrite("chest_adaptive_window", &ofdm_demodulator_params::chest_adaptive_window)
        .def_readwrite("header_aided_chest", &ofdm_demodulator_params::header_aided_chest)
        .def_readwrite("snr", &ofdm_demodulator_params::snr);
    kwargs_init(dp);

    py::class_<ofdm_demod_result>(m, "ofdm_demod_result")
        .def(py::init<>())
        .def_readonly("valid", &ofdm_demod_result::valid)
        .def_property_readonly("header",
                               [](const ofdm_demod_result& r) { return to_numpy(r.header); })
        .def_property_readonly("header_nvar",
                               [](const ofdm_demod_result& r) { return to_numpy(r.header_nvar); })
        .def_property_readonly("payload",
                               [](const ofdm_demod_result& r) { return to_numpy(r.payload); })
        .def_property_readonly("payload_nvar",
                               [](const ofdm_demod_result& r) { return to_numpy(r.payload_nvar); })
        .def_readonly("snr", &ofdm_demod_result::snr)
        .def_property_readonly("channel",
                               [](const ofdm_demod_result& r) { return to_numpy(r.channel); })
        .def_property_readonly("phase",
                               [](const ofdm_demod_result& r) { return to_numpy(r.phase); })
        .def_readonly("chest_window", &ofdm_demod_result::chest_window)
        .def_property_readonly("gain", [](const ofdm_demod_result& r) { return to_numpy(r.gain); })
        .def_property_readonly("channel_error_var", [](const ofdm_demod_result& r) {
            return to_numpy(r.channel_error_var);
        });

    py::class_<ofdm_demodulator>(m, "ofdm_demodulator")
        .def(py::init<const numerology&, const ofdm_demodulator_params&>(), py::arg("numerology"),
             py::arg("params") = ofdm_demodulator_params{})
        .def(
            "demodulate",
            [](ofdm_demodulator& d, const carray& slot, bool payload) {
                ofdm_demod_result r;
                d.demodulate(slot.data(), static_cast<size_t>(slot.size()), r, payload);
                return r;
            },
            py::arg("slot"), py::arg("payload") = true,
            "Demodulate one slot (>= slot_samples samples from the slot start, CFO removed).")
        .def(
            "refine_with_header",
            [](ofdm_demodulator& d, const carray& header_re, ofdm_demod_result& result) {
                d.refine_with_header(header_re.data(), static_cast<size_t>(header_re.size()),
                                     result);
            },
            py::arg("header_re"), py::arg("result"),
            "Header-aided channel estimation: with the transmitted header REs "
            "(header_codec.encode of the decoded fields) re-estimate the channel from the LTF "
            "and the header symbols and re-equalise `result` (the last demodulate()'s) in place.")
        .def(
            "reset_noise", [](ofdm_demodulator& d) { d.estimator().reset(); },
            "Forget the slot-averaged noise level (between SNR points of a sweep).")
        .def_property_readonly("noise_average",
                               [](ofdm_demodulator& d) { return d.estimator().noise_average(); })
        .def_property_readonly("numerology", &ofdm_demodulator::geometry)
        .def_property_readonly_static("max_noise_var",
                                      [](py::object) { return ofdm_demodulator::max_noise_var; });

    // ---- sync ----
    py::class_<slot_sync_params> ssp(m, "slot_sync_params");
    ssp.def_readwrite("detection_threshold", &slot_sync_params::detection_threshold)
        .def_readwrite("ltf_threshold", &slot_sync_params::ltf_threshold)
        .def_readwrite("ltf_search", &slot_sync_params::ltf_search)
        .def_readwrite("first_path_fraction", &slot_sync_params::first_path_fraction)
        .def_readwrite("timing_backoff", &slot_sync_params::timing_backoff)
        .def_readwrite("truncation_fraction", &slot_sync_params::truncation_fraction)
        .def_readwrite("truncation_min_snr_db", &slot_sync_params::truncation_min_snr_db)
        .def_readwrite("truncation_min_symbols", &slot_sync_params::truncation_min_symbols)
        .def("validate", &slot_sync_params::validate, py::arg("numerology"));
    kwargs_init(ssp);

    py::class_<slot_detection>(m, "slot_detection")
        .def(py::init<>())
        .def_readonly("start", &slot_detection::start)
        .def_readonly("cfo", &slot_detection::cfo)
        .def_readonly("cfo_hz", &slot_detection::cfo_hz)
        .def_readonly("sc_metric", &slot_detection::sc_metric)
        .def_readonly("ltf_metric", &slot_detection::ltf_metric)
        .def_readonly("snr_db", &slot_detection::snr_db)
        .def_property_readonly("samples",
                               [](const slot_detection& d) { return to_numpy(d.samples); })
        .def("__repr__", [](const slot_detection& d) {
            return "<slot_detection start=" + std::to_string(d.start) +
                   " cfo=" + std::to_string(d.cfo) + ">";
        });

    py::class_<slot_sync_stats>(m, "slot_sync_stats")
        .def_readonly("samples", &slot_sync_stats::samples)
        .def_readonly("triggers", &slot_sync_stats::triggers)
        .def_readonly("detections", &slot_sync_stats::detections)
        .def_readonly("rejected_ltf", &slot_sync_stats::rejected_ltf)
        .def_readonly("rejected_truncated", &slot_sync_stats::rejected_truncated)
        .def_readonly("nonfinite", &slot_sync_stats::nonfinite);

    py::class_<slot_sync>(m, "slot_sync")
        .def(py::init<const numerology&, const slot_sync_params&>(), py::arg("numerology"),
             py::arg("params") = slot_sync_params{})
        .def(
            "push",
            [](slot_sync& s, const carray& x) {
                std::vector<slot_detection> found;
                s.push(x.data(), static_cast<size_t>(x.size()), found);
                return found;
            },
            py::arg("samples"),
            "Consume samples; returns the slots completed so far (list of slot_detection).")
        .def("reset", &slot_sync::reset)
        .def_property_readonly("stats", &slot_sync::stats)
        .def_property_readonly("buffered", &slot_sync::buffered)
        .def_property_readonly("numerology", &slot_sync::geometry);
}
