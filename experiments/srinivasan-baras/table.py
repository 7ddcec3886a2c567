"""Srinivasan & Baras, §V at every alpha: the aggregate figures (Figs. 4-5) and User W
(u01) and User B (u16) side by side with the paper's alpha = 0.01 run, mean and 95 %
interval of the mean over the seeds (Student t), from a sweep folder of alpha-sweep.yaml:

    .venv/bin/python experiments/srinivasan-baras/table.py SWEEP_OUT
    .venv/bin/python experiments/srinivasan-baras/table.py --requested RUN [RUN ...]
    .venv/bin/python experiments/srinivasan-baras/table.py --timeouts USER RUN [RUN ...]
    .venv/bin/python experiments/srinivasan-baras/table.py --recoveries USER RUN [RUN ...]

--requested gives every user's mean requested rate per scheduled slot, in 8-byte frames,
from the run folders of calibration.yaml (macsim: Table I's rate at the slot's SNR) or of
a testbed run (the CQI's Table I rate in the user's new-TB slots), with the mean over the
runs: how the users are placed against the paper's W (1.8851) and B (56.2517).

--timeouts lists each of USER's (u01, u16, ...) retransmission timeouts in each run: when,
the sequence number it resent, whether the sender had already resent that sequence (fast
retransmit) since it was first sent, how many copies of it the client received (its
capture, client.USER.pcap) and when the first came, the duplicate ACKs of it the sender
got, the sender's reordering estimate at its last poll before (runs with
capture.tcp_info), and the longest gap between USER's slots in the second before the
timer fired; then what each was: the fast retransmission
lost (one copy at the client), the previous timeout's retransmission lost, spurious (the first copy reached the client before the
timer fired, or only after it with the retransmission a second copy), or the first copy
lost without a fast retransmission (too few duplicate ACKs), with a count of each.

--recoveries lists each of USER's fast retransmissions that was lost (no copy reached the
client before the sender resent it) with the new segments the sender sent between the
first duplicate ACK and the retransmission (limited transmit, RFC 3042), the packets in
USER's AP queue when the retransmission arrived (packets.csv) and how many of them came
after the first duplicate ACK; then whether the retransmission would have found room
without those; and the same counts over all fast retransmissions.

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


def _client_data_seqs(path: Path, t0_wall: float | None = None):
    """Relative sequence numbers (first data byte 0, as tcpview's) of the data segments the
    client's capture holds, of its connection that carried the most payload (iperf3's data
    connection; its control connection carries a few hundred bytes). With t0_wall: a frame
    of (seq, t_s since the run's start) instead."""
    tcp = pcap.read_tcp(path)
    conn_key = ["src", "sport", "dst", "dport"]
    key = tcp[tcp["payload"] > 0].groupby(conn_key)["payload"].sum().idxmax()
    conn = tcp[(tcp[conn_key] == pd.Series(key, index=conn_key)).all(axis=1)]
    syn = conn[(conn["flags"] & pcap.TCP_SYN) != 0]
    data = conn[conn["payload"] > 0]
    base = int(syn["seq"].iloc[0]) + 1 if len(syn) else int(data["seq"].iloc[0])
    seqs = pcap._unwrap(data["seq"].to_numpy(), base)
    if t0_wall is None:
        return pd.Series(seqs)
    return pd.DataFrame({"seq": seqs, "t_s": data["t_s"].to_numpy() - t0_wall})


# What each timeout was (timeouts()):
LOST_RETRANSMISSION = "the fast retransmission was lost"
LOST_TIMER_RETRANSMISSION = "the previous timeout's retransmission was lost (a repeated timeout)"
SPURIOUS_BEFORE = "spurious: the first copy reached the client before the timer fired"
SPURIOUS_LATE = "spurious: the first copy reached the client only after the timer fired"
LOST_ORIGINAL = "the first copy was lost, without a fast retransmission"
OTHER = "other"


def _longest_gap(slot_t: np.ndarray, a: float, b: float) -> float:
    """The longest time in [a, b] without one of the user's slots (s)."""
    inside = slot_t[(slot_t >= a) & (slot_t <= b)]
    edges = np.concatenate([[a], inside, [b]])
    return float(np.diff(edges).max())


def timeouts(rundir: Path, user: str) -> list[dict]:
    """Each of `user`'s retransmission timeouts: when, the sequence it resent, whether it
    was fast-retransmitted before, the copies the client got and when the first came, the
    longest gap in the user's slots over the second before the timer fired, and what the
    timeout was (LOST_RETRANSMISSION, LOST_TIMER_RETRANSMISSION, SPURIOUS_*,
    LOST_ORIGINAL)."""
    s = json.loads((rundir / "summary.json").read_text())
    run = json.loads((rundir / "run.json").read_text())
    flow = next(f for f in s["flows"] if f["user"] == user)
    uid = next(u["id"] for u in s["users"] if u["name"] == user)
    segs, acks = tcpview.time_sequence(rundir, flow["id"])
    at_client = _client_data_seqs(rundir / f"client.{user}.pcap", float(run["t0_wall_s"]))
    got = at_client["seq"].value_counts()
    first_at = at_client.groupby("seq")["t_s"].min()
    # the sender's kernel state, where the run sampled it (capture.tcp_info)
    ti_path = rundir / f"flow.{flow['id']}.tcp_info.csv"
    ti = pd.read_csv(ti_path) if ti_path.exists() else None
    slots = pd.read_csv(rundir / "slots.csv", usecols=["t_ns", "user"])
    slot_t = ((slots[slots["user"] == uid]["t_ns"] - int(run["t0_mono_ns"])) / 1e9).to_numpy()
    out = []
    for i, seg in segs[segs["timeout"]].iterrows():
        before = segs.loc[:i - 1] if i > 0 else segs.iloc[:0]
        earlier = before[(before.seq == seg.seq) & before.retrans]
        copies = int(got.get(seg.seq, 0))
        first = float(first_at[seg.seq]) if seg.seq in first_at.index else None
        t = float(seg.t_s)
        # duplicate ACKs of this sequence the sender got since it last sent it (3 would
        # have fast-retransmitted it)
        since = float(earlier.t_s.iloc[-1]) if len(earlier) else \
            float(before[before.seq == seg.seq].t_s.iloc[-1]) if (before.seq == seg.seq).any() \
            else -math.inf
        dup = int(((acks.ack == seg.seq) & acks.dup & (acks.t_s > since) & (acks.t_s < t)).sum())
        prior = before[before.retrans & (before.seq != seg.seq)]
        # sent before the flow's previous timeout: below its recovery point (RFC 6582, §4:
        # duplicate ACKs of such data start no fast retransmission)
        below_recover = bool(len(prior)) and \
            seg.seq < float(before[before.t_s <= prior.t_s.iloc[-1]].end.max())
        if len(earlier) and copies == 1:
            kind = LOST_TIMER_RETRANSMISSION if bool(earlier.timeout.iloc[-1]) \
                else LOST_RETRANSMISSION
        elif first is not None and first < t:
            kind = SPURIOUS_BEFORE
        elif copies >= 2 and not len(earlier):
            kind = SPURIOUS_LATE
        elif copies <= 1 and not len(earlier):
            kind = LOST_ORIGINAL
        else:
            kind = OTHER
        # the sender's reordering estimate (duplicate ACKs that make a loss) at the last
        # poll before the timer fired; None without capture.tcp_info
        polled = ti[ti.t_s < t] if ti is not None else None
        reordering = int(polled.reordering.iloc[-1]) if polled is not None and len(polled) \
            else None
        out.append({"t_s": t, "seq": int(seg.seq), "reordering_before": reordering,
                    "resent_before_s": float(earlier.t_s.iloc[-1]) if len(earlier) else None,
                    "copies_at_client": copies, "first_at_client_s": first,
                    "slot_gap_before_s": _longest_gap(slot_t, t - 1.0, t),
                    "dupacks_before": dup,
                    # the flow's previous timeout (of another sequence): how long before
                    "since_previous_timeout_s": t - float(prior.t_s.iloc[-1]) if len(prior)
                    else None, "below_previous_recovery_point": below_recover,
                    "kind": kind})
    return out


def _queue_series(rundir: Path, uid: int, t0_mono_ns: int) -> pd.DataFrame:
    """The user's AP queue from packets.csv: per event, t_s (after t0) and the packets
    queued after it (an enqueue adds one; a dequeue, or an overflow drop, which follows its
    packet's enqueue at once, takes one away); and the enqueue rows (t_s, dropped)."""
    pk = pd.read_csv(rundir / "packets.csv")
    pk = pk[pk["user"] == uid]
    pk = pk[pk["event"].isin(["enqueue", "dequeue"])
            | ((pk["event"] == "drop") & (pk["reason"] == "overflow"))]
    step = np.where(pk["event"] == "enqueue", 1, -1)
    t = (pk["t_ns"].to_numpy() - t0_mono_ns) / 1e9
    return pd.DataFrame({"t_s": t, "queued": np.cumsum(step), "event": pk["event"].to_numpy(),
                         "reason": pk["reason"].to_numpy()})


def queue_at(q: pd.DataFrame, t: float, since: float) -> tuple[int, int]:
    """From _queue_series: the packets queued just before time t, and how many of them
    (the newest, the queue being a FIFO) were enqueued at `since` or later."""
    before = q[q["t_s"] < t]
    queued = int(before["queued"].iloc[-1]) if len(before) else 0
    # an overflow drop follows its packet's enqueue at once: that packet is not queued
    dropped = before["event"].to_numpy()[1:] == "drop"
    kept = np.ones(len(before), dtype=bool)
    kept[:-1] &= ~dropped
    kept_t = before["t_s"].to_numpy()[kept & (before["event"].to_numpy() == "enqueue")]
    newest = kept_t[len(kept_t) - queued:] if queued else kept_t[:0]
    return queued, int((newest >= since).sum())


def recoveries(rundir: Path, user: str) -> tuple[list[dict], float, int]:
    """Each fast retransmission of `user`'s flow, and what stood in the user's AP queue
    when it arrived there: (rows, the sender-to-queue delay used, the queue's limit).

    Per row: t_s (sent), seq, lost (the client's capture holds no copy of the sequence
    that arrived after it was sent and before the sender sent it again), limited_transmit (new segments the sender sent between the first
    duplicate ACK of the sequence and the retransmission: RFC 3042's limited transmit,
    which ns-2's Reno does not do), queued_at_arrival (the user's AP packets just before
    the retransmission arrived), of_them_sent_after_first_dupack (the queue's newest
    packets that arrived after the first duplicate ACK's segments could: at most the
    limited-transmit segments), fits_without (queued_at_arrival minus those is below the
    limit: the retransmission would have found room had they not been sent).

    The delay from the sender's capture to the queue is the median over the lost
    retransmissions of the time to the user's next overflow drop (each is dropped there
    on arrival); half the server's RTT in a run that lost none."""
    s = json.loads((rundir / "summary.json").read_text())
    run = json.loads((rundir / "run.json").read_text())
    flow = next(f for f in s["flows"] if f["user"] == user)
    uid = next(u["id"] for u in s["users"] if u["name"] == user)
    cfg = json.loads((rundir / "config.json").read_text())
    limit = int(cfg["queue"]["limit_packets"])
    segs, acks = tcpview.time_sequence(rundir, flow["id"])
    at_client = _client_data_seqs(rundir / f"client.{user}.pcap", float(run["t0_wall_s"]))
    q = _queue_series(rundir, uid, int(run["t0_mono_ns"]))
    drops = q[q["event"] == "drop"]["t_s"].to_numpy()
    enq = q[q["event"] == "enqueue"]["t_s"].to_numpy()
    fast = segs[segs["retrans"] & ~segs["timeout"]]
    rows = []
    for i, seg in fast.iterrows():
        t = float(seg.t_s)
        # the first copy: the last time this sequence was sent before (as new data)
        before = segs.loc[:i - 1]
        first = before[before.seq == seg.seq]
        if not len(first) or first.retrans.any():
            continue  # not a fast retransmission: a resend of a retransmission
        t_first = float(first.t_s.iloc[-1])
        dups = acks[(acks.ack == seg.seq) & acks.dup & (acks.t_s > t_first) & (acks.t_s < t)]
        if len(dups) < 1:
            continue
        t_dup1 = float(dups.t_s.iloc[0])
        top = float(before[before.t_s < t_dup1].end.max())
        lt = before[(before.t_s >= t_dup1) & ~before.retrans & (before.seq >= top)]
        # a copy of this retransmission: one the client got before the sender resent the
        # sequence again (by its timer)
        later = segs.loc[i + 1:]
        again = later[later.seq == seg.seq]
        t_again = float(again.t_s.iloc[0]) if len(again) else math.inf
        copies = at_client[(at_client.seq == seg.seq) & (at_client.t_s > t)
                           & (at_client.t_s < t_again)]
        nxt = drops[drops > t]
        rows.append({"t_s": t, "seq": int(seg.seq), "lost": len(copies) == 0,
                     "t_dup1": t_dup1, "limited_transmit": int(len(lt)),
                     "next_drop_after_s": float(nxt[0] - t) if len(nxt) else math.inf})
    lost_delays = [r["next_drop_after_s"] for r in rows if r["lost"]
                   and r["next_drop_after_s"] < 0.1]
    server = next(v for v in cfg["servers"] if v["name"] == flow["server"])
    d = float(np.median(lost_delays)) if lost_delays else float(server["rtt_ms"]) / 2e3
    for r in rows:
        # its arrival: the user's enqueue nearest the delay after it was sent
        near = enq[np.abs(enq - (r["t_s"] + d)) < 3e-3]
        arrive = float(near[np.argmin(np.abs(near - (r["t_s"] + d)))]) if len(near) \
            else r["t_s"] + d
        queued, late = queue_at(q, arrive, r["t_dup1"] + d)
        r.update(queued_at_arrival=queued, of_them_sent_after_first_dupack=late,
                 fits_without=queued - late < limit)
    return rows, d, limit


def main(argv: list[str]) -> int:
    if argv[:1] == ["--timeouts"] and len(argv) > 2:
        user, kinds, gaps, dups, prev, reord = argv[1], {}, {}, {}, {}, {}
        for a in argv[2:]:
            rows = timeouts(Path(a), user)
            print(f"{a}: {len(rows)} timeouts of {user}")
            for r in rows:
                kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
                gaps.setdefault(r["kind"], []).append(r["slot_gap_before_s"])
                first = (f"first copy at {r['first_at_client_s']:.2f} s"
                         if r["first_at_client_s"] is not None else "no copy")
                how = "by the timer" if r["kind"] == LOST_TIMER_RETRANSMISSION else "fast"
                print(f"  {r['t_s']:8.2f} s  seq {r['seq']:>9}  "
                      + (f"resent ({how}) at {r['resent_before_s']:.2f} s, "
                         if r["resent_before_s"] is not None else "not resent before, ")
                      + f"{r['copies_at_client']} cop{'y' if r['copies_at_client'] == 1 else 'ies'}"
                      f" at the client ({first}); {r['dupacks_before']} duplicate ACKs "
                      + (f"(the sender's reordering estimate {r['reordering_before']}) "
                         if r["reordering_before"] is not None else "")
                      + f"before; longest slot gap in the second before "
                      f"{r['slot_gap_before_s']:.2f} s: {r['kind']}")
                dups.setdefault(r["kind"], []).append(r["dupacks_before"])
                prev.setdefault(r["kind"], []).append(r["below_previous_recovery_point"])
                if r["reordering_before"] is not None:
                    reord.setdefault(r["kind"], []).append(r["reordering_before"])
        total = sum(kinds.values())
        print(f"{user}: {total} timeouts")
        for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
            print(f"  {n:4d}  {k} (longest slot gap in the second before: median "
                  f"{np.median(gaps[k]):.2f} s; duplicate ACKs before: "
                  f"{', '.join(f'{d} x{c}' for d, c in sorted(pd.Series(dups[k]).value_counts().items()))}"
                  f"; sent before the flow's previous timeout, below its recovery point: "
                  f"{sum(prev[k])} of {n}"
                  + (f"; the sender's reordering estimate: "
                     f"{', '.join(f'{d} x{c}' for d, c in sorted(pd.Series(reord[k]).value_counts().items()))}"
                     if reord.get(k) else "") + ")")
        return 0
    if argv[:1] == ["--recoveries"] and len(argv) > 2:
        user, total = argv[1], {"fast": 0, "lost": 0, "fits": 0}
        lt_all, lt_lost, q_kept = [], [], []
        for a in argv[2:]:
            rows, d, limit = recoveries(Path(a), user)
            lost = [r for r in rows if r["lost"]]
            print(f"{a}: {len(rows)} fast retransmissions of {user}, {len(lost)} lost; "
                  f"sender to AP queue {d * 1e3:.1f} ms; the queue's limit {limit} packets")
            for r in lost:
                print(f"  {r['t_s']:8.2f} s  seq {r['seq']:>9}  {r['limited_transmit']} new "
                      f"segments sent after the first duplicate ACK; the queue held "
                      f"{r['queued_at_arrival']} packets at its arrival, "
                      f"{r['of_them_sent_after_first_dupack']} of them sent after the first "
                      f"duplicate ACK: "
                      + ("room without them" if r["fits_without"] else "full without them"))
            total["fast"] += len(rows)
            total["lost"] += len(lost)
            total["fits"] += sum(bool(r["fits_without"]) for r in lost)
            lt_all += [r["limited_transmit"] for r in rows]
            lt_lost += [r["limited_transmit"] for r in lost]
            q_kept += [r["queued_at_arrival"] for r in rows
                       if not r["lost"] and r["queued_at_arrival"] is not None]

        def counts(v):
            return ", ".join(f"{k} x{c}" for k, c in sorted(pd.Series(v).value_counts().items()))
        print(f"{user}: {total['fast']} fast retransmissions, {total['lost']} lost, "
              f"{total['fits']} of those would have found room without the segments sent "
              f"after the first duplicate ACK")
        print(f"  new segments sent between the first duplicate ACK and the retransmission: "
              f"all {counts(lt_all)}; the lost ones {counts(lt_lost)}")
        if q_kept:
            print(f"  the queue at the arrival of those delivered: {counts(q_kept)} packets")
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
