"""oppsched.testbed.netns: namespaces, devices and processes of a run, and their guaranteed teardown.

Needs root (network namespaces); skipped otherwise. Every test uses its own prefix, so it
never touches namespaces of a real run (prefix "oppsched") or of another test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oppsched import paths
from oppsched.testbed import hostchanges, nsbase, privsep, stale
from oppsched.testbed.netns import Session
from oppsched.testbed.nsbase import NetnsError, ReadinessTimeout
from oppsched.testbed.stale import cleanup_stale, list_netns
from oppsched.testbed.wired import ClientSpec, ServerSpec, TcpSettings, Testbed, Topology
from helpers import assert_run_gone, needs_root, require

pytestmark = needs_root

TOOLS = paths.package_parent()


def host_links() -> str:
    return subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout


def sleeper(token: str) -> list[str]:
    # argv carries the token so that pgrep -f finds it; exec keeps one process.
    return ["sh", "-c", f"exec sleep 300 # {token}"]


# ----------------------------------------------------------------------------------------


def test_session_builds_namespaces_veth_tun_and_processes_and_removes_them_all():
    with Session(prefix="otns") as s:
        a = s.add_netns("a")
        b = s.add_netns("b")
        s.add_veth(a, "va", b, "vb")
        s.add_tun(b, "tun7")
        p = a.spawn(sleeper(s.name), name="sleep-a")
        q = b.spawn(sleeper(s.name), name="sleep-b")
        names = [a.name, b.name]
        assert set(names) <= set(list_netns())
        a.wait_link_up("va")
        assert b.link("tun7")["ifname"] == "tun7"
        assert p.running() and q.running()
        assert p.pid in a.pids() and q.pid in b.pids()
        assert sorted(stale._marked_pids([s.name])) == sorted([p.pid, q.pid])
        # Nothing was created in the host namespace.
        assert "va" not in host_links() and "tun7" not in host_links()
    assert_run_gone(s.name, names)
    assert p.returncode is not None and q.returncode is not None


def test_teardown_also_happens_when_the_body_raises():
    with pytest.raises(RuntimeError, match="boom"):
        with Session(prefix="otns") as s:
            a = s.add_netns("x")
            s.add_tun(a, "tun0")
            a.spawn(sleeper(s.name), name="sleep")
            names = [a.name]
            raise RuntimeError("boom")
    assert_run_gone(s.name, names)


def test_teardown_kills_the_whole_process_group_and_strays_in_the_namespace():
    with Session(prefix="otns") as s:
        a = s.add_netns("g")
        # A shell whose child ignores SIGTERM: only SIGKILL of the group removes it.
        p = a.spawn(["sh", "-c", f"trap '' TERM; sleep 300 & wait # {s.name}"], name="group")
        # A process started in the namespace behind the session's back (no marker).
        stray = subprocess.Popen(["ip", "netns", "exec", a.name, "sleep", "300"],
                                 start_new_session=True)
        nsbase.wait_for(lambda: len(a.pids()) >= 3, timeout=5, what="processes started")
        names = [a.name]
    assert_run_gone(s.name, names)
    assert stray.wait(5) == -signal.SIGKILL
    assert p.returncode is not None


def _child_script(prefix: str, body: str) -> str:
    return f"""
import sys, time
sys.path.insert(0, {str(TOOLS)!r})
from oppsched.testbed.netns import Session
s = Session(prefix={prefix!r})
s.__enter__()
a = s.add_netns("c")
s.add_tun(a, "tun0")
a.spawn(["sh", "-c", "exec sleep 300 # " + s.name], name="sleep")
print(s.name, a.name, flush=True)
{body}
"""


def _start_child(prefix: str, body: str) -> tuple[subprocess.Popen, str, str]:
    child = subprocess.Popen([sys.executable, "-c", _child_script(prefix, body)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline().split()
    assert len(line) == 2, child.stderr.read()
    return child, line[0], line[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_teardown_happens_when_the_owner_gets_a_signal(sig):
    # The owner sits in a `with`-less session (so only the signal handling and atexit
    # can clean up) and is interrupted while it waits.
    child, run_name, ns_name = _start_child("otsig", "time.sleep(60)")
    assert ns_name in list_netns()
    child.send_signal(sig)
    child.wait(20)
    assert_run_gone(run_name, [ns_name])


def _argvs(pids) -> list[str]:
    out = []
    for pid in pids:
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    return out


def test_a_killed_runs_processes_die_with_it_and_cleanup_removes_the_rest():
    prefix = "otstale"
    # `forker` leaves a grandchild behind (sleep 302, re-parented to init, no parent-death
    # signal of its own) and becomes sleep 301, the process the session started.
    child, run_name, ns_name = _start_child(
        prefix, 'a.spawn(["sh", "-c", "sleep 302 & exec sleep 301"], name="forker")\n'
        "time.sleep(60)")
    nsbase.wait_for(lambda: len(stale._marked_pids([run_name])) >= 3, timeout=10,
                    what="the run's processes started")
    child.kill()  # SIGKILL: no teardown at all
    child.wait(10)
    # What the session started dies with it (PR_SET_PDEATHSIG); the escapee does not.
    nsbase.wait_for(lambda: not any(a.startswith(("sleep 301", "sleep 300")) for a in
                                    _argvs(stale._marked_pids([run_name]))),
                    timeout=10, what="the run's own processes gone")
    left = _argvs(stale._marked_pids([run_name]))
    assert any(a.startswith("sleep 302") for a in left), left
    assert ns_name in list_netns()
    removed = cleanup_stale(prefix)
    assert removed == [ns_name]
    assert_run_gone(run_name, [ns_name])
    assert cleanup_stale(prefix) == []


def test_a_program_whose_runner_died_before_its_death_signal_was_armed_does_not_start():
    # The window PR_SET_PDEATHSIG leaves open: the runner dies after the fork, before the
    # prctl; the orphan's parent is then no longer the runner. Both sides of the check:
    check = privsep.parent_check
    orphan = subprocess.run([*check(os.getppid()), "sh", "-c",
                             "echo started"], capture_output=True, text=True, timeout=10)
    assert orphan.returncode == 125 and orphan.stdout == ""
    # ... the runner alive: the program runs with its own arguments, as the same process
    # (exec: the pid the runner holds is the program's)
    me = os.getpid()
    p = subprocess.Popen([*check(me), "sh", "-c", 'echo "$$ $1"', "sh", "a b"],
                         stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=10)
    assert p.returncode == 0 and out.split(" ", 1) == [str(p.pid), "a b\n"]


def test_a_new_session_first_removes_what_killed_runs_of_its_prefix_left():
    child, run_name, ns_name = _start_child("otnext", "time.sleep(60)")
    child.kill()
    child.wait(10)
    assert ns_name in list_netns()
    with Session(prefix="otnext") as s:
        assert ns_name not in list_netns()
        s.add_netns("b")
    assert_run_gone(run_name, [ns_name])


def test_a_host_setting_a_run_added_is_restored_when_no_live_run_needs_it():
    allowed = hostchanges.ALLOWED_CC.read_text().split()
    avail = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    extra = [a for a in avail if a not in allowed]
    require(bool(extra), "every available congestion control is already allowed")
    name = extra[0]
    with Session(prefix="othost") as s1, Session(prefix="othost") as s2:
        assert hostchanges.allow_congestion_control(name, s1.name) is True
        assert hostchanges.allow_congestion_control(name, s2.name) is False  # already there
        s1.teardown()
        assert name in hostchanges.ALLOWED_CC.read_text().split()  # s2 still needs it
    assert hostchanges.ALLOWED_CC.read_text().split() == allowed
    assert s2.host_restored and name in s2.host_restored[0]


def test_cleanup_stale_leaves_a_live_run_alone():
    with Session(prefix="otlive") as s:
        a = s.add_netns("a")
        assert cleanup_stale("otlive") == []
        assert a.name in list_netns()
        assert cleanup_stale("otlive", force=True) == [a.name]
        assert a.name not in list_netns()


def test_wait_listening_times_out_with_a_clear_error_and_fails_fast_if_the_process_dies():
    with Session(prefix="otns") as s:
        a = s.add_netns("w")
        t0 = time.monotonic()
        with pytest.raises(ReadinessTimeout,
                           match=r"tcp port 5999 listening: not ready after 0.3 s"):
            a.wait_listening(5999, timeout=0.3)
        assert time.monotonic() - t0 < 3
        dead = a.spawn(["sh", "-c", "echo oops; exit 3"], name="dead")
        with pytest.raises(NetnsError, match=r"dead \(in .*\) exited with 3:\noops"):
            a.wait_listening(5999, timeout=20, proc=dead)
        srv = a.spawn_iperf3_server(5301)
        assert 5301 in a.listening("tcp") and srv.running()


def test_session_rejects_bad_names():
    with pytest.raises(ValueError, match="prefix: 'a-b'"):
        Session(prefix="a-b")
    with pytest.raises(ValueError, match="run_id: 'XYZ'"):
        Session(prefix="ok", run_id="XYZ")
    with Session(prefix="otns") as s:
        with pytest.raises(ValueError, match="role: 'Bad Role'"):
            s.add_netns("Bad Role")
        a = s.add_netns("n")
        with pytest.raises(ValueError, match="interface name: 'much-too-long-name'"):
            s.add_veth(a, "much-too-long-name", a, "x")


def test_topology_validation_names_field_and_value():
    ok = dict(servers=(ServerSpec("S1", 30.0),), clients=(ClientSpec("R1"),))
    Topology(**ok).validate()
    cases = [
        (dict(servers=()), "topology.servers: empty"),
        (dict(servers=(ServerSpec("S1", -1.0),)), r"topology.servers\[0\].rtt_ms: -1.0"),
        (dict(servers=(ServerSpec("S1", 1.0, rate_bps=5.0),)), r"servers\[0\].rate_bps: 5.0"),
        (dict(clients=(ClientSpec("R"), ClientSpec("R"))), r"topology.clients\[1\].name: 'R'"),
        (dict(wired="tc"), "topology.wired: 'tc'"),
        (dict(client_links="air"), "topology.client_links: 'air'"),
        (dict(ipv4=False, ipv6=False), "both false"),
        (dict(rt_priority=100), "topology.rt_priority: 100"),
        (dict(tcp=TcpSettings(ecn=3)), "topology.tcp.ecn: 3"),
    ]
    for change, msg in cases:
        with pytest.raises(ValueError, match=msg):
            Topology(**{**ok, **change}).validate()


def test_topology_sysctls_and_addresses_are_applied_per_namespace():
    host_cc = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text().split()
    # One the namespaces may use without widening the host's allowed list (no host change).
    other = next((c for c in allowed if c != host_cc), None)
    if other is None:
        pytest.skip(f"no allowed congestion control other than the host's {host_cc}")
    tcp = TcpSettings(congestion_control=other, sack=False, ecn=1, timestamps=False)
    topo = Topology(servers=(ServerSpec("S1", 0.0), ServerSpec("S2", 0.0)),
                    clients=(ClientSpec("R1"),), tcp=tcp)
    with Testbed(topo, prefix="otns") as tb:
        names = [n.name for n in tb.session.namespaces]
        for node in tb.servers + tb.clients:
            assert node.ns.read_sysctl("net.ipv4.tcp_congestion_control") == tcp.congestion_control
            assert node.ns.read_sysctl("net.ipv4.tcp_sack") == "0"
            assert node.ns.read_sysctl("net.ipv4.tcp_ecn") == "1"
            assert node.ns.read_sysctl("net.ipv4.tcp_timestamps") == "0"
            assert node.ns.offloads(node.dev) == {"tx_csum": False, "tso": False, "gso": False,
                                                  "gro": False}
        assert tb.ap.read_sysctl("net.ipv4.ip_forward") == "1"
        assert tb.servers[1].addr4 == "10.1.1.1" and tb.servers[1].addr6 == "fd00:1:1::1"
        assert tb.clients[0].addr4 == "10.2.0.1"
        addrs = tb.servers[1].ns.ip("-j", "addr", "show", "dev", "eth0")
        assert "10.1.1.1" in addrs and "fd00:1:1::1" in addrs
        # Every link is a plain veth (no delay asked), and the run is described.
        d = tb.describe()
        assert [l["backend"] for l in d["links"]] == ["plain", "plain", "plain"]
        assert d["servers"][0]["ns"] == tb.servers[0].ns.name
        assert d["host_changes"] == []
        json.dumps(d)  # serialisable for config.json
    # The host's own setting was not touched.
    assert Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip() == host_cc
    assert_run_gone(tb.name, names)


def test_ipv6_only_topology_has_no_ipv4_addresses():
    topo = Topology(servers=(ServerSpec("S1", 0.0),), clients=(ClientSpec("R1"),), ipv4=False)
    with Testbed(topo, prefix="otns") as tb:
        assert tb.servers[0].addr4 is None
        with pytest.raises(NetnsError, match="no IPv4 address"):
            tb.servers[0].addr(v6=False)
        r = tb.servers[0].ns.ping(tb.clients[0].addr(v6=True), count=2, interval=0.01)
        assert all(x is not None for x in r)


def test_tun_client_links_create_persistent_tuns_that_go_away_at_teardown():
    topo = Topology(servers=(ServerSpec("S1", 0.0),), clients=(ClientSpec("R1"), ClientSpec("R2")),
                    client_links="tun")
    with Testbed(topo, prefix="otns") as tb:
        names = [n.name for n in tb.session.namespaces]
        ap_tun = tb.ap.link("radio0")
        assert "POINTOPOINT" in ap_tun["flags"] and "UP" in ap_tun["flags"]
        for j, c in enumerate(tb.clients):
            assert c.dev == "radio0" and c.ns.link("radio0")["ifname"] == "radio0"
            assert f"10.2.{j}.1" in c.ns.ip("-j", "addr", "show", "dev", "radio0")
        assert "10.2.0.0/16" in tb.ap.ip("route", "show", "dev", "radio0")
    assert_run_gone(tb.name, names)
    assert "radio0" not in host_links()
