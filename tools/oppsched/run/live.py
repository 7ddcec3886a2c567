"""Live figures of the runs going on, in the Prometheus text format (`--metrics HOST:PORT`
of `oppsched run` and `oppsched sweep`; docs/howto/watch-a-run.md): `/metrics`; and a page
that draws them as they come, `/` (oppsched/run/livepage.py), from `/live.json`.

The endpoint is served by a thread of the command's own process at normal priority and
reads only files: each watched run folder's traces as the daemons write them (slots.csv,
flushed every stats period, read from where the last scrape stopped), its stats files
(apd.stats.json, phy.stats.json: rewritten every 2 s), the runner's socket samples
(flow.<id>.socket.csv, every 0.5 s) and the senders' tcp_info at the last progress line
(flows.live.json). It never touches the run's processes, pipes or sockets, so a scrape
cannot hold up a slot; runs side by side (`--jobs`), forked processes, are watched the
same way. Without a scrape nothing is read.

Bound to loopback only: the endpoint has neither TLS nor authentication, and docs/security.md
requires one or the other of every endpoint reachable from the lab network. An address
that is not loopback, an unparsable one and a port already taken are refused before
anything runs, with an error naming `--metrics` and the value.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import time
from collections import deque
from pathlib import Path

from oppsched.config import ConfigError

NS = "oppsched"
THROUGHPUT_WINDOW_S = 2.0  # per-user throughput: TB bytes acknowledged over this much slot time


def parse_address(value: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) -> (host, port); ConfigError naming --metrics,
    the value and what is wrong."""
    where = f"--metrics: {value!r}"
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{where} is not HOST:PORT (e.g. 127.0.0.1:9464)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        p = int(port)
    except ValueError:
        raise ConfigError(f"{where}: port {port!r} is not a number") from None
    if not 0 <= p <= 65535:
        raise ConfigError(f"{where}: port {p} is not in 0..65535 (0: a free port, printed)")
    if host.lower() == "localhost":
        host = "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ConfigError(f"{where}: {host!r} is not an IP address (a host name may resolve "
                          "to anything: give 127.0.0.1 or ::1)") from None
    if not ip.is_loopback:
        raise ConfigError(
            f"{where}: {host} is not a loopback address. The metrics endpoint has no TLS or "
            "authentication, and every endpoint the lab network can reach needs one "
            "(docs/security.md), so it binds to 127.0.0.1 or ::1 only; watch from another "
            "host through an SSH forward (ssh -L 9464:127.0.0.1:9464 THIS_HOST)")
    return str(ip), p


class _Tail:
    """The rows appended to a CSV trace since the last read: NAME.partial while its writer
    runs, NAME once it has exited (the open file is followed across the rename)."""

    def __init__(self, rundir: Path, name: str):
        self.paths = (rundir / f"{name}.partial", rundir / name)
        self.f = None
        self.buf = b""
        self.header: dict[str, int] | None = None

    def rows(self) -> list[list[str]]:
        if self.f is None:
            for p in self.paths:
                try:
                    self.f = open(p, "rb")
                    break
                except OSError:
                    continue
            if self.f is None:
                return []
        data = self.f.read()
        if not data:
            return []
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        out = []
        for line in lines:
            cells = line.decode(errors="replace").split(",")
            if self.header is None:
                self.header = {c: i for i, c in enumerate(cells)}
            else:
                out.append(cells)
        return out

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None


def _num(cells: list[str], i: int | None, default=None):
    if i is None or i >= len(cells) or cells[i] == "":
        return default
    try:
        return float(cells[i])
    except ValueError:
        return default


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # not written yet, or replaced while read: the next scrape reads it


class _Run:
    """What the endpoint knows of one run folder, updated at each scrape."""

    def __init__(self, label: str, cfg: dict, rundir: Path):
        self.label, self.rundir, self.cfg = label, Path(rundir), cfg
        self.run_name: str | None = None  # run.json's, once read
        self.variant = cfg.get("variant") or ""
        self.experiment = cfg.get("experiment", "")
        self.users = [d["name"] for d in cfg.get("devices", [])]
        self.flows = {f["id"]: f.get("device", "") for f in cfg.get("flows", [])}
        self.duration_s = cfg.get("duration_s")
        self.slots = _Tail(self.rundir, "slots.csv")
        self.sockets = {fid: _Tail(self.rundir, f"flow.{fid}.socket.csv") for fid in self.flows}
        self.windows = {u: _Tail(self.rundir, f"windows.{u}.csv") for u in self.users}
        self.window: dict[str, float] = {}  # flow -> window CLAMP last advertised (bytes)
        self.ports: dict[int, str] | None = None  # a flow's port -> its id (run.json)
        n = len(self.users)
        self.slots_total = self.late = self.empty = 0
        self.won = [0] * n
        self.acked_bytes = [0] * n
        self.harq: list[dict[str, int]] = [{} for _ in range(n)]
        self.mcs: list[float | None] = [None] * n
        self.cqi: list[float | None] = [None] * n
        self.queue: list[float | None] = [None] * n
        self.recent: list[deque] = [deque() for _ in range(n)]  # (t_ns, acked bytes)
        self.last_t_ns = 0
        self.received: dict[str, tuple[float, float]] = {}  # flow -> (t_s, bytes)
        self.goodput: dict[str, float] = {}

    def update(self) -> None:
        rows = self.slots.rows()
        h = self.slots.header or {}
        iu, it, im, ib = h.get("user"), h.get("t_ns"), h.get("mcs"), h.get("tb_bytes")
        io, il = h.get("outcome"), h.get("late")
        icqi = [h.get(f"cqi.{u}") for u in self.users]
        iq = [h.get(f"queue.{u}") for u in self.users]
        for r in rows:
            if len(r) < len(h):
                continue  # a row cut by a full disk
            self.slots_total += 1
            t = int(_num(r, it, 0))
            self.last_t_ns = max(self.last_t_ns, t)
            if _num(r, il, 0):
                self.late += 1
            for k in range(len(self.users)):
                c, q = _num(r, icqi[k]), _num(r, iq[k])
                if c is not None:
                    self.cqi[k] = c
                if q is not None:
                    self.queue[k] = q
            u = int(_num(r, iu, -1))
            if not 0 <= u < len(self.users):
                self.empty += 1
                continue
            self.won[u] += 1
            self.mcs[u] = _num(r, im)
            out = r[io] if io is not None else ""
            self.harq[u][out] = self.harq[u].get(out, 0) + 1
            if out == "ack":
                b = int(_num(r, ib, 0))
                self.acked_bytes[u] += b
                self.recent[u].append((t, b))
        horizon = self.last_t_ns - int(THROUGHPUT_WINDOW_S * 1e9)
        for d in self.recent:
            while d and d[0][0] < horizon:
                d.popleft()
        for fid, tail in self.sockets.items():
            polls: dict[float, float] = {}
            hh = None
            for r in tail.rows():
                hh = tail.header
                if r[hh["event"]] != "poll" or _num(r, hh["bytes_sent"], 0) != 0:
                    continue
                t = _num(r, hh["t_s"])
                polls[t] = polls.get(t, 0.0) + _num(r, hh["bytes_received"], 0.0)
            for t in sorted(polls):
                prev = self.received.get(fid)
                if prev is not None and t > prev[0]:
                    self.goodput[fid] = 8.0 * (polls[t] - prev[1]) / (t - prev[0])
                self.received[fid] = (t, polls[t])

        self._update_windows()

    def _update_windows(self) -> None:
        if self.ports is None:
            flows = _json(self.rundir / "run.json").get("flows") or []
            if not any(f.get("port") for f in flows):
                return
            self.ports = {int(f["port"]): f["id"] for f in flows if f.get("port")}
        for tail in self.windows.values():
            for r in tail.rows():
                h = tail.header
                conn = r[h["flow"]] if h.get("flow") is not None else ""
                for end in conn.split(">"):
                    port = end.rpartition(":")[2]
                    if port.isdigit() and int(port) in self.ports:
                        v = _num(r, h.get("advertised_bytes"))
                        if v is not None:
                            self.window[self.ports[int(port)]] = v
                        break

    def throughput_bps(self, k: int) -> float:
        return 8.0 * sum(b for _, b in self.recent[k]) / THROUGHPUT_WINDOW_S

    def close(self) -> None:
        self.slots.close()
        for t in [*self.sockets.values(), *self.windows.values()]:
            t.close()


class _Collector:
    """The watched runs' figures: snapshot() as a dict (the live page's /live.json), and
    collect() as Prometheus metric families (/metrics), both from one reading."""

    def __init__(self):
        self.lock = threading.Lock()
        self.runs: dict[str, _Run] = {}
        self.sweep: dict | None = None

    def snapshot(self) -> dict:
        """{"runs": [...], "sweep": {...} or None}: every watched run whose run.json exists,
        read up to now."""
        with self.lock:
            runs = []
            for key, run in list(self.runs.items()):
                rj = _json(run.rundir / "run.json")
                if not rj:
                    continue
                if run.run_name != rj.get("run_name"):
                    # another run in the same folder (a sweep point run again after an
                    # unfinished one): its own files, read from their start
                    if run.run_name is not None:
                        run.close()
                        run = self.runs[key] = _Run(run.label, run.cfg, run.rundir)
                    run.run_name = rj.get("run_name")
                run.update()
                t0 = rj.get("t0_mono_ns")
                elapsed = (time.monotonic_ns() - t0) / 1e9 if t0 and \
                    rj.get("status") in ("running", "stopping") else None
                apd = _json(run.rundir / "apd.stats.json")
                aqm = (apd.get("core") or {}).get("aqm") or {}
                phy = {u.get("name"): u for u in _json(run.rundir / "phy.stats.json")
                       .get("users", []) if isinstance(u, dict)}
                users = {}
                for k, u in enumerate(run.users):
                    q = aqm.get(u) or {}
                    users[u] = {
                        "slots_won": run.won[k], "acked_tb_bytes": run.acked_bytes[k],
                        "throughput_bps": run.throughput_bps(k), "queue_bytes": run.queue[k],
                        "cqi": run.cqi[k], "mcs": run.mcs[k],
                        "harq": {o or "pending": n for o, n in sorted(run.harq[k].items())},
                        "snr_db": (phy.get(u) or {}).get("last_snr_db"),
                        "bler": (phy.get(u) or {}).get("bler"),
                        "aqm_drops": q.get("dropped_total"), "aqm_marks": q.get("marked"),
                        "queue_delay_s": q.get("queue_delay_s")}
                live = _json(run.rundir / "flows.live.json").get("flows") or {}
                flows = {}
                for fid, dev in run.flows.items():
                    s = live.get(fid) or {}
                    flows[fid] = {
                        "user": dev,
                        "received_bytes": run.received[fid][1] if fid in run.received else None,
                        "goodput_bps": run.goodput.get(fid),
                        "rtt_ms": s.get("rtt_ms"), "cwnd_bytes": s.get("cwnd_bytes"),
                        "clamp_window_bytes": run.window.get(fid)}
                runs.append({"run": run.label, "variant": run.variant,
                             "experiment": run.experiment, "status": str(rj.get("status", "")),
                             "elapsed_s": elapsed, "duration_s": run.duration_s,
                             "slots": run.slots_total, "late_slots": run.late,
                             "empty_slots": run.empty, "users": users, "flows": flows})
            return {"runs": runs, "sweep": dict(self.sweep) if self.sweep else None}

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        snap = self.snapshot()
        ru = ["run", "variant"]
        uu, ff = ru + ["user"], ru + ["flow", "user"]
        fams = []

        def fam(cls, name, doc, labels, rows):
            f = cls(f"{NS}_{name}", doc, labels=labels)
            for lab, v in rows:
                if v is not None:
                    f.add_metric(lab, v)
            fams.append(f)

        R = [([r["run"], r["variant"]], r) for r in snap["runs"]]
        U = [(lab + [u], d) for lab, r in R for u, d in r["users"].items()]
        F = [(lab + [f, d["user"]], d) for lab, r in R for f, d in r["flows"].items()]
        G, C = GaugeMetricFamily, CounterMetricFamily
        fam(G, "run_info", "a watched run (1); its experiment and status (run.json)",
            ru + ["experiment", "status"], [(lab + [r["experiment"], r["status"]], 1)
                                            for lab, r in R])
        fam(G, "run_elapsed_seconds", "seconds since the run's t0 (the flows' start)", ru,
            [(lab, r["elapsed_s"]) for lab, r in R])
        fam(C, "slots", "slots in the apd's slot trace", ru, [(lab, r["slots"]) for lab, r in R])
        fam(C, "late_slots", "slots the PHY had no grant for in time (slots.csv late)", ru,
            [(lab, r["late_slots"]) for lab, r in R])
        fam(C, "empty_slots", "slots granted to no user", ru,
            [(lab, r["empty_slots"]) for lab, r in R])
        for name, key, cls, doc in [
                ("user_slots_won", "slots_won", C, "slots granted to the user"),
                ("user_acked_tb_bytes", "acked_tb_bytes", C, "bytes of the user's TBs "
                 "acknowledged (MAC throughput: rate() of this)"),
                ("user_throughput_bits_per_second", "throughput_bps", G, "MAC throughput over "
                 f"the last {THROUGHPUT_WINDOW_S:g} s of the slot trace"),
                ("user_queue_bytes", "queue_bytes", G, "the user's AP queue"),
                ("user_cqi", "cqi", G, "the user's last CQI at the AP"),
                ("user_mcs", "mcs", G, "MCS of the user's last TB"),
                ("user_snr_decibels", "snr_db", G, "the user's last SNR as its receiver "
                 "reported it (phy.stats.json)"),
                ("user_block_error_ratio", "bler", G, "the receiver's TB error ratio so far "
                 "(phy.stats.json)"),
                ("user_aqm_drops", "aqm_drops", C, "packets the user's queue discipline "
                 "dropped (apd.stats.json)"),
                ("user_aqm_marks", "aqm_marks", C, "packets the user's queue discipline "
                 "marked ECN CE (apd.stats.json)"),
                ("user_queue_delay_seconds", "queue_delay_s", G, "the AQM's queueing delay "
                 "estimate (apd.stats.json)")]:
            fam(cls, name, doc, uu, [(lab, d[key]) for lab, d in U])
        fam(C, "user_harq_transmissions", "HARQ transmissions of the user's TBs by outcome "
            "(ack, nack, unheard, timeout, dropped)", uu + ["outcome"],
            [(lab + [o], n) for lab, d in U for o, n in d["harq"].items()])
        for name, key, cls, doc, scale in [
                ("flow_received_bytes", "received_bytes", C, "bytes the flow's receiving "
                 "sockets got (flow.<id>.socket.csv)", 1),
                ("flow_goodput_bits_per_second", "goodput_bps", G, "goodput between the last "
                 "two socket polls", 1),
                ("flow_rtt_seconds", "rtt_ms", G, "the sender's smoothed RTT (tcp_info) at "
                 "the last progress line", 1e-3),
                ("flow_cwnd_bytes", "cwnd_bytes", G, "the sender's congestion window "
                 "(tcp_info) at the last progress line", 1),
                ("flow_clamp_window_bytes", "clamp_window_bytes", G, "the window CLAMP last "
                 "advertised to the sender (windows.<dev>.csv)", 1)]:
            fam(cls, name, doc, ff, [(lab, None if d[key] is None else d[key] * scale)
                                     for lab, d in F])
        if snap["sweep"] is not None:
            sw = snap["sweep"]
            fam(G, "sweep_points", "the sweep's points by state (done: before this command "
                "or by it)", ["state"], [([k], sw[k]) for k in ("done", "remaining", "failed")])
            fam(G, "sweep_seconds_left", "the sweep's time left, estimated from the points "
                "run so far", [], [([], sw.get("seconds_left"))])
        return fams


class MetricsServer:
    """The `--metrics` endpoint: bound when made (so a taken port is refused before the run
    starts), served by a daemon thread once started, closed by close()."""

    def __init__(self, value: str):
        from prometheus_client import CollectorRegistry
        from prometheus_client.exposition import (ThreadingWSGIServer, _SilentHandler,
                                                  make_wsgi_app)
        from wsgiref.simple_server import make_server

        host, port = parse_address(value)
        self.value = value
        self.cost: dict[str, tuple[int, float]] = {}  # path -> (requests, CPU seconds)
        self._cost_lock = threading.Lock()
        self.collector = _Collector()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)

        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        try:
            self.httpd = make_server(host, port, self._app(make_wsgi_app(registry)), Server,
                                     handler_class=_SilentHandler)
        except OSError as exc:
            raise ConfigError(f"--metrics: {value!r}: cannot listen there ({exc.strerror or exc}"
                              "): a port taken by another program, or an address this host "
                              "does not have") from None
        self.address = f"{'[' + host + ']' if ':' in host else host}:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="oppsched-metrics",
                                       daemon=True)
        self.thread.start()

    def _app(self, metrics_app):
        """/ the live page, /chart.js its charting library, /live.json the figures it
        draws; everything else (/metrics) prometheus_client's."""
        from oppsched.run.livepage import CHART_JS, PAGE

        def app(environ, start_response):
            t0 = time.thread_time()
            try:
                return serve(environ, start_response)
            finally:
                # what serving costs the machine (`oppsched bench live`): CPU of the request
                # threads, by path
                path = environ.get("PATH_INFO") or "/"
                with self._cost_lock:
                    n, cpu = self.cost.get(path, (0, 0.0))
                    self.cost[path] = (n + 1, cpu + time.thread_time() - t0)

        def serve(environ, start_response):
            path = environ.get("PATH_INFO") or "/"
            if path in ("/", "/index.html"):
                body, ctype, code = PAGE.encode(), "text/html; charset=utf-8", "200 OK"
            elif path == "/live.json":
                body = json.dumps(self.collector.snapshot()).encode()
                ctype, code = "application/json", "200 OK"
            elif path == "/chart.js":
                try:
                    body, ctype, code = Path(CHART_JS).read_bytes(), "text/javascript", "200 OK"
                except OSError:
                    body = (f"// {CHART_JS} missing: install Debian's libjs-chart.js "
                            "(tools/bootstrap.sh does)\n").encode()
                    ctype, code = "text/javascript", "404 Not Found"
            else:
                return metrics_app(environ, start_response)
            start_response(code, [("Content-Type", ctype), ("Content-Length", str(len(body))),
                                  ("Cache-Control", "no-store")])
            return [body]
        return app

    def watch(self, label: str, cfg: dict, rundir) -> None:
        with self.collector.lock:
            self.collector.runs[label] = _Run(label, cfg, Path(rundir))

    def unwatch(self, label: str) -> None:
        with self.collector.lock:
            run = self.collector.runs.pop(label, None)
            if run is not None:
                run.close()

    def sweep_progress(self, done: int, remaining: int, failed: int,
                       seconds_left: float | None = None) -> None:
        with self.collector.lock:
            self.collector.sweep = {"done": done, "remaining": remaining, "failed": failed,
                                    "seconds_left": seconds_left}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        for label in list(self.collector.runs):
            self.unwatch(label)


def headless_chromium():
    """(driver, "") of headless Chromium through Selenium (Debian: chromium, chromium-driver,
    python3-selenium), as the live page's test and `oppsched bench live` open the page; or
    (None, what is missing)."""
    import shutil

    missing = [p for p in ("chromium", "chromedriver") if shutil.which(p) is None]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("python3-selenium")
    if missing:
        return None, (f"not installed: {', '.join(missing)} (Debian packages chromium, "
                      "chromium-driver, python3-selenium; tools/bootstrap.sh installs them)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900",
              "--disable-dev-shm-usage"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts), ""
