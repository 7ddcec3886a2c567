"""A MessagePack-RPC server with the interface usrp_mpm's RPC server is built on.

usrp_mpm.rpc_server's `MPMServer` subclasses `mprpc.RPCServer` (PyPI's mprpc) and hands an
instance to gevent's `StreamServer` as the handler of each TCP connection. mprpc is not
packaged by Debian, and its last release (0.1.17) neither builds on Python 3.11 (C files from
an old Cython) nor runs against msgpack 1.0 (it passes `encoding=`), so the shims
(oppsched_mpm_shims, fault 2) make `import mprpc` give this module instead. It is written
from the MessagePack-RPC specification (the msgpack-rpc project's, on GitHub) on
Debian's msgpack, and implements what MPMServer uses:

- `RPCServer(pack_params=..., unpack_params=...)`: the keyword arguments of msgpack's
  Packer and Unpacker for this server's connections. Calling `__init__` again forgets the
  methods looked up so far (MPMServer.clear_method_registry relies on it after it has
  replaced its RPC methods).
- `server(sock, address)`: serves one connection until the peer closes it, then closes it.
- `client_host` and `client_port`: the address of the connection whose message is being
  acted on (MPMServer's claim, ping and its local-session check read them).
- A request `[0, msgid, method, params]` calls the server's attribute `method` with
  `*params` and answers `[1, msgid, error, result]`: error nil and the method's result, or
  the exception's text (libuhd's RPC client reads the error as a string) and nil. A
  notification `[2, method, params]` calls it without an answer. Names starting with `_`
  are not callable over RPC.
- A message that is none of those is answered with an error naming it when it carries a
  message id, and otherwise logged and skipped; bytes that are not MessagePack end that
  connection only. Either way the server and its other connections go on.
"""

from __future__ import annotations

import logging
import socket

import msgpack

REQUEST, RESPONSE, NOTIFICATION = 0, 1, 2
RECV_BYTES = 65536

_log = logging.getLogger("oppsched.msgpack_rpc")


class RPCError(Exception):
    """A message this server cannot act on; its text goes back to the caller."""


class RPCServer:
    def __init__(self, *args, pack_params: dict | None = None,
                 unpack_params: dict | None = None, tcp_no_delay: bool = False, **kwargs):
        if args or kwargs:
            raise TypeError(f"RPCServer takes pack_params, unpack_params and tcp_no_delay; "
                            f"got {args!r} {sorted(kwargs)!r}")
        self._pack_params = dict(pack_params or {})
        self._unpack_params = {"raw": False, **(unpack_params or {})}
        self._tcp_no_delay = tcp_no_delay
        self._methods = {}

    # -- one connection ---------------------------------------------------------------
    def __call__(self, sock, address) -> None:
        try:
            self._serve(sock, address)
        finally:
            sock.close()

    def _serve(self, sock, address) -> None:
        if self._tcp_no_delay:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        unpacker = msgpack.Unpacker(**self._unpack_params)
        packer = msgpack.Packer(**self._pack_params)
        while True:
            try:
                data = sock.recv(RECV_BYTES)
            except OSError:
                return
            if not data:
                return
            unpacker.feed(data)
            try:
                messages = list(unpacker)
            except (ValueError, msgpack.UnpackException) as exc:
                # The stream has lost its framing: nothing after this point can be read.
                _log.warning("RPC connection from %s sent bytes that are not MessagePack "
                             "(%s); closing it", address, type(exc).__name__)
                return
            for message in messages:
                # MPMServer's methods read the caller's address from these (claim, ping,
                # and whether the session is local); set for each message, as the server
                # object is shared by every connection.
                self.client_host, self.client_port = (tuple(address) + (None, None))[:2]
                answer = self._answer(message)
                if answer is not None:
                    try:
                        sock.sendall(packer.pack(answer))
                    except OSError:
                        return

    # -- one message ------------------------------------------------------------------
    def _answer(self, message) -> list | None:
        """The answer to one decoded message (None for a notification, or for a message
        without an id that cannot be answered)."""
        if isinstance(message, (list, tuple)) and len(message) == 4 and \
                message[0] == REQUEST and isinstance(message[1], int):
            _, msgid, name, params = message
            try:
                return [RESPONSE, msgid, None, self._call(name, params)]
            except Exception as exc:  # every error goes back to the caller, as its text
                if not isinstance(exc, RPCError):
                    _log.exception("RPC method %r raised", name)
                return [RESPONSE, msgid, str(exc) or type(exc).__name__, None]
        if isinstance(message, (list, tuple)) and len(message) == 3 and \
                message[0] == NOTIFICATION:
            _, name, params = message
            try:
                self._call(name, params)
            except Exception:
                _log.exception("RPC notification %r failed", name)
            return None
        text = f"not a MessagePack-RPC request or notification: {message!r:.200}"
        if isinstance(message, (list, tuple)) and len(message) >= 2 and \
                isinstance(message[1], int) and message[0] != RESPONSE:
            return [RESPONSE, message[1], text, None]
        _log.warning("%s", text)
        return None

    def _call(self, name, params):
        method = self._methods.get(name) if isinstance(name, str) else None
        if method is None:
            if not isinstance(name, str) or not name or name.startswith("_"):
                raise RPCError(f"Method not found: {name!r}")
            method = getattr(self, name, None)
            if not callable(method):
                raise RPCError(f"Method not found: {name!r}")
            self._methods[name] = method
        if not isinstance(params, (list, tuple)):
            raise RPCError(f"params of {name!r}: {params!r:.100} is not an array")
        return method(*params)
