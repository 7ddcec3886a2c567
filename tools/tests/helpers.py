"""Helpers shared by the Python tests (imported as `helpers`; conftest.py puts this folder
on sys.path). One definition of each, so every test means the same thing by it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
import zmq

from oppsched import mac, paths
from oppsched.testbed import daemonconf, nsbase, runview, stale
from oppsched.config import ConfigError
from oppsched.experiments import testbed
from oppsched.run.runner import load_experiment
from oppsched.testbed.links import find_delay_binary, netem_available

# The repository's top folder (experiment files, flowgraphs, the build tree).
REPO = Path(__file__).resolve().parents[2]

# Tests that build network namespaces, veths and TUNs need CAP_NET_ADMIN.
needs_root = pytest.mark.skipif(not nsbase.is_root(),
                                reason="network namespaces need root (CAP_NET_ADMIN)")

# The namespace prefix of the runner's test runs: never the prefix of a real run
# ("oppsched") or of other tests.
PREFIX = "ottb"

# The shortened paper runs that pass `jobs=RUN_JOBS` (CLAMP's and Wu et al.'s, on the
# abstract PHY) run their variants and sweep points this many at a time (each run mostly
# waits on real time: a few tens of % of a core); shortened_sweep's callers pass jobs=1 where
# results moved side by side. OPPSCHED_TEST_RUN_JOBS=1 runs everything one after another.
RUN_JOBS = max(1, int(os.environ.get("OPPSCHED_TEST_RUN_JOBS", "1")))

# The smallest testbed experiment: one device, one server, one flow; without the per-run
# PNGs (analysis.plots: about 1 s of CPU per run; the tests of the plots turn them on).
BASE = """
experiment: t
kind: testbed
duration_s: 4
devices:
  - {name: R1}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1}
analysis: {plots: false}
"""
# The override that leaves the per-run PNGs out of a run of an experiment file.
NO_PLOTS = "analysis.plots=false"


def load_script(path: Path, name: str):
    """A Python file that is not in a package (an experiment's table or plot script) as a
    module, for its tests."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def require(ok: bool, why: str) -> None:
    """Skip locally; fail under CI (CI must never skip a test silently)."""
    if ok:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and this test cannot run: {why}")
    pytest.skip(why)


def built_program(rel: str, env: str) -> Path | None:
    """A program of the build tree: $`env` if set, else `rel` under the build folder
    ($OPPSCHED_BUILD, else the checkout's build/) if it is there and executable."""
    if os.environ.get(env):
        return Path(os.environ[env])
    p = paths.build_dir() / rel
    return p if p.is_file() and os.access(p, os.X_OK) else None


def run_cli(*args, **kw) -> subprocess.CompletedProcess:
    """`python -m oppsched ARGS` from the checkout, output captured as text."""
    return subprocess.run([sys.executable, "-m", "oppsched", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, **kw)


def write_yaml(path: Path, data) -> Path:
    """A daemon's or PHY's configuration file, keys in the order given."""
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def small_testbed(experiment: str, duration_s: float, *, flows: tuple[str, ...] = ("",),
                  extra: str = "") -> str:
    """The YAML of the small testbed the fault and security runs use: device R<i> at 15 dB
    and flow f<i> from server S1 (20 ms round trip) to it for each entry of `flows` (more
    of the flow's options, e.g. "direction: up"), then `extra` (more top-level YAML)."""
    n = len(flows)
    lines = [f"experiment: {experiment}", "kind: testbed", f"duration_s: {duration_s}",
             "devices:", *[f"  - {{name: R{i}, channel: {{mean_snr_db: 15.0}}}}"
                           for i in range(1, n + 1)],
             "servers:", "  - {name: S1, rtt_ms: 20}", "flows:",
             *[f"  - {{id: f{i}, server: S1, device: R{i}" + (f", {o}" if o else "") + "}"
               for i, o in enumerate(flows, 1)]]
    return "\n".join(lines) + "\n" + textwrap.dedent(extra).lstrip("\n")


def write_experiment(folder: Path, text: str, name: str = "exp.yaml") -> Path:
    """An experiment file `name` in `folder` holding `text`."""
    path = folder / name
    path.write_text(text)
    return path


def wait_for_files(files, timeout: float, what: str, alive=None) -> None:
    """Until every file exists; `alive()` (if given) raises when the process that should
    make them has died, so a crash fails at once with its own message."""
    def probe():
        if alive is not None:
            alive()
        return all(Path(f).exists() for f in files)
    nsbase.wait_for(probe, timeout=timeout, what=what)


@contextmanager
def one_timing_critical_run_at_a_time():
    """Held around a real run whose assertions need its processes on time (stations that
    answer each uplink grant within its slot): an exclusive lock shared by the pytest-xdist
    workers, so that two such runs never share the two cores. Other tests go on beside it.
    Seen without it: the wu station-queue run and the sample-PHY one, side by side, lost
    upstream TBs and grants (29 kb/s upstream; 603 of 4861 grants without their TB)."""
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / "oppsched-tests-timing.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class _MachineLock:
    """A readers-writer lock over the machine, shared by the pytest-xdist workers (flock on
    two files in the temp directory). Every test holds it shared while it runs (conftest.py,
    around each test's whole protocol, its module fixtures' set-up included); a run that
    needs both cores to itself takes it exclusively (`the_machine_to_itself`). Writers
    first: a worker waiting for it holds the turnstile, so no test starts beside the runs it
    waits for once they end."""

    def __init__(self):
        import tempfile
        d = Path(tempfile.gettempdir())
        self.turnstile_path = d / "oppsched-tests-turnstile.lock"
        self.rw_path = d / "oppsched-tests-machine.lock"
        self.shared_fd = None  # this process's shared hold, if any

    def acquire_shared(self) -> None:
        import fcntl
        with open(self.turnstile_path, "a") as t:
            fcntl.flock(t, fcntl.LOCK_EX)
            self.shared_fd = open(self.rw_path, "a")
            fcntl.flock(self.shared_fd, fcntl.LOCK_SH)
            fcntl.flock(t, fcntl.LOCK_UN)

    def release_shared(self) -> None:
        if self.shared_fd is not None:
            self.shared_fd.close()  # closing the description releases its lock
            self.shared_fd = None

    @contextmanager
    def exclusive(self):
        import fcntl
        held = self.shared_fd is not None
        self.release_shared()  # our own shared hold would keep us out
        with open(self.turnstile_path, "a") as t, open(self.rw_path, "a") as rw:
            fcntl.flock(t, fcntl.LOCK_EX)
            fcntl.flock(rw, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(rw, fcntl.LOCK_UN)
                fcntl.flock(t, fcntl.LOCK_UN)
        if held:
            self.acquire_shared()


MACHINE = _MachineLock()


@contextmanager
def the_machine_to_itself():
    """Held around a real run that needs both cores (the sample PHY at 5 Msps: slot_tx, the
    emulator and three receivers): every other test waits. Seen without it, beside the rest
    of `make test`: the default experiment's slot clock kept 67 % of real time (5469 slots
    of 3 ms in 24.6 s), its MAC figures per slot time and its goodput per second apart by
    a third. The timing lock (one_timing_critical_run_at_a_time) is not needed inside it."""
    with MACHINE.exclusive():
        yield


@contextmanager
def the_simulator_to_itself(blocks: bool = False):
    """Skips, saying why, unless UHD's device simulator can start here (and, with `blocks`,
    the build's gnuradio.oppsched and gnuradio.uhd import: the PHY's blocks and the air's
    channel); then holds the simulator's discovery lock with MPM's ports free, so that one
    simulator runs at a time on the machine (MPM's ports are fixed)."""
    from oppsched import uhd_sim
    why = uhd_sim.unavailable()
    if why:
        pytest.skip(f"UHD's device simulator cannot start here: {why}")
    if blocks:
        try:
            from gnuradio import oppsched as _gr_oppsched  # noqa: F401
            from gnuradio import uhd as _gr_uhd  # noqa: F401
        except ImportError as e:
            pytest.skip(f"gnuradio.oppsched / gnuradio.uhd not importable (the build's "
                        f"build/python): {e}")
    with uhd_sim.discovery_lock():
        busy = uhd_sim.ports_in_use()
        if busy:
            pytest.skip(f"MPM's {' and '.join(busy)} in use (another simulator or device "
                        "daemon runs on this machine)")
        yield


@contextmanager
def netns_prefix(prefix: str = PREFIX):
    """OPPSCHED_NETNS_PREFIX set to `prefix` inside the block (for module-scoped fixtures,
    which cannot use monkeypatch), restored after."""
    old = os.environ.get("OPPSCHED_NETNS_PREFIX")
    os.environ["OPPSCHED_NETNS_PREFIX"] = prefix
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("OPPSCHED_NETNS_PREFIX", None)
        else:
            os.environ["OPPSCHED_NETNS_PREFIX"] = old


def cfg_of(text: str = BASE, overrides=(), path: Path | None = None) -> dict:
    """The resolved experiment of `text` with `--set` overrides."""
    p = path or Path("/tmp") / f"ottb-{os.getpid()}.yaml"
    p.write_text(text)
    try:
        return load_experiment(p, overrides)[2]
    finally:
        if path is None:
            p.unlink()


def error_of(text: str = BASE, overrides=()) -> str:
    """The ConfigError message of an experiment that must be rejected."""
    with pytest.raises(ConfigError) as e:
        cfg_of(text, overrides)
    return str(e.value)


def run_layout(tmp_path: Path, cfg: dict, rundir: Path | None = None) -> daemonconf.Layout:
    """The layout of a testbed run of `cfg` in `rundir` (default tmp_path), its users
    addressed as the Testbed addresses them, its sockets in tmp_path/scratch if needed."""
    users = [daemonconf.User(j, d["name"], f"10.2.{j}.1", f"fd00:2:{j:x}::1")
             for j, d in enumerate(cfg["devices"])]
    return daemonconf.Layout.make(rundir or tmp_path, users, scratch=tmp_path / "scratch")


def delay_or_netem_available() -> tuple[bool, str]:
    """(True, "") if the wired paths can be built (netem or oppsched-delay), else why not."""
    if find_delay_binary() is not None or netem_available()[0]:
        return True, ""
    return False, "no netem and no oppsched-delay (cmake --build build --target oppsched-delay)"


def require_real_testbed() -> None:
    """Skip locally (fail under CI) unless a real testbed run can be built here: root, the
    built daemons and PHY, and a wired delay stage."""
    require(nsbase.is_root(), "network namespaces need root")
    require(*testbed.programs_available())
    require(*delay_or_netem_available())


def shortened_sweep(out: Path, experiment: Path, overrides=(),
                    duration: float | None = None, jobs: int = RUN_JOBS) -> Path:
    """A paper experiment's sweep, shortened by `overrides` (--set) and `duration`, run for
    real under the tests' namespace prefix, `jobs` points at a time, without the per-run
    PNGs (the sweep's own plots are drawn); every point must finish. Returns `out`, where
    sweep.csv and points/ are."""
    from oppsched.run.sweep import run_sweep
    require_real_testbed()
    with netns_prefix():
        failed = run_sweep(experiment, out, [NO_PLOTS, *overrides], duration=duration,
                           jobs=jobs)
    assert failed == 0, f"{failed} point(s) of {experiment} failed"
    return out


# iperf3's client stopped before its end-of-test exchange (a loaded machine: seen in the
# default experiment's and the sample PHY's runs beside the rest of make test)
IPERF3_INTERRUPTED = "interrupt - the client has terminated"


def assert_flow_ended(f: dict, context=None) -> None:
    """A flow of summary.json ended without an error, or with iperf3's end report lost to
    an interrupted client: the run then counts its bytes at the receiving socket, which
    must have carried some."""
    if f["error"] == IPERF3_INTERRUPTED:
        assert f["bytes_delivered_socket"] > 0, (context, f)
    else:
        assert f["error"] is None, (context, f)


def assert_run_gone(run_name: str, ns_names=()) -> None:
    """Nothing of a run is left: its namespaces (every one named after the run, and each of
    `ns_names` by name and by its /run/netns file), marked processes, processes naming the
    run, the owner file, a TUN escaped into the host namespace."""
    left = [n for n in stale.list_netns() if n.startswith(run_name) or n in ns_names]
    assert not left, f"namespaces left: {left}"
    assert not any(Path(f"/run/netns/{n}").exists() for n in ns_names)
    assert stale._marked_pids([run_name]) == []
    pg = subprocess.run(["pgrep", "-f", run_name], capture_output=True, text=True)
    assert pg.stdout.strip() == "", f"processes of {run_name} left: {pg.stdout}"
    assert not (nsbase.OWNER_DIR / f"{run_name}.json").exists()
    assert not (runview.VIEW_DIR / run_name).exists(), "the run folder's bind mount is left"
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert "radio0" not in links


# ----------------------------------------------------------------------------------------
# The PHY's network: a fake AP and fake clients on ipc:// sockets


def decode_rx(frame: bytes) -> dict:
    seq, kind, d = mac.wire.decode(frame)
    assert kind == "rx_indication"
    d["seq"] = seq
    return d


class FakeNetwork:
    """A fake AP (binds PULL phy_requests, PUSH phy_grants) and fake clients (bind PULL
    rx_<id>) in one thread. `answer(slot, air_time_ns)` returns the frames to push on
    phy_grants when the request for `slot` arrives (a list of bytes)."""

    def __init__(self, tmp_path: Path, n_users: int, answer):
        self.ctx = zmq.Context()
        zdir = tmp_path / "zmq"
        zdir.mkdir(exist_ok=True)
        self.req = self.ctx.socket(zmq.PULL)
        self.req.bind(f"ipc://{zdir}/phy_requests")
        self.grants = self.ctx.socket(zmq.PUSH)
        self.grants.bind(f"ipc://{zdir}/phy_grants")
        self.rx = []
        for i in range(n_users):
            s = self.ctx.socket(zmq.PULL)
            s.bind(f"ipc://{zdir}/rx_{i}")
            self.rx.append(s)
        for s in [self.req, self.grants, *self.rx]:
            s.setsockopt(zmq.LINGER, 0)
        self.answer = answer
        self.requests: list[tuple[int, int, int, int]] = []  # (seq, slot, air_time_ns, arrival_ns)
        self.indications: list[list[dict]] = [[] for _ in range(n_users)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        self.ctx.destroy(linger=0)

    def _loop(self):
        poller = zmq.Poller()
        poller.register(self.req, zmq.POLLIN)
        for s in self.rx:
            poller.register(s, zmq.POLLIN)
        idle_after_stop = 0
        while True:
            events = dict(poller.poll(10))
            if not events and self._stop.is_set():
                idle_after_stop += 1
                if idle_after_stop > 3:
                    return
            if self.req in events:
                frame = self.req.recv()
                arrival = time.monotonic_ns()
                seq, kind, d = mac.wire.decode(frame)
                assert kind == "slot_request"
                self.requests.append((seq, d["slot"], d["air_time_ns"], arrival))
                for out in self.answer(d["slot"], d["air_time_ns"]):
                    self.grants.send(out)
            for i, s in enumerate(self.rx):
                if s in events:
                    while True:
                        try:
                            self.indications[i].append(decode_rx(s.recv(zmq.NOBLOCK)))
                        except zmq.Again:
                            break

    def settle(self, timeout=2.0):
        """Waits until the loop has drained what is in flight."""
        time.sleep(0.1)
