"""experiments/srinivasan-baras/table.py's reading of packets.csv for --recoveries: a user's
AP queue after each event, and what stood in it when a retransmission arrived."""

from helpers import REPO, load_script

table = load_script(REPO / "experiments/srinivasan-baras/table.py", "sb_table")

T0 = 1_000_000_000


def _packets(path, rows):
    lines = ["t_ns,event,user,packet_id,bytes,reason"]
    for k, (t_ms, event, user, reason) in enumerate(rows):
        lines.append(f"{T0 + int(t_ms * 1e6)},{event},{user},{k},512,{reason}")
    path.write_text("\n".join(lines) + "\n")


def test_queue_counts_enqueues_less_dequeues_and_overflow_drops_of_the_user_only(tmp_path):
    _packets(tmp_path / "packets.csv", [
        (1, "enqueue", 15, ""), (2, "enqueue", 15, ""), (2, "enqueue", 3, ""),
        (3, "enqueue", 15, ""), (3, "drop", 15, "overflow"),    # dropped on arrival
        (4, "dequeue", 15, ""), (5, "deliver", 15, ""),        # a departure, not a change
        (6, "drop", 15, "harq_max_tx"),                        # after its dequeue
        (7, "enqueue", 15, "")])
    q = table._queue_series(tmp_path, 15, T0)
    assert q["queued"].tolist() == [1, 2, 3, 2, 1, 2]
    assert [round(t, 3) for t in q["t_s"]] == [0.001, 0.002, 0.003, 0.003, 0.004, 0.007]


def test_queue_at_gives_the_newest_packets_that_came_since_a_time_and_skips_dropped_ones(
        tmp_path):
    # five arrive at 1-5 ms, the one at 4 ms is dropped (full), one leaves at 6 ms; at 8 ms
    # the queue holds the packets of 2, 3 and 5 ms: one of them came at or after 4.5 ms,
    # two at or after 2.5 ms
    _packets(tmp_path / "packets.csv", [
        (1, "enqueue", 7, ""), (2, "enqueue", 7, ""), (3, "enqueue", 7, ""),
        (4, "enqueue", 7, ""), (4, "drop", 7, "overflow"), (5, "enqueue", 7, ""),
        (6, "dequeue", 7, ""), (9, "enqueue", 7, "")])
    q = table._queue_series(tmp_path, 7, T0)
    assert table.queue_at(q, 0.008, 0.0045) == (3, 1)
    assert table.queue_at(q, 0.008, 0.0025) == (3, 2)
    # just before the first arrival: nothing queued
    assert table.queue_at(q, 0.001, 0.0) == (0, 0)
    # the arrival at 9 ms is not counted at 9 ms itself (the queue it met)
    assert table.queue_at(q, 0.009, 0.0) == (3, 3)
