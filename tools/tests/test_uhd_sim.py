"""UHD 4.3's device simulator (an emulated E320 run by UHD's own MPM code, started by
`oppsched uhd-sim` with the project's launcher and shims): UHD finds it, opens it, reads
back what it set, and streams; and each packaging fault a shim works around is still there
(a failing fault test means that shim can go). docs/howto/uhd-simulator.md says what this
covers and what only a real radio can.

Runs whenever the simulator can start here (after make's set-up it can); skips with
the reason otherwise. About 30 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import the_simulator_to_itself
from oppsched import uhd_sim

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SERIAL = "OPPSIM1"


def _cli(argv: list[str]) -> tuple[int, str, str]:
    """`oppsched ARGV` in this process (its imports are paid once): exit code, stdout,
    stderr."""
    import contextlib
    import io

    from oppsched.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def unavailable():
    return uhd_sim.unavailable()


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """The simulator, started and stopped with `oppsched uhd-sim`; TX samples go to a
    PacketLog (tx.jsonl). Holds the discovery lock while it runs."""
    with the_simulator_to_itself():
        d = tmp_path_factory.mktemp("uhd-sim")
        uhd_sim.write_config(d / "sim.ini", serial=SERIAL,
                             sink={"class": "PacketLog", "import_path": uhd_sim.SAMPLES,
                                   "path": d / "tx.jsonl"})
        state = ["--state", str(d)]
        rc, out, err = _cli(["uhd-sim", "start", "--config", str(d / "sim.ini")] + state)
        assert rc == 0, err
        try:
            assert f"serial {SERIAL}) at addr=127.0.0.1" in out, out
            yield d
        finally:
            rc, out, err = _cli(["uhd-sim", "stop"] + state)
            assert rc == 0 and "stopped the UHD device simulator" in out, err
            assert "killed" not in out, out  # it stopped on SIGTERM
            assert uhd_sim.discover(0.3) is None, "the simulator still answers after stop"


@pytest.fixture(scope="module")
def session(sim):
    """tools/tests/uhd_sim_client.py against the simulator: its JSON, and the packets the
    simulated radio received for transmission."""
    r = subprocess.run([sys.executable, str(HERE / "uhd_sim_client.py"), uhd_sim.DEVICE_ARGS],
                       capture_output=True, text=True, timeout=120, cwd=sim)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    tx = [json.loads(line) for line in (sim / "tx.jsonl").read_text().splitlines()]
    return out, tx


# --- the simulated device ------------------------------------------------------------------

def test_uhd_python_api_starts_the_simulator_itself_with_type_sim(tmp_path):
    """UHD's own way, type=sim,config=FILE: libuhd starts the simulator through
    usrp_mpm.process_manager, which imports the project's launcher (`oppsched uhd-sim env`'s
    PYTHONPATH). Runs before the module's simulator is up (MPM's ports are fixed)."""
    uhd_sim.write_config(tmp_path / "sim.ini", serial=SERIAL)
    code = ("import uhd, sys\n"
            "u = uhd.usrp.MultiUSRP(sys.argv[1])\n"
            "print('MBOARD', u.get_mboard_name(), u.get_usrp_rx_info(0)['mboard_serial'])\n"
            "del u\n")
    with the_simulator_to_itself():
        # In a session of its own: the simulator's processes are its children, and one
        # left behind by a hung call would hold MPM's ports for every later test.
        p = subprocess.Popen([sys.executable, "-c", code,
                              f"type=sim,config={tmp_path / 'sim.ini'}"],
                             env=uhd_sim.environment(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            stdout, stderr = p.communicate(timeout=120)
            after_close = uhd_sim.discover(0.3)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            stdout, stderr = p.communicate()
            pytest.fail(f"MultiUSRP(type=sim) did not return within 120 s: {stderr[-3000:]}")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # anything of the simulator still left
        r = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"MBOARD e320 {SERIAL}" in r.stdout
    assert after_close is None, "the simulator still answers after the device closed"


def test_discovery_answers_with_the_configured_serial(sim):
    info = uhd_sim.discover()
    assert info is not None
    assert (info["type"], info["product"], info["serial"]) == ("e3xx", "e320", SERIAL)


def test_uhd_find_devices_lists_it(sim):
    r = subprocess.run(["uhd_find_devices", "--args", uhd_sim.DEVICE_ARGS],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"serial: {SERIAL}" in r.stdout and "product: e320" in r.stdout


def test_cli_status_reports_it_running_and_start_refuses_a_second(sim):
    rc, out, _ = _cli(["uhd-sim", "status", "--state", str(sim)])
    assert rc == 0 and "running (pid " in out and f"serial {SERIAL}" in out, out
    rc, _, err = _cli(["uhd-sim", "start", "--state", str(sim)])
    assert rc == 1 and "already running" in err, err


def test_get_device_info_answers_only_strings(sim):
    """libuhd reads get_device_info's reply as a map of strings; a nil value (the missing
    Mender artifact, fault 4 of oppsched_mpm_shims) made its first RPC call fail with
    std::bad_cast. Asked over MessagePack-RPC as libuhd asks."""
    import socket

    import msgpack

    with socket.create_connection((uhd_sim.ADDR, uhd_sim.RPC_PORT), timeout=5) as s:
        s.sendall(msgpack.packb([0, 7, "get_device_info", []]))
        u = msgpack.Unpacker(raw=False)
        reply = None
        while reply is None:
            u.feed(s.recv(65536))
            reply = next(u, None)
    kind, msgid, error, info = reply
    assert (kind, msgid, error) == (1, 7, None)
    assert info["serial"] == SERIAL
    bad = {k: v for k, v in info.items() if not isinstance(v, str)}
    assert not bad, f"values that are not strings: {bad}"


def test_uhd_opens_it_and_reads_back_rate_frequency_gain_antenna(session):
    out, _ = session
    assert out["mboard"] == "e320" and out["channels"] == [2, 2]
    assert out["read_back"] == {
        "rx_rate": 1e6, "tx_rate": 1e6, "rx_freq": 2.45e9, "tx_freq": 2.45e9,
        "rx_gain": 30.0, "tx_gain": 40.0, "rx_antenna": "RX2", "tx_antenna": "TX/RX"}
    assert out["time_sources"] == ["internal"]


def test_rx_stream_command_delivers_the_samples_asked_for(session):
    out, _ = session
    assert out["rx"]["samples"] == 5000


def test_timed_tx_burst_reaches_the_radio_with_its_tx_time_and_end_of_burst(session):
    out, tx = session
    assert out["tx_sent"] == 3000
    assert tx, "the simulated radio received no TX packet"
    assert all(p["type"] == "DATA_WITH_TS" for p in tx)
    # tx_time 2.0 s in ticks of the simulated radio's clock (its master clock, 1 MHz)
    assert tx[0]["timestamp"] == round(2.0 * out["master_clock_rate"]) == 2_000_000
    assert [p["eob"] for p in tx] == [False] * (len(tx) - 1) + [True]
    assert sum(p["bytes"] for p in tx) == 3000 * 4  # sc16 on the wire


@pytest.fixture(scope="module")
def phy_session(sim):
    r = subprocess.run([sys.executable, str(HERE / "uhd_sim_client.py"), "--phy",
                        uhd_sim.DEVICE_ARGS], capture_output=True, text=True, timeout=120,
                       cwd=sim)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_uhd_phy_finds_opens_and_sets_up_the_simulated_radios(phy_session):
    """The UHD PHY's own device code (find_devices, GNU Radio's usrp_sink and usrp_source
    set up by configure_radio) on the simulated E320, as the AP's radio and a device's."""
    out = phy_session
    (found,) = out["found"]
    assert "product=e320" in found and "serial=" + SERIAL in found
    assert out["ap"] == {"rate": 1e6, "freq": 2.45e9, "gain": 40.0, "antenna": "TX/RX"}
    assert out["device"] == {"rate": 1e6, "freq": 2.45e9, "gain": 30.0, "antenna": "RX2"}
    assert out["time_set"] == 1234


def test_simulator_refuses_a_time_source(phy_session):
    """MPM's simulated periph manager has no set_time_source: a radio with time_source set
    (internal included) cannot be opened by the PHY; with it unset (the default) it can."""
    assert "set_time_source() not available on this device!" in \
        phy_session["time_source_internal"]
    assert phy_session["time_read"] == 0.0  # and the time set does not stick (no timekeeper)


def test_preflight_passes_every_radio_row_on_the_simulated_e320(sim, tmp_path):
    """`oppsched preflight` of experiments/clamp/fading-uhd.yaml moved onto the simulated
    E320 (profile e320_sim): found, images, image, frontend, link and profile pass for the
    AP and a device. Both radios are the one simulator (MPM's fixed ports allow one per
    machine), named by different args. benchmark_rate is left out: against the simulator
    it measures the simulator's Python, not a link."""
    import yaml

    from oppsched.commands import preflight
    from oppsched.phy import devices
    from oppsched.run.runner import load_experiment

    cfg = yaml.safe_load((REPO / "experiments/clamp/fading-uhd.yaml").read_text())
    cfg["phy"]["uhd"]["device"] = "e320_sim"
    cfg["phy"]["uhd"]["ap"]["args"] = "addr=127.0.0.1,type=e3xx"
    cfg["devices"] = [{"name": "R1", "uhd": {"args": "addr=127.0.0.1,product=e320",
                                             "gain_db": 40.0, "antenna": "RX2"}}]
    cfg["servers"], cfg["flows"] = cfg["servers"][:1], cfg["flows"][:1]
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    with devices.profile_checks_deferred():
        _raw, _schema, resolved = load_experiment(str(path), [])
    checks, message = preflight.preflight(resolved, preflight.Probe(), benchmark_s=0)
    assert message is None
    radio_rows = [c for c in checks if c.radio != "host"]
    failed = [c for c in radio_rows if not c.ok]
    assert not failed, preflight.table(failed)
    names = {(c.name, c.radio) for c in radio_rows}
    for field in ("phy.uhd.ap", "devices[0].uhd"):
        for check in ("profile", "found", "images", "image", "frontend", "link"):
            assert (check, field) in names
    assert ("sync", "all") in names
    found = next(c for c in checks if c.name == "found")
    assert found.detail == f"e320 serial {SERIAL} at 127.0.0.1"


# --- what the simulator does not do (docs/howto/uhd-simulator.md); a failure here means UHD's
# simulator changed: update that page and extend the tests above -----------------------------

def test_simulator_keeps_no_device_time(session):
    """set_time_now(5 s) reads back 0: the simulated radio has no timekeeper, so time on a
    PPS edge, late bursts and timed RX starts cannot be checked against it."""
    out, _ = session
    assert out["time_after_set"] == 0.0


def test_simulator_reports_no_tx_async_messages(session):
    """No burst ACK, no late or underflow report: the PHY's late/underflow counters cannot
    be exercised here."""
    out, _ = session
    assert out["tx_async"] == []


def test_simulator_rx_bursts_carry_no_time_and_no_end_of_burst(session):
    """A finite RX burst ends without end_of_burst (recv times out after it), and a timed RX
    command's first packet carries its timestamp in a packet typed without one, which UHD
    reads as two extra samples (2002 for 2000)."""
    out, _ = session
    assert (out["rx"]["end_of_burst"], out["rx"]["error"]) == (False, "timeout")
    assert out["rx"]["first_time"] is False
    assert out["timed_rx"]["samples"] == 2002 and out["timed_rx"]["first_time"] is False


# --- the packaging faults each shim works around (tools/oppsched/uhd_sim/mpm_path/
# oppsched_mpm_shims.py); a failure here means the fault is gone and the shim can go ----------

def _without_shims(code: str) -> subprocess.CompletedProcess:
    """Runs code in Debian's Python with .venv's packages but without the shims."""
    import sysconfig

    env = dict(os.environ, PYTHONPATH=sysconfig.get_paths()["purelib"])
    return subprocess.run(["/usr/bin/python3", "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture(scope="module")
def mpm(unavailable):
    if unavailable:
        pytest.skip(f"UHD's device simulator cannot start here: {unavailable}")


def test_fault_1_usrp_mpm_imports_the_missing_libpyusrp_periphs(mpm):
    # with fault 2's stand-in alone (usrp_mpm imports mprpc before it reaches uio)
    r = _without_shims(f"import sys, types\nsys.path.insert(0, {str(uhd_sim.MPM_PATH)!r})\n"
                       "import oppsched_msgpack_rpc\n"
                       "sys.modules['mprpc'] = types.ModuleType('mprpc')\n"
                       "sys.modules['mprpc'].RPCServer = oppsched_msgpack_rpc.RPCServer\n"
                       "import usrp_mpm")
    assert r.returncode != 0
    assert "No module named 'usrp_mpm.libpyusrp_periphs'" in r.stderr, r.stderr[-2000:]


def test_fault_2_debian_has_no_mprpc_for_usrp_mpm_rpc_server(mpm):
    """Debian's Python has no mprpc (the shims' stand-in serves usrp_mpm instead); once
    Debian packages one, check it against msgpack 1.0 and drop the stand-in."""
    r = subprocess.run(["/usr/bin/python3", "-c", "import mprpc"], capture_output=True,
                       text=True, timeout=60, env={k: v for k, v in os.environ.items()
                                                   if k != "PYTHONPATH"})
    assert r.returncode != 0
    assert "No module named 'mprpc'" in r.stderr, r.stderr[-2000:]
    r = subprocess.run(["dpkg-query", "-W", "python3-mprpc"], capture_output=True, text=True)
    assert r.returncode != 0, r.stdout


def test_usrp_mpm_rpc_server_gets_the_stand_in_mprpc(mpm):
    r = subprocess.run(["/usr/bin/python3", "-c",
                        "import usrp_mpm.rpc_server as r, mprpc\n"
                        "print(r.RPCServer.__module__, mprpc.__oppsched_stand_in__)"],
                       env=uhd_sim.environment(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["oppsched_msgpack_rpc", "True"]


def test_fault_3_pyroute2_get_links_rejects_a_list(mpm):
    r = _without_shims("from pyroute2 import IPRoute\n"
                       "with IPRoute() as ipr:\n"
                       "    ipr.get_links(ipr.link_lookup(ifname='lo'))")
    assert r.returncode != 0
    assert "TypeError" in r.stderr, r.stderr[-2000:]


def test_fault_4_get_mender_artifact_returns_none_without_mender(mpm):
    if Path("/usr/bin/mender").exists():
        pytest.skip("/usr/bin/mender exists on this machine: the fault cannot show")
    r = _without_shims(
        "import importlib.util\n"
        "spec = importlib.util.spec_from_file_location('fs', '/usr/lib/python3/dist-packages/"
        "usrp_mpm/sys_utils/filesystem_status.py')\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(repr(m.get_mender_artifact()))")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "None"


_SIM = "/usr/lib/python3/dist-packages/usrp_mpm/simulator"


def _load_sim_module(name: str) -> str:
    """Code that loads usrp_mpm/simulator/NAME.py by its path as `m` (it imports only
    uhd.chdr and the standard library: no usrp_mpm, so no shim is needed)."""
    return ("import importlib.util\n"
            f"spec = importlib.util.spec_from_file_location('m', '{_SIM}/{name}.py')\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n")


def test_fault_5_rx_streams_are_paced_as_if_payload_bytes_were_samples(mpm):
    """StreamSpec.seconds_per_packet is packet_samples / sample_rate, but packet_samples is
    the packet's payload in bytes (1484 for UHD's 371 sc16 samples per packet): the RX
    streams ran at a quarter of the rate (62 785 samples/s at 250 kS/s)."""
    code = (_load_sim_module("rfnoc_common")
            + "s = m.StreamSpec(); s.packet_samples = 1484; s.sample_rate = 250e3\n"
              "print(repr(s.seconds_per_packet()))")
    r = _without_shims(code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert float(r.stdout) == 1484 / 250e3
    r = subprocess.run(["/usr/bin/python3", "-c",
                        "from usrp_mpm.simulator.rfnoc_common import StreamSpec\n"
                        "s = StreamSpec(); s.packet_samples = 1484; s.sample_rate = 250e3\n"
                        "print(repr(s.seconds_per_packet()))"],
                       env=uhd_sim.environment(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert float(r.stdout) == 371 / 250e3  # the shim: one packet per 371 samples' time


_STRS = ("import queue\n"
         "from uhd.chdr import StrsStatus\n"
         "class Payload:\n"
         "    status = StrsStatus.OKAY\n"
         "    def __init__(self, n): self.xfer_count_pkts = self.xfer_count_bytes = n\n"
         "class Strs:\n"
         "    def __init__(self, n): self.n = n\n"
         "    def get_payload_strs(self): return Payload(self.n)\n")


def test_fault_6_a_continuous_rx_stream_dies_on_its_101st_flow_control_status(mpm):
    """ChdrOutputStream.queue_packet puts UHD's flow-control status packets into a queue of
    100 that its worker reads only when the downstream buffer is full (never, with UHD's
    2.5 MB): the 101st raises queue.Full in the simulator's socket thread, which ends it
    (a continuous RX stream stopped after about 700 packets, at any rate)."""
    code = (_load_sim_module("chdr_stream") + _STRS
            + "s = object.__new__(m.ChdrOutputStream); s.strs_queue = queue.Queue(100)\n"
              "for i in range(101): s.queue_packet(Strs(i))\n")
    r = _without_shims(code)
    assert r.returncode != 0
    assert r.stderr.rstrip().endswith("queue.Full"), r.stderr[-2000:]


def test_fault_6_shim_applies_the_oldest_status_instead_of_failing(mpm):
    code = ("from usrp_mpm.simulator import chdr_stream as m\n" + _STRS
            + "s = object.__new__(m.ChdrOutputStream); s.strs_queue = queue.Queue(100)\n"
              "s.recv = m.XferCount()\n"
              "for i in range(1, 151): s.queue_packet(Strs(i))\n"
              "print(s.strs_queue.qsize(), s.recv.num_packets)")
    r = subprocess.run(["/usr/bin/python3", "-c", code], env=uhd_sim.environment(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["100", "50"]  # the newest 100 queued, the 50th applied


_PRODUCERS = ("import gevent\n"
              "def producer():\n"
              "    for i in range(100000):\n"
              "        q.put(i)\n"
              "gs = [gevent.spawn(producer), gevent.spawn(producer)]\n"
              "gevent.joinall(gs, timeout=10)\n")


def test_fault_7_the_socket_threads_queue_fails_a_second_writer_once_280_items_wait(mpm):
    """SelectableQueue writes a wake-up byte per item into a socketpair: 280 items not yet
    taken by the socket thread fill it, the writer then waits (under gevent) and a second
    writer on the same socket raises ConcurrentObjectUseError (which ended a TX stream's
    worker under load: the PHY's usrp_sink stalled)."""
    code = ("from gevent import monkey; monkey.patch_all()\n"
            "import ast, queue, socket\n"
            f"src = open('{_SIM}/chdr_endpoint.py').read()\n"
            "cls = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef)\n"
            "           and n.name == 'SelectableQueue')\n"
            "ns = {'queue': queue, 'socket': socket}\n"
            "exec(ast.get_source_segment(src, cls), ns)\n"
            "q = ns['SelectableQueue']()\n" + _PRODUCERS
            + "print([type(g.exception).__name__ if g.ready() else 'waiting' for g in gs],"
              " q._queue.qsize())")
    r = _without_shims(code)
    assert r.returncode == 0, r.stderr[-2000:]
    states, waiting = r.stdout.split("]")[0], int(r.stdout.split("]")[1])
    assert "'waiting'" in states and "'ConcurrentObjectUseError'" in states, r.stdout
    assert 100 < waiting < 100000, r.stdout  # the socketpair's room (280 here)


def test_fault_7_shim_wakes_the_socket_thread_with_one_byte_however_many_wait(mpm):
    code = ("from gevent import monkey; monkey.patch_all()\n"
            "import select\n"
            "from usrp_mpm.simulator import chdr_endpoint as m\n"
            "q = m.SelectableQueue()\n" + _PRODUCERS
            + "ok = [g.ready() and g.exception is None for g in gs]\n"
              "n = 0\n"
              "while select.select([q], [], [], 0)[0]:\n"
              "    assert q.get() is not None; n += 1\n"
              "print(ok, n, q._queue.qsize())")
    r = subprocess.run(["/usr/bin/python3", "-c", code], env=uhd_sim.environment(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["[True,", "True]", "200000", "0"]  # every item, in the loop's way


def test_shims_act_only_on_the_modules_they_repair():
    """The shims' import hook leaves a process that does not import usrp_mpm untouched."""
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import oppsched_mpm_shims; oppsched_mpm_shims.install()\n"
            "import json, msgpack\n"
            "print(msgpack.Packer.__module__, 'gevent' in sys.modules, "
            "'usrp_mpm' in sys.modules)") % str(uhd_sim.MPM_PATH)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[1:] == ["False", "False"]
    assert not r.stdout.startswith("oppsched")


def test_write_config_rejects_a_bad_serial_and_preset(tmp_path):
    with pytest.raises(uhd_sim.SimulatorError, match="serial: 'TOOLONG12'"):
        uhd_sim.write_config(tmp_path / "a.ini", serial="TOOLONG12")
    with pytest.raises(uhd_sim.SimulatorError, match="preset: 'X310'"):
        uhd_sim.write_config(tmp_path / "a.ini", preset="X310")
    with pytest.raises(uhd_sim.SimulatorError, match="sample.sink: needs a 'class' key"):
        uhd_sim.write_config(tmp_path / "a.ini", sink={"path": "x"})
