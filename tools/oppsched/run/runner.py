"""`oppsched run` and `oppsched analyze`: experiment files in, results folders out.

A results folder holds, per run, config.json (the resolved experiment), the traces the
kind writes, summary.json (computed from the traces alone, so `oppsched analyze` can
recompute it) and plots; at its top, report.html, which a person reads first. An
experiment with `variants` runs once per variant, each in its own sub-folder, and the
report compares them side by side.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import yaml

from oppsched.paths import write_atomic
from oppsched import config as cfgmod
from oppsched import plugin
from oppsched.run import sweepspec
from oppsched.config import ConfigError, Field, ListOf
from oppsched.experiments import KINDS, kind_module
from oppsched.run.outlock import holding_out
from oppsched.analysis.report import write_report


def _plain_name(s: str) -> str | None:
    """A variant's name is a folder of OUT (and of a sweep's points): `.` and `..` would
    make it OUT itself or OUT's parent, which the run cleans and hands to the run user."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", s):
        return "is not a plain name (letters, digits, _ . -)"
    if s in (".", ".."):
        return "names a folder outside the results folder; use letters or digits"
    return None


COMMON = {
    "experiment": Field(str, doc="name of the experiment"),
    "description": Field(str, "", doc="one paragraph for the report"),
    "kind": Field(str, choices=tuple(KINDS)),
    "duration_s": Field(float, 30.0, min=0.01, max=7 * 86400.0),
    "seed": Field(int, 1, min=0, max=2**31 - 1, doc="seeds every random source of the run"),
    "variants": ListOf({
        "name": Field(str, check=_plain_name),
        "set": Field(dict, {}, doc="dotted key -> value, applied like --set"),
    }),
    "sweep": sweepspec.SCHEMA,
}


def schema_for(kind: str) -> dict:
    return {**COMMON, **kind_module(kind).SCHEMA}


def load_experiment(path: str | Path, overrides=(), duration: float | None = None):
    """Returns (raw, schema, resolved) or raises ConfigError naming the field and value."""
    p = Path(path)
    raw = cfgmod.read_yaml(p, str(path)) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the experiment must be a mapping, not {type(raw).__name__}")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    schema = schema_for(kind)
    plugin.resolve_library(raw, p)  # scheduler.library: relative to the experiment file
    for o in overrides:
        cfgmod.apply_override(raw, schema, o)
    if duration is not None:
        raw["duration_s"] = duration
    resolved = cfgmod.validate(schema, raw)
    _kind_check(kind, resolved)
    # Validate every variant now: a typo in the last variant must not surface after an hour.
    for v in resolved["variants"]:
        variant_config(raw, schema, v)
    sweepspec.expand(raw, schema, resolved, getattr(kind_module(kind), "check", None))
    return raw, schema, resolved


def variant_config(raw: dict, schema: dict, variant: dict) -> dict:
    data = copy.deepcopy(raw)
    data["variants"] = []
    for key, value in variant["set"].items():
        try:
            cfgmod.apply_override(data, schema, f"{key}={json.dumps(value)}")
        except ConfigError as exc:
            raise ConfigError(f"variants[{variant['name']}].set: {exc}") from None
    resolved = cfgmod.validate(schema, data)
    try:
        _kind_check(resolved["kind"], resolved)
    except ConfigError as exc:
        raise ConfigError(f"variants[{variant['name']}]: {exc}") from None
    resolved["variant"] = variant["name"]
    return resolved


def _kind_check(kind: str, resolved: dict) -> None:
    """Cross-field checks of a kind (impossible combinations), if it has any: a kind module
    may define check(resolved) raising ConfigError naming the field and the value."""
    fn = getattr(kind_module(kind), "check", None)
    if fn is not None:
        fn(resolved)


class Progress:
    def __init__(self, label: str):
        self.label = label
        self.t0 = time.monotonic()

    def __call__(self, done: int, total: int, what: str) -> None:
        pct = 100.0 * done / total if total else 100.0
        el = time.monotonic() - self.t0
        print(f"  [{self.label}] {done}/{total} {what} ({pct:.0f}%, {el:.1f} s)", file=sys.stderr,
              flush=True)


class RunFailed(RuntimeError):
    """A run that went wrong after it started: a daemon exited non-zero, a trace cannot be
    read. Its traces, logs and summary.json (which says why) are kept in FAILED_DIR."""


def staging_dir(outdir) -> Path:
    """Where `oppsched run --out OUT` writes while it runs: a hidden folder beside OUT."""
    outdir = Path(outdir)
    return outdir.parent / f".{outdir.name}.partial"


def failed_dir(outdir) -> Path:
    """Where the traces of a run that failed go (OUT itself is left as it was)."""
    outdir = Path(outdir)
    return outdir.parent / f"{outdir.name}.failed"


def _replace_dir(src: Path, dst: Path) -> None:
    """Puts folder src at dst, removing what dst held, by renames on one file system: a
    reader sees the old folder or the new one, never half of each."""
    if dst.exists():
        old = dst.parent / f".{dst.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dst)


@holding_out("run")  # one run or sweep per OUT; OUT replaced only if a results folder
def run_experiment(path, outdir, overrides=(), duration=None,
                   jobs: int = 1, metrics=None) -> list[tuple[str, dict, Path]]:
    """Runs every variant of an experiment into OUT and writes its report; `jobs` variants
    at a time (each in its own process; default one after another: runs are real time and
    share the machine's cores). `metrics`: a live.MetricsServer that serves the runs'
    figures while they go on (`--metrics`).

    The runs are written into staging_dir(OUT) and OUT is replaced only when all of them
    succeeded, so a failed or interrupted run never destroys earlier results. A failure
    leaves its traces, logs and summary.json (saying why) in failed_dir(OUT) and raises."""
    if jobs < 1:
        raise ConfigError(f"--jobs: {jobs} is not a positive number of runs at a time")
    raw, schema, resolved = load_experiment(path, overrides, duration)
    mod = kind_module(resolved["kind"])
    outdir = Path(outdir)
    outdir.parent.mkdir(parents=True, exist_ok=True)
    stage = staging_dir(outdir)
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    runs = []
    variants = resolved["variants"] or [None]
    print(f"oppsched: experiment {resolved['experiment']} ({resolved['kind']}), "
          f"{len(variants)} run(s) of {resolved['duration_s']:g} s -> {outdir}", file=sys.stderr)
    try:
        todo = []
        for v in variants:
            cfg = variant_config(raw, schema, v) if v else dict(resolved, variant="")
            rundir = stage / v["name"] if v else stage
            rundir.mkdir(parents=True, exist_ok=True)
            write_atomic(rundir / "config.json", json.dumps(cfg, indent=2) + "\n")
            todo.append((v["name"] if v else cfg["experiment"], cfg, rundir))
            if metrics is not None:
                metrics.watch(outdir.name + (f"/{v['name']}" if v else ""), cfg, rundir)
        if jobs == 1 or len(todo) == 1:
            for label, cfg, rundir in todo:
                print(f"oppsched: run {label}", file=sys.stderr)
                runs.append((label, _run_variant(mod, label, cfg, rundir, Progress(label)),
                             rundir))
        else:
            runs = _run_variants_side_by_side(mod, todo, jobs)
        write_atomic(stage / "experiment.yaml", yaml.safe_dump(resolved, sort_keys=False))
        write_report(stage, resolved, runs, _compare(mod, stage, runs))
    except BaseException:
        failed = failed_dir(outdir)
        _replace_dir(stage, failed)
        print(f"oppsched: the failed run's traces, logs and summary are in {failed} "
              f"({outdir} is unchanged)", file=sys.stderr)
        raise
    _replace_dir(stage, outdir)
    runs = [(label, s, outdir / rd.relative_to(stage)) for label, s, rd in runs]
    print(text_summary(runs))
    print(f"oppsched: report: {outdir / 'report.html'}")
    return runs


def _run_variant(mod, label: str, cfg: dict, rundir: Path, progress) -> dict:
    """One variant's run and summary; a failed run leaves a summary saying why and raises."""
    try:
        mod.run(cfg, rundir, progress)
    except BaseException:
        summarise_failed(rundir)
        raise
    summary = analyze_run(rundir)
    if summary.get("errors"):
        raise RunFailed(f"run {label}: " + "; ".join(summary["errors"]))
    if cfg["kind"] == "testbed":
        _write_timeline(rundir)
    return summary


def _write_timeline(rundir: Path) -> None:
    """timeline.csv.gz (oppsched/analysis/timeline.py): the run's traces on one clock. A run whose
    timeline cannot be written is still a run: said on stderr; `oppsched timeline DIR`
    writes it later."""
    from oppsched.analysis.timeline import write_timeline

    try:
        write_timeline(rundir)
    except (ConfigError, OSError) as exc:
        print(f"oppsched: warning: {rundir.name}: no timeline.csv.gz: {exc}", file=sys.stderr)


def _variant_worker(mod_kind: str, label: str, cfg: dict, rundir: str) -> dict:
    return _run_variant(kind_module(mod_kind), label, cfg, Path(rundir), _Labelled(label))


class _Labelled(Progress):
    """Progress of one of several runs going on side by side: a line per quarter of the run,
    naming it (a line per second from each would be unreadable)."""

    def __init__(self, label: str):
        super().__init__(label)
        self.quarter = 0

    def __call__(self, done: int, total: int, what: str) -> None:
        q = int(4 * done / total) if total else 4
        if q > self.quarter:
            self.quarter = q
            super().__call__(done, total, what)


def _run_variants_side_by_side(mod, todo, jobs: int) -> list:
    """Runs the variants `jobs` at a time, each in a forked process (runs are built to
    coexist: namespaces and owner files are per run). Every run is waited for; the first
    failure (in the variants' order) is raised after the others have ended."""
    from oppsched.run.forkpool import run_forked

    kind = todo[0][1]["kind"]
    print(f"oppsched: {len(todo)} runs, {min(jobs, len(todo))} at a time: "
          + ", ".join(label for label, _, _ in todo), file=sys.stderr)
    t0 = time.monotonic()
    ended: dict = {}

    def finished(label, result, exc):
        ended[label] = (result, exc)
        if exc is None:
            print(f"oppsched: run {label} done ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
        else:
            print(f"oppsched: run {label} failed: {exc}", file=sys.stderr)

    run_forked(((label, _variant_worker, (kind, label, cfg, str(rundir)))
                for label, cfg, rundir in todo), min(jobs, len(todo)), finished)
    results, first_exc = [], None
    for label, _cfg, rundir in todo:  # in the variants' order
        result, exc = ended[label]
        if exc is None:
            results.append((label, result, rundir))
        else:
            first_exc = first_exc or exc
    if first_exc is not None:
        raise first_exc
    return results


def summarise_failed(rundir: Path) -> None:
    """Best effort: a summary.json for a run that failed, from whatever traces it left,
    with the failure among its errors. Never raises (the run's own error is what counts)."""
    try:
        analyze_run(rundir)
    except Exception:  # noqa: BLE001 -- a failed run's traces may be anything
        pass


def analyze_run(rundir: Path) -> dict:
    cfg = json.loads((Path(rundir) / "config.json").read_text())
    mod = kind_module(cfg["kind"])
    summary = mod.analyze(Path(rundir))
    try:
        summary["plots"] = mod.plot(Path(rundir), summary) if _plots(cfg) else []
    except OSError as exc:  # a full disk: the summary, which says so, matters more
        summary["plots"] = []
        summary.setdefault("errors", []).append(f"plots: {type(exc).__name__}: {exc}")
    # Written last and whole: a summary.json present means a finished run (sweeps rely on it).
    write_atomic(Path(rundir) / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


def analyze_dir(outdir) -> list[tuple[str, dict, Path]]:
    """Recomputes summaries, plots and the report of a results folder from its traces."""
    outdir = Path(outdir)
    if (outdir / "config.json").exists():
        rundirs = [outdir]
    else:
        rundirs = sorted(p.parent for p in outdir.glob("*/config.json"))
    if not rundirs:
        raise ConfigError(f"{outdir}: no config.json here or one level down: not a results folder")
    runs = []
    for rd in rundirs:
        s = analyze_run(rd)
        runs.append((s["config"].get("variant") or s["experiment"], s, rd))
    resolved = runs[0][1]["config"]
    mod = kind_module(resolved["kind"])
    report = write_report(outdir, resolved, runs, _compare(mod, outdir, runs))
    print(text_summary(runs))
    print(f"oppsched: report: {report}")
    bad = [f"{label}: {e}" for label, s, _ in runs for e in s.get("errors") or []]
    if bad:
        raise RunFailed("; ".join(bad))
    return runs


def _plots(cfg: dict) -> bool:
    """analysis.plots: whether a run draws its PNGs (kinds without the key always do)."""
    return bool((cfg.get("analysis") or {}).get("plots", True))


def _compare(mod, outdir: Path, runs) -> list[str]:
    fn = getattr(mod, "compare_plots", None)
    if not fn or not all(_plots(s.get("config") or {}) for _, s, _ in runs):
        return []
    return fn(Path(outdir), runs)


def text_summary(runs) -> str:
    from oppsched.experiments.testbed.analysis import REALTIME_FRACTION_MIN
    lines = []
    for label, s, _ in runs:
        lines.append(f"== {label}: {s['experiment']}, {s['duration_s']:.1f} s, "
                     f"{s['slots']['total']} slots ({s['slots']['empty']} empty, {s['slots']['late']} late)")
        rt = s["slots"].get("realtime_fraction")
        if rt is not None and rt < REALTIME_FRACTION_MIN:
            lines.append(f"   WARNING: the slot clock kept {100 * rt:.0f} % of real time "
                         f"({s['slots']['behind_s']:.1f} s behind at the end): the machine was "
                         f"too busy for this PHY; its MAC figures are per slot time")
        dirs = s.get("directions") or {}
        both = bool((dirs.get("up") or {}).get("flows"))  # name the direction when any is up
        for f in s["flows"]:
            rtt = f.get("rtt_ms_mean")
            where = f"{f['user']}, {f.get('direction', 'down')}" if both else f["user"]
            lines.append(f"   flow {f['id']:>8} ({where}): goodput "
                         f"{f['goodput_bps']/1e3:9.1f} kb/s, "
                         + (f"RTT {rtt:.1f} ms" if rtt is not None else "RTT -"))
        if both:
            for d, t in dirs.items():
                if t["flows"]:
                    lines.append(f"   {d:>4}stream: {len(t['flows'])} flow(s), goodput "
                                 f"{t['goodput_bps']/1e3:9.1f} kb/s, Jain {t['jain_index']:.3f}")
        sh = (s.get("medium") or {}).get("slot_share")
        if sh:
            lines.append(f"   medium {s['medium']['mode']}: slot shares down "
                         f"{100*sh['down']:.1f} %, up "
                         + ", ".join(f"{n} {100*v:.1f} %" for n, v in sh["up"].items()))
        for u in s["users"]:
            # the loss after the HARQ budget and, on the paper link, the margin m at the end
            # (Andrew & Hanly, CLAMP, Table I: 1e-3 after retransmissions)
            link = ""
            if u.get("tb_sent"):
                link += (f", lost after HARQ {u['tb_failed_final']}/{u['tb_sent']} "
                         f"({u.get('residual_loss', 0.0):.1e})")
            if u.get("link_margin") is not None:
                link += f", margin m {u['link_margin']:+.2f}"
            lines.append(f"   user {u['name']:>8}: slots {100*u['slot_fraction']:5.1f} %, "
                         f"MAC throughput {u['mac_throughput_bps']/1e3:9.1f} kb/s" + link)
        jf = s.get("jain_index_flows")
        fs = s.get("jain_index_flows_fair_share")
        lines.append(f"   Jain index: users {s['jain_index_users']:.3f}"
                     + (f", flows {jf:.3f}" if jf is not None else "")
                     + (f", flows/fair share {fs:.3f}" if fs is not None else ""))
        gm = s.get("goodput_mac_fraction")
        if gm is not None:
            lines.append(f"   TCP goodput / MAC throughput: {gm:.3f}")
        pl = s.get("scheduler") or {}
        if "plugin_decisions" in pl:  # a python scheduler (docs/extending.md)
            n = pl["plugin_decisions"]
            mean = f", {pl['plugin_decision_ns'] / n / 1e3:.1f} us each" if n else ""
            lines.append(f"   scheduler plugin: {n} decisions{mean}, "
                         f"{pl['plugin_deadline_misses']} deadline misses, "
                         f"{pl['plugin_exceptions']} exceptions, "
                         f"{pl['plugin_invalid_decisions']} invalid (PF decided "
                         f"{pl['plugin_fallbacks']} slots)")
        for err in s.get("errors") or []:
            lines.append(f"   ERROR: {err}")
    return "\n".join(lines)
