"""`oppsched bench`: runs the Google Benchmark binaries of the build and prints a table, then
(unless `oppsched bench cpp`) the PHY chain bench (`oppsched bench phy`).

Figures are written as JSON beside each other in --out; they are never part of the tests.

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
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BINARIES = [("mac", "host/mac_bench"), ("phy_bench", "gr-oppsched/lib/phy_bench")]


def run_bench(build: str, out: str, flt: str = "", phy: bool = False,
              min_time: float = 3.0) -> int:
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    found = 0
    for name, rel in BINARIES:
        exe = Path(build) / rel
        if not exe.exists():
            print(f"bench: {exe} not built, skipped", file=sys.stderr)
            continue
        found += 1
        js = outdir / f"{name}.json"
        cmd = [str(exe), f"--benchmark_out={js}", "--benchmark_out_format=json",
               "--benchmark_min_time=0.2"]
        if flt:
            cmd.append(f"--benchmark_filter={flt}")
        print(f"bench: {' '.join(cmd)}", file=sys.stderr)
        rc = subprocess.call(cmd)
        if rc:
            print(f"bench: {exe} exited {rc}", file=sys.stderr)
            return rc
        data = json.loads(js.read_text())
        print(f"\n{name}: {len(data['benchmarks'])} benchmarks -> {js}")
    if not found and not phy:
        print("bench: no benchmark binary found: run `make build` first", file=sys.stderr)
        return 1
    if phy:
        # the PHY chain bench needs the build's Python packages (gnuradio.oppsched)
        py_dir = str((Path(build) / "python").resolve())
        env = dict(os.environ)
        env["PYTHONPATH"] = py_dir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                      else "")
        cmd = [sys.executable, "-m", "oppsched", "bench", "phy", "--build", build, "--out",
               str(outdir / "phy.json"), "--min-time", str(min_time)]
        print(f"bench: {' '.join(cmd)}", file=sys.stderr)
        # a separate process: the CPU affinity it pins must not stick to this one
        rc = subprocess.call(cmd, env=env)
        if rc:
            print(f"bench: phy chain bench exited {rc}", file=sys.stderr)
            return rc
    return 0


# ---------------------------------------------------------------------------------------
# PHY chain bench


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


# ---------------------------------------------------------------------------------------
# Capacity bench: the sample loopback in real time, with real TCP

CAPACITY_EXPERIMENT = {
    "experiment": "bench-capacity",
    "description": "oppsched bench capacity: N clients, one bulk TCP flow each, over the "
                   "sample-level PHY at one sample rate",
    "kind": "testbed",
    "seed": 1,
    "phy": {"mode": "sample", "profile": "3ms", "lead_slots": 4},
    "queue": {"mode": "per_user"},
    "scheduler": {"kind": "pf"},
    "link_adaptation": {"olla": True, "target_bler": 0.1},
    "tcp": {"congestion_control": "cubic", "sack": True},
    "capture": {"pcaps": False},
}


def capacity_experiment(rate: float, clients: int, duration: float, profile: str = "3ms",
                        snr_db: float = 25.0, rtt_ms: float = 20.0,
                        rt_priority: int = 20) -> dict:
    """The testbed experiment of one capacity point: `clients` devices at a constant
    `snr_db` (AWGN: the top MCS, the largest TBs, the most decoding work per slot), each with
    one iperf3 bulk flow from its own server (rtt_ms), AP queues of two bandwidth-delay
    products of the whole link (every queue stays backlogged). rt_priority > 0: the apd and
    the clients at SCHED_FIFO rt_priority and the PHY at rt_priority + 10, as a lab runs
    them (0: normal scheduling)."""
    import copy

    from oppsched import mac
    from oppsched.testbed import daemonconf
    from oppsched.linkmodel import table_at_rate

    src, src_rate = daemonconf.mcs_table_source(profile, "ldpc", rate)
    top = max(mac.mcs_table.from_csv(table_at_rate(src, profile, rate, "ldpc", src_rate))
              .rates_bps)
    limit = max(60000, int(2 * top * (rtt_ms + 50.0) / 1e3 / 8))
    e = copy.deepcopy(CAPACITY_EXPERIMENT)
    e["duration_s"] = float(duration)
    e["phy"]["profile"] = profile
    e["phy"]["sample"] = {"sample_rate": float(rate)}
    e["devices"] = [{"name": f"R{i + 1}", "channel": {"model": "awgn", "mean_snr_db": snr_db,
                                                      "doppler_hz": 0.0}}
                    for i in range(clients)]
    e["servers"] = [{"name": f"S{i + 1}", "rtt_ms": rtt_ms} for i in range(clients)]
    e["flows"] = [{"id": f"f{i + 1}", "server": f"S{i + 1}", "device": f"R{i + 1}"}
                  for i in range(clients)]
    e["queue"]["limit_bytes"] = limit
    if rt_priority > 0:
        e["topology"] = {"apd_rt_priority": rt_priority, "client_rt_priority": rt_priority}
        e["extra"] = {"phy": {"timing": {"rt_priority": rt_priority + 10}}}
    return e


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """{tid: (thread name, CPU seconds (utime + stime))} of every live thread of `pid` (GNU
    Radio names a block's thread after the block, e.g. slot_rx5, channel_emulator_c3)."""
    out: dict[int, tuple[str, float]] = {}
    tck = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        f = stat[stat.rindex(")") + 2:].split()
        out[int(task.name)] = (name, (int(f[11]) + int(f[12])) / tck)
    return out


def component_of(thread: str) -> str:
    """The PHY component a thread belongs to: its GNU Radio block's name without the
    block id (slot_rx12 -> slot_rx), or the thread's name."""
    import re

    m = re.fullmatch(r"([A-Za-z_]+?)_?\d+", thread)
    return m.group(1) if m else thread


class _PhySampler:
    """Samples the PHY process's per-thread CPU once a second while a run lasts (the PHY's
    pid from the run folder's processes.json); keeps every thread's last value, so the
    block threads that end when the flowgraph stops still count."""

    def __init__(self, rundir: Path):
        import threading

        self.rundir = rundir
        self.last: dict[int, tuple[str, float]] = {}
        self.wall = 0.0
        self._t0: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _pid(self) -> int | None:
        try:
            rows = json.loads((self.rundir / "processes.json").read_text())
        except (OSError, ValueError):
            return None
        for r in rows:
            if r.get("name") == "phy" and r.get("exit_code") is None:
                return int(r["pid"])
        return None

    def _loop(self) -> None:
        pid = None
        while not self._stop.wait(1.0):
            now = self._pid()  # re-read: the run may start the PHY more than once
            if now is None:
                continue
            sample = thread_cpu(now)
            if sample:
                if now != pid:  # a new PHY process: its CPU from its start
                    pid, self._t0, self.last = now, time.monotonic(), {}
                self.last.update(sample)
                self.wall = time.monotonic() - self._t0

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def components(self) -> dict[str, float]:
        """CPU share (cores) per component over the PHY's life as sampled."""
        out: dict[str, float] = {}
        for name, c in self.last.values():
            k = component_of(name)
            out[k] = out.get(k, 0.0) + c
        life = self.wall + 1.0  # from before the first sample to the last one, about
        return {k: round(v / life, 3) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def capacity_point(rate: float, clients: int, duration: float, out: Path, profile: str,
                   snr_db: float, rt_priority: int = 20) -> dict:
    """One run of the capacity bench; its row (late slots, CPU per component, goodput)."""
    import yaml

    from oppsched.run import runner, sweep

    out.mkdir(parents=True, exist_ok=True)
    exp = out / "experiment.yaml"
    exp.write_text(yaml.safe_dump(capacity_experiment(rate, clients, duration, profile,
                                                      snr_db, rt_priority=rt_priority),
                                  sort_keys=False))
    _, _, cfg = runner.load_experiment(exp)
    cfg = dict(cfg, variant="")
    rundir = out / "run"
    load0 = os.getloadavg()
    row = {"sample_rate": rate, "clients": clients, "duration_s": duration,
           "load_average_1m_start": round(load0[0], 2)}
    try:
        with _PhySampler(rundir) as samp:
            s = sweep.run_point(cfg, rundir)
    except Exception as exc:  # noqa: BLE001 -- a failed point is a row saying why
        row.update(error=f"{type(exc).__name__}: {exc}", late_slots=None, ok=False)
        return row
    phy = json.loads((rundir / "phy.stats.json").read_text())
    goodput = sum(f["goodput_bps"] or 0.0 for f in s["flows"])
    mac_bps = sum(u["mac_throughput_bps"] or 0.0 for u in s["users"])
    row.update({
        "late_slots": int(phy["late"]), "slots": int(phy["slots"]),
        "overruns": int(phy.get("overruns", 0)),
        "tb_ok": sum(u["tb_ok"] for u in phy["users"]),
        "tb_failed": sum(u["tb_failed"] for u in phy["users"]),
        "goodput_bps": round(goodput), "mac_bps": round(mac_bps),
        "goodput_per_mac": round(goodput / mac_bps, 3) if mac_bps else None,
        "phy_cpu_cores": samp.components(),
        "phy_cpu_total_cores": round(sum(samp.components().values()), 3),
        "load_average_1m_end": round(os.getloadavg()[0], 2),
        "error": None,
    })
    # real time held: no grant missed its slot (late: the MAC and PHY kept their slot
    # exchange); strictly, also no slot built more than a slot after its due time
    # (overruns: the PHY's clock fell behind, though every slot still carried its grant)
    row["ok"] = row["late_slots"] == 0
    row["strict"] = row["ok"] and row["overruns"] == 0
    (out / "row.json").write_text(json.dumps(row, indent=1) + "\n")
    return row


def capacity_table(rows: list[dict], rates: list[float], duration: float) -> tuple[str, str]:
    """(CSV, markdown) of the largest N with 0 late slots at each rate, the same with 0
    overruns too, and every run."""
    def largest(r, key):
        ok = [x["clients"] for x in rows if x["sample_rate"] == r and x.get(key)]
        return max(ok) if ok else 0

    best = {r: largest(r, "ok") for r in rates}
    strict = {r: largest(r, "strict") for r in rates}
    csv = ["sample_rate_hz,max_clients_zero_late,max_clients_zero_late_zero_overruns,"
           "duration_s"]
    csv += [f"{r:g},{best[r]},{strict[r]},{duration:g}" for r in rates]
    md = [f"Largest N with 0 late slots over {duration:g} s, and with no overrun either (the "
          "load average when it ran is in the runs' rows):", "",
          "| sample rate | max clients, 0 late slots | and 0 overruns |", "| --- | --- | --- |"]
    md += [f"| {r / 1e6:g} Msps | {best[r]} | {strict[r]} |" for r in rates]
    md += ["", "| rate | N | late / overruns / slots | PHY CPU (cores) by component | goodput (Mb/s) | "
           "MAC (Mb/s) | goodput/MAC | load avg 1 min (start/end) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for x in rows:
        if x.get("error"):
            md.append(f"| {x['sample_rate'] / 1e6:g} Msps | {x['clients']} | failed: "
                      f"{x['error'][:80]} | | | | | {x['load_average_1m_start']} |")
            continue
        comp = ", ".join(f"{k} {v:.2f}" for k, v in list(x["phy_cpu_cores"].items())[:5])
        md.append(f"| {x['sample_rate'] / 1e6:g} Msps | {x['clients']} | {x['late_slots']} / "
                  f"{x['overruns']} / {x['slots']} | {comp} (total {x['phy_cpu_total_cores']:.2f}) | "
                  f"{x['goodput_bps'] / 1e6:.2f} | {x['mac_bps'] / 1e6:.2f} | "
                  f"{x['goodput_per_mac']} | {x['load_average_1m_start']} / "
                  f"{x['load_average_1m_end']} |")
    return "\n".join(csv) + "\n", "\n".join(md) + "\n"


def run_capacity_bench(out: str, rates: list[float], clients: list[int], duration: float,
                       profile: str = "3ms", snr_db: float = 25.0,
                       rt_priority: int = 20, keep_going: bool = False) -> int:
    """For each rate, N = clients in ascending order until the first N with a late slot
    (or a failed run; with keep_going every N, for the CPU each client adds); writes
    capacity.csv (the largest N per rate), capacity_runs.json (every run) and the table in
    Markdown into `out`."""
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for rate in rates:
        for n in sorted(clients):
            print(f"bench capacity: {rate / 1e6:g} Msps, {n} client(s), {duration:g} s ...",
                  file=sys.stderr, flush=True)
            row = capacity_point(rate, n, duration, outdir / f"{rate / 1e6:g}msps-{n}",
                                 profile, snr_db, rt_priority)
            rows.append(row)
            print(f"bench capacity: {rate / 1e6:g} Msps, {n}: late {row.get('late_slots')}"
                  f", goodput {row.get('goodput_bps')}, PHY CPU "
                  f"{row.get('phy_cpu_total_cores')}, error {row.get('error')}",
                  file=sys.stderr, flush=True)
            if not row["ok"] and not keep_going:
                break
    csv, md = capacity_table(rows, rates, duration)
    (outdir / "capacity.csv").write_text(csv)
    (outdir / "capacity.markdown").write_text(md)
    (outdir / "capacity_runs.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(md)
    print(f"bench capacity: -> {outdir}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------
# Live bench: what `--metrics` costs a real-time run (docs/howto/watch-a-run.md)

LIVE_EXPERIMENT = "experiments/clamp/fading-5msps.yaml"  # `make run`'s, at 5 Msps


def _wait_ready(url: str, proc, what: str, timeout: float = 60.0) -> None:
    import urllib.request

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"bench live: {what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"bench live: {what} not ready at {url} within {timeout:g} s")


def _browser(address: str):
    """Headless Chromium with the live page open; None and why if unavailable."""
    from oppsched.run.live import headless_chromium

    d, why = headless_chromium()
    if d is not None:
        d.get(f"http://{address}/")
    return d, why


def run_live_bench(out: str, experiment: str = LIVE_EXPERIMENT, duration: float = 60.0,
                   rt_priority: int = 20) -> int:
    """The default experiment at 5 Msps in real time (every variant, `duration` s each, the
    apd and clients at SCHED_FIFO rt_priority, the PHY 10 above) while its `--metrics`
    endpoint is scraped by Debian's prometheus every second and the live page is open in
    headless Chromium (polling /live.json every second). Reports the CPU the endpoint spent
    serving (its request threads' CPU time, as a share of one core over the runs), the
    requests by path, and each run's late slots and overruns; the bench passes when no slot
    was late and serving stayed within 2 % of a core."""
    import shutil
    import subprocess
    import tempfile

    from oppsched.run.live import MetricsServer
    from oppsched.run.runner import run_experiment

    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    prom = shutil.which("prometheus")
    if prom is None:
        print("bench live: the prometheus binary is not on PATH (Debian package prometheus, "
              "installed by tools/bootstrap.sh)", file=sys.stderr)
        return 1
    metrics = MetricsServer("127.0.0.1:0")
    tmp = Path(tempfile.mkdtemp(prefix="oppsched-bench-live-"))
    web = _free_port()
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n"
        f"  - job_name: oppsched\n    static_configs: [{{targets: ['{metrics.address}']}}]\n")
    log = open(outdir / "prometheus.log", "wb")
    server = subprocess.Popen([prom, f"--config.file={tmp / 'prometheus.yml'}",
                               f"--web.listen-address=127.0.0.1:{web}",
                               f"--storage.tsdb.path={tmp / 'tsdb'}"],
                              stdout=log, stderr=subprocess.STDOUT)
    driver = None
    overrides = [f"topology.apd_rt_priority={rt_priority}",
                 f"topology.client_rt_priority={rt_priority}",
                 f"extra.phy={{timing: {{rt_priority: {rt_priority + 10}}}}}"]
    try:
        _wait_ready(f"http://127.0.0.1:{web}/-/ready", server, "prometheus")
        driver, why = _browser(metrics.address)
        if driver is None:
            print(f"bench live: no browser ({why}); the page is not open", file=sys.stderr)
        print(f"bench live: {experiment}, {duration:g} s per variant, metrics at "
              f"{metrics.address}, prometheus scraping every 1 s"
              + (", the live page open in headless Chromium" if driver else ""),
              file=sys.stderr, flush=True)
        t0 = time.monotonic()
        runs = run_experiment(experiment, outdir / "run", overrides, duration, metrics=metrics)
        wall = time.monotonic() - t0
        scrapes = _prom_scrapes(f"http://127.0.0.1:{web}")
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        metrics.close()
        shutil.rmtree(tmp, ignore_errors=True)
    cost = dict(metrics.cost)
    cpu = sum(c for _, c in cost.values())
    rows = []
    for name, s, rundir in runs:
        phy = json.loads((Path(rundir) / "phy.stats.json").read_text())
        rows.append({"variant": name, "slots": int(phy["slots"]), "late_slots": int(phy["late"]),
                     "overruns": int(phy.get("overruns", 0)),
                     "apd_late_slots": (s.get("slots") or {}).get("late")})
    res = {
        "experiment": experiment, "duration_s_per_variant": duration,
        "wall_s": round(wall, 1), "serving_cpu_s": round(cpu, 3),
        "serving_cores": round(cpu / wall, 5),
        "requests": {p: {"n": n, "cpu_ms_each": round(1e3 * c / n, 3)}
                     for p, (n, c) in sorted(cost.items())},
        "prometheus_scrapes": scrapes, "page_open": driver is not None,
        "runs": rows, "load_average": list(os.getloadavg()),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    res["ok"] = (all(r["late_slots"] == 0 for r in rows) and res["serving_cores"] <= 0.02
                 and driver is not None)
    (outdir / "live.json").write_text(json.dumps(res, indent=2) + "\n")
    print(f"bench live: serving took {cpu:.2f} CPU s over {wall:.0f} s = "
          f"{100 * cpu / wall:.2f} % of a core (limit 2 %); requests: "
          + ", ".join(f"{p} {v['n']} x {v['cpu_ms_each']} ms" for p, v in
                      res["requests"].items())
          + f"; prometheus stored {scrapes} scrapes")
    for r in rows:
        print(f"bench live: {r['variant']}: {r['late_slots']} late slots, {r['overruns']} "
              f"overruns of {r['slots']}")
    print(f"bench live: {'PASS' if res['ok'] else 'FAIL'} -> {outdir / 'live.json'}")
    return 0 if res["ok"] else 1


def _free_port() -> int:
    """A TCP port free on loopback when asked."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prom_scrapes(api: str) -> int | None:
    """How many scrapes of the endpoint prometheus stored (count_over_time of `up`)."""
    import urllib.parse
    import urllib.request

    q = 'count_over_time(up{job="oppsched"}[1h])'
    try:
        with urllib.request.urlopen(f"{api}/api/v1/query?" + urllib.parse.urlencode(
                {"query": q}), timeout=10) as r:
            body = json.loads(r.read())
        return int(float(body["data"]["result"][0]["value"][1]))
    except (OSError, ValueError, KeyError, IndexError):
        return None
