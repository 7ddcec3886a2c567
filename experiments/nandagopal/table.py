"""Nandagopal et al., Table I from a run folder of weights.yaml or rtts.yaml (or a point of
the errors.yaml sweep): for each period between flows joining and leaving, each flow's
W_ideal (its weighted share of the link's 73.24 packets/s, as the paper's), W_actual
(mean received rate, packets/s, from the receivers' traces: summary.json's wrc.periods)
and W/i; then the figures after analysis.warmup_s.

    .venv/bin/python experiments/nandagopal/table.py RUN_DIR [RUN_DIR ...]

With --seeds, one table per group of run folders given as NAME=DIR,DIR,...: per period and
flow, W_actual / W_ideal as the mean and 95 % interval over the folders (Student t), and the
Jain index after warm-up the same way (the seeds of one sweep point):

    .venv/bin/python experiments/nandagopal/table.py --seeds epoch-350=D1,D2,D3 epoch-1000=D4,D5,D6

With --points, one row per sweep point folder group (the seeds of each <point>/<variant>
under SWEEP/points): the link's total after warm-up, Jain's index over rate / weight,
each flow's share of its weighted share, and the receivers' loss decisions summed over
the flows (gaps taken for channel error; congestion losses that halved the rate; those
ignored as revealed by a packet sent at an older rate), mean and 95 % interval:

    .venv/bin/python experiments/nandagopal/table.py --points SWEEP

With --counters, the mechanism behind each flow's share, per group of run folders given as
NAME=DIR,DIR,...: from the receivers' counters (wrc.<flow>.recv.stats.json) the fraction of
epochs without a sample at the latest rate, the increases and the decreases per epoch and
their ratio, and the flow's share of its weighted share in the period with the most flows,
each the mean over the folders:

    .venv/bin/python experiments/nandagopal/table.py --counters "1..5=D1,D2,D3"

With --by-samples, the same groups: per flow, from the receivers' epoch traces
(wrc.<flow>.epochs.csv, every epoch end over the whole run), the mean number of ratio
samples per epoch (packets echoing the latest rate, Fig. 3 line 6), the fraction of epochs
with 0, 1, 2-3 and 4 or more, and how often an epoch with 1, 2-3 and 4 or more samples ends
in a decrease, each the mean over the folders:

    .venv/bin/python experiments/nandagopal/table.py --by-samples "1000 ms=D1,D2,D3"
"""

import csv
import json
import math
import statistics
import sys
from pathlib import Path

from scipy import stats

LINK_PPS = 300e3 / (512 * 8)  # the paper's 300 kb/s of 512-byte packets: 73.24 packets/s


def table(rundir: Path) -> str:
    s = json.loads((rundir / "summary.json").read_text())
    w = s["wrc"]
    out = [f"{rundir}: {s['experiment']} {s.get('variant', '')}".rstrip(),
           "| period (s) | flow | weight | W_ideal | W_actual | W/i | W_actual / W_ideal |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for p in w["periods"]:
        wsum = sum(f["weight"] for f in p["flows"].values())
        for fid, f in p["flows"].items():
            ideal = LINK_PPS * f["weight"] / wsum
            out.append(f"| {p['from_s']:.0f}-{p['to_s']:.0f} | {fid} | {f['weight']:g} | "
                       f"{ideal:.1f} | {f['w_actual_pps']:.1f} | {f['w_per_weight_pps']:.1f} | "
                       f"{f['w_actual_pps'] / ideal:.2f} |")
        out.append(f"| {p['from_s']:.0f}-{p['to_s']:.0f} | total | | {LINK_PPS:.1f} | "
                   f"{p['total_pps']:.1f} | | {p['total_pps'] / LINK_PPS:.2f} |")
    out.append(f"Jain's index over rate / weight (after warm-up): "
               f"{w['jain_index_weighted']:.3f}; datagrams lost: {100 * w['loss_ratio']:.2f} %")
    gaps = [(f["wrc"]["random_losses"] or 0, f["wrc"]["congestion_losses"] or 0)
            for f in s["flows"] if f.get("wrc")]
    out.append(f"{total_line(w)}; gaps taken for channel error / congestion: "
               f"{sum(g[0] for g in gaps)} / {sum(g[1] for g in gaps)}; slots the PHY missed: "
               f"{s['slots'].get('late_phy')} of {s['slots']['total']}")
    return "\n".join(out)


def total_line(w: dict) -> str:
    """The link's received rate. With every flow running the whole time (one period), the
    summary's figures after warm-up: the sum of the flows' rates and each flow's share of
    its weighted share. When flows join and leave (several periods), a sum of rates each
    averaged over its own flow's time is no rate of the link (it read 1.02 of the link for
    weights.yaml): then the periods' totals, weighted by their lengths."""
    periods = w.get("periods") or []
    if len(periods) <= 1:
        shares = ", ".join(f"{k} {v:.2f}" for k, v in (w.get("share_of_ideal") or {}).items())
        return (f"After warm-up: {w['steady_total_pps']:.1f} packets/s "
                f"({w['steady_total_pps'] / LINK_PPS:.2f} of the link), share of the weighted "
                f"share: {shares}")
    span = sum(p["to_s"] - p["from_s"] for p in periods)
    total = sum(p["total_pps"] * (p["to_s"] - p["from_s"]) for p in periods) / span
    return (f"Over the {len(periods)} periods (warm-up included): {total:.1f} packets/s "
            f"({total / LINK_PPS:.2f} of the link); each flow's share per period is above")


def mean_ci(values: list) -> tuple[float, float | None]:
    """The mean and the half-width of its 95 % interval (Student t); None for one value."""
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, None
    return m, stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def _ci(values: list) -> str:
    """mean +- half-width of the 95 % interval of the mean (Student t)."""
    m, h = mean_ci(values)
    return f"{m:.2f}" if h is None else f"{m:.2f} ± {h:.2f}"


def seeds_table(groups: list[tuple[str, list[Path]]]) -> str:
    """W_actual / W_ideal per group, period and flow over each group's run folders."""
    out = ["| group | period (s) | " + " | ".join(f"f{i}" for i in range(1, 6))
           + " | total | Jain (rate / w) | lost (%) |",
           "| --- | --- | " + " | ".join("---" for _ in range(5)) + " | --- | --- | --- |"]
    for name, dirs in groups:
        runs = [json.loads((d / "summary.json").read_text())["wrc"] for d in dirs]
        for k, p0 in enumerate(runs[0]["periods"]):
            cells = []
            for i in range(1, 6):
                vals = []
                for w in runs:
                    p = w["periods"][k]
                    f = p["flows"].get(f"f{i}")
                    if f is not None:
                        wsum = sum(x["weight"] for x in p["flows"].values())
                        vals.append(f["w_actual_pps"] / (LINK_PPS * f["weight"] / wsum))
                cells.append(_ci(vals) if vals else "")
            total = _ci([w["periods"][k]["total_pps"] / LINK_PPS for w in runs])
            last = k == len(runs[0]["periods"]) - 1
            jain = _ci([w["jain_index_weighted"] for w in runs]) if last else ""
            lost = _ci([100 * w["loss_ratio"] for w in runs]) if last else ""
            out.append(f"| {name} ({len(dirs)} seeds) | {p0['from_s']:.0f}–{p0['to_s']:.0f} | "
                       + " | ".join(cells) + f" | {total} | {jain} | {lost} |")
    return "\n".join(out)


def _decisions(rundir: Path) -> dict:
    """The receivers' loss decisions in one run, summed over its flows."""
    out = {"random": 0, "halved": 0, "ignored": 0}
    for f in sorted(rundir.glob("wrc.*.recv.stats.json")):
        for fl in json.loads(f.read_text())["flows"].values():
            out["random"] += fl["random_losses"]
            out["halved"] += fl["congestion_losses"]
            out["ignored"] += fl["congestion_ignored"]
    return out


def points_table(sweep: Path) -> str:
    """One row per point and variant of a sweep (its seeds pooled), as the docstring says."""
    out = ["| point | variant | seeds | total / link | Jain (rate / w) | "
           + " | ".join(f"f{i} share" for i in range(1, 6))
           + " | gaps: channel error | congestion, halved | congestion, ignored |",
           "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in range(5))
           + " | --- | --- | --- |"]
    for vdir in sorted(p for p in (sweep / "points").glob("*/*") if p.is_dir()):
        runs = sorted(d for d in vdir.glob("seed-*") if (d / "summary.json").exists())
        if not runs:
            continue
        ws = [json.loads((d / "summary.json").read_text())["wrc"] for d in runs]
        dec = [_decisions(d) for d in runs]
        shares = [_ci([w["share_of_ideal"][f"f{i}"] for w in ws]) for i in range(1, 6)]
        point = vdir.parent.name.replace("experiments_nandagopal_links_", "").replace(".csv", "")
        out.append(f"| {point} | {vdir.name} | {len(runs)} | "
                   f"{_ci([w['steady_total_pps'] / LINK_PPS for w in ws])} | "
                   f"{_ci([w['jain_index_weighted'] for w in ws])} | " + " | ".join(shares)
                   + " | " + " | ".join(_ci([x[k] for x in dec])
                                        for k in ("random", "halved", "ignored")) + " |")
    return "\n".join(out)


def counters_table(groups: list[tuple[str, list[Path]]]) -> str:
    """Per group and flow, the receivers' counters and the share, as the docstring says."""
    out = ["| group | flow | epochs without a sample at the latest rate | increases per epoch "
           "| decreases per epoch | increases / decreases | share, period with the most flows |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, dirs in groups:
        rows: dict[str, list] = {}
        for d in dirs:
            periods = json.loads((d / "summary.json").read_text())["wrc"]["periods"]
            busiest = max(periods, key=lambda p: len(p["flows"]))
            wsum = sum(x["weight"] for x in busiest["flows"].values())
            for f in sorted(d.glob("wrc.*.recv.stats.json")):
                fid = f.name.split(".")[1]
                (c,) = json.loads(f.read_text())["flows"].values()
                fl = busiest["flows"].get(fid)
                share = (fl["w_actual_pps"] / (LINK_PPS * fl["weight"] / wsum)
                         if fl else math.nan)
                rows.setdefault(fid, []).append((c["empty_epochs"] / c["epochs"],
                                                 c["increases"] / c["epochs"],
                                                 c["decreases"] / c["epochs"], share))
        for fid, vals in sorted(rows.items()):
            empty, inc, dec, share = (statistics.mean(v) for v in zip(*vals))
            ratio = f"{inc / dec:.1f}" if dec > 0 else "∞"
            out.append(f"| {name} ({len(vals)} runs) | {fid} | {empty:.2f} | {inc:.3f} | "
                       f"{dec:.3f} | {ratio} | {share:.2f} |")
    return "\n".join(out)


SAMPLE_BINS = (("1", 1, 1), ("2–3", 2, 3), ("≥ 4", 4, math.inf))


def _epochs_by_samples(trace: Path) -> tuple[float, list[float], list[float]]:
    """One flow's epoch ends: the mean samples per epoch, the fraction of epochs with 0, 1,
    2-3, 4+ samples, and the decrease fraction of the epochs in each bin but 0 (nan where
    a bin is empty)."""
    with trace.open(newline="") as f:
        ends = [(int(r["samples"]), r["decision"]) for r in csv.DictReader(f)
                if r["decision"] in ("increase", "decrease", "none")]
    if not ends:
        raise SystemExit(f"{trace}: no epoch ends")
    n = len(ends)
    frac = [sum(1 for k, _ in ends if k == 0) / n]
    dec = []
    for _, lo, hi in SAMPLE_BINS:
        binned = [d for k, d in ends if lo <= k <= hi]
        frac.append(len(binned) / n)
        dec.append(sum(1 for d in binned if d == "decrease") / len(binned) if binned
                   else math.nan)
    return sum(k for k, _ in ends) / n, frac, dec


def by_samples_table(groups: list[tuple[str, list[Path]]]) -> str:
    """Per group and flow, samples per epoch and decreases by samples, as the docstring
    says."""
    bins = [b for b, _, _ in SAMPLE_BINS]
    out = ["| group | flow | samples per epoch | epochs with 0 / " + " / ".join(bins)
           + " samples | decreases, epochs with " + " / ".join(bins) + " samples |",
           "| --- | --- | --- | --- | --- |"]
    for name, dirs in groups:
        rows: dict[str, list] = {}
        for d in dirs:
            for trace in sorted(d.glob("wrc.*.epochs.csv")):
                rows.setdefault(trace.name.split(".")[1], []).append(
                    _epochs_by_samples(trace))
        for fid, vals in sorted(rows.items()):
            mean = statistics.mean(v[0] for v in vals)
            frac = [statistics.mean(v[1][i] for v in vals) for i in range(len(bins) + 1)]
            dec = [statistics.mean(v[2][i] for v in vals) for i in range(len(bins))]
            out.append(f"| {name} ({len(vals)} runs) | {fid} | {mean:.1f} | "
                       + " / ".join(f"{x:.2f}" for x in frac) + " | "
                       + " / ".join("–" if math.isnan(x) else f"{x:.2f}" for x in dec) + " |")
    return "\n".join(out)


def _groups(args: list[str], option: str) -> list[tuple[str, list[Path]]]:
    groups = []
    for arg in args:
        name, _, dirs = arg.partition("=")
        if not dirs:
            sys.exit(f"{option}: {arg!r} is not NAME=DIR,DIR,...")
        groups.append((name, [Path(d) for d in dirs.split(",")]))
    return groups


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--seeds":
        print(seeds_table(_groups(sys.argv[2:], "--seeds")))
        sys.exit(0)
    if sys.argv[1] == "--counters":
        print(counters_table(_groups(sys.argv[2:], "--counters")))
        sys.exit(0)
    if sys.argv[1] == "--by-samples":
        print(by_samples_table(_groups(sys.argv[2:], "--by-samples")))
        sys.exit(0)
    if sys.argv[1] == "--points":
        if len(sys.argv) != 3:
            sys.exit("--points: give one sweep folder")
        print(points_table(Path(sys.argv[2])))
        sys.exit(0)
    for d in sys.argv[1:]:
        print(table(Path(d)))
        print()
