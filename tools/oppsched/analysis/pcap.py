"""Reading the run's pcaps: TCP/IP headers only, fast, no dependencies beyond numpy/pandas.

tcpdump writes the classic pcap format (microsecond or nanosecond timestamps). Captures
are taken with a small snaplen (128 bytes by default: enough for an IPv6 header and a TCP
header with options), so payload bytes are never read; payload lengths come from the IP
length fields, which survive truncation.

Link types handled: Ethernet (the servers' veths), raw IP (the TUNs: LINKTYPE_RAW 101, and
12 on some systems), LINKTYPE_IPV4/IPV6 (228/229) and Linux cooked captures (113, 276).

Used by the testbed kind's analysis (per-flow bytes delivered, cross-checking iperf3) and by
the tests (CLAMP's rewritten windows). Checksums are *not* verified here: the tests use
scapy for that, as an independent implementation.
"""

from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

import numpy as np
import pandas as pd

TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10

COLUMNS = ["t_s", "v6", "src", "dst", "sport", "dport", "seq", "ack", "flags", "win",
           "wscale", "mss", "payload", "ip_len", "tcp_csum", "ecn"]

_MAGIC_US = 0xA1B2C3D4
_MAGIC_NS = 0xA1B23C4D


class PcapError(ValueError):
    pass


def _ip_offset(linktype: int, data: bytes) -> int | None:
    """Where the IP header starts in a frame of this link type, or None (not IP)."""
    if linktype in (101, 12, 228, 229):
        return 0
    if linktype == 1:  # Ethernet, possibly one 802.1Q tag
        if len(data) < 14:
            return None
        et = struct.unpack_from("!H", data, 12)[0]
        off = 14
        if et == 0x8100 and len(data) >= 18:
            et = struct.unpack_from("!H", data, 16)[0]
            off = 18
        return off if et in (0x0800, 0x86DD) else None
    if linktype == 113:  # Linux cooked v1: 16-byte header, protocol at 14
        if len(data) < 16:
            return None
        et = struct.unpack_from("!H", data, 14)[0]
        return 16 if et in (0x0800, 0x86DD) else None
    if linktype == 276:  # Linux cooked v2: 20 bytes, protocol at 0
        if len(data) < 20:
            return None
        et = struct.unpack_from("!H", data, 0)[0]
        return 20 if et in (0x0800, 0x86DD) else None
    return None


def _tcp_options(opts: bytes) -> tuple[int, int]:
    """(window scale shift or -1, MSS or -1) from TCP option bytes (possibly truncated)."""
    ws, mss = -1, -1
    i = 0
    n = len(opts)
    while i < n:
        kind = opts[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= n:
            break
        ln = opts[i + 1]
        if ln < 2 or i + ln > n:
            break
        if kind == 3 and ln == 3:
            ws = opts[i + 2]
        elif kind == 2 and ln == 4:
            mss = struct.unpack_from("!H", opts, i + 2)[0]
        i += ln
    return ws, mss


def norm_addr(addr: str) -> str:
    """The canonical text of an address, as read_tcp writes it ("fd00:2:0::1" -> "fd00:2::1")."""
    return str(ipaddress.ip_address(addr))


def _ip_str(b: bytes) -> str:
    if len(b) == 4:
        return ".".join(str(x) for x in b)
    return str(ipaddress.IPv6Address(b))


def iter_frames(path: str | Path):
    """Yields (t_s, linktype, frame bytes, original length) of every record."""
    with open(path, "rb") as f:
        hdr = f.read(24)
        if len(hdr) < 24:
            raise PcapError(f"{path}: too short for a pcap header ({len(hdr)} bytes)")
        magic_le = struct.unpack("<I", hdr[:4])[0]
        magic_be = struct.unpack(">I", hdr[:4])[0]
        if magic_le in (_MAGIC_US, _MAGIC_NS):
            e, magic = "<", magic_le
        elif magic_be in (_MAGIC_US, _MAGIC_NS):
            e, magic = ">", magic_be
        else:
            raise PcapError(f"{path}: not a pcap file (magic {hdr[:4].hex()}); pcapng is not read")
        scale = 1e-9 if magic == _MAGIC_NS else 1e-6
        linktype = struct.unpack(e + "I", hdr[20:24])[0] & 0x0FFFFFFF
        rec = struct.Struct(e + "IIII")
        while True:
            rh = f.read(16)
            if len(rh) < 16:
                return
            sec, frac, incl, orig = rec.unpack(rh)
            data = f.read(incl)
            if len(data) < incl:
                return  # truncated last record (capture stopped mid-write)
            yield sec + frac * scale, linktype, data, orig


def read_tcp(path: str | Path) -> pd.DataFrame:
    """One row per TCP segment (IPv4 or IPv6) in the capture; columns COLUMNS.

    `win` is the raw 16-bit window field; `wscale`/`mss` are the options of that segment
    (-1 if absent; only SYNs carry them). `payload` is the TCP payload length from the IP
    length fields, correct even when the capture was truncated by the snaplen. `ecn` is the
    IP header's ECN codepoint (RFC 3168: 0 not-ECT, 2 ECT(0), 1 ECT(1), 3 CE).
    """
    rows = []
    for t, lt, d, _orig in iter_frames(path):
        off = _ip_offset(lt, d)
        if off is None or len(d) < off + 20:
            continue
        ver = d[off] >> 4
        if ver == 4:
            ihl = (d[off] & 0x0F) * 4
            if d[off + 9] != 6 or len(d) < off + ihl + 20:
                continue
            ip_len = struct.unpack_from("!H", d, off + 2)[0]
            src, dst = d[off + 12:off + 16], d[off + 16:off + 20]
            frag = struct.unpack_from("!H", d, off + 6)[0] & 0x1FFF
            ecn = d[off + 1] & 0x03
            if frag:
                continue
            t_off, l4_len = off + ihl, ip_len - ihl
            v6 = False
        elif ver == 6:
            if len(d) < off + 40 + 20 or d[off + 6] != 6:
                continue  # extension headers are not followed (the testbed sends none)
            plen = struct.unpack_from("!H", d, off + 4)[0]
            ip_len = plen + 40
            src, dst = d[off + 8:off + 24], d[off + 24:off + 40]
            t_off, l4_len = off + 40, plen
            ecn = (d[off + 1] >> 4) & 0x03  # the traffic class's low two bits
            v6 = True
        else:
            continue
        sport, dport, seq, ack, doff_flags, win, csum = struct.unpack_from("!HHIIHHH", d, t_off)
        doff = (doff_flags >> 12) * 4
        flags = doff_flags & 0x01FF
        ws, mss = -1, -1
        if flags & TCP_SYN and doff > 20:
            ws, mss = _tcp_options(d[t_off + 20:t_off + min(doff, len(d) - t_off)])
        rows.append((t, v6, _ip_str(src), _ip_str(dst), sport, dport, seq, ack, flags, win,
                     ws, mss, max(0, l4_len - doff), ip_len, csum, ecn))
    return pd.DataFrame(rows, columns=COLUMNS)


def _unwrap(seq: np.ndarray, base: int) -> np.ndarray:
    """Sequence numbers relative to `base`, unwrapped across 2^32 (monotone enough for TCP)."""
    rel = (seq.astype(np.int64) - base) % (1 << 32)
    # Segments before base (retransmissions around the wrap) would look huge: fold them.
    rel[rel > (1 << 31)] -= 1 << 32
    return rel


def connections(df: pd.DataFrame) -> list[dict]:
    """TCP connections in a capture, keyed by the side that sent the SYN (the initiator).

    Returns one dict per connection: initiator (addr, port), responder (addr, port),
    wscale of each side (-1 if not seen or not negotiated), bytes of unique payload each way
    (highest sequence reached minus the initial one), first/last time.
    """
    out = []
    if df.empty:
        return out
    syn = df[(df["flags"] & TCP_SYN) != 0]
    keys = {}
    for r in syn.itertuples(index=False):
        if r.flags & TCP_ACK:
            k = (r.dst, r.dport, r.src, r.sport)  # SYN-ACK: the responder's options
            keys.setdefault(k, {}).update(resp_ws=r.wscale, resp_isn=r.seq, resp_mss=r.mss)
        else:
            k = (r.src, r.sport, r.dst, r.dport)
            keys.setdefault(k, {}).update(init_ws=r.wscale, init_isn=r.seq, init_mss=r.mss)
    for (ia, ip_, ra, rp), info in keys.items():
        fwd = df[(df["src"] == ia) & (df["sport"] == ip_) & (df["dst"] == ra) & (df["dport"] == rp)]
        rev = df[(df["src"] == ra) & (df["sport"] == rp) & (df["dst"] == ia) & (df["dport"] == ip_)]
        both_ws = info.get("init_ws", -1) >= 0 and info.get("resp_ws", -1) >= 0
        c = {"initiator": (ia, ip_), "responder": (ra, rp),
             "init_wscale": info.get("init_ws", -1) if both_ws else -1,
             "resp_wscale": info.get("resp_ws", -1) if both_ws else -1,
             "t_first": float(min(fwd["t_s"].min(), rev["t_s"].min() if len(rev) else np.inf)),
             "t_last": float(max(fwd["t_s"].max(), rev["t_s"].max() if len(rev) else -np.inf))}
        for name, seg, isn in (("bytes_init_to_resp", fwd, info.get("init_isn")),
                               ("bytes_resp_to_init", rev, info.get("resp_isn"))):
            data = seg[seg["payload"] > 0]
            if data.empty:
                c[name] = 0
                continue
            base = int(isn) + 1 if isn is not None else int(data["seq"].iloc[0])
            end = _unwrap(data["seq"].to_numpy(), base) + data["payload"].to_numpy()
            c[name] = int(max(0, end.max()))
        out.append(c)
    return out


def bytes_to_port(df: pd.DataFrame, addr: str, port: int, t_from: float | None = None,
                  t_to: float | None = None) -> int:
    """Unique payload bytes delivered towards (addr, port) over all connections to it.

    A connection whose SYN is not in the capture is counted from its first data segment.
    """
    addr = norm_addr(addr)
    seg = df[(df["dst"] == addr) & (df["dport"] == port) & (df["payload"] > 0)]
    if t_from is not None:
        seg = seg[seg["t_s"] >= t_from]
    if t_to is not None:
        seg = seg[seg["t_s"] <= t_to]
    total = 0
    for (_src, _sport), g in seg.groupby(["src", "sport"]):
        base = int(g["seq"].iloc[0])
        rel = _unwrap(g["seq"].to_numpy(), base)
        total += int(max(0, (rel + g["payload"].to_numpy()).max() - min(0, rel.min())))
    return total


def acked_bytes(df: pd.DataFrame, addr: str, port: int) -> int:
    """Bytes the receiver (addr, port) acknowledged, i.e. delivered in order to its
    application, summed over all connections to it: per connection the highest cumulative
    ACK it sent minus the peer's initial sequence number + 1 (from the peer's SYN if
    captured, else from the receiver's first ACK). This is TCP goodput as the receiver saw
    it: data above a hole that was never filled is not counted."""
    addr = norm_addr(addr)
    acks = df[(df["src"] == addr) & (df["sport"] == port) & ((df["flags"] & TCP_ACK) != 0)]
    total = 0
    for (peer, pport), g in acks.groupby(["dst", "dport"]):
        syn = df[(df["src"] == peer) & (df["sport"] == pport) & (df["dst"] == addr)
                 & (df["dport"] == port) & ((df["flags"] & TCP_SYN) != 0)
                 & ((df["flags"] & TCP_ACK) == 0)]
        base = int(syn["seq"].iloc[0]) + 1 if len(syn) else int(g["ack"].iloc[0])
        rel = _unwrap(g["ack"].to_numpy(), base)
        fin = df[(df["src"] == peer) & (df["sport"] == pport) & (df["dst"] == addr)
                 & (df["dport"] == port) & ((df["flags"] & TCP_FIN) != 0)]
        top = int(rel.max())
        if len(fin):  # a FIN takes one sequence number and carries no data
            fin_end = _unwrap(fin["seq"].to_numpy(), base) + fin["payload"].to_numpy()
            if top > int(fin_end.max()):
                top = int(fin_end.max())
        total += max(0, top)
    return total


def advertised_windows(df: pd.DataFrame, addr: str, port: int) -> pd.DataFrame:
    """Windows advertised by (addr, port) -- the receiver of a flow -- in bytes, per segment.

    Columns: t_s, peer, peer_port, ack, win_raw, wscale, window_bytes. The scale is the
    shift (addr, port) announced in its SYN or SYN-ACK when both sides used the option
    (RFC 7323 §2.2); SYN segments themselves are never scaled.
    """
    addr = norm_addr(addr)
    conns = {}
    for c in connections(df):
        if c["responder"] == (addr, port):
            conns[c["initiator"]] = c["resp_wscale"]
        elif c["initiator"] == (addr, port):
            conns[c["responder"]] = c["init_wscale"]
    seg = df[(df["src"] == addr) & (df["sport"] == port)].copy()
    if seg.empty:
        return pd.DataFrame(columns=["t_s", "peer", "peer_port", "ack", "win_raw", "wscale",
                                     "window_bytes"])
    ws = np.array([max(0, conns.get((d, p), -1)) for d, p in zip(seg["dst"], seg["dport"])])
    syn = (seg["flags"].to_numpy() & TCP_SYN) != 0
    ws[syn] = 0
    out = pd.DataFrame({"t_s": seg["t_s"].to_numpy(), "peer": seg["dst"].to_numpy(),
                        "peer_port": seg["dport"].to_numpy(), "ack": seg["ack"].to_numpy(),
                        "win_raw": seg["win"].to_numpy(), "wscale": ws})
    out["window_bytes"] = np.left_shift(out["win_raw"].to_numpy(np.int64),
                                        out["wscale"].to_numpy(np.int64))
    return out
