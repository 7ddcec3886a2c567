"""Helpers for the QA tests and tools that drive the oppsched blocks from Python.

- ``grant_dict`` / ``empty_grant``: the grant dicts slot_tx takes;
- ``run_tx``: grants -> slot_tx -> samples and tags (posted before start, so every grant
  is there before its slot is built: deterministic, no daemon);
- ``run_rx``: samples -> (optional channel_emulator_cc) -> slot_rx -> list of report dicts;
- ``wire``: an independent Python codec of the PHY-MAC frames of
  host/common/include/oppsched/wire.h (slot_request, slot_grant, rx_indication), for fake daemons in
  tests: written from the documented byte layout, not from the C++ code, so a test that
  passes through both checks the layout itself.
"""

import struct
import zlib

import numpy as np
import pmt
from gnuradio import blocks, gr

from .oppsched_python import channel_emulator_cc, slot_rx, slot_tx


def grant_dict(slot, user, mcs, tb, harq_pid=0, ndi=False, rv=0):
    d = pmt.make_dict()
    tb = list(bytes(tb))
    for k, v in (
        ("slot", pmt.from_uint64(slot)),
        ("user", pmt.from_long(user)),
        ("mcs", pmt.from_long(mcs)),
        ("harq_pid", pmt.from_long(harq_pid)),
        ("ndi", pmt.from_bool(bool(ndi))),
        ("rv", pmt.from_long(rv)),
        ("tb", pmt.init_u8vector(len(tb), tb)),
    ):
        d = pmt.dict_add(d, pmt.intern(k), v)
    return d


def empty_grant(slot):
    d = pmt.dict_add(pmt.make_dict(), pmt.intern("slot"), pmt.from_uint64(slot))
    return pmt.dict_add(d, pmt.intern("empty"), pmt.PMT_T)


def tags_of(sink):
    """[(offset, key, python value)] of a vector sink's tags, sorted by offset then key."""
    out = [(t.offset, pmt.symbol_to_string(t.key), pmt.to_python(t.value)) for t in sink.tags()]
    return sorted(out, key=lambda x: (x[0], x[1]))


def run_tx(grants, n_slots, profile="evdo", sample_rate=1e6, **kw):
    """Build n_slots slots from ``grants`` (PMT dicts). Returns (samples, tags, block)."""
    tx = slot_tx(profile, sample_rate, **kw)
    for g in grants:
        tx._post(pmt.intern("grant"), g)
    tb = gr.top_block()
    head = blocks.head(gr.sizeof_gr_complex, n_slots * tx.slot_samples())
    snk = blocks.vector_sink_c()
    tb.connect(tx, head, snk)
    tb.run()
    return np.array(snk.data(), dtype=np.complex64), tags_of(snk), tx


def run_tx_both(grants, n_slots, profile="evdo", sample_rate=1e6, **kw):
    """As run_tx, with slot_tx's second output (the stations' side) connected too. Returns
    (downlink samples, uplink samples, block)."""
    tx = slot_tx(profile, sample_rate, **kw)
    for g in grants:
        tx._post(pmt.intern("grant"), g)
    tb = gr.top_block()
    sinks = [blocks.vector_sink_c() for _ in range(2)]
    for port, snk in enumerate(sinks):
        tb.connect((tx, port), blocks.head(gr.sizeof_gr_complex, n_slots * tx.slot_samples()),
                   snk)
    tb.run()
    down, up = (np.array(snk.data(), dtype=np.complex64) for snk in sinks)
    return down, up, tx


def run_rx(samples, profile="evdo", sample_rate=1e6, user_ids=(0,), emulator=None, tail=400, **kw):
    """Samples -> [channel_emulator_cc(emulator)] -> one slot_rx per user id.

    Returns (reports, receivers): reports[i] is the list of dicts (Python values) of
    user_ids[i]. ``tail`` zeros are appended so the last slot is reported (the sync needs a
    few samples past a slot's end).
    """
    x = np.concatenate([np.asarray(samples, np.complex64), np.zeros(tail, np.complex64)])
    tb = gr.top_block()
    src = blocks.vector_source_c(x.tolist(), False)
    rxs, dbgs = [], []
    if emulator is not None:
        em = channel_emulator_cc(emulator)
        tb.connect(src, em)
        if em.num_users() != len(user_ids):
            raise ValueError("run_rx: one emulator output per user id")
    for i, u in enumerate(user_ids):
        rx = slot_rx(profile, sample_rate, u, **kw)
        dbg = blocks.message_debug()
        tb.connect((em, i) if emulator is not None else src, rx)
        tb.msg_connect(rx, "rx", dbg, "store")
        rxs.append(rx)
        dbgs.append(dbg)
    tb.run()
    reports = [[pmt.to_python(d.get_message(i)) for i in range(d.num_messages())] for d in dbgs]
    return reports, rxs


class wire:
    """The wire.h frames, from its documented layout (big-endian, CRC-32 of zlib)."""

    MAGIC = 0x4F505053
    VERSION = 1
    SLOT_REQUEST, SLOT_GRANT, RX_INDICATION = 1, 2, 3

    @staticmethod
    def frame(msg_type, seq, body, version=None):
        head = struct.pack(
            ">IBBHII",
            wire.MAGIC,
            wire.VERSION if version is None else version,
            msg_type,
            0,
            seq,
            len(body),
        )
        data = head + body
        return data + struct.pack(">I", zlib.crc32(data) & 0xFFFFFFFF)

    @staticmethod
    def parse(data):
        """(type, seq, body) of a frame; raises ValueError when it does not check out."""
        if len(data) < 20:
            raise ValueError("short frame")
        magic, ver, typ, _res, seq, n = struct.unpack(">IBBHII", data[:16])
        if magic != wire.MAGIC or ver != wire.VERSION or len(data) != 20 + n:
            raise ValueError("bad header")
        if struct.unpack(">I", data[-4:])[0] != zlib.crc32(data[:-4]) & 0xFFFFFFFF:
            raise ValueError("bad CRC")
        return typ, seq, data[16:-4]

    @staticmethod
    def slot_grant(seq, slot, user=0, mcs=0, harq_pid=0, ndi=0, rv=0, tb=b"", empty=False):
        body = struct.pack(
            ">QBHBBBBH", slot, 1 if empty else 0, user, mcs, harq_pid, ndi, rv, len(tb)
        ) + bytes(tb)
        return wire.frame(wire.SLOT_GRANT, seq, body)

    @staticmethod
    def slot_request_body(body):
        slot, air = struct.unpack(">Qq", body)
        return {"slot": slot, "air_time_ns": air}

    @staticmethod
    def rx_indication_body(body):
        (slot, user, mcs, pid, ndi, rv, flags, snr, cqi, comb, n) = struct.unpack(
            ">QHBBBBBfBBH", body[:23]
        )
        tb = body[23:]
        if len(tb) != n:
            raise ValueError("tb length")
        return {
            "slot": slot,
            "user": user,
            "mcs": mcs,
            "harq_pid": pid,
            "ndi": ndi,
            "rv": rv,
            "header_ok": bool(flags & 1),
            "addressed": bool(flags & 2),
            "crc_ok": bool(flags & 4),
            "snr_db": snr,
            "cqi": cqi,
            "combined": comb,
            "tb": bytes(tb),
        }
