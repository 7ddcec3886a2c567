"""The pluggable families' registries, as the MAC library defines them.

Each scheduler kind (host/include/oppsched/sched.h, `scheduler_kinds()`) and each AQM kind
(aqm.h, `param_fields()`) is registered once in C++ with its parameters: name, type, default,
range, unit and help. oppsched.mac exports them (`scheduler_registry()`, `aqm_registry()`);
oppsched.generate writes them into tools/oppsched/_generated.py, which this module reads, so
that the schemas work without a build. It turns them into what the Python layers need -- the
experiment schema's and macsim's scheduler fields, the parameters daemonconf writes into
apd.yaml, and the table of docs/algorithms.md -- so that no layer lists kinds, defaults or
ranges by hand. tools/tests/test_registry.py checks that every layer agrees and that the
committed data is what the build gives.

    python -m oppsched.generate      # rewrites _generated.py and docs/algorithms.md
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from oppsched import _generated, plugin
from oppsched.config import Field, Renamed


@lru_cache(maxsize=None)
def _schedulers() -> tuple:
    return tuple(_generated.SCHEDULER_REGISTRY)


@lru_cache(maxsize=None)
def _aqms() -> tuple:
    return tuple(_generated.AQM_REGISTRY)


def schedulers() -> dict[str, dict]:
    """Scheduler kind -> {kind, help, params: [spec, ...]}, in the registry's order."""
    return {k["kind"]: k for k in _schedulers()}


def aqms() -> dict[str, dict]:
    """AQM kind -> {kind, marks_ecn, params: [spec, ...]}, in the registry's order."""
    return {k["kind"]: k for k in _aqms()}


def scheduler_kinds() -> tuple[str, ...]:
    return tuple(schedulers())


def in_range(spec: dict, value: float) -> bool:
    """Whether a number lies in a spec's range (the C++ param_range::contains)."""
    if not math.isfinite(value):
        return False
    lo, hi = spec["min"], spec["max"]
    if lo is not None and not (value > lo if spec["min_open"] else value >= lo):
        return False
    if hi is not None and not (value < hi if spec["max_open"] else value <= hi):
        return False
    return True


def _range_check(spec: dict):
    """A Field check refusing a value outside the spec's range, worded as the C++ words it."""
    if spec["type"] == "number_list":
        def check(values):
            for i, v in enumerate(values):
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    return f"[{i}] = {v!r} is not a number"
                if not in_range(spec, float(v)):
                    return f"[{i}] = {v!r} {spec['violation']}"
            return None
    else:
        def check(value):
            return None if in_range(spec, float(value)) else spec["violation"]
    return check


_TYPES = {"number": float, "seconds": float, "integer": int, "boolean": bool, "choice": str,
          "number_list": list}


def field(spec: dict, doc: str | None = None) -> Field:
    """The schema Field of a registered parameter: its type, default and range."""
    default = spec["default"] if spec["default"] is not None else []
    text = doc if doc is not None else spec["help"] + (f" ({spec['unit']})" if spec["unit"] else "")
    ranged = spec["violation"] is not None
    return Field(_TYPES[spec["type"]], default,
                 choices=tuple(spec["choices"]) if spec["choices"] else None,
                 check=_range_check(spec) if ranged else None, doc=text)


def element_field(spec: dict, default: float, doc: str) -> Field:
    """A Field for one element of a number_list parameter (e.g. one user's wpf weight), with
    the element range the registry gives."""
    return Field(float, default, check=lambda v: None if in_range(spec, float(v))
                 else spec["violation"], doc=doc)


def scheduler_param_specs() -> dict[str, dict]:
    """Every scheduler parameter, by name, over all kinds (a name means one thing in every
    kind that takes it: the registry gives it the same spec)."""
    out: dict[str, dict] = {}
    for k in _schedulers():
        for p in k["params"]:
            if p["name"] in out and out[p["name"]] != p:
                raise AssertionError(f"scheduler parameter {p['name']!r} differs between kinds")
            out.setdefault(p["name"], p)
    return out


def takers(name: str) -> list[str]:
    """The scheduler kinds that take parameter `name`."""
    return [k["kind"] for k in _schedulers() if any(p["name"] == name for p in k["params"])]


def scheduler_fields(skip: tuple[str, ...] = ()) -> dict:
    """The fields of a flat `scheduler` section: kind, then every kind's parameters (each
    documented with the kinds that take it), then `lam`, the old name of lambda."""
    out: dict = {"kind": Field(str, "pf", choices=scheduler_kinds() + plugin.PLUGIN_KINDS,
                               doc="; ".join(f"{k['kind']}: {k['help']}" for k in _schedulers())
                               + "; python: a plugin written in Python; plugin: a plugin in a "
                                 "shared library (docs/extending.md)")}
    for name, spec in scheduler_param_specs().items():
        if name in skip:
            continue
        kinds = takers(name)
        prefix = "" if len(kinds) == len(_schedulers()) else ", ".join(kinds) + ": "
        out[name] = field(spec, doc=prefix + spec["help"]
                          + (f" ({spec['unit']})" if spec["unit"] else ""))
    if "lambda" in out:
        out["lam"] = Renamed("lambda")
    out.update(plugin.scheduler_fields())
    return out


def scheduler_params(section: dict) -> dict:
    """The parameters of section["kind"] from a validated flat `scheduler` section, by their
    registered names (what the apd's scheduler section and mac.make_scheduler take); kind
    python: file, class, params, alpha, budget_fraction; kind plugin: library, params, alpha,
    budget_fraction (oppsched.plugin)."""
    if section["kind"] in plugin.PLUGIN_KINDS:
        return plugin.scheduler_params(section)
    kind = schedulers()[section["kind"]]
    return {p["name"]: section[p["name"]] for p in kind["params"] if p["name"] in section}


# ---- docs/algorithms.md --------------------------------------------------------------------


def _plugin_rows(kind: str) -> list[str]:
    """The table rows of a plugin kind's own fields (oppsched.plugin.KIND_FIELDS)."""
    types = {"file": "path", "class": "name", "library": "path", "params": "mapping",
             "budget_fraction": "number"}
    ranges = {"budget_fraction": "(0, 1]"}
    fields = plugin.scheduler_fields()
    rows = []
    for name in plugin.KIND_FIELDS[kind]:
        f = fields[name]
        default = "required" if f.default is None else ("{}" if f.default == {}
                                                        else _num(f.default))
        # a doc is "<kinds>: text" or "python: text; plugin: text"
        parts = re.split(r"; (?=[a-z, ]+: )", f.doc)
        about = "; ".join(p.split(": ", 1)[1] for p in parts
                          if kind in p.split(": ", 1)[0].split(", "))
        rows.append(f"| `{name}` | {types[name]} | {default} | {ranges.get(name, '')} | | "
                    f"{about} |")
    return rows


def _num(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return "[" + ", ".join(_num(x) for x in v) + "]"
    return str(v)


def _range(spec: dict) -> str:
    if spec["choices"]:
        return " \\| ".join(spec["choices"])
    if spec["violation"] is None:
        return ""
    lo, hi = spec["min"], spec["max"]
    if lo is not None and hi is not None:
        return (("(" if spec["min_open"] else "[") + f"{_num(lo)}, {_num(hi)}"
                + (")" if spec["max_open"] else "]"))
    if lo is not None:
        return ("> " if spec["min_open"] else ">= ") + _num(lo)
    if hi is not None:
        return ("< " if spec["max_open"] else "<= ") + _num(hi)
    return "finite"


def _table(params: list) -> list[str]:
    rows = ["| parameter | type | default | range | unit | meaning |",
            "|---|---|---|---|---|---|"]
    for p in params:
        default = "required" if p["required"] else _num(p["default"])
        each = "each " if p["type"] == "number_list" else ""
        rows.append(f"| `{p['name']}` | {p['type']} | {default} | {each}{_range(p)} | "
                    f"{p['unit']} | {p['help']} |")
    return rows


def markdown(schedulers_: list | None = None, aqms_: list | None = None) -> str:
    """docs/algorithms.md: every scheduler and AQM kind with its parameters, as registered
    (by default the committed registries; oppsched.generate passes the build's)."""
    schedulers_ = _schedulers() if schedulers_ is None else schedulers_
    aqms_ = _aqms() if aqms_ is None else aqms_
    lines = [
        "# Schedulers and AQMs: kinds and parameters",
        "",
        "<!-- Generated from the MAC library's registries by `python -m oppsched.generate`;",
        "     tools/tests/test_registry.py fails when this file differs. Do not edit by hand. -->",
        "",
        "Each kind is registered once in the MAC library (schedulers: `scheduler_kinds()` in",
        "host/lib/sched.cc; AQMs: `param_fields()` in host/lib/aqm_common.cc) with its",
        "parameters. The apd's `scheduler` and `aqm.params` sections, `oppsched.mac.make_scheduler`",
        "and `make_aqm`, the experiment schema (`oppsched check`) and macsim all read these",
        "names, defaults and ranges. A value outside its range is refused by each of them with",
        "the same bounds.",
        "",
        "## Schedulers (`scheduler.kind`)",
        "",
        "In an experiment and in apd.yaml the parameters sit beside `kind` in the `scheduler`",
        "section; in Python, `make_scheduler(kind, {name: value})` or keywords (`lam=` for",
        "`lambda`, a Python keyword). An experiment's `scheduler.lam` is the old name of",
        "`scheduler.lambda`, still accepted with a warning.",
        "",
    ]
    for k in schedulers_:
        about = k["help"][:1].upper() + k["help"][1:]
        lines += [f"### `{k['kind']}`", "", about + ".", ""] + _table(k["params"]) + [""]
    alpha = next(p for k in schedulers_ for p in k["params"] if p["name"] == "alpha")
    lines += [f"### `{plugin.PYTHON_KIND}`", "",
              "A scheduler written in Python: a class in a file, called every slot inside the",
              "apd (an embedded interpreter) and in macsim; the protocol, the deadline and the",
              "fallbacks to `pf` are in [extending.md](extending.md). Its `alpha` is the EMA of",
              "the `avg_bps` it sees and of the fallback PF.", "",
              "| parameter | type | default | range | unit | meaning |", "|---|---|---|---|---|---|",
              f"| `alpha` | number | {_num(alpha['default'])} | {_range(alpha)} | per slot | "
              "avg_bps's EMA weight and the fallback PF's |"]
    lines += _plugin_rows(plugin.PYTHON_KIND) + [""]
    lines += [f"### `{plugin.CPP_KIND}`", "",
              "A scheduler in a shared library built against host/include/oppsched/plugin_api.h",
              "(a C interface, versioned): the apd dlopens it before it drops privileges, and",
              "macsim and `oppsched check` load it the same way; the same deadline and",
              "fallbacks to `pf` as `python` ([extending.md](extending.md#c-plugins)).", "",
              "| parameter | type | default | range | unit | meaning |",
              "|---|---|---|---|---|---|",
              f"| `alpha` | number | {_num(alpha['default'])} | {_range(alpha)} | per slot | "
              "avg_bps's EMA weight and the fallback PF's |"]
    lines += _plugin_rows(plugin.CPP_KIND) + [""]
    lines += [
        "## AQMs (`aqm.kind`)",
        "",
        "The parameters go in `aqm.params` (experiment and apd.yaml) or as keywords of",
        "`make_aqm`. Times are in seconds (names ending in `_s`). Every kind also takes the",
        "service-rate estimator's parameters, listed once at the end. Constraints between two",
        "parameters (RED's max_th > min_th, REAQM's alpha_prime > alpha, CoDel's",
        "target < interval) are checked too and named in the table.",
        "",
    ]
    common = None
    for k in aqms_:
        own = [p for p in k["params"] if not p["common"]]
        common = [p for p in k["params"] if p["common"]]
        marks = "marks ECN-capable packets" if k["marks_ecn"] else "drops only"
        about = k["help"][:1].upper() + k["help"][1:]
        lines += [f"### `{k['kind']}`", "", f"{about}; {marks}.", ""]
        lines += (_table(own) if own else ["No parameters of its own."]) + [""]
    lines += [f"### `{plugin.PYTHON_KIND}`", "",
              "An AQM written in Python, `file` and `class` beside `kind`, `params` its",
              "constructor's keyword arguments: one instance per user's queue on a drop-tail",
              "FIFO with the queue's limits (queue.mode per_user); the protocol and the drop",
              "causes are in [extending.md](extending.md#aqm-plugins).", ""]
    lines += [f"### `{plugin.CPP_KIND}`", "",
              "An AQM in a shared library built against host/include/oppsched/plugin_api.h,",
              "`library` beside `kind` (relative to the experiment file), `params` numbers and",
              "strings: the Python kind's protocol and drop causes, one instance per user's",
              "queue ([extending.md](extending.md#c-plugins)).", ""]
    if common:
        lines += ["### Every AQM: the service-rate estimator", ""] + _table(common) + [""]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - the regeneration command
    print(markdown(), end="")
