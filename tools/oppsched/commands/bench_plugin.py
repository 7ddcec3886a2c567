"""`oppsched bench plugin`: what a policy written in Python costs the apd's slot loop, against
the speed targets of docs/extending.md ("Speed").

Two real-time runs on the abstract PHY (root; the apd and the clients at SCHED_FIFO, the PHY
10 above):

- **16 users** (experiments/srinivasan-baras/alpha-sweep.yaml: 16 devices, one TCP download
  each, 1.667 ms slots): the scheduler is examples/plugins/pf.py (PF in Python, the built-in's
  rule) and every user's queue is examples/plugins/codel.py (CoDel in Python). The apd times
  each decision in its slot loop (the users' views, the list and select(): the scheduler's
  plugin_decision_p50_ns / _p99_ns) and each enqueue and dequeue call of each queue
  (plugin_enqueue_p50_ns etc.); a queue's packet costs one of each.
- **The same with the built-in PF and drop-tail**, as the reference for goodput and late slots.

Targets (docs/extending.md): decision median <= 50 us and p99 <= 200 us for 16 users; an
AQM's enqueue + dequeue median <= 5 us; no deadline miss and no late slot. Writes
OUT/plugin.json and prints one line per figure and PASS or FAIL.

`python -m oppsched.commands.bench_plugin --bindings [--cold]` (no root, seconds) times the same
AQM calls in the bindings instead (aqm_call_bench): the python_aqm wrapper the apd runs, on a
standing queue, without the slot loop around it; for comparing changes of the call path, not
against the targets.

The 10-minute run of the default experiment at 5 Msps with a Python PF is
`oppsched run experiments/clamp/fading-5msps.yaml --duration 600 --set scheduler.kind=python
...` (docs/extending.md gives the command), not part of this bench: it needs a quiet machine
for 20 minutes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from oppsched import paths

EXPERIMENT = "experiments/srinivasan-baras/alpha-sweep.yaml"
TARGETS = {"decision_p50_us": 50.0, "decision_p99_us": 200.0, "aqm_p50_us": 5.0}


def _variants(repo: Path) -> str:
    pf = repo / "examples/plugins/pf.py"
    codel = repo / "examples/plugins/codel.py"
    return ("variants=["
            "{name: pf, set: {scheduler.kind: pf, aqm.kind: droptail}}, "
            "{name: python, set: {scheduler: {kind: python, file: '%s', class: ProportionalFair},"
            " aqm: {kind: python, file: '%s', class: CoDel, params: {target_s: 0.005, "
            "interval_s: 0.1, mtu: 1500}}}}]" % (pf, codel))


def plugin_figures(summary: dict) -> dict:
    """The plugin's timing figures from a run's summary.json: the scheduler's decision
    quantiles (us), and over the queues the largest median and p99 of enqueue + dequeue (us:
    the sum of the two calls' quantiles, an upper bound of the packet's own), with the calls
    counted."""
    sched = summary.get("scheduler") or {}
    out = {"decisions": sched.get("plugin_decisions", 0),
           "deadline_misses": sched.get("plugin_deadline_misses", 0),
           "exceptions": sched.get("plugin_exceptions", 0),
           "decision_p50_us": sched.get("plugin_decision_p50_ns", 0) / 1e3,
           "decision_p99_us": sched.get("plugin_decision_p99_ns", 0) / 1e3,
           "decision_max_us": sched.get("plugin_decision_max_ns", 0) / 1e3}
    p50, p99, calls, exceptions = [], [], 0, 0
    for name, q in (summary.get("aqm") or {}).items():
        if not isinstance(q, dict) or "plugin_enqueue_calls" not in q:
            continue
        calls += q["plugin_enqueue_calls"] + q["plugin_dequeue_calls"]
        exceptions += q.get("plugin_exceptions", 0)
        p50.append((q["plugin_enqueue_p50_ns"] + q["plugin_dequeue_p50_ns"]) / 1e3)
        p99.append((q["plugin_enqueue_p99_ns"] + q["plugin_dequeue_p99_ns"]) / 1e3)
    out.update({"aqm_queues": len(p50), "aqm_calls": calls, "aqm_exceptions": exceptions,
                "aqm_p50_us": max(p50, default=0.0), "aqm_p99_us": max(p99, default=0.0)})
    return out


def verdict(fig: dict, late_slots: int) -> list[str]:
    """The targets a run's figures miss, as phrases ([] = PASS)."""
    bad = []
    if fig["decisions"] == 0:
        bad.append("the scheduler plugin made no decision")
    if fig["aqm_queues"] == 0:
        bad.append("no queue ran the AQM plugin")
    for key, limit in TARGETS.items():
        if fig[key] > limit:
            bad.append(f"{key} {fig[key]:.1f} > {limit:g}")
    if fig["deadline_misses"]:
        bad.append(f"{fig['deadline_misses']} deadline misses")
    if fig["exceptions"] or fig["aqm_exceptions"]:
        bad.append(f"{fig['exceptions'] + fig['aqm_exceptions']} plugin exceptions")
    if late_slots:
        bad.append(f"{late_slots} late slots")
    return bad


def run_plugin_bench(out: str, duration: float = 120.0, rt_priority: int = 20,
                     experiment: str = EXPERIMENT) -> int:
    from oppsched.run.runner import run_experiment

    repo = paths.home()
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    overrides = [_variants(repo), f"topology.apd_rt_priority={rt_priority}",
                 f"topology.client_rt_priority={rt_priority}",
                 f"extra.phy={{timing: {{rt_priority: {rt_priority + 10}}}}}"]
    print(f"bench plugin: {experiment}, built-in PF + drop-tail, then PF + CoDel in Python, "
          f"{duration:g} s each, SCHED_FIFO {rt_priority} (the PHY {rt_priority + 10})",
          file=sys.stderr, flush=True)
    t0 = time.monotonic()
    runs = run_experiment(str(repo / experiment), outdir / "run", overrides, duration)
    rows = {}
    for name, s, _ in runs:
        slots = s.get("slots") or {}
        rows[name] = {"late_slots": int(slots.get("late") or 0),
                      "late_slots_phy": int(slots.get("late_phy") or 0),
                      "goodput_bps": s.get("aggregate_goodput_bps"),
                      "mac_throughput_bps": s.get("aggregate_mac_throughput_bps"),
                      **(plugin_figures(s) if name == "python" else {})}
    py, ref = rows["python"], rows["pf"]
    bad = verdict(py, py["late_slots"])
    ratio = (py["goodput_bps"] / ref["goodput_bps"]) if ref["goodput_bps"] else None
    res = {"experiment": experiment, "duration_s": duration, "wall_s":
           round(time.monotonic() - t0, 1), "targets_us": TARGETS, "runs": rows,
           "goodput_python_over_builtin": ratio, "misses": bad, "ok": not bad,
           "load_average": list(os.getloadavg()), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (outdir / "plugin.json").write_text(json.dumps(res, indent=2) + "\n")
    print(f"bench plugin: scheduler (16 users): {py['decisions']} decisions, median "
          f"{py['decision_p50_us']:.1f} us, p99 {py['decision_p99_us']:.1f} us, max "
          f"{py['decision_max_us']:.0f} us (targets 50 / 200 us); {py['deadline_misses']} "
          "deadline misses")
    print(f"bench plugin: AQM ({py['aqm_queues']} queues, {py['aqm_calls']} calls): enqueue + "
          f"dequeue median {py['aqm_p50_us']:.1f} us, p99 {py['aqm_p99_us']:.1f} us (the "
          "slowest queue's; target median 5 us)")
    for name, r in rows.items():
        print(f"bench plugin: {name}: {r['late_slots']} late slots at the apd "
              f"({r['late_slots_phy']} at the PHY), goodput {(r['goodput_bps'] or 0) / 1e3:.0f} "
              "kb/s")
    print(f"bench plugin: {'PASS' if not bad else 'FAIL: ' + '; '.join(bad)} -> "
          f"{outdir / 'plugin.json'}")
    return 0 if not bad else 1


def _tcp_packet(size: int, ecn: int, sport: int) -> bytes:
    import struct
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, ecn, size, 0, 0, 64, 6, 0, bytes([10, 0, 0, 1]),
                     bytes([10, 0, 0, 2]))
    tcp = struct.pack("!HHIIBBHHH", sport, 80, 0, 0, 0x50, 0x10, 1000, 0, 0)
    return ip + tcp + bytes(size - 40)


def aqm_call_bench(file: str, class_name: str, params: dict | None = None, packets: int = 200_000,
                   cold: bool = False, seed: int = 3) -> dict:
    """The AQM plugin's calls timed by the wrapper itself (plugin_enqueue_p50_ns etc., as in
    the apd), in the bindings: `packets` arrivals 1.2 ms apart, one dequeue after nine of every
    ten (a standing queue: CoDel drops and marks), 10-packet limit, ECN on, 500-byte TCP
    packets of four flows, half of them ECN-capable. `cold` copies 8 MB between calls, which
    evicts the caches as the rest of a slot loop does. Returns the plugin's counters and the
    queue's stats."""
    import random

    from oppsched import mac

    q = mac.make_aqm("python", {"file": file, "class": class_name, "params": params or {},
                                "limit_packets": 10, "ecn": True})
    rnd = random.Random(seed)
    pkts = [_tcp_packet(500, 2 if rnd.random() < 0.5 else 0, 1000 + rnd.randrange(4))
            for _ in range(64)]
    a, b = (bytearray(8 << 20), bytearray(8 << 20)) if cold else (None, None)
    t = 0.0
    for k in range(packets):
        t += 0.0012
        if cold:
            a[:] = b
        q.enqueue(pkts[k & 63], t)
        if k % 10:
            if cold:
                a[:] = b
            q.dequeue(t)
    return {"counters": dict(q.plugin_counters), "stats": dict(q.stats)}


def _main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m oppsched.commands.bench_plugin",
                                 description="the AQM plugin's call path in the bindings")
    ap.add_argument("--bindings", action="store_true", required=True)
    ap.add_argument("--cold", action="store_true", help="evict the caches between calls")
    ap.add_argument("--packets", type=int, default=None,
                    help="arrivals (default 200000, 20000 with --cold)")
    a = ap.parse_args(argv)
    repo = paths.home()
    n = a.packets or (20_000 if a.cold else 200_000)
    for file, cls, params in (
            (repo / "examples/plugins/codel.py", "CoDel",
             {"target_s": 0.005, "interval_s": 0.1, "mtu": 1500}),
            (repo / "examples/plugins/droptail.py", "DropTail", {})):
        r = aqm_call_bench(str(file), cls, params, packets=n, cold=a.cold)
        c = r["counters"]
        e, d = c["plugin_enqueue_p50_ns"], c["plugin_dequeue_p50_ns"]
        print(f"{cls} ({'cold' if a.cold else 'hot'}, {c['plugin_enqueue_calls']} + "
              f"{c['plugin_dequeue_calls']} calls): enqueue median {e} ns (p99 "
              f"{c['plugin_enqueue_p99_ns']}), dequeue median {d} ns (p99 "
              f"{c['plugin_dequeue_p99_ns']}); enqueue + dequeue median {e + d} ns")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
