"""Request/response framing: size prefix, header versions, and the per-API codecs.

How this works: every Kafka frame is ``int32 size`` + header + body. The request header
version follows from the API's flexible versions (v2 when the request version is flexible,
else v1), except that ApiVersions always answers with response header v0 so that a client
which does not yet know our versions can parse it. ``decode_request`` returns the header
fields and the decoded body; ``encode_response`` returns the whole frame, size included.
Frames a client repeats byte for byte but for the correlation id (Heartbeat: the hottest
request) are decoded once and then looked up (``REPEATED_APIS``): their bodies are shared.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from protocol.messages import BY_KEY
from protocol.primitives import DecodeError, skip_tagged_fields

API_VERSIONS_KEY = 18

_HHI = struct.Struct(">hhi")
_HHIH = struct.Struct(">hhih")
_H = struct.Struct(">h")
_I = struct.Struct(">i")
_II = struct.Struct(">ii")


# (api key, version) pairs whose request header is v2 (flexible), looked up per request.
_FLEXIBLE = frozenset(
    (key, v)
    for key, mod in BY_KEY.items()
    for v in range(mod.MIN_VERSION, mod.MAX_VERSION + 1)
    if mod.FLEXIBLE_FROM >= 0 and v >= mod.FLEXIBLE_FROM
)
# Requests a client sends again and again byte for byte but for the correlation id (a
# member's heartbeat: same client id, group, generation and member until it rejoins), whose
# handlers only read the decoded body: a frame seen before is answered from ``_REPEATS``
# (its client id, its body object, the bytes left over after it) instead of being decoded
# again. The body object is shared by those requests, so it must never be mutated.
HEARTBEAT_KEY = 12
REPEATED_APIS = frozenset({HEARTBEAT_KEY})
# At most this many frames remembered per (api key, version), the oldest forgotten first
# (a few hundred bytes each).
REPEATS_MAX = 1 << 14
# (api key << 16 | version) -> frame without its first 8 bytes (key, version, correlation
# id) -> (client id, body, bytes left over after the body).
_REPEATS: dict[int, dict[bytes, tuple[str | None, Any, int]]] = {
    (key << 16) | v: {} for key in REPEATED_APIS for v in BY_KEY[key].REQUEST_DECODERS
}
# (api key << 16 | version) -> (request decoder, whether the request header is v2, the
# frames seen before for a repeated API or None).
_REQUESTS: dict[int, tuple[Any, bool, dict[bytes, tuple[str | None, Any, int]] | None]] = {
    (key << 16) | v: (dec, (key, v) in _FLEXIBLE, _REPEATS.get((key << 16) | v))
    for key, mod in BY_KEY.items()
    for v, dec in mod.REQUEST_DECODERS.items()
}
# Those whose response header is v1 (an empty tagged-field section): all but ApiVersions,
# whose response header is always v0.
_FLEXIBLE_RESPONSE = frozenset(kv for kv in _FLEXIBLE if kv[0] != API_VERSIONS_KEY)


class UnknownApi(Exception):
    """An API key kgc has no codec for, or a version outside the schema's range."""


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def is_flexible(mod: ModuleType, version: int) -> bool:
    return bool(mod.FLEXIBLE_FROM >= 0 and version >= mod.FLEXIBLE_FROM)


def decode_header(frame: bytes) -> tuple[RequestHeader, int]:
    """Parse the request header; return it and the offset of the body.

    The client id is a non-compact nullable string in every header version; v2 adds a
    tagged-field section after it, which we skip.
    """
    if len(frame) < 8:
        raise DecodeError("frame shorter than a request header")
    api_key, api_version, correlation_id = _HHI.unpack_from(frame, 0)
    n = _H.unpack_from(frame, 8)[0] if len(frame) >= 10 else -2
    if n == -2:
        raise DecodeError("truncated client id")
    pos = 10
    client_id: str | None = None
    if n >= 0:
        if pos + n > len(frame):
            raise DecodeError("truncated client id")
        client_id = frame[pos : pos + n].decode("utf-8", "replace")
        pos += n
    if (api_key, api_version) in _FLEXIBLE:
        if pos < len(frame) and frame[pos] == 0:
            pos += 1  # the usual empty tagged-field section
        else:
            pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def decode_request(frame: bytes | bytearray, *, strict: bool = False) -> tuple[RequestHeader, Any]:
    """Decode a whole request frame (without its size prefix).

    Raises ``UnknownApi`` for keys/versions we have no schema for and ``DecodeError``
    for bodies that do not parse. Bytes left over after the body are ignored, as Kafka
    ignores them (librdkafka's admin Metadata v12 carries three), unless ``strict``.
    A bytearray (what kafka-python encodes into) is copied to bytes first: the compiled
    build (setup.py) checks the decoders' ``bytes`` argument types.
    """
    if type(frame) is not bytes:
        frame = bytes(frame)
    # ``decode_header`` inlined, with one table lookup for the decoder and the header
    # version: this runs for every request.
    if len(frame) < 10:
        decode_header(frame)  # raises its DecodeError
        raise AssertionError("unreachable")
    api_key, api_version, correlation_id, n = _HHIH.unpack_from(frame, 0)
    found = _REQUESTS.get((api_key << 16) | (api_version & 0xFFFF))
    repeats = found[2] if found is not None else None
    if repeats is not None:
        rest = frame[8:]
        seen = repeats.get(rest)
        if seen is not None:  # decoded before, without error: the same answer
            if strict and seen[2]:
                raise DecodeError(f"{seen[2]} bytes left over after the body")
            return RequestHeader(api_key, api_version, correlation_id, seen[0]), seen[1]
    pos = 10
    client_id: str | None = None
    if n >= 0:  # (another negative length is a null client id, as in decode_header)
        if pos + n > len(frame):
            raise DecodeError("truncated client id")
        client_id = frame[pos : pos + n].decode("utf-8", "replace")
        pos += n
    elif n == -2:
        raise DecodeError("truncated client id")  # what decode_header answers to it
    if found is None:
        if api_key not in BY_KEY:
            raise UnknownApi(f"unknown api key {api_key}")
        raise UnknownApi(f"api key {api_key} has no version {api_version}")
    decoder, flexible = found[0], found[1]
    if flexible:
        if pos < len(frame) and frame[pos] == 0:
            pos += 1  # the usual empty tagged-field section
        else:
            pos = skip_tagged_fields(frame, pos)
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    try:
        body, end = decoder(frame, pos)
    except DecodeError:
        raise
    except (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError) as exc:
        raise DecodeError(f"malformed body: {exc}") from exc
    if repeats is not None:
        if len(repeats) >= REPEATS_MAX:
            del repeats[next(iter(repeats))]
        repeats[rest] = (client_id, body, len(frame) - end)
    if strict and end != len(frame):
        raise DecodeError(f"{len(frame) - end} bytes left over after the body")
    return header, body


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """Encode a response frame, size prefix included.

    ``body`` may be a response dataclass, or bytes already encoded for this version
    (handlers cache responses that rarely change, such as ApiVersions). Bodies registered
    with ``constant`` are encoded once per version.
    """
    if type(body) is bytes:
        if (api_key, api_version) in _FLEXIBLE_RESPONSE:
            return _II.pack(len(body) + 5, correlation_id) + b"\x00" + body
        return _II.pack(len(body) + 4, correlation_id) + body
    by_version = _CONSTANTS.get(id(body))
    if by_version is None:
        reused = _REUSED.get(id(body))
        if reused is not None and reused[0] is body:
            by_version = reused[1]
    if by_version is not None:
        # Cached with the response header's tagged-field byte, when the version has one.
        framed = by_version.get(api_version)
        if framed is None:
            tag = b"\x00" if (api_key, api_version) in _FLEXIBLE_RESPONSE else b""
            framed = by_version[api_version] = tag + encode_body(api_key, api_version, body)
        return _II.pack(len(framed) + 4, correlation_id) + framed
    out = bytearray(b"\x00\x00\x00\x00")
    out += _I.pack(correlation_id)
    if (api_key, api_version) in _FLEXIBLE_RESPONSE:
        out += b"\x00"
    BY_KEY[api_key].RESPONSE_ENCODERS[api_version](body, out)
    _I.pack_into(out, 0, len(out) - 4)
    return bytes(out)


# id of a response object that is never mutated -> its framed body by version.
_CONSTANTS: dict[int, dict[int, bytes]] = {}
_KEEP_ALIVE: list[Any] = []  # the constant objects themselves, so their ids stay unique


def constant(body: Any) -> Any:
    """Declare a response object immutable and shared, so it is encoded once per version."""
    if id(body) not in _CONSTANTS:
        _CONSTANTS[id(body)] = {}
        _KEEP_ALIVE.append(body)
    return body


# Responses a handler hands out many times for a while (a consumer-group member's steady
# heartbeat answer), then forgets: id -> (the object, its framed body by version). The entry
# holds the object, so its id cannot be reused while cached; the oldest go first.
_REUSED: dict[int, tuple[Any, dict[int, bytes]]] = {}
_REUSED_MAX = 1 << 16


def reusable(body: Any) -> Any:
    """Declare a response object immutable, so repeated sends of it are encoded once.

    Unlike ``constant`` the object is not kept forever: at most ``_REUSED_MAX`` are."""
    key = id(body)
    if key not in _REUSED:
        if len(_REUSED) >= _REUSED_MAX:
            del _REUSED[next(iter(_REUSED))]
        _REUSED[key] = (body, {})
    return body


def encode_body(api_key: int, api_version: int, body: Any) -> bytes:
    """Encode just a response body, for handlers that cache their answers."""
    out = bytearray()
    BY_KEY[api_key].RESPONSE_ENCODERS[api_version](body, out)
    return bytes(out)


def encode_request(header: RequestHeader, body: Any) -> bytes:
    """Encode a request frame, size prefix included (used by the CLI and tests)."""
    mod = BY_KEY[header.api_key]
    out = bytearray(b"\x00\x00\x00\x00")
    out += _HHI.pack(header.api_key, header.api_version, header.correlation_id)
    if header.client_id is None:
        out += b"\xff\xff"
    else:
        cid = header.client_id.encode()
        out += _H.pack(len(cid))
        out += cid
    if is_flexible(mod, header.api_version):
        out += b"\x00"
    mod.REQUEST_ENCODERS[header.api_version](body, out)
    _I.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """Decode a response frame without its size prefix; return (correlation id, body)."""
    mod = BY_KEY[api_key]
    correlation_id = _I.unpack_from(frame, 0)[0]
    pos = 4
    if api_key != API_VERSIONS_KEY and is_flexible(mod, api_version):
        pos = skip_tagged_fields(frame, pos)
    body, end = mod.RESPONSE_DECODERS[api_version](frame, pos)
    if end != len(frame):
        raise DecodeError(f"{len(frame) - end} bytes left over after the response body")
    return correlation_id, body
