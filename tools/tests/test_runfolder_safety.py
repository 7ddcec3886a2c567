"""Root and the run folder (docs/security.md, "The run folder and experiment files"):
root never writes through a symlink the run user planted, an experiment file cannot make
root clean, chown or execute paths of its choosing, and one OUT has one writer at a time."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import REPO, needs_root, require_real_testbed, run_cli
from oppsched import paths, safefs
from oppsched.run import outlock
from oppsched.testbed import netns, nsbase, privsep
from oppsched.config import ConfigError
from oppsched.run.runner import failed_dir, staging_dir

CANARY_TEXT = b"root:secret-hash:19000:0:99999:7:::\n"


@pytest.fixture
def canary(tmp_path):
    """A file of root's outside the run folder: what a planted link aims root's writes at."""
    d = tmp_path / "etc"
    d.mkdir()
    c = d / "shadow"
    c.write_bytes(CANARY_TEXT)
    return c


@pytest.fixture
def rundir(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    return d


# ----------------------------------------------------------------------------------------
# Item 1: writes into the run folder never follow a planted link

@pytest.mark.parametrize("name", ["run.json", "summary.json"])
def test_write_atomic_refuses_a_planted_tmp_link_and_leaves_its_target_alone(
        rundir, canary, name):
    (rundir / f".{name}.tmp").symlink_to(canary)
    with pytest.raises(safefs.UnsafePath, match=rf"\.{name}\.tmp: is a symlink"):
        paths.write_atomic(rundir / name, "{}\n")
    assert canary.read_bytes() == CANARY_TEXT
    assert not (rundir / name).exists()


def test_write_atomic_replaces_a_regular_leftover_tmp_file(rundir):
    (rundir / ".run.json.tmp").write_text("half a file")
    paths.write_atomic(rundir / "run.json", "{}\n")
    assert (rundir / "run.json").read_text() == "{}\n"
    assert not (rundir / ".run.json.tmp").exists()


def test_recovering_a_planted_partial_trace_link_refuses_it_and_names_it(rundir, canary):
    from oppsched.experiments.testbed.traces import recover_all, truncation_errors
    (rundir / "x.pcap.partial").symlink_to(canary)
    (rundir / "slots.csv.partial").write_bytes(b"slot\n1\n2")
    entries = {e["from"]: e for e in recover_all(rundir)}
    # A pcap recovery would have cut the canary to its last whole record (0 bytes).
    assert canary.read_bytes() == CANARY_TEXT
    assert "x.pcap.partial: is a symlink" in entries["x.pcap.partial"]["refused"]
    assert (rundir / "x.pcap.partial").is_symlink()  # left as it is, not renamed
    assert entries["slots.csv.partial"]["cut_bytes"] == 1  # the others still recovered
    errs = truncation_errors(list(entries.values()))
    assert any(e.startswith("x.pcap.partial: not recovered:") for e in errs)


def test_a_log_opened_through_a_swapped_logs_folder_is_refused(rundir, canary):
    # The runner made logs/ (root's); the run user owns the run folder and can rename it
    # and put a link, or a folder of its own holding links, in its place.
    (rundir / "logs").mkdir()
    os.rename(rundir / "logs", rundir / "logs.orig")
    (rundir / "logs").symlink_to(canary.parent)
    with pytest.raises(safefs.UnsafePath, match=r"/logs: is a symlink"):
        safefs.open_log(rundir / "logs" / "shadow", base=rundir)
    (rundir / "logs").unlink()
    (rundir / "logs").mkdir()
    (rundir / "logs" / "apd.log").symlink_to(canary)
    with pytest.raises(safefs.UnsafePath, match=r"logs/apd.log: is a symlink"):
        safefs.open_log(rundir / "logs" / "apd.log", base=rundir)
    assert canary.read_bytes() == CANARY_TEXT


def test_a_capture_file_is_created_new_and_never_through_a_planted_link(rundir, canary):
    (rundir / "wired.S1.pcap.partial").symlink_to(canary)
    with pytest.raises(safefs.UnsafePath, match=r"wired.S1.pcap.partial: is a symlink"):
        safefs.open_beneath(rundir, "wired.S1.pcap.partial",
                            os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    assert canary.read_bytes() == CANARY_TEXT
    fd = safefs.open_beneath(rundir, "client.R1.pcap.partial",
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    os.close(fd)
    assert (rundir / "client.R1.pcap.partial").is_file()


def test_a_hard_link_or_a_fifo_under_a_log_name_is_refused(rundir):
    other = rundir / "other"
    other.write_bytes(b"x")
    os.mkdir(rundir / "logs")
    os.link(other, rundir / "logs" / "apd.log")
    with pytest.raises(safefs.UnsafePath, match="not a regular file with a single link"):
        safefs.open_log(rundir / "logs" / "apd.log", base=rundir)
    os.mkfifo(rundir / "logs" / "phy.log")
    with pytest.raises(safefs.UnsafePath, match="not a regular file"):
        safefs.open_log(rundir / "logs" / "phy.log", base=rundir)


def test_planted_links_are_removed_and_named_but_their_targets_kept(rundir, canary):
    (rundir / "logs").mkdir()
    (rundir / "logs" / "x.png").symlink_to(canary)
    (rundir / "summary.json").symlink_to(canary)
    (rundir / "slots.csv").write_text("slot\n")
    found = safefs.remove_symlinks(rundir)
    assert found == [f"logs/x.png -> {canary}", f"summary.json -> {canary}"]
    assert canary.read_bytes() == CANARY_TEXT
    assert safefs.find_symlinks(rundir) == [] and (rundir / "slots.csv").is_file()


@pytest.fixture
def session(tmp_path):
    if not nsbase.is_root():
        pytest.skip("network namespaces need root")
    with netns.Session(prefix="otrunf", workdir=tmp_path / "w",
                       run_user=privsep.RunUser.resolve()) as s:
        yield s


def test_spawn_refuses_a_log_link_and_tcpdump_writes_the_runners_descriptor(
        session, tmp_path, canary):
    """Session.spawn (root) opens the log; tcpdump `-w -` writes to a file the runner made,
    as the run user, with no DAC override left."""
    if shutil.which("tcpdump") is None:
        pytest.skip("no tcpdump")
    ns = session.add_netns("a")
    run = tmp_path / "r"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "td.log").symlink_to(canary)
    with pytest.raises(safefs.UnsafePath, match="td.log: is a symlink"):
        session.spawn(ns, ["true"], name="td", log=run / "logs" / "td.log", log_base=run)
    assert canary.read_bytes() == CANARY_TEXT
    (run / "logs" / "td.log").unlink()
    session.run_user.own(run)
    fd = safefs.open_beneath(run, "lo.pcap.partial", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        p = session.spawn(ns, ["tcpdump", "-i", "lo", "-n", "-U", "--immediate-mode", "-Z",
                               session.run_user.name, "-w", "-"], name="td",
                          log=run / "logs" / "td.log", log_base=run,
                          as_root=privsep.TCPDUMP_BOUNDING, stdout=fd)
    finally:
        os.close(fd)
    nsbase.wait_for(lambda: "listening on" in (run / "logs" / "td.log").read_text(),
                    timeout=20, what="tcpdump listening")
    assert nsbase.wait_for(lambda: _uid_of_child(p.pid, "tcpdump"), timeout=10,
                           what="tcpdump switched user") == session.run_user.uid
    p.popen.send_signal(signal.SIGINT)
    assert p.popen.wait(10) == 0
    data = (run / "lo.pcap.partial").read_bytes()  # at least the savefile's header
    assert data[:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1")


def _uid_of_child(guard_pid: int, comm: str):
    """The real uid of the `comm` process under guard_pid, once it has switched (else None)."""
    for child in Path(f"/proc/{guard_pid}/task/{guard_pid}/children").read_text().split():
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() != comm:
                continue
            for line in Path(f"/proc/{child}/status").read_text().splitlines():
                if line.startswith("Uid:") and int(line.split()[1]) != 0:
                    return int(line.split()[1])
        except OSError:
            pass
    return None


RUN = """
experiment: planted
kind: testbed
duration_s: 4
phy: {mode: abstract}
capture: {pcaps: true}
devices:
  - {name: R1}
servers:
  - {name: S1, rtt_ms: 0}
flows:
  - {id: f1, server: S1, device: R1}
"""


@needs_root
def test_links_planted_during_a_real_run_are_never_written_through_and_fail_it(
        tmp_path, canary):
    """As a compromised run process would: once the run goes on, links to a file of root's
    under the names root writes at the end (run.json's and summary.json's temporary files,
    a trace left as .partial). The run fails naming them; the file is untouched."""
    require_real_testbed()
    exp = tmp_path / "exp.yaml"
    exp.write_text(RUN)
    out = tmp_path / "out"
    env = {**os.environ, "OPPSCHED_NETNS_PREFIX": "otrunf"}
    proc = subprocess.Popen([sys.executable, "-m", "oppsched", "run", str(exp), "--out", str(out)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    names = (".run.json.tmp", ".summary.json.tmp", "x.pcap.partial")
    try:
        def running():
            if proc.poll() is not None:
                raise AssertionError(f"the run ended early: {proc.stdout.read()}")
            try:
                run = json.loads((staging_dir(out) / "run.json").read_text())
            except (OSError, ValueError):
                return None
            return run["status"] == "running"
        nsbase.wait_for(running, timeout=60, what="the run running")
        user = privsep.RunUser.resolve()
        for n in names:
            link = staging_dir(out) / n
            link.symlink_to(canary)
            os.lchown(link, user.uid, user.gid)
    finally:
        try:
            rc = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(30)
    log = proc.stdout.read()
    assert canary.read_bytes() == CANARY_TEXT
    assert rc != 0, log
    assert "symlinks planted in the run folder" in log, log
    for n in names:
        assert f"{n} -> {canary}" in log, (n, log)
    run = json.loads((failed_dir(out) / "run.json").read_text())
    assert sorted(run["planted_symlinks"]) == sorted(f"{n} -> {canary}" for n in names)
    assert safefs.find_symlinks(failed_dir(out)) == []
    assert not out.exists()


# ----------------------------------------------------------------------------------------
# Item 2: an experiment file cannot direct root

MACSIM = """
experiment: x
kind: macsim
duration_s: 1
"""


@pytest.mark.parametrize("bad", [".", ".."])
def test_check_refuses_a_variant_named_dot_or_dotdot_naming_key_and_value(tmp_path, bad):
    exp = tmp_path / "exp.yaml"
    exp.write_text(MACSIM + f"variants:\n  - name: ok\n  - name: '{bad}'\n")
    r = run_cli("check", exp)
    assert r.returncode != 0
    assert f"variants[1].name: '{bad}' names a folder outside the results folder" in r.stderr


def test_check_refuses_a_sweep_over_a_variant_named_dotdot(tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text(MACSIM + "variants:\n  - name: '..'\nsweep:\n  axes:\n    s:\n"
                   "      key: seed\n      values: [1, 2]\n")
    r = run_cli("check", exp)
    assert r.returncode != 0 and "variants[0].name: '..'" in r.stderr


def test_a_build_dir_writable_by_others_or_owned_by_another_user_is_refused(tmp_path):
    from oppsched.experiments.testbed.programs import TestbedError, check_build_tree
    b = tmp_path / "build"
    prog = b / "host" / "daemon" / "oppsched-apd"
    prog.parent.mkdir(parents=True)
    prog.write_text("#!/bin/sh\n")
    for p in (tmp_path, b, b / "host", prog.parent, prog):
        os.chmod(p, 0o755)
    check_build_tree(b, [prog])  # root's or the invoking user's, 0755: fine
    os.chmod(prog.parent, 0o777)
    with pytest.raises(TestbedError, match=rf"build_dir: '{b}' is not a trusted build folder: "
                       rf"{prog.parent} is writable by group or others \(mode 0777\)"):
        check_build_tree(b, [prog])
    os.chmod(prog.parent, 0o755)
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    os.chown(prog, 4242, 4242)
    with pytest.raises(TestbedError, match=rf"{prog} is owned by uid 4242"):
        check_build_tree(b, [prog])


class _RecordingNs:
    name = "fake"

    def __init__(self):
        self.argv = None

    def run(self, argv, **kw):
        self.argv = list(argv)
        return subprocess.CompletedProcess(argv, 0, "attached\n", "")


def test_the_spm_marker_runs_as_the_run_user_with_bpf_net_admin_perfmon_only():
    from oppsched.testbed.links import attach_spm_marker
    user = privsep.RunUser("oppsched-t", 4321, 4321)
    ns = _RecordingNs()
    attach_spm_marker(ns, "eth0", "/b/oppsched-spm-mark", run_user=user)
    i = ns.argv.index("/b/oppsched-spm-mark")
    prefix = ns.argv[:i]
    assert prefix[0] == "setpriv" and "--no-new-privs" in prefix
    assert prefix[prefix.index("--reuid") + 1] == "4321"
    assert prefix[prefix.index("--bounding-set") + 1] == "-all,+bpf,+net_admin,+perfmon"
    assert prefix[prefix.index("--ambient-caps") + 1] == "-all,+bpf,+net_admin,+perfmon"


def test_the_spm_marker_attaches_as_the_run_user_with_those_capabilities(tmp_path):
    from oppsched.testbed.links import attach_spm_marker, find_spm_mark_binary
    b = find_spm_mark_binary()
    if not nsbase.is_root() or b is None:
        pytest.skip("needs root and the built oppsched-spm-mark")
    user = privsep.RunUser.resolve()
    with netns.Session(prefix="otrunm", workdir=tmp_path / "w", run_user=user) as s:
        a, c = s.add_netns("a"), s.add_netns("b")
        s.add_veth(a, "eth0", c, "eth0")
        line = attach_spm_marker(a, "eth0", b, run_user=user)
        assert "eth0 egress: marking" in line
        assert "spm_mark" in a.tc("filter", "show", "dev", "eth0", "egress")


def _keys(tmp_path):
    from oppsched.testbed import keys
    d = tmp_path / "keys"
    keys.generate(d, ["R1"])
    return keys, d


def test_a_keys_dir_file_that_is_a_symlink_is_refused_naming_it(tmp_path, canary):
    keys, d = _keys(tmp_path)
    os.unlink(d / "integrity.key")
    os.symlink(canary, d / "integrity.key")
    with pytest.raises(ConfigError, match=r"security.keys_dir: .*/keys/integrity.key cannot "
                       r"be opened without following a symlink"):
        keys.install(tmp_path / "run", d, ["R1"], curve=False, integrity=True)
    assert not (tmp_path / "run" / "keys" / "integrity.key").exists()


def test_a_keys_dir_that_is_a_symlink_or_group_writable_is_refused(tmp_path):
    keys, d = _keys(tmp_path)
    (tmp_path / "via").symlink_to(d)
    with pytest.raises(ConfigError, match=r"security.keys_dir: '.*/via' is a symlink"):
        keys.install(tmp_path / "run", tmp_path / "via", ["R1"], curve=True, integrity=False)
    os.chmod(d, 0o770)
    with pytest.raises(ConfigError, match=r"security.keys_dir: '.*/keys' is writable by group "
                       r"or others \(mode 0770\)"):
        keys.install(tmp_path / "run", d, ["R1"], curve=True, integrity=False)
    os.chmod(d, 0o700)
    out = keys.install(tmp_path / "run", d, ["R1"], curve=True, integrity=True)
    assert (out / "apd.secret").read_bytes() == (d / "apd.secret").read_bytes()
    assert (out / "apd.secret").stat().st_mode & 0o777 == 0o600


def test_out_is_replaced_only_when_empty_or_a_results_folder(tmp_path):
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    with pytest.raises(ConfigError, match=rf"--out: {home} is not empty and holds no "
                       r"experiment.yaml or config.json or run.json or sweep.json"):
        outlock.check_replaceable(home, "run")
    (tmp_path / "empty").mkdir()
    outlock.check_replaceable(tmp_path / "empty", "run")
    outlock.check_replaceable(tmp_path / "missing", "run")
    (home / "experiment.yaml").write_text("kind: macsim\n")
    outlock.check_replaceable(home, "run")
    with pytest.raises(ConfigError, match=rf"--out: {home} is not empty and holds no sweep.json"):
        outlock.check_replaceable(home, "sweep")
    # OUT.failed, which a failed run replaces, is held to the same rule.
    (tmp_path / "res.failed" / "thesis").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"--out: .*/res.failed is not empty"):
        outlock.check_replaceable(tmp_path / "res", "run")


def test_oppsched_run_refuses_an_out_that_is_no_results_folder_and_leaves_it(tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text(MACSIM)
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    r = run_cli("run", exp, "--out", out)
    assert r.returncode != 0 and f"--out: {out} is not empty" in r.stderr
    assert (out / "thesis.tex").read_text() == "years of work"


def test_the_run_user_is_never_nobody(monkeypatch):
    monkeypatch.setenv(privsep.RUN_USER_ENV, "nobody")
    with pytest.raises(nsbase.NetnsError, match="'nobody' is the shared `nobody`"):
        privsep.RunUser.resolve()


def test_a_missing_run_user_is_created_as_a_system_user(monkeypatch):
    import pwd
    if not nsbase.is_root():
        pytest.skip("useradd needs root")
    name = "oppsched-t30"
    subprocess.run(["userdel", name], capture_output=True)
    monkeypatch.delenv(privsep.RUN_USER_ENV, raising=False)
    monkeypatch.setattr(privsep, "RUN_USER", name)
    try:
        u = privsep.RunUser.resolve()
        pw = pwd.getpwnam(name)
        assert (u.name, u.uid) == (name, pw.pw_uid)
        assert 0 < pw.pw_uid < 1000 and pw.pw_shell.endswith("nologin")
    finally:
        subprocess.run(["userdel", name], capture_output=True)


# ----------------------------------------------------------------------------------------
# Item 3: one writer per OUT

HOLDER = textwrap.dedent("""
    import sys, time
    from oppsched.run.outlock import OutLock
    with OutLock(sys.argv[1], "sweep"):
        print("locked", flush=True)
        time.sleep(60)
""")


@pytest.fixture
def held_out(tmp_path):
    """OUT locked by another process (a sweep), as a second `oppsched` would find it."""
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE,
                         text=True, env={**os.environ, "PYTHONPATH": str(REPO / "tools")})
    try:
        assert p.stdout.readline().strip() == "locked"
        yield out, p.pid
    finally:
        p.kill()
        p.wait()


def test_a_second_writer_of_the_same_out_is_refused_naming_the_holder(held_out):
    out, pid = held_out
    with pytest.raises(outlock.OutBusy, match=rf"--out: {out} is in use by another run or "
                       rf"sweep: pid {pid} \(`.*-c.*`\), started \d{{4}}-\d\d-\d\d "):
        outlock.OutLock(out, "run").acquire()


def test_oppsched_run_and_sweep_refuse_an_out_another_one_holds(held_out, tmp_path):
    out, pid = held_out
    exp = tmp_path / "exp.yaml"
    exp.write_text(MACSIM + "sweep:\n  axes:\n    s:\n      key: seed\n      values: [1, 2]\n")
    for cmd in ("run", "sweep"):
        r = run_cli(cmd, exp, "--out", out)
        assert r.returncode != 0 and f"in use by another run or sweep: pid {pid}" in r.stderr, cmd
    assert not out.exists() and not (tmp_path / ".out.partial").exists()


def test_the_lock_is_released_and_its_file_removed_at_the_end(tmp_path):
    out = tmp_path / "out"
    with outlock.OutLock(out, "run"):
        holder = json.loads(outlock.lock_path(out).read_text())
        assert holder["pid"] == os.getpid() and holder["what"] == "run"
    assert not outlock.lock_path(out).exists()
    with outlock.OutLock(out, "run"):  # free again
        pass
