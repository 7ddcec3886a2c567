"""The contract of each plugin family, as `oppsched plugin check`
(oppsched.commands.plugin_check) checks it: the properties, the seeded synthetic
scenarios, the probe between the C++ wrapper and a Python plugin, the runs of a Python
scheduler or AQM, and the judges, which oppsched.commands.plugin_check_cpp applies to a
C++ plugin library as well.

Scheduler properties (one line each):
  no-exceptions     select() and served() never raise
  answers-in-range  select() returns None or an int index into `users`
  serves-backlogged the user served has data (its view's backlog_bytes > 0, and the wrapper's
                    answer is a user the MAC offered)
  work-conserving   select() leaves no slot empty while a candidate has a positive rate
                    (PF and every built-in kind do; --allow-idle reports it as INFO, for a
                    policy that waits for a better channel on purpose)
  deterministic     a second instance given the same slots makes the same decisions
  decision-time     median and p99 of select()'s time against the budget: INFO (a time
                    measured here is not the apd's; --strict-timing makes it a property)

AQM properties:
  no-exceptions, answers-allowed-verbs (enqueue: accept/drop/mark, dequeue: send/drop/mark),
  conservation (every packet offered is sent, dropped under a named cause, or still queued),
  within-limit, marks-only-ecn-capable, deterministic, and decision-time (INFO).
"""

from __future__ import annotations

import math
import operator
import random
import statistics
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional


SCHEDULER_PROPERTIES = ("no-exceptions", "answers-in-range", "serves-backlogged",
                        "work-conserving", "deterministic", "decision-time")
AQM_PROPERTIES = ("no-exceptions", "answers-allowed-verbs", "conservation", "within-limit",
                  "marks-only-ecn-capable", "deterministic", "decision-time")
ENQUEUE_VERBS = ("accept", "drop", "mark")
DEQUEUE_VERBS = ("send", "drop", "mark")

# Srinivasan & Baras, Table I (EV-DO): quantised rates, so metric ties happen; 0 below the
# first threshold (macsim offers such users: it is full-buffer).
EVDO_BPS = (0.0, 38.4e3, 76.8e3, 153.6e3, 307.2e3, 614.4e3, 921.6e3, 1228.8e3, 1843.2e3,
            2457.6e3)

# The probe the wrapper calls instead of the plugin: it forwards every call and records the
# inputs, the plugin's own answer (before the wrapper judges it) and the call's time. Written
# to a temporary file because the loader takes a file; it imports nothing of oppsched.
_PROBE = '''
import math
import time


def _err(e):
    return "%s: %s" % (type(e).__name__, e)


class SchedulerProbe:
    # The wrapper runs with a slot of 1 s (a budget no call misses, so the clock never
    # decides); served() gets the bytes of the real slot, as the wrapper computes them.
    def __init__(self, inner, record, slot_s):
        self.inner, self.record, self.slot_s = inner, record, slot_s
        self.has_served = hasattr(inner, "served")
        self.rates = {}

    def select(self, slot, users):
        snap = tuple((u.id, u.backlog_bytes, u.rate_bps, u.hol_delay_s, u.avg_bps) for u in users)
        self.rates = {u.id: u.rate_bps for u in users}
        t0 = time.perf_counter_ns()
        try:
            answer = self.inner.select(slot, users)
        except Exception as e:
            self.record.append(("select", slot, snap, None, _err(e), time.perf_counter_ns() - t0))
            raise
        self.record.append(("select", slot, snap, answer, None, time.perf_counter_ns() - t0))
        return answer

    def served(self, slot, user, bytes):
        if not self.has_served:
            return
        if user is not None:
            bytes = int(math.floor(self.rates[user] * self.slot_s / 8.0))
        try:
            self.inner.served(slot, user, bytes)
        except Exception as e:
            self.record.append(("served", slot, (user, bytes), None, _err(e), 0))
            raise


class AqmProbe:
    def __init__(self, inner, record):
        self.inner, self.record = inner, record

    def _call(self, name, fn, pkt, queue, now_s):
        snap = ((pkt.size_bytes, pkt.ecn_capable, pkt.flow, pkt.arrival_s) if pkt is not None
                else None, (queue.bytes, queue.packets))
        t0 = time.perf_counter_ns()
        try:
            answer = fn(pkt, queue, now_s) if pkt is not None else fn(queue, now_s)
        except Exception as e:
            self.record.append((name, now_s, snap, None, _err(e), time.perf_counter_ns() - t0))
            raise
        self.record.append((name, now_s, snap, answer, None, time.perf_counter_ns() - t0))
        return answer

    def enqueue(self, pkt, queue, now_s):
        return self._call("enqueue", self.inner.enqueue, pkt, queue, now_s)

    def dequeue(self, pkt, queue, now_s):
        return self._call("dequeue", self.inner.dequeue, pkt, queue, now_s)

    def on_empty(self, queue, now_s):
        fn = getattr(self.inner, "on_empty", None)
        if fn is not None:
            return self._call("on_empty", fn, None, queue, now_s)
'''


@dataclass
class Result:
    name: str
    status: str  # PASS, FAIL or INFO
    detail: str = ""

    def line(self) -> str:
        return f"{self.status} {self.name}" + (f": {self.detail}" if self.detail else "")


@dataclass
class Report:
    title: str
    results: list[Result] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.status != "FAIL" for r in self.results)

    def result(self, name: str) -> Result:
        return next(r for r in self.results if r.name == name)

    def lines(self) -> list[str]:
        return [self.title] + ["  " + r.line() for r in self.results]


class _Probe:
    """The probe file, written once per check."""

    def __init__(self):
        self._dir = tempfile.TemporaryDirectory(prefix="oppsched-plugin-check-")
        self.file = str(Path(self._dir.name) / "oppsched_check_probe.py")
        Path(self.file).write_text(_PROBE)

    def close(self):
        self._dir.cleanup()


def _load(file: str, cls: str, params: dict, family: str):
    """A fresh instance, made by the apd's loader; None and the reason if it refuses."""
    from oppsched import mac

    try:
        return mac.load_plugin(file, cls, params, family), None
    except ValueError as e:
        return None, str(e)


def _percentile(values: list[int], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _us(ns: float) -> str:
    return f"{ns / 1e3:.4g} µs"


# ---- schedulers ----------------------------------------------------------------------------


@dataclass
class SchedScenario:
    """Seeded slots: each a (rates, backlogged, backlog_bytes or None, hol_delay_s)."""
    name: str
    users: int
    slots: int
    seed: int
    p_backlogged: float = 0.8
    full_buffer: bool = False  # macsim: no queue state (backlog inf, hol 0)
    fading: bool = True  # per-slot random EV-DO rates, some 0; else one equal rate for all

    def generate(self):
        rnd = random.Random(self.seed)
        for _ in range(self.slots):
            if self.fading:
                rates = [rnd.choice(EVDO_BPS) for _ in range(self.users)]
            else:
                rates = [614.4e3] * self.users
            if self.full_buffer:
                yield rates, [True] * self.users, None, None
                continue
            backlogged = [rnd.random() < self.p_backlogged for _ in range(self.users)]
            backlog = [rnd.choice((40, 1500, 3000, 60_000, 1_000_000)) if b else 0
                       for b in backlogged]
            hol = [round(rnd.uniform(0.0, 0.2), 6) if b else 0.0 for b in backlogged]
            yield rates, backlogged, backlog, hol


def scheduler_scenarios(seed: int) -> list[SchedScenario]:
    return [
        SchedScenario("sparse", users=6, slots=3000, seed=seed, p_backlogged=0.3),
        SchedScenario("busy", users=4, slots=3000, seed=seed + 1, p_backlogged=0.9),
        SchedScenario("full-buffer", users=3, slots=2000, seed=seed + 2, full_buffer=True),
        SchedScenario("ties", users=4, slots=60, seed=seed + 3, p_backlogged=1.0, fading=False),
        SchedScenario("one-user", users=1, slots=300, seed=seed + 4, p_backlogged=0.7),
    ]


def _users_text(snap) -> str:
    def one(u):
        uid, backlog, rate, hol, avg = u
        b = "inf" if backlog == math.inf else f"{backlog:g} B"
        text = f"id {uid}: backlog {b}, rate {rate:g} b/s, hol {hol:g} s"
        return text if math.isnan(avg) else text + f", avg {avg:.6g} b/s"
    return "[" + "; ".join(one(u) for u in snap) + "]"


def _where(sc: SchedScenario, slot) -> str:
    return f"scenario {sc.name} (seed {sc.seed}), slot {slot}"


@dataclass
class _SchedRun:
    decisions: list  # per select() call: (scenario, slot, snap, answer, error, ns)
    errors: list  # served() errors: (scenario, slot, (user, bytes), error)
    served: list  # per slot: (scenario, slot, backlogged, backlog_bytes, wrapper's answer)


def _run_scheduler(probe: _Probe, file: str, cls: str, params: dict, scenarios,
                   slot_s: float):
    """Each scenario as a run of its own: a fresh instance, slots from 0. Returns the run, or
    None and the loader's reason."""
    from oppsched import mac

    run = _SchedRun([], [], [])
    for sc in scenarios:
        instance, why = _load(file, cls, params, "scheduler")
        if instance is None:
            return None, why
        record: list = []
        # A 1 s slot and budget: the plugin's answer stands however long it took, so what the
        # check judges never depends on the clock (the probe gives served() the real slot's
        # bytes).
        s = mac.make_scheduler("python", {"file": probe.file, "class": "SchedulerProbe",
                                          "params": {"inner": instance, "record": record,
                                                     "slot_s": slot_s},
                                          "slot_s": 1.0, "budget_fraction": 1.0,
                                          "num_users": sc.users})
        for k, (rates, backlogged, backlog, hol) in enumerate(sc.generate()):
            if backlog is not None:
                s.set_queue_state(k, backlog, hol)
            run.served.append((sc, k, backlogged, backlog, s.step(rates, backlogged)))
        for kind, slot, snap, answer, err, ns in record:
            if kind == "select":
                run.decisions.append((sc, slot, snap, answer, err, ns))
            else:
                run.errors.append((sc, slot, snap, err))
    return run, None


def _valid_index(answer, n: int) -> bool:
    """As the wrapper judges it: an integer (anything with __index__, numpy's too) but not a
    bool, in 0..n-1."""
    if isinstance(answer, bool):
        return False
    try:
        return 0 <= operator.index(answer) < n
    except TypeError:
        return False


def _same(answer):
    """What two answers must share to be the same decision: the index, else the value."""
    if answer is None:
        return None
    if isinstance(answer, bool):
        return repr(answer)  # True is not the index 1
    try:
        return operator.index(answer)
    except TypeError:
        return repr(answer)


def check_scheduler(file: str, cls: str, params: dict, *, seed: int = 1,
                    slot_s: float = 3e-3, budget_fraction: float = 0.5,
                    allow_idle: bool = False, strict_timing: bool = False) -> Report:
    """The scheduler contract on `cls` of `file` made with `params` (see the module's
    docstring)."""
    rep = Report(f"{file}: class {cls} (scheduler)")
    scenarios = scheduler_scenarios(seed)
    probe = _Probe()
    try:
        a, why = _run_scheduler(probe, file, cls, params, scenarios, slot_s)
        if a is None:
            rep.results.append(Result("loads", "FAIL", why))
            return rep
        # the same scenarios again with fresh instances: the same decisions?
        b, _ = _run_scheduler(probe, file, cls, params, scenarios, slot_s)
    finally:
        probe.close()
    rep.title += f": {len(scenarios)} scenarios, {len(a.served)} slots, seed {seed}"
    rep.results += judge_scheduler(a, b, budget_s=budget_fraction * slot_s,
                                   allow_idle=allow_idle, strict_timing=strict_timing)
    return rep


def judge_scheduler(a: _SchedRun, b: Optional[_SchedRun], *, budget_s: float,
                    allow_idle: bool = False, strict_timing: bool = False) -> list[Result]:
    out = []
    # no-exceptions
    bad = next(((sc, slot, snap, err) for sc, slot, snap, _, err, _ in a.decisions if err), None)
    if bad:
        sc, slot, snap, err = bad
        out.append(Result("no-exceptions", "FAIL",
                          f"{_where(sc, slot)}: users {_users_text(snap)}: select raised {err}"))
    elif a.errors:
        sc, slot, (user, nbytes), err = a.errors[0]
        out.append(Result("no-exceptions", "FAIL", f"{_where(sc, slot)}: served(slot={slot}, "
                          f"user={user!r}, bytes={nbytes}) raised {err}"))
    else:
        out.append(Result("no-exceptions", "PASS"))
    answered = [d for d in a.decisions if d[4] is None]
    # answers-in-range
    bad = next((d for d in answered if d[3] is not None and not _valid_index(d[3], len(d[2]))),
               None)
    if bad:
        sc, slot, snap, answer, _, _ = bad
        out.append(Result("answers-in-range", "FAIL",
                          f"{_where(sc, slot)}: users {_users_text(snap)}: select returned "
                          f"{answer!r}, not None nor an index in 0..{len(snap) - 1}"))
    else:
        out.append(Result("answers-in-range", "PASS"))
    # serves-backlogged: the plugin's pick, and what the wrapper handed the MAC
    bad = next((d for d in answered
                if _valid_index(d[3], len(d[2])) and d[2][operator.index(d[3])][1] <= 0), None)
    if bad:
        sc, slot, snap, answer, _, _ = bad
        out.append(Result("serves-backlogged", "FAIL",
                          f"{_where(sc, slot)}: users {_users_text(snap)}: select returned "
                          f"{answer!r}, id {snap[operator.index(answer)][0]}, which has no data"))
    else:
        wrong = next(((sc, k, bl, backlog, o) for sc, k, bl, backlog, o in a.served
                      if o >= 0 and (o >= len(bl) or not bl[o])), None)
        if wrong:
            sc, k, bl, backlog, o = wrong
            out.append(Result("serves-backlogged", "FAIL",
                              f"{_where(sc, k)}: backlogs {backlog}: user {o} served, "
                              "which has no data"))
        else:
            out.append(Result("serves-backlogged", "PASS"))
    # work-conserving
    idle = [d for d in answered if d[3] is None and any(u[2] > 0 for u in d[2])]
    if idle:
        sc, slot, snap, _, _, _ = idle[0]
        what = (f"{len(idle)} of {len(answered)} slots left empty while a candidate had a "
                f"positive rate; first: {_where(sc, slot)}: users {_users_text(snap)}: select "
                "returned None")
        out.append(Result("work-conserving", "INFO" if allow_idle else "FAIL",
                          what + (" (allowed: --allow-idle)" if allow_idle else "")))
    else:
        out.append(Result("work-conserving", "PASS"))
    # deterministic: the second instance's answers, slot by slot, up to a deadline miss
    if b is None:
        out.append(Result("deterministic", "FAIL", "a second instance could not be made"))
    else:
        diff = None
        for x, y in zip(a.decisions, b.decisions):
            if _same(x[3]) != _same(y[3]) or x[4] != y[4] or x[2] != y[2]:
                diff = (x, y)
                break
        if diff is None and len(a.decisions) != len(b.decisions):
            diff = (a.decisions[min(len(a.decisions), len(b.decisions)) - 1],) * 2
        if diff:
            (sc, slot, snap, ans1, err1, _), (_, _, snap2, ans2, err2, _) = diff
            out.append(Result("deterministic", "FAIL",
                              f"{_where(sc, slot)}: users {_users_text(snap)}: the first "
                              f"instance returned {err1 or repr(ans1)}, a second one given the "
                              f"same slots {err2 or repr(ans2)}"
                              + ("" if snap == snap2 else f" (its users {_users_text(snap2)})")))
        else:
            out.append(Result("deterministic", "PASS"))
    out.append(_timing([d[5] for d in a.decisions], budget_s, "select()", strict_timing))
    return out


def _timing(ns: list[int], budget_s: Optional[float], what: str, strict: bool) -> Result:
    if not ns:
        return Result("decision-time", "INFO", f"{what} was never called")
    med, p99 = statistics.median(ns), _percentile(ns, 0.99)
    text = f"{what} median {_us(med)}, p99 {_us(p99)} over {len(ns)} calls"
    if budget_s is None:
        return Result("decision-time", "INFO", text + " (no deadline)")
    over = sum(1 for t in ns if t > budget_s * 1e9)
    text += f"; budget {_us(budget_s * 1e9)}, {over} over it"
    if strict:
        return Result("decision-time", "FAIL" if p99 > budget_s * 1e9 else "PASS", text)
    return Result("decision-time", "INFO", text)


# ---- AQMs ----------------------------------------------------------------------------------


@dataclass
class AqmScenario:
    """Seeded arrivals and departures on a queue with these limits (as aqm_contract's
    variants: packet limit with ECN; byte limit; both limits with ECN off)."""
    name: str
    seed: int
    limit_packets: int
    limit_bytes: int
    ecn: bool
    steps: int = 4000

    def queue_kwargs(self) -> dict:
        return {"limit_packets": self.limit_packets, "limit_bytes": self.limit_bytes,
                "ecn": self.ecn}


def aqm_scenarios(seed: int) -> list[AqmScenario]:
    return [AqmScenario("packets-ecn", seed, limit_packets=40, limit_bytes=0, ecn=True),
            AqmScenario("bytes", seed + 1, limit_packets=0, limit_bytes=30000, ecn=True),
            AqmScenario("both-no-ecn", seed + 2, limit_packets=25, limit_bytes=20000, ecn=False)]


def ipv4_packet(pid: int, size: int, ecn: int, flow: int) -> bytes:
    """An IPv4/UDP packet of `size` bytes whose IP identification is `pid` (its name here)."""
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, ecn, size, pid & 0xFFFF, 0, 64, 17, 0,
                      bytes([10, 0, 0, 1]), bytes([10, 0, 1, 2]))
    udp = struct.pack("!HHHH", 5000 + flow, 9, size - 20, 0)
    return hdr + udp + bytes(size - 28)


def packet_id(data: bytes) -> int:
    return struct.unpack_from("!H", data, 4)[0]


def aqm_events(sc: AqmScenario):
    """("enqueue", t, id, packet, ecn_capable) and ("dequeue", t, False) events, then the
    drain: ("dequeue", t, True), one a millisecond (the driver stops once the queue is empty
    and one more dequeue found it so)."""
    rnd = random.Random(sc.seed)
    t_ns, pid = 0, 0
    for step in range(sc.steps):
        t_ns += int(rnd.random() * 3e6)  # 0..3 ms
        overload = (step // 500) % 2 == 0
        if rnd.random() < (0.75 if overload else 0.3):
            for _ in range(1 + int(rnd.random() * 4)):
                size = rnd.choice((40, 52, 576, 1000, 1500, 1500))
                ecn = 2 if rnd.random() < 0.5 else 0
                yield "enqueue", t_ns * 1e-9, pid, ipv4_packet(pid, size, ecn,
                                                               rnd.randrange(4)), ecn != 0
                pid += 1
        else:
            for _ in range(1 + int(rnd.random() * 3)):
                yield "dequeue", t_ns * 1e-9, False
    for _ in range(100_000):  # a guard: the driver stops once the queue is empty
        t_ns += 1_000_000
        yield "dequeue", t_ns * 1e-9, True


@dataclass
class _AqmRun:
    calls: list = field(default_factory=list)  # (scenario, name, now_s, snap, answer, err, ns)
    outcome: list = field(default_factory=list)  # per event: accepted bool / sent id or None
    failures: dict = field(default_factory=dict)  # property -> counterexample text


def _drive_aqm(sc: AqmScenario, q, record: list, run: _AqmRun) -> None:
    """Runs the scenario's events on queue q (the bindings' queue_discipline or anything with
    its enqueue, dequeue, drops, bytes and packets), checking the queue-side properties after
    every event."""
    from oppsched import mac

    reasons = set(mac.DROP_REASONS)
    offered: dict[int, bool] = {}  # id -> ECN-capable
    sent: set[int] = set()
    dropped: dict[str, int] = {}
    last = ""
    fail = run.failures

    def note(prop, text):
        fail.setdefault(prop, f"scenario {sc.name} (seed {sc.seed}), {text}")

    for step, ev in enumerate(aqm_events(sc)):
        mark = len(record)
        if ev[0] == "enqueue":
            _, t, pid, data, ect = ev
            offered[pid] = ect
            ok = q.enqueue(data, t)
            run.outcome.append(ok)
            last = (f"step {step} at {t:.6f} s: packet {pid} ({len(data)} B, "
                    f"{'ECN-capable' if ect else 'not ECN-capable'}) offered, "
                    f"{'accepted' if ok else 'refused'}")
        else:
            _, t, draining = ev
            if draining and q.packets == 0 and run.outcome[-1] is None:
                break  # drained, and one dequeue found the queue empty
            out = q.dequeue(t)
            pid = None if out is None else packet_id(out)
            run.outcome.append(pid)
            last = f"step {step} at {t:.6f} s: dequeue gave " + (
                "nothing" if out is None else f"packet {pid} ({len(out)} B)")
            if out is not None:
                if pid not in offered or pid in sent:
                    what = "never offered" if pid not in offered else "sent twice"
                    note("conservation", f"{last}: a packet {what}")
                sent.add(pid)
                if out[1] & 3 == 3 and not (offered.get(pid) and sc.ecn):
                    note("marks-only-ecn-capable",
                         f"{last}, CE-marked, but it arrived "
                         + ("not ECN-capable" if not offered.get(pid) else "with ecn off"))
        for r, _n in q.drops():
            if r not in reasons:
                note("conservation", f"{last}: a drop under no named cause ({r!r})")
            dropped[r] = dropped.get(r, 0) + 1
        answers = [f"{c[0]}(...) -> {c[3]!r}" for c in record[mark:] if c[0] != "on_empty"]
        ctx = f"{last}" + (f"; the plugin answered {', '.join(answers)}" if answers else "")
        total = sum(dropped.values())
        if len(offered) != len(sent) + total + q.packets:
            lost = len(offered) - len(sent) - total - q.packets
            causes = ", ".join(f"{k} {v}" for k, v in sorted(dropped.items())) or "none"
            note("conservation",
                 f"{ctx}: offered {len(offered)}, sent {len(sent)}, dropped {total} ({causes}), "
                 f"queued {q.packets}: {lost} packet(s) unaccounted for")
        if (sc.limit_packets and q.packets > sc.limit_packets) or (
                sc.limit_bytes and q.bytes > sc.limit_bytes):
            note("within-limit", f"{ctx}: the queue holds {q.packets} packets, {q.bytes} B, "
                 f"over its limit of {sc.limit_packets or 'no'} packets, "
                 f"{sc.limit_bytes or 'no'} B")
    if q.packets:
        note("conservation", f"the drain left {q.packets} packets queued")
    for c in record:
        run.calls.append((sc, *c))


def _verb_failure(calls) -> Optional[str]:
    for sc, name, now_s, snap, answer, err, _ in calls:
        if err or name == "on_empty":
            continue
        allowed = ENQUEUE_VERBS if name == "enqueue" else DEQUEUE_VERBS
        if answer not in allowed:
            return (f"scenario {sc.name} (seed {sc.seed}), {name}({_pkt_text(snap)}, "
                    f"now_s={now_s:.6f}) returned {answer!r}, not one of "
                    f"{', '.join(allowed)}")
    return None


def _pkt_text(snap) -> str:
    pkt, (qb, qp) = snap
    queue = f"queue {{bytes {qb}, packets {qp}}}"
    if pkt is None:
        return queue
    size, ect, _flow, arrival = pkt
    return (f"packet {{{size} B, {'ECN-capable' if ect else 'not ECN-capable'}, arrival "
            f"{arrival:.6f} s}}, {queue}")


def check_aqm(file: str, cls: str, params: dict, *, seed: int = 1,
              make_queue: Optional[Callable] = None) -> Report:
    """The AQM contract on `cls` of `file` made with `params`. make_queue(probe_kwargs,
    queue_kwargs) builds the queue (default: the bindings' make_aqm("python", ...), the
    python_aqm wrapper the apd runs)."""
    from oppsched import mac

    rep = Report(f"{file}: class {cls} (aqm)")
    scenarios = aqm_scenarios(seed)
    if make_queue is None:
        def make_queue(probe_params, queue_kwargs):
            return mac.make_aqm("python", {"file": probe.file, "class": "AqmProbe",
                                           "params": probe_params, **queue_kwargs})
    runs = []
    probe = _Probe()
    try:
        for attempt in range(2):  # the second run: fresh instances, for determinism
            run = _AqmRun()
            for sc in scenarios:
                inst, why = _load(file, cls, params, "aqm")
                if inst is None:
                    rep.results.append(Result("loads", "FAIL", why))
                    return rep
                record: list = []
                q = make_queue({"inner": inst, "record": record}, sc.queue_kwargs())
                _drive_aqm(sc, q, record, run)
            runs.append(run)
    finally:
        probe.close()
    a, b = runs
    rep.title += f": {len(scenarios)} scenarios, {len(a.outcome)} events, seed {seed}"
    rep.results += judge_aqm(a, b)
    return rep


def judge_aqm(a: _AqmRun, b: _AqmRun) -> list[Result]:
    out = []
    err = next((c for c in a.calls if c[5]), None)
    if err:
        sc, name, now_s, snap, _, e, _ = err
        out.append(Result("no-exceptions", "FAIL", f"scenario {sc.name} (seed {sc.seed}), "
                          f"{name}({_pkt_text(snap)}, now_s={now_s:.6f}) raised {e}"))
    else:
        out.append(Result("no-exceptions", "PASS"))
    verb = _verb_failure(a.calls)
    out.append(Result("answers-allowed-verbs", "FAIL", verb) if verb
               else Result("answers-allowed-verbs", "PASS"))
    for prop in ("conservation", "within-limit", "marks-only-ecn-capable"):
        text = a.failures.get(prop)
        out.append(Result(prop, "FAIL", text) if text else Result(prop, "PASS"))
    if a.outcome != b.outcome or [c[4] for c in a.calls] != [c[4] for c in b.calls]:
        k = next((i for i, (x, y) in enumerate(zip(a.calls, b.calls)) if x[4] != y[4]), None)
        if k is not None:
            sc, name, now_s, snap, ans1, _, _ = a.calls[k]
            text = (f"scenario {sc.name} (seed {sc.seed}), {name}({_pkt_text(snap)}, "
                    f"now_s={now_s:.6f}): the first instance returned {ans1!r}, a second one "
                    f"given the same packets {b.calls[k][4]!r}")
        else:
            text = "a second instance given the same packets made other decisions"
        out.append(Result("deterministic", "FAIL", text))
    else:
        out.append(Result("deterministic", "PASS"))
    out.append(_timing([c[6] for c in a.calls if c[1] != "on_empty"], None,
                       "enqueue()/dequeue()", False))
    return out
