"""Whether the compiled modules are there, and the one error of a command that needs them.

The Python layers that only read and check (`oppsched check`, `analyze`, every `--help`)
start without a build: the names and registries they need are committed data
(oppsched._generated, written by oppsched.generate). What runs the MAC's or the PHY's code
(a run, a sweep, the benches, linkcurves, decode) imports the compiled modules where it
uses them; without a build that is a BuildMissing, which the `oppsched` command prints as
"oppsched <command> needs the built testbed: <module> is not importable (run `make`)".
"""

from __future__ import annotations

import importlib
from types import ModuleType

MAC = "_oppsched_mac"  # the MAC library's bindings (host/python), through oppsched.mac
PHY = "gnuradio.oppsched"  # the GNU Radio module (gr-oppsched)


class BuildMissing(ImportError):
    """A compiled module a command needs is not importable; `module` names it."""

    def __init__(self, module: str, reason: str):
        super().__init__(f"{module} is not importable ({reason}): run `make`", name=module)
        self.module = module
        self.reason = reason


def load(module: str) -> ModuleType:
    """The compiled module `module` (MAC or PHY); BuildMissing naming it when absent."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise BuildMissing(module, str(exc)) from exc


def available(module: str) -> bool:
    """Whether `module` (MAC or PHY) imports."""
    try:
        load(module)
    except BuildMissing:
        return False
    return True
