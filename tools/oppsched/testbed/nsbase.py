"""What the namespace modules of a run share: the error they raise, running a host command,
waiting for something to be ready, and the run's names and owner records.

A run is named ``PREFIX-RUNID`` (:func:`new_run_id`); its owner file in
``/run/oppsched-netns`` (:data:`OWNER_DIR`) records the runner's pid and start time, which
tells a live run from one killed with SIGKILL (:func:`_owner_alive`). Every process a
Session starts carries :data:`RUN_ENV` in its environment.

:func:`wait_for` waits for things to be ready by checking (ports listening, links up, files
written), never by sleeping a fixed time.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Sequence

DEFAULT_PREFIX = "oppsched"
OWNER_DIR = Path("/run/oppsched-netns")  # tmpfs: gone after a reboot, like the namespaces
RUN_ENV = "OPPSCHED_NETNS_RUN"  # set in every process a Session starts: finds escapees
IP = shutil.which("ip") or "/usr/sbin/ip"
TC = shutil.which("tc") or "/usr/sbin/tc"

_PREFIX_RE = re.compile(r"[A-Za-z0-9_]{1,24}")


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



def _proc_start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks): tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[19])


def _owner_alive(run_name: str) -> bool:
    try:
        data = json.loads((OWNER_DIR / f"{run_name}.json").read_text())
    except (OSError, ValueError):
        return False
    pid, start = data.get("pid"), data.get("start")
    return isinstance(pid, int) and start is not None and _proc_start_time(pid) == start



def new_run_id() -> str:
    return secrets.token_hex(3)
