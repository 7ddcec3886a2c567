"""experiments/clamp/plot_sweep.py on a made-up sweep.csv: the README's tables (mean and 95 %
interval over seeds) and Fig. 5(b)'s gain at 50 ms by the paper's reckoning, read per seed
off each curve. No run: seconds."""

import pandas as pd
import pytest

from helpers import REPO, load_script


@pytest.fixture(scope="module")
def plot_sweep():
    return load_script(REPO / "experiments/clamp/plot_sweep.py", "clamp_plot_sweep")


def _sweep(rows):
    """rows: (variant, axis value, seed, mean queue delay ms, download s, f3, f4 kb/s)."""
    out = []
    for variant, value, seed, delay, dl, f3, f4 in rows:
        out.append({
            "variant": variant, "seed": seed, "doppler_hz": 60.0,
            "buffer_bytes": value if variant == "clamp-off" else None,
            "a_bytes": value if variant == "clamp-on" else None,
            "mean_queue_delay_ms": delay, "download_1MB_mean_s": dl,
            "flow.f1.goodput_bps": 1.8e6, "flow.f2.goodput_bps": 1.7e6,
            "flow.f3.goodput_bps": f3 * 1e3, "flow.f4.goodput_bps": f4 * 1e3,
            "goodput_total_bps": 3.5e6 + (f3 + f4) * 1e3,
            "jain_index_flows_fair_share": 0.95, "harq.residual_loss": 1e-3,
            "slots.late": 0, "slots.late_phy": 2, "slots.total": 100000})
    return pd.DataFrame(out)


def test_the_gain_at_50_ms_is_read_off_each_seeds_curves_by_linear_interpolation(plot_sweep):
    d = _sweep([
        ("clamp-off", 15000, 1, 20.0, 16.0, 1000, 200),
        ("clamp-off", 30000, 1, 60.0, 12.0, 1000, 400),
        ("clamp-on", 5000, 1, 40.0, 6.0, 900, 900),
        ("clamp-on", 15000, 1, 90.0, 7.0, 900, 900),
        ("clamp-off", 15000, 2, 30.0, 20.0, 1000, 200),
        ("clamp-off", 30000, 2, 70.0, 10.0, 1000, 400),
        ("clamp-on", 5000, 2, 45.0, 5.0, 900, 900),  # ends 5 ms short of 50: read at its end
    ])
    g = plot_sweep.gain_at(d, 60.0).set_index("seed")
    assert g.loc[1, "newreno_s"] == pytest.approx(13.0)  # 16 + (12 - 16) * 30 / 40
    assert g.loc[1, "clamp_s"] == pytest.approx(6.2)  # 6 + 1 * 10 / 50
    assert g.loc[2, "newreno_s"] == pytest.approx(15.0)
    assert g.loc[2, "clamp_s"] == pytest.approx(5.0)
    assert g.loc[2, "gain"] == pytest.approx(3.0)


def test_a_curve_that_stops_far_from_50_ms_gives_no_gain_for_that_seed(plot_sweep):
    d = _sweep([
        ("clamp-off", 15000, 1, 20.0, 16.0, 1000, 200),
        ("clamp-off", 30000, 1, 60.0, 12.0, 1000, 400),
        ("clamp-on", 5000, 1, 75.0, 6.0, 900, 900),  # 25 ms beyond 50
        ("clamp-on", 15000, 1, 90.0, 7.0, 900, 900),
    ])
    assert plot_sweep.gain_at(d, 60.0).empty
    assert "not both curves come within 10 ms" in plot_sweep.tables(d)


def test_the_tables_give_each_point_its_mean_and_interval_over_the_seeds(plot_sweep):
    d = _sweep([
        ("clamp-on", 5000, 1, 40.0, 6.0, 900, 800),
        ("clamp-on", 5000, 2, 44.0, 7.0, 1100, 1000),
        ("clamp-on", 5000, 3, 42.0, 8.0, 1000, 1200),
    ])
    text = plot_sweep.tables(d)
    row = next(line for line in text.splitlines() if line.startswith("| CLAMP | 5 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "3"  # seeds
    # mean 42, half-width t(0.975, 2) * 2 / sqrt(3) = 4.97
    assert cells[3] == "42 ± 5"
    assert cells[4].split(" / ")[2] == "1000 ± 248"  # f3: sd 100
    assert cells[7] == "7.0 ± 2.5"  # download: sd 1
    assert "late slots at the apd: max 0" in text


def test_the_settled_window_takes_goodput_and_delay_from_that_window_alone(plot_sweep, tmp_path):
    # Two flows on two devices over 300 s; the socket counts rise at 100 kB/s for f1 and
    # 50 kB/s for f2 until 100 s, then at 200 and 100 kB/s; each device's queue holds
    # 10 kB until 100 s, 40 kB after, and one new 1000-byte TB of each goes out every 10 ms.
    import json
    import numpy as np
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({
        "duration_s": 300.0, "devices": [{"name": "R1"}, {"name": "R2"}],
        "flows": [{"id": "f1", "device": "R1"}, {"id": "f2", "device": "R2"}]}))
    t0 = 5_000_000_000
    (run / "run.json").write_text(json.dumps({"t0_mono_ns": t0}))
    t = np.arange(0, 300.01, 0.5)
    for fid, (r1, r2) in {"f1": (100e3, 200e3), "f2": (50e3, 100e3)}.items():
        b = np.where(t < 100, r1 * t, r1 * 100 + r2 * (t - 100))
        pd.DataFrame({"t_s": t, "event": "poll", "peer_port": 1, "bytes_received": b,
                      "bytes_sent": 0}).to_csv(run / f"flow.{fid}.socket.csv", index=False)
    ts = np.arange(0, 300, 0.005)
    q = np.where(ts < 100, 10e3, 40e3)
    pd.DataFrame({"t_ns": (t0 + ts * 1e9).astype(np.int64), "user": np.arange(len(ts)) % 2,
                  "retx": 0, "tb_bytes": 1000, "queue.R1": q, "queue.R2": q}) \
        .to_csv(run / "slots.csv", index=False)
    r = plot_sweep.settled_row(run, 150.0)
    assert r["flow.f1.goodput_bps"] == pytest.approx(1.6e6)
    assert r["flow.f2.goodput_bps"] == pytest.approx(0.8e6)
    assert r["goodput_total_bps"] == pytest.approx(2.4e6)
    assert r["download_1MB_mean_s"] == pytest.approx((5.0 + 10.0) / 2)
    # 40 kB queued, 100 kB/s of new TBs per device: 400 ms
    assert r["mean_queue_delay_ms"] == pytest.approx(400.0, rel=1e-3)
    # one flow per device: Jain over the goodputs, (2.4)^2 / (2 (1.6^2 + 0.8^2))
    assert r["jain_index_flows_fair_share"] == pytest.approx(2.4 ** 2 / (2 * (2.56 + 0.64)))
    with pytest.raises(SystemExit, match="not before the end"):
        plot_sweep.settled_row(run, 300.0)


def test_the_download_table_reads_fig_5b_off_the_real_downloads_per_seed(tmp_path):
    # download_table.py: the gain at 50 ms from transfers.time_mean_of_flows_s (the real
    # downloads), not from the long-lived rates' download_1MB_mean_s (left at 1 s here).
    mod = load_script(REPO / "experiments/clamp/download_table.py", "clamp_download_table")
    rows = []
    for variant, value, seed, delay, dl in [
            ("clamp-off", 15000, 1, 20.0, 16.0), ("clamp-off", 30000, 1, 60.0, 12.0),
            ("clamp-on", 2000, 1, 40.0, 6.0), ("clamp-on", 5000, 1, 90.0, 7.0),
            ("clamp-off", 15000, 2, 30.0, 20.0), ("clamp-off", 30000, 2, 70.0, 10.0),
            ("clamp-on", 2000, 2, 45.0, 5.0), ("clamp-on", 5000, 2, 65.0, 6.0)]:
        r = _sweep([(variant, value, seed, delay, 1.0, 900, 900)]).iloc[0].to_dict()
        r.update({"ok": True, "point": f"{variant}-{value}-{seed}",
                  "transfers.time_mean_of_flows_s": dl, "transfers.time_mean_s": dl / 2,
                  "transfers.completed": 40 + seed,
                  **{f"flow.f{i}.transfers.time_mean_s": dl * i / 2.5 for i in range(1, 5)}})
        rows.append(r)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    pd.DataFrame(rows).to_csv(sweep / "sweep.csv", index=False)
    mod.main([str(sweep)], str(tmp_path / "out"))
    text = (tmp_path / "out" / "README.md").read_text()
    # seed 1: NewReno 13.0 s (16 + (12 - 16) * 30 / 40), CLAMP 6.2 s (6 + 1 * 10 / 50);
    # seed 2: NewReno 15.0 s, CLAMP 5.25 s (5 + 1 * 5 / 20)
    assert "(per seed: 2.10, 2.86)" in text, text
    row = next(line for line in text.splitlines() if line.startswith("| NewReno | 15 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "2" and cells[6] == "18.0 ± 25.4"  # 16 and 20: sd 2.83, t 12.71
    assert (tmp_path / "out" / "fig5b.png").stat().st_size > 0
