"""The daemons' field tables against the experiment schema (docs/architecture.md, "Field
tables"): every experiment key the testbed schema maps onto a daemon key (the apd's, the
client's, the delay stage's options, the PHY's) has that daemon's type, default, choices and
range, or departs from them only as the schema declares, so a setting changed in a daemon
and not in the schema (or the other way round) fails here, naming the experiment key; and
daemonconf writes those keys through the mapping. The committed copy of the tables is
compared with what the built programs print by test_registry.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers import built_program, cfg_of, run_cli, run_layout, write_yaml
from oppsched import daemon_fields
from oppsched._generated import DAEMON_FIELDS
from oppsched.config import Field, ListOf
from oppsched.experiments.testbed import schema
from oppsched.phy import common as phy_common
from oppsched.testbed import daemon_keys, daemonconf

APD = built_program("host/daemon/oppsched-apd", "OPPSCHED_APD")
DELAY = built_program("host/delay/oppsched-delay", "OPPSCHED_DELAY_BIN")
EXPERIMENT = "experiments/clamp/deterministic.yaml"


def schema_field(table: dict, dotted: str) -> Field:
    """The Field at `dotted`; "servers[].rtt_ms" is the field of every element of a list."""
    node = table
    for part in dotted.split("."):
        if part.endswith("[]"):
            node = node[part[:-2]]
            assert isinstance(node, ListOf), f"{part}: not a list in {dotted}"
            node = node.schema
        else:
            node = node[part]
    assert isinstance(node, Field), f"{dotted} is not a field of its schema"
    return node


def daemon_spec(daemon: str, key: str) -> dict:
    if daemon == "phy":
        return daemon_fields.field_spec(schema_field(phy_common.SCHEMA, key))
    return daemon_fields.spec(daemon, key)


MAPPED = [(key, daemon, dkey) for key, targets in schema.DAEMON_KEYS.items()
          for daemon, dkey in targets]


@pytest.mark.parametrize("key,daemon,daemon_key", MAPPED,
                         ids=[f"{k}->{d}:{dk}" for k, d, dk in MAPPED])
def test_a_mapped_experiment_key_has_its_daemons_type_default_and_range(key, daemon, daemon_key):
    # only a declared departure (schema.DEPARTURES, which may narrow but never widen) lets
    # the experiment's Field differ from the daemon's entry
    mine = schema_field(schema.SCHEMA, key)
    theirs = daemon_fields.departed(daemon_spec(daemon, daemon_key), schema.DEPARTURES.get(key))
    differences = daemon_fields.drift(mine, theirs)
    assert not differences, f"{key} (-> {daemon} {daemon_key}): " + "; ".join(differences)


def test_every_departure_is_of_a_mapped_key_and_says_why():
    assert set(schema.DEPARTURES) <= set(schema.DAEMON_KEYS)
    for key, departure in schema.DEPARTURES.items():
        assert departure.get("why"), key


def test_a_departure_may_narrow_a_daemons_range_never_widen_it():
    delay = daemon_fields.spec("delay", "delay-ab-ms")  # [0,60000] ms one way
    rtt = daemon_fields.departed(delay, {"scale": 2, "max": 60000.0, "required": True,
                                         "why": "a round trip"})
    assert (rtt["min"], rtt["max"], rtt["violation"]) == (0.0, 60000.0, "not in [0,60000]")
    with pytest.raises(ValueError, match="widens the daemon's range"):
        daemon_fields.departed(delay, {"max": 70000.0, "why": "more"})
    with pytest.raises(ValueError, match="with a why"):
        daemon_fields.departed(delay, {"max": 100.0})
    with pytest.raises(ValueError, match="outside the range"):
        daemon_fields.departed(delay, {"default": -1.0, "why": "negative"})
    # an undeclared narrowing is a drift
    assert daemon_fields.drift(Field(float, 0.0, min=0.0, max=100.0), delay) == [
        "refuses 60000.0, in the daemon's range [0,60000]"]


def test_a_zero_off_entry_takes_0_beside_its_range():
    rate = daemon_fields.spec("delay", "rate-ab-bps")
    assert rate["zero_off"] and rate["violation"] == "not 0 or in [1000,1e+12]"
    f = daemon_fields.field("delay", "rate-ab-bps")
    assert daemon_fields.drift(f, rate) == []
    assert daemon_fields.drift(Field(float, 0.0, min=1e3, max=1e12), rate) == [
        "refuses 0, which the daemon takes as off"]
    assert daemon_fields.drift(Field(float, 0.0, min=0.0, max=1e12), rate) == [
        "accepts 999.9999999999999, outside the daemon's range [1000,1e+12]"]


def test_drift_names_each_difference_of_a_field_from_a_daemon_spec():
    lead = daemon_fields.spec("apd", "lead_slots")
    # the PHY's and the apd's old lead_slots: another default, 0 and 100000 accepted
    assert daemon_fields.drift(Field(int, 3, min=1, max=1000), lead) == [
        "default 3, the daemon's 4"]
    assert daemon_fields.drift(Field(int, 4, min=0, max=100000), lead) == [
        "accepts 0, outside the daemon's range [1,1000]",
        "accepts 1001, outside the daemon's range [1,1000]"]
    assert daemon_fields.drift(Field(float, 4.0), lead) == ["type float, the daemon's integer"]
    alpha = daemon_fields.spec("apd", "scheduler.alpha")  # (0,1]
    assert daemon_fields.drift(Field(float, alpha["default"], min=0.0, max=1.0), alpha) == [
        "accepts 0.0, outside the daemon's range (0,1]"]
    mode = daemon_fields.spec("apd", "queue.mode")
    assert daemon_fields.drift(Field(str, "per_user", choices=("per_user",)), mode) == [
        "choices ['per_user'], the daemon's ['per_user', 'shared']"]


def test_lead_slots_alpha_and_lambda_have_one_default_and_range_in_every_layer():
    lead = daemon_fields.spec("apd", "lead_slots")
    assert (lead["default"], lead["min"], lead["max"]) == (4, 1, 1000)
    for table in (schema.SCHEMA, phy_common.SCHEMA):
        key = "phy.lead_slots" if table is schema.SCHEMA else "lead_slots"
        assert daemon_fields.drift(schema_field(table, key), lead) == []
    from oppsched import registry
    specs = registry.scheduler_param_specs()
    for name in ("alpha", "lambda"):
        apd = daemon_fields.spec("apd", f"scheduler.{name}")
        assert apd["default"] == specs[name]["default"]
        assert (apd["min"], apd["max"], apd["min_open"], apd["max_open"]) == (
            specs[name]["min"], specs[name]["max"], specs[name]["min_open"],
            specs[name]["max_open"])


@pytest.mark.parametrize("override,message", [
    ("phy.lead_slots=1001", "phy.lead_slots: 1001 is above the maximum 1000"),
    ("phy.lead_slots=0", "phy.lead_slots: 0 is below the minimum 1"),
    ("harq.feedback_timeout_slots=1", "harq.feedback_timeout_slots: 1 is below the minimum 2"),
    ("clamp.mu_c=guessed", "clamp.mu_c: 'guessed' is not one of measured, all_backlogged"),
    # the delay stage's table
    ("servers[0].rate_bps=500", "servers[0].rate_bps: 500.0 not 0 or in [1000,1e+12]"),
    ("servers[0].rtt_ms=-2", "servers[0].rtt_ms: -2.0 is below the minimum 0.0"),
    ("topology.rt_priority=100", "topology.rt_priority: 100 is above the maximum 99"),
    # the apd's and the client's, mapped with a declared departure or none
    ("clamp.b=2", "clamp.b: 2.0 is above the maximum 1.5707963267948966"),
    ("clamp.ema_rate_per_s=0", "clamp.ema_rate_per_s: 0.0 not in (0,inf)"),
    ("link_adaptation.target_bler=0.5", "link_adaptation.target_bler: 0.5 not in (0,0.5)"),
    ("watchdog.stats_period_s=0.05", "watchdog.stats_period_s: 0.05 is below the minimum 0.1"),
    ("capture.mac_max_bytes=1000", "capture.mac_max_bytes: 1000 is below the minimum 1024"),
    ("medium.station_queue=router", "medium.station_queue: 'router' is not one of ap, client"),
    ("devices[0].queue.limit_bytes=-5",
     "devices[0].queue.limit_bytes: -5 is below the minimum 0"),
])
def test_check_refuses_a_value_outside_a_daemons_table_naming_the_key_and_value(
        override, message):
    r = run_cli("check", EXPERIMENT, "--set", override)
    assert r.returncode == 2 and message in r.stderr, r.stderr


# ---- daemonconf writes the mapped keys from the mapping ------------------------------------

EVERY_SECTION = ["capture.mac=true", "medium.mode=node_fair", "medium.station_queue=client",
                 "devices[0].queue.limit_bytes=9000", "reassembly.max_bytes=70000",
                 "clamp.enabled=true", "clamp.b=0.5", "queue.limit_packets=7"]


def daemon_value(conf: dict, daemon_key: str):
    node = conf
    for part in daemon_key.split("."):
        node = node[part[:-2]][0] if part.endswith("[]") else node[part]
    return node


def test_daemonconf_writes_every_mapped_apd_and_client_key_with_the_experiments_value(tmp_path):
    cfg = cfg_of(overrides=EVERY_SECTION)
    lay = run_layout(tmp_path, cfg)
    files = {"apd": daemonconf.apd_config(cfg, lay),
             "client": daemonconf.client_config(cfg, lay, lay.users[0])}
    for key, daemon, daemon_key in MAPPED:
        if daemon not in files:
            continue
        value = daemon_keys._experiment_value(cfg, key, 0)
        if key in ("scheduler.alpha", "scheduler.lambda"):  # the registry writes these
            continue
        assert daemon_value(files[daemon], daemon_key) == value, (key, daemon, daemon_key)


def test_daemonconf_leaves_a_null_nullable_key_out_and_refuses_a_slot_nothing_maps(tmp_path):
    cfg = cfg_of()
    lay = run_layout(tmp_path, cfg)
    apd = daemonconf.apd_config(cfg, lay)
    assert "queue_limit_bytes" not in apd["users"][0]
    assert "max_bytes" not in daemonconf.client_config(cfg, lay, lay.users[0])["reassembly"]
    with pytest.raises(ValueError, match="no experiment key maps onto queue.bogus"):
        daemon_keys.fill({"queue": {"bogus": daemon_keys.MAPPED}}, cfg, "apd")


# ---- the built apd prints the table its reader applies ------------------------------------

needs_apd = pytest.mark.skipif(APD is None, reason="oppsched-apd is not built")


def apd_yaml(tmp_path, **over) -> dict:
    return {"tun": "oppt0", "slot_s": 0.003,
            "endpoints": {n: f"ipc://{tmp_path}/{n}" for n in ("phy_requests", "phy_grants",
                                                                 "uplink")},
            "users": [{"id": 0, "name": "R1"}], **over}


@needs_apd
def test_the_apd_prints_its_field_table_as_the_committed_copy_holds_it():
    r = subprocess.run([str(APD), "--schema"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["daemon"] == "apd"
    assert {f.pop("key"): f for f in doc["fields"]} == DAEMON_FIELDS["apd"]


@needs_apd
@pytest.mark.parametrize("section,key", [("", "lead_slots"), ("harq", "processes"),
                                         ("harq", "feedback_timeout_slots"),
                                         ("", "watchdog_slots"), ("", "client_watchdog_slots"),
                                         ("queue", "limit_packets"),
                                         ("medium", "station_buffer_packets"),
                                         ("traces", "mac_pcap_max_bytes")])
def test_the_apd_reader_accepts_its_tables_ends_and_refuses_the_next_value(
        tmp_path, section, key):
    s = daemon_fields.spec("apd", f"{section}.{key}" if section else key)

    def check(value) -> subprocess.CompletedProcess:
        cfg = apd_yaml(tmp_path, **({section: {key: value}} if section else {key: value}))
        if section == "harq" and key == "processes":
            cfg["harq"]["feedback_timeout_slots"] = 16
        path = write_yaml(tmp_path / "apd.yaml", cfg)
        return subprocess.run([str(APD), "--config", str(path), "--check"], capture_output=True,
                              text=True, timeout=30)

    dotted = f"{section}.{key}" if section else key
    for inside in (s["min"], s["max"]):
        r = check(inside)
        if r.returncode != 0:  # another field's limit (a cross-field check) may bind first
            assert dotted not in r.stderr, r.stderr
    for outside in (s["min"] - 1, s["max"] + 1):  # refused naming the key and the value
        r = check(outside)
        assert r.returncode == 2 and f"{dotted}: {outside} " in r.stderr, r.stderr


# ---- the built delay stage prints the table its option parser applies ---------------------

needs_delay = pytest.mark.skipif(DELAY is None, reason="oppsched-delay is not built")


@needs_delay
def test_the_delay_stage_prints_its_field_table_as_the_committed_copy_holds_it():
    r = subprocess.run([str(DELAY), "--schema"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["daemon"] == "delay"
    assert {f.pop("key"): f for f in doc["fields"]} == DAEMON_FIELDS["delay"]


@needs_delay
@pytest.mark.parametrize("option", ["delay-ab-ms", "rate-ab-bps", "limit-ab-bytes",
                                    "rt-priority", "socket-buffer-bytes", "stats-period-s"])
def test_the_delay_stage_checks_each_option_against_its_table(option):
    # the values are checked before any socket is opened (exit 2 naming the option); a
    # value in range reaches the sockets, which fail on the made-up interfaces (exit 1)
    s = daemon_fields.spec("delay", option)
    integer = s["type"] == "integer"

    def run(value) -> subprocess.CompletedProcess:
        text = str(int(value)) if integer else repr(float(value))
        return subprocess.run([str(DELAY), "--if-a", "otnonexist0", "--if-b", "otnonexist1",
                               f"--{option}", text], capture_output=True, text=True, timeout=30)

    inside = [s["min"]] + ([s["max"]] if s["max"] is not None else []) + (
        [0] if s["zero_off"] else [])
    for v in inside:
        r = run(v)
        assert f"--{option}:" not in r.stderr, r.stderr
    outside = [s["min"] - 1] + ([s["max"] + 1] if s["max"] is not None else [])
    for v in outside:
        r = run(v)
        assert r.returncode == 2 and f"--{option}: " in r.stderr and s["violation"] in r.stderr, \
            r.stderr
