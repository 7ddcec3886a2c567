"""Wang & Song, REAQM, shortened.

- Fig. 3: experiments/reaqm/load-sweep.yaml at 10 connections, REAQM against REM (the
  algorithm it improves on), 20 s per run: REAQM holds a shorter queue than REM at the same
  load while keeping the link busy.
- Fig. 4: experiments/reaqm/dynamics.yaml over the lossy link, 10 connections joined by 10
  more at 12 s, 24 s per run, REAQM against REM: the link loses its 3 % of transport blocks
  whatever the AQM, REAQM's queue rises with the load and stays below REM's, and the link
  stays busy."""

import pandas as pd
import pytest

from helpers import REPO, needs_root, one_timing_critical_run_at_a_time, shortened_sweep

EXPERIMENT = REPO / "experiments" / "reaqm" / "load-sweep.yaml"
DYNAMICS = REPO / "experiments" / "reaqm" / "dynamics.yaml"
TEN, TWENTY = (5.0, 12.0), (16.0, 24.0)  # seconds of the shortened run with 10 and 20 connections
# The runs go one at a time: two side by side, beside the rest of make
# test cost the lossy link its utilisation and residual-loss bounds on a fresh machine.
# And never beside another timing-critical run: beside the default experiment's sample PHY
# at 5 Msps REAQM's utilisation fell to 0.842 on a fresh machine (0.85 is the bound).


@pytest.fixture(scope="module")
def reaqm_vs_rem(tmp_path_factory):
    with one_timing_critical_run_at_a_time():
        out = _load_sweep(tmp_path_factory)
    return pd.read_csv(out / "sweep.csv").set_index("variant")


def _load_sweep(tmp_path_factory):
    return shortened_sweep(tmp_path_factory.mktemp("reaqm-load"), EXPERIMENT, [
        "sweep.axes.half_flows.values=[5]",
        "variants=[{name: reaqm, set: {aqm.kind: reaqm}}, {name: rem, set: {aqm.kind: rem}}]",
        "analysis.warmup_s=5",
    ], duration=20.0, jobs=1)


@needs_root
def test_reaqm_holds_a_shorter_queue_than_rem_and_keeps_the_link_busy(reaqm_vs_rem):
    q = reaqm_vs_rem["user.R1.mean_queue_bytes"]
    assert q["reaqm"] < 0.8 * q["rem"], q.to_dict()
    util = reaqm_vs_rem["mac_throughput_total_bps"] / 10e6
    assert util["reaqm"] > 0.85, util.to_dict()


@pytest.fixture(scope="module")
def dynamics_lossy(tmp_path_factory):
    with one_timing_critical_run_at_a_time():
        out = shortened_sweep(tmp_path_factory.mktemp("reaqm-dynamics"), DYNAMICS, [
            "sweep.axes.link.values=[experiments/reaqm/links/lossy-3pct.csv]",
            "variants=[{name: reaqm, set: {aqm.kind: reaqm}}, {name: rem, set: {aqm.kind: rem}}]",
            "flows=[{id: f1, server: S1, device: R1, parallel: 10},"
            " {id: f2, server: S5, device: R1, parallel: 10, start_s: 12}]",
            "analysis.warmup_s=4",
        ], duration=24.0, jobs=1)
    runs = {d.parent.name: d for d in out.glob("points/*/*/seed-*")}
    return pd.read_csv(out / "sweep.csv").set_index("variant"), runs


def _slots(rundir, span):
    d = pd.read_csv(rundir / "slots.csv")
    t = (d["t_ns"] - d["t_ns"].iloc[0]) / 1e9
    return d[(t >= span[0]) & (t < span[1])]


@needs_root
def test_the_lossy_link_loses_its_three_percent_of_blocks_under_either_aqm(dynamics_lossy):
    # One transmission per TB, no HARQ to hide it: 3 % of TBs lost (measured 2.89-2.98 %).
    loss = dynamics_lossy[0]["harq.residual_loss"]
    assert ((loss > 0.02) & (loss < 0.04)).all(), loss.to_dict()


@needs_root
def test_reaqms_queue_rises_with_the_load_stays_below_rems_and_the_link_stays_busy(
        dynamics_lossy):
    # Measured over three runs: REAQM's mean queue 0.67-0.77 of REM's; with 10 and then 20
    # connections REAQM's queue 8-11 then 15-19 packets, REM's 13-14 then 24-26; the link
    # busy in 80-99 % of the slots (each 1-s bin 0.72-1.00: one seed over 7-8 s, and 20
    # connections 4 s after 10 joined in slow start). A make test on CI had REAQM's 20
    # connections at 0.797, so the bound is 0.75 (the full-length runs: 0.94-0.98, the
    # experiment's README).
    sweep, runs = dynamics_lossy
    q = sweep["user.R1.mean_queue_bytes"]
    assert q["reaqm"] < 0.9 * q["rem"], q.to_dict()
    for name in ("reaqm", "rem"):
        ten, twenty = _slots(runs[name], TEN), _slots(runs[name], TWENTY)
        assert twenty["queue.R1"].mean() > ten["queue.R1"].mean(), name
        for part in (ten, twenty):
            assert (part["user"] >= 0).mean() > 0.75, name
