"""The end-to-end packet balance of a testbed run's downlink (summary.json
`balance.end_to_end`; docs/testbed.md, "Reliability"), each stage recounted from its own
record, none from the apd's own conservation counter:

    offered at the servers = delivered to the clients + lost for certain + lost perhaps
                             + unexplained

where each term is counted over the flows' packets, after t0 (no flow sends before):

* offered: the IP packets each server sent to a client on a flow's port, counted in the
  server's wired capture (wired.<server>.pcap: tcpdump on the server's own interface).
* delivered: the IP packets from a server to the client on a flow's port that the client
  daemon wrote into its TUN, counted in the client's capture (client.<dev>.pcap).
* the wired delay stage (per server link, direction server -> AP): the stage's own counters
  (oppsched-delay's stats file, run.json `wired_stats` at the end minus
  `wired_stats_t0`): frames dropped by cause, and those it still held when it stopped.
  Not counted with the netem backend (its drops then show as unexplained).
* the AP TUN: packets the kernel dropped because the apd had not read them (`ip -s link`
  tx_dropped, run.json `ap_tun_end` after the apd stopped minus `ap_tun_t0`).
* the AP (the apd's packet trace, packets.csv, and packets.killed.csv of an apd the
  restart fault killed; rows after t0): each packet's drop row with its cause, and the
  packets still queued or in flight at the end. Packets to no known user
  (unknown_destination) are not to a client and are left out. Without packets.csv
  (traces.packets off) the apd's stats stand in (source `apd.stats.json`, whole life).
* the client (its stats, client.<dev>.stats.json): packets it discarded for its own reasons
  (reassembly memory cap, TUN writes that failed, the experiment's `residual_loss`), and those of a TB that HARQ delivered
  after the reassembly had given it up (reassembly.tbs_late; the AP counts such packets
  delivered): in the compact PDU format the late TB shows packets its loss could not count
  (no packet numbers), `dropped_late` for certain and `dropped_late_perhaps` when it cannot
  tell whether the give-up counted it already (segmentation.h); in the standard format the
  give-up counted them all (dropped_timeout). Its reassembly losses of packets whose TB
  HARQ lost (dropped_incomplete) are the AP's drops seen again and are only listed.

A packet whose fate one stage cannot know is counted as lost *perhaps*: the AP's packets
in flight at the end and those HARQ timed out or flushed (the client may have decoded the
TB: packet_ledger.h), the packets a killed apd held or read after its trace's last row,
the client's reassembly timeouts and restart drops (the same packets seen from the other
side, or packets of a TB that arrived after the timeout) and its dropped_late_perhaps. The residual offered - delivered - lost for certain must lie in [0, lost perhaps];
`unexplained` is how far it lies outside, and more than BOUND is an error of the run.
Upstream flows are not balanced here (their data crosses the AP's uplink, whose records
are the medium's counters)."""

from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

from oppsched.analysis import pcap

# How far the residual may lie outside [0, lost perhaps] before it is an error: packets
# that are not the flows' but that a stage counts among its drops after t0 (an ICMP error
# or neighbour probe of the AP's own, dropped at the TUN or the delay stage), and a
# packet the AP's HARQ counted lost while the client delivered it as part of a later TB.
# A few packets in any run; a real hole (a stage losing packets without a record) is
# hundreds in a run of seconds.
BOUND_PACKETS = 5
BOUND_FRACTION = 0.001

# The apd's drop causes whose packets cannot have reached the client (aqm::drop_reason,
# packet_ledger.h), and those that may have (the TB may have been decoded).
AP_CERTAIN = ("overflow", "early_drop", "aqm_drop", "superseded_ack", "evicted_low_priority",
              "evicted_las", "flushed", "harq_max_tx", "rejected")
AP_PERHAPS = ("harq_timeout", "harq_flush")
NOT_TO_A_CLIENT = "unknown_destination"
WIRED_DROPS = ("dropped_limit", "dropped_hold", "dropped_truncated", "dropped_memory",
               "send_errors")


def bound(offered: int) -> int:
    """The unexplained packets a run may show (BOUND_PACKETS + BOUND_FRACTION of offered)."""
    return BOUND_PACKETS + int(BOUND_FRACTION * offered)


def _packed(addrs) -> set[bytes]:
    return {ipaddress.ip_address(a).packed for a in addrs if a}


def count_packets(path: Path, src: set[bytes], dst: set[bytes], ports: set[int]) -> int:
    """IP packets of a capture from an address in `src` to one in `dst`, TCP or UDP, with
    a port (either end) in `ports`. IPv6 extension headers are not followed (the testbed
    sends none)."""
    n = 0
    for _t, linktype, data, _orig in pcap.iter_frames(path):
        off = pcap._ip_offset(linktype, data)
        if off is None or len(data) < off + 1:
            continue
        ver = data[off] >> 4
        if ver == 4 and len(data) >= off + 20:
            ihl = (data[off] & 0x0F) * 4
            proto = data[off + 9]
            s, d = data[off + 12: off + 16], data[off + 16: off + 20]
            l4 = off + ihl
        elif ver == 6 and len(data) >= off + 40:
            proto = data[off + 6]
            s, d = data[off + 8: off + 24], data[off + 24: off + 40]
            l4 = off + 40
        else:
            continue
        if proto not in (6, 17) or s not in src or d not in dst or len(data) < l4 + 4:
            continue
        sport, dport = struct.unpack_from("!HH", data, l4)
        if sport in ports or dport in ports:
            n += 1
    return n


def _delta(end: dict | None, start: dict | None, key: str) -> int:
    e = int((end or {}).get(key) or 0)
    s = int((start or {}).get(key) or 0)
    return max(0, e - s)


def _ap_trace(path: Path, t0_ns: int | None, errors: list) -> dict | None:
    """One apd's packet trace after t0: drops by cause, packets queued and in flight at its
    last row (pending: an enqueue row and no fate; in flight once dequeued into a TB),
    delivered (HARQ-ACKed), and every packet id it read (for the killed apd's count of
    packets read after its last row)."""
    if not path.exists():
        return None
    import pandas as pd
    try:
        df = pd.read_csv(path, usecols=["t_ns", "event", "packet_id", "reason"])
    except (OSError, ValueError, pd.errors.EmptyDataError) as exc:
        errors.append(f"{path.name}: {type(exc).__name__}: {exc}")
        return None
    ids_all = int(df.packet_id.nunique())
    first = df.groupby("packet_id").t_ns.min()
    if t0_ns is not None:
        df = df[df.packet_id.isin(first[first >= t0_ns].index)]
    drops = df[df.event == "drop"]
    reasons = drops.reason.fillna("").astype(str)
    dropped = {str(k): int(v) for k, v in reasons[reasons != NOT_TO_A_CLIENT]
               .value_counts().items()}
    enq = set(df.loc[df.event == "enqueue", "packet_id"])
    ended = set(df.loc[df.event.isin(["deliver", "drop"]), "packet_id"])
    deq = set(df.loc[df.event == "dequeue", "packet_id"])
    pending = enq - ended
    return {"source": path.name, "dropped": dropped,
            "queued": len(pending - deq), "in_flight": len(pending & deq),
            "delivered": int((df.event == "deliver").sum()),
            "packets_read": ids_all}


def _ap_stats(apd: dict | None) -> dict | None:
    """The same from the apd's stats when it wrote no packet trace (whole life)."""
    core = (apd or {}).get("core") or {}
    c = core.get("conservation")
    if not c:
        return None
    qd = core.get("queue_drops") or {}
    dropped = {k: int(v) for k, v in qd.items() if int(v or 0)}
    dropped.update({k: int(v) for k, v in (c.get("dropped") or {}).items() if int(v or 0)})
    return {"source": "apd.stats.json", "dropped": dropped, "queued": int(c.get("queued", 0)),
            "in_flight": int(c.get("in_flight", 0)), "delivered": int(c.get("delivered", 0))}


def end_to_end(rundir: Path, cfg: dict, run: dict, stats: dict, errors: list) -> dict | None:
    """summary.json `balance.end_to_end` (this module's docstring); None without the
    captures it counts from (capture.pcaps off) or a run that never reached t0, and with
    `incomplete` saying why (no totals) when the apd left no record of its stage. An
    unexplained remainder beyond bound() is appended to `errors` (the analysis passes the
    summary's warnings)."""
    rundir = Path(rundir)
    tb = run.get("testbed") or {}
    servers, clients = tb.get("servers") or [], tb.get("clients") or []
    if not cfg.get("capture", {}).get("pcaps") or not servers or not clients \
            or run.get("t0_mono_ns") is None:
        return None
    if (cfg.get("topology") or {}).get("offloads"):
        # GSO/TSO on the veths: the servers' captures show super-frames the path splits
        # into packets, so packets cannot be counted against packets.
        return {"direction": "down", "incomplete": "topology.offloads: the servers' "
                "captures show GSO super-frames, not the packets the clients get"}
    ports = {int(f["port"]) for f in run.get("flows") or [] if f.get("port") is not None}
    srv_addr = _packed(a for s in servers for a in (s.get("addr4"), s.get("addr6")))
    cli_addr = _packed(a for c in clients for a in (c.get("addr4"), c.get("addr6")))
    out: dict = {"direction": "down", "offered": {}, "delivered": {}, "stages": {},
                 "lost_certain": 0, "lost_perhaps": 0}

    def count(path: Path, src, dst) -> int | None:
        if not path.exists():
            errors.append(f"balance: {path.name} is missing: the end-to-end balance cannot "
                          "count it")
            return None
        try:
            return count_packets(path, src, dst, ports)
        except (OSError, ValueError, struct.error) as exc:
            errors.append(f"balance: {path.name}: {type(exc).__name__}: {exc}")
            return None

    for s in servers:
        out["offered"][s["name"]] = count(rundir / f"wired.{s['name']}.pcap", srv_addr, cli_addr)
    for c in clients:
        mine = _packed([c.get("addr4"), c.get("addr6")])
        out["delivered"][c["name"]] = count(rundir / f"client.{c['name']}.pcap", srv_addr, mine)
    if None in out["offered"].values() or None in out["delivered"].values():
        return out
    offered = sum(out["offered"].values())
    delivered = sum(out["delivered"].values())
    certain = perhaps = 0

    # The wired delay stages, server -> AP (direction ab: a is the server's side).
    wired = {}
    end_w, t0_w = run.get("wired_stats") or {}, run.get("wired_stats_t0") or {}
    for link in tb.get("links") or []:
        e = ((end_w.get(link["name"]) or {}).get("directions") or {}).get("ab")
        s0 = ((t0_w.get(link["name"]) or {}).get("directions") or {}).get("ab")
        if e is None:
            wired[link["name"]] = {"source": None}  # netem, or no stats: not counted
            continue
        row = {"source": f"netns/wired-{link['name']}.json",
               "dropped": {k: _delta(e, s0, k) for k in WIRED_DROPS if _delta(e, s0, k)},
               "held_at_exit": int(e.get("discarded_at_exit") or 0)}
        certain += sum(row["dropped"].values()) + row["held_at_exit"]
        wired[link["name"]] = row
    out["stages"]["wired"] = wired

    # The AP TUN: what the kernel could not hand to the apd.
    tun_end = run.get("ap_tun_end") or run.get("ap_tun")
    tun = {"source": "run.json ap_tun_t0, ap_tun_end" if run.get("ap_tun_end")
           else "run.json ap_tun (whole life)" if tun_end else None,
           "tx_dropped": _delta(tun_end, run.get("ap_tun_t0"), "tx_dropped")}
    certain += tun["tx_dropped"]
    out["stages"]["ap_tun"] = tun

    # The AP: the apd's packet trace (or its stats), and an apd the restart fault killed.
    t0_ns = int(run["t0_mono_ns"])
    ap = _ap_trace(rundir / "packets.csv", t0_ns, errors) or _ap_stats(stats.get("apd"))
    if ap is not None:
        certain += sum(v for k, v in ap["dropped"].items() if k not in AP_PERHAPS)
        perhaps += sum(v for k, v in ap["dropped"].items() if k in AP_PERHAPS)
        certain += ap["queued"]
        perhaps += ap["in_flight"]
        ap.pop("packets_read", None)
    out["stages"]["ap"] = ap
    if ap is None:
        # No record of the AP's stage (a run folder of an apd that wrote neither packets.csv
        # nor core.conservation, such as the tests' stand-in daemons): no balance to check.
        out["incomplete"] = ("the apd left no packet record (no packets.csv, no "
                             "core.conservation in apd.stats.json)")
        return out
    killed = _ap_trace(rundir / "packets.killed.csv", t0_ns, errors)
    if killed is not None:
        # Everything it held at its last row, and what it read after (the TUN's count of
        # packets read at the kill, restart_apd), went with it or out in its last moments.
        fault = next((f for f in run.get("faults") or [] if f.get("fault") == "apd_restart"),
                     {})
        read = fault.get("tun_packets_read")
        killed["unrecorded"] = (max(0, int(read) - killed["packets_read"])
                                if read is not None else None)
        certain += sum(v for k, v in killed["dropped"].items() if k not in AP_PERHAPS)
        perhaps += sum(v for k, v in killed["dropped"].items() if k in AP_PERHAPS)
        perhaps += killed["queued"] + killed["in_flight"] + (killed["unrecorded"] or 0)
        killed.pop("packets_read", None)
        out["stages"]["ap_killed"] = killed

    # The clients: their own discards, and the AP's losses as they saw them (listed).
    cl = {}
    for c in clients:
        s = stats.get(f"client.{c['name']}") or {}
        ra, tn = s.get("reassembly") or {}, s.get("tun") or {}
        row = {"source": f"client.{c['name']}.stats.json",
               "dropped": {"dropped_memory": int(ra.get("dropped_memory", 0)),
                           "dropped_late": int(ra.get("dropped_late", 0)),
                           "residual_loss": int((s.get("residual_loss") or {})
                                                .get("dropped_packets", 0)),
                           "tun_tx_errors": int(tn.get("tx_errors", 0)),
                           "tun_tx_would_block": int(tn.get("tx_would_block", 0))},
               "dropped_perhaps": {"dropped_timeout": int(ra.get("dropped_timeout", 0)),
                                   "dropped_restart": int(ra.get("dropped_restart", 0)),
                                   "dropped_late_perhaps": int(ra.get("dropped_late_perhaps",
                                                                      0))},
               "tbs_late": int(ra.get("tbs_late", 0)),
               "also_counted_at_ap": {"dropped_incomplete": int(ra.get("dropped_incomplete",
                                                                       0))}}
        certain += sum(row["dropped"].values())
        perhaps += sum(row["dropped_perhaps"].values())
        cl[c["name"]] = row
    out["stages"]["clients"] = cl

    residual = offered - delivered - certain
    unexplained = residual - min(max(residual, 0), perhaps)
    out.update(offered_total=offered, delivered_total=delivered, lost_certain=certain,
               lost_perhaps=perhaps, residual=residual, unexplained=unexplained,
               bound=bound(offered))
    if abs(unexplained) > out["bound"]:
        where = ("more packets reached the clients than the servers sent and the stages "
                 "dropped" if unexplained < 0 else
                 "packets the servers sent reached no client and no stage recorded a drop")
        errors.append(f"balance: {abs(unexplained)} packet(s) unexplained end to end ({where}): "
                      f"offered {offered} (wired.*.pcap), delivered {delivered} "
                      f"(client.*.pcap), lost for certain {certain}, perhaps {perhaps}; the "
                      f"bound is {out['bound']} (summary.json balance.end_to_end)")
    return out
