"""Andrew & Hanly, CLAMP, Fig. 5(b), shortened: experiments/clamp/download.yaml's NewReno
side at 60 Hz with its 60 kB drop-tail buffer, 200-kB downloads back to back instead of
1 MB (so that every flow completes several in a 30 s run). Asserts what Fig. 5(b) starts
from: in the queue that flows 3 (10 ms) and 4 (180 ms) share, NewReno favours the short
round trip, so the 180 ms flow's downloads take longer and it completes fewer of them.
(CLAMP's side needs longer runs: each download is a new connection, and CLAMP's start-up,
experiments/clamp/README.md, weighs on the 180 ms flow for tens of seconds.)"""

import json

import pytest

from helpers import REPO, needs_root, shortened_sweep

EXPERIMENT = REPO / "experiments" / "clamp" / "download.yaml"
BYTES = 200_000


@pytest.fixture(scope="module")
def newreno_downloads(tmp_path_factory):
    out = shortened_sweep(tmp_path_factory.mktemp("clamp-download"), EXPERIMENT, [
        "sweep.axes={doppler_hz: {key: [\"devices[0].channel.doppler_hz\","
        " \"devices[1].channel.doppler_hz\", \"devices[2].channel.doppler_hz\"],"
        " values: [60.0]}}",
        "variants=[{name: clamp-off, set: {clamp.enabled: false, queue.limit_bytes: 60000}}]",
        *(f"flows[{i}].bytes={BYTES}" for i in range(4)),
        "analysis.warmup_s=5",
    ], duration=30.0)
    (summary,) = list(out.glob("points/*/clamp-off/seed-*/summary.json"))
    return {f["id"]: f["transfers"] for f in json.loads(summary.read_text())["flows"]}


@needs_root
def test_newreno_makes_the_long_round_trip_wait_longer_for_its_downloads(newreno_downloads):
    # Measured over two runs: flow 3 completes 14 downloads of 1.6-1.8 s, flow 4 four of
    # 3.0-3.8 s (1.8-2.2 times as long).
    f3, f4 = newreno_downloads["f3"], newreno_downloads["f4"]
    assert all(t["bytes_per_transfer"] == BYTES for t in newreno_downloads.values())
    assert f4["completed"] >= 1 and f3["completed"] > f4["completed"], (f3, f4)
    assert f4["time_mean_s"] > 1.4 * f3["time_mean_s"], (f3["time_mean_s"], f4["time_mean_s"])
