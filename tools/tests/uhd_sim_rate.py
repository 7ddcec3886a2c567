"""How fast UHD's device simulator carries samples with AirSink/AirSource (the figures of
docs/howto/uhd-simulator.md, "Samples through the simulator"): RX, TX, or both at once, at
one sample rate, for a while. Not a test: a measurement, run by hand against a running
simulator whose .ini is oppsched.uhd_sim.air(RATE, LOG_DIR) (the source's log names t0).

    uhd_sim_rate.py DEVICE_ARGS RATE LOG_DIR [--seconds S] [--mode rx|tx|both]
                    [--burst N]

rx:   a continuous RX stream for S seconds: samples and packets per second received, and
      UHD's RX errors (an overflow is O).
tx:   back-to-back timed bursts of N samples (tx_time = the previous one's end), as the
      UHD PHY's slot_tx sends its slots, for S seconds: samples per second UHD's send()
      took (AirSink holds a burst due later than its buffer_s, so at most real time).
both: the two at once (RX in a thread), as a PHY's AP radio and a client's on one device.

Prints one JSON line; with the source's log, its own count (late bursts, lag behind the
host clock, time spent filling packets).
"""

import argparse
import json
import threading
import time
from pathlib import Path

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("args")
    p.add_argument("rate", type=float)
    p.add_argument("log_dir", type=Path)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--mode", choices=("rx", "tx", "both"), default="both")
    p.add_argument("--burst", type=int, default=1667)
    a = p.parse_args(argv)

    import uhd

    usrp = uhd.usrp.MultiUSRP(a.args)
    usrp.set_rx_rate(a.rate, 0)
    usrp.set_tx_rate(a.rate, 0)
    sargs = uhd.usrp.StreamArgs("fc32", "sc16")
    sargs.channels = [0]
    out = {"rate": a.rate, "mode": a.mode, "seconds": a.seconds}
    stop = threading.Event()
    rx_count = {"samples": 0, "packets": 0, "errors": {}, "elapsed": 0.0}

    def receive(rx):
        md = uhd.types.RXMetadata()
        buf = np.zeros(rx.get_max_num_samps(), dtype=np.complex64)
        start = time.monotonic()
        while not stop.is_set():
            n = rx.recv(buf, md, 0.5)
            if md.error_code != uhd.types.RXMetadataErrorCode.none:
                e = str(md.error_code).rsplit(".", 1)[-1]
                rx_count["errors"][e] = rx_count["errors"].get(e, 0) + 1
            if n:
                rx_count["samples"] += n
                rx_count["packets"] += 1
        rx_count["elapsed"] = time.monotonic() - start

    rx = thread = tx = None
    # both streamers before any stream runs: a running RX stream can delay the simulator's
    # answers past UHD's management timeout ("Timed out getting recv buff for management
    # transaction")
    if a.mode in ("tx", "both"):
        tx = usrp.get_tx_stream(sargs)
    if a.mode in ("rx", "both"):
        rx = usrp.get_rx_stream(sargs)
        cmd = uhd.types.StreamCMD(uhd.types.StreamMode.start_cont)
        cmd.stream_now = True
        rx.issue_stream_cmd(cmd)
        thread = threading.Thread(target=receive, args=(rx,), daemon=True)
        thread.start()
    if tx is not None:
        x = (0.3 * np.exp(2j * np.pi * np.arange(a.burst) / 50)).astype(np.complex64)
        md = uhd.types.TXMetadata()
        md.start_of_burst = md.end_of_burst = md.has_time_spec = True
        start = time.monotonic()
        t = start + 0.2
        sent = bursts = 0
        while time.monotonic() - start < a.seconds:
            md.time_spec = uhd.types.TimeSpec(t)
            sent += tx.send(x, md, 5.0)
            bursts += 1
            t += a.burst / a.rate
        elapsed = time.monotonic() - start
        out["tx"] = {"samples": sent, "bursts": bursts, "samples_per_s": sent / elapsed,
                     "behind_s": elapsed - (t - start - 0.2)}
        del tx
    else:
        time.sleep(a.seconds)
    stop.set()
    if thread is not None:
        thread.join()
        rx.issue_stream_cmd(uhd.types.StreamCMD(uhd.types.StreamMode.stop_cont))
        el = max(rx_count["elapsed"], 1e-9)
        out["rx"] = {"samples": rx_count["samples"], "samples_per_s": rx_count["samples"] / el,
                     "packets_per_s": rx_count["packets"] / el, "errors": rx_count["errors"]}
        del rx
    del usrp
    time.sleep(0.5)  # the source's end record
    log = a.log_dir / "air_rx.jsonl"
    if log.exists():
        recs = [json.loads(line) for line in log.read_text().splitlines()]
        ends = [r for r in recs if r["event"] == "rx_end"]
        if ends:
            e = ends[-1]
            out["source"] = {k: e[k] for k in ("samples", "packets", "bursts", "late",
                                               "underflow_samples", "elapsed_s", "lag_s",
                                               "busy_s")}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
