"""The plugin protocol: a scheduler or an AQM written as a Python class in a file that an
experiment names (docs/extending.md).

    scheduler: {kind: python, file: my_sched.py, class: MaxWeight, params: {beta: 2.0}}

The file runs in macsim (through oppsched.mac, the Python bindings) and inside oppsched-apd
(an embedded interpreter) on the abstract and the sample PHY; both go through the same C++
(host/pyplugin/python_plugin.cc), which loads the file, checks the class's methods, makes one
instance with `params` as keyword arguments and calls it every slot. A plugin needs nothing
from this module at run time (the apd has no oppsched package on its path): the classes below
are for type hints and documentation only, e.g.

    from __future__ import annotations
    from typing import TYPE_CHECKING
    if TYPE_CHECKING:
        from oppsched.plugin import UserView

Scheduler protocol (every slot the MAC has a free slot for new data):

    select(slot: int, users: list[UserView]) -> int | None
        users: the candidates of this slot only (backlogged, with a usable rate and a free
        HARQ process), in id order; return an index into `users`, or None to leave the slot
        empty. Must return within the budget (budget_fraction x slot_s, default half a slot),
        else the built-in PF decides this slot (counted: scheduler.plugin_deadline_misses).
    served(slot: int, user: int | None, bytes: int) -> None        (optional)
        called once at the end of every slot, with the id of the user served (a HARQ
        retransmission's too) or None, and the bytes its rate carries in a slot.

An exception in either is counted (scheduler.plugin_exceptions), its traceback logged the first
time, and PF decides that slot; an answer that is neither None nor an index into `users` is
counted (scheduler.plugin_invalid_decisions) and PF decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Protocol

from oppsched.config import Field

#: the `kind` of a plugin in an experiment's scheduler section
PYTHON_KIND = "python"
#: the `kind` of a scheduler in a shared library built against host/include/oppsched/
#: plugin_api.h (docs/extending.md, "C++ plugins")
CPP_KIND = "plugin"
#: a decision's default budget, as a share of the slot
DEFAULT_BUDGET_FRACTION = 0.5


class UserView(Protocol):
    """One candidate of the slot. The same object is reused from slot to slot (keep ids, not
    views)."""

    id: int                # the user's index (apd: users[id]; macsim: users[i])
    backlog_bytes: float   # queued bytes (int in the apd; inf in macsim, which is full-buffer)
    rate_bps: float        # what its channel supports in this slot (from its CQI)
    hol_delay_s: float     # age of its oldest queued packet (0 in macsim)
    avg_bps: float         # T_i, the framework's EMA of its served rate (sched.h, eq. 6),
                           # alpha = scheduler.alpha; R_i / N before its first positive rate


class Scheduler(Protocol):
    def select(self, slot: int, users: list[UserView]) -> Optional[int]: ...

    def served(self, slot: int, user: Optional[int], bytes: int) -> None: ...


def scheduler_fields() -> dict:
    """The experiment's scheduler fields of kinds python and plugin (besides kind and alpha)."""
    return {
        "file": Field((str, type(None)), None,
                      doc="python: the plugin's .py file (relative to where oppsched runs); "
                          "copied into the run folder"),
        "class": Field((str, type(None)), None, doc="python: the plugin's class in `file`"),
        "library": Field((str, type(None)), None,
                         doc="plugin: the plugin's shared library (.so; relative to the "
                             "experiment file); copied into the run folder"),
        "params": Field(dict, {}, doc="python: keyword arguments of the class's constructor; "
                                      "plugin: the library's params (numbers and strings)"),
        "budget_fraction": Field(float, DEFAULT_BUDGET_FRACTION,
                                 check=lambda v: None if 0.0 < v <= 1.0 else "not in (0,1]",
                                 doc="python, plugin: a decision's budget as a share of the "
                                     "slot; a later decision is replaced by PF's "
                                     "(scheduler.plugin_deadline_misses)"),
    }


PLUGIN_FIELDS = ("file", "class", "library", "params", "budget_fraction")
#: the fields each plugin kind takes (the others of PLUGIN_FIELDS are refused with it)
KIND_FIELDS = {PYTHON_KIND: ("file", "class", "params", "budget_fraction"),
               CPP_KIND: ("library", "params", "budget_fraction")}
PLUGIN_KINDS = (PYTHON_KIND, CPP_KIND)


def scheduler_params(section: dict) -> dict:
    """What mac.make_scheduler(kind, ...) and the apd's scheduler section take from a
    validated scheduler section of kind python or plugin."""
    if section["kind"] == CPP_KIND:
        return {"library": section["library"], "params": dict(section["params"]),
                "alpha": section["alpha"], "budget_fraction": section["budget_fraction"]}
    return {"file": section["file"], "class": section["class"], "params": dict(section["params"]),
            "alpha": section["alpha"], "budget_fraction": section["budget_fraction"]}


def resolve_library(raw: dict, experiment: Path) -> None:
    """scheduler.library and aqm.library (kind plugin) relative to the experiment file's
    folder, made absolute in the raw experiment before it is validated, so that every later
    step (the check, the copy into the run folder) sees the same file wherever oppsched runs."""
    for section in ("scheduler", "aqm"):
        s = raw.get(section) if isinstance(raw, dict) else None
        lib = s.get("library") if isinstance(s, dict) else None
        if isinstance(lib, str) and lib and not Path(lib).is_absolute():
            s["library"] = str(Path(experiment).resolve().parent / lib)


def check_library(path: str) -> str | None:
    """Why scheduler.library cannot be a plugin's library before it is opened (None: it can
    be tried): it must exist and be a regular file."""
    p = Path(path)
    if not p.exists():
        return "no such file"
    if not p.is_file():
        return "not a regular file"
    return None
