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
    record. Returns its entry for run.json "truncated_traces"."""
    partial, dest = Path(partial), Path(dest)
    data = partial.read_bytes()
    whole = _whole_pcap_bytes(data) if dest.suffix == ".pcap" else _whole_csv_bytes(data)
    cut = len(data) - whole
    if cut:
        with open(partial, "r+b") as f:
            f.truncate(whole)
            f.flush()
            os.fsync(f.fileno())
    os.replace(partial, dest)
    entry = {"file": dest.name, "from": partial.name, "bytes": whole, "cut_bytes": cut}
    if dest.suffix == ".csv":
        entry["rows"] = max(0, data[:whole].count(b"\n") - 1)  # the header is not a row
    return entry


def recover_all(rundir: Path) -> list[dict]:
    """Every NAME.partial of the run folder (a daemon died) renamed to NAME. A NAME that
    exists already is kept; the partial one becomes NAME with '.crashed' before its
    extension."""
    out = []
    for p in sorted(Path(rundir).glob(f"*{PARTIAL}")):
        if not p.is_file():
            continue
        dest = p.with_name(p.name[: -len(PARTIAL)])
        if dest.exists():
            stem, _, ext = dest.name.partition(".")
            dest = dest.with_name(f"{stem}.crashed.{ext}" if ext else f"{stem}.crashed")
        out.append(recover(p, dest))
    return out


def truncation_errors(entries: list[dict]) -> list[str]:
    """summary.json errors for traces whose last line a crash cut (never silently)."""
    return [f"{e['file']}: its writer died mid-line: the cut last line or record "
            f"({e['cut_bytes']} bytes) was left out (the trace is whole up to its last flush)"
            for e in entries or [] if e.get("cut_bytes")]
