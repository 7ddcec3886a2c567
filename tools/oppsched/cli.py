"""The `oppsched` command line."""

from __future__ import annotations

import argparse
import os
import sys

from oppsched import build
from oppsched.config import ConfigError
from oppsched.commands.parsers import decode_parser, tcpview_parser, timeline_parser
from oppsched.testbed.keys import add_parser as keys_parser
from oppsched.experiments.testbed import TestbedError
from oppsched.experiments.testbed.schema import MAC_CHECKS, mac_checks
from oppsched.commands.linkcurves import add_parsers as linkcurves_parsers
from oppsched.commands.linkgap import add_parser as linkgap_parser
from oppsched.testbed.nsbase import DEFAULT_PREFIX, NetnsError
from oppsched.testbed.stale import cleanup_stale
from oppsched.commands.plugin_check import add_parser as plugin_parser
from oppsched.commands.plugin_new import add_parser as plugin_new_parser
from oppsched.run.runner import RunFailed, analyze_dir, load_experiment, run_experiment
from oppsched.run.sweepspec import expand
from oppsched.uhd_sim.command import add_parser as uhd_sim_parser

# The commands' heavy modules (pandas, scipy, matplotlib, numpy) are imported by the
# command that runs, not here: `--help` and `check` stay quick.


def _metrics(a):
    """The `--metrics` endpoint, bound now: a bad address or a taken port is refused before
    anything runs (oppsched/run/live.py)."""
    if a.metrics is None:
        return None
    from oppsched.run.live import MetricsServer

    m = MetricsServer(a.metrics)
    print(f"oppsched: metrics at http://{m.address}/metrics", file=sys.stderr)
    return m


def _cmd_run(a) -> int:
    build.load(build.MAC), build.load(build.PHY)  # before any run folder is made
    m = _metrics(a)
    try:
        run_experiment(a.experiment, a.out, a.set or [], a.duration, a.jobs, metrics=m)
    finally:
        if m is not None:
            m.close()
    return 0


def _cmd_analyze(a) -> int:
    from oppsched.run.sweep_results import collect, is_sweep_dir

    if is_sweep_dir(a.results):
        df = collect(a.results, reanalyze=True)
        print(f"oppsched: {len(df)} runs re-analysed; {a.results}/sweep.csv, "
              f"{a.results}/report.html")
    else:
        analyze_dir(a.results)
    return 0


def _cmd_sweep(a) -> int:
    from oppsched.run.sweep import run_sweep

    if a.jobs < 1:
        raise ConfigError(f"--jobs: {a.jobs} is not a positive number of runs at a time")
    build.load(build.MAC), build.load(build.PHY)  # before the sweep folder is made
    m = _metrics(a)
    try:
        failed = run_sweep(a.experiment, a.out, a.set or [], a.duration, a.jobs, a.cluster,
                           a.cluster_keys, metrics=m)
    finally:
        if m is not None:
            m.close()
    return 1 if failed else 0


def _cmd_check(a) -> int:
    for path in a.experiments:
        raw, schema, resolved = load_experiment(path, a.set or [])
        sw = expand(raw, schema, resolved)
        runs = len(sw.points) if sw else len(resolved["variants"]) or 1
        print(f"{path}: ok ({resolved['kind']}, {runs} run(s){' in its sweep' if sw else ''})")
        if resolved["kind"] == "testbed" and not mac_checks():
            print(f"  not checked without the build ({build.MAC} is not importable; run "
                  f"`make`): {MAC_CHECKS}")
        if resolved["kind"] == "testbed":
            from oppsched.experiments.testbed.schema import describe_repeat, repeated
            for f in resolved["flows"]:
                if repeated(f):
                    print(f"  flow {f['id']}: {describe_repeat(f)}")
    return 0


def _cmd_preflight(a) -> int:
    from oppsched.commands import preflight
    from oppsched.phy import devices

    if a.benchmark_s < 0:
        raise ConfigError(f"--benchmark-s: {a.benchmark_s} is negative")
    with devices.profile_checks_deferred():  # out-of-profile settings: rows of the table
        _raw, _schema, resolved = load_experiment(a.experiment, a.set or [])
    return preflight.run(resolved, benchmark_s=a.benchmark_s)


def _cmd_cleanup(a) -> int:
    prefix = a.prefix or os.environ.get("OPPSCHED_NETNS_PREFIX", DEFAULT_PREFIX)
    removed = cleanup_stale(prefix, force=a.force)
    print(f"oppsched cleanup: removed {len(removed)} namespace(s) of stale '{prefix}' runs"
          + (": " + " ".join(removed) if removed else ""))
    return 0


def _parse_list(text: str, arg: str, kind) -> list:
    try:
        out = [kind(float(x)) if kind is int else kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{arg}: {text!r} is not a comma-separated list of numbers") from None
    if not out or any(v <= 0 for v in out):
        raise ConfigError(f"{arg}: {text!r}: every value must be > 0")
    return out


def _cmd_bench(a) -> int:
    from oppsched.commands.bench import run_bench
    from oppsched.commands.bench_capacity import run_capacity_bench
    from oppsched.commands.bench_live import run_live_bench
    from oppsched.commands.bench_phy import run_phy_bench

    if a.duration is None:
        a.duration = {"live": 60.0, "plugin": 120.0}.get(a.what, 600.0)
    if a.what == "capacity":  # the sample loopback with real TCP, in real time
        if a.duration <= 0:
            raise ConfigError(f"--duration: {a.duration!r} is not > 0")
        if not 0 <= a.rt_priority <= 89:
            raise ConfigError(f"--rt-priority: {a.rt_priority!r} not in [0, 89] (the PHY "
                              "runs 10 above it)")
        return run_capacity_bench(a.out or "results/bench/capacity",
                                  _parse_list(a.rates, "--rates", float),
                                  _parse_list(a.clients, "--clients", int), a.duration,
                                  a.profile, a.snr, a.rt_priority, a.keep_going)
    if a.what == "live":  # what --metrics costs a real-time run (root)
        if a.duration <= 0:
            raise ConfigError(f"--duration: {a.duration!r} is not > 0")
        return run_live_bench(a.out or "results/bench/live", duration=a.duration,
                              rt_priority=a.rt_priority)
    if a.what == "plugin":  # a Python scheduler and AQM in the apd's slot loop (root)
        if a.duration <= 0:
            raise ConfigError(f"--duration: {a.duration!r} is not > 0")
        from oppsched.commands.bench_plugin import run_plugin_bench
        return run_plugin_bench(a.out or "results/bench/plugin", duration=a.duration,
                                rt_priority=a.rt_priority)
    if a.what == "phy":  # only the PHY chain bench: --out is the JSON file
        return run_phy_bench(a.out or "results/bench/phy.json", a.min_time, a.build)
    return run_bench(a.build, a.out or "results/bench", a.filter,
                     phy=a.what == "all", min_time=a.min_time)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="oppsched", description=(
        "oppsched: a testbed for TCP over opportunistic scheduling and AQM on a wireless downlink"))
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="run an experiment file, write a results folder with a report")
    r.add_argument("experiment", help="experiment YAML file")
    r.add_argument("--out", default="results/latest", help="results folder (default: %(default)s)")
    r.add_argument("--duration", type=float, help="override duration_s (seconds)")
    r.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a key of the experiment (dotted path, e.g. scheduler.alpha=0.1)")
    r.add_argument("--jobs", type=int, default=1,
                   help="variants run at a time (default 1: runs are real time and share "
                   "the cores; more only where the machine has cores to spare)")
    r.add_argument("--metrics", metavar="127.0.0.1:PORT",
                   help="serve the run's live figures in the Prometheus text format at "
                   "http://HOST:PORT/metrics (loopback only; docs/howto/watch-a-run.md)")
    r.set_defaults(fn=_cmd_run)

    an = sub.add_parser("analyze", help="recompute summaries, plots and report from the traces")
    an.add_argument("results", help="results folder written by `oppsched run`")
    an.set_defaults(fn=_cmd_analyze)

    sw = sub.add_parser("sweep", help="run every point of an experiment's sweep section "
                        "(resumable), write sweep.csv and a report with the sweep's plots")
    sw.add_argument("experiment", help="experiment YAML file with a sweep: section")
    sw.add_argument("--out", required=True, help="sweep folder (resumed if it exists)")
    sw.add_argument("--duration", type=float, help="override duration_s of every run (seconds)")
    sw.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override a key of the experiment (dotted path), before the sweep")
    sw.add_argument("--jobs", type=int, default=1,
                    help="runs at a time on this machine (default 1: runs are real time)")
    sw.add_argument("--cluster", metavar="tls://HOST:8786",
                    help="run the points on a Dask distributed cluster (workers started with "
                    "--resources testbed=1); results come back into --out. tls:// with "
                    "--cluster-keys; plain tcp:// only to a loopback address (docs/sweeps.md)")
    sw.add_argument("--cluster-keys", metavar="DIR",
                    help="folder of the cluster's TLS certificates (`oppsched keys cluster "
                    "DIR`): its CA and the client's certificate and key")
    sw.add_argument("--metrics", metavar="127.0.0.1:PORT",
                    help="serve the running points' live figures and the sweep's progress "
                    "in the Prometheus text format (loopback only; with --cluster the "
                    "progress, each worker its own points: docs/howto/watch-a-run.md)")
    sw.set_defaults(fn=_cmd_sweep)

    c = sub.add_parser("check", help="validate experiment files without running them")
    c.add_argument("experiments", nargs="+")
    c.add_argument("--set", action="append", metavar="KEY=VALUE")
    c.set_defaults(fn=_cmd_check)

    pf = sub.add_parser("preflight", help="check the radios and the host of a phy.mode uhd "
                        "experiment (found, probed, images, profile, benchmark, sync, host "
                        "settings): a pass/fail table with the fix for each failure")
    pf.add_argument("experiment", help="experiment YAML file with phy.mode uhd")
    pf.add_argument("--set", action="append", metavar="KEY=VALUE")
    pf.add_argument("--benchmark-s", type=float, default=5.0,
                    help="seconds of benchmark_rate per radio at the run's rate; 0 = skip "
                    "(default: %(default)s)")
    pf.set_defaults(fn=_cmd_preflight)

    cl = sub.add_parser("cleanup", help="remove what runs killed with SIGKILL left behind "
                        "(namespaces, processes, host settings); every run does this first")
    cl.add_argument("--prefix", default=None, help="namespace prefix (default: "
                    "$OPPSCHED_NETNS_PREFIX or oppsched)")
    cl.add_argument("--force", action="store_true",
                    help="also remove runs whose runner is still alive")
    cl.set_defaults(fn=_cmd_cleanup)

    b = sub.add_parser("bench", help="run the benchmarks (C++ Google Benchmark binaries, "
                       "then the PHY chain vs GNU Radio's reference blocks)")
    b.add_argument("what", nargs="?", default="all", choices=("all", "cpp", "phy", "capacity",
                                                               "live", "plugin"),
                   help="all (default): C++ binaries then the PHY chain bench; cpp: only the "
                   "C++ binaries; phy: only the PHY chain bench; capacity: the sample PHY "
                   "in real time with real TCP, N clients at each rate (root; docs/phy.md); "
                   "live: the default experiment at 5 Msps with --metrics scraped by "
                   "prometheus and the live page open: serving CPU and late slots (root; "
                   "docs/howto/watch-a-run.md); plugin: PF and CoDel written in Python "
                   "in the apd, 16 users, against the built-ins: decision and per-packet "
                   "times, deadline misses, late slots (root; docs/extending.md)")
    b.add_argument("--build", default="build", help="build folder (default: %(default)s)")
    b.add_argument("--out", default=None, help="where to write JSON: a folder (default "
                   "results/bench; the PHY chain bench writes phy.json there), or with `phy` "
                   "the JSON file (default results/bench/phy.json)")
    b.add_argument("--filter", default="", help="benchmark name regex (C++ binaries)")
    b.add_argument("--min-time", type=float, default=3.0,
                   help="CPU seconds per PHY chain measurement (default: %(default)s)")
    b.add_argument("--rates", default="1e6,2e6,5e6,10e6",
                   help="capacity: sample rates in Hz (default: %(default)s)")
    b.add_argument("--clients", default="1,2,4,8",
                   help="capacity: client counts, tried in ascending order until the first "
                   "with a late slot (default: %(default)s)")
    b.add_argument("--duration", type=float, default=None,
                   help="capacity: seconds per run (default: 600); live: seconds per variant "
                   "(default: 60); plugin: seconds per run (default: 120)")
    b.add_argument("--profile", default="3ms", help="capacity: PHY profile (default: "
                   "%(default)s)")
    b.add_argument("--snr", type=float, default=25.0,
                   help="capacity: every client's AWGN SNR in dB (default %(default)s: the "
                   "top MCS, the most decoding work)")
    b.add_argument("--rt-priority", type=int, default=20,
                   help="capacity, live, plugin: SCHED_FIFO of the apd and the clients, the "
                   "PHY's 10 above "
                   "(default %(default)s; 0: normal scheduling)")
    b.add_argument("--keep-going", action="store_true",
                   help="capacity: run every client count, also after one with a late slot "
                   "(the table's rows then show what each further client costs)")
    b.set_defaults(fn=_cmd_bench)

    linkcurves_parsers(sub)  # `linkcurves` and `mcstable`
    linkgap_parser(sub)  # `linkgap`
    decode_parser(sub)  # `decode`: a SigMF IQ recording through the same receiver
    keys_parser(sub)  # `keys generate`: CURVE and integrity keys (docs/security.md)
    tcpview_parser(sub)  # `tcpview`: cwnd, RTT and time-sequence graphs of a run's flows
    timeline_parser(sub)  # `timeline`: a run's traces on one clock, one table
    uhd_sim_parser(sub)  # `uhd-sim`: UHD's device simulator (an emulated E320 on loopback)
    plugins = plugin_parser(sub)  # `plugin check`: a Python plugin against its family's contract
    plugin_new_parser(plugins)  # `plugin new`: an out-of-tree C++ plugin's CMake project

    a = p.parse_args(argv)
    try:
        return a.fn(a)
    except ConfigError as exc:
        print(f"oppsched: error: {exc}", file=sys.stderr)
        return 2
    except (TestbedError, NetnsError, RunFailed) as exc:  # a run that could not be done
        print(f"oppsched: error: {exc}", file=sys.stderr)
        return 1
    except build.BuildMissing as exc:  # a command that runs compiled code, without a build
        print(f"oppsched {a.cmd} needs the built testbed: {exc.module} is not importable "
              f"(run `make`)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("oppsched: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
