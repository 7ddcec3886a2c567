"""How CLAMP splits R34's shared queue between flows 3 (10 ms) and 4 (180 ms) over a run
(Andrew & Hanly, CLAMP, §V-J: CLAMP "provides fairness automatically to flows destined for
the same receiver"):

    .venv/bin/python experiments/clamp/plot_shared_split.py SWEEP OUTDIR [WINDOW_S]

SWEEP is a fading-sweep-low-rate.yaml (or fading-sweep.yaml) sweep folder of CLAMP runs.
For each run, each flow's goodput over consecutive windows (60 s by default, from the
experiment's warm-up on) from the receiving socket's byte count (flow.fNN.socket.csv), and
the client's window w of each flow (windows.R34.csv, the data connection: the larger of the
flow's two). Writes OUTDIR/shared-split.csv (run, window, f3 and f4 in kb/s, f4 / f3) and
OUTDIR/shared-split.png (f4 / f3 per window and w of both flows against time, one line per
seed), and prints the table.
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def _delivered(run: Path, flow: str) -> tuple[np.ndarray, np.ndarray]:
    s = pd.read_csv(run / f"flow.{flow}.socket.csv")
    s = s[s.event == "poll"].groupby("t_s").bytes_received.sum()
    # a socket destroyed at the flow's end drops out of the sum: hold the highest count
    return s.index.values, np.maximum.accumulate(s.values)


def _data_window(run: Path, port: int) -> pd.Series:
    """w of the flow's data connection (the one of its two with the larger mean window:
    iperf3's control connection carries a few hundred bytes)."""
    w = pd.read_csv(run / "windows.R34.csv")
    w["t_s"] = (w.t_ns - w.t_ns.min()) / 1e9
    w = w[w.flow.str.endswith(f":{port}")]
    best = w.groupby("flow").w_bytes.mean().idxmax()
    return w[w.flow == best].set_index("t_s").w_bytes


def split(run: Path, window_s: float) -> pd.DataFrame:
    cfg = json.loads((run / "config.json").read_text())
    warm = float(cfg.get("analysis", {}).get("warmup_s", 0) or 0)
    end = float(cfg["duration_s"])
    rows = []
    edges = np.arange(warm, end + 1e-9, window_s)
    if edges[-1] < end - 1:
        edges = np.append(edges, end)
    series = {f: _delivered(run, f) for f in ("f3", "f4")}
    for lo, hi in zip(edges[:-1], edges[1:]):
        rate = {f: (np.interp(hi, t, b) - np.interp(lo, t, b)) * 8 / (hi - lo) / 1000
                for f, (t, b) in series.items()}
        rows.append({"from_s": lo, "to_s": hi, "f3_kbps": rate["f3"], "f4_kbps": rate["f4"],
                     "f4_over_f3": rate["f4"] / rate["f3"] if rate["f3"] else np.nan})
    return pd.DataFrame(rows)


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__)
        return 2
    sweep, out = Path(argv[1]), Path(argv[2])
    window_s = float(argv[3]) if len(argv) == 4 else 60.0
    runs = sorted(p.parent for p in sweep.glob("points/*/clamp-on/seed-*/summary.json"))
    if not runs:
        print(f"{sweep}: no CLAMP runs (points/*/clamp-on/seed-*/summary.json)")
        return 1
    out.mkdir(parents=True, exist_ok=True)
    tables = []
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, run in enumerate(runs):
        point, seed = run.parent.parent.name, run.name
        t = split(run, window_s)
        t.insert(0, "seed", seed)
        t.insert(0, "point", point)
        tables.append(t)
        mid = (t.from_s + t.to_s) / 2
        ax1.plot(mid, t.f4_over_f3, marker="o", label=f"{point}, {seed}")
        ports = {f["id"]: f["port"] for f in
                 json.loads((run / "summary.json").read_text())["flows"]}
        for flow, style in (("f3", "-."), ("f4", "--")):
            port = ports[flow]
            w = _data_window(run, port)
            ax2.plot(w.index, w.values / 1000, style, color=f"C{i}",
                     label=f"{point}, {seed}, {flow}")
    table = pd.concat(tables, ignore_index=True)
    table.to_csv(out / "shared-split.csv", index=False, float_format="%.3f")
    ax1.axhline(1.0, color="grey", lw=0.8)
    ax1.set_xlabel("time (s), middle of each window")
    ax1.set_ylabel("goodput of flow 4 (180 ms) / flow 3 (10 ms)")
    ax1.set_title("R34's shared queue: the paper's claim is 1 (§V-J)")
    ax1.legend(fontsize=7)
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel("CLAMP window w (kB)")
    ax2.set_title("w of flow 3 (dot-dashed) and flow 4 (dashed)")
    ax2.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "shared-split.png", dpi=110)
    with pd.option_context("display.width", 160):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
