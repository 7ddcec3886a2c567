"""Andrew & Hanly, CLAMP, Fig. 5(b) with real downloads, from download.yaml sweeps:

    .venv/bin/python experiments/clamp/download_table.py SWEEP [MORE ...] OUTDIR

reads SWEEP/sweep.csv (of each sweep named: more points or seeds of the same set-up) and
writes OUTDIR/fig5b.png (the mean time to download 1 Mbyte against the mean queueing delay,
NewReno over its buffers against CLAMP over a, per Doppler) and a README.md in OUTDIR: one
row per point (mean and 95 % interval of the mean over the seeds, Student t), the late slots
that say whether the runs are usable, and Fig. 5(b)'s gain at 50 ms per seed (seed k of
NewReno against seed k of CLAMP, each curve read by linear interpolation, as plot_sweep.py
reads the long-lived flows' curves). The download time is summary.json's
transfers.time_mean_of_flows_s: the mean over the four flows of each flow's mean download
time (every file a new TCP connection; those started in the warm-up and the one cut at the
end left out), which the slow flows dominate, as §V-F says."""

import importlib.util
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

_spec = importlib.util.spec_from_file_location("clamp_plot_sweep",
                                               Path(__file__).with_name("plot_sweep.py"))
ps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ps)

Y = "transfers.time_mean_of_flows_s"


def tables(d: pd.DataFrame) -> str:
    out = [f"{len(d)} runs; late slots at the apd: max {d['slots.late'].max():g}; the "
           f"PHY's own: max {d['slots.late_phy'].max():g} of {d['slots.total'].min():g}+ "
           f"per run.\n"]
    for dop in sorted(d["doppler_hz"].unique()):
        out.append(f"{dop:g} Hz:\n")
        out.append("| variant | buffer / a (kB) | seeds | mean queueing delay (ms) | "
                   "downloads completed | mean time f1 / f2 / f3 / f4 (s) | "
                   "mean over flows (s) | mean over downloads (s) | total goodput (Mb/s) |")
        out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for variant, axis, name in ps.VARIANTS:
            x = d[(d["doppler_hz"] == dop) & (d["variant"] == variant)]
            for value, g in sorted(x.groupby(axis), key=lambda kv: kv[0]):
                flows = " / ".join(ps._pm(g[f"flow.{f}.transfers.time_mean_s"], 1.0, "{:.1f}")
                                   for f in ps.FLOWS)
                out.append(
                    f"| {name} | {value / 1e3:g} | {len(g)} | "
                    f"{ps._pm(g['mean_queue_delay_ms'])} | "
                    f"{ps._pm(g['transfers.completed'])} | {flows} | "
                    f"{ps._pm(g[Y], 1.0, '{:.1f}')} | "
                    f"{ps._pm(g['transfers.time_mean_s'], 1.0, '{:.1f}')} | "
                    f"{ps._pm(g['goodput_total_bps'], 1e6, '{:.2f}')} |")
        gain = ps.gain_at(d, dop, y=Y)
        if gain.empty:
            out.append(f"\nFig. 5(b) at {ps.PAPER_DELAY_MS:g} ms: not both curves come within "
                       f"{ps.END_TOLERANCE_MS:g} ms of it in any seed.\n")
        else:
            out.append(
                f"\nFig. 5(b) at {ps.PAPER_DELAY_MS:g} ms with real downloads ({len(gain)} "
                f"seed(s)): NewReno {ps._pm(gain['newreno_s'], 1.0, '{:.1f}')} s, CLAMP "
                f"{ps._pm(gain['clamp_s'], 1.0, '{:.1f}')} s, gain "
                f"{ps._pm(gain['gain'], 1.0, '{:.2f}')} × (per seed: "
                f"{', '.join(f'{v:.2f}' for v in gain['gain'])}); the paper: more than 2 × "
                f"at 60 Hz.\n")
    return "\n".join(out) + "\n"


def main(sweeps: list[str], out: str) -> None:
    d = pd.concat([pd.read_csv(Path(sw) / "sweep.csv") for sw in sweeps], ignore_index=True)
    if "ok" in d:
        bad = d[~d["ok"].astype(bool)]
        if len(bad):
            print(f"download_table.py: leaving out {len(bad)} failed run(s): "
                  + ", ".join(bad["point"].astype(str)), file=sys.stderr)
        d = d[d["ok"].astype(bool)]
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for dop in sorted(d["doppler_hz"].unique()):
        for variant, axis, name in ps.VARIANTS:
            x, h, n = ps.points(d, dop, variant, axis)
            ax.errorbar(x["mean_queue_delay_ms"], x[Y], yerr=h[Y], xerr=h["mean_queue_delay_ms"],
                        fmt="-" if variant == "clamp-on" else "--", marker="o", capsize=2,
                        label=f"{name}, {dop:g} Hz" + (f" ({n} seeds)" if n > 1 else ""))
        gain = ps.gain_at(d, dop, y=Y)
        if dop == 60.0 and not gain.empty:  # the paper's statement (§V-F)
            ax.plot([ps.PAPER_DELAY_MS], [2 * gain["clamp_s"].mean()], marker="^", color="k",
                    linestyle="none", markersize=8,
                    label="paper (§V-F): NewReno above this at 50 ms, 60 Hz (2 × CLAMP's)")
    ax.set_xlabel("mean queueing delay (ms)")
    ax.set_ylabel("mean time to download 1 Mbyte,\nmean over the flows (s)")
    ax.set_title("Andrew & Hanly, CLAMP, Fig. 5(b), testbed: real downloads", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(outdir / "fig5b.png", dpi=110)
    name = "+".join(Path(sw).name for sw in sweeps)
    text = (f"# Andrew & Hanly, CLAMP, Fig. 5(b) with real downloads: the tables of {name}\n\n"
            "Written by experiments/clamp/download_table.py from sweep.csv; the figure is "
            "beside this page.\n\n" + tables(d))
    (outdir / "README.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1:-1], sys.argv[-1])
