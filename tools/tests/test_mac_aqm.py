"""Queues and AQMs through the Python API (oppsched.mac.make_aqm, queue_set)."""

import functools
import random

import pytest
from scapy.all import IP, TCP, UDP, raw

from oppsched import mac

ECT0, CE = 2, 3
KINDS = ("droptail", "red", "rem", "reaqm", "avq", "codel", "pie", "spmaf", "las", "tlas")


@functools.lru_cache(maxsize=None)  # scapy is slow; packets are immutable bytes
def data(size=1000, ecn=0, sport=5000, seq=1, tag=None):
    """A TCP data segment of `size` IP bytes; `tag` (int) is written into the payload."""
    payload = bytearray(size - 40)
    if tag is not None:
        payload[:8] = tag.to_bytes(8, "big")
    ip = IP(src="10.0.0.1", dst="10.0.0.2", tos=ecn)
    return raw(ip / TCP(sport=sport, dport=80, flags="PA", seq=seq) / bytes(payload))


@functools.lru_cache(maxsize=None)
def ack(ackno, flags="A", dport=6000, sack=None, ecn=0):
    opts = [("NOP", None), ("NOP", None), ("SAck", sack)] if sack else []
    ip = IP(src="10.0.0.9", dst="10.0.0.1", tos=ecn)
    return raw(ip / TCP(sport=80, dport=dport, flags=flags, ack=ackno, options=opts))


@functools.lru_cache(maxsize=None)
def udp(size, ecn):
    return raw(IP(tos=ecn) / UDP() / bytes(size - 28))


def ecn_of(pkt):
    return IP(pkt).tos & 3


def tag_of(pkt):
    return int.from_bytes(bytes(IP(pkt)[TCP].payload)[:8], "big")


def test_every_kind_is_available_and_passes_a_packet_through():
    assert mac.AQM_KINDS == KINDS
    for kind in mac.AQM_KINDS:
        q = mac.make_aqm(kind)
        assert q.kind == kind
        p = data(1200)
        assert q.enqueue(p, 0.0) is True
        assert (q.bytes, q.packets) == (1200, 1)
        assert q.peek() == p
        assert q.dequeue(0.001) == p
        assert q.dequeue(0.002) is None
        s = q.stats
        assert (s["offered"], s["enqueued"], s["dequeued"]) == (1, 1, 1)
        assert s["dropped_total"] == 0 and set(s["dropped"]) == set(mac.DROP_REASONS)


def test_aliases_and_defaults():
    assert mac.make_aqm("SPM-AF").kind == "spmaf"
    assert mac.make_aqm("T-LAS").kind == "tlas"
    q = mac.make_aqm("reaqm")
    assert q.limit_packets == 50 and q.limit_bytes == 0


def test_overflow_is_reported_once_as_reason_and_size():
    q = mac.make_aqm("droptail", limit_packets=2)
    assert q.enqueue(data(), 0.0) and q.enqueue(data(), 0.0)
    assert q.enqueue(data(800), 0.0) is False
    assert q.drops() == [("overflow", 800)]
    assert q.drops() == []  # drained
    q.clear(1.0)
    assert q.drops() == [("flushed", 1000), ("flushed", 1000)]
    assert q.packets == 0


@pytest.mark.parametrize(
    "kind, params, message",
    [
        ("red", {"max_p": 1.5}, "red.max_p: 1.5 not in (0,1]"),
        ("reaqm", {"alpha_prime": 0.1}, "reaqm.alpha_prime: 0.1 must be > alpha (0.11)"),
        ("reaqm", {"update": "sometimes"}, "reaqm.update: 'sometimes' is not one of interval, per_arrival"),
        ("codel", {"target_s": 0.2}, "codel.target: 200000000 ns must be < interval"),
        ("pie", {"mark_ecn_threshold": -1.0}, "pie.mark_ecn_threshold: -1 not in [0,1]"),
        ("droptail", {"limit_packets": 0}, "aqm.limits: 0 bytes and 0 packets"),
        ("rem", {"capacity_bps": -5.0}, "rate.capacity_bps: -5 must be >= 0"),
        ("red", {"bogus": 1}, "red.bogus: unknown parameter"),
        ("las", {"flow_idle_timeout_s": "x"}, "las.flow_idle_timeout: 'x' is not a valid number"),
        (
            "tlas",
            {"threshold_packets": -3},
            "tlas.threshold_packets: -3 is not a valid non-negative int",
        ),
        ("fq_codel", {}, "aqm.kind: 'fq_codel' is not one of"),
    ],
)
def test_bad_parameters_raise_value_error_naming_field_and_value(kind, params, message):
    with pytest.raises(ValueError) as e:
        mac.make_aqm(kind, **params)
    assert message in str(e.value)


def test_red_marks_ect_and_drops_not_ect_above_twice_max_th():
    q = mac.make_aqm("red", w_q=1.0, limit_packets=100)
    while q.packets < 31:
        assert q.enqueue(data(ecn=ECT0), 0.0)  # ECT: marked, never dropped
    assert q.stats["marked"] > 0
    assert not q.enqueue(data(), 0.0)
    assert q.drops() == [("early_drop", 1000)]
    assert q.enqueue(data(ecn=ECT0, tag=77), 0.0)
    out = [q.dequeue(0.0) for _ in range(q.packets)]
    assert ecn_of(out[-1]) == CE and tag_of(out[-1]) == 77
    assert all(ecn_of(p) in (ECT0, CE) for p in out)


def test_spare_handshake_queues_the_syn_red_would_drop_above_twice_max_th():
    syn = raw(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=5000, dport=80, flags="S"))
    kept = {}
    for spare in (False, True):
        q = mac.make_aqm("red", w_q=1.0, limit_packets=100, spare_handshake=spare)
        while q.packets < 31:  # past 2 max_th: every arrival is signalled
            assert q.enqueue(data(ecn=ECT0), 0.0)
        kept[spare] = q.enqueue(syn, 0.0)
        assert not q.enqueue(data(), 0.0)  # a not-ECN-capable data packet: dropped either way
        assert q.stats["spared_handshakes"] == int(spare)
    assert kept == {False: False, True: True}


def test_mark_not_ect_marks_a_retransmission_and_a_pure_ack_red_would_drop_not_a_syn():
    # Linux sends a retransmission and a pure ACK Not-ECT (RFC 3168 6.1.4-6.1.5); ns-2's ECN
    # agents send every data packet ECT and no ACK through the queue
    pure_ack = raw(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=5000, dport=80, flags="A"))
    syn = raw(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=5000, dport=80, flags="S"))
    for mark in (False, True):
        q = mac.make_aqm("red", w_q=1.0, limit_packets=100, mark_not_ect=mark)
        while q.packets < 31:  # past 2 max_th: every arrival is signalled
            assert q.enqueue(data(ecn=ECT0), 0.0)
        assert q.enqueue(data(seq=9), 0.0) == mark
        assert q.enqueue(pure_ack, 0.0) == mark
        assert not q.enqueue(syn, 0.0)  # spare_handshake's, not this option's
        assert q.stats["marked_not_ect"] == 2 * int(mark)
        out = [q.dequeue(0.0) for _ in range(q.packets)]
        assert [ecn_of(p) for p in out if IP(p)[TCP].seq == 9] == ([CE] if mark else [])
        assert [ecn_of(p) for p in out if IP(p)[TCP].flags == "A"] == ([CE] if mark else [])


def test_ecn_false_drops_instead_of_marking():
    q = mac.make_aqm("red", w_q=1.0, limit_packets=100, ecn=False)
    for _ in range(60):
        q.enqueue(data(ecn=ECT0), 0.0)
    s = q.stats
    assert s["marked"] == 0 and s["dropped"]["early_drop"] > 0


def test_reaqm_price_follows_eq5_and_marking_is_one_minus_phi_to_minus_p():
    # 8 Mb/s: c = 2 packets of 1000 B per 2 ms interval.
    q = mac.make_aqm("reaqm", capacity_bps=8e6)
    for _ in range(5):
        q.enqueue(data(ecn=ECT0), 0.0)
    q.dequeue(0.002)
    s = q.stats
    assert s["price"] == pytest.approx(0.001 * (0.22 * 5 * 3 / 2 + 3), rel=1e-12)
    assert s["drop_probability"] == pytest.approx(1 - 1.001 ** -s["price"], rel=1e-12)


def test_reaqm_price_rises_under_overload_and_returns_to_zero():
    q = mac.make_aqm("reaqm", capacity_bps=12e6)
    t, service = 0.0, 1000 * 8 / 12e6
    for i in range(1500):  # 0.5 s: arrivals at twice the service rate
        t = i * service / 2
        q.enqueue(data(ecn=ECT0), t)
        if i % 2:
            q.dequeue(t)
        assert q.packets <= 50
    high = q.stats["price"]
    assert high > 1.0 and q.stats["dropped"]["early_drop"] == 0
    for i in range(20000):  # then a quarter of the service rate for ~13 s
        t += service
        if i % 4 == 0:
            q.enqueue(data(ecn=ECT0), t)
        q.dequeue(t)
    assert q.stats["price"] == 0.0


def test_codel_drops_one_interval_after_sojourn_exceeds_target():
    q = mac.make_aqm("codel", limit_packets=1000, ecn=False)
    for ms in range(200):  # departures lag arrivals by 20 ms
        q.enqueue(data(tag=ms), ms / 1000)
        if ms >= 20:
            q.dequeue(ms / 1000)
        if ms < 120:
            assert q.drops() == []
    assert q.stats["dropped"]["aqm_drop"] >= 1
    assert q.stats["dropping"] is True


def test_pie_burst_allowance_then_early_drops():
    q = mac.make_aqm(
        "pie", limit_packets=1000, capacity_bps=1e6, use_departure_rate=True, ecn=False
    )
    for _ in range(250):
        q.enqueue(data(), 0.0)  # 2 s of queueing delay
    t = 0.0
    for ms in range(1, 1000):
        t = ms / 1000
        q.dequeue(t)
        q.enqueue(data(), t)
        if ms == 100:
            s = q.stats
            assert s["drop_probability"] > 0.1 and s["burst_allowance_s"] > 0
            assert s["dropped"]["early_drop"] == 0
    assert q.stats["dropped"]["early_drop"] > 50


def test_spmaf_filters_superseded_acks_only():
    q = mac.make_aqm("spmaf")
    q.enqueue(ack(1000), 0.0)
    q.enqueue(ack(1000, flags="FA"), 0.0)  # FIN: kept
    q.enqueue(ack(1500, sack=(3000, 4000)), 0.0)  # carries SACK: kept by a plain ACK
    q.enqueue(ack(2000), 0.0)
    assert q.drops() == [("superseded_ack", 40)]
    assert q.packets == 3
    q.enqueue(ack(2500, sack=(3000, 5000)), 0.0)  # covers it: the SACK ACK and ack(2000) go
    assert [r for r, _ in q.drops()] == ["superseded_ack", "superseded_ack"]


def test_spmaf_high_priority_evicts_low_priority_when_full():
    q = mac.make_aqm("spmaf", limit_packets=2)
    q.enqueue(data(tag=1), 0.0)
    q.enqueue(data(tag=2), 0.0)
    assert q.enqueue(data(tag=3), 0.0) is False
    assert q.enqueue(data(tag=4), 0.0, high_priority=True) is True
    assert q.drops() == [("overflow", 1000), ("evicted_low_priority", 1000)]
    assert [tag_of(q.dequeue(0.0)) for _ in range(2)] == [2, 4]


def test_las_serves_the_flow_with_least_attained_service():
    q = mac.make_aqm("las", limit_packets=100)
    for i in range(6):
        q.enqueue(data(sport=5000, tag=i), 0.0)
    for _ in range(3):
        q.dequeue(0.0)
    for i in range(2):
        q.enqueue(data(sport=5001, tag=100 + i), 0.0)
    assert [tag_of(q.dequeue(0.0)) for _ in range(5)] == [100, 101, 3, 4, 5]


def test_tlas_puts_flows_past_the_threshold_behind_new_flows():
    q = mac.make_aqm("tlas", threshold_packets=2, limit_packets=100)
    for i in range(4):
        q.enqueue(data(sport=5000, tag=i), 0.0)
    for i in range(3):
        q.enqueue(data(sport=5001, tag=10 + i), 0.0)
    order = [tag_of(q.dequeue(0.0)) for _ in range(7)]
    assert order == [0, 10, 1, 11, 2, 3, 12]


def test_queue_set_per_user_and_shared_head_of_line():
    qs = mac.queue_set(3, mode="per_user", kind="droptail", limit_packets=2)
    assert qs.queue_count == 3
    qs.enqueue(data(), 0.0, user=2)
    qs.enqueue(data(), 0.0, user=0)
    assert qs.backlogged_users() == [0, 2] and qs.eligible_users() == [0, 2]
    assert qs.bytes(2) == 1000 and qs.total_packets == 2

    sh = mac.queue_set(3, mode="shared", kind="red", limit_packets=10)
    assert sh.mode == "shared" and sh.queue_count == 1
    sh.enqueue(data(tag=1), 0.0, user=1)
    sh.enqueue(data(tag=2), 0.0, user=0)
    assert sh.backlogged_users() == [0, 1]
    assert sh.eligible_users() == [1]  # head-of-line blocking
    assert sh.dequeue(0, 0.0) is None
    assert tag_of(sh.dequeue(1, 0.0)) == 1
    assert sh.eligible_users() == [0]
    with pytest.raises(IndexError):
        sh.enqueue(data(), 0.0, user=3)
    with pytest.raises(ValueError, match="queue_set.mode: 'fifo'"):
        mac.queue_set(2, mode="fifo")


@pytest.mark.parametrize("kind", KINDS)
def test_random_traffic_keeps_the_limit_and_accounts_for_every_packet(kind):
    rng = random.Random(2024)
    sizes = [40, 52, 100, 300, 576, 1000, 1280, 1500]
    q = mac.make_aqm(kind, limit_bytes=20000, limit_packets=30, seed=7)
    offered = out = 0
    dropped = []
    t = 0.0
    for step in range(3000):
        t += rng.random() * 0.002
        if rng.random() < (0.7 if (step // 400) % 2 == 0 else 0.3):
            for _ in range(rng.randint(1, 3)):
                r = rng.random()
                ecn = ECT0 if rng.random() < 0.5 else 0
                if r < 0.5:
                    p = data(rng.choice(sizes), ecn, sport=5000 + rng.randint(0, 3))
                elif r < 0.85:
                    p = ack(1448 * rng.randint(1, 40), dport=6000 + rng.randint(0, 2), ecn=ecn)
                else:
                    p = udp(rng.choice(sizes[2:]), ecn)
                offered += 1
                q.enqueue(p, t, high_priority=rng.random() < 0.2)
                assert q.bytes <= 20000 and q.packets <= 30
        else:
            for _ in range(rng.randint(1, 3)):
                out += q.dequeue(t) is not None
        dropped += q.drops()
    while q.packets:
        t += 0.001
        out += q.dequeue(t) is not None
    dropped += q.drops()
    assert offered == out + len(dropped)
    s = q.stats
    assert (s["offered"], s["dequeued"], s["dropped_total"]) == (offered, out, len(dropped))
    assert all(reason in mac.DROP_REASONS and size > 0 for reason, size in dropped)
    assert len(dropped) > 0
