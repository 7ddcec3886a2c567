"""oppsched-apd with a shared medium (medium.mode node_fair, host/include/oppsched/medium.h):
upstream packets wait in the station's uplink queue until the medium grants it an uplink
slot, then reach the AP's TUN; medium.csv and the stats show the uplink slots. The bed,
fake PHY and fake client of test_apd.py."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from test_apd import (AP_ADDR, APD, UE0_ADDR, FakeClient, FakePhy, bed, ipv4_udp,  # noqa: F401
                      stats_after_usr1, zmq)

pytestmark = [pytest.mark.skipif(APD is None, reason="oppsched-apd is not built")]


def test_node_fair_holds_upstream_packets_until_the_stations_uplink_slot(bed):
    pd = pytest.importorskip("pandas")
    cfg = bed.config(medium={"mode": "node_fair", "station_buffer_packets": 4,
                             "uplink_mean_snr_db": 40.0, "uplink_doppler_hz": 0.0})
    cfg["traces"]["medium"] = str(bed.dir / "medium.csv")
    p = bed.start(cfg)
    ctx = zmq.Context()
    try:
        client = FakeClient(ctx, bed)
        time.sleep(0.2)
        for i in range(6):  # the buffer holds 4: the rest are dropped
            client.send("uplink_packet", {"user": 0, "packet": ipv4_udp(
                UE0_ADDR, AP_ADDR, 4000, 5000, b"uplink-%d" % i)})
        # No slot yet: nothing crosses.
        s = stats_after_usr1(p, Path(cfg["traces"]["stats"]),
                             lambda s: s["medium"]["up"]["ue0"]["packets_in"] == 6)
        assert s["tun"]["tx_packets"] == 0
        assert s["medium"]["up"]["ue0"]["queue_packets"] == 4
        assert s["medium"]["up"]["ue0"]["dropped_full"] == 2
        # The PHY asks for slots: station ue0 is the only contender, its first slot is
        # uplink (an empty downlink grant), and its packets reach the TUN. (The kernel's
        # answers to them, ICMP port unreachable for ue0, make the AP contend afterwards.)
        phy = FakePhy(ctx, bed)
        assert phy.request(0)["empty"]
        for slot in range(1, 10):
            phy.request(slot)
            time.sleep(0.003)
        s = stats_after_usr1(p, Path(cfg["traces"]["stats"]),
                             lambda s: s["medium"]["up"]["ue0"]["delivered"] == 4)
        assert s["tun"]["tx_packets"] == 4
        assert s["medium"]["up"]["ue0"]["tbs_ok"] >= 1
        assert s["medium"]["up"]["ue1"]["slots"] == 0  # no backlog, no slot
        phy.close()
    finally:
        ctx.destroy(linger=0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    stats = json.loads(Path(cfg["traces"]["stats"]).read_text())
    assert stats["medium"]["mode"] == "node_fair"
    m = pd.read_csv(cfg["traces"]["medium"])
    assert list(m.columns[:12]) == ["slot", "t_ns", "direction", "station", "contenders", "mcs",
                                    "tb_bytes", "retx", "outcome", "feedback", "cqi_db",
                                    "snr_db"]
    assert {"upq.ue0", "upq.ue1"} <= set(m.columns)
    up = m[m.direction == "up"]
    assert len(up) >= 1 and (up.station == 0).all()
    assert (up.outcome == "ack").all() and (up.feedback == "ap").all()
    assert (m[m.direction == "down"].feedback == "side_channel").all()
    # The uplink slots have no row in slots.csv (the downlink was silent in them).
    slots = pd.read_csv(cfg["traces"]["slots"])
    assert not set(slots.slot) & set(up.slot)


def test_medium_none_writes_upstream_packets_at_once(bed):
    cfg = bed.config(medium={"mode": "none"})
    p = bed.start(cfg)
    ctx = zmq.Context()
    try:
        client = FakeClient(ctx, bed)
        time.sleep(0.2)
        client.send("uplink_packet", {"user": 0, "packet": ipv4_udp(
            UE0_ADDR, AP_ADDR, 4000, 5002, b"no-medium")})
        # Written to the TUN at once, though no slot was ever requested.
        s = stats_after_usr1(p, Path(cfg["traces"]["stats"]),
                             lambda s: s["tun"]["tx_packets"] == 1)
        assert s["tun"]["tx_packets"] == 1
    finally:
        ctx.destroy(linger=0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    assert "medium" not in json.loads(Path(cfg["traces"]["stats"]).read_text())


def test_invalid_medium_mode_is_a_config_error_naming_the_key(bed):
    cfg = bed.config(medium={"mode": "dcf"})
    path = bed.write(cfg)
    r = subprocess.run([str(APD), "--config", str(path), "--check"], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 2
    assert "medium.mode" in r.stderr and "dcf" in r.stderr


def test_node_fair_decides_again_after_the_phys_slot_numbers_jump_back(bed):
    cfg = bed.config(medium={"mode": "node_fair", "uplink_mean_snr_db": 40.0,
                             "uplink_doppler_hz": 0.0})
    p = bed.start(cfg)
    stats = Path(cfg["traces"]["stats"])
    ctx = zmq.Context()
    try:
        client = FakeClient(ctx, bed)
        phy = FakePhy(ctx, bed)
        for want in (1, 2):
            client.send("uplink_packet", {"user": 0, "packet": ipv4_udp(
                UE0_ADDR, AP_ADDR, 4000, 5003, b"jump-%d" % want)})
            stats_after_usr1(p, stats,
                             lambda s, w=want: s["medium"]["up"]["ue0"]["packets_in"] == w)
            # Slot 5000 first; then slots from 10: a jump back by more than
            # restart_backjump_slots (1000), as after a PHY restart. The medium decides those
            # slots again and grants the station (the AP may take every other one: the
            # kernel answers the first packet with an ICMP port unreachable for ue0).
            if want == 1:
                assert phy.request(5000)["empty"]  # the station's: the AP has nothing yet
            else:
                for slot in range(10, 14):
                    phy.request(slot)
            s = stats_after_usr1(p, stats,
                                 lambda s, w=want: s["medium"]["up"]["ue0"]["delivered"] == w)
            assert s["medium"]["up"]["ue0"]["delivered"] == want
        phy.close()
    finally:
        ctx.destroy(linger=0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
