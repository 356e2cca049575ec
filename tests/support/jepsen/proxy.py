"""A fault-injecting TCP proxy for one link, run in the harness's event loop.

How this works: ``FaultProxy`` listens on a local port and, for each accepted connection,
opens one to the target and runs two directions. In each direction a reader task reads
chunks, stamps them with the loop time and queues them; a writer task sends each chunk when
the link lets it. ``set_mode`` switches the link at once, for every connection, old and new:

- ``pass``: forward as read;
- ``delay``: forward each chunk ``delay_ms`` after it was read (order kept; a stream of chunks
  is delayed, not slowed chunk by chunk);
- ``drop``: stop forwarding and keep both sockets: chunks wait in the queue, and new
  connections are accepted but not connected onward, until the link passes again. This is a
  partition as TCP sees it: bytes are late, never lost, so a healed stream stays in frame;
- ``reset``: every connection is closed with an RST (SO_LINGER 0), and so is each new one
  while the mode lasts;
- ``blackhole``: connections are accepted, read and never answered; what they send is
  discarded. A connection black-holed stays so after the link heals (its stream lost bytes);
  new connections after the heal pass.

``accepted`` counts accepted connections and ``wait_accepted`` waits on it, so tests wait on
events rather than sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field

PASS = "pass"
DELAY = "delay"
DROP = "drop"
RESET = "reset"
BLACKHOLE = "blackhole"
MODES = (PASS, DELAY, DROP, RESET, BLACKHOLE)

_CHUNK = 65536


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    blackholed: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def reset(self) -> None:
        for task in self.tasks:
            task.cancel()
        _abort_with_rst(self.client)
        if self.upstream is not None:
            _abort_with_rst(self.upstream)


class FaultProxy:
    """One link: ``127.0.0.1:<port>`` forwarded to ``target_host:target_port``."""

    def __init__(self, target_host: str, target_port: int, listen_host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self.listen_host = listen_host
        self.mode = PASS
        self.delay_ms = 0.0
        self.accepted = 0
        self._open = asyncio.Event()
        self._open.set()
        self._changed = asyncio.Condition()
        self._conns: set[_Conn] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._handle, self.listen_host, 0)
        return self

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.sockets[0].getsockname()[1])

    def set_mode(self, mode: str, delay_ms: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self.mode, self.delay_ms = mode, delay_ms
        if mode in (PASS, DELAY):
            self._open.set()
        else:
            self._open.clear()
        for conn in list(self._conns):
            if mode == RESET:
                conn.reset()
                self._conns.discard(conn)
            elif mode == BLACKHOLE:
                conn.blackholed = True

    async def wait_accepted(self, count: int, timeout: float = 5.0) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self.accepted >= count), timeout)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.reset()
        self._conns.clear()
        # Connection handlers end once their sockets are reset; wait for them (bounded), so
        # none is left for the loop's shutdown to cancel.
        handlers = [t for t in self._handlers if t is not asyncio.current_task()]
        if handlers:
            await asyncio.wait(handlers, timeout=5)
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer, blackholed=self.mode == BLACKHOLE)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        async with self._changed:
            self.accepted += 1
            self._changed.notify_all()
        if self.mode == RESET:
            _abort_with_rst(writer)
            return
        self._conns.add(conn)
        try:
            await self._serve(conn, reader)
        except (OSError, asyncio.IncompleteReadError):
            conn.reset()
        finally:
            self._conns.discard(conn)

    async def _serve(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        while not conn.blackholed and not self._open.is_set():
            opened = asyncio.ensure_future(self._open.wait())
            data = asyncio.ensure_future(reader.read(_CHUNK))
            done, _ = await asyncio.wait({opened, data}, return_when=asyncio.FIRST_COMPLETED)
            opened.cancel()
            if data in done:
                if not data.result():
                    conn.client.close()
                    return
                # Held until the link opens: the bytes go first once connected.
                early = data.result()
                break
            data.cancel()
        else:
            early = b""
        if conn.blackholed:
            while await reader.read(_CHUNK):
                pass
            conn.client.close()
            return
        await self._open.wait()
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        conn.upstream = up_writer
        to_up: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        if early:
            to_up.put_nowait((asyncio.get_running_loop().time(), early))
        to_client: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        conn.tasks = [
            asyncio.create_task(self._read(conn, reader, to_up)),
            asyncio.create_task(self._write(conn, to_up, up_writer)),
            asyncio.create_task(self._read(conn, up_reader, to_client)),
            asyncio.create_task(self._write(conn, to_client, conn.client)),
        ]
        await asyncio.gather(*conn.tasks, return_exceptions=True)
        for w in (up_writer, conn.client):
            w.close()

    async def _read(
        self, conn: _Conn, reader: asyncio.StreamReader, queue: asyncio.Queue[tuple[float, bytes]]
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await reader.read(_CHUNK)
            if not conn.blackholed or not data:
                queue.put_nowait((loop.time(), data))
            if not data:
                if conn.blackholed:
                    # Nothing will ever pass again: end the other side too.
                    conn.reset()
                return

    async def _write(
        self, conn: _Conn, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            stamp, data = await queue.get()
            if not data:
                if not conn.blackholed and writer.can_write_eof():
                    writer.write_eof()
                return
            await self._open.wait()
            if conn.blackholed:
                continue
            due = stamp + self.delay_ms / 1000.0 if self.mode == DELAY else 0.0
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            writer.write(data)
            await writer.drain()
