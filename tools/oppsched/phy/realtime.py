"""The abstract PHY in real time: PhyProcess drives the slot core (oppsched.phy.abstract's
PhyCore) from CLOCK_MONOTONIC over ZeroMQ: the slot clock, the sockets, signals, the stats
file and the slot trace (the schedule is in oppsched.phy.abstract's docstring).

The core hands each slot over as a SlotOutcome: the rx_indication frames to push at the end
of the slot and the slot trace's row.
"""

from __future__ import annotations

import gc
import logging
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import zmq

from oppsched import mac
from oppsched.phy.common import write_json_atomic
from oppsched.rowtrace import RowTrace

log = logging.getLogger("oppsched.phy.abstract")


STATS_PERIOD_NS = 2_000_000_000  # phy.stats.json rewritten this often while running


@dataclass
class SlotOutcome:
    """One slot's result: the rx_indication frames, in user-id order, and the trace row."""

    slot: int
    frames: list[bytes]
    row: list[Any] = field(default_factory=list)


# ----------------------------------------------------------------------------------------
# Timing statistics


class Histogram:
    """Microsecond histogram (1 us bins up to 100 ms, then one overflow bin) for the tick
    lateness and busy time: O(1) per sample, percentiles without storing samples."""

    BINS = 100_000

    def __init__(self):
        self.bins = [0] * (self.BINS + 1)
        self.n = 0
        self.total_us = 0.0
        self.max_us = 0.0

    def add_ns(self, ns: int) -> None:
        us = max(ns, 0) / 1000.0
        self.bins[min(int(us), self.BINS)] += 1
        self.n += 1
        self.total_us += us
        self.max_us = max(self.max_us, us)

    def percentiles(self, qs: tuple[float, ...]) -> list[float | None]:
        """Bin centres (us) of the given quantiles, in one pass up to the largest sample."""
        if not self.n:
            return [None] * len(qs)
        wants = sorted((q * self.n, j) for j, q in enumerate(qs))
        out: list[float | None] = [None] * len(qs)
        acc, w = 0, 0
        for i in range(min(int(self.max_us), self.BINS) + 1):
            acc += self.bins[i]
            while w < len(wants) and acc >= wants[w][0] and acc > 0:
                out[wants[w][1]] = float(i) + 0.5
                w += 1
            if w == len(wants):
                break
        return out

    def summary(self) -> dict:
        p50, p90, p99, p999 = self.percentiles((0.5, 0.9, 0.99, 0.999))
        return {
            "count": self.n,
            "mean": (self.total_us / self.n) if self.n else None,
            "p50": p50,
            "p90": p90,
            "p99": p99,
            "p999": p999,
            "max": self.max_us,
        }


# ----------------------------------------------------------------------------------------
# The process: sockets, clock, signals, files


class PhyProcess:
    """Drives a slot core in real time (the schedule: oppsched.phy.abstract's docstring).

    `core` is oppsched.phy.abstract.PhyCore or anything with its slot interface: slot_ns,
    t0_ns, request_frame / request_sent, on_grant_frame, run_slot (-> SlotOutcome),
    rx_result, trace_header, stats and warn."""

    def __init__(self, cfg: dict, core, now_ns: Callable[[], int] = time.monotonic_ns):
        self.cfg = cfg
        self.core = core
        self.now_ns = now_ns
        self.ctx = zmq.Context.instance()
        self.stop = False
        self.dump = False
        self.lateness = Histogram()
        self.busy = Histogram()
        self.overruns = 0
        self.ticks = 0
        self.trace: RowTrace | None = None
        self.req = self.grants = None
        self.rx: list = []

    # -- sockets -----------------------------------------------------------------------

    def _socket(self, kind, endpoint: str, name: str):
        z = self.cfg["zmq"]
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, z["hwm"])
        s.setsockopt(zmq.RCVHWM, z["hwm"])
        s.setsockopt(zmq.SNDTIMEO, 100)
        s.setsockopt(zmq.RCVTIMEO, 100)
        s.setsockopt(zmq.MAXMSGSIZE, mac.wire.MAX_FRAME_LEN)
        s.setsockopt(zmq.RECONNECT_IVL, z["reconnect_ms"])
        if kind == zmq.PUSH:
            s.setsockopt(zmq.IMMEDIATE, 1)
        try:
            s.connect(endpoint)
        except zmq.ZMQError as exc:
            s.close()
            raise RuntimeError(f"{name}: cannot connect {endpoint}: {exc}") from None
        return s

    def open(self) -> None:
        ep = self.cfg["endpoints"]
        self.req = self._socket(zmq.PUSH, ep["phy_requests"], "phy_requests")
        self.grants = self._socket(zmq.PULL, ep["phy_grants"], "phy_grants")
        self.rx = [self._socket(zmq.PUSH, u["rx"], f"rx_{u['id']}") for u in self.cfg["users"]]
        path = self.cfg["traces"]["slots"]
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            # Whole rows only, a full disk counted, never fatal (oppsched/rowtrace.py).
            self.trace = RowTrace(path, self.core.trace_header())

    def wait_for_peers(self) -> None:
        """With ZMQ_IMMEDIATE a PUSH socket is writable only once a peer is connected: wait
        (at most timing.startup_wait_s) for the AP and every client, so that the first
        slots are not lost to connection set-up. Missing peers are logged, not fatal."""
        limit = self.cfg["timing"]["startup_wait_s"]
        if limit <= 0:
            return
        pending = {
            s: name
            for s, name in [(self.req, "phy_requests")]
            + [(s, f"rx_{u['id']}") for s, u in zip(self.rx, self.cfg["users"])]
        }
        deadline = time.monotonic() + limit
        poller = zmq.Poller()
        for s in pending:
            poller.register(s, zmq.POLLOUT)
        while pending and time.monotonic() < deadline and not self.stop:
            for s, ev in poller.poll(timeout=20):
                if ev & zmq.POLLOUT and s in pending:
                    del pending[s]
                    poller.unregister(s)
        if pending:
            log.warning(
                "starting without peers on %s after %.1f s",
                ", ".join(sorted(pending.values())),
                limit,
            )

    def close(self) -> None:
        # A short linger on the PUSH sockets lets the last slot's indications leave (a
        # clean stop "finishes the current slot"); with ZMQ_IMMEDIATE nothing is queued for
        # a peer that is gone, so this cannot hang.
        for s in [self.req, *self.rx]:
            if s is not None:
                s.close(linger=200)
        if self.grants is not None:
            self.grants.close(linger=0)
        if self.trace is not None:
            self.trace.close()

    # -- stats -------------------------------------------------------------------------

    def stats(self) -> dict:
        out = self.core.stats()
        out["timing"] = {
            "ticks": self.ticks,
            "overruns": self.overruns,
            "lateness_us": self.lateness.summary(),
            "busy_us": self.busy.summary(),
            "spin_us": self.cfg["timing"]["spin_us"],
        }
        if self.trace is not None:  # summary.json names a trace with failed writes
            out.setdefault("traces", {}).update(self.trace.counts("slots"))
        return out

    def write_stats(self) -> None:
        # The trace first: the stats then count its failed writes.
        if self.trace is not None:
            self.trace.flush()
        write_json_atomic(Path(self.cfg["traces"]["stats"]), self.stats())

    # -- the loop ----------------------------------------------------------------------

    def _on_signal(self, signum, _frame) -> None:
        if signum == signal.SIGUSR1:
            self.dump = True
        else:
            self.stop = True

    def install_signals(self) -> None:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(s, self._on_signal)

    def _sleep_until(self, deadline: int) -> None:
        spin = int(self.cfg["timing"]["spin_us"] * 1000)
        while True:
            rem = deadline - self.now_ns()
            if rem <= 0:
                return
            if rem > spin:
                time.sleep((rem - spin) / 1e9)
            # else: spin (only with timing.spin_us > 0)

    def _drain_grants(self) -> None:
        while True:
            try:
                frame = self.grants.recv(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            except zmq.ZMQError as exc:
                self.core.warn("recv", "phy_grants: receive error %s", exc)
                return
            while self.grants.getsockopt(zmq.RCVMORE):  # one frame per message: drop the rest
                self.grants.recv(zmq.NOBLOCK)
                frame = b""
            self.core.on_grant_frame(frame)

    def _push(self, sock, frame: bytes) -> bool:
        try:
            sock.send(frame, zmq.NOBLOCK)
            return True
        except zmq.ZMQError:  # Again: no peer (ZMQ_IMMEDIATE) or HWM reached
            return False

    def run(self) -> None:
        core, lead = self.core, self.cfg["lead_slots"]
        max_slots = self.cfg["max_slots"]
        # Everything allocated so far (modules, models, sockets) lives as long as the
        # process: move it out of the cyclic collector's reach, so that a full collection
        # in the loop scans only what the loop allocates (ms -> us pauses).
        gc.collect()
        gc.freeze()
        slot_ns = core.slot_ns
        # Slot 0 starts lead_slots (+1 for start-up) slots from now; the first tick, which
        # requests slot 0, is one slot from now.
        core.t0_ns = self.now_ns() + (lead + 1) * slot_ns
        k = -lead
        pending: SlotOutcome | None = None
        # Stats every STATS_PERIOD_NS as well as on SIGUSR1: a crash leaves recent figures.
        next_stats = core.t0_ns + STATS_PERIOD_NS
        while True:
            deadline = core.t0_ns + k * slot_ns
            self._sleep_until(deadline)
            woke = self.now_ns()
            self.ticks += 1
            self.lateness.add_ns(woke - deadline)
            if woke - deadline >= slot_ns:
                self.overruns += 1
                core.warn(
                    "overrun",
                    "tick %d woke %.3f ms late (more than a slot)",
                    k,
                    (woke - deadline) / 1e6,
                )
            # End of slot k-1: the receivers have it.
            if pending is not None:
                for i, (sock, frame) in enumerate(zip(self.rx, pending.frames)):
                    core.rx_result(i, self._push(sock, frame))
                if self.trace is not None:
                    self.trace.row(pending.row)
                pending = None
            if self.stop or (max_slots and k >= max_slots):
                break
            n_req = k + lead
            if not max_slots or n_req < max_slots:
                core.request_sent(self._push(self.req, core.request_frame(n_req)))
            self._drain_grants()
            if k >= 0:
                pending = core.run_slot(k)
            if self.dump or woke >= next_stats:
                self.dump = False
                self.write_stats()
                next_stats = woke + STATS_PERIOD_NS
            self.busy.add_ns(self.now_ns() - woke)
            k += 1
