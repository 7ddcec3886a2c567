"""Python plugins on the sample-level PHY (docs/extending.md): the same plugin files that run
in macsim and on the abstract PHY (test_plugins.py) decide the slots and run the queues of a
real-time run whose slots are OFDM samples through the GNU Radio loopback, the channel
emulator and the decoders. A scheduler (examples/plugins/maxweight.py) and an AQM
(examples/plugins/codel.py, on every queue) in one run, with real TCP."""

import json

import yaml

from helpers import REPO, needs_root, netns_prefix, require_real_testbed, write_experiment
from oppsched.run.runner import run_experiment

EXAMPLES = REPO / "examples" / "plugins"

SAMPLE = f"""
experiment: plugin-sample-phy
kind: testbed
duration_s: 6
phy: {{mode: sample, profile: evdo}}
devices:
  - {{name: R1, channel: {{mean_snr_db: 20.0, doppler_hz: 5.0, model: jakes}}}}
  - {{name: R2, channel: {{mean_snr_db: 14.0, doppler_hz: 5.0, model: jakes}}}}
servers:
  - {{name: S1, rtt_ms: 20}}
flows:
  - {{id: f1, server: S1, device: R1}}
  - {{id: f2, server: S1, device: R2}}
queue: {{limit_bytes: 60000}}
scheduler: {{kind: python, file: {EXAMPLES / 'maxweight.py'}, class: MaxWeight,
            params: {{beta: 1.0}}}}
aqm: {{kind: python, file: {EXAMPLES / 'codel.py'}, class: CoDel}}
"""


@needs_root
def test_a_python_scheduler_and_a_python_aqm_run_a_sample_phy_run_with_real_tcp(tmp_path):
    require_real_testbed()
    exp = write_experiment(tmp_path, SAMPLE)
    with netns_prefix():
        runs = run_experiment(exp, tmp_path / "out", ["capture.pcaps=false"])
    out, s = tmp_path / "out", runs[0][1]
    assert s["config"]["phy"]["mode"] == "sample"
    for f in s["flows"]:
        assert f["error"] is None and f["goodput_bps"] > 50e3, f
    # the scheduler: every slot with a candidate was the plugin's, or PF's in its place
    p = s["scheduler"]
    assert p["kind"] == "python" and p["plugin_decisions"] > 100, p
    assert p["plugin_exceptions"] == 0 and p["plugin_invalid_decisions"] == 0, p
    # the AQM: every queue's packets went through the plugin, and none is unaccounted for
    stats = json.loads((out / "apd.stats.json").read_text())
    for user in ("R1", "R2"):
        q = stats["core"]["aqm"][user]
        assert q["plugin_enqueue_calls"] == q["offered"] > 100, q
        assert q["plugin_dequeue_calls"] > 0, q
        assert q["plugin_exceptions"] == 0 and q["plugin_invalid_answers"] == 0, q
    assert stats["core"]["conservation"]["unaccounted"] == 0
    apd = yaml.safe_load((out / "apd.yaml").read_text())
    assert apd["scheduler"]["file"].endswith("/plugin.maxweight.py")
    assert apd["aqm"]["file"].endswith("/plugin.codel.py")
    # the PHY that ran is the sample-level one: it decoded TBs from samples
    phy = json.loads((out / "phy.stats.json").read_text())
    assert phy, "phy.stats.json is empty"
    assert s["harq"]["tb_sent"] > 100
