// Tests for the CLAMP router and client agents (Andrew & Hanly, CLAMP, §III-B and §IV).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <queue>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "error_of.h"
#include "oppsched/clamp.h"

using namespace oppsched;
using namespace oppsched::clamp;

namespace {

constexpr time_ns ms(double x) { return static_cast<time_ns>(x * 1e6); }
constexpr std::uint32_t kHugeOsWindow = 1u << 30;

// Eq. 15 read literally at start-up (mu_hat from the second packet on): the equations'
// arithmetic below is checked from the first packets (clamp.h, mu_min_span_s).
client_agent_params literal() {
    client_agent_params p;
    p.mu_min_span_s = 0.0;
    return p;
}

// ---------------------------------------------------------------------------------------
// A small packet-level closed loop, the paper's Fig. 1/Fig. 2 set-up: k greedy window-
// limited senders (CWND never binding, as when CLAMP is in control), one AP queue served
// at a deterministic mu_c, the router agent stamping prices on departures, client agents
// advertising AWND in ACKs. Delays: sender->AP d_i/2, AP->receiver and receiver->AP 1 ms
// (Table I), AP->sender d_i/2. No delayed ACKs, no losses.
struct loop_params {
    double mu_c = 1.25e6;         // bytes/s (10 Mb/s, §V-A)
    std::uint32_t packet = 1500;  // Table II "TCP packet size 1500 bytes"
    // IP + TCP header bytes of each packet: the AP queues `packet` bytes (IP), the window
    // and the ACKs count packet - header (sequence space). 0: the paper's one unit.
    std::uint32_t header = 0;
    double access_s = 1e-3;               // Table I, X <-> R_i
    std::vector<double> d_s;              // per flow, round-trip propagation outside the AP
    std::vector<double> start_s, stop_s;  // per flow, optional: sends only in [start, stop)
    double duration_s = 120.0;
    double measure_from_s = 60.0;
    router_agent_params router;
    client_agent_params client;
};

struct loop_result {
    std::vector<double> throughput;      // IP bytes/s per flow over [measure_from, duration]
    double mean_ema_q = 0.0;             // time-average of the router's q
    double mean_queue = 0.0;             // time-average of the real backlog
    double max_queue = 0.0;              // over the measurement interval
    std::vector<double> ema_per_second;  // time-average of q in each whole second
};

loop_result run_loop(const loop_params& cfg) {
    enum sim_event_kind { flow_start, ap_arrival, ap_departure, rx_arrival, ack_at_sender };
    struct sim_event {
        time_ns t;
        std::uint64_t seq;
        sim_event_kind kind;
        std::size_t flow;
        double price;
        std::uint32_t awnd;
        bool operator>(const sim_event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
    };
    std::priority_queue<sim_event, std::vector<sim_event>, std::greater<>> events;
    std::uint64_t seq = 0;
    auto push = [&](time_ns t, sim_event_kind k, std::size_t f, double p = 0, std::uint32_t a = 0) {
        events.push({t, seq++, k, f, p, a});
    };

    const std::size_t k = cfg.d_s.size();
    const std::uint32_t payload = cfg.packet - cfg.header;
    client_agent_params cp = cfg.client;
    cp.mss_bytes = payload;
    router_agent router(cfg.router);
    std::vector<client_agent> clients(k, client_agent(cp));
    std::vector<std::uint64_t> snd_nxt(k, 0), snd_una(k, 0), wnd(k, payload);
    std::deque<std::size_t> queue;  // flow of each queued packet (all the same size)
    bool busy = false;
    const time_ns service = from_seconds(cfg.packet / cfg.mu_c);
    const time_ns access = from_seconds(cfg.access_s);
    const time_ns end = from_seconds(cfg.duration_s);
    const time_ns measure_from = from_seconds(cfg.measure_from_s);
    std::vector<double> delivered(k, 0.0);
    double q_area = 0.0, ema_area = 0.0, max_q = 0.0;
    time_ns last_t = 0;

    auto active = [&](std::size_t f, time_ns now) {
        return (cfg.start_s.empty() || now >= from_seconds(cfg.start_s[f])) &&
               (cfg.stop_s.empty() || now < from_seconds(cfg.stop_s[f]));
    };
    auto send_allowed = [&](std::size_t f, time_ns now) {
        while (active(f, now) && snd_nxt[f] + payload <= snd_una[f] + wnd[f]) {
            push(now + from_seconds(cfg.d_s[f] / 2), ap_arrival, f);
            snd_nxt[f] += payload;
        }
    };
    std::vector<double> ema_bins(static_cast<std::size_t>(cfg.duration_s) + 1, 0.0);
    for (std::size_t f = 0; f < k; ++f)
        push(cfg.start_s.empty() ? 0 : from_seconds(cfg.start_s[f]), flow_start, f);

    while (!events.empty() && events.top().t <= end) {
        const sim_event e = events.top();
        events.pop();
        if (e.t >= measure_from) {
            const double dt = to_seconds(e.t - std::max(last_t, measure_from));
            q_area += dt * static_cast<double>(queue.size() * cfg.packet);
            ema_area += dt * router.average_queue_bytes();
        }
        for (time_ns a = last_t; a < e.t;) {  // per-second bins of the router's q
            const std::size_t bin = static_cast<std::size_t>(a / kNsPerSec);
            const time_ns b = std::min<time_ns>(e.t, static_cast<time_ns>(bin + 1) * kNsPerSec);
            if (bin < ema_bins.size())
                ema_bins[bin] += to_seconds(b - a) * router.average_queue_bytes();
            a = b;
        }
        last_t = e.t;
        switch (e.kind) {
            case flow_start:
                send_allowed(e.flow, e.t);
                break;
            case ap_arrival:
                router.on_arrival(e.t, queue.size() * cfg.packet);  // excluding itself
                queue.push_back(e.flow);
                if (e.t >= measure_from)
                    max_q = std::max(max_q, static_cast<double>(queue.size() * cfg.packet));
                if (!busy) {
                    busy = true;
                    push(e.t + service, ap_departure, queue.front());
                }
                break;
            case ap_departure: {
                const std::size_t f = queue.front();
                queue.pop_front();
                push(e.t + access, rx_arrival, f, router.price(cfg.mu_c));
                busy = !queue.empty();
                if (busy) push(e.t + service, ap_departure, queue.front());
                break;
            }
            case rx_arrival: {
                if (e.t >= measure_from) delivered[e.flow] += cfg.packet;
                const std::uint32_t awnd =
                    clients[e.flow].on_data(e.t, cfg.packet, e.price, kHugeOsWindow, payload);
                push(e.t + access + from_seconds(cfg.d_s[e.flow] / 2), ack_at_sender, e.flow, 0,
                     awnd);
                break;
            }
            case ack_at_sender:
                snd_una[e.flow] += payload;
                wnd[e.flow] = e.awnd;
                send_allowed(e.flow, e.t);
                break;
        }
    }
    loop_result r;
    const double span = cfg.duration_s - cfg.measure_from_s;
    for (double b : delivered) r.throughput.push_back(b / span);
    r.mean_queue = q_area / span;
    r.mean_ema_q = ema_area / span;
    r.max_queue = max_q;
    r.ema_per_second = ema_bins;
    return r;
}

}  // namespace

// =======================================================================================
// Router agent

TEST(ClampRouter, first_arrival_sets_the_average_to_the_queue_it_finds) {
    router_agent r;
    r.on_arrival(ms(10), 4200);
    EXPECT_DOUBLE_EQ(r.average_queue_bytes(), 4200.0);
}

TEST(ClampRouter, ema_matches_hand_computation_with_interval_in_seconds) {
    router_agent r;
    r.on_arrival(0, 1000);
    r.on_arrival(ms(100), 3000);  // I = 0.1 s
    double q = std::exp(-0.2) * 1000 + (1 - std::exp(-0.2)) * 3000;
    EXPECT_NEAR(r.average_queue_bytes(), q, 1e-9);
    r.on_arrival(ms(100) + ms(2.5), 0);  // I = 2.5 ms
    q = std::exp(-2 * 0.0025) * q;
    EXPECT_NEAR(r.average_queue_bytes(), q, 1e-9);
    r.on_arrival(ms(1102.5), 9000);  // I = 1 s
    q = std::exp(-2.0) * q + (1 - std::exp(-2.0)) * 9000;
    EXPECT_NEAR(r.average_queue_bytes(), q, 1e-9);
    EXPECT_EQ(r.stats().arrivals, 4u);
}

TEST(ClampRouter, ema_time_constant_is_half_a_second_whatever_the_packet_rate) {
    // exp(-2I) compounds to exp(-2T) over any partition of T into intervals: after a step
    // from 0 to Q the average is Q (1 - exp(-2T)) at every packet rate.
    for (double spacing_ms : {0.5, 2.0, 25.0}) {
        router_agent r;
        r.on_arrival(0, 0);
        const int n = static_cast<int>(std::lround(500.0 / spacing_ms));
        for (int i = 1; i <= n; ++i) r.on_arrival(ms(i * spacing_ms), 10000);
        EXPECT_NEAR(r.average_queue_bytes(), 10000 * (1 - std::exp(-1.0)), 1e-6)
            << "spacing " << spacing_ms << " ms";
    }
}

TEST(ClampRouter, repeated_timestamp_leaves_the_average_unchanged) {
    router_agent r;
    r.on_arrival(ms(5), 2000);
    r.on_arrival(ms(5), 90000);  // I = 0: weight exp(0) = 1 on the history
    EXPECT_DOUBLE_EQ(r.average_queue_bytes(), 2000.0);
    r.on_arrival(ms(4), 90000);  // clock going back: treated as I = 0
    EXPECT_DOUBLE_EQ(r.average_queue_bytes(), 2000.0);
}

TEST(ClampRouter, price_is_zero_at_or_below_a) {
    router_agent r;  // a = 5500, b = 1
    for (std::size_t q : {0u, 1000u, 5499u, 5500u}) {
        r.reset();
        r.on_arrival(0, q);
        EXPECT_EQ(r.price(1.25e6), 0.0) << q;
    }
}

TEST(ClampRouter, price_is_linear_in_q_above_a_and_inverse_in_mu_c) {
    router_agent r;
    r.on_arrival(0, 7500);
    EXPECT_NEAR(r.price(1.25e6), (7500.0 - 5500.0) / 1.25e6, 1e-15);  // eq. 13
    EXPECT_NEAR(r.price(2.5e6), (7500.0 - 5500.0) / 2.5e6, 1e-15);
    router_agent r2;
    r2.on_arrival(0, 9500);
    // Slope b/mu_c: 2000 more bytes, 2000/mu_c more seconds.
    EXPECT_NEAR(r2.price(1.25e6) - r.price(1.25e6), 2000.0 / 1.25e6, 1e-15);
    EXPECT_EQ(r.stats().prices, 3u);
    EXPECT_EQ(r.stats().positive_prices, 3u);
}

TEST(ClampRouter, b_scales_the_queue_as_in_eq7) {
    router_agent_params p;
    p.b = 0.5;
    router_agent r(p);
    r.on_arrival(0, 20000);
    EXPECT_NEAR(r.price(1e6), (0.5 * 20000 - 5500) / 1e6, 1e-15);
}

TEST(ClampRouter, invalid_service_rate_throws_naming_mu_c) {
    router_agent r;
    EXPECT_NE(error_of([&] { r.price(0.0); }).find("clamp.router.mu_c: 0"), std::string::npos);
    EXPECT_NE(error_of([&] { r.price(-1.0); }).find("clamp.router.mu_c"), std::string::npos);
    EXPECT_NE(error_of([&] { r.price(NAN); }).find("clamp.router.mu_c"), std::string::npos);
}

TEST(ClampRouter, params_outside_their_range_throw_naming_the_field) {
    auto make = [](router_agent_params p) { router_agent r(p); };
    router_agent_params p;
    p.b = 1.6;  // >= pi/2: Theorem 1 says the loop does not converge
    EXPECT_NE(error_of([&] { make(p); }).find("clamp.router.b: 1.6 not in (0, pi/2)"),
              std::string::npos);
    p = {};
    p.b = 0;
    EXPECT_NE(error_of([&] { make(p); }).find("clamp.router.b"), std::string::npos);
    p = {};
    p.a_bytes = -1;
    EXPECT_NE(error_of([&] { make(p); }).find("clamp.router.a_bytes: -1"), std::string::npos);
    p = {};
    p.ema_rate_per_s = 0;
    EXPECT_NE(error_of([&] { make(p); }).find("clamp.router.ema_rate_per_s"), std::string::npos);
    EXPECT_NO_THROW(router_agent(router_agent_params{}));
}

// =======================================================================================
// Client agent

namespace {
// Feeds n packets of `size` every `gap`, from t0; returns the last advertised window.
std::uint32_t feed(client_agent& c, time_ns& t, int n, time_ns gap, double price,
                   std::uint32_t size = 1448, std::uint32_t os = kHugeOsWindow) {
    std::uint32_t a = 0;
    for (int i = 0; i < n; ++i) {
        t += gap;
        a = c.on_data(t, size, price, os);
    }
    return a;
}

// A client out of slow start (three dupacks), with mu_hat and d_hat established.
client_agent client_in_congestion_avoidance(time_ns& t, client_agent_params p = literal()) {
    client_agent c(p);
    feed(c, t, 200, ms(1), 0.0);
    c.on_dupack();
    c.on_dupack();
    c.on_dupack();
    EXPECT_FALSE(c.in_slow_start());
    return c;
}
}  // namespace

TEST(ClampClient, starts_with_one_mss_in_slow_start) {
    client_agent c;
    EXPECT_DOUBLE_EQ(c.window(), 1448.0);
    EXPECT_TRUE(c.in_slow_start());
}

TEST(ClampClient, slow_start_grows_one_mss_per_packet) {
    client_agent c;
    time_ns t = 0;
    for (int k = 1; k <= 50; ++k) {
        t += ms(1);
        const std::uint32_t a = c.on_data(t, 1448, 0.0, kHugeOsWindow);
        EXPECT_EQ(a, 1448u * (k + 1)) << k;
        EXPECT_DOUBLE_EQ(c.window(), 1448.0 * (k + 1));
    }
    EXPECT_TRUE(c.in_slow_start());
}

TEST(ClampClient, slow_start_ends_and_halves_when_delta_w_turns_negative) {
    client_agent c(literal());
    time_ns t = 0;
    feed(c, t, 20, ms(1), 0.0);  // w = 21 MSS
    ASSERT_TRUE(c.in_slow_start());
    const double before = c.window();
    // mu_hat ~ 1.448e6 B/s here; a price of 1 ms makes tau - p mu_hat < 0.
    t += ms(1);
    const std::uint32_t a = c.on_data(t, 1448, 1e-3, kHugeOsWindow);
    EXPECT_LT(c.last_delta_w(), 0.0);
    EXPECT_FALSE(c.in_slow_start());
    EXPECT_DOUBLE_EQ(c.window(), before / 2);
    EXPECT_EQ(a, static_cast<std::uint32_t>(before / 2));
    EXPECT_EQ(c.stats().slow_start_exits_delta_w, 1u);
}

TEST(ClampClient, small_positive_price_with_positive_delta_w_keeps_slow_start) {
    client_agent c(literal());
    time_ns t = 0;
    feed(c, t, 20, ms(1), 0.0);
    t += ms(1);
    c.on_data(t, 1448, 1e-4, kHugeOsWindow);  // tau - p mu_hat = 500 - 145 > 0
    EXPECT_GT(c.last_delta_w(), 0.0);
    EXPECT_TRUE(c.in_slow_start());
    EXPECT_DOUBLE_EQ(c.window(), 22 * 1448.0);
}

TEST(ClampClient, three_dupacks_end_slow_start_and_halve) {
    client_agent c;
    time_ns t = 0;
    feed(c, t, 9, ms(1), 0.0);  // w = 10 MSS
    c.on_dupack();
    c.on_dupack();
    EXPECT_TRUE(c.in_slow_start());
    EXPECT_DOUBLE_EQ(c.window(), 10 * 1448.0);
    c.on_dupack();
    EXPECT_FALSE(c.in_slow_start());
    EXPECT_DOUBLE_EQ(c.window(), 5 * 1448.0);
    EXPECT_EQ(c.stats().slow_start_exits_dupack, 1u);
    // After slow start CLAMP does not react to loss.
    for (int i = 0; i < 6; ++i) c.on_dupack();
    EXPECT_DOUBLE_EQ(c.window(), 5 * 1448.0);
}

TEST(ClampClient, dupacks_separated_by_a_new_ack_do_not_end_slow_start) {
    client_agent c;
    time_ns t = 0;
    feed(c, t, 9, ms(1), 0.0);
    c.on_dupack();
    c.on_dupack();
    c.on_new_ack();
    c.on_dupack();
    c.on_dupack();
    EXPECT_TRUE(c.in_slow_start());
    EXPECT_DOUBLE_EQ(c.window(), 10 * 1448.0);
}

// The 180 ms flow of Andrew & Hanly, CLAMP, Table II at start-up: its sender's slow start
// delivers bursts of 2, 4, 8, ... packets one RTT apart, the packets of a burst 1 ms apart
// (one per slot's TB). The queue already stands above a, so the price is p = 2 ms; the
// flow's true rate in its first round trips is a few packets per 180 ms (~30-100 kB/s),
// where p mu_hat = 60-200 bytes < tau = 500. Read literally, eq. 15 over the first two
// packets gives 1448 kB/s: p mu_hat = 2900 > tau ends the receiver's slow start at its
// second packet. With the window spanning 0.2 s first, slow start goes on.
int packets_until_slow_start_ends(double mu_min_span_s) {
    client_agent_params p;
    p.mu_min_span_s = mu_min_span_s;
    client_agent c(p);
    time_ns rtt_start = 0;
    int received = 0;
    for (int burst = 2; burst <= 16; burst *= 2) {
        for (int i = 0; i < burst; ++i) {
            c.on_data(rtt_start + ms(i), 1500, 2e-3, kHugeOsWindow, 1448);
            ++received;
            if (!c.in_slow_start()) return received;
        }
        rtt_start += ms(180);
    }
    return -1;  // still in slow start after 30 packets
}

TEST(ClampClient, a_two_packet_burst_does_not_end_the_long_rtt_flows_slow_start) {
    EXPECT_EQ(packets_until_slow_start_ends(0.0), 2);  // the literal reading
    EXPECT_EQ(packets_until_slow_start_ends(0.2), -1);
}

TEST(ClampClient, mu_hat_is_used_once_its_window_spans_the_minimum_or_is_full) {
    client_agent_params p;
    p.alpha_packets = 4;
    p.mu_min_span_s = 0.010;
    client_agent c(p);
    c.on_data(ms(0), 1000, 0.0, kHugeOsWindow);
    c.on_data(ms(5), 1000, 0.0, kHugeOsWindow);
    EXPECT_EQ(c.mu_hat(), 0.0);  // spans 5 ms < 10 ms
    c.on_data(ms(10), 1000, 0.0, kHugeOsWindow);
    EXPECT_DOUBLE_EQ(c.mu_hat(), 3000 / 0.010);
    client_agent full(p);  // 5 packets (alpha + 1) within 1 ms: the window is full
    for (int i = 0; i < 5; ++i) full.on_data(ms(0.25 * i), 1000, 0.0, kHugeOsWindow);
    EXPECT_DOUBLE_EQ(full.mu_hat(), 5000 / 0.001);
}

TEST(ClampClient, slow_start_threshold_ends_slow_start_without_halving) {
    client_agent_params p;
    p.slow_start_threshold_bytes = 10 * 1448.0;
    client_agent c(p);
    time_ns t = 0;
    feed(c, t, 9, ms(1), 0.0);
    EXPECT_FALSE(c.in_slow_start());
    EXPECT_DOUBLE_EQ(c.window(), 10 * 1448.0);
    EXPECT_EQ(c.stats().slow_start_exits_threshold, 1u);
}

TEST(ClampClient, mu_hat_is_bytes_of_last_alpha_plus_one_packets_over_their_span) {
    client_agent_params p = literal();
    p.alpha_packets = 4;
    client_agent c(p);
    const std::vector<std::uint32_t> sizes{100, 200, 300, 400, 500, 600, 700};
    const std::vector<double> times_ms{0, 1, 3, 6, 10, 15, 21};
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        c.on_data(ms(times_ms[k]), sizes[k], 0.0, kHugeOsWindow);
        if (k == 0) {
            EXPECT_EQ(c.mu_hat(), 0.0);  // undefined with one packet
            continue;
        }
        // eq. 15: sum_{i=k-alpha}^{k} s_i / (t_k - t_{k-alpha}); fewer at the start.
        const std::size_t first = k >= 4 ? k - 4 : 0;
        double bytes = 0;
        for (std::size_t i = first; i <= k; ++i) bytes += sizes[i];
        const double span = (times_ms[k] - times_ms[first]) * 1e-3;
        EXPECT_NEAR(c.mu_hat(), bytes / span, 1e-6) << "k=" << k;
    }
}

TEST(ClampClient, d_hat_starts_at_first_sample_then_follows_eq16) {
    client_agent c(literal());               // beta = 0.001
    c.on_data(0, 1000, 0.0, kHugeOsWindow);  // w = 2 MSS, AWND = 2896
    EXPECT_EQ(c.d_hat(), 0.0);
    c.on_data(ms(1), 1000, 0.0, kHugeOsWindow);
    // mu_hat = 2000 B / 1 ms = 2e6 B/s; AWND in force at t_2 = 2896.
    double d = 2896.0 / 2e6;
    EXPECT_NEAR(c.d_hat(), d, 1e-15);
    EXPECT_DOUBLE_EQ(c.advertised(), 3 * 1448.0);
    c.on_data(ms(2), 1000, 0.0, kHugeOsWindow);
    d = 0.999 * d + 0.001 * (3 * 1448.0) / (3000.0 / 2e-3);
    EXPECT_NEAR(c.d_hat(), d, 1e-15);
}

TEST(ClampClient, delta_w_matches_eq14_by_hand) {
    time_ns t = 0;
    client_agent c = client_in_congestion_avoidance(t);
    const double w0 = c.window();
    const double d_prev = c.d_hat();
    const double awnd_prev = c.advertised();
    t += ms(2);
    c.on_data(t, 1448, 2e-4, kHugeOsWindow);
    const double mu = c.mu_hat();
    const double d = 0.999 * d_prev + 0.001 * awnd_prev / mu;
    EXPECT_NEAR(c.d_hat(), d, 1e-12);
    const double dw = (500.0 - 2e-4 * mu) / d * 2e-3;
    EXPECT_NEAR(c.last_delta_w(), dw, 1e-9);
    EXPECT_NEAR(c.window(), w0 + dw, 1e-9);
}

TEST(ClampClient, with_zero_price_window_grows_at_tau_over_d_hat_per_second) {
    time_ns t = 0;
    client_agent c = client_in_congestion_avoidance(t);
    // Per packet, exactly eq. 14 with p = 0.
    double predicted = 0;
    const double w0 = c.window();
    for (int i = 0; i < 100; ++i) {
        t += ms(1);
        c.on_data(t, 1448, 0.0, kHugeOsWindow);
        EXPECT_NEAR(c.last_delta_w(), 500.0 / c.d_hat() * 1e-3, 1e-9);
        predicted += 500.0 / c.d_hat() * 1e-3;
    }
    EXPECT_NEAR(c.window() - w0, predicted, 1e-6);
    // Steady state: an OS window of 50 000 B holds AWND (so d_hat converges to
    // 50 000 / mu_hat = 34.5 ms); w then grows by tau / d_hat = 14.5 kB per second.
    feed(c, t, 10000, ms(1), 0.0, 1448, 50000);
    const double d = c.d_hat();
    EXPECT_NEAR(d, 50000.0 / 1.448e6, 0.01 * d);
    const double w1 = c.window();
    feed(c, t, 1000, ms(1), 0.0, 1448, 50000);
    EXPECT_NEAR(c.window() - w1, 500.0 / d, 0.01 * 500.0 / d);
}

TEST(ClampClient, with_constant_high_price_window_shrinks_to_the_floor) {
    time_ns t = 0;
    client_agent c = client_in_congestion_avoidance(t);
    double prev = c.window();
    for (int i = 0; i < 400; ++i) {
        t += ms(1);
        c.on_data(t, 1448, 0.05, kHugeOsWindow);
        EXPECT_LE(c.window(), prev);
        prev = c.window();
    }
    EXPECT_DOUBLE_EQ(c.window(), 1448.0);  // min_window = one MSS
    EXPECT_GT(c.stats().floored, 0u);
}

TEST(ClampClient, increase_is_clipped_to_10kB_after_an_idle_period) {
    time_ns t = 0;
    client_agent c = client_in_congestion_avoidance(t);
    const double w0 = c.window();
    t += from_seconds(100.0);
    c.on_data(t, 1448, 0.0, kHugeOsWindow);
    EXPECT_GT(c.last_delta_w(), 10000.0);
    EXPECT_DOUBLE_EQ(c.window(), w0 + 10000.0);
    EXPECT_EQ(c.stats().clipped_high, 1u);
}

TEST(ClampClient, decrease_is_clipped_to_the_packet_size) {
    time_ns t = 0;
    client_agent c = client_in_congestion_avoidance(t);
    const double w0 = c.window();
    t += ms(1);
    c.on_data(t, 700, 10.0, kHugeOsWindow);
    EXPECT_LT(c.last_delta_w(), -700.0);
    EXPECT_DOUBLE_EQ(c.window(), w0 - 700.0);
    EXPECT_EQ(c.stats().clipped_low, 1u);
}

// One byte unit (clamp.h): s_k in IP bytes for eq. 15, the window in payload bytes. With
// 1040-byte packets carrying 1000 bytes, d_hat is AWND over the payload rate (the RTT),
// and w moves by Delta w (IP bytes) times 1000/1040.
TEST(ClampClient, when_packets_carry_headers_then_mu_hat_counts_ip_bytes_and_w_payload_bytes) {
    client_agent c(literal());
    time_ns t = 0;
    for (int i = 0; i < 200; ++i) {
        t += ms(1);
        c.on_data(t, 1040, 0.0, kHugeOsWindow, 1000);
    }
    c.on_dupack();
    c.on_dupack();
    c.on_dupack();
    ASSERT_FALSE(c.in_slow_start());
    EXPECT_NEAR(c.mu_hat(), 200 * 1040.0 / 199e-3, 1e-6);  // eq. 15 over IP lengths
    const double w0 = c.window();
    const double d_prev = c.d_hat();
    const double awnd_prev = c.advertised();
    t += ms(2);
    c.on_data(t, 1040, 1e-4, kHugeOsWindow, 1000);
    const double mu = c.mu_hat();
    const double ratio = 1000.0 / 1040.0;
    const double d = 0.999 * d_prev + 0.001 * awnd_prev / (ratio * mu);
    EXPECT_NEAR(c.d_hat(), d, 1e-12);
    const double dw = (500.0 - 1e-4 * mu) / d * 2e-3;  // eq. 14, IP bytes
    EXPECT_NEAR(c.last_delta_w(), dw, 1e-9);
    EXPECT_NEAR(c.window(), w0 + ratio * dw, 1e-9);
}

TEST(ClampClient, when_packets_carry_headers_then_the_decrease_is_clipped_to_the_payload) {
    time_ns t = 0;
    client_agent c = client_in_congestion_avoidance(t);
    const double w0 = c.window();
    t += ms(1);
    c.on_data(t, 740, 10.0, kHugeOsWindow, 700);
    EXPECT_DOUBLE_EQ(c.window(), w0 - 700.0);  // the ACK advances by 700, not 740
    EXPECT_EQ(c.stats().clipped_low, 1u);
}

TEST(ClampClient, advertised_window_never_exceeds_the_os_window) {
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<std::uint32_t> os_dist(0, 200000);
    std::uniform_real_distribution<double> price_dist(0.0, 2e-3);
    client_agent c;
    time_ns t = 0;
    int os_bound = 0;
    for (int i = 0; i < 5000; ++i) {
        t += ms(1);
        const std::uint32_t os = os_dist(rng);
        const std::uint32_t a = c.on_data(t, 1448, price_dist(rng), os);
        ASSERT_LE(a, os);
        ASSERT_EQ(a, static_cast<std::uint32_t>(std::floor(std::min(c.window(), double(os)))));
        if (a == os) ++os_bound;
    }
    EXPECT_GT(os_bound, 0);  // the OS window was the binding one some of the time
    EXPECT_GT(c.stats().os_limited, 0u);
}

TEST(ClampClient, negative_or_nan_price_throws) {
    client_agent c;
    EXPECT_NE(error_of([&] { c.on_data(0, 100, -1.0, 1000); }).find("clamp.client.price_s"),
              std::string::npos);
    EXPECT_NE(error_of([&] { c.on_data(0, 100, NAN, 1000); }).find("clamp.client.price_s"),
              std::string::npos);
}

TEST(ClampClient, params_outside_their_range_throw_naming_the_field) {
    auto msg = [](auto mutate) {
        client_agent_params p;
        mutate(p);
        return error_of([&] { client_agent c(p); });
    };
    EXPECT_NE(msg([](client_agent_params& p) {
                  p.beta = 1.5;
              }).find("clamp.client.beta: 1.5 not in (0, 1)"),
              std::string::npos);
    EXPECT_NE(msg([](client_agent_params& p) { p.beta = 0; }).find("clamp.client.beta"),
              std::string::npos);
    EXPECT_NE(msg([](client_agent_params& p) { p.tau_bytes = 0; }).find("clamp.client.tau_bytes"),
              std::string::npos);
    EXPECT_NE(
        msg([](client_agent_params& p) { p.alpha_packets = 0; }).find("clamp.client.alpha_packets"),
        std::string::npos);
    EXPECT_NE(msg([](client_agent_params& p) { p.mss_bytes = 0; }).find("clamp.client.mss_bytes"),
              std::string::npos);
    EXPECT_NE(msg([](client_agent_params& p) {
                  p.max_increase_bytes = -1;
              }).find("clamp.client.max_increase_bytes"),
              std::string::npos);
    EXPECT_NE(msg([](client_agent_params& p) {
                  p.min_window_bytes = -1;
              }).find("clamp.client.min_window_bytes"),
              std::string::npos);
    EXPECT_NE(msg([](client_agent_params& p) {
                  p.slow_start_threshold_bytes = NAN;
              }).find("clamp.client.slow_start_threshold_bytes"),
              std::string::npos);
    EXPECT_NE(msg([](client_agent_params& p) {
                  p.dupack_threshold = 0;
              }).find("clamp.client.dupack_threshold"),
              std::string::npos);
    EXPECT_EQ(msg([](client_agent_params&) {}), "(no exception)");
}

// =======================================================================================
// Closed loop: router + clients reach the fluid model's equilibrium (§III-B, eq. 11).

// Tolerances. The router's q (the quantity eq. 11 is about): within 2% of q* (measured:
// 0.0-0.4%). The real backlog, averaged in time, sits within one packet above q*: the
// ACK-clocked arrivals that feed the EMA come just after a departure and do not count
// themselves (measured: +700..+1000 B). Per-flow rates: within 2% of mu_c / k
// (measured: 0.1-0.4%), whatever the RTTs.
TEST(ClampLoop, two_flows_settle_at_q_star_k_tau_plus_a) {
    loop_params cfg;
    cfg.d_s = {0.05, 0.05};  // §V-A: 50 ms, 10 Mb/s, a = 5500, tau = 500
    const loop_result r = run_loop(cfg);
    const double q_star = (2 * 500.0 + 5500.0) / 1.0;
    EXPECT_NEAR(r.mean_ema_q, q_star, 0.02 * q_star);
    EXPECT_GE(r.mean_queue, q_star);
    EXPECT_LE(r.mean_queue, q_star + 1500.0);
    for (double x : r.throughput) EXPECT_NEAR(x, 1.25e6 / 2, 0.02 * 1.25e6 / 2);
    EXPECT_LT(r.max_queue, 18000.0);  // Fig. 2's 18 000 B buffer would not overflow
}

TEST(ClampLoop, equilibrium_queue_grows_by_tau_per_flow) {
    loop_params one, three;
    one.d_s = {0.05};
    three.d_s = {0.05, 0.05, 0.05};
    const loop_result r1 = run_loop(one);
    const loop_result r3 = run_loop(three);
    EXPECT_NEAR(r1.mean_ema_q, 6000.0, 0.02 * 6000.0);
    EXPECT_NEAR(r3.mean_ema_q, 7000.0, 0.02 * 7000.0);
    EXPECT_NEAR(r3.mean_ema_q - r1.mean_ema_q, 1000.0, 200.0);
}

// One byte unit (clamp.h): with headers, the AP counts q and mu_c in IP bytes and the
// client feeds s_k = IP length, so eq. 11 holds in IP bytes. 576-byte packets carrying 536
// bytes (RFC 879's default MSS) make the unit visible: counting s_k in payload bytes would
// put the queue at a + k tau 576/536 = 6373 B, 6 % above q* = 6000 B.
TEST(ClampLoop, when_packets_carry_headers_then_q_star_holds_in_ip_bytes) {
    loop_params cfg;
    cfg.packet = 576;
    cfg.header = 40;
    cfg.d_s = {0.05, 0.05};
    cfg.router.a_bytes = 1000.0;
    cfg.client.tau_bytes = 2500.0;
    const loop_result r = run_loop(cfg);
    const double q_star = (2 * 2500.0 + 1000.0) / 1.0;
    EXPECT_NEAR(r.mean_ema_q, q_star, 0.02 * q_star);
    for (double x : r.throughput) EXPECT_NEAR(x, 1.25e6 / 2, 0.02 * 1.25e6 / 2);
}

TEST(ClampLoop, equilibrium_follows_b_as_in_eq11) {
    loop_params cfg;
    cfg.d_s = {0.05, 0.05};
    cfg.router.b = 0.5;
    const loop_result r = run_loop(cfg);
    const double q_star = (2 * 500.0 + 5500.0) / 0.5;  // 13 000 B
    EXPECT_NEAR(r.mean_ema_q, q_star, 0.02 * q_star);
}

TEST(ClampLoop, flows_with_different_rtts_sharing_a_queue_get_equal_rates) {
    // Table II's flows 3 and 4 (d = 10 ms and 180 ms) sharing one queue, plus 130 ms.
    loop_params cfg;
    cfg.d_s = {0.01, 0.18, 0.13};
    cfg.duration_s = 200.0;
    cfg.measure_from_s = 100.0;
    const loop_result r = run_loop(cfg);
    const double share = 1.25e6 / 3;
    for (std::size_t i = 0; i < r.throughput.size(); ++i)
        EXPECT_NEAR(r.throughput[i], share, 0.02 * share) << "flow " << i;
    const double q_star = 3 * 500.0 + 5500.0;
    EXPECT_NEAR(r.mean_ema_q, q_star, 0.02 * q_star);
}

TEST(ClampLoop, queue_tracks_k_tau_plus_a_as_flows_join_and_leave) {
    // Fig. 2: 10 Mb/s, 50 ms, a = 5500 B, tau = 500 B; flow 1 over [0, 250) s, flow 2 over
    // [50, 150), flow 3 over [100, 200). The router's q, averaged over the last 10 s of
    // each phase, is (k tau + a)/b for the k flows present, within 2%.
    loop_params cfg;
    cfg.d_s = {0.05, 0.05, 0.05};
    cfg.start_s = {0.0, 50.0, 100.0};
    cfg.stop_s = {250.0, 150.0, 200.0};
    cfg.duration_s = 250.0;
    cfg.measure_from_s = 0.0;
    const loop_result r = run_loop(cfg);
    auto mean_q = [&](int from, int to) {
        double s = 0;
        for (int i = from; i < to; ++i) s += r.ema_per_second[i];
        return s / (to - from);
    };
    const struct {
        int end_s;
        int k;
    } phases[] = {{50, 1}, {100, 2}, {150, 3}, {200, 2}, {250, 1}};
    for (const auto& ph : phases) {
        const double q_star = ph.k * 500.0 + 5500.0;
        EXPECT_NEAR(mean_q(ph.end_s - 10, ph.end_s), q_star, 0.02 * q_star)
            << "phase ending at " << ph.end_s << " s with " << ph.k << " flows";
    }
}

// ---- mu_c estimator ---------------------------------------------------------------------

TEST(MuCEstimator, when_fewer_than_init_slots_were_backlogged_then_mu_c_is_unknown) {
    mu_c_estimator m(mu_c_params{3, 0.5, 0.01});
    m.on_backlogged_slot(100);
    m.on_backlogged_slot(100);
    EXPECT_FALSE(m.bps().has_value());
}

TEST(MuCEstimator, when_init_slots_were_backlogged_then_mu_c_is_their_mean_rate) {
    mu_c_estimator m(mu_c_params{3, 0.5, 0.01});
    m.on_backlogged_slot(100);
    m.on_backlogged_slot(0);  // another user took the slot: a zero sample
    m.on_backlogged_slot(200);
    ASSERT_TRUE(m.bps().has_value());
    EXPECT_DOUBLE_EQ(*m.bps(), 300.0 * 8.0 / (3 * 0.01));  // 80 kb/s
}

TEST(MuCEstimator, when_known_then_each_backlogged_slot_moves_it_by_the_ema_weight) {
    mu_c_estimator m(mu_c_params{1, 0.25, 0.01});
    m.on_backlogged_slot(100);  // 80 kb/s
    m.on_backlogged_slot(200);  // sample 160 kb/s
    EXPECT_DOUBLE_EQ(*m.bps(), 0.75 * 80e3 + 0.25 * 160e3);
}

TEST(MuCEstimator, when_a_parameter_is_out_of_range_then_it_throws_naming_it) {
    try {
        mu_c_estimator(mu_c_params{0, 0.5, 0.01});
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_STREQ(e.what(), "clamp.mu_init_slots: 0 not >= 1");
    }
    EXPECT_THROW(mu_c_estimator(mu_c_params{1, 0.0, 0.01}), std::invalid_argument);
    EXPECT_THROW(mu_c_estimator(mu_c_params{1, 1.5, 0.01}), std::invalid_argument);
    EXPECT_THROW(mu_c_estimator(mu_c_params{1, 0.5, 0.0}), std::invalid_argument);
}
