"""Starting TCP connections at a set slow-start threshold (flows[].ssthresh, tcp.ssthresh).

Linux starts a connection with an unbounded ssthresh unless its TCP metrics cache holds one
for the peer's address. A route's `ssthresh lock N` alone does not reach a new connection:
the kernel reads the cache, not the route, when a connection opens (tcp_init_metrics), and
creates the cache's entry only when a connection to that address closes (tcp_update_metrics,
which copies the route's locked metrics into it and never overwrites a locked one). The
testbed switches the cache off in every namespace (net.ipv4.tcp_no_metrics_save 1: no run
inherits an earlier connection's figures), and since Linux 5.x the kernel ignores a cached
ssthresh unless net.ipv4.tcp_no_ssthresh_metrics_save is 0. So a sender's namespace gets
both at 0 (SYSCTLS), its route to the peer `ssthresh lock N` (testbed topology), and one
connection between the two ends is opened and closed before the flows start (prime());
prime() then opens a second and reads the ssthresh its sockets start with (TCP_INFO), so a
run records what its flows start with rather than assuming it.

In those namespaces the cache keeps the other figures of a closed connection too: later
connections to that address take their first retransmission timeout from its round-trip
time (rather than RFC 6298's 1 s) and its reordering estimate; the locked ssthresh alone
stays as set.
"""

from __future__ import annotations

import socket
import struct
import time

from oppsched.testbed.nsbase import NetnsError
from oppsched.testbed.nsenter import in_netns

SYSCTL = "net.ipv4.tcp_no_ssthresh_metrics_save"
SYSCTLS = {"net.ipv4.tcp_no_metrics_save": 0, SYSCTL: 0}  # a namespace that starts at one
INFINITE_SSTHRESH = 0x7FFFFFFF  # TCP_INFINITE_SSTHRESH: no threshold
_TCPI_SND_SSTHRESH = 76  # offset of tcpi_snd_ssthresh in struct tcp_info (linux/tcp.h)


def snd_ssthresh(sock: socket.socket) -> int:
    """The socket's slow-start threshold in segments (TCP_INFO tcpi_snd_ssthresh)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return struct.unpack_from("I", info, _TCPI_SND_SSTHRESH)[0]


def _connect(server_ns: str, server_addr: str, client_ns: str, v6: bool, cc: str,
             timeout: float) -> tuple[socket.socket, socket.socket]:
    """A connection from client_ns to a listener in server_ns, both ends with congestion
    control `cc` (the one the flows use: BBR, for one, sets its own ssthresh at the start):
    (accepted, connecting)."""
    fam = socket.AF_INET6 if v6 else socket.AF_INET

    def sock():
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        return s

    def listen():
        s = sock()
        s.bind((server_addr, 0))
        s.listen(1)
        return s

    def connect():
        s = sock()
        s.settimeout(timeout)
        s.connect((server_addr, port))
        return s

    lst = in_netns(server_ns, listen)
    try:
        port = lst.getsockname()[1]
        cli = in_netns(client_ns, connect)
        lst.settimeout(timeout)
        srv, _ = lst.accept()
        return srv, cli
    finally:
        lst.close()


def _close(srv: socket.socket, cli: socket.socket, timeout: float) -> None:
    """Both ends closed in order: the client's FIN first (its end goes to TIME_WAIT), the
    server's after reading it (its end to LAST_ACK); each updates its cache on the way."""
    cli.shutdown(socket.SHUT_WR)
    srv.settimeout(timeout)
    while srv.recv(4096):
        pass
    srv.close()
    cli.settimeout(timeout)
    while cli.recv(4096):
        pass
    cli.close()


def prime(server_ns: str, server_addr: str, client_ns: str, client_addr: str, v6: bool,
          expect: int, cc: str, *, timeout: float = 30.0, attempts: int = 5) -> dict:
    """Fills both namespaces' TCP metrics caches for the other end (see the module's
    docstring), then checks with a fresh connection: {"server": ssthresh the server's end
    of a new connection starts with, "client": the client's end's, "attempts": n}. A
    connection whose handshake was retransmitted leaves no entry (the kernel trusts no RTT
    of it), so up to `attempts` connections are made. NetnsError, naming both ends, when a
    sender would still start without `expect`."""
    where = f"{server_ns} ({server_addr}) and {client_ns} ({client_addr})"
    got = {}
    for n in range(1, attempts + 1):
        try:
            srv, cli = _connect(server_ns, server_addr, client_ns, v6, cc, timeout)
            _close(srv, cli, timeout)
            # the server's end updates its cache on the client's last ACK, which crosses the
            # radio after close() returned: a new connection may open before it lands
            time.sleep(0.2)
            srv, cli = _connect(server_ns, server_addr, client_ns, v6, cc, timeout)
        except OSError as exc:
            raise NetnsError(f"ssthresh: a connection between {where} failed: {exc}") from None
        try:
            got = {"server": snd_ssthresh(srv), "client": snd_ssthresh(cli), "attempts": n}
        finally:
            _close(srv, cli, timeout)
        if got["server"] == expect and got["client"] == expect:
            return got
    raise NetnsError(f"ssthresh: new connections between {where} start at ssthresh "
                     f"{_fmt(got.get('server'))} (server) and {_fmt(got.get('client'))} "
                     f"(client), not {expect}, after {attempts} connections to fill the "
                     f"kernel's TCP metrics cache (are {' and '.join(SYSCTLS)} 0 at both ends?)")


def _fmt(v) -> str:
    return "unbounded" if v == INFINITE_SSTHRESH else str(v)
