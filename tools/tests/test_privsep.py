"""Privilege separation (docs/testbed.md, "Privilege separation"): the processes a Session
starts run as the run user with exactly the capabilities of their kind and no_new_privs,
and so does every long-running process of a real testbed run (abstract PHY, a TCP flow,
a wrc flow, the captures, the wired delay stage), read from /proc/PID/status while the run
goes on."""

from __future__ import annotations

import grp
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO, needs_root, require_real_testbed, write_experiment
from oppsched.testbed import hostchanges, namespace, netns, nsbase, privsep, runview, stale
from oppsched.run.runner import staging_dir

# Capability bits (linux/capability.h)
CAP = {"chown": 0, "dac_override": 1, "setgid": 6, "setuid": 7, "net_admin": 12,
       "net_raw": 13, "sys_nice": 23}


def bits(*names: str) -> int:
    return sum(1 << CAP[n] for n in names)


def status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def creds(pid: int) -> dict:
    st = status(pid)
    return {"uid": [int(x) for x in st["Uid"].split()], "gid": [int(x) for x in st["Gid"].split()],
            "eff": int(st["CapEff"], 16), "prm": int(st["CapPrm"], 16),
            "bnd": int(st["CapBnd"], 16), "amb": int(st["CapAmb"], 16),
            "nnp": int(st["NoNewPrivs"])}


def wait_exec(pid: int, comm: str, timeout: float = 10.0) -> None:
    """Waits until pid runs `comm` (setpriv, chrt and ip netns exec have exec'd it)."""
    nsbase.wait_for(lambda: Path(f"/proc/{pid}/comm").read_text().strip() == comm,
                    timeout=timeout, what=f"pid {pid} running {comm}")


@pytest.fixture
def session(tmp_path):
    if not nsbase.is_root():
        pytest.skip("network namespaces need root")
    user = privsep.RunUser.resolve()
    with netns.Session("otpriv", workdir=tmp_path / "w", run_user=user) as s:
        yield s


@needs_root
def test_a_spawned_process_runs_as_the_run_user_with_exactly_its_capabilities(session):
    user = session.run_user
    ns = session.add_netns("a")
    plain = session.spawn(ns, ["sleep", "30"], name="plain")
    raw = session.spawn(ns, ["sleep", "30"], name="raw", caps=("net_raw", "net_admin"))
    for p in (plain, raw):
        wait_exec(p.pid, "sleep")
    c = creds(plain.pid)
    assert c["uid"] == [user.uid] * 4 and c["gid"] == [user.gid] * 4
    assert (c["eff"], c["prm"], c["bnd"], c["amb"], c["nnp"]) == (0, 0, 0, 0, 1)
    c = creds(raw.pid)
    assert c["uid"] == [user.uid] * 4
    want = bits("net_raw", "net_admin")
    assert (c["eff"], c["prm"], c["bnd"], c["amb"], c["nnp"]) == (want, want, want, want, 1)
    # the process still dies with the runner: PR_SET_PDEATHSIG set again after the uid change
    assert plain.pid in ns.pids()


def children(pid: int) -> list[int]:
    out = []
    for t in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (t / "children").read_text().split()]
    return out


@needs_root
def test_a_program_that_switches_user_itself_starts_root_with_a_cut_bounding_set(session):
    ns = session.add_netns("b")
    p = session.spawn(ns, ["sleep", "30"], name="td", as_root=privsep.TCPDUMP_BOUNDING)
    # the guard: the run user, no capability
    nsbase.wait_for(lambda: creds(p.pid)["uid"][0] == session.run_user.uid, timeout=10,
                    what="the guard switched")
    g = creds(p.pid)
    assert (g["eff"], g["prm"], g["nnp"]) == (0, 0, 1)
    kid = nsbase.wait_for(lambda: children(p.pid), timeout=10, what="the program started")[0]
    wait_exec(kid, "sleep")
    c = creds(kid)
    assert c["uid"] == [0] * 4 and c["nnp"] == 1
    assert c["bnd"] == bits(*privsep.TCPDUMP_BOUNDING) == c["eff"]


@needs_root
def test_a_program_that_switches_user_itself_dies_with_a_runner_killed_by_sigkill(tmp_path):
    user = privsep.RunUser.resolve()
    # A stand-in for tcpdump -Z: it switches to the run user itself, which clears the
    # PR_SET_PDEATHSIG it was started with.
    code = (
        "import sys, time\nfrom oppsched.testbed import netns, privsep\n"
        "u = privsep.RunUser.resolve()\n"
        f"s = netns.Session('otpriv', workdir={str(tmp_path / 'w')!r}, run_user=u)\n"
        "s.start()\nns = s.add_netns('k')\n"
        "p = s.spawn(ns, ['setpriv', '--reuid', str(u.uid), '--regid', str(u.gid),"
        " '--clear-groups', '--', 'sleep', '300'], name='zprog', as_root=('setuid', 'setgid'))\n"
        "print(p.pid, flush=True)\ntime.sleep(300)\n")
    runner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=REPO / "tools")
    try:
        guard = int(runner.stdout.readline())
        kid = nsbase.wait_for(lambda: children(guard), timeout=10, what="the program started")[0]
        nsbase.wait_for(lambda: Path(f"/proc/{kid}/comm").read_text().strip() == "sleep"
                        and creds(kid)["uid"][0] == user.uid, timeout=10,
                        what="the program switched")
    finally:
        runner.kill()
        runner.wait()
    nsbase.wait_for(lambda: not Path(f"/proc/{kid}").exists() or
                    Path(f"/proc/{kid}/stat").read_text().split(")")[1].split()[0] == "Z",
                    timeout=10, what="the program gone with its runner")
    stale.cleanup_stale("otpriv")


@needs_root
def test_sched_fifo_is_set_before_the_switch_and_needs_no_capability(session):
    if not privsep.fifo_allowed(5):
        pytest.skip("no real-time budget here (chrt -f 5 fails)")
    ns = session.add_netns("c")
    p = session.spawn(ns, ["sleep", "30"], name="rt", sched_fifo=5)
    wait_exec(p.pid, "sleep")
    assert os.sched_getscheduler(p.pid) == os.SCHED_FIFO
    assert os.sched_getparam(p.pid).sched_priority == 5
    assert creds(p.pid)["eff"] == 0


@needs_root
def test_the_tuns_of_a_session_with_a_run_user_are_its(session):
    ns = session.add_netns("d")
    session.add_tun(ns, "radio0")
    d = json.loads(ns.ip("-j", "-d", "link", "show", "dev", "radio0"))[0]
    tun = d["linkinfo"]["info_data"]
    user = session.run_user
    assert tun["user"] in (user.name, str(user.uid))
    assert tun["group"] in (grp.getgrgid(user.gid).gr_name, str(user.gid))


@needs_root
def test_a_run_folder_mount_left_by_a_killed_runner_is_removed_by_cleanup(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    name = f"otpriv-{nsbase.new_run_id()}"
    code = ("import sys, time\nfrom oppsched.testbed.runview import RunView\n"
            f"RunView({name!r}, sys.argv[1]).__enter__()\nprint('mounted', flush=True)\n"
            "time.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE,
                         text=True, cwd=REPO / "tools")
    try:
        assert p.stdout.readline().strip() == "mounted"
        view = runview.VIEW_DIR / name
        (view / "probe").write_text("x")
        assert (target / "probe").read_text() == "x"  # the same folder
        stale.cleanup_stale("otpriv")  # its runner is alive: left alone
        assert runview._mounted(view)
    finally:
        p.kill()
        p.wait()
    stale.cleanup_stale("otpriv")
    assert not view.exists() and not runview._mounted(view)
    assert (target / "probe").exists()  # the folder itself is untouched


def test_run_user_names_a_missing_user_in_its_error(monkeypatch):
    monkeypatch.setenv(privsep.RUN_USER_ENV, "no-such-user-xq")
    with pytest.raises(nsbase.NetnsError, match="OPPSCHED_RUN_USER: no user 'no-such-user-xq'"):
        privsep.RunUser.resolve()
    monkeypatch.setenv(privsep.RUN_USER_ENV, "root")
    with pytest.raises(nsbase.NetnsError, match="is root"):
        privsep.RunUser.resolve()


def test_setpriv_argv_refuses_a_capability_outside_the_allowed_ones():
    with pytest.raises(ValueError, match="sys_admin"):
        privsep.RunUser("x", 1000, 1000).setpriv_argv(("sys_admin",))


# ----------------------------------------------------------------------------------------
# A real run

RUN = """
experiment: privsep
kind: testbed
duration_s: 7
phy: {mode: abstract}
topology: {apd_rt_priority: 5}
capture: {pcaps: true, ap: true}
devices:
  - {name: R1}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1}
  - {id: w1, server: S1, device: R1, transport: wrc, weight: 1}
"""

# What each kind of process keeps (CapEff); every one runs as the run user, with
# no_new_privs. tcpdump starts as root and switches itself (-Z).
EXPECTED_CAPS = {"oppsched-apd": 0, "oppsched-client": 0, "phy": 0, "iperf3": 0, "tcpdump": 0,
                 "oppsched-wrc": 0, "capture_guard": 0,
                 "oppsched-delay": bits("net_raw", "net_admin")}
# One-shot commands of the runner itself (root, not long-running): readiness probes and
# samples taken while the run goes on, and the exec chain before a program starts.
TRANSIENT = {"ip", "ss", "sysctl", "setpriv", "chrt", "tc"}


def kind_of(pid: int) -> str | None:
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if comm in TRANSIENT or b"oppsched.testbed.pinger" in cmd:
        return None
    if any(b"oppsched.phy" in a or b"oppsched-phy" in a for a in cmd):
        return "phy"
    if b"oppsched.testbed.capture_guard" in cmd:
        return "capture_guard"
    return comm


@needs_root
def test_every_process_of_a_run_runs_as_the_run_user_with_the_capabilities_of_its_kind(
        tmp_path):
    require_real_testbed()
    user = privsep.RunUser.resolve()
    tun_mode = stat.S_IMODE(os.stat(hostchanges.TUN_DEV).st_mode)
    exp = write_experiment(tmp_path, RUN)
    out = tmp_path / "out"
    # As if started with sudo by uid 4321: the results are handed back to it.
    env = {**os.environ, "OPPSCHED_NETNS_PREFIX": "otpriv", "SUDO_UID": "4321",
           "SUDO_GID": "4322"}
    proc = subprocess.Popen([sys.executable, "-m", "oppsched", "run", str(exp), "--out", str(out)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    seen: dict[str, list[tuple[int, dict]]] = {}
    try:
        def running():
            if proc.poll() is not None:
                raise AssertionError(f"the run ended early: {proc.stdout.read()}")
            try:
                run = json.loads((staging_dir(out) / "run.json").read_text())
            except (OSError, ValueError):
                return None
            return run if run["status"] == "running" else None
        run = nsbase.wait_for(running, timeout=60, what="the run running")
        assert run["run_user"] == {"name": user.name, "uid": user.uid, "gid": user.gid}
        names = [n for n in stale.list_netns() if n.startswith(run["run_name"] + "-")]

        def snapshot():
            seen.clear()
            for n in names:
                for pid in namespace.Netns(n).pids():
                    try:
                        k = kind_of(pid)
                        if k is not None:
                            seen.setdefault(k, []).append((pid, creds(pid)))
                    except OSError:  # ended meanwhile
                        pass
            # the flows' senders start at t0: wait for both ends of both flows
            return len(seen.get("iperf3", [])) >= 2 and len(seen.get("oppsched-wrc", [])) >= 2
        nsbase.wait_for(snapshot, timeout=10, what="both ends of both flows running")
        apd_pid = seen["oppsched-apd"][0][0]
        apd_policy = os.sched_getscheduler(apd_pid)
    finally:
        try:
            rc = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(30)
    log = proc.stdout.read()
    assert rc == 0, log
    table = {k: sorted({(c["uid"][0], hex(c["eff"])) for _, c in v}) for k, v in seen.items()}
    print("process kind -> (uid, CapEff):", json.dumps(table))
    assert set(seen) == set(EXPECTED_CAPS), table
    for kind, procs in seen.items():
        for pid, c in procs:
            assert c["uid"] == [user.uid] * 4, (kind, pid, c)
            assert c["gid"] == [user.gid] * 4, (kind, pid, c)
            assert c["eff"] == c["prm"] == EXPECTED_CAPS[kind], (kind, pid, hex(c["eff"]))
            assert c["nnp"] == 1, (kind, pid)
    assert len(seen["tcpdump"]) == len(seen["capture_guard"]) == 3
    assert len(seen["oppsched-delay"]) == 1
    if privsep.fifo_allowed(5):  # topology.apd_rt_priority still applies
        assert apd_policy == os.SCHED_FIFO
    # The results are the invoking user's again, the mount and the device mode are undone.
    for f in ("slots.csv", "client.R1.pcap", "flow.f1.receiver.json", "apd.stats.json",
              "run.json"):
        st = os.lstat(out / f)
        assert (st.st_uid, st.st_gid) == (4321, 4322), f
    assert not (runview.VIEW_DIR / run["run_name"]).exists()
    # /dev/net/tun: this run no longer holds the mode change (other live runs may); when
    # none does, the mode it had before any run is back.
    rec = hostchanges._HostLock.read().get("tun_mode")
    assert rec is None or run["run_name"] not in rec["runs"]
    if rec is None and tun_mode & 0o006 == 0:
        assert stat.S_IMODE(os.stat(hostchanges.TUN_DEV).st_mode) == tun_mode
    s = json.loads((out / "summary.json").read_text())
    assert s["flows"][0]["id"] == "f1" and s["flows"][0]["goodput_bps"] > 100e3
    # The client's uplink came in on its own endpoint (docs/daemons.md, "Uplink identity").
    apd = json.loads((out / "apd.stats.json").read_text())
    assert apd["zmq"]["uplink"]["R1"]["received"] > 100
    assert apd["uplink"]["user_mismatch"] == 0 and apd["zmq"]["uplink"]["received"] == 0
