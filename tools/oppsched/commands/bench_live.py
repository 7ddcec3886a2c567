"""`oppsched bench live`: what `--metrics` costs a real-time run (docs/howto/watch-a-run.md):
the default experiment at 5 Msps with --metrics scraped by prometheus and the live page
open (root).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


LIVE_EXPERIMENT = "experiments/clamp/fading-5msps.yaml"  # `make run`'s, at 5 Msps


def _wait_ready(url: str, proc, what: str, timeout: float = 60.0) -> None:
    import urllib.request

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"bench live: {what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"bench live: {what} not ready at {url} within {timeout:g} s")


def _browser(address: str):
    """Headless Chromium with the live page open; None and why if unavailable."""
    from oppsched.run.live import headless_chromium

    d, why = headless_chromium()
    if d is not None:
        d.get(f"http://{address}/")
    return d, why


def run_live_bench(out: str, experiment: str = LIVE_EXPERIMENT, duration: float = 60.0,
                   rt_priority: int = 20) -> int:
    """The default experiment at 5 Msps in real time (every variant, `duration` s each, the
    apd and clients at SCHED_FIFO rt_priority, the PHY 10 above) while its `--metrics`
    endpoint is scraped by Debian's prometheus every second and the live page is open in
    headless Chromium (polling /live.json every second). Reports the CPU the endpoint spent
    serving (its request threads' CPU time, as a share of one core over the runs), the
    requests by path, and each run's late slots and overruns; the bench passes when no slot
    was late and serving stayed within 2 % of a core."""
    import shutil
    import subprocess
    import tempfile

    from oppsched.run.live import MetricsServer
    from oppsched.run.runner import run_experiment

    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    prom = shutil.which("prometheus")
    if prom is None:
        print("bench live: the prometheus binary is not on PATH (Debian package prometheus, "
              "installed by tools/bootstrap.sh)", file=sys.stderr)
        return 1
    metrics = MetricsServer("127.0.0.1:0")
    tmp = Path(tempfile.mkdtemp(prefix="oppsched-bench-live-"))
    web = _free_port()
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n"
        f"  - job_name: oppsched\n    static_configs: [{{targets: ['{metrics.address}']}}]\n")
    log = open(outdir / "prometheus.log", "wb")
    server = subprocess.Popen([prom, f"--config.file={tmp / 'prometheus.yml'}",
                               f"--web.listen-address=127.0.0.1:{web}",
                               f"--storage.tsdb.path={tmp / 'tsdb'}"],
                              stdout=log, stderr=subprocess.STDOUT)
    driver = None
    overrides = [f"topology.apd_rt_priority={rt_priority}",
                 f"topology.client_rt_priority={rt_priority}",
                 f"extra.phy={{timing: {{rt_priority: {rt_priority + 10}}}}}"]
    try:
        _wait_ready(f"http://127.0.0.1:{web}/-/ready", server, "prometheus")
        driver, why = _browser(metrics.address)
        if driver is None:
            print(f"bench live: no browser ({why}); the page is not open", file=sys.stderr)
        print(f"bench live: {experiment}, {duration:g} s per variant, metrics at "
              f"{metrics.address}, prometheus scraping every 1 s"
              + (", the live page open in headless Chromium" if driver else ""),
              file=sys.stderr, flush=True)
        t0 = time.monotonic()
        runs = run_experiment(experiment, outdir / "run", overrides, duration, metrics=metrics)
        wall = time.monotonic() - t0
        scrapes = _prom_scrapes(f"http://127.0.0.1:{web}")
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        metrics.close()
        shutil.rmtree(tmp, ignore_errors=True)
    cost = dict(metrics.cost)
    cpu = sum(c for _, c in cost.values())
    rows = []
    for name, s, rundir in runs:
        phy = json.loads((Path(rundir) / "phy.stats.json").read_text())
        rows.append({"variant": name, "slots": int(phy["slots"]), "late_slots": int(phy["late"]),
                     "overruns": int(phy.get("overruns", 0)),
                     "apd_late_slots": (s.get("slots") or {}).get("late")})
    res = {
        "experiment": experiment, "duration_s_per_variant": duration,
        "wall_s": round(wall, 1), "serving_cpu_s": round(cpu, 3),
        "serving_cores": round(cpu / wall, 5),
        "requests": {p: {"n": n, "cpu_ms_each": round(1e3 * c / n, 3)}
                     for p, (n, c) in sorted(cost.items())},
        "prometheus_scrapes": scrapes, "page_open": driver is not None,
        "runs": rows, "load_average": list(os.getloadavg()),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    res["ok"] = (all(r["late_slots"] == 0 for r in rows) and res["serving_cores"] <= 0.02
                 and driver is not None)
    (outdir / "live.json").write_text(json.dumps(res, indent=2) + "\n")
    print(f"bench live: serving took {cpu:.2f} CPU s over {wall:.0f} s = "
          f"{100 * cpu / wall:.2f} % of a core (limit 2 %); requests: "
          + ", ".join(f"{p} {v['n']} x {v['cpu_ms_each']} ms" for p, v in
                      res["requests"].items())
          + f"; prometheus stored {scrapes} scrapes")
    for r in rows:
        print(f"bench live: {r['variant']}: {r['late_slots']} late slots, {r['overruns']} "
              f"overruns of {r['slots']}")
    print(f"bench live: {'PASS' if res['ok'] else 'FAIL'} -> {outdir / 'live.json'}")
    return 0 if res["ok"] else 1


def _free_port() -> int:
    """A TCP port free on loopback when asked."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prom_scrapes(api: str) -> int | None:
    """How many scrapes of the endpoint prometheus stored (count_over_time of `up`)."""
    import urllib.parse
    import urllib.request

    q = 'count_over_time(up{job="oppsched"}[1h])'
    try:
        with urllib.request.urlopen(f"{api}/api/v1/query?" + urllib.parse.urlencode(
                {"query": q}), timeout=10) as r:
            body = json.loads(r.read())
        return int(float(body["data"]["result"][0]["value"][1]))
    except (OSError, ValueError, KeyError, IndexError):
        return None
