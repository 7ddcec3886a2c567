"""`oppsched plugin check` (tools/oppsched/commands/plugin_check.py): every example plugin passes its
family's contract; a plugin that breaks a property fails that property, named, with the slot
or packet that shows it; the command's exit status and errors. Also the CoDel example against
the built-in CoDel, packet for packet. Nothing here depends on the wall clock: decision-time is
INFO unless --strict-timing, which no test passes."""

import collections
import random
from types import SimpleNamespace
import re
import textwrap

import pytest

from oppsched import mac
from oppsched.commands import plugin_contract
from oppsched.commands.plugin_check import check_file
from oppsched.commands.plugin_contract import check_aqm, check_scheduler

from helpers import REPO, run_cli

EXAMPLES = REPO / "examples" / "plugins"


def _plugin(tmp_path, body: str, name: str = "p.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _status(report) -> dict:
    return {r.name: r.status for r in report.results}


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_plugin_passes_its_familys_contract(example):
    reports = check_file(str(EXAMPLES / example))
    assert reports
    for r in reports:
        assert r.ok, "\n".join(r.lines())
        props = (plugin_contract.SCHEDULER_PROPERTIES if "(scheduler)" in r.title
                 else plugin_contract.AQM_PROPERTIES)
        assert [x.name for x in r.results] == list(props)
        assert all(x.status == "PASS" for x in r.results if x.name != "decision-time")


def test_a_file_with_two_plugin_classes_gets_a_report_for_each():
    reports = check_file(str(EXAMPLES / "maxweight.py"))
    assert [r.title.split(":")[1].strip() for r in reports] == ["class MaxWeight (scheduler)",
                                                               "class MLWDF (scheduler)"]


# ---- schedulers that break a property ----------------------------------------------------


def test_an_out_of_range_index_fails_answers_in_range_with_the_slot_and_the_answer(tmp_path):
    f = _plugin(tmp_path, """
        class PastTheEnd:
            def select(self, slot, users):
                return len(users)
    """)
    r = check_scheduler(f, "PastTheEnd", {})
    assert _status(r)["answers-in-range"] == "FAIL"
    detail = r.result("answers-in-range").detail
    # the first slot of the first scenario with a candidate, and what the plugin said
    assert detail.startswith("scenario sparse (seed 1), slot ")
    m = re.search(r"select returned (\d+), not None nor an index in 0\.\.(\d+)$", detail)
    assert m and int(m[1]) == int(m[2]) + 1, detail
    assert "backlog" in detail and "rate" in detail
    assert _status(r)["no-exceptions"] == "PASS"


def test_returning_the_users_id_instead_of_its_index_fails_answers_in_range(tmp_path):
    # the usual way to name a user that is not the one meant: ids are not indices
    f = _plugin(tmp_path, """
        class ById:
            def select(self, slot, users):
                return max(users, key=lambda u: u.rate_bps).id
    """)
    r = check_scheduler(f, "ById", {})
    assert _status(r)["answers-in-range"] == "FAIL"
    assert "select returned" in r.result("answers-in-range").detail


def test_an_index_of_any_integer_type_is_in_range_as_the_wrapper_takes_it(tmp_path):
    # the wrapper takes anything with __index__ (numpy's integers), never a bool
    f = _plugin(tmp_path, """
        class Index:
            def __init__(self, k):
                self.k = k
            def __index__(self):
                return self.k
        class Wrapped:
            def select(self, slot, users):
                return Index(len(users) - 1)
        class Boolean:
            def select(self, slot, users):
                return True
    """)
    assert check_scheduler(f, "Wrapped", {}).ok
    r = check_scheduler(f, "Boolean", {})
    assert _status(r)["answers-in-range"] == "FAIL"
    assert "select returned True" in r.result("answers-in-range").detail


def test_a_plugin_that_leaves_slots_empty_fails_work_conserving_unless_allowed(tmp_path):
    f = _plugin(tmp_path, """
        class Idle:
            def select(self, slot, users):
                return None if slot % 2 else 0
    """)
    r = check_scheduler(f, "Idle", {})
    assert _status(r)["work-conserving"] == "FAIL" and not r.ok
    detail = r.result("work-conserving").detail
    assert "slots left empty while a candidate had a positive rate" in detail
    assert "select returned None" in detail
    allowed = check_scheduler(f, "Idle", {}, allow_idle=True)
    assert _status(allowed)["work-conserving"] == "INFO" and allowed.ok


def test_an_exception_in_select_fails_no_exceptions_with_its_message(tmp_path):
    f = _plugin(tmp_path, """
        class Raises:
            def select(self, slot, users):
                if slot == 7:
                    raise KeyError("no user 7")
                return 0
    """)
    r = check_scheduler(f, "Raises", {})
    assert _status(r)["no-exceptions"] == "FAIL"
    assert "slot 7" in r.result("no-exceptions").detail
    assert "select raised KeyError: 'no user 7'" in r.result("no-exceptions").detail


def test_a_plugin_whose_instances_decide_differently_fails_deterministic(tmp_path):
    # each instance made in this process serves another index: the same inputs, other answers
    f = _plugin(tmp_path, """
        import sys
        class Drifts:
            def __init__(self):
                n = getattr(sys, "_oppsched_test_instances", 0)
                sys._oppsched_test_instances = n + 1
                self.k = n
            def select(self, slot, users):
                return self.k % len(users)
    """)
    r = check_scheduler(f, "Drifts", {})
    assert _status(r)["deterministic"] == "FAIL"
    assert "a second one given the same slots" in r.result("deterministic").detail


def test_serves_backlogged_names_a_pick_without_data():
    # The protocol's users are the slot's candidates, so through the wrapper a plugin cannot
    # pick a user without data; the property still judges every pick, as here.
    sc = plugin_contract.scheduler_scenarios(1)[0]
    snap = ((0, 0, 38400.0, 0.0, 100.0), (3, 1500, 76800.0, 0.1, 100.0))
    run = plugin_contract._SchedRun(decisions=[(sc, 4, snap, 0, None, 100)], errors=[],
                                 served=[(sc, 4, [True, False, False, True], [0, 0, 0, 1500], 0)])
    res = {x.name: x for x in plugin_contract.judge_scheduler(run, run, budget_s=1e-3)}
    assert res["serves-backlogged"].status == "FAIL"
    assert res["serves-backlogged"].detail.startswith("scenario sparse (seed 1), slot 4: ")
    assert "select returned 0, id 0, which has no data" in res["serves-backlogged"].detail


def test_decision_time_is_information_and_a_property_only_when_strict():
    ok = plugin_contract._timing([1000] * 99 + [10_000_000], 1.5e-3, "select()", strict=False)
    assert ok.status == "INFO" and "1 over it" in ok.detail
    assert plugin_contract._timing([1000] * 10, 1.5e-3, "select()", strict=True).status == "PASS"
    slow = plugin_contract._timing([2_000_000] * 10, 1.5e-3, "select()", strict=True)
    assert slow.status == "FAIL" and "median 2000 µs" in slow.detail


# ---- AQMs that break a property ----------------------------------------------------------


def test_an_aqm_answering_an_unknown_verb_fails_answers_allowed_verbs(tmp_path):
    f = _plugin(tmp_path, """
        class Enqueues:
            def enqueue(self, pkt, queue, now_s):
                return "accept"
            def dequeue(self, pkt, queue, now_s):
                return "queue" if queue.packets > 3 else "send"
    """)
    r = check_aqm(f, "Enqueues", {})
    assert _status(r)["answers-allowed-verbs"] == "FAIL"
    detail = r.result("answers-allowed-verbs").detail
    assert "dequeue(packet {" in detail and "returned 'queue', not one of send, drop, mark" \
        in detail
    # the wrapper sends the packet: nothing is lost
    assert _status(r)["conservation"] == "PASS"


class _LosingQueue:
    """The bindings' queue, but the 50th packet dequeued vanishes: neither sent nor dropped."""

    def __init__(self, q):
        self.q, self.n = q, 0

    def enqueue(self, data, t):
        return self.q.enqueue(data, t)

    def dequeue(self, t):
        out = self.q.dequeue(t)
        if out is not None:
            self.n += 1
            if self.n == 50:
                return None
        return out

    def drops(self):
        return self.q.drops()

    @property
    def packets(self):
        return self.q.packets

    @property
    def bytes(self):
        return self.q.bytes


def test_a_queue_that_loses_a_packet_fails_conservation_naming_the_count(tmp_path):
    # A plugin only answers verbs and the wrapper owns the packets, so no plugin can lose one;
    # the property checks the queue's books, shown here on a queue that does.
    def make_queue(probe_params, queue_kwargs):
        return _LosingQueue(mac.make_aqm("python", {"file": probe.file, "class": "AqmProbe",
                                                    "params": probe_params, **queue_kwargs}))
    probe = plugin_contract._Probe()
    try:
        r = check_aqm(str(EXAMPLES / "droptail.py"), "DropTail", {}, make_queue=make_queue)
    finally:
        probe.close()
    assert _status(r)["conservation"] == "FAIL"
    detail = r.result("conservation").detail
    assert detail.startswith("scenario packets-ecn (seed 1), step ")
    assert "1 packet(s) unaccounted for" in detail
    assert "dequeue gave nothing" in detail


class _NaiveFifo:
    """A FIFO without a limit that CE-marks every packet it sends."""

    def __init__(self):
        self.fifo, self.bytes = collections.deque(), 0

    def enqueue(self, data, t):
        self.fifo.append(data)
        self.bytes += len(data)
        return True

    def dequeue(self, t):
        if not self.fifo:
            return None
        data = bytearray(self.fifo.popleft())
        self.bytes -= len(data)
        data[1] |= 3
        return bytes(data)

    def drops(self):
        return []

    @property
    def packets(self):
        return len(self.fifo)


def test_a_queue_past_its_limit_or_marking_not_ecn_capable_packets_fails_those_properties():
    r = check_aqm(str(EXAMPLES / "droptail.py"), "DropTail", {},
                  make_queue=lambda _p, _q: _NaiveFifo())
    st = _status(r)
    assert st["within-limit"] == "FAIL" and st["marks-only-ecn-capable"] == "FAIL"
    assert st["conservation"] == "PASS"
    assert "over its limit of 40 packets" in r.result("within-limit").detail
    assert "CE-marked, but it arrived not ECN-capable" in \
        r.result("marks-only-ecn-capable").detail


# ---- the command -------------------------------------------------------------------------


def test_the_command_prints_a_line_per_property_and_exits_1_on_a_failure(tmp_path):
    bad = _plugin(tmp_path, """
        class PastTheEnd:
            def select(self, slot, users):
                return len(users)
    """)
    r = run_cli("plugin", "check", bad)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{bad}: class PastTheEnd (scheduler): 5 scenarios")
    assert any(x.startswith("  FAIL answers-in-range: scenario sparse (seed 1), slot ")
               for x in lines), r.stdout
    assert "  PASS no-exceptions" in lines
    assert lines[-1] == "plugin check: 0 of 1 class(es) pass"
    good = run_cli("plugin", "check", EXAMPLES / "maxweight.py", "--class", "MaxWeight",
                   "--params", "{beta: 2.0}")
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.count("PASS") == 5 and "FAIL" not in good.stdout


def test_bad_arguments_are_refused_naming_the_option(tmp_path):
    r = run_cli("plugin", "check", EXAMPLES / "pf.py", "--params", "[1, 2]")
    assert r.returncode == 2 and "--params: '[1, 2]' is not a mapping" in r.stderr, r.stderr
    r = run_cli("plugin", "check", tmp_path / "none.py")
    assert r.returncode == 2 and "is not a file" in r.stderr, r.stderr
    r = run_cli("plugin", "check", EXAMPLES / "pf.py", "--class", "Nope")
    assert r.returncode == 2 and "--family: class Nope" in r.stderr, r.stderr
    r = run_cli("plugin")
    assert r.returncode == 2 and "check" in r.stderr


def test_a_class_the_loader_refuses_fails_loads_with_the_loaders_reason(tmp_path):
    f = _plugin(tmp_path, """
        class Needs:
            def __init__(self, beta):
                self.beta = beta
            def select(self, slot, users):
                return 0
    """)
    (r,) = check_file(f)
    assert [(x.name, x.status) for x in r.results] == [("loads", "FAIL")]
    assert r.results[0].detail.startswith(f"{f}: class Needs: Needs(**{{}}) raised TypeError")
    (r,) = check_file(f, params={"beta": 1})
    assert r.ok


# ---- CoDel in Python against the built-in --------------------------------------------------


def _codel_events(seed: int, n: int):
    """Seeded (t, packets, dequeues, flush) steps in phases of 50-600 arrivals: heavy load
    (a standing queue: CoDel acts), an outage (no service, as a user in a deep fade), fast
    service (the queue empties, dequeues find it empty) and a trickle. Now and then an outage
    ends in a flush (clear) and a dequeue of the empty queue."""
    rnd = random.Random(seed)
    t, k = 0.0, 0
    while k < n:
        mode = rnd.choice(("heavy", "outage", "drain", "trickle"))
        for _ in range(rnd.randint(50, 600)):
            t += rnd.expovariate(150.0 if mode == "trickle" else 900.0)
            packets = []
            for _ in range(rnd.choice((1, 1, 1, 2, 4))):
                packets.append(plugin_contract.ipv4_packet(k, rnd.choice((60, 576, 1500, 1500)),
                                                        2 if rnd.random() < 0.5 else 0, k % 4))
                k += 1
            dequeues = {"heavy": int(rnd.random() < 0.55), "outage": 0,
                        "drain": rnd.choice((1, 2, 3, 6)), "trickle": rnd.choice((0, 1, 2))}[mode]
            yield t, packets, dequeues, mode == "outage" and rnd.random() < 0.004


def _drive_codel(q, seed: int):
    accepted, sent, drops = [], [], []
    for t, packets, dequeues, flush in _codel_events(seed, 20000):
        accepted += [q.enqueue(p, t) for p in packets]
        sent += [q.dequeue(t) for _ in range(dequeues)]
        if flush:
            q.clear(t)
            sent.append(q.dequeue(t))
        drops += q.drops()
    return accepted, sent, drops


@pytest.mark.parametrize("ecn", [True, False])
def test_python_codel_makes_the_builtin_codels_decisions_packet_for_packet(ecn):
    limits = {"limit_packets": 400, "ecn": ecn}
    builtin = mac.make_aqm("codel", target_s=0.005, interval_s=0.1, mtu=1500, **limits)
    plugin = mac.make_aqm("python", {"file": str(EXAMPLES / "codel.py"), "class": "CoDel",
                                     "params": {"target_s": 0.005, "interval_s": 0.1,
                                                "mtu": 1500}, **limits})
    a = _drive_codel(builtin, seed=8)
    b = _drive_codel(plugin, seed=8)
    assert a[0] == b[0]                      # the same arrivals accepted
    assert a[1] == b[1]                      # the same packets sent, in order, CE bits included
    assert a[2] == b[2]                      # the same drops, in order, with their causes
    sa, sb = builtin.stats, plugin.stats
    assert sa["marked"] == sb["marked"] and sa["dropped"] == sb["dropped"]
    # CoDel acted, the queue emptied and was flushed
    assert sa["dropped"]["aqm_drop"] > 1000 and (sa["marked"] > 1000) == ecn
    assert sa["dropped"]["flushed"] > 0 and sum(1 for p in a[1] if p is None) > 1000
    c = plugin.plugin_counters
    assert (c["plugin_exceptions"], c["plugin_invalid_answers"]) == (0, 0)
    assert c["plugin_enqueue_calls"] == sb["offered"] > 0  # every arrival asked, and timed


@pytest.mark.parametrize("ecn", [True, False])
def test_python_codel_judges_a_sojourn_nanoseconds_from_target_as_the_builtin_does(ecn):
    # The plugin compares the sojourn with the target in floats only when it is clear by
    # far more than their rounding; a sojourn a few nanoseconds from the target is judged in
    # integer nanoseconds, as the built-in judges it.
    limits = {"limit_packets": 400, "ecn": ecn}
    builtin = mac.make_aqm("codel", target_s=0.005, interval_s=0.1, mtu=1500, **limits)
    plugin = mac.make_aqm("python", {"file": str(EXAMPLES / "codel.py"), "class": "CoDel",
                                     "params": {"target_s": 0.005, "interval_s": 0.1,
                                                "mtu": 1500}, **limits})
    rnd = random.Random(4)
    ms = 1_000_000
    steps = [(k * ms, k) for k in range(3000)]  # (ns, the arrival's k, or None: a dequeue)
    for k in range(2990):
        # packet k (the head, when nothing was dropped before it) sojourns the target or
        # 1-2 ns more, and now and then 1-2 ns less: long enough above it for CoDel to act
        below = rnd.random() < 0.004
        delta = rnd.choice((-2, -1)) if below else rnd.choice((0, 1, 2))
        steps.append((k * ms + 5 * ms + delta, None))
    steps.sort(key=lambda x: (x[0], x[1] is None))
    out = []
    for q in (builtin, plugin):
        got = []
        for ns, k in steps:
            t = ns * 1e-9
            if k is not None:
                got.append(q.enqueue(plugin_contract.ipv4_packet(k, 1500, 2 if k % 3 else 0,
                                                                   k % 4), t))
            else:
                got.append(q.dequeue(t))
        out.append((got, q.drops(), q.stats["marked"]))
    assert out[0] == out[1]
    assert out[0][1] and (out[0][2] > 0) == ecn  # CoDel acted at the boundary


def _codel_module(name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / "codel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("ecn", [True, False])
def test_python_codel_compares_in_seconds_only_what_nanoseconds_would_decide_alike(ecn):
    # The plugin tests times in seconds first and in nanoseconds within _NEAR_S of each
    # other. A copy with an _NEAR_S of a million seconds compares every time in nanoseconds;
    # both are offered packets whose dequeue falls within 2 ns of the copy's boundaries
    # (arrival + target, first_above_time, drop_next) and must answer alike throughout.
    fast, exact = _codel_module("codel_fast"), _codel_module("codel_exact")
    exact._NEAR_S = 1e6
    a, b = fast.CoDel(), exact.CoDel()
    rnd = random.Random(11)
    queue = SimpleNamespace(bytes=20_000, ecn=ecn)
    now, arrivals, answers = 0, [], set()
    for k in range(40_000):
        arrivals.append((now - 4_000_000 + rnd.randrange(2_000_000), rnd.random() < 0.5))
        arrival, ect = arrivals[rnd.randrange(len(arrivals))]
        arrivals = arrivals[-50:]
        near = rnd.choice((arrival + b.target, b.first_above_time, b.drop_next,
                           now + rnd.randrange(3_000_000)))
        now = max(now, near + rnd.randint(-2, 2))
        queue.bytes = rnd.choice((1000, 1500, 1501, 20_000, 20_000, 20_000))
        pkt = SimpleNamespace(arrival_s=arrival * 1e-9, ecn_capable=ect)
        got = a.dequeue(pkt, queue, now * 1e-9), b.dequeue(pkt, queue, now * 1e-9)
        assert got[0] == got[1], (k, now, arrival)
        answers.add(got[0])
        if rnd.random() < 0.001:
            a.on_empty(queue, now * 1e-9)
            b.on_empty(queue, now * 1e-9)
    assert (a.drop_next, a.count, a.first_above_time) == (b.drop_next, b.count, b.first_above_time)
    assert {"send", "drop"} <= answers and ("mark" in answers) == ecn


def test_without_on_empty_the_python_codel_loses_track_after_a_flush(tmp_path):
    # A packet that leaves at most one MTU behind already tells CoDel what an empty dequeue
    # would (first_above_time = 0, the dropping state ends), but a flush empties the queue
    # without a dequeue: only on_empty says so. Without it, the sequence above tells apart.
    src = (EXAMPLES / "codel.py").read_text()
    assert "    def on_empty(self, queue, now_s):" in src
    f = _plugin(tmp_path, src.replace("def on_empty(", "def _unused("), "codel_blind.py")
    builtin = mac.make_aqm("codel", limit_packets=400)
    blind = mac.make_aqm("python", {"file": f, "class": "CoDel", "limit_packets": 400})
    assert _drive_codel(builtin, seed=8)[2] != _drive_codel(blind, seed=8)[2]
