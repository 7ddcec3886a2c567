"""The order in which pytest-xdist hands test files out (conftest.SLOWEST_FIRST)."""

from pathlib import Path

import conftest


def test_every_file_handed_out_first_exists_and_is_named_once():
    here = Path(__file__).resolve().parent
    missing = [n for n in conftest.SLOWEST_FIRST if not (here / n).is_file()]
    assert not missing, f"conftest.SLOWEST_FIRST names files that are not here: {missing}"
    assert len(set(conftest.SLOWEST_FIRST)) == len(conftest.SLOWEST_FIRST)
