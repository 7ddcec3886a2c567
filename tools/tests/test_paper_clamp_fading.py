"""Andrew & Hanly, CLAMP, Figs. 4 and 7, shortened: experiments/clamp/fading-sweep.yaml (the
fading topology of Fig. 3 on the paper's own link, fading-abstract.yaml swept) at 60 Hz only,
two drop-tail buffers for NewReno and two values of CLAMP's a, 30 s per run. The pair
(60 kB buffer, a = 27 kB) is fading-abstract.yaml itself. Asserts the paper's qualitative
results: the mean queueing delay grows with the buffer (NewReno) and with a (CLAMP), Fig. 7;
at about equal queueing delay CLAMP shares the three devices' throughput more fairly than
NewReno, and the two flows that share one device's queue (10 ms and 180 ms) get about equal
rates under CLAMP where NewReno starves the long one, Fig. 4."""

import pandas as pd
import pytest

from helpers import REPO, needs_root, netns_prefix, require_real_testbed
from oppsched.sweep import run_sweep

EXPERIMENT = REPO / "experiments" / "clamp" / "fading-sweep.yaml"


@pytest.fixture(scope="module")
def fading_sweep(tmp_path_factory):
    require_real_testbed()
    out = tmp_path_factory.mktemp("clamp-fading-sweep")
    with netns_prefix():
        failed = run_sweep(EXPERIMENT, out, [
            "sweep.axes.doppler_hz.values=[60.0]",
            "sweep.axes.buffer_bytes.values=[15000, 60000]",
            "sweep.axes.a_bytes.values=[5000, 27000]",
        ], duration=30.0)
    assert failed == 0
    return pd.read_csv(out / "sweep.csv")


def _row(df, variant, axis, value):
    (i,) = df.index[(df["variant"] == variant) & (df[axis] == value)]
    return df.loc[i]


@needs_root
def test_queueing_delay_grows_with_newrenos_buffer_and_with_clamps_a(fading_sweep):
    d = fading_sweep
    small, large = (_row(d, "clamp-off", "buffer_bytes", b)["mean_queue_delay_ms"]
                    for b in (15000, 60000))
    assert large > 1.5 * small, (small, large)
    small, large = (_row(d, "clamp-on", "a_bytes", a)["mean_queue_delay_ms"]
                    for a in (5000, 27000))
    assert large > 1.5 * small, (small, large)


@needs_root
def test_clamp_shares_fairly_where_newreno_starves_the_long_flow_of_a_shared_queue(fading_sweep):
    newreno = _row(fading_sweep, "clamp-off", "buffer_bytes", 60000)
    clamp = _row(fading_sweep, "clamp-on", "a_bytes", 27000)
    # about equal queueing delay: the operating point fading-abstract.yaml picks
    assert 0.5 < clamp["mean_queue_delay_ms"] / newreno["mean_queue_delay_ms"] < 2.0
    fair = "jain_index_flows_fair_share"
    assert clamp[fair] > 0.95 and clamp[fair] > newreno[fair], (clamp[fair], newreno[fair])
    # flows 3 (10 ms) and 4 (180 ms) share device R34's queue
    ratio = {v: r["flow.f4.goodput_steady_bps"] / r["flow.f3.goodput_steady_bps"]
             for v, r in (("clamp", clamp), ("newreno", newreno))}
    assert ratio["clamp"] > 0.7 and ratio["clamp"] > ratio["newreno"] + 0.15, ratio
