"""Per-testbed keys (docs/security.md): the ZeroMQ CURVE key pairs of the apd and of every
client, and the per-run PDU integrity tag key.

    oppsched keys generate DIR --users ue0 ue1

writes into DIR (0700, created if missing), keeping what is already there so that the keys
persist across runs and lab hosts:

    apd.public, apd.secret            the apd's CURVE key pair
    <user>.public, <user>.secret      one CURVE key pair per client (its device name)
    integrity.key                     the integrity tag key (32 hexadecimal digits)

Public keys are 0644, secret ones 0600 (the daemons refuse a secret key file that group or
others can access). Key files hold the Z85 text of the key (40 characters), as
zmq_curve_keypair writes it. A run with security.keys_dir copies what it needs into
RUN_DIR/keys (the run user's, 0600); without keys_dir, it generates fresh ones there.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

import zmq

from oppsched.config import ConfigError

APD = "apd"
INTEGRITY = "integrity.key"


def _write(path: Path, text: str, mode: int) -> None:
    """Creates `path` with `mode` from the start (never readable by others in between)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")


def generate(keydir: Path, users: list[str]) -> list[Path]:
    """Writes the missing keys of the apd, of `users` and the integrity key into `keydir`;
    returns the files written (existing keys are kept)."""
    if not zmq.has("curve"):
        raise ConfigError("this libzmq has no CURVE support (zmq.has('curve') is False)")
    keydir = Path(keydir)
    keydir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(keydir, 0o700)
    written = []
    for name in [APD, *users]:
        if name == APD and users.count(APD):
            raise ConfigError(f"--users: {APD!r} is the apd's key name")
        pub, sec = keydir / f"{name}.public", keydir / f"{name}.secret"
        if pub.exists() and sec.exists():
            continue
        if pub.exists() or sec.exists():
            raise ConfigError(f"{keydir}: {name} has only one of {pub.name}, {sec.name}; "
                              "remove it to generate a new pair")
        p, s = zmq.curve_keypair()
        _write(sec, s.decode(), 0o600)
        _write(pub, p.decode(), 0o644)
        written += [pub, sec]
    ik = keydir / INTEGRITY
    if not ik.exists():
        _write(ik, secrets.token_hex(16), 0o600)
        written.append(ik)
    return written


def required(users: list[str], curve: bool, integrity: bool) -> list[str]:
    """The key files a run needs."""
    names = []
    if curve:
        names += [f"{APD}.secret", f"{APD}.public"]
        for u in users:
            names += [f"{u}.secret", f"{u}.public"]
    if integrity:
        names.append(INTEGRITY)
    return names


def install(rundir: Path, keydir: Path | None, users: list[str], curve: bool, integrity: bool,
            uid: int | None = None, gid: int | None = None) -> Path:
    """RUN_DIR/keys with the key files the run needs: copied from `keydir`
    (security.keys_dir) or, without one, freshly generated. Owned by uid/gid (the run
    user) when given. Errors name security.keys_dir and the missing file."""
    dst = Path(rundir) / "keys"
    if keydir is None:
        generate(dst, users)
    else:
        keydir = Path(keydir)
        if not keydir.is_dir():
            raise ConfigError(f"security.keys_dir: {str(keydir)!r} is not a directory "
                              f"(make one with `oppsched keys generate {keydir} --users "
                              f"{' '.join(users)}`)")
        dst.mkdir(mode=0o700, parents=True, exist_ok=True)
        for name in required(users, curve, integrity):
            src = keydir / name
            if not src.is_file():
                raise ConfigError(f"security.keys_dir: {str(keydir)!r} has no {name} (run "
                                  f"`oppsched keys generate {keydir} --users "
                                  f"{' '.join(users)}`; it keeps existing keys)")
            if name.endswith(".secret") or name == INTEGRITY:
                if os.stat(src).st_mode & 0o077:
                    raise ConfigError(f"security.keys_dir: {src} is accessible by group or "
                                      "others; chmod 600 it")
            shutil.copyfile(src, dst / name)
            os.chmod(dst / name, 0o644 if name.endswith(".public") else 0o600)
    os.chmod(dst, 0o700)
    if uid is not None:
        for p in [dst, *dst.iterdir()]:
            os.chown(p, uid, gid if gid is not None else -1, follow_symlinks=False)
    return dst


def add_parser(sub) -> None:
    k = sub.add_parser("keys", help="per-testbed keys: CURVE key pairs for the apd and the "
                       "clients, the PDU integrity tag key (docs/security.md)")
    ks = k.add_subparsers(dest="keys_cmd", required=True)
    g = ks.add_parser("generate", help="write the missing keys into DIR (0700; secret files "
                      "0600; existing keys kept)")
    g.add_argument("dir", help="key folder, e.g. /etc/oppsched/keys/labA")
    g.add_argument("--users", nargs="+", required=True, metavar="NAME",
                   help="the clients' device names (devices[].name)")
    g.set_defaults(fn=_cmd_generate)


def _cmd_generate(a) -> int:
    for u in a.users:
        if not u.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise ConfigError(f"--users: {u!r} is not a device name")
    written = generate(Path(a.dir), a.users)
    print(f"oppsched keys: {len(written)} file(s) written into {a.dir}"
          + ("" if written else " (every key was there already)"))
    for p in written:
        print(f"  {p}")
    return 0
