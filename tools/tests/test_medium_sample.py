"""The shared medium on the sample PHY (docs/architecture.md, "Shared medium"): uplink slots
go through the real blocks (the station's slot_tx output, the uplink channel emulator, the
AP's slot_rx), and the apd's medium uses the receiver's decode results (medium.csv
`decoded_by: phy`). The configuration each process gets, and one short real run: a node-fair
medium with an upstream and a downstream TCP flow."""

import json

import pandas as pd
import pytest

from helpers import (assert_flow_ended, cfg_of, netns_prefix,
                     one_timing_critical_run_at_a_time, require_real_testbed, run_layout,
                     write_experiment)
from oppsched.testbed import daemonconf
from oppsched.run.runner import run_experiment


def test_sample_mode_with_a_medium_sends_uplink_slots_through_the_phy(tmp_path):
    cfg = cfg_of(overrides=["phy.mode=sample", "medium.mode=node_fair",
                            "medium.uplink_mean_snr_db=22", "medium.uplink_doppler_hz=3"])
    lay = run_layout(tmp_path, cfg)
    apd = daemonconf.apd_config(cfg, lay)
    phy = daemonconf.phy_config(cfg, lay)
    assert apd["medium"]["uplink_decode"] == "phy"
    assert phy["uplink"]["enabled"] is True
    assert phy["uplink"]["mean_snr_db"] == 22.0 and phy["uplink"]["doppler_hz"] == 3.0
    # Each station's receiver reports to the apd's endpoint for that station.
    for au, pu in zip(apd["users"], phy["users"]):
        assert au["phy_uplink_rx"] == pu["uplink_rx"]
        assert au["phy_uplink_rx"] not in (au["uplink"], pu["rx"])


def test_abstract_mode_keeps_the_apds_uplink_model_and_none_adds_nothing(tmp_path):
    cfg = cfg_of(overrides=["phy.mode=abstract", "medium.mode=node_fair"])
    lay = run_layout(tmp_path, cfg)
    assert daemonconf.apd_config(cfg, lay)["medium"]["uplink_decode"] == "model"
    assert "uplink" not in daemonconf.phy_config(cfg, lay)
    assert all("phy_uplink_rx" not in u for u in daemonconf.apd_config(cfg, lay)["users"])
    none = cfg_of(overrides=["phy.mode=sample"])  # medium.mode none: as before
    lay = run_layout(tmp_path / "none", none)
    assert "uplink" not in daemonconf.phy_config(none, lay)
    assert "medium" not in daemonconf.apd_config(none, lay)
    assert all("phy_uplink_rx" not in u for u in daemonconf.apd_config(none, lay)["users"])


E2E_UPLINK = """
experiment: medium-sample
kind: testbed
duration_s: 14
seed: 3
phy: {mode: sample, profile: evdo}
devices:
  - {name: R1, channel: {mean_snr_db: 22.0, doppler_hz: 1.0, model: jakes}}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: down, server: S1, device: R1}
  - {id: up, server: S1, device: R1, direction: up}
medium: {mode: node_fair, uplink_mean_snr_db: 22.0, uplink_doppler_hz: 1.0}
queue: {limit_bytes: 60000}
# The apd and the PHY at SCHED_FIFO, as a lab runs them on a shared machine.
topology: {apd_rt_priority: 20}
extra:
  phy: {timing: {rt_priority: 30}}
"""


def test_node_fair_on_the_sample_phy_decodes_uplink_tcp_at_the_ap(tmp_path):
    """One upstream and one downstream TCP flow share a node-fair medium; every uplink TB is
    modulated, faded and decoded by the blocks."""
    require_real_testbed()
    exp = write_experiment(tmp_path, E2E_UPLINK)
    with netns_prefix():
        runs = run_experiment(exp, tmp_path / "out")
    out, s = tmp_path / "out", runs[0][1]
    flows = {f["id"]: f for f in s["flows"]}
    for f in flows.values():
        assert_flow_ended(f)  # or iperf3's report lost, the bytes counted at the socket
    assert flows["up"]["goodput_bps"] > 50e3, flows["up"]  # upstream TCP crosses the uplink
    assert flows["down"]["goodput_bps"] > 50e3, flows["down"]
    t = pd.read_csv(out / "medium.csv")
    up = t[t["direction"] == "up"]
    assert len(up) > 500
    assert set(up["decoded_by"]) == {"phy"}  # the AP's receiver decided every uplink TB
    assert (up["outcome"] == "ack").mean() > 0.8, up["outcome"].value_counts()
    # node_fair is a round robin over each slot's contenders: of two consecutive slots both
    # contended for, each goes to the other side. Over every slot anyone contended for (the
    # summary's share) the flows' backlogs count too: beside the rest of make test the
    # downstream flow's queue ran empty more often (down 0.32-0.38 of them).
    m = t.sort_values("slot")
    both = ((m["contenders"] == 2) & (m["contenders"].shift() == 2)
            & (m["slot"] == m["slot"].shift() + 1))
    assert both.sum() > 300, m["contenders"].value_counts()
    assert (m["direction"] != m["direction"].shift())[both].all()
    share = s["medium"]["slot_share"]
    assert share["down"] + share["up"]["R1"] == pytest.approx(1.0), share
    assert 0.2 < share["down"] < 0.8, share
    phy = json.loads((out / "phy.stats.json").read_text())
    assert phy["uplink"]["tb_sent"] >= len(up[up["outcome"] != "timeout"]) * 0.9
    (rx,) = phy["uplink"]["receivers"]
    assert rx["tb_ok"] >= (up["outcome"] == "ack").sum() * 0.9
    apd = json.loads((out / "apd.stats.json").read_text())
    assert apd["medium"]["up"]["R1"]["delivered"] > 100


def test_stations_that_hold_their_own_queues_send_their_tbs_through_the_blocks(tmp_path):
    """medium.station_queue client on the sample PHY: the station (its client daemon) builds
    its TB when its grant comes, the apd hands it to the PHY as the slot's uplink grant, and
    the AP's receiver decodes it."""
    require_real_testbed()
    exp = write_experiment(tmp_path, E2E_UPLINK)
    with netns_prefix(), one_timing_critical_run_at_a_time():
        runs = run_experiment(exp, tmp_path / "out", ["medium.station_queue=client",
                                                      "topology.client_rt_priority=20"],
                              duration=10.0)
    out, s = tmp_path / "out", runs[0][1]
    flows = {f["id"]: f for f in s["flows"]}
    for f in flows.values():
        assert_flow_ended(f)  # or iperf3's report lost, the bytes counted at the socket
    assert flows["up"]["goodput_bps"] > 50e3, flows["up"]
    assert flows["down"]["goodput_bps"] > 50e3, flows["down"]
    up = pd.read_csv(out / "medium.csv").query("direction == 'up'")
    assert len(up) > 300 and set(up["decoded_by"]) == {"phy"}
    assert (up["outcome"] == "ack").mean() > 0.8, up["outcome"].value_counts()
    apd = json.loads((out / "apd.stats.json").read_text())
    st = json.loads((out / "client.R1.stats.json").read_text())["station"]
    grants = apd["medium"]["up"]["R1"]["grants"]
    assert grants - st["grants"] in (0, 1), (grants, st)
    # the PHY's grant waited for the station's TB; few slots went out without it
    assert apd["medium"].get("grants_without_tb", 0) <= 0.05 * grants + 2, apd["medium"]
    assert s["medium"]["grants_without_tb"] == apd["medium"].get("grants_without_tb", 0)
    phy = json.loads((out / "phy.stats.json").read_text())
    (rx,) = phy["uplink"]["receivers"]
    assert rx["tb_ok"] >= (up["outcome"] == "ack").sum() * 0.9
    assert s["medium"]["uplink"]["R1"]["packets_in"] == st["packets_in"] > 100
