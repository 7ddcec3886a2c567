"""`oppsched bench capacity`: the experiment of one point, the thread -> component names and
the table (the runs themselves are real time and belong to `make bench`, not the tests)."""

from __future__ import annotations

import os

import pytest

from oppsched.commands import bench_capacity as bench
from helpers import write_yaml

try:
    from gnuradio import oppsched as _phy  # noqa: F401

    HAVE_GR = True
except ImportError:
    HAVE_GR = False


@pytest.mark.skipif(not HAVE_GR and not os.environ.get("CI"), reason="gnuradio.oppsched")
def test_a_capacity_point_is_a_valid_sample_phy_experiment_with_one_bulk_flow_per_client(
        tmp_path):
    from oppsched.run.runner import load_experiment

    e = bench.capacity_experiment(5e6, 4, 20.0)
    _, _, cfg = load_experiment(write_yaml(tmp_path / "e.yaml", e))
    assert cfg["phy"]["mode"] == "sample" and cfg["phy"]["sample"]["sample_rate"] == 5e6
    assert [f["device"] for f in cfg["flows"]] == ["R1", "R2", "R3", "R4"]
    assert len({f["server"] for f in cfg["flows"]}) == 4
    # queues of two bandwidth-delay products of the 14 Mb/s link (70 ms): backlogged
    assert cfg["queue"]["limit_bytes"] > 2 * 14e6 * 0.07 / 8 * 0.99
    # as a lab runs them: the apd and the clients at SCHED_FIFO 20, the PHY at 30
    assert (cfg["topology"]["apd_rt_priority"], cfg["topology"]["client_rt_priority"]) == (20, 20)
    assert cfg["extra"]["phy"]["timing"]["rt_priority"] == 30
    plain = bench.capacity_experiment(5e6, 1, 20.0, rt_priority=0)
    assert "topology" not in plain and "extra" not in plain


def test_threads_are_grouped_by_block_without_the_block_id():
    assert bench.component_of("slot_rx12") == "slot_rx"
    assert bench.component_of("channel_emulato") == "channel_emulato"
    assert bench.component_of("python3") == "python"
    assert bench.component_of("ZMQbg/IO/0") == "ZMQbg/IO/0"


def test_thread_cpu_reads_this_process():
    cpu = bench.thread_cpu(os.getpid())
    assert os.getpid() in cpu  # the main thread's tid is the pid
    assert all(isinstance(n, str) and c >= 0 for n, c in cpu.values())


def test_the_table_gives_the_largest_n_that_held_per_rate():
    def row(rate, n, late, overruns=0):
        return {"sample_rate": rate, "clients": n, "late_slots": late, "overruns": overruns,
                "slots": 1000, "ok": late == 0, "strict": late == 0 and overruns == 0,
                "error": None,
                "phy_cpu_cores": {"slot_rx": 0.5}, "phy_cpu_total_cores": 0.5,
                "goodput_bps": 1e6, "mac_bps": 1.1e6, "goodput_per_mac": 0.91,
                "load_average_1m_start": 1.0, "load_average_1m_end": 1.0}
    rows = [row(1e6, 1, 0), row(1e6, 2, 0), row(1e6, 4, 3), row(5e6, 1, 0, overruns=2),
            row(5e6, 4, 0, overruns=5)]
    csv, md = bench.capacity_table(rows, [1e6, 5e6], 20.0)
    # 0 late slots (the grants all in time) and, strictly, no slot built late either
    assert csv.splitlines()[1:] == ["1e+06,2,2,20", "5e+06,4,0,20"]
    assert "| 1 Msps | 2 | 2 |" in md and "| 5 Msps | 4 | 0 |" in md
    assert "| 1 Msps | 4 | 3 / 0 / 1000 |" in md


@pytest.mark.parametrize("keep_going, expect", [(False, [1]), (True, [1, 2, 4])])
def test_the_client_counts_stop_at_the_first_late_slot_unless_told_to_keep_going(
        tmp_path, monkeypatch, keep_going, expect):
    ran = []

    def point(rate, n, duration, out, profile, snr_db, rt_priority):
        ran.append(n)
        return {"sample_rate": rate, "clients": n, "late_slots": 5, "overruns": 0,
                "slots": 1000, "ok": False, "error": None, "phy_cpu_cores": {"slot_rx": 0.5},
                "phy_cpu_total_cores": 0.5, "goodput_bps": 1e6, "mac_bps": 1.1e6,
                "goodput_per_mac": 0.91, "load_average_1m_start": 1.0,
                "load_average_1m_end": 1.0}

    monkeypatch.setattr(bench, "capacity_point", point)
    assert bench.run_capacity_bench(str(tmp_path), [5e6], [4, 1, 2], 1.0,
                                    keep_going=keep_going) == 0
    assert ran == expect
    assert (tmp_path / "capacity.csv").read_text().splitlines()[1] == "5e+06,0,0,1"
