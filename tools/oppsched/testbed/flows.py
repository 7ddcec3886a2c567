"""Real TCP flows for the testbed: iperf3 command lines, their results, live goodput.

Direction (Andrew & Hanly, CLAMP, Fig. 3): data flows from a server S_i to a client R_j,
i.e. down the radio. iperf3 names its two ends the other way round, so:

* the iperf3 *receiver* (`iperf3 -s -1`) runs in the client's namespace, one per flow on
  its own port, and writes its JSON (per-interval bytes received) to
  `flow.<id>.receiver.json`;
* the iperf3 *sender* (`iperf3 -c CLIENT_ADDR`) runs in the server's namespace with the
  flow's congestion control (`-C`), parallel streams (`-P`) and length (`-t` seconds or
  `-n` bytes), and writes `flow.<id>.sender.json`: goodput (bytes the receiver got, which
  iperf3 exchanges at the end) and the sender's TCP RTT (tcp_info, `mean_rtt`).

Both use `--logfile`, so warnings never end up inside the JSON.

An upstream flow (`direction: up`, Wu, Gong & Williamson's upstream flows) swaps the two
ends: the receiver listens in the server's namespace and the sender connects from the
client's, so the data crosses the uplink and its ACKs the AP queue and the downlink. The
files and their reading stay the same (goodput from the bytes received, RTT from the
sender's tcp_info).

iperf3 runs whole seconds: `-t` takes an integer (3.12 truncates "1.5" to 1), so a flow
scheduled for stop_s - start_s seconds runs round(stop_s - start_s) s, at least 1; the run
records the times actually used.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

BASE_PORT = 5201


@dataclass
class FlowPlan:
    """One flow as the runner starts it."""
    id: str
    server: str
    server_index: int
    device: str
    device_index: int
    family: str  # "ipv4" or "ipv6"
    dst_addr: str  # the iperf3 receiver's address: the client's (down) or the server's (up)
    port: int
    start_s: float
    seconds: int | None  # -t, or None with nbytes
    nbytes: int | None  # -n
    cc: str
    parallel: int
    interval_s: float
    direction: str = "down"  # "up": the client sends (sender_in_client)
    # A flow of repeated transfers (oppsched.testbed.transfers) instead of iperf3: the flow's
    # resolved `repeat` section, the server's address (the client connects to it), the
    # run's seed (idle draws) and the flow's stop time (s after t0).
    repeat: dict | None = None
    server_addr: str | None = None
    seed: int = 0
    stop_s: float | None = None
    # transport wrc (oppsched.testbed.wrcflows): the weighted rate control of Nandagopal et al.
    # instead of TCP, with the flow's weight and datagram size.
    transport: str = "tcp"
    weight: float | None = None
    packet_bytes: int | None = None
    # flows[].mss_bytes as the MSS TCP_MAXSEG takes (iperf3 -M: the payload plus the
    # timestamp option's 12 bytes where both ends use it; schema.mss_option); None: unset.
    mss: int | None = None
    # Filled in while running (seconds after the run's t0):
    started_at_s: float | None = None
    ended_at_s: float | None = None
    exit_code: int | None = None
    extra: dict = field(default_factory=dict)

    def receiver_json(self, rundir: Path) -> Path:
        return Path(rundir) / f"flow.{self.id}.receiver.json"

    def sender_json(self, rundir: Path) -> Path:
        return Path(rundir) / f"flow.{self.id}.sender.json"

    def receiver_argv(self, rundir: Path) -> list[str]:
        return ["iperf3", "-s", "-1", "-p", str(self.port), "-J", "-i", _fmt_s(self.interval_s),
                "--logfile", str(self.receiver_json(rundir))]

    def sender_argv(self, rundir: Path) -> list[str]:
        argv = ["iperf3", "-c", self.dst_addr, "-p", str(self.port), "-J",
                "-i", _fmt_s(self.interval_s), "-C", self.cc, "-P", str(self.parallel),
                "--connect-timeout", "10000", "--logfile", str(self.sender_json(rundir))]
        if self.mss is not None:
            argv += ["-M", str(self.mss)]
        if self.nbytes is not None:
            argv += ["-n", str(self.nbytes)]
        else:
            argv += ["-t", str(self.seconds)]
        if self.family == "ipv6":
            argv.append("-6")
        else:
            argv.append("-4")
        return argv

    # The two processes of a flow, as the process table names them: the one that listens
    # (started before t0 and waited for) and the one started at t0 + start_s (the flow
    # ends when it ends). iperf3: receiver in the client's namespace, sender in the
    # server's; repeated transfers: server in the server's namespace, client (fetch) in
    # the client's.
    # wrc: the receiver (oppsched-wrc recv) in the client's namespace, the sender in the
    # server's.
    @property
    def listener_name(self) -> str:
        if self.transport == "wrc":
            return f"wrc-r.{self.id}"
        return f"xfer-serve.{self.id}" if self.repeat else f"iperf3-r.{self.id}"

    @property
    def starter_name(self) -> str:
        if self.transport == "wrc":
            return f"wrc-s.{self.id}"
        return f"xfer-fetch.{self.id}" if self.repeat else f"iperf3-s.{self.id}"

    @property
    def sender_in_client(self) -> bool:
        """True where the flow's sending end (iperf3 -c, or the transfer client) runs in the
        client's namespace and its listening end in the server's: an upstream flow, or
        repeated transfers (whose client connects and fetches)."""
        return self.direction == "up" or bool(self.repeat)

    def transfer_server_argv(self, python: str, rundir: Path) -> list:
        from oppsched.testbed.transfers import server_csv
        argv = [python, "-m", "oppsched.testbed.transfers", "serve", "--bind", self.server_addr,
                "--port", str(self.port), "--bytes", str(self.nbytes), "--cc", self.cc,
                "--records", str(server_csv(rundir, self.id))]
        return argv + (["--reuse"] if self.reuses_connection else [])

    @property
    def reuses_connection(self) -> bool:
        """repeat.connection reuse: the transfers share one TCP connection."""
        return (self.repeat or {}).get("connection") == "reuse"

    def transfer_client_argv(self, python: str, rundir: Path, t0_ns: int) -> list:
        from oppsched.testbed.transfers import client_csv
        rep = self.repeat or {}
        argv = [python, "-m", "oppsched.testbed.transfers", "fetch", "--connect", self.server_addr,
                "--port", str(self.port), "--bytes", str(self.nbytes),
                "--records", str(client_csv(rundir, self.id)), "--seed", str(self.seed),
                "--flow-id", self.id, "--t0-ns", str(t0_ns),
                "--stop-at-ns", str(t0_ns + int(round(self.stop_s * 1e9)))]
        if rep.get("idle_mean_s") is not None:
            argv += ["--idle-mean-s", repr(float(rep["idle_mean_s"]))]
        else:
            argv += ["--idle-s", repr(float(rep.get("idle_s") or 0.0))]
        if rep.get("count") is not None:
            argv += ["--count", str(rep["count"])]
        if self.reuses_connection:
            argv.append("--reuse")
        return argv

    def to_json(self) -> dict:
        return asdict(self)


def timed_iperf(p: "FlowPlan | dict") -> bool:
    """True for an iperf3 flow of -t seconds (not -n bytes, repeated transfers or wrc)."""
    get = p.get if isinstance(p, dict) else (lambda k: getattr(p, k))
    return (get("transport") in (None, "tcp") and not get("repeat")
            and get("nbytes") is None and get("seconds") is not None)


def _fmt_s(x: float) -> str:
    return f"{x:g}"


def iperf_seconds(start_s: float, stop_s: float) -> int:
    """The whole seconds iperf3 -t runs for a flow scheduled from start_s to stop_s."""
    return max(1, int(math.floor(stop_s - start_s + 0.5)))


# ----------------------------------------------------------------------------------------
# Results


# Where an iperf3 JSON document begins: its first key is "start", an object (an interval's
# "start" is a number).
_IPERF3_DOCUMENT = re.compile(r'\{\s*"start"\s*:\s*\{')


def load_json(path: Path) -> dict | None:
    """iperf3's JSON result, or None when the file is missing or holds no whole document.

    Besides a clean file: a line of text (e.g. a warning) before the JSON object; and the
    file iperf3 3.12 leaves when it is interrupted while it writes an interval (-J with
    --logfile): the document cut in the middle of that interval, then the whole document
    again after it (seen in a 16-flow run with 0.1-s intervals). The last whole document
    is taken."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for m in reversed(list(_IPERF3_DOCUMENT.finditer(text))):
        try:
            d, _ = decoder.raw_decode(text, m.start())
            return d
        except ValueError:
            continue
    i = text.find("{")
    if i < 0:
        return None
    try:
        return json.loads(text[i:])
    except ValueError:
        return None


def sender_result(path: Path, receiver_path: Path | None = None) -> dict:
    """Goodput and RTT from the sender's JSON.

    goodput_bps: bytes the receiver got (end.sum_received) over the receiver's seconds; a
    sender stopped before the receiver's totals reached it (a flow still running at the
    grace deadline: its control messages wait behind a long radio queue) has none, and
    then they come from the receiver's own JSON (receiver_path), `goodput_source`
    'receiver' instead of 'sender';
    rtt_ms_mean: mean of the per-stream tcp_info mean RTTs, weighted by bytes sent;
    retransmits: the sender's retransmitted segments. Missing pieces are None; `error` is
    iperf3's own error text if it reported one.
    """
    d = load_json(path)
    out = {"goodput_bps": None, "bytes_received": None, "seconds": None, "rtt_ms_mean": None,
           "rtt_ms_max": None, "retransmits": None, "bytes_sent": None, "error": None,
           "streams": 0, "goodput_source": None}
    if d is None:
        out["error"] = f"{Path(path).name}: missing or not JSON"
        return out
    out["error"] = d.get("error")
    end = d.get("end") or {}
    recv = end.get("sum_received") or {}
    sent = end.get("sum_sent") or {}
    if recv:
        out["bytes_received"] = int(recv.get("bytes", 0))
        out["seconds"] = float(recv.get("seconds", 0.0))
        out["goodput_bps"] = float(recv.get("bits_per_second", 0.0))
    out["goodput_source"] = "sender" if out["bytes_received"] else None
    if not out["bytes_received"] and receiver_path is not None:
        r = ((load_json(receiver_path) or {}).get("end") or {}).get("sum_received") or {}
        if int(r.get("bytes", 0)) > 0 and float(r.get("seconds", 0.0)) > 0:
            out["bytes_received"] = int(r["bytes"])
            out["seconds"] = float(r["seconds"])
            out["goodput_bps"] = 8.0 * out["bytes_received"] / out["seconds"]
            out["goodput_source"] = "receiver"
    if sent:
        out["bytes_sent"] = int(sent.get("bytes", 0))
        out["retransmits"] = sent.get("retransmits")
    rtts, weights, maxes = [], [], []
    for s in end.get("streams", []):
        snd = s.get("sender") or {}
        if "mean_rtt" in snd:
            rtts.append(snd["mean_rtt"] / 1000.0)  # iperf3 reports microseconds
            weights.append(max(1, snd.get("bytes", 0)))
            maxes.append(snd.get("max_rtt", 0) / 1000.0)
    out["streams"] = len(end.get("streams", []))
    if rtts:
        out["rtt_ms_mean"] = float(np.average(rtts, weights=weights))
        out["rtt_ms_max"] = float(max(maxes))
    return out


def intervals(path: Path, offset_s: float = 0.0) -> pd.DataFrame:
    """Per-interval sums of an iperf3 JSON (either end): t_s (interval end, plus
    offset_s), seconds, bytes, bps, and from the sender, snd_cwnd and rtt_ms (stream 0)."""
    d = load_json(path)
    rows = []
    for iv in (d or {}).get("intervals", []):
        s = iv.get("sum") or {}
        if s.get("omitted"):
            continue
        row = {"t_s": offset_s + float(s.get("end", 0.0)), "seconds": float(s.get("seconds", 0.0)),
               "bytes": int(s.get("bytes", 0)), "bps": float(s.get("bits_per_second", 0.0))}
        st = (iv.get("streams") or [{}])[0]
        if "snd_cwnd" in st:
            row["snd_cwnd"] = int(st["snd_cwnd"])
        if "rtt" in st:
            row["rtt_ms"] = st["rtt"] / 1000.0
        rows.append(row)
    df = pd.DataFrame(rows)
    for c in ("t_s", "seconds", "bytes", "bps"):
        if c not in df:
            df[c] = pd.Series(dtype=float)
    return df


# ----------------------------------------------------------------------------------------
# Live progress: bytes acknowledged per connection, from `ss -ti` in a server namespace

def parse_ss_bytes_acked(text: str) -> dict[int, int]:
    """`ss -Htin` output -> {peer port: sum of bytes_acked over its connections} (ss leaves
    a zero counter out, so a connection that has acknowledged nothing adds no port)."""
    out: dict[int, int] = {}
    for s in _ss_sockets(text, ("bytes_acked",)):
        if s["bytes_acked"]:
            out[s["peer_port"]] = out.get(s["peer_port"], 0) + s["bytes_acked"]
    return out


_SS_RTT = re.compile(r"\brtt:([0-9.]+)/")
_SS_CWND = re.compile(r"\bcwnd:(\d+)")
_SS_MSS = re.compile(r"\bmss:(\d+)")


def parse_ss_sender_info(text: str) -> dict[int, dict]:
    """`ss -Htin` output at a sender -> {peer port: {"rtt_ms", "cwnd_bytes"}} of the
    connection to that port that has acknowledged the most bytes (a flow's data
    connection, not iperf3's control connection); cwnd in bytes (segments x mss)."""
    best: dict[int, tuple[int, dict]] = {}
    for s, line in _ss_info_lines(text):
        if line is None:
            continue
        acked = int(m.group(1)) if (m := _SS_COUNTERS["bytes_acked"].search(line)) else 0
        rtt, cwnd, mss = _SS_RTT.search(line), _SS_CWND.search(line), _SS_MSS.search(line)
        if rtt is None or cwnd is None:
            continue
        info = {"rtt_ms": float(rtt.group(1)),
                "cwnd_bytes": int(cwnd.group(1)) * (int(mss.group(1)) if mss else 1448)}
        if s["peer_port"] not in best or acked > best[s["peer_port"]][0]:
            best[s["peer_port"]] = (acked, info)
    return {port: info for port, (_, info) in best.items()}


# A sender's TCP state over the run (capture.tcp_info): flow.<id>.tcp_info.csv, one row per
# poll of `ss -Htin` in the sender's namespace, of the flow's data connection.
TCP_INFO_COLUMNS = ("t_s", "cwnd", "ssthresh", "rtt_ms", "rttvar_ms", "rto_ms", "reordering",
                    "retrans", "retrans_total", "lost", "unacked", "bytes_acked")
# What ss prints of each (iproute2 misc/ss.c): ssthresh only when the kernel has one,
# reordering only when it is not the initial 3 (net.ipv4.tcp_reordering), lost, unacked and
# the counters only when not 0: absent means that value.
_SS_TCP_INFO = {
    "cwnd": (re.compile(r"\bcwnd:(\d+)"), None),
    "ssthresh": (re.compile(r"\bssthresh:(\d+)"), ""),
    "rtt_ms": (re.compile(r"\brtt:([0-9.]+)/"), None),
    "rttvar_ms": (re.compile(r"\brtt:[0-9.]+/([0-9.]+)"), None),
    "rto_ms": (re.compile(r"\brto:([0-9.]+)"), None),
    "reordering": (re.compile(r"\breordering:(\d+)"), "3"),
    "retrans": (re.compile(r"\bretrans:(\d+)/"), "0"),
    "retrans_total": (re.compile(r"\bretrans:\d+/(\d+)"), "0"),
    "lost": (re.compile(r"\blost:(\d+)"), "0"),
    "unacked": (re.compile(r"\bunacked:(\d+)"), "0"),
    "bytes_acked": (re.compile(r"\bbytes_acked:(\d+)"), "0"),
}


def parse_ss_tcp_info(text: str) -> dict[tuple[int, int], dict[str, str]]:
    """`ss -Htin` output at a sender -> {(peer port, local port): {TCP_INFO_COLUMNS but
    t_s: value as printed}} of every connected socket. A socket without cwnd, rtt and rto
    in its line (closing) is left out."""
    out: dict[tuple[int, int], dict[str, str]] = {}
    for s, line in _ss_info_lines(text):
        if line is None:
            continue
        row = {}
        for name, (rx, absent) in _SS_TCP_INFO.items():
            m = rx.search(line)
            row[name] = m.group(1) if m else absent
        if None not in row.values():
            out[(s["peer_port"], s["local_port"])] = row
    return out


def data_connections(info: dict[tuple[int, int], dict[str, str]],
                     chosen: dict[int, tuple[int, int]]) -> dict[int, dict[str, str]]:
    """{peer port: row} of each flow's data connection among parse_ss_tcp_info's sockets:
    the one that has acknowledged the most bytes (not iperf3's control connection), kept
    by its local port once seen (`chosen`: peer port -> (local port, bytes acknowledged),
    updated), so that the control connection, which outlives it, is never taken for it."""
    out = {}
    for (peer, local), row in info.items():
        acked = int(row["bytes_acked"])
        have = chosen.get(peer)
        if have is None or (local != have[0] and acked > have[1]):
            chosen[peer] = (local, acked)
        elif local == have[0]:
            chosen[peer] = (local, max(acked, have[1]))
    for (peer, local), row in info.items():
        if chosen.get(peer, (None,))[0] == local:
            out[peer] = row
    return out


def tcp_info_csv(rundir: Path, flow_id: str) -> Path:
    return Path(rundir) / f"flow.{flow_id}.tcp_info.csv"


def _ss_info_lines(text: str):
    """`ss -Htin` (or `ss -HtinE`) output -> (socket, line) pairs: each connected socket
    ({local_port, peer_port}) once with line None at its header, then with each of its
    tcp_info lines. Listening sockets (peer `*`) are left out."""
    cur = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith((" ", "\t")):
            cols = line.split()
            cur = None
            # State Recv-Q Send-Q Local:Port Peer:Port [Process]
            if len(cols) >= 5:
                local, peer = _port(cols[3]), _port(cols[4])
                if local is not None and peer is not None:
                    cur = {"local_port": local, "peer_port": peer}
                    yield cur, None
            continue
        if cur is not None:
            yield cur, line


# ----------------------------------------------------------------------------------------
# Bytes delivered, counted by the receiving sockets themselves (independent of iperf3)
#
# iperf3's figures reach the run only through its end-of-test exchange; a client the runner
# interrupts before that exchange has finished (seconds of radio queue in front of its
# control messages) leaves a receiver JSON with nothing in it, and the flow would read as
# carrying nothing. The kernel counts what each receiving socket got in order
# (tcp_info bytes_received) whatever iperf3 manages to write: the runner polls the
# receiving namespace with `ss -tin` (flow.<id>.socket.csv, `poll` rows) and records each
# socket's last count as it is destroyed (`ss -tinE`, `closed` rows, no time).

SOCKET_COLUMNS = ("t_s", "event", "peer_port", "bytes_received", "bytes_sent")
# The tcp_info counters _ss_sockets reads from `ss -i`'s second line of a socket.
_SS_COUNTERS = {name: re.compile(rf"\b{name}:(\d+)")
                for name in ("bytes_received", "bytes_sent", "bytes_acked")}


def socket_csv(rundir: Path, flow_id: str) -> Path:
    return Path(rundir) / f"flow.{flow_id}.socket.csv"


def _port(addr: str) -> int | None:
    p = addr.rsplit(":", 1)[1] if ":" in addr else ""
    return int(p) if p.isdigit() else None


def _ss_sockets(text: str, counters) -> list[dict]:
    """`ss -Htin` (or `ss -HtinE`) output -> one dict per connected socket: local_port,
    peer_port and each of the tcp_info `counters` (ss leaves a zero counter out: 0).
    Listening sockets (peer `*`) are left out."""
    out: list[dict] = []
    for sock, line in _ss_info_lines(text):
        if line is None:
            sock.update({c: 0 for c in counters})
            out.append(sock)
            continue
        for c in counters:
            m = _SS_COUNTERS[c].search(line)
            if m:
                sock[c] = int(m.group(1))
    return out


def parse_ss_sockets(text: str) -> list[dict]:
    """`ss -Htin` (or `ss -HtinE`) output -> one dict per connected socket: local_port,
    peer_port, bytes_received, bytes_sent (ss leaves a zero counter out: 0). Listening
    sockets (peer `*`) are left out."""
    return _ss_sockets(text, ("bytes_received", "bytes_sent"))


# iperf3's opening message on each of its connections (the test's cookie), which the
# receiving socket counts before any of the test's data: a stream that got no more did not
# carry the test (its start was never signalled: the control connection's messages lost).
IPERF3_COOKIE_BYTES = 37
# What a socket that got only that counts: the opening and the FIN, which the kernel's
# count includes as a byte.
OPENING_ONLY_BYTES = IPERF3_COOKIE_BYTES + 1


def socket_delivered(df: pd.DataFrame | None, planned_end_s: float | None,
                     ended_at_s: float | None = None) -> dict | None:
    """What a flow's receiving sockets got, from its socket trace (flow.<id>.socket.csv):

    bytes_total: over the flow's life, each data socket's count as it was destroyed, or its
      last polled count where no `closed` row was recorded (then `source` is `socket_poll`
      and the figure a lower bound, else `socket_closed`);
    bytes_by_planned_end: by planned_end_s (s after t0), each socket's count interpolated
      linearly between the polls around it; a socket last polled before it counts its
      total there (the flow had ended: nothing arrived after), taken at ended_at_s where
      that is later than its last poll. None planned_end_s: bytes_total;
    streams: data sockets seen; streams_with_data: those that got more than iperf3's
      opening and a FIN (OPENING_ONLY_BYTES).

    iperf3's control connection shares the flow's port; it is the one socket on which the
    receiving end sends data (iperf3's state bytes, from the moment it accepts: its
    bytes_sent is never 0 in a poll), so it is left out. None for a missing trace."""
    if df is None:
        return None
    out = {"bytes_total": 0, "bytes_by_planned_end": 0, "streams": 0, "streams_with_data": 0,
           "source": "socket_closed"}
    if df.empty:
        return out
    for _peer, g in df.groupby("peer_port"):
        if (g["bytes_sent"].fillna(0) > 0).any():
            continue  # iperf3's control connection
        out["streams"] += 1
        polls = g[g["event"] == "poll"].sort_values("t_s")
        closed = g[g["event"] == "closed"]
        if len(closed):
            total = int(closed["bytes_received"].max())
        else:
            total = int(polls["bytes_received"].max()) if len(polls) else 0
            out["source"] = "socket_poll"
        total = max(total, int(polls["bytes_received"].max()) if len(polls) else 0)
        out["bytes_total"] += total
        out["streams_with_data"] += total > OPENING_ONLY_BYTES
        if planned_end_s is None:
            out["bytes_by_planned_end"] += total
            continue
        t = polls["t_s"].to_numpy(dtype=float)
        b = polls["bytes_received"].to_numpy(dtype=float)
        last_t = t[-1] if len(t) else -np.inf
        if total > (b[-1] if len(b) else 0):
            # the final count, at the latest when the flow ended (or just after the last
            # poll, for a socket that outlived its flow's sender)
            t = np.append(t, max(last_t, ended_at_s if ended_at_s is not None else last_t))
            b = np.append(b, total)
        if not len(t) or planned_end_s < t[0]:
            # The planned end came before the socket's first poll, which is at most one
            # poll period after it opened: what it had then is not known, and counting
            # the later poll would credit bytes the flow got after its planned end.
            continue
        out["bytes_by_planned_end"] += int(np.interp(planned_end_s, t, b))
    return out
