// Python bindings of oppsched/clamp.h: ClampReceiver (the client agent, Andrew & Hanly, CLAMP,
// §IV-B/C) and ClampPrice (the router agent, §IV-A). Times are float seconds on the Python side
// (rounded to the nearest ns), sizes are int bytes. Errors become ValueError with the C++
// message (field and value).
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "bindings.h"
#include "oppsched/clamp.h"
#include "oppsched/validation.h"

namespace oppsched::py {
namespace {

namespace pyb = pybind11;
using namespace pyb::literals;

time_ns seconds_to_ns(double t_s, const char* field) {
    if (!std::isfinite(t_s) || std::abs(t_s) > 9.2e9)
        throw_invalid(field, t_s, "not a finite time in seconds");
    return static_cast<time_ns>(std::llround(t_s * 1e9));
}

// Python ints to unsigned C++ fields: out of range is a ValueError naming the field (not
// pybind11's TypeError), as for every other bad value.
std::uint64_t to_unsigned(long long v, std::uint64_t max, const char* field) {
    if (v < 0 || static_cast<unsigned long long>(v) > max)
        throw_invalid(field, v, "not in [0, " + std::to_string(max) + "]");
    return static_cast<std::uint64_t>(v);
}
constexpr std::uint64_t kU32 = std::numeric_limits<std::uint32_t>::max();

}  // namespace

void bind_clamp(pybind11::module_& m) {
    using clamp::client_agent;
    using clamp::client_agent_params;
    using clamp::router_agent;
    using clamp::router_agent_params;

    pyb::class_<client_agent>(m, "client_agent",
                              "CLAMP client agent for one TCP flow (Andrew & Hanly, CLAMP, "
                              "eqs. 14-17 and receiver slow start).\n\n"
                              "on_data() returns the window (bytes) to advertise in the ACK.")
        .def(pyb::init([](double tau_bytes, long long alpha_packets, double beta,
                          long long mss_bytes, double max_increase_bytes, double min_window_bytes,
                          double slow_start_threshold_bytes, int dupack_threshold,
                          double mu_min_span_s) {
                 client_agent_params p;
                 p.tau_bytes = tau_bytes;
                 p.alpha_packets = static_cast<std::size_t>(
                     to_unsigned(alpha_packets, 100'000'000, "clamp.client.alpha_packets"));
                 p.beta = beta;
                 p.mss_bytes = static_cast<std::uint32_t>(
                     to_unsigned(mss_bytes, kU32, "clamp.client.mss_bytes"));
                 p.max_increase_bytes = max_increase_bytes;
                 p.min_window_bytes = min_window_bytes;
                 p.slow_start_threshold_bytes = slow_start_threshold_bytes;
                 p.dupack_threshold = dupack_threshold;
                 p.mu_min_span_s = mu_min_span_s;
                 return client_agent(p);
             }),
             "tau_bytes"_a = 500.0, "alpha_packets"_a = 1000, "beta"_a = 0.001,
             "mss_bytes"_a = 1448, pyb::kw_only(), "max_increase_bytes"_a = 10000.0,
             "min_window_bytes"_a = 0.0, "slow_start_threshold_bytes"_a = 0.0,
             "dupack_threshold"_a = 3, "mu_min_span_s"_a = 0.2)
        .def(
            "on_data",
            [](client_agent& c, double t_s, long long size_bytes, double price_s,
               long long awnd_os_bytes, long long seq_bytes) {
                return c.on_data(seconds_to_ns(t_s, "clamp.client.t_s"),
                                 static_cast<std::uint32_t>(
                                     to_unsigned(size_bytes, kU32, "clamp.client.size_bytes")),
                                 price_s,
                                 static_cast<std::uint32_t>(to_unsigned(
                                     awnd_os_bytes, kU32, "clamp.client.awnd_os_bytes")),
                                 static_cast<std::uint32_t>(
                                     to_unsigned(seq_bytes, kU32, "clamp.client.seq_bytes")));
            },
            "t_s"_a, "size_bytes"_a, "price_s"_a, "awnd_os_bytes"_a, "seq_bytes"_a = 0,
            "Data packet received at t_s carrying price_s: size_bytes = s_k, its IP length "
            "(the AP's unit); seq_bytes = its TCP payload (the window's unit; 0 = size_bytes). "
            "The OS would advertise awnd_os_bytes. Returns AWND = min(w, awnd_os_bytes) in "
            "bytes of sequence space.")
        .def("on_dupack", &client_agent::on_dupack,
             "A duplicate ACK was sent; the third in a row ends slow start (w halves).")
        .def("on_new_ack", &client_agent::on_new_ack, "A non-duplicate ACK was sent.")
        .def("reset", &client_agent::reset)
        .def_property_readonly("w", &client_agent::window, "CLAMP window w, bytes (float)")
        .def_property_readonly("advertised", &client_agent::advertised,
                               "AWND(t_k) = min(w, AWND_os), bytes (float)")
        .def_property_readonly("in_slow_start", &client_agent::in_slow_start)
        .def_property_readonly("mu_hat", &client_agent::mu_hat, "rate estimate, bytes/s (eq. 15)")
        .def_property_readonly("d_hat", &client_agent::d_hat, "RTT estimate, s (eq. 16)")
        .def_property_readonly("last_delta_w", &client_agent::last_delta_w,
                               "Delta w of eq. 14 at the last packet, before clipping")
        .def_property_readonly("stats",
                               [](const client_agent& c) { return stats_to_dict(c.stats()); })
        .def("__repr__", [](const client_agent& c) {
            std::ostringstream os;
            os << "client_agent(w=" << c.window() << ", slow_start=" << c.in_slow_start()
               << ", mu_hat=" << c.mu_hat() << ", d_hat=" << c.d_hat() << ")";
            return os.str();
        });

    pyb::class_<router_agent>(
        m, "router_agent",
        "CLAMP router agent for one AP queue (Andrew & Hanly, CLAMP, §IV-A): EMA of the "
        "queue at arrivals, price p = max((b q - a)/mu_c, 0) seconds.")
        .def(pyb::init([](double a_bytes, double b, double ema_rate_per_s) {
                 router_agent_params p;
                 p.a_bytes = a_bytes;
                 p.b = b;
                 p.ema_rate_per_s = ema_rate_per_s;
                 return router_agent(p);
             }),
             "a_bytes"_a = 5500.0, "b"_a = 1.0, pyb::kw_only(), "ema_rate_per_s"_a = 2.0)
        .def(
            "on_arrival",
            [](router_agent& r, double t_s, long long queue_bytes) {
                r.on_arrival(seconds_to_ns(t_s, "clamp.router.t_s"),
                             static_cast<std::size_t>(
                                 to_unsigned(queue_bytes, std::numeric_limits<std::int64_t>::max(),
                                             "clamp.router.queue_bytes")));
            },
            "t_s"_a, "queue_bytes"_a,
            "A packet arrived at t_s finding queue_bytes in the queue (excluding itself).")
        .def("price", &router_agent::price, "mu_c_bytes_per_s"_a,
             "Price in seconds to stamp on a packet sent now; mu_c is the queue's service "
             "rate in bytes/s.")
        .def("reset", &router_agent::reset)
        .def_property_readonly("q", &router_agent::average_queue_bytes,
                               "the moving average q, bytes")
        .def_property_readonly("stats",
                               [](const router_agent& r) { return stats_to_dict(r.stats()); })
        .def("__repr__", [](const router_agent& r) {
            std::ostringstream os;
            os << "router_agent(a_bytes=" << r.params().a_bytes << ", b=" << r.params().b
               << ", q=" << r.average_queue_bytes() << ")";
            return os.str();
        });
}

}  // namespace oppsched::py
