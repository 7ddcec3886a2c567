"""The over-the-air PHY (python -m oppsched.phy.uhd) and the runner's phy.mode uhd, checked
without a radio: the schema of the radios (experiment and phy.yaml), the device check that
comes before anything else (exit 1 naming the field and the args), a full `oppsched run`
that fails on the missing radio and leaves nothing behind, and the flowgraphs up to the
radio endpoints: the AP TX chain's timed bursts (tx_time of slot n = T + lead + n T_slot,
tx_sob/tx_eob around every slot) into a test sink, and the client RX chain decoding them.
What needs a USRP (tuning, gains, real bursts on air, PPS) is not tested here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from oppsched import paths
from oppsched.testbed import daemonconf, nsbase
from oppsched.config import ConfigError
from oppsched.experiments import testbed
from oppsched.run.runner import failed_dir, load_experiment, run_experiment
from helpers import (BASE, PREFIX, REPO, assert_run_gone, cfg_of, delay_or_netem_available,
                     error_of, require, run_layout, write_experiment, write_yaml)

try:
    from gnuradio import oppsched as _gr_oppsched  # noqa: F401
    from gnuradio import uhd as _gr_uhd  # noqa: F401

    HAVE_GR = True
except ImportError:
    HAVE_GR = False

if HAVE_GR:
    from oppsched.phy import uhd  # imports GNU Radio

needs_gr = pytest.mark.skipif(not HAVE_GR and not os.environ.get("CI"),
                              reason="gnuradio.oppsched / gnuradio.uhd not importable "
                                     "(PYTHONPATH=<build>/python)")
NO_DEVICE = "type=b200,serial=oppsched-no-such-radio"  # matches nothing here
UHD = ["phy.mode=uhd", "phy.uhd.device=b210", f"phy.uhd.ap.args='{NO_DEVICE}'",
       "devices[0].uhd.args='type=b200,serial=oppsched-client-0'"]


# ----------------------------------------------------------------------------------------
# The experiment's radios (no GNU Radio needed)


def test_a_valid_uhd_experiment_resolves_with_the_radio_defaults():
    c = cfg_of(overrides=UHD)
    u = c["phy"]["uhd"]
    assert u["ap"]["args"] == NO_DEVICE and u["ap"]["antenna"] == "TX/RX"
    assert u["ap"]["start_delay_s"] == 2.0 and u["sample_rate"] == 1e6
    assert c["devices"][0]["uhd"]["antenna"] == "RX2"
    assert c["devices"][0]["uhd"]["freq_hz"] is None  # = the AP's


@pytest.mark.parametrize("overrides, expect", [
    (["phy.mode=uhd"], "phy.uhd.ap.args: required with phy.mode uhd"),
    (UHD[:3], "devices[0].uhd.args: required with phy.mode uhd"),
    (UHD + ["phy.uhd.ap.args='type b200'"],
     "phy.uhd.ap.args: 'type b200' is not UHD device args"),
    (UHD + ["devices[0].uhd.args=serial"], "devices[0].uhd.args: 'serial' is not UHD device args"),
    (UHD + ["devices[0].uhd.args='serial=oppsched-no-such-radio,type=b200'"],
     "devices[0].uhd.args: 'serial=oppsched-no-such-radio,type=b200' names the same device as "
     "phy.uhd.ap.args"),
    (UHD + ["phy.uhd.ap.gain_db=-3"], "phy.uhd.ap.gain_db: -3.0 is below the minimum"),
    (UHD + ["devices[0].uhd.freq_hz=9000000000.0"], "devices[0].uhd.freq_hz: 9000000000.0 is above"),
    (UHD + ["phy.uhd.ap.clock_source=atomic"], "phy.uhd.ap.clock_source: 'atomic' is not one of"),
    (UHD + ["devices[0].uhd.time_source=ntp"], "devices[0].uhd.time_source: 'ntp' is not one of"),
    (UHD + ["phy.uhd.ap.start_delay_s=0"], "phy.uhd.ap.start_delay_s: 0.0 is below the minimum"),
    (UHD + ["phy.uhd.sample_rate=1000000.5"], "phy.uhd.sample_rate: 1000000.5 is not whole Hz"),
    (UHD + ["phy.uhd.ap.antenna='TX RX'"], "phy.uhd.ap.antenna: 'TX RX' is not an antenna"),
    (UHD + ["phy.slot_s=0.002"], "phy.slot_s: 0.002 cannot be set with phy.mode uhd"),
])
def test_bad_radio_settings_name_the_field_and_value(overrides, expect):
    msg = error_of(overrides=overrides)
    assert msg.startswith(expect), msg


def test_unknown_radio_keys_name_the_field():
    assert "unknown key 'serial' at 'phy.uhd.ap'" in error_of(
        overrides=UHD + ["phy.uhd.ap.serial=3"])
    assert error_of(BASE.replace("{name: R1}", "{name: R1, uhd: {port: 1}}")).startswith(
        "devices[0].uhd.port: unknown key")


# A shared medium over the air: TDD, every radio in both directions on one time base
PPS = ["phy.uhd.ap.time_source=external", "devices[0].uhd.time_source=external"]
MEDIUM = ["medium.mode=node_fair", *PPS]


def test_a_medium_over_the_air_needs_every_radio_on_a_common_pps():
    c = cfg_of(overrides=UHD + MEDIUM)
    assert c["medium"]["mode"] == "node_fair"
    assert c["phy"]["uhd"]["ap"]["rx_antenna"] == "RX2"  # the AP's receiver of the stations
    assert c["devices"][0]["uhd"]["tx_antenna"] == "TX/RX"  # the station's transmitter
    msg = error_of(overrides=UHD + ["medium.mode=node_fair", PPS[0]])
    assert msg.startswith("devices[0].uhd.time_source: 'the default' with medium.mode "
                          "node_fair over the air: every radio needs a common time base"), msg
    msg = error_of(overrides=UHD + ["medium.mode=node_fair", "phy.uhd.ap.time_source=internal",
                                    PPS[1]])
    assert msg.startswith("phy.uhd.ap.time_source: 'internal' with medium.mode"), msg
    cfg_of(overrides=UHD)  # no medium: the clients only receive, their time is free


@pytest.mark.parametrize("overrides, expect", [
    (["devices[0].uhd.tx_gain_db=95"], "devices[0].uhd.tx_gain_db: 95.0 is outside the b210's "
     "TX gain range"),
    (["devices[0].uhd.tx_antenna=RX2"], "devices[0].uhd.tx_antenna: 'RX2' is not a b210 TX port"),
    (["phy.uhd.ap.rx_gain_db=80"], "phy.uhd.ap.rx_gain_db: 80.0 is outside the b210's RX gain"),
    (["phy.uhd.ap.rx_antenna=CAL"], "phy.uhd.ap.rx_antenna: 'CAL' is not a b210 RX port"),
])
def test_each_radios_second_direction_is_checked_against_its_profile(overrides, expect):
    msg = error_of(overrides=UHD + MEDIUM + overrides)
    assert msg.startswith(expect), msg
    cfg_of(overrides=UHD + overrides)  # without a medium that direction is not used


# ----------------------------------------------------------------------------------------
# phy.yaml of the UHD PHY


def _runner_phy_yaml(tmp_path: Path, overrides=()) -> Path:
    cfg = cfg_of(overrides=[*UHD, "phy.profile=evdo", *overrides])
    return daemonconf.write_all(cfg, run_layout(tmp_path, cfg))["phy"]


@needs_gr
def test_the_runners_phy_yaml_loads_with_the_radios_and_their_experiment_fields(tmp_path):
    path = _runner_phy_yaml(tmp_path, ["devices[0].uhd.gain_db=31", "phy.uhd.ap.freq_hz=915.0e+6"])
    c = uhd.load_config(path)
    assert c["mcs_table"] == str(daemonconf.measured_mcs_table("evdo"))  # as the apd's
    assert abs(c["slot_s"] - 1.667e-3) < 1e-6
    assert c["uhd"]["ap"]["args"] == NO_DEVICE and c["uhd"]["ap"]["origin"] == "phy.uhd.ap"
    r = c["users"][0]["uhd"]
    assert r["origin"] == "devices[0].uhd" and r["gain_db"] == 31.0
    assert r["freq_hz"] == 915e6  # null: the AP's frequency
    assert c["endpoints"]["phy_requests"].startswith("ipc://")


@needs_gr
@pytest.mark.parametrize("change, expect", [
    (lambda d: d["users"][0].pop("uhd"), "users[0].uhd.args: required"),
    (lambda d: d["uhd"]["ap"].update(args=""), "uhd.ap.args: required"),
    (lambda d: d["uhd"]["ap"].update(start_delay_s=-1.0), "uhd.ap.start_delay_s: -1.0"),
    (lambda d: d["sample"].update(sample_rate=1e6 + 0.25), "sample.sample_rate: 1000000.25 is "
     "not whole Hz"),
    (lambda d: d["users"][0]["uhd"].update(args=d["uhd"]["ap"]["args"]),
     "users[0].uhd.args: 'type=b200' names the same device as uhd.ap.args"),
    # outside the radio's device profile (firmware/profiles/b210.yaml), before any radio
    (lambda d: d["users"][0]["uhd"].pop("device"), "users[0].uhd.device: required"),
    (lambda d: d["uhd"]["ap"].update(device="b2100"), "uhd.ap.device: 'b2100' is not a device "
     "profile"),
    (lambda d: d["uhd"]["ap"].update(gain_db=95.0), "uhd.ap.gain_db: 95.0 is outside the b210's "
     "TX gain range 0..89.75 dB"),
    (lambda d: d["users"][0]["uhd"].update(antenna="TX2"), "users[0].uhd.antenna: 'TX2' is not "
     "a b210 RX port"),
    (lambda d: d["uhd"]["ap"].update(freq_hz=4.0e7), "uhd.ap.freq_hz: 40000000.0 is outside "
     "the b210's"),
    (lambda d: d["sample"].update(sample_rate=7e7), "uhd.ap: sample rate 70000000.0 is above "
     "the b210's"),
])
def test_bad_phy_yaml_names_field_and_value(tmp_path, change, expect):
    d = {"run_dir": str(tmp_path), "users": [{"id": 0, "name": "u0",
                                               "channel": {"model": "awgn"},
                                               "uhd": {"args": "type=b200,serial=1",
                                                       "device": "b210"}}],
         "uhd": {"ap": {"args": "type=b200", "device": "b210"}}, "sample": {}}
    change(d)
    p = write_yaml(tmp_path / "phy.yaml", d)
    with pytest.raises(ConfigError) as e:
        uhd.load_config(p)
    assert str(e.value).startswith(expect), str(e.value)


# ----------------------------------------------------------------------------------------
# The device check: first, exit 1, naming the field and the args


def _phy(*args, timeout=60):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(paths.package_parent()), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", "oppsched.phy.uhd", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


@needs_gr
def test_a_missing_radio_exits_1_naming_the_field_and_args_before_any_socket(tmp_path):
    path = _runner_phy_yaml(tmp_path)
    zmq_dir = tmp_path / "zmq"
    before = set(zmq_dir.iterdir()) if zmq_dir.exists() else set()
    p = _phy("--config", path)
    assert p.returncode == 1, p.stderr
    assert f"phy.uhd.ap.args '{NO_DEVICE}': no UHD device found" in p.stderr, p.stderr
    assert not (tmp_path / "phy.stats.json").exists()  # nothing was built or written
    assert (set(zmq_dir.iterdir()) if zmq_dir.exists() else set()) == before
    # --check validates the file only: no device is looked for
    p = _phy("--config", path, "--check")
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr
    # on its own (no runner), the field is the file's own
    p = _phy("--config", path, "--set", "uhd.ap.origin=''")
    assert p.returncode == 1 and f"uhd.ap.args '{NO_DEVICE}': no UHD device found" in p.stderr
    # a bad file is still exit 2
    p = _phy("--config", path, "--set", "uhd.ap.gain_db=-1")
    assert p.returncode == 2 and "uhd.ap.gain_db: -1.0" in p.stderr


@needs_gr
def test_every_radio_must_match_exactly_one_device(tmp_path):
    c = uhd.load_config(_runner_phy_yaml(tmp_path))
    seen = []

    def find(args):
        seen.append(args)
        return {NO_DEVICE: ["type=b200,serial=A"]}.get(args, [])

    with pytest.raises(uhd.RadioError, match=r"devices\[0\]\.uhd\.args 'type=b200,serial="
                       r"oppsched-client-0': no UHD device found"):
        uhd.check_radios(c, find)
    assert seen == [NO_DEVICE, "type=b200,serial=oppsched-client-0"]  # the AP first
    with pytest.raises(uhd.RadioError, match=r"phy.uhd.ap.args .*: 2 UHD devices match"):
        uhd.check_radios(c, lambda a: ["serial=A", "serial=B"])
    uhd.check_radios(c, lambda a: [a])  # one each: fine


# ----------------------------------------------------------------------------------------
# Radio set-up, with a stand-in for the USRP block


class FakeUsrp:
    def __init__(self, rate_factor=1.0):
        self.calls = []
        self.rate = None
        self.rate_factor = rate_factor

    def __getattr__(self, name):
        return lambda *a: self.calls.append((name, *a))

    def set_samp_rate(self, fs):
        self.rate = fs * self.rate_factor

    def get_samp_rate(self):
        return self.rate


@needs_gr
def test_radios_are_configured_from_their_settings():
    r = {"args": "type=b200", "origin": "phy.uhd.ap", "clock_source": "external",
         "time_source": "", "freq_hz": 915e6, "gain_db": 60.0, "antenna": "TX/RX",
         "bandwidth_hz": 0.0}
    u = FakeUsrp()
    uhd.configure_radio(u, r["origin"], r, 2e6)
    assert u.rate == 2e6
    assert u.calls == [("set_clock_source", "external", 0), ("set_center_freq", 915e6, 0),
                       ("set_gain", 60.0, 0), ("set_antenna", "TX/RX", 0)]
    # the AP's receiver of the uplink slots: its own gain and port on the same device
    u = FakeUsrp()
    uhd.configure_radio(u, r["origin"], {**r, "rx_gain_db": 30.0, "rx_antenna": "RX2"}, 2e6,
                        uhd.SECOND_DIRECTION["rx"])
    assert ("set_gain", 30.0, 0) in u.calls and ("set_antenna", "RX2", 0) in u.calls
    with pytest.raises(uhd.RadioError, match=r"phy.uhd.ap.args 'type=b200': the device runs "
                       "at 1999999.0 Hz, not sample.sample_rate 2000000.0"):
        uhd.configure_radio(FakeUsrp(1 - 5e-7), r["origin"], r, 2e6)


@needs_gr
def test_device_time_is_a_whole_second_of_the_host_clock_now_or_at_the_next_pps():
    u = FakeUsrp()
    t = uhd.set_device_time(u, {"time_source": ""}, clock=lambda: 1234.75, sleep=None)
    (name, spec, _mb), = u.calls
    assert t == 1234 and name == "set_time_now"
    assert (spec.get_full_secs(), spec.get_frac_secs()) == (1234, 0.0)
    u, slept = FakeUsrp(), []
    t = uhd.set_device_time(u, {"time_source": "external"}, clock=lambda: 1234.75,
                            sleep=slept.append)
    (name, spec), = u.calls
    assert t == 1235 and name == "set_time_next_pps" and spec.get_full_secs() == 1235
    assert slept and slept[0] > 1.0  # returns after the PPS edge


# ----------------------------------------------------------------------------------------
# The flowgraphs up to the radio endpoints


def _tx_cfg(tmp_path: Path, profile: str, lead: float, fs: float = 1e6) -> dict:
    d = {"run_dir": str(tmp_path), "lead_slots": 3,
         "sample": {"profile": profile, "sample_rate": fs, "connect_wait_ms": 0},
         "users": [{"id": 0, "name": "u0", "channel": {"model": "awgn"},
                    "uhd": {"args": "type=b200,serial=1", "device": "b210"}}],
         "uhd": {"ap": {"args": "type=b200,serial=0", "start_delay_s": lead,
                        "device": "b210"}}}
    p = write_yaml(tmp_path / "phy.yaml", d)
    (tmp_path / "zmq").mkdir(exist_ok=True)
    return uhd.load_config(p)


def _tags(sink) -> dict[str, list[tuple[int, object]]]:
    import pmt

    out: dict[str, list] = {}
    for t in sink.tags():
        out.setdefault(pmt.symbol_to_string(t.key), []).append((t.offset, t.value))
    return out


@needs_gr
@pytest.mark.parametrize("profile, lead, fs", [("evdo", 0.25, 1e6), ("3ms", 2.0, 1e6),
                                               ("evdo", 1.5, 5e6)])
def test_ap_tx_chain_sends_each_slot_as_a_timed_burst_at_t0_plus_lead(tmp_path, profile, lead,
                                                                      fs):
    import pmt
    from gnuradio import blocks, gr

    cfg = _tx_cfg(tmp_path, profile, lead, fs)
    n_slots, t_dev = 12, 86_399  # device time set to a whole second of CLOCK_MONOTONIC
    tb = gr.top_block()
    head = blocks.head(gr.sizeof_gr_complex, 1)  # resized below, once S is known
    tx, grants, gates = uhd.build_ap_tx(tb, cfg, t_dev, head)
    assert gates == []  # no uplink slots: slot_tx straight into the radio
    S = tx.slot_samples()
    head.set_length(n_slots * S)
    sink = blocks.vector_sink_c()
    tb.connect(head, sink)
    tb.run()
    assert len(sink.data()) == n_slots * S
    assert tx.slot_duration() == pytest.approx(cfg["slot_s"], abs=1e-12)
    tags = _tags(sink)
    times = tags["tx_time"]
    assert [off for off, _ in times] == [n * S for n in range(n_slots)]
    lead_ticks = round(lead * fs)
    assert lead_ticks == lead * fs  # the test's leads are whole samples
    for n, (_, v) in enumerate(times):
        ticks = lead_ticks + n * S  # samples since the device time t_dev
        full, frac = pmt.to_uint64(pmt.tuple_ref(v, 0)), pmt.to_double(pmt.tuple_ref(v, 1))
        assert full == t_dev + ticks // int(fs), n  # whole seconds: exact
        assert frac == pytest.approx((ticks % int(fs)) / fs, abs=1e-12), n  # within a ulp
    assert [off for off, _ in tags["tx_sob"]] == [n * S for n in range(n_slots)]
    assert [off for off, _ in tags["tx_eob"]] == [(n + 1) * S - 1 for n in range(n_slots)]
    assert all(pmt.to_bool(v) for _, v in tags["tx_sob"] + tags["tx_eob"])
    assert [pmt.to_uint64(v) for _, v in tags["slot"]] == list(range(n_slots))
    assert tx.slots() >= n_slots and grants.requests_sent() + grants.requests_dropped() > 0


@needs_gr
@pytest.mark.parametrize("fs, samples", [(1e6, 4096),  # uhd.TX_MAX_OUTPUT_BUFFER
                                         (5e6, 20000)])
def test_slot_tx_runs_the_profiles_tx_lead_ahead_of_the_radio(tmp_path, fs, samples):
    # b210.yaml: tx_lead_s 4 ms; at 5 Msps that is 20000 samples, more than the 4096 floor
    from gnuradio import blocks, gr

    cfg = _tx_cfg(tmp_path, "evdo", 0.5, fs)
    assert uhd.tx_buffer_samples(cfg) == samples
    tb = gr.top_block()
    tx, _, _ = uhd.build_ap_tx(tb, cfg, 100, blocks.null_sink(gr.sizeof_gr_complex))
    assert tx.max_output_buffer(0) == samples
    assert uhd.ap_profile(cfg)["tx_lead_s"] == 0.004


def _tx_samples(tmp_path, backoff_db, n_slots=12):
    """What the AP's TX chain hands its radio over n_slots slots (evdo, 1 Msps); backoff_db
    None: the default."""
    from gnuradio import blocks, gr
    import numpy as np

    tmp_path.mkdir()
    cfg = _tx_cfg(tmp_path, "evdo", 0.5)
    if backoff_db is not None:
        cfg["uhd"]["ap"]["tx_backoff_db"] = backoff_db
    tb = gr.top_block()
    head = blocks.head(gr.sizeof_gr_complex, 1)
    tx, _, _ = uhd.build_ap_tx(tb, cfg, 100, head)
    head.set_length(n_slots * tx.slot_samples())
    sink = blocks.vector_sink_c()
    tb.connect(head, sink)
    tb.run()
    return np.asarray(sink.data(), dtype=np.complex64), _tags(sink), tx.slot_samples()


@needs_gr
def test_the_ap_sends_its_samples_within_uhds_full_scale_after_the_tx_backoff(tmp_path):
    # UHD converts fc32 to the radio's sc16 with 1.0 as full scale. slot_tx's OFDM has unit
    # mean power: unscaled, about a third of the I and Q values are beyond 1.0 and would
    # clip. With the default 10 dB backoff none are, the power is a tenth, and the burst
    # tags stay on their samples.
    import numpy as np

    raw, raw_tags, S = _tx_samples(tmp_path / "raw", 0.0)
    x, tags, _ = _tx_samples(tmp_path / "default", None)
    beyond = lambda v: np.mean((np.abs(v.real) > 1.0) | (np.abs(v.imag) > 1.0))  # noqa: E731
    on = np.abs(raw) > 0
    assert np.mean(np.abs(raw[on]) ** 2) == pytest.approx(1.0, rel=0.05)
    assert beyond(raw) > 0.2
    assert beyond(x) == 0.0 and np.max(np.abs(x)) < 1.0
    assert np.mean(np.abs(x[on]) ** 2) == pytest.approx(0.1, rel=0.05)
    for key in ("tx_time", "tx_sob", "tx_eob"):
        assert [o for o, _ in tags[key]] == [o for o, _ in raw_tags[key]], key
    assert [o for o, _ in tags["tx_sob"]] == [n * S for n in range(12)]


@needs_gr
def test_client_rx_chain_decodes_the_ap_bursts(tmp_path):
    from gnuradio import blocks, gr

    cfg = _tx_cfg(tmp_path, "evdo", 0.5)
    tb = gr.top_block()
    head = blocks.head(gr.sizeof_gr_complex, 1)
    tx, _, _ = uhd.build_ap_tx(tb, cfg, 100, head)
    head.set_length(20 * tx.slot_samples())
    rx, sink = uhd.build_client_rx(tb, cfg, cfg["users"][0], head)
    tb.run()
    # every slot is an (empty) slot with a header for nobody: detected, header decoded
    assert rx.slots_detected() >= 15 and rx.headers_ok() >= 15, (rx.slots_detected(),
                                                                 rx.headers_ok())
    assert rx.addressed() == 0
    assert sink.sent() + sink.dropped() >= 15  # one indication per slot heard


@needs_gr
def test_the_runners_phy_yaml_for_a_medium_over_the_air_has_the_uplink_receivers(tmp_path):
    path = _runner_phy_yaml(tmp_path, MEDIUM)
    c = uhd.load_config(path)
    assert c["uplink"]["enabled"]
    assert c["users"][0]["uplink_rx"].endswith("/uprx_0")
    apd = yaml.safe_load(Path(path).with_name("apd.yaml").read_text())
    assert apd["medium"]["uplink_decode"] == "phy"  # the AP's radio decodes the stations
    assert apd["users"][0]["phy_uplink_rx"] == c["users"][0]["uplink_rx"]


@needs_gr
def test_all_radios_get_the_same_device_time_at_one_pps_edge():
    radios, slept = [FakeUsrp(), FakeUsrp(), FakeUsrp()], []
    t = uhd.set_common_time(radios, clock=lambda: 500.4, sleep=slept.append)
    assert t == 501 and len(slept) == 1 and slept[0] > 1.0  # one wait for all
    for r in radios:
        (name, spec), = r.calls
        assert name == "set_time_next_pps" and spec.get_full_secs() == 501


def _tdd_cfg(tmp_path: Path) -> dict:
    """Two stations over the air: every radio on a common PPS, uplink slots enabled."""
    d = {"run_dir": str(tmp_path), "lead_slots": 3,
         "sample": {"profile": "evdo", "sample_rate": 1e6, "connect_wait_ms": 0},
         "uplink": {"enabled": True},
         "users": [{"id": i, "name": f"u{i}", "channel": {"model": "awgn"},
                    "uhd": {"args": f"type=b200,serial={i + 1}", "device": "b210",
                            "time_source": "external"}} for i in range(2)],
         "uhd": {"ap": {"args": "type=b200,serial=0", "start_delay_s": 0.5,
                        "device": "b210", "time_source": "external"}}}
    p = write_yaml(tmp_path / "phy.yaml", d)
    (tmp_path / "zmq").mkdir(exist_ok=True)
    return uhd.load_config(p)


@needs_gr
def test_phy_yaml_with_uplink_slots_needs_a_common_pps_and_checks_the_second_direction(
        tmp_path):
    cfg = _tdd_cfg(tmp_path)
    assert cfg["uplink"]["enabled"] and cfg["users"][1]["uplink_rx"].endswith("uprx_1")
    d = yaml.safe_load((tmp_path / "phy.yaml").read_text())
    d["users"][1]["uhd"]["time_source"] = "internal"
    with pytest.raises(ConfigError, match=r"^users\[1\]\.uhd\.time_source: 'internal' with "
                       "uplink.enabled: every radio needs a common time base"):
        uhd.load_config(write_yaml(tmp_path / "phy.yaml", d))
    d["users"][1]["uhd"].update(time_source="gpsdo", tx_gain_db=99.0)
    with pytest.raises(ConfigError, match=r"^users\[1\]\.uhd\.tx_gain_db: 99.0 is outside "
                       "the b210's TX gain range"):
        uhd.load_config(write_yaml(tmp_path / "phy.yaml", d))


@needs_gr
def test_over_the_air_each_radio_sends_its_own_slots_and_the_ap_decodes_each_station(tmp_path):
    # The UHD PHY's graphs with test sinks for the three radios: the AP sends its downlink
    # slots only, each station its own uplink slots, each a timed burst. Their bursts put on
    # one air at their tx_time (with noise) are what the AP's receivers and a client's hear.
    import numpy as np
    import pmt
    from gnuradio import blocks, gr
    from gnuradio import oppsched as gro

    cfg = _tdd_cfg(tmp_path)
    rng = np.random.default_rng(23)
    # slots 0, 3: the AP's (a TB to user 0, then empty); 1, 5: station 0; 2, 4: station 1
    owner = {0: -1, 1: 0, 2: 1, 3: -1, 4: 1, 5: 0}
    tbs = {n: rng.integers(0, 256, 50, dtype=np.uint8).tobytes() for n in owner}
    tb = gr.top_block()
    heads = [blocks.head(gr.sizeof_gr_complex, 1) for _ in range(3)]  # AP, station 0, 1
    t_dev = 1000
    tx, _, gates = uhd.build_ap_tx(tb, cfg, t_dev, heads[0], heads[1:])
    S = tx.slot_samples()
    for n, who in owner.items():
        if n == 3:
            g = {"slot": pmt.from_uint64(n), "empty": pmt.PMT_T}
        else:
            g = {"slot": pmt.from_uint64(n), "user": pmt.from_long(max(who, 0)),
                 "mcs": pmt.from_long(2), "harq_pid": pmt.from_long(0),
                 "ndi": pmt.from_bool(n in (4, 5)), "rv": pmt.from_long(0),
                 "tb": pmt.init_u8vector(len(tbs[n]), list(tbs[n]))}
            if who >= 0:
                g["uplink"] = pmt.PMT_T
        d = pmt.make_dict()
        for k, v in g.items():
            d = pmt.dict_add(d, pmt.intern(k), v)
        tx._post(pmt.intern("grant"), d)
    sinks = []
    for h in heads:
        h.set_length(2 * S)  # every radio has two slots of the six
        sinks.append(blocks.vector_sink_c())
        tb.connect(h, sinks[-1])
    tb.run()
    # the stations' radios: exactly their two slots; the AP's goes on with the slots after
    # the sixth (no grant: empty downlink slots) until the graph stops
    assert [g.slots_passed() for g in gates[1:]] == [2, 2] and gates[0].slots_passed() >= 2
    assert tx.uplink_tb_sent() == 4
    air = np.zeros(6 * S + 400, np.complex64)
    t0 = uhd.ap_t0_s(cfg, t_dev)
    for who, snk in zip((-1, 0, 1), sinks):
        x = np.array(snk.data(), np.complex64)
        tags = _tags(snk)
        assert [pmt.to_uint64(v) for _, v in tags["slot"]] == [n for n, o in owner.items()
                                                                if o == who]
        assert [o for o, _ in tags["tx_sob"]] == [0, S] and [o for o, _ in tags["tx_eob"]] == \
            [S - 1, 2 * S - 1]
        for off, v in tags["tx_time"]:
            t = pmt.to_uint64(pmt.tuple_ref(v, 0)) + pmt.to_double(pmt.tuple_ref(v, 1))
            pos = round((t - t0) * 1e6)
            air[pos:pos + S] += x[off:off + S]
    p = np.mean(np.abs(air[:S]) ** 2)
    air += (rng.normal(size=(len(air), 2)) @ np.array([1, 1j]) * np.sqrt(p / 300)).astype(
        np.complex64)
    tb2 = gr.top_block()
    src = blocks.vector_source_c(air.tolist(), False)
    up_rx, _ = uhd.build_ap_rx(tb2, cfg, src)
    client_rx, _ = uhd.build_client_rx(tb2, cfg, cfg["users"][0], src)
    dbg = [blocks.message_debug() for _ in up_rx]
    for rx, d in zip(up_rx, dbg):
        tb2.msg_connect(rx, "rx", d, "store")
    tb2.run()
    for st, (rx, d) in enumerate(zip(up_rx, dbg)):
        reps = [pmt.to_python(d.get_message(i)) for i in range(d.num_messages())]
        mine = [n for n, o in owner.items() if o == st]
        assert [r["slot"] for r in reps] == mine, st  # its own slots only, none missed
        assert [bytes(r["tb"]) for r in reps] == [tbs[n] for n in mine], st
        assert (rx.other_direction(), rx.not_own(), rx.slots_missed()) == (2, 2, 0), st
    # client 0 hears the AP's two slots (its TB) and not the stations' four
    assert (client_rx.tb_ok(), client_rx.other_direction(), client_rx.slots_missed()) == \
        (1, 4, 0)


# ----------------------------------------------------------------------------------------
# The runner: phy.mode uhd without a radio fails cleanly and leaves nothing behind


E2E_UHD = """
experiment: e2e-uhd
kind: testbed
duration_s: 3
phy:
  mode: uhd
  profile: evdo
  uhd: {device: b210, ap: {args: "NODEV"}}
devices:
  - {name: R1, uhd: {args: "type=b200,serial=oppsched-client-0"}}
servers:
  - {name: S1, rtt_ms: 10}
flows:
  - {id: f1, server: S1, device: R1}
capture: {pcaps: false}
timeouts: {startup_s: 30}
""".replace("NODEV", NO_DEVICE)


@needs_gr
def test_a_uhd_run_without_a_radio_fails_naming_the_radio_and_leaves_nothing(tmp_path,
                                                                              monkeypatch):
    require(nsbase.is_root(), "network namespaces need root")
    cfg = cfg_of(E2E_UHD)
    try:
        testbed.find_programs(cfg)
    except testbed.TestbedError as exc:
        require(False, str(exc))
    require(*delay_or_netem_available())
    monkeypatch.setenv("OPPSCHED_NETNS_PREFIX", PREFIX)
    exp = write_experiment(tmp_path, E2E_UHD)
    with pytest.raises(testbed.TestbedError) as e:
        run_experiment(exp, tmp_path / "out")
    assert f"phy.uhd.ap.args '{NO_DEVICE}': no UHD device found" in str(e.value), str(e.value)
    out = failed_dir(tmp_path / "out")
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and "no UHD device found" in run["error"]
    assert run["run_name"].startswith(PREFIX) and run["teardown_errors"] == []
    procs = {p["name"]: p for p in json.loads((out / "processes.json").read_text())}
    # the namespaces and daemons were built as for sample mode; the PHY ran in the root
    # namespace and exited 1; the daemons were stopped
    assert procs["apd"]["netns"].endswith("-ap") and procs["client.R1"]["netns"] != "root"
    assert procs["phy"]["netns"] == "root" and procs["phy"]["exit_code"] == 1
    # (the run was written in the staging folder, which the run user's processes reach
    # through the run's view, /run/oppsched-netns/views/RUN: docs/testbed.md)
    assert procs["phy"]["argv"][-3:] == ["oppsched.phy.uhd", "--config",
                                         f"/run/oppsched-netns/views/{run['run_name']}/phy.yaml"]
    phy_yaml = yaml.safe_load((out / "phy.yaml").read_text())
    assert phy_yaml["uhd"]["ap"]["args"] == NO_DEVICE
    assert "no UHD device found" in (out / "logs" / "phy.log").read_text()
    assert_run_gone(run["run_name"])


def test_the_example_uhd_experiment_is_the_default_one_over_b210s():
    _, _, uhd_cfg = load_experiment(REPO / "experiments/clamp/fading-uhd.yaml")
    _, _, base = load_experiment(REPO / "experiments/clamp/fading.yaml")
    assert uhd_cfg["phy"]["mode"] == "uhd"
    radios = [uhd_cfg["phy"]["uhd"]["ap"]["args"]] + [d["uhd"]["args"]
                                                      for d in uhd_cfg["devices"]]
    assert all("type=b200" in a and "serial=" in a for a in radios)
    assert len(set(radios)) == len(radios)
    assert [d["name"] for d in uhd_cfg["devices"]] == [d["name"] for d in base["devices"]]
    assert uhd_cfg["flows"] == base["flows"] and uhd_cfg["servers"] == base["servers"]
