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

    oppsched keys cluster DIR

writes, into the same kind of folder, the TLS material of a Dask cluster that runs sweep
points (`oppsched sweep --cluster tls://...`, docs/sweeps.md): a certificate authority of
its own and a certificate and key for the scheduler, the workers and the client, all 0600:

    cluster-ca.pem, cluster-ca.key                  the cluster's CA (its key stays here)
    cluster-scheduler.pem, cluster-scheduler.key    dask-scheduler --tls-cert/--tls-key
    cluster-worker.pem, cluster-worker.key          dask-worker --tls-cert/--tls-key
    cluster-client.pem, cluster-client.key          oppsched sweep --cluster-keys DIR
"""

from __future__ import annotations

import datetime
import os
import secrets
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
    from oppsched.safefs import open_dir

    dst = Path(rundir) / "keys"
    if dst.is_symlink():  # the run folder is the run user's: RUN_DIR/keys may be planted
        open_dir(dst)  # raises safefs.UnsafePath naming it
    if keydir is None:
        generate(dst, users)
    else:
        _copy_keys(Path(keydir), dst, required(users, curve, integrity), users)
    # Modes and owners through a descriptor of the folder (never through a link).
    dfd = open_dir(dst)
    try:
        os.fchmod(dfd, 0o700)
        if uid is not None:
            g = gid if gid is not None else -1
            os.fchown(dfd, uid, g)
            for name in os.listdir(dfd):
                os.chown(name, uid, g, dir_fd=dfd, follow_symlinks=False)
    finally:
        os.close(dfd)
    return dst


# ----------------------------------------------------------------------------------------
# The sweep cluster's TLS material (Dask distributed, docs/sweeps.md and docs/security.md)

CLUSTER_CA = "cluster-ca"
CLUSTER_ROLES = ("scheduler", "worker", "client")
# Long enough that a lab does not lose its cluster in the middle of a campaign; the CA's
# key never leaves the folder, so reissuing is `rm cluster-*; oppsched keys cluster DIR`.
CLUSTER_VALID_DAYS = 5 * 365


def cluster_files(keydir, role: str) -> tuple[Path, Path]:
    """(certificate, key) of `role` ("ca", "scheduler", "worker" or "client") in `keydir`."""
    stem = CLUSTER_CA if role == "ca" else f"cluster-{role}"
    return Path(keydir) / f"{stem}.pem", Path(keydir) / f"{stem}.key"


def _pem_key(key) -> str:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode().strip()


def _certificate(subject: str, key, issuer_name, issuer_key, ca: bool):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "oppsched sweep cluster"),
                      x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    b = (x509.CertificateBuilder()
         .subject_name(name)
         .issuer_name(issuer_name if issuer_name is not None else name)
         .public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         # an hour back: a worker whose clock is a little behind still accepts it
         .not_valid_before(now - datetime.timedelta(hours=1))
         .not_valid_after(now + datetime.timedelta(days=CLUSTER_VALID_DAYS))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None),
                        critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                        critical=False)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
             issuer_key.public_key()), critical=False))
    if ca:
        b = b.add_extension(x509.KeyUsage(
            digital_signature=False, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
    else:
        # Every member both connects and accepts connections (the scheduler dials workers,
        # workers dial each other), and Dask checks both ends' certificates.
        b = (b.add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=True, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                   ExtendedKeyUsageOID.CLIENT_AUTH]),
                            critical=False))
    return b.sign(issuer_key, hashes.SHA256())


def generate_cluster(keydir) -> list[Path]:
    """Writes the missing TLS files of the sweep cluster into `keydir` (0700): a CA and a
    certificate and key for the scheduler, the workers and the client, every file 0600.
    Existing files are kept, so the command can be run again; a certificate without its key
    (or the reverse), or certificates without the CA that signed them, are refused."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
    except ImportError:
        raise ConfigError("oppsched keys cluster needs the Python package cryptography "
                          "(Debian's python3-cryptography; tools/bootstrap.sh installs it)")
    keydir = Path(keydir)
    keydir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(keydir, 0o700)
    written: list[Path] = []
    for role in ("ca", *CLUSTER_ROLES):
        cert, key = cluster_files(keydir, role)
        if cert.exists() != key.exists():
            raise ConfigError(f"{keydir}: only one of {cert.name}, {key.name}; remove it to "
                              "generate a new pair")
    ca_cert, ca_key = cluster_files(keydir, "ca")
    if ca_cert.exists():
        ca = x509.load_pem_x509_certificate(ca_cert.read_bytes())
        cakey = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    else:
        stale = [cluster_files(keydir, r)[0].name for r in CLUSTER_ROLES
                 if cluster_files(keydir, r)[0].exists()]
        if stale:
            # They were signed by a CA that is gone: a new CA would not vouch for them.
            raise ConfigError(f"{keydir}: {', '.join(stale)} but no {ca_cert.name}: remove "
                              "the cluster-* files to make a new cluster CA")
        cakey = ec.generate_private_key(ec.SECP256R1())
        ca = _certificate("oppsched sweep cluster CA", cakey, None, cakey, ca=True)
        _write(ca_key, _pem_key(cakey), 0o600)
        _write(ca_cert, ca.public_bytes(serialization.Encoding.PEM).decode().strip(), 0o600)
        written += [ca_cert, ca_key]
    for role in CLUSTER_ROLES:
        cert, key = cluster_files(keydir, role)
        if cert.exists():
            continue
        k = ec.generate_private_key(ec.SECP256R1())
        c = _certificate(f"oppsched sweep {role}", k, ca.subject, cakey, ca=False)
        _write(key, _pem_key(k), 0o600)
        _write(cert, c.public_bytes(serialization.Encoding.PEM).decode().strip(), 0o600)
        written += [cert, key]
    return written


def cluster_security(keydir, role: str = "client"):
    """The distributed.security.Security of `role` with the files of `keydir`: TLS required,
    the peer's certificate checked against the cluster's CA. Errors name --cluster-keys and
    the file (missing, or a key that group or others can read)."""
    from distributed.security import Security

    keydir = Path(keydir)
    if not keydir.is_dir():
        raise ConfigError(f"--cluster-keys: {str(keydir)!r} is not a directory (make one with "
                          f"`oppsched keys cluster {keydir}`)")
    ca = cluster_files(keydir, "ca")[0]
    cert, key = cluster_files(keydir, role)
    for f in (ca, cert, key):
        if not f.is_file():
            raise ConfigError(f"--cluster-keys: {str(keydir)!r} has no {f.name} (run "
                              f"`oppsched keys cluster {keydir}`; it keeps existing files)")
    if os.stat(key).st_mode & 0o077:
        raise ConfigError(f"--cluster-keys: {key} is accessible by group or others; "
                          "chmod 600 it")
    return Security(require_encryption=True, tls_ca_file=str(ca),
                    **{f"tls_{role}_cert": str(cert), f"tls_{role}_key": str(key)})


def _copy_keys(keydir: Path, dst: Path, names: list[str], users: list[str]) -> None:
    """Copies `names` from security.keys_dir into dst as root without following a symlink:
    the folder and each file are opened with O_NOFOLLOW (a link there could make root
    copy any file it can read into a folder the run user reads), the folder must not be
    writable by group or others (anyone who can write it can swap a key), the files must
    be regular and a secret one readable by its owner alone."""
    import stat

    from oppsched.safefs import UnsafePath, open_beneath, open_dir

    hint = f"`oppsched keys generate {keydir} --users {' '.join(users)}`"
    try:
        kfd = open_dir(keydir)
    except UnsafePath:
        raise ConfigError(f"security.keys_dir: {str(keydir)!r} is a symlink or not a "
                          "directory; name the key folder itself") from None
    except FileNotFoundError:
        raise ConfigError(f"security.keys_dir: {str(keydir)!r} is not a directory (make one "
                          f"with {hint})") from None
    try:
        mode = os.fstat(kfd).st_mode
        if mode & 0o022:
            raise ConfigError(f"security.keys_dir: {str(keydir)!r} is writable by group or "
                              f"others (mode {mode & 0o7777:04o}); chmod 700 it")
        data = {}
        for name in names:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=kfd)
            except FileNotFoundError:
                raise ConfigError(f"security.keys_dir: {str(keydir)!r} has no {name} (run "
                                  f"{hint}; it keeps existing keys)") from None
            except OSError as exc:
                raise ConfigError(f"security.keys_dir: {keydir / name} cannot be opened "
                                  f"without following a symlink ({exc.strerror}); put the "
                                  "key file itself there") from None
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise ConfigError(f"security.keys_dir: {keydir / name} is not a regular "
                                      "file")
                if (name.endswith(".secret") or name == INTEGRITY) and st.st_mode & 0o077:
                    raise ConfigError(f"security.keys_dir: {keydir / name} is accessible by "
                                      "group or others; chmod 600 it")
                data[name] = f.read()
    finally:
        os.close(kfd)
    dst.mkdir(mode=0o700, parents=True, exist_ok=True)
    dfd = open_dir(dst)
    try:
        for name in data:
            try:  # a copy of an earlier run: replaced, never written through
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                pass
    finally:
        os.close(dfd)
    for name, body in data.items():
        mode = 0o644 if name.endswith(".public") else 0o600
        fd = open_beneath(dst, name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # not umask's
            f.write(body)


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
    c = ks.add_parser("cluster", help="write the missing TLS files of the sweep cluster into "
                      "DIR: a CA, and a certificate and key for the Dask scheduler, the "
                      "workers and the client (all 0600; existing files kept; docs/sweeps.md)")
    c.add_argument("dir", help="key folder, e.g. /etc/oppsched/keys/labA")
    c.set_defaults(fn=_cmd_cluster)


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


def _cmd_cluster(a) -> int:
    written = generate_cluster(Path(a.dir))
    print(f"oppsched keys: {len(written)} file(s) written into {a.dir}"
          + ("" if written else " (every cluster file was there already)"))
    for p in written:
        print(f"  {p}")
    return 0
