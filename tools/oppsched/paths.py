"""Where the tools find what is not Python code: the measured MCS tables and experiment
files (under the checkout's experiments/) and the build tree (the daemons, the delay stage,
the compiled modules).

One setting decides: the environment variable OPPSCHED_HOME, the top folder of an oppsched
checkout. Unset, it is the checkout this package sits in (the normal case: `make` installs
tools/ into .venv editable). A copy of the package installed elsewhere needs OPPSCHED_HOME;
without it, the first use raises an error that says so.
"""

from __future__ import annotations

import errno
import os
import stat
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
    loses power) sees the old file or the new one, never half of either.

    The temporary file is created relative to the folder's descriptor with O_EXCL and
    O_NOFOLLOW: root writes run.json and summary.json into a folder the run user owns,
    and a symlink planted under the temporary name must not make it truncate the file it
    names (safefs.UnsafePath names the link instead)."""
    from oppsched.safefs import UnsafePath, open_dir

    path = Path(path)
    tmp = f".{path.name}.tmp"
    dfd = open_dir(path.parent)
    try:
        for attempt in (0, 1):
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o666, dir_fd=dfd)
                break
            except FileExistsError:
                st = os.lstat(tmp, dir_fd=dfd)
                if not stat.S_ISREG(st.st_mode) or attempt:
                    raise UnsafePath(errno.ELOOP, f"{path.parent / tmp}: is a symlink or not a "
                                     "regular file; refusing to write through it as root "
                                     "(something in the run planted it: see docs/security.md)"
                                     ) from None
                os.unlink(tmp, dir_fd=dfd)  # a regular file left by an interrupted write
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return path
