#pragma once
#include <pybind11/pybind11.h>

void bind_numerology(pybind11::module& m);
void bind_fec(pybind11::module& m);
void bind_ofdm(pybind11::module& m);
void bind_emulator(pybind11::module& m);
void bind_slot_tx(pybind11::module& m);
void bind_slot_rx(pybind11::module& m);
void bind_slot_receiver(pybind11::module& m);
void bind_slot_gate(pybind11::module& m);
void bind_channel_emulator_cc(pybind11::module& m);
void bind_mac_grant_source(pybind11::module& m);
void bind_rx_indication_sink(pybind11::module& m);
