"""Srinivasan & Baras, §VI and Fig. 13, shortened: experiments/srinivasan-baras/
lambda-sweep.yaml at three values of lambda, two seeds, 8 s per run. Asserts the paper's
qualitative result: link throughput is largest at lambda = 0 (maximum rate) and falls as
lambda grows; the ratio of the smallest to the largest resource fraction peaks at
lambda = 1, where the metric is proportional fair and every user gets about 1/N of the
slots."""

import pandas as pd
import pytest

from helpers import REPO
from oppsched.sweep import run_sweep

EXPERIMENT = REPO / "experiments" / "srinivasan-baras" / "lambda-sweep.yaml"


@pytest.fixture(scope="module")
def lambda_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("lambda-sweep")
    failed = run_sweep(EXPERIMENT, out, ["sweep.axes.lam.values=[0.0, 1.0, 10.0]",
                                         "sweep.repeat=2"], duration=8.0)
    assert failed == 0
    return pd.read_csv(out / "sweep.csv").groupby("lam").mean(numeric_only=True)


def test_throughput_is_largest_at_maximum_rate_and_falls_with_lambda(lambda_sweep):
    t = lambda_sweep["mac_throughput_total_bps"]
    assert t[0.0] > t[1.0] > t[10.0], t.to_dict()


def test_proportional_fair_gives_every_user_about_the_same_share_of_slots(lambda_sweep):
    r = lambda_sweep["slot_fraction_min_max_ratio"]
    assert r[1.0] > r[0.0] and r[1.0] > r[10.0], r.to_dict()
    # 32 users: 1/32 each; within a few per cent of each other at lambda = 1.
    assert lambda_sweep.loc[1.0, "slot_fraction_min"] > 0.9 / 32
    assert lambda_sweep.loc[1.0, "slot_fraction_max"] < 1.1 / 32
