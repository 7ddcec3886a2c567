"""`oppsched linkcurves` / `oppsched mcstable`: the CSV, the derived CQI -> MCS table, the
interpolation, HARQ columns, determinism and the CLI's errors.

Runs are tiny (a few hundred slots in all, well under a few seconds) and seeded, so every
count is deterministic; no test depends on speed, and the bench never runs here. The
chosen SNRs are far from each MCS's waterfall (BLER exactly 1 or exactly 0 with
overwhelming probability for any seed), except the middle points, for which only
monotonicity within a wide statistical margin is asserted.
"""

from __future__ import annotations

import ast
import csv
import math
from pathlib import Path

import pytest

pytest.importorskip("gnuradio.oppsched", reason="PHY bindings not built")

from oppsched import cli  # noqa: E402
from oppsched import linkmodel as lm
from oppsched.commands import linkcurves as lc, linkcurves_fg, linkcurves_point as lcp
from oppsched import mac  # noqa: E402
from oppsched.config import ConfigError  # noqa: E402

REQUIRED = ["mcs", "modulation", "code_rate", "spectral_efficiency", "snr_db", "tbs", "errors",
            "bler", "slots", "header_errors", "missed_detections"]
# MCS 0 (BPSK 1/2, 10% BLER near 0.4 dB) and MCS 4 (16QAM 3/4, near 12.4 dB): -8 dB is far
# below both (no slot is even reliably detected), 30 dB far above both.
SNRS = (-8.0, 10.0, 30.0)


def read(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("lc")
    rc = cli.main(["linkcurves", "--mcs", "0,4", "--snr", ",".join(map(str, SNRS)),
                   "--slots", "60", "--min-errors", "40", "--seed", "3", "--no-skip",
                   "--out", str(out), "--table", str(out / "table.csv")])
    assert rc == 0
    return out


def test_csv_has_the_required_columns_and_one_row_per_point(tiny):
    rows = read(tiny / "linkcurves.csv")
    assert set(REQUIRED) <= set(rows[0])
    assert [(int(r["mcs"]), float(r["snr_db"])) for r in rows] == [
        (m, s) for m in (0, 4) for s in SNRS]
    for r in rows:
        assert 0.0 <= float(r["bler"]) <= 1.0
        assert int(r["errors"]) <= int(r["slots"])
        assert math.isclose(float(r["bler"]), int(r["errors"]) / int(r["slots"]), rel_tol=1e-5)
        assert int(r["header_errors"]) + int(r["missed_detections"]) <= int(r["errors"])
        assert r["profile"] == "evdo" and r["channel"] == "awgn"
    r4 = [r for r in rows if r["mcs"] == "4"][0]
    assert r4["modulation"] == "16QAM"
    assert float(r4["code_rate"]) == pytest.approx(0.75)
    assert float(r4["spectral_efficiency"]) == pytest.approx(3.0)
    assert int(r4["tbs"]) == 230  # the largest TB of 16QAM 3/4 in an evdo slot at 1 Msps (LDPC)
    assert r4["fec"] == "ldpc"


def test_bler_is_one_far_below_and_zero_far_above_the_waterfall(tiny):
    rows = read(tiny / "linkcurves.csv")
    for m in ("0", "4"):
        by_snr = {float(r["snr_db"]): r for r in rows if r["mcs"] == m}
        assert float(by_snr[-8.0]["bler"]) == 1.0
        assert float(by_snr[30.0]["bler"]) == 0.0
        assert int(by_snr[30.0]["slots"]) == 60  # no early stop without errors
        assert int(by_snr[-8.0]["slots"]) < 60  # stopped after --min-errors
        # the receiver's SNR estimate follows the SNR definition at high SNR
        assert float(by_snr[30.0]["snr_est_db"]) == pytest.approx(30.0, abs=1.0)


def test_bler_does_not_increase_with_snr_beyond_noise(tiny):
    rows = read(tiny / "linkcurves.csv")
    for m in ("0", "4"):
        pts = sorted((float(r["snr_db"]), float(r["bler"]), int(r["slots"]))
                     for r in rows if r["mcs"] == m)
        for (_, b0, n0), (_, b1, n1) in zip(pts, pts[1:]):
            sigma = math.sqrt(0.25 / n0 + 0.25 / n1)  # worst-case binomial spread
            assert b1 <= b0 + 3 * sigma
    # at 10 dB MCS 0 is far above its waterfall and MCS 4 far below: a higher MCS needs
    # more SNR
    mid = {r["mcs"]: float(r["bler"]) for r in rows if float(r["snr_db"]) == 10.0}
    assert mid["0"] < mid["4"]


def test_summary_and_plot_are_written(tiny):
    import json

    s = json.loads((tiny / "summary.json").read_text())
    e = {x["mcs"]: x for x in s["mcs"]}
    assert set(e) == {0, 4}
    for m in (0, 4):
        assert e[m]["status"] == "ok"
        assert SNRS[0] < e[m]["snr_at_target_db"] < SNRS[-1]
        # distance to Shannon at the MCS's spectral efficiency: SNR = 2^SE - 1
        shannon = 10 * math.log10(2 ** e[m]["spectral_efficiency"] - 1)
        assert e[m]["shannon_snr_db"] == pytest.approx(shannon, abs=1e-3)
        assert e[m]["shannon_gap_db"] == pytest.approx(e[m]["snr_at_target_db"] - shannon,
                                                       abs=2e-3)
        assert e[m]["shannon_gap_db"] > 0  # nothing beats capacity
    assert "linkcurves --channel awgn --mcs 0,4" in s["command"]
    assert (tiny / "linkcurves.png").stat().st_size > 10_000


def test_derived_table_loads_in_the_mac_and_maps_higher_snr_to_higher_mcs(tiny):
    text = (tiny / "table.csv").read_text()
    t = mac.mcs_table.from_csv(text, "measured")
    # MCS 1 was not measured: the table is MCS 0 only (rows must be MCS 0..K in order)
    assert len(t) == 1 and t[0].name == "BPSK 1/2"
    assert t.bytes_per_slot(0, 1.667e-3) == 35  # rate_bps gives back the PHY's TB size (LDPC)


def synthetic_rows(thresholds: list[float]) -> list[dict]:
    """Ideal waterfalls: BLER 1 below thr - 1 dB, 0.5 at thr - 0.5, 0.02 at thr + 0.5, 0
    above (so the 10% crossing is at thr - 0.5 + log-interp)."""
    rows = []
    for m, thr in enumerate(thresholds):
        for snr, bler in ((thr - 1.0, 1.0), (thr - 0.5, 0.5), (thr + 0.5, 0.02),
                          (thr + 1.0, 0.0)):
            rows.append({"mcs": m, "snr_db": snr, "bler": bler, "tbs": 10, "errors": 0,
                         "slots": 100, "tb_bits_per_re": 0.4})
    return rows


def test_mcstable_command_gives_increasing_thresholds_and_rates(tmp_path):
    thr = [2.0, 5.0, 7.5, 10.0, 13.5, 17.0, 18.5, 20.0]
    curves = tmp_path / "curves.csv"
    lm.write_csv([dict(r, modulation="x", code_rate=0.5, spectral_efficiency=0.5,
                       header_errors=0, missed_detections=0, false_detections=0,
                       snr_est_db=0.0, transmissions=100, channel="awgn", profile="3ms",
                       fec="ldpc", sample_rate_hz=1e6) for r in synthetic_rows(thr)], curves)
    out = tmp_path / "table.csv"
    assert cli.main(["mcstable", str(curves), "--out", str(out)]) == 0
    t = mac.mcs_table.from_csv(out.read_text(), "synthetic")
    assert len(t) == 8
    ths = t.thresholds_db
    assert all(b > a for a, b in zip(ths, ths[1:]))
    # the 10% crossing between (thr-0.5, 0.5) and (thr+0.5, 0.02), log10-linear
    f = (math.log10(0.1) - math.log10(0.5)) / (math.log10(0.02) - math.log10(0.5))
    assert ths[3] == pytest.approx(10.0 - 0.5 + f, abs=0.006)
    # higher SNR -> higher (or equal) MCS, and every MCS is reachable
    picks = [t.select(s) for s in [x * 0.25 for x in range(-20, 110)]]
    assert all(b >= a for a, b in zip(picks, picks[1:]))
    assert set(picks) == {mac.NO_MCS, *range(8)}
    # rate_bps = 8 * TB bytes / slot: the MAC gets back exactly the PHY's TB sizes (clamp
    # profile, 3 ms slots, from the CSV's profile column)
    from gnuradio import oppsched as phy

    num = phy.numerology.profile("3ms", 1e6)
    assert [t.bytes_per_slot(m, 3e-3) for m in range(8)] == [
        phy.mcs_set.tb_bytes(m, num) for m in range(8)]


def test_a_threshold_not_above_the_previous_one_is_raised_and_the_table_still_loads():
    s = lm.summarize(synthetic_rows([2.0, 6.0, 5.0]), 0.1)
    text, warnings = lm.derive_table(s, "evdo", 1e6)
    t = mac.mcs_table.from_csv(text, "bumped")
    assert len(t) == 3
    assert t.thresholds_db[2] == pytest.approx(t.thresholds_db[1] + 0.1)
    assert any("MCS 2" in w for w in warnings)


def test_table_needs_mcs_0():
    s = lm.summarize([r for r in synthetic_rows([2.0, 6.0]) if r["mcs"] == 1], 0.1)
    with pytest.raises(ConfigError, match="MCS 0"):
        lm.derive_table(s, "evdo", 1e6)


def test_snr_at_bler_interpolates_in_log_bler_and_reports_the_range():
    # exactly a straight line in log10 BLER: 1 at 0 dB, 0.01 at 2 dB -> 0.1 at 1 dB
    assert lm.snr_at_bler([0.0, 2.0], [1.0, 0.01], 0.1) == (pytest.approx(1.0), "ok")
    # a zero neighbour: linear in BLER (as the abstract PHY's LinkCurves)
    assert lm.snr_at_bler([0.0, 1.0], [0.3, 0.0], 0.1)[0] == pytest.approx(2 / 3)
    # the highest crossing counts (a noisy bump above the target at 3 dB)
    assert lm.snr_at_bler([0, 1, 2, 3, 4], [1, 0.05, 0.02, 0.2, 0.0], 0.1)[0] == \
        pytest.approx(3.5)
    assert lm.snr_at_bler([5.0, 6.0], [0.05, 0.0], 0.1) == (5.0, "below_range")
    assert lm.snr_at_bler([5.0, 6.0], [1.0, 0.5], 0.1) == (None, "above_range")


def test_harq_adds_bler_after_retransmissions_and_they_never_exceed_the_first(tmp_path):
    # 64QAM 5/6 at 16 dB (below its 10% threshold): most first transmissions fail, the
    # retransmissions combine
    rc = cli.main(["linkcurves", "--mcs", "7", "--snr", "16", "--slots", "40",
                   "--min-errors", "1000", "--harq", "--max-tx", "3", "--seed", "2",
                   "--out", str(tmp_path)])
    assert rc == 0
    (r,) = read(tmp_path / "linkcurves.csv")
    b1, b2, b3 = float(r["bler"]), float(r["bler_tx2"]), float(r["bler_tx3"])
    assert int(r["slots"]) == 40
    assert b1 > 0.5
    assert b3 <= b2 <= b1
    assert b2 < b1  # combining gains
    assert int(r["transmissions"]) > int(r["slots"])


def test_a_point_is_reproducible_and_independent_of_the_rest_of_the_sweep():
    # MCS 0 at 0 dB: on its waterfall (10% at 0.35 dB)
    cfg = lcp.SweepConfig(mcs=[0], snrs=[0.0], slots=50, min_errors=1000, seed=9)
    cfg2 = lcp.SweepConfig(mcs=[0, 1], snrs=[-1.0, 0.0], slots=50, min_errors=1000, seed=9,
                          skip_after_zero=False)
    quiet = lambda s: None  # noqa: E731
    a = lcp.run_sweep(cfg, quiet)[0]
    b = [r for r in lcp.run_sweep(cfg2, quiet) if r["mcs"] == 0 and r["snr_db"] == 0.0][0]
    assert a == b
    c = lcp.run_sweep(lcp.SweepConfig(mcs=[0], snrs=[0.0], slots=50, min_errors=1000, seed=10),
                     quiet)[0]
    assert 0 < a["errors"] < 50  # on the waterfall, so another seed gives another count
    assert c != a  # (snr_est_db alone differs for other noise)


def test_the_flowgraph_of_the_blocks_agrees_exactly_with_the_classes():
    from gnuradio import oppsched as phy

    from oppsched.commands.linkcurves_fg import blocks_available, measure_point_flowgraph

    if not blocks_available(phy):
        pytest.skip("gr-oppsched blocks not built")
    errors = {}
    for snr in (0.0, 1.0):  # on MCS 0's waterfall: payload and header errors both occur
        cfg = lcp.SweepConfig(mcs=[0], snrs=[snr], slots=150, min_errors=10**6, seed=4)
        cfg.validate()
        chain = lcp.Chain(cfg)
        # slot_rx keeps its soft buffers by the 1-bit NDI rule: so does the class runner here
        a = lcp.PointRunner(chain, 0, snr, lead=0, empty_first_slot=True,
                           fresh_first_buffer=False).run()
        b = measure_point_flowgraph(chain, 0, snr)
        keys = ("slots", "errors", "header_errors", "missed_detections", "transmissions")
        # the same samples through the same C++: the same outcome for every slot
        assert [a[k] for k in keys] == [b[k] for k in keys]
        assert b["snr_est_db"] == pytest.approx(a["snr_est_db"], abs=0.1)
        errors[snr] = (b["errors"], b["header_errors"])
    # the comparison covered failed payloads and failed headers (deterministic: seeded)
    assert errors[0.0][0] > errors[0.0][1] > 0
    assert cli.main(["linkcurves", "--flowgraph", "--harq", "--out", "/nonexistent"]) == 2


def _imports(tree):
    """(module name, inside a function) for every import statement of a module's AST."""
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    out += [(a.name, True) for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    out.append((node.module or "", True))
    for node in tree.body:
        if isinstance(node, ast.Import):
            out += [(a.name, False) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.module or "", False))
    return out


def test_linkcurves_modules_have_no_import_cycle_and_import_late_only_gnu_radio_or_matplotlib():
    optional = ("gnuradio", "pmt", "matplotlib")
    for mod in (lc, lcp, lm, linkcurves_fg):
        for name, late in _imports(ast.parse(Path(mod.__file__).read_text())):
            if late:
                assert name.split(".")[0] in optional, f"{mod.__name__} imports {name} late"
    fg_imports = _imports(ast.parse(Path(linkcurves_fg.__file__).read_text()))
    assert not [n for n, _ in fg_imports if n.startswith("oppsched.commands.linkcurves")]


@pytest.mark.parametrize("args, where", [
    (["--snr", "5:1:1"], "--snr"),
    (["--snr", "a:b"], "--snr"),
    (["--snr", "0:10:0"], "--snr"),
    (["--mcs", "9"], "--mcs"),
    (["--mcs", "x"], "--mcs"),
    (["--tbs", "100000"], "--tbs"),
    (["--tbs", "0"], "--tbs"),
    (["--channel", "rician"], "--channel"),
    (["--profile", "lte"], "--profile"),
    (["--slots", "0"], "--slots"),
    (["--sample-rate", "-1"], "--sample-rate"),
    (["--harq", "--harq-processes", "1"], "--harq-processes"),
    (["--ldpc-max-n", "1000"], "--ldpc-max-n"),
    (["--ldpc-max-n", "648", "--fec", "conv"], "--ldpc-max-n"),
    (["--ldpc-max-n", "648", "--flowgraph"], "--ldpc-max-n"),
    (["--stop-below", "0"], "--stop-below"),
])
def test_cli_errors_name_the_argument(tmp_path, capsys, args, where):
    rc = cli.main(["linkcurves", "--out", str(tmp_path / "o")] + args)
    assert rc == 2
    err = capsys.readouterr().err
    assert where in err
    assert not (tmp_path / "o" / "linkcurves.csv").exists()


def test_mcstable_errors_name_the_argument(tmp_path, capsys):
    assert cli.main(["mcstable", str(tmp_path / "none.csv"), "--out", str(tmp_path / "t")]) == 2
    assert "none.csv" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("mcs,snr_db\n0,1\n")
    assert cli.main(["mcstable", str(bad), "--out", str(tmp_path / "t")]) == 2
    assert "bler" in capsys.readouterr().err


def test_a_648_bit_cap_cuts_the_tb_into_648_bit_codewords_and_keeps_its_size():
    from gnuradio import oppsched as phy

    num = lm.make_numerology(phy, "3ms", 5e6)
    cap = lm.make_numerology(phy, "3ms", 5e6, "ldpc", 648)
    assert cap.params.ldpc_max_n == 648 and num.params.ldpc_max_n == 1944
    for m in range(8):
        tbs = phy.mcs_set.tb_bytes(m, num)
        assert phy.mcs_set.tb_bytes(m, cap) == tbs
        long_cw = phy.mcs_set.ldpc_codeword_lengths(tbs, m, num)
        short_cw = phy.mcs_set.ldpc_codeword_lengths(tbs, m, cap)
        assert set(short_cw) == {648}
        assert max(long_cw) == 1944  # a 5 Msps TB is long enough for the longest code
        assert 648 * len(short_cw) >= sum(long_cw) - 648


def test_stop_below_skips_the_higher_snrs_once_the_bler_is_below_it(tmp_path):
    out = tmp_path / "o"
    assert cli.main(["linkcurves", "--mcs", "0", "--snr", "-8,30,31", "--slots", "30",
                     "--min-errors", "20", "--no-skip", "--stop-below", "0.1",
                     "--ldpc-max-n", "648", "--out", str(out)]) == 0
    rows = read(out / "linkcurves.csv")
    assert [float(r["snr_db"]) for r in rows] == [-8.0, 30.0]
    assert float(rows[0]["bler"]) == 1.0 and float(rows[1]["bler"]) == 0.0
    cmd = __import__("json").loads((out / "summary.json").read_text())["command"]
    assert "--ldpc-max-n 648" in cmd and "--stop-below 0.1" in cmd


def test_lcmerge_joins_parts_and_refuses_a_point_twice(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    for d, snr in ((a, "30"), (b, "-8")):
        assert cli.main(["linkcurves", "--mcs", "0", "--snr", snr, "--slots", "20",
                         "--min-errors", "20", "--out", str(d)]) == 0
    out = tmp_path / "m"
    assert cli.main(["lcmerge", str(a), str(b), "--out", str(out)]) == 0
    rows = read(out / "linkcurves.csv")
    assert [float(r["snr_db"]) for r in rows] == [-8.0, 30.0]
    summ = __import__("json").loads((out / "summary.json").read_text())
    assert len(summ["commands"]) == 2 and summ["config"]["profile"] == "evdo"
    assert cli.main(["lcmerge", str(a), str(a), "--out", str(tmp_path / "x")]) == 2
    assert "MCS 0 at 30 dB" in capsys.readouterr().err
