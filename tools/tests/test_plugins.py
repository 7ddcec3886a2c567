"""Python plugins (docs/extending.md): a scheduler written as a Python class in a file runs
through the same C++ wrapper (host/pyplugin) in macsim, the bindings and the apd. Pinned here:
the Python PF makes the built-in PF's decisions, a decision past its budget is replaced by PF's
and counted, an exception is counted, logged once with its traceback and replaced by PF's, an
answer that is not an index is counted, and a plugin that cannot be used is refused by
`oppsched check` (and the apd's --check) naming the file, the class and the reason."""

import json
import random
import subprocess
import textwrap
from types import SimpleNamespace

import pytest

from oppsched import mac
from oppsched.testbed import daemonconf
from oppsched.run.runner import run_experiment
import yaml

from helpers import BASE, REPO, built_program, cfg_of, error_of, netns_prefix, \
    require_real_testbed, run_layout, write_experiment, write_yaml

APD = built_program("host/daemon/oppsched-apd", "OPPSCHED_APD")
EXAMPLES = REPO / "examples" / "plugins"
PF = str(EXAMPLES / "pf.py")
EVDO = [0.0, 38.4e3, 76.8e3, 153.6e3, 307.2e3, 614.4e3, 921.6e3, 1228.8e3, 1843.2e3, 2457.6e3]


def _plugin(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _slots(n_users: int, n: int, seed: int):
    rnd = random.Random(seed)
    for _ in range(n):
        yield ([rnd.choice(EVDO) for _ in range(n_users)],
               [rnd.random() < 0.8 for _ in range(n_users)])


def _python(file: str, cls: str, **kw):
    return mac.make_scheduler("python", {"file": file, "class": cls, **kw})


def test_python_pf_makes_the_builtin_pf_decisions_slot_by_slot():
    builtin = mac.make_scheduler("pf", alpha=0.05)
    plugin = _python(PF, "ProportionalFair", alpha=0.05, slot_s=1.0)  # no deadline in play
    differ = [k for k, (r, b) in enumerate(_slots(6, 5000, seed=3))
              if builtin.step(r, b) != plugin.step(r, b)]
    assert differ == []
    c = plugin.counters
    assert c["plugin_decisions"] > 4000
    assert c["plugin_fallbacks"] == 0 and c["plugin_exceptions"] == 0
    assert plugin.averages == pytest.approx(builtin.averages, rel=0, abs=0)


SLEEPER = """
    import time
    class Sleepy:
        def __init__(self, sleep_s):
            self.sleep_s = sleep_s
        def select(self, slot, users):
            time.sleep(self.sleep_s)
            return len(users) - 1   # never what PF picks on the slots below
"""


def test_a_decision_past_its_budget_is_replaced_by_pf_and_counted(tmp_path):
    f = _plugin(tmp_path, "sleepy.py", SLEEPER)
    slot_s, fraction = 1e-3, 0.5                       # budget 0.5 ms
    plugin = _python(f, "Sleepy", params={"sleep_s": 10 * slot_s * fraction}, slot_s=slot_s,
                     budget_fraction=fraction)
    builtin = mac.make_scheduler("pf")
    # user 0 has by far the best rate: PF serves it, the plugin would serve user 2
    slots = [([2e6, 1e3, 1e3], [True, True, True])] * 5
    for r, b in slots:
        assert plugin.step(r, b) == builtin.step(r, b)
    c = plugin.counters
    assert c["plugin_decisions"] == 5
    assert c["plugin_deadline_misses"] == 5 and c["plugin_fallbacks"] == 5
    assert c["plugin_decision_ns"] >= 5 * 10 * 0.5e-3 * 1e9 * 0.9
    # each decision's time, as a histogram: median <= p99 <= max, all at least the 5-ms sleep
    assert 5e6 <= c["plugin_decision_p50_ns"] <= c["plugin_decision_p99_ns"] <= \
        c["plugin_decision_max_ns"]


def test_within_the_budget_the_plugins_answer_stands(tmp_path):
    f = _plugin(tmp_path, "sleepy.py", SLEEPER)
    plugin = _python(f, "Sleepy", params={"sleep_s": 0.0}, slot_s=1.0)
    assert plugin.step([2e6, 1e3, 1e3], [True, True, True]) == 2
    assert plugin.counters["plugin_deadline_misses"] == 0


def test_an_exception_is_counted_logged_once_with_its_traceback_and_pf_decides(tmp_path, capfd):
    f = _plugin(tmp_path, "raises.py", """
        class Raises:
            def select(self, slot, users):
                return helper(slot)
            def served(self, slot, user, bytes):
                pass
        def helper(slot):
            raise RuntimeError(f"no decision in slot {slot}")
    """)
    plugin = _python(f, "Raises", slot_s=1.0)
    builtin = mac.make_scheduler("pf")
    for r, b in _slots(3, 20, seed=1):
        assert plugin.step(r, b) == builtin.step(r, b)
    c = plugin.counters
    assert c["plugin_exceptions"] == c["plugin_fallbacks"] > 10
    assert c["plugin_decisions"] == 0
    err = capfd.readouterr().err
    assert err.count("Traceback (most recent call last)") == 1
    assert "in helper" in err and "RuntimeError: no decision in slot" in err
    assert "raises.py" in err


def test_an_answer_that_is_not_an_index_of_the_candidates_is_counted_and_pf_decides(tmp_path):
    f = _plugin(tmp_path, "wrong.py", """
        class Wrong:
            def __init__(self):
                self.answers = iter([7, -1, "0", True, 1.0, None, 0])
            def select(self, slot, users):
                return next(self.answers)
    """)
    plugin = _python(f, "Wrong", slot_s=1.0)
    got = [plugin.step([1e6, 2e6], [True, True]) for _ in range(7)]
    assert got[5] == -1       # None: the slot stays empty
    assert got[6] == 0        # index 0 of the candidates
    assert plugin.counters["plugin_invalid_decisions"] == 5
    assert plugin.counters["plugin_fallbacks"] == 5


def test_the_user_views_carry_the_queue_state_and_only_the_candidates(tmp_path):
    f = _plugin(tmp_path, "record.py", """
        import json
        class Record:
            def __init__(self, log):
                self.log = open(log, "w")
            def select(self, slot, users):
                print(json.dumps([[slot, u.id, u.backlog_bytes, u.rate_bps, u.hol_delay_s,
                                   u.avg_bps] for u in users]), file=self.log, flush=True)
                return 0
            def served(self, slot, user, bytes):
                print(json.dumps(["served", slot, user, bytes]), file=self.log, flush=True)
    """)
    log = tmp_path / "seen.jsonl"
    plugin = _python(f, "Record", params={"log": str(log)}, slot_s=0.01, num_users=3)
    plugin.set_queue_state(41, [100, 0, 3000], [0.25, 0.0, 0.5])
    assert plugin.step([8e5, 1e6, 4e5], [True, False, True]) == 0
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    # R_i / N before a user's first positive rate (sched.h)
    assert seen[0] == [[41, 0, 100, 8e5, 0.25, 8e5 / 3], [41, 2, 3000, 4e5, 0.5, 4e5 / 3]]
    assert seen[1] == ["served", 41, 0, int(8e5 * 0.01 / 8)]


@pytest.mark.parametrize("body, cls, params, reason", [
    (None, "X", {}, "no such file"),
    ("class X:\n    def select(self, slot, users)\n        return 0\n", "X", {},
     "syntax error at line 2"),
    ("class X:\n    def select(self, slot, users):\n        return 0\n", "Y", {},
     "the file defines no class Y"),
    ("class X:\n    def choose(self, users):\n        return 0\n", "X", {},
     "no method select(self, slot, users)"),
    ("class X:\n    def select(self, users):\n        return 0\n", "X", {},
     "select(self, users) cannot be called as select(self, slot, users)"),
    ("class X:\n    def select(self, slot, users):\n        return 0\n"
     "    def served(self, slot):\n        pass\n", "X", {},
     "served(self, slot) cannot be called as served(self, slot, user, bytes)"),
    ("class X:\n    def __init__(self, beta=1.0):\n        pass\n"
     "    def select(self, slot, users):\n        return 0\n", "X", {"gamma": 1},
     "X(**{'gamma': 1}) raised TypeError"),
    ("import not_a_module_anywhere\n", "X", {}, "importing the file raised ModuleNotFoundError"),
])
def test_a_plugin_that_cannot_be_used_is_refused_naming_file_class_and_reason(
        tmp_path, body, cls, params, reason):
    f = str(tmp_path / "missing.py") if body is None else _plugin(tmp_path, "p.py", body)
    over = ["scheduler.kind=python", f"scheduler.file={f}", f"scheduler.class={cls}"]
    over += [f"scheduler.params.{k}={v}" for k, v in params.items()]
    msg = error_of(BASE, over)
    assert msg.startswith(f"scheduler: {f}: class {cls}: "), msg
    assert reason in msg, msg
    if APD is not None:
        good = cfg_of(BASE, ["scheduler.kind=python", f"scheduler.file={PF}",
                             "scheduler.class=ProportionalFair"])
        conf = daemonconf.apd_config(good, run_layout(tmp_path, good))
        conf["scheduler"].update({"file": f, "class": cls, "params": params})
        path = write_yaml(tmp_path / "apd.yaml", conf)
        r = subprocess.run([str(APD), "--config", str(path), "--check"], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 2, r.stderr
        assert f"{f}: class {cls}: " in r.stderr and reason in r.stderr, r.stderr


def test_the_plugin_fields_belong_to_kind_python_only():
    msg = error_of(BASE, ["scheduler.kind=pf", f"scheduler.file={PF}"])
    assert msg == f"scheduler.file: {PF!r} is only for scheduler.kind python"
    assert error_of(BASE, ["scheduler.kind=python", "scheduler.class=X"]) == \
        "scheduler.file: required with scheduler.kind python"
    assert "budget_fraction" in error_of(BASE, ["scheduler.kind=python", f"scheduler.file={PF}",
                                                "scheduler.class=ProportionalFair",
                                                "scheduler.budget_fraction=1.5"])


def test_the_apd_accepts_a_plugin_and_gets_its_params_as_the_experiment_gives_them(tmp_path):
    cfg = cfg_of(BASE, ["scheduler.kind=python", f"scheduler.file={EXAMPLES / 'maxweight.py'}",
                        "scheduler.class=MaxWeight", "scheduler.params.beta=2.5",
                        "scheduler.budget_fraction=0.25"])
    conf = daemonconf.apd_config(cfg, run_layout(tmp_path, cfg))
    assert conf["scheduler"] == {"kind": "python", "file": str(EXAMPLES / "maxweight.py"),
                                 "class": "MaxWeight", "params": {"beta": 2.5}, "alpha": 0.03,
                                 "budget_fraction": 0.25, "harq_first": True}
    if APD is None:
        pytest.skip("oppsched-apd is not built")
    path = write_yaml(tmp_path / "apd.yaml", conf)
    r = subprocess.run([str(APD), "--config", str(path), "--check"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "python plugin" in r.stderr and "MaxWeight" in r.stderr


MACSIM = """
experiment: plugin-macsim
kind: macsim
duration_s: 5
seed: 11
phy: {slot_s: 1.667e-3, rate_table: evdo}
scheduler: {kind: pf, alpha: 0.03}
users:
  - {name: weak, mean_snr_db: 0.0, doppler_hz: 10}
  - {name: mid, mean_snr_db: 5.0, doppler_hz: 10}
  - {name: strong, mean_snr_db: 10.0, doppler_hz: 10}
variants:
  - {name: builtin, set: {scheduler.kind: pf}}
  - {name: python, set: {scheduler.kind: python, scheduler.file: %s,
                         scheduler.class: ProportionalFair}}
"""


def test_macsim_runs_the_python_pf_with_the_builtin_pfs_schedule(tmp_path):
    import pandas as pd
    exp = write_experiment(tmp_path, MACSIM % PF)
    runs = {label: s for label, s, _ in run_experiment(exp, tmp_path / "out")}
    a = pd.read_csv(tmp_path / "out" / "builtin" / "slots.csv.gz")
    b = pd.read_csv(tmp_path / "out" / "python" / "slots.csv.gz")
    assert len(a) == round(5 / 1.667e-3)
    assert (a["user"] == b["user"]).all()
    s = runs["python"]["scheduler"]
    assert s["plugin_decisions"] == len(a) and s["plugin_exceptions"] == 0
    assert "plugin_deadline_misses" in s
    assert runs["builtin"]["scheduler"] == {}
    assert (tmp_path / "out" / "python" / "plugin.pf.py").read_text() == \
        (EXAMPLES / "pf.py").read_text()
    saved = json.loads((tmp_path / "out" / "python" / "summary.json").read_text())
    assert saved["scheduler"]["plugin_decisions"] == len(a)


# ---- in real time, inside the apd --------------------------------------------------------

REALTIME = """
experiment: plugin-realtime
kind: testbed
duration_s: 5
phy: {mode: abstract}
devices:
  - {name: R1, channel: {mean_snr_db: 15.0}}
  - {name: R2, channel: {mean_snr_db: 10.0}}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1}
  - {id: f2, server: S1, device: R2}
scheduler: {kind: python, file: %s, class: MaxWeight, params: {beta: 1.0}}
"""


def test_a_python_scheduler_decides_the_slots_of_a_real_time_run_inside_the_apd(tmp_path):
    require_real_testbed()
    exp = write_experiment(tmp_path, REALTIME % (EXAMPLES / "maxweight.py"))
    with netns_prefix():
        runs = run_experiment(exp, tmp_path / "out", ["capture.pcaps=false"])
    out, s = tmp_path / "out", runs[0][1]
    for f in s["flows"]:
        assert f["error"] is None and f["goodput_bps"] > 50e3, f
    p = s["scheduler"]
    assert p["kind"] == "python"
    # every new TB of the run was a slot the plugin decided or PF decided in its place
    assert p["plugin_decisions"] > 100
    assert p["plugin_exceptions"] == 0 and p["plugin_invalid_decisions"] == 0
    apd = yaml.safe_load((out / "apd.yaml").read_text())
    # the apd ran the copy in the run folder (seen by the run's processes through its view)
    assert apd["scheduler"]["file"].endswith("/plugin.maxweight.py")
    assert (out / "plugin.maxweight.py").read_text() == (EXAMPLES / "maxweight.py").read_text()
    stats = json.loads((out / "apd.stats.json").read_text())
    assert stats["core"]["scheduler"]["plugin_decisions"] == p["plugin_decisions"]


# ---- AQM plugins, through the bindings ----------------------------------------------------


def _ipv4_udp(size: int, ecn: int = 0, sport: int = 1000) -> bytes:
    import struct
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, ecn, size, 0, 0, 64, 17, 0,
                      bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    udp = struct.pack("!HHHH", sport, 9, size - 20, 0)
    return hdr + udp + bytes(size - 28)


def _packet_sequence(seed: int, n: int):
    rnd = random.Random(seed)
    t = 0.0
    for _ in range(n):
        t += rnd.expovariate(800.0)
        yield t, _ipv4_udp(rnd.choice([60, 576, 1500])), rnd.random() < 0.45


def _drive(q, seed=5, n=3000):
    """Arrivals and departures of a seeded sequence: the ids accepted, sent, and the drops."""
    accepted, sent = [], []
    for k, (t, pkt, leave) in enumerate(_packet_sequence(seed, n)):
        if q.enqueue(pkt, t):
            accepted.append(k)
        if leave:
            out = q.dequeue(t)
            if out is not None:
                sent.append(out)
    return accepted, sent, q.drops()


@pytest.mark.parametrize("limits", [{"limit_packets": 20}, {"limit_packets": 0,
                                                            "limit_bytes": 12000}])
def test_a_python_droptail_drops_the_packets_the_builtin_drops(limits):
    builtin = mac.make_aqm("droptail", **limits)
    plugin = mac.make_aqm("python", file=str(EXAMPLES / "droptail.py"), **{"class": "DropTail"},
                          **limits)
    a_acc, a_sent, a_drops = _drive(builtin)
    b_acc, b_sent, b_drops = _drive(plugin)
    assert a_acc == b_acc and a_sent == b_sent
    assert len(a_drops) > 100
    # the same packets, counted under the plugin's cause
    assert [n for _, n in a_drops] == [n for _, n in b_drops]
    assert {r for r, _ in a_drops} == {"overflow"} and {r for r, _ in b_drops} == {"early_drop"}
    s = plugin.stats
    assert s["offered"] == s["enqueued"] + s["dropped"]["early_drop"]
    assert s["enqueued"] == s["dequeued"] + plugin.packets
    # every call that answered is timed: one enqueue per arrival, one dequeue per departure
    c = plugin.plugin_counters
    assert c["plugin_enqueue_calls"] == s["offered"]
    assert c["plugin_dequeue_calls"] == s["dequeued"]
    for m in ("enqueue", "dequeue"):
        assert 0 < c[f"plugin_{m}_p50_ns"] <= c[f"plugin_{m}_p99_ns"] <= c[f"plugin_{m}_max_ns"]


def test_a_python_aqm_that_raises_is_counted_and_the_packet_accepted_and_sent(tmp_path, capfd):
    f = _plugin(tmp_path, "bad_aqm.py", """
        class Bad:
            def enqueue(self, pkt, queue, now_s):
                raise ValueError("no verdict")
            def dequeue(self, pkt, queue, now_s):
                return "maybe"
    """)
    q = mac.make_aqm("python", {"file": f, "class": "Bad", "limit_packets": 1000})
    acc, sent, drops = _drive(q, n=200)
    assert len(acc) == 200 and drops == []
    assert q.plugin_counters["plugin_exceptions"] == 200
    assert q.plugin_counters["plugin_invalid_answers"] == len(sent) > 0
    err = capfd.readouterr().err
    assert err.count("Traceback (most recent call last)") == 1
    assert "ValueError: no verdict" in err


def test_a_python_aqm_marks_ecn_capable_packets_drops_at_dequeue_and_sees_the_packet(tmp_path):
    f = _plugin(tmp_path, "mark.py", """
        class Mark:
            def __init__(self):
                self.seen = []
            def enqueue(self, pkt, queue, now_s):
                self.seen.append((pkt.size_bytes, pkt.ecn_capable, pkt.arrival_s, queue.packets,
                                  queue.limit_packets))
                return "mark"
            def dequeue(self, pkt, queue, now_s):
                return "drop" if pkt.size_bytes == 100 else "send"
    """)
    q = mac.make_aqm("python", {"file": f, "class": "Mark", "limit_packets": 10})
    assert q.enqueue(_ipv4_udp(200, ecn=2), 1.0)       # ECT(0): marked CE, queued
    assert not q.enqueue(_ipv4_udp(300, ecn=0), 1.5)   # not ECN-capable: "mark" drops it
    assert q.enqueue(_ipv4_udp(100, ecn=1), 2.0)
    out = q.dequeue(3.0)
    assert out is not None and out[1] & 3 == 3         # CE
    assert q.dequeue(3.0) is None                      # the 100-byte one dropped at dequeue
    assert sorted(q.drops()) == [("aqm_drop", 100), ("early_drop", 300)]
    s = q.stats
    assert s["marked"] == 2 and s["dropped"]["early_drop"] == 1 and s["dropped"]["aqm_drop"] == 1


def test_mark_at_dequeue_sends_ecn_capable_packets_with_ce_and_drops_the_others(tmp_path):
    f = _plugin(tmp_path, "dqmark.py", """
        class DequeueMark:
            def __init__(self):
                self.ecn = []
            def enqueue(self, pkt, queue, now_s):
                self.ecn.append(queue.ecn)
                return "accept"
            def dequeue(self, pkt, queue, now_s):
                return "mark"
    """)
    for ecn in (True, False):
        q = mac.make_aqm("python", {"file": f, "class": "DequeueMark", "limit_packets": 10,
                                    "ecn": ecn})
        assert q.enqueue(_ipv4_udp(200, ecn=2), 1.0)     # ECT(0)
        assert q.enqueue(_ipv4_udp(300, ecn=0), 1.0)     # not ECN-capable
        assert q.enqueue(_ipv4_udp(400, ecn=1), 1.0)     # ECT(1)
        out = [q.dequeue(2.0), q.dequeue(2.0)]
        if ecn:
            # the 300-byte packet cannot be marked: dropped at dequeue, the next one offered
            assert [len(p) for p in out] == [200, 400] and all(p[1] & 3 == 3 for p in out)
            assert q.drops() == [("aqm_drop", 300)] and q.stats["marked"] == 2
        else:
            assert out == [None, None]
            assert q.drops() == [("aqm_drop", 200), ("aqm_drop", 300), ("aqm_drop", 400)]
            assert q.stats["marked"] == 0
        assert q.plugin_counters["plugin_invalid_answers"] == 0


def test_on_empty_is_called_whenever_dequeue_finds_the_queue_empty(tmp_path):
    f = _plugin(tmp_path, "empty.py", """
        class Empty:
            def __init__(self, log):
                self.log = log
            def enqueue(self, pkt, queue, now_s):
                return "accept"
            def dequeue(self, pkt, queue, now_s):
                self.log.append(("dequeue", pkt.size_bytes, queue.packets, now_s))
                return "drop" if pkt.size_bytes == 100 else "send"
            def on_empty(self, queue, now_s):
                self.log.append(("on_empty", queue.bytes, queue.packets, now_s))
    """)
    log = []
    q = mac.make_aqm("python", {"file": f, "class": "Empty", "params": {"log": log}})
    assert q.dequeue(1.0) is None                         # empty at once
    q.enqueue(_ipv4_udp(200), 1.5)
    assert len(q.dequeue(2.0)) == 200                     # sent, the queue left empty: no call
    q.enqueue(_ipv4_udp(300), 2.5)
    q.enqueue(_ipv4_udp(100), 2.5)
    assert len(q.dequeue(3.0)) == 300
    assert q.dequeue(4.0) is None                         # the last packet dropped: empty
    assert log == [("on_empty", 0, 0, 1.0), ("dequeue", 200, 0, 2.0), ("dequeue", 300, 1, 3.0),
                   ("dequeue", 100, 0, 4.0), ("on_empty", 0, 0, 4.0)]


def test_a_packet_view_the_plugin_keeps_keeps_its_own_packets_values(tmp_path):
    # The wrapper reuses one packet view per queue while the plugin keeps none; a view still
    # referenced when its call returns (stored, or held by a traceback) stays as it was.
    f = _plugin(tmp_path, "keep.py", """
        class Keep:
            def __init__(self, kept, read):
                self.kept, self.read = kept, read
            def enqueue(self, pkt, queue, now_s):
                self.kept.append(pkt)
                self.read.append((pkt.size_bytes, pkt.flow, pkt.ecn_capable, pkt.arrival_s))
                if pkt.size_bytes == 300:
                    raise ValueError("keeps the view in its traceback")
                return "accept"
            def dequeue(self, pkt, queue, now_s):
                self.read.append((pkt.size_bytes, pkt.flow, pkt.ecn_capable, pkt.arrival_s))
                self.kept.append(pkt)
                return "send"
    """)
    plugin = SimpleNamespace(kept=[], read=[])
    q = mac.make_aqm("python", {"file": f, "class": "Keep", "limit_packets": 100,
                                "params": {"kept": plugin.kept, "read": plugin.read}})
    sizes = [200, 300, 400, 500]
    for k, size in enumerate(sizes):
        q.enqueue(_ipv4_udp(size, ecn=k % 3, sport=1000 + k), 1.0 + k)
    while q.dequeue(9.0) is not None:
        pass
    kept = [(v.size_bytes, v.flow, v.ecn_capable, v.arrival_s) for v in plugin.kept]
    assert kept == plugin.read
    assert [r[0] for r in kept] == sizes + sizes
    assert len({r[1] for r in kept[:4]}) == 4          # four 5-tuples, four flows
    assert [r[2] for r in kept[:4]] == [False, True, True, False]
    assert [r[3] for r in kept[:4]] == [1.0, 2.0, 3.0, 4.0]
    assert len({id(v) for v in plugin.kept}) == 8


def test_a_copied_view_keeps_the_values_of_its_call(tmp_path):
    f = _plugin(tmp_path, "copies.py", """
        import copy
        class Copies:
            def __init__(self, out):
                self.out = out
            def enqueue(self, pkt, queue, now_s):
                self.out.append((copy.copy(pkt), copy.deepcopy(queue), pkt.flow))
                return "accept"
            def dequeue(self, pkt, queue, now_s):
                return "send"
    """)
    out = []
    q = mac.make_aqm("python", {"file": f, "class": "Copies", "params": {"out": out}})
    for k, size in enumerate([200, 300, 400]):
        q.enqueue(_ipv4_udp(size, ecn=2, sport=3000 + k), 0.25 * k)
    assert [(p.size_bytes, p.ecn_capable, p.arrival_s, p.flow) for p, _, _ in out] == [
        (200, True, 0.0, out[0][2]), (300, True, 0.25, out[1][2]), (400, True, 0.5, out[2][2])]
    assert [(v.bytes, v.packets) for _, v, _ in out] == [(0, 0), (200, 1), (500, 2)]


def test_a_packet_view_not_kept_reads_the_packet_of_each_call(tmp_path):
    f = _plugin(tmp_path, "read.py", """
        class Read:
            def __init__(self, read):
                self.read = read
            def enqueue(self, pkt, queue, now_s):
                self.read.append((pkt.size_bytes, pkt.flow, pkt.ecn_capable, pkt.arrival_s,
                                  queue.bytes, queue.packets, repr(pkt)))
                return "accept"
            def dequeue(self, pkt, queue, now_s):
                return "send"
    """)
    read = []
    q = mac.make_aqm("python", {"file": f, "class": "Read", "params": {"read": read}})
    for k, size in enumerate([200, 300, 400]):
        q.enqueue(_ipv4_udp(size, ecn=2 * (k % 2), sport=2000 + k), 0.5 * k)
    assert [r[:1] + r[2:6] for r in read] == [(200, False, 0.0, 0, 0), (300, True, 0.5, 200, 1),
                                              (400, False, 1.0, 500, 2)]
    assert len({r[1] for r in read}) == 3
    assert read[1][6] == (f"PacketView(size_bytes=300, flow={read[1][1]}, ecn_capable=True, "
                          "arrival_s=0.5)")


def test_views_are_read_only_and_an_assignment_counts_as_an_exception(tmp_path, capfd):
    f = _plugin(tmp_path, "assign.py", """
        class Assign:
            def enqueue(self, pkt, queue, now_s):
                pkt.size_bytes = 1
                return "drop"
            def dequeue(self, pkt, queue, now_s):
                queue.bytes = 0
                return "drop"
    """)
    q = mac.make_aqm("python", {"file": f, "class": "Assign"})
    assert q.enqueue(_ipv4_udp(200), 1.0)               # raised: accepted, as drop-tail would
    assert len(q.dequeue(2.0)) == 200                   # raised: sent
    assert q.plugin_counters["plugin_exceptions"] == 2
    assert "AttributeError" in capfd.readouterr().err


def test_an_answer_built_at_run_time_counts_like_the_same_word(tmp_path):
    # Answers are matched by identity with the interned words first, then by value.
    f = _plugin(tmp_path, "built.py", """
        class Built:
            def enqueue(self, pkt, queue, now_s):
                return "".join(["dr", "op"]) if pkt.size_bytes == 300 else "accept"
            def dequeue(self, pkt, queue, now_s):
                return "".join(["se", "nd"])
    """)
    q = mac.make_aqm("python", {"file": f, "class": "Built"})
    assert q.enqueue(_ipv4_udp(200), 1.0)
    assert not q.enqueue(_ipv4_udp(300), 1.0)
    assert len(q.dequeue(2.0)) == 200
    assert q.drops() == [("early_drop", 300)]
    assert q.plugin_counters["plugin_invalid_answers"] == 0


def test_an_on_empty_that_raises_is_counted_and_logged_once(tmp_path, capfd):
    f = _plugin(tmp_path, "empty_raises.py", """
        class EmptyRaises:
            def enqueue(self, pkt, queue, now_s):
                return "accept"
            def dequeue(self, pkt, queue, now_s):
                return "send"
            def on_empty(self, queue, now_s):
                raise RuntimeError("idle")
    """)
    q = mac.make_aqm("python", {"file": f, "class": "EmptyRaises"})
    for t in (1.0, 2.0, 3.0):
        assert q.dequeue(t) is None
    assert q.plugin_counters["plugin_exceptions"] == 3
    err = capfd.readouterr().err
    assert err.count("Traceback (most recent call last)") == 1
    assert "on_empty() raised" in err and "RuntimeError: idle" in err


def test_an_aqm_plugin_without_dequeue_is_refused_naming_file_class_and_reason(tmp_path):
    f = _plugin(tmp_path, "half.py", """
        class Half:
            def enqueue(self, pkt, queue, now_s):
                return "accept"
    """)
    with pytest.raises(ValueError) as e:
        mac.make_aqm("python", {"file": f, "class": "Half"})
    assert str(e.value) == (f"{f}: class Half: no method dequeue(self, pkt, queue, now_s) "
                            "(every aqm plugin has it)")


# ---- AQM plugins in an experiment and in the apd --------------------------------------------

DROPTAIL = str(EXAMPLES / "droptail.py")


def test_an_aqm_plugin_is_checked_by_oppsched_check_and_the_apd(tmp_path):
    over = ["aqm.kind=python", f"aqm.file={DROPTAIL}", "aqm.class=DropTail"]
    cfg = cfg_of(BASE, over)
    conf = daemonconf.apd_config(cfg, run_layout(tmp_path, cfg))
    assert conf["aqm"]["kind"] == "python" and conf["aqm"]["file"] == DROPTAIL
    assert conf["aqm"]["class"] == "DropTail"
    assert error_of(BASE, ["aqm.kind=python", f"aqm.file={DROPTAIL}", "aqm.class=Nope"]) == \
        f"aqm: {DROPTAIL}: class Nope: the file defines no class Nope"
    assert error_of(BASE, ["aqm.kind=red", f"aqm.file={DROPTAIL}"]) == \
        f"aqm.file: {DROPTAIL!r} is only for aqm.kind python"
    assert "per_user queues only" in error_of(BASE, over + ["queue.mode=shared"])
    if APD is None:
        pytest.skip("oppsched-apd is not built")
    path = write_yaml(tmp_path / "apd.yaml", conf)
    r = subprocess.run([str(APD), "--config", str(path), "--check"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "aqm: python plugin" in r.stderr
    conf["aqm"]["class"] = "Nope"
    path = write_yaml(tmp_path / "apd.yaml", conf)
    r = subprocess.run([str(APD), "--config", str(path), "--check"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and f"aqm: {DROPTAIL}: class Nope: the file defines no class" \
        in r.stderr, r.stderr


REALTIME_AQM = """
experiment: plugin-aqm-realtime
kind: testbed
duration_s: 5
phy: {mode: abstract}
devices:
  - {name: R1, channel: {mean_snr_db: 15.0}}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1}
queue: {limit_bytes: 30000}
aqm: {kind: python, file: %s, class: DropTail}
"""


def test_a_python_aqm_drops_in_a_real_time_run_and_every_packet_is_accounted_for(tmp_path):
    require_real_testbed()
    exp = write_experiment(tmp_path, REALTIME_AQM % DROPTAIL)
    with netns_prefix():
        runs = run_experiment(exp, tmp_path / "out")
    out, s = tmp_path / "out", runs[0][1]
    (f,) = s["flows"]
    assert f["error"] is None and f["goodput_bps"] > 50e3, f
    stats = json.loads((out / "apd.stats.json").read_text())
    q = stats["core"]["aqm"]["R1"]
    assert q["plugin_exceptions"] == 0 and q["plugin_invalid_answers"] == 0
    assert stats["core"]["conservation"]["unaccounted"] == 0
    b = s["balance"]["end_to_end"]
    assert b is not None and "incomplete" not in b, b
    # a 30 kB buffer under one TCP flow fills up: the plugin drops, under its cause only
    assert b["stages"]["ap"]["dropped"].get("early_drop") == q["dropped_total"], b
    assert not b["stages"]["ap"]["dropped"].get("overflow"), b
    assert q["dropped_total"] > 0
    assert q["offered"] == q["enqueued"] + q["dropped_total"]
    assert abs(b["unexplained"]) <= b["bound"], b
    assert (out / "plugin.droptail.py").exists()
