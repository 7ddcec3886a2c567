"""Wired paths between namespaces: plain veth, netem, or the user-space oppsched-delay
(the testbed topology built of them is oppsched.testbed.wired).

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

The SPM-AF marker (attach_spm_marker) is a BPF program a run attaches at a wired
path's end.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from oppsched.paths import default_build_dir
from oppsched.testbed.namespace import Netns, Proc
from oppsched.testbed.netns import Session
from oppsched.testbed.nsbase import (DEFAULT_PREFIX, IP, NetnsError, new_run_id, run_cmd,
                                     wait_for)
from oppsched.testbed.privsep import RunUser

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
