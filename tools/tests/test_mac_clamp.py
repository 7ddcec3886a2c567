"""CLAMP router and client agents through the Python API (oppsched.mac).

Andrew & Hanly, CLAMP: router agent §IV-A (EMA with exp(-2I), price eq. 13), client
agent §IV-B/C (eqs. 14-17, receiver slow start), fluid equilibrium q* = (k tau + a)/b
(eq. 11).
"""

import heapq
import math
import random

import pytest

from oppsched import mac

MSS = 1448
HUGE = 1 << 30


def test_receiver_defaults_are_the_papers():
    r = mac.client_agent()
    assert r.w == MSS
    assert r.in_slow_start
    r2 = mac.client_agent(tau_bytes=500, alpha_packets=1000, beta=0.001, mss_bytes=1448)
    assert r2.w == r.w


def test_slow_start_adds_one_mss_per_packet():
    r = mac.client_agent()
    for k in range(1, 31):
        awnd = r.on_data(k * 1e-3, MSS, 0.0, HUGE)
        assert isinstance(awnd, int)
        assert awnd == MSS * (k + 1)
    assert r.in_slow_start


def test_three_dupacks_end_slow_start_and_halve():
    r = mac.client_agent()
    for k in range(1, 10):
        r.on_data(k * 1e-3, MSS, 0.0, HUGE)
    assert r.w == 10 * MSS
    r.on_dupack()
    r.on_dupack()
    assert r.in_slow_start
    r.on_dupack()
    assert not r.in_slow_start
    assert r.w == 5 * MSS
    assert r.stats["slow_start_exits_dupack"] == 1


def test_negative_delta_w_ends_slow_start_and_halves():
    r = mac.client_agent(mu_min_span_s=0.0)  # eq. 15 from the second packet (clamp.h)
    for k in range(1, 21):
        r.on_data(k * 1e-3, MSS, 0.0, HUGE)
    before = r.w
    r.on_data(21e-3, MSS, 1e-3, HUGE)  # tau - p mu_hat = 500 - 1448 < 0
    assert r.last_delta_w < 0
    assert not r.in_slow_start
    assert r.w == before / 2


def _out_of_slow_start():
    r = mac.client_agent(mu_min_span_s=0.0)
    t = 0.0
    for _ in range(200):
        t += 1e-3
        r.on_data(t, MSS, 0.0, HUGE)
    for _ in range(3):
        r.on_dupack()
    return r, t


def test_increase_clipped_to_10kB_and_decrease_to_packet_size():
    r, t = _out_of_slow_start()
    w0 = r.w
    r.on_data(t + 100.0, MSS, 0.0, HUGE)  # long idle: huge Delta w
    assert r.last_delta_w > 10000
    assert r.w == pytest.approx(w0 + 10000)
    r2, t2 = _out_of_slow_start()
    w1 = r2.w
    r2.on_data(t2 + 1e-3, 700, 10.0, HUGE)  # huge price: Delta w << -700
    assert r2.last_delta_w < -700
    assert r2.w == pytest.approx(w1 - 700)


def test_zero_price_grows_tau_over_d_hat_per_second():
    r, t = _out_of_slow_start()
    for _ in range(50):
        t += 1e-3
        w = r.w
        r.on_data(t, MSS, 0.0, HUGE)
        assert r.w - w == pytest.approx(500.0 / r.d_hat * 1e-3, rel=1e-9)


def test_constant_high_price_shrinks_the_window():
    r, t = _out_of_slow_start()
    start = r.w
    for _ in range(300):
        t += 1e-3
        r.on_data(t, MSS, 0.05, HUGE)
    assert r.w < start
    assert r.w == MSS  # the floor


def test_advertised_window_never_exceeds_os_window():
    rng = random.Random(3)
    r = mac.client_agent()
    for k in range(3000):
        os_wnd = rng.randrange(0, 150000)
        awnd = r.on_data((k + 1) * 1e-3, MSS, rng.uniform(0, 2e-3), os_wnd)
        assert awnd <= os_wnd
        assert awnd == math.floor(min(r.w, os_wnd))


def test_price_ema_and_eq13():
    p = mac.router_agent()  # a = 5500, b = 1
    p.on_arrival(0.0, 1000)
    p.on_arrival(0.1, 3000)  # I = 0.1 s
    q = math.exp(-0.2) * 1000 + (1 - math.exp(-0.2)) * 3000
    assert p.q == pytest.approx(q, rel=1e-12)
    assert p.price(1.25e6) == 0.0  # q < a
    p2 = mac.router_agent(a_bytes=5500, b=1.0)
    p2.on_arrival(0.0, 7500)
    assert p2.price(1.25e6) == pytest.approx(2000 / 1.25e6, rel=1e-12)
    assert p2.price(2.5e6) == pytest.approx(2000 / 2.5e6, rel=1e-12)


def test_bad_values_raise_value_error_naming_the_field():
    with pytest.raises(ValueError, match=r"clamp\.client\.beta: 1\.5"):
        mac.client_agent(beta=1.5)
    with pytest.raises(ValueError, match=r"clamp\.client\.alpha_packets"):
        mac.client_agent(alpha_packets=0)
    with pytest.raises(ValueError, match=r"clamp\.client\.mss_bytes"):
        mac.client_agent(mss_bytes=-1)
    with pytest.raises(ValueError, match=r"clamp\.router\.b"):
        mac.router_agent(b=2.0)
    with pytest.raises(ValueError, match=r"clamp\.router\.mu_c"):
        mac.router_agent().price(0.0)
    with pytest.raises(ValueError, match=r"clamp\.client\.price_s"):
        mac.client_agent().on_data(0.0, 100, -1.0, 1000)
    with pytest.raises(ValueError, match=r"clamp\.client\.awnd_os_bytes"):
        mac.client_agent().on_data(0.0, 100, 0.0, -5)


def _closed_loop(delays, mu_c=250e3, packet=1500, duration=120.0, measure_from=60.0):
    """Greedy window-limited senders, one AP queue at mu_c bytes/s, 1 ms access links.

    Returns (time-average of the router's q, per-flow throughput in bytes/s), both over
    [measure_from, duration].
    """
    price = mac.router_agent()
    rx = [mac.client_agent(mss_bytes=packet) for _ in delays]
    nxt = [0] * len(delays)
    una = [0] * len(delays)
    wnd = [packet] * len(delays)
    events, seq = [], 0
    queue, busy = [], False
    delivered = [0] * len(delays)
    q_area, last_t = 0.0, 0.0
    service = packet / mu_c

    def push(t, kind, f, extra=0.0):
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, f, extra))
        seq += 1

    def send(f, t):
        while nxt[f] + packet <= una[f] + wnd[f]:
            push(t + delays[f] / 2, "arrive", f)
            nxt[f] += packet

    for f in range(len(delays)):
        send(f, 0.0)
    while events and events[0][0] <= duration:
        t, _, kind, f, extra = heapq.heappop(events)
        if t > measure_from:
            q_area += (t - max(last_t, measure_from)) * price.q
        last_t = t
        if kind == "arrive":
            price.on_arrival(t, len(queue) * packet)
            queue.append(f)
            if not busy:
                busy = True
                push(t + service, "depart", queue[0])
        elif kind == "depart":
            queue.pop(0)
            push(t + 1e-3, "rx", f, price.price(mu_c))
            busy = bool(queue)
            if busy:
                push(t + service, "depart", queue[0])
        elif kind == "rx":
            if t > measure_from:
                delivered[f] += packet
            awnd = rx[f].on_data(t, packet, extra, HUGE)
            push(t + 1e-3 + delays[f] / 2, "ack", f, awnd)
        else:
            una[f] += packet
            wnd[f] = int(extra)
            send(f, t)
    span = duration - measure_from
    return q_area / span, [b / span for b in delivered]


def test_closed_loop_reaches_q_star_and_equal_rates_despite_rtts():
    # 2 Mb/s, flows of 10 ms and 180 ms RTT (Table II's d3, d4) sharing one queue.
    # Tolerances: q within 3% of (k tau + a)/b = 6500 B; each rate within 3% of mu_c/2.
    mu_c = 250e3
    q, rates = _closed_loop([0.01, 0.18], mu_c=mu_c)
    assert q == pytest.approx(2 * 500 + 5500, rel=0.03)
    for x in rates:
        assert x == pytest.approx(mu_c / 2, rel=0.03)
