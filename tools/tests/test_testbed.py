"""`kind: testbed`: the experiment schema and its checks, the daemons' configuration files,
the pcap/iperf3 readers, the runner's process handling with stand-in daemons, and the end
to end runs with the real oppsched-apd, oppsched-client and abstract PHY.

Tiers:
* no root needed: schema, config generation, pcap and iperf3 parsing;
* root (network namespaces): the runner with stand-in daemons (tools/tests/fake_daemons.py),
  which tests start-up, readiness, captures, flows, stop order, analysis and teardown
  without depending on the real daemons;
* root + built programs: real end-to-end runs. Without the programs these skip locally
  with the reason, and FAIL when the environment variable CI is set, so CI never skips them
  silently. Build folder: $OPPSCHED_BUILD, else <repo>/build.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from oppsched import paths
from oppsched.analysis import pcap
from oppsched.testbed import daemonconf, flows, nsbase, stale
from oppsched.experiments import kind_module, testbed
from oppsched.experiments.testbed import daemonsummary, flowsummary, readers
from oppsched.run.runner import (analyze_dir, failed_dir, load_experiment, run_experiment,
                             staging_dir, text_summary, variant_config)
from oppsched.testbed.links import find_delay_binary
from helpers import (BASE, PREFIX, REPO, assert_run_gone, cfg_of, delay_or_netem_available,
                     error_of, needs_root, netns_prefix, require, run_cli, run_layout,
                     require_real_testbed, write_experiment)

FAKE = Path(__file__).resolve().parent / "fake_daemons.py"


# ----------------------------------------------------------------------------------------
# Schema and checks


def test_the_testbed_kind_offers_what_the_runner_calls():
    mod = kind_module("testbed")
    assert mod is testbed and isinstance(mod.SCHEMA, dict) and "devices" in mod.SCHEMA
    for name in ("check", "run", "analyze", "plot", "compare_plots"):
        assert callable(getattr(mod, name)), name
    assert set(testbed.__all__) == {"SCHEMA", "check", "run", "analyze", "plot", "compare_plots",
                                    "TestbedError", "find_programs", "programs_available",
                                    "resolved_ecn"}


def test_defaults_follow_andrew_hanly_clamp():
    c = cfg_of()
    assert c["phy"]["mode"] == "abstract" and c["phy"]["profile"] == "3ms"
    assert daemonconf.slot_s(c) == 3e-3
    assert c["devices"][0]["channel"]["doppler_hz"] == 60.0
    assert abs(c["devices"][0]["channel"]["mean_snr_db"] - 6.0206) < 1e-3
    assert c["scheduler"] == {"kind": "pf", "alpha": 0.03, "lambda": 1.0, "weights": [],
                              "harq_first": True, "file": None, "class": None,
                              "library": None, "params": {}, "budget_fraction": 0.5}
    assert c["tcp"]["congestion_control"] == "reno" and c["tcp"]["sack"] is False
    assert c["clamp"]["tau_bytes"] == 500 and c["clamp"]["b"] == 1.0
    assert c["uplink_delay_ms"] == 1.0 and c["capture"]["snaplen"] == 128
    assert daemonconf.max_transmissions(c) == 15  # 60 Hz: fast fading, n = 15 (§V-D)
    slow = cfg_of(BASE.replace("{name: R1}", "{name: R1, channel: {doppler_hz: 0.6}}"))
    assert daemonconf.max_transmissions(slow) == 5


@pytest.mark.parametrize("override, field", [
    ("phy.mode=radio", "phy.mode"),
    ("phy.slot_s=-1", "phy.slot_s"),
    ("phy.lead_slots=0", "phy.lead_slots"),
    ("phy.mcs_table=foo", "phy.mcs_table"),
    ("devices[0].channel.doppler_hz=-3", "devices[0].channel.doppler_hz"),
    ("flows[0].parallel=0", "flows[0].parallel"),
    ("flows[0].family=ipv5", "flows[0].family"),
    ("queue.mode=fifo", "queue.mode"),
    ("aqm.kind=blue", "aqm.kind"),
    ("clamp.b=2.0", "clamp.b"),
    ("tcp.ecn=3", "tcp.ecn"),
    ("capture.snaplen=40", "capture.snaplen"),
    ("uplink_delay_ms=.nan", "uplink_delay_ms"),
    ("harq.max_transmissions=0", "harq.max_transmissions"),
    ("topology.apd_rt_priority=100", "topology.apd_rt_priority"),
])
def test_bad_values_name_the_field(override, field):
    msg = error_of(overrides=[override])
    assert field in msg, msg


def test_unknown_keys_name_the_field():
    msg = error_of(BASE + "bogus: 1\n")
    assert msg.startswith("bogus: unknown key"), msg
    msg = error_of(BASE.replace("{id: f1,", "{id: f1, rate: 3,"))
    assert msg.startswith("flows[0].rate: unknown key"), msg
    msg = error_of(overrides=["clamp.alpha=3"])
    assert "unknown key 'alpha'" in msg


@pytest.mark.parametrize("text_or_override, expect", [
    (["flows[0].server=S9"], "flows[0].server: 'S9' is not a servers[].name"),
    (["flows[0].device=R9"], "flows[0].device: 'R9' is not a devices[].name"),
    (["flows[0].start_s=4"], "flows[0].start_s: 4.0 is not before duration_s"),
    (["flows[0].start_s=2", "flows[0].stop_s=1"], "flows[0].stop_s: 1.0 is not after start_s"),
    (["flows[0].stop_s=9"], "flows[0].stop_s: 9.0 is after duration_s"),
    (["flows[0].stop_s=3", "flows[0].bytes=1000"], "flows[0].stop_s: 3.0 with bytes 1000"),
    (["flows[0].family=ipv6", "topology.ipv6=false"], "flows[0].family: 'ipv6' but topology.ipv6"),
    (["topology.ipv4=false", "topology.ipv6=false"], "topology.ipv4/ipv6"),
    (["queue.limit_bytes=0"], "queue.limit_bytes/limit_packets: both 0"),
    (["scheduler.kind=wpf", "scheduler.weights=[1, 2]"], "scheduler.weights: [1, 2] has 2"),
    (["scheduler.weights=[1]"], "scheduler.weights: [1] is only for scheduler.kind wpf"),
    (["aqm.params={max_p: 0.1}"], "aqm.params: {'max_p': 0.1}: drop-tail has no parameters"),
    (["phy.mode=sample", "phy.slot_s=0.002"], "phy.slot_s: 0.002 cannot be set with phy.mode"),
    (["phy.mode=sample", "phy.mcs_table=evdo"], "phy.mcs_table: 'evdo' cannot be set with phy"),
    (["phy.mode=uhd"], "phy.uhd.ap.args: required with phy.mode uhd"),
    (["harq.feedback_timeout_slots=4"], "harq.feedback_timeout_slots: 4 is not more than"),
    (["queue.mode=shared", "devices[0].queue.limit_bytes=1000"],
     "devices[0].queue.limit_bytes: 1000 with queue.mode shared"),
    (["tcp.extra={kernel.foo: 1}"], "tcp.extra.kernel.foo: not a net.* sysctl"),
    (["link_adaptation.mode=paper", "phy.mode=sample"],
     "link_adaptation.mode: 'paper' needs phy.mode abstract"),
    (["link_adaptation.mode=paper", "phy.error_model=threshold"],
     "phy.error_model: 'threshold' with link_adaptation.mode paper"),
    (["link_adaptation.mode=paper", "phy.chase_combining=true"],
     "phy.chase_combining: true with link_adaptation.mode paper"),
    (["link_adaptation.mode=olla"], "link_adaptation.mode: 'olla'"),
    (["tcp.spm_marking.enabled=true", "aqm.priority_dscp=5"],
     "aqm.priority_dscp: 5 differs from tcp.spm_marking.dscp (3)"),
    (["aqm.priority_dscp=64"], "aqm.priority_dscp: 64"),
    (["tcp.spm_marking.dscp=64"], "tcp.spm_marking.dscp: 64"),
    (["flows[0].direction=sideways"], "flows[0].direction: 'sideways' is not one of down, up"),
    (["flows[0].direction=up", "flows[0].bytes=4000", "flows[0].repeat.idle_s=0"],
     "flows[0].direction: 'up' with repeat"),
])
def test_impossible_combinations_are_rejected_naming_the_field(text_or_override, expect):
    msg = error_of(overrides=text_or_override)
    assert msg.startswith(expect), msg


def test_repeated_names_are_rejected():
    two = BASE.replace("  - {id: f1, server: S1, device: R1}",
                       "  - {id: f1, server: S1, device: R1}\n  - {id: f1, server: S1, device: R1}")
    assert error_of(two).startswith("flows[1].id: 'f1' repeats flows[0].id")
    assert error_of(BASE.replace("  - {name: R1}", "  - {name: R1}\n  - {name: R1}")) \
        .startswith("devices[1].name: 'R1' repeats")


def test_aqm_parameters_are_checked_by_the_mac_library():
    msg = error_of(overrides=["aqm.kind=red", "aqm.params={max_p: 1.5}"])
    assert msg.startswith("aqm.params:") and "max_p" in msg and "1.5" in msg, msg
    cfg_of(overrides=["aqm.kind=red", "aqm.params={max_p: 0.2, min_th: 4, max_th: 12}"])


def test_a_bad_variant_is_named():
    msg = error_of(BASE + "variants:\n  - {name: bad, set: {\"flows[0].server\": S7}}\n")
    assert msg.startswith("variants[bad]: flows[0].server"), msg


def test_ecn_is_negotiated_only_where_the_aqm_marks():
    assert testbed.resolved_ecn(cfg_of()) == 0
    assert testbed.resolved_ecn(cfg_of(overrides=["aqm.kind=codel"])) == 1
    assert testbed.resolved_ecn(cfg_of(overrides=["aqm.kind=codel", "aqm.ecn=false"])) == 0
    assert testbed.resolved_ecn(cfg_of(overrides=["tcp.ecn=2"])) == 2


@pytest.mark.parametrize("name", ["fading.yaml", "fading-abstract.yaml"])
def test_the_clamp_fading_experiments_are_andrew_hanly_clamp_fig_3(name):
    _, schema, res = load_experiment(REPO / "experiments/clamp" / name)
    assert res["kind"] == "testbed"
    assert [s["rtt_ms"] for s in res["servers"]] == [30, 130, 10, 180]  # Table II d_1..d_4
    assert all(s["rate_bps"] == 100e6 for s in res["servers"])          # Table I
    assert [d["name"] for d in res["devices"]] == ["R1", "R2", "R34"]
    assert all(d["channel"]["doppler_hz"] == 60.0 for d in res["devices"])  # §V-B fast
    # flows 3 and 4 share one device, hence one AP queue and one channel
    assert [(f["server"], f["device"]) for f in res["flows"]] == [
        ("S1", "R1"), ("S2", "R2"), ("S3", "R34"), ("S4", "R34")]
    assert res["queue"]["mode"] == "per_user" and res["scheduler"]["kind"] == "pf"
    assert daemonconf.slot_s(res) == 3e-3 and daemonconf.max_transmissions(res) == 15
    assert res["duration_s"] * len(res["variants"]) <= 180  # a few minutes in total
    raw = yaml.safe_load((REPO / "experiments/clamp" / name).read_text())
    v = {x["name"]: variant_config(raw, schema, x) for x in res["variants"]}
    assert v["clamp-off"]["clamp"]["enabled"] is False
    assert v["clamp-on"]["clamp"]["enabled"] is True
    assert v["clamp-on"]["queue"]["limit_bytes"] == 6000000      # §V-E: 6 MB for CLAMP
    assert v["clamp-on"]["clamp"]["tau_bytes"] == 500 and v["clamp-on"]["clamp"]["b"] == 1.0
    snr = {d["channel"]["mean_snr_db"] for d in res["devices"]}
    if name == "fading-abstract.yaml":  # the paper's own link
        assert res["phy"]["mode"] == "abstract" and snr == {10 * math.log10(4)}  # SNR_avg 4
        # §V-B: eq. 18 at the slot's start with the margin m for 1e-3 after n attempts
        assert res["link_adaptation"]["mode"] == "paper"
        assert res["link_adaptation"]["paper"]["target_loss"] == 1e-3
        assert not daemonconf.chase_combining(res) and not res["scheduler"]["harq_first"]
        assert res["clamp"]["mu_c"] == "all_backlogged"  # §IV-A's mu_c
        assert v["clamp-off"]["queue"]["limit_bytes"] == 60000   # §V-H TCP buffer
        assert v["clamp-on"]["clamp"]["a_bytes"] == 27000
    else:
        # The default (make run): the sample PHY, its mean SNR where the paper's sits on
        # eq. 18 (the top rate): the measured threshold of the top MCS of its table.
        assert res["phy"]["mode"] == "sample"
        top = pd.read_csv(daemonconf.mcs_table(res), comment="#")["min_snr_db"].iloc[-1]
        assert len(snr) == 1 and abs(snr.pop() - top) < 1.0
        # buffers scaled with the rate: drop-tail about twice CLAMP's q* = (k tau + a)/b
        q_star = (500 + v["clamp-on"]["clamp"]["a_bytes"]) / 1.0
        assert 1.8 * q_star <= v["clamp-off"]["queue"]["limit_bytes"] <= 2.4 * q_star


def test_the_printed_summary_gives_each_users_loss_after_harq_and_its_margin():
    # Andrew & Hanly, CLAMP, Table I: the paper link's target is 1e-3 after retransmissions;
    # the summary line shows what each user got and where its margin m ended.
    s = {"experiment": "x", "duration_s": 120.0, "slots": {"total": 40000, "empty": 0, "late": 0},
         "flows": [], "jain_index_users": 1.0,
         "users": [{"name": "R1", "slot_fraction": 0.33, "mac_throughput_bps": 1.6e6,
                    "tb_sent": 7000, "tb_failed_final": 3, "residual_loss": 3 / 7000,
                    "link_margin": -8.93},
                   {"name": "R2", "slot_fraction": 0.33, "mac_throughput_bps": 1.6e6,
                    "tb_sent": 7000, "tb_failed_final": 0, "residual_loss": 0.0}]}
    lines = text_summary([("v", s, None)]).splitlines()
    r1 = next(x for x in lines if "user       R1" in x)
    r2 = next(x for x in lines if "user       R2" in x)
    assert r1.endswith("lost after HARQ 3/7000 (4.3e-04), margin m -8.93"), r1
    assert r2.endswith("lost after HARQ 0/7000 (0.0e+00)"), r2  # no margin off the paper link


# ----------------------------------------------------------------------------------------
# Configuration files of the daemons


@pytest.mark.parametrize("overrides, expect", [
    ([], None),
    (["tcp.spm_marking.enabled=true"], 3),
    (["tcp.spm_marking.enabled=true", "tcp.spm_marking.dscp=46"], 46),
    (["tcp.spm_marking.enabled=true", "aqm.priority_dscp=3"], 3),
    (["aqm.priority_dscp=7"], 7),
])
def test_the_apd_reads_the_priority_mark_the_senders_write(tmp_path, overrides, expect):
    cfg = cfg_of(BASE, ["aqm.kind=spmaf", *overrides])
    files = daemonconf.write_all(cfg, run_layout(tmp_path, cfg))
    assert yaml.safe_load(files["apd"].read_text())["aqm"]["priority_dscp"] == expect


def test_spm_marking_needs_the_marker_and_names_it_when_missing(tmp_path):
    cfg = cfg_of(BASE + f"build_dir: {tmp_path}\n", ["tcp.spm_marking.enabled=true"])
    with pytest.raises(testbed.TestbedError, match="oppsched-spm-mark"):
        testbed.find_programs(cfg)


def test_config_files_are_written_for_every_process(tmp_path):
    cfg = cfg_of(BASE.replace("  - {name: R1}", "  - {name: R1}\n  - {name: R2}")
                 + "extra: {apd: {scheduler: {alpha: 0.1}}, phy: {x: 1}}\n",
                 ["clamp.enabled=true", "devices[1].queue.limit_bytes=9000"])
    lay = run_layout(tmp_path, cfg)
    files = daemonconf.write_all(cfg, lay)
    assert set(files) == {"apd", "client.R1", "client.R2", "phy"}
    apd = yaml.safe_load(files["apd"].read_text())
    assert apd["tun"] == "radio0"
    assert apd["endpoints"] == {n: f"ipc://{tmp_path}/zmq/{n}" for n in daemonconf.ZMQ_NAMES}
    assert [u["addresses"] for u in apd["users"]] == [["10.2.0.1", "fd00:2:0::1"],
                                                      ["10.2.1.1", "fd00:2:1::1"]]
    assert apd["queue"]["limit_bytes"] == 60000
    assert [u.get("queue_limit_bytes") for u in apd["users"]] == [None, 9000]
    assert apd["scheduler"] == {"kind": "pf", "alpha": 0.1, "harq_first": True}  # extra.apd last
    assert apd["clamp"]["enabled"] is True and apd["harq"]["max_transmissions"] == 15
    c2 = yaml.safe_load(files["client.R2"].read_text())
    assert c2["user"] == 1 and c2["endpoints"]["rx"].endswith("/zmq/rx_1")
    assert c2["traces"]["windows"] == str(tmp_path / "windows.R2.csv")
    # the client waits for a PDU as long as HARQ may still deliver it: 15 transmissions of
    # (4 + 3) slots of 3 ms, plus the 1 ms uplink
    assert c2["reassembly"] == {"timeout_ms": 316.0, "window": 210}
    phy = yaml.safe_load(files["phy"].read_text())
    assert phy["slot_s"] == 3e-3 and phy["x"] == 1
    seeds = [u["channel"]["seed"] for u in phy["users"]]
    assert len(set(seeds)) == 2  # independent fading per user


def test_reassembly_holds_gaps_for_nacked_tbs_only_when_retransmissions_wait_for_the_scheduler():
    # harq_first true: every transmission within one HARQ round trip, the timeout covers
    # them all; false: a retransmission waits for the scheduler, the client holds the gap
    # while a TB it NACKed may still come (HELD_TIMEOUT_MS) and knows when the AP drops it.
    first = daemonconf.reassembly(cfg_of(BASE))
    assert "held_timeout_ms" not in first and "harq_max_transmissions" not in first
    waits = daemonconf.reassembly(cfg_of(BASE, ["scheduler.harq_first=false",
                                                "harq.max_transmissions=4"]))
    assert waits["held_timeout_ms"] == daemonconf.HELD_TIMEOUT_MS == 2000.0
    assert waits["harq_max_transmissions"] == 4
    off = daemonconf.reassembly(cfg_of(BASE, ["scheduler.harq_first=false",
                                              "reassembly.held_timeout_ms=0"]))
    assert "held_timeout_ms" not in off
    on = daemonconf.reassembly(cfg_of(BASE, ["reassembly.held_timeout_ms=500"]))
    assert on["held_timeout_ms"] == 500.0
    assert "reassembly.held_timeout_ms" in error_of(BASE, ["reassembly.held_timeout_ms=-1"])


def test_paper_link_mode_has_the_phy_report_the_snr_of_the_slot_the_apd_grants(tmp_path):
    # slot_request(n) is answered at the start of slot n - 4 (lead_slots); the report of
    # slot n - 6 left the PHY at the start of slot n - 5 and took the 1 ms uplink, so it is
    # there; one slot more for jitter: the report of slot n - 7 must give slot n's SNR.
    cfg = cfg_of(overrides=["link_adaptation.mode=paper", "phy.lead_slots=4"])
    files = daemonconf.write_all(cfg, run_layout(tmp_path, cfg))
    apd = yaml.safe_load(files["apd"].read_text())
    phy = yaml.safe_load(files["phy"].read_text())
    la = apd["link_adaptation"]
    assert la["mode"] == "paper" and la["paper"]["cqi_ahead_slots"] == 7
    assert phy["cqi_ahead_slots"] == 7 and phy["chase_combining"] is False
    assert phy["error_model"] == "end_of_slot"
    assert la["shannon"] == {"w0_hz": 4.3e6, "cmax_bps": 10e6, "levels": 32}  # eq. 18's W0, C_max
    assert la["paper"]["target_loss"] == 1e-3
    # mode table: the slot's own SNR, chase combining on
    cfg = cfg_of()
    (tmp_path / "t").mkdir()
    files = daemonconf.write_all(cfg, run_layout(tmp_path / "t", cfg))
    phy = yaml.safe_load(files["phy"].read_text())
    assert phy["cqi_ahead_slots"] == 0 and phy["chase_combining"] is True
    assert yaml.safe_load(files["apd"].read_text())["link_adaptation"]["mode"] == "table"


@pytest.mark.parametrize("profile, slot", [("evdo", 1.667e-3), ("3ms", 3e-3)])
def test_sample_mode_gives_apd_and_loopback_the_measured_table_and_profile_slot(
        tmp_path, profile, slot):
    cfg = cfg_of(overrides=["phy.mode=sample", f"phy.profile={profile}"])
    files = daemonconf.write_all(cfg, run_layout(tmp_path, cfg))
    apd = yaml.safe_load(files["apd"].read_text())
    phy = yaml.safe_load(files["phy"].read_text())
    table = str(daemonconf.measured_mcs_table(profile))
    assert table.endswith(f"experiments/linkcurves/awgn-{profile}-1msps/mcs_table.csv")
    assert Path(table).is_file()
    assert apd["link_adaptation"]["table"] == table and phy["mcs_table"] == table
    assert apd["slot_s"] == slot and phy["slot_s"] == slot
    assert phy["sample"] == {"profile": profile, "fec": "ldpc", "sample_rate": 1e6}
    assert phy["endpoints"]["phy_requests"] == apd["endpoints"]["phy_requests"]


def test_the_abstract_clamp_fading_experiment_runs_on_the_sample_phy_with_the_two_modes_set():
    # fading-abstract.yaml states the profile's own slot (3 ms): allowed with the blocks; any
    # other slot is not (test_impossible_combinations_are_rejected_naming_the_field). Its
    # link mode (paper) needs the abstract PHY; the blocks need the MCS table.
    _, _, res = load_experiment(REPO / "experiments/clamp/fading-abstract.yaml",
                                ["phy.mode=sample", "link_adaptation.mode=table"])
    assert res["phy"]["mode"] == "sample" and daemonconf.slot_s(res) == 3e-3
    assert daemonconf.mcs_table(res).endswith("awgn-3ms-1msps/mcs_table.csv")


def test_long_run_folders_put_the_ipc_sockets_in_a_short_scratch_dir(tmp_path):
    cfg = cfg_of()
    deep = tmp_path / ("x" * 90)
    lay = run_layout(tmp_path, cfg, deep)
    assert lay.zmq_dir == (tmp_path / "scratch" / "zmq").resolve()
    assert all(len(e) - len("ipc://") < 108 for e in lay.endpoints.values())


# ----------------------------------------------------------------------------------------
# pcap and iperf3 readers


def _write_pcap(path: Path, frames: list[tuple[float, bytes]], linktype: int = 101) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for t, b in frames:
            f.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(b), len(b)))
            f.write(b)


def test_pcap_reader_counts_unique_bytes_and_scales_windows(tmp_path):
    scapy = pytest.importorskip("scapy.all")
    IP, IPv6, TCP = scapy.IP, scapy.IPv6, scapy.TCP
    srv, cli = "10.1.0.1", "10.2.0.1"
    pk = [
        IP(src=srv, dst=cli) / TCP(sport=4000, dport=5201, flags="S", seq=100,
                                    options=[("MSS", 1448), ("WScale", 7)]),
        IP(src=cli, dst=srv) / TCP(sport=5201, dport=4000, flags="SA", seq=900, ack=101,
                                    window=65535, options=[("MSS", 1448), ("WScale", 9)]),
        IP(src=srv, dst=cli, tos=0x02) / TCP(sport=4000, dport=5201, flags="A", seq=101, ack=901) / (b"x" * 1000),
        IP(src=srv, dst=cli, tos=0x03) / TCP(sport=4000, dport=5201, flags="A", seq=1101, ack=901) / (b"x" * 1000),
        IP(src=srv, dst=cli, tos=0xb8) / TCP(sport=4000, dport=5201, flags="A", seq=1101, ack=901) / (b"x" * 1000),  # retx
        IP(src=cli, dst=srv) / TCP(sport=5201, dport=4000, flags="A", seq=901, ack=2101, window=10),
    ]
    p = tmp_path / "a.pcap"
    _write_pcap(p, [(1000.0 + i * 0.01, bytes(x)) for i, x in enumerate(pk)])
    df = pcap.read_tcp(p)
    assert len(df) == 6 and list(df["payload"]) == [0, 0, 1000, 1000, 1000, 0]
    # the ECN codepoint, not the DSCP beside it: ECT(0), CE, then a not-ECT retransmission
    assert list(df["ecn"]) == [0, 0, 2, 3, 0, 0]
    assert pcap.bytes_to_port(df, cli, 5201) == 2000  # the retransmission counts once
    assert pcap.acked_bytes(df, cli, 5201) == 2000  # the receiver's cumulative ACK
    w = pcap.advertised_windows(df, cli, 5201)
    assert list(w["window_bytes"]) == [65535, 10 << 9]  # SYN-ACK unscaled, then 2^9
    (c,) = pcap.connections(df)
    assert c["resp_wscale"] == 9 and c["init_wscale"] == 7 and c["bytes_init_to_resp"] == 2000
    # IPv6, truncated capture: payload length still comes from the IP header
    six = IPv6(src="fd00:1::1", dst="fd00:2::1", tc=0xb9) / TCP(sport=1, dport=5202, seq=5, flags="A") / (b"y" * 1400)
    q = tmp_path / "b.pcap"
    _write_pcap(q, [(1.0, bytes(six)[:128])])
    d6 = pcap.read_tcp(q)
    assert d6["payload"].tolist() == [1400] and d6["dst"].tolist() == ["fd00:2::1"]
    assert d6["ecn"].tolist() == [1]  # ECT(1), from the traffic class
    assert pcap.bytes_to_port(d6, "fd00:2:0::1", 5202) == 1400  # addresses normalised
    assert len(pcap.advertised_windows(d6, "fd00:1:0::1", 1)) == 1


def test_iperf3_results_are_read(tmp_path):
    d = {"start": {}, "intervals": [
        {"sum": {"start": 0, "end": 0.5, "seconds": 0.5, "bytes": 1000, "bits_per_second": 16000},
         "streams": [{"snd_cwnd": 14480, "rtt": 31000}]},
        {"sum": {"start": 0.5, "end": 1.0, "seconds": 0.5, "bytes": 3000, "bits_per_second": 48000},
         "streams": [{"snd_cwnd": 28960, "rtt": 33000}]}],
         "end": {"sum_received": {"bytes": 4000, "seconds": 1.0, "bits_per_second": 32000},
                 "sum_sent": {"bytes": 4200, "retransmits": 2},
                 "streams": [{"sender": {"bytes": 3000, "mean_rtt": 30000, "max_rtt": 40000}},
                             {"sender": {"bytes": 1000, "mean_rtt": 50000, "max_rtt": 60000}}]}}
    p = tmp_path / "s.json"
    p.write_text("warning: something\n" + json.dumps(d))
    r = flows.sender_result(p)
    assert r["goodput_bps"] == 32000 and r["bytes_received"] == 4000 and r["retransmits"] == 2
    assert r["rtt_ms_mean"] == pytest.approx((30 * 3000 + 50 * 1000) / 4000)
    assert r["rtt_ms_max"] == 60 and r["streams"] == 2
    iv = flows.intervals(p, offset_s=10)
    assert iv["t_s"].tolist() == [10.5, 11.0] and iv["snd_cwnd"].tolist() == [14480, 28960]
    assert flows.sender_result(tmp_path / "missing.json")["error"]


def test_an_iperf3_file_cut_mid_interval_and_written_again_is_read_from_its_whole_copy(
        tmp_path):
    # iperf3 3.12 interrupted while writing an interval (-J --logfile, 0.1-s intervals):
    # the document cut there, then the whole document again, as found in a 16-flow run.
    whole = {"start": {"connected": [{"socket": 6}]}, "intervals": [
        {"sum": {"start": 0, "end": 0.1, "bytes": 100}, "streams": [{"snd_cwnd": 5520}]}],
        "end": {"sum_received": {"bytes": 76360, "seconds": 85.4, "bits_per_second": 7154.1},
                "sum_sent": {"bytes": 80000, "retransmits": 4}},
        "error": "interrupt - the client has terminated"}
    text = json.dumps(whole, indent="\t")
    cut = text[:text.index('"snd_cwnd"')]  # in the middle of the interval's stream
    p = tmp_path / "s.json"
    p.write_text(cut + "\t\t\t" + text + "\n")
    with pytest.raises(ValueError):
        json.loads(p.read_text())
    r = flows.sender_result(p)
    assert r["bytes_received"] == 76360 and r["retransmits"] == 4, r
    assert r["goodput_source"] == "sender" and r["error"].startswith("interrupt")
    assert flows.intervals(p)["snd_cwnd"].tolist() == [5520]
    (tmp_path / "t.json").write_text(cut)  # the cut document alone: nothing whole to read
    assert flows.load_json(tmp_path / "t.json") is None


def test_a_sender_stopped_at_the_deadline_takes_goodput_from_the_receiver(tmp_path):
    # iperf3 stopped before the receiver's totals reached the sender (its control messages
    # queued behind a long radio queue): the sender has 0 bytes, the receiver the truth.
    s = tmp_path / "s.json"
    s.write_text(json.dumps({"error": "interrupt - the client has terminated", "end": {
        "sum_received": {"bytes": 0, "seconds": 26.1, "bits_per_second": 0},
        "sum_sent": {"bytes": 190000, "retransmits": 3}}}))
    r = tmp_path / "r.json"
    r.write_text(json.dumps({"end": {"sum_received": {"bytes": 180808, "seconds": 26.2}}}))
    assert flows.sender_result(s)["goodput_bps"] == 0  # without the receiver: what it says
    got = flows.sender_result(s, r)
    assert got["bytes_received"] == 180808 and got["goodput_source"] == "receiver"
    assert got["goodput_bps"] == pytest.approx(8 * 180808 / 26.2)
    assert got["retransmits"] == 3 and got["error"].startswith("interrupt")
    assert flows.sender_result(s, tmp_path / "missing.json")["goodput_bps"] == 0


def test_flow_command_lines():
    plan = flows.FlowPlan(id="f1", server="S1", server_index=0, device="R1", device_index=0,
                          family="ipv6", dst_addr="fd00:2::1", port=5203, start_s=1.0,
                          seconds=flows.iperf_seconds(1.0, 3.4), nbytes=None, cc="reno",
                          parallel=4, interval_s=0.5)
    a = plan.sender_argv(Path("/r"))
    assert a[:3] == ["iperf3", "-c", "fd00:2::1"] and "-6" in a
    assert a[a.index("-t") + 1] == "2" and a[a.index("-P") + 1] == "4"
    assert a[a.index("-C") + 1] == "reno" and a[a.index("--logfile") + 1] == "/r/flow.f1.sender.json"
    r = plan.receiver_argv(Path("/r"))
    assert r[:3] == ["iperf3", "-s", "-1"] and r[r.index("-p") + 1] == "5203"


def test_an_upstream_flow_sends_from_the_device_to_a_receiver_in_the_server():
    from oppsched.experiments.testbed.topology import flow_plans
    from oppsched.testbed.wired import Node
    text = BASE.replace("  - {id: f1, server: S1, device: R1}",
                        "  - {id: f1, server: S1, device: R1}\n"
                        "  - {id: f2, server: S1, device: R1, direction: up, family: ipv6}")
    cfg = cfg_of(text)
    assert [f["direction"] for f in cfg["flows"]] == ["down", "up"]
    clients = [Node("R1", None, "radio0", "10.2.0.1", "fd00:2:0::1", None, None)]
    servers = [Node("S1", None, "eth0", "10.1.0.1", "fd00:1:0::1", None, None)]
    down, up = flow_plans(cfg, clients, servers)
    assert (down.direction, down.sender_in_client, down.dst_addr) == ("down", False, "10.2.0.1")
    assert (up.direction, up.sender_in_client, up.dst_addr) == ("up", True, "fd00:1:0::1")
    a = up.sender_argv(Path("/r"))
    assert a[:3] == ["iperf3", "-c", "fd00:1:0::1"] and "-6" in a and "-R" not in a
    assert up.receiver_argv(Path("/r"))[:3] == ["iperf3", "-s", "-1"]
    assert up.to_json()["direction"] == "up"


def test_per_direction_totals_sum_goodput_and_take_jain_over_each_direction():
    rows = [{"id": "a", "direction": "down", "goodput_bps": 3e6, "goodput_steady_bps": 2e6},
            {"id": "b", "direction": "down", "goodput_bps": 1e6, "goodput_steady_bps": None},
            {"id": "c", "direction": "up", "goodput_bps": 0.5e6, "goodput_steady_bps": 0.4e6}]
    t = flowsummary.direction_totals(rows)
    assert t["down"]["flows"] == ["a", "b"] and t["down"]["goodput_bps"] == 4e6
    assert t["down"]["jain_index"] == pytest.approx(16 / (2 * 10))
    assert t["down"]["goodput_steady_bps"] == 2e6  # a flow without a steady rate adds 0
    assert t["up"] == {"flows": ["c"], "goodput_bps": 0.5e6, "jain_index": 1.0,
                       "goodput_steady_bps": 0.4e6}
    assert flowsummary.direction_totals(rows[:2])["up"] == {"flows": [], "goodput_bps": 0.0,
                                                            "jain_index": None,
                                                            "goodput_steady_bps": 0.0}


def test_a_delay_stage_that_exits_during_the_run_ends_it_naming_the_link(tmp_path):
    """The runner watches the wired paths' delay stages as it watches the daemons: one that
    exited (here a real process standing in for it, exit 1 after its last log line) ends the
    run with an error naming the link, its exit code and the end of its log."""
    from types import SimpleNamespace

    from oppsched.experiments.testbed.schedule import _check_links_alive
    from oppsched.experiments.testbed.programs import TestbedError

    log = tmp_path / "delay-s0.log"
    log.write_text("oppsched-delay: info: forwarding s0a <-> s0b\n"
                   "oppsched-delay: error: std::bad_alloc\n")
    alive = SimpleNamespace(name="s1", proc=SimpleNamespace(
        popen=subprocess.Popen(["sleep", "30"]), log_tail=lambda: ""))
    gone = SimpleNamespace(name="s0", proc=SimpleNamespace(
        popen=subprocess.Popen(["sh", "-c", "exit 1"]),
        log_tail=lambda: log.read_text().rstrip()))
    gone.proc.popen.wait()
    plain = SimpleNamespace(name="s2", proc=None)  # a plain veth: no stage to watch
    try:
        _check_links_alive(SimpleNamespace(links=[alive, plain]))  # nothing to say
        with pytest.raises(TestbedError) as e:
            _check_links_alive(SimpleNamespace(links=[alive, gone, plain]))
    finally:
        alive.proc.popen.kill()
        alive.proc.popen.wait()
    msg = str(e.value)
    assert msg.startswith("wired link s0: oppsched-delay exited with 1 during the run:"), msg
    assert msg.endswith("oppsched-delay: error: std::bad_alloc"), msg


def test_a_timed_flow_still_running_after_its_planned_end_is_stopped_there(tmp_path):
    """A timed iperf3 flow that connected late would run on alone after the others; the
    runner stops it overrun_s (plus 3 round trips) after its planned end, and records that
    end. A flow of -n bytes is not timed and keeps the grace deadline (real processes stand
    in for the senders: one that never ends, one that ends by itself)."""
    from types import SimpleNamespace

    from oppsched.experiments.testbed.processes import ProcTable
    from oppsched.experiments.testbed.schedule import _schedule

    procs = ProcTable()
    ns = SimpleNamespace(name="srv")

    def spawn(_ns, argv, name, role, env=None):
        # SIGINT as iperf3 takes it (its own handler), also where the tests run in the
        # background of a shell, which leaves SIGINT ignored for its children.
        popen = subprocess.Popen(argv, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                        signal.SIG_DFL))
        procs.add(SimpleNamespace(name=name, pid=popen.pid, popen=popen, ns=ns, argv=argv,
                                  log_path=None, log_tail=lambda: "",
                                  stop=lambda t: (popen.kill(), popen.wait())), role)

    def plan(fid, seconds, nbytes):
        return flows.FlowPlan(id=fid, server="s0", server_index=0, device="D1",
                              device_index=0, family="ipv4", dst_addr="10.9.0.1", port=5201,
                              start_s=0.0, seconds=seconds, nbytes=nbytes, cc="reno",
                              parallel=1, interval_s=0.5)

    late, sized = plan("late", 1, None), plan("sized", None, 1000)
    late.sender_argv = lambda rundir: ["sleep", "60"]
    sized.sender_argv = lambda rundir: ["sh", "-c", "sleep 2.5"]
    cfg = {"duration_s": 1.0, "servers": [{"rtt_ms": 0.0}],
           "timeouts": {"grace_s": 30.0, "overrun_s": 0.5}}
    tb = SimpleNamespace(servers=[SimpleNamespace(ns=ns)], clients=[], links=[])
    _schedule(cfg, tb, [late, sized], procs, [], tmp_path, time.monotonic(),
              lambda *a: None, spawn)
    assert late.extra["planned_end_s"] == 1.0
    assert late.extra["stopped"].startswith("still running 0.5 s after its planned end")
    assert late.ended_at_s >= 1.5 and late.ended_at_s < sized.ended_at_s
    assert procs.rows["iperf3-s.late"]["exit_code"] == -signal.SIGINT
    assert "stopped" not in sized.extra and sized.exit_code == 0


def test_a_stopped_timed_flow_counts_what_its_receiver_got_by_the_planned_end(tmp_path):
    """The receiver's intervals count from its own (late) start and end when the runner
    stopped the sender: the planned end lies (ended_at_s - planned_end_s) before its last
    interval's end, and the interval across it counts pro rata."""
    rcv = tmp_path / "flow.f.receiver.json"
    rcv.write_text(json.dumps({"intervals": [
        {"sum": {"start": k, "end": k + 1.0, "seconds": 1.0, "bytes": 100 * (k + 1),
                 "bits_per_second": 800.0 * (k + 1)}} for k in range(10)]}))
    plan = {"seconds": 20, "ended_at_s": 23.0,
            "extra": {"stopped": "still running", "planned_end_s": 20.5}}
    # last end 10 s; planned end 2.5 s before it: intervals ending by 7 s, half of the 8th
    assert flowsummary._bytes_by_planned_end(rcv, plan) == sum(range(100, 800, 100)) + 400
    plan["extra"]["planned_end_s"] = 13.0  # long before the receiver began: nothing
    assert flowsummary._bytes_by_planned_end(rcv, plan) == 0
    assert flowsummary._bytes_by_planned_end(rcv, {**plan, "extra": {}}) is None  # not stopped
    assert flowsummary._bytes_by_planned_end(tmp_path / "missing.json", plan) is None


def test_ss_output_gives_bytes_acked_per_peer_port():
    text = ("ESTAB 0 0 10.1.0.1:40970 10.2.0.1:5201\n"
            "\t cubic wscale:10,10 rto:204 bytes_sent:5000 bytes_acked:4001 segs_out:4\n"
            "ESTAB 0 0 [fd00:1::1]:40972 [fd00:2::1]:5202\n"
            "\t reno bytes_acked:10 bytes_received:3\n"
            "ESTAB 0 0 [fd00:1::1]:40974 [fd00:2::1]:5202\n"
            "\t reno bytes_acked:20\n")
    assert flows.parse_ss_bytes_acked(text) == {5201: 4001, 5202: 30}


# ----------------------------------------------------------------------------------------
# The runner with stand-in daemons (root)


def _fake_build(tmp: Path) -> Path:
    # Executed by the run user: in a folder it can reach (tmp is 0700 root's).
    b = Path(tempfile.mkdtemp(prefix="oppsched-fakebuild-"))
    b.chmod(0o755)
    atexit.register(shutil.rmtree, b, True)
    for rel, role in (("host/daemon/oppsched-apd", "apd"), ("host/daemon/oppsched-client", "client"),
                      ("host/phy/oppsched-phy-abstract", "phy")):
        p = b / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} {role} \"$@\"\n")
        p.chmod(0o755)
    delay = find_delay_binary()
    if delay is not None:
        (b / "host/delay").mkdir(parents=True, exist_ok=True)
        (b / "host/delay/oppsched-delay").symlink_to(delay)
    return b


@pytest.fixture
def prefix_env(monkeypatch):
    monkeypatch.setenv("OPPSCHED_NETNS_PREFIX", PREFIX)


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    if not nsbase.is_root():
        pytest.skip("network namespaces need root")
    require(*delay_or_netem_available())
    tmp = tmp_path_factory.mktemp("fake")
    build = _fake_build(tmp)
    exp = write_experiment(tmp, BASE.replace("duration_s: 4", "duration_s: 3").replace(
        "  - {id: f1, server: S1, device: R1}",
        "  - {id: f1, server: S1, device: R1}\n"
        "  - {id: f2, server: S1, device: R1, family: ipv6, parallel: 2, start_s: 1}")
        .replace("analysis: {plots: false}", "analysis: {plots: true}")
        + f"build_dir: {build}\n")
    with netns_prefix():
        runs = run_experiment(exp, tmp / "out")
    return tmp / "out", runs[0][1], build


@needs_root
def test_runner_writes_the_documented_run_folder(fake_run):
    out, s, _ = fake_run
    for name in ("config.json", "run.json", "processes.json", "apd.yaml", "client.R1.yaml",
                 "phy.yaml", "slots.csv", "wired.S1.pcap", "client.R1.pcap", "summary.json",
                 "flow.f1.sender.json", "flow.f1.receiver.json", "flow.f2.sender.json",
                 "report.html", "goodput.png", "queues.png", "logs/apd.log",
                 "timeline.csv.gz", "flows.live.json"):
        assert (out / name).exists(), name
    for key in ("experiment", "duration_s", "config", "flows", "users", "jain_index_flows",
                "jain_index_users", "slots", "harq"):
        assert key in s
    for f in s["flows"]:
        assert {"id", "user", "goodput_bps", "rtt_ms_mean"} <= set(f)
        assert f["goodput_bps"] > 100e3 and f["rtt_ms_mean"] >= 20.0  # d = 20 ms at least
        # the client-TUN capture agrees with iperf3 on the bytes delivered
        # pcap bytes over the sender's window vs iperf3's count: in a run this short the
        # bytes in flight at start and stop are a visible share (measured up to 10.1%);
        # the same tolerance as the end-to-end runs'
        assert f["goodput_pcap_bps"] == pytest.approx(f["goodput_bps"], rel=0.15)
    assert s["flows"][1]["streams"] == 2 and s["flows"][1]["family"] == "ipv6"
    for u in s["users"]:
        assert {"name", "slot_fraction", "mac_throughput_bps", "mean_queue_bytes",
                "mean_queue_delay_ms"} <= set(u)
        # scheduling jitter: served in a fraction f of the slots, the mean gap between its
        # slots is about one slot / f
        slot_ms = s["slots"]["slot_s"] * 1e3
        assert u["slot_gap_mean_ms"] == pytest.approx(slot_ms / u["slot_fraction"], rel=0.25)
        assert u["slot_gap_std_ms"] >= 0 and u["slot_gap_cov"] == pytest.approx(
            u["slot_gap_std_ms"] / u["slot_gap_mean_ms"])
    assert s["slots"]["total"] > 500 and s["harq"]["tb_sent"] > 100
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "done" and run["radio_ready_s"] is not None
    procs = {p["name"]: p for p in json.loads((out / "processes.json").read_text())}
    for n in ("apd", "client.R1", "phy", "iperf3-s.f1", "iperf3-r.f1", "tcpdump.wired.S1"):
        assert procs[n]["exit_code"] == 0, (n, procs[n])
        assert procs[n]["cpu_s"] is not None
    assert s["cpu_s"]["apd"] > 0
    # the flows started at their times: f2 one second after f1
    fl = {f["id"]: f for f in run["flows"]}
    assert 0.9 < fl["f2"]["started_at_s"] - fl["f1"]["started_at_s"] < 1.5
    assert_run_gone(run["run_name"])


@needs_root
def test_analyze_reproduces_the_summary(fake_run):
    out, s, _ = fake_run
    before = json.loads((out / "summary.json").read_text())
    r = run_cli("analyze", out)
    assert r.returncode == 0, r.stderr
    after = json.loads((out / "summary.json").read_text())
    assert after == before


def _run_expect_failure(tmp_path, extra: str, build: Path, match: str):
    exp = write_experiment(tmp_path, BASE + f"build_dir: {build}\n" + extra)
    with pytest.raises((testbed.TestbedError, nsbase.NetnsError, KeyboardInterrupt)) as e:
        run_experiment(exp, tmp_path / "out")
    assert match in str(e.value) or match == "", str(e.value)
    run = json.loads((failed_dir(tmp_path / "out") / "run.json").read_text())
    assert run["status"] == "failed" and run["run_name"].startswith(PREFIX)
    assert_run_gone(run["run_name"])
    return run


@needs_root
def test_a_daemon_that_dies_fails_the_run_and_nothing_is_left(tmp_path, prefix_env, fake_run):
    build = fake_run[2]
    run = _run_expect_failure(tmp_path, "extra: {client: {fake: {fail_after: 1.5}}}\n", build,
                              "client.R1 exited with 3")
    assert "client.R1 exited with 3" in run["error"]


@needs_root
def test_a_daemon_that_never_gets_ready_fails_at_startup(tmp_path, prefix_env, fake_run):
    build = fake_run[2]
    _run_expect_failure(tmp_path, "extra: {apd: {fake: {fail_after: 0.01}}}\n", build, "apd")


@needs_root
def test_a_configuration_a_daemon_rejects_fails_before_anything_is_built(tmp_path, monkeypatch,
                                                                         fake_run):
    # A prefix of its own: runs of other test files may come and go meanwhile.
    monkeypatch.setenv("OPPSCHED_NETNS_PREFIX", "ottbreject")
    build = fake_run[2]
    exp = write_experiment(tmp_path, BASE + f"build_dir: {build}\n"
                           + "extra: {client: {fake: {reject: 7}}}\n")
    with pytest.raises(testbed.TestbedError, match="oppsched-client rejects client.R1.yaml"
                       r" \(exit 2\).*fake.reject: 7"):
        run_experiment(exp, tmp_path / "out")
    assert not [n for n in stale.list_netns() if n.startswith("ottbreject")]
    run = json.loads((failed_dir(tmp_path / "out") / "run.json").read_text())
    assert run["status"] == "failed" and "run_name" not in run


@needs_root
def test_a_daemon_that_fails_when_stopped_fails_the_run_and_earlier_results_stay(
        tmp_path, prefix_env, fake_run):
    out_before, _, build = fake_run
    out = tmp_path / "out"
    shutil.copytree(out_before, out)  # a previous, successful run
    before = (out / "summary.json").read_text()
    exp = write_experiment(tmp_path, BASE + f"build_dir: {build}\n"
                           + "extra: {apd: {fake: {exit_on_stop: 4}}}\n")
    with pytest.raises(testbed.TestbedError, match="apd exited with 4"):
        run_experiment(exp, out)
    assert (out / "summary.json").read_text() == before
    assert not staging_dir(out).exists()
    failed = failed_dir(out)
    assert (failed / "slots.csv").stat().st_size > 0 and (failed / "logs" / "apd.log").exists()
    s = json.loads((failed / "summary.json").read_text())
    assert any("apd exited with 4" in e for e in s["errors"]), s["errors"]
    r = run_cli("run", exp, "--out", out)
    assert r.returncode == 1 and "apd exited with 4" in r.stderr
    assert f"{failed}" in r.stderr and (out / "summary.json").read_text() == before


@needs_root
def test_a_trace_that_cannot_be_read_is_an_error_not_missing_data(tmp_path, fake_run):
    out = tmp_path / "out"
    shutil.copytree(fake_run[0], out)
    (out / "slots.csv").write_text("")          # truncated to nothing
    (out / "processes.json").write_text('[{"name": ')  # cut short
    r = run_cli("analyze", out)
    assert r.returncode == 1, r.stdout + r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert [e.split(":")[0] for e in s["errors"]] == ["processes.json", "slots.csv"], s["errors"]
    assert "ERROR: slots.csv" in r.stdout


@needs_root
def test_a_runner_killed_with_sigkill_leaves_nothing_after_cleanup(tmp_path, fake_run):
    build = fake_run[2]
    exp = write_experiment(tmp_path, BASE.replace("duration_s: 4", "duration_s: 30")
                           + f"build_dir: {build}\n")
    out = tmp_path / "out"
    env = {**os.environ, "OPPSCHED_NETNS_PREFIX": PREFIX}
    runner = subprocess.Popen([sys.executable, "-m", "oppsched", "run", str(exp), "--out",
                               str(out)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)

    def running():
        assert runner.poll() is None, f"the runner ended early ({runner.returncode})"
        rec = readers.read_json(staging_dir(out) / "run.json") or {}
        return rec if rec.get("status") == "running" else None
    rec = nsbase.wait_for(running, timeout=60, what="the run running")
    run_name = rec["run_name"]
    assert len(stale._marked_pids([run_name])) >= 4  # apd, client, PHY, iperf3...
    runner.kill()
    runner.wait(10)
    # Every process the run started dies with the runner (PR_SET_PDEATHSIG) ...
    try:
        nsbase.wait_for(lambda: not stale._marked_pids([run_name]), timeout=10,
                        what="the run's processes gone")
    except nsbase.ReadinessTimeout:
        left = {}
        for pid in stale._marked_pids([run_name]):
            try:
                left[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                pass
        raise AssertionError(f"still alive 10 s after the runner's SIGKILL: {left}") from None
    assert any(n.startswith(run_name) for n in stale.list_netns())
    # ... and `oppsched cleanup` removes the namespaces, the TUNs and devices in them.
    r = run_cli("cleanup", "--prefix", PREFIX)
    assert r.returncode == 0 and "removed" in r.stdout, r.stderr
    assert_run_gone(run_name)
    assert not out.exists()  # nothing was ever installed as a result


@needs_root
def test_ctrl_c_during_a_run_tears_everything_down(tmp_path, prefix_env, fake_run, monkeypatch):
    build = fake_run[2]

    class Interrupt:
        def __init__(self, *a):
            pass

        def __call__(self, done, total, what):
            raise KeyboardInterrupt

    monkeypatch.setattr("oppsched.run.runner.Progress", Interrupt)
    _run_expect_failure(tmp_path, "", build, "")


def test_missing_programs_are_named(tmp_path, prefix_env):
    exp = write_experiment(tmp_path, BASE + f"build_dir: {tmp_path / 'nowhere'}\n")
    with pytest.raises(testbed.TestbedError, match="oppsched-apd"):
        run_experiment(exp, tmp_path / "out")
    r = run_cli("run", exp, "--out", tmp_path / "o2")
    assert r.returncode == 1 and "missing programs" in r.stderr


# ----------------------------------------------------------------------------------------
# End to end with the real daemons and the abstract PHY (root + built programs)


def _e2e(tmp: Path, text: str, overrides=()):
    exp = write_experiment(tmp, text)
    with netns_prefix():
        runs = run_experiment(exp, tmp / "out", overrides)
    return tmp / "out", runs[0][1]


E2E = """
experiment: e2e
kind: testbed
duration_s: 4
devices:
  - {name: R1, channel: {mean_snr_db: 15.0}}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1, family: FAMILY, parallel: STREAMS}
queue: {limit_bytes: 200000}
"""


@pytest.mark.parametrize("family, streams", [("ipv4", 1), ("ipv6", 1), ("ipv4", 4), ("ipv6", 4)])
def test_end_to_end_tcp_over_the_abstract_phy(tmp_path, family, streams):
    require_real_testbed()
    out, s = _e2e(tmp_path, E2E.replace("FAMILY", family).replace("STREAMS", str(streams)))
    (f,) = s["flows"]
    assert f["error"] is None and f["streams"] == streams
    assert f["goodput_bps"] > 200e3, f
    assert f["rtt_ms_mean"] >= 20.0
    assert f["goodput_pcap_bps"] == pytest.approx(f["goodput_bps"], rel=0.15)
    (u,) = s["users"]
    assert u["slot_fraction"] > 0.2 and u["mac_throughput_bps"] > f["goodput_bps"] * 0.9
    assert 0.3 < s["goodput_mac_fraction"] <= 1.0
    assert s["harq"]["tb_sent"] > 100
    run = json.loads((out / "run.json").read_text())
    procs = {p["name"]: p for p in json.loads((out / "processes.json").read_text())}
    for n in ("apd", "client.R1", "phy"):
        assert procs[n]["exit_code"] == 0, (n, procs[n])  # SIGTERM: clean exit, traces flushed
    assert (out / "apd.stats.json").exists() and (out / "phy.stats.json").exists()
    assert_run_gone(run["run_name"])
    # `oppsched analyze` recomputes the same summary from the run folder alone
    before = (out / "summary.json").read_text()
    analyze_dir(out)
    assert json.loads((out / "summary.json").read_text()) == json.loads(before)


UPFLOW = """
experiment: upflow
kind: testbed
duration_s: 5
devices:
  - {name: R1, channel: {mean_snr_db: 15.0}}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: dn, server: S1, device: R1}
  - {id: up, server: S1, device: R1, direction: up}
queue: {limit_bytes: 200000}
traces: {packets: true}
capture: {ap: true}
clamp: {enabled: true, a_bytes: 3000}
"""


def test_an_upstream_flow_sends_up_and_its_acks_wait_in_the_devices_ap_queue(tmp_path):
    """Wu, Gong & Williamson's upstream flow beside a downstream one on one device: both
    carry data; the upstream flow's data crosses the uplink (the server's capture counts
    it), its ACKs the AP queue (packets.csv: small packets enqueued for the device, as many
    as the AP's TUN saw ACKs of that flow); CLAMP leaves its segments alone; the summary
    splits the goodput by direction."""
    require_real_testbed()
    out, s = _e2e(tmp_path, UPFLOW)
    run = json.loads((out / "run.json").read_text())
    fl = {f["id"]: f for f in s["flows"]}
    plans = {f["id"]: f for f in run["flows"]}
    assert (fl["dn"]["direction"], fl["up"]["direction"]) == ("down", "up")
    for f in fl.values():
        assert f["error"] is None and f["goodput_bps"] > 100e3, f
        assert f["rtt_ms_mean"] >= 20.0, f
        # cross-check where the data is received: client.R1.pcap (down), wired.S1.pcap (up)
        assert f["goodput_pcap_bps"] == pytest.approx(f["goodput_bps"], rel=0.15), f
    srv = plans["up"]["dst_addr"]  # an upstream flow's receiver: the server
    assert srv == run["testbed"]["servers"][0]["addr4"], run["testbed"]
    for d, fid in (("down", "dn"), ("up", "up")):
        assert s["directions"][d] == {"flows": [fid], "goodput_bps": fl[fid]["goodput_bps"],
                                      "jain_index": 1.0,
                                      "goodput_steady_bps": fl[fid]["goodput_steady_bps"] or 0.0}
    # Only the downstream flow's data crosses the downlink the MAC figures count.
    assert s["goodput_mac_fraction"] <= 1.0
    text = text_summary([("upflow", s, None)])
    assert "flow       up (R1, up)" in text and "  upstream: 1 flow(s)" in text, text
    assert "<h3>Per direction</h3>" in (out / "report.html").read_text()

    # The upstream flow's ACKs, as the AP's TUN handed them to the apd ...
    ap = pcap.read_tcp(out / "ap.pcap")
    up_port = plans["up"]["port"]
    acks = ap[(ap["src"] == pcap.norm_addr(srv)) & (ap["sport"] == up_port)
              & (ap["payload"] == 0)]
    assert len(acks) > 100, len(acks)
    # ... and in the apd's per-packet trace: small packets into the device's queue (the
    # downstream flow's data is 1500-byte packets; its ACKs go up, not into the AP queue).
    pk = pd.read_csv(out / "packets.csv")
    small = pk[(pk["user"] == 0) & (pk["bytes"] <= 100) & pk["event"].isin(["enqueue", "drop"])]
    # Less what the kernel dropped at the TUN because the apd was slow to read (any packet;
    # under load, 6 % of the ACKs of this 25 Mb/s upstream burst once).
    tun_drops = run["ap_tun"]["tx_dropped"]
    assert small["packet_id"].nunique() >= 0.95 * (len(acks) - tun_drops), (
        small["packet_id"].nunique(), len(acks), run["ap_tun"])

    # CLAMP clamps receivers: the upstream flow's data keeps the window its client's kernel
    # wrote (client.R1.pcap) up to the server (wired.S1.pcap), and windows.R1.csv has no row
    # of its data connection after the handshake's last ACK (iperf3's control connection,
    # on which the server sends too, may have some).
    cli, wire = pcap.read_tcp(out / "client.R1.pcap"), pcap.read_tcp(out / "wired.S1.pcap")

    def data(df):
        d = df[(df["dst"] == pcap.norm_addr(srv)) & (df["dport"] == up_port) & (df["payload"] > 0)]
        return d.drop_duplicates(["sport", "seq"]).set_index(["sport", "seq"])["win"]
    sent, got = data(cli), data(wire)
    both = sent.index.intersection(got.index)
    assert len(both) > 100 and (sent[both] == got[both]).all()
    per_conn = sent.groupby(level="sport").size()
    data_port = int(per_conn.idxmax())  # the data connection: nearly all the segments
    w = pd.read_csv(out / "windows.R1.csv")
    ends = w["flow"].str.split(">")
    server_port = ends.str[0].str.rsplit(":", n=1).str[1].astype(int)
    client_port = ends.str[1].str.rsplit(":", n=1).str[1].astype(int)
    assert ((server_port == up_port) & (client_port == data_port)).sum() <= 1, w
    assert (server_port != up_port).sum() > 100  # the downstream flow's ACKs are clamped
    assert s["clamp"]["R1"]["rewritten_acks"] == len(w)
    assert_run_gone(run["run_name"])


@pytest.fixture(scope="module")
def clamp_run(tmp_path_factory):
    require_real_testbed()
    tmp = tmp_path_factory.mktemp("clamp")
    text = E2E.replace("FAMILY", "ipv4").replace("STREAMS", "1").replace(
        "duration_s: 4", "duration_s: 6").replace(
        "  - {id: f1, server: S1, device: R1, family: ipv4, parallel: 1}",
        "  - {id: f1, server: S1, device: R1, family: ipv4}\n"
        "  - {id: f2, server: S1, device: R1, family: ipv6}") + \
        "clamp: {enabled: true, a_bytes: 3000}\n" + \
        "capture: {snaplen: 2000, ap: true}\n" + \
        "traces: {packets: true}\n"  # capture: whole segments, every checksum verifiable
    return _e2e(tmp, text)


def test_the_timeline_puts_every_trace_of_a_run_on_one_clock(clamp_run):
    """timeline.csv.gz, written by the run: the apd's slots and packets, the client's CLAMP
    windows and the senders' tcp_info, one table that pandas reads in one call, on the run's
    clock (seconds after t0): a packet leaves the AP queue before its TB is acknowledged,
    slots follow each other in time, the client's windows and iperf3's samples fall inside
    the slots' span, and `oppsched timeline` writes the same table again for the old run."""
    from oppsched.cli import main

    out, _ = clamp_run
    path = out / "timeline.csv.gz"
    tl = pd.read_csv(path)
    assert list(tl.columns) == ["t_s", "layer", "entity", "metric", "value", "id", "detail",
                                "source"]
    assert tl["t_s"].is_monotonic_increasing
    metrics = set(zip(tl["layer"], tl["metric"]))
    for want in [("mac", "tb_bytes"), ("mac", "queue_bytes"), ("mac", "packet_dequeue_bytes"),
                 ("mac", "packet_deliver_bytes"), ("clamp", "clamp_window_bytes"),
                 ("tcp", "cwnd_bytes"), ("tcp", "rtt_ms"), ("tcp", "received_bytes")]:
        assert want in metrics, want
    # the clock: slots.csv's CLOCK_MONOTONIC less run.json's t0
    t0 = json.loads((out / "run.json").read_text())["t0_mono_ns"]
    sl = pd.read_csv(out / "slots.csv")
    tb = tl[tl["metric"] == "tb_bytes"].sort_values("id")
    busy = sl[sl["user"] >= 0].sort_values("slot")
    assert len(tb) == len(busy) > 500
    assert np.allclose(tb["t_s"].to_numpy(), (busy["t_ns"].to_numpy() - t0) / 1e9, atol=1e-6)
    # slot times rise with the slot number
    slot_t = tl[tl["metric"].isin(["tb_bytes", "empty_slot"])].drop_duplicates("id")
    slot_t = slot_t.sort_values("id")["t_s"].to_numpy()
    assert np.all(np.diff(slot_t) > 0)
    # every packet leaves the AP queue (dequeue) before the TB with its last byte is acked
    pk = tl[tl["metric"].isin(["packet_dequeue_bytes", "packet_deliver_bytes"])]
    deq = pk[pk["metric"] == "packet_dequeue_bytes"].groupby("id")["t_s"].min()
    dlv = pk[pk["metric"] == "packet_deliver_bytes"].groupby("id")["t_s"].max()
    both = deq.index.intersection(dlv.index)
    assert len(both) > 500
    assert (deq[both] < dlv[both]).all(), (dlv[both] - deq[both]).min()
    # the client daemon's windows and the senders' tcp_info samples inside the slots' span
    lo, hi = slot_t.min(), slot_t.max()
    win = tl[tl["metric"] == "clamp_window_bytes"]
    assert len(win) > 100 and win["t_s"].between(lo, hi).all()
    assert set(win["entity"]) == {"f1", "f2"}  # each ACK's connection named by its flow
    tcp = tl[tl["metric"] == "cwnd_bytes"]
    assert len(tcp) >= 2 * 8 and tcp["t_s"].between(max(lo, 0.0), hi).all()
    assert set(tcp["entity"]) == {"f1", "f2"}
    # the command writes the same table for a run made before
    written = path.read_bytes()
    path.unlink()
    assert main(["timeline", str(out)]) == 0
    assert path.read_bytes() == written


def test_the_timeline_command_refuses_a_folder_without_a_run(tmp_path, capsys):
    from oppsched.cli import main

    (tmp_path / "x").mkdir()
    assert main(["timeline", str(tmp_path / "x")]) == 2
    assert f"{tmp_path / 'x'}: no run folder here" in capsys.readouterr().err


def _acks(df: pd.DataFrame, addr: str, port: int) -> pd.DataFrame:
    w = pcap.advertised_windows(df, addr, port)
    syn = pcap.TCP_SYN
    flags = df[(df["src"] == pcap.norm_addr(addr)) & (df["sport"] == port)]["flags"].to_numpy()
    return w[(flags & syn) == 0].reset_index(drop=True)


@pytest.mark.parametrize("flow", ["f1", "f2"])
def test_clamp_rewrites_ack_windows(clamp_run, flow):
    out, s = clamp_run
    run = json.loads((out / "run.json").read_text())
    plan = next(f for f in run["flows"] if f["id"] == flow)
    cli = pcap.read_tcp(out / "client.R1.pcap")   # the ACKs as the client's kernel wrote them
    wire = pcap.read_tcp(out / "wired.S1.pcap")   # the same ACKs as the sender receives them
    os_w = _acks(cli, plan["dst_addr"], plan["port"])
    sent = _acks(wire, plan["dst_addr"], plan["port"])
    # the data connection of the flow (iperf3 also opens a small control connection)
    data_port = int(sent["peer_port"].value_counts().index[0])
    os_w = os_w[os_w["peer_port"] == data_port].reset_index(drop=True)
    sent = sent[sent["peer_port"] == data_port].reset_index(drop=True)
    assert len(sent) > 100 and len(sent) == len(os_w)  # no ACK lost or added on the uplink
    assert (sent["ack"].to_numpy() == os_w["ack"].to_numpy()).all()  # the same ACKs, in order
    scale = 1 << int(sent["wscale"].max())
    got, osw = sent["window_bytes"].to_numpy(), os_w["window_bytes"].to_numpy()
    # eq. 17: AWND = min(w, AWND_os): never above what the OS advertised ...
    assert np.all(got <= osw)
    # ... and clamped (strictly smaller) for most of the flow
    assert np.mean(got < osw) > 0.5, np.mean(got < osw)
    # windows.R1.csv has one row per rewritten ACK of this connection, in order: the wire
    # shows exactly those windows (to the window-scale granularity: the field holds
    # advertised >> wscale). ACKs before the first priced PDU pass unchanged (no row).
    w = pd.read_csv(out / "windows.R1.csv")
    peer = f"[{pcap.norm_addr(plan['dst_addr'])}]" if plan["family"] == "ipv6" \
        else plan["dst_addr"]
    rows = w[w["flow"].str.endswith(f":{data_port}>{peer}:{plan['port']}")]
    adv = rows["advertised_bytes"].to_numpy()
    assert len(rows) > 100 and len(rows) <= len(got)
    best = max(range(len(got) - len(adv) + 1),
               key=lambda k: np.mean(np.abs(got[k:k + len(adv)] - adv) < scale))
    match = np.abs(got[best:best + len(adv)] - adv) < scale
    assert match.mean() > 0.98, (best, match.mean())
    # the OS window in the trace is the one the client pcap shows for those ACKs
    osr = rows["awnd_os_bytes"].to_numpy()
    assert np.mean(np.abs(osw[best:best + len(adv)] - osr) < scale) > 0.98


def test_clamp_rewritten_acks_have_valid_checksums(clamp_run):
    scapy = pytest.importorskip("scapy.all")
    out, _ = clamp_run
    checked = 0
    for pkt in scapy.rdpcap(str(out / "wired.S1.pcap")):
        if scapy.TCP not in pkt or len(pkt[scapy.TCP].payload) > 0:
            continue  # data segments are cut by the snaplen; pure ACKs are whole
        ip = pkt[scapy.IP] if scapy.IP in pkt else pkt[scapy.IPv6]
        if ip.dst.startswith(("10.1.", "fd00:1:")):  # ACKs towards the server
            raw = bytes(ip)
            again = ip.__class__(raw)
            del again[scapy.TCP].chksum
            if scapy.IP in pkt:
                del again.chksum
            again = again.__class__(bytes(again))
            assert again[scapy.TCP].chksum == ip[scapy.TCP].chksum
            if scapy.IP in pkt:
                assert again.chksum == ip.chksum
            checked += 1
    assert checked > 200


def _tcp_checksum_statuses(pcap_path: Path) -> dict[str, int]:
    """tshark's verdict on every TCP checksum of a pcap: {"Bad"|"Good"|"Unverified": n},
    and "ffff": the bad ones that are the kernel's 0xffff for a zero sum (below)."""
    r = subprocess.run(["tshark", "-n", "-r", str(pcap_path), "-o", "tcp.check_checksum:TRUE",
                        "-Y", "tcp", "-T", "fields", "-e", "tcp.checksum.status",
                        "-e", "tcp.checksum.ffff"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    names = {"0": "Bad", "1": "Good", "2": "Unverified"}
    counts: dict[str, int] = {}
    for line in r.stdout.splitlines():
        status, _, ffff = line.partition("\t")
        counts[names[status]] = counts.get(names[status], 0) + 1
        if ffff:
            counts["ffff"] = counts.get("ffff", 0) + 1
    return counts


def test_the_checksum_check_allows_the_kernels_0xffff_for_a_zero_sum_and_nothing_else(tmp_path):
    require(shutil.which("tshark") is not None, "tshark is not installed (apt-get install tshark)")
    scapy = pytest.importorskip("scapy.all")

    def segment(payload: bytes, chksum: int | None = None):
        return scapy.Ether(bytes(scapy.Ether() / scapy.IP(src="10.1.0.2", dst="10.2.0.2") /
                                 scapy.TCP(sport=5201, dport=40000, flags="A", chksum=chksum) /
                                 payload))

    # a first payload word equal to the checksum of the rest makes the sum 0xffff: the true
    # checksum is then 0x0000
    c = segment(b"\0\0payload!")[scapy.TCP].chksum
    assert segment(c.to_bytes(2, "big") + b"payload!")[scapy.TCP].chksum == 0
    frames = [segment(c.to_bytes(2, "big") + b"payload!", chksum=0xFFFF),  # as Linux writes it
              segment(b"good"), segment(b"wrong", chksum=0x1234)]
    path = tmp_path / "c.pcap"
    scapy.wrpcap(str(path), frames)
    assert _tcp_checksum_statuses(path) == {"Bad": 2, "Good": 1, "ffff": 1}
    scapy.wrpcap(str(path), frames[:2])
    assert _tcp_checksum_statuses(path) == {"Bad": 1, "Good": 1, "ffff": 1}


def _bad_checksum_frames(pcap_path: Path) -> str:
    """The frames with a bad TCP checksum, one line each (number, time, addresses, ports,
    raw sequence number, length, flags, checksum, frame and captured length): what a
    failure needs to be traced."""
    fields = ["frame.number", "frame.time_relative", "ip.src", "ipv6.src", "ip.dst",
              "ipv6.dst", "tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.len",
              "tcp.flags.str", "tcp.checksum", "frame.len",
              "frame.cap_len"]
    r = subprocess.run(["tshark", "-n", "-r", str(pcap_path), "-o", "tcp.check_checksum:TRUE",
                        "-Y", 'tcp.checksum.status == "Bad"', "-T", "fields",
                        *[a for f in fields for a in ("-e", f)]],
                       capture_output=True, text=True, timeout=120)
    # and the bad frames' bytes, to tell a corrupted packet from a wrong checksum
    x = subprocess.run(["tshark", "-n", "-r", str(pcap_path), "-o", "tcp.check_checksum:TRUE",
                        "-Y", 'tcp.checksum.status == "Bad"', "-x"],
                       capture_output=True, text=True, timeout=120)
    return " | ".join(fields) + "\n" + r.stdout + r.stderr[-300:] + "\n" + x.stdout[:6000]


def test_every_pcap_of_a_run_has_only_valid_tcp_checksums(clamp_run):
    # The senders' frames are captured where they leave: with TX checksum offload left on
    # the veth, they would carry only the pseudo-header sum (Wireshark's "TCP CHECKSUM
    # INCORRECT" on every SYN, data segment and ACK a server sends).
    require(shutil.which("tshark") is not None, "tshark is not installed (apt-get install tshark)")
    out, _ = clamp_run
    pcaps = sorted(out.glob("*.pcap"))
    assert {p.name for p in pcaps} >= {"wired.S1.pcap", "client.R1.pcap", "ap.pcap"}
    for p in pcaps:
        counts = _tcp_checksum_statuses(p)
        # A checksum that sums to zero is written 0xffff by the kernel (skb_checksum_help,
        # CSUM_MANGLED_0): the other zero of ones' complement, valid (RFC 1624 §3), about one
        # segment in 65536, in any capture. Wireshark marks it bad with its own warning,
        # tcp.checksum.ffff (seen in the client's TUN capture: an ACK as the kernel wrote
        # it). Every other bad verdict is a fault.
        if counts.get("Bad", 0) > counts.get("ffff", 0):
            pytest.fail(f"{p.name}: {counts}\n{_bad_checksum_frames(p)}\nstats files: "
                        f"{sorted(x.name for x in out.glob('*.stats.json'))}")
        # whole segments (snaplen 2000): each is checked, data and ACKs, IPv4 and IPv6
        assert counts.get("Good", 0) > 500 and counts.get("Unverified", 0) == 0, (p.name, counts)
        # the display filter a Wireshark user would type finds nothing either
        r = subprocess.run(["tshark", "-n", "-r", str(p), "-o", "tcp.check_checksum:TRUE",
                            "-Y", 'tcp.checksum.status == "Bad" && !tcp.checksum.ffff'],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "", (p.name, r.stdout[:500], r.stderr)
    for v6 in (False, True):  # both families were captured and checked
        flt = "ipv6 && tcp.checksum.status == 1" if v6 else "ip && tcp.checksum.status == 1"
        r = subprocess.run(["tshark", "-n", "-r", str(out / "wired.S1.pcap"), "-o",
                            "tcp.check_checksum:TRUE", "-Y", flt], capture_output=True,
                           text=True, timeout=120)
        assert len(r.stdout.splitlines()) > 100, (flt, r.stderr)


# Andrew & Hanly, CLAMP, §V-A's deterministic link (experiments/clamp/deterministic.yaml):
# the abstract PHY at a constant 30 dB, where eq. 18 gives 10 Mb/s in every slot and the
# end-of-slot rule never fires; two long-lived flows share the one AP queue.
E2E_CLAMP_EQUILIBRIUM = """
experiment: clamp-equilibrium
kind: testbed
duration_s: 25
seed: 1
phy: {mode: abstract, profile: 3ms, slot_s: 3.0e-3, error_model: end_of_slot,
      mcs_table: shannon}
devices:
  - {name: R1, channel: {model: awgn, mean_snr_db: 30.0, doppler_hz: 0.0}}
servers:
  - {name: S1, rtt_ms: 20, rate_bps: 100.0e+6}
flows:
  - {id: f1, server: S1, device: R1}
  - {id: f2, server: S1, device: R1}
queue: {mode: per_user, limit_bytes: 6000000}
scheduler: {kind: pf, alpha: 0.03}
tcp: {congestion_control: reno, sack: false}
clamp: {enabled: true, a_bytes: 5500, b: 1.0, tau_bytes: 500}
capture: {pcaps: false}
traces: {packets: true}
topology: {apd_rt_priority: 20, client_rt_priority: 20}
analysis: {warmup_s: 10}
extra:
  phy: {timing: {rt_priority: 30}}
"""


def test_clamp_holds_the_ap_queue_average_at_k_tau_plus_a_on_a_constant_link(tmp_path):
    """Eq. 11: with k = 2 flows the AP's queue average q settles at q* = (k tau + a)/b =
    6500 IP bytes. q is the router agent's average (§IV-A: q(n) = e^{-2I} q(n-1) +
    (1 - e^{-2I}) Q(n), Q(n) the backlog arrival n finds), recomputed here from the AP's
    per-packet trace and checked against the value the AP itself ended with.

    Measured (settled part 10-25 s): q - q* within +-60 B run to run. The slot trace's
    queue.R1 column is not this average: it sits about 4.5 kB above q*, being the backlog
    at the slot request before that slot's TB (~3650 B, 2.4 packets) is dequeued, plus the
    rest of a packet split across TBs. The time-average backlog is in between (about
    +2.6 kB): ACK-clocked arrivals come in bursts soon after a dequeue and the EMA weighs
    each by the gap before it, so it sees the low point of the slot's sawtooth. The price,
    and so the equilibrium, is about that EMA. See experiments/clamp/README.md.

    The apd, the client and the PHY run at SCHED_FIFO, as a lab runs them on a shared
    machine: beside the rest of `make test` on a fresh machine, with the apd and the PHY
    alone at SCHED_FIFO, 4 TBs timed out (HARQ feedback later than its 16 slots) and the
    flow that lost them carried 7 % less than the other (4.48 against 4.80 Mb/s, twice),
    which is not CLAMP's doing."""
    require_real_testbed()
    out, s = _e2e(tmp_path, E2E_CLAMP_EQUILIBRIUM)
    cfg = s["config"]["clamp"]
    k = 2
    q_star = (k * cfg["tau_bytes"] + cfg["a_bytes"]) / cfg["b"]
    assert q_star == 6500.0
    pk = pd.read_csv(out / "packets.csv")
    pk = pk[pk["user"] == 0]
    # The 6 MB buffer never fills and nothing else drops (drop-tail, no AQM). A TB whose
    # HARQ feedback came after its timeout (late slots on a busy machine) drops its packets
    # with their cause: a handful at most, and not the buffer.
    drops = pk[pk["event"] == "drop"]
    assert set(drops["reason"]) <= {"harq_timeout"}, drops["reason"].value_counts().to_dict()
    assert len(drops) < 20, len(drops)
    pk = pk[pk["event"].isin(["enqueue", "dequeue"])]
    t_ns = pk["t_ns"].to_numpy()
    delta = np.where(pk["event"] == "enqueue", pk["bytes"], -pk["bytes"])
    found = np.cumsum(delta) - delta  # backlog before each event, the packet excluded
    arrivals = (pk["event"] == "enqueue").to_numpy()
    t_a, q_found = t_ns[arrivals], found[arrivals]
    ema = np.empty(len(t_a))
    ema[0] = q_found[0]
    keep = np.exp(-cfg["ema_rate_per_s"] * np.diff(t_a) / 1e9)
    for n in range(1, len(t_a)):
        ema[n] = keep[n - 1] * ema[n - 1] + (1 - keep[n - 1]) * q_found[n]
    apd = json.loads((out / "apd.stats.json").read_text())
    assert ema[-1] == pytest.approx(apd["core"]["clamp"]["R1"]["avg_queue_bytes"], abs=1.0)
    # time-average of q over the settled part (held from each arrival to the next)
    t0 = pd.read_csv(out / "slots.csv", usecols=["t_ns"])["t_ns"].iloc[0]
    t_s = (t_a - t0) / 1e9
    held = np.diff(t_s, append=t_s[-1])
    settled = t_s >= 10.0
    assert held[settled].sum() > 14.0
    q = float((ema[settled] * held[settled]).sum() / held[settled].sum())
    assert abs(q - q_star) < 1500.0, (q, q_star)  # one packet
    # and the two flows share the link equally and keep it busy (eq. 10: mu_c / k each), in
    # the settled part as q: over the whole run a flow whose iperf3 began a second late on a
    # busy machine counted 6 % less (4.79 against 4.51 Mb/s), which is not CLAMP's doing
    goodput = [f["goodput_steady_bps"] for f in s["flows"]]
    assert min(goodput) > 0.45 * 9e6 and max(goodput) / min(goodput) < 1.05, goodput
    assert s["clamp"]["R1"]["rewritten_acks"] > 100


def test_a_failing_real_run_leaves_nothing_behind(tmp_path):
    require_real_testbed()
    exp_text = E2E.replace("FAMILY", "ipv4").replace("STREAMS", "1") + \
        "extra: {apd: {no_such_key: 1}}\n"
    # the apd says which key is wrong and exits 2 (docs/daemons.md), before anything is built
    with pytest.raises(testbed.TestbedError, match=r"oppsched-apd rejects apd.yaml \(exit 2\)"
                       ".*no_such_key"):
        _e2e(tmp_path, exp_text)
    run = json.loads((failed_dir(tmp_path / "out") / "run.json").read_text())
    assert run["status"] == "failed"


def test_a_real_run_that_fails_midway_leaves_nothing_behind(tmp_path, prefix_env,
                                                             monkeypatch):
    require_real_testbed()
    # The PHY killed behind the runner's back (at the first progress report) fails the run,
    # which still tears everything down.
    exp = write_experiment(tmp_path, E2E.replace("FAMILY", "ipv4").replace("STREAMS", "1")
                           .replace("duration_s: 4", "duration_s: 8"))

    class KillPhy:
        def __init__(self, *a):
            pass

        def __call__(self, done, total, what):
            for p in json.loads((staging_dir(tmp_path / "out") / "processes.json").read_text()):
                if p["name"] == "phy":
                    os.kill(p["pid"], signal.SIGKILL)

    monkeypatch.setattr("oppsched.run.runner.Progress", KillPhy)
    with pytest.raises(testbed.TestbedError, match="phy exited"):
        run_experiment(exp, tmp_path / "out")
    run = json.loads((failed_dir(tmp_path / "out") / "run.json").read_text())
    assert run["status"] == "failed"
    assert_run_gone(run["run_name"])


E2E_SAMPLE = """
experiment: e2e-sample
kind: testbed
duration_s: 6
phy: {mode: sample, profile: evdo}
devices:
  - {name: R1, channel: {mean_snr_db: 20.0, doppler_hz: 5.0, model: jakes}}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1, family: FAMILY}
queue: {limit_bytes: 60000}
"""


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_end_to_end_tcp_over_the_sample_level_gnu_radio_phy(tmp_path, family):
    """Real TCP through the GNU Radio loopback: OFDM samples, the channel emulator, sync,
    Viterbi decoding and HARQ, driven by the AP daemon and feeding the client agent."""
    require_real_testbed()
    out, s = _e2e(tmp_path, E2E_SAMPLE.replace("FAMILY", family))
    (f,) = s["flows"]
    assert f["error"] is None
    assert f["goodput_bps"] > 100e3, f          # the radio carries a TCP flow
    (u,) = s["users"]
    assert u["mac_throughput_bps"] >= f["goodput_bps"] * 0.9
    assert s["harq"]["tb_sent"] > 100
    phy = json.loads((out / "phy.stats.json").read_text())
    assert phy, "phy.stats.json is empty"
    procs = {p["name"]: p for p in json.loads((out / "processes.json").read_text())}
    for n in ("apd", "client.R1", "phy"):
        assert procs[n]["exit_code"] == 0, (n, procs[n])
    assert_run_gone(json.loads((out / "run.json").read_text())["run_name"])


def test_the_aqm_loss_and_mark_ratios_are_over_the_packets_each_queue_was_offered():
    apd = {"core": {"aqm": {
        "R1": {"offered": 200, "dropped_total": 10, "marked": 30, "enqueued": 190},
        "R2": {"offered": 0, "dropped_total": 0, "marked": 0},
    }}}
    a = daemonsummary.aqm_counts(apd)
    assert a["R1"] == {"offered": 200, "dropped": 10, "marked": 30, "loss_ratio": 0.05,
                       "mark_ratio": 0.15}
    assert a["R2"]["loss_ratio"] is None
    assert a["all"]["offered"] == 200 and a["all"]["loss_ratio"] == 0.05
    assert daemonsummary.aqm_counts(None) == {}


# ----------------------------------------------------------------------------------------
# SPM-AF's priority from the senders' real cwnd (tcp.spm_marking), end to end

SPM = """
experiment: spm
kind: testbed
duration_s: 5
devices:
  - {name: R1, channel: {mean_snr_db: 15.0}}
servers:
  - {name: S1, rtt_ms: 20}
  - {name: S2, rtt_ms: 20}
flows:
  - {id: long, server: S1, device: R1}
  - {id: s1, server: S2, device: R1, start_s: 1.0, bytes: 30000}
  - {id: s2, server: S2, device: R1, start_s: 1.4, bytes: 30000}
  - {id: s3, server: S2, device: R1, start_s: 1.8, bytes: 30000}
  - {id: s4, server: S2, device: R1, start_s: 2.2, bytes: 30000}
  - {id: s5, server: S2, device: R1, start_s: 2.6, bytes: 30000}
  - {id: s6, server: S2, device: R1, start_s: 3.0, bytes: 30000}
  - {id: s7, server: S2, device: R1, start_s: 3.4, bytes: 30000}
  - {id: s8, server: S2, device: R1, start_s: 3.8, bytes: 30000}
queue: {mode: shared, limit_bytes: 0, limit_packets: 12}
aqm: {kind: spmaf}
tcp: {spm_marking: {enabled: MARK, cwnd_below: 11}}
# without the marking a short flow may lose its first window to the full queue and get
# nothing in the 5 s: what SPM-AF is for, named in the warnings, not a failed run
analysis: {zero_goodput: warning}
"""


def _dscps_of_data(pcap_path: Path) -> list[int]:
    """The DSCP of every TCP data packet in a capture, in order."""
    from scapy.all import IP, TCP, rdpcap  # noqa: PLC0415 -- slow import
    out = []
    for p in rdpcap(str(pcap_path)):
        if p.haslayer(IP) and p.haslayer(TCP) and \
                p[IP].len - p[IP].ihl * 4 - p[TCP].dataofs * 4 > 0:
            out.append(p[IP].tos >> 2)
    return out


def _first_flights(pcap_path: Path, server_addr: str) -> list[int]:
    """Per iperf3 flow of the server in the capture (one receiver port each), on its data
    connection (the one of the two carrying more bytes; the other is iperf3's control
    connection): the full-size data packets sent before the first one was acknowledged."""
    df = pcap.read_tcp(pcap_path).sort_values("t_s", kind="stable")
    data = df[(df["payload"] > 0) & (df["src"] == server_addr)]
    out = []
    for _port, flow in data.groupby("dport"):
        sport = flow.groupby("sport")["payload"].sum().idxmax()
        g = flow[(flow["sport"] == sport) & (flow["payload"] >= 1000)]  # after the cookie
        src, dport = server_addr, int(g["dport"].iloc[0])
        first_seq = int(g["seq"].iloc[0])
        acks = df[(df["dst"] == src) & (df["dport"] == sport) & (df["sport"] == dport)
                  & (df["payload"] == 0)
                  & (((df["ack"] - first_seq) % (1 << 32)).between(1, 1 << 30))]
        t_ack = acks["t_s"].min()
        out.append(int((g["t_s"] < t_ack).sum()))
    return out


@pytest.mark.parametrize("marking", [True, False])
def test_spmaf_evicts_for_the_packets_the_senders_marked_from_their_cwnd(tmp_path, marking):
    """A long flow keeps a shared 12-packet SPM-AF queue full; eight short flows start one
    after the other, each with Linux's initial window of 10 segments, below the threshold
    of 11 set here while the long flow's cwnd stays mostly above it (with the paper's 4 and
    an initial window of 1 or 2 too few marked packets meet a full queue in a short test).
    The marker in S2 writes DSCP 3 into their first windows, the apd reads it as high
    priority and SPM-AF evicts low-priority packets for them (Wu, Gong & Williamson, §6.1).
    Without the marking nothing is marked and nothing is evicted; that run also sets
    tcp.initcwnd 2, and the short flows' first flights are then 2 segments."""
    require_real_testbed()
    require((paths.build_dir() / "host/spm_mark/oppsched-spm-mark").is_file(),
            "oppsched-spm-mark is not built")
    out, s = _e2e(tmp_path, SPM.replace("MARK", "true" if marking else "false"),
                  [] if marking else ["tcp.initcwnd=2"])
    assert all(f["error"] is None for f in s["flows"]), s["flows"]
    run = json.loads((out / "run.json").read_text())
    apd_conf = yaml.safe_load((out / "apd.yaml").read_text())
    drops = json.loads((out / "apd.stats.json").read_text())["core"]["queue_drops"]
    short = _dscps_of_data(out / "wired.S2.pcap")
    assert len(short) > 50
    if marking:
        assert apd_conf["aqm"]["priority_dscp"] == 3
        assert len(run["spm_marking"]) == 2 and "DSCP 3" in run["spm_marking"][1]
        assert short[0] == 3, "the short flow's first data packet is not marked"
        assert set(short) == {0, 3}
        assert drops["evicted_low_priority"] > 0, drops
    else:
        assert apd_conf["aqm"]["priority_dscp"] is None and "spm_marking" not in run
        assert set(short) == {0}
        assert drops["evicted_low_priority"] == 0, drops
        # tcp.initcwnd 2 (the kernel's default is 10): a retransmission of a packet the full
        # queue dropped may add one to a flight
        ff = _first_flights(out / "wired.S2.pcap", "10.1.1.1")
        assert len(ff) == 8 and ff.count(2) >= 6 and max(ff) <= 4, ff


def test_packet_jitter_is_the_gaps_between_a_users_departures_and_sojourn_is_per_packet(tmp_path):
    # Srinivasan & Baras, §V-B: user 0's packets depart (are delivered) at 0, 1.0, 1.5 and
    # 3.5 s: gaps 1000, 500, 2000 ms; they waited 100, 200, 300 and 400 ms in the queue.
    # User 1 has one departure only: no gap. A `drop` is not a departure.
    from oppsched.experiments.testbed.daemonsummary import _queue_delays_from_packets
    rows = ["t_ns,event,user,packet_id,bytes,reason"]
    s = 10**9
    for pid, (enq, deq, dep) in enumerate([(0.0, 0.1, 0.0), (0.5, 0.7, 1.0), (1.0, 1.3, 1.5),
                                           (2.0, 2.4, 3.5)]):
        rows += [f"{int(enq * s)},enqueue,0,{pid},500,", f"{int(deq * s)},dequeue,0,{pid},500,",
                 f"{int((dep + 0.01) * s)},deliver,0,{pid},500,"]
    rows += [f"{2 * s},enqueue,1,9,500,", f"{3 * s},dequeue,1,9,500,",
             f"{4 * s},deliver,1,9,500,", f"{5 * s},drop,0,10,500,queue"]
    (tmp_path / "packets.csv").write_text("\n".join(rows) + "\n")
    got = _queue_delays_from_packets(tmp_path, 2)
    u0 = got[0]
    assert u0["packet_gap_ms_mean"] == pytest.approx((1000 + 500 + 2000) / 3, abs=1e-3)
    assert u0["packet_gap_ms_max"] == pytest.approx(2000, abs=1e-3)
    assert u0["packet_gap_ms_min"] == pytest.approx(500, abs=1e-3)
    assert u0["packets_departed"] == 4
    assert u0["sojourn_ms_mean"] == pytest.approx(250, abs=1e-3)
    assert u0["sojourn_ms_max"] == pytest.approx(400, abs=1e-3)
    assert "packet_gap_ms_mean" not in got[1] and got[1]["sojourn_ms_mean"] == pytest.approx(1000)
    # A window keeps only what happened inside it: the last departure (3.51 s) is cut.
    got = _queue_delays_from_packets(tmp_path, 2, window=(0, int(3.0 * s)))
    assert got[0]["packets_departed"] == 3
