"""Nothing lost without a record, end to end (docs/testbed.md, "Reliability"): real testbed
runs over the abstract PHY in which the apd is killed and started again, the PHY hangs, or a
chaos proxy mistreats every message between the PHY and the daemons. The flows resume or
complete, the daemons survive, and every packet offered at the AP is delivered or dropped
with a cause (summary.json "conservation")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oppsched.run.runner import failed_dir, run_experiment
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


def _balanced_end_to_end(s: dict) -> dict:
    """summary.json balance.end_to_end: every packet the servers offered is delivered to a
    client or lost at a stage that recorded it, each stage recounted from its own record
    (the captures, the delay stage's counters, the AP TUN, packets.csv, the clients' stats),
    within the stated bound."""
    e = s["balance"]["end_to_end"]
    assert e["offered_total"] > 100, e
    assert e["stages"]["ap"]["source"] == "packets.csv", e
    assert all(w["source"] for w in e["stages"]["wired"].values()), e
    assert e["residual"] == e["offered_total"] - e["delivered_total"] - e["lost_certain"]
    assert abs(e["unexplained"]) <= e["bound"], e
    return e


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
    # End to end, the killed apd's held and unrecorded packets are the only ones whose fate
    # no record gives (the client may have got them): the rest balances within the bound.
    e = _balanced_end_to_end(s)
    k = e["stages"]["ap_killed"]
    assert k["source"] == "packets.killed.csv" and k["unrecorded"] is not None, k
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
        assert k["send_failed"] == 0, (name, k)
        # a message still delayed or held when the proxy stops is counted, not lost; so is
        # one sent after its receiver had gone (the PHY stops first: grants only)
        assert k["pending_at_exit"] <= 5, (name, k)
        assert k["forwarded"] + k["no_receiver"] + k["pending_at_exit"] == \
            k["received"] - k["dropped"] + k["duplicated"], (name, k)
        assert k["no_receiver"] == 0 or name == "grants", (name, k)
    # What the proxy passed on is what the daemons received, message for message.
    apd, client, phy = _stats(out, "apd"), _stats(out, "client.R1"), _stats(out, "phy")
    assert links["requests"]["received"] == phy["requests_sent"]
    assert apd["zmq"]["phy_requests"]["received"] == links["requests"]["forwarded"]
    assert links["rx_0"]["received"] == phy["users"]["R1"]["rx_sent"]
    assert client["rx"]["received"] == links["rx_0"]["forwarded"]
    # The PHY stops first: the grants forwarded to it after that are the only ones missing.
    g = links["grants"]
    assert 0 <= g["forwarded"] - phy["grants_received"] <= 10, (g, phy["grants_received"])
    assert g["no_receiver"] <= 10, g
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
    # End to end, with the chaos between the PHY and the daemons: what the servers sent is
    # what the clients got plus what the stages dropped, recounted stage by stage.
    _balanced_end_to_end(s)
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


def _ip4(src: str, dst: str, sport: int, dport: int, proto: int = 6) -> bytes:
    import ipaddress
    import struct
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, proto, 0,
                     ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed)
    return ip + struct.pack("!HHIIBBHHH", sport, dport, 0, 0, 0x50, 0x10, 0, 0, 0)


def _pcap_of(path: Path, packets: list[bytes], ethernet: bool) -> None:
    import struct
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1 if ethernet else 101))
        for k, pk in enumerate(packets):
            frame = (bytes(12) + b"\x08\x00" + pk) if ethernet else pk
            f.write(struct.pack("<IIII", k, 0, len(frame), len(frame)) + frame)


def _balance_run(tmp_path: Path, delivered: int) -> tuple[dict, dict, dict]:
    """A run folder's records for the end-to-end balance: S1 sends 100 packets of flow
    port 5201 to R1 (and 3 on another port, which are not the flows'); R1's capture holds
    `delivered` of them and 5 of its own upstream; the stages record their drops."""
    srv, cli = "10.1.0.1", "10.2.0.1"
    _pcap_of(tmp_path / "wired.S1.pcap",
             [_ip4(srv, cli, 40000, 5201)] * 100 + [_ip4(srv, cli, 22, 6000)] * 3
             + [_ip4(srv, cli, 0, 0, proto=1)] * 2, ethernet=True)
    _pcap_of(tmp_path / "client.R1.pcap",
             [_ip4(srv, cli, 40000, 5201)] * delivered + [_ip4(cli, srv, 5201, 40000)] * 5,
             ethernet=False)
    rows = ["t_ns,event,user,packet_id,bytes,reason",
            "500,enqueue,0,1,100,", "600,drop,0,1,100,overflow",  # before t0: not counted
            "1100,drop,-1,2,76,unknown_destination"]              # to no client: not counted
    for i in (10, 11, 12):
        rows += [f"1200,enqueue,0,{i},100,", f"1300,drop,0,{i},100,overflow"]
    rows += ["1200,enqueue,0,20,100,", "1250,dequeue,0,20,100,", "1400,drop,0,20,100,harq_timeout",
             "1200,enqueue,0,30,100,",  # still queued at the end
             "1200,enqueue,0,31,100,", "1250,dequeue,0,31,100,"]  # in flight at the end
    for i in range(40, 50):
        rows += [f"1200,enqueue,0,{i},100,", f"1250,dequeue,0,{i},100,", f"1300,deliver,0,{i},100,"]
    (tmp_path / "packets.csv").write_text("\n".join(rows) + "\n")
    ab = {"dropped_limit": 1, "dropped_memory": 0, "discarded_at_exit": 0}
    run = {"t0_mono_ns": 1000,
           "testbed": {"servers": [{"name": "S1", "addr4": srv, "addr6": "fd00:1:0::1"}],
                       "clients": [{"name": "R1", "addr4": cli, "addr6": "fd00:2:0::1"}],
                       "links": [{"name": "s0"}]},
           "flows": [{"id": "f1", "port": 5201}],
           "wired_stats_t0": {"s0": {"directions": {"ab": ab}}},
           "wired_stats": {"s0": {"directions": {"ab": {**ab, "dropped_limit": 3}}}},
           "ap_tun_t0": {"tx_dropped": 4}, "ap_tun_end": {"tx_dropped": 5}}
    stats = {"client.R1": {"reassembly": {"dropped_incomplete": 2, "dropped_timeout": 0},
                           "tun": {"tx_errors": 0, "tx_would_block": 0}}}
    return {"capture": {"pcaps": True}}, run, stats


def test_packets_of_a_tb_harq_delivered_after_the_client_gave_it_up_are_the_clients_losses(
        tmp_path):
    # 20 packets reach no client; the AP counts them delivered (HARQ acknowledged their
    # TBs), but the client had given the TBs up: its late count explains them, for certain
    # (dropped_late) or perhaps (dropped_late_perhaps, and dropped_timeout at the give-up).
    from oppsched.experiments.testbed.balance import end_to_end
    cfg, run, stats = _balance_run(tmp_path, delivered=70)
    ra = stats["client.R1"]["reassembly"]
    ra.update(tbs_late=9, dropped_late=15, dropped_late_perhaps=2, dropped_timeout=3)
    errors: list = []
    b = end_to_end(tmp_path, cfg, run, stats, errors)
    row = b["stages"]["clients"]["R1"]
    assert row["dropped"]["dropped_late"] == 15 and row["tbs_late"] == 9
    assert row["dropped_perhaps"]["dropped_late_perhaps"] == 2
    # certain 7 + 15, perhaps 2 + 2 + 3: 100 - 70 - 22 = 8 within [0, 7]: one unexplained.
    assert (b["lost_certain"], b["lost_perhaps"], b["residual"]) == (22, 7, 8)
    assert b["unexplained"] == 1 and errors == []


def test_the_end_to_end_balance_recounts_each_stage_from_its_own_record(tmp_path):
    from oppsched.experiments.testbed.balance import end_to_end
    cfg, run, stats = _balance_run(tmp_path, delivered=90)
    errors: list = []
    b = end_to_end(tmp_path, cfg, run, stats, errors)
    assert errors == []
    assert b["offered"] == {"S1": 100} and b["delivered"] == {"R1": 90}  # the flows' only
    st = b["stages"]
    assert st["wired"]["s0"]["dropped"] == {"dropped_limit": 2}  # since t0
    assert st["ap_tun"]["tx_dropped"] == 1
    ap = st["ap"]
    assert ap["source"] == "packets.csv"
    assert ap["dropped"] == {"overflow": 3, "harq_timeout": 1}
    assert (ap["queued"], ap["in_flight"]) == (1, 1)
    # The client's view of the AP's HARQ losses is listed, never counted twice.
    assert st["clients"]["R1"]["also_counted_at_ap"] == {"dropped_incomplete": 2}
    # certain: 2 wired + 1 TUN + 3 overflow + 1 queued; perhaps: a HARQ timeout and one in
    # flight (the client may have decoded their TBs). 100 - 90 - 7 = 3, one more than can
    # be explained: within the bound.
    assert (b["lost_certain"], b["lost_perhaps"], b["residual"]) == (7, 2, 3)
    assert b["unexplained"] == 1 and b["bound"] == 5
    # Twenty packets that vanish without a record anywhere fail the run, said plainly.
    cfg, run, stats = _balance_run(tmp_path, delivered=70)
    errors = []
    b = end_to_end(tmp_path, cfg, run, stats, errors)
    assert b["unexplained"] == 21
    assert errors == ["balance: 21 packet(s) unexplained end to end (packets the servers sent "
                      "reached no client and no stage recorded a drop): offered 100 "
                      "(wired.*.pcap), delivered 70 (client.*.pcap), lost for certain 7, "
                      "perhaps 2; the bound is 5 (summary.json balance.end_to_end)"]
    # More delivered than offered and explained is unexplained too (a stage counting twice).
    cfg, run, stats = _balance_run(tmp_path, delivered=99)
    errors = []
    assert end_to_end(tmp_path, cfg, run, stats, errors)["unexplained"] == -6
    assert errors and "more packets reached the clients" in errors[0]
    # With GSO on the veths the servers' captures show super-frames: no count, no error.
    errors = []
    b = end_to_end(tmp_path, {**cfg, "topology": {"offloads": True}}, run, stats, errors)
    assert "offloads" in b["incomplete"] and "unexplained" not in b and errors == []


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
