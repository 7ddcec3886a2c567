"""CoDel (RFC 8289, Nichols, Jacobson, McGregor & Iyengar, "Controlled Delay Active Queue
Management") written against the AQM plugin protocol (docs/extending.md). It makes the built-in
`codel`'s decisions packet for packet (host/lib/aqm_codel.cc; tools/tests/test_plugin_check.py
compares them on a seeded sequence): the pseudocode of RFC 8289 §5, marking ECN-capable packets
where the RFC drops, as Linux's include/net/codel_impl.h does.

    aqm: {kind: python, file: examples/plugins/codel.py, class: CoDel,
          params: {target_s: 0.005, interval_s: 0.1, mtu: 1500}}

CoDel acts at dequeue: a packet whose sojourn time stayed >= target for at least an interval
(while more than one MTU is queued) enters the dropping state, where the next drop (or mark) is
due interval / sqrt(count) after the previous one, until the sojourn falls below target.
Arrivals are only limited by the queue's limit (drop-tail, cause overflow).

The built-in's dequeue() takes packets from the queue until it has one to send; the protocol
offers this plugin each of those packets in turn, so `_phase` says where the next packet falls
in that loop: the first of a dequeue, the one after the drop that entered the dropping state
(sent as it is), or one after a drop in the dropping state. on_empty() is the RFC's
dodequeue() finding the queue empty (after a flush, say: a packet leaving at most one MTU
behind has already reset the same state). Times are integer nanoseconds, as in the built-in,
so the control law rounds alike. dequeue() runs for every packet that leaves, inside the apd's
slot loop, so it compares times in seconds first and converts to nanoseconds only when two are
within a microsecond (the same decisions: tools/tests/test_plugin_check.py drives sojourns
within 2 ns of the target), and its steady-state paths call no other method.
"""
import math
from math import sqrt

_START, _AFTER_ENTRY_DROP, _IN_DROP_LOOP = "start", "after_entry_drop", "in_drop_loop"
_NEAR_S = 1e-6  # times closer than this (1 us) are compared in nanoseconds


def _ns(t_s):
    return int(round(t_s * 1e9))


class CoDel:
    def __init__(self, target_s=0.005, interval_s=0.1, mtu=1500):
        for name, v in (("target_s", target_s), ("interval_s", interval_s)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name}: {v!r} must be a number of seconds > 0")
        if target_s >= interval_s:
            raise ValueError(f"target_s: {target_s!r} must be < interval_s ({interval_s!r})")
        if not (isinstance(mtu, int) and mtu > 0):
            raise ValueError(f"mtu: {mtu!r} must be an int > 0 (bytes)")
        self.target = _ns(target_s)      # TARGET
        self.interval = _ns(interval_s)  # INTERVAL
        self.mtu = mtu                   # MAXPACKET
        self.above = False               # first_above_time is set (the RFC's != 0)
        self.first_above_time = 0
        self.drop_next = 0
        self.count = 0
        self.lastcount = 0
        self.dropping = False
        self._phase = _START
        # Times in seconds mirror the nanoseconds above, for a cheap test first: a time more
        # than _NEAR_S from another is told apart in seconds (their rounding is ~1e-16
        # relative), a closer one in nanoseconds, as the built-in tells it.
        self._below_s = self.target * 1e-9 - _NEAR_S  # a sojourn below this: below TARGET
        self._above_s = self.target * 1e-9 + _NEAR_S  # at or above this: at or above it
        self._first_above_s = 0.0                    # first_above_time, in seconds
        self._drop_next_s = 0.0                      # drop_next, in seconds

    def enqueue(self, pkt, queue, now_s):
        return "accept"

    def dequeue(self, pkt, queue, now_s):
        # Called for every packet that leaves: the paths of the steady state (below target; in
        # the dropping state between drops) call no other method and convert no time to ns.
        #
        # RFC 8289 dodequeue()'s ok_to_drop: the packet has left; `queue` is what stays behind
        ok = False
        sojourn_s = now_s - pkt.arrival_s
        if sojourn_s < self._below_s or queue.bytes <= self.mtu or (
                sojourn_s < self._above_s
                and round(now_s * 1e9) - round(pkt.arrival_s * 1e9) < self.target):
            self.above = False
        elif not self.above:
            self.above = True
            self.first_above_time = round(now_s * 1e9) + self.interval  # round(): an int
            self._first_above_s = self.first_above_time * 1e-9
        elif now_s >= self._first_above_s + _NEAR_S or (
                now_s >= self._first_above_s - _NEAR_S
                and round(now_s * 1e9) >= self.first_above_time):
            ok = True
        phase = self._phase
        if not ok:
            # the sojourn fell below target: the dropping state ends (except right after the
            # drop that entered it, whose next packet is sent as it is)
            if phase != _AFTER_ENTRY_DROP:
                self.dropping = False
            self._phase = _START
            return "send"
        if phase == _AFTER_ENTRY_DROP:
            self._phase = _START
            return "send"
        if phase == _IN_DROP_LOOP:
            # the built-in's drop loop, after its drop: drop_next = control_law(drop_next)
            self.drop_next += int(self.interval / sqrt(self.count))
            self._drop_next_s = self.drop_next * 1e-9
        elif not self.dropping:
            return self._enter_dropping(pkt.ecn_capable and queue.ecn, round(now_s * 1e9))
        # while (dropping && now >= drop_next): drop, or mark and send
        if now_s >= self._drop_next_s + _NEAR_S or (
                now_s >= self._drop_next_s - _NEAR_S and round(now_s * 1e9) >= self.drop_next):
            self.count += 1
            if pkt.ecn_capable and queue.ecn:
                self.drop_next += int(self.interval / sqrt(self.count))
                self._drop_next_s = self.drop_next * 1e-9
                self._phase = _START
                return "mark"
            self._phase = _IN_DROP_LOOP
            return "drop"
        self._phase = _START
        return "send"

    def _enter_dropping(self, can_mark, now):
        # If the dropping state was left recently, start from the drop rate that controlled
        # the queue then (RFC 8289 §5.5: now - drop_next ~ the time since).
        verdict = "mark" if can_mark else "drop"
        self._phase = _START if can_mark else _AFTER_ENTRY_DROP
        self.dropping = True
        delta = self.count - self.lastcount
        self.count = 1
        if delta > 1 and now - self.drop_next < 16 * self.interval:
            self.count = delta
        self.drop_next = now + int(self.interval / sqrt(self.count))  # control_law(now)
        self._drop_next_s = self.drop_next * 1e-9
        self.lastcount = self.count
        return verdict

    def on_empty(self, queue, now_s):
        # dodequeue() found the queue empty: first_above_time = 0, and ok_to_drop is false, so
        # the dropping state ends, except right after the drop that entered it (the built-in
        # sets dropping after that dodequeue)
        self.above = False
        if self._phase != _AFTER_ENTRY_DROP:
            self.dropping = False
        self._phase = _START
