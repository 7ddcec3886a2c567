"""The sample PHY at any sample rate: phy.sample.sample_rate in the experiment, the MCS table
the apd and the PHY share at that rate (daemonconf.block_mcs_table, linkmodel.table_at_rate),
and, with the real blocks (offline, seeded AWGN, no real time), how the SNR thresholds move
with the rate. One short testbed run at 2 Msps. docs/phy.md, "Sample rate".
"""

from __future__ import annotations

import json
import os

import pytest
import yaml

from oppsched import mac
from oppsched.testbed import daemonconf
from oppsched.config import ConfigError
from helpers import (cfg_of, error_of, netns_prefix, require_real_testbed, run_layout,
                     write_experiment, write_yaml)
from oppsched.run.runner import run_experiment

try:
    from gnuradio import oppsched as phy

    HAVE_GR = True
except ImportError:
    HAVE_GR = False

if not HAVE_GR and not os.environ.get("CI"):
    pytest.skip("gnuradio.oppsched not importable (PYTHONPATH=<build>/python)",
                allow_module_level=True)

from oppsched import linkmodel  # noqa: E402
from oppsched.commands import linkcurves_point  # noqa: E402
from oppsched.phy import loopback  # noqa: E402

PROFILES = ("3ms", "evdo")


def _table_rows(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def _sample(rate: float, profile: str = "3ms", more=()) -> dict:
    return cfg_of(overrides=["phy.mode=sample", f"phy.profile={profile}",
                             f"phy.sample.sample_rate={rate!r}", *more])


# ----------------------------------------------------------------------------------------
# The experiment key


def test_sample_rate_defaults_to_1msps_and_reaches_the_phy_yaml(tmp_path):
    cfg = cfg_of(overrides=["phy.mode=sample"])
    assert cfg["phy"]["sample"]["sample_rate"] == 1e6
    cfg = _sample(5e6)
    files = daemonconf.write_all(cfg, run_layout(tmp_path, cfg))
    p = yaml.safe_load(files["phy"].read_text())
    assert p["sample"] == {"profile": "3ms", "fec": "ldpc", "sample_rate": 5e6}
    assert p["slot_s"] == 3e-3  # the slot keeps its duration


@pytest.mark.parametrize("overrides, message", [
    (["phy.mode=sample", "phy.sample.sample_rate=500000"],
     "phy.sample.sample_rate: 500000.0 is below the minimum 1000000.0"),
    (["phy.mode=sample", "phy.sample.sample_rate=25000000"],
     "phy.sample.sample_rate: 25000000.0 is above the maximum 20000000.0"),
    (["phy.mode=sample", "phy.sample.sample_rate=2000000.5"],
     "phy.sample.sample_rate: 2000000.5 is not whole Hz"),
    (["phy.sample.sample_rate=2000000"],
     "phy.sample.sample_rate: 2000000.0 with phy.mode abstract: only the sample PHY has it"),
])
def test_bad_sample_rates_are_rejected_naming_the_field(overrides, message):
    assert message in error_of(overrides=overrides)


# ----------------------------------------------------------------------------------------
# The table at a rate


@pytest.mark.parametrize("profile", PROFILES)
def test_the_derivation_at_the_measured_rate_gives_back_the_measured_table(profile):
    measured = daemonconf.measured_mcs_table(profile)
    text = linkmodel.table_at_rate(measured, profile, 1e6)
    assert _table_rows(text) == _table_rows(measured.read_text())


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("rate", [2e6, 3.5e6, 10e6, 20e6])
def test_the_derived_table_has_the_phys_tb_sizes_at_the_rate(profile, rate):
    src, src_rate = daemonconf.mcs_table_source(profile, "ldpc", rate)
    table = mac.mcs_table.from_csv(linkmodel.table_at_rate(src, profile, rate, "ldpc",
                                                            src_rate))
    assert linkmodel.table_mismatches(table, profile, rate) == []
    assert linkmodel.table_mismatches(table, profile, 1e6) != []
    measured = mac.mcs_table.from_csv(src.read_text())
    assert table.thresholds_db == measured.thresholds_db
    # more OFDM symbols per slot, fixed preamble and header: the rate grows at least
    # in proportion to the sample rate from the 1 Msps table
    one = mac.mcs_table.from_csv(daemonconf.measured_mcs_table(profile).read_text())
    assert all(r >= q * rate / 1e6 for r, q in zip(table.rates_bps, one.rates_bps))


def test_the_thresholds_come_from_the_lowest_measured_rate_at_or_above():
    rates = daemonconf.measured_rates("3ms")
    assert rates[0] == 1e6
    assert daemonconf.mcs_table_source("3ms", "ldpc", 1e6) == (
        daemonconf.measured_mcs_table("3ms"), 1e6)
    top = rates[-1]
    assert daemonconf.mcs_table_source("3ms", "ldpc", 40e6)[1] == top
    if len(rates) > 1:
        assert daemonconf.mcs_table_source("3ms", "ldpc", 1.5e6)[1] == rates[1]
    # conv was measured at 1 Msps only
    assert daemonconf.mcs_table_source("3ms", "conv", 5e6)[1] == 1e6


@pytest.mark.parametrize("rate", [2e6, 5e6, 10e6])
def test_apd_and_phy_read_one_table_that_fits_the_phy_at_the_rate(tmp_path, rate):
    cfg = _sample(rate)
    files = daemonconf.write_all(cfg, run_layout(tmp_path, cfg))
    apd = yaml.safe_load(files["apd"].read_text())
    c = loopback.load_config(files["phy"])  # checks the table against the PHY's TB sizes
    assert apd["link_adaptation"]["table"] == c["mcs_table"]
    table = mac.mcs_table.from_csv(open(c["mcs_table"]).read())
    assert linkmodel.table_mismatches(table, "3ms", rate) == []
    if rate in daemonconf.measured_rates("3ms"):
        assert c["mcs_table"] == str(daemonconf.measured_mcs_table("3ms", "ldpc", rate))
    else:
        assert c["mcs_table"] == str(tmp_path / "mcs_table.csv")


def test_the_phy_refuses_a_table_of_another_rate(tmp_path):
    cfg = {"seed": 1, "run_dir": str(tmp_path),
           "users": [{"id": 0, "name": "u0", "channel": {"model": "awgn", "mean_snr_db": 20.0}}],
           "mcs_table": str(daemonconf.measured_mcs_table("3ms")),
           "sample": {"profile": "3ms", "sample_rate": 2e6}}
    with pytest.raises(ConfigError, match=r"mcs_table: '.*awgn-3ms-1msps/mcs_table.csv' does "
                       r"not fit profile '3ms' at sample.sample_rate 2e\+06 \(ldpc\): MCS 0 "
                       r"gives 86 bytes per slot, the PHY's TB is 200 bytes \(and 7 more\)"):
        loopback.load_config(write_yaml(tmp_path / "phy.yaml", cfg))
    cfg["mcs_table"] = ""
    with pytest.raises(ConfigError, match=r"mcs_table: '' with sample.sample_rate 2e\+06: no "
                       "table was measured at this rate"):
        loopback.load_config(write_yaml(tmp_path / "phy.yaml", cfg))


# ----------------------------------------------------------------------------------------
# The thresholds against the rate, with the real blocks


def _bler(profile: str, rate: float, mcs: int, snr: float, tbs: int) -> float:
    cfg = linkcurves_point.SweepConfig(profile=profile, sample_rate=rate, slots=tbs,
                                 min_errors=10 ** 9, mcs=[mcs], snrs=[snr], seed=7)
    cfg.validate()
    return linkcurves_point.measure_point(linkcurves_point.Chain(cfg), mcs, snr)["bler"]


@pytest.mark.parametrize("mcs", [4])
def test_a_tb_of_more_codewords_needs_a_little_more_snr_and_the_5msps_table_has_it(mcs):
    """At 5 Msps a 3ms TB holds 6x the LDPC codewords of a 1 Msps TB and fails when any
    one does: at the 1 Msps threshold (10 % BLER there) it fails several times as often,
    at the threshold measured at 5 Msps (0.25 dB higher for 16QAM 3/4) about 10 % of
    the time again. The waterfall is steep (16QAM: 47 % -> 7 % in 0.25 dB), so the shift is
    small in dB but large in BLER. 400 TBs per point: a 10 % BLER has a standard deviation
    of 1.5 %; the bands also hold the thresholds' interpolation between grid points."""
    t1 = mac.mcs_table.from_csv(daemonconf.measured_mcs_table("3ms").read_text())
    t5 = mac.mcs_table.from_csv(daemonconf.measured_mcs_table("3ms", "ldpc", 5e6).read_text())
    thr1, thr5 = t1.thresholds_db[mcs], t5.thresholds_db[mcs]
    assert 0.1 < thr5 - thr1 < 0.5
    at1 = _bler("3ms", 1e6, mcs, thr1, 400)
    assert 0.03 <= at1 <= 0.25
    assert _bler("3ms", 5e6, mcs, thr1, 400) >= 0.3
    assert 0.03 <= _bler("3ms", 5e6, mcs, thr5, 400) <= 0.25


def test_every_threshold_at_5msps_is_within_a_third_of_a_db_of_1msps():
    """What the measured tables say for both profiles (0.03-0.32 dB higher at 5 Msps):
    a rate between two measured ones takes the higher one's thresholds (at most this much
    conservative), one above 10 Msps the 10 Msps ones (a little low; OLLA absorbs it)."""
    for profile in PROFILES:
        t1 = mac.mcs_table.from_csv(daemonconf.measured_mcs_table(profile).read_text())
        t5 = mac.mcs_table.from_csv(
            daemonconf.measured_mcs_table(profile, "ldpc", 5e6).read_text())
        d = [b - a for a, b in zip(t1.thresholds_db, t5.thresholds_db)]
        assert len(d) == 8 and all(-0.05 <= x <= 0.35 for x in d), (profile, d)


@pytest.mark.parametrize("profile", PROFILES)
def test_the_10msps_tables_are_measured_fit_the_phy_and_sit_at_or_above_5msps(profile):
    """experiments/linkcurves/awgn-<profile>-10msps: measured, so phy.sample.sample_rate
    10e6 uses it as it is. Twice the payload symbols of 5 Msps (368 / 180 in the 3ms
    slot), so the TBs at least double and hold twice the 1944-bit codewords: each
    threshold is at or a little above the 5 Msps one (docs/phy.md, "Sample rate")."""
    assert 10e6 in daemonconf.measured_rates(profile)
    assert daemonconf.mcs_table_source(profile, "ldpc", 10e6) == (
        daemonconf.measured_mcs_table(profile, "ldpc", 10e6), 10e6)
    t10 = mac.mcs_table.from_csv(
        daemonconf.measured_mcs_table(profile, "ldpc", 10e6).read_text())
    t5 = mac.mcs_table.from_csv(daemonconf.measured_mcs_table(profile, "ldpc", 5e6).read_text())
    assert linkmodel.table_mismatches(t10, profile, 10e6) == []
    assert len(t10) == 8 and list(t10.thresholds_db) == sorted(t10.thresholds_db)
    assert all(b >= 2 * a for a, b in zip(t5.rates_bps, t10.rates_bps))
    d = [b - a for a, b in zip(t5.thresholds_db, t10.thresholds_db)]
    assert all(-0.15 <= x <= 0.4 for x in d), d
    # summary.json records the trial counts and the rate
    summ = json.loads((daemonconf.measured_mcs_table(profile, "ldpc", 10e6).parent /
                       "summary.json").read_text())
    assert summ["config"]["sample_rate"] == 10e6 and summ["config"]["profile"] == profile
    assert all(e["status"] == "ok" for e in summ["mcs"])


# ----------------------------------------------------------------------------------------
# A short run at 2 Msps

E2E_2MSPS = """
experiment: e2e-2msps
kind: testbed
duration_s: 8
phy: {mode: sample, profile: 3ms, sample: {sample_rate: 2000000}}
devices:
  - {name: R1, channel: {mean_snr_db: 20.0, doppler_hz: 5.0, model: jakes}}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1}
queue: {limit_bytes: 100000}
"""


def test_a_tcp_flow_runs_over_the_sample_phy_at_2msps_on_the_derived_table(tmp_path):
    """Real TCP over the blocks at 2 Msps: the run folder's mcs_table.csv is what the apd
    and the PHY read, the TBs the apd builds fit the PHY (none refused), data flows."""
    require_real_testbed()
    exp = write_experiment(tmp_path, E2E_2MSPS)
    with netns_prefix():
        runs = run_experiment(exp, tmp_path / "out")
    out, s = tmp_path / "out", runs[0][1]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["phy"]["sample"]["sample_rate"] == 2e6
    table = str(out / "mcs_table.csv")
    apd = yaml.safe_load((out / "apd.yaml").read_text())
    phyc = yaml.safe_load((out / "phy.yaml").read_text())
    assert apd["link_adaptation"]["table"].endswith("/mcs_table.csv")
    assert phyc["mcs_table"] == apd["link_adaptation"]["table"]
    assert phyc["sample"]["sample_rate"] == 2e6
    t = mac.mcs_table.from_csv(open(table).read())
    assert linkmodel.table_mismatches(t, "3ms", 2e6) == []
    (f,) = s["flows"]
    assert f["error"] is None
    assert f["goodput_bps"] > 500e3, f  # a radio that carries the flow
    st = json.loads((out / "phy.stats.json").read_text())
    assert st["sample_rate"] == 2e6
    assert st["grants"]["malformed"] == 0  # every TB fitted its MCS at this rate
    assert st["users"][0]["tb_ok"] > 100
