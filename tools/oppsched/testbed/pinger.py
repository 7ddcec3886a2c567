"""ICMP echo round-trip times, IPv4 and IPv6, without the `ping` binary.

Run inside a network namespace (``Netns.ping`` does it for you)::

    ip netns exec NS python -m oppsched.testbed.pinger 10.1.0.1 --count 20 --interval 0.05

prints one JSON line per address: {"address", "sent", "received", "rtt_ms": [float|null, ...]}.

As ping(8) does, the send time is read just before sendto() and the receive time is the
kernel's receive timestamp of the reply (SO_TIMESTAMPNS), so the pinger's own scheduling
latency on a busy machine does not inflate the receive side. Needs CAP_NET_RAW (raw socket).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import sys
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
ICMP_ECHO, ICMP_ECHOREPLY = 8, 0
ICMP6_ECHO, ICMP6_ECHOREPLY = 128, 129


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def _echo_request(v6: bool, ident: int, seq: int, size: int) -> bytes:
    payload = bytes((i & 0xFF) for i in range(size))
    typ = ICMP6_ECHO if v6 else ICMP_ECHO
    hdr = struct.pack("!BBHHH", typ, 0, 0, ident, seq)
    if v6:  # the kernel fills in the ICMPv6 checksum (it needs the pseudo-header)
        return hdr + payload
    return struct.pack("!BBHHH", typ, 0, _checksum(hdr + payload), ident, seq) + payload


def _parse_reply(v6: bool, data: bytes) -> tuple[int, int] | None:
    """(identifier, sequence) of an echo reply, else None."""
    if not v6:
        if len(data) < 20:
            return None
        data = data[(data[0] & 0x0F) * 4:]  # IPv4 raw sockets include the IP header
    if len(data) < 8:
        return None
    typ, _code, _ck, rid, seq = struct.unpack("!BBHHH", data[:8])
    if typ != (ICMP6_ECHOREPLY if v6 else ICMP_ECHOREPLY):
        return None
    return rid, seq


def ping(address: str, count: int = 20, interval: float = 0.05, timeout: float = 2.0,
         size: int = 56) -> list[float | None]:
    """RTTs in ms, one per echo request (None for a lost reply), in sending order."""
    return ping_all([address], count, interval, timeout, size)[address]


def ping_all(addresses: list[str], count: int = 20, interval: float = 0.05,
             timeout: float = 2.0, size: int = 56) -> dict[str, list[float | None]]:
    """ping() of several addresses at once: request k goes to every address at tick k,
    each address with its own ICMP identifier. Returns {address: [rtt_ms | None, ...]}."""
    if count < 1:
        raise ValueError(f"count: {count} must be >= 1")
    if interval < 0:
        raise ValueError(f"interval: {interval} must be >= 0")
    if not addresses or len(set(addresses)) != len(addresses):
        raise ValueError(f"addresses: {addresses!r} must be distinct and not empty")
    base = os.getpid() & 0xFFFF
    ident = {a: (base + k) & 0xFFFF for k, a in enumerate(addresses)}
    by_ident = {i: a for a, i in ident.items()}
    socks: dict[bool, socket.socket] = {}
    try:
        for v6 in sorted({":" in a for a in addresses}):
            fam = socket.AF_INET6 if v6 else socket.AF_INET
            proto = socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP
            s = socket.socket(fam, socket.SOCK_RAW, proto)
            socks[v6] = s
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            s.setblocking(False)
        sent_at: dict[tuple[str, int], int] = {}
        rtts: dict[tuple[str, int], float] = {}
        total = count * len(addresses)
        next_send = time.monotonic()
        seq = 0
        deadline = None
        fd_v6 = {s.fileno(): v6 for v6, s in socks.items()}
        while True:
            if seq < count and time.monotonic() >= next_send:
                for a in addresses:
                    v6 = ":" in a
                    pkt = _echo_request(v6, ident[a], seq, size)
                    sent_at[(a, seq)] = time.clock_gettime_ns(time.CLOCK_REALTIME)
                    socks[v6].sendto(pkt, (a, 0, 0, 0) if v6 else (a, 0))
                seq += 1
                next_send += interval
                if seq == count:
                    deadline = time.monotonic() + timeout
                continue
            if seq == count and (len(rtts) == total or time.monotonic() >= deadline):
                break
            wait = (next_send if seq < count else deadline) - time.monotonic()
            ready, _, _ = select.select(list(socks.values()), [], [], max(0.0, wait))
            for s in ready:
                v6 = fd_v6[s.fileno()]
                while True:
                    try:
                        data, anc, _flags, _addr = s.recvmsg(65535, 256)
                    except BlockingIOError:
                        break
                    rx = None
                    for level, typ, cdata in anc:
                        if level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS:
                            sec, nsec = struct.unpack("qq", cdata[:16])
                            rx = sec * 1_000_000_000 + nsec
                    if rx is None:
                        rx = time.clock_gettime_ns(time.CLOCK_REALTIME)
                    got = _parse_reply(v6, data)
                    if got is None or got[0] not in by_ident:
                        continue
                    key = (by_ident[got[0]], got[1])
                    if key in sent_at and key not in rtts:
                        rtts[key] = (rx - sent_at[key]) / 1e6
    finally:
        for s in socks.values():
            s.close()
    return {a: [rtts.get((a, i)) for i in range(count)] for a in addresses}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oppsched.testbed.pinger",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("address", nargs="+", help="all pinged at the same time")
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--interval", type=float, default=0.05, help="seconds between requests")
    ap.add_argument("--timeout", type=float, default=2.0, help="wait after the last request, s")
    ap.add_argument("--size", type=int, default=56, help="payload bytes")
    a = ap.parse_args(argv)
    try:
        res = ping_all(a.address, a.count, a.interval, a.timeout, a.size)
    except (OSError, ValueError) as exc:
        print(f"pinger: {' '.join(a.address)}: {exc}", file=sys.stderr)
        return 1
    for address, rtts in res.items():
        print(json.dumps({"address": address, "sent": a.count,
                          "received": sum(r is not None for r in rtts), "rtt_ms": rtts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
