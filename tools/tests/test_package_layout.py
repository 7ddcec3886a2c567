"""The oppsched package's layout (docs/architecture.md, "Experiments"), read with `ast`
only: nothing is imported, so it runs without the build.

- Only the command line reaches a command: no module outside oppsched/commands imports
  from oppsched.commands or names one of its modules in a string (importlib, `-m`), but
  the dispatcher (oppsched.cli). A runtime process (a PHY, a daemon's configuration, a
  run, a sweep) needs a library module, not a CLI verb.
- The groups do not import each other in a circle: the graph of imports between the
  top-level modules, commands, testbed, analysis, run, phy, experiments and uhd_sim is
  acyclic. cli.py and __main__.py, the entry points, sit above it (nothing else imports
  them).
- No module is over MAX_LINES but the long single-concern files of LONG_SINGLE_CONCERN,
  and the files of NOT_YET_SPLIT, which mix concerns and wait for their split.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "oppsched"
GROUPS = ("commands", "testbed", "analysis", "run", "phy", "experiments", "uhd_sim")
ENTRY_POINTS = {"oppsched.cli", "oppsched.__main__"}
MAX_LINES = 700

# Long but one concern each; the reason is why splitting would not make it easier to read.
LONG_SINGLE_CONCERN = {
    # generated data (python -m oppsched.generate): the compiled modules' tables, never
    # edited by hand
    "_generated.py",
    # the testbed kind's experiment schema: one table of fields and the checks across
    # them, which read each other (docs/testbed.md is its reference)
    "experiments/testbed/schema.py",
}

# Long and mixing concerns: each is to be split (issue 29) like commands/linkcurves.py was.
# The test fails when one of them is no longer over MAX_LINES, so that it leaves the list.
NOT_YET_SPLIT: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        rel = f.relative_to(PACKAGE).with_suffix("")
        parts = ["oppsched", *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """(imported module, line) of every import statement of the module, at any depth
    (a late import inside a function is a dependency too). `from X import y` names X.y
    when that is a module of the package, else X."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.append((sub if sub in MODULES else mod, node.lineno))
    return [(m, line) for m, line in out if m == "oppsched" or m.startswith("oppsched.")]


def _group(module: str) -> str:
    parts = module.split(".")
    if module in ENTRY_POINTS:
        return "cli"
    if len(parts) > 1 and parts[1] in GROUPS:
        return parts[1]
    return "top"


IMPORTS = {name: _imports(name, path) for name, path in MODULES.items()}


def test_the_walk_sees_the_package():
    assert {"oppsched.cli", "oppsched.linkmodel", "oppsched.commands.linkcurves",
            "oppsched.phy.loopback", "oppsched.testbed.daemonconf"} <= set(MODULES)
    # `from oppsched.linkmodel import f` and `from oppsched import linkmodel` both name it
    assert "oppsched.linkmodel" in [m for m, _ in IMPORTS["oppsched.phy.loopback"]]
    assert "oppsched.linkmodel" in [m for m, _ in IMPORTS["oppsched.testbed.daemonconf"]]
    assert _group("oppsched.cli") == "cli" and _group("oppsched.paths") == "top"
    assert _group("oppsched.commands.linkcurves") == "commands"


def test_only_the_command_line_imports_a_command_module():
    bad = [f"{name} ({MODULES[name].relative_to(PACKAGE)}:{line}) imports {mod}"
           for name, imports in IMPORTS.items()
           if _group(name) not in ("commands", "cli")
           for mod, line in imports
           if _group(mod) == "commands"]
    assert not bad, "a module outside oppsched/commands imports a command:\n" + "\n".join(bad)


def test_no_module_outside_the_commands_names_one_as_a_string():
    """A command reached by name (importlib, `python -m`, a lazy import table) is an import
    too; oppsched.cli, the dispatcher, may name them."""
    bad = []
    for name, path in MODULES.items():
        if _group(name) in ("commands", "cli"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value.startswith("oppsched.commands")):
                bad.append(f"{name} ({path.relative_to(PACKAGE)}:{node.lineno}) names "
                           f"{node.value}")
    assert not bad, "\n".join(bad)


def test_nothing_but_main_imports_the_command_line():
    bad = [f"{name} imports {mod}" for name, imports in IMPORTS.items()
           if name != "oppsched.__main__" for mod, _ in imports if mod == "oppsched.cli"]
    assert not bad, "\n".join(bad)


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_groups_import_each_other_without_a_cycle():
    edges: dict[str, set[str]] = {}
    why: dict[tuple[str, str], str] = {}
    for name, imports in IMPORTS.items():
        a = _group(name)
        if a == "cli":
            continue
        for mod, line in imports:
            b = _group(mod)
            if b not in (a, "cli"):
                edges.setdefault(a, set()).add(b)
                why.setdefault((a, b), f"{MODULES[name].relative_to(PACKAGE)}:{line} "
                                       f"imports {mod}")
    cycle = _cycle(edges)
    assert cycle is None, ("import cycle between the groups: " + " -> ".join(cycle) + "\n"
                           + "\n".join(why[(x, y)] for x, y in zip(cycle, cycle[1:])))


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_is_over_the_line_limit_but_the_listed_ones():
    long = {str(p.relative_to(PACKAGE)): _lines(p) for p in MODULES.values()
            if _lines(p) > MAX_LINES}
    unlisted = {f: n for f, n in long.items()
                if f not in LONG_SINGLE_CONCERN and f not in NOT_YET_SPLIT}
    assert not unlisted, (f"over {MAX_LINES} lines: {unlisted}; split the file by concern "
                          "(or, if it is one concern, list it in LONG_SINGLE_CONCERN with "
                          "the reason)")


@pytest.mark.parametrize("f", sorted(LONG_SINGLE_CONCERN | set(NOT_YET_SPLIT)))
def test_every_listed_file_exists_and_is_still_long(f):
    p = PACKAGE / f
    assert p.is_file(), f"{f} is listed but does not exist"
    assert _lines(p) > MAX_LINES, f"{f} has {_lines(p)} lines now: take it off the list"
