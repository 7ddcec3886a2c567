"""The MessagePack-RPC server that stands in for PyPI's mprpc under usrp_mpm's RPC server
(tools/oppsched/uhd_sim/mpm_path/oppsched_msgpack_rpc.py), over a socket pair: answers,
errors as text, notifications, framing across reads, and a bad message or a bad stream
costing no more than itself. The whole simulator over it is in test_uhd_sim.py."""

from __future__ import annotations

import socket
import sys
import threading

import msgpack
import pytest

from oppsched import uhd_sim

sys.path.insert(0, str(uhd_sim.MPM_PATH))
import oppsched_msgpack_rpc as rpc  # noqa: E402


class Calculator(rpc.RPCServer):
    def __init__(self):
        self.notes = []
        super().__init__(pack_params={"use_bin_type": True},
                         unpack_params={"max_buffer_size": 1 << 20, "raw": False})

    def add(self, a, b):
        return a + b

    def info(self):
        return {"product": "e320", "serial": "OPPSIM1"}

    def fail(self):
        raise RuntimeError("set_time_source() not available on this device!")

    def whoami(self):
        return [self.client_host, self.client_port]

    def note(self, text):
        self.notes.append(text)

    def _secret(self):
        return "hidden"


class Connection:
    def __init__(self, server, address=("127.0.0.1", 50000)):
        self.client, theirs = socket.socketpair()
        self.client.settimeout(10)
        self.thread = threading.Thread(target=server, args=(theirs, address), daemon=True)
        self.thread.start()
        self.unpacker = msgpack.Unpacker(raw=False)

    def send(self, *messages, raw: bytes = b""):
        self.client.sendall(b"".join(msgpack.packb(m, use_bin_type=True) for m in messages)
                            + raw)

    def receive(self, n=1):
        out = []
        while len(out) < n:
            for m in self.unpacker:
                out.append(m)
            if len(out) < n:
                data = self.client.recv(65536)
                assert data, f"connection closed after {out}"
                self.unpacker.feed(data)
        return out

    def closed_by_server(self) -> bool:
        self.thread.join(10)
        return not self.thread.is_alive() and self.client.recv(1) == b""


@pytest.fixture
def server():
    return Calculator()


def test_requests_are_answered_in_order_with_their_ids(server):
    c = Connection(server)
    c.send([0, 1, "add", [2, 3]], [0, 2, "info", []])
    assert c.receive(2) == [[1, 1, None, 5],
                            [1, 2, None, {"product": "e320", "serial": "OPPSIM1"}]]


def test_a_request_split_across_reads_is_answered_once_whole(server):
    c = Connection(server)
    data = msgpack.packb([0, 9, "add", ["ab" * 40000, "c"]], use_bin_type=True)
    c.client.sendall(data[:7])
    c.client.sendall(data[7:])
    [answer] = c.receive()
    assert answer[:3] == [1, 9, None] and len(answer[3]) == 80001


def test_methods_see_the_address_of_the_connection_that_called(server):
    """MPMServer's claim, ping and local-session check read client_host / client_port."""
    a = Connection(server, ("127.0.0.1", 50001))
    b = Connection(server, ("10.0.0.2", 50002))
    a.send([0, 1, "whoami", []])
    assert a.receive() == [[1, 1, None, ["127.0.0.1", 50001]]]
    b.send([0, 2, "whoami", []])
    assert b.receive() == [[1, 2, None, ["10.0.0.2", 50002]]]
    a.send([0, 3, "whoami", []])
    assert a.receive() == [[1, 3, None, ["127.0.0.1", 50001]]]


def test_a_raising_method_answers_its_text_and_the_connection_goes_on(server):
    c = Connection(server)
    c.send([0, 4, "fail", []], [0, 5, "add", [1, 1]])
    assert c.receive(2) == [[1, 4, "set_time_source() not available on this device!", None],
                            [1, 5, None, 2]]


@pytest.mark.parametrize("name,params,text", [
    ("nonexistent", [], "Method not found: 'nonexistent'"),
    ("_secret", [], "Method not found: '_secret'"),
    ("__init__", [], "Method not found: '__init__'"),
    (7, [], "Method not found: 7"),
    ("add", {"a": 1}, "params of 'add': {'a': 1} is not an array"),
    ("add", [1], "Calculator.add() missing 1 required positional argument: 'b'"),
])
def test_a_bad_request_gets_an_error_naming_it(server, name, params, text):
    c = Connection(server)
    c.send([0, 3, name, params], [0, 4, "add", [2, 2]])
    assert c.receive(2) == [[1, 3, text, None], [1, 4, None, 4]]


def test_a_notification_runs_without_an_answer(server):
    c = Connection(server)
    c.send([2, "note", ["hello"]], [0, 1, "add", [0, 0]])
    assert c.receive() == [[1, 1, None, 0]]
    assert server.notes == ["hello"]


def test_a_message_of_no_known_kind_is_refused_by_its_id_or_skipped(server):
    c = Connection(server)
    c.send([5, 11, "add"], "just a string", [1, 12, None, 0], [0, 13, "add", [1, 2]])
    answers = c.receive(2)
    assert answers[0][:2] == [1, 11] and answers[0][3] is None
    assert answers[0][2].startswith("not a MessagePack-RPC request or notification: [5, 11")
    assert answers[1] == [1, 13, None, 3]


def test_bytes_that_are_not_messagepack_end_that_connection_only(server):
    bad = Connection(server)
    bad.send(raw=b"\xc1")  # 0xc1: never used in MessagePack
    assert bad.closed_by_server()
    good = Connection(server)
    good.send([0, 1, "add", [20, 22]])
    assert good.receive() == [[1, 1, None, 42]]


def test_init_again_forgets_the_methods_looked_up(server):
    """MPMServer.clear_method_registry calls RPCServer.__init__ again after replacing its
    RPC methods, and relies on the next call finding the new ones."""
    c = Connection(server)
    c.send([0, 1, "add", [1, 2]])
    assert c.receive() == [[1, 1, None, 3]]
    server.add = lambda a, b: a * b
    c.send([0, 2, "add", [2, 5]])
    assert c.receive() == [[1, 2, None, 7]]  # cached: the old method
    rpc.RPCServer.__init__(server, pack_params={"use_bin_type": True})
    c2 = Connection(server)
    c2.send([0, 3, "add", [2, 5]])
    assert c2.receive() == [[1, 3, None, 10]]


def test_unknown_constructor_arguments_are_refused():
    with pytest.raises(TypeError, match="encoding"):
        rpc.RPCServer(encoding="utf-8")
