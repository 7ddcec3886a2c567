"""oppsched-apd end to end: a network namespace with a persistent TUN, the daemon in it, a fake
PHY and a fake client in Python (pyzmq + oppsched.mac.wire), garbage on every endpoint.

Needs root (network namespaces) and the built daemon ($OPPSCHED_APD, else
host/daemon/oppsched-apd in $OPPSCHED_BUILD, else in build/); skipped otherwise. Every namespace,
device, process and directory a test makes is removed, whatever happens.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

zmq = pytest.importorskip("zmq")

from oppsched import mac  # noqa: E402
from helpers import built_program, needs_root, wait_for_files, write_yaml  # noqa: E402

APD = built_program("host/daemon/oppsched-apd", "OPPSCHED_APD")
pytestmark = [
    needs_root,
    pytest.mark.skipif(APD is None, reason="oppsched-apd is not built"),
]

TUN = "aptun0"
AP_ADDR, UE0_ADDR, UE1_ADDR = "10.77.0.1", "10.77.0.2", "10.77.0.3"
AP_ADDR6, UE0_ADDR6 = "fd77::1", "fd77::2"
_counter = itertools.count()


def run(*args: str, check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True,
                          timeout=timeout)


@dataclass
class Bed:
    ns: str
    dir: Path
    procs: list = field(default_factory=list)

    def ep(self, name: str) -> str:
        return f"ipc://{self.dir}/zmq/{name}"

    def config(self, **over) -> dict:
        c = {
            "tun": TUN,
            "slot_s": 0.003,
            "lead_slots": 2,
            "endpoints": {n: self.ep(n) for n in ("phy_requests", "phy_grants", "uplink")},
            "zmq": {"max_msg_bytes": 8000, "timeout_ms": 50},
            "users": [
                {"id": 0, "name": "ue0", "addresses": [UE0_ADDR, UE0_ADDR6],
                 "queue_limit_bytes": None},
                {"id": 1, "name": "ue1", "addresses": [UE1_ADDR]},
            ],
            "queue": {"mode": "per_user", "limit_bytes": 100000, "limit_packets": None},
            "aqm": {"kind": "red", "ecn": True, "params": {"max_p": 0.1}},
            "scheduler": {"kind": "pf", "alpha": 0.03},
            "harq": {"processes": 8, "max_transmissions": 4, "feedback_timeout_slots": 50},
            "link_adaptation": {"table": "shannon", "target_bler": 0.1},
            "clamp": {"enabled": True, "a_bytes": 0, "b": 1, "mu_init_slots": 2},
            "traces": {"slots": str(self.dir / "slots.csv"),
                       "packets": str(self.dir / "packets.csv"),
                       "stats": str(self.dir / "apd.stats.json")},
            "seed": 1,
            # The fake PHY requests slots only when a test asks: no watchdog unless a test
            # sets one.
            "watchdog_slots": 0,
        }
        for k, v in over.items():
            c[k] = v
        return c

    def write(self, cfg: dict, name: str = "apd.yaml") -> Path:
        return write_yaml(self.dir / name, cfg)

    def exec(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return run("ip", "netns", "exec", self.ns, *args, **kw)

    def start(self, cfg: dict) -> subprocess.Popen:
        path = self.write(cfg)
        p = subprocess.Popen(["ip", "netns", "exec", self.ns, str(APD), "--config", str(path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)

        def alive():
            if p.poll() is not None:
                raise AssertionError(f"apd exited {p.returncode}: {p.stderr.read()}")
        wait_for_files([cfg["traces"]["stats"]], 10, "apd: stats file written", alive)
        return p

    def has_link(self, name: str) -> bool:
        return run("ip", "-n", self.ns, "link", "show", name, check=False).returncode == 0


@pytest.fixture
def bed():
    ns = f"oapdt{os.getpid() % 100000}x{next(_counter)}"
    d = Path(tempfile.mkdtemp(prefix="oapd", dir="/tmp"))
    b = Bed(ns, d)
    try:
        run("ip", "netns", "add", ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "-n", ns, "tuntap", "add", "mode", "tun", "name", TUN)
        run("ip", "-n", ns, "addr", "add", f"{AP_ADDR}/24", "dev", TUN)
        run("ip", "-n", ns, "addr", "add", f"{AP_ADDR6}/64", "dev", TUN, "nodad")
        run("ip", "-n", ns, "link", "set", TUN, "up")
        yield b
    finally:
        for p in b.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(timeout=10)
        run("ip", "-n", ns, "tuntap", "del", "mode", "tun", "name", TUN, check=False)
        run("ip", "netns", "del", ns, check=False)
        shutil.rmtree(d, ignore_errors=True)
    assert ns not in run("ip", "netns", "list").stdout


def stats_after_usr1(p: subprocess.Popen, path: Path, want, timeout: float = 5) -> dict:
    """SIGUSR1, then the stats file until want(stats) holds."""
    deadline = time.monotonic() + timeout
    s: dict = {}
    while time.monotonic() < deadline:
        p.send_signal(signal.SIGUSR1)
        time.sleep(0.1)
        try:
            s = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if want(s):
            return s
    raise AssertionError(f"stats never satisfied the condition: {json.dumps(s)[:2000]}")


class FakePhy:
    """PUSH slot_requests to the apd, PULL its slot_grants."""

    def __init__(self, ctx, bed: Bed, first_seq: int = 0):
        self.req = ctx.socket(zmq.PUSH)
        self.req.setsockopt(zmq.LINGER, 0)
        self.req.connect(bed.ep("phy_requests"))
        self.grants = ctx.socket(zmq.PULL)
        self.grants.setsockopt(zmq.LINGER, 0)
        self.grants.connect(bed.ep("phy_grants"))
        self.seq = first_seq
        time.sleep(0.1)  # let both connections complete (the apd's PUSH has ZMQ_IMMEDIATE)

    def request(self, slot: int, timeout_ms: int = 2000, air_ahead_ns: int = 0) -> dict:
        self.req.send(mac.wire.encode("slot_request", self.seq, {
            "slot": slot, "air_time_ns": time.monotonic_ns() + air_ahead_ns}))
        self.seq += 1
        while True:
            if not self.grants.poll(timeout_ms):
                raise AssertionError(f"no grant for slot {slot}")
            _, kind, g = mac.wire.decode(self.grants.recv())
            assert kind == "slot_grant"
            if g["slot"] == slot:
                return g

    def close(self):
        self.req.close()
        self.grants.close()


class FakeClient:
    def __init__(self, ctx, bed: Bed):
        self.sock = ctx.socket(zmq.PUSH)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(bed.ep("uplink"))
        self.seq = 0

    def send(self, kind: str, fields: dict):
        self.sock.send(mac.wire.encode(kind, self.seq, fields))
        self.seq += 1


def send_udp_in_ns(bed: Bed, dst: str, port: int, payload: bytes) -> None:
    fam = "AF_INET6" if ":" in dst else "AF_INET"
    code = (f"import socket; s = socket.socket(socket.{fam}, socket.SOCK_DGRAM); "
            f"s.sendto({payload!r}, ({dst!r}, {port}))")
    bed.exec("python3", "-c", code)


def ipv4_udp(src: str, dst: str, sport: int, dport: int, payload: bytes) -> bytes:
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                      bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))))
    s = sum(struct.unpack("!10H", hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    hdr = hdr[:10] + struct.pack("!H", ~s & 0xFFFF) + hdr[12:]
    return hdr + udp


def grants_until(phy: FakePhy, client: FakeClient | None, first_slot: int, want,
                 max_slots: int = 300):
    """Requests slots from first_slot on (acking every TB) until want(grant) is true."""
    for slot in range(first_slot, first_slot + max_slots):
        g = phy.request(slot)
        if not g["empty"] and client is not None:
            client.send("harq_feedback", {"user": g["user"], "slot": slot,
                                          "harq_pid": g["harq_pid"], "ack": True})
        if want(g):
            return slot, g
        time.sleep(0.003)
    raise AssertionError("the wanted grant never came")


def carries(g: dict, marker: bytes) -> bool:
    if g["empty"]:
        return False
    pdu = mac.parse_pdu(g["tb"])
    return any(marker in s["data"] for s in pdu["segments"])


# ----------------------------------------------------------------------------------------


def test_invalid_config_exits_2_naming_the_field_and_creates_no_tun(bed):
    base = bed.config(tun="oapdnew0")
    cases = [
        ({"aqm": {"kind": "red", "params": {"max_p": 1.5}}}, "aqm.params.max_p: 1.5 not in (0,1]"),
        ({"aqm": {"kind": "reaqm", "params": {"update": "sometimes"}}},
         "aqm.params.update: 'sometimes' not one of interval, per_arrival"),
        ({"slot_s": float("nan")}, "slot_s: .nan is not a finite number"),
        ({"clamp": {"enabled": True, "a_bytes": -1}}, "clamp.a_bytes: -1"),
        ({"bogus": 1}, "bogus: unknown key"),
        ({"scheduler": {"kind": "pf", "alpha": "fast"}}, "scheduler.alpha: 'fast' is not a number"),
        ({"zmq": {"max_msg_bytes": 2000}}, "zmq.max_msg_bytes: 2000 < 3787, the largest slot_grant"),
        ({"users": [{"id": 0, "name": "ue0", "addresses": ["10.77.0.300"]}]},
         "users[0].addresses[0]: '10.77.0.300' is not an IPv4 or IPv6 address"),
        ({"link_adaptation": {"mode": "genie"}}, "link_adaptation.mode: 'genie'"),
        ({"link_adaptation": {"mode": "paper", "paper": {"target_loss": 0}}},
         "link_adaptation.paper.target_loss: 0"),
        ({"clamp": {"mu_c": "guessed"}}, "clamp.mu_c: 'guessed'"),
        ({"aqm": {"kind": "spmaf", "priority_dscp": 64}}, "aqm.priority_dscp: 64 not in [0,63]"),
        ({"aqm": {"kind": "spmaf", "priority_dscp": "cs1"}}, "aqm.priority_dscp: 'cs1'"),
    ]
    for over, expected in cases:
        cfg = dict(base)
        cfg.update(over)
        path = bed.write(cfg, "bad.yaml")
        for extra in ([], ["--check"]):
            r = bed.exec(str(APD), "--config", str(path), *extra, check=False)
            assert r.returncode == 2, (over, r.stderr)
            assert expected in r.stderr, (expected, r.stderr)
    assert not bed.has_link("oapdnew0")
    # A valid file checks clean and opens nothing.
    ok = bed.write(bed.config(tun="oapdnew0"), "ok.yaml")
    r = bed.exec(str(APD), "--config", str(ok), "--check", check=False)
    assert r.returncode == 0, r.stderr
    assert not (bed.dir / "zmq").exists()
    # Valid, but the TUN is not there: runtime failure (1); the apd never creates one.
    r = bed.exec(str(APD), "--config", str(ok), check=False)
    assert r.returncode == 1, r.stderr
    assert "tun.name: 'oapdnew0'" in r.stderr
    assert not bed.has_link("oapdnew0")


def test_garbage_truncated_and_oversized_messages_are_counted_and_survived(bed):
    cfg = bed.config()
    p = bed.start(cfg)
    ctx = zmq.Context()
    try:
        valid = {"phy_requests": mac.wire.encode("slot_request", 0, {"slot": 1}),
                 "uplink": mac.wire.encode("cqi_report", 0, {"user": 0, "slot": 1,
                                                             "snr_db": 3.0, "cqi": 4})}
        wrong_type = {"phy_requests": valid["uplink"], "uplink": valid["phy_requests"]}
        for name in ("phy_requests", "uplink"):
            s = ctx.socket(zmq.PUSH)
            s.setsockopt(zmq.LINGER, 1000)
            s.connect(bed.ep(name))
            bad_crc = bytearray(valid[name])
            bad_crc[-1] ^= 0xFF
            s.send(b"garbage")                       # malformed
            s.send(valid[name][: len(valid[name]) // 2])  # truncated: malformed
            s.send(bytes(bad_crc))                   # malformed (CRC)
            s.send(b"")                              # malformed (empty)
            s.send(wrong_type[name])                 # unexpected type
            s.send(b"\x00" * 9000)                   # > max_msg_bytes 8000: endpoint drops
            s.send_multipart([b"a", b"b"])           # multi-part: dropped
            s.close()
            # Far beyond ZMQ_MAXMSGSIZE: ZeroMQ itself drops it (and the sender's link).
            h = ctx.socket(zmq.PUSH)
            h.setsockopt(zmq.LINGER, 1000)
            h.connect(bed.ep(name))
            h.send(b"\x01" * 100_000)
            h.close()
        # A PUSH peer on the apd's PUSH endpoint: an incompatible pair, ZeroMQ refuses it.
        g = ctx.socket(zmq.PUSH)
        g.setsockopt(zmq.LINGER, 0)
        g.connect(bed.ep("phy_grants"))
        g.send(b"garbage", zmq.NOBLOCK) if g.poll(100, zmq.POLLOUT) else None
        g.close()

        s = stats_after_usr1(p, Path(cfg["traces"]["stats"]), lambda s: (
            s["malformed"]["phy_requests"] == 4 and s["malformed"]["uplink"] == 4
            and s["unexpected_type"]["phy_requests"] == 1
            and s["unexpected_type"]["uplink"] == 1
            and s["zmq"]["phy_requests"]["dropped_oversized"] == 1
            and s["zmq"]["uplink"]["dropped_oversized"] == 1))
        assert s["zmq"]["phy_requests"]["dropped_multipart"] == 1
        assert s["zmq"]["uplink"]["dropped_multipart"] == 1
        assert p.poll() is None
        # Still serving: a proper request gets its grant.
        phy = FakePhy(ctx, bed, first_seq=1)
        assert phy.request(5)["slot"] == 5
        phy.close()
    finally:
        ctx.destroy(linger=0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    assert "malformed message dropped" in p.stderr.read()


def test_downlink_packet_comes_back_in_a_grant_and_uplink_reaches_the_tun(bed):
    pd = pytest.importorskip("pandas")
    cfg = bed.config()
    p = bed.start(cfg)
    ctx = zmq.Context()
    try:
        phy = FakePhy(ctx, bed)
        client = FakeClient(ctx, bed)
        client.send("cqi_report", {"user": 0, "slot": 0, "snr_db": 5.0, "cqi": 10})
        # Empty slots until a packet arrives.
        assert phy.request(0)["empty"]

        marker = b"oppsched-apd-marker-4711"
        send_udp_in_ns(bed, UE0_ADDR, 9, marker)
        slot, g = grants_until(phy, client, 1, lambda g: carries(g, marker))
        assert g["user"] == 0
        pdu = mac.parse_pdu(g["tb"])
        assert pdu["user"] == 0
        assert pdu["price"] is not None or slot < 3  # CLAMP on: priced once mu_c is known
        seg = next(s for s in pdu["segments"] if marker in s["data"])
        ip = seg["data"]
        assert ip[0] >> 4 == 4 and ip[16:20] == bytes([10, 77, 0, 2])
        assert len(g["tb"]) <= 65535

        marker6 = b"oppsched-apd-v6-marker"
        send_udp_in_ns(bed, UE0_ADDR6, 9, marker6)
        slot, g6 = grants_until(phy, client, slot + 1, lambda g: carries(g, marker6))
        assert g6["user"] == 0

        # An unknown destination inside the TUN's prefix: counted, dropped.
        send_udp_in_ns(bed, "10.77.0.99", 9, b"nobody")

        # Uplink: an uplink_packet is written to the TUN, where the kernel delivers it.
        listener = subprocess.Popen(
            ["ip", "netns", "exec", bed.ns, "python3", "-c",
             "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
             f"s.bind(({AP_ADDR!r}, 5000)); s.settimeout(10); print(s.recv(100).decode())"],
            stdout=subprocess.PIPE, text=True)
        bed.procs.append(listener)
        # Bound before the packet is sent (its start-up takes what the machine's load makes it).
        deadline = time.monotonic() + 30
        while ":5000" not in subprocess.run(
                ["ip", "netns", "exec", bed.ns, "ss", "-Hlun", "sport", "=", ":5000"],
                capture_output=True, text=True).stdout:
            assert listener.poll() is None and time.monotonic() < deadline, "listener not bound"
            time.sleep(0.05)
        client.send("uplink_packet", {"user": 0, "packet": ipv4_udp(
            UE0_ADDR, AP_ADDR, 4000, 5000, b"uplink-hello")})
        out, _ = listener.communicate(timeout=15)
        assert out.strip() == "uplink-hello"

        s = stats_after_usr1(p, Path(cfg["traces"]["stats"]),
                             lambda s: s["core"]["downlink"]["unknown_destination"] >= 1)
        assert s["tun"]["tx_packets"] == 1
        assert s["core"]["slots"]["grants_new"] >= 2
        assert s["core"]["harq"]["acked"] >= 2
        assert s["core"]["uplink_control"]["cqi_reports"] == 1
        phy.close()
    finally:
        ctx.destroy(linger=0)

    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    stats = json.loads(Path(cfg["traces"]["stats"]).read_text())
    assert stats["core"]["downlink"]["enqueued"] >= 2
    slots = pd.read_csv(cfg["traces"]["slots"])
    assert list(slots.columns[:11]) == ["slot", "t_ns", "user", "mcs", "tb_bytes", "harq_pid",
                                        "rv", "ndi", "retx", "outcome", "late"]
    for u in ("ue0", "ue1"):
        assert {f"cqi.{u}", f"queue.{u}", f"price.{u}", f"aqm_price.{u}"} <= set(slots.columns)
        assert slots[f"aqm_price.{u}"].isna().all()  # RED keeps no link price
    assert len(slots) >= 3
    assert (slots.loc[slots.user >= 0, "outcome"] == "ack").all()
    assert (slots.loc[slots.user == -1, "mcs"] == -1).all()
    assert slots["cqi.ue0"].dropna().eq(5.0).all()
    packets = pd.read_csv(cfg["traces"]["packets"])
    assert list(packets.columns) == ["t_ns", "event", "user", "packet_id", "bytes", "reason"]
    assert {"enqueue", "dequeue", "drop"} <= set(packets.event)
    assert "unknown_destination" in set(packets.reason.dropna())


def test_dead_phy_restarting_at_seq_0_is_counted_and_grants_resume(bed):
    cfg = bed.config()
    p = bed.start(cfg)
    ctx = zmq.Context()
    try:
        phy = FakePhy(ctx, bed)
        client = FakeClient(ctx, bed)
        for slot in range(0, 5):
            phy.request(slot)
        phy.seq += 3  # three requests lost on the way: a gap
        send_udp_in_ns(bed, UE0_ADDR, 9, b"before-the-crash")
        slot, _ = grants_until(phy, client, 5, lambda g: carries(g, b"before-the-crash"))
        phy.close()  # the PHY dies ...
        time.sleep(0.3)
        assert p.poll() is None
        send_udp_in_ns(bed, UE0_ADDR, 9, b"after-the-crash")
        time.sleep(0.2)
        phy = FakePhy(ctx, bed, first_seq=0)  # ... and comes back from seq 0, slot 0
        _, g = grants_until(phy, client, 0, lambda g: carries(g, b"after-the-crash"))
        assert g["user"] == 0
        s = stats_after_usr1(p, Path(cfg["traces"]["stats"]),
                             lambda s: s["seq"]["phy_requests"]["restarts"] == 1)
        assert s["seq"]["phy_requests"]["lost"] == 3
        assert s["core"]["slots"]["phy_restarts"] == 1
        assert s["core"]["slots"]["out_of_order_requests"] == 0
        # Across the PHY restart every packet is still accounted for (packet_ledger.h).
        c = s["core"]["conservation"]
        assert c["offered"] >= 2 and c["unaccounted"] == 0
        assert c["in_flight"] + c["delivered"] + c["queued"] >= 2  # none of the two dropped
        phy.close()
    finally:
        ctx.destroy(linger=0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0


def test_a_phy_silent_for_watchdog_slots_makes_the_apd_exit_4_with_stats_saying_so(bed):
    cfg = bed.config(watchdog_slots=50, stats_period_s=0.5)  # 50 slots of 3 ms: 0.15 s
    p = bed.start(cfg)
    ctx = zmq.Context()
    try:
        phy = FakePhy(ctx, bed)
        time.sleep(0.5)  # silent before the first request: not armed yet
        assert p.poll() is None
        for slot in range(5):
            phy.request(slot)
        t = time.monotonic()
        assert p.wait(timeout=10) == 4
        assert time.monotonic() - t >= 0.15
        assert "watchdog: no slot_request for" in p.stderr.read()
        s = json.loads(Path(cfg["traces"]["stats"]).read_text())
        assert s["watchdog"]["fired"] == 1
        assert s["core"]["slots"]["requests"] == 5
        phy.close()
    finally:
        ctx.destroy(linger=0)


def test_the_apd_writes_its_stats_every_stats_period_without_being_asked(bed):
    cfg = bed.config(stats_period_s=0.3)
    p = bed.start(cfg)
    path = Path(cfg["traces"]["stats"])
    first = json.loads(path.read_text())["uptime_s"]
    deadline = time.monotonic() + 10
    while json.loads(path.read_text())["uptime_s"] < first + 0.5:
        assert time.monotonic() < deadline, "stats not rewritten"
        time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
