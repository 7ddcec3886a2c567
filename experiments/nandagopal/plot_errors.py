"""Nandagopal et al., Figs. 8 and 9 from a sweep of errors.yaml: the total rate and each
flow's rate (packets/s, after analysis.warmup_s) against the datagrams lost (measured).

    .venv/bin/python experiments/nandagopal/plot_errors.py SWEEP_DIR OUT.png
"""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

LINK_PPS = 300e3 / (512 * 8)


def main(sweep_dir: str, out: str) -> None:
    d = pd.read_csv(f"{sweep_dir}/sweep.csv").sort_values("wrc.loss_ratio")
    loss = 100 * d["wrc.loss_ratio"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    a.plot(loss, d["wrc.steady_total_pps"] / LINK_PPS, "o-")
    a.set_ylim(0, 1.05)
    a.set_title("total rate / 73.24 packets/s (Fig. 8)")
    for k in range(1, 6):
        b.plot(loss, d[f"wrc.steady_recv_pps.f{k}"], "o-", label=f"flow {k} (w {k})")
    b.set_title("rate per flow, packets/s (Fig. 9)")
    b.legend(fontsize=7)
    for ax in (a, b):
        ax.set_xlabel("datagrams lost (%)")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
