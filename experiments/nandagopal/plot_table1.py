"""Nandagopal et al., Table I beside the testbed's: per period and flow, W_actual (packets/s)
as the mean and 95 % interval over the seeds (Student t), with the paper's Table I values
and W_ideal on the same axes.

    .venv/bin/python experiments/nandagopal/plot_table1.py OUT.png RUN_DIR [RUN_DIR ...]

RUN_DIRs are runs of weights.yaml at the paper's length (2000 s, flows 1 and 2 from 600 to
1500 s), one per seed; each one's summary.json gives wrc.periods. Also prints, per period and
flow, W_ideal, W_actual and W/i (mean ± interval): the README's Table I.
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from table import LINK_PPS, mean_ci  # noqa: E402  (this folder's table.py)

# Table I of the paper, W_actual in packets/s per period (flows 1 and 2: middle period only)
PAPER = {0: {"f3": 16, "f4": 22, "f5": 29},
         1: {"f1": 4.2, "f2": 8.6, "f3": 13.8, "f4": 18.3, "f5": 25.1},
         2: {"f3": 16.4, "f4": 22, "f5": 30}}


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, runs = Path(argv[0]), [json.loads((Path(d) / "summary.json").read_text())["wrc"]
                                for d in argv[1:]]
    periods = runs[0]["periods"]
    fig, axes = plt.subplots(1, len(periods), figsize=(11, 4), sharey=True)
    for k, (ax, p) in enumerate(zip(axes, periods)):
        wsum = sum(f["weight"] for f in p["flows"].values())
        for i, (fid, f) in enumerate(p["flows"].items()):
            vals = [r["periods"][k]["flows"][fid]["w_actual_pps"] for r in runs]
            m, h = mean_ci(vals)
            h = h or 0.0
            ideal = LINK_PPS * f["weight"] / wsum
            mi, hi = mean_ci([v / f["weight"] for v in vals])
            print(f"{p['from_s']:.0f}-{p['to_s']:.0f} s | {fid} | W_ideal {ideal:.1f} | W_actual "
                  f"{m:.1f} ± {h:.1f} | W/i {mi:.1f} ± {hi or 0.0:.1f}")
            ax.errorbar([i], [m], yerr=[h], fmt="o", color="C0", capsize=4,
                        label=f"testbed, mean and 95 % interval of {len(runs)} seeds"
                        if i == 0 else None)
            ax.plot([i - 0.3, i + 0.3], [ideal, ideal], color="k", lw=1,
                    label="W_ideal (w / sum w x 73.2)" if i == 0 else None)
            if fid in PAPER.get(k, {}):
                ax.plot([i + 0.15], [PAPER[k][fid]], marker="s", color="C3", ls="none",
                        label="Nandagopal et al., Table I" if i == 0 else None)
        tot, htot = mean_ci([sum(f["w_actual_pps"] for f in r["periods"][k]["flows"].values())
                             for r in runs])
        print(f"{p['from_s']:.0f}-{p['to_s']:.0f} s | total | {LINK_PPS:.1f} | {tot:.1f} ± "
              f"{htot or 0.0:.1f} ({tot / LINK_PPS:.2f} of the link)")
        ax.set_xticks(range(len(p["flows"])))
        ax.set_xticklabels([f"{fid}\nw {f['weight']:g}" for fid, f in p["flows"].items()])
        ax.set_title(f"{p['from_s']:.0f}-{p['to_s']:.0f} s", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("W_actual (packets/s)")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Nandagopal et al., Table I: weights 1..5 on a 73-packet/s link, 2000 s",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
