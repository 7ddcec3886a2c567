"""oppsched-wrc end to end on 127.0.0.1 (no namespaces, no root): the paced sender and the
receiver of the weighted rate control (Nandagopal et al., Fig. 3), through a user-space
bottleneck written here (a relay thread: drop-tail FIFO of 50 packets served at a fixed
packet rate, optional seeded random loss; feedback passes straight back).

The assertions are on counts and on the receiver's per-epoch decisions, not on timing: a
slow machine changes how many epochs a run has, not what they must show. The receiver's
alpha is raised (10 packets/s per increase instead of §IV's 0.1) so that a run of a few
seconds shows the whole control loop; the unit tests (host/tests/test_wrc.cc) pin the
paper's parameters.

The binary: $OPPSCHED_WRC_BIN, else host/daemon/oppsched-wrc in $OPPSCHED_BUILD, else in
build/.
"""

from __future__ import annotations

import csv
import json
import random
import select
import socket
import subprocess
import threading
import time
from collections import deque
from pathlib import Path

import pytest

from helpers import built_program, require, write_yaml

PACKET = 512  # Nandagopal et al., §IV


@pytest.fixture(scope="module")
def wrc_bin() -> Path:
    b = built_program("host/daemon/oppsched-wrc", "OPPSCHED_WRC_BIN")
    require(b is not None, "oppsched-wrc is not built (cmake --build build --target oppsched-wrc)")
    return b


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bottleneck(threading.Thread):
    """UDP relay: datagrams from the sender go through a drop-tail FIFO of `buffer` packets
    that releases one every 1/capacity_pps seconds (none if capacity_pps is None) and is
    lost with probability `loss` (seeded); datagrams from the receiver go back to the
    sender at once."""

    def __init__(self, receiver: tuple, capacity_pps: float | None, buffer: int = 50,
                 loss: float = 0.0, seed: int = 1):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.address = self.sock.getsockname()
        self.receiver = receiver
        self.service = None if capacity_pps is None else 1.0 / capacity_pps
        self.buffer = buffer
        self.loss = loss
        self.rng = random.Random(seed)
        self.sender = None
        self.queue: deque = deque()
        self.stop_flag = threading.Event()
        self.arrived = self.dropped = self.lost = self.forwarded = self.feedback = 0

    def run(self):
        next_departure = 0.0
        while not self.stop_flag.is_set():
            now = time.monotonic()
            timeout = 0.05
            if self.queue:
                timeout = max(0.0, min(timeout, next_departure - now))
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if ready:
                for _ in range(64):
                    try:
                        data, src = self.sock.recvfrom(65536, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        break
                    if src == self.receiver:
                        self.feedback += 1
                        if self.sender:
                            self.sock.sendto(data, self.sender)
                        continue
                    self.sender = src
                    self.arrived += 1
                    if len(self.queue) >= self.buffer:
                        self.dropped += 1
                        continue
                    if not self.queue:
                        next_departure = max(next_departure, time.monotonic())
                    self.queue.append(data)
            now = time.monotonic()
            while self.queue and (self.service is None or now >= next_departure):
                data = self.queue.popleft()
                if self.service is not None:
                    next_departure += self.service
                if self.loss and self.rng.random() < self.loss:
                    self.lost += 1
                    continue
                self.sock.sendto(data, self.receiver)
                self.forwarded += 1

    def stop(self):
        self.stop_flag.set()
        self.join(timeout=5)
        self.sock.close()


def receiver_config(tmp: Path, port: int, **wrc) -> Path:
    return write_yaml(tmp / "recv.yaml", {
        "bind": f"127.0.0.1:{port}",
        "idle_timeout_s": 1.5,
        "wrc": {"alpha_pps": 10.0, **wrc},
        "traces": {"epochs": str(tmp / "epochs.csv"), "stats": str(tmp / "recv.json")},
    })


def sender_config(tmp: Path, destination: tuple, **keys) -> Path:
    return write_yaml(tmp / "send.yaml", {
        "flow_id": 7,
        "weight": 1,
        "destination": f"{destination[0]}:{destination[1]}",
        "bind": "127.0.0.1:0",
        "packet_bytes": PACKET,
        **keys,
        "traces": {"rates": str(tmp / "rates.csv"), "stats": str(tmp / "send.json")},
    })


def run_pair(wrc_bin: Path, tmp: Path, relay: Bottleneck, send_cfg: Path, recv_cfg: Path,
             during=None):
    recv = subprocess.Popen([wrc_bin, "recv", "--config", recv_cfg],
                            stderr=subprocess.PIPE, text=True)
    relay.start()
    try:
        time.sleep(0.3)
        send = subprocess.run([wrc_bin, "send", "--config", send_cfg], capture_output=True,
                              text=True, timeout=60)
        assert send.returncode == 0, send.stderr
        if during:
            during()
        _, err = recv.communicate(timeout=30)  # exits idle_timeout_s after the last packet
        assert recv.returncode == 0, err
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
        relay.stop()
    epochs = list(csv.DictReader(open(tmp / "epochs.csv")))
    return (json.loads((tmp / "send.json").read_text()),
            json.loads((tmp / "recv.json").read_text()), epochs)


def test_bottleneck_at_half_the_initial_rate_brings_graded_decreases_then_rates_near_capacity(
        wrc_bin, tmp_path):
    capacity = 100.0
    port = free_port()
    relay = Bottleneck(("127.0.0.1", port), capacity_pps=capacity, buffer=50)
    sent, got, epochs = run_pair(
        wrc_bin, tmp_path, relay,
        sender_config(tmp_path, relay.address, initial_rate_pps=2 * capacity, duration_s=8.0),
        receiver_config(tmp_path, port))

    flow = got["flows"]["7"]
    # Every packet is accounted for: received, or dropped by the bottleneck's buffer.
    assert sent["stop_reason"] == "duration"
    assert sent["sent"]["packets"] == flow["received"] + relay.dropped
    assert relay.forwarded == flow["received"]
    assert flow["lost"] <= relay.dropped
    assert flow["late"] == 0  # a FIFO does not reorder
    assert flow["received"] + flow["lost"] == flow["highest_seq"] + 1
    assert got["malformed"]["total"] == 0

    decided = [e for e in epochs if e["decision"] in ("increase", "decrease")]
    assert len(decided) >= 5, epochs
    # The trace's `received` counts the flow's packets before each row: never down, and
    # at most what the receiver got in the end.
    counts = [int(e["received"]) for e in epochs]
    assert counts == sorted(counts) and 0 < counts[-1] <= flow["received"], counts
    # Sending at twice the capacity: the first decision is a decrease on a ratio near 2,
    # and consecutive decreases are graded 10 %, 20 %, 40 %, 50 % (Fig. 3 lines 25-26).
    first = decided[0]
    assert first["decision"] == "decrease"
    assert float(first["savg_ratio"]) > 1.3
    run = []
    for e in decided:
        if e["decision"] != "decrease":
            break
        run.append(float(e["delta"]))
    assert run == [0.1, 0.2, 0.4, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5][:len(run)]
    assert len(run) >= 2
    for e in decided:  # the rule itself, on every epoch the receiver decided
        if e["decision"] == "decrease":
            assert float(e["lavg_ratio"]) >= float(e["threshold"])
            assert float(e["rate_pps"]) == pytest.approx(
                max(float(e["rate_before_pps"]) * (1 - float(e["delta"])), 1.0), rel=1e-6)
        else:
            assert float(e["lavg_ratio"]) < float(e["threshold"])
            assert float(e["rate_pps"]) == pytest.approx(float(e["rate_before_pps"]) + 10.0)
    # The loop finds the link again: increases follow, and the rate stays near the capacity
    # instead of at the initial twice the capacity.
    assert any(e["decision"] == "increase" for e in decided)
    rates = [float(e["rate_pps"]) for e in decided[len(decided) // 2:]]
    assert max(rates) < 1.5 * capacity, rates
    assert sum(rates) / len(rates) > 0.2 * capacity, rates
    assert sent["feedback"]["rate_changes"] >= 3


def test_random_channel_loss_is_not_taken_for_congestion(wrc_bin, tmp_path):
    port = free_port()
    # No capacity limit; 5 % of packets lost at random, as a lossy radio channel would.
    relay = Bottleneck(("127.0.0.1", port), capacity_pps=None, loss=0.05, seed=3)
    packets = 250

    def garbage():  # bad datagrams are counted, never fatal
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for n in (0, 5, 31, 40):  # three too short, one of zeros (magic 0x0000)
                s.sendto(bytes(n), ("127.0.0.1", port))
            s.sendto(b"\x12\x34\x01\x01" + bytes(60), ("127.0.0.1", port))

    sent, got, epochs = run_pair(
        wrc_bin, tmp_path, relay,
        sender_config(tmp_path, relay.address, initial_rate_pps=50.0, max_bytes=packets * PACKET),
        receiver_config(tmp_path, port), during=garbage)

    flow = got["flows"]["7"]
    assert sent["stop_reason"] == "max_bytes"
    assert sent["sent"]["packets"] == packets
    assert flow["received"] == packets - relay.lost
    assert relay.lost >= 5
    # Gaps seen at the receiver (a loss at the very end is invisible to it).
    assert relay.lost - 1 <= flow["lost"] <= relay.lost
    # Classified by per-packet separation: most single losses fall inside the band.
    assert flow["gaps"] >= 5
    assert flow["random_losses"] >= 0.7 * flow["gaps"], flow
    # A loss classified random leaves the rate as it was (only a congestion loss cuts it).
    randoms = [e for e in epochs if e["decision"] == "random_loss"]
    assert len(randoms) == flow["random_losses"]
    assert all(float(e["rate_pps"]) == float(e["rate_before_pps"]) for e in randoms), randoms
    # The epochs mostly raise the rate despite the losses. Whether the sender ends above its
    # initial rate is not asserted: on a loaded machine the relay's and the receiver's
    # scheduling delays can make an epoch's separation ratio read as congestion, and a
    # decrease of 10-50 % undoes several +10 pkt/s increases.
    decided = [e for e in epochs if e["decision"] in ("increase", "decrease")]
    assert decided
    assert sum(e["decision"] == "increase" for e in decided) > len(decided) / 2
    assert sent["feedback"]["rate_changes"] >= 1  # the sender follows the receiver's rates
    assert got["malformed"]["total"] == 5
    assert got["malformed"]["by_field"] == {"length": 3, "magic": 2}


@pytest.mark.parametrize("mode,config,message", [
    ("send", {"destination": "1.2.3:99"}, "destination: '1.2.3:99' is not an IPv4 A.B.C.D:PORT"),
    ("send", {"destination": "127.0.0.1:9", "packet_bytes": 16}, "packet_bytes: 16 not in [32,"),
    ("send", {"destination": "127.0.0.1:9", "initial_rate_pps": 0},
     "initial_rate_pps: 0 not in (0,inf)"),
    ("recv", {"bind": "127.0.0.1:9", "wrc": {"lavg_weight": 1.5}}, "wrc.lavg_weight: 1.5"),
    ("recv", {"bind": "127.0.0.1:9", "wrc": {"differentiation": "both"}},
     "wrc.differentiation: 'both' not one of"),
    ("recv", {"bind": "127.0.0.1:9", "wrc": {"stale_congestion_loss": "halve"}},
     "wrc.stale_congestion_loss: 'halve' not one of"),
    ("recv", {"bind": "127.0.0.1:9", "wrc": {"delta_initial": 0.6}},
     "wrc.delta_max: 0.5 not in [delta_initial, 1)"),
    ("recv", {"bind": "127.0.0.1:9", "epoch": 1}, "epoch: unknown key"),
    ("recv", {"bind": "127.0.0.1:9", "weight": -0.5}, "weight: -0.5 not in [0,"),
    # A weight below 1 makes weighted_decrease's delta_max / w reach 1.
    ("recv", {"bind": "127.0.0.1:9", "weight": 0.4,
              "wrc": {"differentiation": "weighted_decrease"}}, "wrc."),
])
def test_bad_configuration_exits_2_naming_the_field_and_value(wrc_bin, tmp_path, mode, config,
                                                              message):
    cfg = write_yaml(tmp_path / "c.yaml", config)
    r = subprocess.run([wrc_bin, mode, "--config", cfg, "--check"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2
    assert message in r.stderr


def test_the_receiver_takes_a_fractional_weight_for_every_flow(wrc_bin, tmp_path):
    cfg = write_yaml(tmp_path / "c.yaml", {"bind": "127.0.0.1:9", "weight": 2.5})
    r = subprocess.run([wrc_bin, "recv", "--config", cfg, "--check"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_unknown_mode_exits_2(wrc_bin, tmp_path):
    r = subprocess.run([wrc_bin, "relay", "--config", tmp_path / "x.yaml"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2
    assert "mode: 'relay' is not send or recv" in r.stderr
