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

from oppsched import mac

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


def _uplink_rx_config(bed):
    cfg = bed.config(medium={"mode": "node_fair", "uplink_decode": "phy"})
    for u in cfg["users"]:
        u["phy_uplink_rx"] = bed.ep(f"uprx_{u['id']}")
    cfg["traces"]["medium"] = str(bed.dir / "medium.csv")
    return cfg


def test_uplink_decode_phy_sends_the_station_tb_in_the_grant_and_takes_the_receivers_result(bed):
    """medium.uplink_decode phy: the uplink slot's grant carries the station's TB (flag
    uplink), and what the AP's receiver reports for that slot decides: its decoded bytes reach
    the TUN, medium.csv says decoded_by phy."""
    pd = pytest.importorskip("pandas")
    cfg = _uplink_rx_config(bed)
    p = bed.start(cfg)
    stats = Path(cfg["traces"]["stats"])
    ctx = zmq.Context()
    try:
        client = FakeClient(ctx, bed)
        rx = ctx.socket(zmq.PUSH)  # the sample PHY's AP-side receiver for station ue0
        rx.setsockopt(zmq.LINGER, 0)
        rx.connect(bed.ep("uprx_0"))
        phy = FakePhy(ctx, bed)
        client.send("uplink_packet", {"user": 0, "packet": ipv4_udp(
            UE0_ADDR, AP_ADDR, 4000, 5004, b"through-the-phy")})
        stats_after_usr1(p, stats, lambda s: s["medium"]["up"]["ue0"]["packets_in"] == 1)
        # Nothing measured yet: the station does not contend.
        assert phy.request(1)["empty"]
        # The receiver's report of slot 1 (the sounding: addressed to nobody): 30 dB.
        rx.send(mac.wire.encode("rx_indication", 0, {
            "slot": 1, "user": mac.wire.USER_NOBODY, "header_ok": True, "snr_db": 30.0}))
        stats_after_usr1(p, stats, lambda s: s["medium"]["up"]["ue0"]["rx_reports"] == 1)
        g = phy.request(2)
        assert g["uplink"] and not g["empty"] and g["user"] == 0 and g["tb"]
        # CRC failed: a NACK, and the same TB again in the station's next slot.
        rx.send(mac.wire.encode("rx_indication", 1, {
            "slot": 2, "user": 0, "mcs": g["mcs"], "harq_pid": g["harq_pid"], "ndi": g["ndi"],
            "rv": g["rv"], "header_ok": True, "addressed": True, "crc_ok": False,
            "snr_db": 30.0}))
        stats_after_usr1(p, stats, lambda s: s["medium"]["up"]["ue0"]["tbs_failed"] == 1)
        assert s_tun(p, stats) == 0
        g2 = phy.request(3)
        assert g2["uplink"] and g2["tb"] == g["tb"] and g2["ndi"] == g["ndi"]
        assert g2["rv"] != g["rv"]
        rx.send(mac.wire.encode("rx_indication", 2, {
            "slot": 3, "user": 0, "mcs": g2["mcs"], "harq_pid": g2["harq_pid"],
            "ndi": g2["ndi"], "rv": g2["rv"], "header_ok": True, "addressed": True,
            "crc_ok": True, "snr_db": 29.0, "tb": g2["tb"]}))
        s = stats_after_usr1(p, stats, lambda s: s["tun"]["tx_packets"] == 1)
        assert s["medium"]["up"]["ue0"]["delivered"] == 1
        # A report addressed to another station on ue0's endpoint is dropped and counted.
        rx.send(mac.wire.encode("rx_indication", 3, {
            "slot": 4, "user": 1, "header_ok": True, "addressed": True, "snr_db": 30.0}))
        s = stats_after_usr1(p, stats, lambda s: s["malformed"]["phy_uplink_rx"] == 1)
        phy.close()
        rx.close()
    finally:
        ctx.destroy(linger=0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    m = pd.read_csv(cfg["traces"]["medium"])
    up = m[m.direction == "up"]
    assert list(up.outcome) == ["nack", "ack"]
    assert (up.decoded_by == "phy").all()
    assert list(up.snr_db) == [30.0, 29.0]  # what the AP's receiver measured


def s_tun(p, stats_path):
    return stats_after_usr1(p, stats_path, lambda s: True)["tun"]["tx_packets"]


def test_uplink_decode_phy_without_the_receivers_endpoints_is_a_config_error(bed):
    cfg = _uplink_rx_config(bed)
    del cfg["users"][1]["phy_uplink_rx"]
    path = bed.write(cfg)
    r = subprocess.run([str(APD), "--config", str(path), "--check"], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 2
    assert "medium.uplink_decode" in r.stderr and "phy_uplink_rx" in r.stderr


# ----------------------------------------------------------------------------------------
# medium.station_queue client: the station holds its queue, reports its buffer, gets grants


def _station_queue_config(bed):
    cfg = bed.config(medium={"mode": "node_fair", "station_queue": "client",
                             "uplink_mean_snr_db": 40.0, "uplink_doppler_hz": 0.0})
    for u in cfg["users"]:
        u["grants"] = bed.ep(f"grants_{u['id']}")
    cfg["traces"]["medium"] = str(bed.dir / "medium.csv")
    return cfg


def _start_with_station(bed, cfg):
    """The apd, and the test as station 0 (its grants endpoint: the apd connects to it),
    its client's uplink and the PHY."""
    p = bed.start(cfg)
    ctx = zmq.Context()
    station = ctx.socket(zmq.PULL)
    station.setsockopt(zmq.LINGER, 0)
    station.bind(bed.ep("grants_0"))
    return p, ctx, station, FakeClient(ctx, bed), FakePhy(ctx, bed)


def test_station_queue_client_grants_a_reporting_station_and_delivers_its_tb(bed):
    """The station (here the test) reports a buffered packet; the apd grants it the next
    slot on its grants endpoint (the PHY gets an empty slot); the station's TB, sent before
    the slot's air time, is decoded and its packet reaches the TUN after the slot."""
    cfg = _station_queue_config(bed)
    stats = Path(cfg["traces"]["stats"])
    p, ctx, station, client, phy = _start_with_station(bed, cfg)
    try:
        pkt = ipv4_udp(UE0_ADDR, AP_ADDR, 4000, 5000, b"from-the-station")
        assert phy.request(0)["empty"]  # nothing reported: the AP's slot
        assert not station.poll(200)
        client.send("buffer_status", {"user": 0, "last_grant_slot": 0,
                                      "buffer_bytes": len(pkt), "buffer_packets": 1})
        stats_after_usr1(p, stats, lambda s: s["medium"]["up"]["ue0"]["status_reports"] == 1)
        g = phy.request(1, air_ahead_ns=300_000_000)  # the slot begins in 300 ms
        assert g["empty"] and not g["uplink"]  # the abstract PHY sends nothing down
        assert station.poll(2000)
        _, kind, ug = mac.wire.decode(station.recv())
        assert kind == "uplink_grant" and ug["user"] == 0 and ug["slot"] == 1
        assert ug["tb_bytes"] >= len(pkt) + 28
        tb = mac.serialize_pdu(user=0, seq=0, tb_bytes=ug["tb_bytes"], segments=[
            {"packet_seq": 0, "data": pkt}])
        client.send("uplink_tb", {"user": 0, "slot": 1, "harq_pid": ug["harq_pid"],
                                  "ndi": ug["ndi"], "buffer_bytes": 0, "buffer_packets": 0,
                                  "tb": tb})
        time.sleep(0.1)
        s = stats_after_usr1(p, stats, lambda s: s["medium"]["up"]["ue0"]["tbs_ok"] == 1)
        assert s["tun"]["tx_packets"] == 0  # held until the slot's air time has ended
        s = stats_after_usr1(p, stats, lambda s: s["tun"]["tx_packets"] == 1)
        assert s["medium"]["up"]["ue0"]["delivered"] == 1
        assert s["medium"]["up"]["ue0"]["grants"] == 1
        assert s["medium"]["up"]["ue0"]["reported_bytes"] == 0
        # the report said empty: the next slots are the AP's again
        for slot in range(2, 6):
            phy.request(slot, air_ahead_ns=300_000_000)
        assert not station.poll(200)
        # a TB no grant waits for, and a packet sent the old way: counted, not delivered
        client.send("uplink_tb", {"user": 0, "slot": 9, "harq_pid": 0, "ndi": 1,
                                  "buffer_bytes": 0, "buffer_packets": 0, "tb": tb})
        client.send("uplink_packet", {"user": 0, "packet": pkt})
        s = stats_after_usr1(p, stats, lambda s: s["medium"]["up"]["ue0"]["tbs_unexpected"] == 1
                             and s["malformed"]["uplink"] == 1)
        assert s["tun"]["tx_packets"] == 1
        phy.close()
    finally:
        ctx.destroy(linger=0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0


def test_a_station_tb_after_its_slot_began_is_late_and_its_grant_comes_again(bed):
    cfg = _station_queue_config(bed)
    cfg["medium"]["max_transmissions"] = 3
    stats = Path(cfg["traces"]["stats"])
    p, ctx, station, client, phy = _start_with_station(bed, cfg)
    try:
        client.send("buffer_status", {"user": 0, "last_grant_slot": 0, "buffer_bytes": 100,
                                      "buffer_packets": 1})
        stats_after_usr1(p, stats, lambda s: s["medium"]["up"]["ue0"]["status_reports"] == 1)
        phy.request(1)  # its air time is now: any TB comes too late
        assert station.poll(2000)
        _, _, ug = mac.wire.decode(station.recv())
        tb = mac.serialize_pdu(user=0, seq=0, tb_bytes=ug["tb_bytes"], segments=[])
        client.send("uplink_tb", {"user": 0, "slot": 1, "harq_pid": ug["harq_pid"],
                                  "ndi": ug["ndi"], "buffer_bytes": 100, "buffer_packets": 1,
                                  "tb": tb})
        s = stats_after_usr1(p, stats, lambda s: s["medium"]["up"]["ue0"]["tbs_late"] == 1)
        assert s["medium"]["up"]["ue0"]["tbs_ok"] == 0
        # the next uplink slot repeats the grant: same process and NDI, the next RV
        for slot in range(2, 8):
            phy.request(slot)
            if station.poll(300):
                break
        _, _, again = mac.wire.decode(station.recv())
        assert (again["harq_pid"], again["ndi"], again["tb_bytes"]) == \
            (ug["harq_pid"], ug["ndi"], ug["tb_bytes"])
        assert again["rv"] != ug["rv"]
        phy.close()
    finally:
        ctx.destroy(linger=0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0


def test_station_queue_client_without_a_stations_grants_endpoint_names_it(bed):
    cfg = _station_queue_config(bed)
    del cfg["users"][1]["grants"]
    r = subprocess.run([str(APD), "--config", str(bed.write(cfg))], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode != 0
    assert "medium.station_queue" in r.stderr and "users[id 1].grants" in r.stderr, r.stderr
