"""What a testbed run does so that nothing is lost without a record (docs/testbed.md,
"Reliability"): the runner's watchdog over the apd's slot requests, the apd restart fault,
the meaning of the daemons' exit statuses, and the conservation balance in summary.json."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from oppsched.config import read_yaml
from oppsched.experiments.testbed.programs import TestbedError
from oppsched.experiments.testbed.traces import PARTIAL, recover

# oppsched-apd's exit statuses (host/daemon/apd/main.cc) and what they mean.
APD_EXIT_WATCHDOG = 4
APD_EXIT_CLIENT_WATCHDOG = 5
EXIT_MEANINGS = {
    "apd": {1: "a runtime error", 2: "its configuration was refused",
            APD_EXIT_WATCHDOG: "its watchdog fired: no slot_request for watchdog.slots slots "
                               "(the PHY is hung or gone)",
            APD_EXIT_CLIENT_WATCHDOG: "its client watchdog fired: a client sent nothing on the "
                                      "uplink for watchdog.client_slots slot requests (the "
                                      "client is hung or gone; its log names it)"},
}
SECCOMP_KILL = ("killed by SIGSYS: a system call outside its seccomp allow-list "
                "(docs/security.md; the kernel's audit log names it; security.seccomp: false "
                "to debug)")

# The apd's files that a restarted apd would overwrite: kept under these names.
KILLED_SUFFIX = "killed"


def exit_meaning(name: str, code) -> str:
    """' (what the status means)' for a daemon's exit status, or ''. A negative status is
    the signal that ended it (Popen's convention; 128 + N from a shell)."""
    role = name.split(".")[0]
    what = EXIT_MEANINGS.get(role, {}).get(code)
    if what is None and isinstance(code, int) and (code < 0 or 128 < code < 128 + 65):
        sig = -code if code < 0 else code - 128
        if sig == signal.SIGSYS:
            what = SECCOMP_KILL
        else:
            try:
                what = f"killed by {signal.Signals(sig).name}"
            except ValueError:
                what = f"killed by signal {sig}"
    return f" ({what})" if what else ""


def _requests(stats_path: Path):
    """core.slots.requests of the apd's stats file, or None while it is absent or being
    replaced."""
    try:
        s = json.loads(Path(stats_path).read_text())
        return int(s["core"]["slots"]["requests"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class RunnerWatchdog:
    """Fails the run when the apd's slot requests stop advancing in its stats file for
    watchdog.slots slots plus two stats periods: the PHY hung (the apd's own watchdog also
    fires then) or the apd itself hung (its stats are no longer written). Armed once the count
    has advanced once, so a slow start-up is the start-up timeout's business."""

    def __init__(self, stats_path: Path, slot_s: float, slots: int, period_s: float):
        self.path = Path(stats_path)
        self.limit_s = slots * slot_s + 2 * period_s + 1.0 if slots > 0 else None
        self.slots = slots
        self.last = None
        self.since = None
        self.armed = False
        self.next_check = 0.0

    def reset(self) -> None:
        """After the apd was restarted on purpose: wait for the new one to advance."""
        self.last = self.since = None
        self.armed = False

    def check(self, now: float) -> None:
        if self.limit_s is None or now < self.next_check:
            return
        self.next_check = now + 0.5
        n = _requests(self.path)
        if n is None:
            return
        if n != self.last:
            self.armed = self.armed or self.last is not None
            self.last, self.since = n, now
            return
        if self.armed and now - self.since > self.limit_s:
            raise TestbedError(
                f"watchdog: the apd's slot requests stayed at {n} for {now - self.since:.1f} s "
                f"(watchdog.slots {self.slots} plus two stats periods): the PHY or the apd "
                f"is hung")


def _tun_packets_read(ns, tun: str):
    """Packets the kernel handed to the TUN's reader (its tx counter), or None."""
    try:
        return int(json.loads(ns.ip("-s", "-j", "link", "show", tun))[0]["stats64"]["tx"]
                   ["packets"])
    except Exception:  # noqa: BLE001 -- a figure for the record, not a condition of the run
        return None


def restart_apd(procs, spawn, ns, argv, rundir: Path, timeout: float, tun: str = "radio0") -> dict:
    """The restart fault: SIGKILL the apd (no chance to write anything), keep the files the
    new one would overwrite under *.killed.* names, start it again with the same
    configuration (a new MAC session, pdu.h) and wait until it runs. Returns what happened,
    for run.json."""
    rundir = Path(rundir)
    old = procs.procs["apd"]
    t_kill = time.monotonic()
    try:
        os.killpg(old.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    procs.wait("apd", 5.0)
    # Every packet the killed apd read from the TUN (none after its death, and the new one
    # has not started): against its last stats, the packets it took without a record.
    tun_read = _tun_packets_read(ns, tun)
    row = procs.rows.pop("apd")
    procs.procs[f"apd.{KILLED_SUFFIX}"] = procs.procs.pop("apd")
    row["name"] = f"apd.{KILLED_SUFFIX}"
    row["killed_by_fault"] = True
    procs.rows[row["name"]] = row
    kept = []
    truncated = []
    for name in ("apd.stats.json", "slots.csv", "packets.csv", "medium.csv", "mac-ap.pcap"):
        stem, ext = name.split(".", 1)  # apd.killed.stats.json, slots.killed.csv, ...
        dest = rundir / f"{stem}.{KILLED_SUFFIX}.{ext}"
        p = rundir / name
        partial = rundir / (name + PARTIAL)  # a trace of the killed apd (traces.py)
        if partial.exists():
            truncated.append(recover(partial, dest))
            kept.append(dest.name)
        elif p.exists():
            p.replace(dest)
            kept.append(dest.name)
    log = Path(old.log_path) if old.log_path else None
    if log is not None and log.exists():  # the new apd's log would replace it
        log.replace(log.with_name(f"apd.{KILLED_SUFFIX}.log"))
        row["log"] = str(log.with_name(f"apd.{KILLED_SUFFIX}.log"))
        kept.append(f"logs/apd.{KILLED_SUFFIX}.log")
    new = spawn(ns, argv, "apd", "apd")
    deadline = time.monotonic() + timeout
    while "users on" not in (new.log_tail(50) or ""):
        if procs.poll("apd"):
            raise TestbedError(f"the restarted apd exited with {procs.rows['apd']['exit_code']}"
                               + exit_meaning("apd", procs.rows["apd"]["exit_code"]))
        if time.monotonic() > deadline:
            raise TestbedError(f"the restarted apd did not start within {timeout:g} s")
        time.sleep(0.02)
    return {"fault": "apd_restart", "killed_pid": old.pid, "new_pid": new.pid,
            "down_s": time.monotonic() - t_kill, "kept": kept, "tun_packets_read": tun_read,
            "truncated_traces": truncated}


# ----------------------------------------------------------------------------------------
# Conservation (summary.json "conservation"; host/include/oppsched/packet_ledger.h)

QUEUE_CAUSES = ("overflow", "early_drop", "aqm_drop", "superseded_ack", "evicted_low_priority",
                "evicted_las", "flushed")
HARQ_CAUSES = ("harq_max_tx", "harq_timeout", "harq_flush", "rejected")
CLIENT_CAUSES = ("dropped_incomplete", "dropped_timeout", "dropped_memory", "dropped_restart",
                 "dropped_late", "dropped_late_perhaps")


def _balance(apd: dict) -> dict | None:
    """The AP's balance from one apd stats file: offered = delivered + dropped (by cause) +
    queued + in flight; `unaccounted` must be 0."""
    core = apd.get("core") or {}
    c = core.get("conservation")
    if not c:
        return None
    qd = core.get("queue_drops") or {}
    dropped = {k: int(qd.get(k, 0)) for k in QUEUE_CAUSES}
    dropped.update({k: int((c.get("dropped") or {}).get(k, 0)) for k in HARQ_CAUSES})
    out = {"offered": int(c.get("offered", 0)), "delivered": int(c.get("delivered", 0)),
           "dropped": dropped, "dropped_total": sum(dropped.values()),
           "queued": int(c.get("queued", 0)), "in_flight": int(c.get("in_flight", 0))}
    out["unaccounted"] = int(c.get("unaccounted", out["offered"] - out["delivered"]
                                   - out["dropped_total"] - out["queued"] - out["in_flight"]))
    return out


def _trace_balance(path: Path, errors: list) -> dict | None:
    """The same law from packets.csv: each enqueued packet has one deliver or drop row at
    most; `multiple_fates` must be 0, `pending` equals queued + in flight at the end."""
    if not path.exists():
        return None
    import pandas as pd
    try:
        df = pd.read_csv(path, usecols=["event", "packet_id", "reason"])
    except (OSError, ValueError, pd.errors.EmptyDataError) as exc:
        errors.append(f"{path.name}: {type(exc).__name__}: {exc}")
        return None
    enq = set(df.loc[df.event == "enqueue", "packet_id"])
    ends = df[df.event.isin(["deliver", "drop"]) & df.packet_id.isin(enq)]
    counts = ends.packet_id.value_counts()
    drops = ends[ends.event == "drop"]
    return {"offered": len(enq), "delivered": int((ends.event == "deliver").sum()),
            "dropped": {str(k): int(v) for k, v in drops.reason.fillna("").value_counts().items()},
            "drops_without_cause": int((drops.reason.fillna("") == "").sum()),
            "multiple_fates": int((counts > 1).sum()),
            "pending": len(enq) - int(counts.size)}


def conservation_summary(rundir: Path, stats: dict, errors: list) -> dict:
    """summary.json "conservation": per apd instance (the one that ran to the end, and one
    killed by the restart fault, whose figures are those of its last stats write), from the
    stats and from packets.csv, plus the clients' reassembly losses by cause and their
    session restarts. A non-zero `unaccounted` or `multiple_fates` is an error of the run."""
    rundir = Path(rundir)
    out = {"apd": None, "apd_killed": None, "trace": None, "trace_killed": None, "clients": {}}
    if stats.get("apd"):
        out["apd"] = _balance(stats["apd"])
    killed = rundir / f"apd.{KILLED_SUFFIX}.stats.json"
    if killed.exists():
        try:
            ks = json.loads(killed.read_text())
            out["apd_killed"] = _balance(ks)
        except (OSError, ValueError) as exc:
            errors.append(f"{killed.name}: {type(exc).__name__}: {exc}")
        else:
            # What it read from the TUN after its last stats write went with it unrecorded
            # (lost, or delivered in its last moments): counted here, not individually.
            read = None
            try:
                run = json.loads((rundir / "run.json").read_text())
                read = next((f.get("tun_packets_read") for f in run.get("faults") or []
                             if f.get("fault") == "apd_restart"), None)
            except (OSError, ValueError):
                pass
            if out["apd_killed"] is not None:
                seen = int(((ks.get("core") or {}).get("downlink") or {}).get("packets", 0))
                out["apd_killed"]["tun_packets_read"] = read
                out["apd_killed"]["read_after_last_stats"] = (read - seen if read is not None
                                                              else None)
    out["trace"] = _trace_balance(rundir / "packets.csv", errors)
    out["trace_killed"] = _trace_balance(rundir / f"packets.{KILLED_SUFFIX}.csv", errors)
    for name, s in stats.items():
        if not name.startswith("client."):
            continue
        ra = s.get("reassembly") or {}
        out["clients"][name.split(".", 1)[1]] = {
            "delivered": int(ra.get("delivered", 0)),
            "dropped": {k: int(ra.get(k, 0)) for k in CLIENT_CAUSES},
            "session_restarts": int(ra.get("session_restarts", 0)),
            "far_ahead": int(ra.get("far_ahead", 0)),
            "duplicates": int(ra.get("duplicates", 0)),
            "tbs_late": int(ra.get("tbs_late", 0))}
    b = out["apd"]
    if b is not None and b["unaccounted"] != 0:
        errors.append(f"conservation: {b['unaccounted']} packet(s) offered at the AP left "
                      f"without a record (apd.stats.json core.conservation)")
    t = out["trace"]
    if t is not None and (t["multiple_fates"] or t["drops_without_cause"]):
        errors.append(f"conservation: packets.csv gives {t['multiple_fates']} packet(s) more "
                      f"than one fate and {t['drops_without_cause']} drop(s) no cause")
    return out


# ----------------------------------------------------------------------------------------
# Chaos (faults.chaos): oppsched.testbed.chaos between the PHY and the daemons

def chaos_config(cfg: dict, lay, phy_yaml: Path) -> Path:
    """Writes chaos.yaml (oppsched/testbed/chaos.py) with one link per PHY-daemon message stream
    (slot requests, grants, each client's rx) and points phy.yaml at the proxy's endpoints,
    so that every message between the PHY and the daemons crosses it. Returns chaos.yaml."""
    import yaml
    if cfg["phy"]["mode"] != "abstract":
        raise TestbedError(f"faults.chaos.enabled: the proxy is for phy.mode abstract, not "
                           f"{cfg['phy']['mode']!r}")
    c = cfg["faults"]["chaos"]
    ep = lay.endpoints
    z = lay.zmq_dir
    links = [{"name": "requests", "pull": {"bind": f"ipc://{z}/c_req"},
              "push": {"connect": ep["phy_requests"]}},
             {"name": "grants", "pull": {"connect": ep["phy_grants"]},
              "push": {"bind": f"ipc://{z}/c_grant"}}]
    phy = read_yaml(phy_yaml)
    phy["endpoints"] = {"phy_requests": f"ipc://{z}/c_req", "phy_grants": f"ipc://{z}/c_grant"}
    for u in phy["users"]:
        links.append({"name": f"rx_{u['id']}", "pull": {"bind": f"ipc://{z}/c_rx{u['id']}"},
                      "push": {"connect": u["rx"]}})
        u["rx"] = f"ipc://{z}/c_rx{u['id']}"
    tmp = Path(phy_yaml).with_suffix(".tmp")
    tmp.write_text("# written by oppsched run (tools/oppsched/testbed/daemonconf.py; endpoints through "
                   "the chaos proxy, reliability.py)\n" + yaml.safe_dump(phy, sort_keys=False))
    os.replace(tmp, phy_yaml)
    conf = {"seed": c["seed"], "drop": c["drop"], "duplicate": c["duplicate"],
            "reorder": c["reorder"], "delay": c["delay"], "delay_ms": c["delay_ms"],
            "forge": c["forge"],
            "stats": str(lay.rundir / "chaos.stats.json"), "links": links}
    if c.get("record"):
        conf["record"] = str(lay.rundir / "chaos.recorded.jsonl")
    if c.get("replay_from"):
        # A copy in the run folder, read by the proxy (the run user's) from there.
        src = Path(c["replay_from"]).read_text()
        (lay.rundir / "chaos.replay.jsonl").write_text(src)
        conf["replay"] = str(lay.rundir / "chaos.replay.jsonl")
        conf["replay_p"] = c["replay"]
    path = lay.rundir / "chaos.yaml"
    path.write_text(yaml.safe_dump(conf, sort_keys=False))
    return path


def chaos_bound(lay, phy_yaml: Path) -> list[Path]:
    """The ipc files the proxy binds (the runner waits for them before starting the PHY)."""
    phy = read_yaml(phy_yaml)
    names = ["c_req", "c_grant"] + [f"c_rx{u['id']}" for u in phy["users"]]
    return [Path(lay.zmq_dir) / n for n in names]
