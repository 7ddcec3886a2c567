"""Experiment-file validation and --set overrides: every error names the field and value."""

import math

import pytest

from helpers import REPO
from oppsched.config import ConfigError, Field, ListOf, apply_override, parse_override, validate
from oppsched.run.runner import load_experiment

SCHEMA = {
    "duration_s": Field(float, 10.0, min=0.01),
    "name": Field(str),
    "scheduler": {"kind": Field(str, "pf", choices=("pf", "rr")), "alpha": Field(float, 0.03, min=1e-6, max=1.0)},
    "users": ListOf({"name": Field(str), "snr_db": Field(float, 0.0)}, min_len=1),
}


def ok_data():
    return {"name": "x", "users": [{"name": "a"}]}


def test_defaults_are_filled_in_and_ints_become_floats():
    out = validate(SCHEMA, {"name": "x", "duration_s": 5, "users": [{"name": "a", "snr_db": 3}]})
    assert out["duration_s"] == 5.0 and isinstance(out["duration_s"], float)
    assert out["scheduler"] == {"kind": "pf", "alpha": 0.03}
    assert out["users"] == [{"name": "a", "snr_db": 3.0}]


@pytest.mark.parametrize("data, message", [
    ({"name": "x", "users": [{"name": "a"}], "bogus": 1}, "bogus: unknown key"),
    ({"name": "x", "users": [{"name": "a"}], "scheduler": {"alfa": 1}}, "scheduler.alfa: unknown key"),
    ({"name": "x", "users": [{"name": "a"}], "duration_s": "long"}, "duration_s: 'long' is not a number"),
    ({"name": "x", "users": [{"name": "a"}], "duration_s": float("nan")}, "duration_s: nan is not a finite"),
    ({"name": "x", "users": [{"name": "a"}], "duration_s": -1}, "duration_s: -1.0 is below the minimum"),
    ({"name": "x", "users": [{"name": "a"}], "scheduler": {"kind": "wfq"}}, "scheduler.kind: 'wfq' is not one of pf, rr"),
    ({"name": "x", "users": [{"name": "a", "snr_db": True}]}, "users[0].snr_db: True is a boolean"),
    ({"name": "x", "users": []}, "users: needs at least 1"),
    ({"users": [{"name": "a"}]}, "name: required key is missing"),
])
def test_bad_values_are_rejected_naming_field_and_value(data, message):
    with pytest.raises(ConfigError) as e:
        validate(SCHEMA, data)
    assert message in str(e.value)


def test_set_overrides_nested_and_indexed_keys_with_yaml_values():
    data = ok_data()
    apply_override(data, SCHEMA, "scheduler.alpha=0.1")
    apply_override(data, SCHEMA, "users[0].snr_db=-3.5")
    apply_override(data, SCHEMA, "name=run 2")
    out = validate(SCHEMA, data)
    assert out["scheduler"]["alpha"] == 0.1
    assert out["users"][0]["snr_db"] == -3.5
    assert out["name"] == "run 2"


@pytest.mark.parametrize("text, message", [
    ("scheduler.beta=1", "unknown key 'beta' at 'scheduler'"),
    ("users[3].snr_db=1", "users[3] out of range (1 entries)"),
    ("duration_s", "expected key=value"),
    ("scheduler[0]=1", "scheduler is not a list"),
])
def test_bad_overrides_are_errors(text, message):
    with pytest.raises(ConfigError) as e:
        apply_override(ok_data(), SCHEMA, text)
    assert message in str(e.value)


def test_override_value_is_parsed_as_yaml():
    assert parse_override("a.b=[1, 2]") == (["a", "b"], [1, 2])
    parts, v = parse_override("x=.nan")
    assert math.isnan(v)


def test_a_key_repeated_in_an_experiment_file_is_rejected_with_its_line(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("kind: macsim\nname: a\nduration_s: 1\nduration_s: 2\n")
    with pytest.raises(ConfigError, match=r"dup.yaml: duration_s: duplicate key \(line 4\)"):
        load_experiment(p)


def test_every_python_reader_of_a_configuration_uses_the_one_yaml_loader():
    # Readers of configuration files may not call yaml.load / yaml.safe_load themselves:
    # only gnuradio.oppsched.yaml_config (and its copy oppsched.yaml_config) does, so
    # duplicate keys mean the same everywhere.
    offenders = []
    for folder in ("tools/oppsched", "gr-oppsched/python/oppsched"):
        for f in (REPO / folder).rglob("*.py"):
            if f.name == "yaml_config.py" or f.name.startswith("qa_"):
                continue
            text = f.read_text()
            if "yaml.safe_load(" in text or "yaml.load(" in text:
                offenders.append(str(f.relative_to(REPO)))
    assert offenders == []


def test_the_yaml_loader_oppsched_reads_without_a_build_is_the_phy_packages():
    # oppsched.config reads experiment files through oppsched/yaml_config.py, a copy of the PHY
    # package's loader below its three lines of comment, so that `oppsched check` needs no build
    copy = (REPO / "tools/oppsched/yaml_config.py").read_text().splitlines(keepends=True)
    assert all(line.startswith("# ") for line in copy[:3])
    assert "".join(copy[3:]) == (REPO / "gr-oppsched/python/oppsched/yaml_config.py").read_text(), (
        "tools/oppsched/yaml_config.py differs from gr-oppsched/python/oppsched/yaml_config.py")


def test_set_reaches_into_a_free_form_mapping():
    schema = {"aqm": {"kind": Field(str, "red"), "params": Field(dict, {})}}
    data = {"aqm": {"params": {"min_th": 5}}}
    apply_override(data, schema, "aqm.params.max_th=15")
    apply_override(data, schema, "aqm.params.gentle.on=true")
    assert data == {"aqm": {"params": {"min_th": 5, "max_th": 15, "gentle": {"on": True}}}}
    with pytest.raises(ConfigError, match="unknown key 'kinds'"):
        apply_override(data, schema, "aqm.kinds=red")
