"""The figures of a testbed run (goodput and cwnd per flow, queues, CQI and MCS, CLAMP
windows, per-user bars) and across variants (per-flow goodput, Jain's index), drawn from
the run folder and its summary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from oppsched.testbed import transfers, wrcflows
from oppsched.experiments.testbed.readers import read_json, read_slots, slot_column
from oppsched.experiments.testbed.schema import is_wrc, repeated, wrc_weight
from oppsched.testbed.flows import intervals
from oppsched.analysis.report import pyplot, save_figure


def plot(outdir: Path, summary: dict) -> list[str]:
    plt = pyplot()

    rundir = Path(outdir)
    cfg = summary["config"]
    run = read_json(rundir / "run.json") or {}
    plans = {f["id"]: f for f in run.get("flows", [])}
    t0_ns = run.get("t0_mono_ns")
    files = []

    # 1. goodput per flow over time (receiver intervals) and the sender's cwnd
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    any_iv = False
    for f in cfg["flows"]:
        off = (plans.get(f["id"]) or {}).get("started_at_s") or 0.0
        iv = intervals(rundir / f"flow.{f['id']}.receiver.json", off)
        if not iv.empty:
            axes[0].plot(iv["t_s"], iv["bps"] / 1e3, lw=1, label=f"{f['id']} ({f['device']})")
            any_iv = True
        sv = intervals(rundir / f"flow.{f['id']}.sender.json", off)
        if not sv.empty and "snd_cwnd" in sv:
            axes[1].plot(sv["t_s"], sv["snd_cwnd"] / 1e3, lw=1, label=f["id"])
    axes[0].set_ylabel("goodput (kb/s)")
    axes[0].set_title("per-flow goodput (iperf3 receiver intervals)")
    axes[1].set_ylabel("sender cwnd (kB)")
    axes[1].set_xlabel("time since t0 (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
        if any_iv:
            ax.legend(fontsize=8)
    files.append(save_figure(fig, rundir, "goodput.png"))
    if any(is_wrc(f) for f in cfg["flows"]):
        files.append(plot_wrc(rundir, cfg, plans))

    slots = read_slots(rundir)
    if slots is not None and len(slots) and "t_ns" in slots:
        base = t0_ns if t0_ns is not None else int(slots["t_ns"].iloc[0])
        t = (slots["t_ns"] - base) / 1e9
        bins = np.floor(t / 0.1) * 0.1  # 100 ms averages keep the plots light
        users = [{"name": d["name"], "id": j} for j, d in enumerate(cfg["devices"])]
        # 2. queue per user
        fig, ax = plt.subplots(figsize=(9, 3.5))
        for u in users:
            c = slot_column(slots, "queue", u)
            if c:
                g = slots[c].groupby(bins).mean()
                ax.plot(g.index, g.values / 1e3, lw=1, label=u["name"])
        ax.set_ylabel("AP queue (kB)")
        ax.set_xlabel("time since t0 (s)")
        ax.set_title("queue per user (100 ms means)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        files.append(save_figure(fig, rundir, "queues.png"))
        # 3. CQI and MCS per user
        fig, axes = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
        for u in users:
            c = slot_column(slots, "cqi", u)
            if c:
                g = slots[c].groupby(bins).mean()
                axes[0].plot(g.index, g.values, lw=0.8, label=u["name"])
            if "mcs" in slots:
                mine = slots["user"] == u["id"]
                g = slots["mcs"][mine].groupby(bins[mine]).mean()
                axes[1].plot(g.index, g.values, ".", ms=2, label=u["name"])
        axes[0].set_ylabel("CQI: SNR dB\n(100 ms mean)")
        axes[1].set_ylabel("MCS when served")
        axes[1].set_xlabel("time since t0 (s)")
        for ax in axes:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        files.append(save_figure(fig, rundir, "cqi_mcs.png"))

    # 4. CLAMP windows
    if cfg["clamp"]["enabled"]:
        fig, ax = plt.subplots(figsize=(9, 3.8))
        drew = False
        for d in cfg["devices"]:
            try:
                w = pd.read_csv(rundir / f"windows.{d['name']}.csv")
            except (OSError, ValueError, pd.errors.EmptyDataError):
                continue
            if w.empty:
                continue
            base = t0_ns if t0_ns is not None else int(w["t_ns"].iloc[0])
            by_port = {int(p["port"]): p["id"] for p in run.get("flows", [])}
            for fl, g in w.groupby("flow"):
                if len(g) < 20:  # iperf3's control connection: a handful of ACKs
                    continue
                port = fl.rsplit(":", 1)[-1]
                name = by_port.get(int(port), fl) if port.isdigit() else fl
                ax.plot((g["t_ns"] - base) / 1e9, g["advertised_bytes"] / 1e3, lw=0.8,
                        label=f"{name} ({d['name']}): AWND")
                drew = True
        ax.set_ylabel("advertised window (kB)")
        ax.set_xlabel("time since t0 (s)")
        ax.set_title("CLAMP windows (windows.<dev>.csv)")
        ax.grid(alpha=0.3)
        if drew:
            ax.legend(fontsize=7)
        files.append(save_figure(fig, rundir, "windows.png"))

    # 5. repeated transfers: each transfer's duration at its start time
    rep = [f for f in cfg["flows"] if repeated(f)]
    if rep:
        fig, ax = plt.subplots(figsize=(9, 3.5))
        for f in rep:
            try:
                d = transfers.read_client(transfers.client_csv(rundir, f["id"]))
            except (OSError, ValueError, pd.errors.EmptyDataError):
                d = None
            if d is None or d.empty:
                continue
            ok = d["complete"].fillna(0).astype(int) == 1
            ax.plot(d["start_s"][ok], d["duration_s"][ok], ".", ms=4,
                    label=f"{f['id']} ({f['bytes']} B)")
            if (~ok).any():
                ax.plot(d["start_s"][~ok], d["duration_s"][~ok], "x", ms=5,
                        label=f"{f['id']}: not completed")
        ax.set_ylabel("transfer time (s)")
        ax.set_xlabel("start, time since t0 (s)")
        ax.set_title("repeated transfers (transfers.<id>.csv)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        files.append(save_figure(fig, rundir, "transfers.png"))

    # 6. per-user bars
    users = summary["users"]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.3))
    names = [u["name"] for u in users]
    axes[0].bar(names, [100 * u["slot_fraction"] for u in users])
    axes[0].set_ylabel("slots (%)")
    axes[1].bar(names, [u["mac_throughput_bps"] / 1e3 for u in users], label="MAC")
    axes[1].bar(names, [u["goodput_bps"] / 1e3 for u in users], width=0.5, label="TCP goodput")
    axes[1].set_ylabel("kb/s")
    axes[1].legend(fontsize=8)
    axes[2].bar(names, [u["mean_queue_delay_ms"] or 0 for u in users])
    axes[2].set_ylabel("mean queueing delay (ms)")
    files.append(save_figure(fig, rundir, "users.png"))
    return files


def compare_plots(outdir: Path, runs) -> list[str]:
    """Across variants: per-flow goodput side by side, and Jain's index (flows, users)."""
    plt = pyplot()

    flow_ids = [f["id"] for f in runs[0][1]["flows"]]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [3, 1.3]})
    width = 0.8 / max(1, len(runs))
    x = np.arange(len(flow_ids))
    for k, (label, s, _) in enumerate(runs):
        by_id = {f["id"]: f for f in s["flows"]}
        vals = [by_id[i]["goodput_bps"] / 1e3 if i in by_id else 0 for i in flow_ids]
        axes[0].bar(x + (k - (len(runs) - 1) / 2) * width, vals, width, label=label)
    cfg = runs[0][1]["config"]
    d_of = {s["name"]: s["rtt_ms"] for s in cfg["servers"]}
    labels_x = []
    for f in cfg["flows"]:
        if f["id"] in flow_ids:
            labels_x.append(f"{f['id']}\n{f['device']}, d = {d_of[f['server']]:g} ms")
    axes[0].set_xticks(x)
    axes[0].set_xticklabels(labels_x, fontsize=8)
    axes[0].set_ylabel("goodput (kb/s)")
    axes[0].set_title("per-flow goodput")
    axes[0].legend(fontsize=8)
    axes[0].grid(alpha=0.3, axis="y")
    xj = np.arange(3)
    for k, (label, s, _) in enumerate(runs):
        axes[1].bar(xj + (k - (len(runs) - 1) / 2) * width,
                    [s["jain_index_flows"], s.get("jain_index_flows_fair_share") or 0,
                     s["jain_index_users"]], width, label=label)
    axes[1].set_xticks(xj)
    axes[1].set_xticklabels(["flows", "flows /\nfair share", "users"], fontsize=8)
    axes[1].set_ylim(0, 1.05)
    axes[1].set_title("Jain's index")
    axes[1].grid(alpha=0.3, axis="y")
    return [save_figure(fig, outdir, "compare_flows.png")]


def plot_wrc(rundir: Path, cfg: dict, plans: dict, name: str = "wrc.png") -> str:
    """The wrc flows (Nandagopal et al., Figs. 5 and 7): per epoch, the rate each
    receiver fed back (the sender's rate) and the rate it received, packets/s."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for f in cfg["flows"]:
        if not is_wrc(f):
            continue
        plan = plans.get(f["id"]) or {}
        ep = wrcflows.epochs(rundir, f["id"], wrcflows._recv_offset(plan))
        if ep is not None and plan.get("ended_at_s") is not None:
            ep = ep[ep["t_s"] <= plan["ended_at_s"]]  # the receiver outlives its sender
        if ep is None or ep.empty:
            continue
        lab = f"{f['id']} (w {wrc_weight(f):g})"
        axes[0].plot(ep["t_s"], ep["rate_pps"], lw=1, label=lab)
        if "recv_pps" in ep:
            # 10-epoch means: one epoch holds only a few packets of a slow flow
            r = ep.set_index("t_s")["recv_pps"].rolling(10, min_periods=1).mean()
            axes[1].plot(r.index, r.to_numpy(), lw=1, label=lab)
    axes[0].set_ylabel("rate fed back (packets/s)")
    axes[0].set_title("weighted rate control: sending rate per epoch")
    axes[1].set_ylabel("received (packets/s)")
    axes[1].set_title("received rate (mean of 10 epochs)")
    axes[1].set_xlabel("time since t0 (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(fig, rundir, name)
