"""Every experiment file in experiments/ loads and validates (as gr-satellites does for its
satellite files): a broken file is caught here, not an hour into a run."""

import pytest

from oppsched.run.runner import load_experiment
from helpers import REPO

FILES = sorted((REPO / "experiments").rglob("*.yaml"))


def test_there_are_experiment_files():
    assert FILES, "experiments/ has no YAML files"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(REPO)) for p in FILES])
def test_experiment_file_validates(path):
    _, _, resolved = load_experiment(path)
    assert resolved["experiment"]
    assert resolved["duration_s"] > 0
    names = [v["name"] for v in resolved["variants"]]
    assert len(names) == len(set(names)), f"duplicate variant names in {path}: {names}"
