"""One writer per results folder: the lock `oppsched run` and `oppsched sweep` hold on OUT,
and the check that OUT is a results folder before a run replaces it (docs/security.md,
"The run folder and experiment files").

A run writes into .OUT.partial beside OUT and replaces OUT (and OUT.failed) by renames; a
sweep writes into OUT and resumes it. Two of them with the same OUT would delete each
other's staging folders, so each holds an exclusive flock on .OUT.lock (beside OUT, so it
also covers the staging folders) for as long as it runs; the second one is refused,
naming the holder. The lock file records the holder (pid, command line, start time) for
that message; it is removed by its holder at the end (a holder killed with SIGKILL leaves
it, unlocked, and the next run takes it over).
"""

from __future__ import annotations

import fcntl
import functools
import inspect
import json
import os
import sys
import time
from pathlib import Path

from oppsched.config import ConfigError

# What a folder `oppsched run` may replace holds at its top: experiment.yaml (every run
# writes it), config.json or run.json (a single run's folder), sweep.json (a sweep's).
RUN_MARKERS = ("experiment.yaml", "config.json", "run.json", "sweep.json")
SWEEP_MARKER = "sweep.json"


class OutBusy(ConfigError):
    """Another run or sweep holds the lock on the same OUT."""


def lock_path(outdir) -> Path:
    outdir = Path(outdir)
    return outdir.parent / f".{outdir.name}.lock"


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        h = json.loads(os.read(fd, 65536) or b"{}")
        return (f"pid {h['pid']} (`{h['command']}`), started "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(h['started']))}")
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not recorded itself yet"


class OutLock:
    """Exclusive lock on OUT for a run or a sweep (what: "run" or "sweep"). Use as a
    context manager; OutBusy (naming the holder) if another process holds it."""

    def __init__(self, outdir, what: str = "run"):
        self.outdir = Path(outdir)
        self.what = what
        self.path = lock_path(outdir)
        self.fd: int | None = None

    def acquire(self) -> "OutLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                who = _holder(fd)
                os.close(fd)
                raise OutBusy(f"--out: {self.outdir} is in use by another run or sweep: {who}; "
                              f"wait for it to end or choose another --out (lock: {self.path})"
                              ) from None
            # The holder before us may have removed the file between our open and our lock:
            # then ours is a lock on a name no one else sees; start again.
            try:
                same = os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.fd = fd
        me = {"pid": os.getpid(), "command": " ".join(["oppsched", *sys.argv[1:]])
              if Path(sys.argv[0]).name in ("oppsched", "__main__.py") else " ".join(sys.argv),
              "started": time.time(), "what": self.what}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink()  # while still holding it: a waiter re-checks the inode
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> "OutLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def check_replaceable(outdir, what: str = "run") -> None:
    """ConfigError naming the path unless `outdir` may be written over by `what`: missing,
    empty, or (a run) a previous run's or sweep's results folder (RUN_MARKERS at its top),
    or (a sweep, which resumes it) a sweep folder (sweep.json). A run also replaces
    OUT.failed: the same rule holds for it."""
    outdir = Path(outdir)
    paths = [outdir] + ([outdir.parent / f"{outdir.name}.failed"] if what == "run" else [])
    markers = RUN_MARKERS if what == "run" else (SWEEP_MARKER,)
    for p in paths:
        if not os.path.lexists(p):
            continue
        if p.is_symlink() or not p.is_dir():
            raise ConfigError(f"--out: {p} exists and is not a folder (or is a symlink); "
                              f"`oppsched {what}` replaces only a results folder")
        if not any(True for _ in p.iterdir()):
            continue
        if not any((p / m).is_file() for m in markers):
            raise ConfigError(f"--out: {p} is not empty and holds no {' or '.join(markers)}: "
                              f"not a results folder of `oppsched {what}`, which would "
                              f"{'replace' if what == 'run' else 'write into'} it; choose "
                              "another --out (or remove it yourself)")


def holding_out(what: str):
    """Decorator of run_experiment / run_sweep: the call holds OutLock on its `outdir`
    argument and checks it with check_replaceable (under the lock) before the body runs."""
    def deco(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            outdir = sig.bind(*args, **kwargs).arguments["outdir"]
            with OutLock(outdir, what):
                check_replaceable(outdir, what)
                return fn(*args, **kwargs)
        return wrapper
    return deco
