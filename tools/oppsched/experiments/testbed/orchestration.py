"""Running a testbed experiment: run() checks the daemons' configuration files, builds the
namespaces, starts apd, clients and PHY and waits until each is ready (endpoints bound,
pings crossing the radio), starts the captures and the flows at their times (iperf3, the
repeated transfers of oppsched.testbed.transfers, or oppsched-wrc for transport wrc), and
stops everything in order (flows, PHY, daemons with SIGTERM so they flush their traces,
captures), recording every process (processes.json) and the run (run.json).

run() is the sequence; its parts are modules of their own:

    processes   the processes' bookkeeping (ProcTable: CPU seconds, exit codes)
    runfolder   the outputs a new run removes, and the room kept for the end of a run
    startup     preflight() of every program's file, and the readiness waits
    sampling    the receiving sockets' counts and the live goodput
    schedule    the flows at their times, the faults, the progress line
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from oppsched.testbed import daemonconf, keys
from oppsched.experiments.testbed.processes import HostNs, ProcTable, proc_cpu_s
from oppsched.experiments.testbed.programs import TestbedError, find_programs, phy_env
from oppsched.experiments.testbed.reliability import (APD_EXIT_WATCHDOG, chaos_bound,
                                                      chaos_config)
from oppsched.experiments.testbed.runfolder import _clean, _release_space, _reserve_space
from oppsched.experiments.testbed.sampling import SocketSampler
from oppsched.experiments.testbed.schedule import _reliability_tick, _schedule
from oppsched.experiments.testbed.schema import check, integrity_opt_out
from oppsched.experiments.testbed.startup import (_phy_rt_priority, _wait_files, _wait_log,
                                                  _wait_radio, preflight)
from oppsched.experiments.testbed.traces import PARTIAL, recover_all
from oppsched.experiments.testbed.topology import (daemon_users, default_route_commands,
                                                   flow_plans, flow_route_commands,
                                                   prime_ssthresh, ssthresh_namespaces,
                                                   tcp_override_sysctls, testbed_topology,
                                                   write_wrc_configs)
from oppsched.testbed import tcp_metrics
from oppsched.testbed.flows import FlowPlan
from oppsched.testbed.nsbase import new_run_id
from oppsched.testbed.privsep import (TCPDUMP_BOUNDING, RunUser, fifo_allowed, hand_back,
                                      invoking_user)
from oppsched.testbed.runview import RunView
from oppsched.paths import write_atomic
from oppsched.safefs import UnsafePath, open_beneath, remove_symlinks
from oppsched.testbed.links import attach_spm_marker
from oppsched.testbed.wired import Testbed, ensure_congestion_control


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
            # tcp.initcwnd (servers) and tcp.quickack (servers and devices) on the default
            # routes
            for node, argv in default_route_commands(cfg, tb.clients, tb.servers):
                node.ns.ip(*argv)
            # flows[].mss_bytes, initcwnd and ssthresh: host routes between each flow's
            # two ends; an ssthresh reaches new connections through the kernel's TCP
            # metrics cache (oppsched.testbed.tcp_metrics), primed once the radio is up.
            for node, argv in flow_route_commands(cfg, tb.clients, tb.servers):
                node.ns.ip(*argv)
            primed = ssthresh_namespaces(cfg, tb.clients, tb.servers)
            for node in primed:
                node.ns.sysctl(tcp_metrics.SYSCTLS)
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
            if primed:
                # before the captures: the priming connections are no flow's packets
                record["ssthresh"] = prime_ssthresh(cfg, tb.clients, tb.servers, up)
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
            sampler = SocketSampler(tb, plans, rundir, 0.0,
                                    tcp_info=bool(cfg["capture"].get("tcp_info")))
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
            procs.stop_all([f"client.{u.name}" for u in users], 10.0)
            procs.stop("apd", 10.0)
            # What reached the TUN after the apd's last read (its drops once no reader was
            # left) is in the balance too.
            record["ap_tun_end"] = _link_counters(tb.ap, lay.tun)
            for name, code in procs.stop_all([c.name for c in caps], 5.0).items():
                if code == 0:
                    stem = name.split(".", 1)[1]
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
            if sampler.has_write_errors:
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



def _link_counters(ns, dev: str) -> dict | None:
    """`ip -s link` counters of one device: packets and bytes each way, and the drops."""
    try:
        (st,) = json.loads(ns.ip("-j", "-s", "link", "show", "dev", dev))
    except Exception:  # noqa: BLE001 -- a device already gone: no counters
        return None
    rx, tx = st["stats64"]["rx"], st["stats64"]["tx"]
    return {"device": dev, "rx_packets": rx["packets"], "rx_dropped": rx["dropped"],
            "tx_packets": tx["packets"], "tx_dropped": tx["dropped"]}
