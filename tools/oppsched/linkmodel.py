"""Link curves as data: the measured BLER vs SNR per MCS (linkcurves.csv and its
summary.json) and the CQI -> MCS tables derived from them, for the PHY processes, the
daemons' configuration (oppsched.testbed.daemonconf) and the commands alike
(`oppsched linkcurves`, `mcstable`, `lcmerge`, `linkgap`, `bench`: oppsched.commands).

Measuring the curves is the command's (oppsched.commands.linkcurves and
oppsched.commands.linkcurves_point); this module only reads, writes, summarises and
derives, with the PHY bindings (gnuradio.oppsched) for the MCS set and TB sizes.

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
from pathlib import Path
from typing import Optional

from oppsched import mac
from oppsched.config import ConfigError

CSV_COLUMNS = [
    "mcs", "modulation", "code_rate", "spectral_efficiency", "snr_db", "tbs", "slots",
    "errors", "bler", "header_errors", "missed_detections", "false_detections",
    "snr_est_db", "tb_bits_per_re", "transmissions", "channel", "profile", "fec", "sample_rate_hz",
]
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
