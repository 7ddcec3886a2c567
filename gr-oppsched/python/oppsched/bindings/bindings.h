#pragma once
#include <pybind11/pybind11.h>

void bind_numerology(pybind11::module& m);
