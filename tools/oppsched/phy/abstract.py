"""The abstract (slot-level) PHY: the clock master of a testbed run without sample processing.

    python -m oppsched.phy.abstract --config phy.yaml [--check] [--set key=value ...]

It stands in for the radio (docs/daemons.md, "Slot timing"; docs/architecture.md, "The PHY"):

- Slot n starts at t0 + n * slot_ns on CLOCK_MONOTONIC (time.monotonic_ns): an absolute
  schedule, so the slot clock never drifts, however late one tick wakes up. slot_ns is
  slot_s rounded to whole nanoseconds (1.667 ms and 3 ms are exact).
- slot_request(n) (with its air time t0 + n * slot_ns) is pushed on `phy_requests` at the
  start of slot n - lead_slots. At the start of slot n the PHY takes slot_grant(n) from
  what `phy_grants` delivered; a grant that has not arrived makes slot n an empty slot
  (counted `late`); a grant for a slot already past is counted `grants_late` and dropped.
- Every user's SNR comes from its own seeded channel model, evaluated at the slot's time
  since slot 0 (t = n * slot_ns, not wall-clock time: the same seed gives the same SNR
  sequence on every run): the Jakes model of Andrew & Hanly, CLAMP, §V-B (G = 20), the
  sum of sinusoids of Srinivasan & Baras, eq. 4, a replayed SNR trace, or a constant SNR
  (awgn).
- The addressed user's TB succeeds or fails by the error model:
    curves     BLER(mcs, SNR) from a link-curve CSV (`oppsched linkcurves`: mcs,snr_db,bler),
               success drawn with a seeded RNG; the SNR is the slot's (at its start).
    threshold  the end-of-slot rule of Andrew & Hanly, CLAMP, §V-B on the MCS table: success
               iff the SNR at the END of the slot meets the MCS's threshold (the rate was
               chosen at the start from an older CQI; the channel may have faded since).
               Deterministic.
    end_of_slot  the rule of Andrew & Hanly, CLAMP, §V-B literally, through
               oppsched.mac.clamp_link: error iff the TB's B = 8 * len(tb) information bits
               exceed slot_s * W0 log2(1 + N(e)), N(e) the SNR at slot end (W0 of the
               `shannon` section). A TB that fills its MCS has B = the MCS's bits per slot;
               the apd's link_adaptation.mode paper sends smaller ones, eq. 18 unquantised.
               Deterministic. (Old name: clamp.)
  HARQ chase combining: a retransmission is decoded at the effective SNR = sum (linear) of
  the SNRs of every transmission of that (user, HARQ process) since its NDI last toggled,
  this one included (maximal-ratio combining of identical copies adds SNRs; redundancy
  versions are treated as copies, i.e. incremental redundancy gets no extra coding gain).
- At the END of slot n (when a radio would have received and decoded it) every user gets
  an rx_indication on `rx_<id>` (PUSH, non-blocking, ZMQ_IMMEDIATE): header_ok = true,
  addressed = (user == grant.user), crc_ok per the error model for the addressed user, the
  TB only if addressed and crc_ok, snr_db = the measured SNR at the slot's start (+ optional
  Gaussian estimation error), or with cqi_ahead_slots = k > 0 the SNR at the start of slot
  n + k (a genie report for the apd's link_adaptation.mode paper: the MAC then picks each
  slot's rate from the SNR at that slot's start, as eq. 18 of Andrew & Hanly, CLAMP does),
  cqi = 1 + the highest MCS whose threshold snr_db meets (0 =
  below the lowest MCS: "zero rate", Srinivasan & Baras, §III). Empty slots also produce
  rx_indications (header only, user 0xFFFF, addressed = false) so that CQI flows every slot.

Counters go to phy.stats.json at exit, on SIGUSR1 and every 2 s; SIGTERM/SIGINT finish the
current slot, write stats and the optional slot trace (phy_slots.csv) and exit 0. Configuration errors
name the field and the value, exit status 2, before any socket is created. See docs/daemons.md,
"Abstract PHY configuration", for every key.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from oppsched import mac
from oppsched.config import ConfigError
from oppsched.phy.common import (
    SCHEMA,
    parse_args,
    read_config,
    resolve,
    set_rt_priority,
)
from oppsched.phy.models import ChaseCombiner, Models, _seed_of, build_models, channel_seed, to_db
from oppsched.phy.realtime import PhyProcess, SlotOutcome

log = logging.getLogger("oppsched.phy.abstract")

NO_USER = mac.wire.USER_NOBODY  # rx_indication.user of an empty slot: no header user
MAX_CQI = 255  # u8 on the wire

# Independent random streams per user, all from SeedSequence([seed, channel seed, stream]).
_STREAM_ERROR, _STREAM_NOISE = 1, 2


# ----------------------------------------------------------------------------------------
# Configuration


def load_config(path: str | Path, overrides: list[str] | tuple = ()) -> dict:
    """Reads, validates and resolves phy.yaml: defaults filled in, relative paths made
    absolute (relative to the file's directory), endpoints and trace paths defaulted into
    run_dir. Raises ConfigError naming the field and the value."""
    cfg, base = read_config(path, overrides, SCHEMA)
    return resolve(cfg, base)



# ----------------------------------------------------------------------------------------
# The slot logic (no sockets, no clock)


MALFORMED_REASONS = ("decode", "type", "user", "mcs", "no_tb", "oversized", "uplink")


class _Every:
    """Rate limit: at most one log line per key per second."""

    def __init__(self, period_s: float = 1.0):
        self.period_ns = int(period_s * 1e9)
        self.last: dict[str, int] = {}
        self.suppressed: dict[str, int] = {}

    def __call__(self, key: str, msg: str, *args) -> None:
        now = time.monotonic_ns()
        if now - self.last.get(key, -self.period_ns) >= self.period_ns:
            n = self.suppressed.pop(key, 0)
            log.warning(msg + (f" (+{n} more)" if n else ""), *args)
            self.last[key] = now
        else:
            self.suppressed[key] = self.suppressed.get(key, 0) + 1


@dataclass
class UserState:
    name: str
    id: int
    seq: int = 0  # rx_<id> socket's wire sequence number
    addressed: int = 0
    tb_ok: int = 0
    tb_failed: int = 0
    rx_sent: int = 0
    rx_dropped: int = 0
    snr_db_sum: float = 0.0
    slots: int = 0


class PhyCore:
    """The abstract PHY's decisions, clocked by slot numbers: requests, grant bookkeeping,
    SNRs, the error model, chase combining and rx_indications. No I/O and no clock, so it is
    tested without sockets; PhyProcess drives it in real time."""

    def __init__(self, cfg: dict, models: Models):
        self.cfg = cfg
        self.models = models
        self.slot_s = cfg["slot_s"]
        self.slot_ns = int(round(cfg["slot_s"] * 1e9))
        self.t0_ns = 0  # air time of slot 0 (set by the clock before the first request)
        self.n_users = len(cfg["users"])
        self.users = [UserState(u["name"], u["id"]) for u in cfg["users"]]
        self.noise_db = cfg["measurement"]["noise_db"]
        self.ahead = cfg["cqi_ahead_slots"]
        self.combiner = ChaseCombiner(cfg["chase_combining"])
        self.bytes_per_slot = [
            models.table.bytes_per_slot(m, cfg["slot_s"]) for m in range(len(models.table))
        ]
        seeds = [channel_seed(cfg, u) for u in cfg["users"]]
        self.rng_error = [
            np.random.Generator(np.random.PCG64(_seed_of(cfg["seed"], s, _STREAM_ERROR)))
            for s in seeds
        ]
        self.rng_noise = [
            np.random.Generator(np.random.PCG64(_seed_of(cfg["seed"], s, _STREAM_NOISE)))
            for s in seeds
        ]
        self.grants: dict[int, dict] = {}
        self.requested = 0  # slots 0..requested-1 have been requested
        self.processed = 0  # slots 0..processed-1 are on air (past)
        self.request_seq = 0
        self.grant_seq_next: int | None = None
        self.counters = {
            k: 0
            for k in (
                "slots",
                "empty",
                "late",
                "tb_ok",
                "tb_failed",
                "requests_sent",
                "requests_dropped",
                "grants_received",
                "grants_late",
                "grants_malformed",
                "grants_duplicate",
                "grants_unrequested",
                "grants_seq_lost",
            )
        }
        self.malformed = {k: 0 for k in MALFORMED_REASONS}
        self.warn = _Every()

    # -- time --------------------------------------------------------------------------

    def air_time_ns(self, n: int) -> int:
        return self.t0_ns + n * self.slot_ns

    def channel_time_s(self, n: int) -> float:
        """Channel-model time of slot n's start: slot-based, so runs are reproducible."""
        return n * self.slot_ns * 1e-9

    # -- requests ----------------------------------------------------------------------

    def request_frame(self, n: int) -> bytes:
        """slot_request(n); the caller pushes it and reports with request_sent()."""
        frame = mac.wire.encode(
            "slot_request", self.request_seq, {"slot": n, "air_time_ns": self.air_time_ns(n)}
        )
        self.request_seq = (self.request_seq + 1) & 0xFFFFFFFF
        self.requested = max(self.requested, n + 1)
        return frame

    def request_sent(self, ok: bool) -> None:
        self.counters["requests_sent" if ok else "requests_dropped"] += 1

    # -- grants ------------------------------------------------------------------------

    def _malformed(self, reason: str, detail: str) -> None:
        self.counters["grants_malformed"] += 1
        self.malformed[reason] += 1
        self.warn(f"malformed.{reason}", "phy_grants: malformed grant (%s): %s", reason, detail)

    def on_grant_frame(self, frame: bytes) -> None:
        """Books one message from phy_grants. Never raises: bad input is counted."""
        self.counters["grants_received"] += 1
        try:
            seq, kind, g = mac.wire.decode(frame, mac.wire.MAX_FRAME_LEN)
        except ValueError as exc:
            self._malformed("decode", str(exc))
            return
        if kind != "slot_grant":
            self._malformed("type", f"a {kind}, not a slot_grant")
            return
        if self.grant_seq_next is not None and seq != self.grant_seq_next:
            if seq == 0:
                log.info("phy_grants: sequence restarted at 0 (AP daemon restarted?)")
            elif seq > self.grant_seq_next:
                self.counters["grants_seq_lost"] += seq - self.grant_seq_next
        self.grant_seq_next = (seq + 1) & 0xFFFFFFFF
        n = g["slot"]
        # The content first, so that a malformed grant is counted as such however late.
        bad = self._check_content(g)
        if bad is not None:
            self._malformed(*bad)
        if n < self.processed:
            if bad is None:
                self.counters["grants_late"] += 1
                self.warn(
                    "late",
                    "phy_grants: grant for slot %d arrived after the slot (now %d)",
                    n,
                    self.processed,
                )
            return
        if n >= self.requested:
            if bad is None:
                self.counters["grants_unrequested"] += 1
                self.warn(
                    "unrequested",
                    "phy_grants: grant for slot %d, never requested (last %d)",
                    n,
                    self.requested - 1,
                )
            return
        if n in self.grants:
            if bad is None:
                self.counters["grants_duplicate"] += 1
                self.warn("duplicate", "phy_grants: second grant for slot %d ignored", n)
            return
        # A malformed grant still answers the request: the slot goes out empty, not late.
        self.grants[n] = g if bad is None else {"empty": True, "slot": n}

    def _check_content(self, g: dict) -> tuple[str, str] | None:
        """(reason, detail) if a decoded slot_grant cannot go on air, else None."""
        if g["empty"]:
            return None
        n = g["slot"]
        if g.get("uplink"):  # the apd models uplink slots itself with this PHY
            return "uplink", (f"slot {n}: an uplink grant (station {g['user']}): the abstract "
                              "PHY does not carry uplink slots (apd medium.uplink_decode model)")
        if g["user"] >= self.n_users:
            return "user", f"slot {n}: user {g['user']} not in 0..{self.n_users - 1}"
        if g["mcs"] >= len(self.bytes_per_slot):
            return "mcs", f"slot {n}: mcs {g['mcs']} not in 0..{len(self.bytes_per_slot) - 1}"
        if not g["tb"]:
            return "no_tb", f"slot {n}: non-empty grant without a TB"
        if len(g["tb"]) > self.bytes_per_slot[g["mcs"]]:
            return "oversized", (
                f"slot {n}: TB of {len(g['tb'])} bytes > {self.bytes_per_slot[g['mcs']]} that "
                f"mcs {g['mcs']} carries in a slot (do the AP and the PHY use the same "
                "mcs_table and slot_s?)"
            )
        return None

    # -- slots -------------------------------------------------------------------------

    def cqi_of(self, snr_db: float) -> int:
        """1 + the highest MCS whose threshold snr_db meets; 0 below the lowest MCS."""
        return min(self.models.table.select(snr_db) + 1, MAX_CQI)

    def run_slot(self, n: int) -> SlotOutcome:
        """Slot n goes on air now: take its grant, draw the SNRs, decide the TB, build every
        user's rx_indication (to be delivered at the end of the slot)."""
        c = self.counters
        c["slots"] += 1
        self.processed = n + 1
        g = self.grants.pop(n, None)
        for stale in [s for s in self.grants if s < n]:  # cannot happen; keeps the dict bounded
            del self.grants[stale]
        late = g is None
        if late:
            c["late"] += 1
        t = self.channel_time_s(n)
        true_lin = [ch(t) for ch in self.models.channels]
        true_db = [to_db(x) for x in true_lin]
        if self.noise_db > 0.0:
            meas_db = [
                d + self.noise_db * r.standard_normal() for d, r in zip(true_db, self.rng_noise)
            ]
        else:
            meas_db = true_db
        for u, d in zip(self.users, meas_db):
            u.snr_db_sum += d
            u.slots += 1
        if self.ahead:  # the reports give the SNR at the start of slot n + ahead
            t_rep = self.channel_time_s(n + self.ahead)
            rep_db = [to_db(ch(t_rep)) for ch in self.models.channels]
            if self.noise_db > 0.0:
                rep_db = [d + self.noise_db * r.standard_normal()
                          for d, r in zip(rep_db, self.rng_noise)]
        else:
            rep_db = meas_db

        header = {"slot": n, "header_ok": True, "crc_ok": False, "addressed": False, "combined": 0}
        if g is None or g["empty"]:
            c["empty"] += 1
            header.update(user=NO_USER, mcs=0, harq_pid=0, ndi=0, rv=0)
            target, ok, combined, eff_db = -1, None, 0, float("nan")
        else:
            target, mcs = g["user"], g["mcs"]
            header.update(user=target, mcs=mcs, harq_pid=g["harq_pid"], ndi=g["ndi"], rv=g["rv"])
            model = self.models.error
            if model.at_slot_end:
                dec_lin = self.models.channels[target](self.channel_time_s(n + 1))
            else:
                dec_lin = true_lin[target]
            eff_lin, combined = self.combiner.combine(target, g["harq_pid"], g["ndi"], dec_lin)
            eff_db = to_db(eff_lin)
            ok = model.success(mcs, eff_lin, self.rng_error[target], len(g["tb"]))
            st = self.users[target]
            st.addressed += 1
            if ok:
                c["tb_ok"] += 1
                st.tb_ok += 1
            else:
                c["tb_failed"] += 1
                st.tb_failed += 1

        frames = []
        for i, st in enumerate(self.users):
            d = dict(header)
            d["snr_db"] = rep_db[i]
            d["cqi"] = self.cqi_of(rep_db[i])
            if i == target:
                d["addressed"] = True
                d["crc_ok"] = bool(ok)
                d["combined"] = min(combined, 255)
                if ok:
                    d["tb"] = g["tb"]
            frames.append(mac.wire.encode("rx_indication", st.seq, d))
            st.seq = (st.seq + 1) & 0xFFFFFFFF
        row = [
            n,
            self.air_time_ns(n),
            int(late),
            target,
            header["mcs"] if target >= 0 else -1,
            header["harq_pid"],
            header["ndi"],
            combined,
            "" if target < 0 else f"{eff_db:.3f}",
            "" if ok is None else int(ok),
        ]
        row += [f"{d:.3f}" for d in true_db]
        return SlotOutcome(n, frames, row)

    def trace_header(self) -> list[str]:
        return [
            "slot",
            "t_ns",
            "late",
            "user",
            "mcs",
            "harq_pid",
            "ndi",
            "combined",
            "eff_snr_db",
            "success",
        ] + [f"snr_db.{u.name}" for u in self.users]

    def rx_result(self, user: int, ok: bool) -> None:
        st = self.users[user]
        if ok:
            st.rx_sent += 1
        else:
            st.rx_dropped += 1

    def stats(self) -> dict:
        out: dict[str, Any] = dict(self.counters)
        out["grants_malformed_by"] = dict(self.malformed)
        out["users"] = {
            u.name: {
                "id": u.id,
                "addressed": u.addressed,
                "tb_ok": u.tb_ok,
                "tb_failed": u.tb_failed,
                "rx_sent": u.rx_sent,
                "rx_dropped": u.rx_dropped,
                "snr_db_mean": (u.snr_db_sum / u.slots) if u.slots else None,
            }
            for u in self.users
        }
        out["config"] = {
            "slot_ns": self.slot_ns,
            "t0_ns": self.t0_ns,
            "lead_slots": self.cfg["lead_slots"],
            "error_model": self.cfg["error_model"],
            "mcs_table": self.models.table.name,
            "mcs_count": len(self.models.table),
            "chase_combining": self.cfg["chase_combining"],
            "seed": self.cfg["seed"],
        }
        return out


# ----------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    args = parse_args(
        argv,
        "python -m oppsched.phy.abstract",
        "Slot-level abstract PHY (clock master): SNR from the channel models, TB "
        "success from link curves or the end-of-slot rule of Andrew & Hanly, CLAMP.",
        "phy.yaml (docs/daemons.md, Abstract PHY configuration)",
        "validate the configuration and the files it names, then exit",
        "phy-abstract",
    )
    try:
        cfg = load_config(args.config, args.set)
        models = build_models(cfg)
    except ConfigError as exc:
        print(f"{args.config}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(
            f"{args.config}: ok ({len(cfg['users'])} users, slot {cfg['slot_s'] * 1e3:g} ms, "
            f"error_model {cfg['error_model']}, mcs_table {models.table.name} "
            f"({len(models.table)} MCS))"
        )
        return 0
    set_rt_priority(cfg["timing"]["rt_priority"])  # before ZeroMQ starts its I/O thread
    core = PhyCore(cfg, models)
    proc = PhyProcess(cfg, core)
    proc.install_signals()
    try:
        proc.open()
        proc.wait_for_peers()
        log.info(
            "running: %d users, slot %.3f ms, lead %d slots, error model %s",
            len(cfg["users"]),
            cfg["slot_s"] * 1e3,
            cfg["lead_slots"],
            cfg["error_model"],
        )
        proc.run()
    except RuntimeError as exc:
        log.error("%s", exc)
        return 1
    finally:
        proc.write_stats()
        proc.close()
    c = core.counters
    log.info(
        "stopped after %d slots (%d empty, %d late, %d TB ok, %d TB failed)",
        c["slots"],
        c["empty"],
        c["late"],
        c["tb_ok"],
        c["tb_failed"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
