"""flows[].ssthresh and tcp.ssthresh: the schema's checks, the routes they become, the
kernel's TCP metrics cache that carries them to a new connection
(oppsched.testbed.tcp_metrics), and a short real run whose senders start at it."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from types import SimpleNamespace as NS

import pytest
from helpers import BASE, cfg_of, error_of, needs_root, netns_prefix, require_real_testbed, \
    write_experiment

from oppsched.experiments.testbed.topology import flow_route_commands, ssthresh_namespaces
from oppsched.run.runner import run_experiment
from oppsched.testbed import tcp_metrics
from oppsched.testbed.netns import Session
from oppsched.testbed.nsbase import NetnsError
from oppsched.testbed.stale import list_netns
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
  - {name: S2, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1, ssthresh: 20}
  - {id: f2, server: S2, device: R2}
"""


@pytest.mark.parametrize("over, words", [
    (["flows[0].ssthresh=1"], ["flows[0].ssthresh: 1", "below the minimum 2"]),
    (["flows[0].ssthresh=1000001"], ["flows[0].ssthresh: 1000001", "above the maximum"]),
    (["tcp.ssthresh=0"], ["tcp.ssthresh: 0", "below the minimum 2"]),
    (["flows[0].ssthresh=ten"], ["flows[0].ssthresh: 'ten'"]),
])
def test_out_of_range_ssthresh_is_refused_naming_key_and_value(over, words):
    msg = error_of(BASE, over)
    for w in words:
        assert w in msg, msg


def test_bbr_and_wrc_flows_refuse_an_ssthresh():
    msg = error_of(BASE, ["flows[0].ssthresh=20", "tcp.congestion_control=bbr"])
    assert "flows[0].ssthresh: 20 with congestion control bbr" in msg, msg
    msg = error_of(BASE, ["tcp.ssthresh=20", "flows[0].cc=bbr"])
    assert "tcp.ssthresh: 20 with congestion control bbr (flow 'f1')" in msg, msg
    wrc = BASE.replace("device: R1}", "device: R1, transport: wrc}")
    msg = error_of(wrc, ["flows[0].ssthresh=20"])
    assert "flows[0].ssthresh: 20 with transport wrc" in msg, msg


def test_flows_of_one_server_or_device_all_set_an_ssthresh_or_none_does():
    # f1 and f3 share S1: a namespace that caches one ssthresh caches every one
    text = TWO + "  - {id: f3, server: S1, device: R2}\n"
    msg = error_of(text)
    assert "flows[2].ssthresh: null while flows[0] ('f1') sets 20" in msg \
        and "server 'S1'" in msg, msg
    text = TWO + "  - {id: f3, server: S2, device: R1}\n"
    msg = error_of(text)
    assert "flows[2].ssthresh: null while flows[0] ('f1') sets 20" in msg \
        and "device 'R1'" in msg, msg
    # tcp.ssthresh gives it to all of them; flows sharing a route agree on it
    cfg = cfg_of(TWO + "  - {id: f3, server: S1, device: R2}\n",
                 ["tcp.ssthresh=30", "flows[0].ssthresh=null"])
    assert cfg["tcp"]["ssthresh"] == 30
    msg = error_of(TWO + "  - {id: f3, server: S1, device: R1, ssthresh: 25}\n")
    assert "flows[2].ssthresh: 25 differs from flows[0].ssthresh (20)" in msg, msg


def _nodes():
    s1 = Node("S1", NS(name="s1"), "eth0", "10.1.0.1", "fd00:1::1", "10.1.0.254", "fd00:1::fe")
    s2 = Node("S2", NS(name="s2"), "eth0", "10.1.1.1", "fd00:1:1::1", "10.1.1.254",
              "fd00:1:1::fe")
    r1 = Node("R1", NS(name="c1"), "radio0", "10.2.0.1", "fd00:2:0::1", None, None)
    r2 = Node("R2", NS(name="c2"), "radio0", "10.2.1.1", "fd00:2:1::1", None, None)
    return [r1, r2], [s1, s2]


def test_the_ssthresh_is_locked_on_the_routes_of_both_ends_and_their_namespaces_cache_it():
    cfg = cfg_of(TWO)
    clients, servers = _nodes()
    cmds = [(n.name, a) for n, a in flow_route_commands(cfg, clients, servers)]
    assert cmds == [
        ("S1", ["route", "add", "10.2.0.1/32", "via", "10.1.0.254", "dev", "eth0",
                "ssthresh", "lock", "20"]),
        ("R1", ["route", "add", "10.1.0.1/32", "dev", "radio0", "ssthresh", "lock", "20"]),
    ]
    assert [n.name for n in ssthresh_namespaces(cfg, clients, servers)] == ["S1", "R1"]
    cfg = cfg_of(TWO.replace(", ssthresh: 20", ""))
    assert flow_route_commands(cfg, clients, servers) == []
    assert ssthresh_namespaces(cfg, clients, servers) == []


@needs_root
@pytest.mark.parametrize("sysctl, expect", [(0, 20), (1, tcp_metrics.INFINITE_SSTHRESH)])
def test_a_new_connection_starts_at_the_locked_ssthresh_only_when_the_cache_keeps_it(
        sysctl, expect):
    # two namespaces on a veth, the routes locked at 20: with
    # tcp_no_ssthresh_metrics_save 1 (the kernel's default) the lock never reaches a
    # connection, and prime() says so naming both ends
    with Session(prefix="otssh") as s:
        a, b = s.add_netns("a"), s.add_netns("b")
        s.add_veth(a, "va", b, "vb")
        a.ip("addr", "add", "10.9.0.1/24", "dev", "va")
        b.ip("addr", "add", "10.9.0.2/24", "dev", "vb")
        a.ip("route", "add", "10.9.0.2/32", "dev", "va", "ssthresh", "lock", "20")
        b.ip("route", "add", "10.9.0.1/32", "dev", "vb", "ssthresh", "lock", "20")
        for ns in (a, b):  # the testbed's setting, then the ssthresh one under test
            ns.sysctl({"net.ipv4.tcp_no_metrics_save": 0, tcp_metrics.SYSCTL: sysctl})
        if expect == 20:
            got = tcp_metrics.prime(a.name, "10.9.0.1", b.name, "10.9.0.2", False, 20, "reno")
            assert got["server"] == got["client"] == 20, got
        else:
            with pytest.raises(NetnsError, match="start at ssthresh unbounded .server. and "
                                                 "unbounded .client., not 20"):
                tcp_metrics.prime(a.name, "10.9.0.1", b.name, "10.9.0.2", False, 20, "reno",
                                  attempts=2)


RUN = """
experiment: ssthresh
kind: testbed
duration_s: 3
devices:
  - {name: R1, channel: {mean_snr_db: 15.0}}
servers:
  - {name: S1, rtt_ms: 40}
flows:
  - {id: down, server: S1, device: R1, ssthresh: 20}
  - {id: up, server: S1, device: R1, direction: up, ssthresh: 20, family: ipv6}
tcp: {congestion_control: reno}
"""


def _watch_ssthresh(prefix: str, stop: threading.Event, seen: list) -> None:
    """Every 0.1 s: each TCP socket of the run's server namespace, as (its two ports, the
    ssthresh `ss -tin` prints once it is bounded, or None), in the order seen."""
    while not stop.is_set():
        for ns in list_netns():
            if ns.startswith(prefix) and ns.endswith("-s0"):
                out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-tin"],
                                     capture_output=True, text=True).stdout
                lines = out.splitlines()
                for head, info in zip(lines, lines[1:]):
                    ports = re.findall(r":(\d+)\s", head + " ")
                    if head.startswith("ESTAB") and len(ports) == 2:
                        m = re.search(r"(?:^|\s)ssthresh:(\d+)", info)  # not rcv_ssthresh
                        seen.append(({int(p) for p in ports}, m and int(m.group(1))))
        stop.wait(0.1)


@needs_root
def test_a_runs_new_connections_start_at_the_flows_ssthresh_over_the_radio(tmp_path):
    require_real_testbed()
    exp = write_experiment(tmp_path, RUN)
    stop, seen = threading.Event(), []
    with netns_prefix("otsst"):
        watcher = threading.Thread(target=_watch_ssthresh, args=("otsst", stop, seen))
        watcher.start()
        try:
            (run,) = run_experiment(exp, tmp_path / "out", ["capture.pcaps=false"])
        finally:
            stop.set()
            watcher.join()
    assert all(f["error"] is None and f["goodput_bps"] > 0 for f in run[1]["flows"])
    # the flow's own connections (iperf3's, to its port) started at it too: the first
    # ssthresh S1's sockets of the flow showed is 20 (after a loss it would be half a
    # window; without the setting none is shown until then)
    port = next(f["port"] for f in json.loads((tmp_path / "out" / "run.json").read_text())
                ["flows"] if f["id"] == "down")
    mine = [ss for ports, ss in seen if port in ports and ss is not None]
    assert mine and mine[0] == 20, (port, seen[:20])
    rec = json.loads((tmp_path / "out" / "run.json").read_text())["ssthresh"]
    assert [(r["family"], r["flows"]) for r in rec] == [("ipv4", ["down"]), ("ipv6", ["up"])]
    for r in rec:
        assert r["ssthresh"] == r["server_starts"] == r["client_starts"] == 20, r
