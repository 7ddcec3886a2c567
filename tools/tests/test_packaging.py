"""The oppsched package installed as a copy (pip install, not editable), away from the
checkout: every module of the source tree is in it and imports, and it finds the
experiment files and the measured MCS tables through oppsched.paths (OPPSCHED_HOME); without
OPPSCHED_HOME the error says to set it.

pip builds in the source folder (build/, *.egg-info), so the package is installed from a
copy of tools/ (pyproject.toml and oppsched/), leaving the checkout untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

TOOLS = REPO / "tools"

# Imports every module of the installed package (but __main__, which runs the command line)
# and prints where they came from and what oppsched.paths finds.
PROBE = """
import importlib, json, pkgutil, sys
import oppsched
names = sorted(m.name for m in pkgutil.walk_packages(oppsched.__path__, "oppsched."))
files = {n: importlib.import_module(n).__file__ for n in names if n != "oppsched.__main__"}
from oppsched import paths
from oppsched.testbed import daemonconf
out = {"package": oppsched.__file__, "modules": names, "files": files}
if "--paths" in sys.argv:
    out["experiments"] = str(paths.experiments_dir())
    out["mcs_tables"] = [str(daemonconf.measured_mcs_table(p, fec))
                         for p in daemonconf.PROFILES for fec in ("ldpc", "conv")]
print(json.dumps(out))
"""


def source_modules() -> list[str]:
    """Every module of the source tree tools/oppsched, as dotted names."""
    out = []
    for p in (TOOLS / "oppsched").rglob("*.py"):
        parts = list(p.relative_to(TOOLS).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if len(parts) > 1:
            out.append(".".join(parts))
    return sorted(out)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    src.mkdir()
    shutil.copy(TOOLS / "pyproject.toml", src)
    shutil.copytree(TOOLS / "oppsched", src / "oppsched",
                    ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp / "site"
    cp = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps",
                         "--no-build-isolation", "--no-index", "--target", str(target), str(src)],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return target


def probe(target: Path, home: Path | None, *args: str) -> subprocess.CompletedProcess:
    """PROBE in a fresh interpreter with the installed copy first on sys.path, run from a
    folder outside the checkout."""
    env = {k: v for k, v in os.environ.items() if k != "OPPSCHED_HOME"}
    env["PYTHONPATH"] = os.pathsep.join([str(target), *filter(None, [env.get("PYTHONPATH")])])
    if home is not None:
        env["OPPSCHED_HOME"] = str(home)
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          cwd=target.parent, env=env, timeout=120)


def test_the_installed_copy_holds_every_module_and_each_imports_from_it(installed):
    cp = probe(installed, REPO)
    assert cp.returncode == 0, cp.stderr
    got = json.loads(cp.stdout)
    assert got["modules"] == source_modules()
    assert Path(got["package"]).parent == installed / "oppsched"
    for name, file in got["files"].items():
        assert Path(file).is_relative_to(installed), (name, file)


def test_the_installed_copy_finds_experiments_and_mcs_tables_through_oppsched_home(installed):
    cp = probe(installed, REPO, "--paths")
    assert cp.returncode == 0, cp.stderr
    got = json.loads(cp.stdout)
    assert Path(got["experiments"]) == REPO.resolve() / "experiments"
    assert len(got["mcs_tables"]) == 4
    for table in got["mcs_tables"]:
        assert Path(table).is_file(), table
        assert Path(table).is_relative_to(REPO.resolve() / "experiments/linkcurves"), table


def test_the_installed_copy_without_oppsched_home_says_to_set_it(installed):
    cp = probe(installed, None, "--paths")
    assert cp.returncode != 0
    assert "RuntimeError: OPPSCHED_HOME is not set" in cp.stderr, cp.stderr
    assert str(installed / "oppsched") in cp.stderr
