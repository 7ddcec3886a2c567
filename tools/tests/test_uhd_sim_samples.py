"""TX samples through UHD's host stack to an RX stream of the same simulated radio: the
project's sample sink and source for UHD's device simulator (AirSink, AirSource in
tools/oppsched/uhd_sim/mpm_path/oppsched_sim_samples.py; docs/howto/uhd-simulator.md).

Two parts: the sink and source alone, fed fake CHDR packets on a fake clock (where a burst
lands, late bursts, the channel's noise and gain, back-pressure; no simulator, no
waiting), and a timed burst sent through UHD's TX streamer into the running simulator
and received through its RX streamer (tools/tests/uhd_sim_samples_client.py), whenever
the simulator can start here.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import the_simulator_to_itself
from oppsched import uhd_sim

HERE = Path(__file__).resolve().parent
SERIAL = "OPPSIM2"

try:
    from gnuradio import oppsched as gr_oppsched
except ImportError:  # the build's Python modules
    gr_oppsched = None

needs_gr = pytest.mark.skipif(gr_oppsched is None,
                              reason="gnuradio.oppsched not importable (the build's "
                                     "build/python): the source's channel is its emulator")


@pytest.fixture
def samples(monkeypatch):
    """oppsched_sim_samples as the simulator loads it (from its path), on a fake clock
    that only the test moves; sleep() moves it too, and is recorded."""
    spec = importlib.util.spec_from_file_location("oppsched_sim_samples_test",
                                                  uhd_sim.SAMPLES)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    now = [1000.0]
    mod.slept = []

    def sleep(s):
        mod.slept.append(s)
        now[0] += s

    monkeypatch.setattr(mod, "clock", lambda: now[0])
    monkeypatch.setattr(mod, "sleep", sleep)
    mod.now = now
    return mod


class _Header:
    def __init__(self, eob):
        self.eob = eob
        self.pkt_type = "PacketType.DATA_WITH_TS"


class _Packet:
    """What the simulator hands a sink (a TX packet) or a source (an empty RX packet)."""

    def __init__(self, mod=None, samples=None, ts=None, eob=False):
        self._payload = mod.complex_to_sc16(samples) if samples is not None else b""
        self._ts, self._eob = ts, eob

    def get_header(self):
        return _Header(self._eob)

    def get_timestamp(self):
        return self._ts

    def get_payload_bytes(self):
        return list(self._payload)  # as uhd.chdr does: a list of ints

    def set_payload_bytes(self, b):
        self._payload = bytes(b)


RATE = 1e6  # the fake streams' sample rate, and the simulated radio's tick rate


def _sink(mod, **kw):
    """An AirSink outside the simulator: the simulator's TX buffer is left alone."""
    return mod.AirSink(**{"tick_rate": str(RATE), "tx_buffer_bytes": "0", **kw})


def _send(mod, sink, x, tx_time=None, per_packet=371):
    """x as UHD sends a burst: packets of per_packet samples, the first one timestamped
    (ticks of the simulated radio's clock, RATE), end of burst on the last."""
    for i in range(0, x.size, per_packet):
        last = i + per_packet >= x.size
        ts = round(tx_time * RATE) if (i == 0 and tx_time is not None) else None
        sink.accept_packet(_Packet(mod, x[i:i + per_packet], ts, last))


def _receive(mod, source, n, per_packet=1000):
    """n samples of the stream, per_packet at a time (the simulator passes bytes)."""
    out = []
    for _ in range(0, n, per_packet):
        p = source.fill_packet(_Packet(), 4 * per_packet)
        out.append(mod.sc16_to_complex(p._payload))
    return np.concatenate(out)


def _ramp(n):
    return (0.5 * np.exp(2j * np.pi * np.arange(n) / 97)).astype(np.complex64)


def _noiseless(mod, **kw):
    return mod.AirSource(**{"sample_rate": str(RATE), "noise": "false", **kw})


# --- the sink and source alone --------------------------------------------------------------

def test_sc16_payload_round_trip_is_within_one_step(samples):
    x = (np.array([0.5 + 0.25j, -1.0 - 1.0j, 0.0, 0.99 - 0.01j])).astype(np.complex64)
    y = samples.sc16_to_complex(samples.complex_to_sc16(x))
    assert np.max(np.abs(y - x)) <= 1 / samples.SC16_SCALE
    # one 32-bit word per sample, I in the upper half: int16 pairs (Q, I)
    assert list(np.frombuffer(samples.complex_to_sc16(x[:1]), "<i2")) == [8192, 16384]


@needs_gr
def test_a_timed_burst_lands_at_the_sample_its_tx_time_names(samples, tmp_path):
    src = _noiseless(samples, log=str(tmp_path / "rx.jsonl"))
    sink = _sink(samples, log=str(tmp_path / "tx.jsonl"))
    first = _receive(samples, src, 1000)  # the stream starts: t0 = 1000.0 s
    assert src.t0 == 1000.0 and np.all(first == 0)
    x = _ramp(1234)
    _send(samples, sink, x, tx_time=1000.0 + 5432e-6)  # sample 5432 at 1 MS/s
    y = _receive(samples, src, 9000)
    k = 5432 - 1000
    assert np.max(np.abs(y[k:k + x.size] - x)) <= 1 / samples.SC16_SCALE
    assert np.all(y[:k] == 0) and np.all(y[k + x.size:] == 0)
    src.close()
    rx = [json.loads(line) for line in (tmp_path / "rx.jsonl").read_text().splitlines()]
    assert [r["event"] for r in rx] == ["rx_stream", "burst", "rx_end"]
    assert (rx[1]["index"], rx[1]["late"]) == (5432, False)
    assert (rx[2]["samples"], rx[2]["bursts"], rx[2]["late"]) == (10000, 1, 0)
    (tx,) = [json.loads(line) for line in (tmp_path / "tx.jsonl").read_text().splitlines()]
    assert (tx["samples"], tx["packets"], tx["tx_time"]) == (1234, 4, 1000.005432)


@needs_gr
def test_bursts_keep_their_spacing_when_the_stream_falls_behind_the_host_clock(samples):
    """The stream's sample count is its clock: two bursts 2000 samples apart land 2000
    samples apart, although the host clock ran 5 s ahead of the stream meanwhile."""
    src = _noiseless(samples)
    sink = _sink(samples, buffer_s="0")
    _receive(samples, src, 1000)
    samples.now[0] += 5.0  # the simulator is slow: 5 s pass, 1000 samples were made
    x = _ramp(300)
    _send(samples, sink, x, tx_time=1000.0 + 3000e-6)
    _send(samples, sink, x, tx_time=1000.0 + 5000e-6)
    y = _receive(samples, src, 6000)
    peaks = np.flatnonzero(np.abs(y) > 0.25)
    assert peaks[0] == 2000 and 4000 in peaks and peaks[-1] == 4299


@needs_gr
@pytest.mark.parametrize("late, lands_at", [("drop", None), ("now", 3000)])
def test_a_burst_whose_place_the_stream_has_passed_is_dropped_or_sent_at_once(
        samples, tmp_path, late, lands_at):
    src = _noiseless(samples, late=late, log=str(tmp_path / "rx.jsonl"))
    sink = _sink(samples)
    _receive(samples, src, 3000)
    _send(samples, sink, _ramp(500), tx_time=1000.0 + 1000e-6)  # sample 1000: passed
    y = _receive(samples, src, 2000)
    heard = np.flatnonzero(np.abs(y) > 0.25)
    if lands_at is None:
        assert heard.size == 0
    else:
        assert heard[0] + 3000 == lands_at and heard.size == 500
    rec = [json.loads(line) for line in (tmp_path / "rx.jsonl").read_text().splitlines()][1]
    assert (rec["late"], rec["late_by"], rec["index"]) == (True, 2000, lands_at)
    assert src.late_bursts == 1


@needs_gr
def test_with_late_now_bursts_that_come_late_together_go_out_back_to_back(samples, tmp_path):
    """A transmitter behind real time (the simulator starved): its late bursts keep their
    order without overlapping, and a burst whose place the moved ones took follows them;
    the next one whose place is free goes at its place."""
    src = _noiseless(samples, late="now", log=str(tmp_path / "rx.jsonl"))
    sink = _sink(samples)
    _receive(samples, src, 3000)
    for at in (1000, 1500, 2000, 4200, 6000):  # places at 1 MS/s; the first three passed
        _send(samples, sink, _ramp(500), tx_time=1000.0 + at * 1e-6)
    y = _receive(samples, src, 5000)
    heard = np.flatnonzero(np.abs(y) > 0.25) + 3000
    assert list(heard) == list(range(3000, 5000)) + list(range(6000, 6500))
    recs = [json.loads(line) for line in (tmp_path / "rx.jsonl").read_text().splitlines()]
    bursts = [(r["index"], r["late"], r["late_by"]) for r in recs if r["event"] == "burst"]
    assert bursts == [(3000, True, 2000), (3500, True, 2000), (4000, True, 2000),
                      (4500, True, 300), (6000, False, 0)]


@needs_gr
def test_with_late_now_a_burst_is_dropped_rather_than_wait_past_the_late_backlog(samples,
                                                                             tmp_path):
    """A transmitter catching up sends its late bursts faster than real time: past
    late_backlog_s of them waiting, the next is dropped, so the air does not stay as late
    as the transmitter was."""
    src = _noiseless(samples, late="now", late_backlog_s="0.001", log=str(tmp_path / "rx.jsonl"))
    sink = _sink(samples)
    _receive(samples, src, 3000)
    for at in (1000, 1500, 2000, 2500, 6000):  # the fourth would wait 1500 samples: dropped
        _send(samples, sink, _ramp(500), tx_time=1000.0 + at * 1e-6)
    y = _receive(samples, src, 5000)
    heard = np.flatnonzero(np.abs(y) > 0.25) + 3000
    assert list(heard) == list(range(3000, 4500)) + list(range(6000, 6500))
    recs = [json.loads(line) for line in (tmp_path / "rx.jsonl").read_text().splitlines()]
    bursts = [(r["index"], r["late"]) for r in recs if r["event"] == "burst"]
    assert bursts == [(3000, True), (3500, True), (4000, True), (None, True), (6000, False)]


@needs_gr
def test_a_burst_without_a_time_goes_out_at_the_streams_next_sample(samples):
    src = _noiseless(samples)
    sink = _sink(samples)
    _receive(samples, src, 2000)
    _send(samples, sink, _ramp(100), tx_time=None)
    y = _receive(samples, src, 1000)
    assert np.flatnonzero(np.abs(y) > 0.25)[0] == 0


@needs_gr
def test_a_stream_started_later_does_not_hear_a_burst_that_was_over(samples):
    sink = _sink(samples)
    _send(samples, sink, _ramp(100), tx_time=1000.0)  # nobody listens
    samples.now[0] += 0.5
    src = _noiseless(samples, late="now")
    y = _receive(samples, src, 3000)
    assert np.all(y == 0) and src.late_bursts == 0


@needs_gr
def test_a_burst_due_later_than_buffer_s_holds_the_sink_back_until_then(samples,
                                                                        monkeypatch):
    monkeypatch.setattr(samples, "set_tx_buffer", lambda n: None)  # no simulator here
    sink = _sink(samples, buffer_s="0.25", tx_buffer_bytes="16000")
    _send(samples, sink, _ramp(100), tx_time=1002.0)
    assert samples.slept == [pytest.approx(1.75)]
    _send(samples, sink, _ramp(100), tx_time=1001.95)  # due within buffer_s: no wait
    assert len(samples.slept) == 1


@needs_gr
@pytest.mark.parametrize("gain_db", [0.0, -6.0])
def test_silence_carries_the_channels_noise_at_the_configured_snr_and_gain(samples, gain_db):
    src = samples.AirSource(sample_rate="1e6", snr_db="10", gain_db=str(gain_db),
                            tx_power="0.25", seed="3")
    num = gr_oppsched.numerology.profile("evdo", 1e6)
    sigma2 = 0.25 * num.params.fft_len / num.occupied_carriers / 10  # 64 / 52
    assert src.noise_variance == pytest.approx(sigma2, rel=1e-9)
    y = _receive(samples, src, 200_000)
    assert np.mean(np.abs(y) ** 2) == pytest.approx(sigma2 * 10 ** (gain_db / 10), rel=0.02)


@needs_gr
def test_the_noise_is_the_same_sample_for_sample_for_the_same_seed_only(samples):
    def noise(seed):
        return _receive(samples, samples.AirSource(sample_rate="1e6", snr_db="10",
                                                   seed=str(seed)), 5000)

    assert np.array_equal(noise(5), noise(5))
    assert not np.array_equal(noise(5), noise(6))


@needs_gr
def test_a_burst_through_the_channel_keeps_its_gain_and_the_snr(samples):
    src = samples.AirSource(sample_rate="1e6", snr_db="20", tx_power="0.09",
                            gain_db="-6", seed="11")
    sink = _sink(samples)
    _receive(samples, src, 1000)
    x = (0.3 * np.exp(1j * np.pi / 4 * np.random.default_rng(1).integers(0, 8, 20000))
         ).astype(np.complex64)
    _send(samples, sink, x, tx_time=1000.0 + 2000e-6)
    y = _receive(samples, src, 22000)[1000:21000]
    h = np.vdot(x, y) / np.vdot(x, x)
    noise = y - h * x
    assert abs(h) == pytest.approx(10 ** (-6 / 20), rel=0.01)
    snr = 10 * np.log10(abs(h) ** 2 * np.mean(np.abs(x) ** 2) / np.mean(np.abs(noise) ** 2))
    assert snr == pytest.approx(10 * np.log10(0.09 / src.noise_variance), abs=0.2)


def test_a_source_fills_payload_size_bytes_of_sc16_samples(samples, monkeypatch):
    """The simulator asks for payload_size = the radio's packet size in bytes (1484: the 371
    samples UHD's RX streamer takes per packet); a bigger packet is "Bad CHDR header or
    invalid packet length" to UHD."""
    class Channel:
        def noise_variance(self, u):
            return 0.0

        def process(self, x):
            return x[None, :]

    monkeypatch.setattr(samples, "make_channel", lambda *a, **k: Channel())
    src = samples.AirSource(sample_rate="1e6")
    assert len(src.fill_packet(_Packet(), 1484)._payload) == 1484
    assert src.k == 371


def test_a_source_rejects_an_unknown_late_policy(samples):
    with pytest.raises(ValueError, match="late: 'later' is not drop or now"):
        samples.AirSource(sample_rate="1e6", late="later")


# --- through UHD's host stack and the running simulator -------------------------------------

SIM_RATE = 250e3  # where the simulator keeps real time in both directions, even loaded
AMPLITUDE, N_BURST, BURST_SEED = 0.3, 4000, 7
SNR_DB, GAIN_DB, CHANNEL_SEED = 20.0, -6.0, 3
LEAD_S = 2.0  # the burst's place ahead of the stream: past the ~700 packets that fault 6
              # (docs/howto/uhd-simulator.md) let a stream live without its shim


@pytest.fixture(scope="module")
def air_sim(tmp_path_factory):
    """The simulator with AirSink and AirSource (an AWGN channel at SNR_DB, gain GAIN_DB,
    seeded), at SIM_RATE. Holds the discovery lock while it runs."""
    with the_simulator_to_itself(blocks=True):
        d = tmp_path_factory.mktemp("uhd-sim-air")
        # late = now: a burst that reaches the simulator after its place (a loaded machine)
        # is still sent, where the source's log says, so that nothing here depends on speed
        sink, source = uhd_sim.air(SIM_RATE, d, snr_db=SNR_DB, tx_power=AMPLITUDE ** 2,
                                   gain_db=GAIN_DB, seed=CHANNEL_SEED, late="now")
        uhd_sim.write_config(d / "sim.ini", serial=SERIAL, sink=sink, source=source)
        sim = uhd_sim.Simulator(d / "sim.ini", d / "sim.log")
        sim.start()
        try:
            yield d
        finally:
            sim.stop()


@pytest.fixture(scope="module")
def received(air_sim):
    """tools/tests/uhd_sim_samples_client.py: a timed burst through UHD's TX streamer and
    what UHD's RX streamer of the same device received. (its JSON, the samples, the
    source's and the sink's logs)"""
    d = air_sim
    r = subprocess.run([sys.executable, str(HERE / "uhd_sim_samples_client.py"),
                        uhd_sim.DEVICE_ARGS, str(SIM_RATE), str(d / "air_rx.jsonl"),
                        str(d / "rx.npy"), "--lead", str(LEAD_S), "--samples", str(N_BURST),
                        "--amplitude", str(AMPLITUDE), "--seed", str(BURST_SEED)],
                       capture_output=True, text=True, timeout=300, cwd=d)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])

    def log(name):
        return [json.loads(line) for line in (d / name).read_text().splitlines()]

    return out, np.load(d / "rx.npy"), log("air_rx.jsonl"), log("air_tx.jsonl")


def _burst():
    sys.path.insert(0, str(HERE))
    from uhd_sim_samples_client import burst

    return burst(N_BURST, AMPLITUDE, BURST_SEED)


def test_uhd_streams_tx_into_the_simulator_and_rx_out_of_it_without_an_error(received):
    out, y, rx_log, tx_log = received
    assert out["rates"] == [SIM_RATE, SIM_RATE]
    assert out["errors"] == [] and out["sent"] == N_BURST
    assert y.size >= out["wanted"]  # past the ~700 packets a stream lived before fault 6's shim
    (tx,) = [r for r in tx_log if r["event"] == "tx_burst"]
    assert tx["samples"] == N_BURST
    assert tx["tx_time"] == pytest.approx(out["tx_time"], abs=1 / SIM_RATE)


def test_a_timed_tx_burst_appears_in_the_rx_stream_at_the_sample_its_tx_time_names(received):
    out, y, rx_log, _ = received
    (start,) = [r for r in rx_log if r["event"] == "rx_stream"]
    (rec,) = [r for r in rx_log if r["event"] == "burst"]
    assert start["t0"] == out["t0"]
    assert rec["index"] == out["k"] or rec["late"], rec  # late only on a starved machine
    x = _burst()
    # the correlation with the known burst over the whole stream peaks where it was placed
    n = 1 << int(np.ceil(np.log2(y.size + x.size)))
    corr = np.abs(np.fft.ifft(np.fft.fft(y, n) * np.conj(np.fft.fft(x, n))))[:y.size]
    assert int(np.argmax(corr)) == rec["index"]
    side = np.delete(corr, np.arange(rec["index"] - 2, rec["index"] + 3))
    assert corr[rec["index"]] > 10 * side.max()


def test_the_burst_arrives_with_the_configured_gain_and_snr(received):
    _, y, rx_log, _ = received
    (start,) = [r for r in rx_log if r["event"] == "rx_stream"]
    (rec,) = [r for r in rx_log if r["event"] == "burst"]
    x = _burst()
    # the channel's noise per sample: tx_power * fft_len / occupied / SNR (evdo: 64 / 52)
    sigma2 = AMPLITUDE ** 2 * 64 / 52 / 10 ** (SNR_DB / 10)
    assert start["noise_variance"] == pytest.approx(sigma2, rel=1e-9)
    seg = y[rec["index"]:rec["index"] + N_BURST]
    h = np.vdot(x, seg) / np.vdot(x, x)
    assert abs(h) == pytest.approx(10 ** (GAIN_DB / 20), rel=0.02)
    assert abs(np.angle(h)) < 0.02  # no phase: the channel is AWGN
    noise = seg - h * x
    snr = 10 * np.log10(np.abs(h) ** 2 * AMPLITUDE ** 2 / np.mean(np.abs(noise) ** 2))
    assert snr == pytest.approx(10 * np.log10(AMPLITUDE ** 2 / sigma2), abs=0.3)  # 19.1 dB


def test_the_rx_stream_carries_the_channels_noise_when_no_burst_is_due(received):
    _, y, rx_log, _ = received
    (start,) = [r for r in rx_log if r["event"] == "rx_stream"]
    (rec,) = [r for r in rx_log if r["event"] == "burst"]
    quiet = y[:rec["index"]]
    assert quiet.size > 100_000
    assert np.mean(np.abs(quiet) ** 2) == pytest.approx(
        start["noise_variance"] * 10 ** (GAIN_DB / 10), rel=0.03)
