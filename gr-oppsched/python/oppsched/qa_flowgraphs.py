#!/usr/bin/env python3
"""QA: every flowgraph in flowgraphs/ compiles with grcc (our block YAML found through
GRC_BLOCKS_PATH=gr-oppsched/grc, output to a temporary folder), every block YAML of
gr-oppsched/grc is used by some flowgraph (so each is compiled), and the flowgraphs that
need no radio are built (their constructors run: the YAML make templates must match the
blocks' Python signatures). Radios are never opened and no flowgraph is started."""

import glob
import os
import shutil
import subprocess
import sys
import tempfile

import yaml
from gnuradio import gr_unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
FLOWGRAPHS = os.path.join(ROOT, "flowgraphs")
GRC_DIR = os.path.join(ROOT, "gr-oppsched", "grc")
GRCC = shutil.which("grcc") or "/usr/bin/grcc"


class qa_flowgraphs(gr_unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix="oppsched-grcc-")
        cls.files = sorted(glob.glob(os.path.join(FLOWGRAPHS, "*.grc")))
        cls.env = dict(os.environ, GRC_BLOCKS_PATH=GRC_DIR)
        # one grcc for all files: it loads the block library once (~2 s); it stops at the
        # first file that fails, which its output names (">>> Loading: FILE")
        cls.grcc = subprocess.run(
            [GRCC, "-o", cls.out] + cls.files,
            env=cls.env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def test_every_flowgraph_compiles_with_grcc(self):
        self.assertGreaterEqual(len(self.files), 8)
        log = self.grcc.stdout + self.grcc.stderr
        self.assertEqual(self.grcc.returncode, 0, log)
        self.assertNotIn("Error", log)
        for f in self.files:
            with open(f, encoding="utf-8") as fh:
                fg_id = yaml.safe_load(fh)["options"]["parameters"]["id"]
            py = os.path.join(self.out, fg_id + ".py")
            self.assertTrue(os.path.exists(py), os.path.basename(f))
            with open(py, encoding="utf-8") as fh:
                compile(fh.read(), py, "exec")

    def test_every_generated_script_parses_its_command_line(self):
        # Two parameters with the same short option make the script fail at start, which
        # grcc does not see.
        for f in self.files:
            with open(f, encoding="utf-8") as fh:
                fg_id = yaml.safe_load(fh)["options"]["parameters"]["id"]
            code = (f"import sys; sys.path.insert(0, {self.out!r}); import {fg_id}; "
                    f"{fg_id}.argument_parser().parse_args([])")
            p = subprocess.run([sys.executable, "-c", code], env=dict(self.env,
                               QT_QPA_PLATFORM="offscreen"), capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 0, f"{os.path.basename(f)}: {p.stderr[-800:]}")

    def test_uhd_and_zeromq_variants_exist_for_ap_client_and_emulator(self):
        names = {os.path.basename(f)[:-4] for f in self.files}
        for role in ("ap_tx", "client_rx", "channel_emulator"):
            for variant in ("uhd", "zmq"):
                self.assertIn(f"{role}_{variant}", names)
        self.assertIn("loopback", names)
        self.assertIn("example_qt", names)

    def test_every_block_yaml_is_used_by_a_flowgraph(self):
        used = set()
        for f in self.files:
            with open(f, encoding="utf-8") as fh:
                used |= {b["id"] for b in yaml.safe_load(fh)["blocks"]}
        for y in glob.glob(os.path.join(GRC_DIR, "*.block.yml")):
            with open(y, encoding="utf-8") as fh:
                block_id = yaml.safe_load(fh)["id"]
            self.assertIn(block_id, used, os.path.basename(y))

    def test_radio_free_flowgraphs_construct(self):
        d = tempfile.mkdtemp(prefix="oppsched-fg-")
        ep = lambda n: f"ipc://{d}/{n}"  # noqa: E731
        cases = {
            "loopback": dict(
                phy_requests=ep("req"), phy_grants=ep("grants"), rx_0=ep("rx_0"), rx_1=ep("rx_1")
            ),
            "ap_tx_zmq": dict(
                phy_requests=ep("req"), phy_grants=ep("grants"), samples_out=ep("ap")
            ),
            "channel_emulator_zmq": dict(
                samples_in=ep("ap"), samples_out_0=ep("s0"), samples_out_1=ep("s1")
            ),
            "client_rx_zmq": dict(samples_in=ep("s0"), rx_endpoint=ep("rx_0"), user_id=0),
        }
        from gnuradio import oppsched

        if not oppsched.zmq_bridges_available():  # built without ZeroMQ: no bridges
            for mod in ("loopback", "ap_tx_zmq", "client_rx_zmq"):
                del cases[mod]
        code = ["import sys", f"sys.path.insert(0, {self.out!r})"]
        for mod, kw in cases.items():
            code += [f"import {mod}", f"fg = {mod}.{mod}(**{kw!r})", "del fg"]
        code += [
            "from PyQt5 import Qt",
            "app = Qt.QApplication([])",
            "import example_qt",
            "fg = example_qt.example_qt(snr=12.0, mcs=2)",
            "assert fg.gen.mcs == [2] and fg.emulator.num_users() == 1",
            "print('constructed')",
        ]
        env = dict(self.env, QT_QPA_PLATFORM="offscreen")
        p = subprocess.run(
            [sys.executable, "-c", "\n".join(code)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        shutil.rmtree(d, ignore_errors=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("constructed", p.stdout)


if __name__ == "__main__":
    gr_unittest.run(qa_flowgraphs)
