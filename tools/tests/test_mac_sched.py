"""Schedulers, HARQ entity and link adaptation through the Python API (oppsched.mac)."""

import math

import numpy as np
import pytest

import oppsched.mac as mac

BANDWIDTH_HZ = 1e6


def rayleigh_rates(mean_snr_db, slots, seed):
    """Per-slot rates B log2(1 + SNR), SNR exponential with each user's mean (seeded)."""
    rng = np.random.default_rng(seed)
    mean = 10.0 ** (np.asarray(mean_snr_db) / 10.0)
    snr = rng.exponential(1.0, size=(slots, len(mean))) * mean
    return BANDWIDTH_HZ * np.log2(1.0 + snr)


def run(sched, rates, backlogged=None):
    n = rates.shape[1]
    served = np.zeros(n)
    thr = np.zeros(n)
    all_on = [True] * n
    for row in rates:
        r = row.tolist()
        u = sched.step(r, all_on if backlogged is None else backlogged)
        if u >= 0:
            served[u] += 1
            thr[u] += r[u]
    return served / len(rates), thr / len(rates)


# --- schedulers -----------------------------------------------------------------------


def test_pf_gives_each_rayleigh_user_one_nth_of_the_slots():
    rates = rayleigh_rates([0, 5, 10, 15], 40000, seed=1)
    share, thr = run(mac.make_scheduler("pf", alpha=0.03), rates)
    assert share == pytest.approx([0.25] * 4, rel=0.15)
    assert thr[3] > 2 * thr[0]  # throughput still follows the channel


def test_step_learns_the_user_count_and_exposes_averages():
    s = mac.make_scheduler("pf")
    assert s.num_users == 0
    assert s.kind == "pf" and s.alpha == pytest.approx(0.03)
    assert s.step([1e6, 2e6, 4e6], [True, True, True]) in (0, 1, 2)
    assert s.num_users == 3
    assert len(s.averages) == 3 and all(a > 0 for a in s.averages)
    with pytest.raises(ValueError, match="sched.rate_bps: size 2 != num_users 3"):
        s.step([1e6, 2e6], [True, True])


def test_none_iff_nobody_backlogged_and_never_a_user_without_data():
    rng = np.random.default_rng(5)
    for kind, params in [
        ("pf", {}),
        ("glambda", {"lam": 2.0}),
        ("rr", {}),
        ("maxrate", {}),
        ("wpf", {"weights": [1, 2, 3, 4, 5]}),
    ]:
        s = mac.make_scheduler(kind, **params)
        for _ in range(2000):
            rates = (rng.uniform(0.1, 3.0, 5) * 1e6).tolist()
            backlogged = (rng.random(5) < 0.3).tolist()
            u = s.step(rates, backlogged)
            if any(backlogged):
                assert u >= 0 and backlogged[u], kind
            else:
                assert u == mac.NO_USER == -1, kind


def test_round_robin_is_exactly_one_nth():
    rates = rayleigh_rates([-5, 0, 5, 10], 4000, seed=2)
    share, _ = run(mac.make_scheduler("rr"), rates)
    assert share.tolist() == [0.25] * 4


def test_glambda_zero_is_max_rate_and_large_lambda_is_rate_fair():
    rates = rayleigh_rates([0, 5, 10, 15], 20000, seed=3)
    g = mac.make_scheduler("glambda", alpha=0.01, lam=0.0)
    m = mac.make_scheduler("maxrate", alpha=0.01)
    all_on = [True] * 4
    for row in rates:
        r = row.tolist()
        assert g.step(r, all_on) == m.step(r, all_on) == int(np.argmax(row))
    _, thr_pf = run(mac.make_scheduler("glambda", alpha=0.01, lam=1.0), rates)
    _, thr_10 = run(mac.make_scheduler("glambda", alpha=0.01, lam=10.0), rates)
    assert thr_10.min() / thr_10.max() > 0.7 > thr_pf.min() / thr_pf.max()


def test_weighted_pf_slot_shares_follow_the_weights_on_constant_channels():
    w = [1.0, 2.0, 3.0, 4.0]
    s = mac.make_scheduler("wpf", alpha=0.001, weights=w)
    rates = np.tile([0.2e6, 1e6, 0.5e6, 3e6], (40000, 1))
    share, _ = run(s, rates)
    assert share == pytest.approx(np.array(w) / sum(w), abs=0.01)


def test_harq_retransmission_slot_is_credited_through_update():
    s = mac.make_scheduler("pf", alpha=0.1)
    s.step([1e6, 1e6], [True, True])
    before = s.averages
    s.update([1e6, 1e6], 1, 2e6)  # the MAC served a retransmission for user 1
    assert s.averages[1] == pytest.approx(0.9 * before[1] + 0.1 * 2e6)
    assert s.averages[0] == pytest.approx(0.9 * before[0])
    assert s.slots == 2


@pytest.mark.parametrize(
    "kind,params,message",
    [
        ("pf", {"alpha": 0.0}, r"sched.alpha: 0 not in \(0,1\]"),
        ("pf", {"alpha": 1.5}, r"sched.alpha: 1.5 not in \(0,1\]"),
        ("glambda", {"lam": -1.0}, "sched.lambda: -1 must be >= 0"),
        ("wpf", {}, "sched.weights: required"),
        ("wpf", {"weights": [1, -2]}, r"sched.weights\[1\]: -2 must be > 0"),
        ("pf", {"lam": 1.0}, "'lam' not accepted by kind 'pf'"),
        ("edf", {}, "sched.kind: 'edf' not one of"),
    ],
)
def test_bad_parameters_raise_value_error_naming_the_field(kind, params, message):
    with pytest.raises(ValueError, match=message):
        mac.make_scheduler(kind, **params)


# --- HARQ ------------------------------------------------------------------------------


def test_harq_when_max_tx_reached_then_tb_is_dropped():
    h = mac.harq_entity(
        num_users=1,
        num_processes=2,
        max_transmissions=5,
        feedback_delay_slots=4,
        feedback_timeout_slots=10,
    )
    slot = 0
    g = h.new_transmission(0, tb_id=77, bytes=1500, slot=slot)
    rvs = [g.rv]
    while True:
        slot += 4
        ev = h.on_feedback(0, g.process, g.ndi, False, slot)
        if ev.kind != "nacked":
            break
        assert h.next_retransmission(slot) == (0, g.process)
        g = h.retransmit(0, g.process, slot)
        rvs.append(g.rv)
    assert ev.kind == "dropped_max_tx" and ev.tb_id == 77 and ev.transmissions == 5
    assert rvs == [0, 2, 3, 1, 0]
    st = h.stats
    assert (st["tb_sent"], st["tx_attempts"], st["failed_final"]) == (1, 5, 1)
    assert h.in_flight == 0


def test_harq_ndi_toggles_and_timeout_frees_the_process():
    h = mac.harq_entity(
        num_users=1, num_processes=1, feedback_delay_slots=2, feedback_timeout_slots=6
    )
    g1 = h.new_transmission(0, 1, 100, 0)
    assert h.free_process(0, 1) is None
    assert h.expire(5) == []
    (ev,) = h.expire(6)
    assert ev.kind == "timed_out" and ev.tb_id == 1
    g2 = h.new_transmission(0, 2, 100, 6)
    assert g2.ndi != g1.ndi
    assert h.on_feedback(0, 0, g1.ndi, True, 7).kind == "stale_feedback"
    assert h.on_feedback(0, 0, g2.ndi, True, 8).kind == "acked"
    assert h.stats["timeouts"] == 1 and h.stats["acked"] == 1
    assert h.process_state(0, 0)["phase"] == "idle"


def test_harq_bad_config_raises_value_error():
    with pytest.raises(ValueError, match=r"harq.max_transmissions: 0 not in \[1, 64\]"):
        mac.harq_entity(max_transmissions=0)
    with pytest.raises(ValueError, match="harq.feedback_timeout_slots"):
        mac.harq_entity(feedback_delay_slots=8, feedback_timeout_slots=8)


# --- link adaptation -------------------------------------------------------------------


def test_evdo_table_is_srinivasan_baras_table_1():
    t = mac.mcs_table.evdo()
    assert t.thresholds_db == [-12.5, -9.5, -6.5, -5.7, -4.0, -1.0, 1.3, 3.0, 7.2, 9.5]
    assert t.rates_bps == pytest.approx(
        [x * 1e3 for x in [38.4, 76.8, 153.6, 204.8, 307.2, 614.4, 921.6, 1228.8, 1843.2, 2457.6]]
    )
    assert mac.cqi_to_mcs(t, -13.0) == mac.NO_MCS
    assert mac.cqi_to_mcs(t, 3.0) == 7
    assert mac.cqi_to_mcs(t, 2.9) == 6
    assert mac.cqi_to_mcs(t, 2.9, offset_db=0.1) == 7
    assert t.bytes_per_slot(9, 1.667e-3) == 512


def test_ofdm_table_and_csv_replacement():
    t = mac.mcs_table.ofdm_provisional()
    assert [e.name for e in t.entries][0] == "BPSK 1/2" and len(t) == 8
    assert t.rates_bps[-1] == pytest.approx(3.0e6)
    back = mac.mcs_table.from_csv(t.to_csv(), "copy")
    assert back.thresholds_db == t.thresholds_db and back.rates_bps == t.rates_bps
    with pytest.raises(ValueError, match="not > previous"):
        mac.mcs_table.from_csv("name,min_snr_db,rate_bps\na,3,1e5\nb,2,2e5\n")
    with pytest.raises(ValueError, match="linkadapt.table"):
        mac.mcs_table("bad", [mac.mcs_entry("a", 1.0, 2e5), mac.mcs_entry("b", 2.0, 1e5)])


def test_olla_converges_to_the_target_bler():
    t = mac.mcs_table.ofdm_provisional()
    o = mac.olla(target_bler=0.1, delta_down_db=0.5)
    assert o.delta_up_db == pytest.approx(0.5 * 0.1 / 0.9)
    rng = np.random.default_rng(9)
    errors = sent = 0
    n = 40000
    for k in range(n):
        snr = 14.0 + 10 * math.log10(rng.exponential())
        m = o.select(t, snr + 3.0 + rng.normal())  # optimistic, noisy CQI
        if m < 0:
            continue
        p_ok = 1.0 / (1.0 + math.exp(-(snr - t[m].min_snr_db) / 0.7))
        ack = rng.random() < p_ok
        o.update(ack)
        if k >= n // 2:
            sent += 1
            errors += not ack
    assert errors / sent == pytest.approx(0.1, rel=0.1)
    assert o.offset_db < 0 and o.clamped == 0
    with pytest.raises(ValueError, match="olla.delta_up_db"):
        mac.olla(target_bler=0.1, delta_down_db=0.5, delta_up_db=0.5)
