// Python binding of the channel_emulator_cc block (gnuradio.oppsched.channel_emulator_cc);
// its parameters are the bound channel_emulator_params (bind_emulator.cc), usually built
// with gnuradio.oppsched.emulator_params().
#include <gnuradio/oppsched/channel_emulator_cc.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"

namespace py = pybind11;

void bind_channel_emulator_cc(py::module& m) {
    using gr::oppsched::channel_emulator_cc;
    py::class_<channel_emulator_cc, gr::sync_block, gr::block, gr::basic_block,
               std::shared_ptr<channel_emulator_cc>>(
        m, "channel_emulator_cc",
        "Multi-user fading channel emulator block; see channel_emulator_cc.h")
        .def(py::init(&channel_emulator_cc::make), py::arg("params"))
        .def("num_users", &channel_emulator_cc::num_users)
        .def("samples", &channel_emulator_cc::samples)
        .def("noise_variance", &channel_emulator_cc::noise_variance, py::arg("user"))
        .def("params", &channel_emulator_cc::params);
}
