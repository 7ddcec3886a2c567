"""Andrew & Hanly, CLAMP, Figs. 4, 5 and 7 from a fading-sweep.yaml sweep, laid out as the
paper lays them out (one panel per protocol and Doppler):

    .venv/bin/python experiments/clamp/plot_sweep.py results/clamp-sweep OUTDIR

(or a fading-sweep-low-rate.yaml sweep, which has no Doppler axis: 60 Hz)

reads SWEEP/sweep.csv and writes OUTDIR/fig4.png (throughput per flow against mean
queueing delay), fig5.png (total throughput and mean 1-Mbyte download time) and fig7.png
(NewReno's buffer and CLAMP's a against mean queueing delay). With several seeds per point
(sweep.repeat) each point is their mean, with bars of the 95 % interval of the mean (Student
t) on both axes."""

import math
import sys
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


def main(sweep: str, out: str) -> None:
    d = pd.read_csv(Path(sweep) / "sweep.csv")
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
    fig.suptitle("Throughput per flow (Andrew & Hanly, CLAMP, Fig. 4), testbed")
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
    axes[0].set_ylabel("total throughput (Mb/s)")
    axes[1].set_ylabel("mean time to download 1 Mbyte (s)")
    for ax, t in zip(axes, ("(a) total throughput", "(b) 1-Mbyte download time")):
        ax.set_title(t)
        ax.set_xlabel("mean queueing delay (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Andrew & Hanly, CLAMP, Fig. 5, testbed")
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


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
