"""The MAC library, from the same C++ the daemons use (pybind11 module `_oppsched_mac`).

The extension is built by CMake into build/python, which the project's venv puts on
sys.path (see tools/bootstrap.sh). Build it with `make build`.

Without a build this module still imports, so that what only reads names and registries
(oppsched.names, oppsched.registry: committed data) works; reading any attribute then
raises oppsched.build.BuildMissing naming `_oppsched_mac`.
"""

from oppsched.build import MAC, BuildMissing

try:
    from _oppsched_mac import *  # noqa: F401,F403
    from _oppsched_mac import __doc__  # noqa: F401
except ImportError as _exc:  # only without a build
    _missing = BuildMissing(MAC, str(_exc))

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise BuildMissing(_missing.module, _missing.reason)
