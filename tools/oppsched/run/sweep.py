"""`oppsched sweep`: every point of an experiment's `sweep:` section, one run each.

    DIR/sweep.json                      the sweep as run: experiment, axes, points
    DIR/points/<axis=value,...>/<variant>/seed-<k>/   one run: config.json, traces,
                                        summary.json (written last: its presence means done)
    DIR/sweep.csv                       one row per run: variant, seed, ok and errors (a
                                        summary that reports errors is marked, never
                                        silent), axis values and the summary's aggregate,
                                        per-flow and per-user figures
    DIR/report.html, DIR/plots/*.png    metric against axis, one line per variant (and flow),
                                        mean and 95 % interval over seeds

A point whose summary.json is there and reports no errors, and whose config.json (and the
summary's own copy) equals the configuration it would run now, is not run again, so an
interrupted sweep resumes where it stopped and a changed experiment re-runs only what
changed. A run that is interrupted or fails leaves no folder behind, except where the
process was killed outright; such a folder is not taken as done. Points run one at a time
by default (runs are real time and share the machine), `--jobs N` at a time locally, or on
a Dask distributed cluster (`--cluster`), one point per testbed machine at a time (worker
resource `testbed=1`): over TLS with the certificates of `oppsched keys cluster`, or
plain tcp:// on loopback only (docs/sweeps.md, docs/security.md).
"""

from __future__ import annotations

import io
import ipaddress
import json
import math
import os
import re
import shutil
import socket
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from oppsched.run.forkpool import run_forked
from oppsched.run.outlock import holding_out
from oppsched.paths import write_atomic
from oppsched.run import runner, sweepspec
from oppsched.testbed import keys
from oppsched.config import ConfigError
from oppsched.experiments import kind_module
from oppsched.run.sweep_results import CSV, MANIFEST, collect


# ----------------------------------------------------------------------------------------
# Running points


def _same_config(rundir: Path, cfg: dict) -> bool:
    try:
        have = json.loads((rundir / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return have == json.loads(json.dumps(cfg))


def is_done(rundir: Path, cfg: dict) -> bool:
    """A finished, error-free run of exactly this configuration. run_point writes the
    summary before it looks at the summary's errors, so a point killed outright (SIGKILL,
    power loss) in between leaves a summary.json that says the run failed: that point is
    not done."""
    try:
        summary = json.loads((rundir / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(summary, dict) or summary.get("errors"):
        return False
    if "config" in summary and summary["config"] != json.loads(json.dumps(cfg)):
        return False
    return _same_config(rundir, cfg)


class _Quiet:
    """A run's progress callback inside a sweep: the sweep prints its own progress."""

    def __call__(self, done: int, total: int, what: str) -> None:
        pass


def run_point(cfg: dict, rundir: Path) -> dict:
    """Runs one point into `rundir` (removed first if it holds an unfinished or different
    run) and returns its summary. A point that fails leaves no `rundir` (so it is run again
    next time): an interrupted one leaves nothing, a failed one its traces, logs and
    summary (saying why) in runner.failed_dir(rundir)."""
    rundir = Path(rundir)
    if rundir.exists():
        shutil.rmtree(rundir)
    rundir.mkdir(parents=True)
    try:
        write_atomic(rundir / "config.json", json.dumps(cfg, indent=2) + "\n")
        try:
            kind_module(cfg["kind"]).run(cfg, rundir, _Quiet())
        except Exception:
            runner.summarise_failed(rundir)
            raise
        summary = runner.analyze_run(rundir)
        if summary.get("errors"):
            raise runner.RunFailed("; ".join(summary["errors"]))
        if cfg["kind"] == "testbed":
            runner._write_timeline(rundir)
        return summary
    except Exception:
        failed = runner.failed_dir(rundir)
        shutil.rmtree(failed, ignore_errors=True)
        os.replace(rundir, failed)
        raise
    except BaseException:
        shutil.rmtree(rundir, ignore_errors=True)
        raise


def run_point_packed(cfg: dict, label: str | None = None) -> bytes:
    """Runs one point in a temporary folder and returns the folder as a gzipped tar: what a
    Dask worker on another machine sends back. A worker started with OPPSCHED_METRICS and
    `--preload oppsched.run.cluster_worker` serves the point's figures under `label` while it
    runs."""
    from oppsched.run import cluster_worker

    tmp = Path(tempfile.mkdtemp(prefix="oppsched-point-"))
    served = cluster_worker.server()
    label = label or cfg.get("experiment", "point")
    try:
        if served is not None:
            served.watch(label, cfg, tmp / "run")
        run_point(cfg, tmp / "run")
        # Which machine ran it: a lab wants to know when one testbed machine misbehaves.
        (tmp / "run" / "ran_on.json").write_text(json.dumps(
            {"host": socket.gethostname(), "pid": os.getpid()}) + "\n")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(tmp / "run", arcname=".")
        return buf.getvalue()
    finally:
        if served is not None:
            served.unwatch(label)
        shutil.rmtree(tmp, ignore_errors=True)


def unpack_point(blob: bytes, rundir: Path) -> None:
    """Writes a packed run into `rundir` whole: unpacked beside it, then renamed."""
    rundir = Path(rundir)
    rundir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=rundir.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            for m in tar.getmembers():
                target = (tmp / m.name).resolve()
                if not (m.isfile() or m.isdir()) or not str(target).startswith(str(tmp.resolve())):
                    raise ValueError(f"packed run: {m.name!r} is not a plain file inside the run")
            tar.extractall(tmp)
        if rundir.exists():
            shutil.rmtree(rundir)
        os.replace(tmp, rundir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Progress:
    """One line per finished point: done, remaining, failed, and the time left estimated
    from the mean duration of the points run so far."""

    def __init__(self, total: int, skipped: int, jobs: int, metrics=None, label: str = ""):
        self.total, self.done, self.failed, self.jobs = total, skipped, 0, max(1, jobs)
        self.ran = 0
        self.t0 = time.monotonic()
        self.metrics, self.label = metrics, label
        if metrics is not None:
            metrics.sweep_progress(self.done, total - self.done, 0)

    def finished(self, rel: str, ok: bool) -> None:
        self.done += 1
        self.ran += 1
        self.failed += 0 if ok else 1
        left = self.total - self.done
        el = time.monotonic() - self.t0
        eta = el / self.ran * left / self.jobs if self.ran else float("nan")
        if self.metrics is not None:
            self.metrics.unwatch(f"{self.label}/{rel}")
            self.metrics.sweep_progress(self.done, left, self.failed,
                                        eta if math.isfinite(eta) else None)
        print(f"oppsched sweep: {self.done}/{self.total} done, {left} to go"
              + (f", {self.failed} failed" if self.failed else "")
              + f", {_hms(el)} elapsed, about {_hms(eta)} left  [{'ok' if ok else 'FAILED'}] {rel}",
              file=sys.stderr, flush=True)


def _hms(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _local_worker(cfg: dict, rundir: str) -> None:
    run_point(cfg, Path(rundir))


def _run_local(todo, outdir: Path, progress: Progress, jobs: int, failures: list) -> None:
    if jobs <= 1:
        for p in todo:
            try:
                run_point(p.config, outdir / "points" / p.rel)
                progress.finished(p.rel, True)
            except Exception as exc:  # one failed point does not stop the sweep
                failures.append((p.rel, f"{type(exc).__name__}: {exc}"))
                progress.finished(p.rel, False)
        return

    def finished(rel, _result, exc):
        if exc is not None:
            failures.append((rel, f"{type(exc).__name__}: {exc}"))
        progress.finished(rel, exc is None)

    run_forked(((p.rel, _local_worker, (p.config, str(outdir / "points" / p.rel))) for p in todo),
               jobs, finished)


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything, so it is not trusted as local


def cluster_security(address: str, cluster_keys=None):
    """Checks `--cluster` (and `--cluster-keys`) before anything runs and returns the Dask
    Security to connect with (None for tcp:// on loopback). A Dask client submits pickled
    Python that the workers (root: runs build namespaces) execute, so an unauthenticated
    scheduler on the lab network is a root shell for whoever reaches its port: plain tcp://
    is allowed to a loopback address only, and tls:// needs the cluster's certificates."""
    m = re.fullmatch(r"([a-z]+)://(\[[^\]]+\]|[^:/\[\]]+)(?::(\d+))?/?", address or "")
    if not m:
        raise ConfigError(f"--cluster: {address!r} is not tls://HOST:PORT (or tcp://127.0.0.1:PORT "
                          "for a cluster on this machine)")
    scheme, host = m.group(1), m.group(2).strip("[]")
    if scheme == "tcp":
        if not _is_loopback(host):
            raise ConfigError(
                f"--cluster: {address!r} is plain tcp:// to a non-loopback address: anyone who "
                "can reach it could make the workers, which run as root, run any code. Secure "
                "it: make the cluster's TLS certificates with `oppsched keys cluster DIR`, start "
                "the scheduler and workers with them (docs/sweeps.md) and use "
                "--cluster tls://HOST:PORT --cluster-keys DIR")
        if cluster_keys is not None:
            raise ConfigError(f"--cluster-keys: given with {address!r}, which is plain tcp:// "
                              "(the certificates are used with --cluster tls://HOST:PORT)")
        return None
    if scheme != "tls":
        raise ConfigError(f"--cluster: {address!r}: the protocol {scheme}:// is not supported "
                          "(tls://HOST:PORT with --cluster-keys, or tcp:// on loopback)")
    if cluster_keys is None:
        raise ConfigError(f"--cluster {address}: tls:// needs --cluster-keys DIR, the folder "
                          "`oppsched keys cluster DIR` wrote the cluster's certificates into")
    return keys.cluster_security(cluster_keys, "client")


def _run_cluster(todo, outdir: Path, progress: Progress, address: str, failures: list,
                 security=None) -> None:
    # Optional dependency (Debian's python3-distributed), needed only with --cluster.
    from distributed import Client, as_completed

    try:
        client = Client(address, timeout="10s", security=security)
    except OSError as exc:
        hint = (" or it refused this client's certificate: --cluster-keys must hold "
                "certificates of the cluster's own CA" if security is not None else "")
        raise ConfigError(f"--cluster: cannot reach the Dask scheduler at {address!r}{hint} "
                          f"({exc})")
    with client:
        workers = client.scheduler_info()["workers"].values()
        testbeds = sum(w.get("resources", {}).get("testbed", 0) >= 1 for w in workers)
        if not testbeds:
            raise ConfigError(f"--cluster: no worker of {address} has the resource testbed=1 "
                              "(start workers with --resources testbed=1)")
        progress.jobs = testbeds  # points side by side, for the time left
        futs = {}
        for p in todo:
            f = client.submit(run_point_packed, p.config, f"{outdir.name}/{p.rel}",
                              resources={"testbed": 1}, pure=False,
                              key=f"oppsched-point-{p.rel}")
            futs[f] = p
        try:
            for fut in as_completed(list(futs)):
                p = futs[fut]
                try:
                    unpack_point(fut.result(), outdir / "points" / p.rel)
                    progress.finished(p.rel, True)
                except Exception as exc:
                    failures.append((p.rel, f"{type(exc).__name__}: {exc}"))
                    progress.finished(p.rel, False)
        except KeyboardInterrupt:
            client.cancel(list(futs))
            raise


def plan(path, overrides=(), duration=None) -> tuple[dict, sweepspec.Sweep]:
    """The experiment (resolved) and its sweep, every point validated; ConfigError if the
    file has no sweep section."""
    raw, schema, resolved = runner.load_experiment(path, overrides, duration)
    sw = sweepspec.expand(raw, schema, resolved, getattr(kind_module(resolved["kind"]), "check",
                                                         None))
    if sw is None:
        raise ConfigError(f"{path}: no sweep section (sweep.axes or sweep.repeat): "
                          "use `oppsched run` for a single run")
    return resolved, sw


@holding_out("sweep")  # one run or sweep per OUT (oppsched.run.outlock)
def run_sweep(path, outdir, overrides=(), duration=None, jobs: int = 1,
              cluster: str | None = None, cluster_keys=None, metrics=None) -> int:
    """Runs (or resumes) a sweep into `outdir`; returns the number of failed points.
    `cluster`: a Dask scheduler's address (tls:// with the certificates in `cluster_keys`,
    or tcp:// on loopback). `metrics`: a live.MetricsServer serving the sweep's progress,
    and the figures of the points while they run here (`--metrics`; with a cluster the
    points run on the workers, each of which can serve its own: oppsched.run.cluster_worker)."""
    if cluster_keys is not None and not cluster:
        raise ConfigError("--cluster-keys: given without --cluster tls://HOST:PORT")
    security = cluster_security(cluster, cluster_keys) if cluster else None
    resolved, sw = plan(path, overrides, duration)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    _write_manifest(outdir, resolved, sw)
    todo = [p for p in sw.points if not is_done(outdir / "points" / p.rel, p.config)]
    skipped = len(sw.points) - len(todo)
    where = f"on {cluster}" if cluster else (f"{jobs} at a time" if jobs > 1 else "one at a time")
    print(f"oppsched sweep: {resolved['experiment']}: {len(sw.points)} runs "
          f"({len(sw.axes)} axes, {len(resolved['variants']) or 1} variant(s), {sw.repeat} seed(s)), "
          f"{skipped} already done, {len(todo)} to run {where}, "
          f"{resolved['duration_s']:g} s each -> {outdir}", file=sys.stderr, flush=True)
    progress = Progress(len(sw.points), skipped, jobs if not cluster else 1, metrics,
                        outdir.name)
    if metrics is not None and not cluster:
        for p in todo:
            metrics.watch(f"{outdir.name}/{p.rel}", p.config, outdir / "points" / p.rel)
    failures: list = []
    try:
        if cluster:
            _run_cluster(todo, outdir, progress, cluster, failures, security)
        else:
            _run_local(todo, outdir, progress, jobs, failures)
    except KeyboardInterrupt:
        print(f"oppsched sweep: interrupted; {progress.done} of {len(sw.points)} runs are done "
              "and kept; the same command resumes", file=sys.stderr)
        raise
    finally:
        # A resumed sweep's own points count only once done; a stale summary of a killed
        # point is still reported by collect, marked as erroring.
        if any((outdir / "points" / p.rel / "summary.json").is_file() for p in sw.points):
            collect(outdir)
    for rel, why in failures:
        print(f"oppsched sweep: FAILED {rel}: {why}", file=sys.stderr)
    print(f"oppsched sweep: {len(sw.points) - len(failures)} of {len(sw.points)} runs done; "
          f"{outdir / CSV}; report {outdir / 'report.html'}", file=sys.stderr)
    return len(failures)


def _write_manifest(outdir: Path, resolved: dict, sw: sweepspec.Sweep) -> None:
    doc = {
        "experiment": resolved["experiment"],
        "description": resolved.get("description", ""),
        "kind": resolved["kind"],
        "duration_s": resolved["duration_s"],
        "repeat": sw.repeat,
        "variants": [v["name"] for v in resolved["variants"]],
        "axes": [{"name": a.name, "keys": list(a.keys), "values": list(a.values),
                  "variants": list(a.variants) if a.variants else None} for a in sw.axes],
        "plots": [dict(p) for p in sw.plots],
        "points": [{"rel": p.rel, "values": dict(p.values), "variant": p.variant,
                    "seed_index": p.seed_index} for p in sw.points],
    }
    write_atomic(outdir / MANIFEST, json.dumps(doc, indent=2) + "\n")
