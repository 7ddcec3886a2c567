"""`oppsched bench capacity`: the sample loopback in real time, with real TCP: N clients
at each sample rate, the CPU of each component and the late slots (root; docs/phy.md).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


CAPACITY_EXPERIMENT = {
    "experiment": "bench-capacity",
    "description": "oppsched bench capacity: N clients, one bulk TCP flow each, over the "
                   "sample-level PHY at one sample rate",
    "kind": "testbed",
    "seed": 1,
    "phy": {"mode": "sample", "profile": "3ms", "lead_slots": 4},
    "queue": {"mode": "per_user"},
    "scheduler": {"kind": "pf"},
    "link_adaptation": {"olla": True, "target_bler": 0.1},
    "tcp": {"congestion_control": "cubic", "sack": True},
    "capture": {"pcaps": False},
}


def capacity_experiment(rate: float, clients: int, duration: float, profile: str = "3ms",
                        snr_db: float = 25.0, rtt_ms: float = 20.0,
                        rt_priority: int = 20) -> dict:
    """The testbed experiment of one capacity point: `clients` devices at a constant
    `snr_db` (AWGN: the top MCS, the largest TBs, the most decoding work per slot), each with
    one iperf3 bulk flow from its own server (rtt_ms), AP queues of two bandwidth-delay
    products of the whole link (every queue stays backlogged). rt_priority > 0: the apd and
    the clients at SCHED_FIFO rt_priority and the PHY at rt_priority + 10, as a lab runs
    them (0: normal scheduling)."""
    import copy

    from oppsched import mac
    from oppsched.testbed import daemonconf
    from oppsched.linkmodel import table_at_rate

    src, src_rate = daemonconf.mcs_table_source(profile, "ldpc", rate)
    top = max(mac.mcs_table.from_csv(table_at_rate(src, profile, rate, "ldpc", src_rate))
              .rates_bps)
    limit = max(60000, int(2 * top * (rtt_ms + 50.0) / 1e3 / 8))
    e = copy.deepcopy(CAPACITY_EXPERIMENT)
    e["duration_s"] = float(duration)
    e["phy"]["profile"] = profile
    e["phy"]["sample"] = {"sample_rate": float(rate)}
    e["devices"] = [{"name": f"R{i + 1}", "channel": {"model": "awgn", "mean_snr_db": snr_db,
                                                      "doppler_hz": 0.0}}
                    for i in range(clients)]
    e["servers"] = [{"name": f"S{i + 1}", "rtt_ms": rtt_ms} for i in range(clients)]
    e["flows"] = [{"id": f"f{i + 1}", "server": f"S{i + 1}", "device": f"R{i + 1}"}
                  for i in range(clients)]
    e["queue"]["limit_bytes"] = limit
    if rt_priority > 0:
        e["topology"] = {"apd_rt_priority": rt_priority, "client_rt_priority": rt_priority}
        e["extra"] = {"phy": {"timing": {"rt_priority": rt_priority + 10}}}
    return e


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """{tid: (thread name, CPU seconds (utime + stime))} of every live thread of `pid` (GNU
    Radio names a block's thread after the block, e.g. slot_rx5, channel_emulator_c3)."""
    out: dict[int, tuple[str, float]] = {}
    tck = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        f = stat[stat.rindex(")") + 2:].split()
        out[int(task.name)] = (name, (int(f[11]) + int(f[12])) / tck)
    return out


def component_of(thread: str) -> str:
    """The PHY component a thread belongs to: its GNU Radio block's name without the
    block id (slot_rx12 -> slot_rx), or the thread's name."""
    import re

    m = re.fullmatch(r"([A-Za-z_]+?)_?\d+", thread)
    return m.group(1) if m else thread


class _PhySampler:
    """Samples the PHY process's per-thread CPU once a second while a run lasts (the PHY's
    pid from the run folder's processes.json); keeps every thread's last value, so the
    block threads that end when the flowgraph stops still count."""

    def __init__(self, rundir: Path):
        import threading

        self.rundir = rundir
        self.last: dict[int, tuple[str, float]] = {}
        self.wall = 0.0
        self._t0: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _pid(self) -> int | None:
        try:
            rows = json.loads((self.rundir / "processes.json").read_text())
        except (OSError, ValueError):
            return None
        for r in rows:
            if r.get("name") == "phy" and r.get("exit_code") is None:
                return int(r["pid"])
        return None

    def _loop(self) -> None:
        pid = None
        while not self._stop.wait(1.0):
            now = self._pid()  # re-read: the run may start the PHY more than once
            if now is None:
                continue
            sample = thread_cpu(now)
            if sample:
                if now != pid:  # a new PHY process: its CPU from its start
                    pid, self._t0, self.last = now, time.monotonic(), {}
                self.last.update(sample)
                self.wall = time.monotonic() - self._t0

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def components(self) -> dict[str, float]:
        """CPU share (cores) per component over the PHY's life as sampled."""
        out: dict[str, float] = {}
        for name, c in self.last.values():
            k = component_of(name)
            out[k] = out.get(k, 0.0) + c
        life = self.wall + 1.0  # from before the first sample to the last one, about
        return {k: round(v / life, 3) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def capacity_point(rate: float, clients: int, duration: float, out: Path, profile: str,
                   snr_db: float, rt_priority: int = 20) -> dict:
    """One run of the capacity bench; its row (late slots, CPU per component, goodput)."""
    import yaml

    from oppsched.run import runner, sweep

    out.mkdir(parents=True, exist_ok=True)
    exp = out / "experiment.yaml"
    exp.write_text(yaml.safe_dump(capacity_experiment(rate, clients, duration, profile,
                                                      snr_db, rt_priority=rt_priority),
                                  sort_keys=False))
    _, _, cfg = runner.load_experiment(exp)
    cfg = dict(cfg, variant="")
    rundir = out / "run"
    load0 = os.getloadavg()
    row = {"sample_rate": rate, "clients": clients, "duration_s": duration,
           "load_average_1m_start": round(load0[0], 2)}
    try:
        with _PhySampler(rundir) as samp:
            s = sweep.run_point(cfg, rundir)
    except Exception as exc:  # noqa: BLE001 -- a failed point is a row saying why
        row.update(error=f"{type(exc).__name__}: {exc}", late_slots=None, ok=False)
        return row
    phy = json.loads((rundir / "phy.stats.json").read_text())
    goodput = sum(f["goodput_bps"] or 0.0 for f in s["flows"])
    mac_bps = sum(u["mac_throughput_bps"] or 0.0 for u in s["users"])
    row.update({
        "late_slots": int(phy["late"]), "slots": int(phy["slots"]),
        "overruns": int(phy.get("overruns", 0)),
        "tb_ok": sum(u["tb_ok"] for u in phy["users"]),
        "tb_failed": sum(u["tb_failed"] for u in phy["users"]),
        "goodput_bps": round(goodput), "mac_bps": round(mac_bps),
        "goodput_per_mac": round(goodput / mac_bps, 3) if mac_bps else None,
        "phy_cpu_cores": samp.components(),
        "phy_cpu_total_cores": round(sum(samp.components().values()), 3),
        "load_average_1m_end": round(os.getloadavg()[0], 2),
        "error": None,
    })
    # real time held: no grant missed its slot (late: the MAC and PHY kept their slot
    # exchange); strictly, also no slot built more than a slot after its due time
    # (overruns: the PHY's clock fell behind, though every slot still carried its grant)
    row["ok"] = row["late_slots"] == 0
    row["strict"] = row["ok"] and row["overruns"] == 0
    (out / "row.json").write_text(json.dumps(row, indent=1) + "\n")
    return row


def capacity_table(rows: list[dict], rates: list[float], duration: float) -> tuple[str, str]:
    """(CSV, markdown) of the largest N with 0 late slots at each rate, the same with 0
    overruns too, and every run."""
    def largest(r, key):
        ok = [x["clients"] for x in rows if x["sample_rate"] == r and x.get(key)]
        return max(ok) if ok else 0

    best = {r: largest(r, "ok") for r in rates}
    strict = {r: largest(r, "strict") for r in rates}
    csv = ["sample_rate_hz,max_clients_zero_late,max_clients_zero_late_zero_overruns,"
           "duration_s"]
    csv += [f"{r:g},{best[r]},{strict[r]},{duration:g}" for r in rates]
    md = [f"Largest N with 0 late slots over {duration:g} s, and with no overrun either (the "
          "load average when it ran is in the runs' rows):", "",
          "| sample rate | max clients, 0 late slots | and 0 overruns |", "| --- | --- | --- |"]
    md += [f"| {r / 1e6:g} Msps | {best[r]} | {strict[r]} |" for r in rates]
    md += ["", "| rate | N | late / overruns / slots | PHY CPU (cores) by component | goodput (Mb/s) | "
           "MAC (Mb/s) | goodput/MAC | load avg 1 min (start/end) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for x in rows:
        if x.get("error"):
            md.append(f"| {x['sample_rate'] / 1e6:g} Msps | {x['clients']} | failed: "
                      f"{x['error'][:80]} | | | | | {x['load_average_1m_start']} |")
            continue
        comp = ", ".join(f"{k} {v:.2f}" for k, v in list(x["phy_cpu_cores"].items())[:5])
        md.append(f"| {x['sample_rate'] / 1e6:g} Msps | {x['clients']} | {x['late_slots']} / "
                  f"{x['overruns']} / {x['slots']} | {comp} (total {x['phy_cpu_total_cores']:.2f}) | "
                  f"{x['goodput_bps'] / 1e6:.2f} | {x['mac_bps'] / 1e6:.2f} | "
                  f"{x['goodput_per_mac']} | {x['load_average_1m_start']} / "
                  f"{x['load_average_1m_end']} |")
    return "\n".join(csv) + "\n", "\n".join(md) + "\n"


def run_capacity_bench(out: str, rates: list[float], clients: list[int], duration: float,
                       profile: str = "3ms", snr_db: float = 25.0,
                       rt_priority: int = 20, keep_going: bool = False) -> int:
    """For each rate, N = clients in ascending order until the first N with a late slot
    (or a failed run; with keep_going every N, for the CPU each client adds); writes
    capacity.csv (the largest N per rate), capacity_runs.json (every run) and the table in
    Markdown into `out`."""
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for rate in rates:
        for n in sorted(clients):
            print(f"bench capacity: {rate / 1e6:g} Msps, {n} client(s), {duration:g} s ...",
                  file=sys.stderr, flush=True)
            row = capacity_point(rate, n, duration, outdir / f"{rate / 1e6:g}msps-{n}",
                                 profile, snr_db, rt_priority)
            rows.append(row)
            print(f"bench capacity: {rate / 1e6:g} Msps, {n}: late {row.get('late_slots')}"
                  f", goodput {row.get('goodput_bps')}, PHY CPU "
                  f"{row.get('phy_cpu_total_cores')}, error {row.get('error')}",
                  file=sys.stderr, flush=True)
            if not row["ok"] and not keep_going:
                break
    csv, md = capacity_table(rows, rates, duration)
    (outdir / "capacity.csv").write_text(csv)
    (outdir / "capacity.markdown").write_text(md)
    (outdir / "capacity_runs.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(md)
    print(f"bench capacity: -> {outdir}", file=sys.stderr)
    return 0
