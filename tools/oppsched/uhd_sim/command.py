"""`oppsched uhd-sim start|stop|status|env`: UHD's device simulator as a background device."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from oppsched import uhd_sim

DEFAULT_STATE = "/tmp/oppsched-uhd-sim"


def _pid(state: Path) -> int | None:
    """The pid in STATE/pid if that process is still the simulator's launcher."""
    try:
        pid = int((state / "pid").read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return pid if str(uhd_sim.LAUNCHER).encode() in cmdline else None


def _cmd_start(a) -> int:
    state = Path(a.state)
    pid = _pid(state)
    if pid:
        print(f"oppsched uhd-sim: already running (pid {pid}, {state}/pid); "
              "`oppsched uhd-sim stop` ends it", file=sys.stderr)
        return 1
    why = uhd_sim.unavailable()
    if why:
        print(f"oppsched uhd-sim: cannot start the simulator: {why}", file=sys.stderr)
        return 1
    state.mkdir(parents=True, exist_ok=True)
    try:
        if a.config and a.air:
            raise uhd_sim.SimulatorError("--config and --air: give one (--air writes the "
                                         "config)")
        config = Path(a.config) if a.config else uhd_sim.write_config(
            state / "sim.ini", serial=a.serial, **(_air(a, state) if a.air else {}))
        sim = uhd_sim.Simulator(config, state / "sim.log", verbose=a.verbose)
        info = sim.start(timeout=a.timeout)
    except uhd_sim.SimulatorError as exc:
        print(f"oppsched uhd-sim: {exc}", file=sys.stderr)
        return 1
    (state / "pid").write_text(f"{sim.proc.pid}\n")
    air = (f"  air: its TX bursts into its RX streams at {a.air:g} S/s, SNR {a.snr_db:g} dB "
           f"(profile {a.profile}) for TX power {a.tx_power:g}\n" if a.air else "")
    print(f"UHD device simulator: {info.get('product')} (type {info.get('type')}, serial "
          f"{info.get('serial')}) at {uhd_sim.DEVICE_ARGS}, pid {sim.proc.pid}\n" + air +
          f"  config {config}, log {state / 'sim.log'}\n"
          f"  try: uhd_usrp_probe --args {uhd_sim.DEVICE_ARGS}\n"
          f"  stop: oppsched uhd-sim stop")
    sim.proc = None  # it runs on after this command
    return 0


def _air(a, state: Path) -> dict:
    """write_config's sink and source for --air: AirSink and AirSource at that rate."""
    if not 1e5 <= a.air <= 1e7:
        raise uhd_sim.SimulatorError(f"--air: {a.air:g} is not a sample rate in 1e5..1e7 S/s "
                                     "(the rate the radio will be set to)")
    sink, source = uhd_sim.air(a.air, state if a.air_log else None, buffer_s=a.buffer_s,
                               snr_db=a.snr_db, tx_power=a.tx_power, profile=a.profile,
                               seed=a.seed, late=a.late)
    return {"sink": sink, "source": source}


def _cmd_stop(a) -> int:
    state = Path(a.state)
    pid = _pid(state)
    if pid is None:
        (state / "pid").unlink(missing_ok=True)
        print(f"oppsched uhd-sim: no simulator started by oppsched is running "
              f"({state}/pid)", file=sys.stderr)
        return 1
    rc = uhd_sim.stop_pid(pid)
    (state / "pid").unlink(missing_ok=True)
    print(f"stopped the UHD device simulator (pid {pid}"
          + (", killed after 10 s" if rc is not None and rc < 0 else "") + ")")
    return 0


def _cmd_status(a) -> int:
    why = uhd_sim.unavailable()
    if why:
        print(f"cannot start here: {why}")
        return 1
    pid = _pid(Path(a.state))
    info = uhd_sim.discover(0.5)
    if info:
        who = f"pid {pid}" if pid else "not started by oppsched"
        print(f"running ({who}): {info.get('product')} serial {info.get('serial')} at "
              f"{uhd_sim.DEVICE_ARGS}, claimed {info.get('claimed')}")
    else:
        busy = uhd_sim.ports_in_use()
        print("not running; can start" + (f" (but {' and '.join(busy)} in use)"
                                          if busy else ""))
    return 0


def _cmd_env(a) -> int:
    print(f"PYTHONPATH={uhd_sim.pythonpath()}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "uhd-sim", help="UHD's device simulator (an emulated E320 on 127.0.0.1): start, "
        "stop, status, env", description="UHD 4.3's device simulator, run by the project's "
        "launcher with its shims for Debian's packaging (docs/howto/uhd-simulator.md). While "
        f"it runs, UHD finds and opens it with --args {uhd_sim.DEVICE_ARGS}.")
    s = p.add_subparsers(dest="uhd_sim_cmd", required=True)
    st = s.add_parser("start", help="start it in the background; prints its device args")
    st.add_argument("--config", help="the simulator's .ini (default: STATE/sim.ini, written "
                    "with the E320 preset)")
    st.add_argument("--serial", default=uhd_sim.DEFAULT_SERIAL,
                    help="serial of the written config (default %(default)s)")
    air = st.add_argument_group(
        "air", "with --air RATE the written config carries the radio's TX bursts into its RX "
        "streams through the project's channel emulator (AirSink, AirSource: "
        "docs/howto/uhd-simulator.md); RATE is the sample rate the radio will be set to")
    air.add_argument("--air", type=float, metavar="RATE", help="e.g. 250e3")
    air.add_argument("--snr-db", type=float, default=30.0,
                     help="mean Es/N0 per occupied subcarrier (default %(default)s)")
    air.add_argument("--tx-power", type=float, default=0.1,
                     help="mean power of the TX signal, 1.0 = full scale (default "
                     "%(default)s: the UHD PHY's 10 dB tx_backoff_db)")
    air.add_argument("--profile", default="3ms",
                     help="numerology whose subcarriers the SNR is per (default %(default)s)")
    air.add_argument("--seed", type=int, default=1, help="the noise's (default %(default)s)")
    air.add_argument("--late", choices=("drop", "now"), default="drop",
                     help="a burst past its place: dropped, as a USRP does, or sent at once "
                     "(default %(default)s)")
    air.add_argument("--buffer-s", type=float, default=None,
                     help="a burst due later than this waits in the radio (default: "
                     "AirSink's, 0.5)")
    air.add_argument("--air-log", action="store_true",
                     help="log every burst (STATE/air_tx.jsonl, air_rx.jsonl; about 100 kB/s "
                     "at 250 kS/s)")
    st.add_argument("--timeout", type=float, default=30.0,
                    help="seconds to wait for it to answer (default %(default)s)")
    st.add_argument("-v", "--verbose", action="count", default=0,
                    help="more of MPM's log (-v debug, -vv trace)")
    st.set_defaults(fn=_cmd_start)
    sp = s.add_parser("stop", help="stop the one `start` started")
    sp.set_defaults(fn=_cmd_stop)
    ss = s.add_parser("status", help="whether it can start here (and why not) and whether "
                      "it runs")
    ss.set_defaults(fn=_cmd_status)
    se = s.add_parser("env", help="the PYTHONPATH under which UHD's Python API starts it "
                      "itself with type=sim,config=FILE")
    se.set_defaults(fn=_cmd_env)
    for q in (st, sp, ss):
        q.add_argument("--state", default=os.environ.get("OPPSCHED_UHD_SIM_STATE",
                                                         DEFAULT_STATE),
                       help="folder of its pid file, config and log (default "
                       "$OPPSCHED_UHD_SIM_STATE or %(default)s)")
