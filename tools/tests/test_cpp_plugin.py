"""C++ scheduler plugins (docs/extending.md, "C++ plugins"): `oppsched plugin new scheduler`
writes a project that builds out of the tree against host/include/oppsched/plugin_api.h; the
library it builds is accepted by `oppsched check` and the apd's --check and serves the users
it picks (macsim, through the bindings); a library of another ABI version or without the entry
point is refused by both, naming scheduler.library, the path and the reason; a relative library
is relative to the experiment file and the run's apd.yaml names its copy in the run folder
(an AQM plugin's too);
in a real-time run the library decides the slots inside the apd. The decisions themselves (candidates, served(), PF replacing an out-of-range answer, a late
one or a failure, and counting it) are pinned in host/tests/test_cpp_plugin.cc."""

import json
import os
import shutil
import subprocess

import pytest
import yaml

from oppsched import mac
from oppsched.testbed import daemonconf
from oppsched.commands.plugin_new import write_project
from oppsched.run.runner import load_experiment, run_experiment

from helpers import BASE, REPO, built_program, cfg_of, error_of, netns_prefix, \
    require_real_testbed, run_cli, run_layout, write_experiment, write_yaml

APD = built_program("host/daemon/oppsched-apd", "OPPSCHED_APD")
TEST_PLUGINS = {v: built_program(f"host/liboppsched_test_plugin_{v}.so", f"OPPSCHED_TEST_{v}")
                for v in ("abi2", "noentry")}
CMAKE = shutil.which("cmake")


@pytest.fixture(scope="module")
def rrtest(tmp_path_factory):
    """`oppsched plugin new scheduler rrtest --dir DIR`, built with cmake outside the tree:
    the library's path."""
    if CMAKE is None:
        pytest.skip("cmake is not installed")
    top = tmp_path_factory.mktemp("plugin")
    proj = top / "rrtest"
    r = run_cli("plugin", "new", "scheduler", "rrtest", "--dir", proj)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in proj.iterdir()) == ["CMakeLists.txt", "README.md", "rrtest.cc"]
    assert str(REPO / "host" / "include") in (proj / "CMakeLists.txt").read_text()
    for cmd in ([CMAKE, "-S", proj, "-B", proj / "build"], [CMAKE, "--build", proj / "build"]):
        b = subprocess.run(["nice", "-n", "19", *map(str, cmd)], capture_output=True, text=True,
                           timeout=300)
        assert b.returncode == 0, b.stdout + b.stderr
    lib = proj / "build" / "librrtest.so"
    assert lib.is_file()
    return lib


def _apd_check(tmp_path, cfg: dict, library) -> subprocess.CompletedProcess:
    conf = daemonconf.apd_config(cfg, run_layout(tmp_path, cfg))
    conf["scheduler"]["library"] = str(library)
    path = write_yaml(tmp_path / "apd.yaml", conf)
    return subprocess.run([str(APD), "--config", str(path), "--check"], capture_output=True,
                          text=True, timeout=30)


def test_plugin_new_refuses_a_name_that_is_no_identifier_and_a_folder_in_use(tmp_path):
    r = run_cli("plugin", "new", "scheduler", "rr-test", "--dir", tmp_path / "a")
    assert r.returncode == 2
    assert "NAME: 'rr-test' is not a C identifier" in r.stderr
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("")
    with pytest.raises(ValueError, match=r"--dir: .*/b exists and is not an empty folder"):
        write_project("scheduler", "rr", tmp_path / "b")


def test_the_generated_plugin_serves_candidates_in_round_robin_through_the_bindings(rrtest):
    s = mac.make_scheduler("plugin", {"library": str(rrtest), "num_users": 3})
    assert s.kind == "plugin"
    # user 2's rate is far the best: PF would serve it most; the plugin takes turns
    rates = [1e5, 2e5, 4e6]
    assert [s.step(rates, [True] * 3) for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    # only candidates are offered: user 1 has nothing queued
    assert [s.step(rates, [True, False, True]) for _ in range(4)] == [0, 2, 0, 2]
    c = s.counters
    assert c["plugin_decisions"] == 10 and c["plugin_fallbacks"] == 0
    # its param: users below min_rate_bps are skipped
    s = mac.make_scheduler("plugin", {"library": str(rrtest), "num_users": 3,
                                      "params": {"min_rate_bps": 1.5e5}})
    assert [s.step(rates, [True] * 3) for _ in range(4)] == [1, 2, 1, 2]


def test_the_generated_plugin_refuses_a_bad_param_with_its_reason(rrtest):
    msg = error_of(BASE, ["scheduler.kind=plugin", f"scheduler.library={rrtest}",
                          "scheduler.params.min_rate_bps=-1"])
    assert msg.startswith(f"scheduler.library: {rrtest}: plugin rrtest refused its params: "
                          "min_rate_bps: -1 must be >= 0"), msg


def test_oppsched_check_and_the_apd_accept_the_generated_plugin(rrtest, tmp_path):
    cfg = cfg_of(BASE, ["scheduler.kind=plugin", f"scheduler.library={rrtest}",
                        "scheduler.params.min_rate_bps=0", "scheduler.budget_fraction=0.25"])
    conf = daemonconf.apd_config(cfg, run_layout(tmp_path, cfg))
    assert conf["scheduler"] == {"kind": "plugin", "library": str(rrtest),
                                 "params": {"min_rate_bps": 0}, "alpha": 0.03,
                                 "budget_fraction": 0.25, "harq_first": True}
    if APD is None:
        pytest.skip("oppsched-apd is not built")
    r = _apd_check(tmp_path, cfg, rrtest)
    assert r.returncode == 0, r.stderr
    assert f"scheduler: plugin {rrtest}" in r.stderr


@pytest.mark.parametrize("variant,reason", [
    ("abi2", "ABI version 2, this oppsched takes 1: rebuild the plugin against "
             "oppsched/plugin_api.h"),
    ("noentry", "exports no oppsched_plugin_entry"),
])
def test_a_library_of_another_abi_or_without_entry_point_is_refused_by_check_and_apd(
        rrtest, tmp_path, variant, reason):
    lib = TEST_PLUGINS[variant]
    if lib is None:
        pytest.skip("the test plugins are not built (cmake --build build --target mac_tests)")
    msg = error_of(BASE, ["scheduler.kind=plugin", f"scheduler.library={lib}"])
    assert msg.startswith(f"scheduler.library: {lib}: {reason}"), msg
    if APD is None:
        pytest.skip("oppsched-apd is not built")
    good = cfg_of(BASE, ["scheduler.kind=plugin", f"scheduler.library={rrtest}"])
    r = _apd_check(tmp_path, good, lib)
    assert r.returncode == 2, r.stderr
    assert f"scheduler.library: {lib}: {reason}" in r.stderr, r.stderr


def test_a_library_that_is_missing_or_not_a_file_is_refused_naming_the_field(tmp_path):
    missing = tmp_path / "libnone.so"
    assert error_of(BASE, ["scheduler.kind=plugin", f"scheduler.library={missing}"]) == \
        f"scheduler.library: {missing}: no such file"
    assert error_of(BASE, ["scheduler.kind=plugin", f"scheduler.library={tmp_path}"]) == \
        f"scheduler.library: {tmp_path}: not a regular file"
    assert error_of(BASE, ["scheduler.kind=plugin"]).startswith(
        "scheduler.library: required with scheduler.kind plugin")
    assert error_of(BASE, ["scheduler.kind=pf", f"scheduler.library={missing}"]) == \
        f"scheduler.library: {str(missing)!r} is only for scheduler.kind plugin"
    assert error_of(BASE, ["scheduler.kind=plugin", f"scheduler.library={missing}",
                           "scheduler.file=x.py"]) == \
        "scheduler.file: 'x.py' is only for scheduler.kind python"


def test_a_relative_library_is_relative_to_the_experiment_file(rrtest, tmp_path):
    folder = tmp_path / "exp"
    folder.mkdir()
    shutil.copyfile(rrtest, folder / "librr.so")
    path = write_experiment(folder, BASE + "scheduler: {kind: plugin, library: librr.so}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cwd = os.getcwd()
    os.chdir(elsewhere)
    try:
        cfg = load_experiment(path)[2]
    finally:
        os.chdir(cwd)
    assert cfg["scheduler"]["library"] == str((folder / "librr.so").resolve())


def test_the_run_folder_gets_a_copy_of_the_library_and_apd_yaml_names_it(rrtest, tmp_path):
    cfg = cfg_of(BASE, ["scheduler.kind=plugin", f"scheduler.library={rrtest}"])
    lay = run_layout(tmp_path, cfg)
    daemonconf.write_all(cfg, lay)
    copy = tmp_path / "plugin.librrtest.so"
    assert copy.read_bytes() == rrtest.read_bytes()
    apd = yaml.safe_load((tmp_path / "apd.yaml").read_text())
    assert apd["scheduler"]["library"] == str(copy)


def _ipv4_udp(ecn: int, size: int = 100) -> bytes:
    import struct
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, ecn, size, 0, 0, 64, 17, 0,
                      bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return hdr + struct.pack("!HHHH", 1000, 9, size - 20, 0) + bytes(size - 28)


def test_the_generated_aqm_plugin_builds_and_marks_above_its_threshold(tmp_path):
    if CMAKE is None:
        pytest.skip("cmake is not installed")
    proj = tmp_path / "thr"
    r = run_cli("plugin", "new", "aqm", "thr", "--dir", proj)
    assert r.returncode == 0, r.stderr
    for cmd in ([CMAKE, "-S", proj, "-B", proj / "build"], [CMAKE, "--build", proj / "build"]):
        b = subprocess.run(["nice", "-n", "19", *map(str, cmd)], capture_output=True, text=True,
                           timeout=300)
        assert b.returncode == 0, b.stdout + b.stderr
    lib = proj / "build" / "libthr.so"
    q = mac.make_aqm("plugin", {"library": str(lib), "params": {"threshold_packets": 2}},
                     limit_packets=10, ecn=True)
    # two packets below the threshold pass; from the third on an ECN-capable packet is
    # marked and another dropped early
    assert [q.enqueue(_ipv4_udp(2), k * 1e-3) for k in range(3)] == [True, True, True]
    assert q.enqueue(_ipv4_udp(0), 4e-3) is False
    st = q.stats
    assert st["marked"] == 1 and st["dropped"]["early_drop"] == 1 and st["packets"] == 3
    assert "aqm.library" in (proj / "README.md").read_text()
    msg = error_of(BASE, ["aqm.kind=plugin", f"aqm.library={lib}",
                          "aqm.params.threshold_packets=0"])
    assert msg == f"aqm.library: {lib}: plugin thr refused its params: threshold_packets: 0 " \
                  "must be >= 1"


TEST_AQM = built_program("host/liboppsched_test_aqm_plugin.so", "OPPSCHED_TEST_AQM")


def test_an_aqm_plugin_is_checked_by_oppsched_check_and_the_apd_and_copied(rrtest, tmp_path):
    if TEST_AQM is None:
        pytest.skip("the test plugins are not built (cmake --build build --target mac_tests)")
    over = ["aqm.kind=plugin", f"aqm.library={TEST_AQM}", "aqm.params.mode=drop_every_3rd"]
    cfg = cfg_of(BASE, over)
    lay = run_layout(tmp_path, cfg)
    daemonconf.write_all(cfg, lay)
    copy = tmp_path / "plugin.liboppsched_test_aqm_plugin.so"
    assert copy.read_bytes() == TEST_AQM.read_bytes()
    apd = yaml.safe_load((tmp_path / "apd.yaml").read_text())
    assert apd["aqm"]["kind"] == "plugin" and apd["aqm"]["library"] == str(copy)
    assert apd["aqm"]["params"] == {"mode": "drop_every_3rd"}
    # a scheduler's library is no AQM: both refuse it, naming aqm.library and the family
    msg = error_of(BASE, ["aqm.kind=plugin", f"aqm.library={rrtest}"])
    assert msg == f"aqm.library: {rrtest}: a plugin of family scheduler (1), not an aqm plugin"
    assert error_of(BASE, over + ["queue.mode=shared"]).startswith(
        "aqm.kind: plugin runs in per_user queues only")
    assert error_of(BASE, ["aqm.kind=droptail", f"aqm.library={TEST_AQM}"]) == \
        f"aqm.library: {str(TEST_AQM)!r} is only for aqm.kind plugin"
    if APD is None:
        pytest.skip("oppsched-apd is not built")
    r = subprocess.run([str(APD), "--config", str(tmp_path / "apd.yaml"), "--check"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert f"aqm: plugin {copy}" in r.stderr
    apd["aqm"]["library"] = str(rrtest)
    path = write_yaml(tmp_path / "apd.bad.yaml", apd)
    r = subprocess.run([str(APD), "--config", str(path), "--check"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2
    assert f"aqm.library: {rrtest}: a plugin of family scheduler (1), not an aqm plugin" in \
        r.stderr, r.stderr


MACSIM = """
experiment: cpp-plugin-macsim
kind: macsim
duration_s: 1
seed: 3
phy: {slot_s: 1.667e-3, rate_table: evdo}
scheduler: {kind: plugin, library: %s}
users:
  - {name: weak, mean_snr_db: 0.0, doppler_hz: 10}
  - {name: strong, mean_snr_db: 10.0, doppler_hz: 10}
"""


def test_macsim_runs_the_generated_plugin_and_keeps_a_copy(rrtest, tmp_path):
    path = write_experiment(tmp_path, MACSIM % rrtest)
    out = tmp_path / "out"
    run_experiment(path, out)
    run = next(p for p in out.rglob("plugin.librrtest.so"))
    assert run.read_bytes() == rrtest.read_bytes()
    sched = json.loads(next(out.rglob("scheduler.json")).read_text())
    assert sched["plugin_decisions"] > 0 and sched["plugin_fallbacks"] == 0, sched


# ---- in real time, inside the apd --------------------------------------------------------

REALTIME = """
experiment: cpp-plugin-realtime
kind: testbed
duration_s: 5
phy: {mode: abstract}
devices:
  - {name: R1, channel: {mean_snr_db: 15.0}}
  - {name: R2, channel: {mean_snr_db: 10.0}}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1}
  - {id: f2, server: S1, device: R2}
scheduler: {kind: plugin, library: %s}
"""


def test_a_cpp_scheduler_decides_the_slots_of_a_real_time_run_inside_the_apd(rrtest, tmp_path):
    require_real_testbed()
    exp = write_experiment(tmp_path, REALTIME % rrtest)
    with netns_prefix():
        runs = run_experiment(exp, tmp_path / "out", ["capture.pcaps=false"])
    out, s = tmp_path / "out", runs[0][1]
    for f in s["flows"]:
        assert f["error"] is None and f["goodput_bps"] > 50e3, f
    p = s["scheduler"]
    assert p["kind"] == "plugin"
    # the library's code ran in the slot loop, after the privilege drop, under seccomp
    assert p["plugin_decisions"] > 100
    assert p["plugin_exceptions"] == 0 and p["plugin_invalid_decisions"] == 0
    assert p["plugin_fallbacks"] == p["plugin_deadline_misses"]
    apd = yaml.safe_load((out / "apd.yaml").read_text())
    assert apd["scheduler"]["library"].endswith("/plugin.librrtest.so")
    assert (out / "plugin.librrtest.so").read_bytes() == rrtest.read_bytes()
    stats = json.loads((out / "apd.stats.json").read_text())
    assert stats["core"]["scheduler"]["plugin_decisions"] == p["plugin_decisions"]
