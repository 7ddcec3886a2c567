"""Wang & Song, REAQM, Fig. 3, shortened: experiments/reaqm/load-sweep.yaml at 10
connections, REAQM against REM (the algorithm it improves on), 20 s per run. Asserts the
paper's qualitative result: REAQM holds a shorter queue than REM at the same load while
keeping the link busy."""

import pandas as pd
import pytest

from helpers import REPO, needs_root, netns_prefix, require_real_testbed
from oppsched.sweep import run_sweep

EXPERIMENT = REPO / "experiments" / "reaqm" / "load-sweep.yaml"


@pytest.fixture(scope="module")
def reaqm_vs_rem(tmp_path_factory):
    require_real_testbed()
    out = tmp_path_factory.mktemp("reaqm-load")
    with netns_prefix():
        failed = run_sweep(EXPERIMENT, out, [
            "sweep.axes.half_flows.values=[5]",
            "variants=[{name: reaqm, set: {aqm.kind: reaqm}}, {name: rem, set: {aqm.kind: rem}}]",
            "analysis.warmup_s=5",
        ], duration=20.0)
    assert failed == 0
    return pd.read_csv(out / "sweep.csv").set_index("variant")


@needs_root
def test_reaqm_holds_a_shorter_queue_than_rem_and_keeps_the_link_busy(reaqm_vs_rem):
    q = reaqm_vs_rem["user.R1.mean_queue_bytes"]
    assert q["reaqm"] < 0.8 * q["rem"], q.to_dict()
    util = reaqm_vs_rem["mac_throughput_total_bps"] / 10e6
    assert util["reaqm"] > 0.85, util.to_dict()
