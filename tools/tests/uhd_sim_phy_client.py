"""The UHD PHY's radios and flowgraphs (oppsched.phy.uhd.UhdPhy: the AP's TX graph,
build_ap_tx into a gr-uhd usrp_sink, and a client's RX graph, build_client_rx from a gr-uhd
usrp_source) on one device for a few seconds, with TBs granted to the client
(tools/tests/test_uhd_sim_phy.py runs it against UHD's device simulator, in a process of
its own: gr-uhd and the flowgraphs' threads stay out of pytest's).

    uhd_sim_phy_client.py PHY_YAML SECONDS [--first-slot N] [--every E] [--tbs K] [--mcs M]
                          [--seed S]

Loads PHY_YAML (the UHD PHY's own file: uhd.load_config), opens the radios as the PHY does
(UhdPhy: the client's first, the AP's device time last), posts K grants to user 0, for
slots N, N+E, N+2E, ... (seeded TBs, as many bytes as MCS M carries at the file's rate), starts the
flowgraphs, stops them after SECONDS and prints one JSON line: the PHY's stats (as in
phy.stats.json), the grants, the slots whose header the client decoded, the median SNR
of those it detected, the slot times and how long each step took.
"""

import argparse
import json
import sys
import time

import numpy as np


def grant(slot: int, user: int, mcs: int, tb: bytes, ndi: bool):
    """slot_tx's grant dict (slot_tx.h): a first transmission (rv 0) on HARQ process 0, a
    new TB when `ndi` differs from the process's previous one."""
    import pmt

    d = pmt.make_dict()
    for k, v in (("slot", pmt.from_uint64(slot)), ("user", pmt.from_long(user)),
                 ("mcs", pmt.from_long(mcs)), ("harq_pid", pmt.from_long(0)),
                 ("ndi", pmt.from_bool(ndi)), ("rv", pmt.from_long(0)),
                 ("tb", pmt.init_u8vector(len(tb), list(tb)))):
        d = pmt.dict_add(d, pmt.intern(k), v)
    return d


def tb_bytes(cfg: dict, mcs: int) -> int:
    """The largest TB MCS `mcs` carries in a slot of the file's profile and rate."""
    from gnuradio import oppsched

    s = cfg["sample"]
    return oppsched.mcs_set.tb_bytes(mcs, oppsched.numerology.profile(s["profile"],
                                                                       s["sample_rate"]))


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("seconds", type=float)
    p.add_argument("--first-slot", type=int, default=100)
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--tbs", type=int, default=40)
    p.add_argument("--mcs", type=int, default=2)
    p.add_argument("--seed", type=int, default=5)
    a = p.parse_args(argv)

    import pmt

    from oppsched.phy import uhd

    out = {}
    t = time.monotonic()
    cfg = uhd.load_config(a.config)
    uhd.check_radios(cfg)
    out["found_s"] = time.monotonic() - t
    t = time.monotonic()
    phy = uhd.UhdPhy(cfg)
    out["open_s"] = time.monotonic() - t
    n = tb_bytes(cfg, a.mcs)
    rng = np.random.default_rng(a.seed)
    slots = list(range(a.first_slot, a.first_slot + a.tbs * a.every, a.every))
    for i, s in enumerate(slots):  # NDI toggled: each one a new TB on process 0
        tb = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        phy.tx._post(pmt.intern("grant"), grant(s, cfg["users"][0]["id"], a.mcs, tb,
                                                i % 2 == 1))
    out.update(tb_bytes=n, granted=slots, mcs=a.mcs)
    from gnuradio import blocks

    reports = blocks.message_debug()  # the client's slot reports (detected: SNR measured)
    phy.rx_tbs[0].msg_connect(phy.rx[0], "rx", reports, "store")
    started = time.monotonic()
    phy.start()
    out["start_s"] = time.monotonic() - started
    out["started"] = started
    time.sleep(a.seconds)
    stopped = time.monotonic()
    phy.stop()
    out["stop_s"] = time.monotonic() - stopped
    out["stopped"] = stopped
    out["stats"] = phy.stats()
    detected = [r for r in (pmt.to_python(reports.get_message(i))
                            for i in range(reports.num_messages())) if r["detected"]]
    snrs = [r["snr_db"] for r in detected]
    out["reports"] = reports.num_messages()
    out["detected"] = len(detected)
    out["decoded_slots"] = [int(r["slot"]) for r in detected if r["header_ok"]]
    out["snr_db_median"] = float(np.median(snrs)) if snrs else None
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
