#include <gnuradio/oppsched/numerology.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"

namespace py = pybind11;
using namespace gr::oppsched;

void bind_numerology(py::module& m) {
    m.def("fec_names", &fec_names, "The payload FEC names (numerology.h's fec_scheme).");
    py::class_<numerology_params>(m, "numerology_params")
        .def(py::init<>())
        .def_readwrite("sample_rate", &numerology_params::sample_rate)
        .def_readwrite("slot_duration", &numerology_params::slot_duration)
        .def_readwrite("fft_len", &numerology_params::fft_len)
        .def_readwrite("cp_len", &numerology_params::cp_len)
        .def_readwrite("data_carriers", &numerology_params::data_carriers)
        .def_readwrite("pilot_carriers", &numerology_params::pilot_carriers)
        .def_readwrite("preamble_symbols", &numerology_params::preamble_symbols)
        .def_readwrite("header_symbols", &numerology_params::header_symbols)
        .def_readwrite("ldpc_max_n", &numerology_params::ldpc_max_n)
        .def_property(
            "fec", [](const numerology_params& p) { return std::string(to_string(p.fec)); },
            [](numerology_params& p, const std::string& v) { p.fec = fec_from_string(v); });

    py::class_<numerology>(m, "numerology")
        .def(py::init<const numerology_params&>(), py::arg("params"))
        .def_static("profile", &numerology::profile, py::arg("name"), py::arg("sample_rate") = 1e6,
                    py::arg("fec") = "ldpc")
        .def_property_readonly(
            "fec", [](const numerology& n) { return std::string(to_string(n.params().fec)); })
        .def_static("profile_names", &numerology::profile_names)
        .def_property_readonly("params", &numerology::params)
        .def_property_readonly("symbol_len", &numerology::symbol_len)
        .def_property_readonly("slot_samples", &numerology::slot_samples)
        .def_property_readonly("symbols_per_slot", &numerology::symbols_per_slot)
        .def_property_readonly("guard_samples", &numerology::guard_samples)
        .def_property_readonly("payload_symbols", &numerology::payload_symbols)
        .def_property_readonly("payload_resource_elements", &numerology::payload_resource_elements)
        .def_property_readonly("subcarrier_spacing", &numerology::subcarrier_spacing)
        .def_property_readonly("realised_slot_duration", &numerology::realised_slot_duration)
        .def_property_readonly("data_subcarriers", &numerology::data_subcarriers)
        .def_property_readonly("pilot_subcarriers", &numerology::pilot_subcarriers)
        .def_property_readonly("occupied_subcarriers", &numerology::occupied_subcarriers)
        .def_property_readonly("occupied_carriers", &numerology::occupied_carriers)
        .def("fft_bin", &numerology::fft_bin, py::arg("k"))
        .def_property_readonly("preamble_samples", &numerology::preamble_samples)
        .def_property_readonly("stf_samples", &numerology::stf_samples)
        .def_property_readonly("ltf_gi_samples", &numerology::ltf_gi_samples)
        .def("ltf_offset", &numerology::ltf_offset, py::arg("i"))
        .def_property_readonly("data_symbols", &numerology::data_symbols)
        .def("symbol_offset", &numerology::symbol_offset, py::arg("s"))
        .def_property_readonly("header_resource_elements", &numerology::header_resource_elements)
        .def_property_readonly("subcarrier_snr_gain", &numerology::subcarrier_snr_gain)
        .def("noise_variance_for_snr_db", &numerology::noise_variance_for_snr_db, py::arg("snr_db"),
             py::arg("signal_power") = 1.0);
}
