"""The daemons' field tables against the experiment schema (docs/architecture.md, "Field
tables"): every experiment key the testbed schema maps onto a daemon key has that daemon's
type, default, choices and range, so a setting changed in a daemon and not in the schema (or
the other way round) fails here, naming the experiment key. The committed copy of the tables
is compared with what the built daemons print by test_registry.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers import built_program, run_cli, write_yaml
from oppsched import daemon_fields
from oppsched._generated import DAEMON_FIELDS
from oppsched.config import Field
from oppsched.experiments.testbed import schema
from oppsched.phy import common as phy_common

APD = built_program("host/daemon/oppsched-apd", "OPPSCHED_APD")
EXPERIMENT = "experiments/clamp/deterministic.yaml"


def schema_field(table: dict, dotted: str) -> Field:
    node = table
    for part in dotted.split("."):
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
    mine = schema_field(schema.SCHEMA, key)
    differences = daemon_fields.drift(mine, daemon_spec(daemon, daemon_key))
    assert not differences, f"{key} (-> {daemon} {daemon_key}): " + "; ".join(differences)


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
])
def test_check_refuses_a_value_outside_a_daemons_table_naming_the_key_and_value(
        override, message):
    r = run_cli("check", EXPERIMENT, "--set", override)
    assert r.returncode == 2 and message in r.stderr, r.stderr


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
                                         ("", "watchdog_slots")])
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
