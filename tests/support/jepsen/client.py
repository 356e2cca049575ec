"""A raw Kafka connection for the harness's workloads: one request in flight, every wait bounded.

How this works: ``RawClient`` holds at most one TCP connection to one ``host:port`` and sends
one request at a time with kgc's own codec, so exactly one operation of the history is in
flight per client and nothing is retried behind the harness's back. Connecting and each
request run under a deadline; a timeout, a reset or a closed connection raises
``Indefinite`` (the request may or may not have taken effect: the history records ``info``)
and drops the connection, so the next call reconnects. Any address the harness dials must be
one of its own (``allowed``), checked before every connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Collection
from typing import Any

from protocol.framing import RequestHeader, decode_response, encode_request

_I = struct.Struct(">i")


class Indefinite(Exception):
    """The request's outcome is unknown (timeout, connection lost)."""


class RawClient:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "kgc-jepsen",
        timeout: float = 5.0,
        allowed: Collection[tuple[str, int]] | None = None,
    ) -> None:
        if allowed is not None and (host, port) not in allowed:
            raise ValueError(f"{host}:{port} is not an address of this run")
        self.address = (host, port)
        self.client_id = client_id
        self.timeout = timeout
        self._cid = 0
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._conn is None:
            self._conn = await asyncio.wait_for(
                asyncio.open_connection(*self.address), self.timeout
            )
        return self._conn

    async def call(
        self, api_key: int, version: int, body: Any, timeout: float | None = None
    ) -> Any:
        """Send one request and return its decoded response, or raise ``Indefinite``."""
        try:
            return await asyncio.wait_for(
                self._exchange(api_key, version, body), timeout or self.timeout
            )
        except (TimeoutError, OSError, asyncio.IncompleteReadError, EOFError) as exc:
            self.close()
            raise Indefinite(f"{type(exc).__name__}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    async def _exchange(self, api_key: int, version: int, body: Any) -> Any:
        reader, writer = await self._connect()
        self._cid += 1
        writer.write(
            encode_request(RequestHeader(api_key, version, self._cid, self.client_id), body)
        )
        await writer.drain()
        size = _I.unpack(await reader.readexactly(4))[0]
        return decode_response(api_key, version, await reader.readexactly(size))[1]

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn[1].transport.abort()
        self._conn = None
