"""`oppsched plugin check LIBRARY.so`: a C++ plugin library (docs/extending.md, "C++
plugins") against its family's contract, on the scenarios and with the judges of
oppsched.commands.plugin_check, which calls check_library for a shared object.

A C++ plugin (docs/extending.md, "C++ plugins") is checked through the wrapper a run uses
(cpp_scheduler, the plugin AQM on its FIFO), made by the bindings' make_scheduler("plugin")
and make_aqm("plugin"). There is no probe between them: what the plugin answered is read
from the wrapper, its counters taken after every call (an OPPSCHED_PLUGIN_ERROR is
plugin_exceptions, an answer outside the contract plugin_invalid_decisions or
plugin_invalid_answers) and its decision (the user served, the packet's fate).
"""

from __future__ import annotations

import math
from typing import Optional

from oppsched.commands.plugin_contract import (Report, Result, _AqmRun, _drive_aqm, _timing,
                                               _users_text, _where, aqm_scenarios,
                                               scheduler_scenarios)


def _make_cpp_scheduler(lib: str, params: dict, users: int):
    from oppsched import mac

    # A 1 s slot and budget: the plugin's answer stands however long it took, so what the
    # check judges never depends on the clock.
    return mac.make_scheduler("plugin", {"library": lib, "params": params, "slot_s": 1.0,
                                         "budget_fraction": 1.0, "num_users": users})


def _library_family(lib: str, params: dict) -> tuple[Optional[str], str]:
    """(family, "") of the library, from which of the two loaders takes it; (None, both
    loaders' reasons) if neither does."""
    from oppsched import mac

    why = []
    for family, make in (("scheduler", lambda: _make_cpp_scheduler(lib, params, 2)),
                         ("aqm", lambda: mac.make_aqm("plugin", {"library": lib,
                                                                 "params": params}))):
        try:
            make()
            return family, ""
        except (ValueError, RuntimeError) as e:
            why.append(f"as a {family}: {e}")
    return None, "; ".join(why)


def _cpp_users(rates, backlogged, backlog, hol) -> list:
    """The slot's users as _users_text shows them (no PF average: the wrapper keeps it)."""
    return [(i, math.inf if backlog is None else (backlog[i] if backlogged[i] else 0),
             rates[i], 0.0 if hol is None else hol[i], math.nan) for i in range(len(rates))]


def _run_cpp_scheduler(lib: str, params: dict, scenarios):
    """Each scenario on a fresh instance. Returns (per slot: (scenario, slot, inputs,
    served, counter deltas)), or None and the loader's reason."""
    out = []
    for sc in scenarios:
        try:
            s = _make_cpp_scheduler(lib, params, sc.users)
        except (ValueError, RuntimeError) as e:
            return None, str(e)
        before = dict(s.counters)
        for k, (rates, backlogged, backlog, hol) in enumerate(sc.generate()):
            if backlog is not None:
                s.set_queue_state(k, backlog, hol)
            served = s.step(rates, backlogged)
            now = dict(s.counters)
            out.append((sc, k, (rates, backlogged, backlog, hol), served,
                        {c: now[c] - before.get(c, 0) for c in now}))
            before = now
    return out, None


def check_cpp_scheduler(lib: str, params: dict, *, seed: int = 1, allow_idle: bool = False,
                        slot_s: float = 3e-3, budget_fraction: float = 0.5,
                        strict_timing: bool = False) -> Report:
    """The scheduler contract on a C++ plugin library: the properties of check_scheduler
    that the wrapper lets one see (module docstring)."""
    rep = Report(f"{lib} (C++ scheduler)")
    scenarios = scheduler_scenarios(seed)
    a, why = _run_cpp_scheduler(lib, params, scenarios)
    if a is None:
        rep.results.append(Result("loads", "FAIL", why))
        return rep
    b, _ = _run_cpp_scheduler(lib, params, scenarios)
    rep.title += f": {len(scenarios)} scenarios, {len(a)} slots, seed {seed}"

    def first(pred):
        return next((x for x in a if pred(x)), None)

    def at(x, what):
        sc, k, inputs, served, _ = x
        return f"{_where(sc, k)}: users {_users_text(_cpp_users(*inputs))}: {what}"

    out = rep.results
    bad = first(lambda x: x[4].get("plugin_exceptions", 0))
    out.append(Result("no-exceptions", "FAIL", at(bad, "select() answered "
                                                  "OPPSCHED_PLUGIN_ERROR")) if bad
               else Result("no-exceptions", "PASS"))
    bad = first(lambda x: x[4].get("plugin_invalid_decisions", 0))
    out.append(Result("answers-in-range", "FAIL", at(bad, "select() answered no candidate's "
                                                     "index nor OPPSCHED_NO_USER (the wrapper "
                                                     "counted it invalid and PF decided)"))
               if bad else Result("answers-in-range", "PASS"))
    bad = first(lambda x: x[3] >= 0 and not x[2][1][x[3]])
    out.append(Result("serves-backlogged", "FAIL", at(bad, f"user {bad[3]} served, which has "
                                                      "no data")) if bad
               else Result("serves-backlogged", "PASS"))
    idle = [x for x in a if x[3] < 0 and any(r > 0 and bl for r, bl in zip(x[2][0], x[2][1]))]
    if idle:
        what = (f"{len(idle)} of {len(a)} slots left empty while a candidate had a positive "
                f"rate; first: " + at(idle[0], "no one served"))
        out.append(Result("work-conserving", "INFO" if allow_idle else "FAIL",
                          what + (" (allowed: --allow-idle)" if allow_idle else "")))
    else:
        out.append(Result("work-conserving", "PASS"))
    diff = None if b is None else next(((x, y) for x, y in zip(a, b) if x[3] != y[3]), None)
    if b is None:
        out.append(Result("deterministic", "FAIL", "a second instance could not be made"))
    elif diff:
        x, y = diff
        out.append(Result("deterministic", "FAIL", at(x, f"the first instance served "
                                                      f"{x[3]}, a second one given the same "
                                                      f"slots {y[3]}")))
    else:
        out.append(Result("deterministic", "PASS"))
    ns = [x[4].get("plugin_decision_ns", 0) for x in a if x[4].get("plugin_decisions", 0) == 1]
    out.append(_timing(ns, budget_fraction * slot_s, "select()", strict_timing))
    return rep


def check_cpp_aqm(lib: str, params: dict, *, seed: int = 1) -> Report:
    """The AQM contract on a C++ plugin library, on the FIFO the apd gives it: the queue-side
    properties of check_aqm, with the plugin's exceptions and invalid answers from the
    wrapper's counters."""
    from oppsched import mac

    rep = Report(f"{lib} (C++ aqm)")
    scenarios = aqm_scenarios(seed)
    runs, counters = [], []
    for _attempt in range(2):
        run = _AqmRun()
        totals: dict = {}
        for sc in scenarios:
            try:
                q = mac.make_aqm("plugin", {"library": lib, "params": params,
                                            **sc.queue_kwargs()})
            except (ValueError, RuntimeError) as e:
                rep.results.append(Result("loads", "FAIL", str(e)))
                return rep
            _drive_aqm(sc, q, [], run)
            for k, v in q.plugin_counters.items():
                totals.setdefault(k, []).append((sc, v))
        runs.append(run)
        counters.append(totals)
    a, b = runs
    rep.title += f": {len(scenarios)} scenarios, {len(a.outcome)} events, seed {seed}"
    for prop, counter, what in (
            ("no-exceptions", "plugin_exceptions", "answered OPPSCHED_PLUGIN_ERROR"),
            ("answers-allowed-verbs", "plugin_invalid_answers",
             "answered no verb of the call's (the wrapper took the default)")):
        bad = next(((sc, v) for sc, v in counters[0].get(counter, []) if v), None)
        out = Result(prop, "PASS") if bad is None else Result(
            prop, "FAIL", f"scenario {bad[0].name} (seed {bad[0].seed}): {bad[1]} calls {what}")
        rep.results.append(out)
    for prop in ("conservation", "within-limit", "marks-only-ecn-capable"):
        text = a.failures.get(prop)
        rep.results.append(Result(prop, "FAIL", text) if text else Result(prop, "PASS"))
    if a.outcome != b.outcome:
        k = next(i for i, (x, y) in enumerate(zip(a.outcome, b.outcome)) if x != y) \
            if any(x != y for x, y in zip(a.outcome, b.outcome)) else min(len(a.outcome),
                                                                          len(b.outcome))
        rep.results.append(Result("deterministic", "FAIL", f"event {k}: the first instance "
                                  f"gave {a.outcome[k] if k < len(a.outcome) else 'nothing'!r}, "
                                  "a second one given the same packets "
                                  f"{b.outcome[k] if k < len(b.outcome) else 'nothing'!r}"))
    else:
        rep.results.append(Result("deterministic", "PASS"))
    rep.results.append(Result("decision-time", "INFO", "not timed for a C++ AQM (the "
                              "wrapper keeps no per-call time)"))
    return rep


def check_library(lib: str, params: Optional[dict] = None, family: Optional[str] = None,
                  **options) -> list[Report]:
    """One report: the library's family (from --family, else from which loader takes it)
    against its contract."""
    params = params or {}
    if family is None:
        family, why = _library_family(lib, params)
        if family is None:
            rep = Report(f"{lib} (C++ plugin)")
            rep.results.append(Result("loads", "FAIL", why))
            return [rep]
    if family == "scheduler":
        return [check_cpp_scheduler(lib, params, **options)]
    return [check_cpp_aqm(lib, params, seed=options.get("seed", 1))]
