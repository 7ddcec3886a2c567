"""Network namespaces, devices and processes of a run, with guaranteed teardown.

A :class:`Session` owns everything one run creates -- namespaces (named
``PREFIX-RUNID-ROLE``), veth pairs and TUN devices inside them, and processes started in
them -- and removes all of it on exit: normal return, exception, Ctrl-C, SIGTERM/SIGHUP
(turned into SystemExit while the session is open) and, as a last resort, atexit.
:func:`cleanup_stale` removes what a run killed with SIGKILL left behind.
:class:`Netns` runs commands and processes inside one namespace and waits for things to
be ready by checking (ports listening, links up, files written), never by sleeping.

The testbed built from them (servers behind wired paths, the AP, the clients) is
oppsched.testbed.wired's :class:`Topology` and :class:`Testbed`.

Everything here needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN): see :func:`is_root`.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from oppsched import safefs

DEFAULT_PREFIX = "oppsched"
OWNER_DIR = Path("/run/oppsched-netns")  # tmpfs: gone after a reboot, like the namespaces
RUN_ENV = "OPPSCHED_NETNS_RUN"  # set in every process a Session starts: finds escapees
IP = shutil.which("ip") or "/usr/sbin/ip"
TC = shutil.which("tc") or "/usr/sbin/tc"

_PREFIX_RE = re.compile(r"[A-Za-z0-9_]{1,24}")
_ROLE_RE = re.compile(r"[a-z0-9]{1,12}")
_RUN_ID_RE = re.compile(r"[0-9a-f]{6}")
_IFNAME_RE = re.compile(r"[A-Za-z0-9_.]{1,15}")


class NetnsError(RuntimeError):
    """A command or step failed; the message names what and why."""


class ReadinessTimeout(NetnsError):
    """Something did not become ready within its timeout."""


def is_root() -> bool:
    return os.geteuid() == 0


def _fmt(argv: Sequence[str]) -> str:
    return " ".join(str(a) for a in argv)


def run_cmd(argv: Sequence[str], *, timeout: float = 30.0, check: bool = True,
            input: str | None = None) -> subprocess.CompletedProcess:
    """Runs a command to completion (text output captured); raises NetnsError on failure."""
    argv = [str(a) for a in argv]
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input,
                            stdin=None if input is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        raise NetnsError(f"`{_fmt(argv)}`: {argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise NetnsError(f"`{_fmt(argv)}` did not finish within {timeout:g} s") from None
    if check and cp.returncode != 0:
        msg = (cp.stderr or cp.stdout).strip()
        raise NetnsError(f"`{_fmt(argv)}` failed (exit {cp.returncode}): {msg}")
    return cp


def wait_for(probe: Callable[[], Any], *, timeout: float, what: str,
             interval: float = 0.002, max_interval: float = 0.05) -> Any:
    """Calls probe() until it returns something truthy and returns that.

    The poll interval starts small and backs off to max_interval. After `timeout` seconds,
    raises ReadinessTimeout("WHAT: not ready after T s"). probe() may raise to give up early
    (e.g. the process that should open a port has died).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        now = time.monotonic()
        if now >= deadline:
            raise ReadinessTimeout(f"{what}: not ready after {timeout:g} s")
        time.sleep(min(interval, deadline - now))
        interval = min(interval * 2, max_interval)


# ----------------------------------------------------------------------------------------
# Entering a namespace from one thread (for sockets and ioctls without a subprocess)

_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000


def in_netns(name: str, fn: Callable[[], Any]) -> Any:
    """Runs fn() in a short-lived thread that has joined namespace `name`; returns its value.

    setns(CLONE_NEWNET) only moves the calling thread, so the rest of the process stays
    where it was. Sockets keep the namespace they were created in, so a socket made by fn()
    can be used from any thread afterwards.
    """
    out: dict[str, Any] = {}

    def body():
        try:
            fd = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, _CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f"setns({name}): {os.strerror(e)}")
            finally:
                os.close(fd)
            out["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            out["error"] = exc

    t = threading.Thread(target=body, name=f"netns-{name}", daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out.get("value")


# Legacy ethtool ioctls (struct ethtool_value, linux/ethtool.h), enough to switch the
# offloads a capture sees: TX checksumming (ETHTOOL_[GS]TXCSUM: all of the device's checksum
# features, IPv4 and IPv6) and segmentation. TX checksumming comes first: switching it on
# is what allows TSO, switching it off switches TSO off too.
_SIOCETHTOOL = 0x8946
_ETHTOOL = {"tx_csum": (0x16, 0x17), "tso": (0x1E, 0x1F), "gso": (0x23, 0x24),
            "gro": (0x2B, 0x2C)}  # (get, set)


def _ethtool(sock: socket.socket, dev: str, cmd: int, value: int = 0) -> int:
    buf = ctypes.create_string_buffer(struct.pack("II", cmd, value), 8)
    ifr = struct.pack("16sP", dev.encode(), ctypes.addressof(buf)).ljust(40, b"\0")
    fcntl.ioctl(sock.fileno(), _SIOCETHTOOL, ifr)
    return struct.unpack("II", buf.raw)[1]


# ----------------------------------------------------------------------------------------
# Processes


def _proc_start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks): tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[19])


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


# ----------------------------------------------------------------------------------------
# One namespace


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


# ----------------------------------------------------------------------------------------
# Session: what one run owns


# util-linux's setpriv (Essential on Debian) sets PR_SET_PDEATHSIG and execs the program.
PDEATHSIG = ("setpriv", "--pdeathsig", "KILL", "--")


def parent_check(runner_pid: int) -> list[str]:
    """A prefix that ends the program at once unless its parent is still `runner_pid`.

    PR_SET_PDEATHSIG only fires for a parent that dies after it was armed: a runner killed
    between its fork and setpriv's prctl (or between the uid change that clears it and
    setpriv arming it again) leaves an orphan that nothing stops. Placed after the last
    setpriv, this closes that window: had the runner died before the signal was armed, the
    program's parent is no longer the runner (every stage execs, none forks) and it exits
    with status 125; after the check, the armed PR_SET_PDEATHSIG takes over."""
    return ["/bin/sh", "-c", '[ "$PPID" = "$0" ] || exit 125; exec "$@"', str(int(runner_pid))]

# The system user processes of a run run as (tools/bootstrap.sh creates it; a run as root
# creates it when it is missing). Never `nobody`: other daemons of the host run as it, and
# a run's files and processes must be the run's alone. OPPSCHED_RUN_USER names another one.
RUN_USER = "oppsched"
RUN_USER_ENV = "OPPSCHED_RUN_USER"
# Capabilities a process may be given (setpriv names, without the cap_ prefix).
_CAP_NAMES = {"net_admin", "net_raw", "sys_nice", "bpf", "perfmon"}
# What tcpdump -Z USER needs until it has switched to USER: open the capture and switch
# (then it holds none). It writes to `-w -`, a file the runner opened (spawn's stdout), so
# it needs neither CAP_DAC_OVERRIDE nor CAP_CHOWN: as root with those it would open a
# path in the run user's folder, where a planted symlink could aim it at any file.
TCPDUMP_BOUNDING = ("net_raw", "net_admin", "setuid", "setgid")


@dataclass(frozen=True)
class RunUser:
    """The unprivileged user the long-running processes of a run switch to after set-up
    (docs/testbed.md, "Privilege separation")."""

    name: str
    uid: int
    gid: int

    @classmethod
    def resolve(cls, name: str | None = None) -> "RunUser":
        """`name`, else $OPPSCHED_RUN_USER, else `oppsched`, which is created (useradd
        --system, no home, no login shell) when it does not exist and this is root."""
        want = name or os.environ.get(RUN_USER_ENV) or None
        cand = want or RUN_USER
        try:
            pw = pwd.getpwnam(cand)
        except KeyError:
            if want:
                raise NetnsError(f"{RUN_USER_ENV}: no user {want!r} (tools/bootstrap.sh creates "
                                 f"{RUN_USER!r})") from None
            pw = cls._create(cand)
        if pw.pw_uid == 0:
            raise NetnsError(f"{RUN_USER_ENV}: {cand!r} is root; name an unprivileged user")
        if pw.pw_name == "nobody" or pw.pw_uid == 65534:
            raise NetnsError(f"{RUN_USER_ENV}: {cand!r} is the shared `nobody`; name (or let "
                             f"the run create) a user of its own, e.g. {RUN_USER!r}")
        return cls(pw.pw_name, pw.pw_uid, pw.pw_gid)

    @staticmethod
    def _create(name: str):
        if not is_root():
            raise NetnsError(f"run user: {name!r} does not exist and only root can create it "
                             "(run tools/bootstrap.sh, or the run as root)")
        cp = run_cmd(["useradd", "--system", "--user-group", "--no-create-home",
                      "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
                     check=False)
        try:
            return pwd.getpwnam(name)
        except KeyError:
            raise NetnsError(f"run user: {name!r} does not exist and `useradd --system {name}` "
                             f"failed (exit {cp.returncode}): {cp.stderr.strip()}; the run "
                             "refuses to fall back to `nobody`") from None

    def setpriv_argv(self, caps: Sequence[str] = ()) -> list[str]:
        """setpriv(1) that switches to this user, keeps exactly `caps` (ambient, so that
        they survive the exec of the program; the bounding set is cut to them too), sets
        no_new_privs and, as the uid change clears it, PR_SET_PDEATHSIG again."""
        bad = [c for c in caps if c not in _CAP_NAMES]
        if bad:
            raise ValueError(f"caps: {bad} not among {sorted(_CAP_NAMES)}")
        keep = "".join(f",+{c}" for c in sorted(set(caps)))
        argv = ["setpriv", "--reuid", str(self.uid), "--regid", str(self.gid),
                "--init-groups" if self._has_passwd_entry() else "--clear-groups",
                "--inh-caps", "-all" + keep]
        if keep:
            argv += ["--ambient-caps", "-all" + keep]
        return argv + ["--bounding-set", "-all" + keep, "--no-new-privs",
                       "--pdeathsig", "KILL", "--"]

    def _has_passwd_entry(self) -> bool:
        try:
            return pwd.getpwuid(self.uid).pw_name == self.name
        except KeyError:
            return False

    def own(self, path: Path, mode: int = 0o755) -> None:
        """Makes directory `path` (created if missing) this user's, with `mode`. Refuses a
        symlink."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise NetnsError(f"{path}: not a directory (a symlink?); refusing to hand it to "
                             f"{self.name}")
        os.chown(path, self.uid, self.gid, follow_symlinks=False)
        os.chmod(path, mode)

    def check_writable(self, path: Path) -> None:
        """Raises NetnsError unless this user can create files in `path` (every parent
        must be searchable by it)."""
        cp = run_cmd([*self.setpriv_argv(), "test", "-w", str(path), "-a", "-x", str(path)],
                     check=False)
        if cp.returncode != 0:
            raise NetnsError(f"{path}: user {self.name} (uid {self.uid}) cannot write here; a "
                             "parent directory is probably not searchable by others (o+x)")


VIEW_DIR = OWNER_DIR / "views"


class RunView:
    """The run folder as the run user's processes see it: a bind mount of it at
    /run/oppsched-netns/views/PREFIX-RUNID, so that they reach it whatever the modes of
    its parents (a 0700 home or pytest folder). Use as a context manager; unmounted at
    exit, and by cleanup_stale() after a runner killed with SIGKILL."""

    def __init__(self, run_name: str, target: Path):
        self.run_name = run_name
        self.target = Path(target)
        self.path = VIEW_DIR / run_name
        self._mounted = False

    def __enter__(self) -> "RunView":
        VIEW_DIR.mkdir(parents=True, exist_ok=True)
        for d in (OWNER_DIR, VIEW_DIR):
            os.chmod(d, 0o755)
        # The owner record first: a concurrent cleanup_stale leaves the view alone.
        data = {"pid": os.getpid(), "start": _proc_start_time(os.getpid())}
        self.path.with_suffix(".json").write_text(json.dumps(data))
        self.path.mkdir(exist_ok=True)
        run_cmd(["mount", "--bind", str(self.target), str(self.path)])
        self._mounted = True
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._mounted:
            _unmount_view(self.path)
            self._mounted = False


def _mounted(path: Path) -> bool:
    # Not os.path.ismount: a bind mount from the same file system looks like a directory.
    want = str(path).encode()
    with open("/proc/self/mountinfo", "rb") as f:
        return any(line.split()[4] == want for line in f)


def _unmount_view(path: Path) -> None:
    if _mounted(path):
        if run_cmd(["umount", str(path)], check=False).returncode != 0:
            run_cmd(["umount", "-l", str(path)], check=False)
    for p in (path, path.with_suffix(".json")):
        try:
            p.rmdir() if p == path else p.unlink()
        except OSError:
            pass


def _stale_views(prefix: str) -> list[Path]:
    out = []
    if VIEW_DIR.is_dir():
        for p in VIEW_DIR.iterdir():
            if p.suffix or not re.fullmatch(rf"{re.escape(prefix)}-[0-9a-f]{{6}}", p.name):
                continue
            try:
                data = json.loads(p.with_suffix(".json").read_text())
                alive = _proc_start_time(data["pid"]) == data["start"]
            except (OSError, ValueError, KeyError, TypeError):
                alive = False
            if not alive:
                out.append(p)
    return out


def invoking_user() -> tuple[int, int]:
    """(uid, gid) of who started the run: sudo's caller, or the real user."""
    try:
        return int(os.environ["SUDO_UID"]), int(os.environ["SUDO_GID"])
    except (KeyError, ValueError):
        return os.getuid(), os.getgid()


def hand_back(path: Path, uid: int, gid: int) -> None:
    """chown -R (never following symlinks) of a run folder to the invoking user."""
    path = Path(path)
    if not path.exists():
        return
    os.chown(path, uid, gid, follow_symlinks=False)
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            try:
                os.chown(os.path.join(root, n), uid, gid, follow_symlinks=False)
            except FileNotFoundError:
                pass


_FIFO_OK: dict[int, bool] = {}


def fifo_allowed(prio: int) -> bool:
    """Whether this machine grants SCHED_FIFO at `prio` (a container may have no real-time
    budget: the program then reports that it runs with normal scheduling, as before)."""
    if prio not in _FIFO_OK:
        _FIFO_OK[prio] = run_cmd(["chrt", "-f", str(prio), "true"], check=False).returncode == 0
    return _FIFO_OK[prio]


def new_run_id() -> str:
    return secrets.token_hex(3)


class Session:
    """Owns the namespaces, devices and processes of one run and always removes them.

    Use as a context manager. While open (main thread only), SIGTERM and SIGHUP raise
    SystemExit so that the ``with`` body unwinds and teardown runs; Ctrl-C does the same
    through KeyboardInterrupt. Teardown is idempotent and also registered with atexit.
    An owner file in /run/oppsched-netns tells :func:`cleanup_stale` that the run is alive.
    """

    def __init__(self, prefix: str = DEFAULT_PREFIX, run_id: str | None = None,
                 workdir: str | Path | None = None, *, handle_signals: bool = True,
                 run_user: RunUser | None = None):
        if not _PREFIX_RE.fullmatch(prefix):
            raise ValueError(f"prefix: {prefix!r} is not 1..24 letters, digits or _")
        run_id = run_id or new_run_id()
        if not _RUN_ID_RE.fullmatch(run_id):
            raise ValueError(f"run_id: {run_id!r} is not 6 lowercase hex digits")
        self.prefix = prefix
        self.run_id = run_id
        self.name = f"{prefix}-{run_id}"
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self.handle_signals = handle_signals
        # With a run user, spawned processes switch to it (spawn's `caps`, `as_root`), TUN
        # devices are created owned by it, and the workdir is its.
        self.run_user = run_user
        self.namespaces: list[Netns] = []
        self.tuns: list[tuple[Netns, str]] = []
        self.veths: list[tuple[Netns, str, Netns, str]] = []
        self.procs: list[Proc] = []
        self.teardown_errors: list[str] = []
        self.host_restored: list[str] = []  # host settings teardown put back
        self.host_changes: list[str] = []  # host settings this session changed
        self._started = False
        self._closed = False
        self._old_handlers: dict[int, Any] = {}
        self._before_teardown: list[Callable[[], None]] = []

    # -- life cycle --

    def __enter__(self) -> "Session":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        errors = self.teardown()
        if errors and exc_type is None:
            raise NetnsError(f"{self.name}: teardown incomplete: " + "; ".join(errors))

    def start(self) -> None:
        if self._started:
            return
        if not is_root():
            raise NetnsError("network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)")
        self._started = True
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        else:
            self.workdir.mkdir(parents=True, exist_ok=True)
        if self.run_user is not None:  # its processes write their stats and ready files here
            self.run_user.own(self.workdir, 0o755)
        OWNER_DIR.mkdir(parents=True, exist_ok=True)
        # What runs of this prefix killed with SIGKILL left behind goes first (their
        # processes died with them: PDEATHSIG; their namespaces and host changes did not).
        cleanup_stale(self.prefix)
        self._write_owner()
        atexit.register(self.teardown)
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            # SIGINT too: a runner started where SIGINT is ignored (a background job of a
            # script) would otherwise never tear down on `kill -INT`.
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, _frame):
        if signum == signal.SIGINT:
            raise KeyboardInterrupt  # Ctrl-C as usual: the caller's handlers see it
        raise SystemExit(128 + signum)

    def _owner_path(self) -> Path:
        return OWNER_DIR / f"{self.name}.json"

    def _write_owner(self) -> None:
        data = {"pid": os.getpid(), "start": _proc_start_time(os.getpid()),
                "namespaces": [n.name for n in self.namespaces], "workdir": str(self.workdir)}
        tmp = self._owner_path().with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self._owner_path())

    def on_teardown(self, fn: Callable[[], None]) -> None:
        """Registers fn to run first at teardown (e.g. to read a daemon's final stats)."""
        self._before_teardown.append(fn)

    # -- building blocks --

    def _check_open(self) -> None:
        if not self._started:
            raise NetnsError(f"{self.name}: session not started (use `with Session(...)`)")
        if self._closed:
            raise NetnsError(f"{self.name}: session already torn down")

    def add_netns(self, role: str) -> Netns:
        """Creates namespace PREFIX-RUNID-ROLE with its loopback up."""
        self._check_open()
        if not _ROLE_RE.fullmatch(role):
            raise ValueError(f"role: {role!r} is not 1..12 lowercase letters or digits")
        ns = Netns(f"{self.name}-{role}", self, role)
        if any(n.name == ns.name for n in self.namespaces):
            raise NetnsError(f"{ns.name}: namespace already in this session")
        run_cmd([IP, "netns", "add", ns.name])
        self.namespaces.append(ns)  # recorded before anything else can fail
        self._write_owner()
        ns.ip("link", "set", "dev", "lo", "up")
        return ns

    def add_veth(self, a: Netns, if_a: str, b: Netns, if_b: str, *, mtu: int | None = None,
                 up: bool = True) -> None:
        """A veth pair with one end in each namespace; never touches the host namespace."""
        self._check_open()
        for n in (if_a, if_b):
            if not _IFNAME_RE.fullmatch(n):
                raise ValueError(f"interface name: {n!r} is not 1..15 of [A-Za-z0-9_.]")
        # Keywords `name`/`dev` always: ip(8) takes a bare "b" for "broadcast".
        argv = [IP, "link", "add", "name", if_a, "netns", a.name]
        if mtu:
            argv += ["mtu", mtu]
        argv += ["type", "veth", "peer", "name", if_b, "netns", b.name]
        if mtu:
            argv += ["mtu", mtu]
        run_cmd(argv)
        self.veths.append((a, if_a, b, if_b))
        if up:
            a.ip("link", "set", "dev", if_a, "up")
            b.ip("link", "set", "dev", if_b, "up")

    def add_tun(self, ns: Netns, dev: str, *, mtu: int | None = None, up: bool = True) -> None:
        """A persistent TUN device (no packet-info header) for a daemon to attach to by name.
        With a run user it is that user's (`ip tuntap add ... user U group G`): a daemon
        running as it attaches with no capability at all."""
        self._check_open()
        if not _IFNAME_RE.fullmatch(dev):
            raise ValueError(f"interface name: {dev!r} is not 1..15 of [A-Za-z0-9_.]")
        owner = []
        if self.run_user is not None:
            owner = ["user", self.run_user.uid, "group", self.run_user.gid]
            if allow_tun_access(self.name):
                self.host_changes.append(f"{TUN_DEV}: mode 0666 for the run user (restored "
                                         "at the end)")
        ns.ip("tuntap", "add", "dev", dev, "mode", "tun", *owner)
        self.tuns.append((ns, dev))
        if mtu:
            ns.ip("link", "set", "dev", dev, "mtu", mtu)
        if up:
            ns.ip("link", "set", "dev", dev, "up")

    def spawn(self, ns: Netns, argv: Sequence[str], *, name: str,
              log: str | Path | None = None, env: dict[str, str] | None = None,
              caps: Sequence[str] = (), as_root: Sequence[str] | None = None,
              sched_fifo: int = 0, log_base: str | Path | None = None,
              stdout: int | None = None) -> Proc:
        """Starts argv inside ns, in a new process group, stdout+stderr to a log file
        (default WORKDIR/NAME.log). It is stopped at teardown if still running.

        The log is opened by root without following a symlink at any component below
        `log_base` (default: the log's folder; safefs): the folder is the run user's.
        `stdout` (a descriptor the caller opened, e.g. tcpdump's `-w -` savefile) takes
        the program's standard output instead of the log.

        With a run user the process runs as it, with exactly the capabilities `caps`
        (e.g. ("net_raw",)) and no_new_privs. as_root=CAPS leaves it root, with
        no_new_privs and its bounding set cut to CAPS: only for a program that switches
        user itself (tcpdump -Z USER: TCPDUMP_BOUNDING), under oppsched.testbed.capture_guard
        (the process this returns), which runs as the run user and stops the program when
        the runner dies. sched_fifo > 0 starts it
        with SCHED_FIFO at that priority (chrt, before the switch: no capability needed
        afterwards; its threads inherit it)."""
        self._check_open()
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", name):
            raise ValueError(f"name: {name!r} is not 1..64 of [A-Za-z0-9_.:-]")
        log_path = Path(log) if log is not None else self.workdir / f"{name}.log"
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env[RUN_ENV] = self.name
        argv = [str(a) for a in argv]
        prefix: list[str] = []
        if sched_fifo and fifo_allowed(int(sched_fifo)):
            prefix += ["chrt", "-f", str(int(sched_fifo))]
        if self.run_user is not None and as_root is not None:
            prefix += ["setpriv", "--no-new-privs", "--inh-caps", "-all", "--bounding-set",
                       "-all" + "".join(f",+{c}" for c in as_root), "--"]
            # Its own uid change clears PR_SET_PDEATHSIG: a guard (run user, PDEATHSIG)
            # passes the runner's death on to it (oppsched.testbed.capture_guard).
            prefix += [*parent_check(os.getpid()), sys.executable, "-m",
                       "oppsched.testbed.capture_guard", "--parent", str(os.getpid()),
                       "--uid", str(self.run_user.uid), "--gid", str(self.run_user.gid), "--"]
            pkg = str(Path(__file__).resolve().parents[2])
            full_env["PYTHONPATH"] = os.pathsep.join(
                [pkg, *([full_env["PYTHONPATH"]] if full_env.get("PYTHONPATH") else [])])
        elif self.run_user is not None:
            prefix += [*self.run_user.setpriv_argv(caps), *parent_check(os.getpid())]
            # root's HOME is not the run user's to read (GNU Radio reads ~/.gnuradio): a
            # home of its own in the workdir.
            home = self.workdir / "home"
            if not home.is_dir():
                self.run_user.own(home, 0o700)
            full_env.update({"HOME": str(home), "USER": self.run_user.name,
                             "LOGNAME": self.run_user.name})
        else:
            prefix += parent_check(os.getpid())
        # setpriv --pdeathsig: the kernel kills the process when the runner dies, even by
        # SIGKILL, when no teardown can run (PR_SET_PDEATHSIG survives the exec of
        # `ip netns exec`, which does not fork, and of the program); parent_check ends one
        # whose runner died before the signal was armed.
        with safefs.open_log(log_path, log_base) as logf:
            try:
                popen = subprocess.Popen([*PDEATHSIG, *ns.exec_argv([*prefix, *argv])],
                                         stdin=subprocess.DEVNULL,
                                         stdout=logf if stdout is None else stdout,
                                         stderr=logf if stdout is not None else subprocess.STDOUT,
                                         env=full_env,
                                         start_new_session=True, close_fds=True)
            except OSError as exc:
                raise NetnsError(f"{name}: cannot start `{_fmt(argv)}`: {exc}") from None
        p = Proc(name, ns, argv, popen, log_path)
        if sched_fifo and fifo_allowed(int(sched_fifo)):
            p.sched_fifo = int(sched_fifo)
        self.procs.append(p)
        return p

    # -- teardown --

    def teardown(self, grace: float = 3.0) -> list[str]:
        """Stops every process, deletes every device and namespace of the run.

        Safe to call more than once. Never raises for a step that fails: it goes on with
        the others and returns (and keeps in teardown_errors) what could not be removed.
        """
        if self._closed or not self._started:
            return self.teardown_errors
        self._closed = True
        # A second Ctrl-C or SIGTERM must not cut teardown short.
        in_main = threading.current_thread() is threading.main_thread()
        masked = {}
        if in_main:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                try:
                    masked[sig] = signal.signal(sig, signal.SIG_IGN)
                except (ValueError, OSError):
                    pass
        errors: list[str] = []
        try:
            for fn in self._before_teardown:
                try:
                    fn()
                except Exception as exc:  # noqa: BLE001 -- report and go on
                    errors.append(f"before-teardown hook: {exc}")
            # 1. Our processes, newest first, each by its process group: SIGTERM, then KILL.
            live = [p for p in reversed(self.procs) if p.running()]
            for p in live:
                _signal_proc(p.popen, signal.SIGTERM)
            deadline = time.monotonic() + grace
            for p in live:
                try:
                    p.popen.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            for p in reversed(self.procs):
                _signal_proc(p.popen, signal.SIGKILL)
                try:
                    p.popen.wait(5.0)
                except subprocess.TimeoutExpired:
                    errors.append(f"process {p.name} (pid {p.pid}) survived SIGKILL")
            # 2. Anything else still inside our namespaces or carrying our marker.
            errors += _kill_run_leftovers(self.name, [n.name for n in self.namespaces])
            # 3. TUN devices (deleting the namespace would do it; be explicit anyway).
            for ns, dev in reversed(self.tuns):
                run_cmd([IP, "-n", ns.name, "tuntap", "del", "dev", dev, "mode", "tun"],
                        check=False)
            # 4. Namespaces (veths go with them).
            for ns in reversed(self.namespaces):
                cp = run_cmd([IP, "netns", "del", ns.name], check=False)
                if cp.returncode != 0 and Path(f"/run/netns/{ns.name}").exists():
                    errors.append(f"cannot delete namespace {ns.name}: {cp.stderr.strip()}")
            # 5. Host settings this run changed and no other live run needs.
            try:
                self.host_restored = release_host_changes(self.name)
            except OSError as exc:
                errors.append(f"cannot restore host settings: {exc}")
            try:
                self._owner_path().unlink()
            except FileNotFoundError:
                pass
            if self._own_workdir and self.workdir is not None and not errors:
                shutil.rmtree(self.workdir, ignore_errors=True)
        finally:
            for sig, old in masked.items():
                signal.signal(sig, old)
            if in_main:
                for sig, old in self._old_handlers.items():
                    signal.signal(sig, old)
            self._old_handlers.clear()
            try:
                atexit.unregister(self.teardown)
            except Exception:  # noqa: BLE001
                pass
        self.teardown_errors = errors
        if errors:
            warnings.warn(f"{self.name}: teardown incomplete: " + "; ".join(errors))
        return errors


def _marked_pids(run_names: Iterable[str]) -> list[int]:
    """Pids whose environment carries RUN_ENV=<one of run_names>."""
    wanted = {f"{RUN_ENV}={r}".encode() for r in run_names}
    if not wanted:
        return []
    me = os.getpid()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes()
        except OSError:
            continue
        if any(item in wanted for item in env.split(b"\0")):
            found.append(int(d))
    return found


def _kill_run_leftovers(run_name: str, ns_names: Sequence[str]) -> list[str]:
    """SIGKILLs every process inside the namespaces or marked with the run; waits for them."""
    pids: set[int] = set(_marked_pids([run_name]))
    for n in ns_names:
        pids.update(Netns(n).pids())
    pids.discard(os.getpid())
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    errors = []
    deadline = time.monotonic() + 5.0
    for pid in pids:
        while Path(f"/proc/{pid}").exists():
            # Dead once a zombie; its parent (maybe a Popen of the caller's) reaps it.
            if _is_zombie(pid):
                break
            if time.monotonic() > deadline:
                errors.append(f"pid {pid} survived SIGKILL")
                break
            time.sleep(0.01)
    return errors


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def list_netns() -> list[str]:
    out = run_cmd([IP, "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _owner_alive(run_name: str) -> bool:
    try:
        data = json.loads((OWNER_DIR / f"{run_name}.json").read_text())
    except (OSError, ValueError):
        return False
    pid, start = data.get("pid"), data.get("start")
    return isinstance(pid, int) and start is not None and _proc_start_time(pid) == start


# ----------------------------------------------------------------------------------------
# Host settings a run has to change, restored when the last run that needs them ends

HOST_STATE = OWNER_DIR / "host-changes.json"
ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


class _HostLock:
    """An exclusive lock on the host-changes record (runs may share one machine)."""

    def __enter__(self):
        OWNER_DIR.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(OWNER_DIR / "host-changes.lock", os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)

    @staticmethod
    def read() -> dict:
        try:
            d = json.loads(HOST_STATE.read_text())
            return d if isinstance(d, dict) else {}
        except (OSError, ValueError):
            return {}

    @staticmethod
    def write(d: dict) -> None:
        tmp = HOST_STATE.with_suffix(".tmp")
        tmp.write_text(json.dumps(d))
        tmp.replace(HOST_STATE)


def allow_congestion_control(name: str, run_name: str) -> bool:
    """Adds `name` to the host's net.ipv4.tcp_allowed_congestion_control for run
    `run_name` if it is not there; returns True if this call added it. What runs added is
    recorded in /run/oppsched-netns, and release_host_changes() takes it out again once
    no live run needs it."""
    with _HostLock() as lock:
        state = lock.read()
        users = state.setdefault("allowed_cc", {})
        allowed = ALLOWED_CC.read_text().split()
        added = name not in allowed
        if added:
            ALLOWED_CC.write_text(" ".join(allowed + [name]))
            users[name] = []
        if name in users and run_name not in users[name]:
            users[name].append(run_name)
        lock.write(state)
    return added


TUN_DEV = Path("/dev/net/tun")


def allow_tun_access(run_name: str) -> bool:
    """Makes /dev/net/tun 0666 (Debian's udev default; some containers have 0600) for run
    `run_name`, so that a daemon running as the run user can attach to the TUN devices the
    run made its own; returns True if this call changed the mode. Recorded like
    allow_congestion_control and restored by release_host_changes()."""
    with _HostLock() as lock:
        state = lock.read()
        rec = state.get("tun_mode")
        mode = stat.S_IMODE(os.stat(TUN_DEV).st_mode)
        changed = mode & 0o006 != 0o006
        if changed:
            os.chmod(TUN_DEV, mode | 0o666)
            rec = state["tun_mode"] = {"mode": mode, "runs": []}
        if rec is not None and run_name not in rec["runs"]:
            rec["runs"].append(run_name)
        lock.write(state)
    return changed


def release_host_changes(run_name: str) -> list[str]:
    """The run no longer needs what it changed on the host: each setting no live run needs
    any more is restored. Returns what was restored."""
    restored = []
    with _HostLock() as lock:
        state = lock.read()
        users = state.get("allowed_cc", {})
        for name in list(users):
            users[name] = [r for r in users[name] if r != run_name and _owner_alive(r)]
            if not users[name]:
                allowed = ALLOWED_CC.read_text().split()
                if name in allowed:
                    ALLOWED_CC.write_text(" ".join(a for a in allowed if a != name))
                    restored.append(f"removed {name} from the host's "
                                    "net.ipv4.tcp_allowed_congestion_control")
                del users[name]
        rec = state.get("tun_mode")
        if rec is not None:
            rec["runs"] = [r for r in rec["runs"] if r != run_name and _owner_alive(r)]
            if not rec["runs"]:
                os.chmod(TUN_DEV, rec["mode"])
                restored.append(f"{TUN_DEV} back to mode {rec['mode']:04o}")
                del state["tun_mode"]
        lock.write(state)
    return restored


def cleanup_stale(prefix: str = DEFAULT_PREFIX, *, force: bool = False) -> list[str]:
    """Removes namespaces (and their processes and devices) of crashed runs of `prefix`.

    A run is stale when its owner process (recorded in /run/oppsched-netns) is gone; a live
    run is left alone unless force=True. Also kills processes that carry a stale run's
    marker but have left its namespaces. Returns the namespaces removed.
    """
    if not _PREFIX_RE.fullmatch(prefix):
        raise ValueError(f"prefix: {prefix!r} is not 1..24 letters, digits or _")
    if not is_root():
        raise NetnsError("cleanup_stale needs root")
    pat = re.compile(rf"({re.escape(prefix)}-[0-9a-f]{{6}})-[a-z0-9]+")
    runs: dict[str, list[str]] = {}
    for name in list_netns():
        m = pat.fullmatch(name)
        if m:
            runs.setdefault(m.group(1), []).append(name)
    # Owner files whose namespaces are all gone may still have marked processes.
    if OWNER_DIR.is_dir():
        for f in OWNER_DIR.glob(f"{prefix}-*.json"):
            if re.fullmatch(rf"{re.escape(prefix)}-[0-9a-f]{{6}}", f.stem):
                runs.setdefault(f.stem, [])
    for view in _stale_views(prefix):
        _unmount_view(view)
    removed = []
    for run_name, names in sorted(runs.items()):
        if not force and _owner_alive(run_name):
            continue
        _kill_run_leftovers(run_name, names)
        release_host_changes(run_name)
        for n in names:
            cp = run_cmd([IP, "netns", "del", n], check=False)
            if cp.returncode == 0:
                removed.append(n)
        try:
            (OWNER_DIR / f"{run_name}.json").unlink()
        except FileNotFoundError:
            pass
    return removed
