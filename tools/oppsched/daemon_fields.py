"""The daemons' field tables, as the experiment schema and the PHY take them.

Each daemon describes the settings its configuration reader takes (dotted key, type, default,
range, unit, help) in one table that the reader reads through, and prints it:
`oppsched-apd --schema` (host/daemon/common/oppsched/daemon/field_table.h); the delay stage
describes its command-line options the same way (`oppsched-delay --schema`, keys the option
names: "rate-ab-bps"). The committed copy,
`DAEMON_FIELDS` in tools/oppsched/_generated.py, is written by `python -m oppsched.generate`
and compared with the build's by tools/tests/test_registry.py, so the schemas read it with or
without a build. The PHY's table is its own Field schema (oppsched.phy.common.SCHEMA), whose
keys shared with the apd (lead_slots) are built here from the apd's table.

An experiment schema maps its keys onto daemon keys (oppsched.testbed.daemon_keys.DAEMON_KEYS for the testbed kind)
and builds their Fields with field(); drift() says how a Field departs from a daemon's spec,
which tools/tests/test_field_tables.py runs over every mapped key. Where the experiment
schema departs from a daemon's entry on purpose (a round trip twice the one-way delay, a
narrower range, another default) it declares so (daemon_keys.DEPARTURES) and departed() gives the
spec the Field must then match; a departure that would widen the daemon's range is refused.
"""

from __future__ import annotations

import math

from oppsched._generated import DAEMON_FIELDS
from oppsched.config import _REQUIRED, Field

_TYPES = {"integer": int, "number": float, "boolean": bool, "string": str, "choice": str}


def spec(daemon: str, key: str) -> dict:
    """The spec of `key` (dotted, as in the daemon's YAML) in `daemon`'s table."""
    table = DAEMON_FIELDS.get(daemon)
    if table is None:
        raise KeyError(f"no field table for daemon {daemon!r} (known: {', '.join(DAEMON_FIELDS)})")
    if key not in table:
        raise KeyError(f"{daemon} has no field {key!r} (known: {', '.join(table)})")
    return table[key]


def in_range(s: dict, value: float) -> bool:
    """Whether a number lies in a spec's range (the C++ field_spec::accepts: value_range,
    or 0 where the entry takes 0 as "off")."""
    if not math.isfinite(value):
        return False
    if s.get("zero_off") and value == 0:
        return True
    if s["min"] is not None and not (value > s["min"] if s["min_open"] else value >= s["min"]):
        return False
    if s["max"] is not None and not (value < s["max"] if s["max_open"] else value <= s["max"]):
        return False
    return True


def _describe(s: dict) -> str:
    """A spec's range as the C++ value_range::describe writes it: "[0,60000]", "(0,inf)"."""
    def b(x, inf):
        return inf if x is None else f"{x:.12g}"
    lo_open = s["min_open"] or s["min"] is None
    hi_open = s["max_open"] or s["max"] is None
    return (("(" if lo_open else "[") + b(s["min"], "-inf") + "," + b(s["max"], "inf")
            + (")" if hi_open else "]"))


# What an experiment schema may declare of a key it maps (daemon_keys.DEPARTURES): scale (the
# experiment's value is this many times the daemon's: a round trip of two one-way delays),
# min / max (a narrower range, closed), default (another default), required (no default),
# nullable (null is accepted too, and is the default: the key is not written, so the daemon's
# own default applies), why (the reason, required: a departure is a decision, not a drift).
DEPARTURE_KEYS = ("scale", "min", "max", "default", "required", "nullable", "why")


def departed(s: dict, departure: dict | None) -> dict:
    """Spec `s` as the experiment schema takes it under a declared departure (None: `s`).
    ValueError when the departure is malformed or widens the daemon's range."""
    if not departure:
        return s
    unknown = set(departure) - set(DEPARTURE_KEYS)
    if unknown or not departure.get("why"):
        raise ValueError(f"departure {departure!r}: keys are {', '.join(DEPARTURE_KEYS)}, "
                         "with a why")
    out = dict(s)
    scale = departure.get("scale", 1)
    if scale != 1:
        if s["type"] not in ("integer", "number") or scale <= 0:
            raise ValueError(f"departure scale {scale!r}: a positive factor of a number")
        for k in ("min", "max", "default"):
            out[k] = None if s[k] is None else s[k] * scale
    for end, tighter in (("min", max), ("max", min)):
        if end not in departure:
            continue
        v = departure[end]
        if not in_range(out, v):
            raise ValueError(f"departure {end} {v!r} widens the daemon's range "
                             f"{_describe(out)}")
        out[end], out[f"{end}_open"] = tighter(v, out[end]) if out[end] is not None else v, False
    if "default" in departure:
        out["default"] = departure["default"]
        if out["type"] in ("integer", "number") and not in_range(out, out["default"]):
            raise ValueError(f"departure default {out['default']!r} is outside the range "
                             f"{_describe(out)}")
    if departure.get("required"):
        out["default"] = _REQUIRED
    if departure.get("nullable"):
        out["nullable"], out["default"] = True, None
    if out["type"] in ("integer", "number"):
        out["violation"] = ("not 0 or in " if out.get("zero_off") else "not in ") + \
            _describe(out)
    return out


def field(daemon: str, key: str, doc: str | None = None, departure: dict | None = None) -> Field:
    """The Field of a daemon's setting (under a declared departure): its type, default,
    range (closed ends as min/max, so errors read as every other Field's; an open end, or an
    entry that takes 0 as "off", as a check worded as the daemon's) and choices."""
    s = departed(spec(daemon, key), departure)
    typ = _TYPES[s["type"]]
    default = s["default"]
    if typ is float and default not in (_REQUIRED, None):
        default = float(default)
    zero_off = bool(s.get("zero_off"))
    lo = s["min"] if s["min"] is not None and not s["min_open"] and not zero_off else None
    hi = s["max"] if s["max"] is not None and not s["max_open"] and not zero_off else None
    open_end = (s["min"] is not None and s["min_open"]) or (s["max"] is not None and s["max_open"])
    check = (lambda v: None if in_range(s, float(v)) else s["violation"]) \
        if open_end or zero_off else None
    text = doc if doc is not None else s["help"] + (f" ({s['unit']})" if s["unit"] else "")
    if s.get("nullable"):
        inner = check
        check = None if inner is None else (lambda v: None if v is None else inner(v))
        return Field((typ, type(None)), None, min=lo, max=hi,
                     choices=(None,) + tuple(s["choices"]) if s["choices"] else None,
                     check=check, doc=text)
    return Field(typ, default, min=lo, max=hi, choices=tuple(s["choices"]) or None, check=check,
                 doc=text)


def field_spec(f: Field) -> dict:
    """A Field written as a daemon's spec (closed min/max; a check's bounds are not seen):
    how the PHY's Python table is compared with the others."""
    types = f.type if isinstance(f.type, tuple) else (f.type,)
    typ = next(t for t in types if t is not type(None))
    name = {int: "integer", float: "number", bool: "boolean", str: "string"}[typ]
    if f.choices is not None:
        name = "choice"
    return {"type": name, "default": f.default, "min": f.min, "max": f.max, "min_open": False,
            "max_open": False, "choices": [c for c in (f.choices or ()) if c is not None]}


def _accepts(f: Field, value) -> bool:
    try:
        f.validate("x", value)
    except Exception:  # noqa: BLE001 - any refusal (ConfigError, a check's own error)
        return False
    return True


def drift(f: Field, s: dict) -> list[str]:
    """How Field `f` departs from spec `s`: each difference of type, default, choices or
    range as a phrase ("default 3, the daemon's 4"); [] when they agree. The range is probed
    at the spec's ends: a closed end accepted and the next value out refused, an open end
    refused and the next value in accepted, an unbounded side accepting 1e9."""
    out = []
    types = f.type if isinstance(f.type, tuple) else (f.type,)
    want = _TYPES[s["type"]]
    if want not in types:
        out.append(f"type {'/'.join(t.__name__ for t in types)}, the daemon's {s['type']}")
        return out
    if (type(None) in types) != bool(s.get("nullable")):
        out.append("takes null" if type(None) in types else "refuses null, declared nullable")
    if s["default"] is _REQUIRED or f.default is _REQUIRED:
        if f.default is not s["default"]:
            mine = "required" if f.default is _REQUIRED else f"default {f.default!r}"
            theirs = "required" if s["default"] is _REQUIRED else repr(s["default"])
            out.append(f"{mine}, the daemon's {theirs}")
    elif f.default != s["default"]:
        out.append(f"default {f.default!r}, the daemon's {s['default']!r}")
    if s["choices"] or f.choices:
        mine = sorted(c for c in (f.choices or ()) if c is not None)
        if mine != sorted(s["choices"]):
            out.append(f"choices {mine}, the daemon's {sorted(s['choices'])}")
    if s["type"] not in ("integer", "number"):
        return out
    integer = s["type"] == "integer"

    def step(v: float, toward: float):
        return int(v + (1 if toward > v else -1)) if integer else math.nextafter(v, toward)

    def value(v: float):
        return int(v) if integer else float(v)

    if s.get("zero_off") and not _accepts(f, value(0)):
        out.append("refuses 0, which the daemon takes as off")
    ends = (("min", s["min_open"], -math.inf), ("max", s["max_open"], math.inf))
    for end, opened, outward in ends:
        b = s[end]
        if b is None:
            probe = value(math.copysign(1e9, outward))
            if not _accepts(f, probe):
                out.append(f"refuses {probe!r}, the daemon has no {end}imum")
            continue
        inside, outside = (step(b, -outward), value(b)) if opened else (value(b), step(b, outward))
        if not _accepts(f, inside):
            out.append(f"refuses {inside!r}, in the daemon's range {_describe(s)}")
        if _accepts(f, outside) and not (s.get("zero_off") and outside == 0):
            out.append(f"accepts {outside!r}, outside the daemon's range {_describe(s)}")
    return out
