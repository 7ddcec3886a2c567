"""Flows of the weighted receiver-based rate control (Nandagopal et al., §III, Fig. 3) in a
testbed run: the configuration files of `oppsched-wrc send` and `oppsched-wrc recv`
(docs/daemons.md, "oppsched-wrc"), and a flow's results from the files they write.

One receiver per flow, in the client's namespace, bound to the flow's UDP port and given
the flow's weight (the `weight` override: any real > 0); one sender in the server's
namespace, paced at the rates the receiver feeds back, for stop_s - start_s seconds. The
files of flow <id> in the run folder:

    wrc.<id>.send.yaml, wrc.<id>.recv.yaml   the programs' configurations
    wrc.<id>.epochs.csv                       the receiver's trace: one row per epoch end and
                                              per loss event (rate fed back, received count)
    wrc.<id>.rates.csv                        the sender's: every rate it adopted
    wrc.<id>.recv.stats.json, wrc.<id>.send.stats.json
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

# The flow id on the wire (the receiver keys its state on it; one flow per receiver).
WIRE_FLOW_ID = 1


def path(rundir: Path, flow_id: str, what: str) -> Path:
    """wrc.<id>.<what> in the run folder (what: send.yaml, recv.yaml, epochs.csv,
    rates.csv, recv.stats.json, send.stats.json)."""
    return Path(rundir) / f"wrc.{flow_id}.{what}"


def recv_config(flow: dict, settings: dict, port: int, rundir: Path) -> dict:
    """oppsched-wrc recv's file for one flow: the flow's weight, the algorithm's settings
    (the experiment's `wrc:` section, key for key as the program names them)."""
    alg = {k: settings[k] for k in ("epoch_ms", "alpha_pps", "delta_initial", "delta_max",
                                    "lavg_epochs", "lavg_weight", "loss_band_deviations",
                                    "congestion_loss_factor", "stale_congestion_loss",
                                    "min_rate_pps", "max_rate_pps", "differentiation")}
    return {"bind": f"0.0.0.0:{port}", "weight": float(flow["weight"]), "wrc": alg,
            "max_flows": 1, "feedback_every": int(settings["feedback_every"]),
            "idle_timeout_s": 0,
            "traces": {"epochs": str(path(rundir, flow["id"], "epochs.csv")),
                       "stats": str(path(rundir, flow["id"], "recv.stats.json"))},
            "log_level": "info"}


def send_config(flow: dict, settings: dict, dst_addr: str, port: int, seconds: float,
                rundir: Path) -> dict:
    """oppsched-wrc send's file for one flow. The weight in its packets is an integer
    (wrc_packet.h); the receiver uses the flow's own (recv_config), so a fractional weight
    is carried rounded, for the trace only."""
    return {"flow_id": WIRE_FLOW_ID,
            "weight": int(min(65535, max(1, round(float(flow["weight"]))))),
            "destination": f"{dst_addr}:{port}", "bind": "0.0.0.0:0",
            "packet_bytes": int(flow["packet_bytes"]),
            "initial_rate_pps": float(settings["initial_rate_pps"]),
            "duration_s": float(seconds),
            "traces": {"rates": str(path(rundir, flow["id"], "rates.csv")),
                       "stats": str(path(rundir, flow["id"], "send.stats.json"))},
            "log_level": "info"}


def write_configs(flow: dict, settings: dict, dst_addr: str, port: int, seconds: float,
                  rundir: Path) -> tuple[Path, Path]:
    """Writes wrc.<id>.send.yaml and wrc.<id>.recv.yaml (JSON, which YAML reads);
    returns their paths (send, recv)."""
    snd = path(rundir, flow["id"], "send.yaml")
    rcv = path(rundir, flow["id"], "recv.yaml")
    snd.write_text(json.dumps(send_config(flow, settings, dst_addr, port, seconds, rundir),
                              indent=1) + "\n")
    rcv.write_text(json.dumps(recv_config(flow, settings, port, rundir), indent=1) + "\n")
    return snd, rcv


# ----------------------------------------------------------------------------------------
# Results


def epochs(rundir: Path, flow_id: str, offset_s: float = 0.0) -> pd.DataFrame | None:
    """The receiver's epoch ends (decision none, increase, decrease) with `t_s` moved by
    offset_s (the receiver's start in run time) and, per epoch, `recv_pps`: packets
    received since the previous epoch end over the time since it. None without a trace."""
    p = path(rundir, flow_id, "epochs.csv")
    if not p.exists():
        return None
    df = pd.read_csv(p)
    ep = df[df["decision"].isin(("none", "increase", "decrease"))].copy()
    ep["t_s"] = ep["t_s"] + offset_s
    if "received" in ep and len(ep):
        dt = ep["t_s"].diff()
        ep["recv_pps"] = ep["received"].diff() / dt.where(dt > 0)
    return ep.reset_index(drop=True)


def rate_between(ep: pd.DataFrame | None, t_from: float, t_to: float) -> dict:
    """Over the epochs that end in (t_from, t_to]: the mean received rate (packets
    received / time) and the time-weighted mean of the rate fed back, packets/s."""
    out = {"recv_pps": None, "rate_pps": None}
    if ep is None or ep.empty or "received" not in ep:
        return out
    w = ep[(ep["t_s"] > t_from) & (ep["t_s"] <= t_to)]
    if len(w) >= 2:
        span = float(w["t_s"].iloc[-1] - w["t_s"].iloc[0])
        if span > 0:
            out["recv_pps"] = float(w["received"].iloc[-1] - w["received"].iloc[0]) / span
            dt = np.diff(w["t_s"].to_numpy())
            out["rate_pps"] = float(np.sum(w["rate_pps"].to_numpy()[:-1] * dt) / span)
    return out


def summarize(rundir: Path, flow: dict, plan: dict, cfg: dict, errors: list | None = None,
              read_json=None) -> dict:
    """A wrc flow's results: received packets and bytes, loss, goodput over the flow's
    life, the sender's mean rate, and the receiver's decisions (from its stats), the
    steady rates after analysis.warmup_s (from its trace)."""
    rstats = read_json(path(rundir, flow["id"], "recv.stats.json"), errors) or {}
    sstats = read_json(path(rundir, flow["id"], "send.stats.json"), errors) or {}
    fs = ((rstats.get("flows") or {}).get(str(WIRE_FLOW_ID))) or {}
    sent = (sstats.get("sent") or {})
    started = plan.get("started_at_s")
    seconds = sstats.get("elapsed_s")
    if seconds is None and started is not None and plan.get("ended_at_s") is not None:
        seconds = plan["ended_at_s"] - started
    received = fs.get("received")
    nbytes = fs.get("bytes")
    sent_packets = sent.get("packets")
    lost = fs.get("lost")
    out = {
        "weight": float(flow["weight"]) if flow.get("weight") is not None else 1.0,
        "packet_bytes": flow.get("packet_bytes"),
        "sent_packets": sent_packets, "received_packets": received,
        "lost_packets": lost,
        # Packets sent and never received (whatever the cause; the tail in flight at the
        # end included) over packets sent; `gap_loss_ratio` only those the receiver saw
        # missing in its sequence.
        "loss_ratio": (1.0 - received / sent_packets) if received is not None
        and sent_packets else None,
        "gap_loss_ratio": lost / (lost + received) if lost is not None and received else None,
        "random_losses": fs.get("random_losses"), "congestion_losses": fs.get("congestion_losses"),
        "increases": fs.get("increases"), "decreases": fs.get("decreases"),
        "epochs": fs.get("epochs"), "final_rate_pps": fs.get("rate_pps"),
        "sender_mean_rate_pps": (sstats.get("rate") or {}).get("mean_pps"),
        "seconds": seconds,
        "goodput_bps": 8.0 * nbytes / seconds if nbytes is not None and seconds else 0.0,
        "recv_pps": received / seconds if received is not None and seconds else None,
        "steady_recv_pps": None, "steady_rate_pps": None,
    }
    if started is not None:
        ep = epochs(rundir, flow["id"], _recv_offset(plan))
        end = plan.get("ended_at_s") if plan.get("ended_at_s") is not None else \
            plan.get("stop_s")
        st = rate_between(ep, started + cfg["analysis"]["warmup_s"], end if end else np.inf)
        out["steady_recv_pps"], out["steady_rate_pps"] = st["recv_pps"], st["rate_pps"]
    return out


def _recv_offset(plan: dict) -> float:
    """The receiver's trace counts from the receiver's start; the runner records that in
    run time (extra.receiver_started_at_s, negative: before t0)."""
    return float((plan.get("extra") or {}).get("receiver_started_at_s", 0.0))
