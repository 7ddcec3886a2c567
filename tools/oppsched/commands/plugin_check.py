"""`oppsched plugin check FILE`: a Python plugin, or a C++ plugin library (docs/extending.md,
"C++ plugins"; oppsched.commands.plugin_check_cpp says what is seen of it), against its family's
contract, the properties the built-in kinds' C++ contract tests assert (host/tests/test_sched.cc's
scheduler_contract, host/tests/test_aqm_contract.cc's aqm_contract), on seeded synthetic
scenarios. The plugin runs where a run runs it: loaded by the apd's loader
(host/pyplugin, `mac.load_plugin`) and called by the same C++ wrapper (python_scheduler,
python_aqm) through the bindings. A probe between the wrapper and the plugin records each call
and the plugin's own answer, so a failure is reported with the inputs that produced it.

The properties, scenarios and judges are oppsched.commands.plugin_contract; a C++ plugin
library is run by oppsched.commands.plugin_check_cpp.

`add_parser(sub)` registers the `plugin` command group and its `check` command; it returns
the group's subparsers, where other `plugin` commands are added.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import Optional

from oppsched.commands.plugin_check_cpp import check_library
from oppsched.commands.plugin_contract import Report, check_aqm, check_scheduler
from oppsched.config import ConfigError
from oppsched.yaml_config import YamlError, load_yaml


FAMILIES = ("scheduler", "aqm")


# ---- finding the plugin ------------------------------------------------------------------


def plugin_classes(path: Path) -> list[tuple[str, str]]:
    """(class, family) of every top-level class of the file that defines a family's required
    methods, in file order; read with ast, so the file is not run."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except SyntaxError as e:
        raise ConfigError(f"{path}: syntax error at line {e.lineno}: {e.msg}") from None
    out = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        methods = {n.name for n in node.body
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if "select" in methods:
            out.append((node.name, "scheduler"))
        elif {"enqueue", "dequeue"} <= methods:
            out.append((node.name, "aqm"))
    return out


def _family_of(path: Path, cls: str) -> str:
    for name, fam in plugin_classes(path):
        if name == cls:
            return fam
    raise ConfigError(f"--family: class {cls} of {path} defines neither select() nor "
                      "enqueue() and dequeue() itself: name its family (scheduler or aqm)")


# ---- C++ plugins ---------------------------------------------------------------------------
LIBRARY_SUFFIXES = (".so",)


def is_library(path: Path) -> bool:
    """A shared object (ELF), by its first bytes, or by its name when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return path.suffix in LIBRARY_SUFFIXES


# ---- the command ---------------------------------------------------------------------------


def parse_params(text: Optional[str]) -> dict:
    """--params: a JSON or YAML mapping (the plugin's keyword arguments)."""
    if text is None:
        return {}
    try:
        value = load_yaml(text)
    except YamlError as e:
        raise ConfigError(f"--params: {text!r} is neither JSON nor YAML ({e})") from None
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"--params: {text!r} is not a mapping of keyword arguments")
    return value


def check_file(file: str, cls: Optional[str] = None, params: Optional[dict] = None,
               family: Optional[str] = None, **options) -> list[Report]:
    """One report per class checked: `cls`, or every class of the file that follows a
    protocol. ConfigError for what cannot be checked at all (no file, no such class)."""
    path = Path(file)
    if not path.is_file():
        raise ConfigError(f"FILE: {file!r} is not a file")
    if family is not None and family not in FAMILIES:
        raise ConfigError(f"--family: {family!r} is not one of {', '.join(FAMILIES)}")
    if is_library(path):
        if cls is not None:
            raise ConfigError(f"--class: {cls!r}: {file} is a C++ plugin library, which has "
                              "no classes (one plugin per library)")
        return check_library(str(path.resolve()), params, family, **options)
    if cls is None:
        found = plugin_classes(path)
        if family:
            found = [(c, f) for c, f in found if f == family]
        if not found:
            raise ConfigError(f"FILE: {file} defines no class with select() (scheduler) or "
                              "enqueue() and dequeue() (aqm): name one with --class")
    else:
        found = [(cls, family or _family_of(path, cls))]
    reports = []
    for c, fam in found:
        if fam == "scheduler":
            reports.append(check_scheduler(file, c, params or {}, **options))
        else:
            reports.append(check_aqm(file, c, params or {}, seed=options.get("seed", 1)))
    return reports


def _cmd_check(a) -> int:
    if a.slot_s is not None and not 0 < a.slot_s <= 1.0:
        raise ConfigError(f"--slot-s: {a.slot_s!r} not in (0, 1]")
    if not 0 < a.budget_fraction <= 1.0:
        raise ConfigError(f"--budget-fraction: {a.budget_fraction!r} not in (0, 1]")
    reports = check_file(a.file, a.cls, parse_params(a.params), a.family, seed=a.seed,
                         slot_s=a.slot_s, budget_fraction=a.budget_fraction,
                         allow_idle=a.allow_idle, strict_timing=a.strict_timing)
    for r in reports:
        print("\n".join(r.lines()))
    failed = [r for r in reports if not r.ok]
    print(f"plugin check: {len(reports) - len(failed)} of {len(reports)} class(es) pass")
    return 1 if failed else 0


def add_parser(sub) -> argparse._SubParsersAction:
    """`plugin` (a command group) and its `check`; returns the group's subparsers."""
    p = sub.add_parser("plugin", help="work with scheduler and AQM plugins "
                       "(docs/extending.md)")
    group = p.add_subparsers(dest="plugin_cmd", required=True)
    c = group.add_parser(
        "check", help="run a Python plugin or a C++ plugin library against its family's "
        "contract (the properties the built-in kinds' tests assert) on seeded scenarios: "
        "PASS/FAIL per property",
)
    c.add_argument("file", help="the plugin's .py file, or a C++ plugin's .so (built from "
                   "`oppsched plugin new`)")
    c.add_argument("--class", dest="cls", metavar="NAME",
                   help="the class to check (default: every class of the file that has "
                   "select(), or enqueue() and dequeue())")
    c.add_argument("--params", metavar="JSON|YAML",
                   help="the class's keyword arguments, a mapping, e.g. '{beta: 2.0}' "
                   "(given to every class checked: name one with --class)")
    c.add_argument("--family", choices=FAMILIES,
                   help="scheduler or aqm (default: from the class's methods)")
    c.add_argument("--seed", type=int, default=1, help="of the scenarios (default: %(default)s)")
    c.add_argument("--slot-s", type=float, default=3e-3,
                   help="scheduler: the slot, for served()'s bytes and the budget "
                   "(default: %(default)s, the testbed's default profile)")
    c.add_argument("--budget-fraction", type=float, default=0.5,
                   help="scheduler: the decision budget as a share of the slot "
                   "(default: %(default)s, as scheduler.budget_fraction)")
    c.add_argument("--allow-idle", action="store_true",
                   help="scheduler: report a slot left empty while a user could be served as "
                   "INFO rather than a work-conserving FAIL")
    c.add_argument("--strict-timing", action="store_true",
                   help="scheduler: FAIL decision-time when select()'s p99 exceeds the budget "
                   "(default: INFO; the apd's PF replaces a late answer)")
    c.set_defaults(fn=_cmd_check)
    return group
