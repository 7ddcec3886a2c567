"""Nothing lost without a record, end to end (docs/testbed.md, "Reliability"): real testbed
runs over the abstract PHY in which the apd is killed and started again, the PHY hangs, or a
chaos proxy mistreats every message between the PHY and the daemons. The flows resume or
complete, the daemons survive, and every packet offered at the AP is delivered or dropped
with a cause (summary.json "conservation")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oppsched.runner import failed_dir, run_experiment
from helpers import netns_prefix, require_real_testbed, run_cli, small_testbed, write_experiment

RESTART = small_testbed("restart", 14, extra="""
    queue: {limit_bytes: 100000}
    traces: {packets: true}
    faults: {apd_restart_at_s: 5.0}
""")


def _run(tmp: Path, text: str):
    exp = write_experiment(tmp, text)
    with netns_prefix():
        runs = run_experiment(exp, tmp / "out")
    return tmp / "out", runs[0][1]


def _stats(out: Path, name: str) -> dict:
    return json.loads((out / f"{name}.stats.json").read_text())


def _balanced(b: dict) -> None:
    assert b["unaccounted"] == 0, b
    assert b["offered"] == b["delivered"] + b["dropped_total"] + b["queued"] + b["in_flight"]


def test_a_killed_and_restarted_apd_is_a_new_session_the_flow_resumes_and_losses_are_counted(
        tmp_path):
    require_real_testbed()
    out, s = _run(tmp_path, RESTART)
    run = json.loads((out / "run.json").read_text())
    (fault,) = run["faults"]
    assert fault["fault"] == "apd_restart" and fault["killed_pid"] != fault["new_pid"]
    procs = {p["name"]: p for p in json.loads((out / "processes.json").read_text())}
    assert procs["apd.killed"]["killed_by_fault"] and procs["apd"]["exit_code"] == 0
    # The client saw the new session once and resynchronised: the new apd's PDUs were
    # delivered, not discarded as duplicates of the old session's sequence numbers.
    c = s["conservation"]["clients"]["R1"]
    assert c["session_restarts"] == 1, c
    assert c["far_ahead"] == 0
    new = s["conservation"]["apd"]
    old = s["conservation"]["apd_killed"]
    # The flow resumed: the new apd delivered well over a second's worth of the flow's
    # packets (> 200 kb/s of 1500-byte packets is > 16 a second).
    assert new["delivered"] > 100, new
    assert c["duplicates"] < 0.2 * new["delivered"], c
    (f,) = s["flows"]
    assert f["error"] is None and f["bytes_received"] > 0
    # Every packet either apd took is accounted for: delivered, dropped with a cause, or
    # held (queued or in flight) when the apd stopped or was killed (as of its last stats).
    _balanced(new)
    _balanced(old)
    assert old["offered"] > 100
    # What the killed apd read after its last stats write (<= stats_period_s of traffic) is
    # counted from the TUN's own counter: nothing it took goes uncounted.
    assert old["tun_packets_read"] >= old["offered"]
    assert 0 <= old["read_after_last_stats"] < old["tun_packets_read"]
    t = s["conservation"]["trace"]
    assert t["multiple_fates"] == 0 and t["drops_without_cause"] == 0
    assert t["pending"] == new["queued"] + new["in_flight"]
    assert t["offered"] == new["offered"]
    assert (out / "packets.killed.csv").exists() and (out / "slots.killed.csv").exists()
    assert not s["errors"]


HANG = small_testbed("hang", 8, extra="""
    watchdog: {slots: 200}
    faults: {phy_freeze_at_s: 2.0}
""")


def test_a_hung_phy_fires_the_watchdog_and_fails_the_run_saying_so(tmp_path):
    require_real_testbed()
    exp = write_experiment(tmp_path, HANG)
    with netns_prefix():
        r = run_cli("run", exp, "--out", tmp_path / "out", timeout=300)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "watchdog" in r.stderr
    failed = failed_dir(tmp_path / "out")
    summary = json.loads((failed / "summary.json").read_text())
    assert any("watchdog" in err for err in summary["errors"]), summary["errors"]
    assert not (tmp_path / "out").exists()  # nothing replaced by a failed run
    apd = json.loads((failed / "apd.stats.json").read_text())
    assert apd["watchdog"]["fired"] == 1
    assert apd["core"]["slots"]["requests"] > 100  # it ran before the PHY hung


CHAOS = small_testbed("chaos", 20, flows=(
    "bytes: 300000, repeat: {idle_s: 0.5, count: 6}",), extra="""
    queue: {limit_bytes: 100000}
    traces: {packets: true}
    faults:
      chaos: {enabled: true, seed: 3, drop: 0.03, duplicate: 0.03, reorder: 0.03, delay: 0.03,
              delay_ms: 2.0}
""")


def test_under_chaos_between_phy_and_daemons_they_survive_counters_add_up_and_tcp_completes(
        tmp_path):
    require_real_testbed()
    out, s = _run(tmp_path, CHAOS)
    procs = {p["name"]: p for p in json.loads((out / "processes.json").read_text())}
    for n in ("apd", "client.R1", "phy", "chaos"):
        assert procs[n]["exit_code"] == 0, (n, procs[n])  # survived, stopped cleanly
    (f,) = s["flows"]
    # Every download completed: six new TCP connections, each reading 300000 bytes to EOF.
    t = f["transfers"]
    assert t["completed"] == 6 and t["incomplete"] == 0 and t["failed_connects"] == 0, t
    assert f["bytes_received"] == 6 * 300000
    links = json.loads((out / "chaos.stats.json").read_text())["links"]
    for name in ("requests", "grants", "rx_0"):
        k = links[name]
        assert k["received"] > 500, (name, k)
        for what in ("dropped", "duplicated", "reordered", "delayed"):
            assert k[what] > 0, (name, what, k)
        assert k["send_failed"] == 0
        assert k["forwarded"] == k["received"] - k["dropped"] + k["duplicated"], (name, k)
    # What the proxy passed on is what the daemons received, message for message.
    apd, client, phy = _stats(out, "apd"), _stats(out, "client.R1"), _stats(out, "phy")
    assert links["requests"]["received"] == phy["requests_sent"]
    assert apd["zmq"]["phy_requests"]["received"] == links["requests"]["forwarded"]
    assert links["rx_0"]["received"] == phy["users"]["R1"]["rx_sent"]
    assert client["rx"]["received"] == links["rx_0"]["forwarded"]
    # The PHY stops first: the grants forwarded to it after that are the only ones missing.
    assert 0 <= links["grants"]["forwarded"] - phy["grants_received"] <= 10
    # The lost requests are the apd's sequence gaps; duplicates and late ones are out of order.
    seq = apd["seq"]["phy_requests"]
    assert seq["lost"] >= links["requests"]["dropped"] - links["requests"]["reordered"]
    assert seq["out_of_order"] >= links["requests"]["duplicated"]
    # Conservation at the AP, with the causes the faults provoke.
    b = s["conservation"]["apd"]
    _balanced(b)
    t = s["conservation"]["trace"]
    assert t["multiple_fates"] == 0 and t["drops_without_cause"] == 0
    assert t["pending"] == b["queued"] + b["in_flight"]
    assert not s["errors"]


# ----------------------------------------------------------------------------------------
# The pieces on their own (no root, no run)

def _apd_stats(**over) -> dict:
    c = {"offered": 10, "delivered": 6, "queued": 1, "in_flight": 1, "unaccounted": 0.0,
         "dropped": {"harq_max_tx": 1, "harq_timeout": 0, "harq_flush": 0, "rejected": 0}}
    c.update(over)
    return {"core": {"conservation": c, "queue_drops": {"overflow": 1},
                     "downlink": {"packets": 12}}}


def test_the_summary_balance_names_each_cause_and_an_unaccounted_packet_is_an_error(tmp_path):
    from oppsched.experiments.testbed.reliability import conservation_summary
    (tmp_path / "packets.csv").write_text(
        "t_ns,event,user,packet_id,bytes,reason\n"
        "1,enqueue,0,1,100,\n2,dequeue,0,1,100,\n3,deliver,0,1,100,\n"
        "4,enqueue,0,2,100,\n5,drop,0,2,100,overflow\n"
        "6,enqueue,0,3,100,\n")
    errors: list = []
    out = conservation_summary(tmp_path, {"apd": _apd_stats()}, errors)
    assert errors == []
    b = out["apd"]
    assert b["dropped"]["overflow"] == 1 and b["dropped"]["harq_max_tx"] == 1
    assert b["dropped_total"] == 2 and b["unaccounted"] == 0
    assert out["trace"] == {"offered": 3, "delivered": 1, "dropped": {"overflow": 1},
                            "drops_without_cause": 0, "multiple_fates": 0, "pending": 1}
    # A packet that left without a record, or a drop with no cause, fails the run.
    (tmp_path / "packets.csv").write_text(
        "t_ns,event,user,packet_id,bytes,reason\n"
        "1,enqueue,0,1,100,\n3,deliver,0,1,100,\n4,drop,0,1,100,\n")
    errors = []
    conservation_summary(tmp_path, {"apd": _apd_stats(unaccounted=3.0)}, errors)
    assert any("3 packet(s) offered at the AP left without a record" in e for e in errors), errors
    assert any("1 packet(s) more than one fate and 1 drop(s) no cause" in e for e in errors), errors


def test_the_runner_watchdog_fires_only_after_the_requests_advanced_and_then_stalled(tmp_path):
    from oppsched.experiments.testbed.programs import TestbedError
    from oppsched.experiments.testbed.reliability import RunnerWatchdog
    stats = tmp_path / "apd.stats.json"

    def requests(n):
        stats.write_text(json.dumps({"core": {"slots": {"requests": n}}}))

    wd = RunnerWatchdog(stats, slot_s=0.003, slots=1000, period_s=2.0)  # 3 + 4 + 1 = 8 s
    requests(0)
    wd.check(0.0)
    wd.check(100.0)  # no advance yet: a slow start-up is not the watchdog's business
    requests(50)
    wd.check(101.0)
    wd.check(108.5)  # armed, stalled 7.5 s: not yet
    with pytest.raises(TestbedError, match="stayed at 50 for 9.0 s"):
        wd.check(110.0)
    wd.reset()
    wd.check(111.0)  # after a planned restart it waits for an advance again
    wd.check(200.0)
    assert RunnerWatchdog(stats, 0.003, 0, 2.0).limit_s is None  # slots 0: off
