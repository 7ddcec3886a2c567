"""`oppsched linkcurves --flowgraph`: one link-curve point through a GNU Radio flowgraph of
the gr-oppsched blocks instead of calling the classes directly:

    slot_tx (continuous, not realtime; every grant posted before the start)
      -> blocks.head (slots x slot_samples) -> channel_emulator_cc (1 user) -> slot_rx
    slot_rx `rx` messages -> blocks.message_debug (store)

The grants, seeds and header fields are those the class chain uses with
PointRunner(lead=0, empty_first_slot=True): slot 0 goes out empty (slot_tx sends a slot
without grant that way), TB k in slot k for k = 1..--slots, HARQ process k mod 2, NDI
toggled per TB of a process, RV 0, user 1; the emulator gets the same seed. The sample
streams of the two are then the same bit for bit (the emulator's output does not depend
on the chunking), so the counts must agree exactly: that is the check that the blocks
are thin wrappers (test_linkcurves.py runs it on a small case).

No HARQ retransmissions (the grants are made before the run, without feedback) and no
early stop: every point runs --slots slots.
"""

from __future__ import annotations

import numpy as np

from oppsched.config import ConfigError


def blocks_available(phy) -> bool:
    return all(hasattr(phy, n) for n in ("slot_tx", "slot_rx", "channel_emulator_cc"))


def _grant(pmt, slot: int, user: int, mcs: int, pid: int, ndi: bool, rv: int, tb: bytes):
    d = pmt.make_dict()
    for k, v in (("slot", pmt.from_uint64(slot)), ("user", pmt.from_long(user)),
                 ("mcs", pmt.from_long(mcs)), ("harq_pid", pmt.from_long(pid)),
                 ("ndi", pmt.from_bool(ndi)), ("rv", pmt.from_long(rv)),
                 ("tb", pmt.init_u8vector(len(tb), list(tb)))):
        d = pmt.dict_add(d, pmt.intern(k), v)
    return d


def measure_point_flowgraph(chain, mcs: int, snr_db: float) -> dict:
    import pmt
    from gnuradio import blocks, gr

    phy, cfg = chain.phy, chain.cfg
    if not blocks_available(phy):
        raise ConfigError("--flowgraph: the gr-oppsched blocks (slot_tx, slot_rx, "
                          "channel_emulator_cc) are not in this build")
    if cfg.harq:
        raise ConfigError("--flowgraph: --harq is not supported (the grants are made before "
                          "the run, without feedback)")
    # The class runner holds the seeds, the TB draws and the statistics; only its TX/RX
    # loop is replaced by the flowgraph.
    pr = chain.point_runner(mcs, snr_db, lead=0, empty_first_slot=True)
    n = int(cfg.slots)
    ss = chain.num.slot_samples
    sent = {}
    ndi = [False, False]
    tx = phy.slot_tx(cfg.profile, cfg.sample_rate, lead_slots=3, t0_s=0.0, continuous=True,
                     realtime=False, slot_duration_s=0.0, max_pending=n + 8, fec=cfg.fec)
    for k in range(1, n + 1):
        p = k % 2
        ndi[p] = not ndi[p]
        tb = pr.rng.bytes(pr.tbs)  # the same draws, in the same order, as PointRunner
        sent[k] = tb
        tx.to_basic_block()._post(pmt.intern("grant"),
                                  _grant(pmt, k, 1, mcs, p, ndi[p], 0, tb))
    # the emulator block with the parameters (and seed) of the class runner's emulator
    em = phy.channel_emulator_cc(pr.em.params)
    rx = phy.slot_rx(cfg.profile, cfg.sample_rate, user_id=1, fec=cfg.fec)
    head = blocks.head(gr.sizeof_gr_complex, (n + 2) * ss)
    dbg = blocks.message_debug()
    tb = gr.top_block()
    tb.connect(tx, head, em, rx)
    tb.msg_connect((rx, "rx"), (dbg, "store"))
    tb.run()

    reports = {}
    for i in range(dbg.num_messages()):
        d = pmt.to_python(dbg.get_message(i))
        reports[int(d["slot"])] = d
    snr_est = []
    for k in range(1, n + 1):
        d = reports.get(k)
        if d is None or not d.get("detected", True):
            out = "missed"
        elif not d.get("header_ok", False):
            out = "header"
        elif d.get("crc_ok") and bytes(np.asarray(d.get("tb", []), np.uint8)) == sent[k]:
            out = "ok"
        else:
            out = "crc"
        if d is not None and d.get("detected", True):
            snr_est.append(float(d["snr_db"]))
        pr.transmissions += 1
        pr.tb_needed.append(1 if out == "ok" else 0)
        if out != "ok":
            pr.first_errors += 1
        pr.header_errors += out == "header"
        pr.missed += out == "missed"
    pr.tb_started = n
    pr.snr_est = snr_est
    # detections slot_rx made that are not one of our slots (slot 0 is the empty one)
    pr.false_det = sum(1 for k in reports if not 0 <= k <= n + 1)
    return pr.result()
