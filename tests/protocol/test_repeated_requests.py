"""Repeated request frames (a member's heartbeats) are decoded once, then looked up.

``decode_request`` keeps the frames of ``REPEATED_APIS`` it decoded (without their
correlation id) and answers a repeat from them: these tests pin that a repeat gets its own
header (correlation id) and the same body, that any other byte makes a different entry, that
strict decoding still refuses leftover bytes, that other APIs are not kept, and that the table
stays bounded.
"""

from __future__ import annotations

import pytest

from protocol import framing
from protocol.framing import REPEATS_MAX, RequestHeader, decode_request, encode_request
from protocol.messages import heartbeat, offset_fetch
from protocol.primitives import DecodeError


def hb_frame(correlation_id: int, member: str = "m-1", generation: int = 3, v: int = 4) -> bytes:
    req = heartbeat.Request(group_id="g", generation_id=generation, member_id=member)
    frame = encode_request(RequestHeader(heartbeat.API_KEY, v, correlation_id, "client-1"), req)
    return frame[4:]  # without the size prefix, as the transport hands it over


@pytest.mark.parametrize("v", [0, 3, 4])
def test_a_repeat_gets_its_own_header_and_the_same_body(v: int) -> None:
    h1, b1 = decode_request(hb_frame(1, "rep-a", v=v))
    h2, b2 = decode_request(hb_frame(2, "rep-a", v=v))
    assert (h1.correlation_id, h2.correlation_id) == (1, 2)
    assert h1.client_id == h2.client_id == "client-1"
    assert (h2.api_key, h2.api_version) == (heartbeat.API_KEY, v)
    assert b2 == heartbeat.Request(group_id="g", generation_id=3, member_id="rep-a")
    assert b2 is b1  # looked up, not decoded again


def test_any_other_byte_is_another_request() -> None:
    _, b1 = decode_request(hb_frame(1, "other-a", generation=3))
    _, b2 = decode_request(hb_frame(2, "other-a", generation=4))
    _, b3 = decode_request(hb_frame(3, "other-b", generation=3))
    assert (b1.generation_id, b2.generation_id, b3.member_id) == (3, 4, "other-b")
    assert b1.member_id == b2.member_id == "other-a"


def test_strict_refuses_leftover_bytes_on_a_repeat_too() -> None:
    frame = hb_frame(1, "leftover") + b"\x00\x00"
    _, body = decode_request(frame)  # leftover bytes are ignored when not strict
    assert body.member_id == "leftover"
    with pytest.raises(DecodeError, match="2 bytes left over"):
        decode_request(frame, strict=True)
    assert decode_request(frame)[1] is body


def test_other_apis_are_decoded_every_time() -> None:
    req = offset_fetch.Request(group_id="g", topics=None)
    frame = encode_request(RequestHeader(offset_fetch.API_KEY, 5, 1, "c"), req)[4:]
    assert decode_request(frame)[1] is not decode_request(frame)[1]


def test_the_table_is_bounded_and_forgets_the_oldest() -> None:
    repeats = framing._REPEATS[(heartbeat.API_KEY << 16) | 4]
    repeats.clear()
    first = hb_frame(1, "bound-0")
    decode_request(first)
    for i in range(1, REPEATS_MAX + 10):
        decode_request(hb_frame(1, f"bound-{i}"))
    assert len(repeats) == REPEATS_MAX
    assert first[8:] not in repeats
    assert hb_frame(9, f"bound-{REPEATS_MAX + 9}")[8:] in repeats
    repeats.clear()
