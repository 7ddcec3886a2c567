"""MaxWeight (Tassiulas & Ephremides, 1992; Andrews et al., "Providing quality of service over
a shared wireless link", IEEE Commun. Mag. 2001): serve the user with the largest
backlog^beta x rate. Throughput-optimal: it keeps every queue stable whenever any policy can.
With beta = 1 it is the classic MaxWeight; larger beta weighs long queues more.

    scheduler: {kind: python, file: examples/plugins/maxweight.py, class: MaxWeight,
                params: {beta: 1.0}}

Both policies here are queue-aware: they need the queues the apd reports (backlog_bytes,
hol_delay_s) and are meant for testbed runs. macsim is full-buffer (backlog_bytes is inf and
hol_delay_s 0 for everyone), where they degenerate: use a channel-only policy there.
"""
import math


class MaxWeight:
    def __init__(self, beta=1.0):
        if not (isinstance(beta, (int, float)) and beta > 0 and math.isfinite(beta)):
            raise ValueError(f"beta: {beta!r} must be a number > 0")
        self.beta = float(beta)

    def select(self, slot, users):
        best, best_w = None, 0.0
        for k, u in enumerate(users):
            if u.rate_bps <= 0.0:
                continue
            w = (u.backlog_bytes ** self.beta) * u.rate_bps
            if best is None or w > best_w:
                best, best_w = k, w
        return best


class MLWDF:
    """Modified largest weighted delay first (Andrews et al. 2001): serve argmax
    a_i * W_i * R_i / T_i, W_i the head-of-line delay, a_i = -log(delta_i) / d_i from the
    delay target d_i (s) and the probability delta_i of exceeding it (one pair for all users
    here)."""

    def __init__(self, delay_target_s=0.1, violation_prob=0.05):
        if not (delay_target_s > 0 and 0 < violation_prob < 1):
            raise ValueError("delay_target_s must be > 0 and violation_prob in (0, 1)")
        self.a = -math.log(violation_prob) / delay_target_s

    def select(self, slot, users):
        best, best_w = None, -1.0
        for k, u in enumerate(users):
            if u.rate_bps <= 0.0:
                continue
            w = self.a * u.hol_delay_s * u.rate_bps / u.avg_bps
            if w > best_w:
                best, best_w = k, w
        return best
