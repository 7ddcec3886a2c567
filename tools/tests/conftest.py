"""pytest configuration for tools/tests: makes the shared `helpers` module importable,
hands the slowest test files out first when pytest-xdist runs files side by side, and holds
the machine lock shared around every test (helpers.the_machine_to_itself)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import MACHINE  # noqa: E402

# The files that take longest (whole shortened paper runs, many real runs), slowest first,
# from `make test`'s --durations. With xdist's one-file-per-worker scheduling, a long file
# handed out last would leave one worker running it alone at the end; handed out first,
# the short files fill in around it. A file not listed keeps its place after these.
# The default experiment's file goes first of all: its run takes the machine to itself
# (helpers.the_machine_to_itself), which waits for the tests already running to end; at
# the start those are the other files' first tests, which take a second, where later it
# waited for whole paper sweeps (the fixture's set-up: 130 s on CI, for 55 s of runs).
SLOWEST_FIRST = (
    "test_default_experiment.py",
    "test_testbed.py",
    "test_sweep.py",
    "test_paper_clamp_fading.py",
    "test_paper_srinivasan_baras.py",
    "test_paper_wu.py",
    "test_paper_clamp.py",
    "test_paper_reaqm.py",
    "test_paper_clamp_short_flows.py",
    "test_tutorial.py",
    "test_reliability.py",
    "test_hardening.py",
    "test_medium_sample.py",
    "test_security.py",
    "test_packaging.py",
    "test_preflight.py",
    "test_paper_clamp_download.py",
    "test_wireshark.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    # sorted() is stable: tests keep their order within a file, other files theirs.
    items[:] = sorted(items, key=lambda it: rank.get(it.path.name, len(rank)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # Shared around the whole protocol (set-up of module fixtures, the call, tear-down), so
    # that a run holding the machine exclusively has no other test's run beside it.
    MACHINE.acquire_shared()
    try:
        yield
    finally:
        MACHINE.release_shared()
