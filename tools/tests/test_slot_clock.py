"""The slot clock against the wall clock (summary.json slots.realtime_fraction): a PHY that
fell behind real time is named in the summary, not left to make its MAC figures (per slot
time) and the flows' goodput (per second) disagree silently. Crafted run folders; no root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import BASE, cfg_of
from oppsched.experiments import testbed
from oppsched.run.runner import text_summary

T0 = 5_000_000_000  # t0_mono_ns of the crafted runs
SLOT_NS = 3_000_000


def _run(tmp_path: Path, slots_reached_s: float) -> dict:
    """A 20 s flow whose last flow ends at 20 s; the apd's slot trace reaches slots scheduled
    up to slots_reached_s after t0 (every slot carries a 1000-byte TB, ACKed)."""
    cfg = cfg_of(BASE.replace("duration_s: 4", "duration_s: 20"))
    cfg.update(experiment="t", variant="")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "run.json").write_text(json.dumps({"status": "done", "t0_mono_ns": T0, "flows": [{
        "id": "f1", "port": 5201, "start_s": 0.0, "seconds": 20, "nbytes": None,
        "started_at_s": 0.0, "ended_at_s": 20.0, "exit_code": 0, "dst_addr": "10.2.0.1",
        "extra": {}}]}))
    (tmp_path / "flow.f1.sender.json").write_text(json.dumps({"end": {
        "sum_sent": {"bytes": 2_000_000}, "streams": [],
        "sum_received": {"bytes": 2_000_000, "seconds": 20.0, "bits_per_second": 800e3}}}))
    (tmp_path / "flow.f1.receiver.json").write_text("")
    (tmp_path / "flow.f1.socket.csv").write_text(
        "t_s,event,peer_port,bytes_received,bytes_sent\n,closed,40002,2000000,0\n")
    n = int(slots_reached_s * 1e9 / SLOT_NS)
    rows = "".join(f"{k},{T0 + k * SLOT_NS},0,5,1000,0,0,1,0,ack,0\n" for k in range(n))
    (tmp_path / "slots.csv").write_text(
        "slot,t_ns,user,mcs,tb_bytes,harq_pid,rv,ndi,retx,outcome,late\n" + rows)
    return testbed.analyze(tmp_path)


def test_a_slot_clock_that_kept_real_time_gives_a_fraction_of_one_and_no_warning(tmp_path):
    s = _run(tmp_path, 20.0)
    sl = s["slots"]
    assert sl["wall_s"] == pytest.approx(20.0)
    assert sl["realtime_fraction"] == pytest.approx(1.0, abs=0.001)
    assert sl["behind_s"] == pytest.approx(0.0, abs=0.01)
    assert not [w for w in s["warnings"] if w.startswith("slots:")]
    assert "WARNING: the slot clock" not in text_summary([("x", s, tmp_path)])


def test_a_slot_clock_that_fell_behind_is_named_with_how_far_in_the_summary(tmp_path):
    # what the default experiment's 5-Msps PHY did beside the rest of `make test`
    s = _run(tmp_path, 14.0)
    sl = s["slots"]
    assert sl["realtime_fraction"] == pytest.approx(0.70, abs=0.001)
    assert sl["behind_s"] == pytest.approx(6.0, abs=0.01)
    (w,) = [w for w in s["warnings"] if w.startswith("slots:")]
    assert "70 % of real time" in w and "6.0 s behind" in w
    assert "WARNING: the slot clock kept 70 % of real time (6.0 s behind" in \
        text_summary([("x", s, tmp_path)])
