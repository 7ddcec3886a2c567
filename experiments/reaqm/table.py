"""Wang & Song, REAQM, §4: the README's after-the-fixes tables and plots, mean and 95 %
interval of the mean over the seeds (Student t), from sweep folders:

    .venv/bin/python experiments/reaqm/table.py load OUT SWEEP [SWEEP ...]
    .venv/bin/python experiments/reaqm/table.py dynamics OUT SWEEP [SWEEP ...]
    .venv/bin/python experiments/reaqm/table.py settle OUT SWEEP [SWEEP ...]
    .venv/bin/python experiments/reaqm/table.py settled OUT SWEEP [SWEEP ...]

load (load-sweep.yaml, 100-s runs): per run the mean queue over 50-100 s (slots.csv, in
packets of 1052 bytes: 1000 of payload, 12 of TCP timestamps, 40 of headers), loss and
mark ratios over the whole run (the apd counts them once, at the end), utilisation (MAC
throughput / 10 Mb/s), c and the price at the end; OUT/runs.csv and the plots
mean-queue.png, loss-ratio.png, utilisation.png, mark-ratio.png against connections.

dynamics (dynamics.yaml: five groups of 10 connections joining every step from 0 s and
leaving in reverse order, a run of ten steps; the step is the run's duration / 10: 20 s in
the 200-s runs, the paper's 50 s in 500-s runs): per run the whole-run figures, the mean
queue from 5 s to the end and while 10 (5 s to 1 step), 30 (steps 2-3) and 50 (steps 4-6)
connections are on, and the utilisation (acknowledged TB bytes / 10 Mb/s) while 20 (steps
8-9) and 10 (steps 9-10) are left; OUT/runs.csv, OUT/timeseries.csv (per run and second: queue, utilisation and the
AQM's link price p from slots.csv's aqm_price column, REM and REAQM) and time-<link>.png.
Runs already in OUT's CSVs that the sweeps named do not hold are kept (a table measured in
parts: REAQM and REM in one sweep, RED and AVQ in a later one).

settle (load-sweep.yaml at one load, 300-s runs): per run the queue and the price in each
50-s window, the whole run's loss and mark ratios and utilisation; OUT/settle.csv.

Each prints the README's table rows and the late-slot counts (the apd's and the PHY's own).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PACKET = 1052  # bytes of one full 1000-byte segment on the wire (IP)
LINK_BPS = 10e6
BUFFER = 50  # the paper's buffer, packets
NAMES = {"reaqm": "REAQM", "red": "RED (gentle)", "rem": "REM", "avq": "AVQ",
         "reaqm-gamma-0.01": "REAQM, gamma 0.01", "reaqm-per-arrival": "REAQM, per arrival",
         "rem-target-0": "REM, b* = 0"}
PRICED = ("reaqm", "rem", "reaqm-gamma-0.01", "reaqm-per-arrival", "rem-target-0")


def ci(values) -> tuple[float, float, int]:
    """Mean, half-width of the 95 % interval (Student t), count; NaNs left out."""
    x = np.asarray([v for v in values if v == v], float)
    if len(x) == 0:
        return math.nan, math.nan, 0
    if len(x) == 1:
        return float(x[0]), math.nan, 1
    h = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return float(x.mean()), float(h), len(x)


def cell(values, digits: int) -> str:
    m, h, n = ci(values)
    if n == 0:
        return "—"
    return f"{m:.{digits}f}" if n == 1 else f"{m:.{digits}f} ± {h:.{digits}f}"


def slots_of(run: Path) -> tuple[pd.DataFrame, pd.Series]:
    """The slot trace and each row's time in seconds since the run's start."""
    base = json.loads((run / "run.json").read_text())["t0_mono_ns"]
    s = pd.read_csv(run / "slots.csv")
    return s, (s.t_ns - base) / 1e9


def ok_runs(sweep: Path) -> pd.DataFrame:
    df = pd.read_csv(sweep / "sweep.csv")
    return df[df.ok.astype(bool)]


def late(runs: pd.DataFrame) -> None:
    print(f"late slots at the apd: {sorted(set(runs.late_apd))}; the PHY's own: "
          f"{runs.late_phy.min()}-{runs.late_phy.max()} of {runs.slots.min()}-{runs.slots.max()}")


def plot_against_load(runs: pd.DataFrame, out: Path, figures, queue_col: str, title: str,
                      prefix: str = "") -> None:
    """One plot per (column, y label, file name) of `figures` against connections: each
    AQM's mean over the seeds with its 95 % interval (no bar for one seed), the paper's
    buffer drawn on the queue's; OUT/<prefix><name>.png."""
    for col, ylabel, name in figures:
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, (var, label) in enumerate(NAMES.items()):
            g = runs[runs.variant == var]
            if g.empty:
                continue
            pts = [(n + (i - 1.5) * 0.6, *ci(gg[col])[:2]) for n, gg in g.groupby("connections")]
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                        yerr=[p[2] if p[2] == p[2] else 0.0 for p in pts],
                        marker="o", capsize=3, label=label)
        if col == queue_col:
            ax.axhline(BUFFER, color="k", ls=":", lw=1, label="the paper's buffer (50 packets)")
        ax.set_xlabel("connections")
        ax.set_ylabel(ylabel)
        ax.set_xticks(sorted(runs.connections.unique()))
        ax.grid(alpha=0.3)
        ax.set_title(title, fontsize=8)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / f"{prefix}{name}.png", dpi=110)
        plt.close(fig)


def load(out: Path, sweeps: list[Path]) -> None:
    rows = []
    for sweep in sweeps:
        for _, r in ok_runs(sweep).iterrows():
            s, t = slots_of(sweep / "points" / r.point)
            rows.append({
                "connections": 2 * r.half_flows, "variant": r.variant, "seed": r.seed,
                "queue_50_100s": s["queue.R1"][(t >= 50) & (t < 100)].mean() / PACKET,
                "loss_pct": 100 * r["aqm.all.loss_ratio"], "mark_pct": 100 * r["aqm.all.mark_ratio"],
                "util": r["aggregate_mac_throughput_bps"] / LINK_BPS,
                "c_Mbps": r["aqm.R1.service_rate_bps"] / 1e6,
                "price_end": r["aqm.R1.price"] if r.variant.startswith(PRICED) else math.nan,
                "late_apd": r["slots.late"], "late_phy": r["slots.late_phy"], "slots": r["slots.total"]})
    runs = pd.DataFrame(rows).sort_values(["variant", "connections", "seed"])
    runs.to_csv(out / "runs.csv", index=False, float_format="%.6g")
    digits = {"queue_50_100s": 1, "loss_pct": 2, "mark_pct": 1, "util": 3, "c_Mbps": 2, "price_end": 0}
    for var, g in runs.groupby("variant", sort=False):
        for col, d in digits.items():
            print(f"| {var} | {col} | " + " / ".join(
                cell(gg[col], d) for _, gg in g.groupby("connections")) + " |")
    late(runs)
    plot_against_load(
        runs, out, [("queue_50_100s", "mean queue, 50-100 s (1052-byte packets)", "mean-queue"),
                    ("loss_pct", "loss ratio, whole run (%)", "loss-ratio"),
                    ("util", "utilisation (MAC throughput / 10 Mb/s)", "utilisation"),
                    ("mark_pct", "ECN mark ratio, whole run (%)", "mark-ratio")],
        "queue_50_100s", "Wang & Song, REAQM, Fig. 3 against load: 100 s, mean and 95 % "
        "interval over the seeds")


def latest_points(sweeps: list[Path]) -> list[tuple[Path, pd.Series]]:
    """(sweep, row) of every ok point; a point (link, variant, seed) that is ok in more than
    one of the sweeps is taken from the last one named (a re-run of points that failed)."""
    chosen: dict[str, tuple[Path, pd.Series]] = {}
    for sweep in sweeps:
        for _, r in ok_runs(sweep).iterrows():
            chosen[r.point] = (sweep, r)
    return list(chosen.values())


def dynamics(out: Path, sweeps: list[Path]) -> None:
    rows, series = [], []
    for sweep, r in latest_points(sweeps):
        s, t = slots_of(sweep / "points" / r.point)
        ack = s.outcome == "ack"

        def q(a, b):
            return s["queue.R1"][(t >= a) & (t < b)].mean() / PACKET

        def u(a, b):
            return 8 * s.tb_bytes[ack & (t >= a) & (t < b)].sum() / (b - a) / LINK_BPS

        step = float(r.duration_s) / 10
        link = "lossy" if "lossy" in str(r.link) else "reliable"
        rows.append({
            "link": link, "variant": r.variant, "seed": r.seed,
            "loss_pct": 100 * r["aqm.all.loss_ratio"], "mark_pct": 100 * r["aqm.all.mark_ratio"],
            "util": r["aggregate_mac_throughput_bps"] / LINK_BPS, "queue": q(5, 10 * step),
            "q10_rising": q(5, step), "q30_rising": q(2 * step, 3 * step), "q50": q(4 * step, 6 * step),
            "u20_falling": u(8 * step, 9 * step), "u10_falling": u(9 * step, 10 * step),
            "price_end": r["aqm.R1.price"] if r.variant in PRICED else math.nan,
            "late_apd": r["slots.late"], "late_phy": r["slots.late_phy"], "slots": r["slots.total"],
            "step": step})
        sec = np.floor(t).astype(int)
        keep = (sec >= 0) & (sec < 10 * step)
        price = s["aqm_price.R1"][keep] if "aqm_price.R1" in s else np.nan
        g = pd.DataFrame({"sec": sec[keep], "q": s["queue.R1"][keep] / PACKET,
                          "b": np.where(ack[keep], s.tb_bytes[keep], 0), "p": price}).groupby("sec")
        ts = pd.DataFrame({"t_s": g.q.mean().index, "queue_pkts": g.q.mean().values,
                           "util": (g.b.sum() * 8 / LINK_BPS).values, "aqm_price": g.p.mean().values})
        ts.insert(0, "seed", r.seed)
        ts.insert(0, "variant", r.variant)
        ts.insert(0, "link", link)
        series.append(ts)
    runs, ts = pd.DataFrame(rows), pd.concat(series)
    # A table built in parts (a sweep stopped and resumed as another): the rows already in
    # OUT for runs (link, variant, seed) the sweeps named here do not hold are kept.
    if (out / "runs.csv").exists() and (out / "timeseries.csv").exists():
        key = ["link", "variant", "seed"]
        new_keys = set(map(tuple, runs[key].astype(str).to_numpy()))
        old_runs, old_ts = pd.read_csv(out / "runs.csv"), pd.read_csv(out / "timeseries.csv")
        keep = [k not in new_keys for k in map(tuple, old_runs[key].astype(str).to_numpy())]
        kept = old_runs[keep]
        if len(kept):
            print(f"table.py dynamics: keeping {len(kept)} runs already in {out / 'runs.csv'}: "
                  + ", ".join(f"{r.variant} seed {r.seed}" for r in kept.itertuples()))
            kept_keys = set(map(tuple, kept[key].astype(str).to_numpy()))
            ts_keep = [k in kept_keys for k in map(tuple, old_ts[key].astype(str).to_numpy())]
            runs = pd.concat([runs, kept], ignore_index=True)
            ts = pd.concat([ts, old_ts[ts_keep]], ignore_index=True)
    runs = runs.sort_values(["link", "variant", "seed"])
    runs.to_csv(out / "runs.csv", index=False, float_format="%.6g")
    # connections per step: those of the flows there from the start (the first group)
    sweep0, r0 = latest_points(sweeps)[0]
    cfg0 = json.loads((sweep0 / "points" / r0.point / "config.json").read_text())
    group = sum(int(f.get("parallel", 1)) for f in cfg0["flows"] if not f.get("start_s"))
    steps = sorted(set(runs.step))
    if len(steps) != 1:
        raise SystemExit(f"table.py dynamics: runs of different step lengths {steps} in one table")
    step = steps[0]
    ts.to_csv(out / "timeseries.csv", index=False, float_format="%.5g")
    digits = {"loss_pct": 2, "mark_pct": 1, "util": 3, "queue": 1, "q10_rising": 1, "q30_rising": 1,
              "q50": 1, "u20_falling": 3, "u10_falling": 3, "price_end": 0}
    for (link, var), g in runs.groupby(["link", "variant"], sort=False):
        print(f"| {link} | {var} (seeds {', '.join(str(x) for x in g.seed)}) | "
              + " | ".join(cell(g[c], d) for c, d in digits.items()) + " |")
    late(runs)
    for link, tl in ts.groupby("link"):
        fig, axes = plt.subplots(3, 1, figsize=(7, 8), sharex=True)
        for var, label in NAMES.items():
            g = tl[tl.variant == var]
            if g.empty:
                continue
            for ax, col in zip(axes[:2], ("queue_pkts", "util")):
                by = g.groupby("t_s")[col]
                m = by.mean()
                (line,) = ax.plot(m.index + 0.5, m.values, lw=1.2,
                                  label=f"{label} (mean of {g.seed.nunique()} seeds)")
                ax.fill_between(m.index + 0.5, by.min().values, by.max().values,
                                color=line.get_color(), alpha=0.15, lw=0)
            if var in PRICED:
                for seed, gs in g.groupby("seed"):
                    axes[2].plot(gs.t_s + 0.5, gs.aqm_price, lw=1, label=f"{label}, seed {seed}",
                                 color=line.get_color(), alpha=0.4 + 0.2 * (seed - 1))
        axes[0].axhline(BUFFER, color="k", ls=":", lw=1, label="the paper's buffer (50 packets)")
        axes[0].set_ylabel("queue (1052-byte packets)")
        axes[1].set_ylabel("utilisation per second")
        axes[2].set_ylabel("link price p")
        axes[2].set_xlabel(f"time (s); {group} connections join per step, then leave in reverse "
                           f"order, a step every {step:g} s")
        for ax in axes:
            for x in step * np.array([1, 2, 3, 4, 6, 7, 8, 9]):
                ax.axvline(x, color="grey", lw=0.5, alpha=0.4)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, ncol=2)
        axes[0].set_title(f"Wang & Song, REAQM, Figs. 3-4, {link} link: mean of the seeds, "
                          "band = their min-max", fontsize=8)
        fig.tight_layout()
        fig.savefig(out / f"time-{link}.png", dpi=110)
        plt.close(fig)


def settle(out: Path, sweeps: list[Path]) -> None:
    rows = []
    for sweep, r in latest_points(sweeps):
        s, t = slots_of(sweep / "points" / r.point)
        row = {"variant": r.variant, "seed": r.seed,
               "loss_pct": 100 * r["aqm.all.loss_ratio"], "mark_pct": 100 * r["aqm.all.mark_ratio"],
               "util": r["aggregate_mac_throughput_bps"] / LINK_BPS,
               "late_apd": r["slots.late"], "late_phy": r["slots.late_phy"], "slots": r["slots.total"]}
        for a in range(0, int(float(r.duration_s)), 50):
            w = (t >= a) & (t < a + 50)
            row[f"queue_{a}_{a + 50}"] = s["queue.R1"][w].mean() / PACKET
            if "aqm_price.R1" in s:
                row[f"price_{a}_{a + 50}"] = s["aqm_price.R1"][w].mean()
        rows.append(row)
    runs = pd.DataFrame(rows).sort_values(["variant", "seed"])
    runs.to_csv(out / "settle.csv", index=False, float_format="%.6g")
    cols = [c for c in runs.columns if c.startswith(("queue_", "price_"))]
    for var, g in runs.groupby("variant", sort=False):
        print(f"| {var} | " + " | ".join(cell(g[c].dropna(), 1 if c.startswith("queue_") else 0)
                                         for c in cols)
              + " | " + " | ".join(cell(g[c], d) for c, d in
                                   (("loss_pct", 2), ("mark_pct", 1), ("util", 3))) + " |")
    late(runs)


# The apd's drop causes its AQM counters count (aqm.all.dropped): the queue's and the AQM's,
# not the link's (harq_*) or a packet to nobody (unknown_destination).
AQM_DROPS = ("overflow", "early_drop", "aqm_drop", "evicted_low_priority", "evicted_las")


def packet_counts(run: Path, t0_ns: int, a_s: float, b_s: float) -> dict:
    """Enqueued, AQM-dropped and marked packets of user R1 in [a_s, b_s) of the run and over
    its whole trace, from packets.csv."""
    p = pd.read_csv(run / "packets.csv", usecols=["t_ns", "event", "user", "reason"],
                    dtype={"reason": str})
    p = p[p.user == 0]
    t = (p.t_ns - t0_ns) / 1e9
    w = (t >= a_s) & (t < b_s)
    drop = (p.event == "drop") & p.reason.isin(AQM_DROPS)
    return {"enq": int((p.event == "enqueue")[w].sum()), "drop": int(drop[w].sum()),
            "mark": int((p.event == "mark")[w].sum()),
            "enq_all": int((p.event == "enqueue").sum()), "drop_all": int(drop.sum()),
            "mark_all": int((p.event == "mark").sum())}


def settled(out: Path, sweeps: list[Path]) -> None:
    rows, mismatched = [], []
    for sweep, r in latest_points(sweeps):
        run = sweep / "points" / r.point
        cfg = json.loads((run / "config.json").read_text())
        a, b = float(cfg["analysis"]["warmup_s"]), float(r.duration_s)
        if not (run / "packets.csv").exists():
            raise SystemExit(f"table.py settled: {run} has no packets.csv "
                             "(run it with --set traces.packets=true)")
        s, t = slots_of(run)
        w = (t >= a) & (t < b)
        c = packet_counts(run, json.loads((run / "run.json").read_text())["t0_mono_ns"], a, b)
        apd = (int(r["aqm.all.offered"]), int(r["aqm.all.dropped"]), int(r["aqm.all.marked"]))
        if (c["enq_all"], c["drop_all"], c["mark_all"]) != apd:
            mismatched.append(f"{r.point}: packets.csv {c['enq_all']}/{c['drop_all']}/"
                              f"{c['mark_all']}, the apd {apd[0]}/{apd[1]}/{apd[2]}")
        ack = s.outcome == "ack"
        rows.append({
            "connections": 2 * r.half_flows, "variant": r.variant, "seed": r.seed,
            "window": f"{a:g}-{b:g} s",
            "queue": s["queue.R1"][w].mean() / PACKET,
            "loss_pct": 100 * c["drop"] / c["enq"] if c["enq"] else math.nan,
            "mark_pct": 100 * c["mark"] / c["enq"] if c["enq"] else math.nan,
            "util": 8 * s.tb_bytes[ack & w].sum() / (b - a) / LINK_BPS,
            "price": (s["aqm_price.R1"][w].mean() if "aqm_price.R1" in s and
                      r.variant.startswith(PRICED) else math.nan),
            "loss_pct_whole": 100 * r["aqm.all.loss_ratio"],
            "late_apd": r["slots.late"], "late_phy": r["slots.late_phy"],
            "slots": r["slots.total"]})
    if mismatched:
        raise SystemExit("table.py settled: packets.csv does not recount the apd's AQM "
                         "counters:\n  " + "\n  ".join(mismatched))
    runs = pd.DataFrame(rows).sort_values(["variant", "connections", "seed"])
    runs.to_csv(out / "settled.csv", index=False, float_format="%.6g")
    loads = sorted(runs.connections.unique())
    print(f"window {', '.join(sorted(set(runs.window)))}; "
          f"{', '.join(str(n) for n in loads)} connections")
    digits = {"queue": 1, "loss_pct": 2, "mark_pct": 1, "util": 3, "price": 0,
              "loss_pct_whole": 2}
    for var, g in runs.groupby("variant", sort=False):
        for col, d in digits.items():
            if g[col].isna().all():
                continue
            print(f"| {NAMES.get(var, var)} | {col} | " + " | ".join(
                cell(g[g.connections == n][col], d) for n in loads) + " |")
    late(runs)
    plot_against_load(
        runs, out, [("queue", "mean queue (1052-byte packets)", "mean-queue"),
                    ("loss_pct", "loss ratio (%)", "loss-ratio"),
                    ("util", "utilisation (MAC throughput / 10 Mb/s)", "utilisation"),
                    ("mark_pct", "ECN mark ratio (%)", "mark-ratio")],
        "queue", f"Wang & Song, REAQM, Fig. 3, settled ({runs.window.iloc[0]}): mean, 95 % "
        "interval over seeds", prefix="settled-")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in ("load", "dynamics", "settle", "settled"):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    {"load": load, "dynamics": dynamics, "settle": settle,
     "settled": settled}[argv[0]](out, [Path(a) for a in argv[2:]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
