"""Runs a program that switches user itself (tcpdump -Z USER) so that it still dies with
the runner.

PR_SET_PDEATHSIG is cleared when a process changes its uid, so tcpdump, once it has
switched to the run user, would outlive a runner killed with SIGKILL. This guard starts
the program (as root: it opens the capture), then switches to the run user itself, sets
PR_SET_PDEATHSIG(SIGTERM) and no_new_privs, and waits: when its parent (the runner) dies,
or when it is asked to stop, it passes the signal on to the program (which by then runs as
the same user, so may be signalled) and exits with the program's status.

    python -m oppsched.testbed.capture_guard [--parent PID] --uid U --gid G -- PROGRAM ARGS...

Standard library only: it starts in tens of ms.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oppsched.testbed.capture_guard")
    ap.add_argument("--uid", type=int, required=True)
    ap.add_argument("--gid", type=int, required=True)
    ap.add_argument("--parent", type=int, default=0,
                    help="the runner's pid (default: this process's parent at start)")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    prog = a.program[1:] if a.program[:1] == ["--"] else a.program
    if not prog:
        ap.error("no program given")
    if a.uid == 0:
        ap.error("--uid: 0 is root; the guard is there to run as an unprivileged user")
    parent = a.parent or os.getppid()
    pending: list[int] = []

    def on_signal(signum, _frame):
        pending.append(signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    libc = ctypes.CDLL(None, use_errno=True)
    # SIGTERM rather than the runner's SIGKILL from here on: a runner that dies while the
    # program starts is passed on to the program instead of killing the guard and leaving
    # the program behind.
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:
        return 125  # the runner is gone already: nothing to start
    child = subprocess.Popen(prog)
    os.setgroups([])
    os.setresgid(a.gid, a.gid, a.gid)
    os.setresuid(a.uid, a.uid, a.uid)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # the runner died before PDEATHSIG was armed
        pending.append(signal.SIGTERM)
    while True:
        if pending:
            _pass_on(child, pending[-1])
            break
        try:
            return _status(child.wait(0.2))
        except subprocess.TimeoutExpired:
            continue
    try:
        return _status(child.wait(10))
    except subprocess.TimeoutExpired:
        _pass_on(child, signal.SIGKILL)
        return _status(child.wait())


def _pass_on(child: subprocess.Popen, sig: int) -> None:
    """Signals the program; until it has switched to our user that is not allowed yet
    (EPERM): retried for a few seconds."""
    deadline = time.monotonic() + 5.0
    while child.poll() is None:
        try:
            child.send_signal(sig)
            return
        except PermissionError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)


def _status(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
