#!/usr/bin/env python3
"""QA: committed golden TX vectors (testdata/golden_evdo_1msps_<fec>.*, made by
testdata/make_golden.py, one set per payload FEC): the RX must decode them to the committed
bytes, and the TX must reproduce them.

Reproduction is checked in two parts. (1) Within one process slot_tx is bit-exact: the
same grants give the same samples, bit for bit. (2) Against the committed file the
samples must agree to FFT rounding (|diff| <= 1e-5): GNU Radio's FFT plans with
FFTW_MEASURE and caches wisdom in ~/.gr_fftw_wisdom, and different plans round the last
bit differently (measured: up to 3e-7, i.e. 1 ulp, between a fresh and a used wisdom
file). The smallest change of the transmitted bits moves a constellation point by >= 0.3
(64QAM), i.e. >= 0.04 per time sample, so the tolerance cannot hide a real change.
"""

import json
import os
import sys

import numpy as np
from gnuradio import gr_unittest

from gnuradio import oppsched
from gnuradio.oppsched.testing import run_rx

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "testdata")
sys.path.insert(0, TESTDATA)
import make_golden  # noqa: E402


class golden_case:
    FEC = "ldpc"

    def setUp(self):
        self.x = np.load(os.path.join(TESTDATA, make_golden.stem(self.FEC) + ".npy"))
        with open(os.path.join(TESTDATA, make_golden.stem(self.FEC) + ".json"),
                  encoding="utf-8") as f:
            self.meta = json.load(f)
        self.num = oppsched.numerology.profile(self.meta["profile"], self.meta["sample_rate"],
                                               self.FEC)

    def test_golden_file_has_the_documented_shape(self):
        self.assertEqual(self.meta["fec"], self.FEC)
        self.assertEqual(self.x.dtype, np.complex64)
        self.assertEqual(len(self.x), self.meta["slots"] * self.num.slot_samples)
        self.assertEqual(self.meta["grants"], make_golden.golden_grants(self.FEC))

    def test_rx_decodes_the_committed_samples_to_the_committed_bytes(self):
        (r0, r1), (rx0, rx1) = run_rx(
            self.x, self.meta["profile"], self.meta["sample_rate"], (0, 1), fec=self.FEC
        )
        g0, g1, g2 = self.meta["grants"]
        self.assertEqual([r["slot"] for r in r0], [0, 1, 2])
        self.assertEqual([r["slot"] for r in r1], [0, 1, 2])
        # slot 0 for user 0, slot 2 for user 1, slot 1 empty
        self.assertEqual(bytes(r0[0]["tb"]), bytes.fromhex(g0["tb"]))
        self.assertEqual(bytes(r1[2]["tb"]), bytes.fromhex(g2["tb"]))
        self.assertEqual(
            (r1[2]["mcs"], r1[2]["harq_pid"], r1[2]["ndi"], r1[2]["rv"]), (7, 3, True, 1)
        )
        self.assertEqual(r0[1]["user"], 0xFFFF)
        self.assertNotIn("tb", r0[2])  # not addressed to user 0
        self.assertNotIn("tb", r1[0])
        self.assertEqual((rx0.tb_ok(), rx1.tb_ok(), rx0.tb_failed(), rx1.tb_failed()), (1, 1, 0, 0))

    def test_tx_reproduces_the_committed_samples(self):
        _, a = make_golden.generate(self.FEC)
        _, b = make_golden.generate(self.FEC)
        self.assertEqual(a.tobytes(), b.tobytes())  # bit-exact within a process
        self.assertEqual(a.shape, self.x.shape)
        self.assertLessEqual(float(np.max(np.abs(a - self.x))), 1e-5)
        # ...and the tolerance is far below what one changed coded bit would cause
        g = make_golden.golden_grants(self.FEC)
        tb = bytearray.fromhex(g[0]["tb"])
        tb[0] ^= 1
        g[0]["tb"] = tb.hex()
        from gnuradio.oppsched.testing import run_tx

        c, _, _ = run_tx([make_golden.to_pmt(x) for x in g], 3, fec=self.FEC)
        self.assertGreater(float(np.max(np.abs(c - self.x))), 0.01)


class qa_golden_ldpc(golden_case, gr_unittest.TestCase):
    FEC = "ldpc"


class qa_golden_conv(golden_case, gr_unittest.TestCase):
    FEC = "conv"


if __name__ == "__main__":
    gr_unittest.main()
