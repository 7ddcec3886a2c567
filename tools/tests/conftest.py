"""pytest configuration for tools/tests: makes the shared `helpers` module importable, and
hands the slowest test files out first when pytest-xdist runs files side by side."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The files that take longest (whole shortened paper runs, many real runs), slowest first,
# from `make test`'s --durations. With xdist's one-file-per-worker scheduling, a long file
# handed out last would leave one worker running it alone at the end; handed out first,
# the short files fill in around it. A file not listed keeps its place after these.
SLOWEST_FIRST = (
    "test_testbed.py",
    "test_sweep.py",
    "test_paper_clamp_fading.py",
    "test_paper_srinivasan_baras.py",
    "test_paper_wu.py",
    "test_paper_clamp.py",
    "test_paper_reaqm.py",
    "test_default_experiment.py",
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
