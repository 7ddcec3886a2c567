"""`oppsched linkcurves` and `oppsched mcstable`: measured BLER vs SNR per MCS through the
real PHY chain, and the CQI -> MCS table the MAC uses, derived from those curves.

The chain is the exact C++ the GNU Radio blocks wrap (gnuradio.oppsched bindings):

    TB bytes --tb_encoder--> payload REs --+
    header_fields --header_codec--> REs ---+--ofdm_modulator--> slot samples
      (slots back to back in one continuous stream, as slot_tx sends them)
    --channel_emulator (AWGN, or flat Jakes fading + AWGN; seeded)-->
    --slot_receiver (the receiver of the slot_rx block: slot_sync detection, timing and
      CFO; ofdm_demodulator channel estimate, equaliser and per-RE noise variance; header
      decode; header-aided channel estimation; tb_decoder with its HARQ buffers and
      CRC-32)--> compared with the TB sent.

A TB counts as an error when the receiver would not deliver it: the slot was not detected
(missed_detections), its header failed or decoded to other fields (header_errors), or the
payload CRC failed / the bytes differ. errors / slots = bler is the first-transmission BLER
the MAC experiences, so header and sync losses are part of it (and reported separately).

SNR (snr_db) is the mean Es/N0 per occupied subcarrier (numerology.h): the channel
emulator's mean_snr_db, the quantity the SNR estimator and the CQI report. snr_est_db is the
receiver's own estimate (mean over the detected slots, dB), a check of that convention.

spectral_efficiency is the MCS's information bits per data subcarrier per OFDM symbol,
N_BPSC * R (0.5 for BPSK 1/2 ... 5 for 64QAM 5/6); tb_bits_per_re is what the TB actually
delivers, 8 tbs / payload REs (lower by the CRC-32, the tail and the whole-byte TB size).
The Shannon limit at a spectral efficiency s is SNR = 2^s - 1 (AWGN capacity per
subcarrier; Es/N0 per subcarrier is the SNR of that channel).

Sweep and run time: for each MCS the SNR points are measured in increasing order; a point
stops after --min-errors first-transmission errors or --slots TBs, whichever first; after
the first point with no error at all, the higher SNR points of that MCS are skipped (not
written) unless --no-skip. Every point has its own seed, derived from (--seed, MCS, SNR,
channel), so a point's result does not depend on the rest of the sweep.

HARQ (--harq): slot k serves HARQ process k mod --harq-processes (so a retransmission goes
out that many slots after the previous transmission of its TB, as with a feedback delay
just under it), up to --max-tx transmissions with the MAC's RV sequence 0, 2, 3, 1; the
receiver combines in the tb_decoder's soft buffer (chase / incremental redundancy).
bler_txN = fraction of TBs not delivered after N transmissions (bler_tx1 = bler).

The CQI -> MCS table (--table, or `oppsched mcstable CURVES.csv`): per MCS the SNR at which
the first-transmission BLER falls to the target (10%), interpolated between the two
measured points around the crossing in log10(BLER) (linearly in BLER when one of them
measured 0, the same rule as the abstract PHY's LinkCurves, so that it reads exactly the
target BLER at the threshold); rate_bps = 8 * TB bytes of the MCS in the profile's slot /
the slot duration, so that mcs_table::bytes_per_slot gives back exactly the PHY's TB size.
"""

from __future__ import annotations

import csv
import json
import math
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from oppsched import mac
from oppsched.config import ConfigError, renamed_value
from oppsched.commands.linkcurves_fg import blocks_available, measure_point_flowgraph
from oppsched.names import FECS, PROFILE_ALIASES, PROFILES

# The MAC's default RV sequence (host/include/oppsched/harq.h; docs/architecture.md, HARQ):
# RV 0 then RV 2 gives the full rate-1/2 mother code on the first retransmission.
RV_SEQUENCE = (0, 2, 3, 1)
CHANNELS = ("awgn", "fading")
LEAD_SAMPLES = 400  # silence before the first slot (the sync's metric window fills)

CSV_COLUMNS = [
    "mcs", "modulation", "code_rate", "spectral_efficiency", "snr_db", "tbs", "slots",
    "errors", "bler", "header_errors", "missed_detections", "false_detections",
    "snr_est_db", "tb_bits_per_re", "transmissions", "channel", "profile", "fec", "sample_rate_hz",
]
MODULATION = {1: "BPSK", 2: "QPSK", 4: "16QAM", 6: "64QAM"}
LDPC_LENGTHS = (648, 1296, 1944)  # the 802.11n codeword lengths (--ldpc-max-n)


def _phy():
    try:
        from gnuradio import oppsched as phy
    except ImportError as exc:  # pragma: no cover - only without a build
        raise ConfigError(
            "linkcurves needs the PHY bindings (gnuradio.oppsched): run `make build` and use "
            f"the project's .venv ({exc})") from None
    missing = [n for n in _PHY_NAMES if not hasattr(phy, n)]
    if missing:
        raise ConfigError(
            f"linkcurves: the gnuradio.oppsched found at {getattr(phy, '__file__', '?')} lacks "
            f"{', '.join(missing)}: that build is out of date (run `make build`)")
    return phy


_PHY_NAMES = ("numerology", "mcs_set", "tb_encoder", "header_codec", "ofdm_modulator",
              "slot_receiver", "channel_emulator")


# ---------------------------------------------------------------------------------------
# Argument parsing helpers (errors name the argument)


def parse_snr_range(text: str, arg: str = "--snr") -> list[float]:
    """'A:B:STEP' -> [A, A+STEP, ..., <= B] (B included when on the grid); a single number
    is one point; 'x,y,z' is a list."""
    t = str(text).strip()
    try:
        if ":" in t:
            parts = t.split(":")
            if len(parts) != 3:
                raise ValueError
            a, b, step = (float(p) for p in parts)
            if not all(math.isfinite(v) for v in (a, b, step)):
                raise ConfigError(f"{arg}: {text!r}: values must be finite")
            if step <= 0:
                raise ConfigError(f"{arg}: {text!r}: STEP must be > 0")
            if b < a:
                raise ConfigError(f"{arg}: {text!r}: B must be >= A")
            n = int(math.floor((b - a) / step + 1e-9)) + 1
            if n > 1000:
                raise ConfigError(f"{arg}: {text!r}: {n} points, at most 1000")
            return [round(a + i * step, 6) for i in range(n)]
        vals = [float(p) for p in t.split(",") if p.strip() != ""]
    except ConfigError:
        raise
    except ValueError:
        raise ConfigError(f"{arg}: {text!r} is not A:B:STEP or a comma list of numbers "
                          "(dB)") from None
    if not vals or not all(math.isfinite(v) for v in vals):
        raise ConfigError(f"{arg}: {text!r}: no finite SNR given")
    return sorted(set(vals))


def parse_mcs_list(text: str, arg: str = "--mcs") -> list[int]:
    """'all', '3', '0,2,5' or ranges '0-3,7' -> sorted MCS indices in 0..7."""
    t = str(text).strip().lower()
    if t == "all":
        return list(range(8))
    out: set[int] = set()
    try:
        for part in t.split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                rng = range(int(lo), int(hi) + 1)
                if not rng:
                    raise ConfigError(f"{arg}: {text!r}: empty range {part!r}")
                out.update(rng)
            else:
                out.add(int(part))
    except ConfigError:
        raise
    except ValueError:
        raise ConfigError(f"{arg}: {text!r} is not 'all' or a list of MCS indices "
                          "(e.g. 0,2,4-7)") from None
    if not out:
        raise ConfigError(f"{arg}: {text!r}: no MCS given")
    bad = [m for m in sorted(out) if not 0 <= m <= 7]
    if bad:
        raise ConfigError(f"{arg}: MCS {bad[0]} not in 0..7")
    return sorted(out)


# ---------------------------------------------------------------------------------------
# Configuration


@dataclass
class SweepConfig:
    channel: str = "awgn"
    mcs: list = field(default_factory=lambda: list(range(8)))
    snrs: list = field(default_factory=lambda: parse_snr_range("-4:26:1"))
    tbs: Optional[int] = None  # bytes; None = the largest TB of each MCS
    harq: bool = False
    max_tx: int = 4
    harq_processes: int = 4
    profile: str = "evdo"
    fec: str = "ldpc"  # payload FEC: ldpc | conv (numerology.h)
    sample_rate: float = 1e6
    slots: int = 2000  # TBs per point at most
    min_errors: int = 100  # first-transmission errors that end a point
    seed: int = 1
    doppler_hz: float = 60.0  # fading only
    cfo_hz: float = 0.0
    skip_after_zero: bool = True
    target_bler: float = 0.1
    flowgraph: bool = False
    ldpc_max_n: int = 1944  # longest LDPC codeword (numerology_params::ldpc_max_n)
    stop_below: Optional[float] = None  # skip an MCS's higher SNRs once its BLER < this
    ideal_rx: bool = False  # payload REs, AWGN and the exact N0 only (measure_point_ideal)

    def validate(self) -> None:
        """ConfigError naming the command-line argument."""
        if self.channel not in CHANNELS:
            raise ConfigError(f"--channel: {self.channel!r} not one of {', '.join(CHANNELS)}")
        self.profile = renamed_value("--profile", self.profile, PROFILE_ALIASES)
        if self.profile not in PROFILES:
            raise ConfigError(f"--profile: {self.profile!r} not one of {', '.join(PROFILES)}")
        if self.fec not in FECS:
            raise ConfigError(f"--fec: {self.fec!r} not one of {', '.join(FECS)}")
        if not (math.isfinite(self.sample_rate) and self.sample_rate > 0):
            raise ConfigError(f"--sample-rate: {self.sample_rate!r} not > 0 (Hz)")
        if self.slots < 1:
            raise ConfigError(f"--slots: {self.slots} not >= 1")
        if self.min_errors < 1:
            raise ConfigError(f"--min-errors: {self.min_errors} not >= 1")
        if self.seed < 0:
            raise ConfigError(f"--seed: {self.seed} not >= 0")
        if not 1 <= self.max_tx <= 16:
            raise ConfigError(f"--max-tx: {self.max_tx} not in 1..16")
        if not 2 <= self.harq_processes <= 16:
            raise ConfigError(f"--harq-processes: {self.harq_processes} not in 2..16 (a "
                              "retransmission needs the outcome of the previous slot of its "
                              "process)")
        if not (math.isfinite(self.doppler_hz) and self.doppler_hz >= 0):
            raise ConfigError(f"--doppler: {self.doppler_hz!r} not >= 0 (Hz)")
        if not (math.isfinite(self.cfo_hz) and abs(self.cfo_hz) < self.sample_rate / 2):
            raise ConfigError(f"--cfo: {self.cfo_hz!r} not within +-sample_rate/2")
        if not 0 < self.target_bler < 1:
            raise ConfigError(f"--target-bler: {self.target_bler!r} not in (0, 1)")
        if self.ldpc_max_n not in LDPC_LENGTHS:
            raise ConfigError(f"--ldpc-max-n: {self.ldpc_max_n!r} not one of "
                              f"{', '.join(map(str, LDPC_LENGTHS))} (802.11n codeword lengths)")
        if self.ldpc_max_n != LDPC_LENGTHS[-1] and self.fec != "ldpc":
            raise ConfigError(f"--ldpc-max-n: {self.ldpc_max_n} needs --fec ldpc, not "
                              f"{self.fec!r}")
        if self.stop_below is not None and not 0 < self.stop_below <= 1:
            raise ConfigError(f"--stop-below: {self.stop_below!r} not in (0, 1]")
        if self.ideal_rx and (self.channel != "awgn" or self.harq or self.flowgraph):
            raise ConfigError("--ideal-rx: only with --channel awgn, without --harq and "
                              "--flowgraph")
        if not self.mcs:
            raise ConfigError("--mcs: no MCS given")
        if not self.snrs:
            raise ConfigError("--snr: no SNR given")
        phy = _phy()
        if self.flowgraph:
            if self.harq:
                raise ConfigError("--flowgraph: --harq is not supported (the grants are made "
                                  "before the run, without feedback)")
            if self.ldpc_max_n != LDPC_LENGTHS[-1]:
                raise ConfigError("--flowgraph: --ldpc-max-n is not supported (the blocks "
                                  "use the PHY's default codeword lengths)")
            if not blocks_available(phy):
                raise ConfigError("--flowgraph: the gr-oppsched blocks (slot_tx, slot_rx, "
                                  "channel_emulator_cc) are not in this build")
        try:
            num = make_numerology(phy, self.profile, self.sample_rate, self.fec, self.ldpc_max_n)
        except ValueError as exc:
            raise ConfigError(f"--sample-rate: {self.sample_rate:g} Hz does not fit the "
                              f"{self.profile} profile ({exc})") from None
        if self.tbs is not None:
            if self.tbs < 1:
                raise ConfigError(f"--tbs: {self.tbs} not >= 1 (bytes)")
            for m in self.mcs:
                cap = phy.mcs_set.tb_bytes(m, num)
                if self.tbs > cap:
                    raise ConfigError(
                        f"--tbs: {self.tbs} bytes does not fit MCS {m} "
                        f"({phy.mcs_set.get(m).name}) in a {self.profile} slot at "
                        f"{self.sample_rate:g} Hz (at most {cap} bytes)")
                if self.tbs > 65535:
                    raise ConfigError(f"--tbs: {self.tbs} exceeds the header's 16-bit field")


def make_numerology(phy, profile: str, sample_rate: float, fec: str = "ldpc",
                    ldpc_max_n: int = 1944):
    """The profile's numerology with its LDPC codewords capped at ldpc_max_n bits (the
    default 1944 is the PHY's own numerology; TB sizes do not depend on the cap)."""
    num = phy.numerology.profile(profile, sample_rate, fec)
    if ldpc_max_n == LDPC_LENGTHS[-1]:
        return num
    p = num.params
    p.ldpc_max_n = int(ldpc_max_n)
    return phy.numerology(p)


def _snr_key(snr: float) -> int:
    """A non-negative integer naming an SNR point (0.001 dB resolution) for seeding."""
    return int(round((snr + 1000.0) * 1000.0))


# ---------------------------------------------------------------------------------------
# One measurement point through the pure C++ classes


class Chain:
    """TX and RX objects of one numerology, shared by every point of a sweep."""

    def __init__(self, cfg: SweepConfig):
        phy = _phy()
        self.phy = phy
        self.cfg = cfg
        self.num = make_numerology(phy, cfg.profile, cfg.sample_rate, cfg.fec, cfg.ldpc_max_n)
        self.enc = phy.tb_encoder(self.num)
        self.hdr = phy.header_codec(self.num)
        self.mod = phy.ofdm_modulator(self.num)

    def tb_bytes(self, mcs: int) -> int:
        return int(self.cfg.tbs or self.phy.mcs_set.tb_bytes(mcs, self.num))

    def emulator(self, snr_db: float, seed: int):
        phy, cfg = self.phy, self.cfg
        fading = phy.fading_model.none if cfg.channel == "awgn" else phy.fading_model.jakes
        user = phy.emulator_user_params(mean_snr_db=float(snr_db), fading=fading,
                                        doppler_hz=float(cfg.doppler_hz),
                                        cfo_hz=float(cfg.cfo_hz))
        return phy.channel_emulator(phy.channel_emulator_params(
            numerology=self.num.params, users=[user], seed=int(seed)))

    def point_runner(self, mcs: int, snr_db: float, **kwargs) -> "PointRunner":
        """A PointRunner of this chain (kwargs: PointRunner's options)."""
        return PointRunner(self, mcs, snr_db, **kwargs)


class _Proc:
    """TX side of one HARQ process."""

    __slots__ = ("active", "tb", "tb_id", "ndi", "tx", "last_slot", "filler")

    def __init__(self):
        self.active = False
        self.tb = b""
        self.tb_id = -1
        self.ndi = False
        self.tx = 0
        self.last_slot = -1
        self.filler = False


class PointRunner:
    """Measures one (MCS, SNR) point: a continuous stream of back-to-back slots through
    emulator -> slot_receiver (user 1).

    The outcome of slot k is final once slot k+1 has been pushed through the sync (a slot
    is reported at most ltf_search + 2 cp_len samples after its end, far less than a slot),
    so with >= 2 HARQ processes the TX knows a TB's previous outcome before it schedules
    the retransmission."""

    def __init__(self, chain: Chain, mcs: int, snr_db: float, lead: int = LEAD_SAMPLES,
                 empty_first_slot: bool = False, fresh_first_buffer: bool = True):
        """lead: zero samples before slot 0; empty_first_slot: slot 0 goes out empty (no
        TB, header user 0xFFFF) and is not counted, as slot_tx sends a slot without grant.
        lead 0 + empty_first_slot gives exactly the sample stream of the flowgraph mode.
        fresh_first_buffer: a TB's first transmission is decoded from an empty soft buffer
        (see _rx_slot); False keeps the receiver's own 1-bit-NDI rule, exactly as slot_rx
        in the flowgraph mode does."""
        self.fresh_first_buffer = fresh_first_buffer
        self.chain = chain
        self.cfg = chain.cfg
        self.mcs = mcs
        self.snr = snr_db
        phy = chain.phy
        cfg = self.cfg
        chan_code = CHANNELS.index(cfg.channel)
        ss = np.random.SeedSequence([cfg.seed, mcs, _snr_key(snr_db), chan_code])
        em_seed, rng_seed = (int(v) for v in ss.generate_state(2, dtype=np.uint64))
        self.rng = np.random.default_rng(rng_seed)
        self.em = chain.emulator(snr_db, em_seed & 0x7FFFFFFFFFFFFFFF)
        # The runner numbers the slots itself (from the stream position), so the receiver's
        # missed-slot reports are not needed.
        self.rx = phy.slot_receiver(chain.num, user_id=1, missed_slots=0)
        # Without HARQ two alternating processes: each TB is new (max_tx 1), and the TX loop
        # reads the outcome of slot k-2, which is final when slot k is built.
        self.nproc = cfg.harq_processes if cfg.harq else 2
        self.max_tx = cfg.max_tx if cfg.harq else 1
        self.tbs = chain.tb_bytes(mcs)
        self.ss = chain.num.slot_samples
        self.cp = chain.num.params.cp_len
        self.lead = int(lead)
        self.empty_first_slot = bool(empty_first_slot)
        self.untracked: set[int] = set()  # slots sent without a TB (not counted)
        # per slot k: (header_fields, tb bytes, proc index, tb_id, tx number, filler)
        self.sent: dict[int, tuple] = {}
        self.outcome: dict[int, str] = {}  # 'ok' | 'crc' | 'header' | 'missed'
        self.detected: set[int] = set()
        self.next_final = 0  # slots < next_final have an outcome
        # statistics
        self.tb_needed: list[int] = []  # per TB: transmissions needed, 0 = never delivered
        self.first_errors = 0
        self.header_errors = 0
        self.missed = 0
        self.false_det = 0
        self.transmissions = 0
        self.snr_est: list[float] = []
        self.tb_started = 0

    # ---- RX ----
    def _rx_slot(self, k: int, detection) -> str:
        h_sent, tb, _p, _id, tx, _f = self.sent[k]
        # A TB's first transmission starts from an empty soft buffer. The 1-bit NDI alone
        # cannot guarantee it here: when the previous TB of the process was never received
        # (a missed slot, e.g. every slot without --harq), the buffer still holds the TB
        # before it, whose NDI equals the new one's, and the receiver would combine two
        # different TBs (measured: 93 spurious CRC failures in 1100 MCS 0 slots at 0 dB).
        # The MAC avoids it by resending unheard TBs with the same NDI (docs/daemons.md); a
        # measurement of BLER must not include it.
        rec, _reports = self.rx.receive(detection,
                                        fresh_harq=tx == 1 and self.fresh_first_buffer)
        if rec.valid:
            self.snr_est.append(rec.report.snr_db)
        # a corrupted header that passed the CRC loses the TB all the same
        if not rec.report.header_ok or rec.header != h_sent:
            return "header"
        return "ok" if (rec.report.crc_ok and rec.report.tb == tb) else "crc"

    def _on_detections(self, dets) -> None:
        lead, ss = self.lead, self.ss
        for d in dets:
            k = int(round((int(d.start) - lead) / ss))
            off = int(d.start) - (lead + k * ss)
            if k in self.untracked and abs(off) <= self.cp:
                continue
            if (k not in self.sent or abs(off) > self.cp or k in self.detected
                    or k < self.next_final):
                self.false_det += 1
                continue
            self.detected.add(k)
            self.outcome[k] = self._rx_slot(k, d)

    def _finalise_until(self, k_end: int) -> None:
        """Slots < k_end are final: undetected ones are missed."""
        while self.next_final < k_end:
            k = self.next_final
            if k in self.sent and k not in self.outcome:
                self.outcome[k] = "missed"
            self.detected.discard(k)
            self.next_final += 1

    # ---- TX ----
    def _new_tb(self, st: _Proc, filler: bool) -> None:
        st.active = True
        st.tb = self.rng.bytes(self.tbs)
        st.ndi = not st.ndi
        st.tx = 0
        st.filler = filler
        if not filler:
            st.tb_id = self.tb_started
            self.tb_started += 1

    def _resolve(self, st: _Proc) -> None:
        """Apply the outcome of the process's last transmission."""
        if not st.active or st.last_slot < 0:
            return
        out = self.outcome.pop(st.last_slot)
        self.sent.pop(st.last_slot, None)
        if not st.filler:
            if st.tx == 1:
                if out != "ok":
                    self.first_errors += 1
                if out == "header":
                    self.header_errors += 1
                elif out == "missed":
                    self.missed += 1
            if out == "ok":
                self.tb_needed.append(st.tx)
            elif st.tx >= self.max_tx:
                self.tb_needed.append(0)
        if out == "ok" or st.tx >= self.max_tx:
            st.active = False
        st.last_slot = -1

    def _stopping(self) -> bool:
        return self.tb_started >= self.cfg.slots or self.first_errors >= self.cfg.min_errors

    def run(self, heartbeat: Optional[Callable] = None) -> dict:
        phy = self.chain.phy
        procs = [_Proc() for _ in range(self.nproc)]
        push = self.rx.detect
        if self.lead:
            self._on_detections(push(self.em.process(np.zeros(self.lead, np.complex64))[0]))
        k = 0
        if self.empty_first_slot:
            # exactly slot_tx's empty slot: header user 0xFFFF, everything else 0, payload
            # REs the modulator's known padding
            h = phy.header_fields(user=mac.wire.USER_NOBODY, slot=0)
            x = self.chain.mod.modulate(self.chain.hdr.encode(h), np.zeros(0, np.complex64))
            self.untracked.add(0)
            self._on_detections(push(self.em.process(x)[0]))
            k = 1
        last_beat = time.monotonic()
        while True:
            p = k % self.nproc
            st = procs[p]
            self._resolve(st)
            if not st.active:
                stop = self._stopping()
                if stop and not any(q.active and not q.filler for q in procs):
                    break
                self._new_tb(st, filler=stop)
            st.tx += 1
            rv = RV_SEQUENCE[(st.tx - 1) % len(RV_SEQUENCE)]
            h = phy.header_fields(user=1, mcs=self.mcs, harq_process=p, ndi=st.ndi, rv=rv,
                                  tb_bytes=self.tbs, slot=k)
            payload = self.chain.enc.encode(st.tb, mcs=self.mcs, rv=rv,
                                            scrambler_seed=phy.scrambler_seed_for_slot(k))
            x = self.chain.mod.modulate(self.chain.hdr.encode(h), payload)
            self.sent[k] = (h, st.tb, p, st.tb_id, st.tx, st.filler)
            st.last_slot = k
            if not st.filler:
                self.transmissions += 1
            self._on_detections(push(self.em.process(x)[0]))
            self._finalise_until(k)  # slot k-1 was reported (if found) inside slot k
            k += 1
            if heartbeat is not None and time.monotonic() - last_beat > 2.0:
                last_beat = time.monotonic()
                heartbeat(self.tb_started, self.first_errors)
            # in-flight TBs of the last slots resolve at the next visits of their process;
            # after the stop every process still running one keeps being served
        # flush: the remaining outcomes are not needed (only fillers are in flight)
        return self.result()

    def result(self) -> dict:
        chain, mcs = self.chain, self.mcs
        info = chain.phy.mcs_set.get(mcs)
        n_tb = len(self.tb_needed)
        row = {
            "mcs": mcs,
            "modulation": MODULATION[info.bits_per_symbol],
            "code_rate": round(info.code_rate, 6),
            "spectral_efficiency": round(info.spectral_efficiency, 6),
            "snr_db": self.snr,
            "tbs": self.tbs,
            "slots": n_tb,
            "errors": self.first_errors,
            "bler": self.first_errors / n_tb if n_tb else float("nan"),
            "header_errors": self.header_errors,
            "missed_detections": self.missed,
            "false_detections": self.false_det,
            "snr_est_db": (round(float(np.mean(self.snr_est)), 3) if self.snr_est
                           else float("nan")),
            "tb_bits_per_re": round(8 * self.tbs / chain.num.payload_resource_elements, 6),
            "transmissions": self.transmissions,
            "channel": self.cfg.channel,
            "profile": self.cfg.profile,
            "fec": self.cfg.fec,
            "sample_rate_hz": self.cfg.sample_rate,
        }
        if self.cfg.harq:
            for t in range(2, self.max_tx + 1):
                fail = sum(1 for x in self.tb_needed if x == 0 or x > t)
                row[f"bler_tx{t}"] = fail / n_tb if n_tb else float("nan")
        return row


# ---------------------------------------------------------------------------------------
# The sweep


def measure_point_ideal(chain: Chain, mcs: int, snr_db: float) -> dict:
    """--ideal-rx: the payload REs of each TB through complex AWGN of N0 = 10^(-SNR/10)
    (unit-energy REs, so SNR is the Es/N0 of a data RE, the convention's value) into the
    tb_decoder with that exact N0 per RE: no preamble, header, sync, channel estimate or
    gain tracking. What the code, the rate matching and the demapper need alone; the
    difference to the real receiver's threshold is the receiver's loss."""
    phy, cfg = chain.phy, chain.cfg
    ss = np.random.SeedSequence([cfg.seed, mcs, _snr_key(snr_db), len(CHANNELS) + 1])
    rng = np.random.default_rng(ss.generate_state(1, dtype=np.uint64)[0])
    dec = phy.tb_decoder(chain.num)
    harq = dec.make_harq_buffer()
    tbs = chain.tb_bytes(mcs)
    n0 = 10.0 ** (-snr_db / 10.0)
    n_re = chain.num.payload_resource_elements
    nv = np.full(n_re, n0, np.float32)
    slots = errors = 0
    ndi = False
    while slots < cfg.slots and errors < cfg.min_errors:
        tb = rng.bytes(tbs)
        seed = phy.scrambler_seed_for_slot(slots)
        x = chain.enc.encode(tb, mcs=mcs, rv=0, scrambler_seed=seed)
        w = (rng.standard_normal(n_re) + 1j * rng.standard_normal(n_re)) * math.sqrt(n0 / 2)
        ndi = not ndi
        harq.clear()
        r = dec.decode((x + w).astype(np.complex64), nv, harq, mcs=mcs, rv=0, tb_bytes=tbs,
                       ndi=ndi, scrambler_seed=seed)
        slots += 1
        errors += not (r.crc_ok and r.bytes == tb)
    info = phy.mcs_set.get(mcs)
    return {
        "mcs": mcs, "modulation": MODULATION[info.bits_per_symbol],
        "code_rate": round(info.code_rate, 6),
        "spectral_efficiency": round(info.spectral_efficiency, 6), "snr_db": snr_db,
        "tbs": tbs, "slots": slots, "errors": errors, "bler": errors / slots,
        "header_errors": 0, "missed_detections": 0, "false_detections": 0,
        "snr_est_db": float("nan"), "tb_bits_per_re": round(8 * tbs / n_re, 6),
        "transmissions": slots, "channel": cfg.channel, "profile": cfg.profile,
        "fec": cfg.fec, "sample_rate_hz": cfg.sample_rate,
    }


def measure_point(chain: Chain, mcs: int, snr_db: float, heartbeat=None) -> dict:
    if chain.cfg.flowgraph:
        return measure_point_flowgraph(chain, mcs, snr_db)
    if chain.cfg.ideal_rx:
        return measure_point_ideal(chain, mcs, snr_db)
    return PointRunner(chain, mcs, snr_db).run(heartbeat)


def run_sweep(cfg: SweepConfig, log=None) -> list[dict]:
    """Every (MCS, SNR) point of cfg, in MCS then SNR order. `log(str)` gets progress."""
    cfg.validate()
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    chain = Chain(cfg)
    rows: list[dict] = []
    total = len(cfg.mcs) * len(cfg.snrs)
    done = 0
    t_start = time.monotonic()
    for mcs in cfg.mcs:
        info = chain.phy.mcs_set.get(mcs)
        for i, snr in enumerate(cfg.snrs):
            t0, c0 = time.monotonic(), time.process_time()

            def beat(n, e, mcs=mcs, snr=snr):
                log(f"    ... mcs {mcs} at {snr:g} dB: {n} TBs, {e} errors")

            row = measure_point(chain, mcs, snr, beat)
            rows.append(row)
            done += 1
            cpu = time.process_time() - c0
            extra = ""
            if cfg.harq:
                extra = " after " + ", ".join(
                    f"{t} tx {row[f'bler_tx{t}']:.3g}" for t in range(2, cfg.max_tx + 1))
            log(f"[{done}/{total}] mcs {mcs} ({info.name}) snr {snr:6.2f} dB: "
                f"{row['slots']:5d} TBs, {row['errors']:4d} errors, bler {row['bler']:.4f}"
                f"{extra} (header {row['header_errors']}, missed {row['missed_detections']}; "
                f"est {row['snr_est_db']:.2f} dB) {row['transmissions'] / max(cpu, 1e-9):.0f} "
                f"slots/s, {time.monotonic() - t0:.1f} s")
            if (cfg.stop_below is not None and row["slots"] > 0
                    and row["bler"] < cfg.stop_below):
                skipped = len(cfg.snrs) - i - 1
                if skipped:
                    log(f"    mcs {mcs}: bler {row['bler']:.4f} < {cfg.stop_below:g} at "
                        f"{snr:g} dB, {skipped} higher SNR point(s) skipped (--stop-below)")
                    done += skipped
                break
            if cfg.skip_after_zero and row["errors"] == 0 and row["slots"] > 0:
                skipped = len(cfg.snrs) - i - 1
                if skipped:
                    log(f"    mcs {mcs}: no error at {snr:g} dB, {skipped} higher SNR point(s) "
                        "skipped (--no-skip measures them)")
                    done += skipped
                break
    log(f"linkcurves: {len(rows)} points in {time.monotonic() - t_start:.1f} s")
    return rows


# ---------------------------------------------------------------------------------------
# CSV I/O


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.6g}"
    return str(v)


def write_csv(rows: list[dict], path: Path) -> None:
    cols = list(CSV_COLUMNS)
    extra = sorted({k for r in rows for k in r if k.startswith("bler_tx")},
                   key=lambda s: int(s[7:]))
    cols[cols.index("bler") + 1:cols.index("bler") + 1] = extra
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow([_fmt(r.get(c, "")) for c in cols])


_INT_COLS = {"mcs", "tbs", "slots", "errors", "header_errors", "missed_detections",
             "false_detections", "transmissions"}
_STR_COLS = {"modulation", "channel", "profile", "fec"}


def read_summary(path, arg: str) -> dict:
    """A linkcurves summary.json (the file, or the folder holding it): the measured
    thresholds per MCS (`mcs`) and the sweep's `config`. ConfigError naming the argument
    and the file when it cannot be read or is not one."""
    p = Path(path)
    f = p / "summary.json" if p.is_dir() else p
    try:
        s = json.loads(f.read_text())
    except OSError as exc:
        raise ConfigError(f"{arg}: {str(f)!r} cannot be read ({exc.strerror})") from None
    except ValueError as exc:
        raise ConfigError(f"{arg}: {str(f)!r} is not JSON ({exc})") from None
    if not isinstance(s, dict) or not isinstance(s.get("mcs"), list):
        raise ConfigError(f"{arg}: {str(f)!r} is not a linkcurves summary.json (no 'mcs' list)")
    return s


def read_csv(path: Path, arg: str = "CURVES") -> list[dict]:
    """Rows of a linkcurves.csv; ConfigError naming the file and line on bad content."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{arg}: {str(path)!r} cannot be read ({exc.strerror})") from None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise ConfigError(f"{arg}: {str(path)!r} is empty")
    reader = csv.DictReader(lines)
    need = {"mcs", "snr_db", "bler"}
    missing = need - set(reader.fieldnames or [])
    if missing:
        raise ConfigError(f"{arg}: {str(path)!r} lacks column(s) {', '.join(sorted(missing))}")
    rows = []
    for i, r in enumerate(reader, start=2):
        out = {}
        for k, v in r.items():
            if k is None:
                continue
            try:
                if k in _STR_COLS:
                    out[k] = v
                elif k in _INT_COLS:
                    out[k] = int(float(v))
                else:
                    out[k] = float(v)
            except (TypeError, ValueError):
                raise ConfigError(f"{arg}: {str(path)!r} line {i}: {k} {v!r} is not a "
                                  "number") from None
        rows.append(out)
    if not rows:
        raise ConfigError(f"{arg}: {str(path)!r} has no data rows")
    return rows


# ---------------------------------------------------------------------------------------
# Analysis: SNR at the target BLER, Shannon gap, the MCS table


def shannon_snr_db(se: float) -> float:
    """SNR (dB) at which AWGN capacity log2(1 + SNR) equals se bit/s/Hz."""
    return 10.0 * math.log10(2.0 ** se - 1.0)


def snr_at_bler(snrs, blers, target: float = 0.1):
    """(snr, status): the SNR where BLER falls to `target`, between the highest measured
    SNR whose BLER is still >= target and the next one (log10-linear; linear in BLER when
    either is 0). status 'ok', 'below_range' (already < target at the lowest SNR: snr is
    that SNR, an upper bound), 'above_range' (never < target: snr None)."""
    pts = sorted((float(s), float(b)) for s, b in zip(snrs, blers) if not math.isnan(b))
    if not pts:
        return None, "no_data"
    hi = [i for i, (_, b) in enumerate(pts) if b >= target]
    if not hi:
        return pts[0][0], "below_range"
    i = hi[-1]
    if i == len(pts) - 1:
        return None, "above_range"
    (x0, y0), (x1, y1) = pts[i], pts[i + 1]
    if y0 > 0 and y1 > 0:
        l0, l1, lt = math.log10(y0), math.log10(y1), math.log10(target)
        f = (lt - l0) / (l1 - l0) if l1 != l0 else 0.0
    else:
        f = (target - y0) / (y1 - y0) if y1 != y0 else 0.0
    return x0 + f * (x1 - x0), "ok"


def summarize(rows: list[dict], target: float = 0.1, meta: Optional[dict] = None) -> dict:
    phy = _phy()
    by_mcs: dict[int, list[dict]] = {}
    for r in rows:
        by_mcs.setdefault(int(r["mcs"]), []).append(r)
    out = []
    for m in sorted(by_mcs):
        rs = sorted(by_mcs[m], key=lambda r: r["snr_db"])
        info = phy.mcs_set.get(m)
        se = float(info.spectral_efficiency)
        snr, status = snr_at_bler([r["snr_db"] for r in rs], [r["bler"] for r in rs], target)
        tb_se = float(rs[0].get("tb_bits_per_re", float("nan")))
        e = {
            "mcs": m, "name": info.name, "spectral_efficiency": se,
            "tbs": int(rs[0].get("tbs", 0)), "tb_bits_per_re": tb_se,
            "snr_at_target_db": None if snr is None else round(snr, 3),
            "status": status,
            "shannon_snr_db": round(shannon_snr_db(se), 3),
            "shannon_gap_db": None if snr is None else round(snr - shannon_snr_db(se), 3),
            "shannon_gap_tb_db": (None if snr is None or not tb_se > 0 else
                                  round(snr - shannon_snr_db(tb_se), 3)),
            "points": len(rs),
            "slots": int(sum(r.get("slots", 0) for r in rs)),
        }
        for t in range(2, 17):
            key = f"bler_tx{t}"
            if rs and key in rs[0]:
                s2, st2 = snr_at_bler([r["snr_db"] for r in rs], [r[key] for r in rs], target)
                e[f"snr_at_target_tx{t}_db"] = None if s2 is None else round(s2, 3)
        out.append(e)
    s = {"target_bler": target, "snr_definition": "mean Es/N0 per occupied subcarrier (dB)",
         "mcs": out}
    if meta:
        s.update(meta)
    return s


def summary_table(summary: dict) -> str:
    t = summary["target_bler"]
    lines = [f"{'mcs':>3}  {'name':<10} {'SE':>4} {'TB B':>5}  {'SNR@' + format(t, '.0%'):>9}"
             f"  {'Shannon':>7}  {'gap dB':>6}  {'gap(TB)':>7}  note"]
    for e in summary["mcs"]:
        def f(v, w=7):
            return f"{v:{w}.2f}" if v is not None else " " * (w - 1) + "-"
        note = {"ok": "", "below_range": "BLER < target at the lowest SNR (upper bound)",
                "above_range": "BLER never fell below the target (a floor, or extend --snr)"}.get(e["status"], "")
        lines.append(f"{e['mcs']:>3}  {e['name']:<10} {e['spectral_efficiency']:>4.1f} "
                     f"{e['tbs']:>5}  {f(e['snr_at_target_db'], 9)}  {f(e['shannon_snr_db'])}  "
                     f"{f(e['shannon_gap_db'], 6)}  {f(e['shannon_gap_tb_db'])}  {note}")
    return "\n".join(lines)


def derive_table(summary: dict, profile: str, sample_rate: float,
                 source: str = "", fec: str = "ldpc") -> tuple[str, list[str]]:
    """(CSV text in mcs_table::from_csv's format, warnings). Rows are MCS 0..K in order
    (the table index is the PHY MCS the AP puts in the header), so MCS 0 must have a
    threshold and the table ends before the first MCS without one. Thresholds must
    increase strictly (from_csv checks it): an MCS whose measured threshold is not above
    the previous one gets the previous + 0.1 dB, which only delays its use slightly."""
    phy = _phy()
    num = phy.numerology.profile(profile, sample_rate, fec)
    slot_s = num.params.slot_duration
    target = summary["target_bler"]
    have = {e["mcs"]: e for e in summary["mcs"]}
    warnings: list[str] = []
    rows = []
    prev = -math.inf
    for m in range(8):
        e = have.get(m)
        if e is None or e["snr_at_target_db"] is None:
            why = "not measured" if e is None else "no SNR at the target BLER (extend --snr)"
            if m == 0:
                raise ConfigError(f"--table: MCS 0 has {why}; the table must start at MCS 0")
            warnings.append(f"table ends at MCS {m - 1}: MCS {m} {why}")
            break
        thr = float(e["snr_at_target_db"])
        if e["status"] == "below_range":
            warnings.append(f"MCS {m}: BLER already below the target at the lowest SNR "
                            f"measured; threshold {thr:g} dB is an upper bound")
        if thr <= prev:
            warnings.append(f"MCS {m}: measured threshold {thr:.2f} dB not above MCS {m - 1}'s "
                            f"{prev:.2f} dB; raised to {prev + 0.1:.2f} dB")
            thr = prev + 0.1
        thr = round(thr, 2)
        prev = thr
        info = phy.mcs_set.get(m)
        tb = phy.mcs_set.tb_bytes(m, num)
        rows.append((info.name, thr, 8.0 * tb / slot_s, info.bits_per_symbol,
                     info.code_rate, tb))
    lines = [
        f"# CQI (SNR dB, mean Es/N0 per occupied subcarrier) -> MCS, target first-transmission "
        f"BLER {target:g}",
        f"# measured link curves{': ' + source if source else ''}; profile {profile} at "
        f"{sample_rate:g} Hz, {fec} FEC, slot {slot_s * 1e3:g} ms; rate_bps = 8 * TB bytes / slot",
    ]
    lines += [f"# warning: {w}" for w in warnings]
    lines.append("name,min_snr_db,rate_bps,bits_per_symbol,code_rate")
    for name, thr, rate, bps, cr, tb in rows:
        # rounded UP to the printed 0.001 b/s: mcs_table::bytes_per_slot floors
        # rate * slot / 8, which must give back the TB size, not one byte less
        lines.append(f"{name},{thr:.2f},{math.ceil(rate * 1000.0) / 1000.0:.3f},{bps},{cr:.6g}")
    return "\n".join(lines) + "\n", warnings


def table_at_rate(measured: str | Path, profile: str, sample_rate: float,
                  fec: str = "ldpc", measured_rate: float = 1e6) -> str:
    """The CQI -> MCS table of `profile` at `sample_rate` (CSV text, derive_table's format):
    the SNR thresholds of the table `measured` (taken at `measured_rate`) with the TB sizes
    the PHY has at `sample_rate` (rate_bps = 8 * TB bytes / slot).

    The numerology keeps fft_len 64 and the slot duration, so a higher rate puts more OFDM
    symbols, hence more LDPC codewords, into a TB: the SNR at which one codeword fails is
    about the same, but the TB fails when any of them does, so its threshold rises with
    the rate (docs/phy.md, "Sample rate": ~0.5 dB from 1 to 5 Msps; daemonconf picks the
    measured table accordingly). ConfigError names the file."""
    phy = _phy()
    path = Path(measured)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"mcs_table: {str(path)!r} cannot be read ({exc.strerror})") from None
    try:
        table = mac.mcs_table.from_csv(text, path.stem)
    except ValueError as exc:
        raise ConfigError(f"mcs_table: {str(path)!r}: {exc}") from None
    if len(table) > 8:
        raise ConfigError(f"mcs_table: {str(path)!r} has {len(table)} rows, the PHY 8 MCS")
    mcs = []
    for m, (e, thr) in enumerate(zip(table.entries, table.thresholds_db)):
        want = phy.mcs_set.get(m).name
        if e.name != want:
            raise ConfigError(f"mcs_table: {str(path)!r} row {m}: {e.name!r} is not the PHY's "
                              f"MCS {m} ({want!r})")
        mcs.append({"mcs": m, "snr_at_target_db": float(thr), "status": "ok"})
    try:
        source = str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        source = str(path)
    text, _ = derive_table(
        {"target_bler": 0.1, "mcs": mcs}, profile, sample_rate,
        f"{source} (its SNR thresholds, measured at {measured_rate:g} Hz; TB sizes "
        f"at this rate)", fec)
    return text


def table_mismatches(table, profile: str, sample_rate: float, fec: str = "ldpc") -> list[str]:
    """Where the MCS table `table` (mac.mcs_table) disagrees with the PHY's TB sizes at
    `sample_rate`: one line per MCS whose bytes_per_slot is not the PHY's largest TB
    (the apd would build TBs the PHY refuses, or waste the slot). [] = they agree."""
    phy = _phy()
    num = phy.numerology.profile(profile, sample_rate, fec)
    slot = num.params.slot_duration
    out = []
    if len(table) > phy.mcs_set.size:
        out.append(f"{len(table)} rows, the PHY has {phy.mcs_set.size} MCS")
    for m in range(min(len(table), phy.mcs_set.size)):
        got, want = table.bytes_per_slot(m, slot), phy.mcs_set.tb_bytes(m, num)
        if got != want:
            out.append(f"MCS {m} gives {got} bytes per slot, the PHY's TB is {want} bytes")
    return out


def load_table(text: str, name: str = "linkcurves"):
    """The derived table through the MAC's own parser (oppsched.mac.mcs_table.from_csv)."""
    return mac.mcs_table.from_csv(text, name)


# ---------------------------------------------------------------------------------------
# Plot


def plot(rows: list[dict], summary: dict, path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5.2))
    by_mcs: dict[int, list[dict]] = {}
    for r in rows:
        by_mcs.setdefault(int(r["mcs"]), []).append(r)
    cmap = plt.get_cmap("viridis")
    target = summary["target_bler"]
    floor = 1e-4
    for m in sorted(by_mcs):
        rs = sorted(by_mcs[m], key=lambda r: r["snr_db"])
        c = cmap(m / 7.0)
        xs = [r["snr_db"] for r in rs]
        # a point without any error has no place on a log axis: a line down to a marker
        # on the floor, at the first such point, says "below 1/slots"
        ys, zero = [], []
        for r in rs:
            if r["bler"] > 0:
                ys.append(r["bler"])
            elif not zero:
                ys.append(floor)
                zero.append((r["snr_db"], floor))
            else:
                ys.append(float("nan"))
        a1.semilogy(xs, ys, "o-", color=c, ms=3, label=f"{m}: {rs[0]['modulation']} "
                    f"{_rate_str(rs[0]['code_rate'])}")
        if zero:
            a1.plot(*zero[0], "v", color=c, ms=6)
        if "bler_tx2" in rs[0]:
            y2 = [r["bler_tx2"] if r["bler_tx2"] > 0 else float("nan") for r in rs]
            a1.semilogy(xs, y2, "--", color=c, lw=1)
    a1.axhline(target, color="red", lw=0.8, ls=":")
    a1.set_ylim(floor * 0.7, 1.05)
    a1.set_xlabel("SNR: mean Es/N0 per occupied subcarrier (dB)")
    a1.set_ylabel("BLER (first transmission" + ("; dashed: after 2" if any(
        "bler_tx2" in r for r in rows) else "") + ")")
    a1.grid(True, which="both", alpha=0.3)
    a1.legend(fontsize=8, title="MCS")
    a1.set_title("BLER vs SNR (v: first point without any error)", fontsize=10)

    ok = [e for e in summary["mcs"] if e["snr_at_target_db"] is not None]
    se = np.linspace(0.2, 6.0, 200)
    a2.plot(10 * np.log10(2 ** se - 1), se, "k-", label="Shannon: SNR = 2^SE - 1")
    if ok:
        a2.plot([e["snr_at_target_db"] for e in ok], [e["spectral_efficiency"] for e in ok],
                "o-", color="C0", label=f"measured, SNR at {target:.0%} BLER (MCS SE)")
        a2.plot([e["snr_at_target_db"] for e in ok], [e["tb_bits_per_re"] for e in ok],
                "s--", color="C1", ms=4, lw=0.8, label="same, TB bits per RE")
        for e in ok:
            a2.annotate(f"{e['mcs']}: {e['shannon_gap_db']:+.1f} dB",
                        (e["snr_at_target_db"], e["spectral_efficiency"]),
                        textcoords="offset points", xytext=(6, -10), fontsize=7)
        if any(f"snr_at_target_tx2_db" in e for e in ok):
            pts = [(e["snr_at_target_tx2_db"], e["spectral_efficiency"] / 2) for e in ok
                   if e.get("snr_at_target_tx2_db") is not None]
            if pts:
                a2.plot(*zip(*pts), "^:", color="C2", ms=4,
                        label="after 2 tx (SE halved: 2 slots)")
    a2.set_xlabel("SNR (dB)")
    a2.set_ylabel("spectral efficiency (info bits per data subcarrier per symbol)")
    a2.grid(True, alpha=0.3)
    a2.legend(fontsize=8, loc="upper left")
    a2.set_title("SNR at the target BLER vs Shannon", fontsize=10)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _rate_str(cr: float) -> str:
    for num, den in ((1, 2), (2, 3), (3, 4), (5, 6)):
        if abs(cr - num / den) < 1e-3:
            return f"{num}/{den}"
    return f"{cr:.3g}"


# ---------------------------------------------------------------------------------------
# Commands


def config_from_args(a) -> SweepConfig:
    cfg = SweepConfig(
        channel=a.channel, mcs=parse_mcs_list(a.mcs), snrs=parse_snr_range(a.snr),
        tbs=a.tbs, harq=a.harq, max_tx=a.max_tx, harq_processes=a.harq_processes,
        profile=a.profile, fec=a.fec, sample_rate=a.sample_rate, slots=a.slots, min_errors=a.min_errors,
        seed=a.seed, doppler_hz=a.doppler, cfo_hz=a.cfo, skip_after_zero=not a.no_skip,
        target_bler=a.target_bler, flowgraph=a.flowgraph, ldpc_max_n=a.ldpc_max_n,
        stop_below=a.stop_below, ideal_rx=a.ideal_rx)
    cfg.validate()
    return cfg


def command_line(a) -> str:
    """The fully resolved command (every option spelt out) that reproduces this run."""
    parts = ["oppsched", "linkcurves", "--channel", a.channel, "--mcs", a.mcs, "--snr", a.snr]
    if a.tbs is not None:
        parts += ["--tbs", str(a.tbs)]
    if a.harq:
        parts += ["--harq", "--max-tx", str(a.max_tx), "--harq-processes", str(a.harq_processes)]
    parts += ["--profile", a.profile, "--fec", a.fec, "--sample-rate", f"{a.sample_rate:g}",
              "--slots",
              str(a.slots), "--min-errors", str(a.min_errors), "--seed", str(a.seed)]
    if a.channel == "fading":
        parts += ["--doppler", f"{a.doppler:g}"]
    if a.cfo:
        parts += ["--cfo", f"{a.cfo:g}"]
    if a.target_bler != 0.1:
        parts += ["--target-bler", f"{a.target_bler:g}"]
    if a.ldpc_max_n != LDPC_LENGTHS[-1]:
        parts += ["--ldpc-max-n", str(a.ldpc_max_n)]
    if a.stop_below is not None:
        parts += ["--stop-below", f"{a.stop_below:g}"]
    if a.ideal_rx:
        parts.append("--ideal-rx")
    if a.no_skip:
        parts.append("--no-skip")
    if a.flowgraph:
        parts.append("--flowgraph")
    if a.table:
        parts += ["--table", a.table]
    parts += ["--out", a.out]
    return " ".join(parts)


def cmd_linkcurves(a) -> int:
    argv_text = command_line(a)
    cfg = config_from_args(a)
    out = Path(a.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out: {a.out!r} cannot be created ({exc.strerror})") from None
    t0 = time.monotonic()
    rows = run_sweep(cfg)
    elapsed = time.monotonic() - t0
    write_csv(rows, out / "linkcurves.csv")
    meta = {"command": argv_text, "config": asdict(cfg), "elapsed_s": round(elapsed, 1)}
    summary = summarize(rows, cfg.target_bler, meta)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    chan = cfg.channel
    if cfg.channel == "fading":
        chan += f" (Jakes, f_d {cfg.doppler_hz:g} Hz)"
    title = (f"{chan}, {cfg.profile} profile at {cfg.sample_rate / 1e6:g} Msps, {cfg.fec.upper()}"
             f"{f' (codewords <= {cfg.ldpc_max_n})' if cfg.ldpc_max_n != 1944 else ''}"
             f"{', HARQ' if cfg.harq else ''}")
    plot(rows, summary, out / "linkcurves.png", title)
    print(summary_table(summary))
    print(f"\nwrote {out / 'linkcurves.csv'}, {out / 'summary.json'}, {out / 'linkcurves.png'}")
    if a.table:
        _write_table(summary, cfg.profile, cfg.sample_rate, str(out / "linkcurves.csv"), a.table,
                     cfg.fec)
    return 0


def _write_table(summary, profile, sample_rate, source, dest, fec="ldpc") -> None:
    text, warnings = derive_table(summary, profile, sample_rate, source, fec)
    for w in warnings:
        print(f"mcstable: warning: {w}", file=sys.stderr)
    load_table(text)  # must load in the MAC: fail here rather than in the daemon
    try:
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        Path(dest).write_text(text)
    except OSError as exc:
        raise ConfigError(f"--table: {dest!r} cannot be written ({exc.strerror})") from None
    print(f"wrote {dest}")


def cmd_mcstable(a) -> int:
    rows = read_csv(a.curves)
    profile = a.profile or str(rows[0].get("profile", "") or "")
    if not profile:
        raise ConfigError("--profile: not given and the CSV has no profile column")
    profile = renamed_value("--profile" if a.profile else f"{a.curves}: profile", profile,
                            PROFILE_ALIASES)
    if profile not in PROFILES:
        raise ConfigError(f"--profile: {profile!r} not one of {', '.join(PROFILES)}")
    fec = a.fec or str(rows[0].get("fec", "") or "") or "ldpc"
    if fec not in FECS:
        raise ConfigError(f"--fec: {fec!r} not one of {', '.join(FECS)}")
    sample_rate = a.sample_rate or float(rows[0].get("sample_rate_hz", 0) or 0)
    if not sample_rate > 0:
        raise ConfigError("--sample-rate: not given and the CSV has no sample_rate_hz column")
    if not 0 < a.target_bler < 1:
        raise ConfigError(f"--target-bler: {a.target_bler!r} not in (0, 1)")
    summary = summarize(rows, a.target_bler)
    print(summary_table(summary))
    _write_table(summary, profile, sample_rate, str(a.curves), a.out, fec)
    return 0


def cmd_lcmerge(a) -> int:
    """Several linkcurves folders of one profile/rate/FEC (e.g. one per MCS, measured in
    parallel) -> one folder: linkcurves.csv (MCS then SNR order), summary.json (with each
    part's command), linkcurves.png and with --table the MCS table."""
    rows, commands, meta_cfg = [], [], None
    seen: dict[tuple, str] = {}
    for d in a.parts:
        rs = read_csv(Path(d) / "linkcurves.csv", "PARTS")
        part = read_summary(Path(d) / "summary.json", "PARTS")
        cfg = part.get("config") or {}
        key = {k: cfg.get(k) for k in ("profile", "sample_rate", "fec", "channel",
                                       "ldpc_max_n", "tbs", "harq")}
        if meta_cfg is None:
            meta_cfg = key
        elif key != meta_cfg:
            raise ConfigError(f"PARTS: {d!r} was measured with {key}, the first part with "
                              f"{meta_cfg}")
        for r in rs:
            k = (int(r["mcs"]), float(r["snr_db"]))
            if k in seen:
                raise ConfigError(f"PARTS: MCS {k[0]} at {k[1]:g} dB is in {seen[k]!r} and "
                                  f"{d!r}")
            seen[k] = d
        rows += rs
        if part.get("command"):
            commands.append(part["command"])
    rows.sort(key=lambda r: (int(r["mcs"]), float(r["snr_db"])))
    out = Path(a.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out: {a.out!r} cannot be created ({exc.strerror})") from None
    write_csv(rows, out / "linkcurves.csv")
    summary = summarize(rows, a.target_bler, {"commands": commands, "config": meta_cfg,
                                              "parts": [str(d) for d in a.parts]})
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    cap = meta_cfg.get("ldpc_max_n") or 1944
    plot(rows, summary, out / "linkcurves.png",
         f"{meta_cfg['channel']}, {meta_cfg['profile']} profile at "
         f"{float(meta_cfg['sample_rate']) / 1e6:g} Msps, {str(meta_cfg['fec']).upper()}"
         f"{f' (codewords <= {cap})' if cap != 1944 else ''}")
    print(summary_table(summary))
    if a.table:
        _write_table(summary, meta_cfg["profile"], float(meta_cfg["sample_rate"]),
                     str(out / "linkcurves.csv"), a.table, meta_cfg["fec"])
    return 0


def add_parsers(sub) -> None:
    """The `linkcurves` and `mcstable` subcommands (cli.py calls this)."""
    lc = sub.add_parser(
        "linkcurves", help="measure BLER vs SNR per MCS through the real PHY chain",
        description="Measure BLER vs SNR (mean Es/N0 per occupied subcarrier) per MCS "
        "through TX -> channel emulator -> sync/demod -> header/TB decode; writes "
        "linkcurves.csv, summary.json and linkcurves.png in --out.")
    # `--snr -4:26:1` / `--snr -8,0,8`: argparse would take a value starting with '-' for an
    # option unless it looks like a negative number; widen that to SNR lists and ranges.
    lc._negative_number_matcher = re.compile(r"^-\d*\.?\d+([:,][-+]?\d*\.?\d+)*$")
    lc.add_argument("--channel", default="awgn", help="awgn | fading (flat Jakes, --doppler); "
                    "default %(default)s")
    lc.add_argument("--mcs", default="all", help="MCS list: all, 3, 0,2,5 or 0-3,7 "
                    "(default %(default)s)")
    lc.add_argument("--snr", default="-4:26:1", help="SNR points A:B:STEP or a,b,c in dB "
                    "(default %(default)s)")
    lc.add_argument("--tbs", type=int, default=None,
                    help="TB size in bytes for every MCS (default: the largest TB of each MCS)")
    lc.add_argument("--harq", action="store_true",
                    help="retransmit failed TBs (RV 0,2,3,1, soft combining); adds bler_txN")
    lc.add_argument("--max-tx", type=int, default=4, help="transmissions per TB with --harq "
                    "(default %(default)s)")
    lc.add_argument("--harq-processes", type=int, default=4, help="HARQ processes: slots "
                    "between transmissions of a TB (default %(default)s)")
    lc.add_argument("--profile", default="evdo", help="evdo (1.667 ms) | 3ms (3 ms) "
                    "(default %(default)s)")
    lc.add_argument("--fec", default="ldpc", help="payload FEC: ldpc (802.11n QC-LDPC) | conv "
                    "(K=7 convolutional) (default %(default)s)")
    lc.add_argument("--sample-rate", type=float, default=1e6, help="Hz (default %(default)g)")
    lc.add_argument("--slots", type=int, default=2000, help="TBs per point at most "
                    "(default %(default)s)")
    lc.add_argument("--min-errors", type=int, default=100, help="first-transmission errors "
                    "that end a point (default %(default)s)")
    lc.add_argument("--seed", type=int, default=1, help="(default %(default)s)")
    lc.add_argument("--doppler", type=float, default=60.0, help="max Doppler f_d (Hz) of "
                    "--channel fading (default %(default)g)")
    lc.add_argument("--cfo", type=float, default=0.0, help="carrier frequency offset (Hz)")
    lc.add_argument("--target-bler", type=float, default=0.1, help="BLER that defines the "
                    "threshold (default %(default)g)")
    lc.add_argument("--ldpc-max-n", type=int, default=1944, help="longest LDPC codeword a TB "
                    "may use: 648, 1296 or 1944 (default %(default)s, the PHY's; 648 measures "
                    "what the longer codewords gain)")
    lc.add_argument("--stop-below", type=float, default=None, metavar="BLER",
                    help="after the first point of an MCS whose BLER is below this, skip its "
                    "higher SNRs (e.g. 0.1: all the threshold needs; default: off)")
    lc.add_argument("--ideal-rx", action="store_true",
                    help="AWGN on the payload REs with the exact N0, decoded by the "
                    "tb_decoder alone (no sync, header or channel estimate): the code and "
                    "modulation without the receiver")
    lc.add_argument("--no-skip", action="store_true", help="measure every SNR point (default: "
                    "skip the SNRs above the first error-free point of an MCS)")
    lc.add_argument("--flowgraph", action="store_true", help="run through a GNU Radio "
                    "flowgraph of the gr-oppsched blocks instead of the classes directly")
    lc.add_argument("--table", metavar="OUT.csv", help="also derive the CQI -> MCS table "
                    "(mcs_table CSV for the MAC) and write it here")
    lc.add_argument("--out", required=True, help="output folder")
    lc.set_defaults(fn=cmd_linkcurves)

    mt = sub.add_parser(
        "mcstable", help="derive the CQI -> MCS table from measured link curves",
        description="Per MCS the SNR at the target first-transmission BLER (interpolated in "
        "log BLER) -> a CSV name,min_snr_db,rate_bps,bits_per_symbol,code_rate for "
        "oppsched.mac.mcs_table.from_csv / the apd's link_adaptation.table.")
    mt.add_argument("curves", help="linkcurves.csv written by `oppsched linkcurves`")
    mt.add_argument("--out", required=True, help="table CSV to write")
    mt.add_argument("--profile", default=None, help="evdo | 3ms (default: from the CSV)")
    mt.add_argument("--fec", default=None, help="ldpc | conv (default: from the CSV)")
    mt.add_argument("--sample-rate", type=float, default=None,
                    help="Hz (default: from the CSV)")
    mt.add_argument("--target-bler", type=float, default=0.1, help="(default %(default)g)")
    mt.set_defaults(fn=cmd_mcstable)

    mg = sub.add_parser(
        "lcmerge", help="merge linkcurves folders measured in parts (e.g. one per MCS)",
        description="Concatenate the linkcurves.csv of several folders of the same profile, "
        "rate, FEC and channel (each point at most once) and write linkcurves.csv, "
        "summary.json (every part's command) and linkcurves.png in --out.")
    mg.add_argument("parts", nargs="+", help="linkcurves output folders")
    mg.add_argument("--out", required=True, help="output folder")
    mg.add_argument("--table", metavar="OUT.csv", help="also write the MCS table here")
    mg.add_argument("--target-bler", type=float, default=0.1, help="(default %(default)g)")
    mg.set_defaults(fn=cmd_lcmerge)
