"""oppsched.paths: the checkout (OPPSCHED_HOME), the build tree of a run (an experiment's
build_dir, else OPPSCHED_BUILD, else the checkout's build/) and the folder of the package
that child processes put on PYTHONPATH."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import oppsched
from oppsched import paths
from oppsched.experiments import testbed
from oppsched.experiments.testbed import programs
from helpers import BASE, REPO, cfg_of


def test_without_settings_the_build_tree_is_the_checkouts(monkeypatch):
    monkeypatch.delenv("OPPSCHED_HOME", raising=False)
    monkeypatch.delenv("OPPSCHED_BUILD", raising=False)
    assert paths.home() == REPO.resolve()
    assert paths.build_dir() == paths.default_build_dir() == REPO.resolve() / "build"


def test_oppsched_build_moves_the_build_tree_and_an_explicit_folder_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("OPPSCHED_BUILD", str(tmp_path / "b"))
    assert paths.build_dir() == tmp_path / "b"
    assert paths.build_dir("") == tmp_path / "b"  # an experiment's build_dir left empty
    assert paths.build_dir(tmp_path / "x") == tmp_path / "x"


def test_oppsched_home_must_be_a_checkout(monkeypatch, tmp_path):
    monkeypatch.setenv("OPPSCHED_HOME", str(tmp_path))
    with pytest.raises(RuntimeError, match="OPPSCHED_HOME: .* is not an oppsched checkout"):
        paths.experiments_dir()


def test_a_run_without_programs_names_the_build_folder_and_oppsched_build(monkeypatch, tmp_path):
    monkeypatch.setenv("OPPSCHED_BUILD", str(tmp_path / "nowhere"))
    with pytest.raises(testbed.TestbedError) as e:
        testbed.find_programs(cfg_of(BASE))
    msg = str(e.value)
    assert f"{tmp_path / 'nowhere'}/host/daemon/oppsched-apd" in msg
    assert "set build_dir or $OPPSCHED_BUILD" in msg


def test_a_python_phy_runs_this_package_with_the_builds_modules(monkeypatch, tmp_path):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    env = programs.phy_env(cfg_of(BASE + f"build_dir: {tmp_path}\n"))
    first, second = env["PYTHONPATH"].split(os.pathsep)
    assert Path(first) == paths.package_parent() == Path(oppsched.__file__).resolve().parents[1]
    assert Path(second) == tmp_path / "python"


def test_a_relative_data_file_is_found_from_here_first_then_from_the_checkout(tmp_path,
                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    table = "experiments/linkcurves/awgn-evdo-1msps/mcs_table.csv"
    assert paths.data_file(table) == paths.home() / table
    (tmp_path / "mine.csv").write_text("x")
    assert paths.data_file("mine.csv") == tmp_path / "mine.csv"
    assert paths.data_file("/abs/x.csv") == Path("/abs/x.csv")
