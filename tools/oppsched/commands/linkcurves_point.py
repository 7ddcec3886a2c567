"""One link-curve point, and a sweep of them, through the real PHY chain
(`oppsched linkcurves`; oppsched.commands.linkcurves_fg is the same point through a GNU
Radio flowgraph).

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
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from oppsched import mac
from oppsched.config import ConfigError, renamed_value
from oppsched.commands.linkcurves_fg import blocks_available, measure_point_flowgraph
from oppsched.linkmodel import LDPC_LENGTHS, _phy, make_numerology
from oppsched.names import FECS, PROFILE_ALIASES, PROFILES

# The MAC's default RV sequence (host/include/oppsched/harq.h; docs/architecture.md, HARQ):
# RV 0 then RV 2 gives the full rate-1/2 mother code on the first retransmission.
RV_SEQUENCE = (0, 2, 3, 1)
CHANNELS = ("awgn", "fading")
LEAD_SAMPLES = 400  # silence before the first slot (the sync's metric window fills)
MODULATION = {1: "BPSK", 2: "QPSK", 4: "16QAM", 6: "64QAM"}


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
