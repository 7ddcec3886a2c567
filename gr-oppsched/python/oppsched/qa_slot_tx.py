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
from gnuradio.oppsched.testing import (empty_grant, grant_dict, run_rx, run_tx, run_tx_both,
                                       tags_of)


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
                    (n * S, "uplink_user", -1),
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
                (n * self.S, "uplink_user", -1),
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
        down, up, tx = run_tx_both((grant_dict(0, 0, 1, down_tb), g_up, empty_grant(2)), 3)
        self.assertEqual(tx.tb_sent(), 1)
        self.assertEqual(tx.uplink_tb_sent(), 1)
        self.assertEqual(tx.grants_malformed(), 0)
        # the two outputs are sample-aligned: one slot clock
        self.assertEqual(len(down), len(up))
        (d0, d1), _ = run_rx(down, user_ids=(0, 1))
        (u0, u1), _ = run_rx(up, user_ids=(0, 1), uplink=True)
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
        down, _, tx = run_tx_both(grants(), 6)
        self.assertTrue(np.array_equal(down, alone))
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

    def test_each_output_is_one_direction_and_a_receiver_keeps_only_its_own(self):
        # Output 0 carries the AP's headers (uplink bit clear), output 1 the stations'
        # (set), so a receiver hearing both over the air takes only its direction's.
        g_up = pmt.dict_add(grant_dict(1, 1, 2, self.tb(2)), pmt.intern("uplink"), pmt.PMT_T)
        down, up, _ = run_tx_both((grant_dict(0, 1, 1, self.tb(1)), g_up, empty_grant(2)), 3)
        (d_as_up,), (rx_a,) = run_rx(down, user_ids=(1,), uplink=True)
        (u_as_down,), (rx_b,) = run_rx(up, user_ids=(1,))
        self.assertEqual((d_as_up, u_as_down), ([], []))
        self.assertEqual((rx_a.other_direction(), rx_b.other_direction()), (3, 3))
        self.assertEqual((rx_a.slots_missed(), rx_b.slots_missed()), (0, 0))

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
            (dict(lead_slots=0), r"lead_slots: 0 not in \[1,1000\]"),
            (dict(lead_slots=1001), r"lead_slots: 1001 not in \[1,1000\]"),  # lead_slots.h
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


class qa_slot_gate(gr_unittest.TestCase):
    """TDD over the air: each radio sends only its own slots of slot_tx's two outputs."""

    def setUp(self):
        self.num = oppsched.numerology.profile("evdo", 1e6)
        self.S = self.num.slot_samples
        self.rng = np.random.default_rng(17)
        # slot 0: downlink to user 0; 1: station 1's uplink; 2: station 2's; 3: empty
        # (downlink); 4: station 1's uplink again (a new TB)
        self.tbs = {n: self.rng.integers(0, 256, 60, dtype=np.uint8).tobytes() for n in range(5)}
        self.owner = {0: -1, 1: 1, 2: 2, 3: -1, 4: 1}

    def grants(self):
        out = []
        for n, who in self.owner.items():
            if n == 3:
                out.append(empty_grant(3))
            elif who < 0:
                out.append(grant_dict(n, 0, 2, self.tbs[n]))
            else:
                g = grant_dict(n, who, 2, self.tbs[n], harq_pid=0, ndi=n == 4)
                out.append(pmt.dict_add(g, pmt.intern("uplink"), pmt.PMT_T))
        return out

    def run_gated(self, t0=7.5):
        """slot_tx in burst mode, output 0 through gate(-1) and output 1 through gates 0..2:
        {gate user: (samples, tags)}."""
        tx = oppsched.slot_tx("evdo", 1e6, 3, t0)  # burst mode (continuous False)
        for g in self.grants():
            tx._post(pmt.intern("grant"), g)
        tb = gr.top_block()
        n = 5 * self.S
        out, gates = {}, {}
        heads = [blocks.head(gr.sizeof_gr_complex, n) for _ in range(2)]
        tb.connect((tx, 0), heads[0])
        tb.connect((tx, 1), heads[1])
        for user in (-1, 0, 1, 2):
            gate = oppsched.slot_gate(user)
            snk = blocks.vector_sink_c()
            tb.connect(heads[0] if user < 0 else heads[1], gate, snk)
            out[user], gates[user] = snk, gate
        tb.run()
        return {u: (np.array(s.data(), np.complex64), tags_of(s)) for u, s in out.items()}, gates

    def test_each_radio_gets_exactly_its_slots_as_timed_bursts(self):
        t0 = 7.5
        got, gates = self.run_gated(t0)
        for user in (-1, 0, 1, 2):
            mine = [n for n, who in self.owner.items() if who == user]
            x, tags = got[user]
            self.assertEqual(len(x), len(mine) * self.S, user)
            expected = []
            for k, n in enumerate(mine):
                expected += [(k * self.S, "slot", n), (k * self.S, "uplink_user", user),
                             (k * self.S, "tx_sob", True),
                             (k * self.S, "tx_time", expected_tx_time(t0, n, self.S, 1e6)),
                             ((k + 1) * self.S - 1, "tx_eob", True)]
            expected.sort(key=lambda x: (x[0], x[1]))
            self.assertEqual(tags, expected, user)
            self.assertEqual(gates[user].slots_passed(), len(mine))
            self.assertEqual(gates[user].slots_dropped(), 5 - len(mine))

    def test_the_air_they_make_is_decoded_by_direction_and_station(self):
        # Each radio's bursts placed at their tx_time on one air, with noise (20 dB): the
        # AP's receiver for station 1 (uplink, own slots only) gets exactly station 1's two
        # TBs; client 0's downlink receiver its TB and the empty slot, none of the uplink.
        t0 = 0.0
        got, _ = self.run_gated(t0)
        air = np.zeros(5 * self.S, np.complex64)
        for user, (x, tags) in got.items():
            starts = [o for (o, k, _) in tags if k == "tx_time"]
            times = [v for (_, k, v) in tags if k == "tx_time"]
            for off, (full, frac) in zip(starts, times):
                pos = int(round((full + frac - t0) * 1e6))
                air[pos:pos + self.S] += x[off:off + self.S]
        p = np.mean(np.abs(got[-1][0][: self.S]) ** 2)
        air = air + (self.rng.normal(size=(len(air), 2)) @ np.array([1, 1j]) *
                     np.sqrt(p / 200)).astype(np.complex64)
        (ap1,), (rx_ap1,) = run_rx(air, user_ids=(1,), uplink=True, own_slots_only=True)
        self.assertEqual([r["slot"] for r in ap1], [1, 4])
        self.assertTrue(all(r["crc_ok"] and r["addressed"] for r in ap1))
        self.assertEqual([bytes(r["tb"]) for r in ap1], [self.tbs[1], self.tbs[4]])
        self.assertEqual(rx_ap1.other_direction(), 2)  # the AP's own slots 0 and 3
        self.assertEqual(rx_ap1.not_own(), 1)  # station 2's slot
        (c0, c1), (rx_c0, _) = run_rx(air, user_ids=(0, 1), missed_slots=0)
        self.assertEqual([r["slot"] for r in c0], [0, 3])
        self.assertTrue(c0[0]["crc_ok"])
        self.assertEqual(bytes(c0[0]["tb"]), self.tbs[0])
        self.assertEqual(rx_c0.other_direction(), 3)
        self.assertFalse(any(r["addressed"] for r in c1))  # station 1's own uplink is not
        # a downlink TB to client 1

    def test_bad_user_is_rejected_naming_it(self):
        with self.assertRaisesRegex(ValueError, r"slot_gate.user: -2"):
            oppsched.slot_gate(-2)
