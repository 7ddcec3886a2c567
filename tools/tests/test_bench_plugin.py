"""`oppsched bench plugin`'s reading of a run (the run itself is real time and root: make
bench): the figures come from the summary's scheduler and per-queue plugin counters, and the
verdict names each target missed."""

from oppsched.commands.bench_plugin import TARGETS, plugin_figures, verdict


def _summary(p50_ns=30_000, p99_ns=150_000, enq=(1_500, 3_000), deq=(2_000, 4_000), misses=0):
    q = {"offered": 100, "plugin_enqueue_calls": 100, "plugin_dequeue_calls": 90,
         "plugin_enqueue_p50_ns": enq[0], "plugin_enqueue_p99_ns": enq[1],
         "plugin_dequeue_p50_ns": deq[0], "plugin_dequeue_p99_ns": deq[1],
         "plugin_exceptions": 0}
    slow = {**q, "plugin_enqueue_p50_ns": 2 * enq[0]}
    return {"scheduler": {"kind": "python", "plugin_decisions": 1000,
                          "plugin_deadline_misses": misses, "plugin_exceptions": 0,
                          "plugin_decision_p50_ns": p50_ns, "plugin_decision_p99_ns": p99_ns,
                          "plugin_decision_max_ns": 2 * p99_ns},
            "aqm": {"u01": q, "u02": slow, "all": {"offered": 200}}}


def test_the_aqm_figure_is_the_slowest_queues_enqueue_plus_dequeue():
    f = plugin_figures(_summary())
    assert f["aqm_queues"] == 2 and f["aqm_calls"] == 380
    assert f["aqm_p50_us"] == (3_000 + 2_000) / 1e3  # u02's doubled enqueue median
    assert f["aqm_p99_us"] == (3_000 + 4_000) / 1e3
    assert (f["decision_p50_us"], f["decision_p99_us"], f["decision_max_us"]) == (30, 150, 300)


def test_a_run_within_the_targets_passes():
    assert verdict(plugin_figures(_summary()), late_slots=0) == []


def test_each_missed_target_is_named():
    f = plugin_figures(_summary(p50_ns=60_000, p99_ns=250_000, enq=(4_000, 9_000), misses=3))
    bad = verdict(f, late_slots=2)
    assert bad == [f"decision_p50_us 60.0 > {TARGETS['decision_p50_us']:g}",
                   f"decision_p99_us 250.0 > {TARGETS['decision_p99_us']:g}",
                   f"aqm_p50_us 10.0 > {TARGETS['aqm_p50_us']:g}",
                   "3 deadline misses", "2 late slots"]


def test_a_run_without_the_plugins_is_a_failure_not_a_pass():
    bad = verdict(plugin_figures({"scheduler": {"kind": "pf"}, "aqm": {}}), late_slots=0)
    assert "the scheduler plugin made no decision" in bad
    assert "no queue ran the AQM plugin" in bad


def test_the_bindings_call_bench_times_every_call_of_a_standing_queue():
    from oppsched import paths
    from oppsched.commands.bench_plugin import aqm_call_bench

    r = aqm_call_bench(str(paths.home() / "examples/plugins/codel.py"), "CoDel",
                       {"target_s": 0.005, "interval_s": 0.1, "mtu": 1500}, packets=3000)
    c, s = r["counters"], r["stats"]
    assert c["plugin_enqueue_calls"] == s["offered"] == 3000
    assert c["plugin_dequeue_calls"] == s["dequeued"] + s["dropped"]["aqm_drop"]
    assert s["marked"] > 0 and s["dropped"]["aqm_drop"] > 0  # CoDel acts on the queue
    assert (c["plugin_exceptions"], c["plugin_invalid_answers"]) == (0, 0)
