"""Stand-ins for oppsched-apd, oppsched-client and the abstract PHY, for testing the runner
alone (process start-up, readiness, captures, flows, stop order, teardown, analysis).

They read the same YAML files the runner writes for the real daemons (only the keys they
need), bind/connect the same ipc endpoints and attach to the same TUNs, but carry whole IP
packets in a private framing (type byte, u16 user, payload) instead of wire.h frames, with
no HARQ, fading or CLAMP: every slot delivers up to `bytes_per_slot` of the head of the AP's
FIFO to its user. The AP writes a slots.csv with the documented columns.

    python fake_daemons.py apd|client|phy --config FILE [--fail-after S]

--fail-after S (or fake.fail_after in the file) makes the process exit with status 3 after S
seconds; fake.reject in the file makes it reject its configuration (exit 2);
fake.exit_on_stop: N makes it exit with status N when stopped (after writing its traces);
--check only validates (failure tests).
"""

from __future__ import annotations

import argparse
import fcntl
import ipaddress
import json
import os
import signal
import struct
import sys
import time
from collections import deque

import zmq

from oppsched.config import read_yaml

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
REQ, GRANT, RX, UP = 1, 2, 3, 6


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def frame(t: int, user: int, payload: bytes = b"", slot: int = 0) -> bytes:
    return struct.pack("!BHQ", t, user, slot) + payload


def unframe(b: bytes):
    t, user, slot = struct.unpack_from("!BHQ", b)
    return t, user, slot, b[11:]


STOP = False


def _stop(*_):
    global STOP
    STOP = True


def dst_of(pkt: bytes) -> str | None:
    if not pkt:
        return None
    v = pkt[0] >> 4
    if v == 4 and len(pkt) >= 20:
        return str(ipaddress.IPv4Address(pkt[16:20]))
    if v == 6 and len(pkt) >= 40:
        return str(ipaddress.IPv6Address(pkt[24:40]))
    return None


def apd(conf: dict, fail_after: float | None) -> int:
    ctx = zmq.Context()
    ep = conf["endpoints"]
    for e in ep.values():
        os.makedirs(os.path.dirname(e[len("ipc://"):]), exist_ok=True)
    req = ctx.socket(zmq.PULL)
    req.bind(ep["phy_requests"])
    grants = ctx.socket(zmq.PUSH)
    grants.bind(ep["phy_grants"])
    up = ctx.socket(zmq.PULL)
    up.bind(ep["uplink"])
    ups = []  # users[].uplink: each client's own endpoint
    for u in conf["users"]:
        if u.get("uplink"):
            ups.append(ctx.socket(zmq.PULL))
            ups[-1].bind(u["uplink"])
    tun = open_tun(conf["tun"])
    users = {str(ipaddress.ip_address(a)): u["id"] for u in conf["users"] for a in u["addresses"]}
    names = [u["name"] for u in sorted(conf["users"], key=lambda u: u["id"])]
    q: deque = deque()
    qbytes = [0] * len(names)
    per_slot = conf.get("fake", {}).get("bytes_per_slot", 6000)
    out = open(conf["traces"]["slots"], "w")
    out.write("slot,t_ns,user,mcs,tb_bytes,harq_pid,rv,ndi,retx,outcome,late,"
              + ",".join(f"cqi.{n},queue.{n},price.{n}" for n in names) + "\n")
    poller = zmq.Poller()
    poller.register(req, zmq.POLLIN)
    poller.register(up, zmq.POLLIN)
    for s in ups:
        poller.register(s, zmq.POLLIN)
    poller.register(tun, zmq.POLLIN)
    t_end = time.monotonic() + fail_after if fail_after else None
    n_granted = 0
    while not STOP:
        if t_end and time.monotonic() > t_end:
            return 3
        for s, _ in poller.poll(50):
            if s == tun:
                while True:
                    try:
                        pkt = os.read(tun, 65535)
                    except BlockingIOError:
                        break
                    u = users.get(dst_of(pkt))
                    if u is not None and qbytes[u] + len(pkt) <= conf["queue"]["limit_bytes"]:
                        q.append((u, pkt))
                        qbytes[u] += len(pkt)
            elif s is up or s in ups:
                t, u, _, p = unframe(s.recv())
                if t == UP:
                    try:
                        os.write(tun, p)
                    except OSError:
                        pass
            elif s is req:
                t, _, slot, _ = unframe(req.recv())
                if t != REQ:
                    continue
                user, tb = -1, []
                if q:
                    user = q[0][0]
                    size = 0
                    while q and q[0][0] == user and size + len(q[0][1]) <= per_slot:
                        _, p = q.popleft()
                        tb.append(p)
                        size += len(p)
                        qbytes[user] -= len(p)
                payload = b"".join(struct.pack("!H", len(p)) + p for p in tb)
                grants.send(frame(GRANT, max(user, 0) if user >= 0 else 0xFFFF, payload, slot))
                n_granted += 1
                nb = sum(len(p) for p in tb)
                mcs = 0 if user >= 0 else -1
                out.write(f"{slot},{time.monotonic_ns()},{user},{mcs},{nb},0,0,0,0,"
                          f"{'ack' if user >= 0 else ''},0,"
                          + ",".join(f"10,{qbytes[i]},0" for i in range(len(names))) + "\n")
    out.close()
    with open(conf["traces"]["stats"], "w") as f:
        json.dump({"slots": {"granted": n_granted}}, f)
    return 0


def client(conf: dict, fail_after: float | None) -> int:
    ctx = zmq.Context()
    rx = ctx.socket(zmq.PULL)
    os.makedirs(os.path.dirname(conf["endpoints"]["rx"][len("ipc://"):]), exist_ok=True)
    rx.bind(conf["endpoints"]["rx"])
    up = ctx.socket(zmq.PUSH)
    up.connect(conf["endpoints"]["uplink"])
    tun = open_tun(conf["tun"])
    me = conf["user"]
    poller = zmq.Poller()
    poller.register(rx, zmq.POLLIN)
    poller.register(tun, zmq.POLLIN)
    t_end = time.monotonic() + fail_after if fail_after else None
    while not STOP:
        if t_end and time.monotonic() > t_end:
            return 3
        for s, _ in poller.poll(50):
            if s is rx:
                t, u, _, p = unframe(rx.recv())
                if t == RX and u == me:
                    i = 0
                    while i + 2 <= len(p):
                        (n,) = struct.unpack_from("!H", p, i)
                        try:
                            os.write(tun, p[i + 2:i + 2 + n])
                        except OSError:
                            pass
                        i += 2 + n
            elif s == tun:
                while True:
                    try:
                        pkt = os.read(tun, 65535)
                    except BlockingIOError:
                        break
                    up.send(frame(UP, me, pkt))
    with open(conf["traces"]["stats"], "w") as f:
        json.dump({"user": me}, f)
    return 0


def phy(conf: dict, fail_after: float | None) -> int:
    ctx = zmq.Context()
    req = ctx.socket(zmq.PUSH)
    req.connect(conf["endpoints"]["phy_requests"])
    grants = ctx.socket(zmq.PULL)
    grants.connect(conf["endpoints"]["phy_grants"])
    rx = {}
    for u in conf["users"]:
        s = ctx.socket(zmq.PUSH)
        s.connect(u["rx"])
        rx[u["id"]] = s
    slot_s = conf["slot_s"]
    t0 = time.monotonic()
    n = 0
    late = 0
    t_end = t0 + fail_after if fail_after else None
    while not STOP:
        if t_end and time.monotonic() > t_end:
            return 3
        req.send(frame(REQ, 0, b"", n))
        due = t0 + (n + 1) * slot_s
        while True:
            wait = due - time.monotonic()
            if wait <= 0 or not grants.poll(int(wait * 1000) + 1):
                break
            t, u, slot, p = unframe(grants.recv())
            if t == GRANT and u in rx:
                rx[u].send(frame(RX, u, p, slot))
        if time.monotonic() > due + slot_s:
            late += 1
        n += 1
        time.sleep(max(0.0, due - time.monotonic()))
    with open(conf["traces"]["stats"], "w") as f:
        json.dump({"slots": n, "late": late}, f)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=("apd", "client", "phy"))
    ap.add_argument("--config", required=True)
    ap.add_argument("--fail-after", type=float, default=None)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    conf = read_yaml(a.config)
    if conf.get("fake", {}).get("reject"):
        print(f"{a.config}: fake.reject: {conf['fake']['reject']!r} rejected", file=sys.stderr)
        return 2
    if a.check:
        return 0
    fail = a.fail_after if a.fail_after is not None else conf.get("fake", {}).get("fail_after")
    rc = {"apd": apd, "client": client, "phy": phy}[a.role](conf, fail)
    return rc or int(conf.get("fake", {}).get("exit_on_stop", 0))


if __name__ == "__main__":
    sys.exit(main())
