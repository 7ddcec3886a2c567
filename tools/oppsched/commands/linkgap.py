"""`oppsched linkgap`: each MCS's measured threshold against Shannon and against the
capacity of its own modulation, and what the long LDPC codewords gain.

Definitions (docs/phy.md, "LDPC codewords against Shannon"):

- b/RE (eta): information bits per data RE, 8 x TB bytes / payload REs (the TB alone: no
  CRC-32, no header, pilot or preamble RE). linkcurves writes it as tb_bits_per_re.
- SNR: mean Es/N0 per occupied subcarrier (numerology.h). Pilots and data REs have the
  same mean energy, so it is also the Es/N0 of a data RE.
- Shannon SNR: the SNR at which the complex AWGN channel's capacity log2(1 + SNR)
  equals eta: 2^eta - 1.
- Constrained limit: the SNR at which the BICM capacity of the MCS's modulation (uniform
  points, Gray labels as 802.11's, bit-wise decoding: what a bit-interleaved LDPC code
  with a bit-wise demapper can reach) equals eta. The square QAMs are two independent
  Gray-labelled PAMs (I and Q), so the capacities are sums of one-dimensional integrals,
  evaluated with Gauss-Hermite quadrature (exact to ~1e-6 bit here). BPSK uses one real
  dimension of the complex channel. The coded-modulation (CM) capacity, which joint
  demapping and decoding could reach, is given too (equal to BICM for BPSK and QPSK).
- gap: measured SNR at 10% first-transmission BLER minus the Shannon SNR; gain: the
  threshold with every codeword capped at 648 bits minus the threshold with the PHY's
  codeword choice (1296/1944 where the TB allows).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Optional

import numpy as np

from oppsched.config import ConfigError

GH_NODES = 96  # Gauss-Hermite nodes: the error is < 1e-6 bit at every SNR used here


def shannon_snr_db(eta: float) -> float:
    """SNR (dB) at which log2(1 + SNR) = eta bit per complex symbol."""
    if not eta > 0:
        raise ValueError(f"eta: {eta!r} must be > 0 bit per RE")
    return 10.0 * math.log10(2.0 ** eta - 1.0)


def shannon_capacity(snr_db: float) -> float:
    return math.log2(1.0 + 10.0 ** (snr_db / 10.0))


@lru_cache(maxsize=None)
def _hermgauss():
    t, w = np.polynomial.hermite.hermgauss(GH_NODES)
    return t, w / math.sqrt(math.pi)


def pam(m: int) -> tuple[np.ndarray, np.ndarray]:
    """(amplitudes, Gray labels) of the 2^m-PAM with unit mean energy: amplitude i is
    (2i - M + 1) / sqrt((M^2 - 1)/3), label i ^ (i >> 1) (binary-reflected Gray: 802.11's
    per-dimension QAM labels, e.g. 00, 01, 11, 10 for -3, -1, 1, 3)."""
    if m < 1:
        raise ValueError(f"m: {m!r} must be >= 1 bit per dimension")
    n = 1 << m
    i = np.arange(n)
    amp = (2 * i - n + 1) / math.sqrt((n * n - 1) / 3.0)
    return amp, i ^ (i >> 1)


def pam_capacity(m: int, sigma2: float, kind: str = "bicm") -> float:
    """Mutual information (bit per real dimension) of equiprobable 2^m-PAM (unit energy)
    in real Gaussian noise of variance sigma2. kind 'cm': I(X;Y); 'bicm': sum over the m
    Gray label bits of I(B_i;Y)."""
    if kind not in ("cm", "bicm"):
        raise ValueError(f"kind: {kind!r} is not cm or bicm")
    amp, lab = pam(m)
    t, w = _hermgauss()
    s = math.sqrt(2.0 * sigma2)
    # y[x, k] = amp[x] + s t[k]; metric[x, k, x'] = -(y - amp[x'])^2 / (2 sigma2)
    y = amp[:, None] + s * t[None, :]
    metric = -((y[:, :, None] - amp[None, None, :]) ** 2) / (2.0 * sigma2)
    top = metric.max(axis=2, keepdims=True)
    lse_all = np.log(np.exp(metric - top).sum(axis=2)) + top[:, :, 0]
    n = amp.size
    if kind == "cm":
        # I = m - E log2( sum_x' p(y|x') / p(y|x) )
        own = metric[np.arange(n), :, np.arange(n)]
        loss = ((lse_all - own) / math.log(2.0)) @ w
        return float(m - loss.mean())
    total = 0.0
    for b in range(m):
        bit = (lab >> (m - 1 - b)) & 1
        same = bit[:, None] == bit[None, :]  # [x, x']: x' has x's value of bit b
        msk = np.where(same[:, None, :], metric, -np.inf)
        top_s = msk.max(axis=2, keepdims=True)
        lse_same = np.log(np.exp(msk - top_s).sum(axis=2)) + top_s[:, :, 0]
        loss = ((lse_all - lse_same) / math.log(2.0)) @ w
        total += 1.0 - float(loss.mean())
    return total


def capacity(bits_per_symbol: int, snr_db: float, kind: str = "bicm") -> float:
    """Bit per complex symbol of BPSK (1), QPSK (2), 16QAM (4) or 64QAM (6) with unit
    mean energy at Es/N0 = snr_db in complex AWGN. QAM = two PAMs, each with half the
    energy and half the noise (per-dimension SNR = Es/N0); BPSK = one real dimension with
    all the energy and half the noise (SNR 2 Es/N0)."""
    g = 10.0 ** (snr_db / 10.0)
    if bits_per_symbol == 1:
        return pam_capacity(1, 1.0 / (2.0 * g), kind)
    if bits_per_symbol in (2, 4, 6):
        return 2.0 * pam_capacity(bits_per_symbol // 2, 1.0 / g, kind)
    raise ValueError(f"bits_per_symbol: {bits_per_symbol!r} not one of 1, 2, 4, 6")


def constrained_snr_db(bits_per_symbol: int, eta: float, kind: str = "bicm") -> float:
    """SNR (dB) at which capacity(bits_per_symbol, ., kind) = eta."""
    from scipy.optimize import brentq

    if not 0 < eta < bits_per_symbol:
        raise ValueError(f"eta: {eta!r} not in (0, {bits_per_symbol}) bit per symbol")
    return float(brentq(lambda x: capacity(bits_per_symbol, x, kind) - eta, -30.0, 60.0,
                        xtol=1e-5))


# ---------------------------------------------------------------------------------------
# The table: measured thresholds (linkcurves summary.json) against the limits


def _cfg(s: dict, key: str, default=None):
    """A setting of the sweep: its config (written by linkcurves), else the top-level keys
    of a summary assembled from split runs (profile, sample_rate_hz)."""
    c = s.get("config") or {}
    if key in c:
        return c[key]
    top = {"sample_rate": "sample_rate_hz"}.get(key, key)
    return s.get(top, default)


def _codewords(phy, profile: str, rate: float, mcs: int, tbs: int, max_n: int) -> str:
    from oppsched.linkmodel import make_numerology

    num = make_numerology(phy, profile, rate, "ldpc", max_n)
    lens = list(phy.mcs_set.ldpc_codeword_lengths(tbs, mcs, num))
    return " + ".join(f"{lens.count(n)}x{n}" for n in (1944, 1296, 648) if lens.count(n))


def gap_rows(long_summary: dict, short_summary: Optional[dict] = None,
             ideal_summary: Optional[dict] = None) -> list[dict]:
    """One row per MCS of long_summary (the PHY's codeword choice), with the 648-capped
    threshold of short_summary and the --ideal-rx threshold of ideal_summary when given."""
    from oppsched.linkmodel import _phy

    phy = _phy()
    profile = _cfg(long_summary, "profile", "evdo")
    rate = float(_cfg(long_summary, "sample_rate", 1e6))
    if short_summary is not None:
        sp, sr = _cfg(short_summary, "profile"), float(_cfg(short_summary, "sample_rate", 0))
        if (sp, sr) != (profile, rate):
            raise ConfigError(f"--short: profile {sp} at {sr:g} Hz, --long: {profile} at "
                              f"{rate:g} Hz (they must be the same)")
        short_cap = int(_cfg(short_summary, "ldpc_max_n", 1944))
    short = {e["mcs"]: e for e in (short_summary or {}).get("mcs", [])}
    ideal = {e["mcs"]: e for e in (ideal_summary or {}).get("mcs", [])}
    out = []
    for e in long_summary["mcs"]:
        m = int(e["mcs"])
        info = phy.mcs_set.get(m)
        eta = float(e["tb_bits_per_re"])
        bps = int(info.bits_per_symbol)
        row = {
            "mcs": m, "name": info.name, "bits_per_symbol": bps,
            "code_rate": round(float(info.code_rate), 6), "tbs": int(e["tbs"]),
            "codewords": _codewords(phy, profile, rate, m, int(e["tbs"]), 1944),
            "b_per_re": round(eta, 4),
            "shannon_snr_db": round(shannon_snr_db(eta), 3),
            "bicm_snr_db": round(constrained_snr_db(bps, eta, "bicm"), 3),
            "cm_snr_db": round(constrained_snr_db(bps, eta, "cm"), 3),
            "measured_long_db": e.get("snr_at_target_db"),
        }
        thr = row["measured_long_db"]
        row["gap_db"] = None if thr is None else round(thr - row["shannon_snr_db"], 3)
        row["gap_bicm_db"] = None if thr is None else round(thr - row["bicm_snr_db"], 3)
        if short_summary is not None:
            s = short.get(m)
            st = None if s is None else s.get("snr_at_target_db")
            row["codewords_short"] = _codewords(phy, profile, rate, m, int(e["tbs"]), short_cap)
            row["measured_short_db"] = st
            row["gain_db"] = None if st is None or thr is None else round(st - thr, 3)
        if ideal_summary is not None:
            it = (ideal.get(m) or {}).get("snr_at_target_db")
            row["ideal_rx_db"] = it
            row["receiver_loss_db"] = None if it is None or thr is None else round(thr - it, 3)
        out.append(row)
    return out


def markdown(rows: list[dict], title: str = "") -> str:
    def f(v):
        return "-" if v is None else f"{v:.2f}"

    short = "measured_short_db" in rows[0] if rows else False
    ideal = "ideal_rx_db" in rows[0] if rows else False
    head = ["MCS", "modulation, rate", "codewords", "b/RE", "Shannon SNR", "BICM limit",
            "CM limit"]
    head += ["measured (648)", "measured (long)", "gain", "gap", "gap to BICM"] if short else [
        "measured", "gap", "gap to BICM"]
    if ideal:
        head += ["ideal rx", "receiver loss"]
    lines = [f"**{title}**", ""] if title else []
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [str(r["mcs"]), r["name"], r["codewords"], f"{r['b_per_re']:.3f}",
                 f(r["shannon_snr_db"]), f(r["bicm_snr_db"]), f(r["cm_snr_db"])]
        if short:
            cells += [f(r["measured_short_db"]), f(r["measured_long_db"]), f(r["gain_db"])]
        else:
            cells += [f(r["measured_long_db"])]
        cells += [f(r["gap_db"]), f(r["gap_bicm_db"])]
        if ideal:
            cells += [f(r.get("ideal_rx_db")), f(r.get("receiver_loss_db"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(tables: list[tuple[str, list[dict]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 6))
    x = np.linspace(-4.0, 22.0, 300)
    ax.plot(x, [shannon_capacity(v) for v in x], "k-", lw=1.5, label="Shannon log2(1 + SNR)")
    ax.plot(x, [shannon_capacity(v - 2.0) for v in x], "k:", lw=1,
            label="Shannon + 2 dB (the goal)")
    for bps, name, ls in ((1, "BPSK", ":"), (2, "QPSK", "-."), (4, "16QAM", "--"),
                          (6, "64QAM", (0, (5, 1)))):
        xs = x[x <= 24]
        ax.plot(xs, [capacity(bps, v, "bicm") for v in xs], color="0.55", lw=0.9, ls=ls,
                label=f"{name} BICM capacity")
    marks = ["o", "s", "D", "^"]
    for i, (label, rows) in enumerate(tables):
        pts = [(r["measured_long_db"], r["b_per_re"]) for r in rows
               if r["measured_long_db"] is not None]
        ax.plot(*zip(*pts), marks[i % 4] + "-", color=f"C{i}", ms=5, lw=1,
                label=f"{label}: measured, long codewords")
        spts = [(r.get("measured_short_db"), r["b_per_re"]) for r in rows
                if r.get("measured_short_db") is not None]
        if spts:
            ax.plot(*zip(*spts), marks[i % 4], mfc="none", color=f"C{i}", ms=6, ls=":", lw=0.8,
                    label=f"{label}: measured, codewords <= 648")
    ax.set_xlabel("SNR: mean Es/N0 per occupied subcarrier (dB); measured at 10% BLER")
    ax.set_ylabel("information bits per data RE (TB bits / payload REs)")
    ax.set_xlim(-4, 22)
    ax.set_ylim(0, 6.2)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left")
    ax.set_title("LDPC link thresholds against Shannon and the BICM limits", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cmd_linkgap(a) -> int:
    from oppsched.linkmodel import read_summary

    longs = a.long or []
    shorts = a.short or []
    ideals = a.ideal or []
    if ideals and len(ideals) != len(longs):
        raise ConfigError(f"--ideal: {len(ideals)} given for {len(longs)} --long (one per "
                          "--long, in the same order, or none)")
    if not longs:
        raise ConfigError("--long: at least one linkcurves folder is needed")
    if shorts and len(shorts) != len(longs):
        raise ConfigError(f"--short: {len(shorts)} given for {len(longs)} --long (one per "
                          "--long, in the same order, or none)")
    out = Path(a.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out: {a.out!r} cannot be created ({exc.strerror})") from None
    tables, md, js = [], [], []
    for i, lp in enumerate(longs):
        ls = read_summary(lp, "--long")
        ss = read_summary(shorts[i], "--short") if shorts else None
        rows = gap_rows(ls, ss, read_summary(ideals[i], "--ideal") if ideals else None)
        label = f"{_cfg(ls, 'profile', '?')} {float(_cfg(ls, 'sample_rate', 0)) / 1e6:g} Msps"
        tables.append((label, rows))
        md.append(markdown(rows, label))
        js.append({"label": label, "long": str(lp), "short": shorts[i] if shorts else None,
                   "rows": rows})
    (out / "gap.markdown").write_text("\n".join(md))
    (out / "gap.json").write_text(json.dumps({"definition": __doc__.split("Definitions")[1]
                                              .strip(), "tables": js}, indent=2) + "\n")
    plot(tables, out / "gap.png")
    print("\n".join(md))
    print(f"wrote {out / 'gap.markdown'}, {out / 'gap.json'}, {out / 'gap.png'}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "linkgap", help="measured MCS thresholds against Shannon and the BICM limits",
        description="Per MCS of linkcurves results: b/RE (TB bits / payload REs), Shannon "
        "SNR, BICM and CM limits of its modulation, the measured SNR at 10%% BLER, the gap, "
        "and with --short the gain of the long codewords. Writes gap.markdown, gap.json, gap.png.")
    p.add_argument("--long", action="append", metavar="DIR", help="linkcurves folder "
                   "(summary.json) with the PHY's codeword choice; repeat for more profiles")
    p.add_argument("--short", action="append", metavar="DIR", help="the same measured with "
                   "--ldpc-max-n 648, one per --long in the same order")
    p.add_argument("--ideal", action="append", metavar="DIR", help="the same measured with "
                   "--ideal-rx (code and demapper alone), one per --long in the same order")
    p.add_argument("--out", required=True, help="output folder")
    p.set_defaults(fn=cmd_linkgap)
