"""oppsched.testbed.chaos, the proxy of the chaos test, on its own: what it does to a numbered stream
follows its seed and nothing else, and every message is counted once by its fate."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

zmq = pytest.importorskip("zmq")

from helpers import REPO, write_yaml  # noqa: E402

N = 3000
P = {"drop": 0.05, "duplicate": 0.05, "reorder": 0.05, "delay": 0.05}


def _expected(seed: int):
    """The decisions the proxy must take for N messages on its first link: (dropped,
    duplicated) message numbers, replaying its generator (four draws per message)."""
    rng = random.Random(seed * 1000)
    dropped, duplicated = set(), set()
    for i in range(N):
        d = [rng.random() for _ in range(4)]
        if d[0] < P["drop"]:
            dropped.add(i)
        elif d[1] < P["duplicate"]:
            duplicated.add(i)
    return dropped, duplicated


def _start_proxy(conf: Path, z: Path):
    """The proxy of `conf` (one link "a": PULL bound at z/in, PUSH bound at z/out), once
    both are bound: (process, context, push to its input, pull from its output)."""
    proc = subprocess.Popen([sys.executable, "-m", "oppsched.testbed.chaos", "--config", str(conf)],
                            cwd=REPO / "tools", stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not ((z / "in").exists() and (z / "out").exists()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the proxy did not bind: {proc.stderr.read()}")
        time.sleep(0.02)
    ctx = zmq.Context()
    push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    push.connect(f"ipc://{z}/in")
    pull.connect(f"ipc://{z}/out")
    return proc, ctx, push, pull


def _run_proxy(tmp_path: Path, seed: int):
    z = tmp_path / "z"
    z.mkdir(exist_ok=True)
    conf = write_yaml(tmp_path / f"chaos{seed}.yaml", {
        "seed": seed, **P, "delay_ms": 3.0, "stats": str(tmp_path / f"chaos{seed}.json"),
        "links": [{"name": "a", "pull": {"bind": f"ipc://{z}/in"},
                   "push": {"bind": f"ipc://{z}/out"}}]})
    proc, ctx, push, pull = _start_proxy(conf, z)
    try:
        time.sleep(0.2)
        for i in range(N):
            push.send(i.to_bytes(4, "big"))
        got = []
        pull.setsockopt(zmq.RCVTIMEO, 1000)
        while True:
            try:
                got.append(int.from_bytes(pull.recv(), "big"))
            except zmq.Again:
                break
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        stats = json.loads((tmp_path / f"chaos{seed}.json").read_text())["links"]["a"]
        return got, stats
    finally:
        if proc.poll() is None:
            proc.kill()
        ctx.destroy(linger=0)


def test_the_proxy_drops_duplicates_reorders_and_delays_as_its_seed_says_and_counts_each(tmp_path):
    got, s = _run_proxy(tmp_path, 7)
    dropped, duplicated = _expected(7)
    assert s["received"] == N
    assert s["dropped"] == len(dropped) and s["duplicated"] == len(duplicated)
    assert s["send_failed"] == 0
    assert s["forwarded"] == N - len(dropped) + len(duplicated) == len(got)
    assert s["pending_at_exit"] == 0  # every delayed and held message was sent before it stopped
    # Exactly the dropped numbers are missing, exactly the duplicated ones come twice.
    assert set(range(N)) - set(got) == dropped
    assert {i for i in set(got) if got.count(i) == 2} == duplicated
    # Reordered and delayed messages arrive after a later one.
    late = sum(1 for a, b in zip(got, got[1:]) if b < a)
    assert s["reordered"] > 50 and s["delayed"] > 50 and late > 50
    # The same seed takes the same decisions, another seed others.
    got2, s2 = _run_proxy(tmp_path, 7)
    assert {k: s2[k] for k in ("dropped", "duplicated", "reordered", "delayed")} == \
        {k: s[k] for k in ("dropped", "duplicated", "reordered", "delayed")}
    assert set(range(N)) - set(got2) == dropped
    assert _expected(8)[0] != dropped


def test_messages_sent_after_a_bound_links_receiver_has_gone_are_counted_as_no_receiver(
        tmp_path):
    # The PHY stops before the proxy and connects to the grants link, which the proxy binds:
    # a grant the apd sends after that has no one to go to. It is counted apart, not as a
    # send the proxy failed, and every message still has exactly one fate.
    z = tmp_path / "z"
    z.mkdir()
    stats = tmp_path / "stats.json"
    conf = write_yaml(tmp_path / "gone.yaml", {
        "seed": 1, "stats": str(stats),
        "links": [{"name": "a", "pull": {"bind": f"ipc://{z}/in"},
                   "push": {"bind": f"ipc://{z}/out"}}]})
    proc, ctx, push, pull = _start_proxy(conf, z)
    try:
        pull.setsockopt(zmq.RCVTIMEO, 5000)
        for i in range(10):
            push.send(i.to_bytes(4, "big"))
        got = [int.from_bytes(pull.recv(), "big") for _ in range(10)]
        pull.close(0)  # the receiver goes
        time.sleep(0.5)
        for i in range(10, 13):
            push.send(i.to_bytes(4, "big"))
        deadline = time.monotonic() + 20
        while True:  # until the proxy has taken all 13 (each unsent one waits 100 ms)
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the proxy did not take the messages"
            if stats.exists():
                k = json.loads(stats.read_text())["links"]["a"]
                if k["forwarded"] + k["no_receiver"] + k["send_failed"] == 13:
                    break
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        ctx.destroy(linger=0)
    k = json.loads(stats.read_text())["links"]["a"]
    assert got == list(range(10))
    assert k["received"] == 13 and k["forwarded"] == 10
    assert k["no_receiver"] == 3 and k["send_failed"] == 0, k


def test_a_probability_outside_0_1_is_refused_naming_the_key(tmp_path):
    conf = write_yaml(tmp_path / "bad.yaml", {"drop": 1.5, "links": [{"name": "a"}]})
    r = subprocess.run([sys.executable, "-m", "oppsched.testbed.chaos", "--config", str(conf)],
                       cwd=REPO / "tools", capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "drop: 1.5 is not a probability" in r.stderr
