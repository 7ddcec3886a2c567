"""A sweep's results (oppsched.run.sweep runs its points): sweep.csv, one row per run
(variant, seed, ok and errors, the axis values and the summary's aggregate, per-flow and
per-user figures), and report.html with plots/*.png (metric against axis, one line per
variant and flow, mean and 95 % interval over seeds). `oppsched analyze DIR` of a sweep
folder writes them again from the runs' summaries.
"""

from __future__ import annotations

import html
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from oppsched.paths import write_atomic
from oppsched.run import runner, sweepspec
from oppsched.config import ConfigError
from oppsched.analysis.report import page_head, pyplot, save_figure

MANIFEST = "sweep.json"
CSV = "sweep.csv"
ID_COLUMNS = ("point", "variant", "seed")
# Whether a run's summary reports errors (0/1) and which: such a run is in the table, marked.
STATUS_COLUMNS = ("ok", "errors")
# What the report plots against every axis when the sweep names no plots.
DEFAULT_METRICS = (
    ("goodput_total_bps", "aggregate TCP goodput (b/s)"),
    ("flow.*.goodput_bps", "goodput per flow (b/s)"),
    ("jain_index_flows", "Jain's index over flows"),
    ("jain_index_users", "Jain's index over users"),
    ("mean_queue_delay_ms", "mean queueing delay (ms)"),
    ("mac_throughput_total_bps", "MAC throughput (b/s)"),
)


# ----------------------------------------------------------------------------------------
# Results: sweep.csv and the report


def flatten_summary(s: dict) -> dict:
    """The numbers of a run's summary as flat columns: top-level and nested scalars
    ("jain_index_flows", "slots.late"), per flow ("flow.<id>.<key>"), per user
    ("user.<name>.<key>"), and the figures the sweep plots: goodput_total_bps, download_1MB_mean_s,
    mac_throughput_total_bps, mean_queue_delay_ms, mean_slot_gap_ms (means over users), the
    mean and median over users of slot_gap_cov and slot_gap_backlogged_cov
    (mean_slot_gap_cov, median_slot_gap_cov, ...), mean_rtt_ms (mean over flows) and the
    smallest and largest resource (slot) fraction of a user with their ratio."""
    row: dict = {}

    def scalars(prefix: str, d: dict) -> None:
        for k, v in d.items():
            if k in ("config", "plots"):
                continue
            if isinstance(v, bool):
                row[prefix + k] = int(v)
            elif isinstance(v, (int, float)) or v is None:
                row[prefix + k] = v
            elif isinstance(v, dict):
                scalars(f"{prefix}{k}.", v)

    scalars("", {k: v for k, v in s.items() if k not in ("flows", "users")})
    for f in s.get("flows", []):
        scalars(f"flow.{f['id']}.", f)
    for u in s.get("users", []):
        scalars(f"user.{u['name']}.", u)
    flows = [f.get("goodput_bps") for f in s.get("flows", []) if f.get("goodput_bps") is not None]
    if flows:
        row["goodput_total_bps"] = float(sum(flows))
        # Andrew & Hanly, CLAMP, Fig. 5(b): the mean over the flows of the time a 1-Mbyte
        # file takes at the flow's rate (what a user of each flow would wait).
        if all(g > 0 for g in flows):
            row["download_1MB_mean_s"] = float(np.mean([8e6 / g for g in flows]))
    users = s.get("users", [])
    macs = [u["mac_throughput_bps"] for u in users if u.get("mac_throughput_bps") is not None]
    if macs:
        row["mac_throughput_total_bps"] = float(sum(macs))
    sf = [u["slot_fraction"] for u in users if u.get("slot_fraction") is not None]
    if sf:
        row["slot_fraction_min"], row["slot_fraction_max"] = float(min(sf)), float(max(sf))
        row["slot_fraction_min_max_ratio"] = float(min(sf) / max(sf)) if max(sf) > 0 else None
    qd = [u["mean_queue_delay_ms"] for u in users if u.get("mean_queue_delay_ms") is not None]
    if qd:
        row["mean_queue_delay_ms"] = float(np.mean(qd))
    # Srinivasan & Baras, Figs. 5 and §V: scheduling jitter and RTT, means over the users
    # (flows) that have them, so that a sweep plots one line against its axis.
    # The median too: a user whose TCP sat out a retransmission timeout has one gap of
    # seconds, a CoV far above the others', and would dominate the mean.
    for col, key, items, f in (
            ("mean_slot_gap_ms", "slot_gap_mean_ms", users, np.mean),
            ("mean_slot_gap_cov", "slot_gap_cov", users, np.mean),
            ("median_slot_gap_cov", "slot_gap_cov", users, np.median),
            ("mean_slot_gap_backlogged_cov", "slot_gap_backlogged_cov", users, np.mean),
            ("median_slot_gap_backlogged_cov", "slot_gap_backlogged_cov", users, np.median),
            ("mean_rtt_ms", "rtt_ms_mean", s.get("flows", []), np.mean)):
        xs = [it[key] for it in items if it.get(key) is not None]
        if xs:
            row[col] = float(f(xs))
    return row


def collect(outdir, reanalyze: bool = False) -> pd.DataFrame:
    """Writes DIR/sweep.csv and DIR/report.html from the points that have a summary
    (recomputing each from its traces first if `reanalyze`). Returns the table. A summary
    with errors (a point killed after its summary was written, or one whose re-analysis
    finds a fault) is kept in the table but marked: `ok` 0 and its `errors`, a warning on
    stderr naming it, and it is left out of the report's plots and means."""
    outdir = Path(outdir)
    try:
        man = json.loads((outdir / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{outdir}: no readable {MANIFEST}: not a sweep folder ({exc})") from None
    axis_names = [a["name"] for a in man["axes"]]
    rows = []
    for p in man["points"]:
        rundir = outdir / "points" / p["rel"]
        if not (rundir / "summary.json").is_file():
            continue
        s = runner.analyze_run(rundir) if reanalyze else json.loads(
            (rundir / "summary.json").read_text())
        errors = [str(e) for e in s.get("errors") or []]
        row = {"point": p["rel"], "variant": p["variant"] or "", "seed": s["config"]["seed"],
               "ok": 0 if errors else 1, "errors": "; ".join(errors)}
        for a in axis_names:
            row[a] = p["values"].get(a)
        for k, v in flatten_summary(s).items():
            row[k if k not in row else f"summary.{k}"] = v
        rows.append(row)
    df = pd.DataFrame(rows, columns=list(ID_COLUMNS) + list(STATUS_COLUMNS) + axis_names
                      if not rows else None)
    bad = df[df["ok"] == 0] if not df.empty else df
    for _, r in bad.iterrows():
        print(f"oppsched sweep: WARNING: {r['point']} has errors and is left out of the "
              f"plots (ok=0 in {CSV}; a sweep run again re-runs it): {r['errors']}",
              file=sys.stderr)
    write_atomic(outdir / CSV, df.to_csv(index=False))
    write_sweep_report(outdir, man, df)
    return df


def _ci95(x: np.ndarray) -> float:
    """Half-width of the 95 % confidence interval of the mean (Student t); 0 for one run."""
    x = x[np.isfinite(x)]
    if len(x) < 2:
        return 0.0
    # imported here, not at the top: scipy.stats takes about a second of CPU to import,
    # and every oppsched command imports this module
    from scipy import stats
    return float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


def _expand_y(df: pd.DataFrame, pattern: str) -> list[str]:
    if "*" not in pattern:
        return [pattern] if pattern in df.columns else []
    rx = re.compile("^" + re.escape(pattern).replace(r"\*", "([^.]+)") + "$")
    return [c for c in df.columns if rx.match(c)]


def series(df: pd.DataFrame, x: str, y: str, axis_names: list[str],
           by: list[str] | None = None) -> list[dict]:
    """The lines of one plot. Each run set that differs only in its seed is one point: the
    mean of x and y and the 95 % interval of y. Points are joined into a line per variant,
    per matched column (a `*` in y) and per value of the `by` axes; the remaining axes run
    along the line. Default `by`: where x is an axis, the other axes; where x is a metric
    (goodput against queueing delay), none: every axis runs along the line. A variant the
    x axis does not apply to gives one reference level instead of a line."""
    out = []
    for col in _expand_y(df, y):
        for variant, dv in df.groupby("variant", sort=False):
            if dv[col].isna().all():
                continue
            present = [a for a in axis_names if a in dv.columns and dv[a].notna().any()]
            if x in axis_names and x not in present:
                ys = pd.to_numeric(dv[col], errors="coerce").to_numpy(float)
                label = " ".join(filter(None, [variant or "", col if "*" in y else ""]))
                out.append({"label": label or col, "ref": (float(np.nanmean(ys)), _ci95(ys))})
                continue
            if x not in dv.columns or dv[x].isna().all():
                continue
            split = [a for a in (by if by is not None else
                                 [a for a in axis_names if a != x] if x in axis_names else [])
                     if a in present]
            lines = (dv.groupby(split[0] if len(split) == 1 else split, sort=True, dropna=False)
                     if split else [((), dv)])
            for skey, dl in lines:
                skey = skey if isinstance(skey, tuple) else (skey,)
                pts = []
                groups = (dl.groupby(present[0] if len(present) == 1 else present, sort=True,
                                     dropna=False) if present else [((), dl)])
                along = [a for a in present if a not in split]
                tags = []
                for gkey, g in groups:
                    xs = pd.to_numeric(g[x], errors="coerce").to_numpy(float)
                    ys = pd.to_numeric(g[col], errors="coerce").to_numpy(float)
                    if not np.isfinite(xs).any() or not np.isfinite(ys).any():
                        continue
                    pts.append((float(np.nanmean(xs)), float(np.nanmean(ys)), _ci95(ys),
                                int(np.isfinite(ys).sum())))
                    gkey = gkey if isinstance(gkey, tuple) else (gkey,)
                    vals = dict(zip(present, gkey))
                    tags.append(",".join(f"{a}={sweepspec.format_value(vals[a])}" for a in along))
                if x in axis_names:
                    order = sorted(range(len(pts)), key=lambda i: pts[i])
                    pts, tags = [pts[i] for i in order], [tags[i] for i in order]
                label = " ".join(filter(None, [variant or "", col if "*" in y else "",
                                               ",".join(f"{a}={sweepspec.format_value(v)}"
                                                        for a, v in zip(split, skey))]))
                if pts:
                    # Against a metric, a line is parametric: in the order of its axes,
                    # each point tagged with their values.
                    out.append({"label": label or col, "points": pts,
                                "tags": tags if x not in axis_names else []})
    return out


def _plot_specs(man: dict, df: pd.DataFrame) -> list[dict]:
    if man["plots"]:
        return man["plots"]
    specs = []
    for a in man["axes"]:
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in a["values"])
        vals = [v for v in a["values"] if isinstance(v, (int, float))]
        logx = numeric and len(vals) > 2 and min(vals) > 0 and max(vals) / min(vals) >= 50
        for metric, title in DEFAULT_METRICS:
            if _expand_y(df, metric):
                specs.append({"x": a["name"], "y": metric, "title": f"{title} against {a['name']}",
                              "logx": logx, "logy": False})
    return specs


def write_sweep_report(outdir: Path, man: dict, df: pd.DataFrame) -> Path:
    """report.html of a sweep: what was swept, a plot per (metric, axis) with one line per
    variant (and flow), mean and 95 % interval over seeds, and the table of runs."""
    plt = pyplot()
    e = html.escape
    axis_names = [a["name"] for a in man["axes"]]
    # A run whose summary reports errors measured something else than the point asks for
    # (or nothing): its figures would bias a mean without a trace in the plot.
    bad = df[df["ok"] == 0] if "ok" in df.columns else df.iloc[0:0]
    df = df.drop(bad.index)
    plotdir = outdir / "plots"
    plotdir.mkdir(exist_ok=True)
    for old in plotdir.glob("sweep-*.png"):
        old.unlink()
    pngs = []
    if not df.empty:
        axes_by_name = {a["name"]: a for a in man["axes"]}
        for i, spec in enumerate(_plot_specs(man, df)):
            data, ticks = df, None
            ax_spec = axes_by_name.get(spec["x"])
            if ax_spec and not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                   for v in ax_spec["values"]):
                # A categorical axis (file names, kinds): its values in order along x.
                labels = [sweepspec.format_value(v) for v in ax_spec["values"]]
                pos = {lab: k for k, lab in enumerate(labels)}
                data = df.assign(**{spec["x"]: df[spec["x"]].map(
                    lambda v: pos.get(sweepspec.format_value(v)) if pd.notna(v) else None)})
                ticks = [Path(lab).name for lab in labels]
            lines = series(data, spec["x"], spec["y"], axis_names, spec.get("by"))
            if not lines:
                continue
            paper = spec.get("paper") or []
            fig, ax = plt.subplots(figsize=(7, 4.2))
            for k, ln in enumerate(lines):
                color = f"C{k % 10}"
                if "ref" in ln:
                    m, ci = ln["ref"]
                    ax.axhline(m, ls="--", lw=1.0, color=color,
                               label=f"{ln['label']} (no {spec['x']})")
                    if ci > 0:
                        ax.axhspan(m - ci, m + ci, color=color, alpha=0.12)
                    continue
                xs, ys, cis, _ = zip(*ln["points"])
                ax.errorbar(xs, ys, yerr=cis, marker="o", ms=4, capsize=3, lw=1.2, color=color,
                            label=ln["label"])
                for px, py, tag in zip(xs, ys, ln.get("tags", [])):
                    ax.annotate(tag, (px, py), textcoords="offset points", xytext=(4, 4),
                                fontsize=6, color=color)
            for q in paper:  # the paper's own values, black, beside the measured ones
                if q["x"] is None:
                    ax.axhline(q["y"], ls=":", lw=1.2, color="black", label=q["label"])
                else:
                    ax.plot([q["x"]], [q["y"]], marker="*", ms=11, ls="none", color="black",
                            label=q["label"])
            ax.set_xlabel(spec["x"])
            if ticks is not None:
                ax.set_xticks(range(len(ticks)))
                ax.set_xticklabels(ticks, fontsize=8)
            ax.set_ylabel(spec["y"])
            if spec.get("logx"):
                ax.set_xscale("log")
            if spec.get("logy"):
                ax.set_yscale("log")
            ax.set_title(spec.get("title") or f"{spec['y']} against {spec['x']}", fontsize=10)
            ax.grid(alpha=0.3)
            if len(lines) + len(paper) > 1:
                ax.legend(fontsize=7, ncol=2 if len(lines) > 8 else 1)
            name = f"sweep-{i:02d}-{re.sub(r'[^A-Za-z0-9_.-]', '_', spec['y'])}.png"
            pngs.append("plots/" + save_figure(fig, plotdir, name))

    n_points = len(man["points"])
    parts = [
        page_head(f"oppsched sweep: {man['experiment']}"),
        f"<h1>Sweep: {e(man['experiment'])}</h1>",
        f"<p>{e(man.get('description', ''))}</p>",
        f"<p>kind <code>{e(man['kind'])}</code>, {man['duration_s']:g} s per run, "
        f"{len(df)} of {n_points} runs finished without errors, {man['repeat']} seed(s) "
        "per point; "
        "error bars: 95 % interval of the mean over seeds (Student t). "
        f"Every run: <code>{e(CSV)}</code> (one row per run).</p>",
        "<h2>Axes</h2><table><tr><th>axis</th><th>key</th><th>values</th><th>variants</th></tr>",
    ]
    for a in man["axes"]:
        vals = ", ".join(sweepspec.format_value(v) for v in a["values"])
        parts.append(f"<tr><td>{e(a['name'])}</td><td><code>{e(', '.join(a['keys']))}</code></td>"
                     f"<td>{e(vals)}</td><td>{e(', '.join(a['variants'] or ['all']))}</td></tr>")
    parts.append("</table>")
    if len(bad):
        parts.append(f"<h2>Runs with errors ({len(bad)})</h2><p>Left out of the plots and "
                     f"means (<code>ok</code> 0 in <code>{e(CSV)}</code>); running the sweep "
                     "again re-runs them.</p><table><tr><th>run</th><th>errors</th></tr>")
        for _, r in bad.iterrows():
            parts.append(f"<tr><td>{e(str(r['point']))}</td><td>{e(str(r['errors']))}</td></tr>")
        parts.append("</table>")
    for png in pngs:
        parts.append(f"<img src='{e(png)}' alt='{e(png)}'>")
    if not df.empty:
        shown = [c for c in ("goodput_total_bps", "jain_index_flows", "jain_index_users",
                             "mean_queue_delay_ms", "mac_throughput_total_bps", "slots.late")
                 if c in df.columns]
        keys = [a for a in axis_names if a in df.columns] + ["variant"]
        parts.append("<h2>Mean over seeds</h2><table><tr>"
                     + "".join(f"<th>{e(k)}</th>" for k in keys + ["runs"] + shown) + "</tr>")
        for key, g in df.groupby(keys, sort=True, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            cells = [sweepspec.format_value(k) if not (isinstance(k, float) and math.isnan(k))
                     else "&ndash;" for k in key]
            cells.append(str(len(g)))
            for c in shown:
                v = pd.to_numeric(g[c], errors="coerce").mean()
                cells.append("&ndash;" if pd.isna(v) else f"{v:.4g}")
            parts.append("<tr>" + "".join(f"<td>{e(c) if c != '&ndash;' else c}</td>"
                                          for c in cells) + "</tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return write_atomic(outdir / "report.html", "\n".join(parts))


def is_sweep_dir(path) -> bool:
    return (Path(path) / MANIFEST).is_file()
