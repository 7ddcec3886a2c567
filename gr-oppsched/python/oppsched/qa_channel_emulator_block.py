#!/usr/bin/env python3
"""QA: the channel_emulator_cc block is the pure channel_emulator in a block: the same
output bit for bit (however the scheduler chunks the stream), one output per user, the
input's stream tags on every output; emulator_params builds its parameters from per-user
lists or from a configuration file and names the field of a bad value."""

import os
import tempfile

import numpy as np
import pmt
from gnuradio import blocks, gr, gr_unittest

from gnuradio import oppsched
from gnuradio.oppsched.testing import tags_of


class qa_channel_emulator_block(gr_unittest.TestCase):
    def params(self):
        return oppsched.emulator_params(
            mean_snr_db=[20.0, 5.0, 12.0],
            fading=["jakes", "sum_of_sinusoids", "none"],
            doppler_hz=[60.0, 0.6, 0.0],
            taps=[[(0, 0.0), (3, -3.0)], [], [(0, 0.0), (1, -6.0), (5, -10.0)]],
            cfo_hz=[0.0, 1500.0, -300.0],
            seed=42,
        )

    def test_block_output_equals_the_pure_emulator_bit_for_bit(self):
        rng = np.random.default_rng(1)
        x = (rng.standard_normal(20000) + 1j * rng.standard_normal(20000)) / np.sqrt(2)
        x = x.astype(np.complex64)
        ref = oppsched.channel_emulator(self.params()).process(x)
        tb = gr.top_block()
        src = blocks.vector_source_c(x.tolist(), False)
        em = oppsched.channel_emulator_cc(self.params())
        self.assertEqual(em.num_users(), 3)
        sinks = [blocks.vector_sink_c() for _ in range(3)]
        # a small output buffer forces many small chunks
        em.set_max_output_buffer(1024)
        tb.connect(src, em)
        for u, s in enumerate(sinks):
            tb.connect((em, u), s)
        tb.run()
        for u in range(3):
            y = np.array(sinks[u].data(), np.complex64)
            self.assertEqual(y.tobytes(), ref[u].tobytes(), f"user {u}")
        self.assertEqual(em.samples(), 20000)
        self.assertAlmostEqual(em.noise_variance(1), 64 / 52 * 10 ** (-0.5), places=6)

    def test_stream_tags_reach_every_output(self):
        x = np.ones(4000, np.complex64)
        tb = gr.top_block()
        tag = gr.tag_t()
        tag.offset, tag.key, tag.value = 1667, pmt.intern("slot"), pmt.from_uint64(1)
        src = blocks.vector_source_c(x.tolist(), False, 1, [tag])
        em = oppsched.channel_emulator_cc(oppsched.emulator_params(num_users=2, fading="none"))
        sinks = [blocks.vector_sink_c() for _ in range(2)]
        tb.connect(src, em)
        for u, s in enumerate(sinks):
            tb.connect((em, u), s)
        tb.run()
        for s in sinks:
            self.assertEqual(tags_of(s), [(1667, "slot", 1)])

    def test_old_names_clamp_are_accepted_with_a_deprecation_warning_as_jakes_and_3ms(self):
        def params(model, profile):
            cfg = {"profile": profile, "users": [{"model": model, "doppler_hz": 6.0}]}
            return oppsched.emulator_params(config=cfg)

        with self.assertWarnsRegex(DeprecationWarning,
                                   "users\\[0\\].model: value 'clamp' is deprecated, use 'jakes'"):
            old = params("clamp", "3ms")
        new = params("jakes", "3ms")
        self.assertEqual(old.users[0].fading, new.users[0].fading)
        self.assertEqual(old.users[0].jakes_angle_offset, new.users[0].jakes_angle_offset)
        # phy.yaml's old model name keeps phy.yaml's Jakes (the angle offset as printed)
        with self.assertWarns(DeprecationWarning):
            phy = oppsched.emulator_params(
                config={"users": [{"id": 0, "name": "u", "channel": {"model": "clamp"}}]})
        self.assertEqual(phy.users[0].fading, oppsched.fading_model.jakes)
        self.assertEqual(phy.users[0].jakes_angle_offset, 0.5)
        # the numerology's old profile name (logged as deprecated) is the 3 ms one
        self.assertEqual(oppsched.numerology.profile("clamp", 1e6).slot_samples,
                         oppsched.numerology.profile("3ms", 1e6).slot_samples)
        self.assertEqual(list(oppsched.numerology.profile_names()), ["evdo", "3ms"])
        with self.assertRaisesRegex(ValueError, "not one of evdo, 3ms"):
            oppsched.numerology.profile("fast", 1e6)
        with self.assertRaisesRegex(ValueError, "'rician' is not one of awgn, jakes, none, "
                                                "sum_of_sinusoids, trace$"):
            params("rician", "3ms")

    def test_params_from_a_config_file_and_errors_name_the_field(self):
        d = tempfile.mkdtemp()
        trace = os.path.join(d, "t.csv")
        with open(trace, "w") as f:
            f.write("time_s,snr_db\n0,10\n1,20\n")
        own = os.path.join(d, "em.yaml")
        with open(own, "w") as f:
            f.write(
                "sample_rate: 5.0e6\nprofile: 3ms\nseed: 9\nusers:\n"
                "  - {mean_snr_db: 15, model: jakes, doppler_hz: 0.6, taps: [[0, 0], [2, -3]]}\n"
                "  - {model: trace, trace: t.csv, cfo_hz: 100}\n"
            )
        p = oppsched.emulator_params(config=own)
        self.assertEqual((p.seed, len(p.users), p.numerology.sample_rate), (9, 2, 5e6))
        self.assertEqual(p.users[0].fading, oppsched.fading_model.jakes)
        self.assertEqual([t.delay_samples for t in p.users[0].taps], [0, 2])
        self.assertEqual(p.users[1].fading, oppsched.fading_model.none)
        self.assertEqual([pt.snr_db for pt in p.users[1].snr_trace], [10.0, 20.0])
        # a phy.yaml (docs/daemons.md): users[].channel, other keys ignored
        phy = os.path.join(d, "phy.yaml")
        with open(phy, "w") as f:
            f.write(
                "slot_s: 1.667e-3\nseed: 5\nusers:\n"
                "  - {id: 0, name: ue0, channel: {model: jakes, doppler_hz: 60.0}}\n"
                "  - {id: 1, name: ue1, channel: {model: awgn, mean_snr_db: 3.0}}\n"
            )
        p = oppsched.emulator_params(config=phy)
        self.assertEqual(p.seed, 5)
        self.assertAlmostEqual(p.users[0].mean_snr_db, 10 * np.log10(4))
        self.assertEqual(p.users[0].jakes_angle_offset, 0.5)  # as printed in Andrew & Hanly, CLAMP
        self.assertEqual(p.users[1].fading, oppsched.fading_model.none)
        bad = os.path.join(d, "bad.yaml")
        for text, field in (
            ("users:\n  - {model: jakes, dopler_hz: 3}\n", "users\\[0\\].dopler_hz"),
            ("users:\n  - {model: rician}\n", "users\\[0\\].model"),
            ("users:\n  - {doppler_hz: -1}\n", "doppler_hz"),
            ("users: []\n", "users"),
            ("seeds: 3\nusers:\n  - {}\n", "seeds"),
        ):
            with open(bad, "w") as f:
                f.write(text)
            with self.assertRaisesRegex(ValueError, field):
                oppsched.emulator_params(config=bad)
        with self.assertRaisesRegex(ValueError, "num_users"):
            oppsched.emulator_params(mean_snr_db=[1, 2], cfo_hz=[0, 0, 0])
        with self.assertRaisesRegex(ValueError, "cfo_hz"):
            oppsched.channel_emulator_cc(oppsched.emulator_params(cfo_hz=6e5))


if __name__ == "__main__":
    gr_unittest.run(qa_channel_emulator_block)
