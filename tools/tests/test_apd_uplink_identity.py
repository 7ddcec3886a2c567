"""oppsched-apd's uplink identity (docs/daemons.md, "Uplink identity"): with users[].uplink
each client has an endpoint of its own, and a cqi_report, harq_feedback or uplink_packet
arriving on it that names another user is dropped and counted (uplink.user_mismatch); the
daemon goes on serving. Uses test_apd's namespace, daemon and fake PHY."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

zmq = pytest.importorskip("zmq")

from oppsched import mac  # noqa: E402
from test_apd import (APD, UE1_ADDR, FakePhy, bed, ipv4_udp,  # noqa: E402,F401
                      stats_after_usr1)
from helpers import needs_root  # noqa: E402

pytestmark = [
    needs_root,
    pytest.mark.skipif(APD is None, reason="oppsched-apd is not built"),
]


def with_own_uplinks(bed) -> dict:
    cfg = bed.config()
    for u in cfg["users"]:
        u["uplink"] = bed.ep(f"uplink_{u['id']}")
    return cfg


def test_a_message_naming_another_user_on_a_clients_own_endpoint_is_dropped_and_counted(bed):
    cfg = with_own_uplinks(bed)
    p = bed.start(cfg)
    ctx = zmq.Context()
    try:
        s = ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.LINGER, 1000)
        s.connect(bed.ep("uplink_0"))  # user 0's endpoint ...
        forged = [  # ... carrying messages that claim to be user 1's
            ("cqi_report", {"user": 1, "slot": 1, "snr_db": 30.0, "cqi": 15}),
            ("harq_feedback", {"user": 1, "slot": 1, "harq_pid": 0, "ack": True}),
            ("uplink_packet", {"user": 1, "packet": ipv4_udp(UE1_ADDR, "10.77.0.1", 1, 2,
                                                             b"forged")}),
        ]
        for seq, (kind, fields) in enumerate(forged):
            s.send(mac.wire.encode(kind, seq, fields))
        # and user 0's own report, which is accepted
        s.send(mac.wire.encode("cqi_report", 3, {"user": 0, "slot": 2, "snr_db": 3.0, "cqi": 4}))
        st = stats_after_usr1(p, Path(cfg["traces"]["stats"]), lambda st: (
            st["zmq"]["uplink"]["ue0"]["received"] == 4))
        assert st["uplink"]["user_mismatch"] == 3
        assert st["seq"]["uplink"]["ue0"]["received"] == 1  # only the genuine one got through
        assert st["seq"]["uplink"]["ue1"]["received"] == 0
        assert st["malformed"]["uplink"] == 0
        # The shared endpoint is unchanged (any user), and the apd still grants slots.
        phy = FakePhy(ctx, bed)
        assert phy.request(5)["slot"] == 5
        phy.close()
        assert p.poll() is None
        s.close()
    finally:
        ctx.destroy(linger=0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    assert "arrived on user 0's endpoint: dropped" in p.stderr.read()


@pytest.mark.parametrize("uplink, expect", [
    ("udp://x", "is not an ipc://, tcp:// or inproc:// endpoint"),
    ("same-as-phy", "is also another endpoint"),
    ("same-as-user0", "is the uplink of another user"),
    ("tcp://0.0.0.0:5999", "binds a non-loopback address"),
])
def test_a_bad_per_user_uplink_is_rejected_naming_the_field(bed, uplink, expect):
    cfg = with_own_uplinks(bed)
    if uplink == "same-as-phy":
        uplink = cfg["endpoints"]["phy_requests"]
    elif uplink == "same-as-user0":
        uplink = cfg["users"][0]["uplink"]
    cfg["users"][1]["uplink"] = uplink
    path = bed.write(cfg)
    r = subprocess.run([str(APD), "--config", str(path), "--check"], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 2, r.stderr
    assert "uplink" in r.stderr and expect in r.stderr, r.stderr
