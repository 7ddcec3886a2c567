"""TCP/IP header tools from Python (oppsched.mac): packets built and checked with scapy."""

import random

import pytest
from scapy.all import IP, TCP, UDP, IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop, raw

from oppsched import mac


def scapy_checksum_ok(packet: bytes) -> bool:
    """Delete the TCP checksum, let scapy rebuild it, compare with the one we wrote."""
    cls = IPv6 if packet[0] >> 4 == 6 else IP
    pkt = cls(packet)
    written = pkt[TCP].chksum
    del pkt[TCP].chksum
    rebuilt = cls(raw(pkt))[TCP].chksum
    return written == rebuilt


def tcp_packet(version, window=1000, flags="A", options=None, payload=b"data", ext=()):
    options = options if options is not None else [("NOP", None), ("NOP", None),
                                                   ("Timestamp", (1, 2))]
    tcp = TCP(sport=40000, dport=5201, flags=flags, window=window, seq=123, ack=456,
              options=options)
    if version == 4:
        return raw(IP(src="10.0.0.1", dst="10.0.0.2") / tcp / payload)
    ip = IPv6(src="2001:db8::1", dst="2001:db8::2")
    for hdr in ext:
        ip = ip / hdr
    return raw(ip / tcp / payload)


@pytest.mark.parametrize("version", [4, 6])
@pytest.mark.parametrize("window_bytes, wscale, field", [
    (1000, 7, 8),           # rounded up: 8 * 128 = 1024
    (1024, 7, 8),           # exact multiple
    (1, 0, 1),
    (0, 3, 0),
    (10_000_000, 2, 65535),  # clamped to 65535 << 2
    (20000, 15, 2),         # shift 15 used as 14
])
def test_rewrite_window_sets_the_field_and_keeps_the_checksum_valid(version, window_bytes,
                                                                    wscale, field):
    pkt = tcp_packet(version)
    out = mac.rewrite_window(pkt, window_bytes, wscale)
    assert len(out) == len(pkt)
    assert mac.parse_packet(out)["tcp"]["window"] == field
    assert scapy_checksum_ok(out)
    # Only the window and checksum bytes changed.
    off = mac.parse_packet(pkt)["tcp"]["offset"]
    diff = [i for i in range(len(pkt)) if pkt[i] != out[i]]
    assert set(diff) <= {off + 14, off + 15, off + 16, off + 17}


def test_rewrite_window_on_random_v4_and_v6_packets_matches_scapy():
    rng = random.Random(1624)
    for _ in range(400):
        version = rng.choice([4, 6])
        options = rng.choice([
            [],
            [("MSS", rng.randrange(536, 9000))],
            [("NOP", None), ("NOP", None),
             ("Timestamp", (rng.getrandbits(32), rng.getrandbits(32)))],
            [("SAckOK", b""), ("NOP", None), ("WScale", rng.randrange(15))],
            [("NOP", None), ("NOP", None), ("SAck", (rng.getrandbits(32), rng.getrandbits(32)))],
        ])
        ext = rng.choice([(), (IPv6ExtHdrHopByHop(),), (IPv6ExtHdrHopByHop(), IPv6ExtHdrDestOpt())])
        pkt = tcp_packet(version, window=rng.getrandbits(16), options=options,
                         payload=rng.randbytes(rng.randrange(0, 300)), ext=ext)
        out = mac.rewrite_window(pkt, rng.randrange(0, 1 << 30), rng.randrange(15))
        assert scapy_checksum_ok(out)


def test_syn_window_is_never_scaled():
    pkt = tcp_packet(4, flags="S", options=[("WScale", 7)])
    assert mac.parse_packet(mac.rewrite_window(pkt, 1000, 7))["tcp"]["window"] == 1000


@pytest.mark.parametrize("bad, message", [
    (b"", "ip.length"),
    (b"\x50" + bytes(39), "ip.version: 5"),
    (tcp_packet(4)[:30], "ipv4.total_length"),
    (raw(IP() / UDP()), "tcp"),
])
def test_rewrite_window_raises_value_error_on_malformed_input(bad, message):
    with pytest.raises(ValueError, match=message):
        mac.rewrite_window(bad, 1000, 0)


def test_rewrite_window_rejects_bad_arguments():
    with pytest.raises(ValueError, match="window_bytes"):
        mac.rewrite_window(tcp_packet(4), -1, 0)
    with pytest.raises(ValueError, match="wscale"):
        mac.rewrite_window(tcp_packet(4), 1, -1)


def test_parse_packet_reports_what_scapy_built():
    pkt = tcp_packet(6, options=[("MSS", 1400), ("NOP", None), ("WScale", 9), ("SAckOK", b""),
                                 ("Timestamp", (7, 8))],
                     ext=(IPv6ExtHdrHopByHop(), IPv6ExtHdrDestOpt()))
    info = mac.parse_packet(pkt)
    assert info["ip_version"] == 6
    assert info["ip_header_len"] == 40 + 8 + 8
    assert info["src"] == "2001:db8::1" and info["dst"] == "2001:db8::2"
    assert (info["sport"], info["dport"]) == (40000, 5201)
    tcp = info["tcp"]
    assert (tcp["seq"], tcp["ack"], tcp["window"]) == (123, 456, 1000)
    assert tcp["mss"] == 1400 and tcp["wscale"] == 9 and tcp["sack_permitted"]
    assert tcp["timestamp"] == (7, 8)
    assert tcp["payload_len"] == 4
    assert mac.tcp_checksum(pkt) == IPv6(pkt)[TCP].chksum


def test_malformed_tcp_option_length_is_a_value_error_naming_the_option():
    pkt = bytearray(tcp_packet(4, options=[("MSS", 1460)]))
    pkt[20 + 21] = 3  # MSS option length 3
    with pytest.raises(ValueError, match="tcp.option.mss.length: 3"):
        mac.parse_packet(bytes(pkt))


def test_mark_ce_sets_ce_and_fixes_the_ipv4_checksum():
    pkt = raw(IP(src="10.0.0.1", dst="10.0.0.2", tos=0x02) / TCP())
    out = mac.mark_ce(pkt)
    assert IP(out).tos & 3 == 3
    ip = IP(out)
    written = ip.chksum
    del ip.chksum
    assert IP(raw(ip)).chksum == written
    assert mac.mark_ce(raw(IP(tos=0) / TCP())) is None


def test_window_tracker_learns_scale_from_the_handshake_and_rewrites_acks():
    t = mac.window_tracker(max_flows=16)
    client, server = "10.0.0.2", "10.0.0.1"
    syn = raw(IP(src=client, dst=server) / TCP(sport=5000, dport=80, flags="S",
                                               options=[("WScale", 15)]))
    syn_ack = raw(IP(src=server, dst=client) / TCP(sport=80, dport=5000, flags="SA",
                                                   options=[("WScale", 2)]))
    ack = raw(IP(src=client, dst=server) / TCP(sport=5000, dport=80, flags="A", ack=1000,
                                               window=3))
    assert t.rewrite(ack, 20000, 0)[0] == "unknown_flow"
    assert t.rewrite(syn, 100, 1)[0] == "not_applicable"
    outcome, same = t.rewrite(syn_ack, 100, 2)
    assert outcome == "syn" and same == syn_ack
    assert t.shift(ack) == 14
    outcome, out = t.rewrite(ack, 20000, 3)
    assert outcome == "rewritten"
    assert IP(out)[TCP].window == 2  # ceil(20000 / 16384)
    assert scapy_checksum_ok(out)
    assert t.stats["scale_clamped"] == 1 and t.stats["rewritten"] == 1
    with pytest.raises(ValueError, match="window_tracker.max_flows: 0"):
        mac.window_tracker(max_flows=0)
