"""oppsched-client end to end: configuration errors, downlink delivery to the TUN, HARQ
feedback and CQI on the uplink (after the uplink delay), uplink packets from the TUN,
robustness to garbage on the rx endpoint, and CLAMP window rewriting of a real Linux TCP
receiver's ACKs (IPv4 and IPv6) with fail-open when the price stops.

The daemon runs in its own network namespace with a persistent TUN (`ip tuntap add mode
tun`) made by oppsched.testbed.netns.Session, which removes everything at the end whatever happens.
The test plays the PHY (a PUSH socket on the client's rx endpoint, rx_indications carrying
MAC PDUs built with oppsched.mac.serialize_pdu) and the AP (a PULL socket bound on the
uplink endpoint, frames decoded with oppsched.mac.wire.decode). The servers are forged with
scapy. ipc:// endpoints live in the file system, so they cross namespaces.

The binary: $OPPSCHED_CLIENT_BIN, else host/daemon/oppsched-client in $OPPSCHED_BUILD, else
in build/. Configuration tests need neither root nor namespaces.
"""

from __future__ import annotations

import csv
import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import zmq

from oppsched import mac
from oppsched.testbed import namespace, netns, nsbase
from oppsched.testbed.daemonconf import deep_merge
from helpers import built_program, needs_root, require, wait_for_files, write_yaml

MSS = 1460


@pytest.fixture(scope="module")
def client_bin() -> Path:
    b = built_program("host/daemon/oppsched-client", "OPPSCHED_CLIENT_BIN")
    require(b is not None,
            "oppsched-client is not built (cmake --build build --target oppsched-client)")
    return b


def base_config(workdir: Path, *, clamp: bool = False) -> dict:
    zdir = workdir / "zmq"
    return {
        "user": 0,
        "name": "ue0",
        "tun": "radio0",
        "endpoints": {"rx": f"ipc://{zdir}/rx_0", "uplink": f"ipc://{zdir}/uplink"},
        "uplink_delay_ms": 1.0,
        "cqi": {"period_slots": 1},
        "reassembly": {"window": 64, "timeout_ms": 50, "max_bytes": 1 << 20},
        "clamp": {"enabled": clamp, "tau_bytes": 500.0, "alpha_packets": 1000, "beta": 0.001,
                  "mss": 0, "price_timeout_ms": 100.0,
                  # eq. 15 from the second packet: the price cuts the window within the
                  # test's first packets (clamp.h, mu_min_span_s)
                  "mu_min_span_s": 0.0},
        "traces": {"windows": str(workdir / "windows.ue0.csv") if clamp else "",
                   "events": str(workdir / "client.ue0.events.csv"),
                   "stats": str(workdir / "client.ue0.stats.json")},
    }


# ----------------------------------------------------------------------------------------
# Configuration (no root needed: the daemon validates before it opens anything)


@pytest.mark.parametrize("override, drop, message", [
    ({"clamp": {"beta": 1.5}}, None, "clamp.beta: 1.5 not in (0,1)"),
    ({"uplink_delay_ms": -1}, None, "uplink_delay_ms: -1 not in [0,10000]"),
    ({"cqi": {"period_slots": 0}}, None, "cqi.period_slots: 0"),
    ({"reassembly": {"timeout_ms": "soon"}}, None, "reassembly.timeout_ms: 'soon'"),
    ({"clamp": {"mss": 10}}, None, "clamp.mss: 10"),
    ({"clamp": {"price_timeout_ms": float("nan")}}, None, "clamp.price_timeout_ms"),
    ({"user": 70000}, None, "user: 70000"),
    ({"bogus": 1}, None, "bogus: unknown key"),
    ({"clamp": {"tau": 500}}, None, "clamp.tau: unknown key"),
    ({"endpoints": {"uplink": "http://x"}}, None, "endpoints.uplink: 'http://x'"),
    ({"tun": "a-very-long-interface-name"}, None, "tun: 'a-very-long-interface-name'"),
    ({}, "name", "name: missing"),
])
def test_invalid_config_exits_2_naming_the_field(tmp_path, client_bin, override, drop, message):
    conf = deep_merge(base_config(tmp_path), override)
    if drop:
        del conf[drop]
    path = write_yaml(tmp_path / "client.yaml", conf)
    cp = subprocess.run([str(client_bin), "--config", str(path)], capture_output=True,
                        text=True, timeout=10)
    assert cp.returncode == 2, cp.stderr
    assert message in cp.stderr, cp.stderr
    assert not (tmp_path / "zmq").exists()  # nothing was created


def test_check_accepts_a_valid_config_and_bad_arguments_exit_2(tmp_path, client_bin):
    path = write_yaml(tmp_path / "client.yaml", base_config(tmp_path, clamp=True))
    cp = subprocess.run([str(client_bin), "--config", str(path), "--check"],
                        capture_output=True, text=True, timeout=10)
    assert cp.returncode == 0, cp.stderr
    cp = subprocess.run([str(client_bin), "--frobnicate"], capture_output=True, text=True,
                        timeout=10)
    assert cp.returncode == 2


# ----------------------------------------------------------------------------------------
# End to end (root: a network namespace with a persistent TUN)


CLIENT4, SERVER4 = "10.2.0.1", "10.1.0.1"
CLIENT6, SERVER6 = "fd00:2::1", "fd00:1::1"


class FakePhy:
    """Pushes rx_indications to the client's rx endpoint, one PDU per addressed slot."""

    def __init__(self, sock: zmq.Socket, user: int = 0):
        self.sock = sock
        self.user = user
        self.seq = 0
        self.slot = 0
        self.pdu_seq = 0
        self.packet_seq = 0

    def pdu(self, packets, price):
        segs = []
        for p in packets:
            segs.append({"packet_seq": self.packet_seq, "data": p})
            self.packet_seq = (self.packet_seq + 1) % 65536
        tb_bytes = mac.PDU_MIN_BYTES + sum(mac.PDU_SEGMENT_HEADER_BYTES + len(p) for p in packets)
        tb = mac.serialize_pdu(user=self.user, seq=self.pdu_seq, segments=segs,
                               tb_bytes=tb_bytes, price=price)
        self.pdu_seq += 1
        return tb

    def send(self, packets=(), *, price=None, addressed=True, crc_ok=True, snr_db=12.0, cqi=9,
             harq_pid=None) -> int:
        tb = self.pdu(list(packets), price) if (addressed and crc_ok) else b"\x00" * 64
        slot = self.slot
        fields = {"slot": slot, "user": self.user, "mcs": 3,
                  "harq_pid": slot % 8 if harq_pid is None else harq_pid, "ndi": 0, "rv": 0,
                  "header_ok": True, "addressed": addressed, "crc_ok": crc_ok,
                  "snr_db": snr_db, "cqi": cqi, "combined": 1, "tb": tb}
        self.sock.send(mac.wire.encode("rx_indication", self.seq, fields))
        self.seq += 1
        self.slot += 1
        return slot

    def send_tb(self, tb: bytes, *, harq_pid: int, ndi: int, crc_ok: bool = True) -> int:
        """One addressed slot carrying `tb` (a PDU from pdu()) on HARQ process `harq_pid`."""
        slot = self.slot
        fields = {"slot": slot, "user": self.user, "mcs": 3, "harq_pid": harq_pid, "ndi": ndi,
                  "rv": 0, "header_ok": True, "addressed": True, "crc_ok": crc_ok,
                  "snr_db": 12.0, "cqi": 9, "combined": 1, "tb": tb}
        self.sock.send(mac.wire.encode("rx_indication", self.seq, fields))
        self.seq += 1
        self.slot += 1
        return slot

    def send_raw(self, frame: bytes) -> None:
        self.sock.send(frame)


class Rig:
    """A client namespace with radio0 (10.2.0.1, fd00:2::1), the daemon, a fake PHY and AP."""

    def __init__(self, session: netns.Session, client_bin: Path, clamp: bool,
                 reassembly: dict | None = None):
        self.session = session
        self.workdir = Path(session.workdir)
        ns = session.add_netns("cl")
        self.ns = ns
        session.add_tun(ns, "radio0", mtu=1500)
        ns.ip("addr", "add", f"{CLIENT4}/32", "dev", "radio0")
        ns.ip("-6", "addr", "add", f"{CLIENT6}/128", "dev", "radio0", "nodad")
        ns.ip("route", "add", "10.1.0.0/16", "dev", "radio0")
        ns.ip("-6", "route", "add", "fd00:1::/32", "dev", "radio0")
        # Linux's defaults (rmem max 6 MB: window scale 7), whatever the host was tuned to.
        ns.sysctl({"net.ipv4.tcp_rmem": "4096 131072 6291456"})
        self.conf = base_config(self.workdir, clamp=clamp)
        if reassembly is not None:
            self.conf["reassembly"] = dict(reassembly)
        (self.workdir / "zmq").mkdir(exist_ok=True)
        self.ctx = zmq.Context()
        self.ap = self.ctx.socket(zmq.PULL)
        self.ap.setsockopt(zmq.LINGER, 0)
        self.ap.bind(self.conf["endpoints"]["uplink"])
        path = write_yaml(self.workdir / "client.yaml", self.conf)
        self.proc = session.spawn(ns, [str(client_bin), "--config", str(path)], name="client")
        wait_for_files([self.conf["endpoints"]["rx"][len("ipc://"):]], 10,
                       "oppsched-client: rx endpoint bound", self.proc.check_alive)
        push = self.ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(self.conf["endpoints"]["rx"])
        self.phy = FakePhy(push)
        self.log: list[tuple[float, int, str, dict]] = []  # (t_recv, seq, type, fields)

    def close(self):
        self.ctx.destroy(linger=0)

    def pump(self, duration: float) -> None:
        """Receives uplink frames for `duration` seconds."""
        end = time.monotonic() + duration
        while (left := end - time.monotonic()) > 0:
            if self.ap.poll(max(1, int(left * 1000))):
                frame = self.ap.recv()
                seq, typ, fields = mac.wire.decode(frame)
                self.log.append((time.monotonic(), seq, typ, fields))

    def wait_uplink(self, pred, timeout: float = 5.0, what: str = "uplink message"):
        """The first logged/received uplink message satisfying pred(type, fields)."""
        end = time.monotonic() + timeout
        i = 0
        while True:
            while i < len(self.log):
                t, seq, typ, f = self.log[i]
                i += 1
                if pred(typ, f):
                    return t, typ, f
            left = end - time.monotonic()
            if left <= 0:
                self.proc.check_alive()
                raise AssertionError(f"no {what} within {timeout} s; got "
                                     f"{[(x[2], x[1]) for x in self.log][-20:]}")
            if self.ap.poll(max(1, int(left * 1000))):
                frame = self.ap.recv()
                seq, typ, fields = mac.wire.decode(frame)
                self.log.append((time.monotonic(), seq, typ, fields))

    def stop(self) -> dict:
        rc = self.proc.stop(timeout=5.0)
        assert rc == 0, f"exit {rc}: {self.proc.log_tail()}"
        return json.loads(Path(self.conf["traces"]["stats"]).read_text())


@pytest.fixture
def rig_factory(client_bin):
    if not nsbase.is_root():
        pytest.skip("network namespaces need root (CAP_NET_ADMIN)")
    made = []

    def make(clamp: bool = False, reassembly: dict | None = None) -> Rig:
        session = netns.Session(prefix="oppcltest")
        session.start()
        made.append(session)
        r = Rig(session, client_bin, clamp, reassembly)
        session.on_teardown(r.close)
        return r

    yield make
    for s in made:
        errors = s.teardown()
        assert not errors, errors


def _udp_socket(ns: namespace.Netns, family: int, addr: str, port: int) -> socket.socket:
    s = ns.socket(family, socket.SOCK_DGRAM)
    s.bind((addr, port))
    s.settimeout(5.0)
    return s


@needs_root
def test_downlink_packets_reach_the_tun_and_feedback_and_cqi_go_uplink(rig_factory):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6

    r = rig_factory()
    s4 = _udp_socket(r.ns, socket.AF_INET, CLIENT4, 6000)
    s6 = _udp_socket(r.ns, socket.AF_INET6, CLIENT6, 6000)
    p4 = bytes(IP(src=SERVER4, dst=CLIENT4) / UDP(sport=5000, dport=6000) / b"hello over the air")
    p6 = bytes(IPv6(src=SERVER6, dst=CLIENT6) / UDP(sport=5000, dport=6000) / (b"v6" * 300))

    t_sent = time.monotonic()
    slot0 = r.phy.send([p4, p6], price=0.0, snr_db=17.5, cqi=11, harq_pid=3)
    assert s4.recvfrom(2048) == (b"hello over the air", (SERVER4, 5000))
    data6, src6 = s6.recvfrom(2048)
    assert data6 == b"v6" * 300 and src6[0] == SERVER6

    t_fb, _, fb = r.wait_uplink(lambda t, f: t == "harq_feedback" and f["slot"] == slot0,
                                what="HARQ feedback")
    assert fb == {"user": 0, "slot": slot0, "harq_pid": 3, "ack": True}
    # The uplink delay line never releases early (uplink_delay_ms: 1).
    assert t_fb - t_sent >= 1e-3
    _, _, cq = r.wait_uplink(lambda t, f: t == "cqi_report" and f["slot"] == slot0, what="CQI")
    assert cq["cqi"] == 11 and abs(cq["snr_db"] - 17.5) < 1e-6

    slot1 = r.phy.send(crc_ok=False)  # a TB that failed its CRC: NACK
    _, _, nack = r.wait_uplink(lambda t, f: t == "harq_feedback" and f["slot"] == slot1,
                               what="NACK")
    assert nack["ack"] is False
    slot2 = r.phy.send(addressed=False, cqi=2)  # another user's slot: CQI only
    r.wait_uplink(lambda t, f: t == "cqi_report" and f["slot"] == slot2, what="CQI of slot 2")
    r.pump(0.05)
    assert not [f for _, _, t, f in r.log if t == "harq_feedback" and f["slot"] == slot2]

    # Uplink: a datagram from the client namespace toward a server leaves through the TUN.
    with r.ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
        out.sendto(b"uplink datagram", (SERVER4, 9999))
    _, _, up = r.wait_uplink(lambda t, f: t == "uplink_packet" and f["packet"].endswith(
        b"uplink datagram"), what="uplink packet")
    pkt = IP(up["packet"])
    assert pkt.src == CLIENT4 and pkt.dst == SERVER4 and pkt[UDP].dport == 9999

    # Uplink sequence numbers are consecutive (one PUSH socket). Frames sent before the
    # ipc connection is up (the kernel's first IPv6 packets when the TUN gets its reader)
    # are dropped by ZMQ_IMMEDIATE and counted, never queued: the AP sees them as a gap.
    seqs = [s for _, s, _, _ in r.log]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    stats = r.stop()
    assert stats["uplink"]["zmq"]["dropped_no_peer"] == seqs[0]
    assert stats["harq"] == {"acks": 1, "nacks": 1}
    assert stats["reassembly"]["delivered"] == 2
    assert stats["cqi"]["reports"] == 3
    assert stats["malformed"]["rx"] == 0
    s4.close()
    s6.close()


@needs_root
def test_a_tb_retransmitted_long_after_the_harq_timeout_reaches_the_tun_by_default(rig_factory):
    """scheduler.harq_first false (Srinivasan & Baras): a NACKed TB's retransmission waits
    for the scheduler. The client gets the experiment's default reassembly settings
    (daemonconf.reassembly); the retransmission decodes 250 ms after the timeout HARQ's
    round trips give: both packets reach the TUN, in order, nothing counted lost. (With
    held_timeout_ms 0, as before, the second packet went at the timeout and the first was
    lost although HARQ acknowledged it.)"""
    from scapy.layers.inet import IP, UDP

    from oppsched.testbed import daemonconf
    from helpers import BASE, cfg_of

    cfg = cfg_of(BASE, ["scheduler.harq_first=false", "harq.max_transmissions=4"])
    ra = daemonconf.reassembly(cfg)
    assert ra["held_timeout_ms"] == daemonconf.HELD_TIMEOUT_MS > ra["timeout_ms"] + 1000
    assert ra["harq_max_transmissions"] == 4
    r = rig_factory(reassembly=ra)
    s4 = _udp_socket(r.ns, socket.AF_INET, CLIENT4, 6000)
    pk = [bytes(IP(src=SERVER4, dst=CLIENT4) / UDP(sport=5000, dport=6000) / f"p{i}".encode())
          for i in range(2)]
    tb0, tb1 = r.phy.pdu([pk[0]], None), r.phy.pdu([pk[1]], None)
    r.phy.send_tb(tb0, harq_pid=0, ndi=1, crc_ok=False)  # NACK: HARQ will send it again
    r.phy.send_tb(tb1, harq_pid=1, ndi=1)
    time.sleep(ra["timeout_ms"] / 1e3 + 0.25)
    r.phy.send_tb(tb0, harq_pid=0, ndi=1)  # the retransmission decodes
    assert [s4.recvfrom(2048)[0] for _ in range(2)] == [b"p0", b"p1"]
    stats = r.stop()
    ra_st = stats["reassembly"]
    assert ra_st["delivered"] == 2
    assert ra_st["tbs_given_up"] == ra_st["tbs_late"] == ra_st["dropped_timeout"] == 0
    s4.close()


@needs_root
def test_garbage_and_oversized_frames_are_counted_and_the_client_stays_alive(rig_factory):
    r = rig_factory()
    good = mac.wire.encode("cqi_report", 0, {"user": 0, "slot": 1, "snr_db": 1.0, "cqi": 1})
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    for frame in (b"garbage", b"", bytes(100_000), bytes(bad_crc), b"OPPS" + bytes(40)):
        r.phy.send_raw(frame)
    r.phy.send_raw(good)  # a valid frame of the wrong type for this endpoint
    r.phy.seq = 1
    slot = r.phy.send([b"\x45" + bytes(27)], price=None)  # not a valid IP packet: TUN may refuse
    r.wait_uplink(lambda t, f: t == "harq_feedback" and f["slot"] == slot, what="feedback")
    # SIGUSR1: stats now, while running.
    stats_path = Path(r.conf["traces"]["stats"])
    r.proc.send_signal(signal.SIGUSR1)
    wait_for_files([stats_path], 5, "stats on SIGUSR1")
    live = json.loads(stats_path.read_text())
    assert live["malformed"]["rx"] == 5
    assert live["rx"]["oversized"] == 1
    assert live["rx"]["wrong_type"] == 1
    r.proc.check_alive()
    stats = r.stop()
    assert stats["malformed"]["rx"] == 5
    assert stats["harq"]["acks"] == 1


def _tcp_checksum_ok(raw: bytes) -> bool:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6

    pkt = IP(raw) if raw[0] >> 4 == 4 else IPv6(raw)
    got = pkt[TCP].chksum
    del pkt[TCP].chksum
    again = (IP if raw[0] >> 4 == 4 else IPv6)(bytes(pkt))
    return again[TCP].chksum == got


@needs_root
@pytest.mark.parametrize("ipv", [4, 6])
def test_clamp_rewrites_a_linux_receivers_acks_and_fails_open_without_price(rig_factory, ipv):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6
    from scapy.packet import Raw

    r = rig_factory(clamp=True)
    fam = socket.AF_INET if ipv == 4 else socket.AF_INET6
    cli, srv = (CLIENT4, SERVER4) if ipv == 4 else (CLIENT6, SERVER6)
    lst = r.ns.socket(fam, socket.SOCK_STREAM)
    lst.bind((cli, 7000))
    lst.listen(4)
    L3 = (lambda: IP(src=srv, dst=cli)) if ipv == 4 else (lambda: IPv6(src=srv, dst=cli))
    parse = IP if ipv == 4 else IPv6

    def tcp_of_flow(t, f):
        if t != "uplink_packet":
            return False
        p = parse(f["packet"])
        return TCP in p and p[TCP].sport == 7000 and p[TCP].dport == 5201

    # Handshake, opened by the (forged) server: SYN down, the kernel's SYN-ACK up.
    isn = 100000
    r.phy.send([bytes(L3() / TCP(sport=5201, dport=7000, flags="S", seq=isn, window=65535,
                                 options=[("MSS", MSS), ("WScale", 7)]))], price=0.0)
    _, _, sa = r.wait_uplink(tcp_of_flow, what="SYN-ACK")
    synack = parse(sa["packet"])[TCP]
    assert synack.flags == "SA"
    ws = dict((k, v) for k, v in synack.options if isinstance(k, str)).get("WScale")
    assert ws is not None
    cl_isn = synack.seq
    r.phy.send([bytes(L3() / TCP(sport=5201, dport=7000, flags="A", seq=isn + 1,
                                 ack=cl_isn + 1, window=1024))], price=0.0)

    # Phase 1: data with a price: 0 first (receiver slow start, w = MSS + k MSS), then high
    # enough that tau - p mu_hat < 0 (eq. 14): slow start ends, w halves, then falls by up
    # to s_k per packet (§IV-B/C). 1400-byte segments, so that each ACK advances by more
    # than the 2^shift granularity and the held right edge lets the window shrink.
    seq = isn + 1
    seg = 1400
    prices = [0.0] * 6 + [0.01] * 30
    for price in prices:
        r.phy.send([bytes(L3() / TCP(sport=5201, dport=7000, flags="PA", seq=seq,
                                     ack=cl_isn + 1, window=1024) / Raw(b"d" * seg))],
                   price=price)
        seq += seg
        time.sleep(0.003)
    r.pump(0.1)
    # Phase 2: the AP stops stamping prices (price_timeout_ms: 100).
    t_end = time.monotonic() + 0.3
    while time.monotonic() < t_end:
        r.phy.send([bytes(L3() / TCP(sport=5201, dport=7000, flags="PA", seq=seq,
                                     ack=cl_isn + 1, window=1024) / Raw(b"e" * seg))],
                   price=None)
        seq += seg
        time.sleep(0.02)
    r.pump(0.2)
    stats = r.stop()
    lst.close()

    acks = []
    for _, _, t, f in r.log:
        if tcp_of_flow(t, f):
            p = parse(f["packet"])[TCP]
            if "S" not in p.flags:
                acks.append((f["packet"], p))
    assert len(acks) >= 10, "the kernel should have ACKed the data"
    assert all(_tcp_checksum_ok(raw) for raw, _ in acks)

    with open(r.conf["traces"]["windows"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    flow = (f"{srv}:5201>{cli}:7000" if ipv == 4 else f"[{srv}]:5201>[{cli}]:7000")
    assert rows and all(row["flow"] == flow for row in rows)
    # The first len(rows) ACKs were rewritten (in order), the rest passed unchanged.
    n = len(rows)
    assert 0 < n < len(acks)
    assert stats["clamp"]["acks_rewritten"] == n
    assert stats["clamp"]["acks_fail_open"] == len(acks) - n
    reduced = 0
    for (_, p), row in zip(acks, rows):
        adv, os_w = int(row["advertised_bytes"]), int(row["awnd_os_bytes"])
        w = float(row["w_bytes"])
        assert p.window << ws == adv
        assert adv >= min(w, os_w)  # rounded up to the scale, or right edge held
        assert adv <= os_w          # never more than the OS offered
        reduced += adv < os_w
    assert reduced > 0, f"CLAMP should have advertised less than the kernel: {rows}"
    # Right edge (ACK + window) never moved left over the rewritten ACKs.
    edges = [(p.ack - isn - 1) + (p.window << ws) for _, p in acks[:n]]
    assert all(b >= a for a, b in zip(edges, edges[1:])), edges
    # Receiver slow start while the price was 0: w grew by one MSS per data packet (MSS
    # learnt from the handshake); the price then ended it and w fell.
    mss = MSS if ipv == 4 else MSS - 20
    ss = [float(row["w_bytes"]) for row in rows if float(row["price_s"]) == 0.0]
    assert ss and all(abs(w / mss - round(w / mss)) < 1e-9 for w in ss)
    priced = [float(row["w_bytes"]) for row in rows if float(row["price_s"]) > 0.0]
    assert priced and min(priced) < max(ss)
    assert {round(float(row["price_s"]), 6) for row in rows} <= {0.0, 0.01}

    with open(r.conf["traces"]["events"], newline="") as fh:
        events = list(csv.DictReader(fh))
    assert [e["event"] for e in events] == ["fail_open"]
    assert stats["clamp"]["fail_open_events"] == 1
    assert stats["clamp"]["clamping"] is False
