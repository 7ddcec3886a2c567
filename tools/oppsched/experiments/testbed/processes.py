"""The processes of a testbed run as the runner keeps account of them: their CPU seconds
(/proc, and wait4's rusage once they end), their exit codes, and :class:`ProcTable`, the
table processes.json is written from; :class:`HostNs`, for a process started in the root
network namespace."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from oppsched.experiments.testbed.programs import TestbedError
from oppsched.experiments.testbed.reliability import exit_meaning

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float | None:
    """utime + stime of a live process (/proc/PID/stat fields 14 and 15), seconds, with its
    live children's (a program under oppsched.testbed.capture_guard is the guard's child)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    total = (int(fields[11]) + int(fields[12])) / CLK_TCK
    try:
        kids = [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
                for c in (t / "children").read_text().split()]
    except OSError:
        kids = []
    for k in kids:
        total += proc_cpu_s(k) or 0.0
    return total


def reap(proc) -> tuple[int, float] | None:
    """If `proc` (a namespace.Proc we started) has exited, reaps it with wait4 and returns
    (exit code, CPU seconds from its rusage); None while it runs. Sets the Popen's
    returncode, so the Session sees it as finished."""
    if proc.popen.returncode is not None:
        return None
    try:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if pid == 0:
        return None
    rc = os.waitstatus_to_exitcode(status)
    proc.popen.returncode = rc
    return rc, ru.ru_utime + ru.ru_stime


class ProcTable:
    """Every process of the run, with its role, CPU and exit code, for processes.json."""

    def __init__(self):
        self.rows: dict[str, dict] = {}
        self.procs: dict[str, object] = {}

    def add(self, proc, role: str) -> None:
        self.procs[proc.name] = proc
        self.rows[proc.name] = {"name": proc.name, "role": role, "pid": proc.pid,
                                "netns": proc.ns.name, "argv": proc.argv,
                                "sched_fifo": getattr(proc, "sched_fifo", 0),
                                "log": str(proc.log_path) if proc.log_path else None,
                                "cpu_s_before_stop": None, "cpu_s": None, "exit_code": None,
                                "started_mono_s": time.monotonic(), "ended_mono_s": None}

    def poll(self, name: str) -> bool:
        """True if the process has ended (and is now recorded)."""
        r = reap(self.procs[name])
        if r is not None:
            self.rows[name]["exit_code"], self.rows[name]["cpu_s"] = r
            self.rows[name]["ended_mono_s"] = time.monotonic()
            if self.rows[name]["cpu_s_before_stop"] is None:
                self.rows[name]["cpu_s_before_stop"] = r[1]
            return True
        return self.procs[name].popen.returncode is not None

    def wait(self, name: str, timeout: float) -> bool:
        """Waits up to `timeout` s for the process to end by itself; True if it did."""
        deadline = time.monotonic() + timeout
        while not self.poll(name):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def sample(self, name: str) -> None:
        """CPU now, before the process is stopped (the figure the report uses)."""
        c = proc_cpu_s(self.procs[name].pid)
        if c is not None and self.procs[name].popen.returncode is None:
            self.rows[name]["cpu_s_before_stop"] = c

    def stop(self, name: str, timeout: float, sig: int = signal.SIGTERM) -> int | None:
        """Samples CPU, sends `sig`, waits up to `timeout` s for a clean exit (reaping it
        with its rusage), then SIGKILL. Returns the exit code."""
        p = self.procs[name]
        if self.poll(name):
            return self.rows[name]["exit_code"]
        self.sample(name)
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.poll(name):
                return self.rows[name]["exit_code"]
            time.sleep(0.01)
        self.rows[name]["killed"] = True
        p.stop(0.5)  # SIGTERM + SIGKILL to the group, waits
        self.poll(name)
        if self.rows[name]["exit_code"] is None:
            self.rows[name]["exit_code"] = p.popen.returncode
            self.rows[name]["ended_mono_s"] = time.monotonic()
        return self.rows[name]["exit_code"]

    def stop_all(self, names, timeout: float, sig: int = signal.SIGTERM) -> dict:
        """stop() of several processes at once: each is signalled before any is waited
        for, so peers (the captures, the clients) stop in the time of the slowest, not of
        their sum. Returns each one's exit code."""
        names = list(names)
        for name in names:
            if not self.poll(name):
                self.sample(name)
                try:
                    os.kill(self.procs[name].pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all(self.poll(n) for n in names):
            time.sleep(0.01)
        # those still running: stop() kills them (SIGTERM and SIGKILL to the group)
        return {n: self.stop(n, 0.0, sig) for n in names}

    def check_alive(self, names) -> None:
        for n in names:
            if self.poll(n):
                p = self.procs[n]
                code = self.rows[n]['exit_code']
                raise TestbedError(f"{n} exited with {code}{exit_meaning(n, code)} during the "
                                   "run" + (f":\n{p.log_tail()}" if p.log_tail() else ""))

    def to_json(self) -> list[dict]:
        return list(self.rows.values())



class HostNs:
    """The root network namespace, for Session.spawn: the command runs as it is (the
    Session still owns the process: its group is stopped at teardown, and it carries the
    run's marker, which teardown's leftover sweep also kills)."""

    name = "root"

    def exec_argv(self, argv) -> list[str]:
        return [str(a) for a in argv]
