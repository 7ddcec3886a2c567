"""summary.json's sections from what the daemons recorded: the users' queueing delay and
packet jitter (packets.csv), the AQMs' counters, the watchdogs, the traces of daemons that
died, the authentication's counters (security), the shared medium and CLAMP's rewritten
windows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from oppsched.experiments.testbed.readers import read_csv
from oppsched.experiments.testbed.schema import integrity_opt_out


def _queue_delays_from_packets(rundir: Path, n_users: int,
                               errors: list | None = None,
                               window: tuple[int, int] | None = None) -> dict[int, dict]:
    """Per user, from packets.csv: the sojourn of each packet in the AP queue (enqueue to
    dequeue, ms: mean, std, max) and the packet scheduling jitter of Srinivasan & Baras,
    §V-B: the gaps between the departures of the user's successive packets (ms: mean, std,
    min, max). A packet departs, as in the paper's model (§III: "the packet is dequeued"
    when its last link segment has been sent), when the apd settles its fate: the TB that
    carried its last byte acknowledged (`deliver` rows). With `window` (CLOCK_MONOTONIC ns),
    only packets enqueued, and departures, inside it count."""
    df = read_csv(Path(rundir) / "packets.csv", errors)
    if df is None or df.empty or not {"t_ns", "event", "user", "packet_id"} <= set(df.columns):
        return {}
    if window is not None:
        df = df[(df["t_ns"] >= window[0]) & (df["t_ns"] <= window[1])]
    enq = df[df["event"] == "enqueue"][["packet_id", "user", "t_ns"]]
    deq = df[df["event"] == "dequeue"][["packet_id", "t_ns"]]
    m = enq.merge(deq, on="packet_id", suffixes=("_in", "_out"))
    out: dict[int, dict] = {}
    for u, g in m.groupby("user"):
        d = (g["t_ns_out"] - g["t_ns_in"]).to_numpy(dtype=float) / 1e6
        out.setdefault(int(u), {}).update(
            {"sojourn_ms_mean": float(d.mean()), "sojourn_ms_std": float(d.std()),
             "sojourn_ms_max": float(d.max()), "sojourn_packets": int(len(d))})
    dep = df[df["event"] == "deliver"]
    for u, g in dep.groupby("user"):
        gaps = np.diff(np.sort(g["t_ns"].to_numpy(dtype=float))) / 1e6
        if len(gaps):
            out.setdefault(int(u), {}).update(
                {"packet_gap_ms_mean": float(gaps.mean()), "packet_gap_ms_std": float(gaps.std()),
                 "packet_gap_ms_min": float(gaps.min()), "packet_gap_ms_max": float(gaps.max()),
                 "packets_departed": int(len(gaps) + 1)})
    return out


def aqm_counts(apd_stats) -> dict:
    """Per AP queue, what its AQM saw (the apd's core.aqm.<queue> counters): packets
    offered, dropped and ECN-marked, with the loss and mark ratios over the packets
    offered; and the same over all queues under "all". Wang & Song, REAQM, and Wu, Gong &
    Williamson compare AQMs by these."""
    queues = ((apd_stats or {}).get("core") or {}).get("aqm") or {}
    out, total = {}, {"offered": 0, "dropped": 0, "marked": 0}
    for q, c in queues.items():
        if not isinstance(c, dict) or "offered" not in c:
            continue
        row = {"offered": int(c["offered"]),
               "dropped": int(c.get("dropped_total", c.get("dropped", 0))),
               "marked": int(c.get("marked", 0))}
        # The rate-based AQMs' state at the end: their capacity c (fixed or measured, aqm.h)
        # and price, so that a run shows which c its controller used.
        for k in ("service_rate_bps", "price"):
            if isinstance(c.get(k), (int, float)):
                row[k] = float(c[k])
        # A Python AQM's own counters: exceptions, invalid answers, its calls' times
        # (plugin_enqueue_p50_ns ...: host/pyplugin/python_plugin.h)
        row.update({k: v for k, v in c.items() if k.startswith("plugin_")})
        for k in total:
            total[k] += row[k]
        out[q] = row
    for row in [*out.values(), total]:
        row["loss_ratio"] = row["dropped"] / row["offered"] if row["offered"] else None
        row["mark_ratio"] = row["marked"] / row["offered"] if row["offered"] else None
    if out:
        out["all"] = total
    return out


def truncated_traces(run: dict) -> list[dict]:
    """The traces of daemons that died (traces.py): those the runner recovered at the end
    of the run and those of an apd the restart fault killed."""
    out = list(run.get("truncated_traces") or [])
    for f in run.get("faults") or []:
        out += f.get("truncated_traces") or []
    return out


def watchdog_summary(apd: dict | None, errors: list) -> dict | None:
    """What the apd's watchdogs saw (docs/testbed.md "Reliability"): the PHY's slot
    requests stopping, or a client going silent on the uplink, named."""
    if not apd:
        return None
    w = apd.get("watchdog") or {}
    out = {"phy_fired": int(w.get("fired", 0)), "client_fired": int(w.get("client_fired", 0)),
           "client": w.get("client_user"), "client_silent_slots": w.get("client_silent_slots")}
    if out["client_fired"]:
        errors.append(f"watchdog: client {out['client']} sent nothing on the uplink for "
                      f"{out['client_silent_slots']} slot requests: hung or gone "
                      f"(logs/client.{out['client']}.log)")
    return out


def security_summary(cfg: dict, stats: dict, warnings: list | None = None) -> dict:
    """What the authentication of docs/security.md caught: downlink TBs whose integrity tag
    failed at a client (forged, or recorded in another run; per client and in all), uplink TBs
    whose tag failed at the apd (per station), uplink messages naming another user, CURVE
    handshakes refused. A radio run without the tag (an opt-out) is named in `warnings`."""
    def get(d, *keys):
        for k in keys:
            d = d.get(k) if isinstance(d, dict) else None
        return d
    per_client = {name[len("client."):]: get(s, "phy", "integrity_failed")
                  for name, s in stats.items() if name.startswith("client.")}
    apd = stats.get("apd") or {}
    medium = apd.get("medium") if isinstance(apd.get("medium"), dict) else {}
    up = medium.get("up") if isinstance(medium.get("up"), dict) else {}
    per_station = {name: get(v, "integrity_failed") for name, v in up.items()
                   if isinstance(v, dict) and "integrity_failed" in v}
    opt_out = integrity_opt_out(cfg)
    if opt_out and warnings is not None:
        warnings.append(opt_out)
    return {
        "integrity_tag": bool(cfg["pdu"].get("integrity_tag")),
        "integrity_opt_out": opt_out is not None,
        "curve": bool((cfg.get("security") or {}).get("curve")),
        "integrity_failed": int(sum(v or 0 for v in per_client.values())),
        "integrity_failed_per_client": per_client,
        "uplink_integrity_failed": int(sum(v or 0 for v in per_station.values())),
        "uplink_integrity_failed_per_station": per_station,
        "uplink_user_mismatch": get(apd, "uplink", "user_mismatch"),
        "zap": get(apd, "zap"),
    }


def medium_summary(rundir: Path, cfg: dict, apd_stats, stats: dict | None = None) -> dict | None:
    """The shared medium (medium.mode != none): each direction's share of the slots in which
    anyone contended (medium.csv: the AP with downlink backlog, stations with uplink
    backlog), and the stations' uplink queues (apd counters; with station_queue client the
    queue's own counters are the client's, `station.*`). None without a medium."""
    mode = (cfg.get("medium") or {}).get("mode", "none")
    if mode == "none":
        return None
    names = [d["name"] for d in cfg["devices"]]
    out: dict = {"mode": mode, "slots_contended": 0, "slot_share": None, "uplink": {}}
    path = rundir / "medium.csv"
    if path.exists():
        t = pd.read_csv(path)
        c = t[t["contenders"] > 0]
        n = len(c)
        out["slots_contended"] = int(n)
        if n:
            up = c[c["direction"] == "up"]
            out["slot_share"] = {
                "down": float((c["direction"] == "down").sum()) / n,
                "up": {nm: float((up["station"] == i).sum()) / n for i, nm in enumerate(names)},
            }
    m = (apd_stats or {}).get("medium") or {}
    for nm in names:
        st = (m.get("up") or {}).get(nm) or {}
        out["uplink"][nm] = {k: st.get(k) for k in ("packets_in", "dropped_full", "delivered",
                                                    "tbs_ok", "tbs_failed", "tbs_dropped")}
        if (cfg.get("medium") or {}).get("station_queue") == "client":
            cs = ((stats or {}).get(f"client.{nm}") or {}).get("station") or {}
            out["uplink"][nm].update(
                packets_in=cs.get("packets_in"), dropped_full=cs.get("dropped_full"),
                grants=st.get("grants"), tbs_late=st.get("tbs_late"),
                status_reports=st.get("status_reports"))
    out["station_queue"] = (cfg.get("medium") or {}).get("station_queue", "ap")
    if out["station_queue"] == "client":  # sample PHY: uplink slots sent without the TB
        out["grants_without_tb"] = m.get("grants_without_tb", 0)
    return out


def _find_number(d, keys):
    """The first numeric value under one of `keys` anywhere in a nested stats dict."""
    if not isinstance(d, dict):
        return None
    for k, v in d.items():
        if k in keys and isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
    for v in d.values():
        if isinstance(v, dict):
            r = _find_number(v, keys)
            if r is not None:
                return r
    return None


def _clamp_summary(rundir: Path, cfg: dict, errors: list | None = None,
                   stats: dict | None = None, warnings: list | None = None) -> dict | None:
    """Per device: the ACKs CLAMP rewrote (windows.<dev>.csv) and the ACKs it let pass
    with the OS's window because it did not know their connection (the client's
    clamp.acks_unknown_flow). The latter is a warning: a flow that is not clamped makes a
    CLAMP run a mixture of CLAMP and plain TCP."""
    if not cfg["clamp"]["enabled"]:
        return None
    out = {}
    for d in cfg["devices"]:
        client = ((stats or {}).get(f"client.{d['name']}") or {}).get("clamp") or {}
        unknown = client.get("acks_unknown_flow")
        if unknown and warnings is not None:
            warnings.append(f"clamp: {d['name']} passed {unknown} ACKs of connections it "
                            "did not know unclamped (clamp.acks_unknown_flow)")
        w = read_csv(Path(rundir) / f"windows.{d['name']}.csv", errors)
        if w is None:
            out[d["name"]] = None
            continue
        out[d["name"]] = {
            "unclamped_acks": unknown,
            "rewritten_acks": int(len(w)),
            "mean_advertised_bytes": float(w["advertised_bytes"].mean()) if len(w) else None,
            "mean_w_bytes": float(w["w_bytes"].mean()) if len(w) and "w_bytes" in w else None,
            "os_limited_fraction": float((w["awnd_os_bytes"] <= w["advertised_bytes"]).mean())
            if len(w) and "awnd_os_bytes" in w else None,
        }
    return out
