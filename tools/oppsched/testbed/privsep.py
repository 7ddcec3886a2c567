"""Privilege separation of a run (docs/testbed.md, "Privilege separation"): the run user
the long-running processes switch to (:class:`RunUser`), the prefixes a process is
started with (PR_SET_PDEATHSIG, :func:`parent_check`), the capabilities tcpdump keeps
until it switches user, SCHED_FIFO where the machine grants it, and handing a run folder
back to whoever started the run."""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from oppsched.testbed.nsbase import NetnsError, is_root, run_cmd

# util-linux's setpriv (Essential on Debian) sets PR_SET_PDEATHSIG and execs the program.
PDEATHSIG = ("setpriv", "--pdeathsig", "KILL", "--")


def parent_check(runner_pid: int) -> list[str]:
    """A prefix that ends the program at once unless its parent is still `runner_pid`.

    PR_SET_PDEATHSIG only fires for a parent that dies after it was armed: a runner killed
    between its fork and setpriv's prctl (or between the uid change that clears it and
    setpriv arming it again) leaves an orphan that nothing stops. Placed after the last
    setpriv, this closes that window: had the runner died before the signal was armed, the
    program's parent is no longer the runner (every stage execs, none forks) and it exits
    with status 125; after the check, the armed PR_SET_PDEATHSIG takes over."""
    return ["/bin/sh", "-c", '[ "$PPID" = "$0" ] || exit 125; exec "$@"', str(int(runner_pid))]

# The system user processes of a run run as (tools/bootstrap.sh creates it; a run as root
# creates it when it is missing). Never `nobody`: other daemons of the host run as it, and
# a run's files and processes must be the run's alone. OPPSCHED_RUN_USER names another one.
RUN_USER = "oppsched"
RUN_USER_ENV = "OPPSCHED_RUN_USER"
# Capabilities a process may be given (setpriv names, without the cap_ prefix).
_CAP_NAMES = {"net_admin", "net_raw", "sys_nice", "bpf", "perfmon"}
# What tcpdump -Z USER needs until it has switched to USER: open the capture and switch
# (then it holds none). It writes to `-w -`, a file the runner opened (spawn's stdout), so
# it needs neither CAP_DAC_OVERRIDE nor CAP_CHOWN: as root with those it would open a
# path in the run user's folder, where a planted symlink could aim it at any file.
TCPDUMP_BOUNDING = ("net_raw", "net_admin", "setuid", "setgid")


@dataclass(frozen=True)
class RunUser:
    """The unprivileged user the long-running processes of a run switch to after set-up
    (docs/testbed.md, "Privilege separation")."""

    name: str
    uid: int
    gid: int

    @classmethod
    def resolve(cls, name: str | None = None) -> "RunUser":
        """`name`, else $OPPSCHED_RUN_USER, else `oppsched`, which is created (useradd
        --system, no home, no login shell) when it does not exist and this is root."""
        want = name or os.environ.get(RUN_USER_ENV) or None
        cand = want or RUN_USER
        try:
            pw = pwd.getpwnam(cand)
        except KeyError:
            if want:
                raise NetnsError(f"{RUN_USER_ENV}: no user {want!r} (tools/bootstrap.sh creates "
                                 f"{RUN_USER!r})") from None
            pw = cls._create(cand)
        if pw.pw_uid == 0:
            raise NetnsError(f"{RUN_USER_ENV}: {cand!r} is root; name an unprivileged user")
        if pw.pw_name == "nobody" or pw.pw_uid == 65534:
            raise NetnsError(f"{RUN_USER_ENV}: {cand!r} is the shared `nobody`; name (or let "
                             f"the run create) a user of its own, e.g. {RUN_USER!r}")
        return cls(pw.pw_name, pw.pw_uid, pw.pw_gid)

    @staticmethod
    def _create(name: str):
        if not is_root():
            raise NetnsError(f"run user: {name!r} does not exist and only root can create it "
                             "(run tools/bootstrap.sh, or the run as root)")
        cp = run_cmd(["useradd", "--system", "--user-group", "--no-create-home",
                      "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
                     check=False)
        try:
            return pwd.getpwnam(name)
        except KeyError:
            raise NetnsError(f"run user: {name!r} does not exist and `useradd --system {name}` "
                             f"failed (exit {cp.returncode}): {cp.stderr.strip()}; the run "
                             "refuses to fall back to `nobody`") from None

    def setpriv_argv(self, caps: Sequence[str] = ()) -> list[str]:
        """setpriv(1) that switches to this user, keeps exactly `caps` (ambient, so that
        they survive the exec of the program; the bounding set is cut to them too), sets
        no_new_privs and, as the uid change clears it, PR_SET_PDEATHSIG again."""
        bad = [c for c in caps if c not in _CAP_NAMES]
        if bad:
            raise ValueError(f"caps: {bad} not among {sorted(_CAP_NAMES)}")
        keep = "".join(f",+{c}" for c in sorted(set(caps)))
        argv = ["setpriv", "--reuid", str(self.uid), "--regid", str(self.gid),
                "--init-groups" if self._has_passwd_entry() else "--clear-groups",
                "--inh-caps", "-all" + keep]
        if keep:
            argv += ["--ambient-caps", "-all" + keep]
        return argv + ["--bounding-set", "-all" + keep, "--no-new-privs",
                       "--pdeathsig", "KILL", "--"]

    def _has_passwd_entry(self) -> bool:
        try:
            return pwd.getpwuid(self.uid).pw_name == self.name
        except KeyError:
            return False

    def own(self, path: Path, mode: int = 0o755) -> None:
        """Makes directory `path` (created if missing) this user's, with `mode`. Refuses a
        symlink."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise NetnsError(f"{path}: not a directory (a symlink?); refusing to hand it to "
                             f"{self.name}")
        os.chown(path, self.uid, self.gid, follow_symlinks=False)
        os.chmod(path, mode)

    def check_writable(self, path: Path) -> None:
        """Raises NetnsError unless this user can create files in `path` (every parent
        must be searchable by it)."""
        cp = run_cmd([*self.setpriv_argv(), "test", "-w", str(path), "-a", "-x", str(path)],
                     check=False)
        if cp.returncode != 0:
            raise NetnsError(f"{path}: user {self.name} (uid {self.uid}) cannot write here; a "
                             "parent directory is probably not searchable by others (o+x)")


def invoking_user() -> tuple[int, int]:
    """(uid, gid) of who started the run: sudo's caller, or the real user."""
    try:
        return int(os.environ["SUDO_UID"]), int(os.environ["SUDO_GID"])
    except (KeyError, ValueError):
        return os.getuid(), os.getgid()


def hand_back(path: Path, uid: int, gid: int) -> None:
    """chown -R (never following symlinks) of a run folder to the invoking user."""
    path = Path(path)
    if not path.exists():
        return
    os.chown(path, uid, gid, follow_symlinks=False)
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            try:
                os.chown(os.path.join(root, n), uid, gid, follow_symlinks=False)
            except FileNotFoundError:
                pass


_FIFO_OK: dict[int, bool] = {}


def fifo_allowed(prio: int) -> bool:
    """Whether this machine grants SCHED_FIFO at `prio` (a container may have no real-time
    budget: the program then reports that it runs with normal scheduling, as before)."""
    if prio not in _FIFO_OK:
        _FIFO_OK[prio] = run_cmd(["chrt", "-f", str(prio), "true"], check=False).returncode == 0
    return _FIFO_OK[prio]
