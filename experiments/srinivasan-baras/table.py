"""Srinivasan & Baras, §V at every alpha: the aggregate figures (Figs. 4-5) and User W
(u01) and User B (u16) side by side with the paper's alpha = 0.01 run, mean and 95 %
interval of the mean over the seeds (Student t), from a sweep folder of alpha-sweep.yaml:

    .venv/bin/python experiments/srinivasan-baras/table.py SWEEP_OUT
    .venv/bin/python experiments/srinivasan-baras/table.py --requested RUN [RUN ...]
    .venv/bin/python experiments/srinivasan-baras/table.py --timeouts USER RUN [RUN ...]

--requested gives every user's mean requested rate per scheduled slot, in 8-byte frames,
from the run folders of calibration.yaml (macsim: Table I's rate at the slot's SNR) or of
a testbed run (the CQI's Table I rate in the user's new-TB slots), with the mean over the
runs: how the users are placed against the paper's W (1.8851) and B (56.2517).

--timeouts lists each of USER's (u01, u16, ...) retransmission timeouts in each run: when,
the sequence number it resent, whether the sender had already resent that sequence (fast
retransmit) since it was first sent, and how many copies of it the client received (its
capture, client.USER.pcap): a timeout whose earlier retransmission never reached the client
is one the AP lost.

Per run and user (summary.json, slots.csv, packets.csv, the wired capture):
- requested frames per scheduled slot: Table I's rate at the CQI the user reported for
  each slot in which it got a new TB, in 8-byte frames (the paper's "requested an average
  rate of ... frames each time it was scheduled"); granted: the TB's own size;
- slot share; slot gap (the gaps between the user's slots) and per-packet jitter (the gaps
  between its packets' departures, summary.json users[].packet_gap_ms_*);
- RTT: the sender's smoothed RTT (iperf3's tcp_info samples), mean and max;
- queueing delay: each packet's AP sojourn, mean and max (packets.csv);
- timeouts: the sender's retransmissions sent by its timer (`oppsched tcpview`'s rule).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from oppsched import mac
from oppsched.analysis import pcap
from oppsched.analysis import tcp as tcpview

SLOT_S = 1.667e-3
FRAME_BITS = 64
W, B = "u01", "u16"
# §V, alpha = 0.01, one Monte Carlo run.
PAPER = {"slot_share": (5.52, 7.02), "requested_frames": (1.8851, 56.2517),
         "packet_gap_ms_mean": (996.1, 23.6), "packet_gap_ms_std": (342.9, 27.2),
         "packet_gap_ms_max": (1927.5, 231.0), "rtt_ms_mean": (5754.3, 187.7),
         "rtt_ms_max": (9629.9, 448.4), "queue_ms_mean": (6785.5, 154.0),
         "queue_ms_max": (9734.1, 432.2), "bw_ratio": 37.25}


def ci95(x) -> tuple[float, float]:
    x = np.asarray([v for v in x if v is not None and np.isfinite(v)], dtype=float)
    if not len(x):
        return float("nan"), float("nan")
    if len(x) < 2:
        return float(x.mean()), 0.0
    return float(x.mean()), float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1)
                                  / math.sqrt(len(x)))


def fmt(x, digits=0) -> str:
    m, h = ci95(x)
    if not np.isfinite(m):
        return "n/a"
    return f"{m:.{digits}f} ± {h:.{digits}f}" if h else f"{m:.{digits}f}"


def run_row(rundir: Path) -> dict:
    s = json.loads((rundir / "summary.json").read_text())
    users = {u["name"]: u for u in s["users"]}
    flows = {f["user"]: f for f in s["flows"]}
    slots = pd.read_csv(rundir / "slots.csv")
    table = mac.mcs_table.evdo()
    row = {"mac_bps": s["aggregate_mac_throughput_bps"], "goodput_bps": s["aggregate_goodput_bps"],
           "goodput_mac": s["goodput_mac_fraction"], "late": s["slots"]["late"]}
    for name in (W, B):
        u, f = users[name], flows[name]
        mine = slots[(slots["user"] == u["id"]) & (slots["retx"] == 0)]
        cqi = mine[f"cqi.{name}"].dropna()
        row[f"{name}.requested_frames"] = float(np.mean(
            [table.rate_at(float(c)) * SLOT_S / FRAME_BITS for c in cqi])) if len(cqi) else None
        row[f"{name}.granted_frames"] = float(mine["tb_bytes"].mean() / 8) if len(mine) else None
        row[f"{name}.slot_share"] = 100 * u["slot_fraction"]
        row[f"{name}.slot_gap_ms_mean"] = u["slot_gap_mean_ms"]
        for k in ("packet_gap_ms_mean", "packet_gap_ms_std", "packet_gap_ms_max"):
            row[f"{name}.{k}"] = u.get(k)
        row[f"{name}.queue_ms_mean"] = u["mean_queue_delay_ms"]
        row[f"{name}.queue_ms_max"] = u.get("sojourn_ms_max")
        row[f"{name}.rtt_ms_mean"] = f["rtt_ms_mean"]
        row[f"{name}.rtt_ms_max"] = f["rtt_ms_max"]
        row[f"{name}.goodput_bps"] = f["goodput_bps"]
        try:
            segs, _acks = tcpview.time_sequence(rundir, f["id"])
            row[f"{name}.timeouts"] = int(segs["timeout"].sum())
        except tcpview.TcpViewError:
            row[f"{name}.timeouts"] = None
    row["bw_ratio"] = row[f"{B}.goodput_bps"] / row[f"{W}.goodput_bps"] \
        if row[f"{W}.goodput_bps"] else None
    return row


def points(out: Path) -> dict[str, list[dict]]:
    by: dict[str, list[dict]] = {}
    for summ in sorted(out.glob("points/*/*/seed-*/summary.json")):
        rundir = summ.parent
        if rundir.name.endswith(".failed"):  # a failed run (sweep.py), run again on resume
            continue
        variant, axis = rundir.parent.name, rundir.parent.parent.name
        label = "round robin" if variant == "rr" else f"PF α = {axis.split('=')[1]}"
        by.setdefault(label, []).append(run_row(rundir))
    return dict(sorted(by.items(), key=lambda kv: (kv[0] == "round robin",
                                                    -float(kv[0].split("= ")[-1])
                                                    if "=" in kv[0] else 0)))


def requested_frames(rundir: Path) -> dict[str, float]:
    """Per user, the mean requested rate per scheduled slot in 8-byte frames."""
    rundir = Path(rundir)
    cfg = json.loads((rundir / "config.json").read_text())
    if (rundir / "slots.csv.gz").exists():  # macsim: the rate at the slot's own SNR
        slots = pd.read_csv(rundir / "slots.csv.gz")
        names = [u["name"] for u in cfg["users"]]
        return {n: float(slots[slots["user"] == i]["tb_bits"].mean() / FRAME_BITS)
                for i, n in enumerate(names)}
    slots = pd.read_csv(rundir / "slots.csv")
    table = mac.mcs_table.evdo()
    out = {}
    for i, d in enumerate(cfg["devices"]):
        cqi = slots[(slots["user"] == i) & (slots["retx"] == 0)][f"cqi.{d['name']}"].dropna()
        out[d["name"]] = float(np.mean([table.rate_at(float(c)) * SLOT_S / FRAME_BITS
                                        for c in cqi])) if len(cqi) else float("nan")
    return out


def _client_data_seqs(path: Path) -> pd.Series:
    """Relative sequence numbers (first data byte 0, as tcpview's) of the data segments the
    client's capture holds, of its connection that carried the most payload (iperf3's data
    connection; its control connection carries a few hundred bytes)."""
    tcp = pcap.read_tcp(path)
    conn_key = ["src", "sport", "dst", "dport"]
    key = tcp[tcp["payload"] > 0].groupby(conn_key)["payload"].sum().idxmax()
    conn = tcp[(tcp[conn_key] == pd.Series(key, index=conn_key)).all(axis=1)]
    syn = conn[(conn["flags"] & pcap.TCP_SYN) != 0]
    data = conn[conn["payload"] > 0]
    base = int(syn["seq"].iloc[0]) + 1 if len(syn) else int(data["seq"].iloc[0])
    return pd.Series(pcap._unwrap(data["seq"].to_numpy(), base))


def timeouts(rundir: Path, user: str) -> list[dict]:
    s = json.loads((rundir / "summary.json").read_text())
    flow = next(f for f in s["flows"] if f["user"] == user)
    segs, _acks = tcpview.time_sequence(rundir, flow["id"])
    got = _client_data_seqs(rundir / f"client.{user}.pcap").value_counts()
    out = []
    for i, seg in segs[segs["timeout"]].iterrows():
        before = segs.loc[:i - 1] if i > 0 else segs.iloc[:0]
        earlier = before[(before.seq == seg.seq) & before.retrans]
        out.append({"t_s": float(seg.t_s), "seq": int(seg.seq),
                    "resent_before_s": float(earlier.t_s.iloc[-1]) if len(earlier) else None,
                    "copies_at_client": int(got.get(seg.seq, 0))})
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--timeouts"] and len(argv) > 2:
        user, total, lost = argv[1], 0, 0
        for a in argv[2:]:
            rows = timeouts(Path(a), user)
            total += len(rows)
            print(f"{a}: {len(rows)} timeouts of {user}")
            for r in rows:
                after_lost = r["resent_before_s"] is not None and r["copies_at_client"] == 1
                lost += after_lost
                print(f"  {r['t_s']:8.2f} s  seq {r['seq']:>9}  "
                      + (f"fast-retransmitted at {r['resent_before_s']:.2f} s, "
                         if r["resent_before_s"] is not None else "not resent before, ")
                      + f"{r['copies_at_client']} cop{'y' if r['copies_at_client'] == 1 else 'ies'}"
                      " at the client" + (": the earlier retransmission was lost"
                                          if after_lost else ""))
        print(f"{user}: {total} timeouts, {lost} after a retransmission the client never got")
        return 0
    if argv[:1] == ["--requested"] and len(argv) > 1:
        runs = [requested_frames(Path(a)) for a in argv[1:]]
        print("| user | " + " | ".join(Path(a).parent.name + "/" + Path(a).name
                                       for a in argv[1:]) + " | mean |")
        print("| --- | " + " | ".join("---" for _ in runs) + " | --- |")
        for name in runs[0]:
            v = [r[name] for r in runs]
            print(f"| {name} | " + " | ".join(f"{x:.2f}" for x in v) + f" | {np.mean(v):.2f} |")
        return 0
    if len(argv) != 1:
        print(__doc__)
        return 2
    by = points(Path(argv[0]))
    print("| scheduler | seeds | MAC (kb/s) | goodput (kb/s) | goodput / MAC | late slots |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, rows in by.items():
        print(f"| {label} | {len(rows)} | {fmt([r['mac_bps'] / 1e3 for r in rows])} | "
              f"{fmt([r['goodput_bps'] / 1e3 for r in rows])} | "
              f"{fmt([r['goodput_mac'] for r in rows], 3)} | {sum(r['late'] for r in rows)} |")
    print()
    cols = [("B/W goodput", "bw_ratio", 1), ("requested frames", "requested_frames", 1),
            ("granted frames", "granted_frames", 1), ("slot share %", "slot_share", 2),
            ("slot gap (ms)", "slot_gap_ms_mean", 1),
            ("packet jitter mean (ms)", "packet_gap_ms_mean", 0),
            ("std", "packet_gap_ms_std", 0), ("max", "packet_gap_ms_max", 0),
            ("RTT mean (ms)", "rtt_ms_mean", 0), ("RTT max", "rtt_ms_max", 0),
            ("queueing mean (ms)", "queue_ms_mean", 0), ("queueing max", "queue_ms_max", 0),
            ("timeouts", "timeouts", 1)]
    print("| scheduler | user | " + " | ".join(c[0] for c in cols) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in cols) + " |")
    for who, idx in ((W, 0), (B, 1)):
        cells = []
        for _, key, _d in cols:
            p = PAPER.get(key)
            cells.append("n/a" if p is None else
                         f"{p:g}" if not isinstance(p, tuple) else f"{p[idx]:g}")
        if who == B:
            cells[0] = ""
        print(f"| paper, PF α = 0.01 | {'W' if who == W else 'B'} | " + " | ".join(cells) + " |")
    for label, rows in by.items():
        for who in (W, B):
            cells = []
            for _, key, d in cols:
                k = key if key == "bw_ratio" else f"{who}.{key}"
                cells.append("" if (key == "bw_ratio" and who == B) else fmt([r[k] for r in rows], d))
            print(f"| {label} | {who} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
