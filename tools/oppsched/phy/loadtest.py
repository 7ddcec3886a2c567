"""Can this machine keep the abstract PHY's slot clock? A timing load test.

    python -m oppsched.phy.loadtest [--users 4] [--slot-s 1.667e-3] [--seconds 30]
                                    [--error-model threshold] [--spin-us 0] [--out DIR]

Runs `python -m oppsched.phy.abstract` as its own process against a fake AP and fake
clients in this process (one thread, ipc:// sockets in DIR or a temporary directory): the
AP answers every slot_request at once, granting slot n round-robin to the users at the MCS of
the user's latest CQI with a full TB (bytes_per_slot), or an empty slot below the lowest
MCS; the clients receive every rx_indication. Every user fades (the Jakes model of Andrew &
Hanly, CLAMP, at 60 Hz, mean 10 dB). At the end it prints the PHY's timing statistics from
phy.stats.json: how late each slot tick woke up (lateness: microseconds after the scheduled
instant), the time spent per tick (busy), overruns (ticks more than a slot late), late slots
(grant missing at slot time) and rx_indications dropped.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml
import zmq

from oppsched import mac
from oppsched.config import renamed_value
from oppsched.names import ERROR_MODEL_ALIASES, TABLE_ALIASES
from oppsched.phy import abstract as phy
from oppsched.phy.common import load_mcs_table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m oppsched.phy.loadtest", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--slot-s", type=float, default=1.667e-3)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--lead-slots", type=int, default=3)
    ap.add_argument("--error-model", default="threshold", choices=("threshold", "end_of_slot"),
                    type=lambda v: renamed_value("--error-model", v, ERROR_MODEL_ALIASES))
    ap.add_argument("--mcs-table", default="evdo",
                    type=lambda v: renamed_value("--mcs-table", v, TABLE_ALIASES))
    ap.add_argument("--spin-us", type=float, default=0.0)
    ap.add_argument(
        "--rt-priority", type=int, default=0, help="timing.rt_priority of the PHY (SCHED_FIFO)"
    )
    ap.add_argument("--out", help="run directory (default: a temporary one)")
    args = ap.parse_args(argv)

    tmp = None
    if args.out:
        run = Path(args.out)
        run.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="phyload.")
        run = Path(tmp.name)
    zdir = run / "zmq"
    zdir.mkdir(exist_ok=True)
    n_slots = int(args.seconds / args.slot_s)
    cfg = {
        "slot_s": args.slot_s,
        "lead_slots": args.lead_slots,
        "seed": 1,
        "max_slots": n_slots,
        "run_dir": str(run),
        "error_model": args.error_model,
        "mcs_table": args.mcs_table,
        "timing": {
            "spin_us": args.spin_us,
            "startup_wait_s": 10.0,
            "rt_priority": args.rt_priority,
        },
        "users": [
            {
                "id": i,
                "name": f"u{i}",
                "channel": {"model": "jakes", "doppler_hz": 60.0, "mean_snr_db": 10.0},
            }
            for i in range(args.users)
        ],
    }
    (run / "phy.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    table = load_mcs_table(phy.load_config(run / "phy.yaml"))

    ctx = zmq.Context()
    # Every socket made below: no message beyond one wire frame (docs/daemons.md).
    ctx.setsockopt(zmq.MAXMSGSIZE, mac.wire.MAX_FRAME_LEN)
    req = ctx.socket(zmq.PULL)
    req.bind(f"ipc://{zdir}/phy_requests")
    grants = ctx.socket(zmq.PUSH)
    grants.bind(f"ipc://{zdir}/phy_grants")
    rx = []
    for i in range(args.users):
        s = ctx.socket(zmq.PULL)
        s.bind(f"ipc://{zdir}/rx_{i}")
        rx.append(s)
    cqi = [0] * args.users
    received = [0] * args.users
    stop = threading.Event()

    def fake_ap_and_clients():
        poller = zmq.Poller()
        poller.register(req, zmq.POLLIN)
        for s in rx:
            poller.register(s, zmq.POLLIN)
        seq = 0
        while not stop.is_set():
            ev = dict(poller.poll(20))
            for i, s in enumerate(rx):
                if s in ev:
                    while True:
                        try:
                            _, _, d = mac.wire.decode(s.recv(zmq.NOBLOCK))
                        except zmq.Again:
                            break
                        cqi[i] = d["cqi"]
                        received[i] += 1
            if req in ev:
                while True:
                    try:
                        _, _, r = mac.wire.decode(req.recv(zmq.NOBLOCK))
                    except zmq.Again:
                        break
                    n = r["slot"]
                    u = n % args.users
                    if cqi[u] == 0:
                        g = {"slot": n, "empty": True}
                    else:
                        mcs = cqi[u] - 1
                        g = {
                            "slot": n,
                            "user": u,
                            "mcs": mcs,
                            "harq_pid": n % 8,
                            "ndi": (n // 8) & 1,
                            "tb": bytes(table.bytes_per_slot(mcs, args.slot_s)),
                        }
                    grants.send(mac.wire.encode("slot_grant", seq, g))
                    seq += 1

    t = threading.Thread(target=fake_ap_and_clients, daemon=True)
    t.start()
    print(
        f"running {n_slots} slots of {args.slot_s * 1e3:g} ms, {args.users} users, in {run}",
        flush=True,
    )
    t_start = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "oppsched.phy.abstract", "--config", str(run / "phy.yaml")],
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - t_start
    time.sleep(0.2)
    stop.set()
    t.join(2)
    ctx.destroy(linger=0)
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        return p.returncode
    st = json.loads((run / "phy.stats.json").read_text())
    tm = st["timing"]
    lat, busy = tm["lateness_us"], tm["busy_us"]

    def fmt(h):
        return ", ".join(f"{k} {h[k]:.0f}" for k in ("mean", "p50", "p90", "p99", "p999", "max"))

    print(f"wall {wall:.1f} s for {st['slots']} slots ({st['slots'] * args.slot_s:.1f} s of air)")
    print(f"tick lateness us: {fmt(lat)}")
    print(f"tick busy us:     {fmt(busy)}")
    print(f"overruns (tick > 1 slot late): {tm['overruns']} of {tm['ticks']}")
    print(
        f"slots {st['slots']}, empty {st['empty']}, late {st['late']}, "
        f"grants_late {st['grants_late']}, tb_ok {st['tb_ok']}, tb_failed {st['tb_failed']}"
    )
    print(
        "rx dropped: "
        + ", ".join(f"{k} {v['rx_dropped']}" for k, v in st["users"].items())
        + "; received by clients: "
        + ", ".join(map(str, received))
    )
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
