#!/usr/bin/env python3
"""QA: the OFDM PHY seen from Python (numpy in, numpy out).

Random REs -> ofdm_modulator -> seeded numpy AWGN at a known Es/N0 per occupied
subcarrier -> ofdm_demodulator: the SNR estimate and the equalised REs must match;
the same through slot_sync on a stream and through the channel emulator.
"""

import numpy as np
from gnuradio import gr_unittest

from gnuradio import oppsched


def qam16(rng, n):
    lv = np.array([-3, -1, 1, 3], dtype=np.float32) / np.sqrt(10.0)
    return (rng.choice(lv, n) + 1j * rng.choice(lv, n)).astype(np.complex64)


def awgn(rng, n, sigma2):
    return (np.sqrt(sigma2 / 2) * (rng.standard_normal(n) + 1j * rng.standard_normal(n))).astype(
        np.complex64
    )


class qa_ofdm(gr_unittest.TestCase):
    def setUp(self):
        self.num = oppsched.numerology.profile("evdo", 1e6)
        self.mod = oppsched.ofdm_modulator(self.num)
        self.rng = np.random.default_rng(2024)

    def slot(self):
        hdr = qam16(self.rng, self.num.header_resource_elements)
        pay = qam16(self.rng, self.num.payload_resource_elements)
        return hdr, pay, self.mod.modulate(hdr, pay)

    def test_noiseless_round_trip_returns_the_res(self):
        hdr, pay, x = self.slot()
        self.assertEqual(len(x), self.num.slot_samples)
        self.assertEqual(x.dtype, np.complex64)
        r = oppsched.ofdm_demodulator(self.num).demodulate(x)
        self.assertTrue(r.valid)
        self.assertLess(np.max(np.abs(r.header - hdr)), 1e-4)
        self.assertLess(np.max(np.abs(r.payload - pay)), 1e-4)

    def test_snr_estimate_and_res_at_known_snr(self):
        # Es/N0 per occupied subcarrier = snr  <=>  sigma^2 = (64/52) 10^(-snr/10) per sample
        for snr in (5.0, 15.0, 25.0):
            sigma2 = self.num.noise_variance_for_snr_db(snr)
            self.assertAlmostEqual(sigma2, 64 / 52 * 10 ** (-snr / 10), places=12)
            dem = oppsched.ofdm_demodulator(self.num)
            est, ratio = [], []
            for _ in range(20):
                hdr, pay, x = self.slot()
                y = x + awgn(self.rng, len(x), sigma2)
                r = dem.demodulate(y)
                self.assertTrue(r.valid)
                est.append(r.snr.snr_db)
                # per-RE error normalised by the reported variance (a plain ratio of
                # means would be dominated by the few REs on a near-zero H^ at 5 dB)
                ratio.append(np.mean(np.abs(r.payload - pay) ** 2 / r.payload_nvar))
            self.assertLess(abs(np.mean(est[5:]) - snr), 0.5, f"{snr} dB")
            self.assertLess(np.max(np.abs(np.array(est[5:]) - snr)), 1.0, f"{snr} dB")
            # equalised REs: error variance as reported, ~1.5 N0 / |H^|^2 + CPE term
            self.assertAlmostEqual(np.mean(ratio), 1.0, delta=0.15)
            self.assertTrue(0 <= r.snr.cqi <= 15)
            self.assertEqual(r.snr.cqi, oppsched.cqi_from_snr_db(r.snr.effective_snr_db))

    def test_sync_finds_the_slots_of_a_stream_and_estimates_the_cfo(self):
        eps = 0.2  # subcarrier spacings
        parts, starts, pays = [], [], []
        pos = 0
        for gap in (500, 1200, 0, 800):
            parts.append(np.zeros(gap, np.complex64))
            pos += gap
            starts.append(pos)
            _, pay, x = self.slot()
            pays.append(pay)
            parts.append(x)
            pos += len(x)
        parts.append(np.zeros(2000, np.complex64))
        s = np.concatenate(parts)
        n = np.arange(len(s))
        s = (s * np.exp(2j * np.pi * eps * n / 64)).astype(np.complex64)
        s += awgn(self.rng, len(s), self.num.noise_variance_for_snr_db(15.0))
        sync = oppsched.slot_sync(self.num)
        found = []
        for i in range(0, len(s), 1000):  # chunked like a GNU Radio work() call
            found += sync.push(s[i : i + 1000])
        self.assertEqual(len(found), 4)
        dem = oppsched.ofdm_demodulator(self.num)
        for f, t, pay in zip(found, starts, pays):
            self.assertLessEqual(abs(int(f.start) - (t - 2)), 2)
            self.assertAlmostEqual(f.cfo, eps, delta=0.03)
            r = dem.demodulate(f.samples)
            self.assertLess(np.mean(np.abs(r.payload - pay) ** 2), 0.2)
        self.assertEqual(sync.stats.detections, 4)

    def test_emulator_users_get_their_mean_snr(self):
        users = [
            oppsched.emulator_user_params(mean_snr_db=8.0, fading=oppsched.fading_model.none),
            oppsched.emulator_user_params(mean_snr_db=20.0, fading=oppsched.fading_model.none),
        ]
        em = oppsched.channel_emulator(
            oppsched.channel_emulator_params(numerology=self.num.params, users=users, seed=5)
        )
        dem = [oppsched.ofdm_demodulator(self.num) for _ in users]
        est = [[], []]
        for _ in range(15):
            _, _, x = self.slot()
            y = em.process(x)
            self.assertEqual(y.shape, (2, len(x)))
            for u in range(2):
                est[u].append(dem[u].demodulate(y[u], payload=False).snr.snr_db)
        self.assertLess(abs(np.mean(est[0][5:]) - 8.0), 0.5)
        self.assertLess(abs(np.mean(est[1][5:]) - 20.0), 0.5)

    def test_bad_input_is_reported_not_crashing(self):
        dem = oppsched.ofdm_demodulator(self.num)
        r = dem.demodulate(np.zeros(self.num.slot_samples, np.complex64))
        self.assertFalse(r.valid)
        self.assertEqual(r.snr.cqi, 0)
        self.assertFalse(dem.demodulate(np.zeros(10, np.complex64)).valid)
        sync = oppsched.slot_sync(self.num)
        self.assertEqual(sync.push(awgn(self.rng, 200000, 1.0)), [])
        with self.assertRaisesRegex(ValueError, "slot_sync.timing_backoff: 20"):
            oppsched.slot_sync(self.num, oppsched.slot_sync_params(timing_backoff=20))
        with self.assertRaisesRegex(ValueError, "ofdm_modulator.payload"):
            self.mod.modulate(payload=np.zeros(10000, np.complex64))


if __name__ == "__main__":
    gr_unittest.run(qa_ofdm)
