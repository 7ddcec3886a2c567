"""UHD 4.3's device simulator (an emulated E320 run by UHD's own MPM code) on this machine.

Debian 12's python3-uhd ships `usrp_mpm` built for the simulator but not the daemon that
starts it (`usrp_hwd`), and some of its imports fail on Debian 12; tools/uhd-sim-setup.sh
installs what it needs (docs/howto/uhd-simulator.md). This module starts and stops it:

- `Simulator(config).start()` runs the project's launcher (mpm_path/usrp_hwd.py) with the
  shims for Debian's packaging faults (mpm_path/oppsched_mpm_shims.py) as a process of its
  own: the device then answers UHD like a networked USRP at `addr=127.0.0.1` (discovery on
  UDP 49600, RPC on TCP 49601, CHDR over UDP on loopback). `stop()` ends it.
- `environment()`: the environment under which UHD's Python API can also start the
  simulator itself with `type=sim,config=FILE` (in a process of its own: usrp_mpm applies
  gevent's monkey patching to the process that imports it).
- `unavailable()`: None when the simulator can start here, else the precise reason.
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import functools
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

MPM_PATH = Path(__file__).resolve().parent / "mpm_path"
LAUNCHER = MPM_PATH / "usrp_hwd.py"
SAMPLES = MPM_PATH / "oppsched_sim_samples.py"
DISCOVERY_PORT = 49600  # usrp_mpm.mpmtypes.MPM_DISCOVERY_PORT
RPC_PORT = 49601  # usrp_mpm.mpmtypes.MPM_RPC_PORT
ADDR = "127.0.0.1"
DEVICE_ARGS = f"addr={ADDR}"
DEFAULT_SERIAL = "3196D2A"
PRESETS = ("E320",)  # usrp_mpm.simulator.hardware_presets in UHD 4.3


LOCK = "/tmp/oppsched-uhd-sim.lock"


class SimulatorError(RuntimeError):
    pass


@contextlib.contextmanager
def discovery_lock():
    """Held (flock on LOCK) by the tests while a simulator they started runs, and by the
    tests that expect UHD's discovery on this host to find no device: a simulator answers
    every `uhd_find_devices` here. Blocks until the other holder lets go."""
    with open(LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def pythonpath() -> str:
    """The launcher and shims (with the MessagePack-RPC server that stands in for mprpc),
    then this interpreter's site-packages."""
    return os.pathsep.join([str(MPM_PATH), sysconfig.get_paths()["purelib"]])


def environment(base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = pythonpath() + (os.pathsep + env["PYTHONPATH"]
                                        if env.get("PYTHONPATH") else "")
    return env


def write_config(path: str | os.PathLike, serial: str = DEFAULT_SERIAL, preset: str = "E320",
                 sink: dict | None = None, source: dict | None = None) -> Path:
    """Writes the simulator's .ini: `[hardware]` preset and serial, and optionally
    `[sample.sink]` / `[sample.source]` (a dict of class=, import_path=, and the class's
    keyword arguments). Without them the simulator's null source and sink are used."""
    if preset not in PRESETS:
        raise SimulatorError(f"preset: {preset!r} is not one of UHD 4.3's simulator presets "
                             f"({', '.join(PRESETS)})")
    if not serial or not serial.isalnum() or len(serial) > 7:
        # SharedState keeps the serial in 8 bytes with the terminating NUL
        raise SimulatorError(f"serial: {serial!r} must be 1 to 7 letters or digits")
    cp = configparser.ConfigParser()
    cp["hardware"] = {"preset": preset, "serial_num": serial}
    for section, spec in (("sample.sink", sink), ("sample.source", source)):
        if spec is not None:
            if "class" not in spec:
                raise SimulatorError(f"{section}: needs a 'class' key (got {sorted(spec)})")
            cp[section] = {k: str(v) for k, v in spec.items()}
    path = Path(path)
    with open(path, "w") as f:
        cp.write(f)
    return path


def air(sample_rate: float, log_dir: str | os.PathLike | None = None,
        buffer_s: float | None = None, **channel) -> tuple[dict, dict]:
    """The `sink` and `source` of write_config for the simulated radio's antenna: AirSink
    and AirSource (mpm_path/oppsched_sim_samples.py), which carry its TX bursts through the
    project's channel emulator into its RX streams at `sample_rate` (the rate UHD is set
    to: the simulated E320's timestamps tick at it). `channel`: AirSource's keywords
    (snr_db, tx_power, gain_db, fading, doppler_hz, profile, seed, noise, late);
    `buffer_s`: AirSink's (how far ahead of its time a burst is taken; None: its
    default). With log_dir, the sink logs to LOG_DIR/air_tx.jsonl and the source to
    LOG_DIR/air_rx.jsonl."""
    sink = {"class": "AirSink", "import_path": SAMPLES, "tick_rate": sample_rate}
    if buffer_s is not None:
        sink["buffer_s"] = buffer_s
    source = {"class": "AirSource", "import_path": SAMPLES, "sample_rate": sample_rate,
              **channel}
    if log_dir is not None:
        sink["log"] = Path(log_dir) / "air_tx.jsonl"
        source["log"] = Path(log_dir) / "air_rx.jsonl"
    return sink, source


def discover(timeout: float = 0.5, addr: str = ADDR) -> dict | None:
    """Sends MPM's discovery request to addr; returns the answer's key=value fields, or
    None without an answer."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(b"MPM-DISC", (addr, DISCOVERY_PORT))
        try:
            data, _ = s.recvfrom(9000)
        except (socket.timeout, ConnectionRefusedError):
            return None
    fields = data.split(b";")
    if fields[0] != b"USRP-MPM":
        return None
    return dict(f.decode(errors="replace").partition("=")[::2] for f in fields[1:])


def _port_in_use(port: int, kind: int) -> bool:
    with socket.socket(socket.AF_INET, kind) as s:
        if kind == socket.SOCK_STREAM:  # as gevent's server does: TIME_WAIT does not count
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def ports_in_use() -> list[str]:
    return ([f"UDP {DISCOVERY_PORT}"] if _port_in_use(DISCOVERY_PORT, socket.SOCK_DGRAM)
            else []) + ([f"TCP {RPC_PORT}"] if _port_in_use(RPC_PORT, socket.SOCK_STREAM)
                        else [])


@functools.lru_cache(maxsize=None)
def unavailable(python: str | None = None) -> str | None:
    """None if the simulator can start here; otherwise why not (the first missing piece,
    with the command that installs it). Asked once per process: it imports usrp_mpm in a
    process of its own (about a second)."""
    python = python or sys.executable
    probe = "import usrp_mpm, mprpc, uhd.usrp; print(usrp_mpm.__mpm_device__)"
    try:
        r = subprocess.run([python, "-c", probe], env=environment(), capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} could not import usrp_mpm: {exc}"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        return (f"the simulator's Python modules do not import ({last}); "
                "`tools/uhd-sim-setup.sh .venv` (part of make's set-up) installs them "
                "(Debian's python3-uhd, python3-gevent, python3-pyroute2, python3-netaddr, "
                "python3-pyudev, python3-systemd, python3-six, python3-msgpack)")
    device = r.stdout.split()[0] if r.stdout.split() else ""
    if device != "sim":
        return (f"usrp_mpm is built for device {device!r}, not the simulator ('sim'): "
                "Debian's python3-uhd has the simulator build")
    return None


class Simulator:
    """One simulated E320 answering at 127.0.0.1 (MPM's fixed ports: one at a time per
    machine). Its log goes to `log`."""

    def __init__(self, config: str | os.PathLike, log: str | os.PathLike,
                 python: str | None = None, verbose: int = 0):
        self.config = Path(config).resolve()
        self.log = Path(log)
        self.python = python or sys.executable
        self.verbose = verbose
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        return ([self.python, str(LAUNCHER), "--default-args", f"config={self.config}",
                 "--discovery-addr", ADDR] + ["-v"] * self.verbose)

    def start(self, timeout: float = 30.0) -> dict:
        """Starts the simulator; returns its discovery answer once its RPC server is ready
        (the answer carries the device type only from then on, and for a moment after that
        an empty product and serial: seen under load, `(type e3xx, serial )`)."""
        if not self.config.is_file():
            raise SimulatorError(f"config: {self.config} does not exist")
        busy = ports_in_use()
        if busy:
            raise SimulatorError(f"{' and '.join(busy)} in use: another MPM simulator or "
                                 "device daemon runs on this machine (`oppsched uhd-sim "
                                 "stop` ends one started by oppsched)")
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(self.command(), env=environment(),
                                         stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SimulatorError(f"the simulator exited with code {self.proc.returncode} "
                                     f"before it was ready; its log, {self.log}, ends:\n"
                                     + _tail(self.log))
            info = discover(0.2)
            if info and info.get("type") and info.get("serial"):
                return info
        self.stop()
        raise SimulatorError(f"the simulator did not answer discovery with a device type "
                             f"within {timeout:g} s; its log, {self.log}, ends:\n"
                             + _tail(self.log))

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        rc = stop_pid(self.proc.pid, timeout)
        self.proc.wait()
        self.proc = None
        return rc

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


def stop_pid(pid: int, timeout: float = 10.0) -> int | None:
    """SIGTERM to the launcher (it stops its RPC and discovery processes), then SIGKILL to
    its process group if it is still there after timeout seconds."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child: poll for its end
            done, status = (0, 0) if _alive(pid) else (pid, 0)
        if done:
            return os.waitstatus_to_exitcode(status) if status else 0
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return -signal.SIGKILL


def _alive(pid: int) -> bool:
    """pid runs (a zombie whose parent does not reap it has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(unreadable: {exc})"
    return "\n".join(lines[-n:])
