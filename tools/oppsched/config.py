"""Experiment files: loading, validation against a schema, and `--set` overrides.

An experiment is a YAML mapping. Its schema is a nested dict whose leaves are `Field`s; a
list of mappings is described by `ListOf(schema)`. Validation rejects unknown keys, wrong
types, NaN/inf and out-of-range numbers with an error that names the dotted path of the
field and the value, and fills in defaults, giving the *resolved* experiment that is
written into summary.json.

Renamed names stay accepted for a while: a Field's `aliases` maps an old value to its new
one, a `Renamed(new_key)` in a schema an old key to its new one. Either is taken as the new
name, with one ConfigDeprecationWarning naming the field, the old and the new name.
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from oppsched.yaml_config import YamlError, load_yaml


class ConfigError(ValueError):
    """A bad experiment file or override; the message names the field and the value."""


class ConfigDeprecationWarning(DeprecationWarning):
    """An old name in a configuration (shown by default: the user wrote it, not a library)."""


warnings.simplefilter("default", ConfigDeprecationWarning)


def deprecated(path: str, what: str, old: str, new: str) -> None:
    """The one message of a renamed value or key: `path: <what> 'old' is deprecated, use
    'new'`."""
    warnings.warn(f"{path}: {what} {old!r} is deprecated, use {new!r}", ConfigDeprecationWarning,
                  stacklevel=3)


def renamed_value(path: str, value: Any, aliases: dict | None) -> Any:
    """The new name of an old value in `aliases` (old -> new), with its deprecation warning
    naming `path` (a field or a command-line option); any other value unchanged."""
    if aliases and isinstance(value, str) and value in aliases:
        deprecated(path, "value", value, aliases[value])
        return aliases[value]
    return value


_REQUIRED = object()


@dataclass(frozen=True)
class Renamed:
    """A schema key that was renamed: its value is read as `new` (a sibling key)."""
    new: str


@dataclass
class Field:
    type: type | tuple
    default: Any = _REQUIRED
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None
    check: Callable[[Any], str | None] | None = None  # returns an error text or None
    doc: str = ""
    aliases: dict | None = None  # old value -> new value, accepted with a deprecation warning

    def validate(self, path: str, value: Any) -> Any:
        value = renamed_value(path, value, self.aliases)
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if float in types and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in types:
            raise ConfigError(f"{path}: {value!r} is a boolean, expected {_tname(types)}")
        if not isinstance(value, types):
            raise ConfigError(f"{path}: {value!r} is not {_tname(types)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{path}: {value!r} is not a finite number")
        if self.min is not None and isinstance(value, (int, float)) and value < self.min:
            raise ConfigError(f"{path}: {value!r} is below the minimum {self.min}")
        if self.max is not None and isinstance(value, (int, float)) and value > self.max:
            raise ConfigError(f"{path}: {value!r} is above the maximum {self.max}")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{path}: {value!r} is not one of {', '.join(map(str, self.choices))}")
        if self.check is not None:
            why = self.check(value)
            if why:
                raise ConfigError(f"{path}: {value!r} {why}")
        return value


@dataclass
class ListOf:
    schema: dict
    min_len: int = 0
    default: Any = field(default_factory=list)


def _tname(types: tuple) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "a boolean",
             list: "a list", dict: "a mapping"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def validate(schema: dict, data: Any, path: str = "") -> dict:
    """Returns the resolved mapping (defaults filled in) or raises ConfigError."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or '<top>'}: {data!r} is not a mapping")
    where = f"{path}." if path else ""
    unknown = sorted(set(data) - set(schema))
    if unknown:
        raise ConfigError(f"{where}{unknown[0]}: unknown key (known: {', '.join(known_keys(schema))})")
    data = _renamed_keys(schema, data, where)
    out = {}
    for key, spec in schema.items():
        if isinstance(spec, Renamed):
            continue
        p = f"{path}.{key}" if path else key
        if isinstance(spec, dict):
            out[key] = validate(spec, data.get(key), p)
        elif isinstance(spec, ListOf):
            items = data.get(key, copy.deepcopy(spec.default))
            if not isinstance(items, list):
                raise ConfigError(f"{p}: {items!r} is not a list")
            if len(items) < spec.min_len:
                raise ConfigError(f"{p}: needs at least {spec.min_len} entries, has {len(items)}")
            out[key] = [validate(spec.schema, it, f"{p}[{i}]") for i, it in enumerate(items)]
        else:
            if key in data:
                out[key] = spec.validate(p, data[key])
            elif spec.default is _REQUIRED:
                raise ConfigError(f"{p}: required key is missing")
            else:
                out[key] = copy.deepcopy(spec.default)
    return out


def known_keys(schema: dict) -> list[str]:
    """The current keys of a schema mapping (renamed ones left out), sorted."""
    return sorted(k for k, v in schema.items() if not isinstance(v, Renamed))


def _renamed_keys(schema: dict, data: dict, where: str) -> dict:
    """`data` with every old (Renamed) key moved to its new name, each with its deprecation
    warning; both names given is an error."""
    old = [k for k in data if isinstance(schema.get(k), Renamed)]
    if not old:
        return data
    data = dict(data)
    for k in old:
        new = schema[k].new
        if new in data:
            raise ConfigError(f"{where}{k}: renamed to {new!r}, which is given too; keep {new!r}")
        deprecated(f"{where}{k}", "key", k, new)
        data[new] = data.pop(k)
    return data


def parse_override(text: str) -> tuple[list[str | int], Any]:
    """`a.b[2].c=value` -> (['a', 'b', 2, 'c'], value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key=value")
    key, raw = text.split("=", 1)
    parts: list[str | int] = []
    for piece in key.strip().split("."):
        while "[" in piece:
            name, rest = piece.split("[", 1)
            if name:
                parts.append(name)
            idx, piece = rest.split("]", 1)
            try:
                parts.append(int(idx))
            except ValueError:
                raise ConfigError(f"--set {text!r}: index {idx!r} is not an integer") from None
        if piece:
            parts.append(piece)
    if not parts:
        raise ConfigError(f"--set {text!r}: empty key")
    try:
        value = load_yaml(raw)
    except YamlError as exc:
        raise ConfigError(f"--set {text!r}: value is {exc}") from None
    return parts, value


def _free_mapping(spec) -> bool:
    """A Field whose value is a mapping of any keys (the schema says nothing below it)."""
    return isinstance(spec, Field) and dict in (spec.type if isinstance(spec.type, tuple)
                                                else (spec.type,))


def apply_override(data: dict, schema: dict, text: str) -> None:
    """Applies one `--set` to the raw (unvalidated) experiment; unknown keys are errors."""
    parts, value = parse_override(text)
    node: Any = data
    spec: Any = schema
    path = ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(part, int):
            if not isinstance(spec, ListOf):
                raise ConfigError(f"--set {text!r}: {path} is not a list")
            if not isinstance(node, list) or not (0 <= part < len(node)):
                n = len(node) if isinstance(node, list) else 0
                raise ConfigError(f"--set {text!r}: {path}[{part}] out of range ({n} entries)")
            path = f"{path}[{part}]"
            if last:
                node[part] = value
                return
            node, spec = node[part], spec.schema
            continue
        if _free_mapping(spec):
            # A free-form mapping (an AQM's params, a sweep's axes): its keys are checked
            # by whoever reads it; --set may reach into it.
            path = f"{path}.{part}" if path else part
            if not isinstance(node, dict):
                raise ConfigError(f"--set {text!r}: {path} is inside {node!r}, not a mapping")
            if last:
                node[part] = value
                return
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
            continue
        if not isinstance(spec, dict) or part not in spec:
            known = ", ".join(known_keys(spec)) if isinstance(spec, dict) else "none"
            raise ConfigError(f"--set {text!r}: unknown key {part!r} at '{path or '<top>'}' (known: {known})")
        if isinstance(spec[part], Renamed):
            new = spec[part].new
            deprecated(f"--set {(path + '.') if path else ''}{part}", "key", part, new)
            if part in node:  # the file still has the old key: validate() moves it
                node[new] = node.pop(part)
            part = new
        path = f"{path}.{part}" if path else part
        if last:
            node[part] = value
            return
        child_spec = spec[part]
        if part not in node or node[part] is None:
            node[part] = [] if isinstance(child_spec, ListOf) else {}
        node, spec = node[part], child_spec


def parse_yaml(text: str, where: str = "") -> Any:
    """Parses YAML text with the project's one loader (duplicate keys rejected); raises
    ConfigError prefixed with `where` (a file name or an option) on bad YAML."""
    try:
        return load_yaml(text)
    except YamlError as exc:
        raise ConfigError(f"{where}: {exc}" if where else str(exc)) from None


def read_yaml(path: str | Path, where: str | None = None) -> Any:
    """Reads and parses a YAML file (see parse_yaml); errors name `where` (default: the
    path)."""
    where = str(path) if where is None else where
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read ({exc.strerror})" if where else
                          f"cannot read ({exc.strerror})") from None
    return parse_yaml(text, where)
