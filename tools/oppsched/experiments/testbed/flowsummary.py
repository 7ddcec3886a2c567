"""summary.json's flows: what a timed iperf3 flow's receiver got by its planned end, the
check of iperf3's count against the receiving sockets', the rows of a flow of repeated
transfers and of a wrc flow, and the totals over them (per direction, the transfers, the
weighted rate control's shares and periods, Jain's index over the fair shares)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from oppsched.analysis.metrics import jain_index
from oppsched.experiments.testbed.readers import read_csv, read_json
from oppsched.experiments.testbed.schema import FLOW_DIRECTIONS, wrc_packet_bytes, wrc_weight
from oppsched.testbed import transfers, wrcflows
from oppsched.testbed.flows import (BASE_PORT, IPERF3_COOKIE_BYTES, OPENING_ONLY_BYTES,
                                    intervals, socket_csv, socket_delivered)


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
# iperf3's error when a connection of the test could not be opened ("unable to connect to
# server: ...", "unable to connect stream: ...")
IPERF3_CONNECT_FAILED = "unable to connect"


def _check_socket_count(rundir: Path, f: dict, plan: dict, row: dict,
                        iperf_total: int | None, errors: list, warnings: list) -> None:
    """Adds the receiving sockets' count (flows.socket_delivered) to a flow's row and
    checks iperf3's against it. A flow iperf3 reports nothing for (its client was
    interrupted before the end-of-test exchange, so neither end wrote the totals) takes
    its goodput from the sockets (`goodput_source` `socket`: bytes by the planned end
    over the planned seconds) and is named, with both counts, in the summary's warnings;
    one whose iperf3 count exceeds the sockets' by more than the bound above, or that has
    neither, or that never ran as planned (iperf3 could not connect, or fewer of its
    `parallel` streams than it has delivered more than iperf3's opening message), is an
    error of the summary (a warning where a socket's close went unrecorded: its count is
    then a lower bound); one that delivered nothing of the test, zero_goodput's. Never a
    silent 0."""
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
    if sock and 0 < sock["streams_with_data"] < sock["streams"]:
        # The test ran (its other streams carried it: iperf3 starts them together), and
        # these got nothing after iperf3's opening: their first data and its
        # retransmissions lost (Linux sends a retransmission Not-ECT, which an AQM marking
        # most packets drops at that rate). Starved streams: a finding, named.
        warnings.append(f"flow {fid}: {sock['streams'] - sock['streams_with_data']} of its "
                        f"{sock['streams']} streams got nothing after iperf3's "
                        f"{IPERF3_COOKIE_BYTES}-byte opening (starved; the others carried "
                        "the test)")
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
        planned_streams = int(f.get("parallel") or 1)
        # A flow whose streams got nothing of the test is zero_goodput()'s; streams of a
        # parallel flow that never connected did not run.
        if IPERF3_CONNECT_FAILED in (row["error"] or "") \
                or (planned_streams > 1 and sock["streams"] < planned_streams):
            # The flow never ran as planned: iperf3 could not open its connections (a
            # handshake packet, which is never ECN-capable, lost at the AP: an AQM that
            # marks most packets drops that share of the others), or was stopped at its
            # planned end still trying. Whatever some of its streams delivered is not the
            # planned flow.
            why = (f"iperf3 could not connect ({row['error']})"
                   if IPERF3_CONNECT_FAILED in (row["error"] or "") else
                   f"{sock['streams']} of its {planned_streams} streams connected "
                   f"({row['error'] or 'no end-of-test totals'})")
            errors.append(f"flow {fid}: {why}: the flow did not run as planned (its receiving "
                          f"sockets got {got} bytes by the planned end); a lost SYN or "
                          "SYN-ACK? e.g. an AQM dropping Not-ECT packets at its marking rate")
            return
        if got <= OPENING_ONLY_BYTES * max(1, sock["streams"]):
            return  # nothing of the test delivered: zero_goodput() names the flow
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


def zero_goodput(rows: list[dict], cfg: dict, errors: list, warnings: list) -> None:
    """Names every timed flow whose receiver got nothing of the test by its planned end: by
    iperf3's report, or by its receiving sockets where that report is missing (which count
    iperf3's opening message on each stream: no more is nothing). An error of the run
    (analysis.zero_goodput: error, the default): a 0 in a table is then never silent. A
    warning where the experiment's finding is starvation (analysis.zero_goodput: warning:
    Wu et al.'s drop-tail downstream flows in a short run), and the run stands."""
    for row in rows:
        if row.get("goodput_source") in ("transfers", "wrc receiver", None):
            continue  # None: no count at all, which _check_socket_count made an error
        if any(e.startswith(f"flow {row['id']}: ") for e in errors):
            continue  # named already (it did not run as planned)
        # the socket count includes iperf3's opening message (and the FIN) on each stream
        opening = OPENING_ONLY_BYTES * max(1, row.get("socket_streams") or 1) \
            if row["goodput_source"] == "socket" else 0
        if (row.get("bytes_received") or 0) > opening:
            continue
        sock = row.get("bytes_delivered_socket_total")
        msg = (f"flow {row['id']}: delivered nothing of the test by its planned end "
               f"({row.get('bytes_received') or 0} bytes, iperf3's openings at most; goodput from "
               f"{row['goodput_source']}; its receiving sockets got "
               f"{'no count' if sock is None else f'{sock} bytes'} in all; iperf3: "
               f"{row.get('error') or 'no error'})")
        if cfg["analysis"]["zero_goodput"] == "warning":
            warnings.append(msg + ": starved (analysis.zero_goodput is warning)")
        else:
            errors.append(msg + ": a flow the run did not measure (analysis.zero_goodput: "
                          "warning where starvation is the finding)")


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
    out["periods"] = _wrc_periods(rundir, rows, plans)
    if all(ok) and len(out["periods"]) <= 1:
        total, wsum = sum(rates), sum(weights)
        out["steady_total_pps"] = total
        out["share_of_ideal"] = {f["id"]: (r / (total * w / wsum) if total > 0 else None)
                                 for f, r, w in zip(rows, rates, weights)}
    elif out["periods"]:
        # Flows joined and left: a sum of rates each averaged over its own flow's time is
        # no rate of the link (weights.yaml's read 1.02 of it). The periods' totals,
        # weighted by their lengths (warm-up included); each flow's share is per period.
        span = sum(p["to_s"] - p["from_s"] for p in out["periods"])
        out["steady_total_pps"] = (sum(p["total_pps"] * (p["to_s"] - p["from_s"])
                                       for p in out["periods"]) / span if span > 0 else None)
        out["share_of_ideal"] = None
    sent = sum(f["wrc"]["sent_packets"] or 0 for f in rows)
    got = sum(f["wrc"]["received_packets"] or 0 for f in rows)
    if sent:
        out["loss_ratio"] = 1.0 - got / sent
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
