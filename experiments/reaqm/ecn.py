"""What the AQM does to each ECN codepoint, connection by connection, from the servers' and
the client's captures (Wang & Song, REAQM, Figs. 3-4 at the paper's 300 connections: why
RED's joining connections carry nothing once open):

    .venv/bin/python experiments/reaqm/ecn.py RUN [RUN ...]

RUN: a dynamics.yaml run folder made with capture.pcaps. Each server's capture
(wired.<server>.pcap) has what its connections sent, the client's (client.<device>.pcap)
what the AP delivered. iperf3's control connections (the first to each port of a server)
are left out. Per run and server (one group of flows):

- connections, and those that negotiated ECN (a SYN with ECE and CWR answered by a SYN-ACK
  with ECE, RFC 3168 §6.1.1);
- the data segments sent, new data and retransmissions (a segment that ends at or below
  the highest byte sent before it), by codepoint (ECT or Not-ECT): Linux sends new data
  ECT and a retransmission Not-ECT (RFC 3168 §6.1.5; ns-2's ECN agents send both ECT);
- the share of each class that reached the client: each arrival is matched to the latest
  copy of its segment sent before it (copies are a retransmission timeout apart, far more
  than the path's one-way delay), so a CE-marked arrival counts for the codepoint it was
  sent with;
- stalled connections: those that delivered no more than iperf3's opening message
  (OPENING_BYTES) and one segment after it, with the mean number of retransmissions each
  sent and when the last one went (seconds after the run's start);
- iperf3's control connections: the pure ACKs the server sent on them (Not-ECT, RFC 3168
  §6.1.4) and the share that reached the client, and how often the client's end sent its
  last message again (a message never acknowledged: the next one, the test's start, waits
  behind it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from oppsched.analysis import pcap

OPENING_BYTES = 37  # iperf3's cookie, the first bytes of each of its connections
ECE, CWR = 0x40, 0x80
SYN, ACK = 0x02, 0x10
KEY = ["src", "sport", "dst", "dport"]


def _rel(seq: pd.Series, base: pd.Series) -> np.ndarray:
    return ((seq.to_numpy(np.int64) - base.to_numpy(np.int64)) % (1 << 32)).astype(np.int64)


def _retransmitted(data: pd.DataFrame, end: pd.Series) -> pd.Series:
    """Per segment (in time order): it ends at or below the highest byte its connection
    sent before it."""
    before = end.groupby([data[k] for k in KEY]).transform(
        lambda e: np.concatenate([[0], np.maximum.accumulate(e.to_numpy())[:-1]]))
    return end <= before


def segments(wired: pd.DataFrame, port_min: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The data connections a server opened (control connections left out) and their data
    segments as sent: (conns: KEY + t_syn, ecn_ok; sent: KEY + t_s, seq (relative to the
    ISN), payload, ecn, retx)."""
    f = wired["flags"]
    syn = wired[(f & (SYN | ACK)) == SYN].sort_values("t_s", kind="stable")
    syn = syn.drop_duplicates(KEY, keep="first")
    synack = wired[(f & (SYN | ACK)) == (SYN | ACK)]
    ece_back = set(zip(synack["dst"], synack["dport"], synack["src"], synack["sport"],
                       (synack["flags"] & ECE) != 0))
    conns = syn[KEY + ["t_s", "seq", "flags"]].rename(columns={"t_s": "t_syn", "seq": "isn"})
    conns = conns[conns["dport"] >= port_min]
    # the first connection to each of the server's ports is iperf3's control connection
    first = conns.groupby(["src", "dst", "dport"])["t_syn"].transform("min")
    conns = conns[conns["t_syn"] > first].copy()
    conns["ecn_ok"] = [((fl & (ECE | CWR)) == (ECE | CWR)) and (a, b, c, d, True) in ece_back
                       for a, b, c, d, fl in zip(conns["src"], conns["sport"], conns["dst"],
                                                 conns["dport"], conns["flags"])]
    data = wired[wired["payload"] > 0].merge(conns[KEY + ["isn"]], on=KEY)
    data = data.sort_values("t_s", kind="stable")
    data["seq"] = _rel(data["seq"], data["isn"])
    data["retx"] = _retransmitted(data, data["seq"] + data["payload"])
    return (conns.drop(columns=["flags"]).reset_index(drop=True),
            data[KEY + ["t_s", "seq", "payload", "ecn", "retx"]].reset_index(drop=True))


def control(wired: pd.DataFrame, client: pd.DataFrame, conns: pd.DataFrame) -> dict:
    """iperf3's control connections of a server (each port's first): their pure ACKs sent
    and delivered, and the client end's retransmissions (a data segment that ends at or
    below the highest it sent before)."""
    f = wired["flags"]
    syn = wired[(f & (SYN | ACK)) == SYN].sort_values("t_s", kind="stable")
    ctl = syn.drop_duplicates(KEY, keep="first").drop_duplicates(["src", "dst", "dport"])
    ctl = ctl[~ctl.set_index(KEY).index.isin(conns.set_index(KEY).index)]
    keys = set(map(tuple, ctl[KEY].to_numpy()))
    back = {(d, dp, s_, sp) for s_, sp, d, dp in keys}

    def mine(df, ks):
        return df[[k in ks for k in zip(df["src"], df["sport"], df["dst"], df["dport"])]]

    acks = mine(wired, keys)
    acks = acks[(acks["payload"] == 0) & ((acks["flags"] & (SYN | ACK)) == ACK)]
    got = mine(client, keys)
    got = got[(got["payload"] == 0) & ((got["flags"] & (SYN | ACK)) == ACK)]
    peer = mine(wired, back).sort_values("t_s", kind="stable")
    peer = peer[peer["payload"] > 0]
    # no wrap within a few messages
    retx = _retransmitted(peer, peer["seq"].astype(np.int64) + peer["payload"])
    return {"control": len(keys), "control_acks_sent": int(len(acks)),
            "control_acks_delivered": float(len(got)) / len(acks) if len(acks) else None,
            "control_peer_retx": int(retx.sum())}


def delivered(sent: pd.DataFrame, client: pd.DataFrame, conns: pd.DataFrame) -> pd.DataFrame:
    """Each data segment that reached the client, matched to the copy it was sent as: the
    sent rows (KEY, t_s, seq, payload, ecn, retx) of the copies that arrived, with
    t_arrival and ecn_arrival."""
    got = client[client["payload"] > 0].merge(conns[KEY + ["isn"]], on=KEY)
    got = got.assign(seq=_rel(got["seq"], got["isn"]))[KEY + ["t_s", "seq", "payload", "ecn"]]
    got = got.rename(columns={"t_s": "t_arrival", "ecn": "ecn_arrival"})
    by = KEY + ["seq", "payload"]
    s = sent.assign(t_sent=sent["t_s"]).sort_values("t_s", kind="stable")
    g = got.sort_values("t_arrival", kind="stable")
    m = pd.merge_asof(g, s, left_on="t_arrival", right_on="t_s", by=by,
                      direction="backward")
    return m.dropna(subset=["t_sent"])


def summarize(conns: pd.DataFrame, sent: pd.DataFrame, arrived: pd.DataFrame,
              t0: float) -> dict:
    """One group's row (see the module's help)."""
    out = {"connections": int(len(conns)), "ecn_negotiated": int(conns["ecn_ok"].sum())}
    ect = sent["ecn"] != 0
    arr_ect = arrived["ecn"] != 0
    for name, mask, amask in (("new_ect", ~sent["retx"] & ect, ~arrived["retx"] & arr_ect),
                              ("new_not_ect", ~sent["retx"] & ~ect,
                               ~arrived["retx"] & ~arr_ect),
                              ("retx_ect", sent["retx"] & ect, arrived["retx"] & arr_ect),
                              ("retx_not_ect", sent["retx"] & ~ect,
                               arrived["retx"] & ~arr_ect)):
        n = int(mask.sum())
        out[f"sent_{name}"] = n
        out[f"delivered_{name}"] = float(amask.sum()) / n if n else None
    got = arrived.groupby(KEY)["payload"].sum() if len(arrived) else pd.Series(dtype=float)
    per = conns.set_index(KEY)
    per["bytes_delivered"] = got.reindex(per.index).fillna(0)
    stalled = per[per["bytes_delivered"] <= OPENING_BYTES + sent["payload"].max()
                  if len(sent) else per["bytes_delivered"] <= OPENING_BYTES]
    out["stalled"] = int(len(stalled))
    if len(stalled):
        st = sent.set_index(KEY).loc[lambda d: d.index.isin(stalled.index)]
        out["stalled_retx_mean"] = float(st["retx"].groupby(level=list(range(4))).sum()
                                         .reindex(stalled.index).fillna(0).mean())
        out["stalled_last_sent_s"] = float(st["t_s"].max() - t0) if len(st) else None
    else:
        out["stalled_retx_mean"] = out["stalled_last_sent_s"] = None
    return out


def analyze(run: Path) -> list[dict]:
    """One row per server of the run."""
    cfg = json.loads((run / "config.json").read_text())
    t0 = json.loads((run / "run.json").read_text())["t0_wall_s"]
    devices = sorted({f["device"] for f in cfg["flows"]})
    client = pd.concat([pcap.read_tcp(run / f"client.{d}.pcap") for d in devices])
    rows = []
    for server in sorted({f["server"] for f in cfg["flows"]}):
        wired = pcap.read_tcp(run / f"wired.{server}.pcap")
        conns, sent = segments(wired)
        arrived = delivered(sent, client, conns)
        flows = [f["id"] for f in cfg["flows"] if f["server"] == server]
        rows.append({"run": str(run), "server": server, "flows": ",".join(flows),
                     **summarize(conns, sent, arrived, t0), **control(wired, client, conns)})
    return rows


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    for arg in argv:
        run = Path(arg)
        for need in ("config.json", "run.json"):
            if not (run / need).exists():
                print(f"ecn.py: {run}: no {need} (not a run folder)", file=sys.stderr)
                return 2
        print(f"{run}:")
        print("| server (flows) | connections | ECN negotiated | new data sent: ECT / Not-ECT "
              "| retransmissions sent: ECT / Not-ECT | delivered: new ECT / retransmission "
              "Not-ECT | stalled | retransmissions per stalled | last sent (s) "
              "| control connections: pure ACKs sent, delivered | their client end's "
              "retransmissions |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in analyze(run):
            last, per = r["stalled_last_sent_s"], r["stalled_retx_mean"]
            print(f"| {r['server']} ({r['flows']}) | {r['connections']} | {r['ecn_negotiated']} "
                  f"| {r['sent_new_ect']} / {r['sent_new_not_ect']} "
                  f"| {r['sent_retx_ect']} / {r['sent_retx_not_ect']} "
                  f"| {_pct(r['delivered_new_ect'])} / {_pct(r['delivered_retx_not_ect'])} "
                  f"| {r['stalled']} "
                  f"| {'—' if per is None else f'{per:.1f}'} "
                  f"| {'—' if last is None else f'{last:.0f}'} "
                  f"| {r['control']}: {r['control_acks_sent']}, "
                  f"{_pct(r['control_acks_delivered'])} | {r['control_peer_retx']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
