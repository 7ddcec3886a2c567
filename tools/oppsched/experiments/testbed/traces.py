"""The daemons' traces after a crash (docs/testbed.md, "Traces of a daemon that died").

oppsched-apd, oppsched-client and their MAC captures write each trace as NAME.partial,
put it on the disk every stats period (fdatasync) and rename it to NAME when they exit
cleanly (host/daemon/common/oppsched/daemon/partial_file.h). A NAME.partial left after a
run is the trace of a daemon that died: whole up to its last flush. The runner renames it
to NAME, cuts a last line (CSV) or record (pcap) the crash left half written, and lists it
in run.json "truncated_traces" (summary.json too); a cut line is an error of the summary."""

from __future__ import annotations

import os
import re
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


# ----------------------------------------------------------------------------------------
# Failed trace writes (a full disk): never a silent hole (docs/testbed.md, "Reliability")

# The trace each counter of a daemon's stats names (traces.<name>_errors and
# traces.<name>_rows_lost, or _lost for a pcap; csv_writer.h, pcap_writer.h), per stats file.
# {stem}: the file's stem ("apd", "client.R1", "wrc.f1.send"); {dev}, {id}: its parts.
_DAEMON_TRACES = {
    "apd": {"slots": "slots.csv", "packets": "packets.csv", "medium": "medium.csv",
            "mac_pcap": "mac-ap.pcap"},
    "client": {"windows": "windows.{dev}.csv", "events": "client.{dev}.events.csv",
               "mac_pcap": "mac-client.{dev}.pcap"},
    "wrc.send": {"rates": "wrc.{id}.rates.csv"},
    "wrc.recv": {"epochs": "wrc.{id}.epochs.csv"},
    "phy": {"slots": "phy_slots.csv"},
}
KILLED = "killed"  # reliability.KILLED_SUFFIX (the restart fault's files)


def _trace_names(stem: str) -> dict[str, str] | None:
    """{counter name: trace file} for the daemon whose stats file is STEM.stats.json."""
    parts = stem.split(".")
    if stem in ("apd", "phy"):
        return dict(_DAEMON_TRACES[stem])
    if stem == f"apd.{KILLED}":  # slots.csv -> slots.killed.csv
        return {k: v.replace(".", f".{KILLED}.", 1) for k, v in _DAEMON_TRACES["apd"].items()}
    if parts[0] == "client" and len(parts) == 2:
        return {k: v.format(dev=parts[1]) for k, v in _DAEMON_TRACES["client"].items()}
    if parts[0] == "wrc" and len(parts) == 3 and parts[2] in ("send", "recv"):
        return {k: v.format(id=parts[1])
                for k, v in _DAEMON_TRACES[f"wrc.{parts[2]}"].items()}
    return None


def write_errors(rundir: Path, read_json, errors: list | None = None) -> list[str]:
    """summary.json errors for every trace a write to which failed (a full or failing disk):
    each names the trace, the failed writes and the rows or records lost, and where the
    count comes from. From the daemons' stats files (their writers cut the file back to its
    last whole row, so what was written before is kept: csv_writer.h), the runner's own
    traces (run.json `trace_write_errors`: the receiving sockets' flow.<id>.socket.csv) and
    the tcpdump captures (capture_errors)."""
    rundir = Path(rundir)
    out = []
    for path in sorted(rundir.glob("*.stats.json")):
        stem = path.name[: -len(".stats.json")]
        names = _trace_names(stem)
        if names is None:
            continue
        s = read_json(path, errors) or {}
        tr = s.get("traces") if isinstance(s.get("traces"), dict) else {}
        for key, trace in names.items():
            n = tr.get(f"{key}_errors") or 0
            if not n:
                continue
            lost = tr.get(f"{key}_rows_lost", tr.get(f"{key}_lost"))
            what = "record(s)" if trace.endswith(".pcap") else "row(s)"
            out.append(f"{trace}: {n} write(s) failed (a full or failing disk), "
                       f"{lost if lost is not None else 'an unknown number of'} {what} lost: "
                       f"the trace lacks them ({path.name} traces.{key}_errors)")
        sync = tr.get("sync_errors") or 0
        if sync:
            out.append(f"{path.name}: {sync} disk sync(s) of {stem}'s traces or of its stats "
                       "failed (traces.sync_errors): what they held may not be on the disk")
    run = read_json(rundir / "run.json") or {}
    for e in run.get("trace_write_errors") or []:
        out.append(f"{e['file']}: {e['errors']} write(s) failed, {e['rows_lost']} row(s) lost: "
                   f"the trace lacks them (run.json trace_write_errors: {e.get('error', '')})")
    return out + _transfer_errors(rundir, run, read_json) + capture_errors(rundir)


_LOG_LINE = re.compile(r"^trace write errors: (\S+): (\d+) write\(s\) failed, (\d+) row\(s\) "
                       r"lost", re.M)


def _transfer_errors(rundir: Path, run: dict, read_json) -> list[str]:
    """The repeated transfers' CSVs (oppsched.testbed.transfers): a client or server that lost rows
    to failed writes exits with EXIT_ROWS_LOST and says how many in its log."""
    from oppsched.testbed.transfers import EXIT_ROWS_LOST
    procs = {p.get("name"): p for p in read_json(rundir / "processes.json") or []
             if isinstance(p, dict)}
    out = []
    for f in run.get("flows") or []:  # only a flow of repeated transfers has these names
        for name, trace in ((f"xfer-fetch.{f['id']}", f"transfers.{f['id']}.csv"),
                            (f"xfer-serve.{f['id']}", f"transfers.{f['id']}.server.csv")):
            if (procs.get(name) or {}).get("exit_code") != EXIT_ROWS_LOST:
                continue
            counts = ""
            try:
                for m in _LOG_LINE.finditer((rundir / "logs" / f"{name}.log").read_text(
                        errors="replace")):
                    if m.group(1) == trace:
                        counts = f": {m.group(2)} write(s) failed, {m.group(3)} row(s) lost"
            except OSError:
                pass
            out.append(f"{trace}{counts or ': rows lost to failed writes'} (a full or failing "
                       f"disk; {name} exited with {EXIT_ROWS_LOST}, logs/{name}.log)")
    return out


_CAPTURED = re.compile(rb"^(\d+) packets? captured", re.M)


def pcap_records(path: Path) -> tuple[int, int]:
    """(whole records, bytes of a cut last record) of a pcap file, read header by header."""
    with open(path, "rb") as f:
        head = f.read(PCAP_HEADER)
        if len(head) < PCAP_HEADER:
            return 0, len(head)
        order = "<" if head[:4] in (b"\x4d\x3c\xb2\xa1", b"\xd4\xc3\xb2\xa1") else ">"
        size = os.fstat(f.fileno()).st_size
        at, n = PCAP_HEADER, 0
        while at + PCAP_RECORD_HEADER <= size:
            f.seek(at + 8)
            (incl,) = struct.unpack(order + "I", f.read(4))
            end = at + PCAP_RECORD_HEADER + incl
            if end > size:
                break
            at, n = end, n + 1
        return n, size - at


def capture_errors(rundir: Path) -> list[str]:
    """summary.json errors for tcpdump captures that lack packets tcpdump captured. tcpdump
    ignores a failed write (a full disk): it exits 0 and its last lines still say `N packets
    captured` (logs/tcpdump.<stem>.log), so each capture's records are counted against
    that."""
    rundir = Path(rundir)
    out = []
    for log in sorted((rundir / "logs").glob("tcpdump.*.log")):
        stem = log.name[len("tcpdump."): -len(".log")]
        try:
            m = _CAPTURED.findall(log.read_bytes())
        except OSError:
            continue
        pc = rundir / f"{stem}.pcap"
        if not m or not pc.exists():
            continue  # a tcpdump that did not finish: its own error (processes.json)
        captured = int(m[-1])
        try:
            n, cut = pcap_records(pc)
        except (OSError, struct.error) as exc:
            out.append(f"{pc.name}: cannot be counted: {exc}")
            continue
        if n < captured or cut:
            out.append(f"{pc.name}: tcpdump captured {captured} packets, the file holds {n}"
                       + (f" and a cut last record ({cut} bytes)" if cut else "")
                       + f": {captured - n} packet(s) lost, a write failed (a full or failing "
                       f"disk; logs/{log.name})")
    return out
