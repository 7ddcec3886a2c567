"""flows[].mss_bytes and flows[].initcwnd: the schema's checks, the routes and iperf3
arguments they become, and a short real run whose captures show both at work."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from helpers import (BASE, cfg_of, error_of, netns_prefix, require_real_testbed,
                     write_experiment)

from oppsched.analysis import pcap
from oppsched.experiments.testbed.schema import mss_option
from oppsched.experiments.testbed.topology import (default_route_commands, flow_plans,
                                                   flow_route_commands)
from oppsched.run.runner import run_experiment
from oppsched.testbed.wired import Node

TWO = """
experiment: t
kind: testbed
duration_s: 4
devices:
  - {name: R1}
  - {name: R2}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1, mss_bytes: 1000, initcwnd: 4}
  - {id: f2, server: S1, device: R1, mss_bytes: MSS2, initcwnd: 4}
"""


@pytest.mark.parametrize("key, value, words", [
    ("mss_bytes", 50, ["flows[0].mss_bytes: 50", "below the minimum 76"]),
    ("mss_bytes", 40000, ["flows[0].mss_bytes: 40000", "above the maximum"]),
    ("mss_bytes", "big", ["flows[0].mss_bytes: 'big'"]),
    ("initcwnd", 0, ["flows[0].initcwnd: 0", "below the minimum 1"]),
    ("initcwnd", 1001, ["flows[0].initcwnd: 1001", "above the maximum 1000"]),
])
def test_out_of_range_flow_tcp_settings_are_refused_naming_key_and_value(key, value, words):
    msg = error_of(BASE, [f"flows[0].{key}={value}"])
    for w in words:
        assert w in msg, msg


def test_an_mss_the_mtu_cannot_carry_is_refused_with_the_largest_that_fits():
    # 1500 - 40 (IPv4 and TCP headers) - 12 (timestamps) = 1448; IPv6: 20 bytes less
    msg = error_of(BASE, ["flows[0].mss_bytes=1449"])
    assert "flows[0].mss_bytes: 1449" in msg and "topology.mtu (1500)" in msg \
        and "at most 1448" in msg, msg
    assert cfg_of(BASE, ["flows[0].mss_bytes=1448"])["flows"][0]["mss_bytes"] == 1448
    msg = error_of(BASE, ["flows[0].mss_bytes=1429", "flows[0].family=ipv6"])
    assert "at most 1428" in msg, msg


def test_without_timestamps_the_mss_is_the_payload_and_88_is_the_floor():
    cfg = cfg_of(BASE, ["flows[0].mss_bytes=1000"])
    assert mss_option(cfg, cfg["flows"][0]) == 1012  # the 12 bytes of the timestamp option
    cfg = cfg_of(BASE, ["flows[0].mss_bytes=1000", "devices[0].tcp.timestamps=false"])
    assert mss_option(cfg, cfg["flows"][0]) == 1000  # one end without: not negotiated
    msg = error_of(BASE, ["flows[0].mss_bytes=80", "tcp.timestamps=false"])
    assert "flows[0].mss_bytes: 80" in msg and "smallest MSS (88 bytes): at least 88" in msg
    assert cfg_of(BASE, ["flows[0].mss_bytes=80"])["flows"][0]["mss_bytes"] == 80


def test_flows_sharing_a_route_must_agree_and_the_error_names_both():
    msg = error_of(TWO.replace("MSS2", "1200"))
    assert "flows[1].mss_bytes: 1200 differs from flows[0].mss_bytes (1000)" in msg, msg
    assert "'f1' and 'f2'" in msg and "'S1' and 'R1'" in msg, msg
    # a flow leaving it null would get the other's window: refused as well
    msg = error_of(TWO.replace("MSS2", "1000"), ["flows[0].initcwnd=null"])
    assert "flows[1].initcwnd: 4 differs from flows[0].initcwnd (None)" in msg, msg
    # another device: its own routes, so the values may differ
    cfg = cfg_of(TWO.replace("MSS2", "1200").replace("device: R1, mss_bytes: 1200",
                                                     "device: R2, mss_bytes: 1200"))
    assert [f["mss_bytes"] for f in cfg["flows"]] == [1000, 1200]


def test_wrc_flows_refuse_tcp_settings():
    text = BASE.replace("device: R1}", "device: R1, transport: wrc}")
    msg = error_of(text, ["flows[0].mss_bytes=1000"])
    assert "flows[0].mss_bytes: 1000 with transport wrc" in msg, msg
    msg = error_of(text, ["flows[0].initcwnd=2"])
    assert "flows[0].initcwnd: 2 with transport wrc" in msg, msg


def _nodes():
    """Nodes addressed as the Testbed addresses them (namespaces are not needed)."""
    srv = Node("S1", NS(name="s"), "eth0", "10.1.0.1", "fd00:1::1", "10.1.0.254",
               "fd00:1::fe")
    r1 = Node("R1", NS(name="c1"), "radio0", "10.2.0.1", "fd00:2:0::1", None, None)
    r2 = Node("R2", NS(name="c2"), "radio0", "10.2.1.1", "fd00:2:1::1", None, None)
    return [r1, r2], [srv]


def test_routes_carry_the_mss_at_both_ends_and_the_window_with_tcp_initcwnd_as_fallback():
    cfg = cfg_of(TWO.replace("MSS2", "1200").replace("device: R1, mss_bytes: 1200, initcwnd: 4",
                                                     "device: R2, family: ipv6, "
                                                     "mss_bytes: 1200"),
                 ["tcp.initcwnd=2"])
    clients, servers = _nodes()
    cmds = [(n.name, a) for n, a in flow_route_commands(cfg, clients, servers)]
    assert cmds == [
        ("S1", ["route", "add", "10.2.0.1/32", "via", "10.1.0.254", "dev", "eth0",
                "advmss", "1012", "initcwnd", "4"]),
        ("R1", ["route", "add", "10.1.0.1/32", "dev", "radio0", "advmss", "1012",
                "initcwnd", "4"]),
        # f2 sets no initcwnd: the server keeps tcp.initcwnd, the device the kernel's
        ("S1", ["-6", "route", "add", "fd00:2:1::1/128", "via", "fd00:1::fe", "dev", "eth0",
                "advmss", "1212", "initcwnd", "2"]),
        ("R2", ["-6", "route", "add", "fd00:1::1/128", "dev", "radio0", "advmss", "1212"]),
    ]
    plans = flow_plans(cfg, clients, servers)
    assert [p.mss for p in plans] == [1012, 1212]
    argv = plans[0].sender_argv(Path("/run"))
    assert argv[argv.index("-M") + 1] == "1012"
    cfg = cfg_of(BASE)
    assert flow_route_commands(cfg, clients, servers) == []
    assert "-M" not in flow_plans(cfg, clients, servers)[0].sender_argv(Path("/run"))


RUN = """
experiment: flowtcp
kind: testbed
duration_s: 3
devices:
  - {name: R1, channel: {mean_snr_db: 15.0}}
  - {name: R2, channel: {mean_snr_db: 15.0}}
servers:
  - {name: S1, rtt_ms: 40}
flows:
  - {id: small, server: S1, device: R1, mss_bytes: 1000, initcwnd: 4}
  - {id: up, server: S1, device: R1, direction: up, mss_bytes: 1000, initcwnd: 4}
  - {id: plain, server: S1, device: R2, family: ipv6}
queue: {limit_bytes: 400000}
"""


def _first_flight(df, src: str, port: int, mss: int) -> int:
    """Full-size data segments src sent on the flow's data connection (of iperf3's two to
    `port`, the one with more bytes) before the first acknowledgement of its data came,
    each counted once: when that acknowledgement is late, the retransmission timer resends
    the first segment (a make test run had its first ACK after 2.26 s, and 0 resent at
    0.28, 0.82 and 1.88 s), and a resent segment is not more of the first flight."""
    to_port = df[(df["src"] == src) & (df["payload"] > 0) & (df["dport"] == port)]
    sport = int(to_port.groupby("sport")["payload"].sum().idxmax())
    g = to_port[(to_port["sport"] == sport) & (to_port["payload"] == mss)]
    first_seq = int(g["seq"].iloc[0])
    acks = df[(df["dst"] == src) & (df["dport"] == sport) & (df["sport"] == port)
              & (df["payload"] == 0)
              & (((df["ack"] - first_seq) % (1 << 32)).between(1, 1 << 30))]
    return int(g[g["t_s"] < acks["t_s"].min()]["seq"].nunique())


def test_a_run_sends_segments_of_the_flow_mss_and_a_first_flight_of_its_initcwnd(tmp_path):
    """Down and up between S1 and R1 with mss_bytes 1000 and initcwnd 4; a flow to R2 with
    neither keeps the path MTU's MSS (1500 - 60 - 12 over IPv6) and Linux's 10. The wired
    capture at S1 and the TUN capture at R1 carry every segment as sent (no offloads)."""
    require_real_testbed()
    exp = write_experiment(tmp_path, RUN)
    with netns_prefix():
        (run,) = run_experiment(exp, tmp_path / "out", [])
    s = run[1]
    assert all(f["error"] is None and f["goodput_bps"] for f in s["flows"]), s["flows"]
    out = tmp_path / "out"
    wired = pcap.read_tcp(out / "wired.S1.pcap").sort_values("t_s", kind="stable")
    tun = pcap.read_tcp(out / "client.R1.pcap").sort_values("t_s", kind="stable")
    ports = {f["id"]: f["port"] for f in json.loads((out / "run.json").read_text())["flows"]}
    s1, r1 = "10.1.0.1", "10.2.0.1"
    assert set(wired["src"]) >= {s1, r1}, set(wired["src"])
    down = wired[(wired["src"] == s1) & (wired["dport"] == ports["small"])]
    up = tun[(tun["src"] == r1) & (tun["dport"] == ports["up"])]
    for d in (down, up):
        assert d["payload"].max() == 1000, d["payload"].describe()
        assert (d["payload"] == 1000).sum() > 50
        # both ends advertise it in their SYNs: 1000 + 12 bytes of timestamps
        syns = wired[(wired["mss"] > 0) & ((wired["dport"] == d["dport"].iloc[0])
                                          | (wired["sport"] == d["dport"].iloc[0]))]
        assert set(syns["mss"]) == {1012}, syns[["src", "mss"]]
    plain = wired[(wired["payload"] > 0) & (wired["dport"] == ports["plain"])]
    assert plain["payload"].max() == 1500 - 60 - 12
    assert _first_flight(wired, s1, ports["small"], 1000) == 4
    assert _first_flight(tun, r1, ports["up"], 1000) == 4
    assert _first_flight(wired, plain["src"].iloc[0], ports["plain"], 1428) == 10


def test_quickack_goes_on_every_route_with_the_servers_initcwnd_in_the_same_command():
    clients, servers = _nodes()
    cfg = cfg_of(BASE, ["tcp.quickack=true", "tcp.initcwnd=4"])
    assert [(n.name, a) for n, a in default_route_commands(cfg, clients, servers)] == [
        ("S1", ["route", "change", "default", "via", "10.1.0.254", "dev", "eth0",
                "initcwnd", "4", "quickack", "1"]),
        ("S1", ["-6", "route", "change", "default", "via", "fd00:1::fe", "dev", "eth0",
                "initcwnd", "4", "quickack", "1"]),
        ("R1", ["route", "change", "default", "dev", "radio0", "quickack", "1"]),
        ("R1", ["-6", "route", "change", "default", "dev", "radio0", "quickack", "1"]),
        ("R2", ["route", "change", "default", "dev", "radio0", "quickack", "1"]),
        ("R2", ["-6", "route", "change", "default", "dev", "radio0", "quickack", "1"]),
    ]
    # neither: the default routes stay as they are
    assert default_route_commands(cfg_of(BASE), clients, servers) == []
    # a flow's host routes carry it as well
    cfg = cfg_of(TWO.replace("MSS2", "1000"), ["tcp.quickack=true"])
    assert all(a[-2:] == ["quickack", "1"] for _, a in flow_route_commands(cfg, clients, servers))
    assert "tcp.quickack: 3" in error_of(BASE, ["tcp.quickack=3"])


def test_rto_min_goes_on_every_route_beside_quickack():
    clients, servers = _nodes()
    cfg = cfg_of(BASE, ["tcp.quickack=true", "tcp.rto_min_ms=1000"])
    cmds = default_route_commands(cfg, clients, servers)
    assert len(cmds) == 6  # IPv4 and IPv6 of S1, R1, R2
    assert all(a[-4:] == ["quickack", "1", "rto_min", "1000ms"] for _, a in cmds), cmds
    cfg = cfg_of(TWO.replace("MSS2", "1000"), ["tcp.rto_min_ms=1000"])
    routes = flow_route_commands(cfg, clients, servers)
    assert routes and all(a[-2:] == ["rto_min", "1000ms"] for _, a in routes)
    assert "tcp.rto_min_ms: 0" in error_of(BASE, ["tcp.rto_min_ms=0"])


QUICKACK = """
experiment: quickack
kind: testbed
duration_s: 3
devices:
  - {name: R1, channel: {mean_snr_db: 15.0}}
servers:
  - {name: S1, rtt_ms: 40}
flows:
  - {id: f1, server: S1, device: R1}
tcp: {quickack: true}
queue: {limit_bytes: 400000}
"""


def test_with_quickack_the_receiver_acknowledges_every_segment(tmp_path):
    # Linux's delayed ACKs acknowledge about every second segment of a bulk transfer
    # (measured without quickack in this run: 0.5-0.6 pure ACKs per data segment); with
    # quickack every one (ns-2's TCPSink, Andrew & Hanly, CLAMP's simulations).
    require_real_testbed()
    exp = write_experiment(tmp_path, QUICKACK)
    with netns_prefix():
        (run,) = run_experiment(exp, tmp_path / "out", [])
    assert run[1]["flows"][0]["error"] is None
    tun = pcap.read_tcp(tmp_path / "out" / "client.R1.pcap")
    port = json.loads((tmp_path / "out" / "run.json").read_text())["flows"][0]["port"]
    # the iperf3 sender in S1's namespace connects to the receiver's port at R1
    data = tun[(tun["payload"] > 0) & (tun["dst"] == "10.2.0.1") & (tun["dport"] == port)]
    acks = tun[(tun["payload"] == 0) & (tun["src"] == "10.2.0.1") & (tun["sport"] == port)]
    assert len(data) > 200, len(data)
    assert len(acks) > 0.9 * len(data), (len(acks), len(data))
