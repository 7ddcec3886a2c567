#!/usr/bin/env python3
"""QA: the Python helper blocks of the example flowgraph (Grant Generator, the fake MAC;
RX Monitor, PDUs for QT sinks) and slot_rx's `symbols` port."""

import numpy as np
import pmt
from gnuradio import blocks, gr, gr_unittest

from gnuradio import oppsched
from gnuradio.oppsched.testing import grant_dict, run_tx


class qa_helper_blocks(gr_unittest.TestCase):
    def test_grant_generator_feeds_slot_tx_and_the_receiver_decodes_its_tbs(self):
        profile, fs, n_slots = "3ms", 1e6, 30
        num = oppsched.numerology.profile(profile, fs)
        # realtime: the generator (Python) answers within the 5-slot lead
        tx = oppsched.slot_tx(profile, fs, 5, 0.2, True, True)
        gen = oppsched.grant_generator(
            profile, fs, num_users=2, mcs=[3, 6], fill=0.5, harq_processes=4, empty_every=7, seed=3
        )
        rx0 = oppsched.slot_rx(profile, fs, 0)
        mon = oppsched.rx_monitor(history=50, window=10, every=5)
        dbg, snr, bler = blocks.message_debug(), blocks.message_debug(), blocks.message_debug()
        tb = gr.top_block()
        tb.connect(tx, blocks.head(gr.sizeof_gr_complex, n_slots * num.slot_samples), rx0)
        tb.msg_connect(tx, "request", gen, "request")
        tb.msg_connect(gen, "grant", tx, "grant")
        tb.msg_connect(rx0, "rx", dbg, "store")
        tb.msg_connect(rx0, "rx", mon, "rx")
        tb.msg_connect(mon, "snr", snr, "store")
        tb.msg_connect(mon, "bler", bler, "store")
        tb.run()
        reps = [pmt.to_python(dbg.get_message(i)) for i in range(dbg.num_messages())]
        self.assertGreaterEqual(len(reps), n_slots - 1)
        decoded = 0
        for r in reps:
            if r["slot"] % 7 == 0:
                self.assertEqual(r["user"], 0xFFFF)
            elif r["slot"] in gen.sent and r["user"] != 0xFFFF:
                user, tb_bytes = gen.sent[r["slot"]]
                self.assertEqual((r["user"], r["mcs"]), (user, [3, 6][user]))
                self.assertEqual(
                    r["tb_bytes"], int(0.5 * oppsched.mcs_set.tb_bytes([3, 6][user], num))
                )
                if user == 0:
                    self.assertEqual(bytes(r["tb"]), tb_bytes)
                    decoded += 1
        self.assertGreaterEqual(decoded, n_slots // 4)
        self.assertLessEqual(tx.late(), 3)
        # monitor: a PDU every 5 reports, each the last 50 values; BLER 0 on a clean link
        self.assertEqual(snr.num_messages(), len(reps) // 5)
        last = pmt.to_python(pmt.cdr(snr.get_message(snr.num_messages() - 1)))
        self.assertEqual(len(last), 50)
        self.assertGreater(float(last[-1]), 60.0)
        last_bler = pmt.to_python(pmt.cdr(bler.get_message(bler.num_messages() - 1)))
        self.assertEqual(float(last_bler[-1]), 0.0)

    def test_symbols_port_carries_the_equalised_payload_of_addressed_slots(self):
        num = oppsched.numerology.profile("evdo", 1e6)
        rng = np.random.default_rng(4)
        grants = [
            grant_dict(
                n,
                n % 2,
                1,
                rng.integers(0, 256, 50, dtype=np.uint8).tobytes(),
                harq_pid=n,
                ndi=True,
            )
            for n in range(4)
        ]
        x, _, _ = run_tx(grants, 4)
        x = np.concatenate([x, np.zeros(400, np.complex64)])
        rx = oppsched.slot_rx("evdo", 1e6, 0)
        dbg = blocks.message_debug()
        tb = gr.top_block()
        tb.connect(blocks.vector_source_c(x.tolist(), False), rx)
        tb.msg_connect(rx, "symbols", dbg, "store")
        tb.run()
        self.assertEqual(dbg.num_messages(), 2)  # slots 0 and 2 are user 0's
        for i, slot in enumerate((0, 2)):
            m = dbg.get_message(i)
            meta, re = pmt.to_python(pmt.car(m)), pmt.c32vector_elements(pmt.cdr(m))
            self.assertEqual((meta["slot"], meta["mcs"]), (slot, 1))
            self.assertEqual(len(re), num.payload_resource_elements)
            # QPSK, noiseless: every point at unit magnitude
            self.assertLess(np.max(np.abs(np.abs(np.array(re)) - 1.0)), 1e-3)

    def test_helper_parameters_are_checked(self):
        with self.assertRaisesRegex(ValueError, "mcs"):
            oppsched.grant_generator(mcs=8)
        with self.assertRaisesRegex(ValueError, "mcs"):
            oppsched.grant_generator(num_users=2, mcs=[1])
        with self.assertRaisesRegex(ValueError, "fill"):
            oppsched.grant_generator(fill=0.0)
        with self.assertRaisesRegex(ValueError, "rx_monitor"):
            oppsched.rx_monitor(history=0)


if __name__ == "__main__":
    gr_unittest.run(qa_helper_blocks)
