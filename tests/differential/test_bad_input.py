"""Bad input, Kafka vs kgc, on raw sockets: what each server does with a frame no client
library would send -- the answer (decoded and compared) or the connection closed.

Each case opens its own connection, writes its bytes and then reads for at most ``WAIT``
seconds: the outcome is the decoded answer, "closed" (the server closed the connection;
both servers do it at once for a frame they cannot serve), or "open, no answer" (the server
still waits for the rest of a frame). The outcome of each case is recorded as one step.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest
from support.diffkit import Runner, Side

from protocol.framing import decode_response
from protocol.messages import BY_KEY, api_versions, metadata, produce
from storage.record_batch import encode_batch

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

WAIT = 1.5  # seconds a connection may stay silent before it counts as "open, no answer"


def _header(
    api_key: int, version: int, correlation_id: int = 7, client_id: bytes = b"diff"
) -> bytes:
    """Request header v1 (every version of these cases is a non-flexible one)."""
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def _sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _body(api_key: int, version: int, body: Any) -> bytes:
    out = bytearray()
    BY_KEY[api_key].REQUEST_ENCODERS[version](body, out)
    return bytes(out)


def _outcome(side: Side, data: bytes, api_key: int, version: int) -> Any:
    host, _, port = side.bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=side.timeout) as s:
        s.sendall(data)
        s.settimeout(WAIT)
        buf = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return "closed" if not buf else f"closed after {len(buf)} bytes"
                buf += chunk
                if len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                    break
        except ConnectionResetError:
            return "closed"
        except TimeoutError:
            return "open, no answer" if not buf else f"open after {len(buf)} bytes"
    try:
        correlation, resp = decode_response(api_key, version, buf[4:])
    except Exception as exc:  # an answer our codec cannot read is itself a finding
        return f"undecodable answer: {type(exc).__name__}"
    return {"correlation_id": correlation, "answer": _summary(resp)}


def _summary(resp: Any) -> Any:
    """The comparable part of an answer: its error codes. A Metadata answer for all topics
    lists the server's own topics, an ApiVersions answer its own table (compared in
    test_admin_metadata.py)."""
    if isinstance(resp, metadata.MetadataResponse):
        # Which topics exist differs with what ran before (kgc always has
        # __consumer_offsets; Kafka creates it on the first group request).
        return {"brokers": len(resp.brokers)}
    if isinstance(resp, api_versions.ApiVersionsResponse):
        return {"error_code": resp.error_code, "has_table": bool(resp.api_keys)}
    return resp


def _case(side: Side, step: str, data: bytes, api_key: int = 3, version: int = 1) -> None:
    side.note(f"bad_input.{step}", api_key, version, _outcome(side, data, api_key, version))


def bad_frames(side: Side) -> None:
    meta_v1 = _body(3, 1, metadata.MetadataRequest(topics=[]))  # v1: [] asks for no topic
    _case(side, "well_formed_control", _sized(_header(3, 1) + meta_v1))
    _case(side, "size_beyond_request_max", struct.pack(">i", 200 * 1024 * 1024) + b"\0" * 64)
    _case(side, "negative_size", struct.pack(">i", -5) + b"\0" * 16)
    _case(side, "zero_size", struct.pack(">i", 0))
    _case(side, "garbage_body", _sized(b"\xde\xad\xbe\xef" * 8))
    _case(side, "header_shorter_than_fixed_part", _sized(b"\x00\x03\x00"))
    _case(side, "unknown_api_key", _sized(_header(500, 0) + b"\0" * 8), api_key=500, version=0)
    _case(
        side, "unknown_negative_api_key", _sized(_header(-2, 0) + b"\0" * 8), api_key=-2, version=0
    )
    _case(side, "metadata_unsupported_version", _sized(_header(3, 99) + meta_v1), version=99)
    _case(side, "metadata_negative_version", _sized(_header(3, -1) + meta_v1), version=-1)
    _case(
        side,
        "client_id_longer_than_frame",
        _sized(_header(3, 1, client_id=b"")[:-2] + b"\x7f\xff" + b"ab"),
    )
    _case(side, "negative_array_length", _sized(_header(3, 1) + struct.pack(">i", -5)))
    _case(side, "array_longer_than_frame", _sized(_header(3, 1) + struct.pack(">i", 1_000_000)))
    _case(
        side,
        "string_longer_than_frame",
        _sized(_header(3, 1) + struct.pack(">ih", 1, 3000) + b"abc"),
    )
    _case(side, "body_missing", _sized(_header(3, 1)))
    _case(side, "trailing_bytes_after_body", _sized(_header(3, 1) + meta_v1 + b"\x01\x02\x03"))


def bad_but_parseable(side: Side) -> None:
    """Frames that parse, with values out of their field's range: answered, not closed."""
    topic = side.name("bad")
    side.create_topic(topic, 1, retention_ms="-1")  # the batch below is stamped years ago
    batch = encode_batch(0, [(b"k", b"v")], timestamp_ms=1_700_000_000_000)

    def produce_req(records: bytes | None, acks: int = -1) -> bytes:
        body = produce.ProduceRequest(
            acks=acks,
            timeout_ms=30000,
            topic_data=[
                produce.TopicProduceData(
                    name=topic,
                    partition_data=[produce.PartitionProduceData(index=0, records=records)],
                )
            ],
        )
        return _sized(_header(0, 7) + _body(0, 7, body))

    _case(side, "produce_acks_5", produce_req(batch, acks=5), api_key=0, version=7)
    av = _body(18, 2, api_versions.ApiVersionsRequest())
    _case(side, "api_versions_v2_then_answered", _sized(_header(18, 2) + av), api_key=18, version=2)
    # A frame cut short: the server waits for the rest of it.
    whole = _sized(_header(3, 1) + _body(3, 1, metadata.MetadataRequest(topics=[])))
    _case(side, "truncated_frame", whole[:-3])


def produce_null_records(side: Side) -> None:
    """A Produce whose partition carries null records (argued in known_differences.toml)."""
    topic = side.name("bad-null")
    side.create_topic(topic, 1)
    body = produce.ProduceRequest(
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            produce.TopicProduceData(
                name=topic, partition_data=[produce.PartitionProduceData(index=0, records=None)]
            )
        ],
    )
    _case(
        side,
        "produce_null_records",
        _sized(_header(0, 7) + _body(0, 7, body)),
        api_key=0,
        version=7,
    )


def test_bad_frames(diff: Runner) -> None:
    started = time.monotonic()
    outcome = diff(bad_frames)
    assert outcome.kafka.exchanges[1].response == "closed"
    assert time.monotonic() - started < 60


def test_bad_but_parseable(diff: Runner) -> None:
    diff(bad_but_parseable)
    diff(produce_null_records)
