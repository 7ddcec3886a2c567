"""What the senders have in flight, connection by connection, from the servers' captures
(Wang & Song, REAQM, Figs. 3-4 at the paper's 300 connections: why the marks do not bring
the aggregate input below the link):

    .venv/bin/python experiments/reaqm/flight.py [--windows A-B,C-D,...] RUN [RUN ...]

RUN: a dynamics.yaml run folder made with capture.pcaps. Every data connection (iperf3's
control connections, under 100 kB, are left out) is sampled once a second in each window
(seconds after the run's start; default: the experiment's warm-up to its end) while it is
open (its first segment to its last): its data in flight (the highest byte sent less the highest acknowledged, in
segments of its largest payload), and whether it sent anything in the second before. A
connection with data in flight that sent nothing for a second is waiting for its
retransmission timer. Per run and window: the open connections, the share waiting on the timer, the
shares of the others with 1, 2, 3-4 and 5 or more segments in flight, the sum in flight
(segments), and the timer's retransmissions (a retransmission with no ACK of its
connection in the ACK_TRIGGER_S before it) per connection and minute. With ECN a Linux
sender halves its window down to 2 segments and no lower (tcp_reno_ssthresh); only a loss
takes it lower, to 1 after a timeout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from oppsched.analysis import pcap
from oppsched.analysis.tcp import ACK_TRIGGER_S

MIN_BYTES = 100_000


def connection_samples(data: pd.DataFrame, acks: pd.DataFrame, times: np.ndarray,
                       mss: int) -> pd.DataFrame:
    """One connection's state at each sample time within its life: t_s, flight (segments),
    sent_last_s (segments sent in the second before), waiting (data in flight, none sent
    for a second). `data` (t_s, seq, payload; seq relative) and `acks` (t_s, ack, relative)
    in time order."""
    t, end = data.t_s.to_numpy(), (data.seq + data.payload).to_numpy()
    top = np.maximum.accumulate(end)
    ta, av = acks.t_s.to_numpy(), np.maximum.accumulate(acks.ack.to_numpy()) \
        if len(acks) else np.zeros(0)
    life = times[(times >= t[0]) & (times <= t[-1])]
    i = np.searchsorted(t, life, side="right") - 1
    j = np.searchsorted(ta, life, side="right") - 1
    acked = np.where(j >= 0, av[np.clip(j, 0, None)] if len(av) else 0, 0)
    flight = np.maximum(top[i] - acked, 0) / mss
    sent = i - (np.searchsorted(t, life - 1.0, side="right") - 1)
    return pd.DataFrame({"t_s": life, "flight": flight, "sent_last_s": sent,
                         "waiting": (flight > 0) & (sent == 0)})


def timer_retransmissions(data: pd.DataFrame, acks: pd.DataFrame) -> int:
    """Retransmissions (the end does not pass the highest byte sent before) with no ACK in
    the ACK_TRIGGER_S before them."""
    t, end = data.t_s.to_numpy(), (data.seq + data.payload).to_numpy()
    before = np.concatenate([[0], np.maximum.accumulate(end)[:-1]])
    re = t[end <= before]
    ta = acks.t_s.to_numpy()
    k = np.searchsorted(ta, re, side="left") - 1
    last = np.where(k >= 0, ta[np.clip(k, 0, None)] if len(ta) else -np.inf, -np.inf)
    return int(((re - last) > ACK_TRIGGER_S).sum())


def census(rundir: Path, windows: list[tuple[float, float]] | None = None) -> list[dict]:
    """flight.py's figures for each window of one run (the captures read once)."""
    cfg = json.loads((rundir / "config.json").read_text())
    run = json.loads((rundir / "run.json").read_text())
    t0 = float(run["t0_wall_s"])
    if not windows:
        windows = [(float(cfg.get("analysis", {}).get("warmup_s", 0.0)),
                    float(cfg["duration_s"]))]
    times = np.concatenate([np.arange(a, b, 1.0) for a, b in windows])
    samples = []
    timers = np.zeros(len(windows))
    conn_s = np.zeros(len(windows))
    for srv in cfg["servers"]:
        path = rundir / f"wired.{srv['name']}.pcap"
        if not path.exists():
            raise SystemExit(f"flight.py: {path}: no capture (run with capture.pcaps: true)")
        df = pcap.read_tcp(path)
        df["t_s"] = df["t_s"] - t0
        key = ["src", "sport", "dst", "dport"]
        sent = df[df.payload > 0].groupby(key)["payload"].sum()
        for (src, sport, dst, dport), total in sent.items():
            if total < MIN_BYTES:
                continue
            seg = df[(df.src == src) & (df.sport == sport) & (df.dst == dst)
                     & (df.dport == dport)]
            data = seg[seg.payload > 0]
            syn = seg[(seg["flags"] & pcap.TCP_SYN) != 0]
            base = int(syn.seq.iloc[0]) + 1 if len(syn) else int(data.seq.iloc[0])
            data = pd.DataFrame({"t_s": data.t_s.to_numpy(),
                                 "seq": pcap._unwrap(data.seq.to_numpy(), base),
                                 "payload": data.payload.to_numpy()})
            rev = df[(df.src == dst) & (df.sport == dport) & (df.dst == src)
                     & (df.dport == sport) & ((df["flags"] & pcap.TCP_ACK) != 0)]
            acks = pd.DataFrame({"t_s": rev.t_s.to_numpy(),
                                 "ack": pcap._unwrap(rev.ack.to_numpy(), base)})
            samples.append(connection_samples(data, acks, times, int(data.payload.max())))
            for k, (a, b) in enumerate(windows):
                inside = data[(data.t_s >= a) & (data.t_s < b)]
                if len(inside):
                    timers[k] += timer_retransmissions(
                        inside, acks[(acks.t_s >= a - 1) & (acks.t_s < b)])
                    conn_s[k] += float(inside.t_s.max() - inside.t_s.min())
    all_s = pd.concat(samples, ignore_index=True)
    out = []
    for k, (a, b) in enumerate(windows):
        w = all_s[(all_s.t_s >= a) & (all_s.t_s < b)]
        per_t = w.groupby("t_s")
        f = np.round(w[~w.waiting].flight)
        r = {"run": str(rundir), "t_from": a, "t_to": b,
             "open_mean": float(per_t.size().mean()), "waiting": float(w.waiting.mean()),
             "flight_sum_mean": float(per_t.flight.sum().mean()),
             "timer_per_conn_min": timers[k] / conn_s[k] * 60 if conn_s[k] else float("nan")}
        for name, lo, hi in (("f0", 0, 0), ("f1", 1, 1), ("f2", 2, 2), ("f3_4", 3, 4),
                             ("f5", 5, np.inf)):
            r[name] = float(((f >= lo) & (f <= hi)).mean()) if len(f) else float("nan")
        out.append(r)
    return out


def main(argv: list[str]) -> int:
    windows = None
    if argv[:1] == ["--windows"] and len(argv) > 1:
        windows = [tuple(float(x) for x in w.split("-")) for w in argv[1].split(",")]
        argv = argv[2:]
    if not argv:
        print(__doc__)
        return 2
    print("| run | window (s) | open connections | waiting on the timer | of the others, "
          "in flight 0 / 1 / 2 / 3-4 / 5+ segments | sum in flight (segments) | timer "
          "retransmissions per connection-minute |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for a in argv:
        p = Path(a)
        for r in census(p, windows):
            print(f"| {p.parent.name}/{p.name} | {r['t_from']:g}-{r['t_to']:g} | "
                  f"{r['open_mean']:.0f} | {r['waiting']:.2f} | {r['f0']:.2f} / {r['f1']:.2f} / "
                  f"{r['f2']:.2f} / {r['f3_4']:.2f} / {r['f5']:.2f} | "
                  f"{r['flight_sum_mean']:.0f} | {r['timer_per_conn_min']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
