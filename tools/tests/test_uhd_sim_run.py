"""A whole `phy.mode: uhd` run on UHD's device simulator carrying real TCP:
experiments/uhd-sim/downlink.yaml (one NewReno download through the apd, the UHD PHY and
the client, profile 3ms at 250 kS/s, device profile e320_sim), with the simulator started
and stopped as the file's comments say (`oppsched uhd-sim start --air ...`). One simulated
E320 stands for both radios: the AP's usrp_sink is its TX side, the device's usrp_source
its RX side (docs/howto/uhd-simulator.md, "The UHD PHY on the simulator"). Skips with the
simulator's reason when it cannot start here, and without root or the built daemons.
About 30 s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import the_simulator_to_itself
from oppsched import uhd_sim

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXPERIMENT = REPO / "experiments/uhd-sim/downlink.yaml"
RUN_S = 10  # the file's 15 s shortened: the test's wall time stays under a minute
RATE, PROFILE = 250e3, "3ms"
AP_ARGS = "addr=127.0.0.1,type=e3xx"
DEVICE_ARGS = "addr=127.0.0.1,product=e320"


def _cli(argv: list[str]) -> tuple[int, str, str]:
    import contextlib
    import io

    from oppsched.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def downlink_run(tmp_path_factory):
    """`oppsched uhd-sim start` with the air the experiment file names, `oppsched run` of
    the file (RUN_S s), `oppsched uhd-sim stop`. (summary, phy stats, apd stats, run.json,
    the run folder)"""
    from helpers import PREFIX, require_real_testbed
    from oppsched.run.runner import run_experiment

    require_real_testbed()

    start = next(line for line in EXPERIMENT.read_text().splitlines()
                 if "oppsched uhd-sim start" in line).split("oppsched ", 1)[1].split()
    d = tmp_path_factory.mktemp("uhd-sim-run")
    with the_simulator_to_itself(blocks=True):
        state = ["--state", str(d / "sim")]
        rc, out, err = _cli(start + ["--air-log"] + state)
        assert rc == 0, err
        prefix = os.environ.get("OPPSCHED_NETNS_PREFIX")
        os.environ["OPPSCHED_NETNS_PREFIX"] = PREFIX
        try:
            run_experiment(EXPERIMENT, d / "out", overrides=[f"duration_s={RUN_S}"])
        finally:
            if prefix is None:
                os.environ.pop("OPPSCHED_NETNS_PREFIX", None)
            else:
                os.environ["OPPSCHED_NETNS_PREFIX"] = prefix
            rc, out, err = _cli(["uhd-sim", "stop"] + state)
            assert rc == 0, err
    o = d / "out"

    def read(name):
        return json.loads((o / name).read_text())

    return (read("summary.json"), read("phy.stats.json"), read("apd.stats.json"),
            read("run.json"), o)


def test_a_uhd_run_on_the_simulated_radio_carries_tcp_end_to_end(downlink_run):
    summary, phy, _, run, o = downlink_run
    assert run["status"] == "done", run.get("error")
    (flow,) = summary["flows"]
    assert flow["goodput_bps"] > 0 and flow["bytes_received"] > 0, flow
    # through the UHD PHY at the simulator's rate, with the table the run derived for it
    assert (phy["mode"], phy["sample_rate"], phy["profile"]) == ("uhd", RATE, PROFILE)
    assert phy["radios"] == {"phy.uhd.ap": AP_ARGS, "devices[0].uhd": DEVICE_ARGS}
    assert "250000 Hz" in (o / "mcs_table.csv").read_text()
    (user,) = phy["users"]
    assert user["tb_ok"] > 0 and user["headers_ok"] > 0


def test_the_runs_tbs_are_acknowledged_and_its_packets_balance(downlink_run):
    summary, phy, _, _, _ = downlink_run
    harq = summary["harq"]
    assert harq["tb_sent"] > 0 and harq["acks"] > 0, harq
    assert phy["tb_sent"] >= harq["tb_sent"]  # every TB the apd sent, and its retransmissions
    assert summary["conservation"]["apd"]["unaccounted"] == 0
    bal = summary["balance"]["end_to_end"]
    assert bal is not None and "incomplete" not in bal, bal
    assert bal["offered_total"] > 0 and bal["delivered_total"] > 0, bal
    assert bal["unexplained"] <= bal["bound"], bal
