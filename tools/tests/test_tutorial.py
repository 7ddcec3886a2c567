"""The plugin tutorial of docs/howto/add-an-algorithm.md ("Your first scheduler, in ten
minutes") as a reader follows it: its Python file written as given, its commands run as
given in a folder that looks like the repository's (the venv and experiments/ linked), with
one change: each run is 6 s instead of the page's 60 (a shortened run; this test checks
that the steps work and what they print, not the page's figures)."""

import re
import shlex
import subprocess
import sys

import pandas as pd

from helpers import REPO, needs_root, netns_prefix, require_real_testbed

PAGE = REPO / "docs/howto/add-an-algorithm.md"
SECTION = "## Your first scheduler, in ten minutes"


def _blocks() -> list[tuple[str, str]]:
    """The section's fenced blocks, in order: (language, text)."""
    text = PAGE.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return re.findall(r"```(\w+)\n(.*?)```", text[start:end], flags=re.S)


def _argv(block: str) -> list[str]:
    """A shell block's one command as argv (continuation lines joined, as sh reads them)."""
    return shlex.split(block.replace("\\\n", " "))


def test_the_tutorials_steps_are_a_file_a_check_a_run_a_sweep_and_a_pandas_read():
    kinds = [lang for lang, _ in _blocks()]
    assert kinds == ["python", "sh", "sh", "sh", "python"], kinds
    (_, code), (_, check), (_, run), (_, sweep), _ = _blocks()
    assert "class TunablePF" in code and len(code.splitlines()) <= 40
    assert _argv(check)[:3] == [".venv/bin/oppsched", "plugin", "check"]
    assert _argv(run)[:2] == [".venv/bin/oppsched", "run"]
    assert _argv(sweep)[:2] == [".venv/bin/oppsched", "sweep"]
    for argv in (_argv(run), _argv(sweep)):
        assert argv[argv.index("--duration") + 1] == "60"


@needs_root
def test_the_plugin_tutorial_runs_as_written(tmp_path):
    require_real_testbed()
    (_, code), (_, check), (_, run), (_, sweep), (_, read) = _blocks()
    home = tmp_path / "repo"
    home.mkdir()
    for name in (".venv", "experiments"):
        (home / name).symlink_to(REPO / name)
    (home / "my_sched.py").write_text(code)

    def sh(block: str, timeout: float) -> subprocess.CompletedProcess:
        argv = _argv(block)
        if "--duration" in argv:
            argv[argv.index("--duration") + 1] = "6"
        with netns_prefix():
            return subprocess.run(argv, cwd=home, capture_output=True, text=True,
                                  timeout=timeout)

    r = sh(check, 300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "class TunablePF (scheduler)" in r.stdout and "FAIL" not in r.stdout
    assert "1 of 1 class(es) pass" in r.stdout + r.stderr

    r = sh(run, 600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summaries = sorted((home / "results" / "my-sched").glob("*/summary.json"))
    assert {p.parent.name for p in summaries} == {"clamp-off", "clamp-on"}, summaries
    assert (home / "results" / "my-sched" / "report.html").exists()
    for p in summaries:
        s = pd.read_json(p, typ="series")
        sched = s["scheduler"]
        assert sched["kind"] == "python" and sched["plugin_decisions"] > 100, sched
        assert sched["plugin_exceptions"] == 0, sched

    r = sh(sweep, 900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = pd.read_csv(home / "results" / "my-sched-sweep" / "sweep.csv")
    assert sorted(zip(d["variant"], d["beta"].fillna(-1))) == [
        ("mine", 0.5), ("mine", 1.0), ("mine", 2.0), ("pf", -1)]
    assert (d["goodput_total_bps"] > 0).all()
    assert (home / "results" / "my-sched-sweep" / "report.html").exists()

    # the page's pandas lines, as given, in the same folder
    r = subprocess.run([sys.executable, "-c", read], cwd=home, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "jain_index_flows" in r.stdout and r.stdout.count("mine") == 3
