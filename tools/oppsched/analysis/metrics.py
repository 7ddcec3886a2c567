"""Metrics shared by every kind of run (Jain's index, scheduling jitter, ...)."""

from __future__ import annotations

import numpy as np


def jain_index(values) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2); 1.0 for an empty or all-zero set."""
    x = np.asarray(list(values), dtype=float)
    if x.size == 0 or not np.any(x):
        return 1.0
    return float(x.sum() ** 2 / (x.size * np.square(x).sum()))


def service_gaps(slots_served: np.ndarray) -> np.ndarray:
    """Inter-service times (in slots) of one user, from the sorted slot numbers it was served."""
    s = np.asarray(slots_served)
    return np.diff(s) if s.size > 1 else np.empty(0)


def jitter_stats(gaps_s: np.ndarray) -> dict:
    """Scheduling jitter as in Srinivasan & Baras: mean, standard deviation and coefficient of
    variation of the time between two consecutive services of a user."""
    if gaps_s.size == 0:
        return {"mean_s": float("nan"), "std_s": float("nan"), "cov": float("nan")}
    m = float(gaps_s.mean())
    sd = float(gaps_s.std())
    return {"mean_s": m, "std_s": sd, "cov": sd / m if m > 0 else float("nan")}
