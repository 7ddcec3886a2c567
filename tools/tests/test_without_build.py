"""The `oppsched` command without a build: what only reads and checks works, and gives what it
gives with the build; what runs compiled code says which module it needs.

Each command runs in a subprocess whose import system refuses the compiled modules
(`_oppsched_mac`, `gnuradio.oppsched`), as on a machine that has not run `make`; the same
command with the build is the reference.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from helpers import REPO, run_cli, write_experiment

# Runs `oppsched ARGS` with the compiled modules unimportable.
_NO_BUILD = textwrap.dedent("""
    import importlib.abc, sys

    class NoBuild(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "_oppsched_mac" or name.split(".")[:2] == ["gnuradio", "oppsched"]:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoBuild())
    from oppsched.cli import main
    sys.argv[0] = "oppsched"
    raise SystemExit(main(sys.argv[1:]))
""")

# What `oppsched check` leaves out without the MAC library, on a line of its own.
NOTE = "  not checked without the build (_oppsched_mac is not importable; run `make`): "


def no_build(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _NO_BUILD, *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


def default_experiment() -> str:
    """The Makefile's EXPERIMENT (what `make run` runs)."""
    for line in (REPO / "Makefile").read_text().splitlines():
        name, sep, value = line.partition("?=")
        if sep and name.strip() == "EXPERIMENT":
            return value.strip()
    raise AssertionError("Makefile: no EXPERIMENT ?= line")


def test_the_compiled_modules_are_really_refused_in_the_subprocess():
    r = subprocess.run([sys.executable, "-c", _NO_BUILD.replace(
        "from oppsched.cli import main", "import _oppsched_mac\nfrom oppsched.cli import main")],
        capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 1 and "No module named '_oppsched_mac'" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-c", _NO_BUILD.replace(
        "from oppsched.cli import main", "import gnuradio.oppsched\nfrom oppsched.cli import main")],
        capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 1 and "No module named 'gnuradio.oppsched'" in r.stderr, r.stderr


@pytest.mark.parametrize("experiment", ["experiments/clamp/deterministic.yaml",
                                        default_experiment(),
                                        "experiments/srinivasan-baras/alpha-sweep.yaml"])
def test_check_of_a_committed_experiment_gives_the_builds_verdict(experiment):
    with_build, without = run_cli("check", experiment), no_build("check", experiment)
    assert with_build.returncode == 0, with_build.stderr
    assert without.returncode == 0, without.stderr
    assert NOTE not in with_build.stdout
    # the same verdict, plus the line naming what the MAC library would have checked too
    lines = without.stdout.splitlines()
    kept = [x for x in lines if not x.startswith(NOTE)]
    assert kept == with_build.stdout.splitlines()
    if "(testbed," in with_build.stdout:
        assert any(x.startswith(NOTE) and "python plugins" in x for x in lines), lines


@pytest.mark.parametrize("override,message", [
    ("scheduler.alpha=0", "scheduler.alpha: 0.0 not in (0,1]"),
    ("scheduler.alfa=0.1", "unknown key 'alfa'"),
    ("phy.profile=fast", "phy.profile: 'fast' is not one of"),
])
def test_check_refuses_a_bad_experiment_with_the_builds_message(override, message):
    args = ("check", "experiments/clamp/deterministic.yaml", "--set", override)
    with_build, without = run_cli(*args), no_build(*args)
    assert with_build.returncode == 2 and message in with_build.stderr, with_build.stderr
    assert (without.returncode, without.stderr, without.stdout) == (
        with_build.returncode, with_build.stderr, with_build.stdout)


def test_check_refuses_a_file_with_a_repeated_key_without_the_build(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("kind: macsim\nexperiment: a\nduration_s: 1\nduration_s: 2\n")
    r = no_build("check", p)
    assert r.returncode == 2
    assert f"{p}: duration_s: duplicate key (line 4)" in r.stderr, r.stderr


def _subcommands() -> list[str]:
    r = no_build("--help")
    assert r.returncode == 0, r.stderr
    usage = r.stdout.split("{", 1)[1].split("}", 1)[0]
    return usage.split(",")


def test_every_help_works_without_the_build():
    subs = _subcommands()
    assert {"run", "analyze", "sweep", "check", "bench", "linkcurves", "decode"} <= set(subs)
    for sub in subs:
        r = no_build(sub, "--help")
        assert r.returncode == 0, (sub, r.stderr)
        assert r.stdout.startswith(f"usage: oppsched {sub}"), (sub, r.stdout[:200])
        assert r.stdout == run_cli(sub, "--help").stdout.replace(
            "usage: __main__.py", "usage: oppsched"), sub


MACSIM = """
experiment: without-build
kind: macsim
duration_s: 2
seed: 7
phy: {slot_s: 1.667e-3, rate_table: evdo}
scheduler: {kind: pf}
users:
  - {name: weak, mean_snr_db: 0.0, doppler_hz: 10}
  - {name: strong, mean_snr_db: 10.0, doppler_hz: 10}
"""


def test_analyze_of_a_run_folder_recomputes_the_builds_summary(tmp_path):
    from oppsched.run.runner import run_experiment

    out = tmp_path / "out"
    run_experiment(write_experiment(tmp_path, MACSIM), out)  # with the build: macsim's run
    before = json.loads((out / "summary.json").read_text())
    (out / "report.html").unlink()
    r = no_build("analyze", out)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "summary.json").read_text()) == before
    assert (out / "report.html").is_file()


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_command_that_runs_says_it_needs_the_build_by_module_name(command, tmp_path):
    out = tmp_path / "out"
    r = no_build(command, "experiments/clamp/deterministic.yaml", "--out", out)
    assert r.returncode == 1
    assert r.stderr.strip() == (f"oppsched {command} needs the built testbed: _oppsched_mac is "
                                "not importable (run `make`)")
    assert not out.exists()  # refused before any folder is made


def test_a_command_of_the_phy_names_the_phy_module(tmp_path):
    r = no_build("linkcurves", "--out", tmp_path / "curves")
    assert r.returncode == 2
    assert "linkcurves needs the PHY bindings (gnuradio.oppsched): run `make build`" in r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def test_what_only_the_mac_library_checks_is_named_as_left_out_without_the_build():
    # an AQM parameter's range is the C++ registry's own check (make_aqm): with the build it
    # refuses the file; without, check passes what the schema can check and says what it left
    args = ("check", "experiments/clamp/deterministic.yaml", "--set", "aqm.kind=red",
            "--set", "aqm.params.min_th=-1")
    with_build, without = run_cli(*args), no_build(*args)
    assert with_build.returncode == 2
    assert "aqm.params: red.min_th: -1 must be >= 0" in with_build.stderr, with_build.stderr
    assert without.returncode == 0, without.stderr
    assert any(x.startswith(NOTE) and "aqm parameters" in x
               for x in without.stdout.splitlines()), without.stdout


def test_help_and_check_import_neither_pandas_nor_scipy_nor_matplotlib():
    # They take seconds of CPU to import; only the commands that read traces or draw
    # need them (cli.py, commands/parsers.py).
    code = ("import sys\nfrom oppsched import cli\n"
            "assert cli.main(['check', sys.argv[1]]) == 0\n"
            "print(sorted(m for m in ('pandas', 'scipy', 'matplotlib') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, default_experiment()], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout
