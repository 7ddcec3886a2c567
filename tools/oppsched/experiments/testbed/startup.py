"""Starting a testbed run: every program checks its configuration file before any
namespace exists (:func:`preflight`), and the waits for each process to be ready (its
endpoints bound, a line in its log, pings crossing the radio), each checked, never slept
on."""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from oppsched.config import read_yaml
from oppsched.experiments.testbed.processes import ProcTable
from oppsched.experiments.testbed.programs import TestbedError, phy_env
from oppsched.testbed.nsbase import wait_for
from oppsched.testbed.privsep import RunUser

def _wait_files(paths, what: str, timeout: float, procs: ProcTable, alive) -> None:
    def probe():
        procs.check_alive(alive)
        return all(Path(p).exists() for p in paths)
    wait_for(probe, timeout=timeout, what=what)


def _wait_log(proc, text: str, what: str, timeout: float) -> None:
    def probe():
        proc.check_alive()
        try:
            return text in proc.log_path.read_text(errors="replace")
        except OSError:
            return False
    wait_for(probe, timeout=timeout, what=what)


def _wait_radio(tb, timeout: float, procs: ProcTable, alive) -> float:
    """Pings every client (each family) from every server until each has answered once:
    proof that slots are granted, decoded and acknowledged end to end, and it fills the
    servers' neighbour caches. Returns the seconds it took."""
    t0 = time.monotonic()
    addrs = [c.addr4 for c in tb.clients if c.addr4] + [c.addr6 for c in tb.clients if c.addr6]
    todo = {(i, a) for i in range(len(tb.servers)) for a in addrs}
    deadline = t0 + timeout
    while todo:
        procs.check_alive(alive)
        if time.monotonic() > deadline:
            pairs = ", ".join(f"{tb.servers[i].name} -> {a}" for i, a in sorted(todo))
            raise TestbedError(f"radio not ready after {timeout:g} s: no ping reply for {pairs} "
                               "(see logs/apd.log, logs/phy.log, logs/client.*.log)")
        by_srv: dict[int, list[str]] = {}
        for i, a in todo:
            by_srv.setdefault(i, []).append(a)
        with ThreadPoolExecutor(max_workers=len(by_srv)) as pool:
            res = list(pool.map(lambda kv: (kv[0], tb.servers[kv[0]].ns.ping_many(
                kv[1], count=1, timeout=1.0)), by_srv.items()))
        for i, r in res:
            for a, rtts in r.items():
                if rtts and rtts[0] is not None:
                    todo.discard((i, a))
    return time.monotonic() - t0


def _phy_rt_priority(path) -> int:
    """timing.rt_priority of the PHY's file (0 if absent)."""
    doc = read_yaml(path) or {}
    return int(((doc.get("timing") or {}).get("rt_priority")) or 0)


def preflight(cfg: dict, progs: dict, files: dict, wrc_files: dict | None = None,
              run_user: RunUser | None = None, home: Path | None = None) -> None:
    """Every program validates its file (`--check`: parse and validate, open nothing)
    before any namespace exists, so a bad value fails in a second with the program's own
    message naming the field (docs/daemons.md: exit status 2). With run_user, as that
    user (HOME=home): a program or file it cannot reach fails here too."""
    prefix = run_user.setpriv_argv() if run_user is not None else []
    user_env = {"HOME": str(home), "USER": run_user.name} if run_user is not None else {}
    jobs = [("oppsched-apd", [str(progs["apd"])], files["apd"], None)]
    jobs += [("oppsched-client", [str(progs["client"])], f, None)
             for k, f in files.items() if k.startswith("client.")]
    jobs.append(("phy", [str(a) for a in progs["phy"]], files["phy"], phy_env(cfg)))
    for snd, rcv in (wrc_files or {}).values():
        jobs += [("oppsched-wrc send", [str(progs["wrc"]), "send"], snd, None),
                 ("oppsched-wrc recv", [str(progs["wrc"]), "recv"], rcv, None)]
    for name, argv, f, env in jobs:
        cp = subprocess.run([*prefix, *argv, "--config", str(f), "--check"],
                            capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {}), **user_env})
        if cp.returncode != 0:
            msg = (cp.stderr.strip() or cp.stdout.strip()).splitlines()
            raise TestbedError(f"{name} rejects {Path(f).name} (exit {cp.returncode}): "
                               + (" | ".join(msg[-5:]) if msg else "no message"))
