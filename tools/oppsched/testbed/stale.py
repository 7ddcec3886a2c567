"""Cleanup after runs killed with SIGKILL: the processes marked with a run
(RUN_ENV) or inside its namespaces, the namespaces, the run folder views and the host
settings of runs whose owner process is gone (:func:`cleanup_stale`). Session's teardown
kills its own leftovers with the same :func:`_kill_run_leftovers`."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Iterable, Sequence

from oppsched.testbed.hostchanges import release_host_changes
from oppsched.testbed.namespace import Netns
from oppsched.testbed.nsbase import (DEFAULT_PREFIX, IP, OWNER_DIR, RUN_ENV, _PREFIX_RE,
                                     NetnsError, _owner_alive, is_root, run_cmd)
from oppsched.testbed.runview import _stale_views, _unmount_view

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
