"""How synchronised NewReno's drop-tail losses are across flows 3 (10 ms) and 4 (180 ms),
which share R34's AP queue (Andrew & Hanly, CLAMP, Fig. 4 and Fig. 5(b): how much less the
180 ms flow gets):

    .venv/bin/python experiments/clamp/drop_sync.py RUN [RUN ...]

RUN: a run folder of fading-sweep.yaml (NewReno, drop-tail) made with capture.pcaps and
traces.packets. Each retransmission a flow's sender made (its server's capture) marks its
earlier copy as lost; that copy reached the AP queue half the server's RTT after it was
sent (the path delay is split evenly between the two directions) and is matched to the
queue's overflow drop at that time (packets.csv, within MATCH_S). A flow's loss events are
its drops grouped: a drop W or more after the previous one starts a new event. An event of
flow 4 is shared when flow 3 lost a packet within W of its first drop (and the other way
round). The baseline is the share expected were the two flows' losses independent: the same
count with flow 3's drop times shifted around the run by a random offset (SHIFTS times,
seeded). Per run, after the experiment's warm-up: the counts at W = 50 ms, the share at W =
20, 50, 100 and 200 ms beside its baseline, each flow's loss rate per segment sent, and the
goodput ratio f4 / f3 beside the two limits of the RTT ratio r = RTT3 / RTT4 (each flow's
mean smoothed RTT): r when each overflow hits one flow, r² when every one hits both (the
two then halve together).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from oppsched.analysis import tcp as tcpview

MATCH_S = 3e-3          # a lost copy's arrival at the queue against the drop's time
WINDOWS_S = (0.02, 0.05, 0.1, 0.2)
SHIFTS = 50


def episodes(t: np.ndarray, gap_s: float) -> np.ndarray:
    """The event number of each time (sorted): a new one after a gap of gap_s or more."""
    if not len(t):
        return np.zeros(0, dtype=int)
    return np.concatenate([[0], np.cumsum(np.diff(t) >= gap_s)])


def event_starts(t: np.ndarray, gap_s: float) -> np.ndarray:
    """The first time of each event (episodes())."""
    if not len(t):
        return t
    e = episodes(t, gap_s)
    return t[np.concatenate([[True], e[1:] != e[:-1]])]


def match(arrive_t: np.ndarray, drop_t: np.ndarray, within: float = MATCH_S) -> np.ndarray:
    """For each arrival time, the index of the nearest drop (sorted) within `within`,
    else -1."""
    if not len(drop_t):
        return np.full(len(arrive_t), -1)
    k = np.clip(np.searchsorted(drop_t, arrive_t), 0, len(drop_t) - 1)
    km = np.clip(k - 1, 0, len(drop_t) - 1)
    best = np.where(np.abs(drop_t[km] - arrive_t) <= np.abs(drop_t[k] - arrive_t), km, k)
    return np.where(np.abs(drop_t[best] - arrive_t) <= within, best, -1)


def shared_fraction(starts: np.ndarray, other: np.ndarray, w: float) -> float:
    """The share of the event starts with a time of `other` (sorted) within w."""
    if not len(starts):
        return float("nan")
    if not len(other):
        return 0.0
    k = np.clip(np.searchsorted(other, starts), 0, len(other) - 1)
    km = np.clip(k - 1, 0, len(other) - 1)
    near = np.minimum(np.abs(other[k] - starts), np.abs(other[km] - starts))
    return float((near < w).mean())


def independent_baseline(starts: np.ndarray, other: np.ndarray, w: float, span: tuple,
                         rng: np.random.Generator, shifts: int = SHIFTS) -> float:
    """shared_fraction with `other` shifted around [span) by uniform random offsets: the
    share two independent loss processes would give."""
    a, b = span
    out = []
    for _ in range(shifts):
        moved = np.sort((other - a + rng.uniform(0, b - a)) % (b - a) + a)
        out.append(shared_fraction(starts, moved, w))
    return float(np.mean(out))


def lost_copies(segs: pd.DataFrame) -> np.ndarray:
    """When the earlier copy of each retransmitted segment was sent (segments of
    tcp.time_sequence)."""
    out = []
    last_sent: dict[int, float] = {}
    for t, seq, retrans in zip(segs.t_s.to_numpy(), segs.seq.to_numpy(),
                               segs.retrans.to_numpy()):
        if retrans and int(seq) in last_sent:
            out.append(last_sent[int(seq)])
        last_sent[int(seq)] = float(t)
    return np.array(out)


def run_sync(rundir: Path, fa: str = "f3", fb: str = "f4", user: str = "R34",
             seed: int = 1) -> dict:
    cfg = json.loads((rundir / "config.json").read_text())
    run = json.loads((rundir / "run.json").read_text())
    s = json.loads((rundir / "summary.json").read_text())
    uid = next(u["id"] for u in s["users"] if u["name"] == user)
    t_from = float(cfg.get("analysis", {}).get("warmup_s", 0.0))
    t_end = float(cfg["duration_s"])
    pk = pd.read_csv(rundir / "packets.csv")
    pk = pk[(pk.user == uid) & (pk.event == "drop") & (pk.reason == "overflow")]
    drop_t = np.sort((pk.t_ns.to_numpy() - int(run["t0_mono_ns"])) / 1e9)
    flows = {f["id"]: f for f in cfg["flows"]}
    rtt_path = {v["name"]: float(v["rtt_ms"]) / 1e3 for v in cfg["servers"]}
    summ = {f["id"]: f for f in s["flows"]}
    out = {"run": str(rundir),
           "drops": int(((drop_t >= t_from) & (drop_t < t_end)).sum())}
    t = {}
    for fid in (fa, fb):
        segs, _ = tcpview.time_sequence(rundir, fid)
        arrive = lost_copies(segs) + rtt_path[flows[fid]["server"]] / 2
        inside = (arrive >= t_from) & (arrive < t_end)
        m = match(arrive[inside], drop_t)
        t[fid] = np.sort(drop_t[m[m >= 0]])
        sent = int(((segs.t_s >= t_from) & (segs.t_s < t_end)).sum())
        out[fid] = {"lost": int(inside.sum()), "matched": int((m >= 0).sum()),
                    "sent": sent, "loss_rate": inside.sum() / sent if sent else float("nan"),
                    "rtt_ms": float(summ[fid]["rtt_ms_mean"]),
                    "goodput_bps": float(summ[fid]["goodput_bps"])}
    rng = np.random.default_rng(seed)
    out["by_window"] = []
    for w in WINDOWS_S:
        sa, sb = event_starts(t[fa], w), event_starts(t[fb], w)
        out["by_window"].append({
            "w_s": w, "events_a": len(sa), "events_b": len(sb),
            "b_shared": shared_fraction(sb, t[fa], w),
            "b_baseline": independent_baseline(sb, t[fa], w, (t_from, t_end), rng),
            "a_shared": shared_fraction(sa, t[fb], w),
            "a_baseline": independent_baseline(sa, t[fb], w, (t_from, t_end), rng)})
    r = out[fa]["rtt_ms"] / out[fb]["rtt_ms"]
    out.update(rtt_ratio=r, goodput_ratio=out[fb]["goodput_bps"] / out[fa]["goodput_bps"])
    return out


def _name(run: str) -> str:
    return Path(run).name


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    rows = [run_sync(Path(a)) for a in argv]
    print("| run | overflow drops | f3 lost (matched) | f4 lost (matched) | loss per segment "
          "f3 / f4 | loss events f3 / f4 (50 ms) | f4's shared with f3 (independent) | "
          "f3's shared with f4 (independent) | RTT f3 / f4 (ms) | f4 / f3 goodput | r / r² |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        a, b = r["f3"], r["f4"]
        w = next(x for x in r["by_window"] if x["w_s"] == 0.05)
        print(f"| {_name(r['run'])} | {r['drops']} | {a['lost']} ({a['matched']}) | "
              f"{b['lost']} ({b['matched']}) | {a['loss_rate']:.4f} / {b['loss_rate']:.4f} | "
              f"{w['events_a']} / {w['events_b']} | {w['b_shared']:.2f} ({w['b_baseline']:.2f}) | "
              f"{w['a_shared']:.2f} ({w['a_baseline']:.2f}) | {a['rtt_ms']:.0f} / "
              f"{b['rtt_ms']:.0f} | {r['goodput_ratio']:.2f} | {r['rtt_ratio']:.2f} / "
              f"{r['rtt_ratio'] ** 2:.2f} |")
    print()
    print("| window W (ms) | " + " | ".join(_name(r["run"]) for r in rows) + " |")
    print("| --- | " + " | ".join("---" for _ in rows) + " |")
    for i, w in enumerate(WINDOWS_S):
        cells = [f"{r['by_window'][i]['b_shared']:.2f} ({r['by_window'][i]['b_baseline']:.2f})"
                 for r in rows]
        print(f"| {w * 1e3:.0f}: f4's events shared (independent) | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
