"""`oppsched tcpview`: TCP's view of one testbed run drawn (the figures of Srinivasan &
Baras, §V, Figs. 6-8), from the traces oppsched.analysis.tcp reads (its docstring says
which and how).

`oppsched tcpview RUN [--flows f01,f16] [--all] [--out DIR] [--zoom A,B]` writes
`tcp-cwnd.png`, `tcp-tsg.<flow>.png` and `tcp-view.csv` (one row per flow; with --all, per
downstream flow of the run) into DIR (default: RUN). Without --flows it takes the flows
with the lowest and the highest goodput.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from oppsched.analysis import pcap
from oppsched.analysis.tcp import (TcpViewError, _flow, _load, cwnd_trace, default_flows,
                                   grants, summary, time_sequence)
from oppsched.experiments.testbed.schema import is_wrc, repeated


def _title(cfg: dict) -> str:
    sch = cfg.get("scheduler", {})
    kind = sch.get("kind", "?")
    extra = f", alpha = {sch.get('alpha')}" if kind == "pf" else ""
    return f"{cfg.get('experiment', '')}: {kind}{extra}, seed {cfg.get('seed')}"


def plot(rundir: Path, flows: list[str] | None = None, out: Path | None = None,
         zoom: tuple[float, float] = (0.0, 5.0), every_flow: bool = False) -> pd.DataFrame:
    """Writes tcp-cwnd.png, tcp-tsg.<flow>.png and tcp-view.csv into `out` (default: the
    run folder); returns the rows of tcp-view.csv: of `flows`, or with `every_flow` of
    every downstream TCP flow of the run (the figures stay those of `flows`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rundir = Path(rundir)
    out = Path(out) if out else rundir
    out.mkdir(parents=True, exist_ok=True)
    cfg, _run = _load(rundir)
    flows = flows or default_flows(rundir)
    fc = {f["id"]: f for f in cfg["flows"]}
    for fid in flows:
        _flow(cfg, _run, fid)
    table = [f["id"] for f in cfg["flows"] if f.get("direction", "down") == "down"
             and not repeated(f) and not is_wrc(f)] if every_flow else list(flows)
    table += [fid for fid in flows if fid not in table]
    servers = {fc[fid]["server"] for fid in table}
    captures = {}
    for sv in servers:
        p = rundir / f"wired.{sv}.pcap"
        if not p.exists():
            raise TcpViewError(f"{p.name}: no capture (run with capture.pcaps: true)")
        captures[sv] = pcap.read_tcp(p)
    title = _title(cfg)
    slots_path = rundir / "slots.csv"
    if not slots_path.exists():
        raise TcpViewError(f"{slots_path.name}: no slot trace in {rundir}")
    slots = pd.read_csv(slots_path)
    rows, data = [], {}
    for fid in table:
        segs, acks = time_sequence(rundir, fid, captures[fc[fid]["server"]])
        cw = cwnd_trace(rundir, fid)
        g, q = grants(rundir, fc[fid]["device"], slots)
        rows.append(summary(rundir, fid, segs, cw, g))
        if fid in flows:
            data[fid] = (segs, acks, cw, g, q)

    # cwnd, RTT and the AP queue against time (Fig. 6)
    fig, ax = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    for fid in flows:
        segs, _acks, cw, _g, q = data[fid]
        lab = f"{fid} ({fc[fid]['device']})"
        line, = ax[0].step(cw["t_s"], cw["cwnd_segments"], where="post", label=lab)
        to = segs[segs["timeout"]]
        if len(to):
            ax[0].plot(to["t_s"], np.zeros(len(to)), "v", color=line.get_color(), ms=7,
                       label=f"{fid}: timeout retransmissions")
        ax[1].plot(cw["t_s"], cw["rtt_ms"], color=line.get_color(), label=lab)
        if len(q):
            ax[2].plot(q["t_s"], q["queue"], color=line.get_color(), lw=0.6, label=lab)
    ax[0].set_ylabel("snd_cwnd (segments)")
    ax[0].set_title(f"{title}: congestion window (tcp_info)")
    ax[1].set_ylabel("smoothed RTT (ms)")
    ax[2].set_ylabel("AP queue (slot trace)")
    ax[2].set_xlabel("time after t0 (s)")
    for a in ax:
        a.grid(alpha=0.3)
        a.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "tcp-cwnd.png", dpi=110)
    plt.close(fig)

    # time-sequence graphs (Figs. 7-8): the whole run and a zoom, with the user's slots
    for fid in flows:
        segs, acks, _cw, g, _q = data[fid]
        fig, ax = plt.subplots(3, 1, figsize=(10, 9), gridspec_kw={"height_ratios": [3, 3, 1]})
        for a, (lo, hi) in zip(ax[:2], [(None, None), zoom]):
            s = segs if lo is None else segs[(segs["t_s"] >= lo) & (segs["t_s"] <= hi)]
            k = acks if lo is None else acks[(acks["t_s"] >= lo) & (acks["t_s"] <= hi)]
            new, rt = s[~s["retrans"]], s[s["retrans"]]
            a.vlines(new["t_s"], new["seq"] / 1e3, new["end"] / 1e3, color="k", lw=0.8,
                     label="data sent")
            a.step(k["t_s"], k["ack"] / 1e3, where="post", color="tab:green", lw=0.9,
                   label="cumulative ACK")
            if len(rt):
                a.plot(rt["t_s"], rt["seq"] / 1e3, "r|", ms=9, mew=1.5,
                       label="retransmission")
            to = s[s["timeout"]]
            if len(to):
                a.plot(to["t_s"], to["seq"] / 1e3, "rv", ms=7, label="sent by the timer "
                       "(timeout)")
            a.set_ylabel("sequence (kB)")
            a.grid(alpha=0.3)
            a.legend(loc="upper left", fontsize=8)
            if lo is not None:
                a.set_xlim(lo, hi)
        ax[0].set_title(f"{title}: {fid} ({fc[fid]['device']}), time-sequence at the sender")
        lo, hi = zoom
        gz = g[(g["t_s"] >= lo) & (g["t_s"] <= hi)]
        ax[2].vlines(gz["t_s"], 0, gz["tb_bytes"], color="tab:blue", lw=0.8)
        ax[2].set_xlim(lo, hi)
        ax[2].set_ylabel("TB bytes")
        ax[2].set_xlabel(f"time after t0 (s); bottom: the slots granted to {fc[fid]['device']}")
        ax[2].grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / f"tcp-tsg.{fid}.png", dpi=110)
        plt.close(fig)
    df = pd.DataFrame(rows)
    df.to_csv(out / "tcp-view.csv", index=False)
    return df


def _cmd(a) -> int:
    try:
        lo, hi = (float(x) for x in a.zoom.split(","))
    except ValueError as exc:
        raise TcpViewError(f"--zoom: {a.zoom!r} is not A,B (seconds)") from exc
    if not hi > lo:
        raise TcpViewError(f"--zoom: {a.zoom!r}: B must be larger than A")
    flows = [x.strip() for x in a.flows.split(",") if x.strip()] if a.flows else None
    df = plot(Path(a.results), flows, Path(a.out) if a.out else None, (lo, hi), a.all)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(df.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    return 0
