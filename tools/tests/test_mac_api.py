"""The Python scripting API whose names are fixed (experiments and outside scripts rely on
them): each name exists and behaves as documented, called exactly as the documentation
writes it."""

import math

from scapy.all import IP, TCP, raw

from oppsched import mac


def test_make_scheduler_step_returns_an_index_or_minus_one():
    for kind, params in [("pf", {"alpha": 0.03}), ("glambda", {"alpha": 0.03, "lam": 1.0}),
                         ("rr", {}), ("maxrate", {}), ("wpf", {"alpha": 0.03, "weights": [1.0, 2.0]})]:
        s = mac.make_scheduler(kind, **params)
        assert s.step([1e6, 2e6], [True, True]) in (0, 1)
        assert s.step([1e6, 2e6], [False, False]) == -1
    assert mac.make_scheduler("maxrate").step([1e6, 2e6], [True, True]) == 1


def test_clamp_receiver_defaults_and_slow_start():
    r = mac.client_agent(tau_bytes=500, alpha_packets=1000, beta=0.001, mss_bytes=1448)
    w0 = r.w
    adv = r.on_data(0.0, 1448, 0.0, 65535)
    r.on_data(0.01, 1448, 0.0, 65535)
    assert r.w > w0                       # receiver slow start grows the window
    assert 0 < adv <= 65535               # never above the OS window
    r.on_dupack()


def test_clamp_price_is_zero_below_a_and_positive_above():
    p = mac.router_agent(a_bytes=5500, b=1.0)
    p.on_arrival(0.0, 1000)
    assert p.price(1e6) == 0.0
    for k in range(1, 200):
        p.on_arrival(k * 0.01, 20000)
    assert p.price(1e6) > 0.0


def test_rewrite_window_keeps_the_checksum_valid():
    pkt = raw(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=2, flags="A", window=1000))
    out = mac.rewrite_window(pkt, 4096, 2)
    parsed = IP(out)
    assert parsed[TCP].window == 1024     # 4096 bytes at scale 2^2
    chk = parsed[TCP].chksum
    del parsed[TCP].chksum
    assert IP(raw(parsed))[TCP].chksum == chk


def test_make_aqm_for_every_documented_kind():
    pkt = raw(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=2) / (b"x" * 100))
    for kind in ["droptail", "red", "rem", "reaqm", "avq", "codel", "pie", "spmaf", "las", "tlas"]:
        q = mac.make_aqm(kind)
        assert q.enqueue(pkt, 0.0)
        assert q.dequeue(0.001) == pkt
        assert q.dequeue(0.002) is None


def test_jakes_snr_is_positive_and_seeded():
    a = mac.fading_channel(60.0, 6.0, 1)
    b = mac.fading_channel(60.0, 6.0, 1)
    xs = [a.snr_linear(k * 0.003) for k in range(100)]
    assert xs == [b.snr_linear(k * 0.003) for k in range(100)]
    assert all(x > 0 and math.isfinite(x) for x in xs)
