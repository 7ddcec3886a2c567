"""Host settings a run has to change (a congestion control added to
net.ipv4.tcp_allowed_congestion_control, /dev/net/tun opened to the run user), recorded in
/run/oppsched-netns and restored when the last live run that needs them ends."""

from __future__ import annotations

import fcntl
import json
import os
import stat
from pathlib import Path

from oppsched.testbed.nsbase import OWNER_DIR, _owner_alive

HOST_STATE = OWNER_DIR / "host-changes.json"
ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


class _HostLock:
    """An exclusive lock on the host-changes record (runs may share one machine)."""

    def __enter__(self):
        OWNER_DIR.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(OWNER_DIR / "host-changes.lock", os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)

    @staticmethod
    def read() -> dict:
        try:
            d = json.loads(HOST_STATE.read_text())
            return d if isinstance(d, dict) else {}
        except (OSError, ValueError):
            return {}

    @staticmethod
    def write(d: dict) -> None:
        tmp = HOST_STATE.with_suffix(".tmp")
        tmp.write_text(json.dumps(d))
        tmp.replace(HOST_STATE)


def allow_congestion_control(name: str, run_name: str) -> bool:
    """Adds `name` to the host's net.ipv4.tcp_allowed_congestion_control for run
    `run_name` if it is not there; returns True if this call added it. What runs added is
    recorded in /run/oppsched-netns, and release_host_changes() takes it out again once
    no live run needs it."""
    with _HostLock() as lock:
        state = lock.read()
        users = state.setdefault("allowed_cc", {})
        allowed = ALLOWED_CC.read_text().split()
        added = name not in allowed
        if added:
            ALLOWED_CC.write_text(" ".join(allowed + [name]))
            users[name] = []
        if name in users and run_name not in users[name]:
            users[name].append(run_name)
        lock.write(state)
    return added


TUN_DEV = Path("/dev/net/tun")


def allow_tun_access(run_name: str) -> bool:
    """Makes /dev/net/tun 0666 (Debian's udev default; some containers have 0600) for run
    `run_name`, so that a daemon running as the run user can attach to the TUN devices the
    run made its own; returns True if this call changed the mode. Recorded like
    allow_congestion_control and restored by release_host_changes()."""
    with _HostLock() as lock:
        state = lock.read()
        rec = state.get("tun_mode")
        mode = stat.S_IMODE(os.stat(TUN_DEV).st_mode)
        changed = mode & 0o006 != 0o006
        if changed:
            os.chmod(TUN_DEV, mode | 0o666)
            rec = state["tun_mode"] = {"mode": mode, "runs": []}
        if rec is not None and run_name not in rec["runs"]:
            rec["runs"].append(run_name)
        lock.write(state)
    return changed


def release_host_changes(run_name: str) -> list[str]:
    """The run no longer needs what it changed on the host: each setting no live run needs
    any more is restored. Returns what was restored."""
    restored = []
    with _HostLock() as lock:
        state = lock.read()
        users = state.get("allowed_cc", {})
        for name in list(users):
            users[name] = [r for r in users[name] if r != run_name and _owner_alive(r)]
            if not users[name]:
                allowed = ALLOWED_CC.read_text().split()
                if name in allowed:
                    ALLOWED_CC.write_text(" ".join(a for a in allowed if a != name))
                    restored.append(f"removed {name} from the host's "
                                    "net.ipv4.tcp_allowed_congestion_control")
                del users[name]
        rec = state.get("tun_mode")
        if rec is not None:
            rec["runs"] = [r for r in rec["runs"] if r != run_name and _owner_alive(r)]
            if not rec["runs"]:
                os.chmod(TUN_DEV, rec["mode"])
                restored.append(f"{TUN_DEV} back to mode {rec['mode']:04o}")
                del state["tun_mode"]
        lock.write(state)
    return restored
