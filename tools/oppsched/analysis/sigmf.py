"""SigMF recordings of the PHY's samples, written to the SigMF specification v1.x
(https://sigmf.org): a `.sigmf-data` file of raw samples (cf32_le: little-endian float32
I/Q pairs, numpy's complex64 on this platform) and a `.sigmf-meta` JSON file with

- `global`: core:datatype, core:version, core:sample_rate, core:num_channels,
  core:description, core:hw, core:recorder, core:extensions (the `oppsched` namespace), and
  the project's own fields (oppsched:receiver: the receiver's parameters, so that
  `oppsched decode` can rebuild the same slot_receiver; oppsched:stream; oppsched:capture);
- `captures`: one segment per contiguous run of recorded samples, sorted by
  core:sample_start (the index in the data file), with core:global_index (the index in the
  receiver's sample stream since the PHY started), core:datetime and, over the air,
  core:frequency;
- `annotations`: one per slot, sorted by core:sample_start, with core:sample_count (one
  slot), core:label, core:comment and the slot's fields in the oppsched namespace
  (oppsched:slot, oppsched:user, oppsched:mcs, oppsched:harq_process, oppsched:rv,
  oppsched:ndi, oppsched:crc_ok, ...).

A segmented recording (trigger mode keeps only some slots) is one data file: the segments
follow each other in it and each `captures` entry says where it came from in the stream
(core:global_index), as the specification's discontinuous recordings do.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

SIGMF_VERSION = "1.0.0"
DATATYPE = "cf32_le"
DTYPE = np.dtype("<c8")
BYTES_PER_SAMPLE = DTYPE.itemsize  # 8
NAMESPACE = "oppsched"
EXTENSION_VERSION = "1.0.0"
META_SUFFIX = ".sigmf-meta"
DATA_SUFFIX = ".sigmf-data"
# While a recording is written, what its metadata will be made of (the writer's settings,
# each segment's start, each annotation) is appended here as JSON lines, so that a recorder
# killed before close() (SIGKILL, a crash, power) leaves a recording `recover()` completes.
JOURNAL_SUFFIX = ".sigmf-journal"

# The per-slot fields of an annotation (the receiver's rx report), in the oppsched
# namespace: name -> python type. The same names are the columns of the rx trace.
SLOT_FIELDS = {
    "slot": int,
    "slot_estimated": bool,
    "detected": bool,
    "header_ok": bool,
    "user": int,
    "mcs": int,
    "harq_process": int,
    "rv": int,
    "ndi": bool,
    "tb_bytes": int,
    "addressed": bool,
    "crc_ok": bool,
    "combined": int,
    "snr_db": float,
    "effective_snr_db": float,
    "cqi": int,
    "cfo_hz": float,
    "tb_sha256": str,
    # the receiver's state before the slot: its noise average and the slots it counts
    # (0 and 0 in a missed slot's report); what an offline decode of a recording with gaps
    # restores to go on where the online receiver was (decode.py)
    "noise_before": float,
    "noise_count_before": int,
}

_DATETIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")


class SigMFError(ValueError):
    """A recording that does not follow the specification (names the field and value)."""


def iso_datetime(t: float) -> str:
    """core:datetime: ISO 8601 in UTC with a Z, microseconds."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def base_of(path: str | Path) -> Path:
    """The recording's base path (without .sigmf-meta / .sigmf-data)."""
    p = Path(path)
    for suf in (META_SUFFIX, DATA_SUFFIX):
        if p.name.endswith(suf):
            return p.with_name(p.name[: -len(suf)])
    return p


@dataclass
class _Segment:
    file_start: int
    global_index: int
    length: int = 0


@dataclass
class SigMFWriter:
    """Writes one recording. `write(global_index, samples)` appends samples taken at that
    stream index (a jump starts a new capture segment); `annotate(global_start, count, ...)`
    adds an annotation in stream coordinates, kept at close() only if the recording holds
    all of its samples; close() writes the metadata (atomically).

    t0_unix: wall-clock time (s since the epoch) of stream index 0, for core:datetime."""

    base: Path
    sample_rate: float
    description: str = ""
    hw: str = ""
    frequency: float | None = None
    t0_unix: float | None = None
    extra_global: dict = field(default_factory=dict)
    # an annotation is kept only if this many samples follow it in its segment (the
    # receiver reports a slot once samples past its end arrived)
    tail: int = 0
    # > 0: keep only the last `ring` samples written: the data file is circular while
    # recording and put in stream order at close() (one contiguous capture)
    ring: int = 0
    # The journal (JOURNAL_SUFFIX) and the data written so far reach the disk at least this
    # often (seconds); 0: at every write. A ring recording keeps no journal (its newest
    # samples overwrite the oldest in place, so what a killed recorder left is not in order).
    journal_flush_s: float = 1.0

    def __post_init__(self):
        self.base = base_of(self.base)
        self.base.parent.mkdir(parents=True, exist_ok=True)
        self.data_path = self.base.with_name(self.base.name + DATA_SUFFIX)
        self.meta_path = self.base.with_name(self.base.name + META_SUFFIX)
        self.journal_path = self.base.with_name(self.base.name + JOURNAL_SUFFIX)
        self._f = open(self.data_path, "wb")
        self._segments: list[_Segment] = []
        self._annotations: list[tuple[int, int, str, str, dict]] = []
        self.samples_written = 0
        self._total = 0  # ring: samples written since the start, before wrapping
        self.closed = False
        if self.t0_unix is None:
            self.t0_unix = time.time()
        self._journal = None
        self._last_sync = time.monotonic()
        if not self.ring:
            self._journal = open(self.journal_path, "w")
            self._log({"writer": {
                "sample_rate": float(self.sample_rate), "description": self.description,
                "hw": self.hw, "frequency": self.frequency, "t0_unix": self.t0_unix,
                "extra_global": self.extra_global, "tail": int(self.tail)}}, sync=True)

    def _log(self, entry: dict, sync: bool = False) -> None:
        if self._journal is None:
            return
        self._journal.write(json.dumps(entry, separators=(",", ":")) + "\n")
        if sync:
            self._sync()

    def _sync(self) -> None:
        """Data first, then the journal: on disk the journal never names samples that are
        not there (a segment's start is logged and synced before its first sample)."""
        self._f.flush()
        if self._journal is not None:
            self._journal.flush()
        self._last_sync = time.monotonic()

    def set_t0(self, t0_unix: float) -> None:
        """Wall-clock time of stream index 0 (core:datetime), once the stream's start is known."""
        self.t0_unix = float(t0_unix)
        self._log({"t0_unix": self.t0_unix}, sync=True)

    @property
    def bytes_written(self) -> int:
        return self.samples_written * BYTES_PER_SAMPLE

    def next_global_index(self) -> int | None:
        if not self._segments:
            return None
        s = self._segments[-1]
        return s.global_index + s.length

    def write(self, global_index: int, samples: np.ndarray) -> None:
        if self.closed:
            raise SigMFError(f"{self.data_path}: write after close")
        n = len(samples)
        if n == 0:
            return
        if self.ring:
            self._write_ring(global_index, samples)
            return
        nxt = self.next_global_index()
        if nxt is not None and global_index < nxt:
            raise SigMFError(f"{self.data_path}: global_index {global_index} goes back "
                             f"(next is {nxt}): segments must be written in stream order")
        if nxt != global_index:
            self._segments.append(_Segment(self.samples_written, int(global_index)))
            self._log({"segment": [self.samples_written, int(global_index)]}, sync=True)
        self._f.write(np.ascontiguousarray(samples, dtype=DTYPE).tobytes())
        self._segments[-1].length += n
        self.samples_written += n
        if time.monotonic() - self._last_sync >= self.journal_flush_s:
            self._sync()

    def _write_ring(self, global_index: int, samples: np.ndarray) -> None:
        if not self._segments:
            self._segments.append(_Segment(0, int(global_index)))
        seg = self._segments[0]
        if global_index != seg.global_index + self._total:
            raise SigMFError(f"{self.data_path}: global_index {global_index}: a ring "
                             f"recording is contiguous (next is {seg.global_index + self._total})")
        x = np.ascontiguousarray(samples, dtype=DTYPE)
        if len(x) > self.ring:  # only the last `ring` samples can survive
            skip = len(x) - self.ring
            self._total += skip
            x = x[skip:]
        while len(x):
            pos = self._total % self.ring
            k = min(len(x), self.ring - pos)
            self._f.seek(pos * BYTES_PER_SAMPLE)
            self._f.write(x[:k].tobytes())
            self._total += k
            x = x[k:]
        self.samples_written = min(self._total, self.ring)
        # the capture: the last `ring` samples (put in this order by close())
        seg.length = self.samples_written

    def _unroll_ring(self) -> None:
        """Puts the circular data file in stream order; the capture starts at the oldest
        sample kept."""
        if not self._segments:
            return
        seg = self._segments[0]
        if self._total > self.ring:
            self._f.flush()
            data = np.fromfile(self.data_path, dtype=DTYPE)
            k = self._total % self.ring
            self._f.seek(0)
            self._f.write(np.concatenate([data[k:], data[:k]]).tobytes())
            self._f.truncate()
            seg.global_index += self._total - self.ring
        seg.length = self.samples_written

    def annotate(self, global_start: int, count: int, label: str = "", comment: str = "",
                 fields: dict | None = None) -> None:
        a = (int(global_start), int(count), label, comment, dict(fields or {}))
        self._annotations.append(a)
        self._log({"annotation": list(a)})

    def _to_file_index(self, g: int, count: int) -> int | None:
        for s in self._segments:
            if s.global_index <= g and g + count + self.tail <= s.global_index + s.length:
                return s.file_start + (g - s.global_index)
        return None

    def metadata(self) -> dict:
        glob = {
            "core:datatype": DATATYPE,
            "core:version": SIGMF_VERSION,
            "core:sample_rate": float(self.sample_rate),
            "core:num_channels": 1,
            "core:recorder": "oppsched",
            "core:extensions": [{"name": NAMESPACE, "version": EXTENSION_VERSION,
                                 "optional": True}],
        }
        if self.description:
            glob["core:description"] = self.description
        if self.hw:
            glob["core:hw"] = self.hw
        for k, v in self.extra_global.items():
            glob[k if ":" in k else f"{NAMESPACE}:{k}"] = v
        captures = []
        for s in self._segments:
            c = {"core:sample_start": s.file_start, "core:global_index": s.global_index,
                 "core:datetime": iso_datetime(self.t0_unix + s.global_index / self.sample_rate),
                 f"{NAMESPACE}:sample_count": s.length}
            if self.frequency is not None:
                c["core:frequency"] = float(self.frequency)
            captures.append(c)
        if not captures:  # an empty recording still has one capture (the specification)
            captures.append({"core:sample_start": 0, "core:global_index": 0,
                             f"{NAMESPACE}:sample_count": 0})
        ann = []
        for g, n, label, comment, fields in self._annotations:
            start = self._to_file_index(g, n)
            if start is None:
                continue
            a = {"core:sample_start": start, "core:sample_count": n}
            if label:
                a["core:label"] = label
            if comment:
                a["core:comment"] = comment
            a[f"{NAMESPACE}:global_index"] = g
            for k, v in fields.items():
                a[k if ":" in k else f"{NAMESPACE}:{k}"] = v
            ann.append(a)
        ann.sort(key=lambda a: (a["core:sample_start"], a.get(f"{NAMESPACE}:slot", 0)))
        return {"global": glob, "captures": captures, "annotations": ann}

    def write_metadata(self) -> dict:
        self._f.flush()
        meta = self.metadata()
        tmp = self.meta_path.with_name(self.meta_path.name + ".tmp")
        tmp.write_text(dumps(meta))
        os.replace(tmp, self.meta_path)
        return meta

    def close(self) -> dict:
        if self.closed:
            return self.metadata()
        if self.ring:
            self._unroll_ring()
            self.ring = 0
        meta = self.write_metadata()
        self._f.close()
        if self._journal is not None:
            self._journal.close()
            self.journal_path.unlink(missing_ok=True)
        self.closed = True
        return meta


def recover(path: str | Path) -> dict:
    """Completes a recording whose recorder was killed before close(): the metadata from
    its journal, over the samples its data file holds (a last partial sample cut off).
    Segments end where the data ends; annotations whose samples are not all there are left
    out, as close() leaves them out. Writes the .sigmf-meta (global `oppsched:recovered`:
    true), removes the journal and returns the metadata. SigMFError if there is no journal
    or it cannot be read."""
    base = base_of(path)
    journal = base.with_name(base.name + JOURNAL_SUFFIX)
    data = base.with_name(base.name + DATA_SUFFIX)
    try:
        lines = journal.read_text().splitlines()
    except OSError as exc:
        raise SigMFError(f"{journal}: {exc.strerror} (nothing to recover from)") from None
    except UnicodeDecodeError as exc:
        raise SigMFError(f"{journal}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    entries = []
    for i, line in enumerate(lines, 1):
        try:
            entries.append(json.loads(line))
        except (ValueError, RecursionError):
            if i == len(lines):  # the last line, cut by the kill: what it said is lost
                break
            raise SigMFError(f"{journal}: line {i} is not JSON") from None
    _check_journal(journal, entries)
    try:
        size = data.stat().st_size
    except OSError as exc:
        raise SigMFError(f"{data}: {exc.strerror}") from None
    total = size // BYTES_PER_SAMPLE
    if size % BYTES_PER_SAMPLE:
        with open(data, "r+b") as f:
            f.truncate(total * BYTES_PER_SAMPLE)
    w = entries[0]["writer"]
    rec = SigMFWriter.__new__(SigMFWriter)  # the writer's state, without opening anything
    rec.base, rec.sample_rate, rec.description, rec.hw = base, w["sample_rate"], \
        w["description"], w["hw"]
    rec.frequency, rec.t0_unix, rec.tail, rec.ring = w["frequency"], w["t0_unix"], w["tail"], 0
    rec.extra_global = dict(w["extra_global"], recovered=True)
    rec._segments, rec._annotations = [], []
    for e in entries[1:]:
        if "segment" in e:
            start, g = e["segment"]
            if start < total:
                rec._segments.append(_Segment(int(start), int(g)))
        elif "annotation" in e:
            rec._annotations.append(tuple(e["annotation"]))
        elif "t0_unix" in e:
            rec.t0_unix = e["t0_unix"]
    for i, seg in enumerate(rec._segments):
        end = rec._segments[i + 1].file_start if i + 1 < len(rec._segments) else total
        seg.length = end - seg.file_start
        try:
            iso_datetime(rec.t0_unix + seg.global_index / rec.sample_rate)
        except (ValueError, OverflowError, OSError):
            raise SigMFError(f"{journal}: segment {seg.file_start}: global index "
                             f"{seg.global_index} at {rec.sample_rate} Hz from t0_unix "
                             f"{rec.t0_unix} is not a date") from None
    meta = rec.metadata()
    meta_path = base.with_name(base.name + META_SUFFIX)
    tmp = meta_path.with_name(meta_path.name + ".tmp")
    tmp.write_text(dumps(meta))
    os.replace(tmp, meta_path)
    journal.unlink()
    return meta


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _field_keys_ok(fields: dict) -> bool:
    """Keys the metadata takes: plain names (put in our namespace) or ours."""
    return all(isinstance(k, str) and (":" not in k or k.startswith(NAMESPACE + ":"))
               for k in fields)


def _plain_json(v) -> bool:
    try:
        json.dumps(v, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return False
    return True


def _check_journal(journal: Path, entries: list) -> None:
    """The journal as SigMFWriter writes it, else SigMFError naming the line and field: the
    recorder runs as the run user, its journal is input like any other file."""
    def bad(i: int, what: str):
        raise SigMFError(f"{journal}: line {i}: {what}")

    if not entries or not isinstance(entries[0], dict) or \
            not isinstance(entries[0].get("writer"), dict):
        raise SigMFError(f"{journal}: line 1 does not describe the writer")
    w = entries[0]["writer"]
    for k, ok in (("sample_rate", lambda v: _number(v) and v > 0),
                  ("description", lambda v: isinstance(v, str)),
                  ("hw", lambda v: isinstance(v, str)),
                  ("frequency", lambda v: v is None or _number(v)),
                  ("t0_unix", _number),
                  ("extra_global", lambda v: isinstance(v, dict) and _field_keys_ok(v)
                   and _plain_json(v)),
                  ("tail", _count)):
        if k not in w or not ok(w[k]):
            bad(1, f"writer.{k}: {w.get(k, 'missing')!r}")
    last_start = -1
    for i, e in enumerate(entries[1:], 2):
        if not isinstance(e, dict):
            bad(i, f"{e!r} is not an object")
        if "segment" in e:
            seg = e["segment"]
            if not (isinstance(seg, list) and len(seg) == 2 and all(_count(x) for x in seg)) \
                    or seg[0] < last_start:
                bad(i, f"segment: {seg!r} is not [file start, global index] in order")
            last_start = seg[0]
        elif "annotation" in e:
            a = e["annotation"]
            if not (isinstance(a, list) and len(a) == 5 and _count(a[0]) and _count(a[1])
                    and isinstance(a[2], str) and isinstance(a[3], str)
                    and isinstance(a[4], dict) and _field_keys_ok(a[4]) and _plain_json(a[4])
                    and all(isinstance(a[4].get(k, 0), int)
                            for k in ("slot", NAMESPACE + ":slot"))):
                bad(i, f"annotation: {a!r} is not [start, count, label, comment, fields]")
        elif "t0_unix" in e and not _number(e["t0_unix"]):
            bad(i, f"t0_unix: {e['t0_unix']!r}")


def dumps(meta: dict) -> str:
    """The metadata as JSON: global and captures indented, one annotation per line (a
    recording of 10 s at 600 slots/s has 6000)."""
    def one(x):
        return json.dumps(x, allow_nan=False, separators=(", ", ": "))

    head = json.dumps({"global": meta["global"]}, indent=1, allow_nan=False)[:-2]

    def arr(items):
        return "[\n  " + ",\n  ".join(one(x) for x in items) + "\n ]" if items else "[]"

    return (f"{head},\n \"captures\": {arr(meta['captures'])},\n"
            f" \"annotations\": {arr(meta['annotations'])}\n}}\n")


# ---- reading and checking --------------------------------------------------------------

def _need(obj: dict, key: str, types, where: str):
    if not isinstance(obj, dict):
        raise SigMFError(f"{where}: {obj!r} is not an object")
    if key not in obj:
        raise SigMFError(f"{where}.{key}: missing (required by the SigMF specification)")
    v = obj[key]
    if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise SigMFError(f"{where}.{key}: {v!r} is not a {types}")
    if not isinstance(v, types):
        raise SigMFError(f"{where}.{key}: {v!r} is not a {types}")
    return v


def _sorted_by_start(meta: dict, section: str) -> list:
    """meta[section] (captures or annotations): an array whose entries have a
    core:sample_start >= 0, in order; SigMFError naming the entry otherwise."""
    items = meta[section]
    if not isinstance(items, list):
        raise SigMFError(f"{section}: not an array")
    last = -1
    for i, item in enumerate(items):
        s = _need(item, "core:sample_start", int, f"{section}[{i}]")
        if s < 0 or s < last:
            raise SigMFError(f"{section}[{i}].core:sample_start: {s} (negative or not sorted)")
        last = s
    return items


def check_metadata(meta: dict) -> None:
    """Checks every required field of the specification and the type of each core field
    used here; raises SigMFError naming the field and value."""
    if not isinstance(meta, dict):
        raise SigMFError(f"metadata: {type(meta).__name__} is not a JSON object")
    for k in ("global", "captures", "annotations"):
        if k not in meta:
            raise SigMFError(f"{k}: missing (required by the SigMF specification)")
    g = meta["global"]
    if not isinstance(g, dict):
        raise SigMFError("global: not an object")
    dt = _need(g, "core:datatype", str, "global")
    if not re.fullmatch(r"(r|c)((f32|f64|i32|i16|u32|u16)(_le|_be)?|i8|u8)", dt):
        raise SigMFError(f"global.core:datatype: {dt!r} is not a SigMF datatype")
    ver = _need(g, "core:version", str, "global")
    if not re.fullmatch(r"1\.\d+\.\d+", ver):
        raise SigMFError(f"global.core:version: {ver!r} is not a 1.x version")
    if "core:sample_rate" in g:
        sr = _need(g, "core:sample_rate", (int, float), "global")
        if not sr > 0:
            raise SigMFError(f"global.core:sample_rate: {sr!r} must be > 0")
    declared = set()
    extensions = g.get("core:extensions", [])
    if not isinstance(extensions, list):
        raise SigMFError(f"global.core:extensions: {extensions!r} is not an array")
    for i, e in enumerate(extensions):
        w = f"global.core:extensions[{i}]"
        declared.add(_need(e, "name", str, w))
        _need(e, "version", str, w)
        _need(e, "optional", bool, w)
    caps = _sorted_by_start(meta, "captures")
    for i, c in enumerate(caps):
        w = f"captures[{i}]"
        if "core:global_index" in c and (not isinstance(c["core:global_index"], int)
                                         or c["core:global_index"] < 0):
            raise SigMFError(f"{w}.core:global_index: {c['core:global_index']!r}")
        if "core:datetime" in c and not _DATETIME_RE.match(str(c["core:datetime"])):
            raise SigMFError(f"{w}.core:datetime: {c['core:datetime']!r} is not ISO 8601 UTC")
    anns = _sorted_by_start(meta, "annotations")
    for i, a in enumerate(anns):
        w = f"annotations[{i}]"
        if "core:sample_count" in a:
            n = _need(a, "core:sample_count", int, w)
            if n < 0:
                raise SigMFError(f"{w}.core:sample_count: {n}")
    for part in [g, *caps, *anns]:
        for k in part:
            ns = k.split(":", 1)[0] if ":" in k else None
            if ns is None or (ns != "core" and ns not in declared):
                raise SigMFError(f"{k}: namespace {ns!r} is not declared in "
                                 "global.core:extensions")


def read_metadata(path: str | Path) -> dict:
    base = base_of(path)
    meta_path = base.with_name(base.name + META_SUFFIX)
    try:
        meta = json.loads(meta_path.read_text())
    except OSError as exc:
        raise SigMFError(f"{meta_path}: {exc.strerror}") from None
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, nested too deep
        raise SigMFError(f"{meta_path}: not JSON ({type(exc).__name__}: {exc})") from None
    check_metadata(meta)
    if meta["global"]["core:datatype"] != DATATYPE:
        raise SigMFError(f"{meta_path}: global.core:datatype: "
                         f"{meta['global']['core:datatype']!r} (only {DATATYPE} is read)")
    return meta


def read_samples(path: str | Path) -> np.ndarray:
    """The data file as a read-only memory map of complex64."""
    base = base_of(path)
    data = base.with_name(base.name + DATA_SUFFIX)
    if data.stat().st_size == 0:
        return np.zeros(0, DTYPE)
    return np.memmap(data, dtype=DTYPE, mode="r")


def segments(meta: dict, total: int) -> list[tuple[int, int, int]]:
    """(file_start, global_index, length) of each capture segment; a segment runs to the
    next one's start (the last to the end of the data file)."""
    caps = meta["captures"]
    out = []
    for i, c in enumerate(caps):
        start = c["core:sample_start"]
        end = caps[i + 1]["core:sample_start"] if i + 1 < len(caps) else total
        out.append((start, c.get("core:global_index", start), max(0, end - start)))
    return out


# ---- the receiver's per-slot trace (rx.csv) --------------------------------------------

RX_TRACE_COLUMNS = ["slot", "sample", *[k for k in SLOT_FIELDS if k != "slot"]]


def slot_fields(report) -> dict:
    """The annotation fields of one rx report: a slot_rx `rx` message as a dict
    (pmt.to_python) or a gnuradio.oppsched.rx_report. tb_sha256: SHA-256 of the decoded TB
    bytes ('' when none was delivered)."""
    import hashlib

    get = report.get if isinstance(report, dict) else (lambda k, d=None: getattr(report, k, d))
    tb = get("tb", None)
    if tb is None:
        tb = b""
    elif not isinstance(tb, (bytes, bytearray)):
        tb = bytes(np.asarray(tb, dtype=np.uint8))
    out = {}
    for k, t in SLOT_FIELDS.items():
        if k == "tb_sha256":
            out[k] = hashlib.sha256(tb).hexdigest() if tb else ""
        else:
            v = get("harq_pid" if k == "harq_process" else k, None)
            out[k] = t(v) if v is not None else t()
    return out


def fields_from_row(row: dict) -> tuple[int, dict]:
    """(sample, fields) of one rx trace row (csv.DictReader), the inverse of rx_row."""
    f = {}
    for k, t in SLOT_FIELDS.items():
        v = row.get(k)
        if v is None:  # a trace written before the column existed
            f[k] = t()
            continue
        f[k] = bool(int(v)) if t is bool else t(v)
    return int(row["sample"]), f


def rx_row(sample: int, fields: dict) -> list:
    row = [fields["slot"], int(sample)]
    for k, t in SLOT_FIELDS.items():
        if k == "slot":
            continue
        v = fields[k]
        row.append(int(v) if t is bool else repr(float(v)) if t is float else v)
    return row
