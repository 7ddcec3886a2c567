"""One network namespace (:class:`Netns`: commands, links, sysctls, sockets and offloads,
pings, and waiting for a port or a link) and the processes a Session starts in it
(:class:`Proc`, each in its own process group).

Everything here needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
"""

from __future__ import annotations

import json
import signal
import socket
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from oppsched.testbed.nsbase import IP, TC, NetnsError, run_cmd, wait_for
from oppsched.testbed.nsenter import _ETHTOOL, _ethtool, in_netns

if TYPE_CHECKING:
    from oppsched.testbed.netns import Session


def _signal_proc(popen: subprocess.Popen, sig: int) -> None:
    """Signals the process group a Session started (leader pid = pgid), and the leader
    itself while it is not reaped. Once reaped, its pid may belong to someone else: only
    the group is signalled then (a group id stays reserved while any member lives)."""
    try:
        os.killpg(popen.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    if popen.returncode is None:
        try:
            os.kill(popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class Proc:
    """A process a Session started inside a namespace, in its own process group."""

    def __init__(self, name: str, ns: "Netns", argv: list[str], popen: subprocess.Popen,
                 log_path: Path | None):
        self.name = name
        self.ns = ns
        self.argv = argv
        self.popen = popen
        self.log_path = log_path
        self.sched_fifo = 0  # the SCHED_FIFO priority it was started with (0: normal)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise NetnsError(f"{self.name}: still running after {timeout:g} s") from None

    def send_signal(self, sig: int) -> None:
        if self.running():
            self.popen.send_signal(sig)

    def log_tail(self, lines: int = 15) -> str:
        if self.log_path is None:
            return ""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def check_alive(self) -> None:
        """Raises NetnsError (with the end of its log) if the process has exited."""
        rc = self.popen.poll()
        if rc is not None:
            tail = self.log_tail()
            raise NetnsError(f"{self.name} (in {self.ns.name}) exited with {rc}"
                             + (f":\n{tail}" if tail else ""))

    def stop(self, timeout: float = 3.0) -> int | None:
        """SIGTERM to the process group, then SIGKILL after `timeout`. Returns the exit code."""
        if self.popen.poll() is None:
            _signal_proc(self.popen, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # The leader may be gone while members of its group live on: kill the group anyway.
        _signal_proc(self.popen, signal.SIGKILL)
        try:
            return self.popen.wait(5.0)
        except subprocess.TimeoutExpired:
            return None

    def __repr__(self) -> str:
        return f"Proc({self.name!r}, pid={self.pid}, ns={self.ns.name!r})"



class Netns:
    """Handle on one network namespace (it must exist); commands run inside it."""

    def __init__(self, name: str, session: "Session | None" = None, role: str = ""):
        self.name = name
        self.session = session
        self.role = role

    def __repr__(self) -> str:
        return f"Netns({self.name!r})"

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        return [IP, "netns", "exec", self.name, *[str(a) for a in argv]]

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True,
            input: str | None = None) -> subprocess.CompletedProcess:
        """Runs argv inside the namespace to completion (output captured as text)."""
        return run_cmd(self.exec_argv(argv), timeout=timeout, check=check, input=input)

    def ip(self, *args: Any, timeout: float = 10.0) -> str:
        """`ip -n NAME ARGS...`; returns stdout."""
        return run_cmd([IP, "-n", self.name, *args], timeout=timeout).stdout

    def tc(self, *args: Any, timeout: float = 10.0) -> str:
        return run_cmd([TC, "-n", self.name, *args], timeout=timeout).stdout

    def sysctl(self, values: dict[str, Any]) -> None:
        """Sets per-namespace sysctls, e.g. {"net.ipv4.tcp_congestion_control": "reno"}."""
        if not values:
            return
        self.run(["sysctl", "-q", "-w", *[f"{k}={v}" for k, v in values.items()]])

    def read_sysctl(self, key: str) -> str:
        return self.run(["sysctl", "-n", key]).stdout.strip()

    def pids(self) -> list[int]:
        cp = run_cmd([IP, "netns", "pids", self.name], check=False)
        return [int(p) for p in cp.stdout.split() if p.isdigit()]

    def links(self) -> list[dict]:
        return json.loads(self.ip("-j", "link", "show") or "[]")

    def link(self, dev: str) -> dict:
        return json.loads(self.ip("-j", "link", "show", "dev", dev))[0]

    def wait_link_up(self, dev: str, timeout: float = 5.0) -> None:
        """Waits until `dev` is administratively up and has carrier (LOWER_UP)."""
        def up():
            flags = self.link(dev).get("flags", [])
            return "UP" in flags and "LOWER_UP" in flags
        wait_for(up, timeout=timeout, what=f"{self.name}: link {dev} up")

    def listening(self, proto: str = "tcp") -> set[int]:
        """Local ports with a listening (tcp) or bound (udp) socket in this namespace."""
        flag = {"tcp": "-Hltn", "udp": "-Hlun"}[proto]
        out = self.run(["ss", flag]).stdout
        ports = set()
        for line in out.splitlines():
            cols = line.split()
            if len(cols) >= 4 and ":" in cols[3]:
                port = cols[3].rsplit(":", 1)[1]
                if port.isdigit():
                    ports.add(int(port))
        return ports

    def wait_listening(self, port: int, proto: str = "tcp", timeout: float = 10.0,
                       proc: Proc | None = None) -> None:
        """Waits until something listens on `port`; fails at once if `proc` exits."""
        def probe():
            if proc is not None:
                proc.check_alive()
            return port in self.listening(proto)
        wait_for(probe, timeout=timeout, what=f"{self.name}: {proto} port {port} listening")

    def socket(self, family: int = socket.AF_INET, type: int = socket.SOCK_DGRAM,
               proto: int = 0) -> socket.socket:
        """A socket created inside this namespace."""
        return in_netns(self.name, lambda: socket.socket(family, type, proto))

    def offloads(self, dev: str) -> dict[str, bool]:
        with self.socket() as s:
            return {k: bool(_ethtool(s, dev, get)) for k, (get, _set) in _ETHTOOL.items()}

    def set_offloads(self, dev: str, enabled: bool) -> None:
        """Switches TX checksumming, TSO, GSO and GRO of `dev` on or off (ethtool -K tx
        tso gso gro, without ethtool)."""
        with self.socket() as s:
            for key, (_get, set_cmd) in _ETHTOOL.items():
                try:
                    _ethtool(s, dev, set_cmd, int(enabled))
                except OSError as exc:
                    raise NetnsError(f"{self.name}: {dev}: cannot set {key} "
                                     f"{'on' if enabled else 'off'}: {exc.strerror}") from None

    def ping(self, address: str, count: int = 20, interval: float = 0.05,
             timeout: float = 2.0, size: int = 56) -> list[float | None]:
        """ICMP echo RTTs in ms (None: lost), via oppsched.testbed.pinger run in this namespace."""
        return self.ping_many([address], count, interval, timeout, size)[address]

    def ping_many(self, addresses: Sequence[str], count: int = 1, interval: float = 0.05,
                  timeout: float = 2.0, size: int = 56) -> dict[str, list[float | None]]:
        """ping() of several addresses at the same time, from one process."""
        pkg_parent = str(Path(__file__).resolve().parents[2])
        argv = ["env", f"PYTHONPATH={pkg_parent}", sys.executable, "-m", "oppsched.testbed.pinger",
                *addresses, "--count", count, "--interval", interval, "--timeout", timeout,
                "--size", size]
        budget = count * interval + timeout + 30.0
        cp = self.run(argv, timeout=budget)
        out = {}
        for line in cp.stdout.splitlines():
            d = json.loads(line)
            out[d["address"]] = d["rtt_ms"]
        return out

    def spawn(self, argv: Sequence[str], *, name: str, log: str | Path | None = None,
              env: dict[str, str] | None = None) -> Proc:
        if self.session is None:
            raise NetnsError(f"{self.name}: spawn needs a Session (it owns the processes)")
        return self.session.spawn(self, argv, name=name, log=log, env=env)

    def spawn_iperf3_server(self, port: int = 5201, *, name: str | None = None,
                            extra: Sequence[str] = (), timeout: float = 10.0) -> Proc:
        """Starts `iperf3 -s -p PORT` here and returns once the port listens."""
        p = self.spawn(["iperf3", "-s", "-p", str(port), *extra],
                       name=name or f"iperf3-s-{self.role or self.name}-{port}")
        self.wait_listening(port, "tcp", timeout=timeout, proc=p)
        return p
