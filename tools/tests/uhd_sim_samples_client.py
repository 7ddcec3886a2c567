"""A timed TX burst through UHD's TX streamer, received through a UHD RX streamer of the
same simulated device (tools/tests/test_uhd_sim_samples.py runs it against UHD's device
simulator with AirSink and AirSource, in a process of its own).

    uhd_sim_samples_client.py DEVICE_ARGS RATE SOURCE_LOG OUT.npy [--lead S] [--samples N]
                              [--amplitude A] [--seed SEED]

Opens the device, sets RX and TX rate, starts a continuous RX stream, reads the stream's
start (t0, CLOCK_MONOTONIC) from the source's log, sends a seeded QPSK burst of N samples
(amplitude A) timed at t0 + K / RATE, K the first sample at least `lead` seconds ahead of
now, receives until K + N + 2000 samples have arrived, and writes them to OUT.npy. Prints
one JSON line: K, tx_time, what was received and sent, the RX errors seen, and how long
receiving took (its rate).
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

TAIL = 2000  # samples received after the burst's end


def burst(n: int, amplitude: float, seed: int) -> np.ndarray:
    """A seeded QPSK sequence of n samples, |x| = amplitude (the test rebuilds it)."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 4, n)
    return (amplitude * np.exp(1j * (np.pi / 4 + np.pi / 2 * bits))).astype(np.complex64)


def read_log(path: Path, event: str, deadline: float) -> dict:
    while time.monotonic() < deadline:
        if path.exists():
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                if rec.get("event") == event:
                    return rec
        time.sleep(0.02)
    raise TimeoutError(f"{path}: no {event!r} record")


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("args")
    p.add_argument("rate", type=float)
    p.add_argument("source_log", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--lead", type=float, default=1.0)
    p.add_argument("--samples", type=int, default=4000)
    p.add_argument("--amplitude", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--timeout", type=float, default=90.0)
    a = p.parse_args(argv)

    import uhd

    out = {}
    usrp = uhd.usrp.MultiUSRP(a.args)
    usrp.set_rx_rate(a.rate, 0)
    usrp.set_tx_rate(a.rate, 0)
    out["rates"] = [usrp.get_rx_rate(0), usrp.get_tx_rate(0)]
    sargs = uhd.usrp.StreamArgs("fc32", "sc16")
    sargs.channels = [0]
    rx = usrp.get_rx_stream(sargs)
    tx = usrp.get_tx_stream(sargs)
    out["max_num_samps"] = [rx.get_max_num_samps(), tx.get_max_num_samps()]
    md = uhd.types.RXMetadata()
    buf = np.zeros(rx.get_max_num_samps(), dtype=np.complex64)
    cmd = uhd.types.StreamCMD(uhd.types.StreamMode.start_cont)
    cmd.stream_now = True
    rx.issue_stream_cmd(cmd)
    deadline = time.monotonic() + a.timeout
    chunks, got, errors = [], 0, []

    def receive():
        nonlocal got
        n = rx.recv(buf, md, 1.0)
        if md.error_code != uhd.types.RXMetadataErrorCode.none:
            errors.append(str(md.error_code).rsplit(".", 1)[-1])
        if n:
            chunks.append(buf[:n].copy())
            got += n

    while got == 0 and time.monotonic() < deadline:
        receive()
    start = read_log(a.source_log, "rx_stream", deadline)
    t0 = start["t0"]
    k = math.ceil((time.monotonic() + a.lead - t0) * a.rate)
    tx_time = t0 + k / a.rate
    x = burst(a.samples, a.amplitude, a.seed)
    tmd = uhd.types.TXMetadata()
    tmd.start_of_burst = True
    tmd.end_of_burst = True
    tmd.has_time_spec = True
    tmd.time_spec = uhd.types.TimeSpec(tx_time)
    rx_start, got_at_start = time.monotonic(), got
    sent = tx.send(x, tmd, 10.0)
    want = k + a.samples + TAIL
    while got < want and time.monotonic() < deadline:
        receive()
    rx_end = time.monotonic()
    rx.issue_stream_cmd(uhd.types.StreamCMD(uhd.types.StreamMode.stop_cont))
    samples = np.concatenate(chunks) if chunks else np.zeros(0, np.complex64)
    np.save(a.out, samples)
    out.update(k=k, tx_time=tx_time, t0=t0, sent=int(sent), received=int(samples.size),
               wanted=want, errors=sorted(set(errors)),
               rx_rate=(got - got_at_start) / max(rx_end - rx_start, 1e-9))
    del rx, tx
    del usrp  # closes the device now (UHD unclaims it), not at interpreter exit
    print(json.dumps(out), flush=True)
    return 0 if got >= want else 1


if __name__ == "__main__":
    sys.exit(main())
