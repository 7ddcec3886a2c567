#!/usr/bin/env python3
"""QA: the numerology seen from Python is the one the C++ blocks use."""

from gnuradio import gr_unittest

from gnuradio import oppsched


class qa_numerology(gr_unittest.TestCase):
    def test_3ms_profile_at_1_msps_has_3000_samples_per_slot(self):
        n = oppsched.numerology.profile("3ms", 1e6)
        self.assertEqual(n.slot_samples, 3000)
        self.assertEqual(n.symbols_per_slot, 37)
        self.assertEqual(n.guard_samples, 40)

    def test_bad_cp_len_raises_value_error_naming_the_field(self):
        p = oppsched.numerology_params()
        p.cp_len = -1
        with self.assertRaisesRegex(ValueError, "cp_len: -1"):
            oppsched.numerology(p)


if __name__ == "__main__":
    gr_unittest.run(qa_numerology)
