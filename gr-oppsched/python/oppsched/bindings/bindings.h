#pragma once
#include <pybind11/pybind11.h>

void bind_numerology(pybind11::module& m);
void bind_fec(pybind11::module& m);
void bind_ofdm(pybind11::module& m);
void bind_emulator(pybind11::module& m);
