"""TCP's view of one testbed run: each flow's congestion window and RTT against time, and
its time-sequence graph, with the user's scheduling instants beside them (Srinivasan &
Baras, opportunistic scheduling and TCP, §V, Figs. 6-8).

Sources, all in the run folder (docs/testbed.md):

* the sender's tcp_info, sampled by iperf3 at the end of every interval
  (`flow.<id>.sender.json`, interval `iperf.interval_s`): `snd_cwnd` (bytes; shown in
  segments of the connection's MSS), the smoothed RTT and its variation, and the
  retransmissions in the interval;
* the capture on the server's wired side (`wired.<server>.pcap`, `capture.pcaps`): every
  data segment as the sender sent it and every ACK as it came back. A segment whose end
  does not go beyond the highest byte sent before is a retransmission. A retransmission
  that no ACK preceded by less than `ACK_TRIGGER_S` was sent by a timer: with SACK off
  (as in the papers' Reno), the retransmission timeout. A fast retransmission, a NewReno
  partial-ACK retransmission and the go-back-N after a timeout are each sent on the
  arrival of an ACK, within microseconds (at most a few milliseconds on a loaded
  machine); the duplicate ACKs that keep arriving during a stall do not trigger one, so
  "no ACK just before" is the timer's mark, not "no ACK for 200 ms";
* the apd's slot trace (`slots.csv`): the slots granted to the flow's user, with their
  transport-block sizes, and the user's AP queue.

Times are seconds after the run's t0 (the flows' common start): the captures' wall-clock
timestamps less `run.json`'s `t0_wall_s`, the slot trace's CLOCK_MONOTONIC less `t0_mono_ns`.

`oppsched tcpview` (oppsched.commands.tcpview) draws them; the run's timeline
(oppsched.analysis.timeline) takes the congestion window from cwnd_trace.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from oppsched.analysis import pcap
from oppsched.testbed import flows
from oppsched.config import ConfigError

ACK_TRIGGER_S = 0.010  # an ACK this shortly before a retransmission triggered it


class TcpViewError(ConfigError):
    """A run folder that lacks what the view needs (named in the message)."""


def _load(rundir: Path) -> tuple[dict, dict]:
    rundir = Path(rundir)
    try:
        cfg = json.loads((rundir / "config.json").read_text())
        run = json.loads((rundir / "run.json").read_text())
    except FileNotFoundError as exc:
        raise TcpViewError(f"{rundir}: not a testbed run folder (no {Path(exc.filename).name})") \
            from exc
    return cfg, run


def _flow(cfg: dict, run: dict, flow_id: str) -> tuple[dict, dict]:
    fc = {f["id"]: f for f in cfg.get("flows", [])}
    if flow_id not in fc:
        raise TcpViewError(f"flows: {flow_id!r} is not a flow of this run "
                           f"(flows: {', '.join(fc) or 'none'})")
    plans = {f["id"]: f for f in run.get("flows", [])}
    if flow_id not in plans or "port" not in plans[flow_id]:
        raise TcpViewError(f"run.json: flow {flow_id!r} was not started (no port recorded)")
    return fc[flow_id], plans[flow_id]


def cwnd_trace(rundir: Path, flow_id: str) -> pd.DataFrame:
    """The sender's tcp_info per iperf3 interval: t_s (interval end, after t0),
    cwnd_bytes, cwnd_segments, rtt_ms, rttvar_ms, retransmits (in the interval)."""
    rundir = Path(rundir)
    cfg, run = _load(rundir)
    _f, plan = _flow(cfg, run, flow_id)
    path = rundir / f"flow.{flow_id}.sender.json"
    d = flows.load_json(path)  # as the run's summary reads it (a cut-and-repeated file too)
    if d is None:
        raise TcpViewError(f"{path.name}: missing, or no whole iperf3 JSON document in it")
    # The segment's payload: the flow's mss_bytes where it sets one (iperf3 then reports
    # tcp_mss, the option's value with the timestamps' 12 bytes, and no tcp_mss_default),
    # else the default iperf3 reports (1448 on a 1500-byte MTU with timestamps).
    mss = int(_f.get("mss_bytes") or (d.get("start") or {}).get("tcp_mss_default") or 1448)
    t0 = float(plan.get("started_at_s") or 0.0)
    rows = []
    for iv in d.get("intervals", []):
        st = (iv.get("streams") or [{}])[0]
        if "snd_cwnd" not in st:
            continue
        rows.append({"t_s": t0 + float(st.get("end", 0.0)),
                     "cwnd_bytes": int(st["snd_cwnd"]),
                     "cwnd_segments": int(st["snd_cwnd"]) / mss,
                     "rtt_ms": float(st.get("rtt", 0)) / 1000.0,
                     "rttvar_ms": float(st.get("rttvar", 0)) / 1000.0,
                     "retransmits": int(st.get("retransmits", 0))})
    return pd.DataFrame(rows, columns=["t_s", "cwnd_bytes", "cwnd_segments", "rtt_ms",
                                       "rttvar_ms", "retransmits"])


def time_sequence(rundir: Path, flow_id: str, tcp: pd.DataFrame | None = None) \
        -> tuple[pd.DataFrame, pd.DataFrame]:
    """The flow's data connection at the sender: (segments, acks).

    segments: t_s, seq (first byte, relative to the connection's first data byte), end
    (one past the last byte), retrans (the end does not pass the highest byte sent
    before), timeout (a retransmission with no ACK in the ACK_TRIGGER_S before it: sent
    by the retransmission timer).
    acks: t_s, ack (relative, as seq), dup (same ack as the one before and no data).
    `tcp` is the server capture already read with pcap.read_tcp (to read it once for
    several flows)."""
    rundir = Path(rundir)
    cfg, run = _load(rundir)
    f, plan = _flow(cfg, run, flow_id)
    if f.get("direction", "down") != "down":
        raise TcpViewError(f"flows: {flow_id!r} is an upstream flow; the view is of downloads")
    path = rundir / f"wired.{f['server']}.pcap"
    if tcp is None:
        if not path.exists():
            raise TcpViewError(f"{path.name}: no capture (run with capture.pcaps: true)")
        tcp = pcap.read_tcp(path)
    t0_wall = run.get("t0_wall_s")
    if t0_wall is None:
        raise TcpViewError("run.json: no t0_wall_s (the run's start on the wall clock)")
    dst, port = pcap.norm_addr(plan["dst_addr"]), int(plan["port"])
    to_rcv = tcp[(tcp["dst"] == dst) & (tcp["dport"] == port)]
    if to_rcv.empty:
        raise TcpViewError(f"{path.name}: no segment of flow {flow_id!r} "
                           f"(to {dst} port {port})")
    # iperf3 opens a control connection and a data connection to the same port: the data
    # connection is the one that carries the most payload.
    sport = int(to_rcv.groupby("sport")["payload"].sum().idxmax())
    data = to_rcv[(to_rcv["sport"] == sport) & (to_rcv["payload"] > 0)]
    acks = tcp[(tcp["src"] == dst) & (tcp["sport"] == port) & (tcp["dport"] == sport)
               & ((tcp["flags"] & pcap.TCP_ACK) != 0)]
    syn = to_rcv[(to_rcv["sport"] == sport) & ((to_rcv["flags"] & pcap.TCP_SYN) != 0)]
    base = int(syn["seq"].iloc[0]) + 1 if len(syn) else int(data["seq"].iloc[0])
    t = data["t_s"].to_numpy() - float(t0_wall)
    seq = pcap._unwrap(data["seq"].to_numpy(), base)
    end = seq + data["payload"].to_numpy()
    top_before = np.concatenate([[0], np.maximum.accumulate(end)[:-1]])
    retrans = end <= top_before
    ta = acks["t_s"].to_numpy() - float(t0_wall)
    av = pcap._unwrap(acks["ack"].to_numpy(), base)
    dup = np.zeros(len(av), dtype=bool)
    if len(av) > 1:
        dup[1:] = (av[1:] == av[:-1]) & (acks["payload"].to_numpy()[1:] == 0)
    # the time of the last ACK before each segment
    idx = np.searchsorted(ta, t, side="left") - 1
    last_ack = np.where(idx >= 0, ta[np.clip(idx, 0, None)] if len(ta) else -np.inf, -np.inf)
    timeout = retrans & ((t - last_ack) > ACK_TRIGGER_S)
    segs = pd.DataFrame({"t_s": t, "seq": seq, "end": end, "retrans": retrans,
                         "timeout": timeout})
    return segs, pd.DataFrame({"t_s": ta, "ack": av, "dup": dup})


def grants(rundir: Path, user: str, slots: pd.DataFrame | None = None) \
        -> tuple[pd.DataFrame, pd.DataFrame]:
    """The slots granted to `user`: t_s (after t0), tb_bytes, retx, outcome; and the
    user's AP queue in every slot: returned as a second frame (t_s, queue). `slots` is
    slots.csv already read (to read it once for several users)."""
    rundir = Path(rundir)
    cfg, run = _load(rundir)
    names = [d["name"] for d in cfg["devices"]]
    if user not in names:
        raise TcpViewError(f"user: {user!r} is not a device of this run")
    uid = names.index(user)
    path = rundir / "slots.csv"
    if slots is None and not path.exists():
        raise TcpViewError(f"{path.name}: no slot trace in {rundir}")
    s = (pd.read_csv(path) if slots is None else slots).copy()
    t0 = run.get("t0_mono_ns")
    if t0 is None:
        raise TcpViewError("run.json: no t0_mono_ns (the run's start on CLOCK_MONOTONIC)")
    s["t_s"] = (s["t_ns"] - int(t0)) / 1e9
    mine = s[s["user"] == uid]
    g = mine[["t_s", "tb_bytes", "retx", "outcome"]].reset_index(drop=True)
    qcol = next((c for c in (f"queue.{user}", f"queue.{uid}") if c in s.columns), None)
    q = s[["t_s", qcol]].rename(columns={qcol: "queue"}) if qcol else \
        pd.DataFrame(columns=["t_s", "queue"])
    return g, q


def summary(rundir: Path, flow_id: str, segs: pd.DataFrame, cw: pd.DataFrame,
            g: pd.DataFrame) -> dict:
    """One row of tcp-view.csv: the flow's figures over the run."""
    rundir = Path(rundir)
    cfg, _run = _load(rundir)
    f = {x["id"]: x for x in cfg["flows"]}[flow_id]
    gaps = np.diff(g["t_s"].to_numpy()) * 1e3 if len(g) > 1 else np.array([])
    return {"flow": flow_id, "user": f["device"],
            "bytes_sent": int(segs["end"].max()) if len(segs) else 0,
            "segments": int(len(segs)), "retransmissions": int(segs["retrans"].sum()),
            "timeouts": int(segs["timeout"].sum()),
            "cwnd_mean_segments": float(cw["cwnd_segments"].mean()) if len(cw) else None,
            "cwnd_max_segments": float(cw["cwnd_segments"].max()) if len(cw) else None,
            "rtt_ms_mean": float(cw["rtt_ms"].mean()) if len(cw) else None,
            "rtt_ms_std": float(cw["rtt_ms"].std()) if len(cw) > 1 else None,
            "rttvar_ms_mean": float(cw["rttvar_ms"].mean()) if len(cw) else None,
            "slots": int(len(g)), "slot_gap_ms_mean": float(gaps.mean()) if len(gaps) else None,
            "slot_gap_ms_std": float(gaps.std()) if len(gaps) else None,
            "tb_bytes_mean": float(g["tb_bytes"].mean()) if len(g) else None}


def default_flows(rundir: Path) -> list[str]:
    """The flows with the lowest and the highest goodput in the run's summary.json."""
    rundir = Path(rundir)
    try:
        s = json.loads((rundir / "summary.json").read_text())
    except FileNotFoundError as exc:
        raise TcpViewError(f"{rundir}: no summary.json; name the flows with --flows") from exc
    fl = [f for f in s.get("flows", []) if f.get("goodput_bps") is not None]
    if not fl:
        raise TcpViewError(f"{rundir}/summary.json: no flow with a goodput")
    fl.sort(key=lambda f: f["goodput_bps"])
    return [fl[0]["id"]] if len(fl) == 1 else [fl[0]["id"], fl[-1]["id"]]
