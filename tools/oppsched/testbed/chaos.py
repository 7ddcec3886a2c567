"""A ZeroMQ proxy that mistreats the messages between the PHY and the daemons, for the chaos
test (docs/testbed.md, "Reliability"): on each link it drops, duplicates, reorders and delays
messages with the probabilities of its configuration, from a seeded random generator, and
counts what it did. The daemons must survive it, their counters must add up, and TCP must
still get its data through.

    python -m oppsched.testbed.chaos --config chaos.yaml

chaos.yaml:
    seed: 1
    drop: 0.01          # probability per message, each link
    duplicate: 0.01     # the message is sent twice
    reorder: 0.01       # the message is held and sent after the next one on its link
    delay: 0.01         # the message is held for delay_ms
    delay_ms: 2.0
    forge: 0.0          # rx links: an addressed TB whose CRC checked gets one byte changed
                        # and is re-framed with a valid CRC: a TB forged over the air
    hold_max_ms: 20.0   # a message held for reordering goes anyway after this long
    record: PATH        # rx links: the first record_max TBs addressed to the client whose CRC
    record_max: 16      #   checked, as JSON lines {"link": ..., "tb": HEX}: what a receiver
                        #   in range records (the first carry the MAC session trailer, pdu.h)
    replay: PATH        # rx links: TBs recorded (by `record`) in another run, and
    replay_p: 0.0       #   the probability that an addressed TB whose CRC checked is
                        #   replaced by the next of its link's (round robin): a replay over
                        #   the air from an earlier run, in this run's slot (counted "replayed")
    stats: PATH         # JSON of the counters, written every 2 s and at exit (what was
                        #   still delayed or held at exit: pending_at_exit; what was sent
                        #   to a bound endpoint after its receiver had gone: no_receiver)
    links:              # each: a PULL where the sender's messages arrive, a PUSH onward
      - {name: requests, pull: {bind: ENDPOINT}, push: {connect: ENDPOINT}}
      - ...

The decisions depend on the seed and the order of the messages only (one generator per link,
one fixed sequence of draws per message; forging draws from a generator of its own, so that
forge: 0 leaves every other decision as it was), not on timing. SIGTERM or SIGINT: the counters are
written and the proxy exits 0.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import signal
import sys
import time
from pathlib import Path

import zmq

from oppsched.config import read_yaml
from oppsched.paths import write_atomic

ACTIONS = ("drop", "duplicate", "reorder", "delay")
STATS_PERIOD_S = 2.0
_tie = itertools.count()  # orders messages due at the same time


class Link:
    """One direction of one ZeroMQ link through the proxy."""

    def __init__(self, ctx, spec: dict, conf: dict, seed: int):
        self.name = spec["name"]
        self.pull = ctx.socket(zmq.PULL)
        self.push = ctx.socket(zmq.PUSH)
        for s in (self.pull, self.push):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RCVHWM, 100000)
            s.setsockopt(zmq.SNDHWM, 100000)
        self.push.setsockopt(zmq.SNDTIMEO, 100)
        # A bound PUSH whose receiver has gone (the PHY, stopped first, connects to the
        # grants link) blocks: what is sent then has no one to go to, which is not a fault of
        # the proxy. A monitor counts the receivers, so that such a send is told apart
        # (no_receiver) from one refused while a receiver was there (send_failed).
        self.monitor = None
        self.receivers = 0
        if "bind" in spec["push"]:
            self.monitor = self.push.get_monitor_socket(zmq.EVENT_ACCEPTED
                                                        | zmq.EVENT_DISCONNECTED)
        for sock, side in ((self.pull, spec["pull"]), (self.push, spec["push"])):
            if "bind" in side:
                sock.bind(side["bind"])
            else:
                sock.connect(side["connect"])
        self.p = {a: float(conf.get(a, 0.0)) for a in ACTIONS}
        self.delay_s = float(conf.get("delay_ms", 2.0)) / 1e3
        self.hold_max_s = float(conf.get("hold_max_ms", 20.0)) / 1e3
        self.rng = random.Random(seed)
        self.p_forge = float(conf.get("forge", 0.0)) if self.name.startswith("rx_") else 0.0
        self.forge_rng = random.Random(seed + 7919)
        self.held: tuple[float, bytes] | None = None  # a message waiting to be overtaken
        self.counts = {"received": 0, "forwarded": 0, "dropped": 0, "duplicated": 0,
                       "reordered": 0, "delayed": 0, "send_failed": 0, "no_receiver": 0,
                       "forged": 0, "recorded": 0, "replayed": 0, "pending_at_exit": 0}
        rx = self.name.startswith("rx_")
        self.record_path = Path(conf["record"]) if rx and conf.get("record") else None
        self.record_max = int(conf.get("record_max", 16))
        self.replay_tbs = ([bytes.fromhex(r["tb"]) for r in _read_recorded(conf["replay"])
                            if r.get("link") == self.name]
                           if rx and conf.get("replay") else [])
        self.p_replay = float(conf.get("replay_p", 0.0)) if self.replay_tbs else 0.0
        self.replay_rng = random.Random(seed + 104729)

    def send(self, msg: bytes) -> None:
        try:
            self.push.send(msg)
            self.counts["forwarded"] += 1
        except zmq.Again:
            self.count_receivers()
            if self.monitor is not None and self.receivers == 0:
                self.counts["no_receiver"] += 1
            else:
                self.counts["send_failed"] += 1

    def count_receivers(self) -> None:
        """Reads the monitor's events so far: receivers accepted and gone."""
        if self.monitor is None:
            return
        from zmq.utils.monitor import recv_monitor_message
        while True:
            try:
                ev = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            if ev["event"] == zmq.EVENT_ACCEPTED:
                self.receivers += 1
            elif ev["event"] == zmq.EVENT_DISCONNECTED:
                self.receivers = max(0, self.receivers - 1)

    def on_message(self, msg: bytes, now: float, later: list) -> None:
        """Decides the fate of one message: four draws, always in this order."""
        self.counts["received"] += 1
        d_drop, d_dup, d_reorder, d_delay = (self.rng.random() for _ in range(4))
        if self.p_forge > 0.0:
            msg = self.forge(msg)
        if self.record_path is not None and self.counts["recorded"] < self.record_max:
            self.record(msg)
        if self.p_replay > 0.0:
            msg = self.replay(msg)
        if d_drop < self.p["drop"]:
            self.counts["dropped"] += 1
            return
        copies = 2 if d_dup < self.p["duplicate"] else 1
        if copies == 2:
            self.counts["duplicated"] += 1
        if d_reorder < self.p["reorder"] and self.held is None:
            self.counts["reordered"] += 1
            self.held = (now + self.hold_max_s, msg)
            for _ in range(copies - 1):
                self.send(msg)
            return
        if d_delay < self.p["delay"]:
            self.counts["delayed"] += 1
            for _ in range(copies):
                heapq.heappush(later, (now + self.delay_s, next(_tie), self, msg))
        else:
            for _ in range(copies):
                self.send(msg)
        self.release()  # the held message goes after this one: they swapped places

    def forge(self, msg: bytes) -> bytes:
        """With probability forge, an rx_indication carrying a TB addressed to its client
        whose CRC checked comes back with one byte of the TB changed and a valid frame CRC:
        what a transmitter in radio range achieves (docs/security.md)."""
        from oppsched import mac  # the bindings; only a forging proxy needs them
        if self.forge_rng.random() >= self.p_forge:
            return msg
        try:
            seq, kind, f = mac.wire.decode(msg)
        except ValueError:
            return msg
        if kind != "rx_indication" or not (f["addressed"] and f["crc_ok"] and f["tb"]):
            return msg
        tb = bytearray(f["tb"])
        i = self.forge_rng.randrange(len(tb))
        tb[i] ^= 1 + self.forge_rng.randrange(255)
        f["tb"] = bytes(tb)
        self.counts["forged"] += 1
        return mac.wire.encode(kind, seq, f)

    @staticmethod
    def _addressed_tb(msg: bytes):
        """(seq, fields) of an rx_indication carrying a TB addressed to its client whose CRC
        checked; None for any other message."""
        from oppsched import mac  # the bindings; only a forging or replaying proxy needs them
        try:
            seq, kind, f = mac.wire.decode(msg)
        except ValueError:
            return None
        if kind != "rx_indication" or not (f["addressed"] and f["crc_ok"] and f["tb"]):
            return None
        return seq, f

    def record(self, msg: bytes) -> None:
        """Appends the TB of an addressed rx_indication whose CRC checked to `record`."""
        got = self._addressed_tb(msg)
        if got is None:
            return
        with open(self.record_path, "a") as out:
            out.write(json.dumps({"link": self.name, "tb": bytes(got[1]["tb"]).hex()}) + "\n")
        self.counts["recorded"] += 1

    def replay(self, msg: bytes) -> bytes:
        """With probability replay_p, an addressed rx_indication whose CRC checked carries the
        next TB recorded in the other run instead of its own."""
        from oppsched import mac
        if self.replay_rng.random() >= self.p_replay:
            return msg
        got = self._addressed_tb(msg)
        if got is None:
            return msg
        seq, f = got
        f["tb"] = self.replay_tbs[self.counts["replayed"] % len(self.replay_tbs)]
        self.counts["replayed"] += 1
        return mac.wire.encode("rx_indication", seq, f)

    def release(self) -> None:
        if self.held is not None:
            msg = self.held[1]
            self.held = None
            self.send(msg)

    def close(self) -> None:
        if self.monitor is not None:
            self.push.disable_monitor()
            self.monitor.close(0)
        self.pull.close(0)
        self.push.close(0)


def _read_recorded(path) -> list[dict]:
    """The TBs a `record` proxy wrote (JSON lines)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run(conf: dict) -> int:
    ctx = zmq.Context()
    seed = int(conf.get("seed", 1))
    links = [Link(ctx, spec, conf, seed * 1000 + i) for i, spec in enumerate(conf["links"])]
    stats_path = Path(conf["stats"]) if conf.get("stats") else None
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    poller = zmq.Poller()
    by_socket = {}
    for link in links:
        poller.register(link.pull, zmq.POLLIN)
        by_socket[link.pull] = link
    later: list = []  # (due, tie, link, msg)
    next_stats = time.monotonic()

    def write_stats():
        if stats_path is not None:
            body = {"seed": seed, "p": links[0].p if links else {},
                    "links": {link.name: dict(link.counts) for link in links}}
            write_atomic(stats_path, json.dumps(body, indent=1) + "\n")

    try:
        while not stop:
            now = time.monotonic()
            waits = [later[0][0] - now] if later else []
            waits += [link.held[0] - now for link in links if link.held is not None]
            timeout_ms = max(0, min([0.05] + waits)) * 1e3
            try:
                ready = dict(poller.poll(timeout_ms))
            except zmq.ZMQError:
                continue  # EINTR: a signal
            now = time.monotonic()
            for sock in ready:
                link = by_socket[sock]
                for _ in range(1000):
                    try:
                        msg = sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    link.on_message(msg, now, later)
            while later and later[0][0] <= now:
                _, _, link, msg = heapq.heappop(later)
                link.send(msg)
            for link in links:
                if link.held is not None and link.held[0] <= now:
                    link.release()
            if now >= next_stats:
                write_stats()
                next_stats = now + STATS_PERIOD_S
    finally:
        # What was still delayed or held when the proxy was stopped is never sent: counted,
        # so that forwarded + no_receiver + pending_at_exit = received - dropped + duplicated
        # holds.
        for _, _, link, _ in later:
            link.counts["pending_at_exit"] += 1
        for link in links:
            if link.held is not None:
                link.counts["pending_at_exit"] += 1
        write_stats()
        for link in links:
            link.close()
        ctx.term()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oppsched.testbed.chaos", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    a = ap.parse_args(argv)
    conf = read_yaml(a.config)
    for k in (*ACTIONS, "forge", "replay_p"):
        v = conf.get(k, 0.0)
        if not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            print(f"{a.config}: {k}: {v!r} is not a probability in [0, 1]", file=sys.stderr)
            return 2
    if not conf.get("links"):
        print(f"{a.config}: links: none given", file=sys.stderr)
        return 2
    return run(conf)


if __name__ == "__main__":
    sys.exit(main())
