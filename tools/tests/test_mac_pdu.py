"""MAC PDU, CRC-32, segmentation and reassembly from Python (oppsched.mac)."""

import random
import re
import struct
import zlib

import pytest

from oppsched import mac
from helpers import BASE, REPO, cfg_of, error_of, run_layout
from oppsched.testbed import daemonconf

VECTORS = REPO / "host" / "tests" / "vectors"


def vector(name: str) -> bytes:
    return bytes.fromhex((VECTORS / name).read_text().strip())


def test_crc32_known_answer_and_zlib_agreement():
    assert mac.crc32(b"123456789") == 0xCBF43926
    rng = random.Random(3)
    for n in list(range(40)) + [1500, 4096]:
        data = rng.randbytes(n)
        assert mac.crc32(data) == zlib.crc32(data)
    assert mac.crc32(b"6789", crc=mac.crc32(b"12345")) == 0xCBF43926


def test_golden_vector_two_packets():
    p = mac.parse_pdu(vector("pdu_v1_two_packets.hex"))
    assert (p["user"], p["seq"], p["price"], p["padding"]) == (3, 0x01020304, 0.25, 19)
    assert [(s["packet_seq"], s["packet_len"], s["offset"], s["data"]) for s in p["segments"]] == [
        (7, 5, 0, b"ABCDE"), (8, 10, 0, b"WXYZ")]
    assert p["segments"][1]["first"] and not p["segments"][1]["last"]


def test_golden_vector_continuation_without_price():
    p = mac.parse_pdu(vector("pdu_v1_continuation_no_price.hex"))
    assert (p["user"], p["seq"], p["price"]) == (0, 0xFFFFFFFF, None)
    (s,) = p["segments"]
    assert (s["packet_seq"], s["offset"], s["data"], s["last"]) == (8, 4, b"abcdef", True)


def test_serialize_reproduces_the_golden_vectors():
    b = mac.serialize_pdu(user=3, seq=0x01020304, price=0.25, tb_bytes=64, segments=[
        {"packet_seq": 7, "data": b"ABCDE"},
        {"packet_seq": 8, "packet_len": 10, "data": b"WXYZ"}])
    assert b == vector("pdu_v1_two_packets.hex")
    b = mac.serialize_pdu(user=1, seq=5, price=0.0, tb_bytes=20, segments=[])
    assert b == vector("pdu_v1_empty.hex")


def test_the_wire_layout_is_big_endian_with_a_trailing_crc():
    b = vector("pdu_v1_two_packets.hex")
    version, flags, user, seq, price, nseg, plen = struct.unpack(">BBHIfHH", b[:16])
    assert (version, flags, user, seq, price, nseg, plen) == (1, 1, 3, 0x01020304, 0.25, 2, 25)
    assert struct.unpack(">I", b[-4:])[0] == zlib.crc32(b[:-4])


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b[:10], "pdu.length: 10"),
    (lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:], "pdu.crc32"),
])
def test_malformed_pdus_raise_value_error_naming_the_field(mutate, message):
    with pytest.raises(ValueError, match=message):
        mac.parse_pdu(mutate(vector("pdu_v1_two_packets.hex")))


def test_a_lying_length_field_is_caught_even_with_a_valid_crc():
    b = bytearray(vector("pdu_v1_two_packets.hex"))
    b[22:24] = (200).to_bytes(2, "big")  # segment 0 seg_len
    b[-4:] = zlib.crc32(bytes(b[:-4])).to_bytes(4, "big")
    with pytest.raises(ValueError, match=r"pdu.segment\[0\].seg_len: 200"):
        mac.parse_pdu(bytes(b))


def test_serialize_rejects_segments_that_do_not_fit():
    with pytest.raises(ValueError, match="pdu.tb_bytes: 30"):
        mac.serialize_pdu(user=0, seq=0, tb_bytes=30,
                          segments=[{"packet_seq": 0, "data": b"x" * 10}])


def test_segmenter_builds_tbs_and_records_what_they_carry():
    queue = [b"a" * 30, (b"b" * 100, 77), b"c" * 10]
    seg = mac.segmenter(user=2)
    pdu, rec = seg.build(100, lambda: queue.pop(0) if queue else None, price=0.5)
    assert len(pdu) == 100
    assert [(s["packet_id"], s["seg_len"], s["last"]) for s in rec["segments"]] == [
        (0, 30, True), (77, 34, False)]
    assert seg.has_partial and seg.partial_remaining == 66
    parsed = mac.parse_pdu(pdu)
    assert parsed["user"] == 2 and parsed["price"] == 0.5
    with pytest.raises(ValueError, match="segmenter.tb_bytes: 10"):
        seg.build(10, None)


def test_segmentation_shuffle_within_window_reassembly_round_trip():
    rng = random.Random(8)
    packets = [rng.randbytes(rng.randrange(1, 1500)) for _ in range(200)]
    queue = list(packets)
    seg = mac.segmenter()
    tbs = []
    while queue or seg.has_partial:
        tbs.append(seg.build(rng.randrange(40, 900), lambda: queue.pop(0) if queue else None)[0])
    window = 8
    for i in range(0, len(tbs), window):
        block = tbs[i:i + window]
        rng.shuffle(block)
        tbs[i:i + window] = block
    r = mac.reassembler(window=window, timeout_ns=10**9)
    out = []
    for k, tb in enumerate(tbs):
        out += r.on_pdu(tb, k * 1_000_000)
        out += r.on_pdu(tb, k * 1_000_000)  # HARQ duplicate
    assert out == packets
    assert r.stats["duplicates"] == len(tbs)
    assert r.held_bytes == 0


def test_lost_tb_drops_exactly_the_packets_it_carried():
    packets = [bytes([i]) * 60 for i in range(6)]
    queue = list(packets)
    seg = mac.segmenter()
    built = []
    while queue or seg.has_partial:
        built.append(seg.build(100, lambda: queue.pop(0) if queue else None))
    victims = {s["packet_id"] for s in built[1][1]["segments"]}
    r = mac.reassembler(timeout_ns=10_000_000)
    out = []
    for k, (pdu, rec) in enumerate(built):
        out += r.on_lost(rec["seq"], k) if k == 1 else r.on_pdu(pdu, k)
    assert out == [p for i, p in enumerate(packets) if i not in victims]
    assert r.stats["dropped_incomplete"] == len(victims)


def test_reassembler_params_are_validated():
    with pytest.raises(ValueError, match="reassembler.window: 0"):
        mac.reassembler(window=0)
    with pytest.raises(ValueError, match="reassembler.max_bytes"):
        mac.reassembler(max_bytes=10)


# ---- Compact format (host/include/oppsched/pdu.h) ----------------------------------------

def ipv4(n: int, tag: int = 0) -> bytes:
    """An IPv4 packet of n >= 20 bytes whose total length says n; the rest tagged."""
    return struct.pack(">BBH", 0x45, 0, n) + bytes((tag + i) & 0xFF for i in range(n - 4))


def ipv6(n: int, tag: int = 0) -> bytes:
    return struct.pack(">IH", 0x60000000, n - 40) + bytes((tag + i) & 0xFF for i in range(n - 6))


def test_compact_golden_vector_parses_and_serialises_back():
    b = vector("pdu_compact_priced.hex")
    assert mac.pdu_format(b) == "compact" and mac.pdu_format(vector("pdu_v1_empty.hex")) == "standard"
    p = mac.parse_compact_pdu(b)
    assert (p["seq"], p["price"], p["first"], p["continuation"], p["padding"]) == (0x123, 0.25, 3, b"abc", 5)
    (pk,) = p["packets"]
    assert (pk["packet_len"], pk["complete"], len(pk["data"])) == (20, True, 20)
    assert mac.serialize_compact_pdu(seq=0x123, price=0.25, continuation=b"abc", packets=[pk["data"]],
                                     tb_bytes=36) == b
    # The layout by hand: format 0b10, PRICE, seq[11:8]; seq[7:0]; first; price.
    b0, b1, first, price = struct.unpack(">BBHf", b[:8])
    assert (b0 >> 6, (b0 >> 5) & 1, ((b0 & 0x0F) << 8) | b1, first, price) == (2, 1, 0x123, 3, 0.25)
    c = mac.parse_compact_pdu(vector("pdu_compact_continuation.hex"))
    assert (c["first"], c["continuation"], c["packets"]) == (None, b"wxyz", [])


def test_an_8_byte_tb_carries_4_bytes_of_packets_in_the_compact_format():
    assert mac.min_usable_tb_bytes("compact") == mac.PDU_COMPACT_MIN_BYTES == 5
    assert mac.min_usable_tb_bytes("standard") == 29
    assert mac.PDU_COMPACT_HEADER_BYTES == 4 and mac.PDU_COMPACT_MAX_WINDOW == 2048
    with pytest.raises(ValueError, match="pdu.format: 'tiny'"):
        mac.min_usable_tb_bytes("tiny")


@pytest.mark.parametrize("tb_bytes", [8, 16, 32])
def test_compact_round_trip_of_many_packet_sizes(tb_bytes):
    rng = random.Random(tb_bytes)
    packets = [ipv6(rng.randrange(40, 600), i) if i % 3 == 0 else ipv4(rng.randrange(20, 600), i)
               for i in range(60)]
    queue = list(packets)
    seg = mac.segmenter(format="compact")
    r = mac.reassembler()
    out = []
    k = 0
    while queue or seg.has_partial:
        pdu, rec = seg.build(tb_bytes, lambda: queue.pop(0) if queue else None)
        assert len(pdu) == tb_bytes and mac.pdu_format(pdu) == "compact"
        out += r.on_pdu(pdu, k)
        k += 1
    assert out == packets
    assert r.format == "compact" and r.held_bytes == 0
    assert seg.stats["data_bytes"] == sum(map(len, packets))
    assert seg.stats["overhead_bytes"] == 4 * seg.stats["tbs"]


def test_compact_lost_pdu_discards_the_packet_spanning_it_and_delivers_the_next():
    packets = [ipv4(20, 1), ipv4(100, 2), ipv4(60, 3)]
    queue = list(packets)
    seg = mac.segmenter(format="compact")
    built = []
    while queue or seg.has_partial:
        built.append(seg.build(16, lambda: queue.pop(0) if queue else None))
    assert {s["packet_id"] for s in built[4][1]["segments"]} == {1}  # inside the 100-byte one
    r = mac.reassembler(timeout_ns=10_000_000)
    out = []
    for k, (pdu, rec) in enumerate(built):
        out += r.on_lost(rec["seq"], k) if k == 4 else r.on_pdu(pdu, k)
    assert out == [packets[0], packets[2]]
    assert r.stats["dropped_incomplete"] == 1


@pytest.mark.parametrize("data, message", [
    (b"\x80\x00\x00", "pdu.length: 3"),
    (b"\x90\x00\x00\x00E", "pdu.length: 5 bytes, need >= 7 with SESSION set"),
    (b"\x80\x00\x00\x05E\x00\x00\x14", "pdu.first: 5"),
    (b"\x80\x00\x00\x00\x50\x00\x00\x00", "pdu.packet[0].version: 5"),
    (b"\x80\x00\x00\x00\x45\x00\x00\x10", "pdu.packet[0].ipv4_total_length: 16"),
])
def test_malformed_compact_pdus_name_the_field_and_value(data, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        mac.parse_compact_pdu(data)


def test_serialize_compact_rejects_a_cut_packet_that_does_not_reach_the_end():
    with pytest.raises(ValueError, match="a cut packet must run to the end"):
        mac.serialize_compact_pdu(seq=0, packets=[ipv4(40)[:10]], tb_bytes=32)
    with pytest.raises(ValueError, match="pdu.seq: 4096"):
        mac.serialize_compact_pdu(seq=4096, tb_bytes=8)


def test_the_experiment_key_pdu_format_reaches_the_apd_and_bounds_the_window(tmp_path):
    cfg = cfg_of(BASE, ["pdu.format=compact"])
    conf = daemonconf.apd_config(cfg, run_layout(tmp_path, cfg))
    assert conf["pdu"] == {"format": "compact"}
    assert daemonconf.reassembly(cfg)["window"] <= mac.PDU_COMPACT_MAX_WINDOW
    assert daemonconf.apd_config(cfg_of(), run_layout(tmp_path, cfg_of()))["pdu"] == {
        "format": "standard"}
    assert "pdu.format" in error_of(BASE, ["pdu.format=tiny"])
    assert "reassembly.window: 4096 with pdu.format compact" in error_of(
        BASE, ["pdu.format=compact", "reassembly.window=4096"])


def test_the_session_trailer_golden_vectors_parse_and_serialise_back():
    p = mac.parse_pdu(vector("pdu_v1_session.hex"))
    assert (p["user"], p["seq"], p["price"], p["session"], p["padding"]) == (2, 0, None, 0xBEEF, 5)
    assert mac.serialize_pdu(user=2, seq=0, segments=[{"packet_seq": 0, "data": b"hello"}],
                             tb_bytes=40, session=0xBEEF) == vector("pdu_v1_session.hex")
    c = mac.parse_compact_pdu(vector("pdu_compact_session.hex"))
    assert (c["seq"], c["session"], c["first"], c["continuation"]) == (0, 0xBEEF, None, b"abcdef")
    assert mac.serialize_compact_pdu(seq=0, tb_bytes=12, continuation=b"abcdef",
                                     session=0xBEEF) == vector("pdu_compact_session.hex")
    assert mac.parse_pdu(vector("pdu_v1_empty.hex"))["session"] is None


def test_a_reassembler_follows_a_restarted_segmenter_to_its_new_session():
    packets = [ipv4(100 + k) for k in range(8)]
    old = mac.segmenter(session=1)
    r = mac.reassembler()
    src = iter(packets[:4])
    out = []
    for k in range(3):
        pdu, rec = old.build(150, lambda: next(src, None))
        assert rec["session"] == (k == 0)
        out += r.on_pdu(pdu, k)
        old.session_acked()
    assert r.session == 1
    new = mac.segmenter(session=2)  # the apd came back: sequence 0 again
    src = iter(packets[4:])
    for k in range(4):
        pdu, rec = new.build(150, lambda: next(src, None))
        out += r.on_pdu(pdu, 10 + k)
    assert r.session == 2 and r.stats["session_restarts"] == 1
    assert out[-4:] == packets[4:]  # the new session's packets, none taken for duplicates
    assert r.stats["duplicates"] == 0
