"""The flows of a testbed run at their times: :func:`_schedule` starts each flow, watches
the daemons and the wired paths' delay stages, stops a flow that overruns or whose
repeat.until_flows_end flows have ended, applies the faults of the reliability tick and
reports progress, until every flow has ended."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from oppsched.experiments.testbed.processes import ProcTable
from oppsched.experiments.testbed.programs import TestbedError, phy_env
from oppsched.experiments.testbed.reliability import RunnerWatchdog, restart_apd
from oppsched.experiments.testbed.sampling import (SocketSampler, _live_goodput,
                                                   _write_live_flows)
from oppsched.testbed import daemonconf
from oppsched.testbed.flows import FlowPlan, timed_iperf

def _until_flows_end(plans, pending: list, running: list, procs, t0: float) -> bool:
    """repeat.until_flows_end: a flow whose named flows have all ended is stopped (SIGTERM;
    oppsched.testbed.transfers records the transfer in progress as cut and starts none after), and
    one not started yet never starts: Wu, Gong & Williamson's small files, "repeated over
    and over until all large file transfers are finished" (§5.2). True if one was stopped."""
    by_id = {p.id: p for p in plans}

    def over(p) -> float | None:
        names = (p.repeat or {}).get("until_flows_end")
        if not names or any(by_id[n].ended_at_s is None for n in names):
            return None
        return max(by_id[n].ended_at_s for n in names)

    stopped = False
    for p in list(running):
        at = over(p)
        if at is None:
            continue
        procs.stop(p.starter_name, 3.0, signal.SIGTERM)
        p.ended_at_s = time.monotonic() - t0
        p.exit_code = procs.rows[p.starter_name]["exit_code"]
        p.extra["until_flows_end_s"] = at
        running.remove(p)
        stopped = True
    for p in list(pending):
        at = over(p)
        if at is not None:
            p.extra["until_flows_end_s"] = at
            p.extra["not_started"] = "its repeat.until_flows_end flows ended first"
            pending.remove(p)
    return stopped


def _reliability_tick(cfg, rundir, procs, spawn, ap_ns, apd_argv, record, write_record,
                      tun_name="radio0"):
    """Called by _schedule every turn with the time since t0: the runner's watchdog, and the
    apd restart fault at faults.apd_restart_at_s (reliability.py)."""
    wd = RunnerWatchdog(Path(rundir) / "apd.stats.json", daemonconf.slot_s(cfg),
                        cfg["watchdog"]["slots"], cfg["watchdog"]["stats_period_s"])
    restart_at = cfg["faults"]["apd_restart_at_s"]
    freeze_at = cfg["faults"]["phy_freeze_at_s"]
    pending_signals = sorted(cfg["faults"]["signals"], key=lambda s: s["at_s"])
    done = []
    frozen = []

    def tick(now: float) -> None:
        while pending_signals and now >= pending_signals[0]["at_s"]:
            # faults.signals: a hung (STOP) or crashed (KILL, SEGV, ...) process, to the
            # process itself (not its group: a chrt/setpriv wrapper execs it).
            f = pending_signals.pop(0)
            p = procs.procs.get(f["process"])
            if p is None:
                raise TestbedError(f"faults.signals: no process {f['process']!r} (processes: "
                                   f"{', '.join(procs.procs)})")
            os.kill(p.pid, getattr(signal, "SIG" + f["signal"]))
            record.setdefault("faults", []).append(
                {"at_s": now, "fault": "signal", "process": f["process"],
                 "signal": "SIG" + f["signal"], "pid": p.pid})
            write_record()
        if freeze_at is not None and not frozen and now >= freeze_at:
            os.kill(procs.procs["phy"].pid, signal.SIGSTOP)
            frozen.append(now)
            record.setdefault("faults", []).append({"at_s": now, "fault": "phy_freeze"})
            write_record()
        if restart_at is not None and not done and now >= restart_at:
            done.append(restart_apd(procs, spawn, ap_ns, apd_argv, rundir,
                                    cfg["timeouts"]["startup_s"], tun_name))
            record.setdefault("faults", []).append({"at_s": now, **done[0]})
            write_record()
            wd.reset()
        wd.check(time.monotonic())

    return tick


def _check_links_alive(tb) -> None:
    """A wired path's delay stage that exited during the run ends it with an error naming
    the link and the end of the stage's log: its flows could not carry a byte since."""
    for link in tb.links:
        if link.proc is not None and link.proc.popen.poll() is not None:
            tail = link.proc.log_tail()
            raise TestbedError(f"wired link {link.name}: oppsched-delay exited with "
                               f"{link.proc.popen.returncode} during the run"
                               + (f":\n{tail}" if tail else ""))


def _schedule(cfg, tb, plans, procs: ProcTable, daemons, rundir, t0, progress, spawn,
              t0_ns: int | None = None, wrc_files: dict | None = None,
              wrc_program=None, tick=None, sampler: SocketSampler | None = None) -> None:
    """Starts each flow at t0 + start_s (the iperf3 sender or oppsched-wrc send in the
    server's namespace, an upstream flow's iperf3 sender in the device's, or the transfer
    client in the device's), watches the daemons, reports progress, and returns when every
    flow has ended (or duration_s + grace_s has passed). A timed iperf3 flow still running
    timeouts.overrun_s (plus 3 round trips) after its planned end is stopped there: one that
    connected late would otherwise go on alone after the others, and its figures would not
    be those of the contention the run is about (the summary measures it up to its planned
    end: flowsummary._bytes_by_planned_end). A flow of repeated transfers with repeat.until_flows_end is stopped once the
    flows it names have ended (_until_flows_end)."""
    if t0_ns is None:
        t0_ns = int(t0 * 1e9)
    dur = cfg["duration_s"]
    rtts = 3 * max(s["rtt_ms"] for s in cfg["servers"]) / 1e3
    grace = cfg["timeouts"]["grace_s"] + rtts
    overrun = cfg["timeouts"]["overrun_s"] + rtts
    pending = sorted(plans, key=lambda p: p.start_s)
    running: list[FlowPlan] = []
    every = max(1.0, min(5.0, dur / 10.0))
    next_report = every
    last_acked: dict = {}
    while True:
        now = time.monotonic() - t0
        while pending and pending[0].start_s <= now:
            p = pending.pop(0)
            if p.transport == "wrc":
                spawn(tb.servers[p.server_index].ns,
                      [wrc_program, "send", "--config", wrc_files[p.id][0]], p.starter_name,
                      "wrc-sender")
            elif p.repeat:
                spawn(tb.clients[p.device_index].ns,
                      p.transfer_client_argv(sys.executable, rundir, t0_ns), p.starter_name,
                      "xfer-client", env=phy_env(cfg))
            else:
                spawn((tb.clients[p.device_index] if p.sender_in_client
                       else tb.servers[p.server_index]).ns, p.sender_argv(rundir),
                      p.starter_name, "iperf3-sender")
            p.started_at_s = now
            running.append(p)
        ended = False
        for p in list(running):
            if procs.poll(p.starter_name):
                p.ended_at_s = time.monotonic() - t0
                p.exit_code = procs.rows[p.starter_name]["exit_code"]
                running.remove(p)
                ended = True
            elif timed_iperf(p) and now >= p.start_s + p.seconds + overrun:
                procs.stop(p.starter_name, 3.0, signal.SIGINT)
                p.ended_at_s = time.monotonic() - t0
                p.exit_code = procs.rows[p.starter_name]["exit_code"]
                p.extra["stopped"] = (f"still running {overrun:.1f} s after its planned end "
                                      f"({p.start_s + p.seconds:g} s)")
                p.extra["planned_end_s"] = p.start_s + p.seconds
                running.remove(p)
                ended = True
        ended = _until_flows_end(plans, pending, running, procs, t0) or ended
        if sampler is not None:
            # at once when a flow has ended: its receiving sockets may be destroyed soon
            sampler.poll(now, force=ended)
        if tick is not None:
            tick(now)
        procs.check_alive(daemons)
        _check_links_alive(tb)
        if not pending and not running:
            break
        if now >= dur + grace:
            for p in running:
                procs.stop(p.starter_name, 3.0, signal.SIGTERM if p.repeat or
                           p.transport == "wrc" else signal.SIGINT)
                p.ended_at_s = time.monotonic() - t0
                p.exit_code = procs.rows[p.starter_name]["exit_code"]
                p.extra["stopped"] = f"still running {grace:.0f} s after duration_s"
                if timed_iperf(p):
                    p.extra["planned_end_s"] = p.start_s + p.seconds
            break
        if now >= next_report:
            info: dict = {}
            try:
                rates = _live_goodput(tb, plans, last_acked, now, info)
            except Exception:  # noqa: BLE001 -- progress is best effort
                rates = {}
            _write_live_flows(rundir, now, rates, info)
            txt = ", ".join(f"{k} {v / 1e3:.0f}" for k, v in rates.items())
            progress(min(int(now), int(dur)), int(dur),
                     "s" + (f"; goodput kb/s: {txt}" if txt else ""))
            next_report += every
        nxt = min([pending[0].start_s] if pending else [now + 0.05])
        time.sleep(max(0.005, min(0.05, nxt - now)))
