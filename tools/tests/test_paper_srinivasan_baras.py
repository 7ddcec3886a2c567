"""Srinivasan & Baras, §VI and Fig. 13, shortened: experiments/srinivasan-baras/
lambda-sweep.yaml at three values of lambda, two seeds, 8 s per run. Asserts the paper's
qualitative result: link throughput is largest at lambda = 0 (maximum rate) and falls as
lambda grows; the ratio of the smallest to the largest resource fraction peaks at
lambda = 1, where the metric is proportional fair and every user gets about 1/N of the
slots. And Table I's lowest rate carries real TCP with the compact MAC PDU.

§IV and Figs. 4-5, shortened: experiments/srinivasan-baras/alpha-sweep.yaml with PF at
alpha = 0.1 and 0.001, 4 users, real TCP, 15 s per run: the scheduling jitter becomes
burstier (its coefficient of variation grows) and the MAC throughput higher as alpha
falls; the users placed as the paper's (§V: the weakest requests about 2 frames per
scheduled slot, the strongest about 56) and the strongest many times faster."""

import json

import pandas as pd
import pytest
import yaml

from helpers import (REPO, needs_root, netns_prefix, require_real_testbed,
                     write_experiment)
from oppsched.run.runner import run_experiment
from oppsched.run.sweep import run_sweep

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


# Srinivasan & Baras, Table I: the lowest rate, 38.4 kb/s, is 8 bytes a 1.667 ms slot. The
# standard MAC PDU needs 29 (pdu.h); the compact one 5, so a user whose channel supports
# only that rate is served and real TCP gets through (4 bytes of data a slot: 19.2 kb/s).
LOWEST_RATE = """
experiment: evdo-lowest-rate
kind: testbed
duration_s: 20
seed: 1
phy: {mode: abstract, profile: evdo}
devices:
  - {name: R1, channel: {model: awgn, mean_snr_db: -11.0, doppler_hz: 0.0}}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1}
queue: {limit_bytes: 6000}
pdu: {format: compact}
link_adaptation: {olla: false}  # the rate the CQI gives, nothing above it
capture: {pcaps: false}
"""


@needs_root
def test_a_user_at_the_lowest_table_i_rate_gets_tcp_goodput_with_the_compact_pdu(tmp_path):
    require_real_testbed()
    exp = write_experiment(tmp_path, LOWEST_RATE)
    with netns_prefix():
        ((_, s, _),) = run_experiment(exp, tmp_path / "out")
    (u,) = s["users"]
    (f,) = s["flows"]
    assert u["mean_mcs"] == 0  # -11 dB: 38.4 kb/s only (-12.5 dB), not 76.8 (-9.5 dB)
    # Served: with the standard PDU this user would get no slot at all. Not every slot: a
    # 1500-byte packet takes 625 ms here, and TCP's retransmission timeouts (its initial
    # window overflows the 4-packet queue) leave the queue empty for a while (measured
    # 0.81-0.98 of the slots, 7.5-18.9 kb/s; 0.46 on a machine loaded 10 times over).
    assert u["slot_fraction"] > 0.3
    # 4 of every 8 bytes are data: at most 19.2 kb/s of IP packets, less TCP/IP headers
    assert 2e3 < f["goodput_bps"] < 19.2e3, f


# Srinivasan & Baras, §III-B, §IV and Figs. 4-5, shortened: experiments/srinivasan-baras/
# alpha-sweep.yaml with PF at the two ends of the paper's alpha range, real TCP, 4 of its
# 16 users (the weakest, two middle ones, the strongest), one seed, 15 s per run. A small
# alpha (a PF time constant of 1000 slots rather than 10) lets the scheduler wait for each
# user's fading peaks: the gaps between a user's slots become burstier (the coefficient of
# variation of the scheduling jitter grows, Fig. 5) and the MAC carries more (Fig. 4).
ALPHA_SWEEP = REPO / "experiments" / "srinivasan-baras" / "alpha-sweep.yaml"
ALPHA_USERS = ("u01", "u06", "u11", "u16")


@pytest.fixture(scope="module")
def alpha_ends(tmp_path_factory):
    require_real_testbed()
    tmp = tmp_path_factory.mktemp("alpha-sweep")
    exp = yaml.safe_load(ALPHA_SWEEP.read_text())
    exp["devices"] = [d for d in exp["devices"] if d["name"] in ALPHA_USERS]
    exp["flows"] = [f for f in exp["flows"] if f["device"] in ALPHA_USERS]
    exp["variants"] = [v for v in exp["variants"] if v["name"] == "pf"]
    exp["sweep"]["axes"]["alpha"]["values"] = [0.1, 0.001]
    exp["analysis"]["warmup_s"] = 0
    path = tmp / "alpha-ends.yaml"
    path.write_text(yaml.safe_dump(exp, sort_keys=False))
    with netns_prefix():
        # One point at a time: two runs of 4 users at SCHED_FIFO side by side lost the
        # throughput gain the test measures (824 against 833 kb/s on a fresh machine).
        failed = run_sweep(path, tmp / "out", duration=15.0)
    assert failed == 0
    # The file runs the apd under SCHED_FIFO (topology.apd_rt_priority), through chrt.
    for procs in (tmp / "out" / "points").glob("*/*/*/processes.json"):
        (apd,) = [p for p in json.loads(procs.read_text()) if p["name"] == "apd"]
        assert apd["sched_fifo"] == exp["topology"]["apd_rt_priority"]
        assert apd["exit_code"] == 0
    df = pd.read_csv(tmp / "out" / "sweep.csv").set_index("alpha")
    df.attrs["points"] = tmp / "out" / "points"
    return df


@needs_root
def test_the_users_request_the_papers_rates_and_the_weakest_is_many_times_slower(alpha_ends):
    # §V: User W requests about 1.9 eight-byte frames per scheduled slot and User B about
    # 56 of 64 (calibration.yaml measures 2.07 and 56.21 at the MAC level over 3 seeds;
    # the testbed's CQI is 4 slots old, so it wanders more). Requested: Table I's rate at
    # the CQI u01 / u16 reported in the slots where each got a new TB.
    from oppsched import mac
    table = mac.mcs_table.evdo()
    rundir = alpha_ends.attrs["points"] / "alpha=0.001" / "pf" / "seed-0"
    slots = pd.read_csv(rundir / "slots.csv")
    names = [d["name"] for d in json.loads((rundir / "config.json").read_text())["devices"]]
    frames = {}
    for who in ("u01", "u16"):
        mine = slots[(slots["user"] == names.index(who)) & (slots["retx"] == 0)]
        cqi = mine[f"cqi.{who}"].dropna()
        frames[who] = sum(table.rate_at(float(c)) * 1.667e-3 / 64 for c in cqi) / len(cqi)
    assert frames["u01"] < 6 and frames["u16"] > 40, frames
    # B's goodput many times W's (the paper: more than 37 times with 16 users).
    for a in (0.1, 0.001):
        w, b = alpha_ends.loc[a, "flow.f01.goodput_bps"], alpha_ends.loc[a, "flow.f16.goodput_bps"]
        assert b > 8 * w, (a, w, b)


@needs_root
def test_scheduling_jitter_grows_burstier_as_pf_alpha_falls_with_real_tcp(alpha_ends):
    # Gaps while the user had data (a TCP timeout's idle spell is seconds at any alpha).
    # Measured over six runs: median CoV 1.00-1.06 at alpha 0.1, 3.67-3.98 at 0.001; the
    # smallest per-user ratio 3.2. One CI run gave the weakest user 2.24 at alpha 0.1
    # (3.30 at 0.001, 1.47 times): W sits out deep fades backlogged at any alpha, so its
    # own ratio depends on which fades its TCP had data in; the median is the paper's claim.
    cov = alpha_ends["median_slot_gap_backlogged_cov"]
    assert cov[0.001] > 2.0 * cov[0.1], cov.to_dict()
    for u in ALPHA_USERS:  # every user, weakest to strongest, burstier at the small alpha
        c = alpha_ends[f"user.{u}.slot_gap_backlogged_cov"]
        assert c[0.001] > 1.2 * c[0.1], (u, c.to_dict())


CALIBRATION = REPO / "experiments" / "srinivasan-baras" / "calibration.yaml"


def test_mac_throughput_grows_as_pf_alpha_falls_for_the_papers_users(tmp_path):
    # Fig. 4's MAC curve for the 16 users placed as the paper's (calibration.yaml: full
    # buffers, the rate at each slot's SNR), 20 s at each end of the alpha range: measured
    # 650 against 1169 kb/s (1.8 times). With real TCP the 200-s, three-seed sweep gives
    # 1.64 times (experiments/srinivasan-baras/README.md); four users over 15 s with TCP
    # cannot show it (1.003-1.063 times over six runs: the weakest user is seldom
    # backlogged), so the TCP test above asserts Fig. 5's jitter instead.
    mac = {}
    for a in (0.1, 0.001):
        ((_, s, _),) = run_experiment(CALIBRATION, tmp_path / f"a{a}",
                                      [f"scheduler.alpha={a}"], duration=20.0)
        mac[a] = s["aggregate_mac_throughput_bps"]
    assert mac[0.001] > 1.3 * mac[0.1], mac
