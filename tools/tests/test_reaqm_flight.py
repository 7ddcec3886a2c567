"""experiments/reaqm/flight.py: a connection's data in flight and its waits on the
retransmission timer, read from the sender's capture."""

import numpy as np
import pandas as pd

from helpers import REPO, load_script

flight = load_script(REPO / "experiments/reaqm/flight.py", "reaqm_flight")


def test_flight_is_the_highest_byte_sent_less_the_highest_acknowledged_in_segments():
    # 1000-byte segments: 0-3999 sent at 0.1-0.4 s, acknowledged to 2000 at 0.5 s; then
    # nothing sent until a retransmission of 2000 at 3.5 s, everything acknowledged at 4 s
    data = pd.DataFrame({"t_s": [0.1, 0.2, 0.3, 0.4, 3.5], "seq": [0, 1000, 2000, 3000, 2000],
                         "payload": [1000] * 5})
    acks = pd.DataFrame({"t_s": [0.5, 0.6, 4.0], "ack": [2000, 1000, 4000]})  # 0.6: stale
    s = flight.connection_samples(data, acks, np.array([0.0, 1.0, 2.0, 3.0, 3.6, 5.0]), 1000)
    # sampled only while open (0.1 to 3.5 s)
    assert s.t_s.tolist() == [1.0, 2.0, 3.0]
    assert s.flight.tolist() == [2.0, 2.0, 2.0]
    # 1.0: four sent in the second before; 2.0 and 3.0: none, with data out: waiting
    assert s.sent_last_s.tolist() == [4, 0, 0]
    assert s.waiting.tolist() == [False, True, True]


def test_a_retransmission_counts_as_the_timers_only_without_an_ack_just_before_it():
    data = pd.DataFrame({"t_s": [0.0, 0.1, 0.2, 0.5, 1.5], "seq": [0, 1000, 2000, 1000, 2000],
                         "payload": [1000] * 5})
    # a duplicate ACK 2 ms before the first retransmission (fast), none before the second
    acks = pd.DataFrame({"t_s": [0.3, 0.498], "ack": [1000, 1000]})
    assert flight.timer_retransmissions(data, acks) == 1
    assert flight.timer_retransmissions(data, acks.iloc[:0]) == 2
