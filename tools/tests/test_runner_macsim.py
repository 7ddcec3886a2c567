"""`oppsched run` / `oppsched analyze` on the macsim kind: the summary schema, the
behaviour of the schedulers that Srinivasan & Baras describe, and that analyze recomputes
the same summary from the traces."""

import json

import pytest

from oppsched.run.runner import analyze_dir, run_experiment
from helpers import run_cli, write_experiment

EXPERIMENT = """
experiment: test-macsim
kind: macsim
duration_s: 20
seed: 7
phy: {slot_s: 1.667e-3, rate_table: evdo}
scheduler: {kind: pf, alpha: 0.03}
users:
  - {name: weak, mean_snr_db: 0.0, doppler_hz: 10}
  - {name: mid, mean_snr_db: 5.0, doppler_hz: 10}
  - {name: strong, mean_snr_db: 10.0, doppler_hz: 10}
variants:
  - {name: rr, set: {scheduler.kind: rr}}
  - {name: pf, set: {scheduler.kind: pf}}
  - {name: maxrate, set: {scheduler.kind: maxrate}}
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("macsim")
    exp = write_experiment(d, EXPERIMENT)
    runs = run_experiment(exp, d / "out")
    return d / "out", {label: s for label, s, _ in runs}


def test_summary_has_the_documented_schema(results):
    out, runs = results
    s = json.loads((out / "pf" / "summary.json").read_text())
    for key in ("experiment", "duration_s", "config", "flows", "users", "jain_index_flows",
                "jain_index_users", "slots", "harq"):
        assert key in s
    assert set(s["slots"]) >= {"total", "empty", "late"}
    assert set(s["harq"]) >= {"tb_sent", "tb_failed_final"}
    for u in s["users"]:
        assert set(u) >= {"name", "slot_fraction", "mac_throughput_bps", "mean_queue_bytes",
                          "mean_queue_delay_ms"}
    assert s["slots"]["total"] == round(20 / 1.667e-3)
    assert (out / "report.html").exists() and (out / "compare_users.png").exists()


def test_round_robin_gives_every_user_the_same_number_of_slots(results):
    _, runs = results
    fr = [u["slot_fraction"] for u in runs["rr"]["users"]]
    n = runs["rr"]["slots"]["total"]
    assert max(fr) - min(fr) <= 1.0 / n + 1e-12


def test_proportional_fair_shares_slots_about_equally_and_beats_rr(results):
    _, runs = results
    for u in runs["pf"]["users"]:
        assert abs(u["slot_fraction"] - 1 / 3) < 0.15 / 3, u
    agg = {k: sum(u["mac_throughput_bps"] for u in s["users"]) for k, s in runs.items()}
    assert agg["pf"] > agg["rr"]          # multi-user diversity gain
    assert agg["maxrate"] >= agg["pf"]    # max rate maximises throughput...
    assert runs["maxrate"]["jain_index_users"] < runs["pf"]["jain_index_users"]  # ...unfairly


def test_analyze_recomputes_the_same_summary_from_the_traces(results):
    out, runs = results
    again = {label: s for label, s, _ in analyze_dir(out)}
    for k in runs:
        assert again[k]["users"] == runs[k]["users"]
        assert again[k]["slots"] == runs[k]["slots"]


def test_cli_rejects_unknown_override_with_exit_2(tmp_path):
    exp = write_experiment(tmp_path, EXPERIMENT)
    r = run_cli("run", exp, "--out", tmp_path / "o", "--set", "scheduler.alfa=0.1")
    assert r.returncode == 2
    assert "unknown key 'alfa'" in r.stderr
    assert not (tmp_path / "o").exists()


def test_variants_run_side_by_side_give_the_summaries_they_give_one_after_another(tmp_path):
    exp = write_experiment(tmp_path, EXPERIMENT)
    serial = {label: s for label, s, _ in run_experiment(exp, tmp_path / "one", duration=3)}
    side = {label: s for label, s, _ in run_experiment(exp, tmp_path / "out", duration=3,
                                                           jobs=3)}
    assert list(side) == list(serial)  # the variants' order, not the order they finished in
    for k in serial:
        assert side[k]["users"] == serial[k]["users"]
        assert side[k]["slots"] == serial[k]["slots"]
    assert (tmp_path / "out" / "report.html").exists()


def test_cli_rejects_a_jobs_count_below_one_naming_the_option(tmp_path):
    exp = write_experiment(tmp_path, EXPERIMENT)
    r = run_cli("run", exp, "--out", tmp_path / "o", "--jobs", "0")
    assert r.returncode == 2, r.stderr
    assert "--jobs: 0 is not a positive number" in r.stderr
    assert not (tmp_path / "o").exists()
