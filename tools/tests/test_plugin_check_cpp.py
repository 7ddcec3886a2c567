"""`oppsched plugin check LIB.so`: a C++ plugin library against its family's contract, through
the wrapper a run uses (tools/oppsched/commands/plugin_check.py, "C++ plugins"). The test plugins of
host/tests/plugins answer as their params.mode asks: a well-behaved library passes every
property, and each misbehaviour fails the property it breaks, naming the scenario and the
slot (schedulers) or the calls (AQMs)."""

import pytest

from oppsched.commands import plugin_check
from oppsched.config import ConfigError

from helpers import built_program, run_cli

SCHED = built_program("host/liboppsched_test_plugin_good.so", "OPPSCHED_TEST_PLUGIN_GOOD")
AQM = built_program("host/liboppsched_test_aqm_plugin.so", "OPPSCHED_TEST_AQM")
pytestmark = pytest.mark.skipif(SCHED is None or AQM is None,
                                reason="the build's test plugins are missing (make build)")


def _statuses(rep) -> dict:
    return {r.name: r.status for r in rep.results}


def test_a_well_behaved_cpp_scheduler_passes_every_property_from_the_command_line():
    r = run_cli("plugin", "check", SCHED)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(C++ scheduler): 5 scenarios" in r.stdout
    for prop in ("no-exceptions", "answers-in-range", "serves-backlogged", "work-conserving",
                 "deterministic"):
        assert f"PASS {prop}" in r.stdout, r.stdout
    assert "INFO decision-time: select() median" in r.stdout
    assert "plugin check: 1 of 1 class(es) pass" in r.stdout


@pytest.mark.parametrize("mode, prop, says", [
    ("error", "no-exceptions", "select() answered OPPSCHED_PLUGIN_ERROR"),
    ("out_of_range", "answers-in-range", "answered no candidate's index"),
    ("none", "work-conserving", "slots left empty while a candidate had a positive rate"),
])
def test_a_misbehaving_cpp_scheduler_fails_the_property_it_breaks_naming_the_slot(mode, prop,
                                                                                   says):
    (rep,) = plugin_check.check_file(SCHED, params={"mode": mode})
    st = _statuses(rep)
    assert st[prop] == "FAIL" and not rep.ok, st
    detail = rep.result(prop).detail
    assert says in detail and "scenario " in detail and ", slot " in detail, detail
    assert "users [id 0: backlog" in detail, detail
    # the other properties are judged on their own
    assert st["deterministic"] == "PASS", st


def test_an_idle_cpp_scheduler_is_info_with_allow_idle():
    (rep,) = plugin_check.check_file(SCHED, params={"mode": "none"}, allow_idle=True)
    assert rep.result("work-conserving").status == "INFO" and rep.ok


def test_a_cpp_library_the_loaders_refuse_fails_loads_with_both_reasons():
    (rep,) = plugin_check.check_file(SCHED, params={"refuse": 1})
    assert [r.name for r in rep.results] == ["loads"] and not rep.ok
    assert "as a scheduler: " in rep.results[0].detail and "refuse" in rep.results[0].detail


def test_a_class_given_for_a_cpp_library_is_refused_naming_the_option():
    with pytest.raises(ConfigError, match="--class: 'X': .* is a C\\+\\+ plugin library"):
        plugin_check.check_file(SCHED, cls="X")


def test_a_well_behaved_cpp_aqm_passes_and_its_family_is_found_from_the_library():
    (rep,) = plugin_check.check_file(AQM)
    assert "(C++ aqm)" in rep.title and rep.ok, [r.line() for r in rep.results]
    st = _statuses(rep)
    for prop in ("no-exceptions", "answers-allowed-verbs", "conservation", "within-limit",
                 "marks-only-ecn-capable", "deterministic"):
        assert st[prop] == "PASS", st


@pytest.mark.parametrize("mode, prop", [("error", "no-exceptions"),
                                        ("invalid", "answers-allowed-verbs")])
def test_a_misbehaving_cpp_aqm_fails_the_property_it_breaks(mode, prop):
    (rep,) = plugin_check.check_file(AQM, params={"mode": mode})
    res = rep.result(prop)
    assert res.status == "FAIL" and "scenario packets-ecn" in res.detail, res.line()
    # the wrapper's defaults keep the queue whole all the same
    assert rep.result("conservation").status == "PASS"
