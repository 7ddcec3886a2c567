// Python: McsEntry, McsTable, cqi_to_mcs, Olla (see oppsched/linkadapt.h).
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "oppsched/ap_core.h"
#include "oppsched/linkadapt.h"
#include "oppsched/validation.h"

namespace oppsched::py {
namespace {

using namespace oppsched::linkadapt;

mcs_position parse_position(const std::string& s) {
    if (s == "interior") return mcs_position::interior;
    if (s == "lowest") return mcs_position::lowest;
    if (s == "highest") return mcs_position::highest;
    if (s == "only") return mcs_position::only;
    throw_invalid("olla.position: '" + s + "' not one of interior, lowest, highest, only");
}

const char* position_name(mcs_position p) {
    switch (p) {
        case mcs_position::interior:
            return "interior";
        case mcs_position::lowest:
            return "lowest";
        case mcs_position::highest:
            return "highest";
        case mcs_position::only:
            return "only";
    }
    return "?";
}

}  // namespace

void bind_linkadapt(pybind11::module_& m) {
    namespace pb = pybind11;
    m.attr("NO_MCS") = kNoMcs;

    pb::class_<mcs_entry>(m, "mcs_entry")
        .def(
            pb::init([](std::string name, double min_snr_db, double rate_bps,
                        std::uint32_t bits_per_symbol, double code_rate) {
                return mcs_entry{std::move(name), min_snr_db, rate_bps, bits_per_symbol, code_rate};
            }),
            pb::arg("name"), pb::arg("min_snr_db"), pb::arg("rate_bps"),
            pb::arg("bits_per_symbol") = 0, pb::arg("code_rate") = 0.0)
        .def_readonly("name", &mcs_entry::name)
        .def_readonly("min_snr_db", &mcs_entry::min_snr_db)
        .def_readonly("rate_bps", &mcs_entry::rate_bps)
        .def_readonly("bits_per_symbol", &mcs_entry::bits_per_symbol)
        .def_readonly("code_rate", &mcs_entry::code_rate)
        .def("__repr__", [](const mcs_entry& e) {
            return "<McsEntry '" + e.name + "' >= " + std::to_string(e.min_snr_db) + " dB, " +
                   std::to_string(e.rate_bps) + " b/s>";
        });

    pb::class_<mcs_table>(m, "mcs_table",
                          "CQI (SNR dB) -> MCS table: per MCS the lowest SNR meeting the target "
                          "BLER and its rate. Thresholds and rates strictly increase.")
        .def(pb::init<std::string, std::vector<mcs_entry>>(), pb::arg("name"), pb::arg("entries"))
        .def_static("evdo", &mcs_table::evdo,
                    "Srinivasan & Baras, Table I (EV-DO), exactly as printed.")
        .def_static(
            "shannon",
            [](double w0_hz, double cmax_bps, std::uint32_t levels) {
                return oppsched::ap::shannon_table({w0_hz, cmax_bps, levels});
            },
            pb::arg("w0_hz") = 4.3e6, pb::arg("cmax_bps") = 10e6, pb::arg("levels") = 32,
            "Andrew & Hanly, CLAMP, eq. 18 quantised to `levels` rates (the AP daemon's own "
            "table).")
        .def_static(
            "clamp",
            [](double w0_hz, double cmax_bps, std::uint32_t levels) {
                pb::module_::import("warnings")
                    .attr("warn")("mcs_table.clamp is deprecated, use mcs_table.shannon",
                                  pb::module_::import("builtins").attr("DeprecationWarning"), 2);
                return oppsched::ap::shannon_table({w0_hz, cmax_bps, levels});
            },
            pb::arg("w0_hz") = 4.3e6, pb::arg("cmax_bps") = 10e6, pb::arg("levels") = 32,
            "The old name of shannon (deprecated).")
        .def_static(
            "ofdm_provisional",
            [](double sample_rate_hz, std::uint32_t fft_size, std::uint32_t cp_len,
               std::uint32_t data_subcarriers) {
                return mcs_table::ofdm_provisional(
                    ofdm_numerology{sample_rate_hz, fft_size, cp_len, data_subcarriers});
            },
            pb::kw_only(), pb::arg("sample_rate_hz") = 1e6, pb::arg("fft_size") = 64,
            pb::arg("cp_len") = 16, pb::arg("data_subcarriers") = 48,
            "802.11a-like BPSK 1/2 .. 64QAM 5/6 with PROVISIONAL thresholds (replace with "
            "measured curves via from_csv).")
        .def_static(
            "from_csv",
            [](const std::string& text, std::string name) {
                auto r = mcs_table::from_csv(text, std::move(name));
                if (!r) throw pb::value_error(r.error());
                return std::move(r).value();
            },
            pb::arg("text"), pb::arg("name") = "csv",
            "Columns name,min_snr_db,rate_bps[,bits_per_symbol,code_rate]; '#' comments.")
        .def("to_csv", &mcs_table::to_csv)
        .def("select", &mcs_table::select, pb::arg("snr_db"),
             "Highest MCS whose threshold snr_db meets, or NO_MCS (-1).")
        .def("rate_at", &mcs_table::rate_at, pb::arg("snr_db"),
             "Rate of select(snr_db), 0 if none.")
        .def("bytes_per_slot", &mcs_table::bytes_per_slot, pb::arg("mcs"), pb::arg("slot_s"))
        .def_property_readonly("name", &mcs_table::name)
        .def_property_readonly("entries", &mcs_table::entries)
        .def_property_readonly("thresholds_db",
                               [](const mcs_table& t) {
                                   std::vector<double> v;
                                   for (const auto& e : t.entries()) v.push_back(e.min_snr_db);
                                   return v;
                               })
        .def_property_readonly("rates_bps",
                               [](const mcs_table& t) {
                                   std::vector<double> v;
                                   for (const auto& e : t.entries()) v.push_back(e.rate_bps);
                                   return v;
                               })
        .def("__len__", &mcs_table::size)
        .def("__getitem__",
             [](const mcs_table& t, std::size_t i) {
                 if (i >= t.size()) throw pb::index_error("mcs_table index out of range");
                 return t[i];
             })
        .def("__repr__", [](const mcs_table& t) {
            return "<McsTable " + t.name() + " (" + std::to_string(t.size()) + " MCS)>";
        });

    m.def("cqi_to_mcs", &cqi_to_mcs, pb::arg("table"), pb::arg("cqi_db"),
          pb::arg("offset_db") = 0.0,
          "Highest MCS of `table` whose threshold cqi_db + offset_db meets, or NO_MCS (-1).");

    pb::class_<olla>(m, "olla",
                     "Outer-loop link adaptation: offset (dB) added to the CQI, +delta_up on "
                     "ACK, -delta_down on NACK, delta_up/delta_down = BLER_t/(1-BLER_t).")
        .def(pb::init([](double target_bler, double delta_down_db, double delta_up_db,
                         double min_offset_db, double max_offset_db, double initial_offset_db) {
                 return olla(olla_params{target_bler, delta_down_db, delta_up_db, min_offset_db,
                                         max_offset_db, initial_offset_db});
             }),
             pb::kw_only(), pb::arg("target_bler") = 0.1, pb::arg("delta_down_db") = 0.5,
             pb::arg("delta_up_db") = 0.0, pb::arg("min_offset_db") = -10.0,
             pb::arg("max_offset_db") = 10.0, pb::arg("initial_offset_db") = 0.0,
             "delta_up_db = 0 derives it from the convergence condition.")
        .def(
            "update",
            [](olla& o, bool ack, const std::string& position) {
                o.update(ack, parse_position(position));
            },
            pb::arg("ack"), pb::arg("position") = "interior",
            "position of the MCS used: interior, lowest, highest or only (saturation freeze).")
        .def_property_readonly("offset_db", &olla::offset_db)
        .def_property_readonly("delta_up_db", &olla::delta_up_db)
        .def_property_readonly("delta_down_db", &olla::delta_down_db)
        .def_property_readonly("target_bler", &olla::target_bler)
        .def_property_readonly("acks", &olla::acks)
        .def_property_readonly("nacks", &olla::nacks)
        .def_property_readonly("clamped", &olla::clamped)
        .def("adjusted_db", &olla::adjusted_db, pb::arg("cqi_db"))
        .def("select", &olla::select, pb::arg("table"), pb::arg("cqi_db"),
             "cqi_to_mcs(table, cqi_db, offset_db)")
        .def_static(
            "position_of",
            [](const mcs_table& t, int mcs) { return position_name(olla::position_of(t, mcs)); },
            pb::arg("table"), pb::arg("mcs"));
}

}  // namespace oppsched::py
