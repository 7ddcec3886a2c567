// Python bindings of the multi-user channel emulator. process() takes a complex64 numpy
// array and returns a (users, n) complex64 array. Parameter structs take keyword
// arguments; note that list fields (users, taps, snr_trace) are copied in and out, so
// assign a whole list (p.users = [u0, u1]) rather than appending in place.
#include <gnuradio/oppsched/channel_emulator.h>
#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bind_ofdm_util.h"
#include "bindings.h"

namespace py = pybind11;
using namespace gr::oppsched;
using namespace ofdm_bind;

void bind_emulator(py::module& m) {
    py::enum_<fading_model>(m, "fading_model")
        .value("none", fading_model::none)
        .value("jakes", fading_model::jakes)
        .value("sum_of_sinusoids", fading_model::sum_of_sinusoids);

    py::class_<snr_trace_point> tp(m, "snr_trace_point");
    tp.def_readwrite("time_s", &snr_trace_point::time_s)
        .def_readwrite("snr_db", &snr_trace_point::snr_db);
    kwargs_init(tp);
    m.def("parse_snr_trace_csv", &parse_snr_trace_csv, py::arg("text"));
    m.def("load_snr_trace_csv", &load_snr_trace_csv, py::arg("path"));

    py::class_<emulator_tap> tap(m, "emulator_tap");
    tap.def_readwrite("delay_samples", &emulator_tap::delay_samples)
        .def_readwrite("power_db", &emulator_tap::power_db);
    kwargs_init(tap);

    py::class_<emulator_user_params> up(m, "emulator_user_params");
    up.def_readwrite("mean_snr_db", &emulator_user_params::mean_snr_db)
        .def_readwrite("fading", &emulator_user_params::fading)
        .def_readwrite("doppler_hz", &emulator_user_params::doppler_hz)
        .def_readwrite("oscillators", &emulator_user_params::oscillators)
        .def_readwrite("jakes_angle_offset", &emulator_user_params::jakes_angle_offset)
        .def_readwrite("taps", &emulator_user_params::taps)
        .def_readwrite("cfo_hz", &emulator_user_params::cfo_hz)
        .def_readwrite("snr_trace", &emulator_user_params::snr_trace)
        .def_readwrite("loop_trace", &emulator_user_params::loop_trace)
        .def_readwrite("add_noise", &emulator_user_params::add_noise);
    kwargs_init(up);

    py::class_<channel_emulator_params> cp(m, "channel_emulator_params");
    cp.def_readwrite("numerology", &channel_emulator_params::numerology)
        .def_readwrite("users", &channel_emulator_params::users)
        .def_readwrite("seed", &channel_emulator_params::seed)
        .def_readwrite("update_interval", &channel_emulator_params::update_interval)
        .def_readwrite("tx_power", &channel_emulator_params::tx_power)
        .def("validate", &channel_emulator_params::validate);
    kwargs_init(cp);

    py::class_<channel_emulator>(m, "channel_emulator")
        .def(py::init<const channel_emulator_params&>(), py::arg("params"))
        .def_property_readonly("num_users", &channel_emulator::num_users)
        .def(
            "process",
            [](channel_emulator& em, const carray& x) {
                const auto n = static_cast<py::ssize_t>(x.size());
                py::array_t<std::complex<float>> out({static_cast<py::ssize_t>(em.num_users()), n});
                if (n == 0) return out;
                std::vector<gr_complex*> ptr;
                for (int u = 0; u < em.num_users(); ++u) ptr.push_back(out.mutable_data(u, 0));
                em.process(x.data(), ptr.data(), static_cast<size_t>(n));
                return out;
            },
            py::arg("samples"),
            "Pass TX samples through every user's channel: (users, n) complex64.")
        .def_property_readonly("samples_processed", &channel_emulator::samples_processed)
        .def("noise_variance", &channel_emulator::noise_variance, py::arg("user"))
        .def("tap_gain", &channel_emulator::tap_gain, py::arg("user"), py::arg("tap"),
             py::arg("sample"))
        .def("power_gain", &channel_emulator::power_gain, py::arg("user"), py::arg("sample"))
        .def(
            "subcarrier_snr",
            [](channel_emulator& em, int u, std::uint64_t n) {
                return to_numpy(em.subcarrier_snr(u, n));
            },
            py::arg("user"), py::arg("sample"))
        .def_property_readonly("params", &channel_emulator::params);
}
