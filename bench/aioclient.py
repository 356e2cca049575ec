"""A minimal asyncio Kafka connection on kgc's codec, for benchmarks that act as members.

How this works: one TCP connection, requests answered in order (as Kafka guarantees), so a
FIFO of futures matches responses to requests without parsing correlation ids.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from typing import Any

from protocol.framing import RequestHeader, decode_response, encode_request

_I = struct.Struct(">i")


class AsyncConn:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str
    ) -> None:
        self.reader, self.writer = reader, writer
        self.client_id = client_id
        self.cid = 0
        self.pending: deque[tuple[int, int, asyncio.Future[Any]]] = deque()
        self.task = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def open(cls, host: str, port: int, client_id: str = "bench") -> AsyncConn:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, client_id)

    async def _read_loop(self) -> None:
        try:
            while True:
                size = _I.unpack(await self.reader.readexactly(4))[0]
                frame = await self.reader.readexactly(size)
                api_key, version, fut = self.pending.popleft()
                if not fut.done():
                    fut.set_result(decode_response(api_key, version, frame)[1])
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            while self.pending:
                _, _, fut = self.pending.popleft()
                if not fut.done():
                    fut.set_exception(ConnectionError(str(exc)))

    def send(self, api_key: int, version: int, body: Any) -> asyncio.Future[Any]:
        self.cid += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append((api_key, version, fut))
        self.writer.write(
            encode_request(RequestHeader(api_key, version, self.cid, self.client_id), body)
        )
        return fut

    async def call(self, api_key: int, version: int, body: Any) -> Any:
        return await self.send(api_key, version, body)

    async def close(self) -> None:
        self.task.cancel()
        self.writer.close()
