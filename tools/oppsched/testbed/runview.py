"""The run folder as the run user's processes see it: a bind mount under
/run/oppsched-netns/views (:class:`RunView`), and the removal of the views of runs whose
runner is gone."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from oppsched.testbed.nsbase import OWNER_DIR, _proc_start_time, run_cmd

VIEW_DIR = OWNER_DIR / "views"


class RunView:
    """The run folder as the run user's processes see it: a bind mount of it at
    /run/oppsched-netns/views/PREFIX-RUNID, so that they reach it whatever the modes of
    its parents (a 0700 home or pytest folder). Use as a context manager; unmounted at
    exit, and by cleanup_stale() after a runner killed with SIGKILL."""

    def __init__(self, run_name: str, target: Path):
        self.run_name = run_name
        self.target = Path(target)
        self.path = VIEW_DIR / run_name
        self._mounted = False

    def __enter__(self) -> "RunView":
        VIEW_DIR.mkdir(parents=True, exist_ok=True)
        for d in (OWNER_DIR, VIEW_DIR):
            os.chmod(d, 0o755)
        # The owner record first: a concurrent cleanup_stale leaves the view alone.
        data = {"pid": os.getpid(), "start": _proc_start_time(os.getpid())}
        self.path.with_suffix(".json").write_text(json.dumps(data))
        self.path.mkdir(exist_ok=True)
        run_cmd(["mount", "--bind", str(self.target), str(self.path)])
        self._mounted = True
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._mounted:
            _unmount_view(self.path)
            self._mounted = False


def _mounted(path: Path) -> bool:
    # Not os.path.ismount: a bind mount from the same file system looks like a directory.
    want = str(path).encode()
    with open("/proc/self/mountinfo", "rb") as f:
        return any(line.split()[4] == want for line in f)


def _unmount_view(path: Path) -> None:
    if _mounted(path):
        if run_cmd(["umount", str(path)], check=False).returncode != 0:
            run_cmd(["umount", "-l", str(path)], check=False)
    for p in (path, path.with_suffix(".json")):
        try:
            p.rmdir() if p == path else p.unlink()
        except OSError:
            pass


def _stale_views(prefix: str) -> list[Path]:
    out = []
    if VIEW_DIR.is_dir():
        for p in VIEW_DIR.iterdir():
            if p.suffix or not re.fullmatch(rf"{re.escape(prefix)}-[0-9a-f]{{6}}", p.name):
                continue
            try:
                data = json.loads(p.with_suffix(".json").read_text())
                alive = _proc_start_time(data["pid"]) == data["start"]
            except (OSError, ValueError, KeyError, TypeError):
                alive = False
            if not alive:
                out.append(p)
    return out
