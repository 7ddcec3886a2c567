"""The `sweep:` section of an experiment file, checked and expanded into points.

    sweep:
      axes:
        buffer: {key: aqm.limit_bytes, values: [9000, 18000, 36000], variants: [newreno]}
        a:      {key: clamp.a_bytes, values: {from: 2000, to: 20000, steps: 4, scale: log,
                                              integer: true}, variants: [clamp]}
      repeat: 3                 # seeds per point: seed, seed + 1, ...
      plots:                    # optional; default: every metric of note against every axis
        - {x: mean_queue_delay_ms, y: "flow.*.goodput_bps"}

Each axis is a dotted key of the experiment (as `--set` takes it), or a list of keys set to
the same value (every device's Doppler, say), and its values: a list,
or a range {from, to, steps, scale: lin|log, integer}. `also: {key: {axis value: value}}`
sets further keys along with the axis, each to its own value at each axis value (a setting
that depends on the axis value, such as the link's starting margin at each Doppler); every
axis value needs one, and values without an axis value (left out by --set) are ignored. The points are the cartesian product
of the axes, crossed with the experiment's variants and with `repeat` seeds. An axis that
names `variants` applies to those variants only (a paper that sweeps the buffer for one
algorithm and a parameter for another): the other variants do not multiply by it. Every
point's configuration is built and validated before anything runs, so a bad value in the
last point is reported at once, naming the axis, the key and the value.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from dataclasses import dataclass, field

from oppsched import config as cfgmod
from oppsched.config import ConfigError, Field, ListOf

AXIS_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
RESERVED = {"variant", "seed", "point", "ok", "errors"}  # sweep.csv columns: a run, its status
MAX_POINTS = 100_000

# The schema of the section itself; the axes mapping (name -> spec) is checked by parse().
SCHEMA = {
    "axes": Field(dict, {}, doc="axis name -> {key, values | range, variants}"),
    "repeat": Field(int, 1, min=1, max=1000, doc="seeds per point"),
    "plots": ListOf({
        "x": Field(str, doc="an axis name or a column of sweep.csv"),
        "y": Field(str, doc="a column of sweep.csv; '*' matches every flow or user"),
        "title": Field(str, ""),
        "logx": Field(bool, False),
        "logy": Field(bool, False),
        "by": Field((list, type(None)), None, doc="axes that split lines (default: the "
                    "other axes where x is an axis, none where x is a metric)"),
        "paper": Field(list, [], doc="the paper's own values, drawn beside the measured "
                       "ones: a list of {y, x (omit: a level across the plot), label}"),
    }),
}


def _paper_point(where: str, q) -> dict:
    """One of the paper's values on a plot: {y, x (None: a level), label}."""
    if not isinstance(q, dict):
        raise ConfigError(f"{where}: {q!r} is not a mapping {{y, x, label}}")
    unknown = sorted(set(q) - {"x", "y", "label"})
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (known: label, x, y)")
    out = {"label": q.get("label", "paper")}
    if not isinstance(out["label"], str):
        raise ConfigError(f"{where}.label: {out['label']!r} is not a string")
    for key in ("x", "y"):
        v = q.get(key)
        if v is None and key == "x":
            out[key] = None
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"{where}.{key}: {v!r} is not a finite number")
        out[key] = float(v)
    return out


@dataclass(frozen=True)
class Axis:
    name: str
    keys: tuple  # the dotted keys it sets, all to the same value
    values: tuple
    variants: tuple | None = None  # None: every variant
    also: tuple = ()  # ((dotted key, ((axis value, value), ...)), ...)

    def settings(self, value) -> list:
        """(dotted key, value) pairs the axis sets at one of its values."""
        return [(k, value) for k in self.keys] + [(k, dict(vs)[value]) for k, vs in self.also]

    def applies_to(self, variant: str | None) -> bool:
        return self.variants is None or variant in self.variants


@dataclass(frozen=True)
class Point:
    """One run of a sweep: axis values (only the axes that apply to its variant), the
    variant (None without variants), the seed index and its resolved configuration."""

    values: tuple  # ((axis name, value), ...) in axis order
    variant: str | None
    seed_index: int
    config: dict = field(compare=False, hash=False)

    @property
    def rel(self) -> str:
        """Its folder under DIR/points: <axis=value,...>/<variant>/seed-<k>."""
        head = ",".join(f"{n}={format_value(v)}" for n, v in self.values) or "base"
        return f"{head}/{self.variant or 'base'}/seed-{self.seed_index}"


@dataclass(frozen=True)
class Sweep:
    axes: tuple
    repeat: int
    plots: tuple
    points: tuple  # of Point, in run order


def format_value(v) -> str:
    """A value as it appears in folder names and CSV cells: %g for numbers, plain text
    for the rest (characters a folder name cannot hold replaced by '_')."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()  # a numpy scalar, as pandas hands them out
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    text = v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", text)


def _range_values(where: str, spec: dict) -> tuple:
    known = {"from", "to", "steps", "scale", "integer"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(sorted(known))})")
    for k in ("from", "to", "steps"):
        if k not in spec:
            raise ConfigError(f"{where}.{k}: required in a range")
    lo = Field((int, float)).validate(f"{where}.from", spec["from"])
    hi = Field((int, float)).validate(f"{where}.to", spec["to"])
    steps = Field(int, min=1, max=10_000).validate(f"{where}.steps", spec["steps"])
    scale = Field(str, choices=("lin", "log")).validate(f"{where}.scale", spec.get("scale", "lin"))
    integer = Field(bool).validate(f"{where}.integer", spec.get("integer", False))
    if scale == "log" and not (lo > 0 and hi > 0):
        raise ConfigError(f"{where}: a log range needs from and to > 0 (from {lo!r}, to {hi!r})")
    if steps == 1:
        vals = [float(lo)]
    elif scale == "lin":
        vals = [lo + (hi - lo) * i / (steps - 1) for i in range(steps)]
    else:
        vals = [math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * i / (steps - 1))
                for i in range(steps)]
    whole = isinstance(lo, int) and isinstance(hi, int) and not isinstance(lo, bool)
    if integer or (whole and scale == "lin" and all(abs(v - round(v)) < 1e-9 for v in vals)):
        vals = [int(round(v)) for v in vals]
        if len(set(vals)) < len(vals):
            raise ConfigError(f"{where}: {steps} steps from {lo} to {hi} repeat a value once "
                              "rounded to integers")
    return tuple(vals)


def _axis(name: str, spec, variant_names: list[str]) -> Axis:
    where = f"sweep.axes.{name}"
    if not AXIS_NAME_RE.fullmatch(name) or name in RESERVED:
        raise ConfigError(f"sweep.axes: {name!r} is not an axis name (a letter, then letters, "
                          f"digits or _; not {', '.join(sorted(RESERVED))})")
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: {spec!r} is not a mapping with key and values")
    known = {"key", "values", "variants", "also"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(sorted(known))})")
    if "key" not in spec:
        raise ConfigError(f"{where}.key: required (the dotted key this axis sets)")
    if "values" not in spec:
        raise ConfigError(f"{where}.values: required (a list, or a range {{from, to, steps}})")
    key = spec["key"]
    if isinstance(key, str):
        keys = (key,)
    elif isinstance(key, list) and key and all(isinstance(k, str) for k in key):
        keys = tuple(key)
    else:
        raise ConfigError(f"{where}.key: {key!r} is neither a dotted key nor a list of them")
    raw = spec["values"]
    if isinstance(raw, list):
        if not raw:
            raise ConfigError(f"{where}.values: an empty list")
        values = tuple(raw)
        if len({json.dumps(v, sort_keys=True) for v in values}) < len(values):
            raise ConfigError(f"{where}.values: {raw!r} repeats a value")
    elif isinstance(raw, dict):
        values = _range_values(f"{where}.values", raw)
    else:
        raise ConfigError(f"{where}.values: {raw!r} is neither a list nor a range")
    variants = spec.get("variants")
    if variants is not None:
        if not isinstance(variants, list) or not variants:
            raise ConfigError(f"{where}.variants: {variants!r} is not a non-empty list of names")
        for v in variants:
            if v not in variant_names:
                known_v = ", ".join(variant_names) or "none: the experiment has no variants"
                raise ConfigError(f"{where}.variants: {v!r} is not a variant (known: {known_v})")
        variants = tuple(variants)
    also = spec.get("also", {})
    if not isinstance(also, dict):
        raise ConfigError(f"{where}.also: {also!r} is not a mapping of dotted keys to "
                          "{axis value: value}")
    for k, by in also.items():
        if k in keys:
            raise ConfigError(f"{where}.also.{k}: the axis's own key")
        if not isinstance(by, dict):
            raise ConfigError(f"{where}.also.{k}: {by!r} is not a mapping of axis values "
                              "to values")
        missing = [v for v in values if v not in by]
        if missing:
            raise ConfigError(f"{where}.also.{k}: no value for the axis value {missing[0]!r} "
                              f"(given for {', '.join(repr(x) for x in by)})")
    return Axis(name, keys, values, variants,
                tuple((k, tuple((v, by[v]) for v in values)) for k, by in also.items()))


def _set(data: dict, schema: dict, key: str, value, where: str) -> None:
    try:
        cfgmod.apply_override(data, schema, f"{key}={json.dumps(value)}")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def expand(raw: dict, schema: dict, resolved: dict, check=None) -> Sweep | None:
    """The sweep of an experiment (None if it has none), every point's configuration
    resolved and validated. `raw` is the experiment as read (overrides applied), `schema`
    its schema, `resolved` its validated form; `check(resolved)` is the kind's cross-field
    check."""
    sec = resolved.get("sweep") or {}
    if not sec.get("axes") and sec.get("repeat", 1) == 1:
        return None
    variants = resolved["variants"] or [None]
    names = [v["name"] for v in resolved["variants"]]
    axes = tuple(_axis(n, s, names) for n, s in sec["axes"].items())
    for a in axes:
        probe = copy.deepcopy(raw)
        for dotted in a.keys:
            _set(probe, schema, dotted, a.values[0], f"sweep.axes.{a.name}.key")
        for dotted, value in a.settings(a.values[0])[len(a.keys):]:
            _set(probe, schema, dotted, value, f"sweep.axes.{a.name}.also")
    names_ax = {a.name for a in axes}
    for i, p in enumerate(sec["plots"]):
        if p["x"] not in names_ax and p["x"] in RESERVED:
            raise ConfigError(f"sweep.plots[{i}].x: {p['x']!r} identifies runs; plot against "
                              "an axis or a metric")
        for b in p["by"] or []:
            if b not in names_ax:
                raise ConfigError(f"sweep.plots[{i}].by: {b!r} is not an axis (axes: "
                                  f"{', '.join(sorted(names_ax)) or 'none'})")
        p["paper"] = [_paper_point(f"sweep.plots[{i}].paper[{j}]", q)
                      for j, q in enumerate(p["paper"])]

    base = copy.deepcopy(raw)
    base.pop("sweep", None)
    base["variants"] = []
    points = []
    for v in variants:
        vname = v["name"] if v else None
        mine = [a for a in axes if a.applies_to(vname)]
        for combo in itertools.product(*(a.values for a in mine)):
            for k in range(sec["repeat"]):
                data = copy.deepcopy(base)
                if v:
                    for key, value in v["set"].items():
                        _set(data, schema, key, value, f"variants[{vname}].set")
                for a, value in zip(mine, combo):
                    for dotted, v_ in a.settings(value):
                        _set(data, schema, dotted, v_, f"sweep.axes.{a.name}")
                data["seed"] = resolved["seed"] + k
                where = "sweep point " + Point(tuple((a.name, x) for a, x in zip(mine, combo)),
                                               vname, k, {}).rel
                try:
                    cfg = cfgmod.validate(schema, data)
                    if check is not None:
                        check(cfg)
                except ConfigError as exc:
                    raise ConfigError(f"{where}: {exc}") from None
                cfg["variant"] = vname or ""
                cfg["sweep_point"] = {a.name: x for a, x in zip(mine, combo)}
                points.append(Point(tuple((a.name, x) for a, x in zip(mine, combo)), vname, k,
                                    cfg))
                if len(points) > MAX_POINTS:
                    raise ConfigError(f"sweep: more than {MAX_POINTS} runs")
    return Sweep(axes, sec["repeat"], tuple(sec["plots"]), tuple(points))
