"""`oppsched decode RECORDING.sigmf-meta --out DIR`: a SigMF recording of a receiver's input
(capture.iq, oppsched.phy.iqcapture) decoded offline by the same receiver.

The receiver is gnuradio.oppsched.slot_receiver, the class slot_rx runs, built with the
parameters the recording names (global oppsched:receiver: profile, sample rate, FEC, user
id, detection and LTF thresholds, noise EMA, missed-slot limit). The capture segments are
fed to it in stream order, each detection is received as slot_rx does (detect, receive each
detection, then report the missed slots), so its soft HARQ buffers combine the
transmissions in the order the online receiver did.

Exactness: a recording from the stream's start (the default window) holds every sample
the online receiver saw before the window's end, so the offline decode reproduces every
report (slot, CRC result, MCS, user, HARQ fields, TB hash, SNR) bit for bit. A recording
with gaps (the `failed` trigger's segments, a window that starts later) lacks samples that
changed the receiver's state; the annotations carry that state, and the decode restores it
(_StateRestorer): at each segment's first detected slot, the noise average the online
receiver had before it (noise_before, noise_count_before), and at every slot whether the
TB's soft buffer was empty online (combined 1: decoded from a fresh buffer). The rest of
a TB's HARQ history is in a trigger recording: the recorder keeps the earlier
transmissions a kept slot's TB was combined with (iqcapture.RecorderCore). So a trigger
recording from the stream's start decodes exactly; a window that starts later differs only for TBs whose earlier
transmissions came before it. The summary counts the slots whose offline result differs
from the online annotation. Fed back to back, the segments would make the receiver count
slots across the gaps: the numbers of header-failed slots are extrapolated within their
own segment instead (renumber()).

Writes DIR/<name>.rx.csv (the per-slot receiver trace a run writes with capture.iq, the
same columns) and DIR/<name>.decode.json (the summary), and prints progress and the summary.
"""

from __future__ import annotations

import bisect
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np

from oppsched.analysis import sigmf
from oppsched.config import ConfigError

NS = sigmf.NAMESPACE
CHUNK = 1 << 16
RECEIVER_KEYS = {"profile": str, "sample_rate": (int, float), "fec": str, "user_id": int,
                 "slot_samples": int, "detection_threshold": (int, float),
                 "ltf_threshold": (int, float), "noise_ema": (int, float), "missed_slots": int}


def receiver_params(meta: dict) -> dict:
    r = meta["global"].get(f"{NS}:receiver")
    if not isinstance(r, dict):
        raise ConfigError(f"global.{NS}:receiver: missing: the recording does not name an "
                          "oppsched receiver (only a receiver's input can be decoded; "
                          "ap.tx recordings cannot)")
    for k, t in RECEIVER_KEYS.items():
        if k not in r or isinstance(r[k], bool) or not isinstance(r[k], t):
            raise ConfigError(f"global.{NS}:receiver.{k}: {r.get(k)!r} missing or wrong type")
    return r


def make_receiver(r: dict):
    """The slot_receiver slot_rx.make builds for these parameters."""
    from oppsched import build

    phy = build.load(build.PHY)

    try:
        num = phy.numerology.profile(r["profile"], float(r["sample_rate"]), r["fec"])
    except (ValueError, RuntimeError) as exc:
        raise ConfigError(f"global.{NS}:receiver: {exc}") from None
    if num.slot_samples != r["slot_samples"]:
        raise ConfigError(f"global.{NS}:receiver.slot_samples: {r['slot_samples']} but profile "
                          f"{r['profile']!r} at {r['sample_rate']} Hz has {num.slot_samples}")
    sp = phy.slot_sync_params()
    sp.detection_threshold = float(r["detection_threshold"])
    sp.ltf_threshold = float(r["ltf_threshold"])
    sp.validate(num)
    dp = phy.ofdm_demodulator_params()
    snr = dp.snr
    snr.noise_ema = float(r["noise_ema"])
    try:
        snr.validate()
    except ValueError as exc:
        raise ConfigError(f"global.{NS}:receiver.noise_ema: {exc}") from None
    dp.snr = snr
    return phy.slot_receiver(num, int(r["user_id"]), sp, dp, int(r["missed_slots"]))


class _Segments:
    """File index <-> stream index of a recording's capture segments."""

    def __init__(self, segs: list[tuple[int, int, int]]):
        self.segs = segs
        self.starts = [s[0] for s in segs]

    def locate(self, file_index: int, count: int) -> tuple[int, int] | None:
        """(segment, stream index) of file_index when [file_index, +count) lies in one
        segment."""
        i = bisect.bisect_right(self.starts, file_index) - 1
        if i < 0:
            return None
        f0, g0, n = self.segs[i]
        if file_index + count > f0 + n:
            return None
        return i, g0 + (file_index - f0)


class _StateRestorer:
    """The online receiver's state where a recording lacks the samples that made it
    (module docstring): restore(rx, det) before each detection returns fresh_harq for it."""

    def __init__(self, segs: _Segments, online: dict, slot_samples: int):
        self.segs = segs
        self.S = slot_samples
        self.keys = sorted(online)
        self.online = online
        self.seeded: set[int] = set()  # segments whose noise average was restored
        # whole from the stream's start: nothing to restore
        self.active = len(segs.segs) > 1 or (bool(segs.segs) and segs.segs[0][1] != 0)
        self.noise_restored = self.fresh_buffers = 0

    def annotation(self, det_start: int) -> tuple[int, dict] | None:
        """(segment, online annotation) of the slot detected at det_start: the nearest
        annotated slot start within an eighth of a slot."""
        loc = self.segs.locate(det_start, 1)
        if loc is None or not self.keys:
            return None
        i = bisect.bisect_left(self.keys, loc[1])
        near = [k for k in self.keys[max(0, i - 1):i + 1] if abs(k - loc[1]) <= self.S // 8]
        if not near:
            return None
        return loc[0], self.online[min(near, key=lambda k: abs(k - loc[1]))]

    def restore(self, rx, det_start: int) -> bool:
        if not self.active:
            return False
        found = self.annotation(det_start)
        if found is None:
            return False
        seg, a = found
        count = a.get(f"{NS}:noise_count_before")
        if seg not in self.seeded and a.get(f"{NS}:detected") and count is not None:
            rx.set_noise_state(float(a[f"{NS}:noise_before"]), int(count))
            self.seeded.add(seg)
            self.noise_restored += 1
        fresh = a.get(f"{NS}:combined") == 1
        self.fresh_buffers += fresh
        return fresh


def renumber(reports: list[tuple[int, dict]], S: int) -> None:
    """Slot numbers of the slots whose header failed (slot_estimated), extrapolated within
    their own segment: the receiver, fed the segments back to back, would count slots
    across the gap between them. Each takes the number of the nearest slot reported before
    it in the segment plus the slots between them (what the receiver does within a
    stream); before the segment's first decoded header, the number of that header minus the
    slots between them. Unchanged in a single-segment recording."""
    anchor = None
    for g, f in reports:
        if f["slot_estimated"] and anchor is not None:
            f["slot"] = anchor[1] + round((g - anchor[0]) / S)
        if f["detected"] and (not f["slot_estimated"] or anchor is not None):
            anchor = (g, f["slot"])
    first = next(((g, f["slot"]) for g, f in reports if not f["slot_estimated"]), None)
    if first is None:
        return
    for g, f in reports:
        if not f["slot_estimated"]:
            break
        f["slot"] = first[1] - round((first[0] - g) / S)


def compare(online: dict, offline: dict) -> list[str]:
    """Fields (SLOT_FIELDS) whose offline value differs from the online annotation's."""
    out = []
    for k in sigmf.SLOT_FIELDS:
        a = online.get(f"{NS}:{k}")
        b = offline[k]
        if a is None:
            continue
        if isinstance(b, float):
            if not (a == b or (np.isnan(a) and np.isnan(b))):
                out.append(k)
        elif a != b:
            out.append(k)
    return out


def decode(meta_path: str | Path, out_dir: str | Path, progress=sys.stderr,
           chunk: int = CHUNK) -> dict:
    meta_path = Path(meta_path)
    base = sigmf.base_of(meta_path)
    if (not base.with_name(base.name + sigmf.META_SUFFIX).exists()
            and base.with_name(base.name + sigmf.JOURNAL_SUFFIX).exists()):
        # its recorder was killed before it wrote the metadata: complete it from the journal
        try:
            sigmf.recover(base)
        except sigmf.SigMFError as exc:
            raise ConfigError(str(exc)) from None
        if progress:
            print(f"oppsched decode: {base.name}: metadata recovered from its journal "
                  "(the recorder was stopped before it wrote it)", file=progress)
    try:
        meta = sigmf.read_metadata(meta_path)
        x = sigmf.read_samples(meta_path)
    except sigmf.SigMFError as exc:
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise ConfigError(f"{meta_path}: data file: {exc.strerror}") from None
    r = receiver_params(meta)
    rx = make_receiver(r)
    S = int(r["slot_samples"])
    segs = _Segments(sigmf.segments(meta, len(x)))
    name = sigmf.base_of(meta_path).name
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    online = {}  # stream index of the slot start -> annotation
    for a in meta["annotations"]:
        g = a.get(f"{NS}:global_index")
        if g is not None and f"{NS}:slot" in a and "core:sample_count" in a:
            online[int(g)] = a
    summary = {"recording": str(meta_path), "samples": int(len(x)),
               "segments": len(segs.segs), "slots": 0, "outside": 0, "detected": 0,
               "header_ok": 0, "addressed": 0, "tb_ok": 0, "tb_failed": 0, "combined": 0,
               "annotated": len(online), "agree": 0, "differ": 0, "only_offline": 0,
               "only_online": 0, "field_differences": {}, "differences": []}
    seen = set()
    restorer = _StateRestorer(segs, online, S)
    t_start = time.monotonic()
    last_print = -1.0
    trace_path = out / f"{name}.rx.csv"
    with open(trace_path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(sigmf.RX_TRACE_COLUMNS)

        pending: list[tuple[int, dict]] = []  # reports of the current segment
        current = [None]

        def handle(reports):
            for rep in reports:
                loc = segs.locate(int(rep.sample), S)
                if loc is None:  # a missed-slot report in a gap between segments
                    summary["outside"] += 1
                    continue
                if len(segs.segs) == 1:
                    record(loc[1], sigmf.slot_fields(rep))
                    continue
                if loc[0] != current[0]:
                    flush()
                    current[0] = loc[0]
                pending.append((loc[1], sigmf.slot_fields(rep)))

        def flush():
            renumber(pending, S)
            for g, f in pending:
                record(g, f)
            pending.clear()

        def record(g: int, f: dict):
            w.writerow(sigmf.rx_row(g, f))
            summary["slots"] += 1
            summary["detected"] += f["detected"]
            summary["header_ok"] += f["header_ok"]
            if f["addressed"] and f["tb_bytes"]:
                summary["addressed"] += 1
                summary["tb_ok" if f["crc_ok"] else "tb_failed"] += 1
                summary["combined"] += f["combined"] > 1
            a = online.get(g)
            if a is None:
                summary["only_offline"] += 1
                return
            seen.add(g)
            diff = compare(a, f)
            if diff:
                summary["differ"] += 1
                for k in diff:
                    fd = summary["field_differences"]
                    fd[k] = fd.get(k, 0) + 1
                if len(summary["differences"]) < 50:
                    summary["differences"].append({
                        "slot": f["slot"], "global_index": g,
                        **{k: [a.get(f"{NS}:{k}"), f[k]] for k in diff}})
            else:
                summary["agree"] += 1

        for f0, _g0, n in segs.segs:
            for a in range(f0, f0 + n, chunk):
                b = min(a + chunk, f0 + n)
                dets = rx.detect(np.ascontiguousarray(x[a:b]))
                for det in dets:
                    _rec, reports = rx.receive(det, restorer.restore(rx, int(det.start)))
                    handle(reports)
                handle(rx.report_missed())
                frac = b / max(1, len(x))
                if progress is not None and (frac - last_print >= 0.05 or b == len(x)):
                    last_print = frac
                    print(f"decode {name}: {100 * frac:3.0f}% ({b}/{len(x)} samples, "
                          f"{summary['slots']} slots, {summary['tb_failed']} TBs failed)",
                          file=progress, flush=True)
        flush()
    summary["only_online"] = len(set(online) - seen)
    summary["state_restored"] = {"noise": restorer.noise_restored,
                                 "fresh_harq": restorer.fresh_buffers}
    summary["seconds"] = round(time.monotonic() - t_start, 3)
    summary["trace"] = str(trace_path)
    (out / f"{name}.decode.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def format_summary(s: dict) -> str:
    lines = [
        f"{s['recording']}: {s['samples']} samples in {s['segments']} segment(s), "
        f"decoded in {s['seconds']} s",
        f"  slots {s['slots']} (detected {s['detected']}, header ok {s['header_ok']}); "
        f"addressed TBs {s['addressed']}: ok {s['tb_ok']}, failed {s['tb_failed']}, "
        f"combined with earlier transmissions {s['combined']}",
        f"  against the online annotations ({s['annotated']}): agree {s['agree']}, differ "
        f"{s['differ']}, only offline {s['only_offline']}, only online {s['only_online']}"
        + (f"; fields that differ: {s['field_differences']}" if s["field_differences"] else ""),
    ]
    r = s.get("state_restored") or {}
    if r.get("noise") or r.get("fresh_harq"):
        lines.append(f"  receiver state restored from the annotations: noise average at "
                     f"{r['noise']} segment start(s), fresh HARQ buffer at {r['fresh_harq']} "
                     "slot(s)")
    lines += [
        f"  trace: {s['trace']}",
    ]
    for d in s["differences"][:10]:
        lines.append(f"  differs: {d}")
    return "\n".join(lines)


def _cmd_decode(a) -> int:
    bad = 0
    for rec in a.recording:
        s = decode(rec, a.out, None if a.quiet else sys.stderr)
        print(format_summary(s))
        bad += s["differ"] + s["only_online"]
    return 1 if a.strict and bad else 0
