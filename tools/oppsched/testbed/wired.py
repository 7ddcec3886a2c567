"""Wired paths between namespaces (plain veth, netem, or the user-space oppsched-delay) and
the testbed topology built of them.

A wired link joins (a_ns, a_dev) and (b_ns, b_dev) with a one-way delay per direction
(ab = a -> b, ba = b -> a), optionally behind a rate limit with a byte-limited FIFO.

* No delay and no rate: a plain veth pair.
* netem (where the kernel has it): a veth pair with, on each end's egress, netem for the
  delay and, for a rate limit, a tbf child (rate, byte limit) under it.
* userspace (kernels without netem, like this project's CI machines): two veth pairs
  through the run's "wire" namespace, a_dev <-> {name}a and {name}b <-> b_dev, and an
  oppsched-delay process forwarding frames between {name}a and {name}b (AF_PACKET). Seen
  from the endpoints both look the same: one Ethernet interface, the same addresses.

The choice is automatic (``choose_backend("auto")``: netem if ``tc qdisc add ... netem``
succeeds in a scratch namespace) and is recorded (WiredChoice.describe()).

Semantics of the limit: bytes waiting for (or in) serialisation at the rate limiter, as in
a router buffer; frames in propagation do not count (oppsched/delay_line.h). tbf's limit
is the same quantity, so both backends agree.

The testbed topology (docs/architecture.md, "The parts") is built of such paths between the
namespaces of an oppsched.testbed.netns Session: :class:`Topology` describes N servers, each behind
its own wired path of one-way delay d_i/2 per direction to the AP (Andrew & Hanly, CLAMP,
Table I: S_i--X, 100 Mb/s, d_i/2), one AP namespace and M client namespaces;
:class:`Testbed` builds it and records the backend chosen in :meth:`Testbed.describe`.

Addressing (IPv4 and IPv6, only ever inside the run's own namespaces):

    server i   10.1.i.1/24      fd00:1:i::1/64     (i in hex in IPv6)   AP side .254 / ::fe
    client j   10.2.j.1/24      fd00:2:j::1/64                          AP side .254 / ::fe
    client_links="tun": clients are 10.2.j.1/32, fd00:2:j::1/128 on their TUN "radio0";
    the AP's TUN "radio0" is 10.2.255.254/32, fd00:2:ffff::fe/128 with routes to 10.2/16 and
    fd00:2::/32; the AP daemon and client agents attach to these persistent TUNs by name.

Everything here needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN). Example::

    topo = Topology(servers=(ServerSpec("S1", rtt_ms=30),), clients=(ClientSpec("R1"),))
    with Testbed(topo) as tb:
        srv = tb.clients[0].ns.spawn_iperf3_server(5201)
        out = tb.servers[0].ns.run(["iperf3", "-c", tb.clients[0].addr4, "-J", "-t", "2"])
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from oppsched.testbed.netns import (IP, DEFAULT_PREFIX, NetnsError, Netns, Proc, RunUser, Session,
                            allow_congestion_control, new_run_id,
                            run_cmd, wait_for)
from oppsched.paths import default_build_dir

DELAY_BINARY_ENV = "OPPSCHED_DELAY_BIN"
SPM_MARK_BINARY_ENV = "OPPSCHED_SPM_MARK_BIN"
NETEM_PACKET_LIMIT = 100_000  # netem's own queue (packets): holds the whole delay-bandwidth
WIRED_BACKENDS = ("auto", "netem", "userspace")  # auto: netem where the kernel has it


@dataclass(frozen=True)
class LinkSpec:
    delay_ab_ms: float = 0.0
    delay_ba_ms: float = 0.0
    rate_ab_bps: float = 0.0  # 0 = no rate limit
    rate_ba_bps: float = 0.0
    limit_ab_bytes: int = 0  # FIFO in front of the rate limiter; 0 = unlimited
    limit_ba_bytes: int = 0

    @classmethod
    def symmetric(cls, one_way_ms: float, rate_bps: float = 0.0,
                  limit_bytes: int = 0) -> "LinkSpec":
        return cls(one_way_ms, one_way_ms, rate_bps, rate_bps, limit_bytes, limit_bytes)

    def is_plain(self) -> bool:
        return self.delay_ab_ms == 0 and self.delay_ba_ms == 0 and \
            self.rate_ab_bps == 0 and self.rate_ba_bps == 0

    def validate(self) -> None:
        for k in ("delay_ab_ms", "delay_ba_ms"):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v <= 60_000):
                raise ValueError(f"link.{k}: {v!r} not in [0, 60000] ms")
        for k in ("rate_ab_bps", "rate_ba_bps"):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and (v == 0 or 1e3 <= v <= 1e12)):
                raise ValueError(f"link.{k}: {v!r} not 0 (unlimited) or in [1e3, 1e12] bit/s")
        for k in ("limit_ab_bytes", "limit_ba_bytes"):
            v = getattr(self, k)
            if not (isinstance(v, int) and v >= 0):
                raise ValueError(f"link.{k}: {v!r} is not an int >= 0")


# ----------------------------------------------------------------------------------------
# Choosing the backend

_netem_cache: tuple[bool, str] | None = None


def netem_available(refresh: bool = False) -> tuple[bool, str]:
    """(True, "") if the kernel has netem, else (False, why). Probed once per process by
    adding a netem qdisc to the loopback of a scratch namespace (which is then deleted)."""
    global _netem_cache
    if _netem_cache is not None and not refresh:
        return _netem_cache
    scratch = Netns(f"{DEFAULT_PREFIX}probe-{new_run_id()}-netem")
    run_cmd([IP, "netns", "add", scratch.name])
    try:
        scratch.ip("link", "set", "dev", "lo", "up")
        cp = run_cmd([shutil.which("tc") or "tc", "-n", scratch.name, "qdisc", "add", "dev",
                      "lo", "root", "netem", "delay", "1ms"], check=False)
        ok = cp.returncode == 0
        why = "" if ok else f"`tc qdisc add ... netem` failed: {(cp.stderr or cp.stdout).strip()}"
    finally:
        run_cmd([IP, "netns", "del", scratch.name], check=False)
    _netem_cache = (ok, why)
    return _netem_cache


def _find_binary(name: str, env: str, build_rel: tuple, explicit) -> Path | None:
    """`explicit`, else $`env`, else PATH, else the build tree (default_build_dir()/
    build_rel): the first that is an executable file, resolved; None if none is."""
    cands = []
    if explicit is not None:
        cands.append(Path(explicit))
    elif os.environ.get(env):
        cands.append(Path(os.environ[env]))
    else:
        w = shutil.which(name)
        if w:
            cands.append(Path(w))
        cands.append(default_build_dir().joinpath(*build_rel))
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return c.resolve()
    return None


def find_delay_binary(explicit: str | Path | None = None) -> Path | None:
    """oppsched-delay: `explicit`, else $OPPSCHED_DELAY_BIN, else PATH, else the build tree
    (oppsched.paths.default_build_dir()/host/delay/oppsched-delay). None if none is found."""
    return _find_binary("oppsched-delay", DELAY_BINARY_ENV,
                        ("host", "delay", "oppsched-delay"), explicit)


def find_spm_mark_binary(explicit: str | Path | None = None) -> Path | None:
    """oppsched-spm-mark (SPM-AF's sender-side marker, host/spm_mark): `explicit`, else
    $OPPSCHED_SPM_MARK_BIN, else PATH, else the build tree
    (default_build_dir()/host/spm_mark/oppsched-spm-mark). None if none is found."""
    return _find_binary("oppsched-spm-mark", SPM_MARK_BINARY_ENV,
                        ("host", "spm_mark", "oppsched-spm-mark"), explicit)


# What oppsched-spm-mark needs to load its program (CAP_BPF; CAP_PERFMON for the socket
# pointers it reads, bpf_sk_fullsock/bpf_tcp_sock) and attach it (CAP_NET_ADMIN); measured
# with setpriv: any one of them missing and the load or the attach is refused.
SPM_MARK_CAPS = ("bpf", "net_admin", "perfmon")


def attach_spm_marker(ns: Netns, dev: str, binary: str | Path, cwnd_below: int = 4,
                      dscp: int = 3, run_user: RunUser | None = None) -> str:
    """Attaches SPM-AF's marker to the egress of `dev` in `ns` (Wu, Gong & Williamson,
    §6.1: TCP data sent while snd_cwnd < cwnd_below gets DSCP `dscp`; docs/testbed.md).
    The program stays attached until the interface or the namespace goes. Returns the
    loader's line saying what it did; NetnsError with its message if it fails.

    With run_user the loader runs as that user with SPM_MARK_CAPS only (setpriv,
    no_new_privs), not as root: the binary comes from a build folder an experiment
    names."""
    prefix = run_user.setpriv_argv(SPM_MARK_CAPS) if run_user is not None else []
    cp = ns.run([*prefix, str(binary), "--dev", dev, "--cwnd-below", str(int(cwnd_below)),
                 "--dscp", str(int(dscp))], check=False, timeout=30)
    if cp.returncode != 0:
        raise NetnsError(f"{ns.name}: oppsched-spm-mark --dev {dev} failed (exit "
                         f"{cp.returncode}): {(cp.stderr or cp.stdout).strip()}")
    return cp.stdout.strip()


@dataclass
class WiredChoice:
    backend: str  # "netem" or "userspace"
    requested: str
    reason: str
    binary: Path | None

    def describe(self) -> dict:
        d = asdict(self)
        d["binary"] = str(self.binary) if self.binary else None
        return d


def choose_backend(requested: str = "auto", binary: str | Path | None = None) -> WiredChoice:
    """Picks the backend for delayed links. A missing oppsched-delay is only an error when
    a delayed link is actually built (build_link)."""
    if requested not in WIRED_BACKENDS:
        raise ValueError(f"wired: {requested!r} not one of {', '.join(WIRED_BACKENDS)}")
    path = find_delay_binary(binary)
    if requested == "userspace":
        return WiredChoice("userspace", requested, "requested", path)
    ok, why = netem_available()
    if requested == "netem":
        if not ok:
            raise NetnsError(f"wired: netem requested but the kernel has none ({why})")
        return WiredChoice("netem", requested, "requested", path)
    if ok:
        return WiredChoice("netem", requested, "kernel has netem", path)
    return WiredChoice("userspace", requested, f"kernel has no netem ({why})", path)


# ----------------------------------------------------------------------------------------
# netem commands


def _us(ms: float) -> str:
    return f"{int(round(ms * 1000))}us"


def netem_commands(ns: str, dev: str, delay_ms: float, rate_bps: float,
                   limit_bytes: int, mtu: int = 1500) -> list[list[str]]:
    """tc commands for one direction (the egress of `dev`): netem delay, and for a rate
    limit a tbf child (burst: 1 ms at the rate, at least two frames; limit: the FIFO)."""
    tc = shutil.which("tc") or "tc"
    cmds = [[tc, "-n", ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "netem",
             "delay", _us(delay_ms), "limit", str(NETEM_PACKET_LIMIT)]]
    if rate_bps > 0:
        frame = mtu + 14
        burst = max(2 * frame, int(rate_bps / 8 / 1000))
        limit = limit_bytes if limit_bytes > 0 else 64 * 1024 * 1024
        cmds.append([tc, "-n", ns, "qdisc", "replace", "dev", dev, "parent", "1:1", "handle",
                     "10:", "tbf", "rate", f"{int(rate_bps)}bit", "burst", str(burst),
                     "limit", str(max(limit, frame))])
    return cmds


def delay_argv(binary: Path, if_a: str, if_b: str, spec: LinkSpec, stats: Path, ready: Path,
               rt_priority: int, seccomp: bool = True) -> list[str]:
    return [str(binary), "--if-a", if_a, "--if-b", if_b,
            "--delay-ab-ms", repr(float(spec.delay_ab_ms)),
            "--delay-ba-ms", repr(float(spec.delay_ba_ms)),
            "--rate-ab-bps", repr(float(spec.rate_ab_bps)),
            "--rate-ba-bps", repr(float(spec.rate_ba_bps)),
            "--limit-ab-bytes", str(spec.limit_ab_bytes),
            "--limit-ba-bytes", str(spec.limit_ba_bytes),
            "--stats-file", str(stats), "--ready-file", str(ready),
            "--rt-priority", str(rt_priority), "--seccomp", "1" if seccomp else "0"]


# ----------------------------------------------------------------------------------------
# Links


def wire_namespace(session: Session, role: str = "wire") -> Netns:
    """The namespace the delay stages live in. It only carries frames between its veth
    ends, so IPv6 is off there (no router solicitations, DAD or MLD of its own)."""
    ns = session.add_netns(role)
    ns.sysctl({"net.ipv6.conf.all.disable_ipv6": 1, "net.ipv6.conf.default.disable_ipv6": 1})
    return ns



class WiredLink:
    """One link as built. backend: "plain", "netem" or "userspace"."""

    def __init__(self, name: str, a: tuple[Netns, str], b: tuple[Netns, str], spec: LinkSpec,
                 backend: str):
        self.name = name
        self.a = a
        self.b = b
        self.spec = spec
        self.backend = backend
        self.proc: Proc | None = None
        self.argv: list[str] | None = None
        self.wire: Netns | None = None
        self.stats_path: Path | None = None
        self.ready_path: Path | None = None
        self.rt_priority = 0
        # AF_PACKET sockets need CAP_NET_RAW, SO_RCVBUFFORCE/SO_SNDBUFFORCE CAP_NET_ADMIN;
        # nothing else (no CAP_IPC_LOCK: at SCHED_FIFO the stage locks what RLIMIT_MEMLOCK
        # lets it, see host/delay/main.cc).
        self.caps: tuple[str, ...] = ("net_raw", "net_admin")
        self._session: Session | None = None

    def describe(self) -> dict:
        return {"name": self.name, "backend": self.backend,
                "a": f"{self.a[0].name}:{self.a[1]}", "b": f"{self.b[0].name}:{self.b[1]}",
                **asdict(self.spec),
                "pid": self.proc.pid if self.proc else None,
                "argv": self.argv}

    def start(self) -> None:
        """Starts the delay process (userspace backend); a no-op otherwise."""
        if self.backend != "userspace" or self.proc is not None:
            return
        # SCHED_FIFO is set before the switch (its own sched_setscheduler at the same
        # priority then needs no capability).
        self.proc = self._session.spawn(self.wire, self.argv, name=f"delay-{self.name}",
                                        caps=self.caps,
                                        sched_fifo=self.rt_priority)

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Returns once the link forwards: endpoints up and, for userspace, the delay
        process has bound its sockets (its ready file exists)."""
        if self.backend == "userspace":
            if self.proc is None:
                raise NetnsError(f"link {self.name}: not started")

            def ready():
                self.proc.check_alive()
                return self.ready_path.exists()
            wait_for(ready, timeout=timeout, what=f"link {self.name}: oppsched-delay ready")
            for end in ("a", "b"):
                self.wire.wait_link_up(f"{self.name}{end}", timeout)
        self.a[0].wait_link_up(self.a[1], timeout)
        self.b[0].wait_link_up(self.b[1], timeout)

    def stats(self, timeout: float = 2.0) -> dict | None:
        """Current counters: oppsched-delay's JSON (asked for with SIGUSR1), netem's
        `tc -s` per direction, None for a plain veth."""
        if self.backend == "netem":
            return {"ab": json.loads(self.a[0].tc("-s", "-j", "qdisc", "show", "dev", self.a[1])),
                    "ba": json.loads(self.b[0].tc("-s", "-j", "qdisc", "show", "dev", self.b[1]))}
        if self.backend != "userspace" or self.proc is None:
            return None
        before = self._read_stats()
        seq0 = before.get("seq", 0) if before else 0
        self.proc.check_alive()
        os.kill(self.proc.pid, signal.SIGUSR1)

        def fresh():
            self.proc.check_alive()
            s = self._read_stats()
            return s if s and s.get("seq", 0) > seq0 else None
        return wait_for(fresh, timeout=timeout, what=f"link {self.name}: stats")

    def _read_stats(self) -> dict | None:
        try:
            return json.loads(self.stats_path.read_text())
        except (OSError, ValueError, AttributeError):
            return None

    def stop(self, timeout: float = 3.0) -> None:
        """Ends the delay process (it writes its final stats on SIGTERM)."""
        if self.proc is not None and self.proc.running():
            self.proc.stop(timeout)

    def final_stats(self) -> dict | None:
        if self.backend != "userspace":
            return None
        s = self._read_stats()
        return s if s and s.get("final") else s


def build_link(session: Session, name: str, a_ns: Netns, a_dev: str, b_ns: Netns, b_dev: str,
               spec: LinkSpec, choice: WiredChoice, *, wire_ns: Callable[[], Netns] | None = None,
               rt_priority: int = 10, mtu: int = 1500, offloads: bool = False,
               start: bool = True, seccomp: bool = True) -> WiredLink:
    """Builds the link (devices up, no addresses). For userspace, wire_ns() gives the
    namespace the delay stage lives in. With start=True also starts and waits for it;
    otherwise call link.start() and link.wait_ready() (lets several stages start together)."""
    spec.validate()
    if not _is_link_name(name):
        raise ValueError(f"link name: {name!r} is not 1..12 lowercase letters or digits")
    backend = "plain" if spec.is_plain() else choice.backend
    link = WiredLink(name, (a_ns, a_dev), (b_ns, b_dev), spec, backend)
    link._session = session
    if backend in ("plain", "netem"):
        session.add_veth(a_ns, a_dev, b_ns, b_dev, mtu=mtu)
        _set_offloads([(a_ns, a_dev), (b_ns, b_dev)], offloads)
        if backend == "netem":
            # ab leaves through a's egress, ba through b's.
            for ns, dev, d, r, lim in (
                    (a_ns, a_dev, spec.delay_ab_ms, spec.rate_ab_bps, spec.limit_ab_bytes),
                    (b_ns, b_dev, spec.delay_ba_ms, spec.rate_ba_bps, spec.limit_ba_bytes)):
                for cmd in netem_commands(ns.name, dev, d, r, lim, mtu):
                    run_cmd(cmd)
        return link

    if choice.binary is None:
        raise NetnsError(
            f"link {name}: the kernel has no netem and oppsched-delay was not found "
            f"(build it: cmake --build build --target oppsched-delay, or set {DELAY_BINARY_ENV})")
    if wire_ns is None:
        raise NetnsError(f"link {name}: the userspace backend needs a wire namespace")
    wire = wire_ns()
    link.wire = wire
    session.add_veth(a_ns, a_dev, wire, f"{name}a", mtu=mtu)
    session.add_veth(wire, f"{name}b", b_ns, b_dev, mtu=mtu)
    _set_offloads([(a_ns, a_dev), (wire, f"{name}a"), (wire, f"{name}b"), (b_ns, b_dev)], offloads)
    link.stats_path = session.workdir / f"wired-{name}.json"
    link.ready_path = session.workdir / f"wired-{name}.ready"
    for p in (link.stats_path, link.ready_path):
        p.unlink(missing_ok=True)
    link.rt_priority = rt_priority
    link.argv = delay_argv(choice.binary, f"{name}a", f"{name}b", spec, link.stats_path,
                           link.ready_path, rt_priority, seccomp)
    if start:
        link.start()
        link.wait_ready()
    return link


def _is_link_name(name: str) -> bool:
    return re.fullmatch(r"[a-z0-9]{1,12}", name) is not None


def _set_offloads(ends: list[tuple[Netns, str]], enabled: bool) -> None:
    # veths start with TX checksumming and TSO/GSO/GRO on; turned off, every frame on the
    # wire (and in a pcap) is a real packet and a rate limit paces packets, not 64 KB
    # bursts, and every TCP checksum is final when tcpdump sees it (with TX checksumming
    # on, the sender's frames carry only the pseudo-header sum, which Wireshark shows as
    # bad: the veth never computes the rest).
    if enabled:
        return
    for ns, dev in ends:
        ns.set_offloads(dev, False)


# ----------------------------------------------------------------------------------------
# The testbed topology


@dataclass(frozen=True)
class ServerSpec:
    """A server S_i behind its own wired path to the AP (Andrew & Hanly, CLAMP, Fig. 3, Table I)."""
    name: str
    rtt_ms: float  # d_i: round-trip propagation delay of the wired path; d_i/2 each way
    rate_bps: float = 0.0  # wired link capacity per direction (Table I: 100 Mb/s); 0 = none
    limit_bytes: int = 0  # FIFO in front of that rate limit, bytes; 0 = unlimited


@dataclass(frozen=True)
class ClientSpec:
    """A client R_j. With client_links="veth", link_delay_ms is the one-way delay each way
    of its stand-in link to the AP (Andrew & Hanly, CLAMP, Table I: X--R_i 1 ms); 0 = a
    plain veth."""
    name: str
    link_delay_ms: float = 0.0


@dataclass(frozen=True)
class TcpSettings:
    """Per-namespace TCP sysctls, applied to every server and client namespace."""
    congestion_control: str = "reno"
    sack: bool = True
    ecn: int = 0  # net.ipv4.tcp_ecn: 0 off, 1 request and accept, 2 accept only
    timestamps: bool = True
    window_scaling: bool = True
    no_metrics_save: bool = True  # no cached ssthresh/RTT from an earlier connection
    extra: tuple[tuple[str, str], ...] = ()  # more (key, value) sysctls

    def sysctls(self) -> dict[str, str]:
        d = {
            "net.ipv4.tcp_congestion_control": self.congestion_control,
            "net.ipv4.tcp_sack": int(self.sack),
            "net.ipv4.tcp_ecn": self.ecn,
            "net.ipv4.tcp_timestamps": int(self.timestamps),
            "net.ipv4.tcp_window_scaling": int(self.window_scaling),
            "net.ipv4.tcp_no_metrics_save": int(self.no_metrics_save),
        }
        d.update(dict(self.extra))
        return {k: str(v) for k, v in d.items()}


CLIENT_LINKS = ("veth", "tun")


@dataclass(frozen=True)
class Topology:
    servers: tuple[ServerSpec, ...]
    clients: tuple[ClientSpec, ...]
    tcp: TcpSettings = field(default_factory=TcpSettings)
    ipv4: bool = True
    ipv6: bool = True
    wired: str = "auto"  # auto: netem where the kernel has it, else oppsched-delay
    client_links: str = "veth"  # veth: stand-in links for tests; tun: TUNs for the radio
    offloads: bool = False  # False: TSO/GSO/GRO off, so pcaps and rate limits see packets
    rt_priority: int = 10  # SCHED_FIFO priority of oppsched-delay (0: normal scheduling)
    mtu: int = 1500
    seccomp: bool = True  # oppsched-delay installs its seccomp allow-list (docs/security.md)

    def validate(self) -> None:
        """Raises ValueError naming the field and the value."""
        if not self.servers:
            raise ValueError("topology.servers: empty; at least one server is needed")
        if len(self.servers) > 250:
            raise ValueError(f"topology.servers: {len(self.servers)} servers, at most 250")
        if len(self.clients) > 250:
            raise ValueError(f"topology.clients: {len(self.clients)} clients, at most 250")
        for kind, specs in (("servers", self.servers), ("clients", self.clients)):
            names = [s.name for s in specs]
            for i, n in enumerate(names):
                if not n or names.index(n) != i:
                    raise ValueError(f"topology.{kind}[{i}].name: {n!r} is empty or repeated")
        for i, s in enumerate(self.servers):
            p = f"topology.servers[{i}]"
            if not (isinstance(s.rtt_ms, (int, float)) and 0 <= s.rtt_ms <= 60_000):
                raise ValueError(f"{p}.rtt_ms: {s.rtt_ms!r} not in [0, 60000]")
            if not (s.rate_bps == 0 or 1e3 <= s.rate_bps <= 1e12):
                raise ValueError(f"{p}.rate_bps: {s.rate_bps!r} not 0 or in [1e3, 1e12]")
            if not (isinstance(s.limit_bytes, int) and s.limit_bytes >= 0):
                raise ValueError(f"{p}.limit_bytes: {s.limit_bytes!r} is not an int >= 0")
        for j, c in enumerate(self.clients):
            if not (0 <= c.link_delay_ms <= 60_000):
                raise ValueError(f"topology.clients[{j}].link_delay_ms: {c.link_delay_ms!r} "
                                 "not in [0, 60000]")
        if self.wired not in WIRED_BACKENDS:
            raise ValueError(f"topology.wired: {self.wired!r} not one of "
                             f"{', '.join(WIRED_BACKENDS)}")
        if self.client_links not in CLIENT_LINKS:
            raise ValueError(f"topology.client_links: {self.client_links!r} not one of "
                             f"{', '.join(CLIENT_LINKS)}")
        if not (self.ipv4 or self.ipv6):
            raise ValueError("topology.ipv4/ipv6: both false; at least one family is needed")
        if not (0 <= self.rt_priority <= 99):
            raise ValueError(f"topology.rt_priority: {self.rt_priority!r} not in [0, 99]")
        if not (576 <= self.mtu <= 65535):
            raise ValueError(f"topology.mtu: {self.mtu!r} not in [576, 65535]")
        if not re.fullmatch(r"[a-z0-9_]{1,15}", self.tcp.congestion_control):
            raise ValueError(f"topology.tcp.congestion_control: {self.tcp.congestion_control!r}")
        if self.tcp.ecn not in (0, 1, 2):
            raise ValueError(f"topology.tcp.ecn: {self.tcp.ecn!r} not 0, 1 or 2")

    @classmethod
    def clamp_fig3(cls, **kw) -> "Topology":
        """Andrew & Hanly, CLAMP, Fig. 3 with Tables I-II: S1..S4 with d = 30, 130, 10, 180 ms
        over 100 Mb/s wired links; clients R1, R2 and R34 (R3 and R4 share one device and
        one AP queue, so one namespace); X--R links 1 ms."""
        servers = tuple(ServerSpec(f"S{i + 1}", d, rate_bps=100e6)
                        for i, d in enumerate((30.0, 130.0, 10.0, 180.0)))
        clients = (ClientSpec("R1", 1.0), ClientSpec("R2", 1.0), ClientSpec("R34", 1.0))
        return cls(servers=servers, clients=clients, **kw)


def server_addr(i: int, v6: bool, ap_side: bool = False) -> str:
    if v6:
        return f"fd00:1:{i:x}::{'fe' if ap_side else '1'}"
    return f"10.1.{i}.{254 if ap_side else 1}"


def client_addr(j: int, v6: bool, ap_side: bool = False) -> str:
    if v6:
        return f"fd00:2:{j:x}::{'fe' if ap_side else '1'}"
    return f"10.2.{j}.{254 if ap_side else 1}"


AP_TUN_ADDR4, AP_TUN_ADDR6 = "10.2.255.254", "fd00:2:ffff::fe"
CLIENT_NET4, CLIENT_NET6 = "10.2.0.0/16", "fd00:2::/32"


@dataclass
class Node:
    """A server or client as built: its namespace, interface and addresses."""
    name: str
    ns: Netns
    dev: str
    addr4: str | None
    addr6: str | None
    gw4: str | None  # next hop towards the AP (None on a TUN: routes point at the device)
    gw6: str | None

    def addr(self, v6: bool = False) -> str:
        a = self.addr6 if v6 else self.addr4
        if a is None:
            raise NetnsError(f"{self.name}: no {'IPv6' if v6 else 'IPv4'} address "
                             "(family switched off in the topology)")
        return a


def ensure_congestion_control(name: str, session: Session) -> list[str]:
    """Makes `name` usable as a namespace's default TCP congestion control.

    A namespace other than the host's may only default to an algorithm in the host's
    net.ipv4.tcp_allowed_congestion_control (the kernel refuses others with EPERM), so a
    missing one is added there (loading tcp_NAME first if needed) for as long as a run of
    this machine needs it: the session's teardown (or `oppsched cleanup` after a crash)
    takes it out again. That list only says what unprivileged sockets may pick: widening it
    changes no running connection. A loaded module stays loaded. Returns the host changes
    made, for the record.
    """
    base = Path("/proc/sys/net/ipv4")
    changes = []
    avail = (base / "tcp_available_congestion_control").read_text().split()
    if name not in avail:
        run_cmd(["modprobe", f"tcp_{name}"], check=False)
        avail = (base / "tcp_available_congestion_control").read_text().split()
        if name not in avail:
            raise NetnsError(f"topology.tcp.congestion_control: {name!r} is not available in "
                             f"this kernel (available: {' '.join(avail)})")
        changes.append(f"loaded kernel module tcp_{name}")
    if allow_congestion_control(name, session.name):
        changes.append(f"added {name} to the host's net.ipv4.tcp_allowed_congestion_control "
                       "(until the run ends)")
    return changes


class Testbed:
    """Builds a Topology in a fresh Session; a context manager that always tears down.

    Attributes once entered: session, ap (Netns), servers and clients (lists of Node),
    links (list of WiredLink), wired (WiredChoice),
    host_changes (what had to be changed outside the namespaces, normally nothing).
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, topology: Topology, *, prefix: str = DEFAULT_PREFIX,
                 run_id: str | None = None, workdir: str | Path | None = None,
                 delay_binary: str | Path | None = None, handle_signals: bool = True,
                 verify: bool = True, run_user: RunUser | None | str = "auto"):
        topology.validate()
        self.verify = verify
        self.topology = topology
        # "auto": the processes of the run switch to the run user (netns.RunUser.resolve);
        # None keeps them root.
        if run_user == "auto":
            run_user = RunUser.resolve()
        self.session = Session(prefix, run_id, workdir, handle_signals=handle_signals,
                               run_user=run_user)
        self.delay_binary = delay_binary
        self.ap: Netns | None = None
        self.wire: Netns | None = None
        self.servers: list[Node] = []
        self.clients: list[Node] = []
        self.links: list = []
        self.wired = None
        self.final_wired_stats: dict[str, dict] = {}
        self.host_changes: list[str] = []

    @property
    def name(self) -> str:
        return self.session.name

    def __enter__(self) -> "Testbed":
        self.session.start()
        try:
            self._build()
        except BaseException:
            self.session.teardown()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.session.__exit__(exc_type, exc, tb)

    def teardown(self) -> list[str]:
        return self.session.teardown()

    # -- building --

    def _build(self) -> None:
        t = self.topology
        s = self.session
        self.wired = choose_backend(t.wired, self.delay_binary)
        self.host_changes += ensure_congestion_control(t.tcp.congestion_control, s)
        self.session.on_teardown(self._collect_final_stats)

        no6 = {"net.ipv6.conf.all.disable_ipv6": 1, "net.ipv6.conf.default.disable_ipv6": 1}
        # No DAD (link-local addresses would stay tentative ~1 s, and a router cannot send
        # neighbour solicitations meanwhile), no router solicitations or RAs: set before
        # any interface exists, so the default.* values apply to every one of them.
        quiet6 = {"net.ipv6.conf.all.accept_dad": 0, "net.ipv6.conf.default.accept_dad": 0,
                  "net.ipv6.conf.default.router_solicitations": 0,
                  "net.ipv6.conf.default.accept_ra": 0}
        tcp = {**t.tcp.sysctls(), **(quiet6 if t.ipv6 else no6)}
        self.ap = s.add_netns("ap")
        ap_sys = dict(tcp)
        ap_sys.update({"net.ipv4.ip_forward": 1, "net.ipv4.conf.all.rp_filter": 0,
                       "net.ipv4.conf.default.rp_filter": 0})
        if t.ipv6:
            ap_sys["net.ipv6.conf.all.forwarding"] = 1
        self.ap.sysctl(ap_sys)
        srv_ns = []
        for i in range(len(t.servers)):
            ns = s.add_netns(f"s{i}")
            ns.sysctl(tcp)
            srv_ns.append(ns)
        cli_ns = []
        for j in range(len(t.clients)):
            ns = s.add_netns(f"r{j}")
            ns.sysctl(tcp)
            cli_ns.append(ns)

        def wire_ns():
            if self.wire is None:
                self.wire = wire_namespace(s)
            return self.wire

        # Wired paths S_i -- AP: one-way d_i/2 each direction.
        for i, (spec, ns) in enumerate(zip(t.servers, srv_ns)):
            link_spec = LinkSpec.symmetric(spec.rtt_ms / 2.0, spec.rate_bps, spec.limit_bytes)
            self.servers.append(self._wired_node(spec.name, i, ns, f"s{i}", link_spec,
                                                 server_addr, wire_ns, node_is_a=True))

        # AP -- clients.
        if t.client_links == "veth":
            for j, (spec, ns) in enumerate(zip(t.clients, cli_ns)):
                link_spec = LinkSpec.symmetric(spec.link_delay_ms)
                self.clients.append(self._wired_node(spec.name, j, ns, f"r{j}", link_spec,
                                                     client_addr, wire_ns, node_is_a=False))
        else:
            s.add_tun(self.ap, "radio0", mtu=t.mtu)
            if t.ipv4:
                self.ap.ip("addr", "add", f"{AP_TUN_ADDR4}/32", "dev", "radio0")
                self.ap.ip("route", "add", CLIENT_NET4, "dev", "radio0")
            if t.ipv6:
                self.ap.ip("-6", "addr", "add", f"{AP_TUN_ADDR6}/128", "dev", "radio0", "nodad")
                self.ap.ip("-6", "route", "add", CLIENT_NET6, "dev", "radio0")
            for j, (spec, ns) in enumerate(zip(t.clients, cli_ns)):
                s.add_tun(ns, "radio0", mtu=t.mtu)
                node = Node(spec.name, ns, "radio0",
                            client_addr(j, False) if t.ipv4 else None,
                            client_addr(j, True) if t.ipv6 else None, None, None)
                if t.ipv4:
                    ns.ip("addr", "add", f"{node.addr4}/32", "dev", "radio0")
                    ns.ip("route", "add", "default", "dev", "radio0")
                if t.ipv6:
                    ns.ip("-6", "addr", "add", f"{node.addr6}/128", "dev", "radio0", "nodad")
                    ns.ip("-6", "route", "add", "default", "dev", "radio0")
                self.clients.append(node)

        # Delay stages last (their interfaces exist and are up), then check readiness.
        for link in self.links:
            link.start()
        for link in self.links:
            link.wait_ready()
        if self.verify and t.client_links == "veth" and self.clients:
            self.check_reachability()

    def check_reachability(self, timeout: float | None = None) -> None:
        """Pings every client from every server (each family) once: proves the routes and
        fills the neighbour caches, so a flow's first packets do not wait for ARP/ND
        through the delayed path. Raises NetnsError naming the pairs that failed."""
        t = self.topology
        if timeout is None:  # three round trips of the longest path, at least 1 s
            timeout = max(1.0, 3 * max(s.rtt_ms for s in t.servers) / 1000.0
                          + 6 * max((c.link_delay_ms for c in t.clients), default=0) / 1000.0)
        addrs = [c.addr4 for c in self.clients if c.addr4] + \
                [c.addr6 for c in self.clients if c.addr6]
        # One pinger per server, all at once: the slowest path sets the time taken.
        with ThreadPoolExecutor(max_workers=len(self.servers)) as pool:
            results = list(pool.map(lambda srv: srv.ns.ping_many(addrs, count=1, timeout=timeout),
                                    self.servers))
        failed = [f"{srv.name} -> {a}" for srv, res in zip(self.servers, results)
                  for a, r in res.items() if r[0] is None]
        if failed:
            raise NetnsError(f"{self.name}: unreachable after {timeout:g} s: " + ", ".join(failed))

    def _wired_node(self, name: str, k: int, ns: Netns, ap_dev: str, spec: LinkSpec, addr_fn,
                    wire_ns: Callable[[], Netns], node_is_a: bool) -> Node:
        """Node `name` (k-th of its kind, addresses from addr_fn) in `ns`, joined to the AP's
        `ap_dev` by a wired link of that name (built, not started; the node's eth0 is its
        end a if node_is_a, else end b), addressed and routed."""
        t = self.topology
        ends = [(ns, "eth0"), (self.ap, ap_dev)]
        if not node_is_a:
            ends.reverse()
        (a_ns, a_dev), (b_ns, b_dev) = ends
        self.links.append(build_link(self.session, ap_dev, a_ns, a_dev, b_ns, b_dev, spec,
                                     self.wired, wire_ns=wire_ns, rt_priority=t.rt_priority,
                                     seccomp=t.seccomp,
                                     mtu=t.mtu, offloads=t.offloads, start=False))
        node = Node(name, ns, "eth0",
                    addr_fn(k, False) if t.ipv4 else None,
                    addr_fn(k, True) if t.ipv6 else None,
                    addr_fn(k, False, True) if t.ipv4 else None,
                    addr_fn(k, True, True) if t.ipv6 else None)
        self._address_p2p(node, self.ap, ap_dev, k, addr_fn)
        return node

    def _address_p2p(self, node: Node, ap: Netns, ap_dev: str, k: int, addr_fn) -> None:
        t = self.topology
        if t.ipv4:
            node.ns.ip("addr", "add", f"{node.addr4}/24", "dev", node.dev)
            ap.ip("addr", "add", f"{addr_fn(k, False, True)}/24", "dev", ap_dev)
            node.ns.ip("route", "add", "default", "via", node.gw4)
        if t.ipv6:
            # nodad: usable at once (DAD would hold the address tentative for ~1 s).
            node.ns.ip("-6", "addr", "add", f"{node.addr6}/64", "dev", node.dev, "nodad")
            ap.ip("-6", "addr", "add", f"{addr_fn(k, True, True)}/64", "dev", ap_dev, "nodad")
            node.ns.ip("-6", "route", "add", "default", "via", node.gw6)

    # -- observing --

    def wired_stats(self, timeout: float = 2.0) -> dict[str, dict | None]:
        """Counters of every delayed link now (oppsched-delay JSON, or tc -s for netem)."""
        return {link.name: link.stats(timeout=timeout) for link in self.links}

    def _collect_final_stats(self) -> None:
        for link in self.links:
            link.stop()
            self.final_wired_stats[link.name] = link.final_stats()

    def describe(self) -> dict:
        """What was built, for config.json/summary.json: backend, namespaces, addresses."""
        t = self.topology
        return {
            "run": self.name,
            "wired": self.wired.describe() if self.wired else None,
            "host_changes": list(self.host_changes) + list(self.session.host_changes),
            "topology": asdict(t),
            "ap": {"ns": self.ap.name if self.ap else None},
            "wire_ns": self.wire.name if self.wire else None,
            "servers": [{"name": n.name, "ns": n.ns.name, "dev": n.dev, "addr4": n.addr4,
                         "addr6": n.addr6} for n in self.servers],
            "clients": [{"name": n.name, "ns": n.ns.name, "dev": n.dev, "addr4": n.addr4,
                         "addr6": n.addr6} for n in self.clients],
            "links": [link.describe() for link in self.links],
        }


# ----------------------------------------------------------------------------------------
# Measuring the accuracy on this machine: python -m oppsched.testbed.wired --rtt-ms 30 --count 200


def measure(rtt_ms: float, count: int = 200, interval: float = 0.01, v6: bool = False,
            rt_priority: int = 10, load_bps: float = 0.0, backend: str = "auto") -> dict:
    """Pings through a wired path of round trip `rtt_ms` and reports RTT - rtt_ms (ms).
    With load_bps > 0 an iperf3 UDP flow of that rate crosses a second wired path of the
    same AP meanwhile (the delay stages share the CPU, as in a real run)."""
    servers = (ServerSpec("S1", rtt_ms),) + ((ServerSpec("S2", rtt_ms),) if load_bps else ())
    topo = Topology(servers=servers, clients=(ClientSpec("R1"),), rt_priority=rt_priority,
                    wired=backend)
    with Testbed(topo, prefix="owmeasure") as tb:
        cli = tb.clients[0]
        load = None
        if load_bps:
            cli.ns.spawn_iperf3_server(5201)
            secs = int(count * interval + 5)
            load = tb.session.spawn(tb.servers[1].ns, ["iperf3", "-c", cli.addr(v6), "-u", "-b",
                                                       str(int(load_bps)), "-t", str(secs)],
                                    name="load")
            wait_for(lambda: tb.links[1].stats().get("directions", {}).get("ab", {})
                     .get("forwarded", 0) > 100, timeout=10, what="background load flowing")
        rtts = tb.servers[0].ns.ping(cli.addr(v6), count=count, interval=interval)
        st = tb.links[0].stats() if tb.wired.backend == "userspace" else None
        if load is not None:
            load.stop()
        got = sorted(r - rtt_ms for r in rtts if r is not None)

        def q(p):
            return got[min(len(got) - 1, int(p * len(got)))]
        out = {"backend": tb.wired.backend, "rtt_ms": rtt_ms, "family": "ipv6" if v6 else "ipv4",
               "count": count, "received": len(got), "rt_priority": rt_priority,
               "load_bps": load_bps,
               "excess_ms": {"min": got[0], "median": statistics.median(got),
                             "mean": statistics.fmean(got), "p95": q(0.95), "p99": q(0.99),
                             "max": got[-1]}}
        if st:
            out["rt_priority_applied"] = st.get("rt_priority_applied")
            out["stage_lateness_us"] = {
                k: {"mean": v["late_mean_us"], "max": v["late_max_us"],
                    "hist_edges_us": st["late_hist_edges_us"], "hist": v["late_hist"]}
                for k, v in st["directions"].items()}
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oppsched.testbed.wired",
                                 description="measure the wired-path delay accuracy here")
    ap.add_argument("--rtt-ms", type=float, default=30.0)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--interval", type=float, default=0.01)
    ap.add_argument("--ipv6", action="store_true")
    ap.add_argument("--rt-priority", type=int, default=10)
    ap.add_argument("--load-bps", type=float, default=0.0)
    ap.add_argument("--backend", default="auto", choices=WIRED_BACKENDS)
    a = ap.parse_args(argv)
    try:
        res = measure(a.rtt_ms, a.count, a.interval, a.ipv6, a.rt_priority, a.load_bps, a.backend)
    except (NetnsError, ValueError) as exc:
        print(f"oppsched.testbed.wired: {exc}")
        return 1
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
