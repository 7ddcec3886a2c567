"""The scheduler and AQM registries (host/lib/sched.cc, aqm_common.cc) read by every layer.

Each kind is registered once in C++ with its parameters' names, defaults and ranges. The
experiment schema (`oppsched check`), macsim's schema, the Python bindings and the apd's YAML
reader must all accept every kind with the same defaults and refuse a value just outside a
range with the same bounds; docs/algorithms.md must be what the registry generates.
"""

from __future__ import annotations

import copy
import subprocess

import pytest

from oppsched import generate, mac, paths, registry
from oppsched.testbed import daemonconf
from oppsched.config import ConfigError, validate
from oppsched.experiments import macsim
from helpers import BASE, REPO, built_program, cfg_of, error_of, run_layout, write_yaml

APD = built_program("host/daemon/oppsched-apd", "OPPSCHED_APD")
needs_apd = pytest.mark.skipif(APD is None, reason="oppsched-apd is not built")

SCHEDULERS = registry.schedulers()
AQMS = registry.aqms()


def _outside(spec: dict):
    """A value just outside the spec's lower end (at it when open), or None if unbounded
    below or no such value of the type exists."""
    lo = spec["min"]
    if lo is None:
        return None
    if spec["type"] == "integer":
        bad = int(lo) if spec["min_open"] else int(lo) - 1
        return None if bad < 0 else bad
    if spec["min_open"]:
        return float(lo)
    return float(lo) - (1e-9 if spec["type"] == "seconds" else 1.0)


def _bad_values(specs):
    for s in specs:
        bad = _outside(s)
        if bad is not None:
            yield s, ([bad] if s["type"] == "number_list" else bad)


def _sched_overrides(kind: str, devices: int = 1) -> list[str]:
    out = [f"scheduler.kind={kind}"]
    if kind == "wpf":
        out.append("scheduler.weights=" + repr([1.0] * devices))
    return out


def _apd_check(tmp_path, conf: dict) -> subprocess.CompletedProcess:
    path = write_yaml(tmp_path / "apd.yaml", conf)
    return subprocess.run([str(APD), "--config", str(path), "--check"], capture_output=True,
                          text=True, timeout=20)


@pytest.fixture(scope="module")
def base_cfg():
    return cfg_of()


def _apd_conf(tmp_path, cfg) -> dict:
    return daemonconf.apd_config(cfg, run_layout(tmp_path, cfg))


# ---- the registry itself --------------------------------------------------------------------


def test_the_registries_list_the_kinds_the_library_names_in_its_order():
    assert tuple(SCHEDULERS) == tuple(mac.SCHEDULER_KINDS)
    assert tuple(AQMS) == tuple(mac.AQM_KINDS)
    assert tuple(k for k, e in AQMS.items() if e["marks_ecn"]) == tuple(mac.MARKING_AQM_KINDS)
    # one name per parameter: the paper's symbol spelled out, as the apd has it
    assert [p["name"] for p in SCHEDULERS["glambda"]["params"]] == ["alpha", "lambda"]


def test_every_default_lies_in_its_range():
    for fam in (SCHEDULERS, AQMS):
        for kind, entry in fam.items():
            for p in entry["params"]:
                if p["violation"] is None or p["default"] is None:
                    continue
                values = p["default"] if p["type"] == "number_list" else [p["default"]]
                assert all(registry.in_range(p, float(v)) for v in values), (kind, p)


# ---- every layer accepts every kind with the registry's defaults -----------------------------


@pytest.mark.parametrize("kind", list(SCHEDULERS))
def test_every_scheduler_kind_is_accepted_by_each_layer_with_the_registry_defaults(
        kind, tmp_path):
    specs = SCHEDULERS[kind]["params"]
    # the experiment schema (oppsched check)
    cfg = cfg_of(BASE, _sched_overrides(kind))
    for p in specs:
        if p["default"] is not None:
            assert cfg["scheduler"][p["name"]] == p["default"], p["name"]
    # macsim's schema
    m = validate(macsim.SCHEMA["scheduler"], {"kind": kind}, "scheduler")
    for p in specs:
        if p["name"] != "weights":
            assert m[p["name"]] == p["default"], p["name"]
    # the bindings, by name + params dict
    given = {"weights": [1.0]} if kind == "wpf" else {}
    s = mac.make_scheduler(kind, given)
    assert s.kind == kind
    assert s.alpha == next(p["default"] for p in specs if p["name"] == "alpha")
    # what daemonconf writes for the apd: exactly the kind's parameters, by their names
    conf = _apd_conf(tmp_path, cfg)
    assert set(conf["scheduler"]) == {"kind", "harq_first"} | {p["name"] for p in specs}
    if APD is not None:
        r = _apd_check(tmp_path, conf)
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("kind", list(AQMS))
def test_every_aqm_kind_is_accepted_by_each_layer_with_its_defaults_written_out(
        kind, tmp_path):
    params = {p["name"]: p["default"] for p in AQMS[kind]["params"]}
    over = [f"aqm.kind={kind}"]
    if kind != "droptail":
        over += [f"aqm.params.{n}={v!r}" if not isinstance(v, bool)
                 else f"aqm.params.{n}={'true' if v else 'false'}" for n, v in params.items()]
        over = [o.replace("'", "") for o in over]
    cfg = cfg_of(BASE, over)
    assert cfg["aqm"]["kind"] == kind
    q = mac.make_aqm(kind, params)  # by name + params dict
    assert q.kind == kind
    if APD is not None:
        conf = _apd_conf(tmp_path, cfg)
        conf["aqm"]["params"] = params
        r = _apd_check(tmp_path, conf)
        assert r.returncode == 0, r.stderr


# ---- and refuses a value just outside a range, with the same bounds --------------------------


SCHED_BAD = [(k, s, bad) for k, e in SCHEDULERS.items() for s, bad in _bad_values(e["params"])]


@pytest.mark.parametrize("kind,spec,bad", SCHED_BAD,
                         ids=[f"{k}.{s['name']}" for k, s, _ in SCHED_BAD])
def test_a_scheduler_value_just_out_of_range_is_refused_by_each_layer_with_the_same_bounds(
        kind, spec, bad, tmp_path, base_cfg):
    name, why = spec["name"], spec["violation"]
    value = _yaml(bad)
    # the experiment schema
    msg = error_of(BASE, _sched_overrides(kind)[:1] + [f"scheduler.{name}={value}"])
    assert f"scheduler.{name}" in msg and why in msg, msg
    # macsim's schema (its weights are the users' `weight`, with the element range)
    if name != "weights":
        with pytest.raises(ConfigError, match=rf"scheduler\.{name}.*{_re(why)}"):
            validate(macsim.SCHEMA["scheduler"], {"kind": kind, name: bad}, "scheduler")
    else:
        with pytest.raises(ConfigError, match=_re(why)):
            validate(macsim.SCHEMA["users"].schema, {"name": "u", "weight": bad[0]}, "users[0]")
    # the bindings
    with pytest.raises(ValueError, match=rf"sched\.{name}.*{_re(why)}"):
        mac.make_scheduler(kind, {name: bad})
    # the apd's reader
    if APD is not None:
        cfg = cfg_of(BASE, _sched_overrides(kind))
        conf = _apd_conf(tmp_path, cfg)
        conf["scheduler"][name] = bad
        r = _apd_check(tmp_path, conf)
        assert r.returncode == 2, r.stderr
        assert f"scheduler.{name}" in r.stderr and why in r.stderr, r.stderr


AQM_BAD = [(k, s, bad) for k, e in AQMS.items() if k != "droptail"
           for s, bad in _bad_values(e["params"])]


@pytest.mark.parametrize("kind,spec,bad", AQM_BAD,
                         ids=[f"{k}.{s['name']}" for k, s, _ in AQM_BAD])
def test_an_aqm_value_just_out_of_range_is_refused_by_each_layer_with_the_same_bounds(
        kind, spec, bad, tmp_path, base_cfg):
    name, why = spec["name"], spec["violation"]
    # the experiment schema (oppsched check)
    msg = error_of(BASE, [f"aqm.kind={kind}", f"aqm.params.{name}={_yaml(bad)}"])
    assert why in msg, msg
    # the bindings
    with pytest.raises(ValueError, match=_re(why)):
        mac.make_aqm(kind, **{name: bad})
    # the apd's reader
    if APD is not None:
        cfg = cfg_of(BASE, [f"aqm.kind={kind}"])
        conf = _apd_conf(tmp_path, cfg)
        conf["aqm"]["params"] = {name: bad}
        r = _apd_check(tmp_path, conf)
        assert r.returncode == 2, r.stderr
        assert why in r.stderr and "aqm.params." in r.stderr, r.stderr


def _yaml(v) -> str:
    """A number as a --set value YAML reads back as that number ("-1.0e-09": YAML 1.1 reads
    "-1e-09" as a string)."""
    if isinstance(v, list):
        return "[" + ", ".join(_yaml(x) for x in v) + "]"
    text = repr(v)
    if isinstance(v, float) and "e" in text and "." not in text.split("e")[0]:
        mant, exp = text.split("e")
        text = f"{mant}.0e{exp}"
    return text


def _re(text: str) -> str:
    import re
    return re.escape(text)


# ---- the old Python spelling of lambda ---------------------------------------------------------


def test_lam_is_still_read_as_lambda_in_experiments_and_keywords(caplog):
    cfg = cfg_of(BASE.replace("devices:", "scheduler: {kind: glambda, lam: 2.5}\ndevices:", 1))
    assert cfg["scheduler"]["lambda"] == 2.5 and "lam" not in cfg["scheduler"]
    assert cfg_of(BASE, ["scheduler.kind=glambda", "scheduler.lam=0.5"])["scheduler"][
        "lambda"] == 0.5
    # a Python keyword cannot be `lambda`: lam= stands for it
    s = mac.make_scheduler("glambda", lam=0.0, num_users=2)
    assert s.choose([1e6, 2e6], [True, True]) == 1  # lambda 0 is max rate
    with pytest.raises(ValueError, match="'lam' not accepted by kind 'pf'"):
        mac.make_scheduler("pf", lam=1.0)


def test_another_kinds_parameter_is_refused_naming_the_kinds_that_take_it():
    assert "scheduler.lambda: 2.0 is only for scheduler.kind glambda" in error_of(
        BASE, ["scheduler.lambda=2.0"])


# ---- docs/algorithms.md ------------------------------------------------------------------------


def test_the_committed_docs_table_is_what_the_registry_generates():
    committed = (REPO / "docs" / "algorithms.md").read_text()
    assert committed == registry.markdown(), (
        "docs/algorithms.md is stale: regenerate it with `.venv/bin/python -m oppsched.generate`")
    for kind in list(SCHEDULERS) + list(AQMS):
        assert f"### `{kind}`" in committed


# ---- the committed copy of the compiled modules' data (oppsched._generated) ---------------------


def test_the_committed_generated_data_is_what_the_build_gives():
    built = generate.from_build()
    stale = "stale: regenerate it with `.venv/bin/python -m oppsched.generate`"
    assert generate.committed() == built, f"tools/oppsched/_generated.py is {stale}"
    for path, text in generate.outputs(built).items():
        assert path.read_text() == text, f"{path} is {stale}"
    assert built["SCHEDULER_REGISTRY"] == list(mac.scheduler_registry())
    assert tuple(SCHEDULERS) == tuple(mac.SCHEDULER_KINDS)


def test_generate_check_names_a_stale_file_and_rewrites_it(tmp_path, monkeypatch):
    built = generate.from_build()
    target = tmp_path / "_generated.py"
    target.write_text(generate.module_text(built).replace("'pf'", "'pff'", 1))
    monkeypatch.setattr(generate, "GENERATED", target)
    (tmp_path / "experiments").mkdir()  # OPPSCHED_HOME: a checkout with this docs/
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "algorithms.md").write_text(registry.markdown())
    # the daemons whose tables it reads stay those of this checkout's build
    monkeypatch.setenv(paths.BUILD_ENV, str(paths.build_dir()))
    monkeypatch.setenv("OPPSCHED_HOME", str(tmp_path))
    assert generate.main(["--check"]) == 1
    assert "pff" in target.read_text()  # --check writes nothing
    assert generate.main([]) == 0
    assert target.read_text() == generate.module_text(built)
    assert generate.main(["--check"]) == 0
