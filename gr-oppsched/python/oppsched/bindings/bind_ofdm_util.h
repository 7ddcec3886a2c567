#pragma once
// Helpers of the OFDM / emulator bindings (bind_ofdm.cc, bind_emulator.cc).
#include <gnuradio/gr_complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <complex>
#include <vector>

namespace ofdm_bind {

namespace py = pybind11;
using carray = py::array_t<std::complex<float>, py::array::c_style | py::array::forcecast>;
using farray = py::array_t<float, py::array::c_style | py::array::forcecast>;

template <class T>
py::array_t<T> to_numpy(const std::vector<T>& v) {
    py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
}

//! Adds a keyword constructor: T(field=value, ...) sets the bound attributes of a
//! default-constructed T; an unknown keyword raises AttributeError.
template <class T>
void kwargs_init(py::class_<T>& c) {
    c.def(py::init([](py::kwargs kw) {
        py::object o = py::cast(T{});
        for (auto item : kw) {
            if (!py::hasattr(o, item.first))
                throw py::attribute_error(
                    py::str("{}: no parameter '{}'")
                        .format(py::type::of(o).attr("__name__"), item.first));
            py::setattr(o, item.first, item.second);
        }
        return o.cast<T>();
    }));
}

}  // namespace ofdm_bind
