"""`--metrics HOST:PORT` (oppsched/run/live.py): a short real run scraped by Debian's
Prometheus server every second, whose HTTP API then holds the run's per-user throughput
and late slots; and the options refused before anything runs (a non-loopback address, an
unparsable one, a port already taken), each named with `--metrics` and its value."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pandas as pd
import pytest

from helpers import REPO, netns_prefix, require_real_testbed, write_experiment
from oppsched.cli import main

EXPERIMENT = REPO / "experiments/srinivasan-baras/scheduler_comparison.yaml"
SWEEP = REPO / "experiments/srinivasan-baras/lambda-sweep.yaml"


@pytest.mark.parametrize("value, says", [
    ("192.0.2.7:9464", "192.0.2.7 is not a loopback address"),
    ("0.0.0.0:9464", "0.0.0.0 is not a loopback address"),
    ("metrics.example:9464", "'metrics.example' is not an IP address"),
    ("127.0.0.1", "is not HOST:PORT"),
    ("127.0.0.1:http", "port 'http' is not a number"),
    ("127.0.0.1:70000", "port 70000 is not in 0..65535"),
])
@pytest.mark.parametrize("verb", ["run", "sweep"])
def test_a_bad_metrics_address_is_refused_before_anything_runs(tmp_path, capsys, value, says,
                                                               verb):
    out = tmp_path / "out"
    exp = EXPERIMENT if verb == "run" else SWEEP
    assert main([verb, str(exp), "--out", str(out), "--metrics", value]) == 2
    err = capsys.readouterr().err
    assert f"--metrics: {value!r}" in err and says in err, err
    assert not out.exists()  # refused before the results folder was touched
    if "loopback" in says:
        assert "docs/security.md" in err


def test_a_taken_metrics_port_is_refused_before_anything_runs(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        value = f"127.0.0.1:{s.getsockname()[1]}"
        out = tmp_path / "out"
        assert main(["run", str(EXPERIMENT), "--out", str(out), "--metrics", value]) == 2
    err = capsys.readouterr().err
    assert f"--metrics: {value!r}: cannot listen there" in err, err
    assert not out.exists()


RUN = """
experiment: live
kind: testbed
duration_s: 5
seed: 1
devices:
  - {name: R1, channel: {mean_snr_db: 15.0}}
  - {name: R2, channel: {mean_snr_db: 10.0}}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1}
  - {id: f2, server: S1, device: R2}
queue: {limit_bytes: 200000}
capture: {pcaps: false}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(api: str, q: str) -> list:
    url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scrapes_a_runs_per_user_throughput_and_late_slots(tmp_path):
    """Debian's prometheus scrapes `--metrics` every second during an 8 s run; its HTTP API
    then has the per-user MAC throughput of both users (more than 100 kb/s at some scrape),
    several scrapes of the late-slot counter, each flow's RTT and goodput, and no scrape
    saw more late slots or more acknowledged TB bytes than the run's traces hold at its
    end."""
    prom = shutil.which("prometheus")
    if prom is None:
        pytest.skip("the prometheus binary is not on PATH (Debian package prometheus, "
                    "installed by tools/bootstrap.sh)")
    require_real_testbed()
    from oppsched.run.live import MetricsServer
    from oppsched.run.runner import run_experiment

    metrics = MetricsServer("127.0.0.1:0")
    web = f"127.0.0.1:{_free_port()}"
    api = f"http://{web}"
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
                   "scrape_configs:\n"
                   f"  - job_name: oppsched\n    static_configs: [{{targets: ['{metrics.address}']}}]\n")
    log = open(tmp_path / "prometheus.log", "wb")
    server = subprocess.Popen([prom, f"--config.file={cfg}", f"--web.listen-address={web}",
                               f"--storage.tsdb.path={tmp_path / 'tsdb'}"],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"{api}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus not ready in 60 s"
            time.sleep(0.2)
        # 8 s: the run's series exist once its traces do, a few seconds after it starts
        exp = write_experiment(tmp_path, RUN.replace("duration_s: 5", "duration_s: 8"))
        with netns_prefix():
            ((_, s, _),) = run_experiment(exp, tmp_path / "out", metrics=metrics)
        time.sleep(2.5)  # the scrapes of the run's last seconds are stored
        up = _query(api, 'up{job="oppsched"}')
        assert up and up[0]["value"][1] == "1", up
        thr = _query(api, "max_over_time(oppsched_user_throughput_bits_per_second[10m])")
        by_user = {r["metric"]["user"]: float(r["value"][1]) for r in thr}
        assert set(by_user) == {"R1", "R2"}, thr
        assert all(v > 100e3 for v in by_user.values()), by_user
        assert {r["metric"]["run"] for r in thr} == {"out"}
        late = _query(api, "count_over_time(oppsched_late_slots_total[10m])")
        # more than one scrape of the run (how many depends on the machine's start-up time)
        assert late and float(late[0]["value"][1]) >= 2, late
        late_max = _query(api, "max_over_time(oppsched_late_slots_total[10m])")
        assert float(late_max[0]["value"][1]) <= s["slots"]["late"]
        acked = _query(api, "max_over_time(oppsched_user_acked_tb_bytes_total[10m])")
        # per flow: the sender's RTT (at least the wired path's 20 ms) and the goodput
        rtt = _query(api, "max_over_time(oppsched_flow_rtt_seconds[10m])")
        assert {r["metric"]["flow"]: r["metric"]["user"] for r in rtt} == {"f1": "R1",
                                                                          "f2": "R2"}, rtt
        assert all(float(r["value"][1]) >= 0.020 for r in rtt), rtt
        good = _query(api, "max_over_time(oppsched_flow_goodput_bits_per_second[10m])")
        assert {r["metric"]["flow"] for r in good if float(r["value"][1]) > 0} == {"f1", "f2"}
        sl = pd.read_csv(tmp_path / "out" / "slots.csv")
        ack = sl[sl["outcome"] == "ack"]
        for r in acked:
            k = ["R1", "R2"].index(r["metric"]["user"])
            final = int(ack[ack["user"] == k]["tb_bytes"].sum())
            # read from the slot trace as the apd flushes it: some of it, never more
            assert 0 < float(r["value"][1]) <= final, (r, final)
    finally:
        metrics.close()
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def _chromium_driver():
    """Headless Chromium (live.headless_chromium), or a skip naming what is missing."""
    from oppsched.run.live import headless_chromium

    driver, missing = headless_chromium()
    if driver is None:
        pytest.skip(missing)
    return driver


def test_the_live_page_draws_a_run_as_it_goes_in_headless_chromium(tmp_path):
    """Headless Chromium opens the endpoint's page during a 10 s run: Chart.js (served by
    the endpoint itself) draws both users' throughput and the flows' goodput, the charts
    gain points from one look to the next while the run goes on, and the screenshot taken
    then is kept beside the run (live-page.png)."""
    require_real_testbed()
    import threading

    from oppsched.run.live import MetricsServer
    from oppsched.run.runner import run_experiment

    driver = _chromium_driver()
    metrics = MetricsServer("127.0.0.1:0")
    shot = tmp_path / "live-page.png"
    seen: dict = {}

    def points(chart: str) -> int:
        return int(driver.execute_script(
            f"return (window.oppschedLive.points || {{}})['{chart}'] || 0"))

    def until(cond, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if cond():
                return True
            time.sleep(0.25)
        return False

    def browse():
        try:
            driver.get(f"http://{metrics.address}/")
            seen["chart_js"] = driver.execute_script("return typeof Chart")
            seen["ready"] = until(lambda: points("throughput") >= 4, 40)
            seen["first"] = points("throughput")
            seen["later_ok"] = until(lambda: points("throughput") >= seen["first"] + 4, 20)
            seen["later"] = points("throughput")
            seen["goodput"] = points("goodput")
            seen["labels"] = driver.execute_script(
                "return Object.keys((Object.values(window.oppschedLive.runs)[0] || {})"
                ".throughput || {})")
            seen["status"] = driver.find_element("id", "status").text
            driver.save_screenshot(str(shot))
        except Exception as exc:  # noqa: BLE001 -- reported by the assertions below
            seen["error"] = repr(exc)

    exp = write_experiment(tmp_path, RUN.replace("duration_s: 5", "duration_s: 10"))
    t = threading.Thread(target=browse)
    try:
        t.start()
        with netns_prefix():
            run_experiment(exp, tmp_path / "out", metrics=metrics)
        t.join(timeout=60)
    finally:
        metrics.close()
        driver.quit()
    assert "error" not in seen, seen
    assert seen["chart_js"] == "function", seen  # the charting library came from the endpoint
    assert seen["ready"] and seen["later_ok"], seen  # the plots kept updating during the run
    assert sorted(seen["labels"]) == ["R1", "R2"], seen
    assert seen["goodput"] > 0, seen
    assert "run out (live)" in seen["status"] and "late" in seen["status"], seen
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    kept = tmp_path / "out" / "live-page.png"
    shutil.copyfile(shot, kept)  # the screenshot stays with the run it shows
    print(f"live page screenshot: {kept}")


def _scrape(address: str, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as r:
        return r.read().decode()


def _sample(text: str, name: str, **labels) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    head = f"{name}{{{want}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(head):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_the_endpoint_reads_the_slot_trace_on_from_where_it_stopped_across_the_rename(tmp_path):
    """Each scrape counts only the rows the apd appended since the last one, a row cut in
    the middle waits for its end, and the count goes on in slots.csv once the apd has
    renamed its slots.csv.partial; a sweep's progress is served beside the runs."""
    from oppsched.run.live import MetricsServer

    rd = tmp_path / "run"
    rd.mkdir()
    cfg = {"experiment": "e", "variant": "v", "duration_s": 10,
           "devices": [{"name": "A"}, {"name": "B"}], "flows": [{"id": "f1", "device": "A"}]}
    (rd / "run.json").write_text(json.dumps({"status": "running", "t0_mono_ns": 1,
                                             "run_name": "r1", "flows": []}))
    head = "slot,t_ns,user,mcs,tb_bytes,harq_pid,rv,ndi,retx,outcome,late,cqi.A,queue.A," \
           "price.A,cqi.B,queue.B,price.B\n"
    part = rd / "slots.csv.partial"
    part.write_text(head + "0,1000000000,0,3,500,0,0,1,0,ack,0,5,900,,7,0,\n"
                    "1,1003000000,1,4,600,0,0,1,0,nack,1,5,400,,7,0,\n2,10060")
    m = MetricsServer("127.0.0.1:0")
    try:
        m.watch("out/v", cfg, rd)
        m.sweep_progress(3, 5, 1, 125.0)
        t = _scrape(m.address)
        lab = {"run": "out/v", "variant": "v"}
        assert _sample(t, "oppsched_slots_total", **lab) == 2  # the cut row not yet
        assert _sample(t, "oppsched_late_slots_total", **lab) == 1
        assert _sample(t, "oppsched_user_acked_tb_bytes_total", user="A", **lab) == 500
        assert _sample(t, "oppsched_user_queue_bytes", user="A", **lab) == 400
        assert _sample(t, "oppsched_user_harq_transmissions_total", outcome="nack", user="B",
                       **lab) == 1
        assert _sample(t, "oppsched_sweep_points", state="remaining") == 5
        assert _sample(t, "oppsched_sweep_seconds_left") == 125
        with open(part, "a") as f:
            f.write("00000,0,2,700,0,0,1,0,ack,0,6,0,,7,0,\n")
        part.rename(rd / "slots.csv")  # the apd's exit
        with open(rd / "slots.csv", "a") as f:
            f.write("3,1009000000,-1,-1,0,0,0,0,0,,0,6,0,,7,0,\n")
        t = _scrape(m.address)
        assert _sample(t, "oppsched_slots_total", **lab) == 4
        assert _sample(t, "oppsched_empty_slots_total", **lab) == 1
        assert _sample(t, "oppsched_user_acked_tb_bytes_total", user="A", **lab) == 1200
        assert _sample(t, "oppsched_user_slots_won_total", user="A", **lab) == 2
        assert _sample(t, "oppsched_user_mcs", user="A", **lab) == 2
        live = json.loads(_scrape(m.address, "/live.json"))
        (run,) = live["runs"]
        assert run["users"]["A"]["acked_tb_bytes"] == 1200 and run["slots"] == 4
        assert live["sweep"]["done"] == 3
    finally:
        m.close()


def test_a_sweep_serves_each_point_while_it_runs_and_its_progress(tmp_path):
    """`oppsched sweep --metrics`: a two-point sweep of short real runs; scrapes during it
    see each point by its folder while it runs (and its slots counted), then the sweep's
    points done."""
    require_real_testbed()
    import threading

    from oppsched.run.live import MetricsServer
    from oppsched.run.sweep import run_sweep

    exp = write_experiment(tmp_path, RUN.replace("duration_s: 5", "duration_s: 3")
                           + "sweep: {axes: {alpha: {key: scheduler.alpha, "
                           "values: [0.05, 0.2]}}}\n")
    metrics = MetricsServer("127.0.0.1:0")
    seen: dict[str, float] = {}
    stop = threading.Event()

    def scrape():
        while not stop.wait(0.5):
            try:
                live = json.loads(_scrape(metrics.address, "/live.json"))
            except OSError:
                continue
            for r in live["runs"]:
                if r["status"] == "running":
                    seen[r["run"]] = max(seen.get(r["run"], 0), r["slots"])

    t = threading.Thread(target=scrape)
    t.start()
    try:
        with netns_prefix():
            assert run_sweep(exp, tmp_path / "sw", metrics=metrics) == 0
        stop.set()
        t.join()
        text = _scrape(metrics.address)
    finally:
        stop.set()
        metrics.close()
    points = sorted(p.parent.relative_to(tmp_path / "sw" / "points").as_posix()
                    for p in (tmp_path / "sw" / "points").rglob("summary.json"))
    assert len(points) == 2
    assert sorted(seen) == [f"sw/{p}" for p in points], seen
    assert all(n > 0 for n in seen.values()), seen
    assert _sample(text, "oppsched_sweep_points", state="done") == 2
    assert _sample(text, "oppsched_sweep_points", state="remaining") == 0
    assert "oppsched_run_info{" not in text  # finished points are no longer served


def test_the_endpoint_counts_the_requests_and_cpu_it_served_by_path(tmp_path):
    """What `oppsched bench live` reports as the endpoint's cost: every request counted under
    its path, with the CPU time of the thread that answered it."""
    from oppsched.run.live import MetricsServer

    m = MetricsServer("127.0.0.1:0")
    try:
        for _ in range(3):
            _scrape(m.address)
        _scrape(m.address, "/live.json")
        cost = dict(m.cost)
    finally:
        m.close()
    assert set(cost) == {"/metrics", "/live.json"}, cost
    assert cost["/metrics"][0] == 3 and cost["/live.json"][0] == 1, cost
    assert all(cpu > 0 for _, cpu in cost.values()), cost
