"""experiments/reaqm/ecn.py: which codepoint each data segment was sent with, new data vs
retransmission, and which copies the AP delivered, from a server's and a client's capture."""

import pandas as pd
import pytest

from helpers import REPO, load_script
from oppsched.analysis import pcap

ecn = load_script(REPO / "experiments/reaqm/ecn.py", "reaqm_ecn")

SRV, CLI = "10.1.1.1", "10.2.0.1"


def _frames(rows: list[tuple]) -> pd.DataFrame:
    """(t_s, sport, dport, flags, seq, payload, ecn) from the server to the client, or with
    a negative sport from the client to the server (its port is -sport)."""
    out = []
    for t, sp, dp, fl, seq, pay, cp in rows:
        src, dst = (SRV, CLI) if sp > 0 else (CLI, SRV)
        out.append((t, False, src, dst, abs(sp), dp, seq, 0, fl, 0, -1, -1, pay, 40 + pay, 0, cp))
    return pd.DataFrame(out, columns=pcap.COLUMNS)


S, SA, A, ECE, CWR = 0x02, 0x12, 0x10, 0x40, 0x80
ISN = 4_294_967_000  # the sequence numbers wrap inside the connection


def _captures():
    wired = _frames([
        # iperf3's control connection (the first to port 5203), then two data connections:
        # 40002 negotiated ECN, 40004 did not (its SYN-ACK has no ECE)
        (0.0, 40000, 5203, S | ECE | CWR, 10, 0, 0), (0.01, -5203, 40000, SA | ECE, 0, 0, 0),
        (0.02, 40000, 5203, A, 11, 37, 2),
        (0.1, 40002, 5203, S | ECE | CWR, ISN, 0, 0), (0.11, -5203, 40002, SA | ECE, 0, 0, 0),
        (0.2, 40004, 5203, S | ECE | CWR, 7, 0, 0), (0.21, -5203, 40004, SA, 0, 0, 0),
        # 40002: the opening (37 bytes) and two segments sent ECT; the first segment is lost
        # and retransmitted Not-ECT at 1.3, 3.3 and 7.3 s (a timer backing off)
        (0.3, 40002, 5203, A, ISN + 1, 37, 2), (0.31, 40002, 5203, A, ISN + 38, 1000, 2),
        (0.32, 40002, 5203, A, ISN + 1038, 1000, 2),
        (1.3, 40002, 5203, A, ISN + 38, 1000, 0), (3.3, 40002, 5203, A, ISN + 38, 1000, 0),
        (7.3, 40002, 5203, A, ISN + 38, 1000, 0),
        # 40004: the opening and one segment, both delivered
        (0.4, 40004, 5203, A, 8, 37, 0), (0.41, 40004, 5203, A, 45, 1000, 0),
    ])
    client = _frames([
        (0.03, 40000, 5203, A, 11, 37, 2),
        (0.35, 40002, 5203, A, ISN + 1, 37, 3),       # the opening, CE-marked on its way
        (0.36, 40002, 5203, A, ISN + 1038, 1000, 2),  # the second segment
        (3.35, 40002, 5203, A, ISN + 38, 1000, 0),    # the second retransmission got through
        (0.45, 40004, 5203, A, 8, 37, 0), (0.46, 40004, 5203, A, 45, 1000, 0),
    ])
    return wired, client


def test_segments_classes_new_data_and_retransmissions_and_leaves_the_control_connection_out():
    wired, _ = _captures()
    conns, sent = ecn.segments(wired)
    assert sorted(conns["sport"]) == [40002, 40004]  # the control connection left out
    assert conns.set_index("sport")["ecn_ok"].to_dict() == {40002: True, 40004: False}
    mine = sent[sent["sport"] == 40002]
    # relative to the ISN across the 2^32 wrap
    assert mine["seq"].tolist() == [1, 38, 1038, 38, 38, 38]
    assert mine["retx"].tolist() == [False, False, False, True, True, True]


def test_each_arrival_counts_for_the_copy_it_was_sent_as():
    wired, client = _captures()
    conns, sent = ecn.segments(wired)
    got = ecn.delivered(sent, client, conns)
    mine = got[got["sport"] == 40002].sort_values("t_arrival")
    # the CE-marked opening was sent ECT; the retransmission that arrived at 3.35 s is the
    # copy sent at 3.3 s, Not-ECT
    assert mine["t_sent"].tolist() == [0.3, 0.32, 3.3]
    assert mine["ecn"].tolist() == [2, 2, 0] and mine["ecn_arrival"].tolist() == [3, 2, 0]
    assert mine["retx"].tolist() == [False, False, True]


def test_the_group_row_gives_delivery_by_codepoint_and_the_stalled_connections():
    wired, client = _captures()
    conns, sent = ecn.segments(wired)
    r = ecn.summarize(conns, sent, ecn.delivered(sent, client, conns), t0=0.0)
    assert r["connections"] == 2 and r["ecn_negotiated"] == 1
    # new data: 40002's three ECT, 40004's two Not-ECT (no ECN); three Not-ECT retransmissions
    assert (r["sent_new_ect"], r["sent_new_not_ect"]) == (3, 2)
    assert (r["sent_retx_ect"], r["sent_retx_not_ect"]) == (0, 3)
    assert r["delivered_new_ect"] == pytest.approx(2 / 3)
    assert r["delivered_retx_not_ect"] == pytest.approx(1 / 3)
    assert r["delivered_new_not_ect"] == 1.0 and r["delivered_retx_ect"] is None
    # 40004 delivered its opening and one segment: stalled by this reckoning, with no
    # retransmissions; 40002 delivered 2037 bytes
    assert r["stalled"] == 1 and r["stalled_retx_mean"] == 0.0


def test_the_control_connections_acks_and_their_peers_retransmissions_are_counted():
    wired, client = _captures()
    # the client end of the control connection sends a 1-byte state message three times
    # (its ACK lost twice): the server ACKs each copy, one ACK reaches the client
    extra = _frames([(0.5, -5203, 40000, A, 900, 1, 0), (0.51, 40000, 5203, A, 48, 0, 0),
                     (1.5, -5203, 40000, A, 900, 1, 0), (1.51, 40000, 5203, A, 48, 0, 0),
                     (3.5, -5203, 40000, A, 900, 1, 0), (3.51, 40000, 5203, A, 48, 0, 0)])
    wired = pd.concat([wired, extra], ignore_index=True)
    client = pd.concat([client, _frames([(3.55, 40000, 5203, A, 48, 0, 0)])],
                       ignore_index=True)
    conns, _ = ecn.segments(wired)
    c = ecn.control(wired, client, conns)
    assert c["control"] == 1
    assert c["control_acks_sent"] == 3 and c["control_acks_delivered"] == pytest.approx(1 / 3)
    assert c["control_peer_retx"] == 2
