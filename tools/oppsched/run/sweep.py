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

import html
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

import numpy as np
import pandas as pd
from scipy import stats

from oppsched.run.forkpool import run_forked
from oppsched.run.outlock import holding_out
from oppsched.paths import write_atomic
from oppsched.run import runner, sweepspec
from oppsched.testbed import keys
from oppsched.config import ConfigError
from oppsched.experiments import kind_module
from oppsched.analysis.report import page_head, pyplot, save_figure

MANIFEST = "sweep.json"
CSV = "sweep.csv"
ID_COLUMNS = ("point", "variant", "seed")
# Whether a run's summary reports errors (0/1) and which: such a run is in the table, marked.
STATUS_COLUMNS = ("ok", "errors")
# What the report plots against every axis when the sweep names no plots.
DEFAULT_METRICS = (
    ("goodput_total_bps", "aggregate TCP goodput (b/s)"),
    ("flow.*.goodput_bps", "goodput per flow (b/s)"),
    ("jain_index_flows", "Jain's index over flows"),
    ("jain_index_users", "Jain's index over users"),
    ("mean_queue_delay_ms", "mean queueing delay (ms)"),
    ("mac_throughput_total_bps", "MAC throughput (b/s)"),
)


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


# ----------------------------------------------------------------------------------------
# Results: sweep.csv and the report


def flatten_summary(s: dict) -> dict:
    """The numbers of a run's summary as flat columns: top-level and nested scalars
    ("jain_index_flows", "slots.late"), per flow ("flow.<id>.<key>"), per user
    ("user.<name>.<key>"), and the figures the sweep plots: goodput_total_bps, download_1MB_mean_s,
    mac_throughput_total_bps, mean_queue_delay_ms, mean_slot_gap_ms (means over users), the
    mean and median over users of slot_gap_cov and slot_gap_backlogged_cov
    (mean_slot_gap_cov, median_slot_gap_cov, ...), mean_rtt_ms (mean over flows) and the
    smallest and largest resource (slot) fraction of a user with their ratio."""
    row: dict = {}

    def scalars(prefix: str, d: dict) -> None:
        for k, v in d.items():
            if k in ("config", "plots"):
                continue
            if isinstance(v, bool):
                row[prefix + k] = int(v)
            elif isinstance(v, (int, float)) or v is None:
                row[prefix + k] = v
            elif isinstance(v, dict):
                scalars(f"{prefix}{k}.", v)

    scalars("", {k: v for k, v in s.items() if k not in ("flows", "users")})
    for f in s.get("flows", []):
        scalars(f"flow.{f['id']}.", f)
    for u in s.get("users", []):
        scalars(f"user.{u['name']}.", u)
    flows = [f.get("goodput_bps") for f in s.get("flows", []) if f.get("goodput_bps") is not None]
    if flows:
        row["goodput_total_bps"] = float(sum(flows))
        # Andrew & Hanly, CLAMP, Fig. 5(b): the mean over the flows of the time a 1-Mbyte
        # file takes at the flow's rate (what a user of each flow would wait).
        if all(g > 0 for g in flows):
            row["download_1MB_mean_s"] = float(np.mean([8e6 / g for g in flows]))
    users = s.get("users", [])
    macs = [u["mac_throughput_bps"] for u in users if u.get("mac_throughput_bps") is not None]
    if macs:
        row["mac_throughput_total_bps"] = float(sum(macs))
    sf = [u["slot_fraction"] for u in users if u.get("slot_fraction") is not None]
    if sf:
        row["slot_fraction_min"], row["slot_fraction_max"] = float(min(sf)), float(max(sf))
        row["slot_fraction_min_max_ratio"] = float(min(sf) / max(sf)) if max(sf) > 0 else None
    qd = [u["mean_queue_delay_ms"] for u in users if u.get("mean_queue_delay_ms") is not None]
    if qd:
        row["mean_queue_delay_ms"] = float(np.mean(qd))
    # Srinivasan & Baras, Figs. 5 and §V: scheduling jitter and RTT, means over the users
    # (flows) that have them, so that a sweep plots one line against its axis.
    # The median too: a user whose TCP sat out a retransmission timeout has one gap of
    # seconds, a CoV far above the others', and would dominate the mean.
    for col, key, items, f in (
            ("mean_slot_gap_ms", "slot_gap_mean_ms", users, np.mean),
            ("mean_slot_gap_cov", "slot_gap_cov", users, np.mean),
            ("median_slot_gap_cov", "slot_gap_cov", users, np.median),
            ("mean_slot_gap_backlogged_cov", "slot_gap_backlogged_cov", users, np.mean),
            ("median_slot_gap_backlogged_cov", "slot_gap_backlogged_cov", users, np.median),
            ("mean_rtt_ms", "rtt_ms_mean", s.get("flows", []), np.mean)):
        xs = [it[key] for it in items if it.get(key) is not None]
        if xs:
            row[col] = float(f(xs))
    return row


def collect(outdir, reanalyze: bool = False) -> pd.DataFrame:
    """Writes DIR/sweep.csv and DIR/report.html from the points that have a summary
    (recomputing each from its traces first if `reanalyze`). Returns the table. A summary
    with errors (a point killed after its summary was written, or one whose re-analysis
    finds a fault) is kept in the table but marked: `ok` 0 and its `errors`, a warning on
    stderr naming it, and it is left out of the report's plots and means."""
    outdir = Path(outdir)
    try:
        man = json.loads((outdir / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{outdir}: no readable {MANIFEST}: not a sweep folder ({exc})") from None
    axis_names = [a["name"] for a in man["axes"]]
    rows = []
    for p in man["points"]:
        rundir = outdir / "points" / p["rel"]
        if not (rundir / "summary.json").is_file():
            continue
        s = runner.analyze_run(rundir) if reanalyze else json.loads(
            (rundir / "summary.json").read_text())
        errors = [str(e) for e in s.get("errors") or []]
        row = {"point": p["rel"], "variant": p["variant"] or "", "seed": s["config"]["seed"],
               "ok": 0 if errors else 1, "errors": "; ".join(errors)}
        for a in axis_names:
            row[a] = p["values"].get(a)
        for k, v in flatten_summary(s).items():
            row[k if k not in row else f"summary.{k}"] = v
        rows.append(row)
    df = pd.DataFrame(rows, columns=list(ID_COLUMNS) + list(STATUS_COLUMNS) + axis_names
                      if not rows else None)
    bad = df[df["ok"] == 0] if not df.empty else df
    for _, r in bad.iterrows():
        print(f"oppsched sweep: WARNING: {r['point']} has errors and is left out of the "
              f"plots (ok=0 in {CSV}; a sweep run again re-runs it): {r['errors']}",
              file=sys.stderr)
    write_atomic(outdir / CSV, df.to_csv(index=False))
    write_sweep_report(outdir, man, df)
    return df


def _ci95(x: np.ndarray) -> float:
    """Half-width of the 95 % confidence interval of the mean (Student t); 0 for one run."""
    x = x[np.isfinite(x)]
    if len(x) < 2:
        return 0.0
    return float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


def _expand_y(df: pd.DataFrame, pattern: str) -> list[str]:
    if "*" not in pattern:
        return [pattern] if pattern in df.columns else []
    rx = re.compile("^" + re.escape(pattern).replace(r"\*", "([^.]+)") + "$")
    return [c for c in df.columns if rx.match(c)]


def series(df: pd.DataFrame, x: str, y: str, axis_names: list[str],
           by: list[str] | None = None) -> list[dict]:
    """The lines of one plot. Each run set that differs only in its seed is one point: the
    mean of x and y and the 95 % interval of y. Points are joined into a line per variant,
    per matched column (a `*` in y) and per value of the `by` axes; the remaining axes run
    along the line. Default `by`: where x is an axis, the other axes; where x is a metric
    (goodput against queueing delay), none: every axis runs along the line. A variant the
    x axis does not apply to gives one reference level instead of a line."""
    out = []
    for col in _expand_y(df, y):
        for variant, dv in df.groupby("variant", sort=False):
            if dv[col].isna().all():
                continue
            present = [a for a in axis_names if a in dv.columns and dv[a].notna().any()]
            if x in axis_names and x not in present:
                ys = pd.to_numeric(dv[col], errors="coerce").to_numpy(float)
                label = " ".join(filter(None, [variant or "", col if "*" in y else ""]))
                out.append({"label": label or col, "ref": (float(np.nanmean(ys)), _ci95(ys))})
                continue
            if x not in dv.columns or dv[x].isna().all():
                continue
            split = [a for a in (by if by is not None else
                                 [a for a in axis_names if a != x] if x in axis_names else [])
                     if a in present]
            lines = (dv.groupby(split[0] if len(split) == 1 else split, sort=True, dropna=False)
                     if split else [((), dv)])
            for skey, dl in lines:
                skey = skey if isinstance(skey, tuple) else (skey,)
                pts = []
                groups = (dl.groupby(present[0] if len(present) == 1 else present, sort=True,
                                     dropna=False) if present else [((), dl)])
                along = [a for a in present if a not in split]
                tags = []
                for gkey, g in groups:
                    xs = pd.to_numeric(g[x], errors="coerce").to_numpy(float)
                    ys = pd.to_numeric(g[col], errors="coerce").to_numpy(float)
                    if not np.isfinite(xs).any() or not np.isfinite(ys).any():
                        continue
                    pts.append((float(np.nanmean(xs)), float(np.nanmean(ys)), _ci95(ys),
                                int(np.isfinite(ys).sum())))
                    gkey = gkey if isinstance(gkey, tuple) else (gkey,)
                    vals = dict(zip(present, gkey))
                    tags.append(",".join(f"{a}={sweepspec.format_value(vals[a])}" for a in along))
                if x in axis_names:
                    order = sorted(range(len(pts)), key=lambda i: pts[i])
                    pts, tags = [pts[i] for i in order], [tags[i] for i in order]
                label = " ".join(filter(None, [variant or "", col if "*" in y else "",
                                               ",".join(f"{a}={sweepspec.format_value(v)}"
                                                        for a, v in zip(split, skey))]))
                if pts:
                    # Against a metric, a line is parametric: in the order of its axes,
                    # each point tagged with their values.
                    out.append({"label": label or col, "points": pts,
                                "tags": tags if x not in axis_names else []})
    return out


def _plot_specs(man: dict, df: pd.DataFrame) -> list[dict]:
    if man["plots"]:
        return man["plots"]
    specs = []
    for a in man["axes"]:
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in a["values"])
        vals = [v for v in a["values"] if isinstance(v, (int, float))]
        logx = numeric and len(vals) > 2 and min(vals) > 0 and max(vals) / min(vals) >= 50
        for metric, title in DEFAULT_METRICS:
            if _expand_y(df, metric):
                specs.append({"x": a["name"], "y": metric, "title": f"{title} against {a['name']}",
                              "logx": logx, "logy": False})
    return specs


def write_sweep_report(outdir: Path, man: dict, df: pd.DataFrame) -> Path:
    """report.html of a sweep: what was swept, a plot per (metric, axis) with one line per
    variant (and flow), mean and 95 % interval over seeds, and the table of runs."""
    plt = pyplot()
    e = html.escape
    axis_names = [a["name"] for a in man["axes"]]
    # A run whose summary reports errors measured something else than the point asks for
    # (or nothing): its figures would bias a mean without a trace in the plot.
    bad = df[df["ok"] == 0] if "ok" in df.columns else df.iloc[0:0]
    df = df.drop(bad.index)
    plotdir = outdir / "plots"
    plotdir.mkdir(exist_ok=True)
    for old in plotdir.glob("sweep-*.png"):
        old.unlink()
    pngs = []
    if not df.empty:
        axes_by_name = {a["name"]: a for a in man["axes"]}
        for i, spec in enumerate(_plot_specs(man, df)):
            data, ticks = df, None
            ax_spec = axes_by_name.get(spec["x"])
            if ax_spec and not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                   for v in ax_spec["values"]):
                # A categorical axis (file names, kinds): its values in order along x.
                labels = [sweepspec.format_value(v) for v in ax_spec["values"]]
                pos = {lab: k for k, lab in enumerate(labels)}
                data = df.assign(**{spec["x"]: df[spec["x"]].map(
                    lambda v: pos.get(sweepspec.format_value(v)) if pd.notna(v) else None)})
                ticks = [Path(lab).name for lab in labels]
            lines = series(data, spec["x"], spec["y"], axis_names, spec.get("by"))
            if not lines:
                continue
            paper = spec.get("paper") or []
            fig, ax = plt.subplots(figsize=(7, 4.2))
            for k, ln in enumerate(lines):
                color = f"C{k % 10}"
                if "ref" in ln:
                    m, ci = ln["ref"]
                    ax.axhline(m, ls="--", lw=1.0, color=color,
                               label=f"{ln['label']} (no {spec['x']})")
                    if ci > 0:
                        ax.axhspan(m - ci, m + ci, color=color, alpha=0.12)
                    continue
                xs, ys, cis, _ = zip(*ln["points"])
                ax.errorbar(xs, ys, yerr=cis, marker="o", ms=4, capsize=3, lw=1.2, color=color,
                            label=ln["label"])
                for px, py, tag in zip(xs, ys, ln.get("tags", [])):
                    ax.annotate(tag, (px, py), textcoords="offset points", xytext=(4, 4),
                                fontsize=6, color=color)
            for q in paper:  # the paper's own values, black, beside the measured ones
                if q["x"] is None:
                    ax.axhline(q["y"], ls=":", lw=1.2, color="black", label=q["label"])
                else:
                    ax.plot([q["x"]], [q["y"]], marker="*", ms=11, ls="none", color="black",
                            label=q["label"])
            ax.set_xlabel(spec["x"])
            if ticks is not None:
                ax.set_xticks(range(len(ticks)))
                ax.set_xticklabels(ticks, fontsize=8)
            ax.set_ylabel(spec["y"])
            if spec.get("logx"):
                ax.set_xscale("log")
            if spec.get("logy"):
                ax.set_yscale("log")
            ax.set_title(spec.get("title") or f"{spec['y']} against {spec['x']}", fontsize=10)
            ax.grid(alpha=0.3)
            if len(lines) + len(paper) > 1:
                ax.legend(fontsize=7, ncol=2 if len(lines) > 8 else 1)
            name = f"sweep-{i:02d}-{re.sub(r'[^A-Za-z0-9_.-]', '_', spec['y'])}.png"
            pngs.append("plots/" + save_figure(fig, plotdir, name))

    n_points = len(man["points"])
    parts = [
        page_head(f"oppsched sweep: {man['experiment']}"),
        f"<h1>Sweep: {e(man['experiment'])}</h1>",
        f"<p>{e(man.get('description', ''))}</p>",
        f"<p>kind <code>{e(man['kind'])}</code>, {man['duration_s']:g} s per run, "
        f"{len(df)} of {n_points} runs finished without errors, {man['repeat']} seed(s) "
        "per point; "
        "error bars: 95 % interval of the mean over seeds (Student t). "
        f"Every run: <code>{e(CSV)}</code> (one row per run).</p>",
        "<h2>Axes</h2><table><tr><th>axis</th><th>key</th><th>values</th><th>variants</th></tr>",
    ]
    for a in man["axes"]:
        vals = ", ".join(sweepspec.format_value(v) for v in a["values"])
        parts.append(f"<tr><td>{e(a['name'])}</td><td><code>{e(', '.join(a['keys']))}</code></td>"
                     f"<td>{e(vals)}</td><td>{e(', '.join(a['variants'] or ['all']))}</td></tr>")
    parts.append("</table>")
    if len(bad):
        parts.append(f"<h2>Runs with errors ({len(bad)})</h2><p>Left out of the plots and "
                     f"means (<code>ok</code> 0 in <code>{e(CSV)}</code>); running the sweep "
                     "again re-runs them.</p><table><tr><th>run</th><th>errors</th></tr>")
        for _, r in bad.iterrows():
            parts.append(f"<tr><td>{e(str(r['point']))}</td><td>{e(str(r['errors']))}</td></tr>")
        parts.append("</table>")
    for png in pngs:
        parts.append(f"<img src='{e(png)}' alt='{e(png)}'>")
    if not df.empty:
        shown = [c for c in ("goodput_total_bps", "jain_index_flows", "jain_index_users",
                             "mean_queue_delay_ms", "mac_throughput_total_bps", "slots.late")
                 if c in df.columns]
        keys = [a for a in axis_names if a in df.columns] + ["variant"]
        parts.append("<h2>Mean over seeds</h2><table><tr>"
                     + "".join(f"<th>{e(k)}</th>" for k in keys + ["runs"] + shown) + "</tr>")
        for key, g in df.groupby(keys, sort=True, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            cells = [sweepspec.format_value(k) if not (isinstance(k, float) and math.isnan(k))
                     else "&ndash;" for k in key]
            cells.append(str(len(g)))
            for c in shown:
                v = pd.to_numeric(g[c], errors="coerce").mean()
                cells.append("&ndash;" if pd.isna(v) else f"{v:.4g}")
            parts.append("<tr>" + "".join(f"<td>{e(c) if c != '&ndash;' else c}</td>"
                                          for c in cells) + "</tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return write_atomic(outdir / "report.html", "\n".join(parts))


def is_sweep_dir(path) -> bool:
    return (Path(path) / MANIFEST).is_file()
