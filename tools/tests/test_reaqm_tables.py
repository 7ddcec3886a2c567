"""experiments/reaqm/table.py dynamics on made-up sweep folders: a table measured in parts
(REAQM in one sweep, RED in a later one) keeps the runs already in OUT that the later sweep
does not hold, and a run both hold is taken from the sweep. No run: seconds."""

import json

import numpy as np
import pandas as pd
import pytest

from helpers import REPO, load_script


@pytest.fixture(scope="module")
def table():
    return load_script(REPO / "experiments/reaqm/table.py", "reaqm_table")


def _sweep(root, variant, seeds, queue_pkts):
    """A sweep folder of 20-s runs (2-s steps) whose queue holds queue_pkts packets."""
    rows = []
    for seed in seeds:
        point = f"link=reliable/{variant}/seed-{seed}"
        run = root / "points" / point
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({"t0_mono_ns": 0}))
        (run / "config.json").write_text(json.dumps(
            {"flows": [{"id": "f1a", "parallel": 10}, {"id": "f2a", "parallel": 10,
                                                     "start_s": 2}]}))
        t = np.arange(0, 20, 0.01)
        pd.DataFrame({"t_ns": (t * 1e9).astype(np.int64), "outcome": "ack", "tb_bytes": 1250,
                      "queue.R1": (queue_pkts + seed / 10) * 1052.0,
                      "aqm_price.R1": 5.0}).to_csv(run / "slots.csv", index=False)
        rows.append({"point": point, "ok": True, "link": "links/reliable.csv",
                     "variant": variant, "seed": seed, "duration_s": 20.0,
                     "aqm.all.loss_ratio": 0.01, "aqm.all.mark_ratio": 0.1,
                     "aggregate_mac_throughput_bps": 1e6, "aqm.R1.price": 5.0,
                     "slots.late": 0, "slots.late_phy": 0, "slots.total": 2000})
    pd.DataFrame(rows).to_csv(root / "sweep.csv", index=False)
    return root


def test_dynamics_keeps_the_runs_already_in_out_that_a_later_sweep_does_not_hold(
        table, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    table.dynamics(out, [_sweep(tmp_path / "a", "reaqm", [1, 2], queue_pkts=10)])
    table.dynamics(out, [_sweep(tmp_path / "b", "red", [1, 2], queue_pkts=30)])
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(zip(runs.variant, runs.seed)) == [
        ("reaqm", 1), ("reaqm", 2), ("red", 1), ("red", 2)]
    q = runs.set_index(["variant", "seed"])["queue"]
    assert q["reaqm", 1] == pytest.approx(10.1) and q["red", 2] == pytest.approx(30.2)
    ts = pd.read_csv(out / "timeseries.csv")
    assert sorted(ts.groupby(["variant", "seed"]).size().index) == sorted(
        zip(runs.variant, runs.seed))
    # A run the new sweep holds replaces the one in OUT.
    table.dynamics(out, [_sweep(tmp_path / "c", "reaqm", [2], queue_pkts=20)])
    runs = pd.read_csv(out / "runs.csv").set_index(["variant", "seed"])
    assert len(runs) == 4
    assert runs.loc[("reaqm", 2), "queue"] == pytest.approx(20.2)
    assert runs.loc[("reaqm", 1), "queue"] == pytest.approx(10.1)
    ts = pd.read_csv(out / "timeseries.csv")
    assert ts[(ts.variant == "reaqm") & (ts.seed == 2)].queue_pkts.mean() == pytest.approx(20.2)
    assert (out / "time-reliable.png").stat().st_size > 0
