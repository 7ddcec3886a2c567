"""Root's file operations in a folder another user can write (docs/security.md, "The run
folder and experiment files").

While a run goes on, its folder belongs to the run user: a compromised run process can put
a symlink (or a folder full of them) where root will later write, and a plain open() by
root would then truncate or append to whatever the link names (/etc/shadow). Everything
here opens names relative to a directory descriptor with O_NOFOLLOW on every component
below a trusted base, so a planted link makes the operation fail with UnsafePath naming
it, and nothing outside the folder is touched. The base itself (the run folder's path) is
the caller's: its parents are not the run user's to swap.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(OSError):
    """A name root was to open in a run folder is a symlink (or another non-regular file):
    planted by a process of the run, so the operation was refused."""


def _refuse(path, what: str) -> UnsafePath:
    return UnsafePath(errno.ELOOP, f"{path}: {what}; refusing to follow it as root "
                      "(something in the run planted it: see docs/security.md)")


def open_dir(path) -> int:
    """A descriptor of directory `path`, whose last component must not be a symlink."""
    try:
        return os.open(path, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refuse(path, "is a symlink or not a directory") from None
        raise


def open_beneath(base, rel, flags: int, mode: int = 0o644) -> int:
    """os.open of BASE/REL where no component of REL may be a symlink: each folder is
    opened with O_NOFOLLOW relative to the one before it, the file too. A file that
    exists must be a regular one with a single link (a hard link to a file of root's is
    refused as well). Returns the descriptor (the caller closes it)."""
    if flags & os.O_TRUNC:
        # O_TRUNC would cut the file before the checks below see what it is.
        raise ValueError("open_beneath: no O_TRUNC (use O_CREAT | O_EXCL for a new file)")
    base = Path(base)
    parts = Path(rel).parts
    if not parts or any(p in ("", ".", "..") or "/" in p for p in parts) or Path(rel).is_absolute():
        raise ValueError(f"{rel!r}: not a relative path of plain names")
    dfd = open_dir(base)
    try:
        here = base
        for p in parts[:-1]:
            here = here / p
            try:
                nfd = os.open(p, _DIR_FLAGS, dir_fd=dfd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refuse(here, "is a symlink or not a directory") from None
                raise
            os.close(dfd)
            dfd = nfd
        target = here / parts[-1]
        try:
            # O_NONBLOCK: a FIFO planted under the name must not hang the runner.
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         mode, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and stat.S_ISLNK(
                    os.lstat(parts[-1], dir_fd=dfd).st_mode)):
                raise _refuse(target, "is a symlink") from None
            if exc.errno == errno.ENXIO:  # a FIFO with no reader (O_NONBLOCK write)
                raise _refuse(target, "is not a regular file with a single link") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            raise _refuse(target, "is not a regular file with a single link")
        os.set_blocking(fd, True)
        return fd
    finally:
        os.close(dfd)


def open_log(path, base=None):
    """A log file opened for appending (binary), as root, without following a symlink at
    any component below `base` (default: the log's own folder)."""
    path = Path(path)
    base = Path(base) if base is not None else path.parent
    fd = open_beneath(base, path.relative_to(base), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    return os.fdopen(fd, "ab")


def find_symlinks(top) -> list[Path]:
    """Every symlink under `top` (os.walk follows none), sorted."""
    out = []
    for root, dirs, files in os.walk(top):
        for n in dirs + files:
            p = Path(root) / n
            if p.is_symlink():
                out.append(p)
    return sorted(out)


def remove_symlinks(top) -> list[str]:
    """Removes every symlink under `top` (unlink removes the link, never its target) and
    returns them as 'REL -> TARGET' for the record: after a run, root's analysis, plots
    and report write into the folder with ordinary opens, which must find no link there."""
    top = Path(top)
    found = []
    for p in find_symlinks(top):
        try:
            target = os.readlink(p)
            p.unlink()
        except FileNotFoundError:
            continue
        found.append(f"{p.relative_to(top)} -> {target}")
    return found
