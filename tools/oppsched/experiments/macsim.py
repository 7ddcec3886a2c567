"""`kind: macsim` -- a slot-level study of the downlink scheduler.

Every user has a full buffer; each slot, every user's SNR is drawn from its own Jakes
fading process (oppsched.mac.fading_channel, the same C++ the abstract PHY uses), mapped to the
rate it could receive (the EV-DO table of Srinivasan & Baras, Table I, or a capped Shannon
rate), and the
scheduler (oppsched.mac.make_scheduler, the daemon's own code) picks the user to serve.
This reproduces the MAC-level experiments of Srinivasan & Baras (resource fraction per user, MAC
throughput, scheduling jitter vs alpha and lambda) without TCP; the end-to-end runs with
real TCP are `kind: testbed`.

Outputs in the run folder: slots.csv.gz (the slot trace, one row per slot), summary.json,
and plots; `oppsched analyze` recomputes summary and plots from the trace alone.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from oppsched import mac, plugin, registry
from oppsched.config import Field, ListOf
from oppsched.names import CHANNEL_MODEL_ALIASES, FADING_MODELS
from oppsched.analysis.metrics import jain_index, jitter_stats
from oppsched.analysis.report import pyplot, save_figure

SCHEMA = {
    "phy": {
        "slot_s": Field(float, 1.667e-3, min=1e-5, max=1.0, doc="slot duration (s)"),
        "rate_table": Field(str, "evdo", choices=("evdo", "shannon"),
                            doc="SNR -> rate: Srinivasan & Baras, Table I, or "
                            "capped Shannon"),
        "bandwidth_hz": Field(float, 1.2288e6, min=1.0, doc="Shannon: W in W log2(1+SNR)"),
        "max_rate_bps": Field(float, 2.4576e6, min=1.0, doc="Shannon: rate cap"),
    },
    # kind and its parameters from the MAC library's registry (oppsched.registry); wpf's
    # weights are the users' `weight`
    "scheduler": registry.scheduler_fields(skip=("weights",)),
    "users": ListOf({
        "name": Field(str),
        "mean_snr_db": Field(float, 0.0, min=-30.0, max=60.0),
        "doppler_hz": Field(float, 10.0, min=0.0, max=2000.0),
        "fading": Field(str, "sum_of_sinusoids", choices=FADING_MODELS,
                        aliases=CHANNEL_MODEL_ALIASES,
                        doc="Srinivasan & Baras, eq. 4: random-phase sum of "
                        "sinusoids; or Andrew & Hanly, CLAMP, §V-B: Jakes (G=20)"),
        "weight": registry.element_field(registry.scheduler_param_specs()["weights"], 1.0,
                                         doc="wpf: this user's scheduling weight"),
    }, min_len=1),
}


def _rates_bps(cfg: dict, snr_lin: np.ndarray) -> np.ndarray:
    phy = cfg["phy"]
    if phy["rate_table"] == "shannon":
        r = phy["bandwidth_hz"] * np.log2(1.0 + snr_lin)
        return np.minimum(r, phy["max_rate_bps"])
    # Srinivasan & Baras, Table I: the rate of the highest row whose SNR threshold is met, 0 below it
    table = mac.mcs_table.evdo()
    thresholds = np.asarray(table.thresholds_db)
    rates = np.concatenate([[0.0], np.asarray(table.rates_bps)])
    snr_db = 10.0 * np.log10(np.maximum(snr_lin, 1e-30))
    return rates[np.searchsorted(thresholds, snr_db, side="right")]


def _scheduler(cfg: dict):
    s = dict(cfg["scheduler"])
    if s["kind"] in plugin.PLUGIN_KINDS:
        # the same C++ wrapper the apd runs (host/pyplugin, cpp_plugin.h): deadline,
        # fallbacks, counters
        return mac.make_scheduler(s["kind"], {**registry.scheduler_params(s),
                                              "slot_s": cfg["phy"]["slot_s"],
                                              "num_users": len(cfg["users"])})
    s["weights"] = [u["weight"] for u in cfg["users"]]
    return mac.make_scheduler(s["kind"], registry.scheduler_params(s))


def run(cfg: dict, outdir: Path, progress) -> None:
    slot_s = cfg["phy"]["slot_s"]
    n_slots = int(round(cfg["duration_s"] / slot_s))
    users = cfg["users"]
    t = np.arange(n_slots) * slot_s
    snr = np.empty((len(users), n_slots))
    for i, u in enumerate(users):
        # one independent, seeded fading process per user
        j = mac.fading_channel(u["doppler_hz"], u["mean_snr_db"], cfg["seed"] * 1000 + i,
                      model=u["fading"])
        snr[i] = j.snr_linear_many(t)
    rates = _rates_bps(cfg, snr)
    if cfg["scheduler"]["kind"] in plugin.PLUGIN_KINDS:  # the record of what ran
        key = "file" if cfg["scheduler"]["kind"] == plugin.PYTHON_KIND else "library"
        src = Path(cfg["scheduler"][key])
        shutil.copyfile(src, outdir / f"plugin.{src.name}")
    sched = _scheduler(cfg)
    backlogged = [True] * len(users)
    served = np.empty(n_slots, dtype=np.int64)
    step = max(1, n_slots // 10)
    for k in range(n_slots):
        served[k] = sched.step(rates[:, k].tolist(), backlogged)
        if (k + 1) % step == 0 or k + 1 == n_slots:
            progress(k + 1, n_slots, "slots")
    idx = np.arange(n_slots)
    ok = served >= 0
    rate_served = np.zeros(n_slots)
    rate_served[ok] = rates[served[ok], idx[ok]]
    trace = pd.DataFrame({
        "slot": idx,
        "t_s": t,
        "user": served,
        "rate_bps": rate_served,
        "tb_bits": rate_served * slot_s,
    })
    for i, u in enumerate(users):
        trace[f"snr_db.{u['name']}"] = 10.0 * np.log10(np.maximum(snr[i], 1e-30))
    trace.to_csv(outdir / "slots.csv.gz", index=False, float_format="%.6g")
    # the policy's own counters (python kind: plugin_decisions, plugin_deadline_misses, ...)
    (outdir / "scheduler.json").write_text(json.dumps(dict(sched.counters), indent=1))


def analyze(outdir: Path) -> dict:
    cfg = json.loads((outdir / "config.json").read_text())
    trace = pd.read_csv(outdir / "slots.csv.gz")
    slot_s = cfg["phy"]["slot_s"]
    n = len(trace)
    duration = n * slot_s
    users = []
    for i, u in enumerate(cfg["users"]):
        mine = trace[trace["user"] == i]
        gaps = np.diff(mine["slot"].to_numpy()) * slot_s
        users.append({
            "name": u["name"],
            "slot_fraction": len(mine) / n if n else 0.0,
            "mac_throughput_bps": float(mine["tb_bits"].sum() / duration) if duration else 0.0,
            # full-buffer users: queue size and delay are not defined in this kind of run
            "mean_queue_bytes": None,
            "mean_queue_delay_ms": None,
            "mean_snr_db": float(10 * math.log10(np.mean(10 ** (trace[f"snr_db.{u['name']}"] / 10)))),
            "jitter": jitter_stats(gaps),
        })
    return {
        "experiment": cfg["experiment"],
        "kind": "macsim",
        "duration_s": duration,
        "config": cfg,
        "flows": [],
        "users": users,
        "jain_index_flows": None,
        "jain_index_users": jain_index(u["mac_throughput_bps"] for u in users),
        "aggregate_mac_throughput_bps": float(trace["tb_bits"].sum() / duration) if duration else 0.0,
        "slots": {"total": n, "empty": int((trace["user"] < 0).sum()), "late": 0},
        # this kind has no error model: every scheduled TB is delivered on its first attempt
        "harq": {"tb_sent": int((trace["user"] >= 0).sum()), "tb_failed_final": 0},
        "scheduler": _scheduler_counters(outdir),
    }


def _scheduler_counters(outdir: Path) -> dict:
    """The policy's counters the run wrote (scheduler.plugin_deadline_misses, ...); {} for the
    built-in kinds or a run from before they were recorded."""
    path = outdir / "scheduler.json"
    return json.loads(path.read_text()) if path.exists() else {}


def plot(outdir: Path, summary: dict) -> list[str]:
    plt = pyplot()

    trace = pd.read_csv(outdir / "slots.csv.gz")
    names = [u["name"] for u in summary["users"]]
    files = []

    # Three representative users (lowest, median, highest nominal SNR) over one second.
    order = sorted(range(len(names)), key=lambda i: summary["config"]["users"][i]["mean_snr_db"])
    shown = sorted({order[0], order[len(order) // 2], order[-1]})
    fig, axes = plt.subplots(len(shown), 1, figsize=(8, 1.6 + 1.4 * len(shown)), sharex=True,
                             squeeze=False)
    window = trace[trace["t_s"] <= min(1.0, trace["t_s"].max())]
    for ax, i in zip(axes[:, 0], shown):
        name = names[i]
        ax.plot(window["t_s"], window[f"snr_db.{name}"], lw=0.8, color="0.4")
        mine = window[window["user"] == i]
        ax.plot(mine["t_s"], mine[f"snr_db.{name}"], "o", ms=3, color="tab:red")
        ax.set_ylabel(f"{name}\nSNR (dB)")
    axes[0, 0].set_title("SNR of three users; red: slots in which the user was served")
    axes[-1, 0].set_xlabel("time (s)")
    files.append(save_figure(fig, outdir, "snr_and_service.png"))

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    axes[0].bar(names, [u["slot_fraction"] for u in summary["users"]])
    axes[0].axhline(1 / len(names), color="k", ls="--", lw=0.8, label="1/N")
    axes[0].set_ylabel("fraction of slots")
    axes[0].legend()
    axes[1].bar(names, [u["mac_throughput_bps"] / 1e3 for u in summary["users"]])
    axes[1].set_ylabel("MAC throughput (kb/s)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=45)
    files.append(save_figure(fig, outdir, "users.png"))
    return files


def compare_plots(outdir: Path, runs) -> list[str]:
    """Across variants: slot fraction and throughput against nominal SNR (Srinivasan & Baras,
    Figs. 9-12)."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for label, s, _ in runs:
        snr = [u["mean_snr_db"] for u in s["config"]["users"]]
        order = np.argsort(snr)
        x = np.asarray(snr)[order]
        us = [s["users"][i] for i in order]
        axes[0].plot(x, [100 * u["slot_fraction"] for u in us], "o-", ms=3, label=label)
        axes[1].plot(x, [u["mac_throughput_bps"] / 1e3 for u in us], "o-", ms=3, label=label)
        axes[2].plot(x, [u["jitter"]["cov"] for u in us], "o-", ms=3, label=label)
    axes[0].set_ylabel("slots (%)")
    axes[1].set_ylabel("MAC throughput (kb/s)")
    axes[2].set_ylabel("scheduling jitter CoV")
    for ax in axes:
        ax.set_xlabel("nominal SNR (dB)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return [save_figure(fig, outdir, "compare_users.png")]
