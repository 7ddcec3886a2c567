"""Nandagopal et al., Table I from a run folder of weights.yaml or rtts.yaml (or a point of
the errors.yaml sweep): for each period between flows joining and leaving, each flow's
W_ideal (its weighted share of the link's 73.24 packets/s, as the paper's), W_actual
(mean received rate, packets/s, from the receivers' traces: summary.json's wrc.periods)
and W/i; then the figures after analysis.warmup_s.

    .venv/bin/python experiments/nandagopal/table.py RUN_DIR [RUN_DIR ...]
"""

import json
import sys
from pathlib import Path

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
    shares = ", ".join(f"{k} {v:.2f}" for k, v in (w.get("share_of_ideal") or {}).items())
    gaps = [(f["wrc"]["random_losses"] or 0, f["wrc"]["congestion_losses"] or 0)
            for f in s["flows"] if f.get("wrc")]
    out.append(f"After warm-up: {w['steady_total_pps']:.1f} packets/s "
               f"({w['steady_total_pps'] / LINK_PPS:.2f} of the link), share of the weighted "
               f"share: {shares}; gaps taken for channel error / congestion: "
               f"{sum(g[0] for g in gaps)} / {sum(g[1] for g in gaps)}; slots the PHY missed: "
               f"{s['slots'].get('late_phy')} of {s['slots']['total']}")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for d in sys.argv[1:]:
        print(table(Path(d)))
        print()
