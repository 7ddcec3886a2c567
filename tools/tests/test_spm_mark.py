"""SPM-AF's sender-side marker (host/spm_mark; Wu, Gong & Williamson, §6.1: packets sent
while the congestion window is below 4 segments are high priority) on real Linux TCP.

Three namespaces, sender S -- router M -- receiver R: S's egress carries the marker, M
forwards through a 4 Mb/s tbf (a queue to fill) and can drop everything towards R for a
while (a blackhole route: silent, no ICMP), R captures. The sender (a Python socket in S)
samples its own snd_cwnd from TCP_INFO (what `ss -ti` shows) every 0.3 ms, independently of
the BPF program; each packet R captured is then checked against the cwnd of the time it
could have been sent. The command-line tests need no root.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oppsched import paths
from oppsched.testbed.netns import Session
from oppsched.testbed.links import attach_spm_marker, find_spm_mark_binary
from helpers import needs_root, require

DSCP = 3
CWND_BELOW = 4
RATE = "4mbit"
LIMIT_BYTES = 30000
# The longest a packet can spend between S's egress and R: M's tbf queue (30 kB at 4 Mb/s:
# 60 ms) plus serialisation and scheduling, generously.
MAX_TRANSIT_S = 0.090


@pytest.fixture
def spm_mark_binary():
    b = find_spm_mark_binary()
    require(b is not None, "oppsched-spm-mark is not built (cmake --build build --target "
            "oppsched-spm-mark)")
    return b


# ----------------------------------------------------------------------------------------
# The loader's command line (no root needed)


@pytest.mark.parametrize("args, message", [
    (["--dev", "eth0", "--dscp", "64"], "--dscp: '64' is not an integer in [0, 63]"),
    (["--dev", "eth0", "--cwnd-below", "-1"], "--cwnd-below: '-1' is not an integer"),
    (["--dscp", "3"], "--dev: '' is not an interface name"),
    (["--dev", "eth0", "--bogus"], "unknown argument '--bogus'"),
])
def test_loader_rejects_bad_arguments_naming_them(spm_mark_binary, args, message):
    cp = subprocess.run([str(spm_mark_binary), *args], capture_output=True, text=True,
                        timeout=10)
    assert cp.returncode == 2
    assert message in cp.stderr


def test_loader_check_accepts_good_arguments(spm_mark_binary):
    cp = subprocess.run([str(spm_mark_binary), "--dev", "eth0", "--dscp", "63",
                         "--cwnd-below", "4", "--check"], capture_output=True, text=True,
                        timeout=10)
    assert cp.returncode == 0, cp.stderr


# ----------------------------------------------------------------------------------------
# On real TCP in namespaces

SENDER = r"""
import json, socket, struct, sys, threading, time
host, port, nbytes, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
s.connect((host, port))

def cwnd():  # struct tcp_info: 8 bytes of u8 fields, then u32s; tcpi_snd_cwnd is the 19th
    return struct.unpack_from("I", s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104), 80)[0]

samples = [(time.time(), cwnd())]  # after the handshake, before any data
stop = False
def sample():
    while not stop:
        samples.append((time.time(), cwnd()))
        time.sleep(0.0003)
th = threading.Thread(target=sample)
th.start()
t_start = time.time()
s.sendall(b"\0" * nbytes)
s.shutdown(socket.SHUT_WR)
s.recv(1)  # the receiver closes once it has every byte
stop = True
th.join()
json.dump({"samples": samples, "t_start": t_start}, open(out, "w"))
"""

RECEIVER = r"""
import socket, sys
host, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
ls = socket.socket(fam, socket.SOCK_STREAM)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(1)
c, _ = ls.accept()
n = 0
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    n += len(b)
open(out, "w").write(str(n))
c.close()
"""


def _three_namespaces(session: Session, v6: bool):
    s, m, r = (session.add_netns(x) for x in ("s", "m", "r"))
    for ns in (s, m, r):  # before the interfaces exist: no tentative addresses, no DAD
        ns.sysctl({"net.ipv6.conf.all.accept_dad": 0, "net.ipv6.conf.default.accept_dad": 0})
    session.add_veth(s, "eth0", m, "tos")
    session.add_veth(m, "tor", r, "eth0")
    for ns in (s, r):
        ns.sysctl({"net.ipv4.tcp_ecn": 1, "net.ipv4.tcp_no_metrics_save": 1})
        ns.set_offloads("eth0", False)  # one segment per packet: per-packet cwnd checks
    m.sysctl({"net.ipv4.ip_forward": 1, "net.ipv6.conf.all.forwarding": 1})
    if v6:
        sa, ra, net_s, net_r, plen = "fd00:98:1::1", "fd00:98:2::1", "fd00:98:1::", \
            "fd00:98:2::", 64
        ms, mr = "fd00:98:1::fe", "fd00:98:2::fe"
        fam = ["-6"]
        nodad = ["nodad"]
    else:
        sa, ra, net_s, net_r, plen = "10.98.1.1", "10.98.2.1", "10.98.1.0", "10.98.2.0", 24
        ms, mr = "10.98.1.254", "10.98.2.254"
        fam, nodad = [], []
    s.ip(*fam, "addr", "add", f"{sa}/{plen}", "dev", "eth0", *nodad)
    m.ip(*fam, "addr", "add", f"{ms}/{plen}", "dev", "tos", *nodad)
    m.ip(*fam, "addr", "add", f"{mr}/{plen}", "dev", "tor", *nodad)
    r.ip(*fam, "addr", "add", f"{ra}/{plen}", "dev", "eth0", *nodad)
    # initcwnd 2: the connection starts below the paper's threshold of 4 segments.
    s.ip(*fam, "route", "add", f"{net_r}/{plen}", "via", ms, "initcwnd", "2")
    r.ip(*fam, "route", "add", f"{net_s}/{plen}", "via", mr)
    m.tc("qdisc", "add", "dev", "tor", "root", "tbf", "rate", RATE, "burst", "3000",
         "limit", str(LIMIT_BYTES))
    return s, m, r, ra, plen


def _data_packets(pcap: Path, v6: bool, src_port: int | None = None):
    """(time, relative seq, payload bytes, dscp, ecn, ip checksum ok) of every TCP data
    packet from S, in capture order."""
    from scapy.all import IP, IPv6, TCP, rdpcap  # noqa: PLC0415 -- slow import
    out = []
    isn = None
    for p in rdpcap(str(pcap)):
        ip = p.getlayer(IPv6 if v6 else IP)
        if ip is None or not p.haslayer(TCP):
            continue
        t = p[TCP]
        if t.flags & 0x02:  # SYN: the sequence origin
            if ip.src.startswith("10.98.1.") or ip.src.startswith("fd00:98:1:"):
                isn = t.seq
            continue
        # From the headers: the capture keeps only the first 128 bytes.
        payload = (ip.plen if v6 else ip.len - ip.ihl * 4) - t.dataofs * 4
        if payload == 0 or not (ip.src.startswith("10.98.1.") or ip.src.startswith("fd00:98:1:")):
            continue
        tos = ip.tc if v6 else ip.tos
        ok = True
        if not v6:
            raw = bytes(ip)[: ip.ihl * 4]
            words = sum(int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2))
            while words >> 16:
                words = (words & 0xFFFF) + (words >> 16)
            ok = words == 0xFFFF
        out.append((float(p.time), (t.seq - isn) % (1 << 32), payload, tos >> 2, tos & 3, ok))
    return out


def _cwnd_during(samples, t0: float, t1: float) -> list[int]:
    """The cwnd values that may have been in force at some moment of [t0, t1]: the last
    sample before t0, every sample inside, and the first sample after t1. The sampler reads
    every 0.3 ms, but cwnd can change several times in between (slow start over a veth
    takes microseconds per round trip, and TCP small queues may send a packet later than
    the ACK that allowed it): what lies between two samples is known only to be bracketed
    by them. Empty (not judged) where [t0, t1] is not bracketed by samples."""
    before = [c for (t, c) in samples if t < t0]
    inside = [c for (t, c) in samples if t0 <= t <= t1]
    after = [c for (t, c) in samples if t > t1]
    if not before or not after:
        return []
    return [before[-1], *inside, after[0]]


@needs_root
@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_marker_marks_exactly_the_packets_sent_while_cwnd_is_below_4(spm_mark_binary,
                                                                     tmp_path, family):
    v6 = family == "ipv6"
    nbytes = 1_500_000
    with Session("otspm", workdir=tmp_path / "netns") as session:
        s, m, r, ra, plen = _three_namespaces(session, v6)
        # Neighbour caches filled first: the connection's first packets must not wait for
        # ARP/ND (a lost handshake packet would start TCP at cwnd 1, RFC 6298).
        assert all(x is not None for x in s.ping(ra, count=3, interval=0.05, timeout=2.0))
        line = attach_spm_marker(s, "eth0", spm_mark_binary, cwnd_below=CWND_BELOW, dscp=DSCP)
        assert "DSCP 3" in line and "snd_cwnd < 4" in line
        cap = r.spawn(["tcpdump", "-i", "eth0", "-n", "-s", "128", "-U", "--immediate-mode",
                       "-Z", "root", "-w", tmp_path / "r.pcap", "tcp"], name="tcpdump")
        deadline = time.monotonic() + 10
        while "listening on" not in cap.log_path.read_text(errors="replace"):
            cap.check_alive()
            assert time.monotonic() < deadline, "tcpdump did not start"
            time.sleep(0.02)
        (tmp_path / "snd.py").write_text(SENDER)
        (tmp_path / "rcv.py").write_text(RECEIVER)
        rcv = r.spawn([sys.executable, tmp_path / "rcv.py", ra, 5599, tmp_path / "rcv.out"],
                      name="receiver")
        r.wait_listening(5599, timeout=10, proc=rcv)
        snd = s.spawn([sys.executable, tmp_path / "snd.py", ra, 5599, nbytes,
                       tmp_path / "snd.json"], name="sender")
        # Once past slow start, a blackout towards R of 0.6 s: RTOs, cwnd back to 1.
        time.sleep(1.0)
        m.ip(*(["-6"] if v6 else []), "route", "add", "blackhole", f"{ra}/{128 if v6 else 32}")
        t_blackout = time.time()
        time.sleep(0.6)
        m.ip(*(["-6"] if v6 else []), "route", "del", "blackhole", f"{ra}/{128 if v6 else 32}")
        t_restored = time.time()
        assert snd.wait(timeout=60) == 0, snd.log_tail()
        assert rcv.wait(timeout=10) == 0, rcv.log_tail()
        time.sleep(0.2)
        cap.stop()
    # Every byte arrived through M: the IPv4 header checksums of marked packets were right
    # (a router drops a packet with a bad one).
    assert int((tmp_path / "rcv.out").read_text()) == nbytes
    snd_out = json.loads((tmp_path / "snd.json").read_text())
    samples = [tuple(x) for x in snd_out["samples"]]
    pkts = _data_packets(tmp_path / "r.pcap", v6)
    assert len(pkts) > 900
    assert all(p[5] for p in pkts), "an IPv4 header checksum is wrong"
    # Only the code point changes. ECN is negotiated: new data is ECT(0), retransmissions
    # not-ECT (RFC 3168, §6.1.5), marked or not.
    assert {p[4] for p in pkts} == {0, 2}
    assert {p[3] for p in pkts} == {0, DSCP}

    # 1. Slow start from initcwnd 2: the first data packet left with cwnd 2 and is marked,
    # its ECT(0) kept.
    assert samples[0][1] == 2, f"initcwnd 2 not in force: first cwnd sample {samples[0]}"
    first = min(pkts, key=lambda p: p[0])
    assert first[1] == 1 and first[3] == DSCP and first[4] == 2, \
        f"first data packet {first} not marked DSCP {DSCP} with ECT(0)"

    # 2. The loss: cwnd went back below 4 (RTO), and the first packet R got after the
    # blackout (the retransmission of the oldest unacknowledged segment) is marked.
    after = [c for (t, c) in samples if t > t_blackout]
    assert min(after) == 1, f"no RTO: cwnd after the blackout {sorted(set(after))[:5]}"
    got_until = max(p[1] + p[2] for p in pkts if p[0] < t_restored)
    retx = [p for p in pkts if p[0] > t_restored]
    assert retx and retx[0][1] == got_until, \
        f"the first packet after the blackout {retx[:1]} is not the oldest missing segment"
    assert retx[0][4] == 0, f"{retx[0]} is ECT: not a retransmission"
    assert retx[0][3] == DSCP, f"retransmission {retx[0]} not marked"

    # 3. Every packet against the cwnd of the moments it can have been sent in (from
    # MAX_TRANSIT_S before its arrival at R to its arrival, bracketed by samples): all >= 4,
    # it must be unmarked; all < 4, marked. Packets whose window straddles 4 are not judged
    # (in slow start that is most of them: 1. and 2. above pin the marked ones).
    judged = {"marked": 0, "unmarked": 0}
    wrong = []
    for p in pkts:
        cw = _cwnd_during(samples, p[0] - MAX_TRANSIT_S, p[0])
        if not cw:
            continue
        if min(cw) >= CWND_BELOW:
            judged["unmarked"] += 1
            if p[3] != 0:
                wrong.append((p, "marked with cwnd", sorted(set(cw))))
        elif max(cw) < CWND_BELOW:
            judged["marked"] += 1
            if p[3] != DSCP:
                wrong.append((p, "unmarked with cwnd", sorted(set(cw))))
    assert not wrong, f"{len(wrong)} packets break the rule, e.g. {wrong[:3]}"
    assert judged["unmarked"] > 500, judged
    # Steady state: nothing is marked in the last second of the transfer.
    t_end = max(p[0] for p in pkts)
    assert all(p[3] == 0 for p in pkts if p[0] > t_end - 1.0)


@needs_root
def test_iproute2_tc_loads_the_object_with_its_defaults(tmp_path):
    """Debian 12's iproute2 (tc with libbpf) loads the compiled object directly, section
    `tc`, direct action: the program then runs with the defaults (cwnd < 4, DSCP 3)."""
    obj = paths.build_dir() / "host" / "spm_mark" / "spm_mark.bpf.o"
    require(obj.is_file(), f"{obj} is not built")
    with Session("otspm", workdir=tmp_path / "netns") as session:
        a, b = session.add_netns("a"), session.add_netns("b")
        session.add_veth(a, "eth0", b, "eth0")
        a.tc("qdisc", "add", "dev", "eth0", "clsact")
        a.tc("filter", "add", "dev", "eth0", "egress", "bpf", "direct-action", "obj", obj,
             "sec", "tc")
        shown = a.tc("filter", "show", "dev", "eth0", "egress")
        assert "direct-action" in shown and "spm_mark" in shown


@needs_root
def test_attaching_again_replaces_the_marker_and_detach_removes_it(spm_mark_binary, tmp_path):
    with Session("otspm", workdir=tmp_path / "netns") as session:
        a, b = session.add_netns("a"), session.add_netns("b")
        session.add_veth(a, "eth0", b, "eth0")
        attach_spm_marker(a, "eth0", spm_mark_binary, cwnd_below=2, dscp=7)
        line = attach_spm_marker(a, "eth0", spm_mark_binary)
        assert "snd_cwnd < 4 with DSCP 3" in line
        assert a.tc("filter", "show", "dev", "eth0", "egress").count("handle 0x5350") == 1
        cp = a.run([str(spm_mark_binary), "--dev", "eth0", "--detach"])
        assert "detached" in cp.stdout and cp.stderr == ""
        assert "spm_mark" not in a.tc("filter", "show", "dev", "eth0", "egress")
        cp = a.run([str(spm_mark_binary), "--dev", "nope"], check=False)
        assert cp.returncode == 1 and "nope: no such interface" in cp.stderr
