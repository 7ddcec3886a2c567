"""The wired path: oppsched-delay (options, accuracy, counters) and the delayed topology.

The end-to-end tests need root and a delayed-link backend: netem where the kernel has it,
else the oppsched-delay binary (found through $OPPSCHED_DELAY_BIN, PATH or build/). Without
root they are skipped; without a backend they are skipped locally and fail under CI (where
`make test` has built the binary, so its absence is a build fault).

Timing assertions: RTTs are measured with kernel receive timestamps (oppsched.testbed.pinger). A
delay stage never releases a frame early, so the minimum RTT is at least the configured
round trip; on a busy 2-core machine single pings can be late by a millisecond or more, so
the median (not the maximum) must lie within 0.5 ms of the configured value.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
import statistics
import subprocess
import sys

import pytest

from oppsched.testbed import links, privsep, stale
from oppsched.testbed.netns import Session
from oppsched.testbed.nsbase import NetnsError, wait_for
from oppsched.testbed.links import LinkSpec, WiredChoice
from oppsched.testbed.wired import ClientSpec, ServerSpec, Testbed, Topology
from helpers import delay_or_netem_available, needs_root, require

TOLERANCE_MS = 0.5


@pytest.fixture
def backend() -> WiredChoice:
    """The delayed-link backend of the end-to-end tests (marked needs_root): netem, else
    oppsched-delay; neither skips locally and fails under CI."""
    require(*delay_or_netem_available())
    return links.choose_backend("auto")


def rtt_summary(rtts):
    got = [r for r in rtts if r is not None]
    assert len(got) >= 0.9 * len(rtts), f"lost replies: {rtts}"
    return statistics.median(got), min(got), max(got)


# ----------------------------------------------------------------------------------------
# oppsched-delay's command line (no root needed)


@pytest.fixture
def delay_binary():
    b = links.find_delay_binary()
    require(b is not None, "oppsched-delay is not built")
    return b


XY = ["--if-a", "x", "--if-b", "y"]


@pytest.mark.parametrize("args, message", [
    (["--if-a", "x"], "the option '--if-b' is required but missing"),
    (XY + ["--delay-ms", "abc"], "the argument ('abc') for option '--delay-ms' is invalid"),
    (XY + ["--delay-ab-ms", "-3"], "--delay-ab-ms: -3 not in [0,60000]"),
    (XY + ["--delay-ms", "70000"], "--delay-ms: 70000 not in [0,60000]"),
    (XY + ["--rate-bps", "5"], "--rate-bps: 5 not 0 or in [1000,1e+12]"),
    (XY + ["--limit-ba-bytes", "-1"], "--limit-ba-bytes: -1 not in [0,inf)"),
    (XY + ["--rt-priority", "100"], "--rt-priority: 100 not in [0,99]"),
    (["--if-a", "x", "--if-b", "x"], "--if-b: x is the same interface as --if-a"),
    (XY + ["--bogus", "1"], "unrecognised option '--bogus'"),
])
def test_delay_stage_rejects_bad_options_naming_option_and_value(delay_binary, args, message):
    # Validation comes before any socket is opened: safe to run anywhere, even without root.
    cp = subprocess.run([str(delay_binary), *args], capture_output=True, text=True, timeout=10)
    assert cp.returncode == 2
    assert message in cp.stderr


def test_delay_stage_help_lists_the_options(delay_binary):
    cp = subprocess.run([str(delay_binary), "--help"], capture_output=True, text=True, timeout=10)
    assert cp.returncode == 0
    for opt in ("--if-a", "--delay-ab-ms", "--rate-ba-bps", "--limit-bytes", "--stats-file",
                "--schema"):
        assert opt in cp.stdout


# ----------------------------------------------------------------------------------------
# Backend choice and netem commands (pure)


def test_auto_backend_prefers_netem_and_records_why(monkeypatch):
    monkeypatch.setattr(links, "netem_available", lambda refresh=False: (True, ""))
    assert links.choose_backend("auto").backend == "netem"
    monkeypatch.setattr(links, "netem_available",
                        lambda refresh=False: (False, "`tc qdisc add ... netem` failed: unknown"))
    c = links.choose_backend("auto")
    assert c.backend == "userspace" and "kernel has no netem" in c.reason
    assert c.describe()["requested"] == "auto"
    with pytest.raises(NetnsError, match="netem requested but the kernel has none"):
        links.choose_backend("netem")
    assert links.choose_backend("userspace").backend == "userspace"
    with pytest.raises(ValueError, match="wired: 'tc'"):
        links.choose_backend("tc")


def test_netem_commands_delay_each_direction_and_add_tbf_for_a_rate():
    (only,) = links.netem_commands("ns1", "eth0", 15.0, 0.0, 0)
    assert only[1:] == ["-n", "ns1", "qdisc", "replace", "dev", "eth0", "root", "handle", "1:",
                        "netem", "delay", "15000us", "limit", str(links.NETEM_PACKET_LIMIT)]
    netem, tbf = links.netem_commands("ns1", "eth0", 0.25, 100e6, 30000)
    assert netem[netem.index("delay") + 1] == "250us"
    assert tbf[tbf.index("parent") + 1] == "1:1" and "tbf" in tbf
    assert tbf[tbf.index("rate") + 1] == "100000000bit"
    assert tbf[tbf.index("limit") + 1] == "30000"
    assert int(tbf[tbf.index("burst") + 1]) == 12500  # 1 ms at 100 Mb/s


def test_link_spec_validation_names_field_and_value():
    with pytest.raises(ValueError, match=r"link.delay_ba_ms: -1"):
        LinkSpec(1.0, -1).validate()
    with pytest.raises(ValueError, match=r"link.rate_ab_bps: 10"):
        LinkSpec(rate_ab_bps=10).validate()
    assert LinkSpec().is_plain() and not LinkSpec.symmetric(1.0).is_plain()


@needs_root
def test_netem_probe_answers_and_leaves_no_scratch_namespace(monkeypatch):
    # A prefix of its own: a run of another test file may be probing meanwhile.
    monkeypatch.setattr(links, "DEFAULT_PREFIX", "otprobe")
    ok, why = links.netem_available(refresh=True)
    assert isinstance(ok, bool) and (ok or "netem" in why)
    assert not [n for n in stale.list_netns() if n.startswith("otprobeprobe-")]


# ----------------------------------------------------------------------------------------
# End to end through the delay stage


@needs_root
@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_ping_rtt_through_the_wired_path_equals_the_configured_round_trip(backend, v6):
    d = 30.0  # Andrew & Hanly, CLAMP, Table II, d_1
    topo = Topology(servers=(ServerSpec("S1", d),), clients=(ClientSpec("R1"),))
    with Testbed(topo, prefix="otwire") as tb:
        assert tb.wired.backend == backend.backend
        assert tb.describe()["links"][0]["backend"] == backend.backend
        rtts = tb.servers[0].ns.ping(tb.clients[0].addr(v6), count=20, interval=0.02)
        med, lo, hi = rtt_summary(rtts)
        assert lo >= d, rtts
        assert abs(med - d) <= TOLERANCE_MS, f"median {med:.3f} ms vs {d} ms: {rtts}"
        if backend.backend == "userspace":
            st = tb.wired_stats()["s0"]["directions"]
            assert st["ab"]["forwarded"] >= 20 and st["ba"]["forwarded"] >= 20
            assert st["ab"]["delay_ms"] == d / 2 and st["ba"]["delay_ms"] == d / 2
            assert st["ab"]["dropped"] == 0


@needs_root
def test_each_direction_has_its_own_delay(backend):
    # Built from the parts: 4 ms one way, 11 ms back; the RTT is their sum.
    with Session(prefix="otwire") as s:
        a, b = s.add_netns("a"), s.add_netns("b")
        for n in (a, b):
            n.sysctl({"net.ipv6.conf.all.disable_ipv6": 1, "net.ipv6.conf.default.disable_ipv6": 1})
        link = links.build_link(s, "l0", a, "eth0", b, "eth0", LinkSpec(4.0, 11.0), backend,
                                wire_ns=lambda: links.wire_namespace(s), rt_priority=10)
        a.ip("addr", "add", "10.9.0.1/24", "dev", "eth0")
        b.ip("addr", "add", "10.9.0.2/24", "dev", "eth0")
        rtts = a.ping("10.9.0.2", count=15, interval=0.02)
        med, lo, _ = rtt_summary(rtts[1:])  # the first one also waits for ARP
        assert lo >= 15.0 and abs(med - 15.0) <= TOLERANCE_MS, rtts
        if backend.backend == "userspace":
            st = link.stats()["directions"]
            assert (st["ab"]["delay_ms"], st["ba"]["delay_ms"]) == (4.0, 11.0)


@needs_root
@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_iperf3_reno_flow_sees_the_delay_and_the_rate_limit(backend, v6):
    d, rate, limit = 40.0, 20e6, 30_000
    max_queue_ms = limit * 8 / rate * 1e3  # 12 ms: the most the FIFO can add
    topo = Topology(servers=(ServerSpec("S1", d, rate_bps=rate, limit_bytes=limit),),
                    clients=(ClientSpec("R1"),))
    with Testbed(topo, prefix="otwire") as tb:
        srv, cli = tb.servers[0], tb.clients[0]
        assert srv.ns.read_sysctl("net.ipv4.tcp_congestion_control") == "reno"
        cli.ns.spawn_iperf3_server(5201, extra=["-1"])
        cp = srv.ns.run(["iperf3", "-c", cli.addr(v6), "-p", "5201", "-t", "2", "-i", "0.5",
                         "-J"], timeout=60)
        res = json.loads(cp.stdout)
        sender = res["end"]["streams"][0]["sender"]
        min_rtt, mean_rtt = sender["min_rtt"] / 1e3, sender["mean_rtt"] / 1e3
        # After the first interval (slow start into a 30 kB buffer, its loss and recovery take
        # a few 40 ms round trips): what the path carries, not how TCP starts.
        rates = [i["sum"]["bits_per_second"] for i in res["intervals"]]
        goodput = statistics.mean(rates[1:])
        assert res["end"]["sender_tcp_congestion"] == "reno"
        # iperf3 samples the kernel's smoothed RTT once per interval: never below the path
        # delay, and above it by at most the FIFO's worth of queueing (plus serialisation of
        # 1514-byte frames at 20 Mb/s, 0.6 ms, and slack).
        for rtt in (min_rtt, mean_rtt):
            assert d <= rtt <= d + max_queue_ms + 3.0, sender
        # The limit holds, and the path carries a good part of it: Reno halves into a buffer
        # of under a third of the 100 kB BDP and then grows a segment per 40 ms (measured
        # 13.5-18.8 Mb/s per 0.5-s interval on a quiet machine; the whole run's mean fell to
        # 9.8 Mb/s once beside the rest of the suite).
        assert 0.3 * rate <= goodput <= rate, rates
        if backend.backend == "userspace":
            st = tb.wired_stats()["s0"]["directions"]["ab"]
            assert st["forwarded"] > 1000 and st["rate_bps"] == rate


@needs_root
def test_clamp_fig3_topology_gives_each_server_its_own_delay(backend):
    # Andrew & Hanly, CLAMP, Fig. 3 / Tables I-II: d = 30, 130, 10, 180 ms; X--R links 1 ms
    # each way.
    topo = Topology.clamp_fig3()
    with Testbed(topo, prefix="otwire") as tb:
        assert [s.name for s in tb.servers] == ["S1", "S2", "S3", "S4"]
        for spec, srv in zip(topo.servers, tb.servers):
            want = spec.rtt_ms + 2 * 1.0
            med, lo, _ = rtt_summary(srv.ns.ping(tb.clients[0].addr4, count=5, interval=0.02))
            # Five pings: a late wake-up of a delay stage moves their median, never their
            # minimum below the path's delay, so the fastest one is the path. A ping crosses
            # two delay stages each way here (S-X and X-R), each forwarding pass adding about
            # 0.1 ms of its own (0.5 ms in all measured on this machine): twice the tolerance
            # of the one-link tests above.
            assert want <= lo <= want + 2 * TOLERANCE_MS, (spec, med, lo)


@needs_root
def test_delay_stage_writes_final_counters_and_exits_cleanly_at_teardown(backend):
    if backend.backend != "userspace":
        pytest.skip("oppsched-delay is only used where the kernel has no netem")
    topo = Topology(servers=(ServerSpec("S1", 2.0),), clients=(ClientSpec("R1"),))
    with Testbed(topo, prefix="otwire") as tb:
        tb.servers[0].ns.ping(tb.clients[0].addr4, count=5, interval=0.01)
        proc = tb.links[0].proc
        names = [n.name for n in tb.session.namespaces]
    assert proc.returncode == 0, proc.log_tail()
    final = tb.final_wired_stats["s0"]
    assert final["final"] is True
    ab = final["directions"]["ab"]
    assert ab["forwarded"] >= 5 and ab["received"] == ab["forwarded"] + ab["dropped"] + \
        ab["discarded_at_exit"]
    assert sum(ab["late_hist"]) == ab["forwarded"]
    assert not set(names) & set(stale.list_netns())


@needs_root
def test_a_real_time_delay_stage_holds_more_frames_than_the_memlock_limit(backend):
    """At SCHED_FIFO the stage locks its memory. 3 s of one-way delay hold about 14 MB of
    frames sent in 1.3 s: more than the default 8 MiB RLIMIT_MEMLOCK, which it runs under
    as the runner starts it (the run user, no CAP_IPC_LOCK). It locks the pages it has at
    start, and holds and forwards every frame (it once locked its future pages too, and
    died of std::bad_alloc there, and every flow of the run with it)."""
    if backend.backend != "userspace":
        pytest.skip("oppsched-delay is only used where the kernel has no netem")
    limit = 8 << 20
    with Session(prefix="otwire", run_user=privsep.RunUser.resolve()) as s:
        a, b = s.add_netns("a"), s.add_netns("b")
        for n in (a, b):
            n.sysctl({"net.ipv6.conf.all.disable_ipv6": 1, "net.ipv6.conf.default.disable_ipv6": 1})
        link = links.build_link(s, "l0", a, "eth0", b, "eth0", LinkSpec(3000.0, 0.0), backend,
                                wire_ns=lambda: links.wire_namespace(s), rt_priority=10,
                                start=False)
        assert link.caps == ("net_raw", "net_admin")
        # The limit the test is about, whatever the runner's own (prlimit may lower it).
        link.argv = ["prlimit", f"--memlock={limit}:{limit}", "--", *link.argv]
        link.start()
        link.wait_ready()
        a.ip("addr", "add", "10.9.0.1/24", "dev", "eth0")
        b.ip("addr", "add", "10.9.0.2/24", "dev", "eth0")
        mac = json.loads(b.ip("-j", "link", "show", "eth0"))[0]["address"]
        a.ip("neigh", "replace", "10.9.0.2", "lladdr", mac, "dev", "eth0")
        # 10,000 datagrams of 1400 bytes, 400 every 50 ms (90 Mb/s): all held at once.
        send = ("import socket, time\n"
                "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "for i in range(25):\n"
                "    for _ in range(400): s.sendto(bytes(1400), ('10.9.0.2', 9))\n"
                "    time.sleep(0.05)\n")
        a.run([sys.executable, "-c", send], timeout=30)
        held = link.stats()["directions"]["ab"]
        wait_for(lambda: link.stats()["directions"]["ab"]["held_frames"] == 0, timeout=15,
                 what="the held frames forwarded")
        link.proc.check_alive()
        st = link.stats()
        ab = st["directions"]["ab"]
        log = link.proc.log_tail(50)
    assert st["rt_priority_applied"] is True, st
    assert held["held_frames"] * 1400 > limit, held  # more than 8 MiB held at once
    assert ab["dropped_memory"] == 0 and ab["forwarded_bytes"] > 1.5 * limit, ab
    assert ab["received"] == ab["forwarded"] + ab["dropped"], ab
    assert f"RLIMIT_MEMLOCK is {limit} bytes" in log, log


@needs_root
def test_missing_delay_binary_is_a_clear_error_and_nothing_is_left(monkeypatch, tmp_path):
    monkeypatch.setattr(links, "netem_available", lambda refresh=False: (False, "no netem"))
    topo = Topology(servers=(ServerSpec("S1", 10.0),), clients=(ClientSpec("R1"),))
    tb = Testbed(topo, prefix="otwire", delay_binary=tmp_path / "nope")
    with pytest.raises(NetnsError, match="oppsched-delay was not found"):
        with tb:
            pass
    assert not [n for n in stale.list_netns() if n.startswith(tb.name)]
