"""Entering a network namespace from one thread of this process, for sockets and ioctls
without a subprocess; and the legacy ethtool ioctls that switch a device's offloads."""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading
from typing import Any, Callable

_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000


def in_netns(name: str, fn: Callable[[], Any]) -> Any:
    """Runs fn() in a short-lived thread that has joined namespace `name`; returns its value.

    setns(CLONE_NEWNET) only moves the calling thread, so the rest of the process stays
    where it was. Sockets keep the namespace they were created in, so a socket made by fn()
    can be used from any thread afterwards.
    """
    out: dict[str, Any] = {}

    def body():
        try:
            fd = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, _CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f"setns({name}): {os.strerror(e)}")
            finally:
                os.close(fd)
            out["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            out["error"] = exc

    t = threading.Thread(target=body, name=f"netns-{name}", daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out.get("value")


# Legacy ethtool ioctls (struct ethtool_value, linux/ethtool.h), enough to switch the
# offloads a capture sees: TX checksumming (ETHTOOL_[GS]TXCSUM: all of the device's checksum
# features, IPv4 and IPv6) and segmentation. TX checksumming comes first: switching it on
# is what allows TSO, switching it off switches TSO off too.
_SIOCETHTOOL = 0x8946
_ETHTOOL = {"tx_csum": (0x16, 0x17), "tso": (0x1E, 0x1F), "gso": (0x23, 0x24),
            "gro": (0x2B, 0x2C)}  # (get, set)


def _ethtool(sock: socket.socket, dev: str, cmd: int, value: int = 0) -> int:
    buf = ctypes.create_string_buffer(struct.pack("II", cmd, value), 8)
    ifr = struct.pack("16sP", dev.encode(), ctypes.addressof(buf)).ljust(40, b"\0")
    fcntl.ioctl(sock.fileno(), _SIOCETHTOOL, ifr)
    return struct.unpack("II", buf.raw)[1]
