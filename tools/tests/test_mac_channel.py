"""Fading models and the CLAMP slot error model through the Python API (oppsched.mac).

Andrew & Hanly, CLAMP, §V-B: Jakes with G = 20 generators, f_d 0.6 / 60 Hz, SNR_ave = 4
(6 dB), 3 ms slots, B = tau_slot min(W0 log2(1 + (1 - m) N), C_max) (eq. 18), error iff the
end-of-slot SNR cannot carry B, adaptive backoff margin m for a 1e-3 loss after n attempts.
Srinivasan & Baras, §III-A, eq. 4: random sum of sinusoids.
"""

import numpy as np
import pytest

from oppsched import mac

MODELS = ["jakes", "sum_of_sinusoids"]


def bessel_j0(x):
    # J0(x) = (1/pi) int_0^pi cos(x sin th) d th (numpy has no Bessel functions).
    th = (np.arange(4000) + 0.5) * (np.pi / 4000)  # midpoint rule
    return np.mean(np.cos(x * np.sin(th)))


def ensemble(model, seeds=400, per_seed=50, fd=60.0):
    t = 0.037 * np.arange(per_seed)
    return np.concatenate(
        [
            mac.fading_channel(fd, mac.CLAMP_MEAN_SNR_DB, s, model=model).gain_many(t + 0.0123 * s)
            for s in range(1, seeds + 1)
        ]
    )


@pytest.mark.parametrize("model", MODELS)
def test_snr_is_mean_times_power_gain_and_vector_forms_agree(model):
    j = mac.fading_channel(60.0, 6.0, 7, model=model)
    t = np.linspace(0.0, 2.0, 501)
    h = j.gain_many(t)
    assert h.dtype == np.complex128
    assert np.allclose(j.snr_linear_many(t), 10**0.6 * np.abs(h) ** 2, rtol=1e-12)
    assert j.snr_linear(0.5) == pytest.approx(10**0.6 * abs(j.gain(0.5)) ** 2, rel=1e-12)
    assert np.allclose(j.gains(0.0, t[1] - t[0], t.size), h, atol=1e-10)
    assert j.gain_many(t.reshape(3, 167)).shape == (3, 167)


@pytest.mark.parametrize("model", MODELS)
def test_same_seed_same_channel_other_seed_different(model):
    t = np.linspace(0, 1, 100)
    a = mac.fading_channel(60.0, 6.0, 42, model=model).gain_many(t)
    b = mac.fading_channel(60.0, 6.0, 42, model=model).gain_many(t)
    c = mac.fading_channel(60.0, 6.0, 43, model=model).gain_many(t)
    assert np.array_equal(a, b)
    assert np.all(a != c)


@pytest.mark.parametrize("model", MODELS)
def test_mean_power_one_and_rayleigh_envelope(model):
    h = ensemble(model)
    assert np.mean(np.abs(h) ** 2) == pytest.approx(1.0, abs=0.03)
    r = np.sort(np.abs(h))
    n = r.size
    cdf = 1.0 - np.exp(-(r**2))
    ks = max(np.max(np.abs(cdf - np.arange(n) / n)), np.max(np.abs(cdf - np.arange(1, n + 1) / n)))
    assert ks < 0.02  # Kolmogorov-Smirnov distance to Rayleigh(E r^2 = 1), n = 20 000


@pytest.mark.parametrize("model,tol", [("jakes", 0.07), ("sum_of_sinusoids", 0.03)])
def test_autocorrelation_close_to_j0(model, tol):
    # tol: sampling noise 0.007 plus, for the angles printed in Andrew & Hanly, CLAMP, the
    # G = 20 quadrature error (1 - cos 2 pi f_d tau)/G (0.065 at f_d tau = 0.3; see docs/mac.md, "Fading models").
    fd = 60.0
    t = 0.0311 * np.arange(20)
    for fd_tau in (0.05, 0.1, 0.18, 0.3):
        tau = fd_tau / fd
        acc = 0.0
        for s in range(500):
            j = mac.fading_channel(fd, 6.0, 1000 + s, model=model)
            acc += np.sum(j.gain_many(t + tau + 0.0007 * s) * np.conj(j.gain_many(t + 0.0007 * s)))
        acc /= 500 * t.size
        assert acc.real == pytest.approx(bessel_j0(2 * np.pi * fd_tau), abs=tol), fd_tau


@pytest.mark.parametrize("model", MODELS)
def test_users_with_different_seeds_are_uncorrelated(model):
    t = 0.041 * np.arange(20)
    cross, pa, pb = 0.0, [], []
    for s in range(500):
        ha = mac.fading_channel(60.0, 6.0, 2 * s + 1, model=model).gain_many(t + 0.003 * s)
        hb = mac.fading_channel(60.0, 6.0, 2 * s + 2, model=model).gain_many(t + 0.003 * s)
        cross += np.sum(ha * np.conj(hb))
        pa.append(np.abs(ha) ** 2)
        pb.append(np.abs(hb) ** 2)
    n = 500 * t.size
    assert abs(cross / n) < 0.04
    pa, pb = np.concatenate(pa), np.concatenate(pb)
    assert np.corrcoef(pa, pb)[0, 1] == pytest.approx(0.0, abs=0.05)


def test_bad_channel_arguments_raise_value_error():
    with pytest.raises(ValueError, match=r"channel\.model"):
        mac.fading_channel(60.0, 6.0, 1, model="rician")
    with pytest.raises(ValueError, match=r"channel\.jakes\.doppler_hz: -1"):
        mac.fading_channel(-1.0, 6.0, 1)
    with pytest.raises(ValueError, match=r"channel\.seed"):
        mac.fading_channel(60.0, 6.0, -3)
    with pytest.raises(ValueError, match=r"channel\.sos\.paths"):
        mac.fading_channel(60.0, 6.0, 1, model="sum_of_sinusoids", oscillators=0)


def test_link_presets_and_eq18_with_log2():
    hi, lo = mac.clamp_link.high_rate(), mac.clamp_link.low_rate(15)
    assert hi.params["w0_hz"] == 4.3e6 and hi.params["cmax_bps"] == 10e6
    assert lo.params["w0_hz"] == 620e3 and lo.params["cmax_bps"] == 1.44e6
    assert lo.params["max_attempts"] == 15 and hi.params["max_attempts"] == 5
    link = mac.clamp_link(margin_init=0.2)
    for snr in (0.0, 0.5, 2.0):
        assert link.rate_bits(snr) == pytest.approx(
            3e-3 * min(4.3e6 * np.log2(1 + 0.8 * snr), 10e6)
        )
    # C_max is the capacity at the mean SNR (4): the evidence that eq. 18's log is log2.
    assert mac.clamp_link().rate_bps(4.0) == pytest.approx(10e6, rel=0.005)


def test_rate_never_exceeds_cmax_and_error_rule():
    link = mac.clamp_link.high_rate(15)
    for snr in (0.0, 4.0, 1e3, 1e12):
        assert link.rate_bps(snr) <= 10e6
    bits = link.rate_bits(2.0)
    assert not link.is_error(bits, 2.0)
    assert link.is_error(bits, 1.9)
    snr = mac.fading_channel(60.0, mac.CLAMP_MEAN_SNR_DB, 5).snr_linear_many(3e-3 * np.arange(20001))
    out = mac.clamp_link.high_rate(15).transmit_many(snr[:-1], snr[1:])
    assert out["bits"].max() <= 3e-3 * 10e6
    assert out["bits"].max() == pytest.approx(3e-3 * 10e6)  # the cap is reached


def test_consecutive_failures_drop():
    link = mac.clamp_link(max_attempts=3, margin_step=0.0)
    assert [link.on_feedback(False) for _ in range(3)] == ["retry", "retry", "dropped"]
    assert link.on_feedback(True) == "delivered"
    assert link.stats["dropped"] == 1


def test_adaptive_margin_reaches_target_loss_on_60hz_fading():
    # Paper's scope: loss after n = 5 attempts -> 1e-3. 500 000 slots, the first 100 000
    # discarded; tolerance [0.75e-3, 1.3e-3].
    snr = mac.fading_channel(60.0, mac.CLAMP_MEAN_SNR_DB, 11).snr_linear_many(3e-3 * np.arange(500001))
    link = mac.clamp_link.high_rate(5)
    out = link.transmit_many(snr[:-1], snr[1:])
    tail = out["outcome"][100000:]
    loss = np.sum(tail == 2) / np.sum(tail != 1)
    assert 0.75e-3 < loss < 1.3e-3
    assert out["margin"][100000:].mean() > 0.05


def test_slow_fading_almost_no_errors_with_small_margin():
    link_kw = dict(margin_init=0.1, margin_step=0.0)
    t = 3e-3 * np.arange(200001)
    slow = mac.fading_channel(0.6, mac.CLAMP_MEAN_SNR_DB, 21).snr_linear_many(t)
    fast = mac.fading_channel(60.0, mac.CLAMP_MEAN_SNR_DB, 21).snr_linear_many(t)
    es = mac.clamp_link(**link_kw).transmit_many(slow[:-1], slow[1:])["error"].mean()
    ef = mac.clamp_link(**link_kw).transmit_many(fast[:-1], fast[1:])["error"].mean()
    assert es < 0.01
    assert ef > 0.3


def test_bad_link_arguments_raise_value_error():
    with pytest.raises(ValueError, match=r"clamp_link\.target_loss"):
        mac.clamp_link(target_loss=0.0)
    with pytest.raises(ValueError, match=r"clamp_link\.scope"):
        mac.clamp_link(scope="sometimes")
    with pytest.raises(ValueError, match=r"clamp_link\.bogus"):
        mac.clamp_link(bogus=1)
    with pytest.raises(ValueError, match=r"clamp_link\.margin_max"):
        mac.clamp_link(margin_max=1.0)
