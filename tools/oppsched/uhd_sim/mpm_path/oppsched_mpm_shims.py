"""Workarounds for the faults of Debian 12's UHD 4.3 MPM simulator packaging.

Debian's python3-uhd ships `usrp_mpm` built for the simulator, but a few of its imports and
calls fail on Debian 12's Python 3.11 and libraries. `install()` puts one shim in place for
each fault; each is as small as the fault allows, and tools/tests/test_uhd_sim.py has a test
per shim that fails once the fault is gone (the shim can then be dropped).

The shims act only when the module they repair is imported, through an import hook, so a
process that never imports `usrp_mpm` is untouched. This module is imported by the
`sitecustomize` beside it, i.e. in every Python process started with
`oppsched.uhd_sim.environment()` (the simulator's, and the UHD programs that embed Python to
start it with `type=sim`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

_PATCHES = {}  # module name -> function(module) run right after the module executes
_REPLACED = {}  # module name -> function() returning the module that stands in for it


class _Loader(importlib.abc.Loader):
    def __init__(self, name, real):
        self.name = name
        self.real = real

    def create_module(self, spec):
        if self.name in _REPLACED:
            return _REPLACED[self.name]()
        return self.real.create_module(spec) if self.real else None

    def exec_module(self, module):
        if self.name in _REPLACED:
            return
        self.real.exec_module(module)
        _PATCHES[self.name](module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _PATCHES and name not in _REPLACED:
            return None
        if name in _REPLACED:
            return importlib.machinery.ModuleSpec(name, _Loader(name, None))
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(name, spec.loader)
        return spec


# --- Fault 1: usrp_mpm.sys_utils.uio imports the C++ module usrp_mpm.libpyusrp_periphs,
# which a simulator build does not have (`import usrp_mpm` then fails: xports and
# periph_manager.common import UIO). The simulator never opens a UIO device, so a module
# whose UIO refuses to be made stands in. (Stubbing libpyusrp_periphs itself would break
# mpmlog, which expects an ImportError for it.)
def _uio_stand_in():
    mod = types.ModuleType("usrp_mpm.sys_utils.uio")

    class UIO:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("UIO devices do not exist in the MPM simulator "
                               "(oppsched's stand-in for usrp_mpm.sys_utils.uio)")

    mod.UIO = UIO
    mod.__oppsched_stand_in__ = True
    return mod


_REPLACED["usrp_mpm.sys_utils.uio"] = _uio_stand_in


# --- Fault 2: usrp_mpm.rpc_server imports `mprpc` (PyPI's MessagePack-RPC server), which
# Debian does not package, and whose last release (0.1.17) neither builds on Python 3.11 (its
# C files come from an old Cython: "fatal error: longintrepr.h: No such file or directory")
# nor runs against msgpack 1.0 (Debian 12: 1.0.3; it passes the removed `encoding=`). `import
# mprpc` gives a module whose RPCServer is oppsched_msgpack_rpc's, a MessagePack-RPC server
# with the interface MPMServer uses, on Debian's msgpack: no PyPI, no build. It stands in
# even where a PyPI mprpc is installed.
def _mprpc_stand_in():
    import oppsched_msgpack_rpc

    mod = types.ModuleType("mprpc")
    mod.RPCServer = oppsched_msgpack_rpc.RPCServer
    mod.__oppsched_stand_in__ = True
    return mod


_REPLACED["mprpc"] = _mprpc_stand_in


# --- Fault 3: pyroute2 0.7 (Debian 12) no longer accepts a list as IPRoute.get_links'
# argument, which usrp_mpm.sys_utils.net.get_iface_info passes (`get_links(links)` with
# links = link_lookup(...), a list): the simulator's transport manager fails to list the
# loopback interface. usrp_mpm.sys_utils.net gets an IPRoute whose get_links unpacks a list.
def _patch_net(module):
    base = module.IPRoute

    class IPRoute(base):
        def get_links(self, *argv, **kwarg):
            if len(argv) == 1 and isinstance(argv[0], (list, tuple)):
                argv = tuple(argv[0])
            return super().get_links(*argv, **kwarg)

    module.IPRoute = IPRoute


_PATCHES["usrp_mpm.sys_utils.net"] = _patch_net


# --- Fault 4: libuhd's first RPC call, get_device_info, fails with "Error during RPC call to
# `get_device_info'. Error message: std::bad_cast". The reply is a map whose values must all
# be strings (libuhd reads it as std::map<std::string, std::string>; msgpack-c's
# msgpack::type_error is a std::bad_cast), but one is nil: `mender_artifact`. usrp_mpm's
# periph_manager.base means to leave that key out on a simulated device without a Mender
# artifact (it catches FileNotFoundError from get_mender_artifact), but
# sys_utils.filesystem_status.get_mender_artifact itself swallows the missing
# /usr/bin/mender and returns None. periph_manager.base gets a get_mender_artifact that
# raises FileNotFoundError for that None, so the key is left out as intended (libuhd then
# shows mender_artifact as "UNKNOWN").
def _patch_periph_base(module):
    real = module.get_mender_artifact

    def get_mender_artifact(*args, **kwargs):
        artifact = real(*args, **kwargs)
        if artifact is None:
            raise FileNotFoundError("no Mender artifact on this host")
        return artifact

    module.get_mender_artifact = get_mender_artifact


_PATCHES["usrp_mpm.periph_manager.base"] = _patch_periph_base


# --- Fault 5: the simulator's RX streams run at a quarter of the sample rate. Its
# ChdrOutputStream sends one packet per StreamSpec.seconds_per_packet() = packet_samples /
# sample_rate, but packet_samples (the radio's "max words per packet" register as UHD 4.3
# writes it) counts payload bytes: 1484 for the 371 sc16 samples UHD's RX streamer takes per
# packet (its max_num_samps), and the simulator's sources fill payload_size = packet_samples
# bytes, as its finite streams count total_samples * 4 bytes. At 250 kS/s the stream
# delivered 62 785 samples/s. StreamSpec.seconds_per_packet gets the bytes' samples (4 bytes
# per sc16 sample) over the sample rate.
SC16_BYTES = 4


def _patch_rfnoc_common(module):
    def seconds_per_packet(self):
        assert self.packet_samples != 0
        assert self.sample_rate != 0
        return self.packet_samples / SC16_BYTES / self.sample_rate

    module.StreamSpec.seconds_per_packet = seconds_per_packet


_PATCHES["usrp_mpm.simulator.rfnoc_common"] = _patch_rfnoc_common


# --- Fault 6: a continuous RX stream stops after about 700 packets (260 000 samples), at any
# rate. UHD acknowledges the stream's packets with flow-control status packets (STRS), which
# the simulator's socket thread puts into the stream's queue of 100 with put_nowait; its
# ChdrOutputStream reads that queue only when the downstream buffer is full, which UHD's
# 2.5 MB capacity never is. The 101st STRS raises queue.Full in the socket thread ("Unable
# to decode packet: ", then the traceback in sim.log), which ends it: every later call
# times out. ChdrOutputStream.queue_packet gets a queue that does not fill: when it is full
# the oldest status is applied at once (each STRS carries the cumulative counts, so
# applying them in order is what the stream would have done).
def _patch_chdr_stream(module):
    import queue

    def queue_packet(self, packet):
        while True:
            try:
                self.strs_queue.put_nowait(packet)
                return
            except queue.Full:
                try:
                    old = self.strs_queue.get_nowait()
                except queue.Empty:
                    continue
                self._update_recv(old.get_payload_strs())

    module.ChdrOutputStream.queue_packet = queue_packet


_PATCHES["usrp_mpm.simulator.chdr_stream"] = _patch_chdr_stream


# --- Fault 7: the simulator's socket thread sends what its streams queue (RX data, TX flow
# control) from a SelectableQueue, which writes one wake-up byte per item into a socketpair
# and reads one per item taken. When the socket thread falls behind (the simulator starved
# of CPU for about 0.4 s at 250 kS/s), 280 bytes fill the socketpair: the next put waits
# for it to drain (under gevent, in the writer's greenlet), and a second writer waiting on
# the same socket raises gevent's ConcurrentObjectUseError, which ends that stream's worker
# (seen: a TX stream's flow-control answers, the PHY's usrp_sink then stalled for good).
# The queue gets wake-ups that never fill: one byte is unread while items are queued, put
# writes it only when none is, get reads it back when it takes the last item. Under
# gevent's monkey patching (usrp_mpm's) the streams' threads are greenlets of one OS
# thread, and neither method yields between its check and its write or read.
def _patch_chdr_endpoint(module):
    cls = module.SelectableQueue
    cls._oppsched_signalled = False

    def put(self, item, block=True, timeout=None):
        self._queue.put(item, block, timeout)
        if not self._oppsched_signalled:
            self._oppsched_signalled = True
            self._send_signal_tx.send(b"\x00")

    def get(self):
        item = self._queue.get_nowait()
        if self._queue.empty():
            self._send_signal_rx.recv(1)
            self._oppsched_signalled = False
        return item

    cls.put, cls.get = put, get


_PATCHES["usrp_mpm.simulator.chdr_endpoint"] = _patch_chdr_endpoint


def install() -> None:
    """Puts the import hook first on sys.meta_path (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
