"""Sample sinks and sources for UHD's MPM simulator, named in its .ini (`class =` one of
them, `import_path =` this file; the other keys of the section are the class's keyword
arguments, as strings). docs/howto/uhd-simulator.md says what each carries and what was
measured.

- PacketLog (`[sample.sink]`): one JSON line per TX data packet the simulated radio
  receives from UHD (type, timestamp, end of burst, payload bytes): what UHD put on the
  wire for a timed burst.
- AirSink (`[sample.sink]`) and AirSource (`[sample.source]`): the simulated radio's
  antenna. AirSink collects the TX samples UHD sends into bursts and hands them to the
  module's `AIR`; every RX stream's AirSource plays them back into UHD's RX stream at the
  place their `tx_time` names, through the project's channel emulator
  (gnuradio.oppsched.channel_emulator: AWGN at an SNR, optional fading, seeded) and a
  gain. The simulator loads both classes from this one file through
  usrp_mpm.simulator.sample_source.from_import_path, which caches the module by its
  path, so they share `AIR` in the simulator's process.

Time. The simulator keeps no device time. A burst's `tx_time` (its first packet's
timestamp, in ticks of the simulated radio's master clock, which follows the sample rate
UHD sets: `tick_rate`) is read as seconds of the
host's CLOCK_MONOTONIC, which is the UHD PHY's device time (it sets the device time to a
whole second of that clock: oppsched.phy.uhd.set_device_time). An RX stream's sample k
is at air time t0 + k / sample_rate, t0 being CLOCK_MONOTONIC when the stream's first
packet is made: the stream's own sample count is its clock, as a radio's device time is,
so the bursts keep their spacing to the sample even when the simulator delivers slower
than real time (then the stream's air time falls behind the host clock: `lag_s` in the
log). A burst lands at sample round((tx_time - t0) * sample_rate) of every RX stream
running then (a burst without a time at the stream's next sample). A burst whose place
the stream has already passed when it reaches it is late: dropped (`late = drop`, as a
USRP drops a late burst) or sent at the stream's next sample that the bursts placed
before it leave free (`late = now`: a transmitter that falls behind real time then keeps
its bursts back to back, later than their time, for a link that lives through the
simulator's stalls). When no
burst is due the stream carries the channel's noise: the emulator's output for silence.

Back-pressure. A radio holds a timed burst in its buffer until its time and its flow
control then holds UHD back. AirSink does the same with `buffer_s`: the first packet of
a burst due more than buffer_s seconds from now waits (in the simulator's receive thread,
so its flow control stops UHD's send) until it is due within buffer_s.
"""

from __future__ import annotations

import json
import math
import threading
import time

import numpy as np

# UHD's fc32 <-> sc16 conversion: 1.0 is 32767.
SC16_SCALE = 32767.0
SC16_BYTES = 4

# The air's clock; tests replace these (monkeypatch) to run AirSink/AirSource without a
# simulator and without waiting.
clock = time.monotonic
sleep = time.sleep


class PacketLog:
    def __init__(self, path):
        self._f = open(path, "a", buffering=1)

    def accept_packet(self, packet):
        header = packet.get_header()
        self._f.write(json.dumps({
            "type": str(header.pkt_type).rsplit(".", 1)[-1],
            "timestamp": packet.get_timestamp(),
            "eob": bool(header.eob),
            "bytes": len(packet.get_payload_bytes()),
        }) + "\n")

    def close(self):
        self._f.close()


# ----------------------------------------------------------------------------------------
# The air between AirSink and AirSource


def sc16_to_complex(payload) -> np.ndarray:
    """A CHDR data payload of sc16 samples (bytes or the list of ints uhd.chdr returns) as
    complex64, 1.0 = full scale. On the wire each sample is one little-endian 32-bit word
    with I in its upper and Q in its lower half: int16 pairs (Q, I)."""
    raw = np.frombuffer(bytes(payload), dtype="<i2")
    out = np.empty(raw.size // 2, dtype=np.complex64)
    out.real = raw[1::2]
    out.imag = raw[0::2]
    return out / np.float32(SC16_SCALE)


def complex_to_sc16(x: np.ndarray) -> bytes:
    """complex samples (1.0 = full scale) as a CHDR sc16 payload, clipped to int16. (Ufuncs
    in place: np.clip's checks cost 80 % of an RX packet's 140 us at 371 samples.)"""
    f = np.ascontiguousarray(x, dtype=np.complex64).view(np.float32) * np.float32(SC16_SCALE)
    np.rint(f, out=f)
    np.minimum(f, 32767, out=f)
    np.maximum(f, -32768, out=f)
    return f.astype("<i2").reshape(-1, 2)[:, ::-1].tobytes()  # (I, Q) -> (Q, I)


class _Segment:
    """Samples of one burst, from sample `offset` of the burst on."""
    __slots__ = ("seq", "burst", "tx_time", "offset", "samples", "arrived")

    def __init__(self, seq, burst, tx_time, offset, samples, arrived):
        self.seq, self.burst, self.tx_time = seq, burst, tx_time
        self.offset, self.samples, self.arrived = offset, samples, arrived


class Air:
    """TX segments on their way to every RX stream. AirSink puts each packet's samples
    here as it arrives; each AirSource takes the ones it has not seen. A segment is
    forgotten once every running stream has seen it and its burst's time (its arrival,
    for a burst without one) is `keep_s` in the past: a stream started later could not
    hear it any more."""

    def __init__(self, keep_s: float = 2.0):
        self.keep_s = keep_s
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._seq = 0
        self._bursts = 0
        self._seen: dict[int, int] = {}  # running stream -> last seq it took

    def new_burst(self) -> int:
        with self._lock:
            self._bursts += 1
            return self._bursts

    def put(self, burst: int, tx_time, offset: int, samples: np.ndarray) -> None:
        with self._lock:
            self._seq += 1
            self._segments.append(_Segment(self._seq, burst, tx_time, offset, samples,
                                           clock()))

    def listen(self, stream: int) -> None:
        """A stream starts: it hears what arrives from now on, and the bursts already
        here whose time has not passed for it (AirSource decides)."""
        with self._lock:
            self._seen[stream] = 0

    def leave(self, stream: int) -> None:
        with self._lock:
            self._seen.pop(stream, None)

    def take(self, stream: int) -> list[_Segment]:
        """The segments `stream` has not taken yet, oldest first."""
        with self._lock:
            self._prune()
            last = self._seen.get(stream, 0)
            # seqs are consecutive: the first one not taken sits at last + 1 - first seq
            first = self._segments[0].seq if self._segments else self._seq + 1
            new = self._segments[max(0, last + 1 - first):]
            if new:
                self._seen[stream] = new[-1].seq
            return new

    def _prune(self) -> None:
        seen = min(self._seen.values(), default=self._seq)
        old = clock() - self.keep_s
        keep = 0
        while keep < len(self._segments):
            s = self._segments[keep]
            if s.seq > seen or (s.tx_time if s.tx_time is not None else s.arrived) > old:
                break
            keep += 1
        del self._segments[:keep]


AIR = Air()
_STREAMS = iter(range(1, 1 << 62))  # one id per AirSource in this process


class _JsonLog:
    def __init__(self, path: str):
        self._f = open(path, "a", buffering=1) if path else None

    def write(self, **record) -> None:
        if self._f is not None:
            self._f.write(json.dumps(record) + "\n")

    def close(self) -> None:
        if self._f is not None:
            self._f.close()


def _flag(value) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("1", "true", "yes", "on"):
        return True
    if str(value).lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{value!r} is not a boolean")


class AirSink:
    """One TX stream of the simulated radio (the simulator makes one per UHD TX
    streamer): each data packet's samples go to AIR as they arrive, as part of the burst
    that the packet opens (first packet after an end of burst: its timestamp is the
    burst's tx_time, in ticks of `tick_rate`) or continues. Parameters, from the .ini:

    tick_rate   ticks per second of the timestamps: the simulated E320's master clock,
                which is the sample rate UHD set (measured: tx_time 778.618 s arrived as
                194 654 530 ticks at 250 kS/s)
    buffer_s    a burst due later than this many seconds from now waits (back-pressure
                on UHD, as a radio's buffer); 0: never waits
    tx_buffer_bytes
                the TX buffer the simulated radio announces to UHD's flow control (in
                this process, for every later TX stream), and a queue of TX_QUEUE_PACKETS
                behind it; 0: the simulator's own 5000 bytes (three packets, which holds
                UHD's TX below about 0.76 MS/s) and queue of 3 packets. With those, a
                sink that waits blocks the simulator's socket thread, which stalls the RX
                streams and then ends the TX stream (gevent's ConcurrentObjectUseError in
                sim.log): buffer_s is then ignored
    log         a file for one JSON line per burst (tx_time, samples, packets); '' none
    """

    def __init__(self, tick_rate, buffer_s="0.5", tx_buffer_bytes="16000", log="",
                 air=None):
        self.tick_rate = float(tick_rate)
        self.buffer_s = float(buffer_s)
        if int(tx_buffer_bytes):
            set_tx_buffer(int(tx_buffer_bytes))
        else:
            self.buffer_s = 0.0
        self.air = AIR if air is None else air
        self._log = _JsonLog(log)
        self._burst = None
        self._tx_time = None
        self._offset = 0
        self._packets = 0
        self._waited_s = 0.0

    def accept_packet(self, packet):
        header = packet.get_header()
        samples = sc16_to_complex(packet.get_payload_bytes())
        if self._burst is None:
            ts = packet.get_timestamp()
            self._burst = self.air.new_burst()
            self._tx_time = None if ts is None else ts / self.tick_rate
            self._offset = self._packets = 0
            self._waited_s = 0.0
            if self._tx_time is not None and self.buffer_s > 0:
                wait = self._tx_time - self.buffer_s - clock()
                if wait > 0:
                    self._waited_s = wait
                    sleep(wait)
        self.air.put(self._burst, self._tx_time, self._offset, samples)
        self._offset += samples.size
        self._packets += 1
        if header.eob:
            self._log.write(event="tx_burst", burst=self._burst, tx_time=self._tx_time,
                            samples=self._offset, packets=self._packets,
                            waited_s=round(self._waited_s, 6), at=clock())
            self._burst = None

    def close(self):
        self._log.close()


# Packets the simulator's input stream queues between its socket thread and its worker (3
# in UHD 4.3): more than UHD can have in flight with the TX buffer below, so that a sink
# waiting for a burst's time never blocks the socket thread (which also carries the RX
# streams and every answer to UHD).
TX_QUEUE_PACKETS = 64


def set_tx_buffer(nbytes: int) -> None:
    """The TX buffer the simulator's input streams announce (ChdrInputStream.CAPACITY_BYTES,
    5000 in UHD 4.3): measured, 16 000 and 32 000 let UHD send 1 MS/s, while with 65 536
    UHD's send() returned at once and all but 168 of 263 243 bursts were lost. Also makes
    their queue hold more packets than that buffer (TX_QUEUE_PACKETS)."""
    if not 1484 <= nbytes <= 32000:
        raise ValueError(f"AirSink tx_buffer_bytes: {nbytes} is not in 1484..32000 (one "
                         "packet to the largest measured to work)")
    from usrp_mpm.simulator import chdr_stream

    chdr_stream.ChdrInputStream.CAPACITY_BYTES = nbytes
    chdr_stream.ChdrInputStream.QUEUE_CAP = max(chdr_stream.ChdrInputStream.QUEUE_CAP,
                                                TX_QUEUE_PACKETS)


class AirSource:
    """One RX stream of the simulated radio (the simulator makes one per stream command):
    fills each RX packet with the air's next samples, through the channel. Parameters,
    from the .ini:

    sample_rate       samples per second of the stream (the rate UHD was set to): places
                      the bursts (required)
    snr_db            the channel's mean Es/N0 per occupied OFDM subcarrier of `profile`
                      at sample_rate (the emulator's and the PHY's SNR) for a TX signal
                      of mean power `tx_power`; the noise's variance per sample is
                      tx_power * fft_len / occupied / 10^(snr_db / 10)
    tx_power          mean power per sample (1.0 = sc16 full scale) of that TX signal
    gain_db           applied after the channel (signal and noise: the SNR stays)
    fading, doppler_hz, profile, seed
                      the emulator's fading model (none, jakes, sum_of_sinusoids),
                      its Doppler (Hz), numerology and seed (the noise is the same for
                      the same seed, sample for sample)
    noise             false: no noise (the emulator's add_noise; tests)
    late              drop (a burst whose place has passed is not sent, as on a USRP)
                      or now (it goes out at the stream's next sample that no burst
                      placed before it takes: late bursts stay back to back)
    late_backlog_s    with late = now, a late burst that would wait longer than this
                      behind the late bursts already placed is dropped, so that the air
                      catches up with a transmitter that catches up (0: never dropped)
    log               a file for JSON lines: the stream's start, each burst placed or
                      late, its end with counts and timing; '' none
    """

    def __init__(self, sample_rate, snr_db="30", tx_power="1", gain_db="0", fading="none",
                 doppler_hz="0", profile="evdo", seed="1", noise="true", late="drop",
                 late_backlog_s="0.05", log="", air=None):
        self.fs = float(sample_rate)
        self.snr_db = float(snr_db)
        self.tx_power = float(tx_power)
        self.gain = 10 ** (float(gain_db) / 20)
        if late not in ("drop", "now"):
            raise ValueError(f"late: {late!r} is not drop or now")
        self.late = late
        self.backlog = round(float(late_backlog_s) * self.fs)
        self.air = AIR if air is None else air
        self.stream = next(_STREAMS)
        self.channel = make_channel(self.fs, profile, self.snr_db, fading, float(doppler_hz),
                                    int(seed), self.tx_power, _flag(noise))
        self.noise_variance = self.channel.noise_variance(0)
        self._log = _JsonLog(log)
        self._params = {"sample_rate": self.fs, "snr_db": self.snr_db,
                        "tx_power": self.tx_power, "gain_db": float(gain_db),
                        "fading": fading, "doppler_hz": float(doppler_hz),
                        "profile": profile, "seed": int(seed), "noise": _flag(noise),
                        "late": late, "late_backlog_s": float(late_backlog_s)}
        self.t0 = None  # air time of sample 0 (CLOCK_MONOTONIC), at the first packet
        self.k = 0  # stream index of the next sample
        self._bases: dict[int, int | None] = {}  # burst -> its first sample (None: dropped)
        self._pending: list[tuple[int, np.ndarray]] = []  # (first sample, samples)
        self._free = 0  # stream index after the last sample of the bursts placed
        self.packets = self.bursts = self.late_bursts = self.underflow = 0
        self._busy_s = 0.0

    def fill_packet(self, packet, payload_size):
        """The next payload_size bytes of the stream (payload_size / 4 sc16 samples: what
        UHD's RX streamer takes per packet; the packet's pacing is the simulator's)."""
        start = time.perf_counter()
        n = int(payload_size) // SC16_BYTES
        if self.t0 is None:
            self.t0 = clock()
            self.air.listen(self.stream)
            self._log.write(event="rx_stream", stream=self.stream, t0=self.t0,
                            noise_variance=self.noise_variance, gain=self.gain,
                            samples_per_packet=n, payload_size=int(payload_size),
                            **self._params)
        self._take()
        x = self._air_samples(self.k, n)
        y = self.channel.process(x)[0] if n else x
        if self.gain != 1.0:
            y = y * np.float32(self.gain)
        packet.set_payload_bytes(complex_to_sc16(y))
        self.k += n
        self.packets += 1
        self._busy_s += time.perf_counter() - start
        return packet

    def _take(self) -> None:
        """Places the segments that reached the air since the last packet."""
        for seg in self.air.take(self.stream):
            if seg.burst not in self._bases:
                self._bases[seg.burst] = self._place(seg)
                if len(self._bases) > 4096:  # forget the oldest half (insertion order):
                    for b in list(self._bases)[:2048]:  # their segments are long past
                        del self._bases[b]
            base = self._bases[seg.burst]
            if base is None:
                continue
            first = base + seg.offset
            samples = seg.samples
            if first < self.k:  # this part came after its time: an underflow
                cut = min(self.k - first, samples.size)
                self.underflow += cut
                samples, first = samples[cut:], first + cut
            if samples.size:
                self._pending.append((first, samples))
                self._free = max(self._free, first + samples.size)

    def _place(self, seg: _Segment) -> int | None:
        """The stream index of the first sample of seg's burst, or None when the stream
        does not send it: the burst began before the stream (not heard), or came after
        its place had passed (late, with late = drop). With late = now a late burst goes
        at the stream's next sample not taken by a burst already placed, and so does one
        whose place a burst moved there takes: the radio sends one burst at a time, so
        the moved bursts stay back to back instead of overlapping; unless it would wait
        more than late_backlog_s behind them (dropped: a transmitter that sends its late
        bursts faster than real time, catching up, is not kept as late as it was)."""
        before = seg.arrived < self.t0
        if seg.offset > 0 or (before and seg.tx_time is None):
            return None  # it was on the air before this stream started
        at = self.k if seg.tx_time is None else round((seg.tx_time - self.t0) * self.fs)
        if at < 0 and before:
            return None
        first = max(self.k, self._free) if self.late == "now" else self.k
        late = at < first
        placed = first if late and self.late == "now" else None if late else at
        if late and self.backlog and first - self.k > self.backlog:
            placed = None  # the late bursts before it already wait that long
        self.late_bursts += late
        self.bursts += placed is not None
        self._log.write(event="burst", stream=self.stream, burst=seg.burst,
                        tx_time=seg.tx_time, index=placed, late=late,
                        late_by=first - at if late else 0)
        return placed

    def _air_samples(self, k: int, n: int) -> np.ndarray:
        x = np.zeros(n, dtype=np.complex64)
        keep = []
        for first, s in self._pending:
            lo, hi = max(first, k), min(first + s.size, k + n)
            if lo < hi:
                x[lo - k:hi - k] += s[lo - first:hi - first]
            if first + s.size > k + n:
                keep.append((first, s))
        self._pending = keep
        return x

    def close(self):
        self.air.leave(self.stream)
        now = clock()
        t0 = self.t0 if self.t0 is not None else now
        self._log.write(event="rx_end", stream=self.stream, samples=self.k,
                        packets=self.packets, bursts=self.bursts, late=self.late_bursts,
                        underflow_samples=self.underflow, elapsed_s=now - t0,
                        lag_s=now - (t0 + self.k / self.fs), busy_s=self._busy_s)
        self._log.close()


def make_channel(fs: float, profile: str, snr_db: float, fading: str, doppler_hz: float,
                 seed: int, tx_power: float = 1.0, noise: bool = True):
    """One user of the project's channel emulator (gr-oppsched's channel_emulator, the
    pure C++ class behind the sample PHY's channel_emulator_cc, driven here from numpy):
    AWGN at snr_db (Es/N0 per occupied subcarrier of `profile` at fs, for TX samples of
    mean power tx_power), the fading model, the seed."""
    from gnuradio import oppsched

    if not math.isfinite(tx_power) or tx_power <= 0:
        raise ValueError(f"AirSource tx_power: {tx_power!r} must be > 0")
    try:
        oppsched.numerology.profile(profile, fs)
        at = fs
    except ValueError:
        at = 1e6  # a rate below the profile's (no payload symbol fits its slot): below
    try:
        p = oppsched.emulator_params(sample_rate=at, profile=profile, num_users=1,
                                     mean_snr_db=snr_db, fading=fading,
                                     doppler_hz=doppler_hz, add_noise=noise, seed=seed)
    except ValueError as exc:
        raise ValueError(f"AirSource: {exc}") from None
    if at != fs:
        # The emulator uses the numerology's rate, FFT size, occupied carriers (the SNR)
        # and symbol length (its fading update), never the slot: the profile's layout at
        # fs with a slot long enough to hold payload symbols at any rate.
        num = p.numerology
        num.sample_rate, num.slot_duration = fs, 1.0
        p.numerology = num
    p.tx_power = tx_power
    return oppsched.channel_emulator(p)
