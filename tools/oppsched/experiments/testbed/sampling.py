"""What the runner measures while the flows run: the receiving sockets' own byte counts
(:class:`SocketSampler`, flow.<id>.socket.csv) and each flow's live goodput, RTT and cwnd
for the progress line and flows.live.json (the `--metrics` endpoint)."""

from __future__ import annotations

import errno
import json
import os
import signal
import time
from pathlib import Path

from oppsched.experiments.testbed.processes import ProcTable
from oppsched.paths import write_atomic
from oppsched.safefs import open_beneath
from oppsched.testbed.flows import (SOCKET_COLUMNS, TCP_INFO_COLUMNS, data_connections,
                                    parse_ss_bytes_acked, parse_ss_sender_info,
                                    parse_ss_sockets, parse_ss_tcp_info, socket_csv,
                                    tcp_info_csv)
from oppsched.testbed.nsbase import NetnsError


def _live_goodput(tb, plans, last: dict, now: float, info: dict | None = None) \
        -> dict[str, float]:
    """Goodput per flow since the previous call, from the senders' bytes_acked (ss -ti):
    in the server's namespace, an upstream flow's in the client's (peer port: the flow's).
    `info`, if given, gets each flow's data connection's RTT and cwnd from the same output
    ({flow id: {"rtt_ms", "cwnd_bytes"}})."""
    acked: dict[int, int] = {}
    tcp_info: dict[int, dict] = {}
    senders = {}
    for p in plans:
        if not p.repeat:
            node = tb.clients[p.device_index] if p.direction == "up" else tb.servers[p.server_index]
            senders[node.ns.name] = node
    for node in senders.values():
        cp = node.ns.run(["ss", "-Htin"], check=False, timeout=5)
        acked.update(parse_ss_bytes_acked(cp.stdout))
        if info is not None:
            tcp_info.update(parse_ss_sender_info(cp.stdout))
    out = {}
    for p in plans:
        if p.started_at_s is None:
            continue
        if info is not None and p.port in tcp_info:
            info[p.id] = tcp_info[p.port]
        b = acked.get(p.port)
        prev_b, prev_t = last.get(p.id, (0, p.started_at_s))
        if b is None:
            continue
        if now > prev_t and b >= prev_b:
            out[p.id] = 8.0 * (b - prev_b) / (now - prev_t)
        last[p.id] = (b, now)
    return out


LIVE_FLOWS = "flows.live.json"


def _write_live_flows(rundir, now: float, rates: dict, info: dict) -> None:
    """flows.live.json: each flow's goodput since the last progress line and its sender's
    RTT and cwnd (tcp_info) at this one, for the `--metrics` endpoint (oppsched/run/live.py).
    Best effort: a full disk skips it."""
    flows = {fid: {"goodput_bps": rates.get(fid), **info.get(fid, {})}
             for fid in set(rates) | set(info)}
    try:
        write_atomic(Path(rundir) / LIVE_FLOWS,
                     json.dumps({"t_s": round(now, 3), "flows": flows}) + "\n")
    except OSError:
        pass


# Bytes delivered per flow as its receiving sockets count them (flows.socket_delivered):
# polled often enough that the count at a flow's planned end is interpolated over at most
# this many seconds, rarely enough that one `ss` per receiving namespace stays a small load
# next to the daemons on a 2-core machine.
SOCKET_POLL_S = 0.5


class _FlowTraces:
    """One CSV trace per flow, written a whole row at a time by the runner (root) into the
    run folder: `path_of(rundir, flow id)` with `columns` as its header."""

    def __init__(self, rundir: Path, path_of, columns: tuple[str, ...]):
        self.rundir = Path(rundir)
        self.path_of = path_of
        self.columns = columns
        self.files: dict[str, int] = {}  # flow id -> descriptor of its trace
        self.sizes: dict[str, int] = {}  # flow id -> bytes of whole rows written
        # Rows that could not be written (a full disk), per file: run.json
        # `trace_write_errors`, summary.json errors naming the trace (traces.write_errors).
        self.write_errors: dict[str, dict] = {}

    def _open(self, fid: str) -> None:
        # Root writes into a folder the run user owns: a new file, never through a link
        # planted in its place (the run folder was cleaned of old traces).
        fd = open_beneath(self.rundir, self.path_of(self.rundir, fid).name,
                          os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        self.files[fid], self.sizes[fid] = fd, 0
        self._write_row(fid, ",".join(self.columns) + "\n", header=True)

    def _write_row(self, fid: str, line: str, header: bool = False) -> None:
        """One row, written at once (unbuffered: nothing is lost when the runner stops). A
        write that fails (a full disk) loses the row, counted per file, and the file is cut
        back to its last whole row, as the daemons' writers do (csv_writer.h); the run goes
        on. A header that could not be written is written before the next row."""
        fd = self.files[fid]
        if self.sizes[fid] == 0 and not header:
            line = ",".join(self.columns) + "\n" + line
        data = line.encode()
        try:
            n = os.write(fd, data)
            if n != len(data):
                raise OSError(errno.ENOSPC, f"short write ({n} of {len(data)} bytes)")
            self.sizes[fid] += n
        except OSError as exc:
            e = self.write_errors.setdefault(self.path_of(self.rundir, fid).name,
                                             {"errors": 0, "rows_lost": 0, "error": str(exc)})
            e["errors"] += 1
            e["rows_lost"] += line.count("\n") - (1 if self.sizes[fid] == 0 else 0)
            try:
                os.ftruncate(fd, self.sizes[fid])
                os.lseek(fd, self.sizes[fid], os.SEEK_SET)
            except OSError:
                pass

    def errors_for_record(self) -> list[dict]:
        return [{"file": k, **v} for k, v in sorted(self.write_errors.items())]

    def close(self) -> None:
        for fd in self.files.values():
            os.close(fd)
        self.files = {}


class TcpInfoSampler(_FlowTraces):
    """capture.tcp_info: each iperf3 flow's sender, as its kernel sees it, into
    flow.<id>.tcp_info.csv (TCP_INFO_COLUMNS): one row per poll of `ss -Htin` in the
    sending namespace (the server's; an upstream flow's client's), every SOCKET_POLL_S,
    of the flow's data connection: cwnd and ssthresh (segments), RTT, its variation and
    the retransmission timeout, the reordering estimate (the duplicate ACKs that make a
    loss), retransmissions (outstanding, total), lost and unacknowledged segments."""

    def __init__(self, tb, plans, rundir: Path):
        super().__init__(rundir, tcp_info_csv, TCP_INFO_COLUMNS)
        self.by_ns: dict[str, tuple] = {}  # ns name -> (node, {peer port: plan})
        self.chosen: dict[str, dict] = {}  # ns name -> data_connections' memory
        self.warnings: list[str] = []
        for p in plans:
            if p.repeat or p.transport == "wrc":
                continue
            node = tb.clients[p.device_index] if p.sender_in_client else tb.servers[p.server_index]
            self.by_ns.setdefault(node.ns.name, (node, {}))[1][p.port] = p
            self._open(p.id)

    def poll(self, now: float, t0: float) -> None:
        """One row per flow whose data connection `ss` shows; t_s after t0 (monotonic)."""
        for name, (node, ports) in self.by_ns.items():
            try:
                cp = node.ns.run(["ss", "-Htin"], check=False, timeout=5)
            except NetnsError as exc:
                self.warnings.append(f"tcp_info poll at {now:.1f} s: {exc}")
                continue
            t = f"{time.monotonic() - t0:.3f}"
            rows = data_connections(parse_ss_tcp_info(cp.stdout), self.chosen.setdefault(name, {}))
            for port, row in rows.items():
                p = ports.get(port)
                if p is not None:
                    self._write_row(p.id, ",".join([t] + [row[c] for c in TCP_INFO_COLUMNS[1:]])
                                    + "\n")


class SocketSampler(_FlowTraces):
    """The receiving sockets of every iperf3 flow, counted by the kernel (tcp_info
    bytes_received), into flow.<id>.socket.csv: `poll` rows from `ss -Htin` in the
    receiving namespace (the client's; an upstream flow's server's) every SOCKET_POLL_S
    and whenever a flow ends, and at the end the `closed` rows that `ss -HtinE` (one per
    receiving namespace, run for the whole run) printed as each socket was destroyed: its
    final count, which no poll may have caught. With `tcp_info`, the senders too
    (TcpInfoSampler), at the same polls."""

    def __init__(self, tb, plans, rundir: Path, t0: float, tcp_info: bool = False):
        super().__init__(rundir, socket_csv, SOCKET_COLUMNS)
        self.t0 = t0
        self.next_s = 0.0
        self.by_ns: dict[str, tuple] = {}  # ns name -> (node, {port: plan})
        self.events: list[tuple] = []  # (proc name, log path, {port: plan})
        self.warnings: list[str] = []
        for p in plans:
            if p.repeat or p.transport == "wrc":
                continue
            node = tb.servers[p.server_index] if p.sender_in_client else tb.clients[p.device_index]
            self.by_ns.setdefault(node.ns.name, (node, {}))[1][p.port] = p
            self._open(p.id)
        self.tcp_info = TcpInfoSampler(tb, plans, rundir) if tcp_info else None

    def start_events(self, spawn) -> None:
        """`ss -HtinE` in each receiving namespace, line-buffered (a stop loses nothing)
        into its log, logs/ss-closed.<node>.log (started before the receivers listen)."""
        for node, ports in self.by_ns.values():
            name = f"ss-closed.{node.name}"
            proc = spawn(node.ns, ["stdbuf", "-oL", "ss", "-HtinE"], name, "socket-events")
            self.events.append((name, proc.log_path, ports))

    def _write(self, t: str, rows: list[dict], ports: dict, event: str) -> None:
        for r in rows:
            p = ports.get(r["local_port"])
            if p is not None:
                self._write_row(p.id, f"{t},{event},{r['peer_port']},{r['bytes_received']},"
                                      f"{r['bytes_sent']}\n")

    def errors_for_record(self) -> list[dict]:
        mine = super().errors_for_record()
        return mine + (self.tcp_info.errors_for_record() if self.tcp_info else [])

    @property
    def has_write_errors(self) -> bool:
        return bool(self.write_errors or (self.tcp_info and self.tcp_info.write_errors))

    def poll(self, now: float, force: bool = False) -> None:
        if not force and now < self.next_s:
            return
        self.next_s = now + SOCKET_POLL_S
        for node, ports in self.by_ns.values():
            try:
                cp = node.ns.run(["ss", "-Htin"], check=False, timeout=5)
            except NetnsError as exc:
                # one poll missed (a loaded machine): the counts around it are still
                # interpolated; run.json's warnings say so
                self.warnings.append(f"socket poll at {now:.1f} s: {exc}")
                continue
            # the time the counts were read, not the time the poll was due
            self._write(f"{time.monotonic() - self.t0:.3f}", parse_ss_sockets(cp.stdout),
                        ports, "poll")
        if self.tcp_info is not None:
            self.tcp_info.poll(now, self.t0)

    def finish(self, procs: "ProcTable") -> None:
        """Stops the `ss -E` listeners (after the receivers ended: their sockets are
        destroyed by then) and appends what they printed, then closes the traces."""
        for name, log, ports in self.events:
            procs.stop(name, 2.0, signal.SIGINT)
            try:
                fd = open_beneath(self.rundir, Path(log).relative_to(self.rundir), os.O_RDONLY)
                with os.fdopen(fd, "r", errors="replace") as f:
                    text = f.read()
            except (OSError, ValueError) as exc:
                self.warnings.append(f"{Path(log).name}: {exc}: final socket counts missing")
                text = ""
            self._write("", parse_ss_sockets(text), ports, "closed")
        if self.tcp_info is not None:
            self.warnings.extend(self.tcp_info.warnings)
        self.close()

    def close(self) -> None:
        super().close()
        if self.tcp_info is not None:
            self.tcp_info.close()
