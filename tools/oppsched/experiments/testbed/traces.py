"""The daemons' traces after a crash (docs/testbed.md, "Traces of a daemon that died").

oppsched-apd, oppsched-client and their MAC captures write each trace as NAME.partial,
put it on the disk every stats period (fdatasync) and rename it to NAME when they exit
cleanly (host/daemon/common/oppsched/daemon/partial_file.h). A NAME.partial left after a
run is the trace of a daemon that died: whole up to its last flush. The runner renames it
to NAME, cuts a last line (CSV) or record (pcap) the crash left half written, and lists it
in run.json "truncated_traces" (summary.json too); a cut line is an error of the summary."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from oppsched.safefs import UnsafePath, open_beneath, open_dir

PARTIAL = ".partial"
PCAP_HEADER = 24
PCAP_RECORD_HEADER = 16


def _whole_csv_bytes(data: bytes) -> int:
    """Bytes of the CSV up to and including its last newline."""
    return data.rfind(b"\n") + 1


def _whole_pcap_bytes(data: bytes) -> int:
    """Bytes of the pcap up to the end of its last whole record (0: not even a header)."""
    if len(data) < PCAP_HEADER:
        return 0
    magic = data[:4]
    order = "<" if magic in (b"\x4d\x3c\xb2\xa1", b"\xd4\xc3\xb2\xa1") else ">"
    at = PCAP_HEADER
    while at + PCAP_RECORD_HEADER <= len(data):
        (incl,) = struct.unpack_from(order + "I", data, at + 8)
        end = at + PCAP_RECORD_HEADER + incl
        if end > len(data):
            break
        at = end
    return at


def recover(partial: Path, dest: Path) -> dict:
    """Renames a trace left under its partial name to dest, cut at its last whole line or
    record. Returns its entry for run.json "truncated_traces".

    Root does this in a folder the run user owns: the trace is opened relative to the
    folder with O_NOFOLLOW (safefs), read and cut through that descriptor, so a symlink
    planted under the partial name raises safefs.UnsafePath and its target is untouched."""
    partial, dest = Path(partial), Path(dest)
    fd = open_beneath(partial.parent, partial.name, os.O_RDWR)
    with os.fdopen(fd, "r+b") as f:
        data = f.read()
        whole = _whole_pcap_bytes(data) if dest.suffix == ".pcap" else _whole_csv_bytes(data)
        cut = len(data) - whole
        if cut:
            f.truncate(whole)
            f.flush()
            os.fsync(f.fileno())
    dfd = open_dir(partial.parent)
    try:  # rename(2) replaces names, it follows no link
        os.replace(partial.name, dest.name, src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        os.close(dfd)
    entry = {"file": dest.name, "from": partial.name, "bytes": whole, "cut_bytes": cut}
    if dest.suffix == ".csv":
        entry["rows"] = max(0, data[:whole].count(b"\n") - 1)  # the header is not a row
    return entry


def recover_all(rundir: Path) -> list[dict]:
    """Every NAME.partial of the run folder (a daemon died) renamed to NAME. A NAME that
    exists already is kept; the partial one becomes NAME with '.crashed' before its
    extension. A NAME.partial that is a symlink or not a regular file is left alone and
    listed with "refused" (truncation_errors makes it an error of the summary)."""
    out = []
    for p in sorted(Path(rundir).glob(f"*{PARTIAL}")):
        if p.is_dir() and not p.is_symlink():
            continue
        dest = p.with_name(p.name[: -len(PARTIAL)])
        if dest.exists() or dest.is_symlink():
            stem, _, ext = dest.name.partition(".")
            dest = dest.with_name(f"{stem}.crashed.{ext}" if ext else f"{stem}.crashed")
        try:
            out.append(recover(p, dest))
        except UnsafePath as exc:
            out.append({"file": p.name, "from": p.name, "bytes": 0, "cut_bytes": 0,
                        "refused": str(exc)})
    return out


def truncation_errors(entries: list[dict]) -> list[str]:
    """summary.json errors for traces whose last line a crash cut (never silently)."""
    return [f"{e['file']}: its writer died mid-line: the cut last line or record "
            f"({e['cut_bytes']} bytes) was left out (the trace is whole up to its last flush)"
            for e in entries or [] if e.get("cut_bytes")] + \
        [f"{e['file']}: not recovered: {e['refused']}" for e in entries or [] if e.get("refused")]
