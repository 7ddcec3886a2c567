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


def install() -> None:
    """Puts the import hook first on sys.meta_path (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
