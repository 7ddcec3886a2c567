"""The Session of a run: the namespaces, devices and processes it creates, with guaranteed
teardown.

A :class:`Session` owns everything one run creates -- namespaces (named
``PREFIX-RUNID-ROLE``), veth pairs and TUN devices inside them, and processes started in
them -- and removes all of it on exit: normal return, exception, Ctrl-C, SIGTERM/SIGHUP
(turned into SystemExit while the session is open) and, as a last resort, atexit.

The parts it is built from:

    nsbase       NetnsError, run_cmd, wait_for (readiness by checking, never by sleeping),
                 the run's names and owner records
    nsenter      entering a namespace from one thread (sockets, ethtool ioctls)
    namespace    Netns (one namespace: commands, links, ports, pings) and Proc
    privsep      the run user, its privilege drop and the processes' start prefixes
    runview      the run folder as the run user sees it (a bind mount)
    hostchanges  host settings a run changes, restored when no live run needs them
    stale        cleanup_stale(): what a run killed with SIGKILL left behind

The testbed built from them (servers behind wired paths, the AP, the clients) is
oppsched.testbed.wired's :class:`Topology` and :class:`Testbed`.

Everything here needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN): see nsbase.is_root.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

from oppsched import safefs
from oppsched.testbed.hostchanges import TUN_DEV, allow_tun_access, release_host_changes
from oppsched.testbed.namespace import Netns, Proc, _signal_proc
from oppsched.testbed.nsbase import (DEFAULT_PREFIX, IP, OWNER_DIR, RUN_ENV, _PREFIX_RE,
                                     NetnsError, _fmt, _proc_start_time, is_root,
                                     new_run_id, run_cmd)
from oppsched.testbed.privsep import PDEATHSIG, RunUser, fifo_allowed, parent_check
from oppsched.testbed.stale import _kill_run_leftovers, cleanup_stale

_ROLE_RE = re.compile(r"[a-z0-9]{1,12}")
_RUN_ID_RE = re.compile(r"[0-9a-f]{6}")
_IFNAME_RE = re.compile(r"[A-Za-z0-9_.]{1,15}")


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
