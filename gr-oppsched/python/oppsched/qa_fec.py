#!/usr/bin/env python3
"""QA: the PHY bit chain (MCS table, TB encoder/decoder, HARQ buffer, header codec) through
the Python API, with numpy noise (seeded)."""

import numpy as np
from gnuradio import gr_unittest

from gnuradio import oppsched


def awgn(x, n0, rng):
    """complex white Gaussian noise of variance n0 (E|n|^2) added to x"""
    s = np.sqrt(n0 / 2.0)
    return (x + s * (rng.standard_normal(x.size) + 1j * rng.standard_normal(x.size))).astype(
        np.complex64
    )


class qa_fec(gr_unittest.TestCase):
    def setUp(self):
        self.num = oppsched.numerology.profile("3ms", 1e6)
        self.enc = oppsched.tb_encoder(self.num)
        self.dec = oppsched.tb_decoder(self.num)
        self.rng = np.random.default_rng(2024)

    def test_every_mcs_round_trips_a_full_tb_at_30_db(self):
        n0 = 10 ** (-30 / 10)
        harq = self.dec.make_harq_buffer()
        for m in oppsched.mcs_set.all():
            nbytes = oppsched.mcs_set.tb_bytes(m.index, self.num)
            tb = self.rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()
            seed = oppsched.scrambler_seed_for_slot(1000 + m.index)
            re = self.enc.encode(tb, mcs=m.index, rv=0, scrambler_seed=seed)
            self.assertEqual(re.dtype, np.complex64)
            self.assertEqual(re.size, self.num.payload_resource_elements)
            rx = awgn(re, n0, self.rng)
            nv = np.full(rx.size, n0, dtype=np.float32)
            r = self.dec.decode(
                rx, nv, harq, mcs=m.index, rv=0, tb_bytes=nbytes,
                ndi=bool(m.index % 2), scrambler_seed=seed,
            )
            self.assertTrue(r.crc_ok, m.name)
            self.assertEqual(r.bytes, tb, m.name)
            self.assertEqual(r.stats.receptions, 1)

    def test_chase_combining_rescues_a_low_snr_tb(self):
        # QPSK 3/4 at 3 dB fails alone (BLER ~1); two receptions combined decode
        mcs, n0 = 2, 10 ** (-3.0 / 10)
        nbytes = oppsched.mcs_set.tb_bytes(mcs, self.num)
        harq = self.dec.make_harq_buffer()
        ok_first = ok_second = 0
        for t in range(20):
            tb = self.rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()
            re = self.enc.encode(tb, mcs=mcs, rv=0, scrambler_seed=5)
            ndi = bool(t % 2)
            r1 = self.dec.decode(awgn(re, n0, self.rng), n0, harq, mcs=mcs, tb_bytes=nbytes,
                                 ndi=ndi, scrambler_seed=5)
            r2 = self.dec.decode(awgn(re, n0, self.rng), n0, harq, mcs=mcs, tb_bytes=nbytes,
                                 ndi=ndi, scrambler_seed=5)
            ok_first += r1.crc_ok
            ok_second += r2.crc_ok and r2.bytes == tb
            self.assertEqual(r2.stats.receptions, 2)
        self.assertLess(ok_first, 10)
        self.assertGreater(ok_second, 15)

    def test_header_round_trip_and_garbage_rejection(self):
        hc = oppsched.header_codec(self.num)
        f = oppsched.header_fields(user=513, mcs=3, harq_process=7, ndi=True, rv=2,
                                   tb_bytes=100, slot=123456789)
        re = hc.encode(f)
        self.assertEqual(re.size, hc.resource_elements)
        self.assertEqual(hc.decode(awgn(re, 0.1, self.rng), 0.1), f)
        self.assertEqual(hc.unpack(hc.pack(f)), f)
        garbage = awgn(np.zeros(re.size, np.complex64), 1.0, self.rng)
        with self.assertRaisesRegex(ValueError, "header: "):
            hc.decode(garbage, 1.0)

    def test_bad_arguments_raise_value_error_naming_the_field(self):
        with self.assertRaisesRegex(ValueError, "mcs: 8"):
            oppsched.mcs_set.get(8)
        with self.assertRaisesRegex(ValueError, "rv: 5"):
            self.enc.encode(b"abc", mcs=0, rv=5, scrambler_seed=1)
        with self.assertRaisesRegex(ValueError, "header.harq_process: 16"):
            oppsched.header_codec(self.num).encode(oppsched.header_fields(harq_process=16))


if __name__ == "__main__":
    gr_unittest.run(qa_fec)
