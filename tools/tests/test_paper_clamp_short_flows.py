"""Andrew & Hanly, CLAMP, §V-H, shortened: experiments/clamp/short-flows.yaml (one device,
one long-lived NewReno flow, 4000-byte transfers with exponential idle times) with real
TCP over the abstract PHY, 30 s per variant, the short flows from 5 s with a mean idle of
1 s (about 20 transfers).

What is asserted: the mechanism (every short transfer is a new connection that receives
its 4000 bytes, the idle times are the seed's draws and are waited out), the long flow
carrying on while the short flows come and go in both variants ("CLAMP and TCP both track
the changing dynamics"), and the queue fluctuating about as much under CLAMP as under
NewReno ("the queue fluctuations are quite similar"). The paper's other remark, that the
long flow's rate fluctuates less under CLAMP, is not asserted: at equal mean queue it
held in some 30-s runs and not in others."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from helpers import NO_PLOTS, REPO, RUN_JOBS, needs_root, netns_prefix, require_real_testbed
from oppsched.testbed import transfers
from oppsched.run.runner import run_experiment

EXPERIMENT = REPO / "experiments" / "clamp" / "short-flows.yaml"
START, DURATION, MEAN_IDLE = 5.0, 30.0, 1.0
VARIANTS = ("clamp-off", "clamp-on")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    require_real_testbed()
    out = tmp_path_factory.mktemp("clamp-short-flows")
    with netns_prefix():
        run_experiment(EXPERIMENT, out, [
            NO_PLOTS, f"flows[1].start_s={START}", f"flows[1].repeat.idle_mean_s={MEAN_IDLE}",
            f"analysis.warmup_s={START}", "capture.pcaps=false"], duration=DURATION,
            jobs=RUN_JOBS)
    return out


def records(rundir) -> pd.DataFrame:
    return pd.read_csv(transfers.client_csv(rundir, "short"))


def span(rundir):
    """Queue (slots.csv) and long-flow rate (iperf3 0.5-s intervals) while the short flows
    run."""
    run = json.loads((rundir / "run.json").read_text())
    d = pd.read_csv(rundir / "slots.csv")
    t = (d["t_ns"] - run["t0_mono_ns"]) / 1e9
    q = d["queue.R1"][(t >= START) & (t < DURATION)]
    j = json.loads((rundir / "flow.long.receiver.json").read_text())
    r = np.array([i["sum"]["bits_per_second"] for i in j["intervals"]
                  if i["sum"]["start"] >= START])
    return q, r


@needs_root
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_short_transfer_gets_its_4000_bytes_on_a_new_connection(runs, variant):
    d = records(runs / variant)
    assert len(d) >= 8, d  # ~25 s at ~1.3 s per transfer and idle
    body, last = d.iloc[:-1], d.iloc[-1]
    assert (body["complete"] == 1).all() and (body["bytes"] == 4000).all(), body
    # The last one is complete too, or was cut at the stop time.
    assert last["complete"] == 1 or last["error"] == "cut at the stop time", last
    ports = d["local_port"].dropna()  # a transfer cut before it connected has none
    assert len(ports) >= len(d) - 1, d
    # A new connection per transfer: the server accepted one for each that connected (the
    # kernel may hand a closed connection's local port to a later one, so the ports alone
    # cannot tell).
    served = pd.read_csv(transfers.server_csv(runs / variant, "short"))
    assert served["conn"].nunique() == len(served) and len(served) >= len(ports), served
    assert (d["start_s"] >= START - 0.5).all() and (d["start_s"] < DURATION).all()
    s = json.loads((runs / variant / "summary.json").read_text())
    t = next(f for f in s["flows"] if f["id"] == "short")["transfers"]
    assert t["completed"] == int((d["complete"] == 1).sum())
    assert 0.05 < t["time_mean_s"] < 2.0 and t["time_p95_s"] >= t["time_median_s"]
    assert s["transfers"]["completed"] == t["completed"] and s["errors"] == []


@needs_root
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_idle_times_are_the_seeds_exponential_draws_and_are_waited_out(runs, variant):
    d = records(runs / variant)
    seed = json.loads((runs / variant / "config.json").read_text())["seed"]
    drawn = list(itertools.islice(transfers.idle_times(seed, "short", None, MEAN_IDLE), len(d)))
    assert d["idle_after_s"].tolist() == pytest.approx(drawn, rel=1e-9)
    gaps = d["start_s"].iloc[1:].to_numpy() - d["end_s"].iloc[:-1].to_numpy()
    idle = d["idle_after_s"].iloc[:-1].to_numpy()
    # every idle waited out in full; and nothing else waited: the time between one
    # transfer's end and the next one's start beyond its idle is writing a row, which a
    # loaded machine can hold up now and then (0.12 s once, a fresh machine beside the rest
    # of make test), so its median is bounded, not each (sleeping twice, or a second draw,
    # would put the median near the mean idle)
    over = gaps - idle
    assert (over >= -1e-3).all(), (gaps, idle)
    assert np.median(over) < 0.05 and (over < 1.0).all(), (gaps, idle)


@needs_root
def test_the_long_flow_carries_on_and_the_queue_fluctuates_alike_with_clamp(runs):
    (q_off, r_off), (q_on, r_on) = (span(runs / v) for v in VARIANTS)
    # Both keep the long flow going while the short flows come and go.
    assert r_off.mean() > 2e6 and r_on.mean() > 2e6, (r_off.mean(), r_on.mean())
    # "the queue fluctuations are quite similar": standard deviations within a factor 2
    # (measured 14.4 and 14.6 kB).
    ratio = q_on.std() / q_off.std()
    assert 0.5 < ratio < 2.0, (q_on.std(), q_off.std())
