"""`residual_loss`: packets dropped at the client after the link, at a set rate (Andrew &
Hanly, CLAMP, Table I: the X-R links lose 1e-3 of the packets "via the fade margin and link
layer retransmissions", which a link whose HARQ loses less does not reach). Its client
configuration per device, and one short real run: the drops are counted, each device's
draws are its own, the run's end-to-end balance accounts for every one, and the sender's
kernel (capture.tcp_info) retransmits them."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from oppsched.run.runner import run_experiment
from helpers import (cfg_of, error_of, netns_prefix, require_real_testbed, run_layout,
                     small_testbed, write_experiment)
from oppsched.testbed import daemonconf


def test_each_client_gets_the_loss_and_a_seed_of_its_own(tmp_path):
    cfg = cfg_of(overrides=["residual_loss=6.7e-4",
                            "devices=[{name: R1}, {name: R2}]",
                            "flows=[{id: f1, server: S1, device: R1}, "
                            "{id: f2, server: S1, device: R2}]"])
    lay = run_layout(tmp_path, cfg)
    confs = [daemonconf.client_config(cfg, lay, u) for u in lay.users]
    assert [c["residual_loss"]["probability"] for c in confs] == [6.7e-4, 6.7e-4]
    seeds = [c["residual_loss"]["seed"] for c in confs]
    assert seeds[0] != seeds[1]
    # another run seed, other draws
    cfg2 = cfg_of(overrides=["residual_loss=6.7e-4", "seed=2"])
    lay2 = run_layout(tmp_path / "2", cfg2)
    assert daemonconf.client_config(cfg2, lay2, lay2.users[0])["residual_loss"]["seed"] \
        != seeds[0]


@pytest.mark.parametrize("value", ["1.0", "-0.001", "lots"])
def test_a_residual_loss_outside_0_to_1_is_refused_naming_it(value):
    err = error_of(overrides=[f"residual_loss={value}"])
    assert "residual_loss" in err and value.lstrip("-") in err, err


RESIDUAL = small_testbed("residual", 8, extra="""
    seed: 3
    residual_loss: 0.02
    capture: {tcp_info: true}
""")


def test_a_run_with_residual_loss_drops_that_share_at_the_client_and_balances(tmp_path):
    require_real_testbed()
    exp = write_experiment(tmp_path, RESIDUAL)
    with netns_prefix():
        run_experiment(exp, tmp_path / "out")
    out = tmp_path / "out"
    s = json.loads((out / "summary.json").read_text())
    assert s["errors"] == [], s["errors"]
    st = json.loads((out / "client.R1.stats.json").read_text())
    dropped = st["residual_loss"]["dropped_packets"]
    delivered = st["delivered"]["packets"]
    n = dropped + delivered
    assert n > 1000, n
    # Binomial(n, 0.02): within 5 standard deviations
    sd = (n * 0.02 * 0.98) ** 0.5
    assert abs(dropped - 0.02 * n) < 5 * sd, (dropped, n)
    (user,) = s["users"]
    assert user["residual_loss_dropped_packets"] == dropped
    # every drop is accounted for end to end: none unexplained
    bal = s["balance"]["end_to_end"]
    assert bal["stages"]["clients"]["R1"]["dropped"]["residual_loss"] == dropped
    assert abs(bal["unexplained"]) <= bal["bound"], bal
    # TCP saw them as losses: the sender's kernel counts its retransmissions
    # (capture.tcp_info: flow.f1.tcp_info.csv, a row per 0.5 s poll)
    assert s["flows"][0]["goodput_bps"] > 0
    ti = pd.read_csv(out / "flow.f1.tcp_info.csv")
    assert len(ti) >= 8, ti
    assert ti["t_s"].is_monotonic_increasing
    assert ti["retrans_total"].iloc[-1] >= 10, ti.tail()
    assert (ti["cwnd"] >= 1).all() and (ti["rto_ms"] >= 200).all()
