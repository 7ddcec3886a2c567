"""Drop-tail written against the AQM plugin protocol (docs/extending.md): an arrival that would
take the queue past its byte or packet limit is dropped, everything else is queued and sent.
It drops exactly the packets the built-in `droptail` drops (tools/tests/test_plugins.py), but
with the plugin's cause: early_drop (the AQM decided) rather than overflow.

    aqm: {kind: python, file: examples/plugins/droptail.py, class: DropTail}
"""


class DropTail:
    def enqueue(self, pkt, queue, now_s):
        if queue.limit_bytes and queue.bytes + pkt.size_bytes > queue.limit_bytes:
            return "drop"
        if queue.limit_packets and queue.packets + 1 > queue.limit_packets:
            return "drop"
        return "accept"

    def dequeue(self, pkt, queue, now_s):
        return "send"
