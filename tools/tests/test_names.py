"""The names of enumerations: Python's agree with the C++ they come from (oppsched.names), and
the old "clamp" names ("clamp" names the CLAMP algorithm only) are still accepted,
each with one deprecation message, and give exactly what the new name gives."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import yaml
from gnuradio import oppsched as gr_phy

from oppsched import mac, names
from oppsched.commands import linkcurves_point
from oppsched.testbed import daemonconf
from oppsched.config import ConfigError, validate
from oppsched.experiments import macsim
from oppsched.experiments.testbed import schema as testbed_schema
from oppsched.phy import abstract, common, loopback
from helpers import BASE, built_program, cfg_of, error_of, run_layout, write_yaml

# ----------------------------------------------------------------------------------------
# Python and C++ agree


def test_every_cpp_scheduler_kind_is_made_by_the_factory_and_offered_by_both_schemas():
    assert names.SCHEDULERS == ("pf", "glambda", "rr", "maxrate", "wpf")
    for kind in names.SCHEDULERS:
        kw = {"weights": [1.0]} if kind == "wpf" else {}
        assert mac.make_scheduler(kind, **kw).kind == kind
    # and the plugin kinds (docs/extending.md: Python, C++ library), which no C++ factory makes
    assert testbed_schema.SCHEMA["scheduler"]["kind"].choices == names.SCHEDULERS + ("python", "plugin")
    assert macsim.SCHEMA["scheduler"]["kind"].choices == names.SCHEDULERS + ("python", "plugin")


def test_every_cpp_aqm_kind_is_made_by_the_factory_and_offered_by_the_schema():
    assert names.AQM_KINDS == tuple(mac.AQM_KINDS) and len(names.AQM_KINDS) == 10
    for kind in names.AQM_KINDS:
        mac.make_aqm(kind, limit_bytes=60000)
    assert testbed_schema.SCHEMA["aqm"]["kind"].choices == names.AQM_KINDS + ("python", "plugin")
    # the kinds that mark ECT packets (aqm.h's marks_ecn) turn TCP's ECN on
    assert names.MARKING_AQMS == ("red", "rem", "reaqm", "avq", "codel", "pie")
    for kind in names.AQM_KINDS:
        cfg = cfg_of(overrides=[f"aqm.kind={kind}"])
        assert testbed_schema.resolved_ecn(cfg) == (1 if kind in names.MARKING_AQMS else 0)


def test_every_mcs_table_the_apd_builds_by_name_is_a_preset_of_the_phy_and_the_experiment():
    assert names.TABLE_PRESETS == ("evdo", "ofdm_provisional", "shannon")
    for name in names.TABLE_PRESETS:
        cfg = {"mcs_table": name, "shannon": dict(names.SHANNON_TABLE_DEFAULTS)}
        assert len(common.load_mcs_table(cfg)) > 0
        assert cfg_of(overrides=[f"phy.mcs_table={name}"])["phy"]["mcs_table"] == name


def test_the_shannon_table_defaults_are_the_cpp_ones_everywhere():
    d = names.SHANNON_TABLE_DEFAULTS
    assert d == {"w0_hz": 4.3e6, "cmax_bps": 10e6, "levels": 32}
    assert mac.mcs_table.shannon().to_csv() == mac.mcs_table.shannon(**d).to_csv()
    phy = {k: f.default for k, f in common.SCHEMA["shannon"].items()}
    experiment = {k: f.default for k, f in testbed_schema.SCHEMA["phy"]["shannon_table"].items()}
    assert phy == experiment == d
    assert common.SCHEMA["users"].schema["channel"]["oscillators"].default == mac.JAKES_GENERATORS


def test_every_fading_model_is_built_by_jakes_and_is_a_channel_model():
    assert names.FADING_MODELS == ("jakes", "sum_of_sinusoids")
    for model in names.FADING_MODELS:
        assert mac.fading_channel(60.0, 6.0, 1, model=model).model == model
    assert set(names.FADING_MODELS) <= set(names.CHANNEL_MODELS)
    assert macsim.SCHEMA["users"].schema["fading"].choices == names.FADING_MODELS


def test_profiles_and_fecs_are_the_numerologys():
    assert names.PROFILES == tuple(gr_phy.numerology.profile_names()) == ("evdo", "3ms")
    assert names.FECS == tuple(gr_phy.fec_names()) == ("ldpc", "conv")
    assert set(daemonconf.PROFILES) == set(names.PROFILES)
    for p in names.PROFILES:
        slot = gr_phy.numerology.profile(p, 1e6).params.slot_duration
        assert daemonconf.PROFILES[p]["slot_s"] == slot
        for f in names.FECS:
            assert gr_phy.numerology.profile(p, 1e6, f).fec == f
    assert loopback.SCHEMA["sample"]["profile"].choices == names.PROFILES
    assert loopback.SCHEMA["sample"]["fec"].choices == names.FECS
    assert testbed_schema.SCHEMA["phy"]["fec"].choices == names.FECS
    assert set(testbed_schema.SCHEMA["phy"]["profile"].choices) == set(names.PROFILES)


# ----------------------------------------------------------------------------------------
# Old names: one message naming the field, old and new value; the same configuration


def _warned(fn, *args, **kw):
    """fn's result and the deprecation messages it gave."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn(*args, **kw)
    return out, [str(x.message) for x in w if issubclass(x.category, DeprecationWarning)]


EXPERIMENT_ALIASES = [
    ("phy.profile", "clamp", "3ms"),
    ("phy.mcs_table", "clamp", "shannon"),
    ("phy.error_model", "clamp", "end_of_slot"),
    ("devices[0].channel.model", "clamp", "jakes"),
]


@pytest.mark.parametrize("field,old,new", EXPERIMENT_ALIASES)
def test_an_old_value_in_an_experiment_is_the_new_one_with_one_message(field, old, new):
    got, msgs = _warned(cfg_of, overrides=[f"{field}={old}"])
    assert msgs == [f"{field}: value {old!r} is deprecated, use {new!r}"]
    want, none = _warned(cfg_of, overrides=[f"{field}={new}"])
    assert got == want and none == []


def test_old_values_in_an_experiment_file_and_the_renamed_table_key():
    text = BASE + ("phy: {profile: clamp, error_model: clamp, mcs_table: clamp,\n"
                   "      clamp_table: {w0_hz: 2000000.0}}\n")
    got, msgs = _warned(cfg_of, text)
    assert sorted(msgs) == sorted([
        "phy.profile: value 'clamp' is deprecated, use '3ms'",
        "phy.error_model: value 'clamp' is deprecated, use 'end_of_slot'",
        "phy.mcs_table: value 'clamp' is deprecated, use 'shannon'",
        "phy.clamp_table: key 'clamp_table' is deprecated, use 'shannon_table'",
    ])
    new = BASE + ("phy: {profile: 3ms, error_model: end_of_slot, mcs_table: shannon,\n"
                  "      shannon_table: {w0_hz: 2000000.0}}\n")
    assert got == cfg_of(new)
    assert "clamp_table" not in got["phy"] and got["phy"]["shannon_table"]["w0_hz"] == 2.0e6
    # --set reaches the renamed key too, with its message
    got, msgs = _warned(cfg_of, overrides=["phy.clamp_table.levels=16"])
    assert msgs == ["--set phy.clamp_table: key 'clamp_table' is deprecated, use 'shannon_table'"]
    assert got == cfg_of(overrides=["phy.shannon_table.levels=16"])
    both = BASE + "phy: {clamp_table: {levels: 8}, shannon_table: {levels: 8}}\n"
    err = error_of(both)
    assert err.startswith("phy.clamp_table: renamed to 'shannon_table', which is given too")


def test_a_bad_value_lists_only_the_new_names():
    assert error_of(overrides=["phy.profile=fast"]) == "phy.profile: 'fast' is not one of 3ms, evdo"
    err = error_of(overrides=["phy.error_model=slot"])
    assert "end_of_slot" in err and "clamp" not in err
    err = error_of(overrides=["devices[0].channel.model=rayleigh"])
    assert err.endswith("is not one of None, jakes, sum_of_sinusoids, trace, awgn")
    err = error_of(overrides=["phy.mcs_table=fancy"])
    assert err == "phy.mcs_table: 'fancy' is not evdo, ofdm_provisional, shannon or a path to a .csv table"
    unknown = error_of(BASE + "phy: {shanon_table: {}}\n")
    assert "shannon_table" in unknown and "clamp_table" not in unknown


def test_the_run_files_of_an_old_experiment_are_those_of_the_new(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    old, msgs = _warned(cfg_of, BASE + "phy: {profile: clamp, clamp_table: {levels: 16}}\n")
    assert len(msgs) == 2
    new = cfg_of(BASE + "phy: {profile: 3ms, shannon_table: {levels: 16}}\n")
    a = daemonconf.write_all(old, run_layout(tmp_path / "a", old))
    b = daemonconf.write_all(new, run_layout(tmp_path / "b", new))
    for k in a:
        a_text = a[k].read_text().replace(str(tmp_path / "a"), str(tmp_path / "b"))
        assert a_text == b[k].read_text(), k
    phy = a["phy"].read_text()
    assert "model: jakes" in phy and "error_model: end_of_slot" in phy and "shannon:" in phy


def _phy_cfg(tmp_path, **top):
    cfg = {"slot_s": 3e-3, "users": [{"id": 0, "name": "u0",
                                      "channel": {"model": "jakes", "doppler_hz": 60.0}}],
           "error_model": "end_of_slot", "mcs_table": "shannon", "run_dir": str(tmp_path),
           "shannon": {"w0_hz": 3e6}}
    cfg.update(top)
    return cfg


def test_old_names_in_a_phy_yaml_are_the_new_ones_with_one_message_each(tmp_path):
    old = _phy_cfg(tmp_path, error_model="clamp", mcs_table="clamp",
                   users=[{"id": 0, "name": "u0", "channel": {"model": "clamp", "doppler_hz": 60.0}}])
    old["clamp"] = old.pop("shannon")
    got, msgs = _warned(abstract.load_config, write_yaml(tmp_path / "old.yaml", old))
    assert sorted(msgs) == sorted([
        "users[0].channel.model: value 'clamp' is deprecated, use 'jakes'",
        "error_model: value 'clamp' is deprecated, use 'end_of_slot'",
        "mcs_table: value 'clamp' is deprecated, use 'shannon'",
        "clamp: key 'clamp' is deprecated, use 'shannon'",
    ])
    want = abstract.load_config(write_yaml(tmp_path / "new.yaml", _phy_cfg(tmp_path)))
    assert got == want and "clamp" not in got
    assert abstract.build_models(got).error.name == "end_of_slot"
    with pytest.raises(ConfigError, match=r"error_model: 'clamp2' is not one of curves, "
                                          r"threshold, end_of_slot$"):
        abstract.load_config(write_yaml(tmp_path / "bad.yaml", _phy_cfg(tmp_path,
                                                                        error_model="clamp2")))


def test_the_sample_phys_old_profile_is_3ms(tmp_path):
    base = _phy_cfg(tmp_path, error_model="threshold", mcs_table="", slot_s=0.0)
    got, msgs = _warned(loopback.load_config, write_yaml(
        tmp_path / "old.yaml", {**base, "sample": {"profile": "clamp"}}))
    assert msgs == ["sample.profile: value 'clamp' is deprecated, use '3ms'"]
    want = loopback.load_config(write_yaml(tmp_path / "new.yaml",
                                           {**base, "sample": {"profile": "3ms"}}))
    assert got == want and got["mcs_table"].endswith("linkcurves/awgn-3ms-1msps/mcs_table.csv")


def test_the_old_names_on_the_command_line_and_in_the_bindings():
    cfg = linkcurves_point.SweepConfig(profile="clamp")
    _, msgs = _warned(cfg.validate)
    assert msgs == ["--profile: value 'clamp' is deprecated, use '3ms'"] and cfg.profile == "3ms"
    with pytest.raises(ConfigError, match=r"--profile: 'x' not one of evdo, 3ms"):
        linkcurves_point.SweepConfig(profile="x").validate()
    j, msgs = _warned(mac.fading_channel, 60.0, 6.0, 3, model="clamp")
    assert msgs == ["fading_channel.model: value 'clamp' is deprecated, use 'jakes'"] and j.model == "jakes"
    t = np.linspace(0, 1, 101)
    assert np.array_equal(j.gain_many(t), mac.fading_channel(60.0, 6.0, 3, model="jakes").gain_many(t))
    with pytest.raises(ValueError, match="not one of 'jakes', 'sum_of_sinusoids'"):
        mac.fading_channel(60.0, 6.0, 3, model="rayleigh")
    table, msgs = _warned(mac.mcs_table.clamp)
    assert msgs == ["mcs_table.clamp is deprecated, use mcs_table.shannon"]
    assert table.to_csv() == mac.mcs_table.shannon().to_csv()
    assert table.name == "shannon"
    users = [{"name": "u", "fading": "clamp"}]
    ex = {"experiment": "m", "kind": "macsim", "duration_s": 1.0, "users": users}
    got, msgs = _warned(validate, macsim.SCHEMA, {k: v for k, v in ex.items()
                                                   if k in macsim.SCHEMA})
    assert msgs == ["users[0].fading: value 'clamp' is deprecated, use 'jakes'"]
    assert got["users"][0]["fading"] == "jakes"


APD = built_program("host/daemon/oppsched-apd", "OPPSCHED_APD")


@pytest.mark.skipif(APD is None, reason="oppsched-apd is not built")
def test_the_apd_reads_the_old_table_name_and_section_with_a_logged_warning(tmp_path):
    def check(link_adaptation):
        cfg = {
            "tun": "t0", "slot_s": 0.003,
            "endpoints": {n: f"ipc://{tmp_path}/{n}" for n in ("phy_requests", "phy_grants",
                                                                 "uplink")},
            "users": [{"id": 0, "name": "ue0", "addresses": ["10.0.0.2"]}],
            "link_adaptation": link_adaptation,
        }
        path = write_yaml(tmp_path / "apd.yaml", cfg)
        return subprocess.run([str(APD), "--config", str(path), "--check"], capture_output=True,
                              text=True, timeout=30)

    r = check({"table": "clamp", "clamp": {"levels": 16}})
    assert r.returncode == 0, r.stderr
    assert "link_adaptation.table: value 'clamp' is deprecated, use 'shannon'" in r.stderr
    assert "link_adaptation.clamp: key 'clamp' is deprecated, use 'shannon'" in r.stderr
    r = check({"table": "shannon", "shannon": {"levels": 16}})
    assert r.returncode == 0 and "deprecated" not in r.stderr, r.stderr
    r = check({"table": "clamp", "clamp": {"levels": 0}})  # the old section is really read
    assert r.returncode == 2 and "link_adaptation.clamp.levels: 0" in r.stderr, r.stderr
    r = check({"table": "shannon", "clamp": {}, "shannon": {}})
    assert r.returncode == 2 and "link_adaptation.clamp: renamed to 'shannon'" in r.stderr
    r = check({"table": "fancy"})
    assert r.returncode == 2 and "neither evdo, ofdm_provisional, shannon nor" in r.stderr


def test_the_loadtest_reads_the_old_error_model_and_table_names(tmp_path):
    p = subprocess.run([sys.executable, "-m", "oppsched.phy.loadtest", "--users", "1",
                        "--seconds", "0.2", "--slot-s", "3e-3", "--error-model", "clamp",
                        "--mcs-table", "clamp", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "--error-model: value 'clamp' is deprecated, use 'end_of_slot'" in p.stderr
    assert "--mcs-table: value 'clamp' is deprecated, use 'shannon'" in p.stderr
    cfg = yaml.safe_load((tmp_path / "phy.yaml").read_text())
    assert cfg["error_model"] == "end_of_slot" and cfg["mcs_table"] == "shannon"
