"""The MAC library, from the same C++ the daemons use (pybind11 module `_oppsched_mac`).

The extension is built by CMake into build/python, which the project's venv puts on
sys.path (see tools/bootstrap.sh). Build it with `make build`.
"""

try:
    from _oppsched_mac import *  # noqa: F401,F403
    from _oppsched_mac import __doc__  # noqa: F401
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "oppsched.mac needs the compiled extension _oppsched_mac: run `make build` "
        f"and use the project's .venv ({exc})"
    ) from exc
