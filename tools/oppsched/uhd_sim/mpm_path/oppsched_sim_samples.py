"""Sample sinks for UHD's MPM simulator, named in its .ini (`[sample.sink] class =
PacketLog`, `import_path =` this file): what UHD transmits through a simulated radio.

PacketLog appends one JSON line per CHDR data packet the simulated radio receives from
UHD: its type, timestamp (ticks, or null for a packet without one), end-of-burst flag and
payload bytes. It shows what UHD put on the wire for a timed burst (`tx_time` on the first
packet, `end_of_burst` on the last).
"""

import json


class PacketLog:
    def __init__(self, path):
        self._f = open(path, "a", buffering=1)

    def accept_packet(self, packet):
        header = packet.get_header()
        self._f.write(json.dumps({
            "type": str(header.pkt_type).rsplit(".", 1)[-1],
            "timestamp": packet.get_timestamp(),
            "eob": bool(header.eob),
            "bytes": len(packet.get_payload_bytes()),
        }) + "\n")

    def close(self):
        self._f.close()
