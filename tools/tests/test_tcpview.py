"""`oppsched tcpview`: a run's TCP view (congestion window, time-sequence graph, the user's
slots) read from a run folder. The folder here is written by the test: a capture made with
scapy in which one segment is lost and fast-retransmitted after three duplicate ACKs, and
two are lost and retransmitted by the timer, with one duplicate ACK 100 ms before."""

from __future__ import annotations

import json

import pytest
from scapy.layers.inet import IP, TCP
from scapy.utils import rdpcap, wrpcap

from oppsched.analysis import tcp
from oppsched.commands import tcpview
from oppsched.cli import main

T0_WALL = 1_000_000.0
T0_MONO_NS = 5_000_000_000
SRV, CLI, SPORT, PORT, ISN, MSS = "10.1.0.2", "10.2.0.1", 40000, 5201, 1000, 1448


def _seg(t, k, flags="A"):
    p = IP(src=SRV, dst=CLI) / TCP(sport=SPORT, dport=PORT, flags=flags, seq=ISN + 1 + k * MSS,
                                   ack=1) / (b"x" * MSS)
    p.time = T0_WALL + t
    return p


def _ack(t, k):
    p = IP(src=CLI, dst=SRV) / TCP(sport=PORT, dport=SPORT, flags="A", seq=1, ack=ISN + 1 + k * MSS)
    p.time = T0_WALL + t
    return p


def _write_run(d, with_pcap=True):
    cfg = {"experiment": "tv", "seed": 1, "scheduler": {"kind": "pf", "alpha": 0.01},
           "devices": [{"name": "u1"}, {"name": "u2"}],
           "flows": [{"id": "f1", "server": "S1", "device": "u1", "direction": "down",
                      "repeat": {"idle_s": None, "idle_mean_s": None, "count": None}},
                     {"id": "f2", "server": "S1", "device": "u2", "direction": "down",
                      "repeat": {"idle_s": None, "idle_mean_s": None, "count": None}},
                     {"id": "r3", "server": "S1", "device": "u2", "direction": "down",
                      "repeat": {"idle_s": 1.0, "idle_mean_s": None, "count": None}}]}
    run = {"t0_wall_s": T0_WALL, "t0_mono_ns": T0_MONO_NS,
           "flows": [{"id": "f1", "dst_addr": CLI, "port": PORT, "started_at_s": 0.2},
                     {"id": "f2", "dst_addr": "10.2.0.2", "port": 5202, "started_at_s": 0.2}]}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "run.json").write_text(json.dumps(run))
    (d / "summary.json").write_text(json.dumps({"flows": [
        {"id": "f1", "goodput_bps": 5e4}, {"id": "f2", "goodput_bps": 1e3}]}))
    snd = {"start": {"tcp_mss_default": MSS}, "intervals": [
        {"streams": [{"end": 0.5, "snd_cwnd": 10 * MSS, "rtt": 100000, "rttvar": 50000,
                      "retransmits": 0}]},
        {"streams": [{"end": 1.0, "snd_cwnd": 2 * MSS, "rtt": 300000, "rttvar": 90000,
                      "retransmits": 1}]}]}
    (d / "flow.f1.sender.json").write_text(json.dumps(snd))
    rows = ["slot,t_ns,user,mcs,tb_bytes,harq_pid,rv,ndi,retx,outcome,late,"
            "cqi.u1,queue.u1,price.u1,cqi.u2,queue.u2,price.u2",
            f"1,{T0_MONO_NS + 500_000_000},0,3,100,0,0,0,0,ack,0,3,3000,0,3,0,0",
            f"2,{T0_MONO_NS + 600_000_000},1,3,150,1,0,0,0,ack,0,3,2900,0,3,0,0",
            f"3,{T0_MONO_NS + 1_000_000_000},0,4,200,2,0,0,0,ack,0,4,2700,0,3,0,0"]
    (d / "slots.csv").write_text("\n".join(rows) + "\n")
    if not with_pcap:
        return
    syn = IP(src=SRV, dst=CLI) / TCP(sport=SPORT, dport=PORT, flags="S", seq=ISN)
    syn.time = T0_WALL + 0.9
    ctl = IP(src=SRV, dst=CLI) / TCP(sport=SPORT - 1, dport=PORT, flags="PA", seq=5, ack=1) / b"c"
    ctl.time = T0_WALL + 0.95
    pkts = [syn, ctl] + [_seg(1.0 + 0.01 * k, k) for k in range(6)]
    pkts += [_ack(1.2, 1), _ack(1.3, 2), _ack(1.35, 2), _ack(1.40, 2), _ack(1.45, 2)]
    pkts += [_seg(1.4501, 2)]  # fast retransmission, on the third duplicate ACK
    pkts += [_ack(1.6, 6), _seg(1.61, 6), _seg(1.62, 7)]  # both lost
    pkts += [_ack(2.4, 6)]  # a duplicate ACK, 100 ms before the timer fires
    pkts += [_seg(2.5, 6), _ack(2.7, 7), _seg(2.7001, 7), _ack(2.9, 8)]
    pkts.sort(key=lambda p: p.time)
    wrpcap(str(d / "wired.S1.pcap"), pkts)


def test_time_sequence_tells_a_fast_retransmission_from_a_timeout(tmp_path):
    _write_run(tmp_path)
    segs, acks = tcp.time_sequence(tmp_path, "f1")
    # the data connection, not iperf3's control connection to the same port
    assert len(segs) == 6 + 1 + 2 + 2
    assert segs["seq"].min() == 0 and segs["end"].max() == 8 * MSS
    assert segs["t_s"].iloc[0] == pytest.approx(1.0, abs=1e-5)
    rt = segs[segs["retrans"]]
    assert list(rt["seq"]) == [2 * MSS, 6 * MSS, 7 * MSS]
    # the fast retransmission and the go-back-N after the timeout follow an ACK at once;
    # the one at 2.5 s is the timer's, although a duplicate ACK came 100 ms before it
    assert list(rt["timeout"]) == [False, True, False]
    assert list(acks["dup"]).count(True) == 4
    assert acks["ack"].max() == 8 * MSS


def test_cwnd_trace_is_in_segments_after_t0(tmp_path):
    _write_run(tmp_path)
    cw = tcp.cwnd_trace(tmp_path, "f1")
    assert list(cw["t_s"]) == pytest.approx([0.7, 1.2])
    assert list(cw["cwnd_segments"]) == [10, 2]
    assert list(cw["rtt_ms"]) == [100.0, 300.0]


def test_cwnd_trace_counts_segments_of_the_flows_mss_bytes_when_it_sets_one(tmp_path):
    # With flows[].mss_bytes iperf3 reports tcp_mss (the option, timestamps included) and
    # no tcp_mss_default; snd_cwnd is segments of the payload, mss_bytes.
    _write_run(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["flows"][0]["mss_bytes"] = 460
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "flow.f1.sender.json").write_text(json.dumps({
        "start": {"tcp_mss": 472}, "intervals": [
            {"streams": [{"end": 0.5, "snd_cwnd": 20 * 460, "rtt": 100000, "rttvar": 50000,
                          "retransmits": 0}]}]}))
    assert list(tcp.cwnd_trace(tmp_path, "f1")["cwnd_segments"]) == [20]


def test_grants_are_the_users_slots_after_t0(tmp_path):
    _write_run(tmp_path)
    g, q = tcp.grants(tmp_path, "u1")
    assert list(g["t_s"]) == pytest.approx([0.5, 1.0])
    assert list(g["tb_bytes"]) == [100, 200]
    assert list(q["queue"]) == [3000, 2900, 2700]


def test_plot_writes_the_figures_and_one_row_per_flow(tmp_path):
    _write_run(tmp_path)
    out = tmp_path / "view"
    df = tcpview.plot(tmp_path, ["f1"], out, (0.5, 3.0))
    assert (out / "tcp-cwnd.png").stat().st_size > 0
    assert (out / "tcp-tsg.f1.png").stat().st_size > 0
    row = df.iloc[0]
    assert (row["flow"], row["retransmissions"], row["timeouts"], row["slots"]) == ("f1", 3, 1, 2)
    assert row["slot_gap_ms_mean"] == pytest.approx(500.0)


def test_every_flow_puts_every_download_in_the_table_and_two_in_the_figures(tmp_path):
    _write_run(tmp_path)
    f2 = [_seg(1.0, 0)]
    f2[0][IP].dst, f2[0][TCP].dport = "10.2.0.2", 5202
    pkts = list(rdpcap(str(tmp_path / "wired.S1.pcap"))) + f2
    pkts.sort(key=lambda p: p.time)
    wrpcap(str(tmp_path / "wired.S1.pcap"), pkts)
    (tmp_path / "flow.f2.sender.json").write_text((tmp_path / "flow.f1.sender.json").read_text())
    out = tmp_path / "view"
    df = tcpview.plot(tmp_path, ["f1"], out, every_flow=True)
    assert list(df["flow"]) == ["f1", "f2"]
    assert list(df["segments"]) == [11, 1]
    assert not (out / "tcp-tsg.f2.png").exists()


def test_default_flows_are_the_slowest_and_the_fastest(tmp_path):
    _write_run(tmp_path)
    assert tcp.default_flows(tmp_path) == ["f2", "f1"]


def test_bad_input_names_the_field_and_the_value(tmp_path, capsys):
    _write_run(tmp_path, with_pcap=False)
    with pytest.raises(tcp.TcpViewError, match="'nope' is not a flow"):
        tcp.cwnd_trace(tmp_path, "nope")
    with pytest.raises(tcp.TcpViewError, match="wired.S1.pcap: no capture"):
        tcp.time_sequence(tmp_path, "f1")
    assert main(["tcpview", str(tmp_path), "--zoom", "3,1"]) == 2
    assert "--zoom: '3,1'" in capsys.readouterr().err
    assert main(["tcpview", str(tmp_path / "missing")]) == 2
