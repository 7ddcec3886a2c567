"""summary.json of a testbed run, from the files of its run folder alone (so `oppsched
analyze` recomputes it): per flow goodput and RTT from iperf3, cross-checked against the
capture where the data is received (the client's TUN; an upstream flow's server's wired
side), and per direction; per user slots, MAC throughput, queue and delay from the apd's
slot trace; HARQ outcomes; the daemons' own counters and CPU; CLAMP's rewritten windows.

analyze() puts the summary together; its parts are modules of their own:

    readers        reading the run folder's files (an unreadable one is an error)
    flowsummary    the flows' rows and checks, and the totals over them
    daemonsummary  the sections from the daemons' records: queues, AQM, watchdog,
                   security, medium, CLAMP
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from oppsched.analysis import pcap
from oppsched.analysis.metrics import jain_index
from oppsched.experiments.testbed.balance import end_to_end
from oppsched.experiments.testbed.daemonsummary import (_clamp_summary, _find_number,
                                                        _queue_delays_from_packets, aqm_counts,
                                                        medium_summary, security_summary,
                                                        truncated_traces, watchdog_summary)
from oppsched.experiments.testbed.flowsummary import (_bytes_by_planned_end, _check_socket_count,
                                                      _jain_fair_share, _transfer_flow,
                                                      _transfers_total, _wrc_flow, _wrc_total,
                                                      direction_totals, zero_goodput)
from oppsched.experiments.testbed.readers import (_truthy, read_json, read_slots, slot_column,
                                                  trace_error)
from oppsched.experiments.testbed.reliability import conservation_summary
from oppsched.experiments.testbed.schema import is_wrc, repeated
from oppsched.experiments.testbed.traces import truncation_errors, write_errors
from oppsched.testbed import daemonconf
from oppsched.testbed.flows import BASE_PORT, intervals, sender_result

# Below this share of real time kept by the slot clock, the run says so (summary warnings).
REALTIME_FRACTION_MIN = 0.95


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
    zero_goodput(flows, cfg, errors, warnings)

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
        if window:
            # The slot clock against the wall clock: t_ns is slot n's scheduled instant
            # (t0 + n slot_ns), so a PHY that fell behind (a machine too busy for its sample
            # rate) had reached a slot scheduled well before the window's end when it ended.
            # Its MAC figures are then per slot time and the flows' per second.
            wall = (window[1] - window[0]) / 1e9
            reached = (int(slots["t_ns"].max()) - window[0]) / 1e9
            slot_info["wall_s"] = wall
            slot_info["behind_s"] = wall - reached
            frac = reached / wall if wall > 0 else None
            slot_info["realtime_fraction"] = frac
            if frac is not None and frac < REALTIME_FRACTION_MIN:
                warnings.append(
                    f"slots: the PHY's slot clock kept {100 * frac:.0f} % of real time (it "
                    f"ended {wall - reached:.1f} s behind, {wall:.1f} s after t0): the machine "
                    f"was too busy for it; the MAC figures are per slot time, the flows' per "
                    f"second (slots.realtime_fraction)")
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
        # the experiment's residual_loss: packets the client dropped after the link
        dropped = ((stats.get(f"client.{u['name']}") or {}).get("residual_loss") or {}) \
            .get("dropped_packets")
        if cfg.get("residual_loss") and dropped is not None:
            u["residual_loss_dropped_packets"] = int(dropped)
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
