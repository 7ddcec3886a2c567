"""The default experiment (`make run`: the Makefile's EXPERIMENT, experiments/clamp/
fading-5msps.yaml, Andrew & Hanly, CLAMP, Fig. 3 on the sample-level GNU Radio PHY at the
paper's bandwidth, 5 Msps), shortened to 20 s per variant. Asserts what a run that short
shows on the real PHY: every flow is carried, PF leaves no slot empty while a device has
data and (with CLAMP, whose queues stay backlogged) gives each device about a third, CLAMP
rewrites the ACKs of every device, and TCP turns most of the MAC throughput into goodput.
Total throughput with and without CLAMP is compared at full length (README), not here: a
20 s sample-PHY run on a busy machine varies by more than the difference to be shown.
CLAMP's fairness between the flows that share a device needs longer than 20 s (the 180 ms
flow's start-up, experiments/clamp/README.md) and is asserted on the abstract PHY by
test_paper_clamp_fading.py."""

import math

import pandas as pd
import pytest

from helpers import (NO_PLOTS, REPO, assert_flow_ended, needs_root, netns_prefix,
                     require_real_testbed, the_machine_to_itself)
from oppsched.run.runner import run_experiment

def makefile_default(var: str) -> str:
    """The Makefile's `VAR ?= value`: what `make run` runs when nothing is overridden."""
    for line in (REPO / "Makefile").read_text().splitlines():
        name, sep, value = line.partition("?=")
        if sep and name.strip() == var:
            return value.strip()
    raise AssertionError(f"Makefile: no {var} ?= line")


EXPERIMENT = REPO / makefile_default("EXPERIMENT")
DEVICES = ("R1", "R2", "R34")


def test_the_default_experiment_runs_at_the_papers_bandwidth_with_the_low_rate_file_beside_it():
    # Andrew & Hanly, CLAMP, §V-D: W0 = 4.3 MHz; 5 Msps occupies 52/64 x 5 MHz = 4.06 MHz.
    # fading.yaml is the same scenario at 1 Msps (1.02 MHz, §V-J's low-rate mapping).
    import yaml

    spec = yaml.safe_load(EXPERIMENT.read_text())
    assert EXPERIMENT.name == "fading-5msps.yaml"
    assert spec["phy"]["mode"] == "sample" and spec["phy"]["sample"]["sample_rate"] == 5e6
    narrow = yaml.safe_load((EXPERIMENT.parent / "fading.yaml").read_text())
    assert (narrow["phy"].get("sample") or {}).get("sample_rate", 1e6) == 1e6
    fading = [(d["name"], d["channel"]["model"], d["channel"]["doppler_hz"])
              for d in spec["devices"]]
    assert fading == [(d["name"], d["channel"]["model"], d["channel"]["doppler_hz"])
                      for d in narrow["devices"]]
    assert narrow["flows"] == spec["flows"] and narrow["servers"] == spec["servers"]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    require_real_testbed()
    out = tmp_path_factory.mktemp("default")
    # the sample PHY at 5 Msps needs both cores: no other test beside it (its slot clock
    # still falls behind real time on a slow machine: the run says so, and the goodput is
    # compared with the MAC's bytes, whatever the time base)
    with netns_prefix(), the_machine_to_itself():
        runs = run_experiment(EXPERIMENT, out, [NO_PLOTS, "analysis.warmup_s=5",
                                                "capture.pcaps=false"],
                              duration=20.0)
    return {name: (s, path) for name, s, path in runs}


@needs_root
def test_every_flow_of_the_default_experiment_is_carried_by_the_sample_phy(default_run):
    # measured: 130-400 kb/s per flow; goodput/MAC over the slot trace's window 0.80-0.92
    # (the rest: TCP/IP headers, retransmissions, the padding of TBs not filled)
    for name, (s, _) in default_run.items():
        assert s["config"]["phy"]["mode"] == "sample"
        # Whether the slot clock kept real time depends on the machine (on a 2-core KVM
        # guest, alone: 0.76-1.00 of real time; beside the rest of `make test`: 0.67-0.72);
        # where it did not, the run says so.
        behind = s["slots"]["realtime_fraction"] < 0.95
        assert behind == any(w.startswith("slots: the PHY's slot clock kept")
                             for w in s["warnings"]), (name, s["slots"], s["warnings"])
        for f in s["flows"]:
            # iperf3's own end report may be lost on a loaded machine (once in three runs
            # beside the rest of make test): then counted at the receiving socket
            assert_flow_ended(f, name)
            assert f["goodput_bps"] > 50e3, (name, f)
        # the bytes the flows received over the slot trace's window, against the MAC's
        goodput = s["aggregate_goodput_bps"]
        mac = sum(u["mac_throughput_bps"] for u in s["users"])
        assert 0.7 * mac < goodput < 1.0 * mac, (name, goodput, mac)


@needs_root
def test_pf_leaves_no_slot_empty_while_a_device_has_data(default_run):
    # measured: 0 and 15 of ~20 900 slots in 60 s runs (a device whose data waited while
    # its link had no usable MCS)
    for name, (_, path) in default_run.items():
        slots = pd.read_csv(path / "slots.csv")
        queued = (slots[[f"queue.{d}" for d in DEVICES]] > 0).any(axis=1)
        idle = (slots["user"] < 0) & queued & (slots["late"] == 0)
        assert queued.sum() > 1000 and idle.sum() < 0.01 * len(slots), (name, idle.sum())


@needs_root
def test_pf_gives_each_device_a_third_of_the_slots_once_all_have_had_data_a_while(default_run):
    # PF shares the slots among the devices with data. Just after a device's queue fills
    # again PF favours it, its throughput average being low (0.41 of the slots in which
    # all three had data, in one run); once all three have had data for three time
    # constants of that average (3 / alpha slots), the equal mean SNRs give each a third.
    # Asserted with CLAMP, which keeps the three queues backlogged (measured: 0.32-0.35
    # each in 2308 such slots of 20 s). Without CLAMP the 20 s are mostly TCP's start-up:
    # NewReno (no SACK) overshoots the 126 kB drop-tail buffer in slow start and repairs
    # one loss per round trip, so the queues keep running dry (one fresh-machine run had
    # no stretch of 100 slots with all three backlogged; one gave R2 8 % of all the
    # slots). Over 60 s (`make run`) the drop-tail shares are 0.33-0.34 in 14 027 such
    # slots (experiments/clamp/README.md).
    s, path = default_run["clamp-on"]
    settle = math.ceil(3 / s["config"]["scheduler"]["alpha"])
    slots = pd.read_csv(path / "slots.csv")
    busy = (slots[[f"queue.{d}" for d in DEVICES]] > 0).all(axis=1)
    busy_for = busy.groupby((~busy).cumsum()).cumsum()  # slots since a queue was empty
    settled = slots[(busy_for > settle) & (slots["user"] >= 0)]
    assert len(settled) > 150, len(settled)
    shares = settled["user"].value_counts(normalize=True).reindex(range(3), fill_value=0)
    assert all(0.2 < x < 0.47 for x in shares), shares.to_dict()


@needs_root
def test_clamp_rewrites_the_acks_of_every_device_and_only_when_on(default_run):
    on, off = default_run["clamp-on"][0], default_run["clamp-off"][0]
    assert all(on["clamp"][d]["rewritten_acks"] > 100 for d in ("R1", "R2", "R34")), on["clamp"]
    # every connection is known to CLAMP from its SYN: none of its ACKs passes unclamped
    assert all(on["clamp"][d]["unclamped_acks"] == 0 for d in ("R1", "R2", "R34")), on["clamp"]
    assert not any("clamp.acks_unknown_flow" in w for w in on["warnings"]), on["warnings"]
    assert not off.get("clamp")
