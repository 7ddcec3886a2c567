"""Andrew & Hanly, CLAMP, Figs. 4, 5 and 7 from a fading-sweep.yaml sweep, laid out as the
paper lays them out (one panel per protocol and Doppler):

    .venv/bin/python experiments/clamp/plot_sweep.py [--settled-from S] SWEEP [MORE ...] OUTDIR

(or a fading-sweep-low-rate.yaml sweep, which has no Doppler axis: 60 Hz)

reads SWEEP/sweep.csv (of each sweep named: more points of the same set-up, e.g. further
values of a) and writes OUTDIR/fig4.png (throughput per flow against mean
queueing delay), fig5.png (total throughput and mean 1-Mbyte download time) and fig7.png
(NewReno's buffer and CLAMP's a against mean queueing delay), and a README.md in OUTDIR: per
Doppler, one row per point (the README's tables), the late slots and residual loss that say
whether the runs are usable, and Fig. 5(b)'s gain at 50 ms by the paper's own reckoning
(§V-F: 8 Mbit over each flow's long-lived rate, the mean over the flows, read off each
curve at 50 ms of mean queueing delay). With several seeds per point (sweep.repeat) each
point is their mean, with bars (and "±") of the 95 % interval of the mean (Student t); the
gain at 50 ms is taken per seed (seed k of NewReno against seed k of CLAMP). With
--settled-from S every figure is of the window from S s to the run's planned end instead of
the whole run after its warm-up (the controllers' start-up left out): each flow's goodput
from its receiving sockets' count (flow.fNN.socket.csv), each device's queueing delay by
Little's law on the slot trace's queue and new-TB bytes in the window, and from those the
total, the 1-Mbyte download time and Jain's index over goodput / fair share. Fig. 5(b)
carries the paper's statement as a marker: NewReno's download time above twice CLAMP's at
50 ms, 10 m/s (60 Hz)."""

import json
import math
import sys

import numpy as np
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402

FLOWS = {"f1": "flow 1 (30 ms)", "f2": "flow 2 (130 ms)", "f3": "flow 3 (10 ms, shared)",
         "f4": "flow 4 (180 ms, shared)"}
STYLE = {"f1": "-", "f2": "-", "f3": "-.", "f4": "--"}  # the paper's: flows 3 dot-dashed, 4 dashed
VARIANTS = (("clamp-on", "a_bytes", "CLAMP"), ("clamp-off", "buffer_bytes", "NewReno"))


def _half_width(v: pd.Series) -> float:
    """Half-width of the 95 % interval of the mean (Student t); 0 for one value."""
    v = v.dropna()
    if len(v) < 2:
        return 0.0
    return float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))


def points(d: pd.DataFrame, dop: float, variant: str, axis: str):
    """One row per value of `axis` for (dop, variant): the seeds' means, the half-widths of
    their 95 % intervals (same columns) and the number of seeds."""
    x = d[(d["doppler_hz"] == dop) & (d["variant"] == variant)]
    g = x.groupby(axis)
    mean = g.mean(numeric_only=True).reset_index().sort_values(axis)
    half = g.agg(lambda v: _half_width(v) if pd.api.types.is_numeric_dtype(v) else 0.0)
    half = half.reset_index(drop=True).reindex(range(len(mean))).set_axis(mean.index)
    return mean, half, int(g.size().max()) if len(x) else 0

PAPER_DELAY_MS = 50.0  # §V-F: "at 50 msec of average queueing delay, and at ... 10.1 m/s"
END_TOLERANCE_MS = 10.0  # a curve that starts at 51 ms is read there for 50 ms


def _pm(v: pd.Series, scale: float = 1.0, fmt: str = "{:.0f}") -> str:
    v = v.dropna() / scale
    if v.empty:
        return ""
    if len(v) < 2:
        return fmt.format(v.mean())
    return f"{fmt.format(v.mean())} ± {fmt.format(_half_width(v))}"


def at_delay(d: pd.DataFrame, dop: float, variant: str, axis: str, seed, delay_ms: float,
             y: str = "download_1MB_mean_s"):
    """Column y (by default the mean 1-Mbyte download time from the long-lived rates) of one
    seed's curve, linearly interpolated at delay_ms of mean queueing delay (its end point
    where the curve ends within END_TOLERANCE_MS of it); None where the curve does not come
    that close."""
    x = d[(d["doppler_hz"] == dop) & (d["variant"] == variant) & (d["seed"] == seed)]
    x = x.dropna(subset=["mean_queue_delay_ms", y])
    x = x.sort_values("mean_queue_delay_ms")
    if x.empty or not (x["mean_queue_delay_ms"].min() - END_TOLERANCE_MS <= delay_ms <=
                       x["mean_queue_delay_ms"].max() + END_TOLERANCE_MS):
        return None
    return float(np.interp(delay_ms, x["mean_queue_delay_ms"], x[y]))


def gain_at(d: pd.DataFrame, dop: float, delay_ms: float = PAPER_DELAY_MS,
            y: str = "download_1MB_mean_s") -> pd.DataFrame:
    """Per seed: NewReno's and CLAMP's mean download time (column y) at delay_ms, and their
    ratio."""
    rows = []
    for seed in sorted(d["seed"].unique()):
        reno = at_delay(d, dop, "clamp-off", "buffer_bytes", seed, delay_ms, y)
        clamp = at_delay(d, dop, "clamp-on", "a_bytes", seed, delay_ms, y)
        if reno is not None and clamp is not None:
            rows.append({"seed": seed, "newreno_s": reno, "clamp_s": clamp,
                         "gain": reno / clamp})
    return pd.DataFrame(rows, columns=["seed", "newreno_s", "clamp_s", "gain"])


def tables(d: pd.DataFrame) -> str:
    """The README's tables (markdown) from a sweep's rows."""
    out = []
    late = d.get("slots.late", pd.Series(dtype=float))
    late_phy = d.get("slots.late_phy", pd.Series(dtype=float))
    out.append(f"{len(d)} runs; late slots at the apd: max {late.max():g}; the PHY's own "
               f"late slots: max {late_phy.max():g} of "
               f"{d.get('slots.total', pd.Series([0])).min():g}+ per run.\n")
    for dop in sorted(d["doppler_hz"].unique()):
        out.append(f"{dop:g} Hz:\n")
        out.append("| variant | buffer / a (kB) | seeds | mean queueing delay (ms) | "
                   "goodput f1 / f2 / f3 / f4 (kb/s) | total (Mb/s) | f4 / f3 | "
                   "1 MB download, mean over flows (s) | Jain, goodput / fair share | "
                   "residual loss |")
        out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for variant, axis, name in VARIANTS:
            x = d[(d["doppler_hz"] == dop) & (d["variant"] == variant)]
            for value, g in sorted(x.groupby(axis), key=lambda kv: kv[0]):
                flows = " / ".join(_pm(g[f"flow.{f}.goodput_bps"], 1e3) for f in FLOWS)
                ratio = g["flow.f4.goodput_bps"] / g["flow.f3.goodput_bps"]
                out.append(
                    f"| {name} | {value / 1e3:g} | {len(g)} | "
                    f"{_pm(g['mean_queue_delay_ms'])} | {flows} | "
                    f"{_pm(g['goodput_total_bps'], 1e6, '{:.2f}')} | "
                    f"{_pm(ratio, 1.0, '{:.2f}')} | "
                    f"{_pm(g['download_1MB_mean_s'], 1.0, '{:.1f}')} | "
                    f"{_pm(g['jain_index_flows_fair_share'], 1.0, '{:.3f}')} | "
                    f"{_pm(g['harq.residual_loss'], 1.0, '{:.1e}')} |")
        gain = gain_at(d, dop)
        if gain.empty:
            out.append(f"\nFig. 5(b) at {PAPER_DELAY_MS:g} ms: not both curves come within "
                       f"{END_TOLERANCE_MS:g} ms of it.\n")
        else:
            out.append(
                f"\nFig. 5(b) at {PAPER_DELAY_MS:g} ms by the paper's reckoning "
                f"({len(gain)} seed(s)): NewReno {_pm(gain['newreno_s'], 1.0, '{:.1f}')} s, "
                f"CLAMP {_pm(gain['clamp_s'], 1.0, '{:.1f}')} s, gain "
                f"{_pm(gain['gain'], 1.0, '{:.2f}')} × (per seed: "
                f"{', '.join(f'{v:.2f}' for v in gain['gain'])}); the paper: more than 2 × "
                f"at 60 Hz (a curve that ends within {END_TOLERANCE_MS:g} ms of "
                f"{PAPER_DELAY_MS:g} ms is read at its end).\n")
    return "\n".join(out) + "\n"


def _delivered_bytes(run: Path, flow: str) -> tuple[np.ndarray, np.ndarray]:
    """(t_s after t0, bytes received so far) of a flow's receiving sockets, per poll. A
    socket destroyed at the flow's end drops out of the polls' sum: the count holds its
    highest value from there (never falls)."""
    s = pd.read_csv(run / f"flow.{flow}.socket.csv")
    s = s[s.event == "poll"].groupby("t_s").bytes_received.sum()
    return s.index.values, np.maximum.accumulate(s.values)


def settled_row(run: Path, t_from: float) -> dict:
    """The sweep.csv figures of one run over [t_from, its planned end)."""
    cfg = json.loads((run / "config.json").read_text())
    t0 = json.loads((run / "run.json").read_text())["t0_mono_ns"]
    end = float(cfg["duration_s"])
    if not t_from < end:
        raise SystemExit(f"plot_sweep.py: --settled-from {t_from:g} is not before the end "
                         f"of {run} ({end:g} s)")
    span = end - t_from
    out = {}
    per_dev = {}
    for f in cfg["flows"]:
        per_dev[f["device"]] = per_dev.get(f["device"], 0) + 1
    share = []
    for f in cfg["flows"]:
        t, b = _delivered_bytes(run, f["id"])
        bps = (np.interp(end, t, b) - np.interp(t_from, t, b)) * 8 / span
        out[f"flow.{f['id']}.goodput_bps"] = bps
        share.append(bps * per_dev[f["device"]])
    rates = [out[f"flow.{f['id']}.goodput_bps"] for f in cfg["flows"]]
    out["goodput_total_bps"] = float(sum(rates))
    out["download_1MB_mean_s"] = float(np.mean([8e6 / r if r > 0 else np.inf for r in rates]))
    out["jain_index_flows_fair_share"] = float(sum(share) ** 2 / (len(share) *
                                                                   sum(x * x for x in share)))
    slots = pd.read_csv(run / "slots.csv")
    ts = (slots.t_ns - t0) / 1e9
    w = slots[(ts >= t_from) & (ts < end)]
    delays = []
    for i, dev in enumerate(cfg["devices"]):
        new_bytes = w.tb_bytes[(w.user == i) & (w.retx == 0)].sum()
        if new_bytes > 0:
            delays.append(1e3 * w[f"queue.{dev['name']}"].mean() / (new_bytes / span))
    out["mean_queue_delay_ms"] = float(np.mean(delays)) if delays else np.nan
    return out


def settle(d: pd.DataFrame, sweeps: list[str], t_from: float) -> pd.DataFrame:
    """d with each run's figures replaced by those of its settled window."""
    d = d.copy()
    for i, r in d.iterrows():
        run = next((Path(sw) / "points" / r.point for sw in sweeps
                    if (Path(sw) / "points" / r.point / "summary.json").exists()), None)
        if run is None:
            raise SystemExit(f"plot_sweep.py: no run folder for point {r.point}")
        for k, v in settled_row(run, t_from).items():
            d.loc[i, k] = v
    return d


def main(sweeps: list[str], out: str, settled_from: float | None = None) -> None:
    d = pd.concat([pd.read_csv(Path(sw) / "sweep.csv") for sw in sweeps], ignore_index=True)
    if settled_from is not None:
        d = settle(d, sweeps, settled_from)
    sweep = "+".join(Path(sw).name for sw in sweeps)
    if "doppler_hz" not in d:  # fading-sweep-low-rate.yaml: 60 Hz only
        d["doppler_hz"] = 60.0
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    dopplers = sorted(d["doppler_hz"].unique())

    fig, axes = plt.subplots(len(dopplers), 2, figsize=(10, 3.6 * len(dopplers)), sharey=True,
                             squeeze=False)
    for i, dop in enumerate(dopplers):
        for j, (variant, axis, name) in enumerate(VARIANTS):
            x, h, n = points(d, dop, variant, axis)
            ax = axes[i][j]
            for f, label in FLOWS.items():
                col = f"flow.{f}.goodput_bps"
                ax.errorbar(x["mean_queue_delay_ms"], x[col] / 1e6, yerr=h[col] / 1e6,
                            xerr=h["mean_queue_delay_ms"], fmt=STYLE[f], marker="o",
                            capsize=2, label=label)
            ax.set_title(f"{name}, {dop:g} Hz" + (f" ({n} seeds)" if n > 1 else ""))
            ax.set_xlabel("mean queueing delay (ms)")
            ax.set_ylabel("throughput (Mb/s)")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    when = f", from {settled_from:g} s on" if settled_from is not None else ""
    fig.suptitle(f"Throughput per flow (Andrew & Hanly, CLAMP, Fig. 4), testbed{when}")
    fig.tight_layout()
    fig.savefig(outdir / "fig4.png", dpi=110)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for dop in dopplers:
        for variant, axis, name in VARIANTS:
            x, h, _ = points(d, dop, variant, axis)
            ls = "-" if variant == "clamp-on" else "--"
            axes[0].errorbar(x["mean_queue_delay_ms"], x["goodput_total_bps"] / 1e6,
                             yerr=h["goodput_total_bps"] / 1e6, xerr=h["mean_queue_delay_ms"],
                             fmt=ls, marker="o", capsize=2, label=f"{name}, {dop:g} Hz")
            axes[1].errorbar(x["mean_queue_delay_ms"], x["download_1MB_mean_s"],
                             yerr=h["download_1MB_mean_s"], xerr=h["mean_queue_delay_ms"],
                             fmt=ls, marker="o", capsize=2, label=f"{name}, {dop:g} Hz")
    if 60.0 in dopplers:
        gain = gain_at(d, 60.0)
        if not gain.empty:  # the paper's statement (§V-F), drawn from the testbed's CLAMP
            axes[1].plot([PAPER_DELAY_MS], [2 * gain["clamp_s"].mean()], marker="^",
                         color="k", linestyle="none", markersize=8,
                         label="paper (§V-F): NewReno above this at 50 ms, 60 Hz "
                               "(2 × CLAMP's)")
    axes[0].set_ylabel("total throughput (Mb/s)")
    axes[1].set_ylabel("mean time to download 1 Mbyte (s)")
    for ax, t in zip(axes, ("(a) total throughput", "(b) 1-Mbyte download time")):
        ax.set_title(t)
        ax.set_xlabel("mean queueing delay (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"Andrew & Hanly, CLAMP, Fig. 5, testbed{when}")
    fig.tight_layout()
    fig.savefig(outdir / "fig5.png", dpi=110)

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for dop in dopplers:
        for variant, axis, name in VARIANTS:
            x, h, _ = points(d, dop, variant, axis)
            ls = "-" if variant == "clamp-on" else "--"
            label = f"CLAMP a, {dop:g} Hz" if variant == "clamp-on" else \
                f"NewReno buffer, {dop:g} Hz"
            ax.errorbar(x["mean_queue_delay_ms"], x[axis] / 1e3, xerr=h["mean_queue_delay_ms"],
                        fmt=ls, marker="o", capsize=2, label=label)
    ax.set_xlabel("mean queueing delay (ms)")
    ax.set_ylabel("buffer or a (kB)")
    ax.set_title("Andrew & Hanly, CLAMP, Fig. 7, testbed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(outdir / "fig7.png", dpi=110)
    window = (f"the window from {settled_from:g} s to each run's end" if settled_from is not None
              else "each run after its warm-up")
    text = (f"# Andrew & Hanly, CLAMP, Figs. 4, 5 and 7: the tables of {sweep}\n\n"
            f"Goodput, queueing delay and everything from them over {window}.\n\n"
            f"Written by experiments/clamp/plot_sweep.py from sweep.csv; the figures are "
            f"beside this page.\n\n" + tables(d))
    (outdir / "README.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    args = sys.argv[1:]
    frm = None
    if args[:1] == ["--settled-from"] and len(args) > 1:
        frm, args = float(args[1]), args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    main(args[:-1], args[-1], frm)
