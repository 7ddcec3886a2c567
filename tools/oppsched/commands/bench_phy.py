"""`oppsched bench phy`: the PHY chain bench.

The PHY chain bench measures, on ONE core (os.sched_setaffinity before any thread starts,
so GNU Radio's block threads inherit it) and in CPU time (time.process_time: every thread
of the process), complex samples per CPU second of:

- tx_msps: our TX chain per slot: header_codec.encode + tb_encoder.encode (CRC-32, K=7 code,
  rate matching, scrambler, interleaver, mapper) + ofdm_modulator.modulate, largest TB of
  MCS 7 (the most work per slot), evdo profile at 1 Msps;
- rx_msps: the receiver that runs, slot_receiver (slot_rx's chain without the flowgraph,
  header first) on a continuous stream of back-to-back slots at 25 dB, pushed in
  4096-sample chunks as a GNU Radio work() call would: sync, LTF and header demodulation,
  header decode, then, for a slot addressed to this client, the rest of the demodulation,
  header-aided channel estimation and tb_decoder.decode (demapping, HARQ buffer, FEC,
  CRC-32); every slot addressed to it, MCS 7 (rx_msps_mcs0: MCS 0); every TB must decode;
  rx_msps_4users: one slot in four addressed to it (a client of a 4-user cell);
  rx_parts_msps: the parts chained in Python as this bench measured them before
  (slot_sync + ofdm_demodulator of every slot in full + header_codec + tb_decoder);
- emulator_msps_per_user: channel_emulator, 4 users, flat Jakes (G = 20, f_d 60 Hz) + AWGN,
  samples x users per CPU second (emulator_msps_1user: one user);
- ref_ofdm_rx_msps: GNU Radio's digital.ofdm_rx (Schmidl & Cox sync, header/payload demux,
  FFT, channel estimation, equaliser, demapping, CRC-32) on a digital.ofdm_tx burst stream
  of the same numerology (64-FFT, CP 16, the same 48 data + 4 pilot carriers), bursts of
  20 OFDM symbols + 67 zero samples = one evdo slot (2 sync + 1 header + 17 QPSK payload
  symbols, 200-byte packets), AWGN at 25 dB; the flowgraph vector_source -> head ->
  ofdm_rx -> vector sink (decoded packets are counted: they must all decode);
- ref_fading_msps: channels.fading_model (N = 8 sinusoids, GNU Radio's recommended value,
  f_d 60 Hz at 1 Msps, Rayleigh) + AWGN (analog.noise_source_c + blocks.add_cc), the same
  per-user job as our emulator (ref_fading_msps_n20: N = 20 like our G);

Python-side costs (binding calls, numpy copies) count against OUR chains, GNU Radio's
scheduler against the references: both are measured as they would run. Each figure is the
median of 3 repetitions of at least --min-time CPU seconds. Ratios: rx_vs_ref_ofdm_rx =
rx_msps / ref_ofdm_rx_msps (target >= 5; rx_4users_ and rx_parts_vs_ref_ofdm_rx likewise),
emulator_vs_ref_fading = emulator_msps_per_user / ref_fading_msps (target >= 3).
"""


from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def _pin_one_core() -> int | None:
    """Pin this thread (and every thread started later) to one CPU; returns it."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[-1]
    os.sched_setaffinity(0, {cpu})
    return cpu


def _rate(step, min_time: float, reps: int = 3) -> dict:
    """step() processes a batch and returns the samples it processed. Runs batches until
    min_time CPU seconds, `reps` times; returns the median rate (Msps) and the details."""
    step()  # warm-up: caches, FFTW plans, first-use allocations
    rates = []
    for _ in range(reps):
        n = 0
        c0, w0 = time.process_time(), time.perf_counter()
        while True:
            n += step()
            cpu = time.process_time() - c0
            if cpu >= min_time:
                break
        wall = time.perf_counter() - w0
        rates.append(n / cpu / 1e6)
    return {"msps": statistics.median(rates), "reps_msps": [round(r, 3) for r in rates],
            "cpu_s": round(cpu, 3), "wall_s": round(wall, 3)}


def _timed_run(tb) -> tuple[float, float]:
    """Run a flowgraph to the end; (CPU s of the process, wall s) spent in run() only, so
    the construction of the blocks is not counted."""
    c0, w0 = time.process_time(), time.perf_counter()
    tb.run()
    return time.process_time() - c0, time.perf_counter() - w0


def _gr_rate(build_and_run, n_samples_probe: int, min_time: float, reps: int = 3) -> dict:
    """build_and_run(n) builds a fresh flowgraph processing n samples, runs it to the end
    (with _timed_run) and returns (samples processed, cpu s, wall s); the CPU time is the
    whole process's (all GNU Radio threads). n is scaled from a probe run so that one run
    takes about min_time CPU seconds."""
    _, probe, _ = build_and_run(n_samples_probe)
    n = int(n_samples_probe * min_time / max(probe, 1e-3)) + 1
    rates = []
    for _ in range(reps):
        done, cpu, wall = build_and_run(n)
        rates.append(done / cpu / 1e6)
    return {"msps": statistics.median(rates), "reps_msps": [round(r, 3) for r in rates],
            "cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "samples": n}


class _PhySetup:
    def __init__(self, profile: str = "evdo", sample_rate: float = 1e6, seed: int = 7):
        from oppsched import build

        phy = build.load(build.PHY)

        self.np, self.phy = np, phy
        self.num = phy.numerology.profile(profile, sample_rate)
        self.enc = phy.tb_encoder(self.num)
        self.dec = phy.tb_decoder(self.num)
        self.hdr = phy.header_codec(self.num)
        self.mod = phy.ofdm_modulator(self.num)
        self.rng = np.random.default_rng(seed)
        self.profile, self.sample_rate = profile, sample_rate

    def slots(self, mcs: int, n: int, users: int = 1):
        """n (header fields, TB, samples) of back-to-back slots, slot k addressed to user
        k mod users + 1 with HARQ process (k div users) mod 2 (users > 1: a shared cell, as each
        client's receiver hears it)."""
        phy = self.phy
        tbb = phy.mcs_set.tb_bytes(mcs, self.num)
        out = []
        ndi: dict = {}  # per (user, HARQ process): each slot a new TB
        for k in range(n):
            u, p = k % users + 1, k // users % 2
            ndi[u, p] = not ndi.get((u, p), False)
            h = phy.header_fields(user=u, mcs=mcs, harq_process=p, ndi=ndi[u, p], rv=0,
                                  tb_bytes=tbb, slot=k)
            tb = self.rng.bytes(tbb)
            x = self.mod.modulate(self.hdr.encode(h), self.enc.encode(
                tb, mcs=mcs, rv=0, scrambler_seed=phy.scrambler_seed_for_slot(k)))
            out.append((h, tb, x))
        return out


def bench_tx(s: _PhySetup, min_time: float, mcs: int = 7) -> dict:
    phy = s.phy
    tbb = phy.mcs_set.tb_bytes(mcs, s.num)
    tbs = [s.rng.bytes(tbb) for _ in range(64)]
    hdrs = [phy.header_fields(user=1, mcs=mcs, harq_process=k % 2, ndi=bool(k % 4 < 2),
                              rv=0, tb_bytes=tbb, slot=k) for k in range(64)]
    seeds = [phy.scrambler_seed_for_slot(k) for k in range(64)]
    enc, hc, mod = s.enc.encode, s.hdr.encode, s.mod.modulate
    ss = s.num.slot_samples

    def step():
        for k in range(64):
            mod(hc(hdrs[k]), enc(tbs[k], mcs=mcs, rv=0, scrambler_seed=seeds[k]))
        return 64 * ss

    r = _rate(step, min_time)
    r.update(mcs=mcs, tb_bytes=tbb)
    return r


def _rx_stream(s: _PhySetup, mcs: int, snr_db: float, users: int = 1, n_slots: int = 200):
    """The rx benches' input: n_slots back-to-back slots (s.slots) after 400 zeros, through
    the channel emulator (flat, AWGN at snr_db); and {slot: TB} of the slots user 1 is sent."""
    np, phy = s.np, s.phy
    slots = s.slots(mcs, n_slots, users)
    tx = np.concatenate([np.zeros(400, np.complex64)] + [x for _, _, x in slots])
    em = phy.channel_emulator(phy.channel_emulator_params(
        numerology=s.num.params, seed=11, users=[phy.emulator_user_params(
            mean_snr_db=snr_db, fading=phy.fading_model.none)]))
    return em.process(tx)[0], {int(h.slot): tb for h, tb, _ in slots if int(h.user) == 1}


def bench_rx(s: _PhySetup, min_time: float, mcs: int = 7, snr_db: float = 25.0,
             users: int = 1) -> dict:
    """The receiver that runs: slot_receiver (slot_rx's chain without the flowgraph) as the
    block drives it, header first: detect() on 4096-sample chunks as work() is called, then
    receive() on each detection, which decodes the header and completes the demodulation
    and the HARQ decode only of a slot addressed to user 1 (users > 1: one slot in `users`
    is). Every TB sent to user 1 must decode, bit for bit."""
    phy = s.phy
    stream, sent = _rx_stream(s, mcs, snr_db, users)
    chunk = 4096
    stats = {"slots": 0, "addressed": 0, "ok": 0}

    def step():
        rcv = phy.slot_receiver(s.num, 1)  # fresh: the stream's slot numbers start again
        found = addressed = ok = 0
        for i in range(0, len(stream), chunk):
            for d in rcv.detect(stream[i:i + chunk]):
                found += 1
                rec, _ = rcv.receive(d)
                if rec.report.addressed:
                    addressed += 1
                    ok += rec.report.crc_ok and rec.report.tb == sent.get(int(rec.report.slot))
        stats["slots"] += found
        stats["addressed"] += addressed
        stats["ok"] += ok
        return len(stream)

    r = _rate(step, min_time)
    want = stats["slots"] // users
    if stats["slots"] == 0 or stats["ok"] < 0.99 * want:
        raise RuntimeError(f"bench rx: {stats['ok']} TBs of user 1 decoded of {want} sent in "
                           f"{stats['slots']} slots detected")
    r.update(mcs=mcs, snr_db=snr_db, users=users, receiver="slot_receiver",
             tbs_decoded=stats["ok"], slots_detected=stats["slots"])
    return r


def bench_rx_parts(s: _PhySetup, min_time: float, mcs: int = 7, snr_db: float = 25.0) -> dict:
    """The receiver's parts chained in Python (the figure before `rx` measured
    slot_receiver): slot_sync + ofdm_demodulator (every slot in full) + header_codec.decode
    + tb_decoder.decode, every slot addressed to user 1."""
    phy = s.phy
    stream, sent = _rx_stream(s, mcs, snr_db)
    sync = phy.slot_sync(s.num)
    dem = phy.ofdm_demodulator(s.num)
    bufs = [s.dec.make_harq_buffer() for _ in range(2)]
    dec, hdec, seed_of = s.dec.decode, s.hdr.decode, phy.scrambler_seed_for_slot
    chunk = 4096
    stats = {"slots": 0, "ok": 0}

    def step():
        ok = 0
        found = 0
        for i in range(0, len(stream), chunk):
            for d in sync.push(stream[i:i + chunk]):
                found += 1
                r = dem.demodulate(d.samples)
                try:
                    h = hdec(r.header, r.header_nvar)
                except ValueError:
                    continue
                res = dec(r.payload, r.payload_nvar, bufs[h.harq_process], mcs=h.mcs, rv=h.rv,
                          tb_bytes=h.tb_bytes, ndi=h.ndi, scrambler_seed=seed_of(h.slot))
                ok += res.crc_ok and res.bytes == sent[int(h.slot)]
        stats["slots"] += found
        stats["ok"] += ok
        return len(stream)

    r = _rate(step, min_time)
    if stats["ok"] < 0.99 * stats["slots"] or stats["slots"] == 0:
        raise RuntimeError(f"bench rx_parts: only {stats['ok']} of {stats['slots']} TBs "
                           "decoded")
    r.update(mcs=mcs, snr_db=snr_db, tbs_decoded=stats["ok"], slots_detected=stats["slots"])
    return r


def bench_emulator(s: _PhySetup, min_time: float, users: int = 4) -> dict:
    np, phy = s.np, s.phy
    x = np.concatenate([x for _, _, x in s.slots(0, 10)])[:16384]
    ups = [phy.emulator_user_params(mean_snr_db=15.0, fading=phy.fading_model.jakes,
                                    doppler_hz=60.0, oscillators=20) for _ in range(users)]
    em = phy.channel_emulator(phy.channel_emulator_params(numerology=s.num.params, users=ups,
                                                          seed=3))
    proc = em.process

    def step():
        for _ in range(8):
            proc(x)
        return 8 * len(x) * users

    r = _rate(step, min_time)
    r.update(users=users, fading="jakes G=20 f_d 60 Hz + AWGN")
    return r


def _ofdm_burst_stream(np, n_bursts: int = 60, packet_bytes: int = 200, gap: int = 67,
                       snr_db: float = 25.0, seed: int = 5):
    """digital.ofdm_tx bursts of the 802.11a-like numerology, gap zeros after each, AWGN
    at snr_db Es/N0 per occupied subcarrier (measured on the bursts' mean power)."""
    import pmt
    from gnuradio import blocks, digital, gr

    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, n_bursts * packet_bytes, dtype=np.uint8)
    tb = gr.top_block()
    src = blocks.vector_source_b(data.tolist(), False)
    s2t = blocks.stream_to_tagged_stream(gr.sizeof_char, 1, packet_bytes, "packet_len")
    tx = digital.ofdm_tx(fft_len=64, cp_len=16, packet_length_tag_key="packet_len",
                         bps_header=1, bps_payload=2, rolloff=0)
    snk = blocks.vector_sink_c()
    tb.connect(src, s2t, tx, snk)
    tb.run()
    y = np.array(snk.data(), dtype=np.complex64)
    tags = sorted((t.offset, int(pmt.to_long(t.value))) for t in snk.tags()
                  if pmt.symbol_to_string(t.key) == "packet_len")
    parts = []
    for off, ln in tags:
        parts.append(y[off:off + ln])
        parts.append(np.zeros(gap, np.complex64))
    burst_len = tags[0][1] if tags else 0
    x = np.concatenate(parts)
    p = float(np.mean(np.abs(y) ** 2))
    sigma2 = p * (64 / 52) / 10 ** (snr_db / 10)
    x = x + np.sqrt(sigma2 / 2) * (rng.standard_normal(len(x)) + 1j * rng.standard_normal(len(x)))
    return x.astype(np.complex64), len(tags), burst_len


def bench_ref_ofdm_rx(np, min_time: float) -> dict:
    from gnuradio import blocks, digital, gr

    x, n_bursts, burst_len = _ofdm_burst_stream(np)
    xs = x.tolist()
    decoded = {"bytes": 0, "in": 0}

    def run(n):
        tb = gr.top_block()
        src = blocks.vector_source_c(xs, True)
        head = blocks.head(gr.sizeof_gr_complex, n)
        rx = digital.ofdm_rx(fft_len=64, cp_len=16, packet_length_tag_key="packet_len",
                             bps_header=1, bps_payload=2)
        snk = blocks.vector_sink_b()
        tb.connect(src, head, rx, snk)
        cpu, wall = _timed_run(tb)
        decoded["bytes"] += len(snk.data())
        decoded["in"] += n
        return n, cpu, wall

    r = _gr_rate(run, len(x), min_time)
    # every burst of the input must come out (200 bytes each)
    expect = decoded["in"] / len(x) * n_bursts * 200
    if decoded["bytes"] < 0.9 * expect:
        raise RuntimeError(f"bench ref_ofdm_rx: decoded {decoded['bytes']} bytes of about "
                           f"{expect:.0f}: the reference receiver is not working")
    r.update(decoded_fraction=round(decoded["bytes"] / expect, 3), burst_samples=burst_len,
             bursts_per_loop=n_bursts, packet_bytes=200, bps_payload=2)
    return r


def bench_ref_fading(s: _PhySetup, min_time: float, n_sinusoids: int = 8) -> dict:
    from gnuradio import analog, blocks, channels, gr

    np = s.np
    x = np.concatenate([x for _, _, x in s.slots(0, 10)]).tolist()
    sigma = float(np.sqrt(s.num.noise_variance_for_snr_db(15.0)))

    def run(n):
        tb = gr.top_block()
        src = blocks.vector_source_c(x, True)
        head = blocks.head(gr.sizeof_gr_complex, n)
        fad = channels.fading_model(n_sinusoids, 60.0 / s.sample_rate, False, 4.0, 3)
        noise = analog.noise_source_c(analog.GR_GAUSSIAN, sigma, 5)
        add = blocks.add_cc()
        snk = blocks.null_sink(gr.sizeof_gr_complex)
        tb.connect(src, head, fad, (add, 0))
        tb.connect(noise, (add, 1))
        tb.connect(add, snk)
        cpu, wall = _timed_run(tb)
        return n, cpu, wall

    r = _gr_rate(run, 2_000_000, min_time)
    r.update(sinusoids=n_sinusoids, fd_hz=60.0)
    return r


def bench_rx_block(s: _PhySetup, min_time: float, mcs: int = 7, snr_db: float = 25.0) -> dict:
    """Our slot_rx block in a flowgraph: vector_source (the rx bench's stream) -> head ->
    slot_rx; every TB must decode (the block's counters)."""
    from gnuradio import blocks, gr

    phy = s.phy
    stream = _rx_stream(s, mcs, snr_db)[0].tolist()
    counts = {"addressed": 0, "ok": 0}

    def run(n):
        tb = gr.top_block()
        src = blocks.vector_source_c(stream, True)
        head = blocks.head(gr.sizeof_gr_complex, n)
        rx = phy.slot_rx(s.profile, s.sample_rate, user_id=1)
        tb.connect(src, head, rx)
        cpu, wall = _timed_run(tb)
        counts["addressed"] += rx.addressed()
        counts["ok"] += rx.tb_ok()
        return n, cpu, wall

    r = _gr_rate(run, len(stream) * 2, min_time)
    if counts["addressed"] == 0 or counts["ok"] < 0.99 * counts["addressed"]:
        raise RuntimeError(f"bench rx_block: {counts['ok']} of {counts['addressed']} TBs")
    r.update(mcs=mcs, snr_db=snr_db, tbs_decoded=counts["ok"])
    return r


def bench_emulator_block(s: _PhySetup, min_time: float, users: int = 4) -> dict:
    """Our channel_emulator_cc block: vector_source -> head -> emulator -> null sinks."""
    from gnuradio import blocks, gr

    np, phy = s.np, s.phy
    x = np.concatenate([x for _, _, x in s.slots(0, 10)]).tolist()
    ups = [phy.emulator_user_params(mean_snr_db=15.0, fading=phy.fading_model.jakes,
                                    doppler_hz=60.0, oscillators=20) for _ in range(users)]
    params = phy.channel_emulator_params(numerology=s.num.params, users=ups, seed=3)

    def run(n):
        tb = gr.top_block()
        src = blocks.vector_source_c(x, True)
        head = blocks.head(gr.sizeof_gr_complex, n)
        em = phy.channel_emulator_cc(params)
        tb.connect(src, head, em)
        for u in range(users):
            tb.connect((em, u), blocks.null_sink(gr.sizeof_gr_complex))
        cpu, wall = _timed_run(tb)
        return n * users, cpu, wall

    r = _gr_rate(run, 2_000_000, min_time)
    r.update(users=users)
    return r


def run_phy_bench(out_file: str, min_time: float = 3.0, build: str | None = None) -> int:
    if build and (Path(build) / "python").is_dir() and "gnuradio" not in sys.modules:
        sys.path.insert(0, str((Path(build) / "python").resolve()))  # that build's PHY
    cpu = _pin_one_core()
    try:
        from gnuradio import gr, oppsched  # noqa: F401
    except ImportError as exc:
        print(f"bench phy: gnuradio.oppsched not importable ({exc}): run `make build`",
              file=sys.stderr)
        return 1
    s = _PhySetup()
    res: dict = {}
    steps = [
        ("tx", lambda: bench_tx(s, min_time)),
        ("rx", lambda: bench_rx(s, min_time)),
        ("rx_mcs0", lambda: bench_rx(s, min_time, mcs=0)),
        ("rx_4users", lambda: bench_rx(s, min_time, users=4)),
        ("rx_parts", lambda: bench_rx_parts(s, min_time)),
        ("emulator", lambda: bench_emulator(s, min_time)),
        ("emulator_1user", lambda: bench_emulator(s, min_time, users=1)),
        ("ref_ofdm_rx", lambda: bench_ref_ofdm_rx(np, min_time)),
        ("ref_fading", lambda: bench_ref_fading(s, min_time)),
        ("ref_fading_n20", lambda: bench_ref_fading(s, min_time, 20)),
    ]
    if hasattr(s.phy, "slot_rx") and hasattr(s.phy, "channel_emulator_cc"):
        steps += [("rx_block", lambda: bench_rx_block(s, min_time)),
                  ("emulator_block", lambda: bench_emulator_block(s, min_time))]
    for name, fn in steps:
        t0 = time.perf_counter()
        print(f"bench phy: {name} ...", file=sys.stderr, flush=True)
        res[name] = fn()
        print(f"bench phy: {name}: {res[name]['msps']:.2f} Msps "
              f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    out = {
        "tx_msps": round(res["tx"]["msps"], 3),
        "rx_msps": round(res["rx"]["msps"], 3),
        "rx_msps_mcs0": round(res["rx_mcs0"]["msps"], 3),
        "rx_msps_4users": round(res["rx_4users"]["msps"], 3),
        "rx_parts_msps": round(res["rx_parts"]["msps"], 3),
        "emulator_msps_per_user": round(res["emulator"]["msps"], 3),
        "emulator_msps_1user": round(res["emulator_1user"]["msps"], 3),
        "ref_ofdm_rx_msps": round(res["ref_ofdm_rx"]["msps"], 3),
        "ref_fading_msps": round(res["ref_fading"]["msps"], 3),
        "ref_fading_msps_n20": round(res["ref_fading_n20"]["msps"], 3),
    }
    if "rx_block" in res:  # the same chains as GNU Radio blocks (gr-oppsched)
        out["rx_block_msps"] = round(res["rx_block"]["msps"], 3)
        out["emulator_block_msps_per_user"] = round(res["emulator_block"]["msps"], 3)
    out["rx_vs_ref_ofdm_rx"] = round(out["rx_msps"] / out["ref_ofdm_rx_msps"], 2)
    out["rx_4users_vs_ref_ofdm_rx"] = round(out["rx_msps_4users"] / out["ref_ofdm_rx_msps"], 2)
    out["rx_parts_vs_ref_ofdm_rx"] = round(out["rx_parts_msps"] / out["ref_ofdm_rx_msps"], 2)
    out["emulator_vs_ref_fading"] = round(out["emulator_msps_per_user"] / out["ref_fading_msps"],
                                          2)
    if "rx_block" in res:
        out["rx_block_vs_ref_ofdm_rx"] = round(out["rx_block_msps"] / out["ref_ofdm_rx_msps"], 2)
        out["emulator_block_vs_ref_fading"] = round(
            out["emulator_block_msps_per_user"] / out["ref_fading_msps"], 2)
    out["targets"] = {"rx_vs_ref_ofdm_rx": 5.0, "emulator_vs_ref_fading": 3.0}
    out["targets_met"] = {k: out[k] >= v for k, v in out["targets"].items()}
    out["realtime_clients_at_1msps"] = {
        "rx": round(out["rx_msps"] / s.sample_rate * 1e6, 1),
        "emulator_users": round(out["emulator_msps_per_user"] / s.sample_rate * 1e6, 1),
    }
    out["details"] = res
    out["setup"] = {
        "profile": s.profile, "sample_rate_hz": s.sample_rate, "cpu_pinned": cpu,
        "min_time_s": min_time, "timer": "time.process_time (all threads)",
        "machine": platform.machine(), "python": platform.python_version(),
        "gnuradio": gr.version(), "load_average": list(os.getloadavg()),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    path = Path(out_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in ("details", "setup")}, indent=2))
    print(f"bench phy: -> {path}", file=sys.stderr)
    return 0
