"""IQ capture (`capture.iq` in phy.yaml): a sink block beside each slot_rx that records the
samples the receiver gets as a SigMF recording (oppsched.analysis.sigmf), with one annotation per
slot from the receiver's own `rx` reports, and the receiver's per-slot trace
(`<name>.rx.csv`, every slot of the run, whatever the window).

    emulator output u (or the radio) --+--> slot_rx(u) --rx--> rx_indication_sink
                                       +--> iq_recorder <--rx--+

Bounded, so that a long run does not fill the disk (8 bytes per sample: 8 MB/s per
device at 1 Msps):
- window: samples with stream index in [start, start + length) (iq_window_start_s,
  iq_window_s; iq_window_s 0 = to the end of the run); iq_last_s: only the last seconds
  of that window (a circular data file, put in stream order when the PHY stops);
- trigger `failed`: within that window, only the slots whose decode failed (header
  failed, addressed TB with a bad CRC, or a slot expected but not detected), each with
  `iq_margin_slots` slots (+ 1/2 slot) of margin on both sides. The samples wait in a
  ring buffer (`HISTORY_S`) until the receiver's report for them arrives. The apd
  retransmits a TB only after a NACK or when it went unheard, so every earlier
  transmission of a failed TB failed too: the HARQ history of each kept slot is kept.

The AP's transmission (uhd mode) is recorded by the same block without reports: each slot
is annotated from slot_tx's `slot` stream tag.
"""

from __future__ import annotations

import csv
import logging
from collections import deque
from pathlib import Path

import numpy as np
import pmt
from gnuradio import gr

from oppsched.analysis import sigmf

log = logging.getLogger("oppsched.phy.iqcapture")

HISTORY_S = 0.5  # trigger mode: samples kept until their slot's report (s)
TRIGGERS = ("none", "failed")


def failed(f: dict) -> bool:
    """A slot the trigger keeps: not detected, header failed, or addressed with a TB whose
    CRC failed."""
    return (not f["detected"] or not f["header_ok"]
            or (f["addressed"] and f["tb_bytes"] > 0 and not f["crc_ok"]))


class RecorderCore:
    """The recorder's logic without GNU Radio (unit-tested alone): push(samples) in stream
    order, report(fields, sample) for each rx report, tag(slot, sample) for TX slots,
    close()."""

    def __init__(self, writer: sigmf.SigMFWriter, slot_samples: int, window_start: int = 0,
                 window_len: int = 0, trigger: str = "none", margin_slots: int = 1,
                 history: int = 0, rx_trace: Path | None = None, last: int = 0):
        if trigger not in TRIGGERS:
            raise ValueError(f"capture.iq_trigger: {trigger!r} not in {TRIGGERS}")
        if last and trigger != "none":
            raise ValueError(f"capture.iq_last_s: with iq_trigger {trigger!r}: the last "
                             "seconds are kept whole (iq_trigger none)")
        writer.ring = int(last)
        self.w = writer
        self.S = int(slot_samples)
        # the synchroniser reports a slot once ltf_search + 2 cp_len samples past its end
        # arrived: a slot at the very end of a window cannot be decoded again
        writer.tail = self.S // 8
        self.w0 = int(window_start)
        self.w1 = self.w0 + int(window_len) if window_len else None
        self.trigger = trigger
        # + half a slot: the synchroniser needs samples before the first (margin) slot of a
        # segment to find it (measured: with 1/8 slot, 111 of 1135 annotated slots of the
        # test's run were not found offline; with 1/2, none)
        self.margin = int(margin_slots) * self.S + self.S // 2
        self.pos = 0  # stream index of the next sample
        self.ring = None
        self.write_lag = 0  # trigger: kept samples are written once this old (below)
        if trigger == "failed":
            self.ring = np.zeros(max(int(history), 2 * (self.S + self.margin)), np.complex64)
            # Half the ring: a kept slot's HARQ history (the earlier transmissions its TB was
            # combined with) can still be added in front of it for that long, since the
            # data file is written in stream order.
            self.write_lag = len(self.ring) // 2
        self.keep: list[list[int]] = []  # trigger: [start, end) ranges still to write
        self.kept_from = self.kept_to = 0  # trigger: the last kept stretch [from, to)
        # trigger: (annotation, its TB's earlier transmissions) of the last margin, not kept yet
        self.recent: deque = deque()
        # trigger: per HARQ process, (stream index, annotation) of each transmission of its
        # current TB that the receiver combined (since one it decoded from a fresh buffer)
        self.harq_history: dict[int, list[tuple]] = {}
        self.annotated: dict[int, None] = {}  # trigger: slot starts annotated (recent ones)
        self.written_to = 0  # trigger: samples before this are written or given up
        self.lost = 0  # trigger: samples of kept ranges that left the ring before a report
        self.slots = 0
        self.kept_slots = 0
        self.error = ""  # why the recording stopped early (e.g. disk full), '' = it did not
        self._trace_f = None
        if rx_trace is not None:
            self._trace_f = open(rx_trace, "w", newline="")
            self._trace = csv.writer(self._trace_f)
            self._trace.writerow(sigmf.RX_TRACE_COLUMNS)

    def _in_window(self, a: int, b: int) -> tuple[int, int]:
        return max(a, self.w0), b if self.w1 is None else min(b, self.w1)

    def push(self, x: np.ndarray) -> None:
        n = len(x)
        a, b = self._in_window(self.pos, self.pos + n)
        if self.trigger == "none":
            if b > a:
                self.w.write(a, x[a - self.pos:b - self.pos])
        else:
            # stream index g lives at ring[g % H]; only the last H samples are kept
            H = len(self.ring)
            m = min(n, H)
            i = (self.pos + n - m) % H
            k = min(m, H - i)
            self.ring[i:i + k] = x[n - m:n - m + k]
            self.ring[:m - k] = x[n - m + k:]
        self.pos += n
        if self.trigger == "failed":
            self._flush()

    def _flush(self) -> None:
        H = len(self.ring)
        oldest = self.pos - H
        while self.keep:
            a, b = self.keep[0]
            a = max(a, self.written_to)
            if a < oldest:
                self.lost += min(b, oldest) - a
                a = oldest
            ready = self.pos - self.write_lag
            hi = min(b, ready)
            if hi > a:
                idx = np.arange(a, hi) % H
                self.w.write(a, self.ring[idx])
                self.written_to = hi
            if b <= ready:
                self.keep.pop(0)
            else:
                break

    def report(self, f: dict, sample: int) -> None:
        self.slots += 1
        if self._trace_f is not None:
            self._trace.writerow(sigmf.rx_row(sample, f))
        a, b = self._in_window(sample, sample + self.S)
        if b <= a:
            return
        ann = (sample, self.S, f"slot {f['slot']}", _comment(f), f)
        if self.trigger == "none":
            self.w.annotate(*ann)
            return
        earlier = self._harq_history(f, sample, ann)
        # trigger: a slot is annotated only if it overlaps kept samples (the writer then
        # keeps those recorded whole); the others wait in `recent` while a later failure
        # could still keep them (its margin), so memory stays bounded over a long run
        if failed(f):
            self.kept_slots += 1
            a, b = self._in_window(sample - self.margin, sample + self.S + self.margin)
            # The earlier transmissions the receiver combined with the kept slots' TBs (this
            # one's and the margin's before it; _keep_history): without
            # them an offline decode cannot combine what the online receiver did (a TB
            # repeated after it was decoded, a margin slot whose first transmission was not
            # kept). Those that left the ring, or lie before samples already written, are
            # missing from the recording.
            self._keep_history(earlier + [x for r, e in self.recent if r[0] + self.S > a
                                          for x in e])
            self._keep_range(a, b)
            if b > a:
                self.kept_from = a if self.kept_to < a else self.kept_from
                self.kept_to = max(self.kept_to, b)
            while self.recent:
                r, _e = self.recent.popleft()
                if r[0] + self.S > self.kept_from:
                    self._annotate(r)
            self._flush()
        if sample < self.kept_to and sample + self.S > self.kept_from:
            self._annotate(ann)
            self._keep_history(earlier)  # a margin slot after a failure (written by push)
        else:
            self.recent.append((ann, earlier))
            while self.recent and self.recent[0][0][0] + self.S + self.margin < sample:
                self.recent.popleft()

    def _keep_history(self, earlier: list[tuple]) -> None:
        """Keep each earlier transmission (stream index, annotation) with half a slot on
        either side (the synchroniser finds a slot, and reports it, only with samples
        before and after it), annotated (the writer keeps it if the slot is recorded
        whole)."""
        for h, hann in earlier:
            self._keep_range(*self._in_window(h - self.S // 2, h + self.S + self.S // 2))
            self._annotate(hann)

    def _annotate(self, ann: tuple) -> None:
        """An annotation once (a slot of a kept range may also be a kept TB's history)."""
        if ann[0] in self.annotated:
            return
        self.annotated[ann[0]] = None
        self.w.annotate(*ann)
        if len(self.annotated) > 4096:  # older than any HARQ history the ring can hold
            horizon = self.pos - 2 * len(self.ring)
            self.annotated = {g: None for g in self.annotated if g >= horizon}

    def _harq_history(self, f: dict, sample: int, ann: tuple) -> list[tuple]:
        """(stream index, annotation) of the earlier transmissions this slot's TB was
        combined with (none when decoded from a fresh buffer); this one is added to its
        process's."""
        if not (f["addressed"] and f["tb_bytes"] > 0 and f["combined"] >= 1):
            return []
        pid = int(f["harq_process"])
        if f["combined"] == 1:
            self.harq_history[pid] = [(sample, ann)]
            return []
        h = self.harq_history.setdefault(pid, [])
        earlier = h[-(int(f["combined"]) - 1):]
        h.append((sample, ann))
        del h[:-16]  # more than 16 transmissions of one TB are never combined here
        return earlier

    def _keep_range(self, a: int, b: int) -> None:
        """[a, b) into the sorted, disjoint ranges still to write; what lies before the
        samples already written is left out."""
        a = max(a, self.written_to)
        if b <= a:
            return
        keep = self.keep
        i = 0
        while i < len(keep) and keep[i][1] < a:
            i += 1
        j = i
        while j < len(keep) and keep[j][0] <= b:
            a, b = min(a, keep[j][0]), max(b, keep[j][1])
            j += 1
        keep[i:j] = [[a, b]]

    def tag(self, slot: int, sample: int) -> None:
        """A transmitted slot (slot_tx's `slot` tag at its first sample)."""
        self.slots += 1
        a, b = self._in_window(sample, sample + self.S)
        if b > a:
            self.w.annotate(sample, self.S, f"slot {slot}", "transmitted",
                            {"slot": int(slot)})

    def close(self) -> dict:
        if self.ring is not None:
            self.write_lag = 0
            self._flush()
        if self._trace_f is not None:
            self._trace_f.close()
            self._trace_f = None
        meta = self.w.close()
        return meta

    def stats(self) -> dict:
        # relative to the run folder (the runner moves the folder when the run succeeds)
        mp = self.w.meta_path
        return {"file": f"{mp.parent.name}/{mp.name}", "samples": self.w.samples_written,
                "bytes": self.w.bytes_written, "slots_reported": self.slots,
                "slots_kept": self.kept_slots, "samples_lost": self.lost,
                "error": self.error}


def _comment(f: dict) -> str:
    if not f["detected"]:
        return "not detected"
    if not f["header_ok"]:
        return "header failed"
    if not f["addressed"]:
        return f"for user {f['user']}"
    if f["tb_bytes"] == 0:
        return "no TB"
    return ("TB ok" if f["crc_ok"] else "TB CRC failed") + f" (combined {f['combined']})"


_NIL = pmt.PMT_NIL
_REPORT_KEYS = [(k, pmt.intern(k)) for k in (
    "slot", "slot_estimated", "detected", "header_ok", "user", "mcs", "harq_pid", "ndi", "rv",
    "tb_bytes", "addressed", "crc_ok", "snr_db", "effective_snr_db", "cqi", "combined",
    "cfo_hz", "sample", "tb", "noise_before", "noise_count_before")]


def report_dict(msg) -> dict:
    """A slot_rx `rx` message as a dict (the keys of slot_messages.cc), half the cost of
    pmt.to_python."""
    out = {}
    for k, key in _REPORT_KEYS:
        v = pmt.dict_ref(msg, key, _NIL)
        if pmt.is_null(v):
            continue
        if k == "tb":
            out[k] = bytes(pmt.u8vector_elements(v))
        elif pmt.is_bool(v):
            out[k] = pmt.to_bool(v)
        elif pmt.is_uint64(v):
            out[k] = pmt.to_uint64(v)
        elif pmt.is_integer(v):
            out[k] = pmt.to_long(v)
        else:
            out[k] = pmt.to_double(v)
    return out


class iq_recorder(gr.sync_block):
    """GNU Radio sink: one complex input, message input `rx` (slot_rx reports). With
    tx=True, annotates from the `slot` stream tags instead."""

    def __init__(self, core: RecorderCore, tx: bool = False):
        gr.sync_block.__init__(self, name="oppsched_iq_recorder", in_sig=[np.complex64],
                               out_sig=None)
        self.core = core
        self.tx = tx
        self.message_port_register_in(pmt.intern("rx"))
        self.set_msg_handler(pmt.intern("rx"), self._on_rx)
        self._slot_key = pmt.intern("slot")

    def _on_rx(self, msg) -> None:
        if self.core.error:
            return
        try:
            d = report_dict(msg)
            self.core.report(sigmf.slot_fields(d), int(d["sample"]))
        except Exception as exc:  # a bad report must not stop the recording
            log.warning("iq capture: report not recorded: %s", exc)

    def work(self, input_items, output_items):
        x = input_items[0]
        if self.core.error:  # the recording stopped (disk full, ...): the PHY goes on
            return len(x)
        try:
            if self.tx:
                for t in self.get_tags_in_window(0, 0, len(x), self._slot_key):
                    self.core.tag(pmt.to_python(t.value), t.offset)
            self.core.push(x)
        except OSError as exc:
            self.core.error = f"{self.core.w.data_path}: {exc.strerror or exc}"
            log.error("iq capture stopped (the run goes on): %s", self.core.error)
        return len(x)


# ---- wiring (phy.yaml `capture:`) -------------------------------------------------------

def capture_dir(cfg: dict) -> Path:
    c = cfg["capture"]
    return Path(c["dir"]) if c["dir"] else Path(cfg["run_dir"]) / "iq"


def make_core(cfg: dict, name: str, description: str, hw: str, extra: dict,
              frequency: float | None = None, rx_trace: bool = True) -> RecorderCore:
    """A RecorderCore writing <capture dir>/<name>.sigmf-{data,meta} (and <name>.rx.csv)
    with the window, trigger and margin of cfg["capture"]."""
    c, s = cfg["capture"], cfg["sample"]
    fs = s["sample_rate"]
    slot_samples = int(round(cfg["slot_s"] * fs))
    out = capture_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    w = sigmf.SigMFWriter(
        out / name, fs, description=description, hw=hw, frequency=frequency,
        extra_global={**extra, "capture": {
            "window_start_s": c["iq_window_start_s"], "window_s": c["iq_window_s"],
            "last_s": c["iq_last_s"], "trigger": c["iq_trigger"],
            "margin_slots": c["iq_margin_slots"]}})
    return RecorderCore(
        w, slot_samples, round(c["iq_window_start_s"] * fs), round(c["iq_window_s"] * fs),
        c["iq_trigger"], c["iq_margin_slots"], history=round(HISTORY_S * fs),
        rx_trace=out / f"{name}.rx.csv" if rx_trace else None,
        last=round(c["iq_last_s"] * fs))


def attach_rx(tb, cfg: dict, user: dict, src, rx, rx_params: dict, description: str,
              hw: str, frequency: float | None = None) -> iq_recorder:
    """An iq_recorder on `src` (what slot_rx `rx` receives) fed by rx's reports."""
    s = cfg["sample"]
    receiver = {"profile": s["profile"], "sample_rate": s["sample_rate"], "fec": s["fec"],
                "user_id": user["id"], "slot_s": cfg["slot_s"],
                "slot_samples": int(rx.slot_samples()), **rx_params}
    core = make_core(cfg, user["name"], description, hw,
                     {"receiver": receiver, "user": user["name"]}, frequency)
    rec = iq_recorder(core)
    tb.connect(src, rec)
    tb.msg_connect(rx, "rx", rec, "rx")
    return rec


def attach_tx(tb, cfg: dict, tx, description: str, hw: str,
              frequency: float | None = None) -> iq_recorder:
    """An iq_recorder on slot_tx `tx`'s output (the AP's transmission), annotated from its
    `slot` tags. The trigger does not apply (no decode result): the window does."""
    core = make_core(cfg, "ap.tx", description, hw, {"transmitter": {
        "profile": cfg["sample"]["profile"], "fec": cfg["sample"]["fec"],
        "slot_s": cfg["slot_s"]}}, frequency, rx_trace=False)
    core.trigger = "none"
    core.ring = None
    rec = iq_recorder(core, tx=True)
    tb.connect(tx, rec)
    return rec


def set_t0(recorders, t0_unix: float) -> None:
    """Wall-clock time of stream index 0 (core:datetime of each capture)."""
    for r in recorders:
        r.core.w.set_t0(t0_unix)


def close_all(recorders) -> list[dict]:
    """Closes each recording (after the flowgraph stopped); returns their stats."""
    out = []
    for r in recorders:
        try:
            r.core.close()
        except OSError as exc:  # the metadata could not be written: say so in the stats
            r.core.error = r.core.error or f"{r.core.w.meta_path}: {exc.strerror or exc}"
            log.error("iq capture: %s", r.core.error)
        out.append(r.core.stats())
    return out
