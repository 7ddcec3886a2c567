#!/usr/bin/env python3
"""QA: the slot_tx block: slot length, exact stream tags (tx_sob/tx_eob/tx_time/slot),
requests lead_slots ahead, and the accounting of missing, empty, late, duplicate and
malformed grants. Grants are posted before the flowgraph starts, so each is there before
its slot is built (deterministic)."""

import math

import numpy as np
import pmt
from gnuradio import blocks, gr, gr_unittest

from gnuradio import oppsched
from gnuradio.oppsched.testing import empty_grant, grant_dict, run_rx, run_tx, tags_of


def expected_tx_time(t0, n, S, fs):
    """slot_tx's integer formula, in the same IEEE double operations."""
    full = math.floor(t0)
    frac = t0 - float(full)
    samples = n * S
    full += samples // int(fs)
    frac += float(samples % int(fs)) / fs
    if frac >= 1.0:
        full += 1
        frac -= 1.0
    return (full, frac)


class qa_slot_tx(gr_unittest.TestCase):
    def setUp(self):
        self.num = oppsched.numerology.profile("evdo", 1e6)
        self.S = self.num.slot_samples
        self.rng = np.random.default_rng(11)

    def tb(self, mcs, n=None):
        n = oppsched.mcs_set.tb_bytes(mcs, self.num) if n is None else n
        return self.rng.integers(0, 256, n, dtype=np.uint8).tobytes()

    def test_burst_mode_tags_are_exact(self):
        for profile, fs, t0 in (("evdo", 1e6, 12.3), ("3ms", 5e6, 1700000000.999)):
            S = oppsched.numerology.profile(profile, fs).slot_samples
            n_slots = 5
            x, tags, tx = run_tx([], n_slots, profile, fs, t0_s=t0)
            self.assertEqual(len(x), n_slots * S)
            expected = []
            for n in range(n_slots):
                expected += [
                    (n * S, "slot", n),
                    (n * S, "tx_sob", True),
                    (n * S, "tx_time", expected_tx_time(t0, n, S, fs)),
                    ((n + 1) * S - 1, "tx_eob", True),
                ]
            expected.sort(key=lambda x: (x[0], x[1]))
            self.assertEqual(tags, expected, profile)
            times = [v for (_, k, v) in tags if k == "tx_time"]
            if profile == "3ms":  # .999 s + 3 ms: carried into the full seconds
                self.assertEqual(times[1][0], 1700000001)
                self.assertAlmostEqual(times[1][1], 0.002, delta=1e-6)
            self.assertEqual(tx.slot_samples(), S)

    def test_continuous_mode_has_one_sob_no_eob_and_every_slot_and_time_tag(self):
        t0 = 0.25
        x, tags, _ = run_tx([], 4, t0_s=t0, continuous=True)
        expected = [(0, "tx_sob", True)]
        for n in range(4):
            expected += [
                (n * self.S, "slot", n),
                (n * self.S, "tx_time", expected_tx_time(t0, n, self.S, 1e6)),
            ]
        expected.sort(key=lambda x: (x[0], x[1]))
        self.assertEqual(tags, expected)

    def test_requests_are_published_lead_slots_ahead_with_exact_air_times(self):
        lead, t0 = 4, 2.0
        tx = oppsched.slot_tx("evdo", 1e6, lead, t0)
        tb = gr.top_block()
        head = blocks.head(gr.sizeof_gr_complex, 6 * self.S)
        dbg = blocks.message_debug()
        tb.connect(tx, head, blocks.null_sink(gr.sizeof_gr_complex))
        tb.msg_connect(tx, "request", dbg, "store")
        tb.run()
        reqs = [pmt.to_python(dbg.get_message(i)) for i in range(dbg.num_messages())]
        # slot 0 asks for 0..lead; every later slot n for n + lead: consecutive, no repeats
        self.assertEqual(len(reqs), lead + tx.slots())
        self.assertEqual([r["slot"] for r in reqs], list(range(len(reqs))))
        for r in reqs:  # 1667 samples at 1 Msps = 1.667 ms, exactly
            self.assertEqual(r["air_time_ns"], 2_000_000_000 + r["slot"] * 1_667_000)
        self.assertEqual(tx.requests(), len(reqs))

    def test_missing_grant_is_a_late_empty_slot_and_empty_grant_is_not_late(self):
        grants = [
            grant_dict(0, 0, 1, self.tb(1)),
            grant_dict(1, 0, 3, self.tb(3, 40)),
            empty_grant(3),
        ]
        x, _, tx = run_tx(grants, 5)
        built = tx.slots()
        self.assertGreaterEqual(built, 5)
        self.assertEqual(tx.tb_sent(), 2)
        self.assertEqual(tx.empty(), built - 2)
        self.assertEqual(tx.late(), built - 3)  # every slot but 0, 1, 3
        self.assertEqual(tx.grants_received(), 3)
        (reps,), _ = run_rx(x)
        self.assertEqual([r["slot"] for r in reps], [0, 1, 2, 3, 4])
        for r in reps:
            self.assertTrue(r["header_ok"])
        self.assertEqual([r["user"] for r in reps], [0, 0, 0xFFFF, 0xFFFF, 0xFFFF])
        full = oppsched.mcs_set.tb_bytes(1, oppsched.numerology.profile("evdo", 1e6))
        self.assertEqual(full, 74)  # QPSK 1/2, LDPC: (1248 / 2 - 32) / 8
        self.assertEqual([r["tb_bytes"] for r in reps], [full, 40, 0, 0, 0])
        self.assertEqual([r["crc_ok"] for r in reps], [True, True, False, False, False])

    def test_malformed_grants_are_counted_and_their_slot_goes_out_empty_not_late(self):
        bad_slot0 = grant_dict(0, 0, 9, b"abc")  # mcs 9
        too_long = grant_dict(1, 0, 0, bytes(36))  # MCS 0 carries 35 bytes (LDPC)
        bad_pid = grant_dict(2, 0, 0, b"x", harq_pid=16)
        nobody = grant_dict(3, 0xFFFF, 0, b"x")  # user 0xFFFF is reserved for "nobody"
        no_slot = pmt.dict_delete(grant_dict(4, 0, 0, b"x"), pmt.intern("slot"))
        not_dict = pmt.init_u8vector(3, [1, 2, 3])
        tb_not_bytes = pmt.dict_add(grant_dict(5, 0, 0, b"x"), pmt.intern("tb"), pmt.from_long(3))
        grants = [bad_slot0, too_long, bad_pid, nobody, no_slot, not_dict, tb_not_bytes]
        x, _, tx = run_tx(grants, 6)
        self.assertEqual(tx.grants_received(), 7)
        self.assertEqual(tx.grants_malformed(), 7)
        self.assertEqual(tx.tb_sent(), 0)
        # slots 0, 1, 2, 3, 5 had a (bad) grant: empty but not late; slot 4 and the rest late
        self.assertEqual(tx.late(), tx.slots() - 5)
        (reps,), rxs = run_rx(x)
        self.assertEqual(len(reps), 6)
        self.assertTrue(all(r["user"] == 0xFFFF and r["header_ok"] for r in reps))

    def test_duplicate_grant_keeps_the_first_and_a_grant_after_its_slot_is_late(self):
        first, second = self.tb(2), self.tb(2)
        tx = oppsched.slot_tx("evdo", 1e6, 3, 0.0)
        tx._post(pmt.intern("grant"), grant_dict(0, 0, 2, first))
        tx._post(pmt.intern("grant"), grant_dict(0, 0, 2, second))
        tb = gr.top_block()
        head = blocks.head(gr.sizeof_gr_complex, 2 * self.S)
        snk = blocks.vector_sink_c()
        tb.connect(tx, head, snk)
        tb.run()
        self.assertEqual(tx.grants_duplicate(), 1)
        built = tx.slots()
        # second run of the same block: a grant for slot 1 (already built) is late
        tx._post(pmt.intern("grant"), grant_dict(1, 0, 2, second))
        head.reset()
        tb.run()
        self.assertEqual(tx.grants_late(), 1)
        self.assertGreater(tx.slots(), built)
        (reps,), _ = run_rx(np.array(snk.data(), np.complex64)[: 2 * self.S])
        self.assertEqual(bytes(reps[0]["tb"]), first)

    def test_realtime_paces_slot_starts_on_the_monotonic_clock(self):
        import time

        tx = oppsched.slot_tx("evdo", 1e6, 3, 0.0, True, True)
        tb = gr.top_block()
        head = blocks.head(gr.sizeof_gr_complex, 30 * self.S)  # 50 ms of slots
        tb.connect(tx, head, blocks.null_sink(gr.sizeof_gr_complex))
        t = time.monotonic()
        tb.run()
        elapsed = time.monotonic() - t
        # slot 29 may not start before 29 slot durations (48.3 ms) after slot 0
        self.assertGreaterEqual(elapsed, 29 * 1.667e-3)

    def test_uplink_slot_goes_out_on_output_1_and_the_downlink_carries_no_payload(self):
        # slot 0 downlink to user 0, slot 1 station 1's uplink TB, slot 2 empty
        up_tb = self.tb(2)
        down_tb = self.tb(1)
        g_up = pmt.dict_add(grant_dict(1, 1, 2, up_tb, harq_pid=3, ndi=True),
                            pmt.intern("uplink"), pmt.PMT_T)
        tx = oppsched.slot_tx("evdo", 1e6, 3, 0.0)
        for g in (grant_dict(0, 0, 1, down_tb), g_up, empty_grant(2)):
            tx._post(pmt.intern("grant"), g)
        tb = gr.top_block()
        n = 3 * self.S
        down, up = blocks.vector_sink_c(), blocks.vector_sink_c()
        tb.connect((tx, 0), blocks.head(gr.sizeof_gr_complex, n), down)
        tb.connect((tx, 1), blocks.head(gr.sizeof_gr_complex, n), up)
        tb.run()
        self.assertEqual(tx.tb_sent(), 1)
        self.assertEqual(tx.uplink_tb_sent(), 1)
        self.assertEqual(tx.grants_malformed(), 0)
        # the two outputs are sample-aligned: one slot clock
        self.assertEqual(len(down.data()), len(up.data()))
        (d0, d1), _ = run_rx(np.array(down.data()), user_ids=(0, 1))
        (u0, u1), _ = run_rx(np.array(up.data()), user_ids=(0, 1))
        self.assertEqual([r["slot"] for r in d0], [0, 1, 2])
        # downlink: user 0's TB in slot 0; in the uplink slot an empty slot (no TB)
        self.assertEqual([r["user"] for r in d0], [0, 0xFFFF, 0xFFFF])
        self.assertEqual([r["tb_bytes"] for r in d0], [len(down_tb), 0, 0])
        self.assertEqual([r["crc_ok"] for r in d0], [True, False, False])
        self.assertEqual(bytes(d0[0]["tb"]), down_tb)
        self.assertFalse(any(r["addressed"] for r in d1))
        # uplink output: the stations' sounding in slots 0 and 2, station 1's TB in slot 1
        self.assertEqual([r["slot"] for r in u1], [0, 1, 2])
        self.assertEqual([r["user"] for r in u1], [0xFFFF, 1, 0xFFFF])
        self.assertTrue(u1[1]["addressed"] and u1[1]["crc_ok"])
        self.assertEqual((u1[1]["harq_pid"], u1[1]["ndi"], u1[1]["mcs"]), (3, True, 2))
        self.assertEqual(bytes(u1[1]["tb"]), up_tb)
        self.assertFalse(any(r["addressed"] for r in u0))

    def test_downlink_samples_are_the_same_with_or_without_the_uplink_output(self):
        # medium.mode none keeps its waveform: connecting output 1 changes nothing on output 0
        # while every grant is a downlink one.
        def grants():
            rng = np.random.default_rng(5)
            return [grant_dict(n, n % 2, 2, rng.integers(0, 256, 50, dtype=np.uint8).tobytes())
                    for n in range(4)] + [empty_grant(4)]

        alone, _, _ = run_tx(grants(), 6)
        tx = oppsched.slot_tx("evdo", 1e6, 3, 0.0)
        for g in grants():
            tx._post(pmt.intern("grant"), g)
        tb = gr.top_block()
        down, up = blocks.vector_sink_c(), blocks.vector_sink_c()
        tb.connect((tx, 0), blocks.head(gr.sizeof_gr_complex, 6 * self.S), down)
        tb.connect((tx, 1), blocks.head(gr.sizeof_gr_complex, 6 * self.S), up)
        tb.run()
        self.assertTrue(np.array_equal(np.array(down.data(), np.complex64), alone))
        self.assertEqual(tx.uplink_tb_sent(), 0)

    def test_clients_detect_and_measure_every_slot_while_stations_send_every_other(self):
        # The downlink of an uplink slot still carries a whole (empty) slot: at 20 dB the
        # client's receiver detects it and measures its SNR like the others.
        tx = oppsched.slot_tx("evdo", 1e6, 3, 0.0)
        n_slots = 12
        for n in range(n_slots):
            g = grant_dict(n, 0, 2, self.tb(2, 50), ndi=(n // 2) % 2)  # a new TB each time
            if n % 2:
                g = pmt.dict_add(g, pmt.intern("uplink"), pmt.PMT_T)
            tx._post(pmt.intern("grant"), g)
        tb = gr.top_block()
        down = blocks.vector_sink_c()
        tb.connect((tx, 0), blocks.head(gr.sizeof_gr_complex, n_slots * self.S), down)
        tb.connect((tx, 1), blocks.head(gr.sizeof_gr_complex, n_slots * self.S),
                   blocks.null_sink(gr.sizeof_gr_complex))
        tb.run()
        x = np.array(down.data(), np.complex64)
        p = np.mean(np.abs(x[: self.S]) ** 2)
        noise = self.rng.normal(size=(len(x), 2)) @ np.array([1, 1j]) * np.sqrt(p / 200)
        (reps,), _ = run_rx((x + noise).astype(np.complex64))
        self.assertGreaterEqual(len(reps), n_slots - 1)
        self.assertEqual([r["slot"] for r in reps], list(range(len(reps))))
        self.assertTrue(all(r["detected"] and r["header_ok"] for r in reps))
        snr = [r["snr_db"] for r in reps]
        self.assertLess(max(snr) - min(snr), 3.0)
        self.assertTrue(all(r["crc_ok"] for r in reps[0::2]))  # the downlink TBs

    def test_uplink_grant_without_output_1_is_malformed_and_its_slot_empty(self):
        g_up = pmt.dict_add(grant_dict(0, 1, 1, self.tb(1)), pmt.intern("uplink"), pmt.PMT_T)
        x, _, tx = run_tx([g_up], 2)
        self.assertEqual(tx.grants_malformed(), 1)
        self.assertEqual(tx.uplink_tb_sent(), 0)
        self.assertEqual(tx.tb_sent(), 0)
        (reps,), _ = run_rx(x, user_ids=(1,))
        self.assertEqual(reps[0]["user"], 0xFFFF)

    def test_bad_parameters_raise_naming_the_field(self):
        for kw, field in (
            (dict(lead_slots=0), "lead_slots"),
            (dict(profile="lte"), "profile"),
            (dict(sample_rate=-1.0), "sample_rate"),
            (dict(t0_s=-1.0), "t0_s"),
            (dict(max_pending=0), "max_pending"),
            (dict(slot_duration_s=-1.0), "slot_duration_s"),
        ):
            with self.assertRaisesRegex(ValueError, field):
                oppsched.slot_tx(**kw)


if __name__ == "__main__":
    gr_unittest.run(qa_slot_tx)
