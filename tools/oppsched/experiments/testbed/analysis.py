"""summary.json of a testbed run, from the files of its run folder alone (so `oppsched
analyze` recomputes it): per flow goodput and RTT from iperf3, cross-checked against the
capture where the data is received (the client's TUN; an upstream flow's server's wired
side), and per direction; per user slots, MAC throughput, queue and delay from the apd's
slot trace; HARQ outcomes; the daemons' own counters and CPU; CLAMP's rewritten windows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from oppsched.analysis import pcap
from oppsched.testbed import daemonconf, transfers, wrcflows
from oppsched.experiments.testbed.balance import end_to_end
from oppsched.experiments.testbed.reliability import conservation_summary
from oppsched.experiments.testbed.schema import (FLOW_DIRECTIONS, integrity_opt_out, is_wrc,
                                                 repeated, wrc_packet_bytes, wrc_weight)
from oppsched.testbed.flows import (BASE_PORT, intervals, sender_result, socket_csv,
                            socket_delivered)
from oppsched.experiments.testbed.traces import truncation_errors, write_errors
from oppsched.analysis.metrics import jain_index


def trace_error(errors: list | None, path: Path, exc: BaseException) -> None:
    """Records that a trace file is there but cannot be read: an error of the summary
    (`errors`), never silently missing data."""
    if errors is not None:
        errors.append(f"{Path(path).name}: {type(exc).__name__}: {exc}")


def read_json(path: Path, errors: list | None = None):
    """The parsed JSON file, or None if it is missing; a file that is not JSON (not UTF-8,
    or nested deeper than the parser's recursion limit) is None too, and an entry in
    `errors`."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        trace_error(errors, path, exc)
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        trace_error(errors, path, exc)
        return None


def read_csv(path: Path, errors: list | None = None) -> pd.DataFrame | None:
    """The CSV as a DataFrame, or None if the file is missing; one that cannot be parsed
    (truncated, no header) is None and an entry in `errors`."""
    p = Path(path)
    if not p.exists():
        return None
    try:
        return pd.read_csv(p)
    except (OSError, ValueError, pd.errors.EmptyDataError) as exc:
        trace_error(errors, p, exc)
        return None


def read_slots(rundir: Path, errors: list | None = None) -> pd.DataFrame | None:
    """The apd's slot trace (slots.csv, or slots.csv.gz), or None if there is none."""
    for name in ("slots.csv", "slots.csv.gz"):
        p = Path(rundir) / name
        if p.exists():
            return read_csv(p, errors)
    return None


def slot_column(df: pd.DataFrame, kind: str, user: dict) -> str | None:
    """Column `kind.<user>` of slots.csv: by name, else by numeric id."""
    for key in (f"{kind}.{user['name']}", f"{kind}.{user['id']}"):
        if key in df.columns:
            return key
    return None


def _truthy(s: pd.Series) -> pd.Series:
    if s.dtype == bool:
        return s
    return s.astype(str).str.lower().isin(("1", "true", "yes", "late"))


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


def _bytes_by_planned_end(receiver_json: Path, plan: dict) -> int | None:
    """Bytes a stopped timed flow's receiver got by the flow's planned end, or None where
    the runner did not stop it (or its receiver reported no intervals). The receiver's
    intervals count from its own test start, which a late connection delays; its last
    interval ends when the runner stopped the sender (ended_at_s), so the planned end lies
    (ended_at_s - planned_end_s) before it. An interval across that instant counts pro
    rata."""
    extra = plan.get("extra") or {}
    if not extra.get("stopped") or extra.get("planned_end_s") is None \
            or plan.get("ended_at_s") is None or not plan.get("seconds"):
        return None
    iv = intervals(receiver_json)
    if iv.empty:
        return None
    cut = float(iv["t_s"].max()) - max(0.0, plan["ended_at_s"] - extra["planned_end_s"])
    start = iv["t_s"] - iv["seconds"]
    whole = iv[iv["t_s"] <= cut]["bytes"].sum()
    part = iv[(start < cut) & (iv["t_s"] > cut)]
    frac = ((cut - start[part.index]) / part["seconds"]).clip(0.0, 1.0)
    return int(whole + (part["bytes"] * frac).sum())


# How far iperf3's count of a flow's bytes may lie from its receiving sockets' before the
# summary calls it an error. The kernel counts what arrived in order, iperf3 what it read:
# at the end of a test the receiver closes its data sockets on the control message,
# unread what came in since its last read (a few segments per socket: the MSS term, with
# the FIN the kernel counts as a byte); and a socket whose close the `ss -E` listener
# did not record counts its last poll, up to one poll period short of its final bytes
# (SOCKET_POLL_S = 0.5 s of a flow of tens of seconds: the 2 %).
SOCKET_AGREE_FRACTION = 0.02
SOCKET_AGREE_MSS_BYTES = 4 * 1500


def _check_socket_count(rundir: Path, f: dict, plan: dict, row: dict,
                        iperf_total: int | None, errors: list, warnings: list) -> None:
    """Adds the receiving sockets' count (flows.socket_delivered) to a flow's row and
    checks iperf3's against it. A flow iperf3 reports nothing for (its client was
    interrupted before the end-of-test exchange, so neither end wrote the totals) takes
    its goodput from the sockets (`goodput_source` `socket`: bytes by the planned end
    over the planned seconds) and is named, with both counts, in the summary's warnings;
    one whose iperf3 count exceeds the sockets' by more than the bound above, or that has
    neither, is an error of the summary (a warning where a socket's close went unrecorded:
    its count is then a lower bound). Never a silent 0."""
    path = socket_csv(rundir, f["id"])
    df = read_csv(path, errors)
    planned = plan.get("seconds")
    planned_end = (plan.get("start_s", 0.0) + planned) if planned else None
    sock = socket_delivered(df, planned_end, plan.get("ended_at_s"))
    row["bytes_delivered_socket"] = sock["bytes_by_planned_end"] if sock else None
    row["bytes_delivered_socket_total"] = sock["bytes_total"] if sock else None
    row["bytes_delivered_socket_source"] = sock["source"] if sock else None
    row["socket_streams"] = sock["streams"] if sock else None
    fid = f["id"]
    if iperf_total is None:
        if sock is None:
            errors.append(f"flow {fid}: iperf3 reported no bytes received (flow.{fid}."
                          f"sender.json, flow.{fid}.receiver.json) and there is no "
                          f"{path.name} to count them: its goodput 0 is not a measurement")
            return
        got = sock["bytes_by_planned_end"]
        if planned:
            secs = float(planned)
        elif plan.get("ended_at_s") is not None and plan.get("started_at_s") is not None:
            secs = float(plan["ended_at_s"] - plan["started_at_s"])
        else:
            secs = None
        row["bytes_received"] = got
        row["seconds"] = secs
        row["goodput_bps"] = 8.0 * got / secs if secs else 0.0
        row["goodput_source"] = "socket"
        # Not an error of the run: the kernel's count is the measurement. A flow starved by
        # the scheduler or the queue (Wu et al.'s downstream flows under drop-tail, the
        # weakest users of Srinivasan & Baras at small alpha) cannot finish iperf3's
        # end-of-test exchange either, so its report is missing exactly where the run's
        # finding is. The flow is named in the summary's `warnings`, never a silent 0.
        row["iperf3_report_missing"] = True
        warnings.append(f"flow {fid}: iperf3 reported no bytes received (its report is missing "
                      f"or says 0: {row['error'] or 'no end-of-test totals'}); its receiving "
                      f"sockets got "
                      f"{got} bytes by the planned end ({sock['bytes_total']} in all): "
                      "goodput taken from the socket count")
        return
    if sock is None:
        return  # a run folder from before the socket trace: nothing to check against
    # The kernel counts what arrived after iperf3's last read as well: at the end of a test
    # the sender's last window (the AP queue and the path, a drop-tail buffer's worth: 150 kB
    # in a fresh-machine run of the fading sweep) lands in a socket iperf3 no longer reads.
    # So the sockets may exceed iperf3 by that much, recorded, never an error; iperf3 above
    # what the kernel received is impossible and is one.
    row["bytes_after_iperf3_end"] = max(0, sock["bytes_total"] - iperf_total)
    bound = SOCKET_AGREE_FRACTION * max(iperf_total, sock["bytes_total"]) \
        + SOCKET_AGREE_MSS_BYTES * max(1, sock["streams"])
    if iperf_total - sock["bytes_total"] > bound:
        msg = (f"flow {fid}: iperf3 reports {iperf_total} bytes received, its receiving "
               f"sockets {sock['bytes_total']} ({sock['source']}): more than {bound:.0f} "
               "bytes above what the kernel received (2 % plus 4 MSS per socket)")
        if sock["source"] == "socket_poll":
            # A socket whose close `ss -E` did not record counts its last poll: a lower
            # bound, which a flow that got a burst after that poll (a reassembly gap
            # released at once, the last window) exceeds. Not impossible, so not an
            # error; named, so that a listener that misses closes is seen.
            warnings.append(msg + "; a socket's close was not recorded, so its count is "
                            "its last poll, a lower bound")
        else:
            errors.append(msg)


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


def analyze(outdir: Path) -> dict:
    rundir = Path(outdir)
    cfg = json.loads((rundir / "config.json").read_text())
    errors: list[str] = []  # trace files that are there but cannot be read
    # measurements taken another way than planned (summary["warnings"])
    warnings: list[str] = []
    run = read_json(rundir / "run.json", errors) or {}
    procs = read_json(rundir / "processes.json", errors) or []
    warm = cfg["analysis"]["warmup_s"]
    plans = {f["id"]: f for f in run.get("flows", [])}
    dev_index = {d["name"]: j for j, d in enumerate(cfg["devices"])}
    users_cfg = [{"name": d["name"], "id": j} for j, d in enumerate(cfg["devices"])]

    # -- flows: iperf3 JSON (goodput, RTT), cross-checked against the capture where the
    # data is received: the client's TUN (down), the server's wired side (up)
    pcaps: dict[str, pd.DataFrame | None] = {}
    flows = []
    for k, f in enumerate(cfg["flows"]):
        plan = plans.get(f["id"], {})
        if repeated(f):
            flows.append(_transfer_flow(rundir, f, plan, k, cfg, errors))
            continue
        if is_wrc(f):
            flows.append(_wrc_flow(rundir, f, plan, k, cfg, errors))
            continue
        snd = sender_result(rundir / f"flow.{f['id']}.sender.json",
                            rundir / f"flow.{f['id']}.receiver.json")
        # iperf3's own count over the flow's life, before the planned-end cuts below: the
        # figure the receiving sockets' count is checked against
        iperf_total = snd["bytes_received"] if snd["goodput_source"] else None
        rcv = intervals(rundir / f"flow.{f['id']}.receiver.json", plan.get("started_at_s") or 0.0)
        steady = None
        if not rcv.empty:
            after = rcv[rcv["t_s"] - rcv["seconds"] >= (plan.get("started_at_s") or 0.0) + warm]
            if after["seconds"].sum() > 0:
                steady = float(8 * after["bytes"].sum() / after["seconds"].sum())
        # A timed flow the runner had to stop (its sender stalled, e.g. in TCP's timeout
        # backoff, and never wrote its result) is charged its whole planned time, not only
        # the seconds its receiver reported before the stall.
        planned = plan.get("seconds")
        by_end = _bytes_by_planned_end(rundir / f"flow.{f['id']}.receiver.json", plan)
        if by_end is not None:
            # A timed flow the runner stopped after its planned end (it connected late, or
            # its sender stalled): what its receiver got by the planned end, over the
            # planned seconds. What it carried later, alone after the others had ended, is
            # not the contention the run measures.
            snd["goodput_bps"] = 8.0 * by_end / float(planned)
            snd["bytes_received"] = by_end
            snd["seconds"] = float(planned)
            snd["goodput_source"] = "receiver_by_planned_end"
        elif (snd["goodput_source"] == "receiver" and plan.get("nbytes") is None and planned
                and snd["seconds"] and planned > snd["seconds"] and snd["bytes_received"]):
            snd["goodput_bps"] = 8.0 * snd["bytes_received"] / float(planned)
            snd["seconds"] = float(planned)
            snd["goodput_source"] = "receiver_over_planned"
        row = {"id": f["id"], "user": f["device"], "server": f["server"],
               "direction": f.get("direction", "down"),
               "goodput_bps": snd["goodput_bps"] if snd["goodput_bps"] is not None else 0.0,
               "rtt_ms_mean": snd["rtt_ms_mean"], "rtt_ms_max": snd["rtt_ms_max"],
               "goodput_steady_bps": steady, "bytes_received": snd["bytes_received"],
               "seconds": snd["seconds"], "retransmits": snd["retransmits"],
               "streams": snd["streams"], "cc": plan.get("cc") or f["cc"]
               or cfg["tcp"]["congestion_control"], "family": f["family"],
               "port": plan.get("port", BASE_PORT + k), "started_at_s": plan.get("started_at_s"),
               "ended_at_s": plan.get("ended_at_s"), "exit_code": plan.get("exit_code"),
               "error": snd["error"], "goodput_source": snd["goodput_source"],
               "goodput_pcap_bps": None}
        _check_socket_count(rundir, f, plan, row, iperf_total, errors, warnings)
        pc = rundir / (f"wired.{f['server']}.pcap" if row["direction"] == "up"
                       else f"client.{f['device']}.pcap")
        if plan.get("dst_addr") and pc.exists() and pc.stat().st_size < 512e6 and snd["seconds"]:
            if pc.name not in pcaps:
                try:
                    pcaps[pc.name] = pcap.read_tcp(pc)
                except (OSError, ValueError) as exc:
                    trace_error(errors, pc, exc)
                    pcaps[pc.name] = None
            df = pcaps[pc.name]
            if df is not None:
                # what the receiver acknowledged (in order), as the capture shows it
                b = pcap.acked_bytes(df, plan["dst_addr"], row["port"])
                row["bytes_pcap"] = b
                row["goodput_pcap_bps"] = 8.0 * b / snd["seconds"]
        flows.append(row)

    # -- users and slots: slots.csv
    slots = read_slots(rundir, errors)
    slot_s = daemonconf.slot_s(cfg)
    users = []
    slot_info = {"total": 0, "empty": 0, "late": 0}
    harq = {"tb_sent": 0, "tb_failed_final": 0}
    window = None
    if slots is not None and len(slots) and run.get("t0_mono_ns") and "t_ns" in slots:
        # The measured period: from t0 (flows scheduled) to the end of the last flow.
        ends = [f.get("ended_at_s") for f in run.get("flows", []) if f.get("ended_at_s")]
        if ends:
            lo = int(run["t0_mono_ns"])
            hi = lo + int(max(ends) * 1e9)
            window = (lo, hi)
            slots = slots[(slots["t_ns"] >= lo) & (slots["t_ns"] <= hi)].reset_index(drop=True)
    per_packet = _queue_delays_from_packets(rundir, len(users_cfg), errors, window)
    if slots is not None and len(slots):
        n = len(slots)
        span = n * slot_s
        user_col = slots["user"].astype(int)
        outcome = slots["outcome"].fillna("").astype(str) if "outcome" in slots else \
            pd.Series([""] * n)
        retx = slots["retx"].fillna(0).astype(int) if "retx" in slots else pd.Series(np.zeros(n))
        tb_bytes = slots["tb_bytes"].fillna(0).astype(float) if "tb_bytes" in slots else \
            pd.Series(np.zeros(n))
        late = int(_truthy(slots["late"]).sum()) if "late" in slots else 0
        slot_info = {"total": int(n), "empty": int((user_col < 0).sum()), "late": late,
                     "slot_s": slot_s, "seconds": span,
                     "window": "t0 to the end of the last flow" if window else "whole trace"}
        mac_bytes_total = float(tb_bytes[(user_col >= 0) & (outcome == "ack")].sum())
        sent = (user_col >= 0)
        harq = {"tb_sent": int((sent & (retx == 0)).sum()),
                "tb_failed_final": int((outcome == "dropped").sum()),
                "transmissions": int(sent.sum()),
                "retransmissions": int((sent & (retx > 0)).sum()),
                "acks": int((outcome == "ack").sum()), "nacks": int((outcome == "nack").sum()),
                "timeouts": int((outcome == "timeout").sum()),
                # sent, never received (slot empty on air or header lost), sent again
                "unheard": int((outcome == "unheard").sum())}
        harq["residual_loss"] = harq["tb_failed_final"] / harq["tb_sent"] if harq["tb_sent"] \
            else 0.0
        for u in users_cfg:
            mine = user_col == u["id"]
            ok = mine & (outcome == "ack")
            mac_bps = float(8 * tb_bytes[ok].sum() / span)
            new_bytes = float(tb_bytes[mine & (retx == 0)].sum())
            qc, cc_, pc_ = (slot_column(slots, "queue", u), slot_column(slots, "cqi", u),
                            slot_column(slots, "price", u))
            mean_q = float(slots[qc].mean()) if qc else None
            pk = per_packet.get(u["id"], {})
            if "sojourn_ms_mean" in pk:
                delay, method = pk["sojourn_ms_mean"], "packets.csv sojourn"
            elif mean_q is not None and new_bytes > 0:
                # Little's law: mean queue / mean service rate of new data
                delay, method = 1e3 * mean_q / (new_bytes / span), "little"
            else:
                delay, method = None, None
            mcs = slots["mcs"][mine] if "mcs" in slots else pd.Series(dtype=float)
            # Srinivasan & Baras, §V-B: scheduling jitter, the gaps between the slots in
            # which the user is served (any transmission), their mean, std and CoV.
            gaps = np.diff(slots["slot"][mine].to_numpy(dtype=float)) * slot_s * 1e3 \
                if "slot" in slots else np.array([])
            gap_mean = float(gaps.mean()) if len(gaps) else None
            gap_std = float(gaps.std()) if len(gaps) else None
            # The same over the gaps in which the user had data at every slot between its
            # two slots: the scheduler's own jitter (§IV: round robin serves a backlogged
            # flow "at constantly spaced intervals"), without the idle spells of a TCP
            # sender waiting out a timeout, which are seconds long whatever the scheduler.
            bgap_mean = bgap_std = None
            if qc and len(gaps):
                pos = np.flatnonzero(mine.to_numpy())
                empty = np.concatenate(([0], np.cumsum(slots[qc].fillna(0).to_numpy() <= 0)))
                idle = empty[pos[1:]] - empty[pos[:-1] + 1]  # empty queues strictly between
                bgaps = gaps[idle == 0]
                if len(bgaps):
                    bgap_mean, bgap_std = float(bgaps.mean()), float(bgaps.std())
            users.append({
                "name": u["name"], "id": u["id"],
                "slot_fraction": float(mine.sum() / n),
                "mac_throughput_bps": mac_bps,
                "mean_queue_bytes": mean_q,
                "mean_queue_delay_ms": delay, "queue_delay_method": method,
                "mean_cqi": float(slots[cc_].mean()) if cc_ else None,
                "mean_mcs": float(mcs.mean()) if len(mcs) else None,
                "mean_price_s": float(slots[pc_].mean()) if pc_ else None,
                "tb_sent": int((mine & (retx == 0)).sum()),
                "tb_failed_final": int((mine & (outcome == "dropped")).sum()),
                "slot_gap_mean_ms": gap_mean, "slot_gap_std_ms": gap_std,
                "slot_gap_cov": gap_std / gap_mean if gap_mean else None,
                "slot_gap_backlogged_mean_ms": bgap_mean, "slot_gap_backlogged_std_ms": bgap_std,
                "slot_gap_backlogged_cov": bgap_std / bgap_mean if bgap_mean else None,
                # traces.packets: the queueing delay's spread and the per-packet jitter
                **{k: pk.get(k) for k in ("sojourn_ms_std", "sojourn_ms_max",
                                          "packet_gap_ms_mean", "packet_gap_ms_std",
                                          "packet_gap_ms_min", "packet_gap_ms_max",
                                          "packets_departed")},
            })
    else:
        for u in users_cfg:
            users.append({"name": u["name"], "id": u["id"], "slot_fraction": 0.0,
                          "mac_throughput_bps": 0.0, "mean_queue_bytes": None,
                          "mean_queue_delay_ms": None, "queue_delay_method": None})
    for u in users:
        u["goodput_bps"] = float(sum(f["goodput_bps"] for f in flows if f["user"] == u["name"]))
        u["flows"] = [f["id"] for f in flows if f["user"] == u["name"]]

    # -- the daemons' own counters, CPU
    stats = {}
    for name in ["apd", "phy"] + [f"client.{d['name']}" for d in cfg["devices"]]:
        s = read_json(rundir / f"{name}.stats.json", errors)
        if s is not None:
            stats[name] = s
    aqm = aqm_counts(stats.get("apd"))
    # Per user, the loss after the HARQ budget and, in link_adaptation.mode paper, the backoff
    # margin m at the end (Andrew & Hanly, CLAMP, Table I: the target is 1e-3 after
    # retransmissions, reached by the margin's stochastic approximation).
    core_users = ((stats.get("apd") or {}).get("core") or {}).get("users") or {}
    for u in users:
        if u.get("tb_sent"):
            u["residual_loss"] = u["tb_failed_final"] / u["tb_sent"]
        margin = (core_users.get(u["name"]) or {}).get("margin")
        if isinstance(margin, (int, float)):
            u["link_margin"] = float(margin)
    late_phy = _find_number(stats.get("phy"), ("late", "slots_late", "late_slots"))
    if late_phy is not None:
        slot_info["late_phy"] = int(late_phy)
    cpu, share = {}, {}
    for p in procs:
        c = p.get("cpu_s_before_stop")
        if c is None:
            c = p.get("cpu_s")
        cpu[p["name"]] = c
        if c is not None and p.get("ended_mono_s") and p.get("started_mono_s"):
            life = p["ended_mono_s"] - p["started_mono_s"]
            share[p["name"]] = c / life if life > 0 else None
    for name, c in (run.get("delay_cpu_s") or {}).items():
        cpu[f"delay.{name}"] = c
    wall = None
    if run.get("flows"):
        ends = [f.get("ended_at_s") for f in run["flows"] if f.get("ended_at_s") is not None]
        wall = max(ends) if ends else None

    agg_mac = float(sum(u["mac_throughput_bps"] for u in users))
    got = float(sum(f["bytes_received"] or 0 for f in flows))
    # Only the downstream flows' data crosses the downlink the MAC figures count.
    got_down = float(sum(f["bytes_received"] or 0 for f in flows if f["direction"] == "down"))
    span = slot_info.get("seconds") or 0.0
    # Over the same period as the MAC figures: application bytes / MAC bytes delivered
    # (the rest is TCP/IP headers, pure ACK-less overhead, retransmitted and dropped data).
    agg_good = 8.0 * got / span if span else float(sum(f["goodput_bps"] for f in flows))
    mac_bytes = locals().get("mac_bytes_total") or 0.0
    summary = {
        "experiment": cfg["experiment"],
        "kind": "testbed",
        "variant": cfg.get("variant", ""),
        "duration_s": float(cfg["duration_s"]),
        "config": cfg,
        "flows": flows,
        "users": users,
        "jain_index_flows": jain_index(f["goodput_bps"] for f in flows),
        # The same over the receivers' rates after analysis.warmup_s (goodput_steady_bps).
        "jain_index_flows_steady": jain_index(f.get("goodput_steady_bps") or 0.0
                                              for f in flows),
        # Jain over goodput / fair share, the fair share of a flow being 1/(devices x flows
        # of its device): what a scheduler that serves devices equally can give. With flows
        # 3 and 4 of Andrew & Hanly, CLAMP, Fig. 3, on one device, plain Jain over flows is
        # at most 0.9 even when everything is as fair as it can be; this one is 1 then.
        "jain_index_flows_fair_share": _jain_fair_share(flows, cfg),
        "jain_index_users": jain_index(u["mac_throughput_bps"] for u in users),
        "aggregate_mac_throughput_bps": agg_mac,
        "aggregate_goodput_bps": agg_good,
        "goodput_mac_fraction": got_down / mac_bytes if mac_bytes > 0 else None,
        "directions": direction_totals(flows),
        "medium": medium_summary(rundir, cfg, stats.get("apd"), stats),
        "slots": slot_info,
        "harq": harq,
        "aqm": aqm,
        # the policy's own counters from the apd (core.scheduler.*): a python plugin's
        # plugin_decisions, plugin_deadline_misses, plugin_exceptions, ... ({} for built-ins)
        "scheduler": {"kind": cfg["scheduler"]["kind"],
                      **(((stats.get("apd") or {}).get("core") or {}).get("scheduler") or {})},
        "cpu_s": cpu,
        "cpu_share": share,  # CPU seconds per second of the process's life (1.0 = a core)
        "run": {"status": run.get("status"), "error": run.get("error"),
                "run_name": run.get("run_name"), "radio_ready_s": run.get("radio_ready_s"),
                "wall_s": run.get("wall_s"), "flows_wall_s": wall,
                "warnings": run.get("warnings", []),
                "wired": (run.get("testbed") or {}).get("wired"),
                "host_changes": run.get("host_changes", [])},
        "daemon_stats": stats,
        "clamp": _clamp_summary(rundir, cfg, errors, stats, warnings),
        "transfers": _transfers_total(flows),
        "wrc": _wrc_total(rundir, flows, plans),
        "conservation": conservation_summary(rundir, stats, errors),
        # offered at the servers = delivered to the clients + losses by stage, each
        # recounted from its own record (balance.py)
        # An unexplained remainder is a warning until the bound holds on every paper's
        # set-up (docs/testbed.md, Reliability); tools/tests/test_reliability.py asserts it.
        "balance": {"end_to_end": end_to_end(rundir, cfg, run, stats, warnings)},
        "security": security_summary(cfg, stats, warnings),
        "watchdog": watchdog_summary(stats.get("apd"), errors),
        "truncated_traces": truncated_traces(run),
    }
    errors += truncation_errors(summary["truncated_traces"])
    # Every trace a write to which failed (a full disk), named with what it lost.
    errors += write_errors(rundir, read_json, errors)
    # What went wrong, for `oppsched run` (exit status) and the report: the run's own
    # failure (a daemon that exited non-zero, a timeout) and every unreadable trace.
    summary["errors"] = ([f"run: {run['error']}"] if run.get("error") else []) + errors
    summary["warnings"] = warnings
    return summary


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


def _transfer_flow(rundir: Path, f: dict, plan: dict, k: int, cfg: dict,
                   errors: list) -> dict:
    """A flow of repeated transfers: its summary row from transfers.<id>.csv (the client's
    records) and transfers.<id>.server.csv (the sender's RTT and retransmissions)."""
    path = transfers.client_csv(rundir, f["id"])
    df = read_csv(path, errors)
    if df is None and not path.exists():
        errors.append(f"{path.name}: missing (flow {f['id']} of repeated transfers)")
    # Transfers that start in the run's first analysis.warmup_s seconds are left out: what
    # settles then (the link's margin m, CLAMP's estimators, the long flows' slow start)
    # belongs to the run, not to the flow.
    warm = cfg["analysis"]["warmup_s"]
    t = transfers.summarize(df, f["bytes"], read_csv(transfers.server_csv(rundir, f["id"]),
                                                     errors), from_s=warm if warm > 0 else None)
    return {"id": f["id"], "user": f["device"], "server": f["server"], "direction": "down",
            "goodput_bps": t["goodput_bps"] if t["goodput_bps"] is not None else 0.0,
            "rtt_ms_mean": t["rtt_ms_mean"], "rtt_ms_max": None, "goodput_steady_bps": None,
            "bytes_received": t["bytes"], "seconds": None, "retransmits": t["retransmits"],
            "streams": t["attempted"], "cc": plan.get("cc") or f["cc"]
            or cfg["tcp"]["congestion_control"], "family": f["family"],
            "port": plan.get("port", BASE_PORT + k), "started_at_s": plan.get("started_at_s"),
            "ended_at_s": plan.get("ended_at_s"), "exit_code": plan.get("exit_code"),
            "error": None, "goodput_source": "transfers", "goodput_pcap_bps": None,
            "transfers": t}


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


def direction_totals(flows: list[dict]) -> dict:
    """Per direction (down, up): the flows' ids, their summed goodput and Jain's index over
    them (None without flows). Wu, Gong & Williamson compare the upstream and downstream
    flows' shares: an upstream flow's ACKs wait in the AP's downstream queue.
    `goodput_steady_bps` sums the flows' rates after analysis.warmup_s as their receivers
    counted them per interval: unlike iperf3's end totals (bytes received until the
    end-of-test message, over the sender's seconds) it does not count data that drains out
    of deep sender-side queues after the sender stopped."""
    out = {}
    for d in FLOW_DIRECTIONS:
        mine = [f for f in flows if f["direction"] == d]
        steady = [f.get("goodput_steady_bps") for f in mine]
        out[d] = {"flows": [f["id"] for f in mine],
                  "goodput_bps": float(sum(f["goodput_bps"] for f in mine)),
                  "jain_index": jain_index(f["goodput_bps"] for f in mine) if mine else None,
                  "goodput_steady_bps": float(sum(x or 0.0 for x in steady))}
    return out


def _wrc_flow(rundir: Path, f: dict, plan: dict, k: int, cfg: dict, errors: list) -> dict:
    """A flow of the weighted rate control: its summary row from oppsched-wrc's stats and
    trace (oppsched.testbed.wrcflows)."""
    fr = {**f, "weight": wrc_weight(f), "packet_bytes": wrc_packet_bytes(f)}
    w = wrcflows.summarize(rundir, fr, plan, cfg, errors, read_json)
    if not wrcflows.path(rundir, f["id"], "recv.stats.json").exists():
        errors.append(f"wrc.{f['id']}.recv.stats.json: missing (wrc flow {f['id']})")
    pkt = fr["packet_bytes"]
    steady = w["steady_recv_pps"]
    return {"id": f["id"], "user": f["device"], "server": f["server"], "direction": "down",
            "goodput_bps": w["goodput_bps"], "rtt_ms_mean": None, "rtt_ms_max": None,
            "goodput_steady_bps": 8.0 * pkt * steady if steady is not None else None,
            "bytes_received": (w["received_packets"] or 0) * pkt, "seconds": w["seconds"],
            "retransmits": None, "streams": 1, "cc": "wrc", "family": f["family"],
            "port": plan.get("port", BASE_PORT + k), "started_at_s": plan.get("started_at_s"),
            "ended_at_s": plan.get("ended_at_s"), "exit_code": plan.get("exit_code"),
            "error": None, "goodput_source": "wrc receiver", "goodput_pcap_bps": None,
            "transport": "wrc", "wrc": w}


def _wrc_total(rundir: Path, flows: list[dict], plans: dict) -> dict | None:
    """Over the wrc flows (Nandagopal et al., §IV): each flow's steady received rate
    (packets/s after analysis.warmup_s) against its ideal weighted share of what the flows
    that were running together got, Jain's index over the weight-normalised rates r_i / w_i
    (1 when rates are exactly in the ratio of the weights), and the link utilisation in
    packets: received packets/s over the link's capacity in these packets."""
    rows = [f for f in flows if f.get("transport") == "wrc"]
    if not rows:
        return None
    rates = [f["wrc"]["steady_recv_pps"] for f in rows]
    weights = [f["wrc"]["weight"] for f in rows]
    ok = [r is not None for r in rates]
    norm = [r / w for r, w, g in zip(rates, weights, ok) if g]
    out = {"flows": len(rows),
           "jain_index_weighted": jain_index(norm) if norm else None,
           "steady_recv_pps": dict(zip([f["id"] for f in rows], rates)),
           "weights": dict(zip([f["id"] for f in rows], weights)),
           "loss_ratio": None}
    if all(ok):
        total, wsum = sum(rates), sum(weights)
        out["steady_total_pps"] = total
        out["share_of_ideal"] = {f["id"]: (r / (total * w / wsum) if total > 0 else None)
                                 for f, r, w in zip(rows, rates, weights)}
    sent = sum(f["wrc"]["sent_packets"] or 0 for f in rows)
    got = sum(f["wrc"]["received_packets"] or 0 for f in rows)
    if sent:
        out["loss_ratio"] = 1.0 - got / sent
    out["periods"] = _wrc_periods(rundir, rows, plans)
    return out


def _wrc_periods(rundir: Path, rows: list[dict], plans: dict) -> list[dict]:
    """Nandagopal et al., Table I: the times between flows joining and leaving, and in each
    the mean received rate W of every flow running through it (packets/s, from the
    receivers' traces), W / w, and the ideal W_ideal = w / (sum of the running flows'
    weights) x the period's total."""
    times = {f["id"]: (f["started_at_s"], f["ended_at_s"]) for f in rows}
    if any(a is None or b is None for a, b in times.values()):
        return []
    cuts = sorted({round(t, 3) for ab in times.values() for t in ab})
    eps = {f["id"]: wrcflows.epochs(rundir, f["id"], wrcflows._recv_offset(plans.get(f["id"], {})))
           for f in rows}
    out = []
    for a, b in zip(cuts, cuts[1:]):
        live = [f for f in rows if times[f["id"]][0] <= a + 1e-3 and times[f["id"]][1] >= b - 1e-3]
        if not live or b - a < 1.0:
            continue
        rate = {f["id"]: wrcflows.rate_between(eps[f["id"]], a, b)["recv_pps"] for f in live}
        if any(r is None for r in rate.values()):
            continue
        total, wsum = sum(rate.values()), sum(f["wrc"]["weight"] for f in live)
        out.append({"from_s": a, "to_s": b, "total_pps": total, "flows": {
            f["id"]: {"weight": f["wrc"]["weight"], "w_actual_pps": rate[f["id"]],
                      "w_ideal_pps": total * f["wrc"]["weight"] / wsum,
                      "w_per_weight_pps": rate[f["id"]] / f["wrc"]["weight"]}
            for f in live}})
    return out


def _transfers_total(flows: list[dict]) -> dict | None:
    """Over every flow of repeated transfers: transfers completed, the mean time of a
    transfer over all of them, and the mean over the flows of each flow's mean time (Andrew
    & Hanly, CLAMP, Fig. 5(b): the time a user of each flow waits for a file, averaged over
    the flows, which the slow flows dominate; the mean over all transfers counts the fast
    flows' many transfers more)."""
    rows = [f["transfers"] for f in flows if f.get("transfers")]
    if not rows:
        return None
    done = sum(r["completed"] for r in rows)
    per_flow = [r["time_mean_s"] for r in rows if r["time_mean_s"] is not None]
    tot = sum(r["time_mean_s"] * r["completed"] for r in rows if r["time_mean_s"] is not None)
    return {"flows": len(rows), "completed": done,
            "incomplete": sum(r["incomplete"] for r in rows),
            "failed_connects": sum(r["failed_connects"] for r in rows),
            "flows_without_completed": len(rows) - len(per_flow),
            "time_mean_s": tot / done if done else None,
            "time_mean_of_flows_s": float(np.mean(per_flow)) if per_flow else None}


def _jain_fair_share(flows: list[dict], cfg: dict) -> float:
    per_dev: dict[str, int] = {}
    for f in flows:
        per_dev[f["user"]] = per_dev.get(f["user"], 0) + 1
    return jain_index(f["goodput_bps"] * per_dev[f["user"]] for f in flows)


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
