// Python bindings of oppsched/fading.h and oppsched/clamp_link.h: fading_channel (Andrew & Hanly's
// Jakes model, or Srinivasan & Baras's random sum of sinusoids with model="sum_of_sinusoids") and
// clamp_link (Andrew & Hanly's slot rate rule, error rule and adaptive backoff margin). Errors
// become ValueError with the C++ message.
#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>

#include "bindings.h"
#include "oppsched/clamp_link.h"
#include "oppsched/fading.h"
#include "oppsched/validation.h"

namespace oppsched::py {
namespace {

namespace pyb = pybind11;
using namespace pyb::literals;
using channel::clamp_link;
using channel::clamp_link_params;
using channel::fading_channel;
using channel::margin_scope;
using channel::slot_outcome;

// A fading model chosen by name; the Python class `Jakes`.
struct py_fading {
    std::unique_ptr<fading_channel> ch;
    std::string model;
    std::uint64_t seed = 0;
};

std::uint64_t seed_from(const pyb::int_& s) {
    const auto v = PyLong_AsUnsignedLongLong(s.ptr());
    if (PyErr_Occurred()) {
        PyErr_Clear();
        throw_invalid("channel.seed", std::string(pyb::repr(s)), "not in [0, 2^64)");
    }
    return static_cast<std::uint64_t>(v);
}

margin_scope scope_from(const std::string& s) {
    if (s == "after_retransmissions") return margin_scope::after_retransmissions;
    if (s == "per_attempt") return margin_scope::per_attempt;
    throw_invalid("clamp_link.scope: '" + s +
                  "' not one of 'after_retransmissions', 'per_attempt'");
}
const char* scope_name(margin_scope s) {
    return s == margin_scope::per_attempt ? "per_attempt" : "after_retransmissions";
}

pyb::dict link_stats(const channel::clamp_link_stats& s) {
    return pyb::dict("attempts"_a = s.attempts, "errors"_a = s.errors, "delivered"_a = s.delivered,
                     "dropped"_a = s.dropped, "capped"_a = s.capped,
                     "bits_delivered"_a = s.bits_delivered, "loss_rate"_a = s.loss_rate(),
                     "error_rate"_a = s.error_rate());
}

pyb::dict link_params(const clamp_link_params& p) {
    return pyb::dict("slot_s"_a = p.slot_s, "w0_hz"_a = p.w0_hz, "cmax_bps"_a = p.cmax_bps,
                     "target_loss"_a = p.target_loss, "max_attempts"_a = p.max_attempts,
                     "scope"_a = scope_name(p.scope), "margin_init"_a = p.margin_init,
                     "margin_step"_a = p.margin_step, "margin_min"_a = p.margin_min,
                     "margin_max"_a = p.margin_max);
}

template <class T>
T cast_field(const pyb::handle& v, const std::string& key) {
    try {
        return v.cast<T>();
    } catch (const pyb::cast_error&) {
        throw_invalid("clamp_link." + key + ": " + std::string(pyb::repr(v)) +
                      " has the wrong type");
    }
}

// Keyword overrides on top of a preset (the Python constructor and the presets share it).
clamp_link make_link(clamp_link_params p, const pyb::kwargs& kw) {
    for (const auto& item : kw) {
        const std::string k = pyb::str(item.first);
        const pyb::handle v = item.second;
        if (k == "slot_s")
            p.slot_s = cast_field<double>(v, k);
        else if (k == "w0_hz")
            p.w0_hz = cast_field<double>(v, k);
        else if (k == "cmax_bps")
            p.cmax_bps = cast_field<double>(v, k);
        else if (k == "target_loss")
            p.target_loss = cast_field<double>(v, k);
        else if (k == "max_attempts")
            p.max_attempts = cast_field<int>(v, k);
        else if (k == "scope")
            p.scope = scope_from(cast_field<std::string>(v, k));
        else if (k == "margin_init")
            p.margin_init = cast_field<double>(v, k);
        else if (k == "margin_step")
            p.margin_step = cast_field<double>(v, k);
        else if (k == "margin_min")
            p.margin_min = cast_field<double>(v, k);
        else if (k == "margin_max")
            p.margin_max = cast_field<double>(v, k);
        else
            throw_invalid("clamp_link." + k + ": unknown parameter");
    }
    return clamp_link(p);
}

// model='clamp', the old name of 'jakes': a DeprecationWarning, then 'jakes'.
std::string deprecated_jakes() {
    pyb::module_::import("warnings")
        .attr("warn")("fading_channel.model: value 'clamp' is deprecated, use 'jakes'",
                      pyb::module_::import("builtins").attr("DeprecationWarning"), 2);
    return "jakes";
}

}  // namespace

void bind_channel(pybind11::module_& m) {
    m.attr("CLAMP_MEAN_SNR_DB") = channel::kClampMeanSnrDb;
    m.attr("CLAMP_SLOW_DOPPLER_HZ") = channel::kClampSlowDopplerHz;
    m.attr("CLAMP_FAST_DOPPLER_HZ") = channel::kClampFastDopplerHz;
    m.attr("CLAMP_ATTEMPTS_SLOW_FADING") = channel::kClampAttemptsSlowFading;
    m.attr("CLAMP_ATTEMPTS_FAST_FADING") = channel::kClampAttemptsFastFading;

    pyb::class_<py_fading>(
        m, "fading_channel",
        "Per-user Rayleigh fading. model='jakes': Andrew & Hanly's fading_channel model (G = 20 "
        "generators, "
        "random oscillator phases per seed); model='sum_of_sinusoids': Srinivasan & Baras, eq. 4. "
        "gain(t) is h(t) with E|h|^2 = 1; snr_linear(t) = 10^(mean_snr_db/10) |h(t)|^2.")
        .def(pyb::init([](double doppler_hz, double mean_snr_db, const pyb::int_& seed,
                          const std::string& model, int oscillators, double angle_offset,
                          bool random_phases) {
                 py_fading f;
                 f.model = model;
                 f.seed = seed_from(seed);
                 if (f.model == "clamp") f.model = deprecated_jakes();
                 if (f.model == "jakes") {
                     channel::jakes_params p;
                     p.doppler_hz = doppler_hz;
                     p.mean_snr_db = mean_snr_db;
                     p.seed = f.seed;
                     p.generators = oscillators;
                     p.angle_offset = angle_offset;
                     p.random_phases = random_phases;
                     f.ch = channel::make_fading(p);
                 } else if (model == "sum_of_sinusoids") {
                     channel::sum_of_sinusoids_params p;
                     p.doppler_hz = doppler_hz;
                     p.mean_snr_db = mean_snr_db;
                     p.seed = f.seed;
                     p.paths = oscillators;
                     f.ch = channel::make_fading(p);
                 } else {
                     throw_invalid("channel.model: '" + model +
                                   "' not one of 'jakes', 'sum_of_sinusoids'");
                 }
                 return f;
             }),
             "doppler_hz"_a, "mean_snr_db"_a, "seed"_a, pyb::kw_only(), "model"_a = "jakes",
             "oscillators"_a = channel::kClampGenerators, "angle_offset"_a = 0.5,
             "random_phases"_a = true)
        .def(
            "gain", [](const py_fading& f, double t_s) { return f.ch->gain(t_s); }, "t_s"_a)
        .def(
            "snr_linear", [](const py_fading& f, double t_s) { return f.ch->snr_linear(t_s); },
            "t_s"_a)
        .def(
            "snr_db", [](const py_fading& f, double t_s) { return f.ch->snr_db(t_s); }, "t_s"_a)
        .def(
            "gain_many",
            [](const py_fading& f,
               const pyb::array_t<double, pyb::array::c_style | pyb::array::forcecast>& t) {
                pyb::array_t<std::complex<double>> out(t.request().shape);
                const double* in = t.data();
                auto* o = out.mutable_data();
                for (pyb::ssize_t i = 0; i < t.size(); ++i) o[i] = f.ch->gain(in[i]);
                return out;
            },
            "t_s"_a, "h(t) for an array of times (any shape), complex128")
        .def(
            "snr_linear_many",
            [](const py_fading& f,
               const pyb::array_t<double, pyb::array::c_style | pyb::array::forcecast>& t) {
                pyb::array_t<double> out(t.request().shape);
                const double* in = t.data();
                double* o = out.mutable_data();
                for (pyb::ssize_t i = 0; i < t.size(); ++i) o[i] = f.ch->snr_linear(in[i]);
                return out;
            },
            "t_s"_a, "SNR(t), linear, for an array of times (any shape)")
        .def(
            "gains",
            [](const py_fading& f, double t0_s, double dt_s, pyb::ssize_t n) {
                if (n < 0) throw_invalid("channel.n: negative sample count");
                pyb::array_t<std::complex<double>> out(n);
                f.ch->gains(t0_s, dt_s, static_cast<std::size_t>(n), out.mutable_data());
                return out;
            },
            "t0_s"_a, "dt_s"_a, "n"_a,
            "h(t0 + i dt), i < n, by phasor recurrence (the emulator's symbol-rate path)")
        .def_property_readonly("mean_snr_linear",
                               [](const py_fading& f) { return f.ch->mean_snr_linear(); })
        .def_property_readonly("doppler_hz", [](const py_fading& f) { return f.ch->doppler_hz(); })
        .def_property_readonly("model", [](const py_fading& f) { return f.model; })
        .def_property_readonly("seed", [](const py_fading& f) { return f.seed; })
        .def("__repr__", [](const py_fading& f) {
            std::ostringstream os;
            os << "fading_channel(doppler_hz=" << f.ch->doppler_hz()
               << ", mean_snr_db=" << channel::linear_to_db(f.ch->mean_snr_linear())
               << ", seed=" << f.seed << ", model='" << f.model << "')";
            return os.str();
        });

    pyb::class_<clamp_link>(
        m, "clamp_link",
        "Andrew & Hanly's slot model (CLAMP, §V-B) for one destination: rate B = slot min(W0 "
        "log2(1 + (1 - m) "
        "N_start), C_max) (eq. 18), error iff B > slot W0 log2(1 + N_end), n consecutive "
        "failures drop, adaptive backoff margin m towards target_loss. Keyword arguments "
        "override the high-rate preset (W0 = 4.3 MHz, C_max = 10 Mb/s, 3 ms, n = 5).")
        .def(pyb::init(
            [](const pyb::kwargs& kw) { return make_link(clamp_link_params::high_rate(), kw); }))
        .def_static(
            "high_rate",
            [](int max_attempts, const pyb::kwargs& kw) {
                return make_link(clamp_link_params::high_rate(max_attempts), kw);
            },
            "max_attempts"_a = channel::kClampAttemptsSlowFading,
            "W0 = 4.3 MHz, C_max = 10 Mb/s (n = 5 slow fading, 15 fast)")
        .def_static(
            "low_rate",
            [](int max_attempts, const pyb::kwargs& kw) {
                return make_link(clamp_link_params::low_rate(max_attempts), kw);
            },
            "max_attempts"_a = channel::kClampAttemptsSlowFading,
            "W0 = 620 kHz, C_max = 1.44 Mb/s (§V-J)")
        .def("rate_bps", &clamp_link::rate_bps, "snr_start"_a)
        .def("rate_bits", &clamp_link::rate_bits, "snr_start"_a)
        .def("capacity_bits", &clamp_link::capacity_bits, "snr_end"_a)
        .def("is_error", &clamp_link::is_error, "bits"_a, "snr_end"_a)
        .def(
            "on_feedback",
            [](clamp_link& l, bool success) {
                return std::string(to_string(l.on_feedback(success)));
            },
            "success"_a, "ACK/NACK of one attempt; returns 'delivered', 'retry' or 'dropped'")
        .def(
            "transmit",
            [](clamp_link& l, double snr_start, double snr_end) {
                const auto a = l.transmit(snr_start, snr_end);
                return pyb::make_tuple(a.bits, a.error, std::string(to_string(a.outcome)));
            },
            "snr_start"_a, "snr_end"_a, "One slot: returns (bits, error, outcome).")
        .def(
            "transmit_many",
            [](clamp_link& l,
               const pyb::array_t<double, pyb::array::c_style | pyb::array::forcecast>& start,
               const pyb::array_t<double, pyb::array::c_style | pyb::array::forcecast>& end) {
                if (start.size() != end.size())
                    throw_invalid("clamp_link.snr_end: size differs from snr_start");
                const pyb::ssize_t n = start.size();
                pyb::array_t<double> bits(n), margin(n);
                pyb::array_t<bool> error(n);
                pyb::array_t<std::int8_t> outcome(n);
                const double* s = start.data();
                const double* e = end.data();
                for (pyb::ssize_t i = 0; i < n; ++i) {
                    const auto a = l.transmit(s[i], e[i]);
                    bits.mutable_data()[i] = a.bits;
                    error.mutable_data()[i] = a.error;
                    outcome.mutable_data()[i] = static_cast<std::int8_t>(a.outcome);
                    margin.mutable_data()[i] = l.margin();
                }
                return pyb::dict("bits"_a = bits, "error"_a = error, "outcome"_a = outcome,
                                 "margin"_a = margin);
            },
            "snr_start"_a, "snr_end"_a,
            "Consecutive slots; returns a dict of arrays: bits, error, outcome (0 delivered, "
            "1 retry, 2 dropped), margin (after each slot).")
        .def("reset", &clamp_link::reset)
        .def_property_readonly("margin", &clamp_link::margin)
        .def_property_readonly("consecutive_failures",
                               [](const clamp_link& l) { return l.state().consecutive_failures; })
        .def_property_readonly("stats", [](const clamp_link& l) { return link_stats(l.stats()); })
        .def_property_readonly("params",
                               [](const clamp_link& l) { return link_params(l.params()); })
        .def("__repr__", [](const clamp_link& l) {
            std::ostringstream os;
            os << "clamp_link(w0_hz=" << l.params().w0_hz << ", cmax_bps=" << l.params().cmax_bps
               << ", max_attempts=" << l.params().max_attempts << ", margin=" << l.margin() << ")";
            return os.str();
        });
}

}  // namespace oppsched::py
