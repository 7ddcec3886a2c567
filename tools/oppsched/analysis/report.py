"""report.html: the page a person reads first after a run (self-contained but for the PNGs
beside it)."""

from __future__ import annotations

import html
import os
from pathlib import Path

from oppsched.paths import write_atomic


def pyplot():
    """matplotlib.pyplot, drawing to files (the Agg backend). Imported on first use: only
    figures need matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, folder: Path, name: str) -> str:
    """Writes `fig` as folder/name (PNG, 110 dpi, tight layout), closes it and returns name,
    for the list of figures a kind's plot() returns."""
    fig.tight_layout()
    fig.savefig(Path(folder) / name, dpi=110)
    pyplot().close(fig)
    return name


def page_head(title: str) -> str:
    """The start of every report page (run, experiment, sweep): title and the one style."""
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
            "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;"
            "padding:3px 8px;text-align:right}th{background:#eee}"
            "td:first-child,th:first-child{text-align:left}"
            "img{max-width:100%;border:1px solid #ddd;margin:4px 0}</style></head><body>")


def _fmt(x, scale=1.0, digits=1, unit=""):
    if x is None:
        return "&ndash;"
    return f"{x * scale:.{digits}f}{unit}"


def write_report(outdir: Path, experiment: dict, runs, compare_pngs=()) -> Path:
    outdir = Path(outdir)
    e = html.escape
    parts = [
        page_head(f"oppsched: {experiment['experiment']}"),
        f"<h1>{e(experiment['experiment'])}</h1>",
        f"<p>{e(experiment.get('description', ''))}</p>",
        f"<p>kind <code>{e(experiment['kind'])}</code>, {experiment['duration_s']:g} s per run, "
        f"seed {experiment['seed']}, {len(runs)} run(s).</p>",
    ]

    # Side-by-side comparison.
    has_good = any(s.get("aggregate_goodput_bps") is not None for _, s, _ in runs)
    has_fs = any(s.get("jain_index_flows_fair_share") is not None for _, s, _ in runs)
    parts.append("<h2>Comparison</h2><table><tr><th>run</th><th>Jain (users)</th>"
                 "<th>Jain (flows)</th>"
                 + ("<th>Jain (flows / fair share)</th>" if has_fs else "")
                 + "<th>aggregate MAC (kb/s)</th>"
                 + ("<th>aggregate goodput (kb/s)</th><th>goodput / MAC</th>" if has_good else "")
                 + "<th>slots</th><th>empty</th><th>late</th><th>TBs</th><th>TBs failed</th></tr>")
    for label, s, _ in runs:
        agg = sum(u["mac_throughput_bps"] for u in s["users"])
        good = (f"<td>{_fmt(s.get('aggregate_goodput_bps'), 1e-3)}</td>"
                f"<td>{_fmt(s.get('goodput_mac_fraction'), digits=3)}</td>") if has_good else ""
        parts.append(
            f"<tr><td>{e(label)}</td><td>{_fmt(s['jain_index_users'], digits=3)}</td>"
            f"<td>{_fmt(s.get('jain_index_flows'), digits=3)}</td>"
            + (f"<td>{_fmt(s.get('jain_index_flows_fair_share'), digits=3)}</td>" if has_fs
               else "")
            + f"<td>{_fmt(agg, 1e-3)}</td>{good}"
            f"<td>{s['slots']['total']}</td><td>{s['slots']['empty']}</td><td>{s['slots']['late']}</td>"
            f"<td>{s['harq']['tb_sent']}</td><td>{s['harq']['tb_failed_final']}</td></tr>")
    parts.append("</table>")

    # Python scheduler plugins (docs/extending.md): what the deadline and the fallbacks did.
    plugged = [(label, s["scheduler"]) for label, s, _ in runs
               if "plugin_decisions" in (s.get("scheduler") or {})]
    if plugged:
        parts.append("<h3>Scheduler plugins</h3><table><tr><th>run</th><th>decisions</th>"
                     "<th>mean (us)</th><th>deadline misses</th><th>exceptions</th>"
                     "<th>invalid</th><th>PF decided</th></tr>")
        for label, p in plugged:
            n = p["plugin_decisions"]
            mean = p["plugin_decision_ns"] / n / 1e3 if n else None
            parts.append(f"<tr><td>{e(label)}</td><td>{n}</td><td>{_fmt(mean, digits=1)}</td>"
                         f"<td>{p['plugin_deadline_misses']}</td><td>{p['plugin_exceptions']}</td>"
                         f"<td>{p['plugin_invalid_decisions']}</td>"
                         f"<td>{p['plugin_fallbacks']}</td></tr>")
        parts.append("</table>")

    for png in compare_pngs:
        parts.append(f"<img src='{e(png)}' alt='{e(png)}'>")

    names = [u["name"] for u in runs[0][1]["users"]]
    parts.append("<h3>Per user</h3><table><tr><th>user</th>")
    has_q = any(u.get("mean_queue_delay_ms") is not None for _, s, _ in runs for u in s["users"])
    for label, _, _ in runs:
        parts.append(f"<th>{e(label)}: slots %</th><th>{e(label)}: kb/s</th>"
                     + (f"<th>{e(label)}: queue delay ms</th>" if has_q else ""))
    parts.append("</tr>")
    for i, name in enumerate(names):
        parts.append(f"<tr><td>{e(name)}</td>")
        for _, s, _ in runs:
            u = s["users"][i] if i < len(s["users"]) else None
            parts.append(f"<td>{_fmt(u and u['slot_fraction'], 100)}</td>"
                         f"<td>{_fmt(u and u['mac_throughput_bps'], 1e-3)}</td>"
                         + (f"<td>{_fmt(u and u.get('mean_queue_delay_ms'))}</td>" if has_q
                            else ""))
        parts.append("</tr>")
    parts.append("</table>")

    flows = [f["id"] for f in runs[0][1]["flows"]]
    # Upstream flows (testbed flows[].direction up): a direction column, and per direction
    # the flows' summed goodput and Jain's index.
    has_up = any(((s.get("directions") or {}).get("up") or {}).get("flows") for _, s, _ in runs)
    if has_up:
        parts.append("<h3>Per direction</h3><table><tr><th>direction</th>")
        for label, _, _ in runs:
            parts.append(f"<th>{e(label)}: flows</th><th>{e(label)}: goodput kb/s</th>"
                         f"<th>{e(label)}: Jain</th>")
        parts.append("</tr>")
        for d in ("down", "up"):
            parts.append(f"<tr><td>{d}</td>")
            for _, s, _ in runs:
                t = (s.get("directions") or {}).get(d) or {}
                parts.append(f"<td>{len(t.get('flows') or [])}</td>"
                             f"<td>{_fmt(t.get('goodput_bps'), 1e-3)}</td>"
                             f"<td>{_fmt(t.get('jain_index'), digits=3)}</td>")
            parts.append("</tr>")
        parts.append("</table>")
    # The shared medium (medium.mode != none): slot shares per direction.
    if any((s.get("medium") or {}).get("slot_share") for _, s, _ in runs):
        parts.append("<h3>Slot shares (shared medium, slots anyone contended for)</h3>"
                     "<table><tr><th>slots</th>")
        for label, _, _ in runs:
            parts.append(f"<th>{e(label)}: %</th>")
        parts.append("</tr>")
        keys = ["down"] + [f"up.{n}" for n in
                           (runs[0][1]["medium"]["slot_share"] or {}).get("up", {})]
        for k in keys:
            parts.append(f"<tr><td>{e(k)}</td>")
            for _, s, _ in runs:
                sh = (s.get("medium") or {}).get("slot_share") or {}
                v = sh.get("down") if k == "down" else (sh.get("up") or {}).get(k[3:])
                parts.append(f"<td>{_fmt(v, 100)}</td>")
            parts.append("</tr>")
        parts.append("</table>")
    if flows:
        parts.append("<h3>Per flow</h3><table><tr><th>flow</th>"
                     + ("<th>direction</th>" if has_up else ""))
        for label, _, _ in runs:
            parts.append(f"<th>{e(label)}: goodput kb/s</th><th>{e(label)}: RTT ms</th>")
        parts.append("</tr>")
        for i, fid in enumerate(flows):
            parts.append(f"<tr><td>{e(fid)}</td>"
                         + (f"<td>{e(runs[0][1]['flows'][i].get('direction', 'down'))}</td>"
                            if has_up else ""))
            for _, s, _ in runs:
                f = s["flows"][i] if i < len(s["flows"]) else None
                parts.append(f"<td>{_fmt(f and f['goodput_bps'], 1e-3)}</td>"
                             f"<td>{_fmt(f and f['rtt_ms_mean'])}</td>")
            parts.append("</tr>")
        parts.append("</table>")

    # Flows of the weighted rate control (Nandagopal et al.): weight, steady rate, share
    # of the ideal weighted share, loss; Jain's index over rate / weight.
    for label, s, _ in runs:
        w = s.get("wrc")
        if not w:
            continue
        parts.append(f"<h3>{e(label)}: weighted rate control</h3><p>Jain's index over "
                     f"rate / weight: {_fmt(w.get('jain_index_weighted'), digits=3)}; loss "
                     f"ratio {_fmt(w.get('loss_ratio'), 100, digits=2)} %</p>"
                     "<table><tr><th>flow</th><th>weight</th><th>steady rate (packets/s)"
                     "</th><th>share of ideal</th><th>goodput kb/s</th><th>loss %</th>"
                     "<th>increases</th><th>decreases</th><th>congestion losses</th></tr>")
        for f in s["flows"]:
            r = f.get("wrc")
            if not r:
                continue
            parts.append(
                f"<tr><td>{e(f['id'])}</td><td>{r['weight']:g}</td>"
                f"<td>{_fmt(r.get('steady_recv_pps'), digits=2)}</td>"
                f"<td>{_fmt((w.get('share_of_ideal') or {}).get(f['id']), digits=3)}</td>"
                f"<td>{_fmt(f['goodput_bps'], 1e-3)}</td>"
                f"<td>{_fmt(r.get('loss_ratio'), 100, digits=2)}</td>"
                f"<td>{_fmt(r.get('increases'), digits=0)}</td>"
                f"<td>{_fmt(r.get('decreases'), digits=0)}</td>"
                f"<td>{_fmt(r.get('congestion_losses'), digits=0)}</td></tr>")
        parts.append("</table>")

    procs = sorted({p for _, s, _ in runs for p in (s.get("cpu_s") or {})})
    if procs:
        parts.append("<h3>CPU seconds per process</h3><table><tr><th>process</th>")
        parts += [f"<th>{e(label)}</th>" for label, _, _ in runs]
        parts.append("</tr>")
        for p in procs:
            parts.append(f"<tr><td>{e(p)}</td>")
            for _, s, _ in runs:
                parts.append(f"<td>{_fmt((s.get('cpu_s') or {}).get(p), digits=2)}</td>")
            parts.append("</tr>")
        parts.append("</table>")

    for label, s, rundir in runs:
        rel = os.path.relpath(rundir, outdir)
        parts.append(f"<h2>Run: {e(label)}</h2>")
        parts.append(f"<p>Folder <code>{e(rel)}</code>: summary.json, traces, config.json.</p>")
        for png in s.get("plots", []):
            parts.append(f"<img src='{e(os.path.join(rel, png))}' alt='{e(png)}'>")
    parts.append("</body></html>")
    path = write_atomic(outdir / "report.html", "\n".join(parts))
    return path
