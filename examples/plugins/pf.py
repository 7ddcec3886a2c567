"""Proportional fair in Python: the built-in `pf` (host/include/oppsched/sched.h) written
against the plugin protocol (docs/extending.md), decision for decision.

    scheduler: {kind: python, file: examples/plugins/pf.py, class: ProportionalFair}

Metric R_i / T_i (Andrew & Hanly, CLAMP, eq. 19), T_i the framework's EMA (`avg_bps`, alpha
the scheduler's `alpha`); users whose rate is 0 are skipped; ties go to the user served least
recently, users never served first, lowest id first among them.
"""


class ProportionalFair:
    def __init__(self):
        self.last_served = {}  # user id -> slot of its last service

    def _order(self, user):
        # smaller goes first on a tie: never served (by id), then served longest ago
        slot = self.last_served.get(user.id)
        return (0, user.id) if slot is None else (1, slot)

    def select(self, slot, users):
        best, best_metric = None, 0.0
        for k, u in enumerate(users):
            if u.rate_bps <= 0.0:
                continue
            metric = u.rate_bps / u.avg_bps
            if (best is None or metric > best_metric
                    or (metric == best_metric and self._order(u) < self._order(users[best]))):
                best, best_metric = k, metric
        return best

    def served(self, slot, user, bytes):
        if user is not None:
            self.last_served[user] = slot
