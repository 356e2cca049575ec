"""A small blocking Kafka client on kgc's own codec, for the CLI, tests and benchmarks.

How this works: one TCP connection; ``request`` encodes a request with the generated codec,
sends it and reads the matching response. ``negotiate`` asks ApiVersions first so
``request(api_key, body)`` picks the highest version both sides support, as real clients do.
It speaks the plain Kafka protocol, so it works against any Kafka-compatible broker.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import BY_KEY, api_versions

_I = struct.Struct(">i")


class KafkaError(Exception):
    pass


class Connection:
    def __init__(
        self, host: str, port: int, *, client_id: str = "kgc-cli", timeout: float = 10.0
    ) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation_id = 0
        self.versions: dict[int, tuple[int, int]] = {}

    @classmethod
    def to(cls, bootstrap: str, **kw: Any) -> Connection:
        host, _, port = bootstrap.rpartition(":")
        return cls(host or "127.0.0.1", int(port), **kw)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api_key: int, version: int, body: Any) -> int:
        self.correlation_id += 1
        header = RequestHeader(api_key, version, self.correlation_id, self.client_id)
        self.sock.sendall(encode_request(header, body))
        return self.correlation_id

    def recv_frame(self) -> bytes:
        size = _I.unpack(self._read(4))[0]
        return self._read(size)

    def _read(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the server")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def call(self, api_key: int, version: int, body: Any) -> Any:
        cid = self.send(api_key, version, body)
        got, resp = decode_response(api_key, version, self.recv_frame())
        if got != cid:
            raise KafkaError(f"correlation id {got} != {cid}")
        return resp

    def negotiate(self) -> None:
        resp = self.call(
            api_versions.API_KEY,
            3,
            api_versions.Request(client_software_name="kgc", client_software_version="0.1"),
        )
        if resp.error_code:
            raise KafkaError(f"ApiVersions failed with error {resp.error_code}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version_for(self, api_key: int) -> int:
        if not self.versions:
            self.negotiate()
        mod = BY_KEY[api_key]
        lo, hi = self.versions.get(api_key, (-1, -1))
        v = min(hi, int(mod.MAX_VERSION))
        if v < max(lo, mod.MIN_VERSION):
            raise KafkaError(f"the broker does not support api key {api_key}")
        return v

    def request(self, api_key: int, body: Any, version: int | None = None) -> tuple[int, Any]:
        """Send at the best common version (or ``version``); return (version, response)."""
        v = self.version_for(api_key) if version is None else version
        return v, self.call(api_key, v, body)
