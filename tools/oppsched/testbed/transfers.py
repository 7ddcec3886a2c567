"""Repeated transfers: a flow of file downloads, each a new TCP connection or all over one.

A flow with `repeat` (docs/testbed.md) is a series of transfers of `bytes` bytes from the
server to the client, as a download does. `repeat.connection` says how they use TCP:

* ``new`` (the default): each transfer is a new TCP connection, so every transfer starts in
  slow start, and a short one (Andrew & Hanly, CLAMP, §V-H: 4000 bytes) is over before it
  leaves it; to a router that tells flows apart by their addresses and ports, each file is
  a new flow.
* ``reuse``: the client opens one connection and fetches the files over it one after
  another, as an ns-2 FTP agent sends file after file over its one TCP agent (Wu, Gong &
  Williamson, §5.2: each host downloads its files); to such a router the host's files are
  one flow, whose attained service grows with every file. For each file the client sends a
  request (REQUEST) and reads exactly `bytes` bytes; the server answers every request with
  `bytes` bytes. The connection's window carries over from one file to the next (Linux
  restarts it after an idle RTO, net.ipv4.tcp_slow_start_after_idle). A connection that
  fails is replaced by a new one for the next transfer.

Between two transfers the client is idle for a fixed time or an exponential one of a given
mean (drawn reproducibly from the run's seed and the flow's id, idle_times()), until the
flow's stop time, `count` transfers, or SIGTERM (sent by the runner once the flows named in
`repeat.until_flows_end` have ended: Wu et al.'s small files "repeated over and over until
all large file transfers are finished"); a transfer cut by the stop time or the signal is
recorded with complete 0, and none starts after it.

iperf3 cannot do this: each of its runs opens a control connection first and spends about
a second on it, which would dwarf a 4000-byte transfer. So the testbed runs this module
in the namespaces, as two programs:

* ``python -m oppsched.testbed.transfers serve`` in the server's namespace listens on the flow's
  port. ``new``: on every accepted connection it sends `bytes` bytes, shuts its side down
  (the file ends: EOF), waits for the client to close, and writes one row to
  ``transfers.<id>.server.csv`` (times on CLOCK_MONOTONIC, as it starts before the run's
  t0; the sender's tcp_info at the end: smoothed RTT, retransmissions). ``--reuse``: it
  answers each request on a connection with `bytes` bytes and writes one row per file
  once the client has it all (at its next request, or as it closes): `accepted_mono_s`
  the request, `sent_mono_s` the file handed to the kernel, `closed_mono_s` the next
  request; `bytes_sent` that file's, `total_retrans` the retransmissions since the
  previous file's row (their sum is the connection's); `transfer` the file's number on
  its connection.
* ``python -m oppsched.testbed.transfers fetch`` in the client's namespace writes one row per
  transfer to ``transfers.<id>.csv``: start (the connect call; reused: the request),
  connected (reused: the start, connect time 0), first byte, last byte (EOF; reused: the
  file's last byte), bytes, duration, connect time, complete, the idle time that follows,
  the local port (one for all the files of a reused connection). Times are seconds after
  the run's t0 (CLOCK_MONOTONIC, the clock of slots.csv).

summarize() turns the client's rows into the per-flow figures of summary.json.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

from oppsched.rowtrace import RowTrace

# Only the standard library at import: the programs start at a flow's start time, and
# numpy/pandas would add most of a second on a busy machine (summarize() imports them).

CLIENT_COLUMNS = ("transfer", "start_s", "connected_s", "first_byte_s", "end_s", "duration_s",
                  "connect_time_s", "bytes", "complete", "idle_after_s", "local_port", "error")
SERVER_COLUMNS = ("conn", "peer_port", "accepted_mono_s", "sent_mono_s", "closed_mono_s",
                  "bytes_sent", "rtt_ms", "total_retrans", "error", "transfer")
CONNECTIONS = ("new", "reuse")
# What the client of a reused connection sends for each file (any few bytes would do: the
# server reads exactly this many, so that requests are never read as parts of two).
REQUEST = b"get\n"
RECV_CHUNK = 1 << 16
# After a failed connect (refused, unreachable), wait at least this long before the next
# attempt, so that a flow with idle 0 does not spin.
RETRY_S = 0.1


def client_csv(rundir: Path, flow_id: str) -> Path:
    return Path(rundir) / f"transfers.{flow_id}.csv"


def server_csv(rundir: Path, flow_id: str) -> Path:
    return Path(rundir) / f"transfers.{flow_id}.server.csv"


# ----------------------------------------------------------------------------------------
# Idle times


def idle_times(seed: int, flow_id: str, idle_s: float | None,
               idle_mean_s: float | None) -> Iterator[float]:
    """The idle times after each transfer, forever: idle_s each time, or exponential draws
    of mean idle_mean_s from a generator seeded by the run's seed and the flow's id (the
    same run seed and id give the same times; another flow of the run gets its own
    stream). Python's `random` is used because it guarantees that random() repeats its
    sequence for a seed across versions; the draw is the inverse CDF, -mean ln(1 - U)."""
    if idle_mean_s is None:
        fixed = float(idle_s or 0.0)
        while True:
            yield fixed
    if not idle_mean_s > 0:
        raise ValueError(f"idle_mean_s: {idle_mean_s!r} is not > 0")
    # The key keeps the module's former name, oppsched.transfers: the idle times of a seed
    # stay those of every run made before the package was grouped.
    rng = random.Random(f"oppsched.transfers/{int(seed)}/{flow_id}")
    while True:
        yield -idle_mean_s * math.log(1.0 - rng.random())


# ----------------------------------------------------------------------------------------
# The programs


def _now_s(t0_ns: int) -> float:
    return (time.monotonic_ns() - t0_ns) / 1e9


# The exit status of `serve` and `fetch` when rows of their CSV were lost to failed writes
# (a full disk): the runner's summary names the CSV (experiments/testbed/traces.py), from
# this status even when the log line with the counts could not be written either.
EXIT_ROWS_LOST = 3


class _Records:
    """A CSV written row by row (each row written at once, so that a cut run keeps every
    finished row). A write that fails (a full disk) loses that row, counted, and the file
    keeps whole rows only (oppsched/rowtrace.py); close() says so on stderr."""

    def __init__(self, path: Path, columns):
        self.columns = list(columns)
        self.t = RowTrace(path, self.columns, buffer_bytes=0)
        self.lock = threading.Lock()

    def add(self, row: dict) -> None:
        with self.lock:
            self.t.row(["" if row.get(c) is None else row.get(c) for c in self.columns])

    @property
    def lost(self) -> bool:
        return self.t.errors > 0

    def close(self) -> None:
        with self.lock:
            self.t.close()
            if self.t.errors:
                print(f"trace write errors: {self.t.path.name}: {self.t.errors} write(s) failed, "
                      f"{self.t.rows_lost} row(s) lost (a full or failing disk)",
                      file=sys.stderr, flush=True)


def _family(addr: str) -> int:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def _set_cc(sock: socket.socket, cc: str | None) -> None:
    if cc:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())


def tcp_info_rtt_retrans(sock: socket.socket) -> tuple[float | None, int | None]:
    """(smoothed RTT in ms, total retransmitted segments) of a connected socket, from
    struct tcp_info (linux/tcp.h: tcpi_rtt in µs at byte 68, tcpi_total_retrans at 100)."""
    try:
        b = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except OSError:
        return None, None
    if len(b) < 104:
        return None, None
    return struct.unpack_from("I", b, 68)[0] / 1000.0, struct.unpack_from("I", b, 100)[0]


def _read_exactly(conn: socket.socket, n: int) -> bytes:
    """n bytes from conn, or fewer if the peer closes first (EOF)."""
    out = b""
    while len(out) < n:
        b = conn.recv(n - len(out))
        if not b:
            break
        out += b
    return out


def _send_file(conn: socket.socket, payload: memoryview, nbytes: int, row: dict) -> None:
    left = nbytes
    while left > 0:
        n = conn.send(payload[:min(left, len(payload))])
        left -= n
        row["bytes_sent"] += n


def serve(args) -> int:
    """Sends args.bytes bytes on every accepted connection, then EOF (with --reuse: on every
    request of a connection); one thread per connection."""
    t0 = 0  # the server starts before the run's t0: its times are CLOCK_MONOTONIC seconds
    fam = _family(args.bind)
    ls = socket.socket(fam, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _set_cc(ls, args.cc)
    ls.bind((args.bind, args.port))
    ls.listen(128)
    rec = _Records(Path(args.records), SERVER_COLUMNS) if args.records else None
    payload = memoryview(bytes(min(args.bytes, 1 << 20)))
    reuse = bool(getattr(args, "reuse", False))
    print(f"serve: listening on {args.bind} port {args.port}, {args.bytes} bytes per "
          f"{'request' if reuse else 'connection'}", flush=True)

    def blank(k: int, peer, j: int) -> dict:
        return {"conn": k, "peer_port": peer[1], "accepted_mono_s": _now_s(t0),
                "sent_mono_s": None, "closed_mono_s": None, "bytes_sent": 0, "rtt_ms": None,
                "total_retrans": None, "error": "", "transfer": j}

    def one(conn: socket.socket, peer, k: int) -> None:
        row = blank(k, peer, 0)
        try:
            _set_cc(conn, args.cc)
            _send_file(conn, payload, args.bytes, row)
            conn.shutdown(socket.SHUT_WR)
            row["sent_mono_s"] = _now_s(t0)
            conn.settimeout(args.linger_s)
            while conn.recv(RECV_CHUNK):  # the client closes once it has read to EOF
                pass
            row["closed_mono_s"] = _now_s(t0)
        except OSError as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            row["rtt_ms"], row["total_retrans"] = tcp_info_rtt_retrans(conn)
            conn.close()
            if rec is not None:
                rec.add(row)

    def reused(conn: socket.socket, peer, k: int) -> None:
        # A file's row is written once the client has all of it (its next request, or its
        # close), so that its retransmissions are all counted in it: the connection's
        # tcpi_total_retrans less the count at the previous row.
        retrans_before = 0
        sent = None  # the row of the file last sent, not yet written
        j = 0

        def write(row: dict) -> None:
            nonlocal retrans_before
            row["rtt_ms"], total = tcp_info_rtt_retrans(conn)
            if total is not None:
                row["total_retrans"] = total - retrans_before
                retrans_before = total
            if rec is not None:
                rec.add(row)

        try:
            _set_cc(conn, args.cc)
            while True:
                req = _read_exactly(conn, len(REQUEST))
                if sent is not None:
                    sent["closed_mono_s"] = _now_s(t0)
                    write(sent)
                    sent = None
                if not req:
                    break  # the client closed between files
                row = blank(k, peer, j)
                if req != REQUEST:
                    row["error"] = f"bad request {req!r} (expected {REQUEST!r})"
                    write(row)
                    break
                sent = row
                _send_file(conn, payload, args.bytes, row)
                row["sent_mono_s"] = _now_s(t0)
                j += 1
        except OSError as exc:
            if sent is not None:
                sent["error"] = f"{type(exc).__name__}: {exc}"
                write(sent)
        finally:
            conn.close()

    k = 0
    try:
        while True:
            conn, peer = ls.accept()
            threading.Thread(target=reused if reuse else one, args=(conn, peer, k),
                             daemon=True).start()
            k += 1
    except SystemExit:
        pass
    finally:
        ls.close()
        if rec is not None:
            rec.close()
    print(f"serve: {k} connections accepted", flush=True)
    return EXIT_ROWS_LOST if rec is not None and rec.lost else 0


STOP_TIME = "cut at the stop time"
STOPPED = "stopped by SIGTERM"


def fetch(args) -> int:
    """Transfers one after another until the stop time, `count` or SIGTERM; a row each.
    With --reuse, over one connection while it lasts (a request, then exactly `bytes`
    bytes), else a new connection each, read to EOF."""
    t0 = args.t0_ns if args.t0_ns is not None else time.monotonic_ns()
    stop_ns = args.stop_at_ns if args.stop_at_ns is not None else None
    reuse = bool(getattr(args, "reuse", False))
    rec = _Records(Path(args.records), CLIENT_COLUMNS)
    draws = idle_times(args.seed, args.flow_id, args.idle_s, args.idle_mean_s)
    buf = bytearray(RECV_CHUNK)
    fam = _family(args.connect)
    done = failed = connects = 0
    k = 0
    conn: socket.socket | None = None  # the connection a reused flow fetches over

    def left_s() -> float | None:
        return None if stop_ns is None else (stop_ns - time.monotonic_ns()) / 1e9

    def timeout() -> None:
        rem = left_s()
        if rem is not None:
            if rem <= 0:
                raise TimeoutError("stop time reached")
            conn.settimeout(rem)

    try:
        while args.count is None or k < args.count:
            # The start is read once, before the stop check, so that no transfer starts
            # (and is recorded as starting) at or after the stop time.
            start_ns = time.monotonic_ns()
            if stop_ns is not None and start_ns >= stop_ns:
                break
            row = {c: None for c in CLIENT_COLUMNS}
            row.update(transfer=k, bytes=0, complete=0, error="")
            row["start_s"] = (start_ns - t0) / 1e9
            got = 0
            stop = False
            try:
                if conn is None:
                    conn = socket.socket(fam, socket.SOCK_STREAM)
                    rem = left_s()
                    conn.settimeout(rem if rem is None or rem > 0 else 1e-3)
                    connects += 1
                    conn.connect((args.connect, args.port))
                    row["connected_s"] = _now_s(t0)
                else:  # the reused connection: no connect, connect time 0
                    row["connected_s"] = row["start_s"]
                row["local_port"] = conn.getsockname()[1]
                if reuse:
                    timeout()
                    conn.sendall(REQUEST)
                # new: to EOF; reuse: exactly `bytes` (the next file follows on the stream)
                want = args.bytes if reuse else None
                while want is None or got < want:
                    timeout()
                    n = conn.recv_into(buf, RECV_CHUNK if want is None
                                       else min(RECV_CHUNK, want - got))
                    if n == 0:
                        break
                    if got == 0:
                        row["first_byte_s"] = _now_s(t0)
                    got += n
                row["end_s"] = _now_s(t0)
                row["complete"] = int(got == args.bytes)
                if got != args.bytes:
                    row["error"] = f"EOF after {got} of {args.bytes} bytes"
            except (OSError, TimeoutError) as exc:
                row["end_s"] = _now_s(t0)
                row["error"] = (STOP_TIME if isinstance(exc, (TimeoutError, socket.timeout))
                                else f"{type(exc).__name__}: {exc}")
            except SystemExit:  # SIGTERM mid-transfer: recorded as cut, the flow ends
                row["end_s"] = _now_s(t0)
                row["error"] = STOPPED
                stop = True
            finally:
                # A new-connection transfer closes its connection; a reused one is kept
                # while its transfers succeed, and replaced after a failure.
                if conn is not None and (not reuse or not row["complete"] or stop):
                    conn.close()
                    conn = None
            row["bytes"] = got
            row["duration_s"] = row["end_s"] - row["start_s"]
            if row["connected_s"] is not None:
                row["connect_time_s"] = row["connected_s"] - row["start_s"]
            k += 1
            done += row["complete"]
            failed += 0 if row["complete"] else 1
            idle = next(draws)
            if row["connected_s"] is None:
                idle = max(idle, RETRY_S)
            row["idle_after_s"] = idle
            # SIGTERM (repeat.until_flows_end, the run's end) is held while the row is
            # written, so that it never leaves half a row; it acts once the row is out.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            try:
                rec.add(row)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            if stop or row["error"] == STOP_TIME:
                break
            rem = left_s()
            if rem is not None and idle >= rem:
                break
            if idle > 0 and (args.count is None or k < args.count):
                time.sleep(idle)
    except SystemExit:
        pass
    finally:
        if conn is not None:
            conn.close()
        rec.close()
    print(f"fetch: {k} transfers, {done} complete, {failed} not, {connects} connections",
          flush=True)
    return EXIT_ROWS_LOST if rec.lost else 0


def _sigterm(signum, frame):
    raise SystemExit(0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oppsched.testbed.transfers",
                                 description="repeated TCP transfers (docs/testbed.md)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="send BYTES on every accepted connection")
    s.add_argument("--bind", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--bytes", type=int, required=True)
    s.add_argument("--cc", default=None, help="TCP congestion control")
    s.add_argument("--records", default=None, help="CSV, one row per connection")
    s.add_argument("--linger-s", type=float, default=30.0,
                   help="wait this long for the client to close after EOF")
    s.add_argument("--reuse", action="store_true",
                   help="answer every request on a connection with BYTES (repeat.connection "
                        "reuse); a row per file")
    f = sub.add_parser("fetch", help="connect, read to EOF, idle, again")
    f.add_argument("--connect", required=True)
    f.add_argument("--port", type=int, required=True)
    f.add_argument("--bytes", type=int, required=True, help="expected per transfer")
    f.add_argument("--records", required=True, help="CSV, one row per transfer")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--flow-id", default="")
    g = f.add_mutually_exclusive_group()
    g.add_argument("--idle-s", type=float, default=None)
    g.add_argument("--idle-mean-s", type=float, default=None)
    f.add_argument("--count", type=int, default=None)
    f.add_argument("--stop-at-ns", type=int, default=None, help="CLOCK_MONOTONIC ns")
    f.add_argument("--t0-ns", type=int, default=None, help="CLOCK_MONOTONIC ns of time 0")
    f.add_argument("--reuse", action="store_true",
                   help="fetch every file over one connection: a request, then BYTES "
                        "(repeat.connection reuse)")
    args = ap.parse_args(argv)
    if args.bytes < 1:
        ap.error(f"--bytes: {args.bytes} is not >= 1")
    if args.cmd == "fetch" and args.idle_mean_s is not None and not args.idle_mean_s > 0:
        ap.error(f"--idle-mean-s: {args.idle_mean_s} is not > 0")
    signal.signal(signal.SIGTERM, _sigterm)
    return serve(args) if args.cmd == "serve" else fetch(args)


# ----------------------------------------------------------------------------------------
# Results


def read_client(path: Path):
    """The client's rows, or None if the file is missing (pandas errors propagate)."""
    import pandas as pd
    p = Path(path)
    if not p.exists():
        return None
    df = pd.read_csv(p)
    for c in CLIENT_COLUMNS:
        if c not in df:
            df[c] = pd.Series(dtype=float)
    return df


def summarize(df, nbytes: int, server=None, from_s: float | None = None) -> dict:
    """Per-flow figures of summary.json from the client's rows (and the server's):
    `completed` (transfers that received all `nbytes`), `incomplete` (cut at the stop
    time, or ended short), `failed_connects`; time per completed transfer (connect call to
    EOF): mean / median / p95 / max, coefficient of variation (`time_cov`, sample standard
    deviation / mean); mean connect time; `goodput_bps` = bytes of the
    completed transfers over the time spent in them (idle times left out); `bytes` (every
    byte received, incomplete transfers included); `throughput_bps` = those bytes over the
    span from the first transfer's start to the last one's end (a flow whose transfers
    starve, none completing, still shows what it got: Wu et al.'s long transfers under
    T-LAS); the idle times the client drew
    (`idle_mean_s`, count); the sender's mean smoothed RTT and retransmissions. With
    `from_s` (s after t0: analysis.warmup_s), transfers that start
    before it are left out of the figures (`warmup_excluded` counts them)."""
    import numpy as np
    out = {"bytes_per_transfer": int(nbytes), "attempted": 0, "completed": 0, "incomplete": 0,
           "failed_connects": 0, "time_mean_s": None, "time_median_s": None,
           "time_p95_s": None, "time_max_s": None, "time_cov": None,
           "connect_time_mean_s": None,
           "goodput_bps": None, "throughput_bps": None, "bytes": 0, "idle_mean_s": None,
           "idles": 0,
           "rtt_ms_mean": None, "retransmits": None, "warmup_excluded": 0}
    if df is None:
        return out
    for c in CLIENT_COLUMNS:
        if c not in df:
            df[c] = np.nan
    if from_s is not None and len(df):
        keep = df["start_s"].astype(float) >= from_s
        out["warmup_excluded"] = int((~keep).sum())
        df = df[keep]
    ok = df[df["complete"].fillna(0).astype(int) == 1]
    out["attempted"] = int(len(df))
    out["completed"] = int(len(ok))
    out["failed_connects"] = int(df["connected_s"].isna().sum())
    out["incomplete"] = out["attempted"] - out["completed"] - out["failed_connects"]
    out["bytes"] = int(df["bytes"].fillna(0).sum())
    if len(df):
        span = float(df["end_s"].astype(float).max() - df["start_s"].astype(float).min())
        if span > 0:
            out["throughput_bps"] = 8.0 * out["bytes"] / span
    if len(ok):
        d = ok["duration_s"].astype(float)
        out["time_mean_s"] = float(d.mean())
        out["time_median_s"] = float(d.median())
        out["time_p95_s"] = float(np.percentile(d, 95))
        out["time_max_s"] = float(d.max())
        # Coefficient of variation of the transfer times (Wu, Gong & Williamson, Figs. 7, 11).
        if len(d) > 1 and d.mean() > 0:
            out["time_cov"] = float(d.std(ddof=1) / d.mean())
        out["connect_time_mean_s"] = float(ok["connect_time_s"].astype(float).mean())
        if d.sum() > 0:
            out["goodput_bps"] = float(8.0 * ok["bytes"].sum() / d.sum())
    # The idle times that were waited out: every one but the last (after the last
    # transfer the flow ends, whatever was drawn).
    idles = df["idle_after_s"].dropna().astype(float).iloc[:-1]
    if len(idles):
        out["idle_mean_s"] = float(idles.mean())
        out["idles"] = int(len(idles))
    if server is not None and len(server):
        r = server["rtt_ms"].dropna()
        out["rtt_ms_mean"] = float(r.mean()) if len(r) else None
        out["retransmits"] = int(server["total_retrans"].fillna(0).sum())
    return out


if __name__ == "__main__":
    sys.exit(main())
