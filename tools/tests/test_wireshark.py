"""The MAC capture's Wireshark dissector (tools/wireshark/oppsched.lua) through tshark:
synthetic records built with the project's own PDU and wire codecs (every field, both PDU
formats, every message type, malformed records, the integrity tag on downlink and uplink
TBs), and a short run on the abstract PHY (with pdu.integrity_tag) whose mac-ap.pcap and
mac-client pcaps must agree with slots.csv, flag the tag and carry the flows' TCP
segments."""

from __future__ import annotations

import json
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6

from oppsched import mac
from oppsched.testbed import daemonconf
from helpers import (BASE, REPO, cfg_of, needs_root, netns_prefix, require,
                     require_real_testbed, run_layout, write_experiment)
import test_apd as ta
from test_apd import bed  # noqa: F401 (the apd's namespace-and-TUN fixture)

LUA = REPO / "tools" / "wireshark" / "oppsched.lua"
LINKTYPE_USER0 = 147
PDU, MESSAGE = 1, 2
SENT, RECEIVED = 0, 1
F_SLOT, F_USER, F_HARQ, F_CRC, F_CRC_OK, F_BAD, F_TAG = 1, 2, 4, 8, 16, 32, 64


def _need_tshark():
    require(shutil.which("tshark") is not None, "tshark is not installed (apt-get install tshark)")


def pseudo(kind, direction=SENT, port=0, flags=0, user=0, slot=0, harq_pid=0, ndi=0, rv=0,
           mcs=0, tb_len=0) -> bytes:
    """The 24-byte pseudo-header of mac_capture.h."""
    return struct.pack(">BBBBBBHQBBBBHH", 1, 24, kind, direction, port, flags, user, slot,
                       harq_pid, ndi, rv, mcs, tb_len, 0)


def write_pcap(path: Path, records: list[bytes]) -> Path:
    """A nanosecond pcap (as pcap_writer writes, little-endian here) of LINKTYPE_USER0."""
    out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, LINKTYPE_USER0)]
    for i, r in enumerate(records):
        out.append(struct.pack("<IIII", 1_700_000_000 + i, 1000 * i, len(r), len(r)) + r)
    path.write_bytes(b"".join(out))
    return path


def tshark(pcap: Path, *args: str) -> list[list[str]]:
    """tshark with the dissector: -T fields rows (one list per record). No Lua error may
    appear, in the output or on stderr."""
    r = subprocess.run(["tshark", "-n", "-X", f"lua_script:{LUA}", "-r", str(pcap), *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Lua" not in r.stderr and "Lua Error" not in r.stdout, (r.stderr, r.stdout[:2000])
    return [line.split("\t") for line in r.stdout.splitlines()]


def fields(pcap: Path, *names: str, flt: str | None = None) -> list[list[str]]:
    """-T fields of `names` (all occurrences, comma-separated); "-o", "PREF" pairs and other
    options ("-2") among the names are passed on as options."""
    args = ["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]
    it = iter(names)
    for n in it:
        args += ["-o", next(it)] if n == "-o" else [n] if n.startswith("-") else ["-e", n]
    if flt:
        args += ["-Y", flt]
    return tshark(pcap, *args)


def tcp_packet(sport=5201, dport=40000, payload=b"x" * 100, seq=1000) -> bytes:
    return bytes(IP(src="10.1.0.2", dst="10.0.0.2") / TCP(sport=sport, dport=dport, seq=seq,
                                                          flags="A") / payload)


def udp6_packet() -> bytes:
    return bytes(IPv6(src="fd00:1::2", dst="fd00::2") / UDP(sport=7, dport=9) / (b"u" * 30))


# ----------------------------------------------------------------------------------------
# Configuration


def test_capture_mac_gives_each_daemon_its_pcap_path_and_limit(tmp_path):
    cfg = cfg_of(BASE, ["capture.mac=true", "capture.mac_max_bytes=100000"])
    lay = run_layout(tmp_path, cfg)
    apd = daemonconf.apd_config(cfg, lay)["traces"]
    assert apd["mac_pcap"] == str(tmp_path.resolve() / "mac-ap.pcap")
    assert apd["mac_pcap_max_bytes"] == 100000
    name = cfg["devices"][0]["name"]
    cli = daemonconf.client_config(cfg, lay, lay.users[0])["traces"]
    assert cli["mac_pcap"] == str(tmp_path.resolve() / f"mac-client.{name}.pcap")
    off = cfg_of(BASE)
    assert off["capture"]["mac"] is False
    assert "mac_pcap" not in daemonconf.apd_config(off, run_layout(tmp_path, off))["traces"]


# ----------------------------------------------------------------------------------------
# Synthetic records


def test_the_dissector_decodes_every_pseudo_header_field(tmp_path):
    _need_tshark()
    tb = mac.serialize_pdu(user=1, seq=42, price=0.0, tb_bytes=200,
                           segments=[{"packet_seq": 1, "data": tcp_packet()}])
    recs = [pseudo(PDU, RECEIVED, 0, F_SLOT | F_USER | F_HARQ | F_CRC | F_CRC_OK, user=1,
                   slot=123456789012, harq_pid=7, ndi=1, rv=2, mcs=14, tb_len=len(tb)) + tb,
            pseudo(PDU, SENT, 0, F_SLOT | F_USER | F_HARQ, user=3, slot=5, harq_pid=0, ndi=0,
                   rv=3, mcs=1, tb_len=len(tb)) + tb]
    rows = fields(write_pcap(tmp_path / "p.pcap", recs), "oppsched.kind", "oppsched.direction",
                  "oppsched.slot", "oppsched.user", "oppsched.harq_pid", "oppsched.ndi",
                  "oppsched.rv", "oppsched.mcs", "oppsched.tb_len", "oppsched.crc_ok",
                  "oppsched.pdu.seq", "oppsched.pdu.crc_good")
    assert rows[0] == ["1", "1", "123456789012", "1", "7", "1", "2", "14", "200", "1", "42", "1"]
    # no CRC flag on a sent PDU: no crc_ok field at all
    assert rows[1] == ["1", "0", "5", "3", "0", "0", "3", "1", "200", "", "42", "1"]
    # the display filter a user types
    assert len(fields(tmp_path / "p.pcap", "oppsched.slot", flt="oppsched.user == 3")) == 1


def test_complete_packets_of_a_standard_pdu_reach_the_ip_dissectors(tmp_path):
    _need_tshark()
    part = tcp_packet(sport=5202, payload=b"y" * 300)
    tb = mac.serialize_pdu(user=0, seq=1, price=0.5, tb_bytes=600, segments=[
        {"packet_seq": 1, "data": tcp_packet(sport=5201, seq=777)},
        {"packet_seq": 2, "data": udp6_packet()},
        {"packet_seq": 3, "packet_len": len(part), "data": part[:100]}])
    rows = fields(write_pcap(tmp_path / "p.pcap", [pseudo(PDU, tb_len=len(tb)) + tb]),
                  "oppsched.pdu.n_segments", "oppsched.pdu.price", "oppsched.seg.offset",
                  "oppsched.ip_packets", "tcp.srcport", "tcp.seq_raw", "ipv6.dst", "udp.dstport",
                  "_ws.expert.message")
    (row,) = rows
    assert row[:4] == ["3", "0.5", "0,0,0", "2"]
    assert row[4:8] == ["5201", "777", "fd00::2", "9"]
    assert "not reassembled" in row[8] or "Part of an IP packet" in row[8]  # the third segment


def test_the_compact_format_hands_on_complete_packets_and_shows_the_rest(tmp_path):
    _need_tshark()
    whole, cut = tcp_packet(sport=5301, seq=99), tcp_packet(sport=5302, payload=b"z" * 500)
    tb_bytes = 4 + 3 + len(whole) + 60
    tb = mac.serialize_compact_pdu(seq=0x345, price=None, continuation=b"abc",
                                   packets=[whole, cut[:60]], tb_bytes=tb_bytes)
    (row,) = fields(write_pcap(tmp_path / "c.pcap", [pseudo(PDU, tb_len=len(tb)) + tb]),
                    "oppsched.pdu.format", "oppsched.pdu.compact_seq", "oppsched.pdu.first",
                    "oppsched.pdu.packet_len", "oppsched.ip_packets", "tcp.srcport",
                    "tcp.seq_raw")
    assert row == ["2", "837", "3", f"{len(whole)},{len(cut)}", "1", "5301", "99"]


def test_a_packet_split_across_standard_pdus_is_reassembled_in_the_record_that_ends_it(
        tmp_path):
    _need_tshark()
    big = tcp_packet(sport=5601, seq=4242, payload=bytes(range(256)) * 4)  # 1064 bytes
    other = tcp_packet(sport=5602, seq=5151, payload=b"o" * 700)

    def pdu(seq, user, *segs):
        return mac.serialize_pdu(user=user, seq=seq, tb_bytes=520, segments=list(segs))

    def part(data, packet_seq, off, n):
        return {"packet_seq": packet_seq, "packet_len": len(data), "offset": off,
                "data": data[off:off + n]}

    tb1 = pdu(1, 0, part(big, 9, 0, 400))
    tb2 = pdu(2, 0, part(big, 9, 400, 400))
    tb3 = pdu(3, 0, part(big, 9, 800, 264))
    records = [
        pseudo(PDU, user=0, flags=F_USER, tb_len=len(tb1)) + tb1,            # 1
        pseudo(PDU, user=1, flags=F_USER) + pdu(1, 1, part(other, 9, 0, 400)),  # 2: user 1
        pseudo(PDU, user=0, flags=F_USER | F_CRC) + bytes(520),                # 3: CRC failed
        pseudo(PDU, user=0, flags=F_USER, tb_len=len(tb2)) + tb2,            # 4
        pseudo(PDU, user=0, flags=F_USER, tb_len=len(tb2)) + tb2,            # 5: HARQ repeat
        pseudo(PDU, user=0, flags=F_USER, tb_len=len(tb3)) + tb3,            # 6: completes
        pseudo(PDU, direction=RECEIVED, user=0, flags=F_USER) + tb3,         # 7: other stream
    ]
    for passes in ((), ("-2",)):  # one pass, and tshark's two (the second sees visited)
        rows = fields(write_pcap(tmp_path / "r.pcap", records), "oppsched.ip_packets",
                      "oppsched.reassembled.len", "oppsched.reassembled.frames",
                      "tcp.srcport", "tcp.seq_raw", "tcp.len", *passes)
        assert [r[0] for r in rows] == ["0", "0", "0", "0", "0", "1", "0"], rows
        assert rows[5][1:] == ["1064", "1,4,6", "5601", "4242", "1024"]
        assert all(r[3] == "" for i, r in enumerate(rows) if i != 5)  # user 1's stays apart


def test_a_packet_split_across_compact_pdus_is_reassembled_in_order_once(tmp_path):
    _need_tshark()
    big = tcp_packet(sport=5701, seq=777, payload=b"q" * 900)  # 940 bytes
    small = tcp_packet(sport=5702, seq=888, payload=b"s" * 10)
    # PDU 10: `small` whole, then the first 300 bytes of `big`; PDU 11: 400 more, nothing
    # starts; PDU 12: its last 240, then padding.
    tb10 = mac.serialize_compact_pdu(seq=10, tb_bytes=4 + len(small) + 300,
                                     packets=[small, big[:300]])
    tb11 = mac.serialize_compact_pdu(seq=11, tb_bytes=4 + 400, continuation=big[300:700])
    tb12 = mac.serialize_compact_pdu(seq=12, tb_bytes=4 + 240 + 20, continuation=big[700:])
    rx = dict(direction=RECEIVED, flags=F_USER | F_CRC | F_CRC_OK, user=2)
    records = [
        pseudo(PDU, **rx) + tb10,   # 1
        pseudo(PDU, **rx) + tb12,   # 2: received before 11 (HARQ)
        pseudo(PDU, **rx) + tb11,   # 3: completes `big`
        pseudo(PDU, **rx) + tb12,   # 4: a repeat: nothing more
    ]
    rows = fields(write_pcap(tmp_path / "c.pcap", records), "oppsched.pdu.first",
                  "oppsched.ip_packets", "oppsched.reassembled.frames", "tcp.srcport",
                  "tcp.seq_raw")
    assert rows[0][1:] == ["1", "", "5702", "888"]
    assert rows[0][0] == "0" and rows[1][0] == "240" and rows[2][0] == "65535"
    assert rows[1][1:] == ["0", "", "", ""]
    assert rows[2][1:] == ["1", "1,3,2", "5701", "777"]
    assert rows[3][1:] == ["0", "", "", ""]


def test_the_mac_session_trailer_is_shown_and_not_taken_for_payload(tmp_path):
    # pdu.h: with SESSION, the 2 bytes before the CRC (standard) or the TB's last 2 bytes
    # (compact) carry the AP's MAC session.
    _need_tshark()
    whole = tcp_packet(sport=5501, seq=11)
    std = mac.serialize_pdu(user=1, seq=5, price=0.0, tb_bytes=200, session=0xBEEF,
                            segments=[{"packet_seq": 1, "data": whole}])
    other = tcp_packet(sport=5502, seq=12)
    cmp = mac.serialize_compact_pdu(seq=7, price=None, continuation=b"", packets=[other],
                                    tb_bytes=4 + len(other) + 2, session=0x1234)
    rows = fields(write_pcap(tmp_path / "s.pcap", [pseudo(PDU, tb_len=len(std)) + std,
                                                     pseudo(PDU, tb_len=len(cmp)) + cmp]),
                  "oppsched.pdu.session", "oppsched.ip_packets", "tcp.srcport",
                  "oppsched.pdu.crc_good", "_ws.expert.message")
    assert rows[0][:4] == ["0xbeef", "1", "5501", "1"] and rows[0][4] == "", rows[0]
    assert rows[1][:3] == ["0x1234", "1", "5502"] and rows[1][4] == "", rows[1]


def _frames() -> dict[str, bytes]:
    w = mac.wire
    tb = mac.serialize_pdu(user=2, seq=9, price=0.0, tb_bytes=220,
                           segments=[{"packet_seq": 1, "data": tcp_packet(sport=5401)}])
    return {
        "slot_request": w.encode("slot_request", 1, {"slot": 1000, "air_time_ns": 123}),
        "slot_grant": w.encode("slot_grant", 2, {"slot": 1001, "user": 2, "mcs": 7,
                                                 "harq_pid": 4, "ndi": 1, "rv": 0, "tb": tb}),
        "rx_indication": w.encode("rx_indication", 3, {
            "slot": 1002, "user": 2, "mcs": 7, "harq_pid": 4, "ndi": 1, "rv": 1,
            "header_ok": True, "addressed": True, "crc_ok": True, "snr_db": 12.5, "cqi": 9,
            "combined": 2, "tb": tb}),
        "cqi_report": w.encode("cqi_report", 4, {"user": 2, "slot": 1003, "snr_db": 3.0,
                                                 "cqi": 4}),
        "harq_feedback": w.encode("harq_feedback", 5, {"user": 2, "slot": 1004, "harq_pid": 4,
                                                       "ack": True}),
        "uplink_packet": w.encode("uplink_packet", 6, {"user": 2,
                                                       "packet": tcp_packet(sport=40000,
                                                                            dport=5401)}),
        "uplink_grant": w.encode("uplink_grant", 7, {
            "user": 2, "slot": 1005, "air_time_ns": 99, "mcs": 3, "harq_pid": 1, "ndi": 1,
            "rv": 0, "tb_bytes": 220}),
        "uplink_tb": w.encode("uplink_tb", 8, {
            "user": 2, "slot": 1005, "harq_pid": 1, "ndi": 1, "buffer_bytes": 3000,
            "buffer_packets": 2, "tb": tb}),
        "buffer_status": w.encode("buffer_status", 9, {
            "user": 2, "last_grant_slot": 1005, "buffer_bytes": 4500, "buffer_packets": 3}),
    }


def test_every_phy_mac_message_decodes_with_its_body(tmp_path):
    _need_tshark()
    frames = _frames()
    recs = [pseudo(MESSAGE, SENT, 2) + f for f in frames.values()]
    rows = fields(write_pcap(tmp_path / "m.pcap", recs), "oppsched.msg.type", "oppsched.msg.seq",
                  "oppsched.msg.slot", "oppsched.msg.user", "oppsched.msg.crc_good",
                  "oppsched.msg.harq_pid", "oppsched.msg.ack", "oppsched.msg.snr_db",
                  "tcp.srcport")
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5", "6", "7", "8", "9"]
    assert [r[1] for r in rows] == ["1", "2", "3", "4", "5", "6", "7", "8", "9"]
    assert [r[2] for r in rows] == ["1000", "1001", "1002", "1003", "1004", "", "1005", "1005",
                                    ""]
    assert [r[3] for r in rows] == ["", "2", "2", "2", "2", "2", "2", "2", "2"]
    assert all(r[4] == "1" for r in rows)
    assert rows[4][5:7] == ["4", "1"] and rows[2][7] == "12.5"
    # the uplink packet reaches TCP; the TBs of grants, rx_indications and uplink TBs are
    # decoded as PDUs but their packets are handed on from the PDU records only (no TCP
    # duplicates) ...
    assert [r[8] for r in rows] == ["", "", "", "", "", "40000", "", "", ""]
    assert fields(tmp_path / "m.pcap", "oppsched.pdu.seq")[1:3] == [["9"], ["9"]]
    assert fields(tmp_path / "m.pcap", "oppsched.pdu.seq")[7] == ["9"]
    grant, tb, bsr = fields(tmp_path / "m.pcap", "oppsched.msg.tb_bytes",
                            "oppsched.msg.buffer_bytes", "oppsched.msg.buffer_packets",
                            "oppsched.msg.last_grant_slot", "oppsched.msg.slot")[6:]
    assert grant == ["220", "", "", "", "1005"]
    assert tb == ["", "3000", "2", "", "1005"]
    assert bsr == ["", "4500", "3", "1005", ""]
    # ... unless the preference says so
    rows = fields(tmp_path / "m.pcap", "tcp.srcport", "-o", "oppsched.message_ip:TRUE")
    assert [r[0] for r in rows] == ["", "5401", "5401", "", "", "40000", "", "5401", ""]


def test_unknown_flag_bits_and_types_are_tolerated_as_warnings(tmp_path):
    _need_tshark()
    g = bytearray(_frames()["slot_grant"])
    g[16 + 8] |= 0x04  # a slot_grant flag bit this dissector does not know (wire flags byte)
    body = bytes(g[:-4])
    g = body + struct.pack(">I", __import__("zlib").crc32(body))
    unknown_type = bytearray(_frames()["cqi_report"])
    unknown_type[5] = 42
    body = bytes(unknown_type[:-4])
    unknown_type = body + struct.pack(">I", __import__("zlib").crc32(body))
    recs = [pseudo(MESSAGE, flags=0x80) + g, pseudo(MESSAGE) + unknown_type]
    rows = fields(write_pcap(tmp_path / "u.pcap", recs), "oppsched.msg.empty", "oppsched.pdu.seq",
                  "oppsched.msg.crc_good", "_ws.expert.severity", "_ws.expert.message")
    assert rows[0][:3] == ["0", "9", "1"]  # the grant and its PDU decoded all the same
    assert "unknown bits" in rows[0][4] and "42" in rows[1][4]
    # warnings (6291456 = 0x00600000), no errors (8388608 = 0x00800000)
    for r in rows:
        assert "8388608" not in r[3].split(","), r


def _malformed() -> list[tuple[bytes, str]]:
    f = _frames()
    good_tb = mac.serialize_pdu(user=1, seq=1, price=0.0, tb_bytes=60, segments=[])
    bad_crc_tb = good_tb[:-1] + bytes([good_tb[-1] ^ 0xFF])
    lying = bytearray(good_tb)
    lying[14:16] = (500).to_bytes(2, "big")  # payload_len past the TB
    seg_lie = bytearray(mac.serialize_pdu(user=1, seq=1, price=0.0, tb_bytes=80, segments=[
        {"packet_seq": 1, "data": b"\x45" + b"\x00" * 19}]))
    seg_lie[16 + 6:16 + 8] = (900).to_bytes(2, "big")  # seg_len past the payload
    grant = bytearray(f["slot_grant"])
    grant[-1] ^= 0x01
    short = f["harq_feedback"][:20]
    compact_bad_first = bytes([0x80, 0x01, 0x03, 0xE8]) + b"\x45" * 10
    return [
        (b"\x01", "shorter than the pseudo-header"),
        (pseudo(PDU)[:1] + bytes([60]) + pseudo(PDU)[2:], "header_len 60"),
        (pseudo(PDU, tb_len=len(bad_crc_tb)) + bad_crc_tb, "PDU CRC-32"),
        (pseudo(PDU) + bytes(lying), "payload_len 500"),
        (pseudo(PDU) + bytes(seg_lie), "seg_len 900"),
        (pseudo(PDU) + b"\x07" * 30, "first byte 0x07"),
        (pseudo(PDU) + compact_bad_first, "first 1000"),
        (pseudo(MESSAGE, flags=F_BAD) + bytes(grant), "message CRC-32"),
        (pseudo(MESSAGE, flags=F_BAD) + short, "body_len 12: the frame has 20 bytes"),
        (pseudo(MESSAGE, flags=F_BAD) + short[:19], "shorter than header and CRC"),
        (pseudo(MESSAGE, flags=F_BAD) + b"XXXX" + f["cqi_report"][4:], "magic 0x58585858"),
        (pseudo(MESSAGE, flags=F_BAD) + f["slot_request"][:12] + struct.pack(">I", 2)
         + f["slot_request"][16:18] + struct.pack(">I", __import__("zlib").crc32(
             f["slot_request"][:12] + struct.pack(">I", 2) + f["slot_request"][16:18])),
         "ends before its field"),
    ]


def test_malformed_records_show_as_expert_errors_not_lua_errors(tmp_path):
    _need_tshark()
    cases = _malformed()
    pcap = write_pcap(tmp_path / "bad.pcap", [r for r, _ in cases])
    rows = fields(pcap, "frame.number", "_ws.expert.severity", "_ws.expert.message")
    assert len(rows) == len(cases)
    for (rec, want), row in zip(cases, rows):
        assert "8388608" in row[1].split(","), (want, row)  # an error-severity expert info
        assert want in row[2], (want, row)
        assert "dissector error" not in row[2], row  # no Lua error caught by the guard
    # the same file in full detail: nothing the dissector could not handle
    tshark(pcap, "-V")


def test_the_dissector_survives_every_truncation_of_a_record(tmp_path):
    _need_tshark()
    tb = mac.serialize_pdu(user=1, seq=3, price=0.25, tb_bytes=120, segments=[
        {"packet_seq": 1, "data": tcp_packet(payload=b"q" * 40)}])
    whole = [pseudo(PDU, flags=F_SLOT, slot=9) + tb,
             pseudo(MESSAGE) + _frames()["rx_indication"],
             pseudo(PDU) + mac.serialize_compact_pdu(seq=1, price=0.5, continuation=b"",
                                                     packets=[tcp_packet()], tb_bytes=200)]
    recs = [w[:n] for w in whole for n in range(0, len(w), 7)]
    rows = fields(write_pcap(tmp_path / "t.pcap", recs), "frame.number", "_ws.expert.message")
    assert len(rows) == len(recs)
    assert not any("dissector error" in r[1] for r in rows)


# ----------------------------------------------------------------------------------------
# A run on the abstract PHY

RUN = """
experiment: macpcap
kind: testbed
duration_s: 6
seed: 3
devices:
  - {name: R1, channel: {mean_snr_db: 15.0}}
  - {name: R2, channel: {mean_snr_db: 10.0}}
servers:
  - {name: S1, rtt_ms: 20}
flows:
  - {id: f1, server: S1, device: R1, family: ipv4}
  - {id: f2, server: S1, device: R2, family: ipv6}
queue: {limit_bytes: 200000}
capture: {mac: true, pcaps: false}
pdu: {integrity_tag: true}
"""


@pytest.fixture(scope="module")
def mac_run(tmp_path_factory):
    require_real_testbed()
    _need_tshark()
    from oppsched.run.runner import run_experiment
    tmp = tmp_path_factory.mktemp("macpcap")
    exp = write_experiment(tmp, RUN)
    with netns_prefix():
        runs = run_experiment(exp, tmp / "out", ())
    return tmp / "out", runs[0][1]


COLUMNS = {"kind": "oppsched.kind", "direction": "oppsched.direction", "slot": "oppsched.slot",
           "user": "oppsched.user", "mcs": "oppsched.mcs", "harq_pid": "oppsched.harq_pid",
           "rv": "oppsched.rv", "ndi": "oppsched.ndi", "tb_bytes": "oppsched.tb_len",
           "crc_ok": "oppsched.crc_ok", "msg_type": "oppsched.msg.type",
           "sport": "tcp.srcport", "dport": "tcp.dstport", "severity": "_ws.expert.severity",
           "pdu_seq": "oppsched.pdu.seq", "ip_packets": "oppsched.ip_packets",
           "reassembled": "oppsched.reassembled.len", "tag_flag": "oppsched.flags.tag",
           "tag": "oppsched.pdu.integrity_tag"}


def no_payload_heuristics() -> list[str]:
    """tshark options that turn off the protocols Wireshark tries on TCP payloads by
    heuristics. iperf3's payloads are random bytes, and now and then one passes a heuristic:
    seen, "Thrift varint value too large for target integer type", an expert error in a
    segment the testbed carried intact. Then no heuristic names a protocol the run has not
    sent."""
    r = subprocess.run(["tshark", "-G", "heuristic-decodes"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    out = []
    for line in r.stdout.splitlines():
        under, _, rest = line.partition("\t")
        proto, _, enabled = rest.partition("\t")
        if under == "tcp" and enabled == "T":
            out += ["--disable-protocol", proto]
    assert out, r.stdout[:500]
    return out


@pytest.fixture(scope="module")
def dissected(mac_run):
    """Every record of each MAC pcap of the run as tshark decodes it (one pass per file),
    without the heuristic dissectors of TCP payloads (no_payload_heuristics)."""
    out, _ = mac_run
    tables = {}
    quiet = no_payload_heuristics()
    for p in sorted(out.glob("mac-*.pcap")):
        rows = tshark(p, *quiet, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,",
                      *[a for f in COLUMNS.values() for a in ("-e", f)])
        tables[p.name] = pd.DataFrame(rows, columns=list(COLUMNS))
    return tables


def _ints(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return df[cols].astype(int).reset_index(drop=True)


def _ports(df: pd.DataFrame) -> set[int]:
    return {int(p) for c in ("sport", "dport") for v in df[c] for p in v.split(",") if p}


def test_the_aps_mac_pcap_matches_the_slot_trace(mac_run, dissected):
    out, _ = mac_run
    slots = pd.read_csv(out / "slots.csv")
    key = ["slot", "user", "mcs", "harq_pid", "rv", "ndi", "tb_bytes"]
    want = slots[slots["user"] >= 0][key].astype(int).sort_values("slot").reset_index(drop=True)
    ap = dissected["mac-ap.pcap"]
    got = _ints(ap[ap["kind"] == "1"], key).sort_values("slot").reset_index(drop=True)
    assert len(got) > 500
    # every TB the trace lists was captured with the same fields, and nothing else
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert set(got["user"]) == {0, 1}  # (display filters on these fields: the first test)


def test_the_mac_pcaps_carry_the_flows_tcp_segments_and_every_message_kind(mac_run, dissected):
    out, _ = mac_run
    run = json.loads((out / "run.json").read_text())
    ports = {f["id"]: f["port"] for f in run["flows"]}
    ap = dissected["mac-ap.pcap"]
    assert {ports["f1"], ports["f2"]} <= _ports(ap[(ap["kind"] == "1") & (ap["sport"] != "")])
    msgs = ap[ap["kind"] == "2"]
    kinds = set(zip(msgs["msg_type"].astype(int), msgs["direction"].astype(int)))
    # requests in, grants out, CQI and HARQ feedback in, and the uplink ACK packets in
    assert {(1, 1), (2, 0), (4, 1), (5, 1), (6, 1)} <= kinds
    for dev, user, flow in (("R1", 0, "f1"), ("R2", 1, "f2")):
        cli = dissected[f"mac-client.{dev}.pcap"]
        rx = cli[(cli["kind"] == "1") & (cli["direction"] == "1")]
        assert len(rx) > 100 and set(rx["user"].astype(int)) == {user}
        assert (rx["crc_ok"] == "1").mean() > 0.5 and set(rx["crc_ok"]) <= {"0", "1"}
        assert ports[flow] in _ports(rx[rx["sport"] != ""])
        assert (rx["sport"] != "").sum() > 100
        up = cli[(cli["kind"] == "2") & (cli["direction"] == "0")]
        assert {"4", "5", "6"} <= set(up["msg_type"])
        assert ports[flow] in _ports(up[up["msg_type"] == "6"])  # the ACKs going back
    # pdu.integrity_tag on: every record of both daemons says so, and every PDU record's TB
    # ends in its tag (split off: the PDUs parsed, their packets above reached TCP)
    for name, df in dissected.items():
        assert set(df["tag_flag"]) == {"1"}, name
        pdus = df[df["kind"] == "1"]
        assert (pdus["tag"].str.len() == 16).all(), name
    # no record anywhere with an error (8388608: expert severity error)
    for name, df in dissected.items():
        bad = df[df["severity"].str.split(",").apply(lambda v: "8388608" in v)]
        assert bad.empty, (name, bad.head())


def test_every_packet_a_client_delivered_is_in_its_mac_pcap_whole_or_reassembled(
        mac_run, dissected):
    out, _ = mac_run
    for dev in ("R1", "R2"):
        delivered = json.loads((out / f"client.{dev}.stats.json").read_text())[
            "reassembly"]["delivered"]
        cli = dissected[f"mac-client.{dev}.pcap"]
        rx = cli[(cli["kind"] == "1") & (cli["direction"] == "1") & (cli["crc_ok"] == "1")]
        # a TB received twice (its ACK was lost) hands its whole packets on again, as the
        # client's reassembler does not
        again = rx["pdu_seq"].duplicated()
        seen = rx["ip_packets"].astype(int)
        assert seen.sum() - seen[again].sum() == delivered, dev
        split = (rx["reassembled"] != "").sum()
        assert split > 20, (dev, split)  # 1500-byte packets in TBs of a few hundred bytes


# ----------------------------------------------------------------------------------------
# The apd's capture on its own: malformed input recorded, the size limit


@needs_root
def test_the_apds_capture_records_bad_messages_and_stops_at_its_size_limit(bed):
    zmq = pytest.importorskip("zmq")
    require(ta.APD is not None, "oppsched-apd is not built")
    _need_tshark()
    cfg = bed.config()
    cap = bed.dir / "mac-ap.pcap"
    cfg["traces"]["mac_pcap"] = str(cap)
    cfg["traces"]["mac_pcap_max_bytes"] = 16384
    p = bed.start(cfg)
    ctx = zmq.Context()
    try:
        s = ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.LINGER, 1000)
        s.connect(bed.ep("phy_requests"))
        s.send(b"garbage-on-phy-requests")
        s.close()
        phy = ta.FakePhy(ctx, bed, first_seq=0)
        client = ta.FakeClient(ctx, bed)
        client.send("cqi_report", {"user": 0, "slot": 0, "snr_db": 5.0, "cqi": 10})
        marker = b"mac-capture-marker-0815"
        ta.send_udp_in_ns(bed, ta.UE0_ADDR, 9, marker)
        slot, _ = ta.grants_until(phy, client, 1, lambda g: ta.carries(g, marker))
        # 40 kB more downlink: its TBs take the file past its limit
        bed.exec("python3", "-c", "import socket; s = socket.socket(socket.AF_INET, "
                 f"socket.SOCK_DGRAM)\nfor _ in range(40): s.sendto(b'x' * 1000, "
                 f"({ta.UE0_ADDR!r}, 10))")
        sent = 0
        for k in range(slot + 1, slot + 150):
            g = phy.request(k)
            if not g["empty"]:
                sent += len(g["tb"])
                client.send("harq_feedback", {"user": g["user"], "slot": k,
                                              "harq_pid": g["harq_pid"], "ack": True})
            time.sleep(0.003)
        assert sent > 20000  # grant and PDU record each carry the TB: > 40 kB offered
        phy.close()
    finally:
        ctx.destroy(linger=0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    err = p.stderr.read()
    assert "capture truncated" in err and str(cap) in err
    stats = json.loads((bed.dir / "apd.stats.json").read_text())
    assert stats["traces"]["mac_pcap_dropped"] > 0 and stats["traces"]["mac_pcap_records"] > 10
    assert 24 < cap.stat().st_size <= 16384
    rows = fields(cap, "oppsched.kind", "oppsched.flags.bad_message", "udp.dstport",
                  "_ws.expert.message")
    assert len(rows) == stats["traces"]["mac_pcap_records"]  # whole records only
    assert rows[0][:2] == ["2", "1"] and "rejected" in rows[0][3]  # the garbage, flagged
    assert any(r[0] == "1" and r[2] == "9" for r in rows)  # the marker's TB, UDP inside


def test_with_the_integrity_tag_preference_the_last_8_bytes_are_the_tag_not_the_pdu(tmp_path):
    _need_tshark()
    tb = mac.serialize_pdu(user=0, seq=1, price=None, tb_bytes=200, segments=[
        {"packet_seq": 1, "data": tcp_packet(sport=5201, seq=777)}])
    tag = bytes(range(1, 9))
    pcap = write_pcap(tmp_path / "t.pcap", [pseudo(PDU, tb_len=len(tb) + 8) + tb + tag])
    names = ("oppsched.pdu.integrity_tag", "oppsched.pdu.crc_good", "tcp.srcport")
    (row,) = fields(pcap, *names)
    assert row[0] == "" and row[1] == "0"  # the tag read as the PDU's end: bad CRC
    (row,) = fields(pcap, *names, "-o", "oppsched.integrity_tag:on")
    assert row == ["0102030405060708", "1", "5201"]


def _uplink_records(tag: bytes | None) -> list[bytes]:
    """A station's uplink TBs as the captures hold them, each followed by `tag` (None: no
    tag, no TAG flag): the client's uplink_tb (medium.station_queue client), the apd's
    uplink slot_grant to the PHY (uplink_decode phy), and the PDU records of the TBs the
    AP's receiver decoded (received, the station's user), standard and compact."""
    t, flag = (tag or b""), (F_TAG if tag else 0)
    std = mac.serialize_pdu(user=1, seq=77, price=None, tb_bytes=200, segments=[
        {"packet_seq": 3, "data": tcp_packet(sport=40001, dport=5201, seq=31)}]) + t
    ack = tcp_packet(sport=40002, dport=5201, seq=32, payload=b"")
    cmp = mac.serialize_compact_pdu(seq=78, price=None, continuation=b"", packets=[ack],
                                    tb_bytes=4 + len(ack) + 6) + t
    w = mac.wire
    up_tb = w.encode("uplink_tb", 1, {"user": 1, "slot": 2000, "harq_pid": 2, "ndi": 1,
                                      "buffer_bytes": 0, "buffer_packets": 0, "tb": std})
    grant = w.encode("slot_grant", 2, {"slot": 2000, "user": 1, "mcs": 5, "harq_pid": 2,
                                       "ndi": 1, "rv": 0, "uplink": True, "tb": std})
    rx = dict(direction=RECEIVED, user=1, slot=2000, tb_len=len(std),
              flags=F_SLOT | F_USER | F_HARQ | F_CRC | F_CRC_OK | flag)
    return [pseudo(MESSAGE, SENT, 3, F_SLOT | F_USER | flag, user=1, slot=2000) + up_tb,
            pseudo(MESSAGE, SENT, 2, F_SLOT | F_USER | F_HARQ | flag, user=1, slot=2000)
            + grant,
            pseudo(PDU, **rx) + std,
            pseudo(PDU, **{**rx, "tb_len": len(cmp)}) + cmp]


UPLINK_FIELDS = ("oppsched.flags.tag", "oppsched.pdu.integrity_tag", "oppsched.pdu.user",
                 "oppsched.pdu.seq", "oppsched.pdu.compact_seq", "oppsched.pdu.crc_good",
                 "oppsched.pdu.padding", "tcp.srcport", "_ws.expert.message")


def test_a_tagged_uplink_tb_shows_its_tag_and_its_pdu_from_the_records_tag_flag(tmp_path):
    _need_tshark()
    tag = bytes.fromhex("a1a2a3a4a5a6a7a8")
    pcap = write_pcap(tmp_path / "up.pcap", _uplink_records(tag))
    rows = fields(pcap, *UPLINK_FIELDS)  # no preference set: the flag decides
    # uplink_tb and the uplink grant: the PDU inside, its tag split off, its CRC good
    for r in rows[:2]:
        assert r[:7] == ["1", "a1a2a3a4a5a6a7a8", "1", "77", "", "1", r[6]], r
        assert r[7] == "" and r[8] == "", r  # packets handed on from PDU records only
    # the PDU records of the AP's receiver: the packets reach TCP, nothing malformed
    assert rows[2][:6] == ["1", "a1a2a3a4a5a6a7a8", "1", "77", "", "1"], rows[2]
    assert rows[2][7:] == ["40001", ""], rows[2]
    assert rows[3][:5] == ["1", "a1a2a3a4a5a6a7a8", "", "", "78"], rows[3]
    assert rows[3][6:] == ["6", "40002", ""], rows[3]  # the 6 padding bytes, not the tag
    # the preference overrides the flag: off reads the tag as the PDU's end
    rows = fields(pcap, *UPLINK_FIELDS, "-o", "oppsched.integrity_tag:off")
    assert all(r[1] == "" for r in rows) and rows[2][5] == "0", rows
    assert "PDU CRC-32" in rows[2][8], rows
    assert rows[3][6] == "14", rows  # the compact format: padding and tag taken as padding


def test_an_untagged_uplink_tb_is_dissected_as_before(tmp_path):
    _need_tshark()
    pcap = write_pcap(tmp_path / "up0.pcap", _uplink_records(None))
    rows = fields(pcap, *UPLINK_FIELDS)
    assert [r[:6] for r in rows] == [["0", "", "1", "77", "", "1"]] * 3 + [
        ["0", "", "", "", "78", ""]], rows
    assert [r[7] for r in rows] == ["", "", "40001", "40002"]
    assert rows[3][6] == "6" and all(r[8] == "" for r in rows), rows
