"""experiments/clamp/drop_sync.py: a shared queue's overflow drops matched to each flow's
lost copies, grouped into loss events, and the share of one flow's events the other had,
beside what independent losses would give."""

import numpy as np
import pandas as pd

from helpers import REPO, load_script

sync = load_script(REPO / "experiments/clamp/drop_sync.py", "clamp_drop_sync")


def test_times_closer_than_the_gap_are_one_event_and_each_event_starts_at_its_first():
    t = np.array([1.000, 1.010, 1.040, 1.200, 1.249, 1.300, 5.0])
    assert sync.episodes(t, 0.05).tolist() == [0, 0, 0, 1, 1, 2, 3]
    assert sync.event_starts(t, 0.05).tolist() == [1.000, 1.200, 1.300, 5.0]
    assert sync.episodes(np.array([]), 0.05).tolist() == []


def test_a_lost_copy_matches_the_nearest_drop_within_the_tolerance_only():
    drops = np.array([1.000, 1.010, 2.000])
    arrive = np.array([1.0012, 1.0049, 1.0075, 1.5, 2.0029, 0.5, 2.5])
    assert sync.match(arrive, drops, within=3e-3).tolist() == [0, -1, 1, -1, 2, -1, -1]
    assert sync.match(np.array([2.001]), np.array([2.0]), within=3e-3).tolist() == [0]
    assert sync.match(np.array([2.001]), np.array([]), within=3e-3).tolist() == [-1]


def test_an_event_is_shared_when_the_other_flow_lost_within_the_window_either_side():
    starts = np.array([1.0, 2.0, 3.0, 4.0])
    other = np.array([0.97, 2.06, 3.2])  # 30 ms before, 60 ms after, 200 ms after, none
    assert sync.shared_fraction(starts, other, 0.05) == 0.25
    assert sync.shared_fraction(starts, other, 0.1) == 0.5
    assert sync.shared_fraction(starts, np.array([]), 0.1) == 0.0


def test_the_independent_baseline_is_the_chance_of_a_loss_within_the_window():
    # 100 events over 1000 s against 200 losses spread evenly: a window of 0.5 s either
    # side covers 1/5 of the run, so about a fifth of the events look shared by chance
    rng = np.random.default_rng(3)
    starts = np.sort(rng.uniform(0, 1000, 100))
    other = np.arange(200) * 5.0 + 2.5
    b = sync.independent_baseline(starts, other, 0.5, (0.0, 1000.0), rng, shifts=200)
    assert abs(b - 0.2) < 0.02, b
    # the same losses placed right on the events are shared every time
    assert sync.shared_fraction(starts, starts + 0.01, 0.5) == 1.0


def test_each_retransmission_marks_the_copy_sent_before_it_as_lost():
    segs = pd.DataFrame({"t_s": [0.0, 0.1, 0.2, 0.5, 0.9],
                         "seq": [0, 1000, 2000, 1000, 1000],
                         "retrans": [False, False, False, True, True]})
    # 1000 first at 0.1, resent at 0.5 (the 0.1 copy lost) and at 0.9 (the 0.5 one lost)
    assert sync.lost_copies(segs).tolist() == [0.1, 0.5]
