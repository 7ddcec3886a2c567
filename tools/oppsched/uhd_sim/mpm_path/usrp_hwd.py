"""oppsched's launcher for UHD's MPM simulator, in place of the `usrp_hwd` daemon that
Debian's python3-uhd does not ship.

`usrp_mpm.process_manager` (what libuhd runs for `type=sim` devices) imports `usrp_hwd` and
uses three names: `JOIN_PROCESSES` (False: main() returns once the processes run),
`main()` (reads sys.argv: `--default-args config=FILE`, `-v`/`-q`, `--no-logbuf`) and
`kill_time(sig, frame)` (stop them). Run as a script (`oppsched uhd-sim start` does), main()
blocks until SIGTERM or SIGINT and then stops the processes.

It starts usrp_mpm's two processes, as on a device: the RPC server (TCP port 49601) and the
discovery responder (UDP port 49600), answering only senders on --discovery-addr
(127.0.0.1 unless told).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

JOIN_PROCESSES = True
_PROCESSES = []
_STOP = None  # made in main(), after usrp_mpm's import has monkey-patched threading for gevent


def _parse(argv):
    p = argparse.ArgumentParser(prog="usrp_hwd (oppsched)",
                                description="UHD's MPM simulator, as a device's daemon")
    p.add_argument("--default-args", default="",
                   help="comma-separated key=value device defaults; config=FILE names the "
                   "simulator's .ini")
    p.add_argument("--discovery-addr", default="127.0.0.1",
                   help="answer discovery only from this address (prefix); "
                   "default %(default)s")
    p.add_argument("--no-logbuf", dest="use_logbuf", action="store_false",
                   help="do not forward log messages to UHD")
    p.add_argument("-v", "--verbose", action="count", default=0)
    p.add_argument("-q", "--quiet", action="count", default=0)
    a = p.parse_args(argv)
    defaults = {}
    for item in filter(None, (x.strip() for x in a.default_args.split(","))):
        key, sep, value = item.partition("=")
        if not key:
            p.error(f"--default-args: {item!r} has no key")
        defaults[key.strip()] = value.strip() if sep else ""
    a.default_args = defaults
    return a


def kill_time(sig=None, frame=None):
    """Stops the simulator's processes (a signal handler's signature, as process_manager
    calls it)."""
    if _STOP is not None:
        _STOP.set()
    for proc in _PROCESSES:
        if proc.is_alive():
            proc.terminate()
    for proc in _PROCESSES:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join()
    _PROCESSES.clear()


def main() -> bool:
    global _STOP
    a = _parse(sys.argv[1:])
    import usrp_mpm as mpm
    from usrp_mpm.mpmtypes import MPM_RPC_PORT, SharedState

    log = mpm.get_main_logger(use_logbuf=a.use_logbuf,
                              log_default_delta=a.verbose - a.quiet).getChild("main")
    log.info("Launching the MPM simulator (usrp_mpm %s, device %s) with oppsched's "
             "launcher", mpm.__version__, mpm.__mpm_device__)
    _STOP = threading.Event()
    shared = SharedState()
    # usrp_mpm 4.3's spawn_rpc_process names its parameters (state, udp_port) but hands them
    # on as (udp_port, state) to a target that takes (shared_state, port): the port comes
    # first here, as UHD's own daemon passes them.
    _PROCESSES.append(mpm.spawn_rpc_process(MPM_RPC_PORT, shared, a.default_args))
    _PROCESSES.append(mpm.spawn_discovery_process(shared, a.discovery_addr))
    log.info("RPC process %d, discovery process %d", _PROCESSES[0].pid, _PROCESSES[1].pid)
    if not JOIN_PROCESSES:
        return True
    signal.signal(signal.SIGTERM, lambda *_: _STOP.set())
    signal.signal(signal.SIGINT, lambda *_: _STOP.set())
    while not _STOP.wait(0.2):
        dead = [p for p in _PROCESSES if not p.is_alive()]
        if dead:
            log.error("process %d exited (code %s): stopping", dead[0].pid, dead[0].exitcode)
            kill_time()
            return False
    kill_time()
    return True


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
