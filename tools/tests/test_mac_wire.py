"""The PHY-MAC messages from Python: the same C++ codec the daemons and blocks use."""

import re
import zlib

import pytest

from oppsched import mac


def test_slot_grant_round_trips_through_python():
    frame = mac.wire.encode("slot_grant", 17, {"slot": 5, "user": 2, "mcs": 3, "harq_pid": 1,
                                               "ndi": 1, "rv": 0, "tb": b"\x01\x02\x03"})
    seq, kind, fields = mac.wire.decode(frame)
    assert (seq, kind) == (17, "slot_grant")
    assert fields["tb"] == b"\x01\x02\x03" and fields["user"] == 2 and not fields["empty"]


def test_trailer_is_the_zlib_crc32_of_the_frame():
    frame = mac.wire.encode("cqi_report", 1, {"user": 1, "slot": 2, "snr_db": 3.0, "cqi": 4})
    assert int.from_bytes(frame[-4:], "big") == zlib.crc32(frame[:-4])
    assert frame[:4] == b"OPPS"


@pytest.mark.parametrize("mutate, message", [
    (lambda f: f[:10], "shorter than header + CRC"),
    (lambda f: b"XXXX" + f[4:], "header.magic"),
    (lambda f: f[:-1] + bytes([f[-1] ^ 1]), "frame.crc"),
])
def test_bad_frames_raise_value_error_naming_the_field(mutate, message):
    frame = mac.wire.encode("harq_feedback", 3, {"user": 1, "slot": 9, "harq_pid": 2, "ack": True})
    with pytest.raises(ValueError, match=re.escape(message)):
        mac.wire.decode(mutate(frame))


def test_unknown_type_is_rejected():
    with pytest.raises(ValueError, match="type: 'bogus'"):
        mac.wire.encode("bogus", 0, {})
