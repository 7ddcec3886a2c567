#!/usr/bin/env python3
"""QA: the ZeroMQ bridges against a fake AP daemon and a fake client agent (pyzmq).

The fakes bind the sockets the daemons bind (docs/daemons.md) and speak the wire.h frames
through an independent Python codec (gnuradio.oppsched.testing.wire), so the byte layout
is checked too. End to end: slot_tx (realtime) -> mac_grant_source <-> fake apd; the
slots' samples -> slot_rx -> rx_indication_sink -> fake client, which must receive the
TBs the fake apd granted. Then malformed frames, a missing daemon and a missing client:
counted, never blocking.
"""

import os
import shutil
import tempfile
import threading
import time

import numpy as np
import pmt
import zmq
from gnuradio import blocks, gr, gr_unittest

from gnuradio import oppsched
from gnuradio.oppsched.testing import wire


def wait_for(cond, timeout=5.0):
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


class fake_apd(threading.Thread):
    """Binds phy_requests (PULL) and phy_grants (PUSH); answers every slot_request at once
    with a slot_grant for user slot % 2 (a TB of seeded random bytes at MCS 1)."""

    def __init__(self, ctx, req_ep, grant_ep, num):
        super().__init__(daemon=True)
        self.pull = ctx.socket(zmq.PULL)
        self.pull.bind(req_ep)
        self.push = ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.LINGER, 0)
        self.push.bind(grant_ep)
        self.rng = np.random.default_rng(5)
        self.tb_bytes = oppsched.mcs_set.tb_bytes(1, num)
        self.requests, self.granted = [], {}
        self.seq = 0
        self.running = True

    def run(self):
        poller = zmq.Poller()
        poller.register(self.pull, zmq.POLLIN)
        while self.running:
            if not poller.poll(10):
                continue
            typ, seq, body = wire.parse(self.pull.recv())
            assert typ == wire.SLOT_REQUEST
            req = wire.slot_request_body(body)
            req["seq"] = seq
            self.requests.append(req)
            slot = req["slot"]
            tb = self.rng.integers(0, 256, self.tb_bytes, dtype=np.uint8).tobytes()
            self.granted[slot] = (slot % 2, tb)
            self.push.send(
                wire.slot_grant(
                    self.seq,
                    slot,
                    user=slot % 2,
                    mcs=1,
                    harq_pid=slot % 8,
                    ndi=(slot // 8) % 2,
                    tb=tb,
                )
            )
            self.seq += 1

    def close(self):
        self.running = False
        self.join(2)
        self.pull.close(0)
        self.push.close(0)


class qa_zmq_bridges(gr_unittest.TestCase):
    def setUp(self):
        if not oppsched.zmq_bridges_available():
            self.skipTest("gnuradio-oppsched built without ZeroMQ (OPPSCHED_HAVE_ZMQ)")
        self.dir = tempfile.mkdtemp(prefix="oppsched-zmq-")
        self.ctx = zmq.Context()

    def tearDown(self):
        if hasattr(self, "ctx"):
            self.ctx.destroy(0)
            shutil.rmtree(self.dir, ignore_errors=True)

    def ep(self, name):
        return f"ipc://{self.dir}/{name}"

    def test_grants_from_the_daemon_reach_the_air_and_the_client(self):
        profile, fs, lead, n_slots = "3ms", 1e6, 8, 40
        num = oppsched.numerology.profile(profile, fs)
        S = num.slot_samples
        apd = fake_apd(self.ctx, self.ep("phy_requests"), self.ep("phy_grants"), num)
        apd.start()
        client = self.ctx.socket(zmq.PULL)
        client.bind(self.ep("rx_0"))
        try:
            # realtime: slot n starts 0.3 s + n * 3 ms after start; lead 8 slots = 24 ms
            tx = oppsched.slot_tx(profile, fs, lead, 0.3, True, True)
            bridge = oppsched.mac_grant_source(self.ep("phy_requests"), self.ep("phy_grants"))
            rx = oppsched.slot_rx(profile, fs, 0)
            sink = oppsched.rx_indication_sink(self.ep("rx_0"))
            tb = gr.top_block()
            head = blocks.head(gr.sizeof_gr_complex, n_slots * S)
            tb.connect(tx, head, rx)
            tb.msg_connect(tx, "request", bridge, "request")
            tb.msg_connect(bridge, "grant", tx, "grant")
            tb.msg_connect(rx, "rx", sink, "rx")
            tb.start()
            self.assertTrue(wait_for(lambda: sink.sent() >= n_slots - 1, 10.0))
            tb.stop()
            tb.wait()
        finally:
            apd.close()
        # requests: consecutive slots from 0, lead ahead, exact air times, seq 0, 1, 2...
        reqs = apd.requests
        self.assertGreaterEqual(len(reqs), n_slots + lead - 1)
        self.assertEqual([r["slot"] for r in reqs], list(range(len(reqs))))
        self.assertEqual([r["seq"] for r in reqs], list(range(len(reqs))))
        t0 = reqs[0]["air_time_ns"]
        for r in reqs:
            self.assertEqual(r["air_time_ns"] - t0, r["slot"] * 3_000_000)
        self.assertAlmostEqual(t0 / 1e9, time.monotonic(), delta=60)  # CLOCK_MONOTONIC
        # The flowgraph stops while the last request or two and their grants may still be
        # in the sockets: those are the only ones allowed to be missing on either side.
        self.assertIn(bridge.requests_sent() - len(reqs), (0, 1, 2))
        self.assertIn(len(reqs) - bridge.grants_received(), (0, 1, 2))
        self.assertEqual(bridge.grants_seq_lost(), 0)
        # the daemon had lead slots to answer: (almost) no slot went out late
        self.assertLessEqual(tx.late(), n_slots // 4)
        self.assertGreaterEqual(tx.tb_sent(), n_slots - n_slots // 4)
        # the client: one rx_indication per slot, TBs of its slots exactly as granted
        frames = []
        while client.poll(100):
            frames.append(wire.parse(client.recv()))
        client.close(0)
        self.assertGreaterEqual(len(frames), n_slots - 1)
        self.assertEqual([seq for _, seq, _ in frames], list(range(len(frames))))
        inds = [wire.rx_indication_body(b) for t, _, b in frames if t == wire.RX_INDICATION]
        self.assertEqual(len(inds), len(frames))
        ok = 0
        for ind in inds:
            self.assertTrue(ind["header_ok"])
            user, tb = apd.granted.get(ind["slot"], (0xFFFF, b""))
            if ind["user"] == 0xFFFF:  # a late slot: empty
                continue
            self.assertEqual(ind["user"], user)
            self.assertEqual(ind["addressed"], user == 0)
            if user == 0:
                self.assertTrue(ind["crc_ok"])
                self.assertEqual(ind["tb"], tb)
                ok += 1
            else:
                self.assertEqual(ind["tb"], b"")
            self.assertGreater(ind["snr_db"], 60)  # noiseless loop
            self.assertEqual(ind["cqi"], 15)
        self.assertGreaterEqual(ok, n_slots // 2 - n_slots // 4)

    def test_malformed_and_wrong_type_grant_frames_are_counted_and_dropped(self):
        push = self.ctx.socket(zmq.PUSH)
        push.bind(self.ep("phy_grants"))
        pull = self.ctx.socket(zmq.PULL)
        pull.bind(self.ep("phy_requests"))
        bridge = oppsched.mac_grant_source(self.ep("phy_requests"), self.ep("phy_grants"))
        dbg = blocks.message_debug()
        tb = gr.top_block()
        tb.msg_connect(bridge, "grant", dbg, "store")
        tb.start()
        good = wire.slot_grant(0, 17, user=3, mcs=2, harq_pid=4, ndi=1, rv=2, tb=b"hello")
        bad_crc = bytearray(good)
        bad_crc[-1] ^= 0xFF
        wrong_type = wire.frame(wire.RX_INDICATION, 1, bytes(23))
        for f in (
            b"",
            b"garbage",
            bytes(bad_crc),
            wrong_type,
            good,
            wire.slot_grant(5, 18, empty=True),
        ):
            push.send(bytes(f))
        ok = wait_for(lambda: dbg.num_messages() >= 2 and bridge.grants_wrong_type() >= 1)
        tb.stop()
        tb.wait()
        push.close(0)
        pull.close(0)
        self.assertTrue(ok)
        self.assertEqual(bridge.grants_malformed(), 3)
        self.assertEqual(bridge.grants_wrong_type(), 1)
        self.assertEqual(bridge.grants_received(), 2)
        self.assertEqual(bridge.grants_seq_lost(), 4)  # seq 0 then 5
        g = pmt.to_python(dbg.get_message(0))
        self.assertEqual(
            (g["slot"], g["user"], g["mcs"], g["harq_pid"], g["ndi"], g["rv"]),
            (17, 3, 2, 4, True, 2),
        )
        self.assertEqual(bytes(g["tb"]), b"hello")
        self.assertFalse(g["empty"])
        e = pmt.to_python(dbg.get_message(1))
        self.assertTrue(e["empty"])
        self.assertEqual(e["slot"], 18)

    def test_without_a_daemon_requests_are_dropped_and_nothing_blocks(self):
        bridge = oppsched.mac_grant_source(
            self.ep("nobody_req"), self.ep("nobody_grants"), connect_wait_ms=50
        )
        tb = gr.top_block()
        tb.msg_connect(bridge, "grant", blocks.message_debug(), "store")
        tb.start()
        for n in range(50):
            bridge._post(
                pmt.intern("request"),
                pmt.dict_add(pmt.make_dict(), pmt.intern("slot"), pmt.from_uint64(n)),
            )
        bridge._post(pmt.intern("request"), pmt.from_long(3))  # not a request
        ok = wait_for(lambda: bridge.requests_dropped() + bridge.requests_malformed() >= 51)
        tb.stop()
        tb.wait()
        self.assertTrue(ok)
        self.assertEqual(
            (bridge.requests_dropped(), bridge.requests_sent(), bridge.requests_malformed()),
            (50, 0, 1),
        )

    def test_rx_indication_sink_maps_the_fields_counts_malformed_and_drops_without_client(self):
        client = self.ctx.socket(zmq.PULL)
        client.bind(self.ep("rx_3"))
        sink = oppsched.rx_indication_sink(self.ep("rx_3"), report_effective_snr=False)
        tb = gr.top_block()
        tb.msg_connect(oppsched.grant_generator(), "grant", sink, "rx")  # silent: no requests
        tb.start()
        time.sleep(0.2)  # connect
        d = pmt.make_dict()
        for k, v in (
            ("slot", pmt.from_uint64(2**40 + 5)),
            ("header_ok", pmt.PMT_T),
            ("user", pmt.from_long(3)),
            ("mcs", pmt.from_long(6)),
            ("harq_pid", pmt.from_long(9)),
            ("ndi", pmt.PMT_T),
            ("rv", pmt.from_long(3)),
            ("addressed", pmt.PMT_T),
            ("crc_ok", pmt.PMT_T),
            ("snr_db", pmt.from_double(17.25)),
            ("effective_snr_db", pmt.from_double(9.0)),
            ("cqi", pmt.from_long(11)),
            ("combined", pmt.from_long(2)),
            ("tb", pmt.init_u8vector(3, [7, 8, 9])),
        ):
            d = pmt.dict_add(d, pmt.intern(k), v)
        sink._post(pmt.intern("rx"), d)
        sink._post(pmt.intern("rx"), pmt.dict_delete(d, pmt.intern("snr_db")))  # malformed
        sink._post(pmt.intern("rx"), pmt.intern("junk"))  # malformed
        self.assertTrue(client.poll(5000))
        typ, seq, body = wire.parse(client.recv())
        self.assertTrue(wait_for(lambda: sink.malformed() == 2))
        client.close(0)
        # the client is gone: the next indication is dropped, never queued or waited for
        time.sleep(0.1)
        sink._post(pmt.intern("rx"), d)
        self.assertTrue(wait_for(lambda: sink.dropped() == 1))
        tb.stop()
        tb.wait()
        self.assertEqual((typ, seq), (wire.RX_INDICATION, 0))
        ind = wire.rx_indication_body(body)
        self.assertEqual(
            ind,
            {
                "slot": 2**40 + 5,
                "user": 3,
                "mcs": 6,
                "harq_pid": 9,
                "ndi": 1,
                "rv": 3,
                "header_ok": True,
                "addressed": True,
                "crc_ok": True,
                "snr_db": 17.25,
                "cqi": 11,
                "combined": 2,
                "tb": b"\x07\x08\x09",
            },
        )
        self.assertEqual(sink.sent(), 1)

    def test_bad_endpoints_and_parameters_raise_naming_the_field(self):
        with self.assertRaisesRegex(ValueError, "requests_endpoint"):
            oppsched.mac_grant_source("nowhere", self.ep("g"))
        with self.assertRaisesRegex(ValueError, "hwm"):
            oppsched.mac_grant_source(self.ep("r"), self.ep("g"), hwm=0)
        with self.assertRaisesRegex(ValueError, "endpoint"):
            oppsched.rx_indication_sink("")


if __name__ == "__main__":
    gr_unittest.run(qa_zmq_bridges)
