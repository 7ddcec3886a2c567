"""Andrew & Hanly, CLAMP, Fig. 2, shortened: the deterministic-link experiment
(experiments/clamp/deterministic.yaml) with real TCP over the abstract PHY, flows joining
at 20 s and 30 s of a 55 s run (the paper's at 50 s and 100 s of 250 s). Asserts the
paper's qualitative result: with CLAMP the flows share the link equally and keep it busy,
its queue grows with the number of flows and fluctuates less than NewReno's over an
18 000-byte buffer."""

import json

import numpy as np
import pandas as pd
import pytest

from helpers import (NO_PLOTS, REPO, RUN_JOBS, needs_root, netns_prefix,
                     one_timing_critical_run_at_a_time, require_real_testbed)
from oppsched.run.runner import run_experiment

EXPERIMENT = REPO / "experiments" / "clamp" / "deterministic.yaml"
STARTS = {"f1": 0.0, "f2": 20.0, "f3": 30.0}
# Seconds with 1 and 3 flows, after settling. CLAMP's window climbs tau per RTT with an
# empty queue (eq. 14: 500 B per 75 ms, 6.7 kB/s), so from slow start's halving, or after
# a price spike, it takes seconds to reach the 89 kB the link and the 75 ms round trip
# hold: one run's window was 58 kB at 2-5 s (14 % of the slots idle) and 89 kB from 8 s;
# another idled 14 % of 11-15 s. The one-flow span starts 14 s in.
ONE, THREE = (14.0, 20.0), (42.0, 54.0)
DURATION = 55


def per_flow_goodput(rundir, flows, span) -> list:
    """Mean of iperf3's one-second receiver intervals inside `span` (run time), per flow."""
    out = []
    for f in flows:
        text = (rundir / f"flow.{f}.receiver.json").read_text()
        if not text.strip():  # say what happened to the receiver, not only that its JSON is empty
            run = json.loads((rundir / "run.json").read_text())
            procs = json.loads((rundir / "processes.json").read_text())
            pytest.fail(f"flow {f}: empty receiver JSON; flow "
                        f"{[x for x in run['flows'] if x['id'] == f]}, receiver "
                        f"{[x for x in procs if x['name'] == f'iperf3-r.{f}']}")
        j = json.loads(text)
        rates = [i["sum"]["bits_per_second"] for i in j["intervals"]
                 if span[0] <= STARTS[f] + i["sum"]["start"] < span[1]]
        out.append(float(np.mean(rates)))
    return out


def queue(rundir, span) -> pd.Series:
    d = pd.read_csv(rundir / "slots.csv")
    t = (d["t_ns"] - d["t_ns"].iloc[0]) / 1e9
    return d["queue.R1"][(t >= span[0]) & (t < span[1])]


def jain(x) -> float:
    return sum(x) ** 2 / (len(x) * sum(v * v for v in x))


@pytest.fixture(scope="module")
def fig2_run(tmp_path_factory):
    require_real_testbed()
    out = tmp_path_factory.mktemp("clamp-fig2")
    # The client returns each TB's HARQ feedback: a client not run for
    # harq.feedback_timeout_slots times its TBs out and their packets are dropped. A run
    # beside another test's on the two cores did (13 feedback timeouts, 34 packets at 15 s:
    # TCP's retransmission timeout then idled 41 % of 14-20 s), which is the machine, not
    # CLAMP: the daemons and the PHY run at real-time priority, one such run at a time.
    with netns_prefix(), one_timing_critical_run_at_a_time():
        run_experiment(EXPERIMENT, out, [
            NO_PLOTS, "flows[1].start_s=20", f"flows[1].stop_s={DURATION}",
            "flows[2].start_s=30", f"flows[2].stop_s={DURATION}", "capture.pcaps=false",
            "topology.client_rt_priority=20", "topology.apd_rt_priority=40",
            "extra.phy={timing: {rt_priority: 50}}"],
            duration=DURATION,
            jobs=RUN_JOBS)
    return out


@needs_root
def test_clamp_shares_the_deterministic_link_equally_and_keeps_it_busy(fig2_run):
    one = per_flow_goodput(fig2_run / "clamp", ["f1"], ONE)
    three = per_flow_goodput(fig2_run / "clamp", ["f1", "f2", "f3"], THREE)
    # the link is 10 Mb/s (eq. 18 at C_max)
    assert one[0] > 0.85 * 10e6, (one, clamp_windows(fig2_run / "clamp", ONE),
                                  f"HARQ feedback timeouts: {feedback_timeouts(fig2_run / 'clamp')}")
    assert sum(three) > 0.85 * 10e6, three
    assert jain(three) >= 0.95, three


@needs_root
def test_clamps_queue_grows_with_the_flows_and_is_steadier_than_newrenos(fig2_run):
    q1, q3 = queue(fig2_run / "clamp", ONE), queue(fig2_run / "clamp", THREE)
    assert q3.mean() > q1.mean()               # q* = (k tau + a)/b grows with k
    newreno = queue(fig2_run / "newreno", THREE)
    assert q3.std() < newreno.std(), (q3.std(), newreno.std())


def feedback_timeouts(rundir) -> int:
    """TBs whose HARQ feedback did not come back in time (slots.csv outcome timeout)."""
    return int((pd.read_csv(rundir / "slots.csv")["outcome"] == "timeout").sum())


def clamp_windows(rundir, span) -> str:
    """CLAMP's window and price inside `span`, per flow, for a failure's message."""
    d = pd.read_csv(rundir / "windows.R1.csv")
    t = (d["t_ns"] - d["t_ns"].iloc[0]) / 1e9
    d = d[(t >= span[0]) & (t < span[1])]
    return "; ".join(f"{fl}: w {g['w_bytes'].min():.0f}-{g['w_bytes'].max():.0f} B, price "
                     f"{g['price_s'].max() * 1e3:.2f} ms max" for fl, g in d.groupby("flow"))


def idle_fraction(rundir, span) -> float:
    """Fraction of the slots inside `span` that carried nothing (the AP queue was empty)."""
    d = pd.read_csv(rundir / "slots.csv")
    t = (d["t_ns"] - d["t_ns"].iloc[0]) / 1e9
    return float((d["user"][(t >= span[0]) & (t < span[1])] < 0).mean())


@needs_root
def test_clamp_keeps_the_link_busy_where_newreno_idles_it_over_a_buffer_below_the_bdp(fig2_run):
    # 18 000 bytes is under a third of the 62.5 kB bandwidth-delay product: NewReno's
    # sawtooth empties the queue after a halving, so the link idles; CLAMP's window does
    # not. How much NewReno loses by it varies from run to run in a 50-55 s run (8.5-8.7
    # against CLAMP's 9.5 Mb/s here, 6.9 against 9.5 in the full-length one), so the test
    # asserts the mechanism and the direction, not a margin. CLAMP idles 0-0.6 % of the
    # slots (a handful, when the machine is busy and a window update comes late), NewReno
    # 3.5-6.5 %.
    for span in (ONE, THREE):
        clamp, newreno = idle_fraction(fig2_run / "clamp", span), idle_fraction(
            fig2_run / "newreno", span)
        assert clamp <= 0.02 and newreno > clamp, (span, clamp, newreno, clamp_windows(
            fig2_run / "clamp", span), f"HARQ feedback timeouts: "
            f"{feedback_timeouts(fig2_run / 'clamp')}")
    clamp = sum(per_flow_goodput(fig2_run / "clamp", ["f1", "f2", "f3"], THREE))
    newreno = sum(per_flow_goodput(fig2_run / "newreno", ["f1", "f2", "f3"], THREE))
    assert clamp > newreno, (clamp, newreno)
