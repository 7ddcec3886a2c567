"""`oppsched sweep`: the sweep section's checks, its points, resuming, the results table and
report, and the Dask cluster path (a local scheduler and two workers)."""

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from helpers import BASE, REPO, needs_root
from oppsched.run import sweep, sweep_results, sweepspec
from oppsched.config import ConfigError
from oppsched.experiments import macsim

MACSIM = """
experiment: sweep-test
kind: macsim
duration_s: 0.3
seed: 7
phy: {slot_s: 1.667e-3, rate_table: evdo}
scheduler: {kind: pf, alpha: 0.03}
users:
  - {name: u1, mean_snr_db: 0.0, doppler_hz: 10.0}
  - {name: u2, mean_snr_db: 9.0, doppler_hz: 10.0}
variants:
  - {name: rr, set: {scheduler.kind: rr}}
  - {name: pf, set: {scheduler.kind: pf}}
sweep:
  axes:
    alpha: {key: scheduler.alpha, values: [0.1, 0.01], variants: [pf]}
    snr: {key: "users[0].mean_snr_db", values: {from: 0, to: 6, steps: 2}}
  repeat: 2
"""


def write(tmp_path, text=MACSIM, name="sweep.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def plan_of(tmp_path, text=MACSIM, overrides=()):
    return sweep.plan(write(tmp_path, text), overrides)


def error_of(tmp_path, text) -> str:
    with pytest.raises(ConfigError) as e:
        plan_of(tmp_path, text)
    return str(e.value)


# ----------------------------------------------------------------------------------------
# The sweep section


def test_points_are_the_product_of_the_axes_that_apply_times_variants_times_seeds(tmp_path):
    _, sw = plan_of(tmp_path)
    # rr: 2 snr values x 2 seeds; pf: 2 alpha x 2 snr x 2 seeds.
    assert len(sw.points) == 2 * 2 + 2 * 2 * 2
    rr = [p for p in sw.points if p.variant == "rr"]
    assert {dict(p.values).get("alpha") for p in rr} == {None}
    assert sorted({p.config["seed"] for p in sw.points}) == [7, 8]
    pf = [p for p in sw.points if p.variant == "pf" and dict(p.values) == {"alpha": 0.01,
                                                                          "snr": 6}]
    assert len(pf) == 2
    c = pf[0].config
    assert c["scheduler"]["kind"] == "pf" and c["scheduler"]["alpha"] == 0.01
    assert c["users"][0]["mean_snr_db"] == 6.0 and c["variant"] == "pf"
    assert pf[0].rel == "alpha=0.01,snr=6/pf/seed-0"
    assert c["sweep"]["axes"] == {}  # a point does not sweep again


def test_ranges_are_linear_or_logarithmic_and_integer_when_asked():
    r = sweepspec._range_values
    assert r("v", {"from": 0, "to": 10, "steps": 3}) == (0, 5, 10)
    assert r("v", {"from": 0.0, "to": 1.0, "steps": 3}) == (0.0, 0.5, 1.0)
    assert r("v", {"from": 1, "to": 100, "steps": 3, "scale": "log"}) == pytest.approx(
        (1.0, 10.0, 100.0))
    assert r("v", {"from": 1000, "to": 64000, "steps": 4, "scale": "log", "integer": True}) == (
        1000, 4000, 16000, 64000)


@pytest.mark.parametrize("axes, expect", [
    ("x: {key: scheduler.alfa, values: [1]}", "sweep.axes.x.key"),
    ("x: {key: scheduler.alpha, values: [0.1, 2.0]}", "scheduler.alpha: 2.0 not in (0,1]"),
    ("x: {key: scheduler.alpha, values: []}", "sweep.axes.x.values: an empty list"),
    ("x: {key: scheduler.alpha, values: [0.1, 0.1]}", "repeats a value"),
    ("x: {key: scheduler.alpha, values: {from: 0, to: 1, steps: 3, scale: log}}",
     "a log range needs from and to > 0"),
    ("x: {key: scheduler.alpha, values: {from: 0.1, to: 1}}", "sweep.axes.x.values.steps"),
    ("x: {key: scheduler.alpha, values: {from: 0.1, to: 1, steps: 2, scale: cubic}}",
     "sweep.axes.x.values.scale"),
    ("x: {key: scheduler.alpha, values: [0.1], variants: [maxrate]}",
     "sweep.axes.x.variants: 'maxrate' is not a variant"),
    ("x: {key: scheduler.alpha, valeus: [0.1]}", "sweep.axes.x.valeus: unknown key"),
    ("seed: {key: scheduler.alpha, values: [0.1]}", "'seed' is not an axis name"),
    ("x: {values: [0.1]}", "sweep.axes.x.key: required"),
])
def test_a_bad_sweep_is_rejected_before_anything_runs_naming_the_axis(tmp_path, axes, expect):
    text = MACSIM.split("sweep:")[0] + "sweep:\n  axes:\n    " + axes + "\n"
    msg = error_of(tmp_path, text)
    assert expect in msg, msg


def test_a_bad_repeat_and_an_unknown_sweep_key_are_named(tmp_path):
    assert "sweep.repeat" in error_of(tmp_path, MACSIM.replace("repeat: 2", "repeat: 0"))
    assert "sweep.every" in error_of(tmp_path, MACSIM.replace("repeat: 2", "every: 2"))


def test_an_axis_may_set_several_keys_to_the_same_value(tmp_path):
    text = MACSIM.replace('snr: {key: "users[0].mean_snr_db"',
                          'snr: {key: ["users[0].mean_snr_db", "users[1].mean_snr_db"]')
    _, sw = plan_of(tmp_path, text)
    for p in sw.points:
        u = p.config["users"]
        assert u[0]["mean_snr_db"] == u[1]["mean_snr_db"] == dict(p.values)["snr"]


def test_an_axis_sets_its_also_keys_to_their_values_at_each_axis_value(tmp_path):
    # A setting that depends on the axis value (Andrew & Hanly, CLAMP: the link's starting
    # margin at each Doppler): users[1]'s SNR follows the snr axis by its own mapping, also
    # when --set leaves out an axis value.
    text = MACSIM.replace('snr: {key: "users[0].mean_snr_db", values: {from: 0, to: 6, steps: 2}}',
                          'snr: {key: "users[0].mean_snr_db", values: [0.0, 6.0], '
                          'also: {"users[1].mean_snr_db": {0.0: 3.0, 6.0: -2.0}}}')
    _, sw = plan_of(tmp_path, text)
    assert {(p.config["users"][0]["mean_snr_db"], p.config["users"][1]["mean_snr_db"])
            for p in sw.points} == {(0.0, 3.0), (6.0, -2.0)}
    _, sw = plan_of(tmp_path, text, ["sweep.axes.snr.values=[6.0]"])
    assert {p.config["users"][1]["mean_snr_db"] for p in sw.points} == {-2.0}


@pytest.mark.parametrize("also, expect", [
    ('{"users[1].mean_snr_db": {0.0: 3.0}}', "sweep.axes.snr.also.users[1].mean_snr_db: no "
                                            "value for the axis value 6.0 (given for 0.0)"),
    ('{"users[1].mean_snr_db": [3.0, 4.0]}', "sweep.axes.snr.also.users[1].mean_snr_db: [3.0, "
                                            "4.0] is not a mapping of axis values"),
    ('[3.0, 4.0]', "sweep.axes.snr.also: [3.0, 4.0] is not a mapping"),
    ('{"users[0].mean_snr_db": {0.0: 1.0, 6.0: 2.0}}', "the axis's own key"),
    ('{"users[1].mean_snr_db": {0.0: 1.0, 6.0: nope}}',
     "snr=6/rr/seed-0: users[1].mean_snr_db: 'nope'"),
])
def test_a_bad_also_is_named_by_its_axis_and_key(tmp_path, also, expect):
    text = MACSIM.replace('snr: {key: "users[0].mean_snr_db", values: {from: 0, to: 6, steps: 2}}',
                          f'snr: {{key: "users[0].mean_snr_db", values: [0.0, 6.0], also: {also}}}')
    msg = error_of(tmp_path, text)
    assert expect in msg, msg


def test_a_plot_split_by_something_other_than_an_axis_is_named(tmp_path):
    text = MACSIM + "  plots:\n    - {x: jain_index_users, y: alpha, by: [speed]}\n"
    assert "sweep.plots[0].by: 'speed' is not an axis" in error_of(tmp_path, text)


@pytest.mark.parametrize("paper, expect", [
    ("[{x: 0.1}]", "sweep.plots[0].paper[0].y: None is not a finite number"),
    ("[{y: .nan}]", "sweep.plots[0].paper[0].y: nan is not a finite number"),
    ("[{y: 1, lable: W}]", "sweep.plots[0].paper[0].lable: unknown key"),
    ("[3]", "sweep.plots[0].paper[0]: 3 is not a mapping"),
])
def test_a_bad_paper_value_on_a_plot_is_named(tmp_path, paper, expect):
    text = MACSIM + f"  plots:\n    - {{x: alpha, y: jain_index_users, paper: {paper}}}\n"
    assert expect in error_of(tmp_path, text)


def test_the_papers_values_are_drawn_on_the_plot_as_points_and_levels(tmp_path, monkeypatch):
    text = MACSIM.split("variants:")[0] + (
        "sweep:\n  axes:\n    alpha: {key: scheduler.alpha, values: [0.1, 0.01]}\n"
        "  plots:\n    - {x: alpha, y: jain_index_users, paper: "
        "[{x: 0.1, y: 0.9, label: 'paper, Fig. 4'}, {y: 0.5, label: 'paper, RR'}]}\n")
    drawn = []
    import matplotlib.axes
    real_plot, real_hline = matplotlib.axes.Axes.plot, matplotlib.axes.Axes.axhline
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda self, *a, **k: (
        drawn.append(("point", a, k.get("label"))), real_plot(self, *a, **k))[1])
    monkeypatch.setattr(matplotlib.axes.Axes, "axhline", lambda self, *a, **k: (
        drawn.append(("level", a, k.get("label"))), real_hline(self, *a, **k))[1])
    out = tmp_path / "out"
    assert sweep.run_sweep(write(tmp_path, text), out) == 0
    papers = {label: args for kind, args, label in drawn if str(label).startswith("paper")}
    assert papers == {"paper, Fig. 4": ([0.1], [0.9]), "paper, RR": (0.5,)}
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["plots"][0]["paper"][1] == {"label": "paper, RR", "x": None, "y": 0.5}


def test_oppsched_check_validates_the_sweep(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "oppsched", "check", str(write(tmp_path))],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and "12 run(s) in its sweep" in ok.stdout, ok.stdout + ok.stderr
    bad = write(tmp_path, MACSIM.replace("scheduler.alpha, values: [0.1, 0.01]",
                                         "scheduler.alpha, values: [0.1, 5]"), "bad.yaml")
    r = subprocess.run([sys.executable, "-m", "oppsched", "check", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "scheduler.alpha: 5.0 not in (0,1]" in r.stderr, r.stderr


# ----------------------------------------------------------------------------------------
# Running, resuming, results


def test_a_sweep_writes_one_folder_and_one_csv_row_per_run_and_a_report(tmp_path):
    out = tmp_path / "out"
    assert sweep.run_sweep(write(tmp_path), out) == 0
    _, sw = plan_of(tmp_path)
    for p in sw.points:
        assert (out / "points" / p.rel / "summary.json").is_file()
    df = pd.read_csv(out / "sweep.csv")
    assert len(df) == len(sw.points)
    assert {"point", "variant", "seed", "alpha", "snr", "jain_index_users",
            "user.u1.slot_fraction", "mac_throughput_total_bps"} <= set(df.columns)
    assert set(df["variant"]) == {"rr", "pf"} and df[df.variant == "rr"]["alpha"].isna().all()
    # Round robin gives each of two users half the slots, whatever the SNR axis says.
    assert (df[df.variant == "rr"]["user.u1.slot_fraction"] - 0.5).abs().max() < 0.01
    report = (out / "report.html").read_text()
    assert "sweep.csv" in report and "scheduler.alpha" in report
    pngs = sorted((out / "plots").glob("sweep-*.png"))
    assert pngs and all(f"plots/{p.name}" in report for p in pngs)


def test_finished_points_are_not_run_again_and_changed_ones_are(tmp_path, monkeypatch):
    path, out = write(tmp_path), tmp_path / "out"
    sweep.run_sweep(path, out)
    ran = []
    real = macsim.run
    monkeypatch.setattr(macsim, "run", lambda cfg, d, pr: (ran.append(d), real(cfg, d, pr)))
    sweep.run_sweep(path, out)
    assert ran == []
    # A half-written point (no summary.json) is run again, from an empty folder.
    _, sw = plan_of(tmp_path)
    victim = out / "points" / sw.points[3].rel
    (victim / "summary.json").unlink()
    (victim / "stale.txt").write_text("x")
    sweep.run_sweep(path, out)
    assert ran == [victim] and not (victim / "stale.txt").exists()
    # A changed configuration (here: the duration) runs every point again.
    ran.clear()
    sweep.run_sweep(path, out, duration=0.2)
    assert len(ran) == len(sw.points)


def test_an_interrupted_sweep_keeps_finished_points_and_leaves_no_half_written_one(
        tmp_path, monkeypatch):
    path, out = write(tmp_path), tmp_path / "out"
    real, calls = macsim.run, []

    def interrupted(cfg, d, pr):
        calls.append(d)
        if len(calls) == 4:
            (Path(d) / "slots.csv.gz").write_bytes(b"half")
            raise KeyboardInterrupt
        real(cfg, d, pr)

    monkeypatch.setattr(macsim, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(path, out)
    finished = [d for d in calls[:3]]
    assert all((d / "summary.json").is_file() for d in finished)
    assert not calls[3].exists()
    assert len(pd.read_csv(out / "sweep.csv")) == 3
    monkeypatch.setattr(macsim, "run", real)
    sweep.run_sweep(path, out)
    assert len(pd.read_csv(out / "sweep.csv")) == 12


def test_a_failed_point_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    path, out = write(tmp_path), tmp_path / "out"
    real = macsim.run

    def sometimes(cfg, d, pr):
        if cfg["variant"] == "rr" and cfg["seed"] == 8:
            raise RuntimeError("radio on fire")
        real(cfg, d, pr)

    monkeypatch.setattr(macsim, "run", sometimes)
    assert sweep.run_sweep(path, out) == 2  # rr x 2 SNRs at the second seed
    df = pd.read_csv(out / "sweep.csv")
    assert len(df) == 10 and not ((df.variant == "rr") & (df.seed == 8)).any()
    # each failed point keeps what it wrote beside the folder it did not finish, which the
    # next sweep runs again
    failed = sorted(out.glob("points/*/rr/*.failed"))
    assert len(failed) == 2 and all((f / "config.json").is_file() for f in failed)
    assert not any(f.with_suffix("").exists() for f in failed)


def test_analyze_recomputes_the_csv_and_report_from_the_points(tmp_path):
    out = tmp_path / "out"
    sweep.run_sweep(write(tmp_path), out)
    before = pd.read_csv(out / "sweep.csv")
    (out / "sweep.csv").unlink()
    (out / "report.html").unlink()
    r = subprocess.run([sys.executable, "-m", "oppsched", "analyze", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    after = pd.read_csv(out / "sweep.csv")
    pd.testing.assert_frame_equal(before, after)
    assert (out / "report.html").is_file()


def test_two_local_jobs_give_the_same_results_as_one(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    sweep.run_sweep(write(tmp_path), one)
    sweep.run_sweep(write(tmp_path), two, jobs=2)
    a = pd.read_csv(one / "sweep.csv").sort_values("point").reset_index(drop=True)
    b = pd.read_csv(two / "sweep.csv").sort_values("point").reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


def test_series_average_over_seeds_with_a_95_percent_interval():
    df = pd.DataFrame({"point": list("abcd"), "variant": ["v"] * 4, "seed": [1, 2, 1, 2],
                       "x": [1, 1, 2, 2], "y": [1.0, 3.0, 5.0, 5.0]})
    (line,) = sweep_results.series(df, "x", "y", ["x"])
    (x1, y1, ci1, n1), (x2, y2, ci2, n2) = line["points"]
    assert (x1, y1, n1, x2, y2, ci2) == (1, 2.0, 2, 2, 5.0, 0.0)
    assert ci1 == pytest.approx(12.706, rel=1e-3)  # t(0.975, 1) x s / sqrt(n), s = sqrt 2


def test_against_a_metric_every_axis_runs_along_one_parametric_line_per_variant():
    # Goodput against queueing delay as the buffer grows: one line per variant, one point
    # per buffer (mean over seeds).
    df = pd.DataFrame({"point": list("abcdef"), "variant": ["v"] * 6, "seed": [1, 2] * 3,
                       "buf": [1, 1, 2, 2, 4, 4], "delay": [5.0, 7.0, 3.0, 3.0, 9.0, 11.0],
                       "g": [1.0, 1.0, 0.5, 0.5, 2.0, 2.0]})
    (line,) = sweep_results.series(df, "delay", "g", ["buf"])
    # In the order of the axis (a parametric curve), tagged with its values.
    assert [(px, py) for px, py, _, _ in line["points"]] == [(6.0, 1.0), (3.0, 0.5), (10.0, 2.0)]
    assert line["tags"] == ["buf=1", "buf=2", "buf=4"]
    two = sweep_results.series(df.assign(other=[0, 0, 0, 0, 0, 0]), "delay", "g", ["buf", "other"],
                       by=["other"])
    assert len(two) == 1 and two[0]["label"] == "v other=0"


# ----------------------------------------------------------------------------------------
# The Dask cluster path: a local scheduler and two workers, short abstract-PHY points.

TESTBED = BASE.replace("experiment: t", "experiment: sweep-dask").replace(
    "duration_s: 4", "duration_s: 3") + """sweep:
  axes:
    rtt: {key: "servers[0].rtt_ms", values: [10, 40]}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_cluster(tmp_path, resources: bool, worker_metrics: list[str] | None = None):
    """A scheduler and two workers on loopback; worker i serves its points' figures at
    worker_metrics[i] (OPPSCHED_METRICS, preloading oppsched.run.cluster_worker) if given."""
    pytest.importorskip("distributed")
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO / "tools"))
    common = ["--dashboard-address", ":0"]
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                               "--host", "127.0.0.1", "--port", str(port), *common],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]
    address = f"tcp://127.0.0.1:{port}"
    for i in range(2):
        serve = (["--preload", "oppsched.run.cluster_worker"] if worker_metrics else [])
        wenv = dict(env, OPPSCHED_METRICS=worker_metrics[i]) if worker_metrics else env
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
             *(["--resources", "testbed=1"] if resources else []), "--name", f"testbed-{i}",
             *serve, *common],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=wenv,
            cwd=tmp_path))
    try:
        from distributed import Client

        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(address, timeout="5s") as c:
                    if len(c.scheduler_info()["workers"]) == 2:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("the local Dask cluster did not come up within 60 s")
            time.sleep(0.5)
        yield address
    finally:
        for p in procs[::-1]:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def dask_cluster(tmp_path):
    yield from _start_cluster(tmp_path, resources=True)


@pytest.fixture
def dask_cluster_without_testbeds(tmp_path):
    yield from _start_cluster(tmp_path, resources=False)


@pytest.fixture
def dask_cluster_serving_metrics(tmp_path):
    """(scheduler address, [each worker's metrics address])."""
    served = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    for address in _start_cluster(tmp_path, resources=True, worker_metrics=served):
        yield address, served


@needs_root
def test_a_sweep_runs_on_a_dask_cluster_and_every_run_comes_back_whole(
        tmp_path, dask_cluster):
    out = tmp_path / "out"
    assert sweep.run_sweep(write(tmp_path, TESTBED), out, cluster=dask_cluster) == 0
    df = pd.read_csv(out / "sweep.csv")
    assert sorted(df["rtt"]) == [10, 40]
    assert (df["flow.f1.goodput_bps"] > 0).all()
    ran_on = [json.loads((out / "points" / rel / "ran_on.json").read_text())
              for rel in df["point"]]
    assert all(r["host"] == socket.gethostname() for r in ran_on)
    # Each run was configured with its own point's value and its traces came back whole.
    for rel, rtt in zip(df["point"], df["rtt"]):
        cfg = json.loads((out / "points" / rel / "config.json").read_text())
        assert cfg["servers"][0]["rtt_ms"] == rtt
        assert (out / "points" / rel / "summary.json").is_file()
        assert any((out / "points" / rel).glob("*.pcap"))


@needs_root
def test_on_a_cluster_the_client_serves_the_progress_and_each_worker_the_point_it_runs(
        tmp_path, dask_cluster_serving_metrics):
    from oppsched.run.live import MetricsServer

    address, served = dask_cluster_serving_metrics
    seen: set[str] = set()  # run labels a worker's endpoint served while its point ran
    stop = threading.Event()

    def scrape_workers():
        while not stop.is_set():
            for w in served:
                try:
                    text = _get(f"http://{w}/metrics")
                except OSError:
                    continue
                seen.update(re.findall(r'^oppsched_run_info\{[^}]*run="([^"]+)"', text, re.M))
            stop.wait(0.2)

    metrics = MetricsServer("127.0.0.1:0")
    scraper = threading.Thread(target=scrape_workers)
    scraper.start()
    try:
        out = tmp_path / "out"
        assert sweep.run_sweep(write(tmp_path, TESTBED), out, cluster=address,
                               metrics=metrics) == 0
        progress = _get(f"http://{metrics.address}/metrics")
    finally:
        stop.set()
        scraper.join()
        metrics.close()
    for state, n in (("done", 2), ("remaining", 0), ("failed", 0)):
        assert f'oppsched_sweep_points{{state="{state}"}} {n}.0' in progress, progress
    points = {f"out/{rel}" for rel in pd.read_csv(out / "sweep.csv")["point"]}
    assert seen == points, (seen, points)
    # Nothing of a finished point stays on a worker's endpoint.
    assert all("oppsched_run_info{" not in _get(f"http://{w}/metrics") for w in served)


def test_a_bad_worker_metrics_address_stops_the_worker_naming_the_variable(monkeypatch):
    from oppsched.run import cluster_worker

    monkeypatch.setattr(cluster_worker, "_server", None)
    monkeypatch.setenv("OPPSCHED_METRICS", "192.0.2.1:9465")
    with pytest.raises(SystemExit) as e:
        cluster_worker.dask_setup()
    assert str(e.value).startswith("OPPSCHED_METRICS: '192.0.2.1:9465'") and \
        "not a loopback address" in str(e.value), e.value
    assert cluster_worker.server() is None


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def test_a_cluster_whose_workers_are_not_testbeds_is_refused(tmp_path,
                                                             dask_cluster_without_testbeds):
    with pytest.raises(ConfigError, match="no worker .* has the resource testbed=1"):
        sweep.run_sweep(write(tmp_path), tmp_path / "out", cluster=dask_cluster_without_testbeds)


def test_an_unreachable_cluster_is_an_error_naming_its_address(tmp_path):
    pytest.importorskip("distributed")
    with pytest.raises(ConfigError, match="--cluster: cannot reach"):
        sweep.run_sweep(write(tmp_path), tmp_path / "out",
                        cluster=f"tcp://127.0.0.1:{_free_port()}")


def test_a_categorical_axis_is_plotted_in_the_order_of_its_values(tmp_path):
    text = MACSIM.split("variants:")[0] + (
        "sweep:\n  axes:\n    kind: {key: scheduler.kind, values: [rr, pf, maxrate]}\n"
        "  plots:\n    - {x: kind, y: jain_index_users}\n")
    out = tmp_path / "out"
    assert sweep.run_sweep(write(tmp_path, text), out) == 0
    assert (out / "plots" / "sweep-00-jain_index_users.png").is_file()
    df = pd.read_csv(out / "sweep.csv").set_index("kind")
    # Max rate gives the weaker user hardly a slot; round robin gives both equal slots.
    assert df.loc["rr", "jain_index_users"] > df.loc["maxrate", "jain_index_users"]


def test_sweep_table_has_jitter_and_rtt_means_over_users_and_flows_that_report_them():
    s = {"flows": [{"id": "f1", "goodput_bps": 1e5, "rtt_ms_mean": 100.0},
                   {"id": "f2", "goodput_bps": 2e5, "rtt_ms_mean": 300.0},
                   {"id": "f3", "goodput_bps": 0.0, "rtt_ms_mean": None}],
         "users": [{"name": "u1", "slot_gap_mean_ms": 10.0, "slot_gap_cov": 1.0},
                   {"name": "u2", "slot_gap_mean_ms": 30.0, "slot_gap_cov": 2.0},
                   {"name": "u3", "slot_gap_mean_ms": None, "slot_gap_cov": None}]}
    # the median resists one user's outlier, the mean does not
    many = {"flows": [], "users": [{"name": f"u{k}", "slot_gap_cov": c}
                                   for k, c in enumerate([1.0, 1.2, 9.0])]}
    assert sweep_results.flatten_summary(many)["median_slot_gap_cov"] == pytest.approx(1.2)
    assert sweep_results.flatten_summary(many)["mean_slot_gap_cov"] == pytest.approx(11.2 / 3)
    row = sweep_results.flatten_summary(s)
    assert row["mean_slot_gap_ms"] == pytest.approx(20.0)
    assert row["mean_slot_gap_cov"] == pytest.approx(1.5)
    assert row["median_slot_gap_cov"] == pytest.approx(1.5)
    assert row["mean_rtt_ms"] == pytest.approx(200.0)
    assert "mean_slot_gap_cov" not in sweep_results.flatten_summary({"flows": [], "users": []})


# A sweep of --jobs 2 in its own process, each point a stand-in run that marks its start and
# how it ended, and otherwise waits a minute.
_SLOW_SWEEP = """
import os, sys, time
from pathlib import Path
from oppsched.run import sweep
from oppsched.experiments import macsim

marks = Path(sys.argv[2])

def slow(cfg, d, pr):
    me = marks / f"{os.getpid()}-{time.monotonic_ns()}"
    me.with_suffix(".started").touch()
    try:
        time.sleep(60)
    except BaseException as e:
        me.with_suffix("." + type(e).__name__).touch()
        raise

macsim.run = slow
try:
    sweep.run_sweep(sys.argv[1], sys.argv[3], jobs=2)
except KeyboardInterrupt:
    sys.exit(130)
"""


def _start_slow_sweep(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "slow_sweep.py"
    script.write_text(_SLOW_SWEEP)
    proc = subprocess.Popen([sys.executable, str(script), str(write(tmp_path)), str(marks),
                             str(tmp_path / "out")], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(list(marks.glob("*.started"))) < 2:
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the two workers never started their points"
        time.sleep(0.05)
    workers = {int(m.name.split("-")[0]) for m in marks.glob("*.started")}
    assert len(workers) == 2
    return proc, marks, workers


def _gone(pids, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if Path(f"/proc/{p}").exists()
                 and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z"]
        if not alive:
            return True
        time.sleep(0.05)
    return False


def test_sigterm_stops_a_parallel_sweep_its_running_points_and_starts_no_other(tmp_path):
    proc, marks, workers = _start_slow_sweep(tmp_path)
    proc.send_signal(subprocess.signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    # both points in progress were interrupted (as Ctrl-C interrupts a run: it tears down),
    # none of the other ten started, and the workers are gone with the sweep
    assert len(list(marks.glob("*.started"))) == 2
    assert len(list(marks.glob("*.KeyboardInterrupt"))) == 2
    assert _gone(workers, 10)
    assert "interrupted; 0 of 12 runs are done and kept; the same command resumes" in err
    assert not list((tmp_path / "out").glob("points/*/*/*/summary.json"))


def test_the_workers_of_a_killed_parallel_sweep_do_not_go_on_running_its_points(tmp_path):
    proc, marks, workers = _start_slow_sweep(tmp_path)
    proc.kill()  # SIGKILL: no handler runs in the sweep's process
    proc.communicate(timeout=30)
    assert _gone(workers, 10), "a worker outlived the sweep"
    assert len(list(marks.glob("*.started"))) == 2


# ----------------------------------------------------------------------------------------
# No silent holes: a summary that reports errors is neither done nor quietly averaged in.

# A sweep in its own process whose fourth point's analysis reports an error, killed outright
# (SIGKILL) right after that summary.json is written: the window run_point has between
# writing the summary and moving an erroring run out of the way.
_KILLED_AFTER_SUMMARY = """
import os, signal, sys
from oppsched.run import runner, sweep
from oppsched.experiments import macsim

real_analyze, real_analyze_run, calls = macsim.analyze, runner.analyze_run, []

def analyze(rundir):
    s = real_analyze(rundir)
    calls.append(rundir)
    if len(calls) == 4:
        s["errors"] = ["client.u1 exited with 1"]
    return s

def analyze_run(rundir):
    s = real_analyze_run(rundir)
    if s.get("errors"):
        os.kill(os.getpid(), signal.SIGKILL)
    return s

macsim.analyze, runner.analyze_run = analyze, analyze_run
sweep.run_sweep(sys.argv[1], sys.argv[2])
"""


def test_a_point_killed_after_writing_a_summary_with_errors_is_run_again_on_resume(
        tmp_path, monkeypatch):
    path, out = write(tmp_path), tmp_path / "out"
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_AFTER_SUMMARY)
    r = subprocess.run([sys.executable, str(script), str(path), str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == -9, r.stderr
    left = sorted(out.glob("points/*/*/*/summary.json"))
    erring = [f.parent for f in left if json.loads(f.read_text()).get("errors")]
    assert len(left) == 4 and len(erring) == 1  # the hole: an erroring summary in place
    victim = erring[0]
    _, sw = plan_of(tmp_path)
    ran = []
    real = macsim.run
    monkeypatch.setattr(macsim, "run", lambda cfg, d, pr: (ran.append(d), real(cfg, d, pr)))
    assert sweep.run_sweep(path, out) == 0
    assert victim in ran and len(ran) == len(sw.points) - 3
    assert not json.loads((victim / "summary.json").read_text()).get("errors")
    assert (pd.read_csv(out / "sweep.csv")["ok"] == 1).all()


def test_a_point_is_done_only_with_an_error_free_summary_of_its_own_configuration(tmp_path):
    _, sw = plan_of(tmp_path)
    cfg = sw.points[0].config
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    assert not sweep.is_done(d, cfg)  # no summary
    (d / "summary.json").write_text("{\"config\": ")  # cut short
    assert not sweep.is_done(d, cfg)
    (d / "summary.json").write_text(json.dumps({"config": cfg, "errors": []}))
    assert sweep.is_done(d, cfg)
    (d / "summary.json").write_text(json.dumps({"config": cfg, "errors": ["apd exited"]}))
    assert not sweep.is_done(d, cfg)
    # a summary left by another configuration beside this one's config.json
    (d / "summary.json").write_text(json.dumps({"config": dict(cfg, seed=99), "errors": []}))
    assert not sweep.is_done(d, cfg)
    (d / "summary.json").write_text(json.dumps({"config": cfg, "errors": []}))
    assert not sweep.is_done(d, dict(cfg, duration_s=9.0))


def test_collect_marks_a_summary_with_errors_and_names_it_in_a_warning(tmp_path, capsys):
    out = tmp_path / "out"
    sweep.run_sweep(write(tmp_path), out)
    _, sw = plan_of(tmp_path)
    victim = sw.points[5].rel
    f = out / "points" / victim / "summary.json"
    s = json.loads(f.read_text())
    s["errors"] = ["client.u2 exited with 1", "no slot granted after 0.1 s"]
    f.write_text(json.dumps(s))
    capsys.readouterr()
    df = sweep_results.collect(out)
    err = capsys.readouterr().err
    assert f"WARNING: {victim} has errors" in err and "client.u2 exited with 1" in err
    assert err.count("WARNING") == 1
    csv = pd.read_csv(out / "sweep.csv").set_index("point")
    assert len(csv) == len(sw.points) == len(df)
    assert csv.loc[victim, "ok"] == 0
    assert csv.loc[victim, "errors"] == "client.u2 exited with 1; no slot granted after 0.1 s"
    assert (csv.drop(victim)["ok"] == 1).all() and csv.drop(victim)["errors"].isna().all()
    report = (out / "report.html").read_text()
    assert f"{len(sw.points) - 1} of {len(sw.points)} runs finished without errors" in report
    assert "Runs with errors (1)" in report and victim in report


# ----------------------------------------------------------------------------------------
# The cluster, secured: TLS with the certificates of `oppsched keys cluster`.


def test_cluster_keys_are_a_ca_and_the_certificates_it_signed_all_0600_and_kept(tmp_path,
                                                                                capsys):
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from oppsched.testbed import keys
    from oppsched.cli import main as cli_main

    kd = tmp_path / "keys"
    assert cli_main(["keys", "cluster", str(kd)]) == 0
    assert "8 file(s) written" in capsys.readouterr().out
    written = list(kd.iterdir())
    assert {p.name for p in written} == {
        f"cluster-{r}.{x}" for r in ("ca", "scheduler", "worker", "client") for x in ("pem", "key")}
    assert all(os.stat(p).st_mode & 0o777 == 0o600 for p in written)
    assert os.stat(kd).st_mode & 0o777 == 0o700
    ca = x509.load_pem_x509_certificate((kd / "cluster-ca.pem").read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for role in ("scheduler", "worker", "client"):
        cert = x509.load_pem_x509_certificate((kd / f"cluster-{role}.pem").read_bytes())
        assert cert.issuer == ca.subject
        # raises InvalidSignature if the CA did not sign it
        ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes,
                               ec.ECDSA(cert.signature_hash_algorithm))
    before = {p.name: p.read_bytes() for p in kd.iterdir()}
    assert keys.generate_cluster(kd) == []
    assert {p.name: p.read_bytes() for p in kd.iterdir()} == before
    # certificates whose CA is gone are refused, not silently joined by a new CA's
    (kd / "cluster-ca.pem").unlink()
    (kd / "cluster-ca.key").unlink()
    with pytest.raises(ConfigError, match="no cluster-ca.pem: remove the cluster-\\* files"):
        keys.generate_cluster(kd)


@pytest.mark.parametrize("address,keys_dir,expect", [
    ("tcp://192.0.2.10:8786", None, "plain tcp:// to a non-loopback address"),
    ("tcp://labsched:8786", None, "plain tcp:// to a non-loopback address"),
    ("tcp://0.0.0.0:8786", None, "plain tcp:// to a non-loopback address"),
    ("192.0.2.10:8786", None, "is not tls://HOST:PORT"),
    ("ucx://192.0.2.10:8786", None, "ucx:// is not supported"),
    ("tls://192.0.2.10:8786", None, "tls:// needs --cluster-keys DIR"),
    ("tcp://127.0.0.1:8786", "k", "--cluster-keys: given with 'tcp://127.0.0.1:8786'"),
])
def test_a_cluster_address_that_is_not_secured_is_refused_naming_the_option(
        address, keys_dir, expect):
    with pytest.raises(ConfigError, match=re.escape(expect)):
        sweep.cluster_security(address, keys_dir)


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "tcp://127.0.0.2:8786",
                                     "tcp://[::1]:8786", "tcp://localhost:8786"])
def test_plain_tcp_is_allowed_on_loopback(address):
    assert sweep.cluster_security(address) is None


def test_the_cli_refuses_plain_tcp_to_a_lab_address_before_anything_runs(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "oppsched", "sweep", str(write(tmp_path)),
                        "--out", str(out), "--cluster", "tcp://192.0.2.10:8786"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "--cluster: 'tcp://192.0.2.10:8786' is plain tcp://" in r.stderr
    assert "`oppsched keys cluster DIR`" in r.stderr and "--cluster tls://HOST:PORT" in r.stderr
    assert not out.exists()


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    """A Dask scheduler and one testbed worker on loopback, started with the dask-scheduler
    and dask-worker flags docs/sweeps.md gives, over TLS with `oppsched keys cluster`'s
    certificates. Yields (address, key folder, a key folder of another CA)."""
    pytest.importorskip("distributed")
    pytest.importorskip("cryptography")
    from distributed import Client
    from oppsched.testbed import keys

    tmp = tmp_path_factory.mktemp("tls-cluster")
    kd, other = tmp / "keys", tmp / "other-keys"
    keys.generate_cluster(kd)
    keys.generate_cluster(other)
    port = _free_port()
    address = f"tls://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=str(REPO / "tools"))

    def tls(role):
        return ["--tls-ca-file", str(kd / "cluster-ca.pem"),
                "--tls-cert", str(kd / f"cluster-{role}.pem"),
                "--tls-key", str(kd / f"cluster-{role}.key")]

    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                               "--host", "127.0.0.1", "--port", str(port), "--protocol", "tls",
                               *tls("scheduler"), "--no-dashboard"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", address, *tls("worker"),
         "--host", "127.0.0.1", "--nthreads", "1", "--resources", "testbed=1",
         "--name", "testbed-tls", "--no-dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(address, timeout="5s",
                            security=keys.cluster_security(kd, "client")) as c:
                    if len(c.scheduler_info()["workers"]) == 1:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("the local TLS Dask cluster did not come up within 60 s")
            time.sleep(0.5)
        yield address, kd, other
    finally:
        for p in procs[::-1]:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def test_a_client_with_the_cluster_certificates_runs_tasks_and_a_sweep_over_tls(
        tmp_path, tls_cluster):
    from distributed import Client
    from oppsched.testbed import keys

    address, kd, _ = tls_cluster
    with Client(address, timeout="10s", security=keys.cluster_security(kd, "client")) as c:
        assert c.submit(pow, 3, 4, pure=False).result(timeout=30) == 81
        assert all(w.startswith("tls://") for w in c.scheduler_info()["workers"])
    out = tmp_path / "out"
    assert sweep.run_sweep(write(tmp_path), out, cluster=address, cluster_keys=kd) == 0
    df = pd.read_csv(out / "sweep.csv")
    _, sw = plan_of(tmp_path)
    assert len(df) == len(sw.points) and (df["ok"] == 1).all()
    assert all((out / "points" / rel / "ran_on.json").is_file() for rel in df["point"])


def test_a_tls_cluster_refuses_clients_without_its_certificate(tmp_path, tls_cluster):
    import ssl

    from distributed import Client
    from oppsched.testbed import keys

    address, kd, other = tls_cluster
    port = int(address.rsplit(":", 1)[1])
    def first_read(cert: str | None, wait_s: float):
        """What a TLS connection trusting the cluster's CA gets first: bytes, b"" (closed)
        or the error. With TLS 1.3 a refused client certificate shows at the first read."""
        ctx = ssl.create_default_context(cafile=str(kd / "cluster-ca.pem"))
        ctx.check_hostname = False
        if cert:
            ctx.load_cert_chain(kd / f"{cert}.pem", kd / f"{cert}.key")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s, \
                    ctx.wrap_socket(s) as t:
                t.settimeout(wait_s)
                return t.recv(8)
        except OSError as exc:
            return exc

    # With the client's certificate the scheduler keeps the connection and waits for Dask's
    # handshake (the read times out or it speaks first); without one, it ends the
    # connection: an alert (certificate required), a reset or a close, never a timeout.
    ok = first_read("cluster-client", 2)
    assert isinstance(ok, TimeoutError) or (isinstance(ok, bytes) and ok), ok
    refused = first_read(None, 30)
    assert refused == b"" or (isinstance(refused, OSError)
                              and not isinstance(refused, TimeoutError)), refused
    # a complete set of certificates, but from another CA
    with pytest.raises(OSError):
        Client(address, timeout="5s", security=keys.cluster_security(other, "client"))
    with pytest.raises(ConfigError, match="refused this client's certificate"):
        sweep.run_sweep(write(tmp_path), tmp_path / "out", cluster=address, cluster_keys=other)
    # plain tcp:// to the TLS port
    with pytest.raises(OSError):
        Client(address.replace("tls://", "tcp://"), timeout="3s")


def test_a_client_key_readable_by_others_is_refused_naming_the_file(tmp_path):
    pytest.importorskip("distributed")
    pytest.importorskip("cryptography")
    from oppsched.testbed import keys

    kd = tmp_path / "keys"
    keys.generate_cluster(kd)
    os.chmod(kd / "cluster-client.key", 0o644)
    with pytest.raises(ConfigError, match="cluster-client.key is accessible by group or others"):
        sweep.cluster_security("tls://192.0.2.10:8786", kd)
    with pytest.raises(ConfigError, match="--cluster-keys: .* has no cluster-ca.pem"):
        sweep.cluster_security("tls://192.0.2.10:8786", tmp_path)
