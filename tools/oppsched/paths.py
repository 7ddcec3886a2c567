"""Where the tools find what is not Python code: the measured MCS tables and experiment
files (under the checkout's experiments/) and the build tree (the daemons, the delay stage,
the compiled modules).

One setting decides: the environment variable OPPSCHED_HOME, the top folder of an oppsched
checkout. Unset, it is the checkout this package sits in (the normal case: `make` installs
tools/ into .venv editable). A copy of the package installed elsewhere needs OPPSCHED_HOME;
without it, the first use raises an error that says so.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "OPPSCHED_HOME"
# The build tree, when it is not <checkout>/build (docs/testbed.md).
BUILD_ENV = "OPPSCHED_BUILD"


def home() -> Path:
    """The oppsched checkout: $OPPSCHED_HOME, else the one this package sits in."""
    env = os.environ.get(HOME_ENV)
    if env:
        p = Path(env).resolve()
        if not (p / "experiments").is_dir():
            raise RuntimeError(f"{HOME_ENV}: {env!r} is not an oppsched checkout (no experiments/)")
        return p
    p = Path(__file__).resolve().parents[2]
    if not (p / "experiments").is_dir() or not (p / "tools" / "oppsched").is_dir():
        raise RuntimeError(f"{HOME_ENV} is not set and this oppsched package ({Path(__file__).parent}) "
                           "is not inside a checkout: set it to the checkout's top folder")
    return p


def experiments_dir() -> Path:
    """experiments/: the experiment files and the measured link curves and MCS tables."""
    return home() / "experiments"


def default_build_dir() -> Path:
    """The build tree `make` writes (build/ in the checkout)."""
    return home() / "build"


def build_dir(explicit: str | Path | None = None) -> Path:
    """The build tree of a run: `explicit` (an experiment's build_dir) if given, else
    $OPPSCHED_BUILD, else default_build_dir()."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(BUILD_ENV)
    return Path(env) if env else default_build_dir()


def package_parent() -> Path:
    """The folder holding this oppsched package: what a child process started with
    `python -m oppsched...` needs on PYTHONPATH to run the same code."""
    return Path(__file__).resolve().parents[1]


def data_file(path: str | Path) -> Path:
    """A file an experiment names (an MCS table, link curves, an SNR trace): absolute as
    given; a relative path from the current folder if it is there, else from the checkout,
    so that experiments/<paper>/<file>.csv works from anywhere."""
    p = Path(path)
    if p.is_absolute() or p.exists():
        return p.resolve()
    return home() / p


def write_atomic(path, data: str | bytes) -> Path:
    """Writes a result file whole or not at all: into a temporary name in the same folder,
    fsynced, renamed over `path`, and the folder fsynced, so a reader (or a machine that
    loses power) sees the old file or the new one, never half of either."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path
