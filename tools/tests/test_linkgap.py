"""`oppsched linkgap`: the Shannon and modulation-constrained (BICM, CM) limits against
known values and an independent seeded Monte Carlo estimate, and the table built from the
committed link curves (docs/phy.md, "LDPC codewords against Shannon")."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from oppsched.commands import linkgap as g

ROOT = Path(__file__).resolve().parents[2]
CURVES = ROOT / "experiments" / "linkcurves"


def test_shannon_snr_is_0_db_at_1_bit_and_4_77_db_at_2_bits():
    assert g.shannon_snr_db(1.0) == pytest.approx(0.0, abs=1e-12)
    assert g.shannon_snr_db(2.0) == pytest.approx(10 * math.log10(3), abs=1e-12)
    assert g.shannon_snr_db(2.0) == pytest.approx(4.77, abs=0.005)
    assert g.shannon_capacity(g.shannon_snr_db(3.7)) == pytest.approx(3.7, abs=1e-12)
    with pytest.raises(ValueError, match="eta: 0"):
        g.shannon_snr_db(0)


def test_bpsk_and_qpsk_limits_are_the_binary_input_awgn_values():
    # binary-input AWGN at rate 1/2: Eb/N0 0.187 dB, i.e. Es/N0 = -2.82 dB for BPSK;
    # QPSK carries 1 bit at twice BPSK's Es (one per dimension): 0.19 dB
    assert g.constrained_snr_db(1, 0.5) == pytest.approx(-2.82, abs=0.01)
    assert g.constrained_snr_db(2, 1.0) == pytest.approx(0.19, abs=0.01)
    # Gray QPSK: BICM and CM coincide (independent bits)
    for snr in (-3.0, 2.0, 8.0):
        assert g.capacity(2, snr, "bicm") == pytest.approx(g.capacity(2, snr, "cm"), abs=1e-9)


@pytest.mark.parametrize("bps", [1, 2, 4, 6])
def test_constrained_capacity_is_below_shannon_and_saturates_at_the_bits_per_symbol(bps):
    for snr in (-5.0, 0.0, 5.0, 10.0, 15.0, 20.0):
        cm, bicm = g.capacity(bps, snr, "cm"), g.capacity(bps, snr, "bicm")
        assert bicm <= cm + 1e-9 <= g.shannon_capacity(snr) + 1e-9
    assert g.capacity(bps, 40.0, "bicm") == pytest.approx(bps, abs=1e-6)
    # the limit is increasing in eta and above Shannon's
    etas = [bps * f for f in (0.3, 0.5, 0.7, 0.9)]
    lim = [g.constrained_snr_db(bps, e) for e in etas]
    assert lim == sorted(lim)
    assert all(x > g.shannon_snr_db(e) for x, e in zip(lim, etas))


def _monte_carlo_bicm(bps: int, snr_db: float, n: int, seed: int) -> float:
    """BICM capacity by simulation on the complex constellation (exact log-sum-exp bit
    LLRs), an estimate independent of the per-dimension quadrature."""
    rng = np.random.default_rng(seed)
    m = bps // 2
    amp, lab = g.pam(m)
    # 2D points: label = I label bits, then Q label bits (802.11 order)
    pts = (amp[:, None] + 1j * amp[None, :]).ravel() / math.sqrt(2.0)
    labels = ((lab[:, None] << m) | lab[None, :]).ravel()
    n0 = 10.0 ** (-snr_db / 10.0)
    idx = rng.integers(0, pts.size, n)
    y = pts[idx] + math.sqrt(n0 / 2) * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    metric = -np.abs(y[:, None] - pts[None, :]) ** 2 / n0
    top = metric.max(axis=1, keepdims=True)
    lse_all = np.log(np.exp(metric - top).sum(axis=1)) + top[:, 0]
    total = 0.0
    for b in range(bps):
        bit = (labels >> (bps - 1 - b)) & 1
        same = bit[None, :] == bit[idx][:, None]
        ms = np.where(same, metric, -np.inf)
        ts = ms.max(axis=1, keepdims=True)
        lse_same = np.log(np.exp(ms - ts).sum(axis=1)) + ts[:, 0]
        total += 1.0 - np.mean(lse_all - lse_same) / math.log(2.0)
    return total


@pytest.mark.parametrize("bps, snr", [(4, 8.0), (6, 14.0)])
def test_qam_bicm_capacity_agrees_with_a_seeded_monte_carlo_on_the_2d_constellation(bps, snr):
    # 40000 symbols: the estimate's standard deviation is ~0.005 bit
    mc = _monte_carlo_bicm(bps, snr, 40000, seed=5)
    assert g.capacity(bps, snr, "bicm") == pytest.approx(mc, abs=0.02)


def test_64qam_at_5_bits_needs_about_1_2_db_more_than_shannon():
    # uniform 64QAM's shaping and BICM loss at 5 bit/symbol (docs/phy.md)
    d = g.constrained_snr_db(6, 5.0) - g.shannon_snr_db(5.0)
    assert 1.1 < d < 1.35


def _measured(profile: str, rate: str) -> Path:
    return CURVES / f"awgn-{profile}-{rate}"


@pytest.mark.parametrize("profile", ["3ms", "evdo"])
def test_the_gap_table_of_the_committed_5msps_curves_is_consistent(profile, tmp_path):
    pytest.importorskip("gnuradio.oppsched", reason="PHY bindings not built")
    from oppsched import cli

    long_dir = _measured(profile, "5msps")
    short_dir = CURVES / "ldpc648" / f"awgn-{profile}-5msps"
    if not (short_dir / "summary.json").exists():
        pytest.skip("the 648-bit measurement is not committed")
    assert cli.main(["linkgap", "--long", str(long_dir), "--short", str(short_dir),
                     "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "gap.json").read_text())["tables"][0]["rows"]
    assert [r["mcs"] for r in rows] == list(range(8))
    for r in rows:
        assert r["shannon_snr_db"] < r["bicm_snr_db"]
        assert r["cm_snr_db"] <= r["bicm_snr_db"] + 1e-6
        # a real code at 10% BLER is above the modulation's limit
        assert r["measured_long_db"] > r["bicm_snr_db"]
        assert r["gap_db"] == pytest.approx(r["measured_long_db"] - r["shannon_snr_db"],
                                            abs=1e-3)
        assert set(r["codewords_short"].split(" + ")) == {r["codewords_short"].split(" + ")[0]}
        assert r["codewords_short"].endswith("x648")
    assert (tmp_path / "gap.png").stat().st_size > 10000
    assert "| MCS |" in (tmp_path / "gap.markdown").read_text()


def test_linkgap_errors_name_the_argument(tmp_path, capsys):
    from oppsched import cli

    assert cli.main(["linkgap", "--out", str(tmp_path / "o")]) == 2
    assert "--long" in capsys.readouterr().err
    assert cli.main(["linkgap", "--long", str(tmp_path / "none"), "--out",
                     str(tmp_path / "o")]) == 2
    assert "none" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert cli.main(["linkgap", "--long", str(tmp_path / "bad.json"), "--out",
                     str(tmp_path / "o")]) == 2
    assert "'mcs' list" in capsys.readouterr().err
