"""The run folder before and after a run: the outputs a new run removes first, and the room
kept for the end of a run whose disk fills up during it (RESERVE_BYTES)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from oppsched.safefs import open_beneath, open_dir

OUTPUT_GLOBS = ("*.pcap", "flow.*.json", "flow.*.socket.csv",
                "transfers.*.csv", "slots.csv", "packets.csv", "windows.*.csv",
                "medium.csv", "phy_slots.csv", "client.*.events.csv", "mcs_table.csv",
                "*.stats.json", "run.json", "processes.json", "apd.yaml", "client.*.yaml",
                "phy.yaml", "summary.json", "*.png", "wrc.*", "chaos.*", "*.killed.*",
                "*.partial", "*.crashed.*", "plugin.*.py", "plugin.*.so")


def _clean(rundir: Path) -> None:
    for g in OUTPUT_GLOBS:
        for p in rundir.glob(g):
            p.unlink()
    for d in ("logs", "zmq", "netns"):
        shutil.rmtree(rundir / d, ignore_errors=True)
    _release_space(rundir)


# Room kept for the end of a run whose disk fills up during it (docs/testbed.md,
# "Reliability"): a file of RESERVE_BYTES the runner allocates in the run folder at the
# start and removes before it stops the daemons, so that their last trace writes and final
# stats, the capture tools' last lines, run.json and summary.json still fit and say what
# was lost. Enough for those (tens of kB each) and the plots.
RESERVE_NAME = ".space-reserve"
RESERVE_BYTES = 8 << 20


def _reserve_space(rundir: Path) -> str | None:
    """Allocates the reserve (posix_fallocate: blocks, not a sparse file); a warning for
    run.json if it could not be (the disk is already that full)."""
    try:
        fd = open_beneath(rundir, RESERVE_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        return f"{RESERVE_NAME}: {exc}: no room kept for the end of the run"
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError as exc:
        return f"{RESERVE_NAME}: {exc}: no room kept for the end of the run"
    finally:
        os.close(fd)
    return None


def _release_space(rundir: Path) -> None:
    """Removes the reserve (unlink(2) relative to the folder follows no link)."""
    try:
        dfd = open_dir(rundir)
    except OSError:
        return
    try:
        os.unlink(RESERVE_NAME, dir_fd=dfd)
    except FileNotFoundError:
        pass
    finally:
        os.close(dfd)
