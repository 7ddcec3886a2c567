"""Running a testbed experiment: run() checks the daemons' configuration files, builds the
namespaces, starts apd, clients and PHY and waits until each is ready (endpoints bound,
pings crossing the radio), starts the captures and the flows at their times (iperf3, the
repeated transfers of oppsched.testbed.transfers, or oppsched-wrc for transport wrc), and
stops everything in order (flows, PHY, daemons with SIGTERM so they flush their traces,
captures), recording every process (processes.json) and the run (run.json)."""

from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from oppsched.testbed import daemonconf, keys
from oppsched.config import read_yaml
from oppsched.experiments.testbed.programs import TestbedError, find_programs, phy_env
from oppsched.experiments.testbed.reliability import (APD_EXIT_WATCHDOG, RunnerWatchdog,
                                                      chaos_bound, chaos_config, exit_meaning,
                                                      restart_apd)
from oppsched.experiments.testbed.schema import check, integrity_opt_out
from oppsched.experiments.testbed.traces import PARTIAL, recover_all
from oppsched.experiments.testbed.topology import (daemon_users, flow_plans, flow_route_commands,
                                                   tcp_override_sysctls, testbed_topology,
                                                   write_wrc_configs)
from oppsched.testbed.flows import (SOCKET_COLUMNS, FlowPlan, parse_ss_bytes_acked, parse_ss_sender_info,
                            parse_ss_sockets, socket_csv, timed_iperf)
from oppsched.testbed.nsbase import NetnsError, new_run_id, wait_for
from oppsched.testbed.privsep import (TCPDUMP_BOUNDING, RunUser, fifo_allowed, hand_back,
                                      invoking_user)
from oppsched.testbed.runview import RunView
from oppsched.paths import write_atomic
from oppsched.safefs import UnsafePath, open_beneath, open_dir, remove_symlinks
from oppsched.testbed.links import attach_spm_marker
from oppsched.testbed.wired import Testbed, ensure_congestion_control


# ----------------------------------------------------------------------------------------
# Process bookkeeping: CPU seconds and exit codes

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float | None:
    """utime + stime of a live process (/proc/PID/stat fields 14 and 15), seconds, with its
    live children's (a program under oppsched.testbed.capture_guard is the guard's child)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    total = (int(fields[11]) + int(fields[12])) / CLK_TCK
    try:
        kids = [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
                for c in (t / "children").read_text().split()]
    except OSError:
        kids = []
    for k in kids:
        total += proc_cpu_s(k) or 0.0
    return total


def reap(proc) -> tuple[int, float] | None:
    """If `proc` (a namespace.Proc we started) has exited, reaps it with wait4 and returns
    (exit code, CPU seconds from its rusage); None while it runs. Sets the Popen's
    returncode, so the Session sees it as finished."""
    if proc.popen.returncode is not None:
        return None
    try:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if pid == 0:
        return None
    rc = os.waitstatus_to_exitcode(status)
    proc.popen.returncode = rc
    return rc, ru.ru_utime + ru.ru_stime


class ProcTable:
    """Every process of the run, with its role, CPU and exit code, for processes.json."""

    def __init__(self):
        self.rows: dict[str, dict] = {}
        self.procs: dict[str, object] = {}

    def add(self, proc, role: str) -> None:
        self.procs[proc.name] = proc
        self.rows[proc.name] = {"name": proc.name, "role": role, "pid": proc.pid,
                                "netns": proc.ns.name, "argv": proc.argv,
                                "sched_fifo": getattr(proc, "sched_fifo", 0),
                                "log": str(proc.log_path) if proc.log_path else None,
                                "cpu_s_before_stop": None, "cpu_s": None, "exit_code": None,
                                "started_mono_s": time.monotonic(), "ended_mono_s": None}

    def poll(self, name: str) -> bool:
        """True if the process has ended (and is now recorded)."""
        r = reap(self.procs[name])
        if r is not None:
            self.rows[name]["exit_code"], self.rows[name]["cpu_s"] = r
            self.rows[name]["ended_mono_s"] = time.monotonic()
            if self.rows[name]["cpu_s_before_stop"] is None:
                self.rows[name]["cpu_s_before_stop"] = r[1]
            return True
        return self.procs[name].popen.returncode is not None

    def wait(self, name: str, timeout: float) -> bool:
        """Waits up to `timeout` s for the process to end by itself; True if it did."""
        deadline = time.monotonic() + timeout
        while not self.poll(name):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def sample(self, name: str) -> None:
        """CPU now, before the process is stopped (the figure the report uses)."""
        c = proc_cpu_s(self.procs[name].pid)
        if c is not None and self.procs[name].popen.returncode is None:
            self.rows[name]["cpu_s_before_stop"] = c

    def stop(self, name: str, timeout: float, sig: int = signal.SIGTERM) -> int | None:
        """Samples CPU, sends `sig`, waits up to `timeout` s for a clean exit (reaping it
        with its rusage), then SIGKILL. Returns the exit code."""
        p = self.procs[name]
        if self.poll(name):
            return self.rows[name]["exit_code"]
        self.sample(name)
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.poll(name):
                return self.rows[name]["exit_code"]
            time.sleep(0.01)
        self.rows[name]["killed"] = True
        p.stop(0.5)  # SIGTERM + SIGKILL to the group, waits
        self.poll(name)
        if self.rows[name]["exit_code"] is None:
            self.rows[name]["exit_code"] = p.popen.returncode
            self.rows[name]["ended_mono_s"] = time.monotonic()
        return self.rows[name]["exit_code"]

    def check_alive(self, names) -> None:
        for n in names:
            if self.poll(n):
                p = self.procs[n]
                code = self.rows[n]['exit_code']
                raise TestbedError(f"{n} exited with {code}{exit_meaning(n, code)} during the "
                                   "run" + (f":\n{p.log_tail()}" if p.log_tail() else ""))

    def to_json(self) -> list[dict]:
        return list(self.rows.values())


# ----------------------------------------------------------------------------------------
# run()

OUTPUT_GLOBS = ("*.pcap", "flow.*.json", "flow.*.socket.csv",
                "transfers.*.csv", "slots.csv", "packets.csv", "windows.*.csv",
                "medium.csv", "phy_slots.csv", "client.*.events.csv", "mcs_table.csv",
                "*.stats.json", "run.json", "processes.json", "apd.yaml", "client.*.yaml",
                "phy.yaml", "summary.json", "*.png", "wrc.*", "chaos.*", "*.killed.*",
                "*.partial", "*.crashed.*", "plugin.*.py", "plugin.*.so")


def _clean(rundir: Path) -> None:
    for g in OUTPUT_GLOBS:
        for p in rundir.glob(g):
            p.unlink()
    for d in ("logs", "zmq", "netns"):
        shutil.rmtree(rundir / d, ignore_errors=True)
    _release_space(rundir)


# Room kept for the end of a run whose disk fills up during it (docs/testbed.md,
# "Reliability"): a file of RESERVE_BYTES the runner allocates in the run folder at the
# start and removes before it stops the daemons, so that their last trace writes and final
# stats, the capture tools' last lines, run.json and summary.json still fit and say what
# was lost. Enough for those (tens of kB each) and the plots.
RESERVE_NAME = ".space-reserve"
RESERVE_BYTES = 8 << 20


def _reserve_space(rundir: Path) -> str | None:
    """Allocates the reserve (posix_fallocate: blocks, not a sparse file); a warning for
    run.json if it could not be (the disk is already that full)."""
    try:
        fd = open_beneath(rundir, RESERVE_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        return f"{RESERVE_NAME}: {exc}: no room kept for the end of the run"
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError as exc:
        return f"{RESERVE_NAME}: {exc}: no room kept for the end of the run"
    finally:
        os.close(fd)
    return None


def _release_space(rundir: Path) -> None:
    """Removes the reserve (unlink(2) relative to the folder follows no link)."""
    try:
        dfd = open_dir(rundir)
    except OSError:
        return
    try:
        os.unlink(RESERVE_NAME, dir_fd=dfd)
    except FileNotFoundError:
        pass
    finally:
        os.close(dfd)


def _wait_files(paths, what: str, timeout: float, procs: ProcTable, alive) -> None:
    def probe():
        procs.check_alive(alive)
        return all(Path(p).exists() for p in paths)
    wait_for(probe, timeout=timeout, what=what)


def _wait_log(proc, text: str, what: str, timeout: float) -> None:
    def probe():
        proc.check_alive()
        try:
            return text in proc.log_path.read_text(errors="replace")
        except OSError:
            return False
    wait_for(probe, timeout=timeout, what=what)


def _wait_radio(tb, timeout: float, procs: ProcTable, alive) -> float:
    """Pings every client (each family) from every server until each has answered once:
    proof that slots are granted, decoded and acknowledged end to end, and it fills the
    servers' neighbour caches. Returns the seconds it took."""
    t0 = time.monotonic()
    addrs = [c.addr4 for c in tb.clients if c.addr4] + [c.addr6 for c in tb.clients if c.addr6]
    todo = {(i, a) for i in range(len(tb.servers)) for a in addrs}
    deadline = t0 + timeout
    while todo:
        procs.check_alive(alive)
        if time.monotonic() > deadline:
            pairs = ", ".join(f"{tb.servers[i].name} -> {a}" for i, a in sorted(todo))
            raise TestbedError(f"radio not ready after {timeout:g} s: no ping reply for {pairs} "
                               "(see logs/apd.log, logs/phy.log, logs/client.*.log)")
        by_srv: dict[int, list[str]] = {}
        for i, a in todo:
            by_srv.setdefault(i, []).append(a)
        with ThreadPoolExecutor(max_workers=len(by_srv)) as pool:
            res = list(pool.map(lambda kv: (kv[0], tb.servers[kv[0]].ns.ping_many(
                kv[1], count=1, timeout=1.0)), by_srv.items()))
        for i, r in res:
            for a, rtts in r.items():
                if rtts and rtts[0] is not None:
                    todo.discard((i, a))
    return time.monotonic() - t0


def _until_flows_end(plans, pending: list, running: list, procs, t0: float) -> bool:
    """repeat.until_flows_end: a flow whose named flows have all ended is stopped (SIGTERM;
    oppsched.testbed.transfers records the transfer in progress as cut and starts none after), and
    one not started yet never starts: Wu, Gong & Williamson's small files, "repeated over
    and over until all large file transfers are finished" (§5.2). True if one was stopped."""
    by_id = {p.id: p for p in plans}

    def over(p) -> float | None:
        names = (p.repeat or {}).get("until_flows_end")
        if not names or any(by_id[n].ended_at_s is None for n in names):
            return None
        return max(by_id[n].ended_at_s for n in names)

    stopped = False
    for p in list(running):
        at = over(p)
        if at is None:
            continue
        procs.stop(p.starter_name, 3.0, signal.SIGTERM)
        p.ended_at_s = time.monotonic() - t0
        p.exit_code = procs.rows[p.starter_name]["exit_code"]
        p.extra["until_flows_end_s"] = at
        running.remove(p)
        stopped = True
    for p in list(pending):
        at = over(p)
        if at is not None:
            p.extra["until_flows_end_s"] = at
            p.extra["not_started"] = "its repeat.until_flows_end flows ended first"
            pending.remove(p)
    return stopped


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


class SocketSampler:
    """The receiving sockets of every iperf3 flow, counted by the kernel (tcp_info
    bytes_received), into flow.<id>.socket.csv: `poll` rows from `ss -Htin` in the
    receiving namespace (the client's; an upstream flow's server's) every SOCKET_POLL_S
    and whenever a flow ends, and at the end the `closed` rows that `ss -HtinE` (one per
    receiving namespace, run for the whole run) printed as each socket was destroyed: its
    final count, which no poll may have caught."""

    def __init__(self, tb, plans, rundir: Path, t0: float):
        self.t0 = t0
        self.rundir = Path(rundir)
        self.next_s = 0.0
        self.by_ns: dict[str, tuple] = {}  # ns name -> (node, {port: plan})
        self.files: dict[str, int] = {}  # flow id -> descriptor of its trace
        self.sizes: dict[str, int] = {}  # flow id -> bytes of whole rows written
        self.events: list[tuple] = []  # (proc name, log path, {port: plan})
        self.warnings: list[str] = []
        # Rows that could not be written (a full disk), per file: run.json
        # `trace_write_errors`, summary.json errors naming the trace (traces.write_errors).
        self.write_errors: dict[str, dict] = {}
        for p in plans:
            if p.repeat or p.transport == "wrc":
                continue
            node = tb.servers[p.server_index] if p.sender_in_client else tb.clients[p.device_index]
            self.by_ns.setdefault(node.ns.name, (node, {}))[1][p.port] = p
            # Root writes into a folder the run user owns: a new file, never through a
            # link planted in its place (the run folder was cleaned of old traces).
            fd = open_beneath(self.rundir, socket_csv(self.rundir, p.id).name,
                              os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            self.files[p.id], self.sizes[p.id] = fd, 0
            self._write_row(p.id, ",".join(SOCKET_COLUMNS) + "\n", header=True)

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

    def _write_row(self, fid: str, line: str, header: bool = False) -> None:
        """One row, written at once (unbuffered: nothing is lost when the runner stops). A
        write that fails (a full disk) loses the row, counted per file, and the file is cut
        back to its last whole row, as the daemons' writers do (csv_writer.h); the run goes
        on. A header that could not be written is written before the next row."""
        fd = self.files[fid]
        if self.sizes[fid] == 0 and not header:
            line = ",".join(SOCKET_COLUMNS) + "\n" + line
        data = line.encode()
        try:
            n = os.write(fd, data)
            if n != len(data):
                raise OSError(errno.ENOSPC, f"short write ({n} of {len(data)} bytes)")
            self.sizes[fid] += n
        except OSError as exc:
            e = self.write_errors.setdefault(socket_csv(self.rundir, fid).name,
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
        self.close()

    def close(self) -> None:
        for fd in self.files.values():
            os.close(fd)
        self.files = {}


class HostNs:
    """The root network namespace, for Session.spawn: the command runs as it is (the
    Session still owns the process: its group is stopped at teardown, and it carries the
    run's marker, which teardown's leftover sweep also kills)."""

    name = "root"

    def exec_argv(self, argv) -> list[str]:
        return [str(a) for a in argv]


def _phy_rt_priority(path) -> int:
    """timing.rt_priority of the PHY's file (0 if absent)."""
    doc = read_yaml(path) or {}
    return int(((doc.get("timing") or {}).get("rt_priority")) or 0)


def preflight(cfg: dict, progs: dict, files: dict, wrc_files: dict | None = None,
              run_user: RunUser | None = None, home: Path | None = None) -> None:
    """Every program validates its file (`--check`: parse and validate, open nothing)
    before any namespace exists, so a bad value fails in a second with the program's own
    message naming the field (docs/daemons.md: exit status 2). With run_user, as that
    user (HOME=home): a program or file it cannot reach fails here too."""
    prefix = run_user.setpriv_argv() if run_user is not None else []
    user_env = {"HOME": str(home), "USER": run_user.name} if run_user is not None else {}
    jobs = [("oppsched-apd", [str(progs["apd"])], files["apd"], None)]
    jobs += [("oppsched-client", [str(progs["client"])], f, None)
             for k, f in files.items() if k.startswith("client.")]
    jobs.append(("phy", [str(a) for a in progs["phy"]], files["phy"], phy_env(cfg)))
    for snd, rcv in (wrc_files or {}).values():
        jobs += [("oppsched-wrc send", [str(progs["wrc"]), "send"], snd, None),
                 ("oppsched-wrc recv", [str(progs["wrc"]), "recv"], rcv, None)]
    for name, argv, f, env in jobs:
        cp = subprocess.run([*prefix, *argv, "--config", str(f), "--check"],
                            capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {}), **user_env})
        if cp.returncode != 0:
            msg = (cp.stderr.strip() or cp.stdout.strip()).splitlines()
            raise TestbedError(f"{name} rejects {Path(f).name} (exit {cp.returncode}): "
                               + (" | ".join(msg[-5:]) if msg else "no message"))


def run(cfg: dict, outdir: Path, progress) -> None:
    check(cfg)
    rundir = Path(outdir).resolve()
    rundir.mkdir(parents=True, exist_ok=True)
    _clean(rundir)
    (rundir / "logs").mkdir()
    # Privilege separation (docs/testbed.md): the run's processes run as the run user and
    # write their traces into the run folder, which is theirs while the run goes on and
    # the invoking user's again at the end. They reach it through a bind mount (RunView),
    # whatever the modes of its parents.
    prefix = os.environ.get("OPPSCHED_NETNS_PREFIX", "oppsched")
    run_id = new_run_id()
    run_user = RunUser.resolve()
    owner = invoking_user()
    run_user.own(rundir, 0o755)
    try:
        with RunView(f"{prefix}-{run_id}", rundir) as view:
            _run(cfg, rundir, view.path, prefix, run_id, run_user, progress)
    finally:
        hand_back(rundir, *owner)


def _run(cfg: dict, rundir: Path, work: Path, prefix: str, run_id: str, run_user: RunUser,
         progress) -> None:
    """run() with the run folder at `rundir` for the runner and at `work` (the same
    folder) for the run's processes."""
    progs = find_programs(cfg)
    topo = testbed_topology(cfg)
    timeouts = cfg["timeouts"]
    record = {"kind": "testbed", "status": "starting", "error": None, "t0_mono_ns": None,
              "t0_wall_s": None, "radio_ready_s": None, "programs": {k: str(v) for k, v in
                                                                     progs.items()},
              "host_changes": [], "flows": [], "testbed": None, "wired_stats": None}
    procs = ProcTable()

    def write_record(final: bool = False):
        # The run's progress on the way; on a full disk the run goes on without it (the
        # last write, final, comes after the reserved room is freed, and must succeed).
        try:
            write_atomic(rundir / "run.json", json.dumps(record, indent=1, default=str) + "\n")
            write_atomic(rundir / "processes.json", json.dumps(procs.to_json(), indent=1) + "\n")
        except UnsafePath:
            raise  # a link planted in the run folder: never written through, never hidden
        except OSError as exc:
            if final:
                raise
            w = f"run.json not updated at status {record['status']!r}: {exc}"
            if w not in record.setdefault("warnings", []):
                record["warnings"].append(w)

    # The daemons' files first, checked by the daemons themselves, before anything is built.
    # ipc sockets live in RUN_DIR/zmq, or in a short scratch directory when that path is
    # too long for a Unix socket address.
    scratch = Path(tempfile.mkdtemp(prefix="oppsched-"))
    users = daemon_users(cfg)
    lay = daemonconf.Layout.make(work, users, scratch=scratch)
    record["run_user"] = {"name": run_user.name, "uid": run_user.uid, "gid": run_user.gid}
    run_user.check_writable(work)
    # The ipc sockets: in a 0700 folder of the run user's.
    if lay.zmq_dir.parent == scratch.resolve():
        run_user.own(scratch, 0o700)
    run_user.own(lay.zmq_dir, 0o700)
    # Keys (docs/security.md): security.keys_dir's, or fresh ones, in RUN_DIR/keys (0700,
    # the run user's); security.curve moves the uplinks onto lab links (below).
    curve, integrity = cfg["security"]["curve"], cfg["pdu"]["integrity_tag"]
    opt_out = integrity_opt_out(cfg)  # a radio run without the tag: said, never silent
    if opt_out:
        record.setdefault("warnings", []).append(opt_out)
        print(f"oppsched: warning: {opt_out}", file=sys.stderr)
    if curve or integrity:
        kd = cfg["security"]["keys_dir"]
        lay.keys_dir = keys.install(work, Path(kd) if kd else None, [u.name for u in users],
                                    curve, integrity, uid=run_user.uid, gid=run_user.gid)
        if curve:
            lay.use_curve()
    files = daemonconf.write_all(cfg, lay)
    wrc_files = write_wrc_configs(cfg, work, users)
    chaos_file = (chaos_config(cfg, lay, files["phy"]) if cfg["faults"]["chaos"]["enabled"]
                  else None)
    record["endpoints"] = lay.endpoints
    try:
        home = work / "netns" / "home"  # the one Session.spawn gives the processes later
        run_user.own(home.parent, 0o755)
        run_user.own(home, 0o700)
        preflight(cfg, progs, files, wrc_files, run_user, home)
    except BaseException as exc:
        record["status"] = "failed"
        record["error"] = f"{type(exc).__name__}: {exc}"
        write_record()
        shutil.rmtree(scratch, ignore_errors=True)
        raise

    tb = Testbed(topo, prefix=prefix, run_id=run_id, workdir=work / "netns",
                 delay_binary=progs["delay"], run_user=run_user)
    record["run_name"] = tb.name
    write_record()
    t_start = time.monotonic()
    plans: list[FlowPlan] = []
    sampler = None
    # Room for the end of the run (RESERVE_BYTES), freed in the `finally` below whatever
    # happens, and as the run stops.
    reserve_warning = _reserve_space(rundir)
    if reserve_warning:
        record.setdefault("warnings", []).append(reserve_warning)
    try:
        with tb:
            record["testbed"] = tb.describe()
            for cc in {p_cc for p_cc in [f["cc"] for f in cfg["flows"]] if p_cc}:
                record["host_changes"] += ensure_congestion_control(cc, tb.session)
            # Per-namespace TCP overrides (the Testbed applied cfg.tcp everywhere).
            for node, spec in list(zip(tb.servers, cfg["servers"])) + \
                    list(zip(tb.clients, cfg["devices"])):
                node.ns.sysctl(tcp_override_sysctls(spec["tcp"]))
            if cfg["tcp"]["initcwnd"] is not None:
                for node in tb.servers:
                    for fam, gw in (([], node.gw4), (["-6"], node.gw6)):
                        if gw:
                            node.ns.ip(*fam, "route", "change", "default", "via", gw, "dev",
                                       node.dev, "initcwnd", cfg["tcp"]["initcwnd"])
            # flows[].mss_bytes and initcwnd: host routes between each flow's two ends.
            for node, argv in flow_route_commands(cfg, tb.clients, tb.servers):
                node.ns.ip(*argv)
            # SPM-AF's sender marking (Wu, Gong & Williamson, §6.1): the BPF marker on the
            # egress of every server's wired interface, where its TCP data leaves.
            mark = cfg["tcp"]["spm_marking"]
            if mark["enabled"]:
                record["spm_marking"] = [
                    attach_spm_marker(node.ns, node.dev, progs["spm_mark"],
                                      mark["cwnd_below"], mark["dscp"], run_user)
                    for node in tb.servers]
            for u, c in zip(users, tb.clients):
                if (u.addr4, u.addr6) != (c.addr4, c.addr6):
                    raise TestbedError(f"{c.name}: addressed {c.addr4}/{c.addr6}, the daemons "
                                       f"were configured for {u.addr4}/{u.addr6}")
                u.netns = c.ns.name
            if lay.curve:  # the lab network: one veth per client to the AP's namespace
                for u, c in zip(users, tb.clients):
                    ap_addr, cl_addr = daemonconf.lab_addresses(u.id)
                    tb.session.add_veth(tb.ap, f"lab{u.id}", c.ns, "lab0")
                    tb.ap.ip("addr", "add", f"{ap_addr}/30", "dev", f"lab{u.id}")
                    c.ns.ip("addr", "add", f"{cl_addr}/30", "dev", "lab0")
            for p in lay.zmq_dir.iterdir():
                p.unlink()
            plans = flow_plans(cfg, tb.clients, tb.servers)
            record["flows"] = [p.to_json() for p in plans]
            record["status"] = "starting daemons"
            write_record()
            logs = rundir / "logs"

            def spawn(ns, argv, name, role, env=None, **kw):
                # log_base: `logs` itself is opened without following a link (safefs).
                p = tb.session.spawn(ns, argv, name=name, log=logs / f"{name}.log", env=env,
                                     log_base=rundir, **kw)
                procs.add(p, role)
                return p

            # 1. apd (binds phy_requests, phy_grants, uplink), 2. clients (bind rx_<id>),
            # 3. the PHY (connects to all; the clock master), each checked, not slept on.
            up = timeouts["startup_s"]
            # The daemons keep no capability: their TUNs are the run user's. SCHED_FIFO
            # from exec on (chrt before the user switch), so ZeroMQ's I/O threads inherit it.
            apd_argv = [progs["apd"], "--config", files["apd"]]
            spawn(tb.ap, apd_argv, "apd", "apd", sched_fifo=cfg["topology"]["apd_rt_priority"])
            _wait_files(lay.bound_ipc_paths(list(daemonconf.ZMQ_NAMES)
                                            + [f"uplink_{u.id}" for u in users]),
                        "oppsched-apd: endpoints bound", up, procs, ["apd"])
            daemons = ["apd"]
            for u, node in zip(users, tb.clients):
                spawn(node.ns, [progs["client"], "--config", files[f"client.{u.name}"]],
                      f"client.{u.name}", "client",
                      sched_fifo=cfg["topology"]["client_rt_priority"])
                daemons.append(f"client.{u.name}")
            _wait_files([lay.ipc_path(f"rx_{u.id}") for u in users],
                        "oppsched-client: rx endpoints bound", up, procs, daemons)
            if chaos_file is not None:  # between the PHY and the daemons (reliability.py)
                spawn(tb.ap, [sys.executable, "-m", "oppsched.testbed.chaos", "--config", chaos_file],
                      "chaos", "chaos", env=phy_env(cfg))
                daemons.append("chaos")
                _wait_files(chaos_bound(lay, files["phy"]), "oppsched.testbed.chaos: endpoints bound",
                            up, procs, daemons)
            # Over the air the radios are on the host's USB/Ethernet: the UHD PHY runs in
            # the root namespace (its ipc endpoints are files, reachable from any namespace).
            # The PHY: timing.rt_priority is set before the switch (its own
            # sched_setscheduler then needs nothing); only UHD's streaming threads raise
            # their priority themselves: CAP_SYS_NICE in uhd mode alone.
            phy_rt = _phy_rt_priority(files["phy"])
            spawn(HostNs() if cfg["phy"]["mode"] == "uhd" else tb.ap,
                  [*progs["phy"], "--config", files["phy"]], "phy", "phy", env=phy_env(cfg),
                  caps=("sys_nice",) if cfg["phy"]["mode"] == "uhd" else (),
                  sched_fifo=phy_rt if phy_rt and fifo_allowed(phy_rt) else 0)
            daemons.append("phy")
            record["radio_ready_s"] = _wait_radio(tb, up, procs, daemons)
            record["status"] = "radio up"
            write_record()

            # Captures: each server's wired side, each client's TUN (and the AP's TUN).
            caps = []
            if cfg["capture"]["pcaps"]:
                snap = str(cfg["capture"]["snaplen"])
                targets = [(n.ns, n.dev, f"wired.{n.name}") for n in tb.servers] + \
                          [(n.ns, n.dev, f"client.{n.name}") for n in tb.clients]
                if cfg["capture"]["ap"]:
                    targets.append((tb.ap, "radio0", "ap"))
                for ns, dev, stem in targets:
                    name = f"tcpdump.{stem}"
                    # -U --immediate-mode: every packet is in the file as soon as it is
                    # seen (nothing is lost in the capture ring when tcpdump is stopped);
                    # -Z: tcpdump opens the capture as root and switches to the run user
                    # (no capability left). The savefile is its stdout (`-w -`), created
                    # here relative to the run folder with O_EXCL and O_NOFOLLOW (safefs):
                    # tcpdump never opens a path in the run user's folder as root. Written
                    # as NAME.partial and renamed once tcpdump exited 0, like the daemons'
                    # traces (traces.py renames one left by a tcpdump that died).
                    out_fd = open_beneath(rundir, f"{stem}.pcap{PARTIAL}",
                                          os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                    try:
                        caps.append(spawn(ns, ["tcpdump", "-i", dev, "-n", "-s", snap, "-U",
                                               "--immediate-mode", "-Z", run_user.name,
                                               "-w", "-"], name,
                                          "tcpdump", as_root=TCPDUMP_BOUNDING, stdout=out_fd))
                    finally:
                        os.close(out_fd)
                for c in caps:
                    _wait_log(c, "listening on", f"{c.name}: capturing", up)

            # The receiving sockets' own counts (SocketSampler): their `ss -E` listeners
            # first, so that none of the flows' sockets is destroyed unseen.
            sampler = SocketSampler(tb, plans, rundir, 0.0)
            sampler.start_events(spawn)

            # The listening ends, one port per flow: iperf3 receivers in the client
            # namespaces (an upstream flow's in its server's); the servers of repeated
            # transfers in the server namespaces; wrc flows: oppsched-wrc recv in the
            # client's namespace (UDP).
            recv_started = {}
            for p in plans:
                proto = "tcp"
                if p.transport == "wrc":
                    ns = tb.clients[p.device_index].ns
                    recv_started[p.id] = time.monotonic()
                    rp = spawn(ns, [progs["wrc"], "recv", "--config", wrc_files[p.id][1]],
                               p.listener_name, "wrc-receiver")
                    proto = "udp"
                elif p.repeat:
                    ns = tb.servers[p.server_index].ns
                    rp = spawn(ns, p.transfer_server_argv(sys.executable, work),
                               p.listener_name, "xfer-server", env=phy_env(cfg))
                else:
                    ns = (tb.servers[p.server_index] if p.sender_in_client
                          else tb.clients[p.device_index]).ns
                    rp = spawn(ns, p.receiver_argv(work), p.listener_name, "iperf3-receiver")
                ns.wait_listening(p.port, proto=proto, timeout=up, proc=rp)

            # The counters the end-to-end balance takes differences of (balance.py,
            # summary.json `balance`): the AP TUN's drops and the delay stages' at t0.
            record["ap_tun_t0"] = _link_counters(tb.ap, lay.tun)
            try:
                record["wired_stats_t0"] = tb.wired_stats()
            except Exception as exc:  # noqa: BLE001 -- a figure for the balance, not the run
                record.setdefault("warnings", []).append(f"wired stats at t0: {exc}")
            # The flows, at their times after t0.
            record["status"] = "running"
            t0 = time.monotonic()
            sampler.t0 = t0
            record["t0_mono_ns"] = time.monotonic_ns()
            record["t0_wall_s"] = time.time()
            for p in plans:
                if p.id in recv_started:  # the receiver's trace times count from its start
                    p.extra["receiver_started_at_s"] = recv_started[p.id] - t0
            write_record()
            _schedule(cfg, tb, plans, procs, daemons, work, t0, progress, spawn,
                      record["t0_mono_ns"], wrc_files, progs.get("wrc"),
                      tick=_reliability_tick(cfg, work, procs, functools.partial(
                          spawn, sched_fifo=cfg["topology"]["apd_rt_priority"]), tb.ap,
                          apd_argv, record, write_record, lay.tun), sampler=sampler)
            record["status"] = "stopping"
            # The room kept for the end (RESERVE_BYTES): from here on every process writes
            # its last rows, its stats and its report, on a full disk too.
            _release_space(rundir)
            # Stop in order: receivers (done by now), PHY, clients and apd (SIGTERM: they
            # finish the slot, write stats and traces, exit 0), captures, delay stages.
            # A one-off receiver (-s -1) ends by itself once its sender has exchanged the
            # results, and writes its JSON as it ends: it is given the time to, so that a
            # signal never cuts the JSON short; one still waiting after that is stopped.
            # The server of repeated transfers never ends by itself: SIGTERM (exit 0).
            for p in plans:
                if p.repeat or p.transport == "wrc":  # SIGTERM: stats and trace written
                    procs.stop(p.listener_name, 5.0)
                elif not procs.wait(p.listener_name, 5.0):
                    p.extra["receiver_stopped"] = True
                    procs.stop(p.listener_name, 5.0)
            sampler.finish(procs)
            record.setdefault("warnings", []).extend(sampler.warnings)
            for n in procs.rows:
                if procs.rows[n]["role"] in ("tcpdump",):
                    procs.sample(n)
            for link in tb.links:
                if link.proc is not None and link.proc.running():
                    record.setdefault("delay_cpu_s", {})[link.name] = proc_cpu_s(link.proc.pid)
            # The AP TUN's counters: a packet the kernel could not hand to a busy apd (its
            # queue full: tx_dropped) is in ap.pcap but never reached the AP queue.
            record["ap_tun"] = _link_counters(tb.ap, "radio0")
            # The apd's watchdog may fire once the PHY is gone and before the apd is stopped:
            # expected then, not a failure.
            apd_alive_at_stop = not procs.poll("apd")
            procs.stop("phy", 10.0)
            if chaos_file is not None:
                procs.stop("chaos", 10.0)
            for u in users:
                procs.stop(f"client.{u.name}", 10.0)
            procs.stop("apd", 10.0)
            # What reached the TUN after the apd's last read (its drops once no reader was
            # left) is in the balance too.
            record["ap_tun_end"] = _link_counters(tb.ap, lay.tun)
            for c in caps:
                if procs.stop(c.name, 5.0) == 0:
                    stem = c.name.split(".", 1)[1]
                    os.replace(work / f"{stem}.pcap{PARTIAL}", work / f"{stem}.pcap")
            record["wired_stats"] = None
            # A daemon that does not exit 0 when stopped (a crash, an error on the way out,
            # one that had to be killed) fails the run: its traces may be incomplete.
            bad = [f"{n} exited with {procs.rows[n]['exit_code']}"
                   + (" (killed: it did not stop when asked)" if procs.rows[n].get("killed")
                      else "")
                   for n in daemons if procs.rows[n]["exit_code"] != 0
                   and not (n == "apd" and apd_alive_at_stop
                            and procs.rows[n]["exit_code"] == APD_EXIT_WATCHDOG
                            and "watchdog:" in (procs.procs[n].log_tail(20) or ""))]
            if bad:
                raise TestbedError("; ".join(bad) + " (see logs/)")
            record["status"] = "done"
    except BaseException as exc:
        record["status"] = "failed"
        record["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        _release_space(rundir)  # run.json and the summary fit on a full disk
        if sampler is not None:
            sampler.close()
            if sampler.write_errors:
                record["trace_write_errors"] = sampler.errors_for_record()
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(rundir / "zmq", ignore_errors=True)  # the ipc sockets mean nothing now
        # The traces of a daemon that died are still NAME.partial: whole up to its last
        # flush, renamed and listed (traces.py; summary.json "truncated_traces").
        try:
            record["truncated_traces"] = recover_all(rundir)
        except OSError as exc:
            record.setdefault("warnings", []).append(f"partial traces: {exc}")
        # The run's processes are gone: a symlink left in the folder was planted by one of
        # them (the run makes none). Root's analysis, plots and report write there next
        # with ordinary opens: the links go now, and the run fails naming them.
        planted = remove_symlinks(rundir)
        if planted:
            record["planted_symlinks"] = planted
        record["flows"] = [p.to_json() for p in plans] or record["flows"]
        record["wall_s"] = time.monotonic() - t_start
        record["wired_stats"] = tb.final_wired_stats or None
        record["teardown_errors"] = tb.session.teardown_errors
        record["host_restored"] = tb.session.host_restored
        write_record(final=True)
    if tb.session.teardown_errors:
        raise TestbedError("teardown incomplete: " + "; ".join(tb.session.teardown_errors))
    if planted:
        raise TestbedError("symlinks planted in the run folder (removed; nothing was written "
                           "through them): " + "; ".join(planted))


def _reliability_tick(cfg, rundir, procs, spawn, ap_ns, apd_argv, record, write_record,
                      tun_name="radio0"):
    """Called by _schedule every turn with the time since t0: the runner's watchdog, and the
    apd restart fault at faults.apd_restart_at_s (reliability.py)."""
    wd = RunnerWatchdog(Path(rundir) / "apd.stats.json", daemonconf.slot_s(cfg),
                        cfg["watchdog"]["slots"], cfg["watchdog"]["stats_period_s"])
    restart_at = cfg["faults"]["apd_restart_at_s"]
    freeze_at = cfg["faults"]["phy_freeze_at_s"]
    pending_signals = sorted(cfg["faults"]["signals"], key=lambda s: s["at_s"])
    done = []
    frozen = []

    def tick(now: float) -> None:
        while pending_signals and now >= pending_signals[0]["at_s"]:
            # faults.signals: a hung (STOP) or crashed (KILL, SEGV, ...) process, to the
            # process itself (not its group: a chrt/setpriv wrapper execs it).
            f = pending_signals.pop(0)
            p = procs.procs.get(f["process"])
            if p is None:
                raise TestbedError(f"faults.signals: no process {f['process']!r} (processes: "
                                   f"{', '.join(procs.procs)})")
            os.kill(p.pid, getattr(signal, "SIG" + f["signal"]))
            record.setdefault("faults", []).append(
                {"at_s": now, "fault": "signal", "process": f["process"],
                 "signal": "SIG" + f["signal"], "pid": p.pid})
            write_record()
        if freeze_at is not None and not frozen and now >= freeze_at:
            os.kill(procs.procs["phy"].pid, signal.SIGSTOP)
            frozen.append(now)
            record.setdefault("faults", []).append({"at_s": now, "fault": "phy_freeze"})
            write_record()
        if restart_at is not None and not done and now >= restart_at:
            done.append(restart_apd(procs, spawn, ap_ns, apd_argv, rundir,
                                    cfg["timeouts"]["startup_s"], tun_name))
            record.setdefault("faults", []).append({"at_s": now, **done[0]})
            write_record()
            wd.reset()
        wd.check(time.monotonic())

    return tick


def _link_counters(ns, dev: str) -> dict | None:
    """`ip -s link` counters of one device: packets and bytes each way, and the drops."""
    try:
        (st,) = json.loads(ns.ip("-j", "-s", "link", "show", "dev", dev))
    except Exception:  # noqa: BLE001 -- a device already gone: no counters
        return None
    rx, tx = st["stats64"]["rx"], st["stats64"]["tx"]
    return {"device": dev, "rx_packets": rx["packets"], "rx_dropped": rx["dropped"],
            "tx_packets": tx["packets"], "tx_dropped": tx["dropped"]}


def _check_links_alive(tb) -> None:
    """A wired path's delay stage that exited during the run ends it with an error naming
    the link and the end of the stage's log: its flows could not carry a byte since."""
    for link in tb.links:
        if link.proc is not None and link.proc.popen.poll() is not None:
            tail = link.proc.log_tail()
            raise TestbedError(f"wired link {link.name}: oppsched-delay exited with "
                               f"{link.proc.popen.returncode} during the run"
                               + (f":\n{tail}" if tail else ""))


def _schedule(cfg, tb, plans, procs: ProcTable, daemons, rundir, t0, progress, spawn,
              t0_ns: int | None = None, wrc_files: dict | None = None,
              wrc_program=None, tick=None, sampler: SocketSampler | None = None) -> None:
    """Starts each flow at t0 + start_s (the iperf3 sender or oppsched-wrc send in the
    server's namespace, an upstream flow's iperf3 sender in the device's, or the transfer
    client in the device's), watches the daemons, reports progress, and returns when every
    flow has ended (or duration_s + grace_s has passed). A timed iperf3 flow still running
    timeouts.overrun_s (plus 3 round trips) after its planned end is stopped there: one that
    connected late would otherwise go on alone after the others, and its figures would not
    be those of the contention the run is about (analysis.py measures it up to its planned
    end). A flow of repeated transfers with repeat.until_flows_end is stopped once the
    flows it names have ended (_until_flows_end)."""
    if t0_ns is None:
        t0_ns = int(t0 * 1e9)
    dur = cfg["duration_s"]
    rtts = 3 * max(s["rtt_ms"] for s in cfg["servers"]) / 1e3
    grace = cfg["timeouts"]["grace_s"] + rtts
    overrun = cfg["timeouts"]["overrun_s"] + rtts
    pending = sorted(plans, key=lambda p: p.start_s)
    running: list[FlowPlan] = []
    every = max(1.0, min(5.0, dur / 10.0))
    next_report = every
    last_acked: dict = {}
    while True:
        now = time.monotonic() - t0
        while pending and pending[0].start_s <= now:
            p = pending.pop(0)
            if p.transport == "wrc":
                spawn(tb.servers[p.server_index].ns,
                      [wrc_program, "send", "--config", wrc_files[p.id][0]], p.starter_name,
                      "wrc-sender")
            elif p.repeat:
                spawn(tb.clients[p.device_index].ns,
                      p.transfer_client_argv(sys.executable, rundir, t0_ns), p.starter_name,
                      "xfer-client", env=phy_env(cfg))
            else:
                spawn((tb.clients[p.device_index] if p.sender_in_client
                       else tb.servers[p.server_index]).ns, p.sender_argv(rundir),
                      p.starter_name, "iperf3-sender")
            p.started_at_s = now
            running.append(p)
        ended = False
        for p in list(running):
            if procs.poll(p.starter_name):
                p.ended_at_s = time.monotonic() - t0
                p.exit_code = procs.rows[p.starter_name]["exit_code"]
                running.remove(p)
                ended = True
            elif timed_iperf(p) and now >= p.start_s + p.seconds + overrun:
                procs.stop(p.starter_name, 3.0, signal.SIGINT)
                p.ended_at_s = time.monotonic() - t0
                p.exit_code = procs.rows[p.starter_name]["exit_code"]
                p.extra["stopped"] = (f"still running {overrun:.1f} s after its planned end "
                                      f"({p.start_s + p.seconds:g} s)")
                p.extra["planned_end_s"] = p.start_s + p.seconds
                running.remove(p)
                ended = True
        ended = _until_flows_end(plans, pending, running, procs, t0) or ended
        if sampler is not None:
            # at once when a flow has ended: its receiving sockets may be destroyed soon
            sampler.poll(now, force=ended)
        if tick is not None:
            tick(now)
        procs.check_alive(daemons)
        _check_links_alive(tb)
        if not pending and not running:
            break
        if now >= dur + grace:
            for p in running:
                procs.stop(p.starter_name, 3.0, signal.SIGTERM if p.repeat or
                           p.transport == "wrc" else signal.SIGINT)
                p.ended_at_s = time.monotonic() - t0
                p.exit_code = procs.rows[p.starter_name]["exit_code"]
                p.extra["stopped"] = f"still running {grace:.0f} s after duration_s"
                if timed_iperf(p):
                    p.extra["planned_end_s"] = p.start_s + p.seconds
            break
        if now >= next_report:
            info: dict = {}
            try:
                rates = _live_goodput(tb, plans, last_acked, now, info)
            except Exception:  # noqa: BLE001 -- progress is best effort
                rates = {}
            _write_live_flows(rundir, now, rates, info)
            txt = ", ".join(f"{k} {v / 1e3:.0f}" for k, v in rates.items())
            progress(min(int(now), int(dur)), int(dur),
                     "s" + (f"; goodput kb/s: {txt}" if txt else ""))
            next_report += every
        nxt = min([pending[0].start_s] if pending else [now + 0.05])
        time.sleep(max(0.005, min(0.05, nxt - now)))
