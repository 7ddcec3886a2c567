"""The abstract PHY's models (oppsched.phy.abstract runs them slot by slot): the link
curves (BLER per MCS and SNR from a link-curve CSV), replayed SNR traces, the seeded
channel models of each user (Jakes, sum of sinusoids, trace, awgn), the error models
(curves, threshold, end_of_slot) and HARQ chase combining. No sockets, no clock.
"""

from __future__ import annotations

import bisect
import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from oppsched import mac
from oppsched.config import ConfigError
from oppsched.phy.common import load_mcs_table

SNR_FLOOR_LIN = 1e-30  # -300 dB: a Jakes null is never exactly 0, but log10(0) must not raise


# ----------------------------------------------------------------------------------------
# Models: link curves, SNR traces, channels


def _read_csv(path: str, where: str, columns: tuple[str, ...]) -> list[tuple[int, dict]]:
    """Rows of a CSV with a header naming at least `columns` ('#' lines and blank lines
    skipped), each as (line number, {column: float}). Non-numeric or non-finite values,
    missing columns and an empty file are ConfigErrors naming the file and the line."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"{where}: {path!r} cannot be read ({exc.strerror})") from None
    numbered = [
        (i + 1, ln) for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")
    ]
    if not numbered:
        raise ConfigError(f"{where}: {path!r} has no header line")
    header = [h.strip() for h in next(csv.reader([numbered[0][1]]))]
    missing = [c for c in columns if c not in header]
    if missing:
        raise ConfigError(
            f"{where}: {path!r} header {','.join(header)!r} lacks column(s) "
            f"{', '.join(missing)}"
        )
    idx = {c: header.index(c) for c in columns}
    rows = []
    for lineno, ln in numbered[1:]:
        cells = next(csv.reader([ln]))
        row = {}
        for c, j in idx.items():
            try:
                v = float(cells[j])
            except (IndexError, ValueError):
                cell = cells[j] if j < len(cells) else ""
                raise ConfigError(
                    f"{where}: {path!r} line {lineno}: {c} {cell!r} is not a number"
                ) from None
            if not math.isfinite(v):
                raise ConfigError(f"{where}: {path!r} line {lineno}: {c} {v!r} is not finite")
            row[c] = v
        rows.append((lineno, row))
    if not rows:
        raise ConfigError(f"{where}: {path!r} has no data rows")
    return rows


class LinkCurves:
    """BLER(mcs, SNR dB) from measured link curves.

    Between two measured SNRs the BLER is interpolated linearly in log10(BLER) (waterfall
    curves are close to straight lines there, so a coarse SNR grid is not biased towards
    too many errors); when either neighbour is 0 (no error measured), linearly in BLER.
    Outside the measured range the end value holds (clamp at the ends). O(log points)."""

    def __init__(self, curves: dict[int, tuple[list[float], list[float]]]):
        self._curves = curves

    @classmethod
    def from_csv(cls, path: str, n_mcs: int, where: str = "link_curves") -> "LinkCurves":
        per: dict[int, dict[float, float]] = {}
        for lineno, r in _read_csv(path, where, ("mcs", "snr_db", "bler")):
            m = r["mcs"]
            if m != int(m) or not 0 <= m < n_mcs:
                raise ConfigError(
                    f"{where}: {path!r} line {lineno}: mcs {r['mcs']!r} is not an "
                    f"MCS of the mcs_table (0..{n_mcs - 1})"
                )
            if not 0.0 <= r["bler"] <= 1.0:
                raise ConfigError(
                    f"{where}: {path!r} line {lineno}: bler {r['bler']!r} not in [0, 1]"
                )
            pts = per.setdefault(int(m), {})
            if r["snr_db"] in pts:
                raise ConfigError(
                    f"{where}: {path!r} line {lineno}: mcs {int(m)} has snr_db "
                    f"{r['snr_db']!r} twice"
                )
            pts[r["snr_db"]] = r["bler"]
        absent = [m for m in range(n_mcs) if m not in per]
        if absent:
            raise ConfigError(
                f"{where}: {path!r} has no rows for mcs {absent[0]} (the mcs_table "
                f"has {n_mcs} MCS; every one needs a curve)"
            )
        curves = {}
        for m, pts in per.items():
            xs = sorted(pts)
            curves[m] = (xs, [pts[x] for x in xs])
        return cls(curves)

    def bler(self, mcs: int, snr_db: float) -> float:
        xs, ys = self._curves[mcs]
        if snr_db <= xs[0]:
            return ys[0]
        if snr_db >= xs[-1]:
            return ys[-1]
        i = bisect.bisect_right(xs, snr_db)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        f = (snr_db - x0) / (x1 - x0)
        if y0 > 0.0 and y1 > 0.0:
            l0 = math.log10(y0)
            return 10.0 ** (l0 + f * (math.log10(y1) - l0))
        return y0 + f * (y1 - y0)


class SnrTrace:
    """Replay of a recorded SNR trace (CSV time_s,snr_db, times strictly increasing).

    SNR(t) is interpolated linearly in dB between samples; before the first sample the
    first value holds. After the last: with loop, the trace repeats with period
    t_last - t_first (t_first + (t - t_first) mod period); without, the last value holds.
    A one-row trace is a constant SNR."""

    def __init__(self, times: list[float], snr_db: list[float], loop: bool):
        self.times, self.snr = times, snr_db
        self.loop = loop and len(times) > 1
        self.period = times[-1] - times[0]

    @classmethod
    def from_csv(cls, path: str, loop: bool, where: str) -> "SnrTrace":
        rows = _read_csv(path, where, ("time_s", "snr_db"))
        times, snr = [], []
        for lineno, r in rows:
            if times and r["time_s"] <= times[-1]:
                raise ConfigError(
                    f"{where}: {path!r} line {lineno}: time_s {r['time_s']!r} is not "
                    f"after {times[-1]!r} (times must increase)"
                )
            if not -100.0 <= r["snr_db"] <= 100.0:
                raise ConfigError(
                    f"{where}: {path!r} line {lineno}: snr_db {r['snr_db']!r} not in " "[-100, 100]"
                )
            times.append(r["time_s"])
            snr.append(r["snr_db"])
        return cls(times, snr, loop)

    def snr_db(self, t: float) -> float:
        ts = self.times
        if t <= ts[0]:
            return self.snr[0]
        if t >= ts[-1]:
            if not self.loop:
                return self.snr[-1]
            t = ts[0] + (t - ts[0]) % self.period
        i = bisect.bisect_right(ts, t)
        if i >= len(ts):
            return self.snr[-1]
        f = (t - ts[i - 1]) / (ts[i] - ts[i - 1])
        return self.snr[i - 1] + f * (self.snr[i] - self.snr[i - 1])

    def snr_linear(self, t: float) -> float:
        return 10.0 ** (self.snr_db(t) / 10.0)


def _seed_of(*words: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(w) for w in words])


def channel_seed(cfg: dict, user: dict) -> int:
    """The user's channel.seed, or one derived from the run seed and the user id."""
    s = user["channel"]["seed"]
    if s is not None:
        return int(s)
    return int(_seed_of(cfg["seed"], user["id"]).generate_state(1, np.uint64)[0])


def make_channel(cfg: dict, index: int) -> Callable[[float], float]:
    """SNR(t) (linear; t in seconds since slot 0) of users[index]."""
    u = cfg["users"][index]
    ch = u["channel"]
    where = f"users[{index}].channel"
    if ch["model"] == "awgn":
        lin = 10.0 ** (ch["mean_snr_db"] / 10.0)
        return lambda t: lin
    if ch["model"] == "trace":
        return SnrTrace.from_csv(ch["trace"], ch["trace_loop"], f"{where}.trace").snr_linear
    try:
        model = mac.fading_channel(
            ch["doppler_hz"],
            ch["mean_snr_db"],
            channel_seed(cfg, u),
            model=ch["model"],
            oscillators=ch["oscillators"],
        )
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return model.snr_linear


# ----------------------------------------------------------------------------------------
# Error models and chase combining


def to_db(lin: float) -> float:
    return 10.0 * math.log10(max(lin, SNR_FLOOR_LIN))


class ThresholdModel:
    """The end-of-slot rule of Andrew & Hanly, CLAMP, §V-B on the MCS table: success iff
    SNR(slot end) >= the MCS's threshold. Deterministic."""

    name = "threshold"
    at_slot_end = True

    def __init__(self, table):
        self.thresholds = list(table.thresholds_db)

    def success(self, mcs: int, snr_lin: float, rng: np.random.Generator,
                tb_bytes: int) -> bool:
        return to_db(snr_lin) >= self.thresholds[mcs]


class EndOfSlotModel:
    """Andrew & Hanly, CLAMP, §V-B literally: the TB's B = 8 * tb_bytes information bits were
    chosen at the slot start; an error iff B > slot_s W0 log2(1 + N(e))
    (oppsched.mac.clamp_link.is_error). The MCS only bounds the TB (the grant check)."""

    name = "end_of_slot"
    at_slot_end = True

    def __init__(self, table, slot_s: float, w0_hz: float, cmax_bps: float):
        self.link = mac.clamp_link(slot_s=slot_s, w0_hz=w0_hz, cmax_bps=cmax_bps)

    def success(self, mcs: int, snr_lin: float, rng: np.random.Generator,
                tb_bytes: int) -> bool:
        return not self.link.is_error(8.0 * tb_bytes, snr_lin)


class CurvesModel:
    """BLER from the link curves at the slot's SNR; one uniform draw per decision (always
    drawn, so the stream does not depend on the BLER values)."""

    name = "curves"
    at_slot_end = False

    def __init__(self, curves: LinkCurves):
        self.curves = curves

    def success(self, mcs: int, snr_lin: float, rng: np.random.Generator,
                tb_bytes: int) -> bool:
        return rng.random() >= self.curves.bler(mcs, to_db(snr_lin))


class ChaseCombiner:
    """Per (user, HARQ process): the linear sum of the decoding SNRs of every transmission
    since the process's NDI last changed (a new TB), this one included. With chase
    combining off, every transmission stands alone."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._state: dict[tuple[int, int], list] = {}

    def combine(self, user: int, pid: int, ndi: int, snr_lin: float) -> tuple[float, int]:
        """Returns (effective SNR, transmissions combined)."""
        st = self._state.get((user, pid))
        if not self.enabled or st is None or st[0] != ndi:
            st = [ndi, 0.0, 0]
            self._state[(user, pid)] = st
        st[1] += snr_lin
        st[2] += 1
        return st[1], st[2]


@dataclass
class Models:
    table: Any
    error: Any
    channels: list[Callable[[float], float]]
    curves: LinkCurves | None = None


def build_models(cfg: dict) -> Models:
    """Everything the configuration names (tables, curves, traces, channel models), built
    and checked; ConfigError names the field."""
    table = load_mcs_table(cfg)
    curves = None
    if cfg["error_model"] == "curves":
        curves = LinkCurves.from_csv(cfg["link_curves"], len(table))
        error = CurvesModel(curves)
    elif cfg["error_model"] == "threshold":
        error = ThresholdModel(table)
    else:
        c = cfg["shannon"]
        try:
            error = EndOfSlotModel(table, cfg["slot_s"], c["w0_hz"], c["cmax_bps"])
        except ValueError as exc:
            raise ConfigError(f"shannon: {exc}") from None
    channels = [make_channel(cfg, i) for i in range(len(cfg["users"]))]
    return Models(table, error, channels, curves)
