"""The abstract PHY (python -m oppsched.phy.abstract): configuration, slot clock contract,
rx_indications, error models, chase combining, late and malformed grants, reproducibility.

No root: the endpoints are ipc:// sockets in the test's tmp dir. Process tests run the real
command against a fake AP (PULL phy_requests / PUSH phy_grants, bound here) and fake clients
(PULL rx_<id>); model tests drive PhyCore directly, slot by slot, without a clock. No test
asserts on timing precision: slots are short (a few ms), runs a few hundred slots, and the
only timing relations checked are exact (air-time arithmetic, the request schedule under a
fake clock) or orderings that hold whatever the machine's load.

Statistical bounds (seeded, so deterministic; the bound is what a correct model meets with
overwhelming probability for any seed): a measured failure count over N Bernoulli slots with
probabilities p_i lies within 4 sigma = 4 sqrt(sum p_i (1 - p_i)) of sum p_i.
"""

from __future__ import annotations

import json
import math
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from oppsched import mac
from oppsched.config import ConfigError
from oppsched.phy import abstract as phy
from oppsched.phy import models
from oppsched.phy import common
from oppsched.phy.realtime import Histogram, PhyProcess
from helpers import FakeNetwork, decode_rx, write_yaml

EVDO = mac.mcs_table.evdo()
SLOT_S = 4e-3  # short slots for the process tests; timing precision is never asserted


# ----------------------------------------------------------------------------------------
# Helpers


def base_config(tmp_path: Path, users=None, **top) -> dict:
    users = users or [
        {"id": 0, "name": "u0", "channel": {"model": "awgn", "mean_snr_db": 40.0}},
        {"id": 1, "name": "u1", "channel": {"model": "awgn", "mean_snr_db": -40.0}},
    ]
    cfg = {
        "slot_s": SLOT_S,
        "lead_slots": 3,
        "seed": 5,
        "users": users,
        "error_model": "threshold",
        "mcs_table": "evdo",
        "run_dir": str(tmp_path),
        "timing": {"startup_wait_s": 10.0},
    }
    cfg.update(top)
    return cfg


def core_of(tmp_path: Path, cfg: dict) -> phy.PhyCore:
    c = phy.load_config(write_yaml(tmp_path / "phy.yaml", cfg))
    return phy.PhyCore(c, models.build_models(c))


def grant(slot, user=0, mcs=0, pid=0, ndi=0, rv=0, tb=b"\x01\x02\x03\x04", seq=0) -> bytes:
    return mac.wire.encode(
        "slot_grant",
        seq,
        {"slot": slot, "user": user, "mcs": mcs, "harq_pid": pid, "ndi": ndi, "rv": rv, "tb": tb},
    )


def empty_grant(slot, seq=0) -> bytes:
    return mac.wire.encode("slot_grant", seq, {"slot": slot, "empty": True})


def model_slot(core: phy.PhyCore, n: int, frame: bytes | None) -> list[dict]:
    """One slot through PhyCore without a clock: request, grant (if any), air."""
    core.request_frame(n)
    if frame is not None:
        core.on_grant_frame(frame)
    return [decode_rx(f) for f in core.run_slot(n).frames]


def run_phy(tmp_path: Path, cfg: dict, timeout=60.0, args=()) -> tuple[int, dict, str]:
    path = write_yaml(tmp_path / "phy.yaml", cfg)
    p = subprocess.run(
        [sys.executable, "-m", "oppsched.phy.abstract", "--config", str(path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    stats_path = tmp_path / "phy.stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    return p.returncode, stats, p.stderr


def round_robin(n_users, tb_len=8, mcs=0):
    """An AP granting slot n to user n % n_users with a TB of tb_len bytes (new data each)."""

    def answer(slot, _air):
        u = slot % n_users
        tb = bytes([slot & 0xFF]) * tb_len
        return [grant(slot, user=u, mcs=mcs, pid=slot % 4, ndi=(slot // 4) & 1, tb=tb, seq=slot)]

    return answer


# ----------------------------------------------------------------------------------------
# Configuration


BAD_CONFIGS = [
    ({"slot_s": -0.001}, "slot_s: -0.001"),
    ({"slot_s": "fast"}, "slot_s: 'fast' is not a number"),
    ({"lead_slots": 0}, "lead_slots: 0 is below the minimum"),
    ({"error_model": "oracle"}, "error_model: 'oracle' is not one of"),
    ({"lead_slot": 3}, "lead_slot: unknown key"),
    ({"mcs_table": "/nonexistent/table.csv"}, "mcs_table: '/nonexistent/table.csv' cannot be read"),
    ({"error_model": "curves"}, "link_curves: required with error_model 'curves'"),
    ({"measurement": {"noise_db": -1.0}}, "measurement.noise_db: -1.0 is below the minimum"),
    (
        {"users": [{"id": 0, "name": "a", "channel": {"model": "jakes"}}]},
        "users[0].channel.doppler_hz: required for model 'jakes'",
    ),
    (
        {"users": [{"id": 0, "name": "a", "channel": {"model": "jakes", "doppler_hz": -60}}]},
        "users[0].channel.doppler_hz: -60.0 is below the minimum",
    ),
    (
        {
            "users": [
                {"id": 0, "name": "a", "channel": {"model": "awgn", "mean_snr_db": float("nan")}}
            ]
        },
        "users[0].channel.mean_snr_db: nan is not a finite number",
    ),
    (
        {"users": [{"id": 0, "name": "a", "channel": {"model": "rician", "doppler_hz": 6}}]},
        "users[0].channel.model: 'rician' is not one of",
    ),
    (
        {
            "users": [
                {"id": 0, "name": "a", "channel": {"model": "awgn"}},
                {"id": 0, "name": "b", "channel": {"model": "awgn"}},
            ]
        },
        "users[0].id: 0 is not unique",
    ),
    (
        {
            "users": [
                {"id": 0, "name": "a", "channel": {"model": "awgn"}},
                {"id": 1, "name": "a", "channel": {"model": "awgn"}},
            ]
        },
        "users[1].name: 'a' is used twice",
    ),
    ({"users": [{"id": 0, "name": "a/b", "channel": {"model": "awgn"}}]}, "users[0].name: 'a/b'"),
    (
        {"users": [{"id": 0, "name": "a", "channel": {"model": "trace"}}]},
        "users[0].channel.trace: required for model 'trace'",
    ),
    ({"users": []}, "users: needs at least 1 entries"),
    (
        {"endpoints": {"phy_grants": "localhost:5555"}},
        "endpoints.phy_grants: 'localhost:5555' is not a ZeroMQ endpoint",
    ),
    ({"timing": {"rt_priority": 100}}, "timing.rt_priority: 100 is above the maximum 99"),
    ({"shannon": {"levels": 0}}, "shannon.levels: 0 is below the minimum 1"),
]


@pytest.mark.parametrize("override,message", BAD_CONFIGS, ids=[m for _, m in BAD_CONFIGS])
def test_config_error_names_field_and_value(tmp_path, override, message):
    cfg = base_config(tmp_path)
    cfg.update(override)
    with pytest.raises(ConfigError) as e:
        c = phy.load_config(write_yaml(tmp_path / "phy.yaml", cfg))
        models.build_models(c)
    assert message in str(e.value)


def test_bad_csv_rows_are_named_by_file_and_line(tmp_path):
    curves = tmp_path / "curves.csv"
    curves.write_text("mcs,snr_db,bler\n0,0,0.5\n0,3,1.5\n")
    cfg = base_config(tmp_path, error_model="curves", link_curves=str(curves))
    with pytest.raises(
        ConfigError, match=r"link_curves: .*curves.csv' line 3: bler 1.5 not in \[0, 1\]"
    ):
        models.build_models(phy.load_config(write_yaml(tmp_path / "phy.yaml", cfg)))
    curves.write_text("mcs,snr_db,bler\n" + "".join(f"{m},0,0.1\n" for m in range(9)))
    with pytest.raises(ConfigError, match="no rows for mcs 9"):
        models.build_models(phy.load_config(write_yaml(tmp_path / "phy.yaml", cfg)))
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,snr_db\n0,1\n0,2\n")
    users = [{"id": 0, "name": "a", "channel": {"model": "trace", "trace": "t.csv"}}]
    with pytest.raises(
        ConfigError, match=r"users\[0\].channel.trace: .*line 3: time_s 0.0 is not after"
    ):
        models.build_models(
            phy.load_config(write_yaml(tmp_path / "phy.yaml", base_config(tmp_path, users=users)))
        )


def test_duplicate_yaml_key_is_an_error(tmp_path):
    p = tmp_path / "phy.yaml"
    p.write_text("slot_s: 0.003\nslot_s: 0.002\nmcs_table: evdo\nusers: []\n")
    with pytest.raises(ConfigError, match="slot_s: duplicate key"):
        phy.load_config(p)


def test_check_exits_0_on_good_and_2_naming_the_field_on_bad_config(tmp_path):
    cfg = base_config(tmp_path)
    rc, _, err = run_phy(tmp_path, cfg, args=["--check"])
    assert rc == 0, err
    cfg["users"][1]["channel"]["mean_snr_db"] = 500
    rc, stats, err = run_phy(tmp_path, cfg, args=["--check"])
    assert rc == 2
    assert "users[1].channel.mean_snr_db: 500.0 is above the maximum 100.0" in err
    assert not (tmp_path / "zmq").exists()  # nothing created before validation
    rc, _, err = run_phy(tmp_path, base_config(tmp_path), args=["--set", "lead_slots=-2"])
    assert rc == 2 and "lead_slots: -2 is below the minimum 1" in err


def test_defaults_resolve_endpoints_and_stats_into_run_dir(tmp_path):
    c = phy.load_config(write_yaml(tmp_path / "phy.yaml", base_config(tmp_path)))
    assert c["endpoints"]["phy_requests"] == f"ipc://{tmp_path}/zmq/phy_requests"
    assert c["users"][1]["rx"] == f"ipc://{tmp_path}/zmq/rx_1"
    assert c["traces"]["stats"] == str(tmp_path / "phy.stats.json")
    assert c["traces"]["slots"] == ""
    assert c["chase_combining"] is True and c["measurement"]["noise_db"] == 0.0
    # null means absent for the channel's doppler_hz (unused by awgn/trace) and seed (derived)
    cfg = base_config(tmp_path)
    cfg["users"][0]["channel"].update(doppler_hz=None, seed=None)
    c = phy.load_config(write_yaml(tmp_path / "phy.yaml", cfg))
    assert c["users"][0]["channel"]["seed"] is None
    assert models.channel_seed(c, c["users"][0]) != models.channel_seed(c, c["users"][1])


def test_read_config_applies_overrides_against_the_schema_and_returns_the_files_folder(tmp_path):
    sub = tmp_path / "conf"
    sub.mkdir()
    path = write_yaml(sub / "phy.yaml", base_config(tmp_path, link_curves="curves.csv"))
    cfg, base = common.read_config(
        path, ["lead_slots=7", "users[1].channel.mean_snr_db=3"], common.SCHEMA
    )
    assert base == sub.resolve()
    assert cfg["lead_slots"] == 7 and cfg["users"][1]["channel"]["mean_snr_db"] == 3.0
    assert cfg["zmq"]["hwm"] == 1000  # defaults filled in
    assert cfg["link_curves"] == "curves.csv"  # paths stay as written until resolve()
    with pytest.raises(ConfigError, match="lead_slots: 0 is below the minimum 1"):
        common.read_config(path, ["lead_slots=0"], common.SCHEMA)


def test_a_file_that_is_not_a_mapping_is_an_error_at_the_top(tmp_path):
    p = tmp_path / "phy.yaml"
    p.write_text("- slot_s\n- users\n")
    with pytest.raises(ConfigError, match=r"<top>: \['slot_s', 'users'\] is not a mapping"):
        phy.load_config(p)


def test_every_phy_process_takes_the_same_command_line():
    args = common.parse_args(
        ["--config", "phy.yaml", "--set", "seed=2", "--set", "lead_slots=4", "--check"],
        "prog",
        "description",
        "config help",
        "check help",
        "phy-test",
    )
    assert args.config == "phy.yaml" and args.check
    assert args.set == ["seed=2", "lead_slots=4"] and args.log_level == "info"
    args = common.parse_args(
        ["--config", "x.yaml", "--log-level", "debug"], "prog", "d", "c", "k", "phy-test"
    )
    assert not args.check and args.set == [] and args.log_level == "debug"
    with pytest.raises(SystemExit):
        common.parse_args([], "prog", "d", "c", "k", "phy-test")  # --config is required


def test_an_empty_slot_is_addressed_to_the_wires_nobody(tmp_path):
    core = core_of(tmp_path, base_config(tmp_path))
    rx0, rx1 = model_slot(core, 0, empty_grant(0))
    assert rx0["user"] == rx1["user"] == mac.wire.USER_NOBODY
    assert not rx0["addressed"] and not rx1["addressed"]


def test_shannon_table_quantises_eq18():
    t = common.shannon_table(4.3e6, 10e6, 32)
    assert len(t) == 32
    assert t.rates_bps[-1] == pytest.approx(10e6)
    # eq. 18 without margin: W0 log2(1 + N) = rate at the threshold
    for thr, r in zip(t.thresholds_db, t.rates_bps):
        assert 4.3e6 * math.log2(1 + 10 ** (thr / 10)) == pytest.approx(r, rel=1e-9)
    assert t.thresholds_db[0] == pytest.approx(-12.86, abs=0.01)
    assert t.thresholds_db[-1] == pytest.approx(6.03, abs=0.01)


# ----------------------------------------------------------------------------------------
# Model pieces


def test_link_curves_interpolate_in_log_bler_and_clamp_at_the_ends(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("# measured\nmcs,snr_db,bler,tb_bytes\n0,0,0.5,100\n0,10,0.005,100\n0,20,0,100\n")
    lc = models.LinkCurves.from_csv(str(p), 1)
    assert lc.bler(0, -5) == 0.5 and lc.bler(0, 0) == 0.5
    assert lc.bler(0, 5) == pytest.approx(0.05)  # geometric mean: log-linear
    assert lc.bler(0, 15) == pytest.approx(0.0025)  # next to a zero: linear in BLER
    assert lc.bler(0, 25) == 0.0


def test_snr_trace_interpolates_holds_and_loops(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("time_s,snr_db\n0,0\n1,10\n2,0\n")
    loop = models.SnrTrace.from_csv(str(p), True, "x")
    hold = models.SnrTrace.from_csv(str(p), False, "x")
    assert loop.snr_db(0.5) == pytest.approx(5.0)
    assert loop.snr_db(2.5) == pytest.approx(5.0)  # period 2 s
    assert hold.snr_db(2.5) == 0.0
    assert loop.snr_linear(1.0) == pytest.approx(10.0)


def test_cqi_is_one_plus_the_highest_mcs_the_snr_meets(tmp_path):
    core = core_of(tmp_path, base_config(tmp_path))
    assert core.cqi_of(-20.0) == 0
    assert core.cqi_of(-12.5) == 1
    assert core.cqi_of(3.0) == 8
    assert core.cqi_of(40.0) == len(EVDO)


def test_threshold_model_decides_at_slot_end(tmp_path):
    # A trace that falls from 0 dB to -20 dB over one slot: at the slot start the SNR meets
    # EV-DO MCS 0 (-12.5 dB); at the end it does not, so the TB fails (Andrew & Hanly, CLAMP,
    # §V-B).
    trace = tmp_path / "fall.csv"
    trace.write_text(f"time_s,snr_db\n0,0\n{SLOT_S},-20\n")
    users = [
        {
            "id": 0,
            "name": "a",
            "channel": {"model": "trace", "trace": str(trace), "trace_loop": False},
        }
    ]
    core = core_of(tmp_path, base_config(tmp_path, users=users))
    rx = model_slot(core, 0, grant(0))
    assert rx[0]["snr_db"] == pytest.approx(0.0, abs=1e-6) and rx[0]["cqi"] > 0
    assert rx[0]["addressed"] and not rx[0]["crc_ok"] and rx[0]["tb"] == b""
    # The rule of Andrew & Hanly, CLAMP, §V-B literally: 2457.6 kb/s (MCS 9) fits
    # W0 log2(1 + N) at 0 dB (4.3 Mb/s), not at -20 dB (62 kb/s).
    core = core_of(tmp_path, base_config(tmp_path, users=users, error_model="end_of_slot"))
    full = bytes(core.bytes_per_slot[9])  # a TB that fills MCS 9: B = its 4096 bits
    assert not model_slot(core, 0, grant(0, mcs=9, tb=full))[0]["crc_ok"]
    # Rising from -20 dB to 0 dB: what counts is the end, so the TB gets through.
    trace.write_text(f"time_s,snr_db\n0,-20\n{SLOT_S},0\n")
    for model in ("threshold", "end_of_slot"):
        core = core_of(tmp_path, base_config(tmp_path, users=users, error_model=model))
        rx = model_slot(core, 0, grant(0))[0]
        assert rx["cqi"] == 0 and rx["crc_ok"] and rx["tb"] == b"\x01\x02\x03\x04"


def test_end_of_slot_model_is_eq18_error_rule(tmp_path):
    # mcs_table shannon, error_model end_of_slot: MCS k needs exactly its threshold at slot end.
    t = common.shannon_table(4.3e6, 10e6, 32)
    for snr, mcs, ok in [
        (t.thresholds_db[10] + 0.01, 10, True),
        (t.thresholds_db[10] - 0.01, 10, False),
    ]:
        users = [{"id": 0, "name": "a", "channel": {"model": "awgn", "mean_snr_db": snr}}]
        core = core_of(
            tmp_path,
            base_config(tmp_path, users=users, mcs_table="shannon", error_model="end_of_slot",
                        slot_s=3e-3),
        )
        full = bytes(core.bytes_per_slot[mcs])
        assert model_slot(core, 0, grant(0, mcs=mcs, tb=full))[0]["crc_ok"] is ok


def test_end_of_slot_model_judges_the_bits_the_tb_carries_not_its_mcs(tmp_path):
    # Eq. 18's B(s) is the information bits sent. Just below MCS 10's threshold a TB that
    # fills MCS 10 fails, but one 1 % smaller gets through at the same MCS: the apd's
    # link_adaptation.mode paper sends unquantised TBs that way.
    t = common.shannon_table(4.3e6, 10e6, 32)
    users = [{"id": 0, "name": "a",
              "channel": {"model": "awgn", "mean_snr_db": t.thresholds_db[10] - 0.01}}]
    core = core_of(tmp_path, base_config(tmp_path, users=users, mcs_table="shannon",
                                         error_model="end_of_slot", slot_s=3e-3))
    n = core.bytes_per_slot[10]
    assert not model_slot(core, 0, grant(0, mcs=10, tb=bytes(n)))[0]["crc_ok"]
    assert model_slot(core, 1, grant(1, mcs=10, tb=bytes(n * 99 // 100)))[0]["crc_ok"]


def test_cqi_ahead_slots_reports_the_snr_of_a_later_slot_start(tmp_path):
    # A ramp of 1 dB per slot: with cqi_ahead_slots 3 the rx_indication of slot n carries
    # the SNR at the start of slot n + 3; without, that of slot n.
    trace = tmp_path / "ramp.csv"
    trace.write_text(f"time_s,snr_db\n0,0\n{100 * SLOT_S},100\n")
    users = [{"id": 0, "name": "a",
              "channel": {"model": "trace", "trace": str(trace), "trace_loop": False}}]
    now = core_of(tmp_path, base_config(tmp_path, users=users))
    ahead = core_of(tmp_path, base_config(tmp_path, users=users, cqi_ahead_slots=3))
    for n in (0, 5, 20):
        assert model_slot(now, n, None)[0]["snr_db"] == pytest.approx(n, abs=1e-6)
        assert model_slot(ahead, n, None)[0]["snr_db"] == pytest.approx(n + 3, abs=1e-6)


def test_chase_combining_raises_success_after_a_nacked_first_transmission(tmp_path):
    # -14 dB is below EV-DO MCS 0 (-12.5 dB): alone it fails; two copies combined give
    # 10 log10(2 * 10^-1.4) = -11.0 dB, which meets it.
    users = [{"id": 0, "name": "a", "channel": {"model": "awgn", "mean_snr_db": -14.0}}]
    core = core_of(tmp_path, base_config(tmp_path, users=users))
    first = model_slot(core, 0, grant(0, pid=2, ndi=1))[0]
    assert first["addressed"] and not first["crc_ok"] and first["combined"] == 1
    retx = model_slot(core, 1, grant(1, pid=2, ndi=1, rv=2))[0]
    assert retx["crc_ok"] and retx["combined"] == 2 and retx["tb"] == b"\x01\x02\x03\x04"
    # The NDI toggles: a new TB starts from scratch and fails again.
    new = model_slot(core, 2, grant(2, pid=2, ndi=0))[0]
    assert not new["crc_ok"] and new["combined"] == 1
    # Other processes are independent.
    assert model_slot(core, 3, grant(3, pid=3, ndi=0))[0]["combined"] == 1

    off = core_of(tmp_path, base_config(tmp_path, users=users, chase_combining=False))
    model_slot(off, 0, grant(0, pid=2, ndi=1))
    assert not model_slot(off, 1, grant(1, pid=2, ndi=1))[0]["crc_ok"]


def test_chase_combining_with_curves_lowers_the_failure_ratio(tmp_path):
    curves = tmp_path / "c.csv"
    curves.write_text(
        "mcs,snr_db,bler\n" + "".join(f"{m},0,0.9\n{m},6,0.1\n" for m in range(len(EVDO)))
    )
    users = [{"id": 0, "name": "a", "channel": {"model": "awgn", "mean_snr_db": 0.0}}]
    core = core_of(
        tmp_path, base_config(tmp_path, users=users, error_model="curves", link_curves=str(curves))
    )
    firsts, retxs = [], []
    for i in range(600):  # pairs: first transmission (new NDI), then one retransmission
        ndi = i & 1
        firsts.append(model_slot(core, 2 * i, grant(2 * i, pid=0, ndi=ndi))[0]["crc_ok"])
        retxs.append(model_slot(core, 2 * i + 1, grant(2 * i + 1, pid=0, ndi=ndi))[0]["crc_ok"])
    # first: BLER(0 dB) = 0.9; combined 3.01 dB: BLER = 0.9 (0.1/0.9)^(3.01/6) = 0.300
    p1, p2 = 0.9, 0.9 * (0.1 / 0.9) ** (10 * math.log10(2) / 6)
    for oks, p in ((firsts, p1), (retxs, p2)):
        fails = len(oks) - sum(oks)
        assert abs(fails - p * len(oks)) <= 4 * math.sqrt(len(oks) * p * (1 - p))


def test_curves_failure_ratio_matches_the_curve_over_fading_slots(tmp_path):
    # Jakes fading (60 Hz, mean 3 dB): the SNR differs every slot; the failures must match
    # the sum of the curve's BLER at each slot's SNR (the curve, not a constant).
    curves = tmp_path / "c.csv"
    curves.write_text(
        "mcs,snr_db,bler\n"
        + "".join(f"{m},-5,1\n{m},0,0.6\n{m},5,0.1\n{m},10,0.001\n" for m in range(len(EVDO)))
    )
    users = [
        {
            "id": 0,
            "name": "a",
            "channel": {"model": "jakes", "doppler_hz": 60.0, "mean_snr_db": 3.0},
        }
    ]
    core = core_of(
        tmp_path,
        base_config(
            tmp_path, users=users, error_model="curves", link_curves=str(curves), slot_s=1.667e-3
        ),
    )
    n, fails, expect, var = 3000, 0, 0.0, 0.0
    for s in range(n):
        rx = model_slot(core, s, grant(s, pid=s % 8, ndi=(s // 8) & 1))[0]
        p = core.models.curves.bler(0, rx["snr_db"])
        expect += p
        var += p * (1 - p)
        fails += not rx["crc_ok"]
    assert 0.1 * n < expect < 0.9 * n  # the test spans the curve, not one end of it
    assert abs(fails - expect) <= 4 * math.sqrt(var)


def test_same_seed_gives_the_same_snr_sequence_and_another_seed_does_not(tmp_path):
    users = [
        {"id": i, "name": f"u{i}", "channel": {"model": m, "doppler_hz": 60.0, "mean_snr_db": 6.0}}
        for i, m in enumerate(["jakes", "sum_of_sinusoids"])
    ]

    def snrs(seed, noise=0.0):
        core = core_of(
            tmp_path, base_config(tmp_path, users=users, seed=seed, measurement={"noise_db": noise})
        )
        return [[r["snr_db"] for r in model_slot(core, n, None)] for n in range(300)]

    a, b = snrs(11), snrs(11)
    assert a == b
    assert np.std(np.array(a)[:, 0]) > 1.0  # it fades
    assert snrs(12) != a
    assert snrs(11, noise=1.0) == snrs(11, noise=1.0) != a
    # An explicit per-user channel seed fixes that user's channel whatever the run seed.
    users[0]["channel"]["seed"] = 99
    x, y = np.array(snrs(1)), np.array(snrs(2))
    assert np.array_equal(x[:, 0], y[:, 0]) and not np.array_equal(x[:, 1], y[:, 1])


def test_malformed_grants_are_counted_and_the_slot_goes_out_empty(tmp_path):
    core = core_of(tmp_path, base_config(tmp_path))
    bad = [
        b"garbage",
        grant(0)[:-1],
        grant(0)[:-4] + b"\0\0\0\0",
        mac.wire.encode("slot_request", 0, {"slot": 0}),
        grant(0, user=7),
        grant(0, mcs=200),
        grant(0, mcs=0, tb=bytes(20)),
    ]  # EV-DO MCS 0 carries 19 bytes in 4 ms
    core.request_frame(0)
    for f in bad:
        core.on_grant_frame(f)
    assert core.counters["grants_malformed"] == 7
    assert core.malformed == {
        "decode": 3,
        "type": 1,
        "user": 1,
        "mcs": 1,
        "no_tb": 0,
        "oversized": 1,
        "uplink": 0,
    }
    # a malformed grant still answers the request: slot 0 is empty, not late
    rx = model_slot(core, 0, None)
    assert all(not r["addressed"] and r["user"] == phy.NO_USER for r in rx)
    assert core.counters["late"] == 0 and core.counters["empty"] == 1
    rx = model_slot(core, 1, grant(1, user=1, mcs=0, tb=bytes(19)))
    assert rx[1]["addressed"]


def test_grant_bookkeeping_late_duplicate_unrequested(tmp_path):
    core = core_of(tmp_path, base_config(tmp_path))
    model_slot(core, 0, None)  # no grant: late, empty
    assert core.counters["late"] == 1 and core.counters["empty"] == 1
    core.on_grant_frame(grant(0))  # after the slot
    assert core.counters["grants_late"] == 1
    core.request_frame(1)
    core.on_grant_frame(grant(1, user=0))
    core.on_grant_frame(grant(1, user=1))
    core.on_grant_frame(grant(5))
    assert core.counters["grants_duplicate"] == 1 and core.counters["grants_unrequested"] == 1
    rx = [decode_rx(f) for f in core.run_slot(1).frames]
    assert rx[0]["addressed"] and not rx[1]["addressed"]  # the first grant for slot 1 stands


def test_request_schedule_under_a_fake_clock(tmp_path):
    """slot_request(n) leaves exactly lead_slots slots before slot n's air time, carrying
    that air time; rx_indications for slot n leave at its end. A fake clock, so exact."""
    cfg = phy.load_config(write_yaml(tmp_path / "phy.yaml",
                                     base_config(tmp_path, lead_slots=4, max_slots=20)))
    core = phy.PhyCore(cfg, models.build_models(cfg))
    clock = {"now": 1_000_000_000}
    sent = []  # (now, kind, slot)

    class Recording(PhyProcess):
        def _sleep_until(self, deadline):
            clock["now"] = max(clock["now"], deadline) + 12_345  # wakes a little late

        def _push(self, sock, frame):
            _, kind, d = mac.wire.decode(frame)
            sent.append((clock["now"], kind, d))
            return True

        def _drain_grants(self):
            pass

    proc = Recording(cfg, core, now_ns=lambda: clock["now"])
    proc.req, proc.rx = "requests", ["rx_0", "rx_1"]  # _push is faked: no sockets
    proc.run()
    slot_ns, lead = core.slot_ns, 4
    reqs = [(t, d) for t, k, d in sent if k == "slot_request"]
    assert [d["slot"] for _, d in reqs] == list(range(20))
    for t, d in reqs:
        assert d["air_time_ns"] == core.t0_ns + d["slot"] * slot_ns
        assert t - 12_345 == d["air_time_ns"] - lead * slot_ns
    rxs = [(t, d) for t, k, d in sent if k == "rx_indication"]
    assert len(rxs) == 2 * 20
    for t, d in rxs:
        assert t - 12_345 == core.t0_ns + (d["slot"] + 1) * slot_ns
    assert core.counters["late"] == 20  # nobody answered


# ----------------------------------------------------------------------------------------
# The process against a fake AP and fake clients


def test_requests_arrive_in_order_lead_slots_ahead_with_their_air_times(tmp_path):
    n = 80
    with FakeNetwork(tmp_path, 2, round_robin(2)) as net:
        rc, stats, err = run_phy(tmp_path, base_config(tmp_path, max_slots=n, lead_slots=4))
        net.settle()
    assert rc == 0, err
    seqs, slots, air, arrival = zip(*net.requests)
    assert list(slots) == list(range(n)) and list(seqs) == list(range(n))
    slot_ns = round(SLOT_S * 1e9)
    assert all(a - air[0] == s * slot_ns for s, a in zip(slots, air))
    # Sent lead_slots (16 ms) ahead: the typical request is in before its slot starts.
    assert statistics.median(a - t for a, t in zip(air, arrival)) > 0
    assert stats["requests_sent"] == n and stats["slots"] == n
    assert stats["config"]["t0_ns"] == air[0]


def test_every_client_gets_one_indication_per_slot_and_the_addressed_one_the_tb(tmp_path):
    n = 120
    users = [
        {"id": i, "name": f"u{i}", "channel": {"model": "awgn", "mean_snr_db": 30.0 - 20 * i}}
        for i in range(3)
    ]

    def answer(slot, _air):
        if slot % 5 == 4:
            return [empty_grant(slot, seq=slot)]
        return round_robin(3)(slot, _air)

    with FakeNetwork(tmp_path, 3, answer) as net:
        rc, stats, err = run_phy(tmp_path, base_config(tmp_path, users=users, max_slots=n))
        net.settle()
    assert rc == 0, err
    assert stats["late"] < n // 2  # a loaded machine may miss a few (they are skipped below)
    for i, inds in enumerate(net.indications):
        assert [d["slot"] for d in inds] == list(range(n))
        assert [d["seq"] for d in inds] == list(range(n))
        assert all(d["header_ok"] for d in inds)
        assert all(d["snr_db"] == pytest.approx(30.0 - 20 * i, abs=1e-4) for d in inds)
        assert all(d["cqi"] == EVDO.select(30.0 - 20 * i) + 1 for d in inds)
    for s in range(n):
        row = [net.indications[i][s] for i in range(3)]
        if s % 5 == 4:
            assert all(
                not d["addressed"] and d["user"] == phy.NO_USER and d["tb"] == b"" for d in row
            )
            continue
        if stats["late"] and all(d["user"] == phy.NO_USER for d in row):
            continue  # that slot's grant was late
        target = s % 3
        for i, d in enumerate(row):
            assert d["user"] == target and d["addressed"] == (i == target)
            if i != target:
                assert d["tb"] == b"" and not d["crc_ok"]
        assert row[target]["crc_ok"] and row[target]["tb"] == bytes([s & 0xFF]) * 8
    assert stats["tb_ok"] + stats["tb_failed"] + stats["empty"] == n
    assert stats["users"]["u0"]["rx_sent"] == n and stats["users"]["u0"]["rx_dropped"] == 0


def test_threshold_delivers_at_high_snr_and_loses_at_very_low_snr(tmp_path):
    # u0: a replayed constant 40 dB trace; u1: -40 dB. EV-DO MCS 0 needs -12.5 dB.
    trace = tmp_path / "high.csv"
    trace.write_text("time_s,snr_db\n0,40\n")
    users = [
        {"id": 0, "name": "hi", "channel": {"model": "trace", "trace": "high.csv"}},
        {"id": 1, "name": "lo", "channel": {"model": "awgn", "mean_snr_db": -40.0}},
    ]
    n = 60
    with FakeNetwork(tmp_path, 2, round_robin(2)) as net:
        rc, stats, err = run_phy(tmp_path, base_config(tmp_path, users=users, max_slots=n))
        net.settle()
    assert rc == 0, err
    hi = [d for d in net.indications[0] if d["addressed"]]
    lo = [d for d in net.indications[1] if d["addressed"]]
    assert len(hi) >= n // 2 - stats["late"] and len(lo) >= n // 2 - stats["late"]
    assert all(d["crc_ok"] and d["tb"] == bytes([d["slot"] & 0xFF]) * 8 for d in hi)
    assert all(not d["crc_ok"] and d["tb"] == b"" for d in lo)
    assert stats["users"]["hi"]["tb_ok"] == len(hi) and stats["users"]["lo"]["tb_failed"] == len(lo)


def test_curves_failure_ratio_through_the_process(tmp_path):
    # BLER(5 dB) = 10^((log10 0.9 + log10 0.01) / 2) = 0.0949 on a log-linear curve... use a
    # flatter one: 0.5 at 4 dB, 0.2 at 6 dB -> 0.316 at 5 dB.
    curves = tmp_path / "c.csv"
    curves.write_text(
        "mcs,snr_db,bler\n" + "".join(f"{m},4,0.5\n{m},6,0.2\n" for m in range(len(EVDO)))
    )
    users = [{"id": 0, "name": "a", "channel": {"model": "awgn", "mean_snr_db": 5.0}}]
    n = 400

    def answer(slot, _air):  # always a new TB for user 0 (NDI toggles): no combining
        return [grant(slot, user=0, pid=0, ndi=slot & 1, tb=b"x", seq=slot)]

    with FakeNetwork(tmp_path, 1, answer) as net:
        rc, stats, err = run_phy(
            tmp_path,
            base_config(
                tmp_path,
                users=users,
                max_slots=n,
                slot_s=2e-3,
                error_model="curves",
                link_curves="c.csv",
            ),
        )
        net.settle()
    assert rc == 0, err
    decided = stats["tb_ok"] + stats["tb_failed"]
    assert decided >= 0.5 * n  # late slots (a loaded machine) decide nothing
    p = math.sqrt(0.5 * 0.2)
    assert abs(stats["tb_failed"] - p * decided) <= 4 * math.sqrt(decided * p * (1 - p))
    addressed = [d for d in net.indications[0] if d["addressed"]]
    assert sum(not d["crc_ok"] for d in addressed) == stats["tb_failed"]


def test_late_grant_is_counted_and_not_transmitted(tmp_path):
    lead, late_slot = 3, 10
    held = []

    def answer(slot, _air):
        out = []
        if slot == late_slot:
            held.append(grant(late_slot, user=0, tb=b"LATE", seq=slot))
        else:
            out.append(grant(slot, user=0, pid=slot % 4, ndi=(slot // 4) & 1, tb=b"ok", seq=slot))
        # The request for late_slot + lead + 2 leaves at the start of slot late_slot + 2:
        # late_slot is on air by then, whatever the speed of either side.
        if slot == late_slot + lead + 2:
            out += held
        return out

    with FakeNetwork(tmp_path, 1, answer) as net:
        rc, stats, err = run_phy(
            tmp_path,
            base_config(
                tmp_path,
                max_slots=30,
                lead_slots=lead,
                users=[{"id": 0, "name": "a", "channel": {"model": "awgn", "mean_snr_db": 30.0}}],
            ),
        )
        net.settle()
    assert rc == 0, err
    assert stats["late"] >= 1 and stats["grants_late"] >= 1
    ind = net.indications[0][late_slot]
    assert ind["slot"] == late_slot and not ind["addressed"] and ind["user"] == phy.NO_USER
    assert all(d["tb"] != b"LATE" for d in net.indications[0])


def test_garbage_on_phy_grants_is_counted_and_the_process_lives(tmp_path):
    n = 40
    garbage_slots = {
        5: [b"\x00" * 3],
        6: [b"OPPS" + b"\xff" * 40],
        7: [grant(7, seq=7)[:-1]],
        8: [mac.wire.encode("cqi_report", 8, {"user": 0})],
        9: [grant(9, user=9, seq=9)],
        10: [mac.wire.encode("slot_grant", 10, {"slot": 10, "user": 0, "mcs": 0, "uplink": True,
                                                "tb": b"UPLINK"})],
    }

    def answer(slot, _air):
        if slot in garbage_slots:
            return garbage_slots[slot]
        return [grant(slot, user=0, tb=b"fine", seq=slot)]

    with FakeNetwork(tmp_path, 1, answer) as net:
        rc, stats, err = run_phy(
            tmp_path,
            base_config(
                tmp_path,
                max_slots=n,
                users=[{"id": 0, "name": "a", "channel": {"model": "awgn", "mean_snr_db": 30.0}}],
            ),
        )
        net.settle()
    assert rc == 0, err
    assert stats["grants_malformed"] == 6
    assert stats["grants_malformed_by"]["decode"] == 3 and stats["grants_malformed_by"]["type"] == 1
    assert stats["grants_malformed_by"]["user"] == 1
    assert stats["grants_malformed_by"]["uplink"] == 1  # not sent as a downlink TB
    assert all(d["tb"] != b"UPLINK" for d in net.indications[0])
    assert stats["slots"] == n
    assert [d["slot"] for d in net.indications[0]] == list(range(n))
    assert net.indications[0][n - 1]["tb"] == b"fine" or stats["late"] > 0


def test_process_snr_sequence_is_the_model_sequence(tmp_path):
    # The process evaluates the channel at slot-based times: its SNRs equal an offline
    # PhyCore's, slot for slot, whatever the wall clock did.
    users = [
        {
            "id": 0,
            "name": "a",
            "channel": {"model": "jakes", "doppler_hz": 60.0, "mean_snr_db": 6.0},
        }
    ]
    cfg = base_config(tmp_path, users=users, max_slots=50, seed=3)
    with FakeNetwork(tmp_path, 1, lambda s, a: [empty_grant(s, seq=s)]) as net:
        rc, _, err = run_phy(tmp_path, cfg)
        net.settle()
    assert rc == 0, err
    core = core_of(tmp_path, cfg)
    offline = [model_slot(core, s, None)[0]["snr_db"] for s in range(50)]
    assert [d["snr_db"] for d in net.indications[0]] == offline


def test_sigusr1_writes_stats_and_sigterm_stops_cleanly_with_a_slot_trace(tmp_path):
    cfg = base_config(tmp_path, traces={"slots": "phy_slots.csv"})
    path = write_yaml(tmp_path / "phy.yaml", cfg)
    stats_path = tmp_path / "phy.stats.json"
    with FakeNetwork(tmp_path, 2, round_robin(2)) as net:
        p = subprocess.Popen(
            [sys.executable, "-m", "oppsched.phy.abstract", "--config", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 20
            while len(net.requests) < 30 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(net.requests) >= 30
            p.send_signal(signal.SIGUSR1)
            while not stats_path.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            first = json.loads(stats_path.read_text())
            assert first["slots"] > 0
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
        net.settle()
    assert p.returncode == 0, err
    final = json.loads(stats_path.read_text())
    assert final["slots"] >= first["slots"]
    assert final["timing"]["ticks"] >= final["slots"]
    trace = pd.read_csv(tmp_path / "phy_slots.csv")
    assert list(trace["slot"]) == list(range(len(trace)))
    assert {"t_ns", "user", "mcs", "success", "snr_db.u0", "snr_db.u1"} <= set(trace.columns)
    assert len(trace) == final["slots"]  # the last slot was finished and written
    assert len(net.indications[0]) == final["slots"]


def test_timing_histogram_percentiles():
    h = Histogram()
    for us in range(1, 1001):  # 1..1000 us
        h.add_ns(us * 1000)
    summary = h.summary()
    assert summary["count"] == 1000 and summary["max"] == 1000.0
    assert summary["p50"] == 500.5 and summary["p99"] == 990.5
    assert summary["mean"] == pytest.approx(500.5)


def test_loadtest_tool_reports_the_timing_of_a_short_run(tmp_path):
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "oppsched.phy.loadtest",
            "--users",
            "2",
            "--seconds",
            "0.4",
            "--slot-s",
            "4e-3",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "tick lateness us: mean" in p.stdout and "slots 100," in p.stdout
    stats = json.loads((tmp_path / "phy.stats.json").read_text())
    assert (
        stats["slots"] == 100
        and stats["timing"]["lateness_us"]["count"] == stats["timing"]["ticks"]
    )
