"""The fault proxy's modes against a local echo server, with real sockets.

Every check waits on an event (bytes echoed, a connection accepted, a reset seen); where a
test asserts that nothing arrives it waits a bounded time for the event that must not come.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from support.jepsen.proxy import BLACKHOLE, DELAY, DROP, PASS, RESET, FaultProxy

QUIET = 0.3  # how long a test waits for something that must not happen


class Echo:
    """An echo server that counts connections and signals every chunk it receives."""

    def __init__(self) -> None:
        self.connections = 0
        self.received = bytearray()
        self.got = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> Echo:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while data := await reader.read(4096):
                self.received += data
                self.got.set()
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


@pytest.fixture
async def link() -> AsyncIterator[tuple[Echo, FaultProxy]]:
    echo = await Echo().start()
    proxy = await FaultProxy("127.0.0.1", echo.port).start()
    yield echo, proxy
    await proxy.close()
    assert echo.server is not None
    echo.server.close()
    await echo.server.wait_closed()


async def connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def roundtrip(proxy: FaultProxy, payload: bytes = b"ping") -> bytes:
    reader, writer = await connect(proxy)
    try:
        writer.write(payload)
        return await asyncio.wait_for(reader.readexactly(len(payload)), 5)
    finally:
        writer.close()


async def test_pass_forwards_both_ways(link: tuple[Echo, FaultProxy]) -> None:
    echo, proxy = link
    assert await roundtrip(proxy, b"hello") == b"hello"
    big = bytes(range(256)) * 2000  # several chunks, order kept
    assert await roundtrip(proxy, big) == big
    assert echo.connections == 2


async def test_delay_holds_each_direction(link: tuple[Echo, FaultProxy]) -> None:
    _, proxy = link
    loop = asyncio.get_running_loop()
    proxy.set_mode(DELAY, delay_ms=150)
    started = loop.time()
    assert await roundtrip(proxy) == b"ping"
    assert loop.time() - started >= 0.29  # 150 ms there and 150 ms back
    proxy.set_mode(PASS)
    started = loop.time()
    assert await roundtrip(proxy) == b"ping"
    assert loop.time() - started < 0.25


async def test_drop_holds_bytes_and_keeps_the_socket(link: tuple[Echo, FaultProxy]) -> None:
    echo, proxy = link
    reader, writer = await connect(proxy)
    writer.write(b"a")
    assert await asyncio.wait_for(reader.readexactly(1), 5) == b"a"
    echo.got.clear()
    proxy.set_mode(DROP)
    writer.write(b"b")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(echo.got.wait(), QUIET)
    # A new connection during the partition is accepted but not connected onward.
    late_reader, late_writer = await connect(proxy)
    late_writer.write(b"c")
    await proxy.wait_accepted(2)
    assert echo.connections == 1
    proxy.set_mode(PASS)
    assert await asyncio.wait_for(reader.readexactly(1), 5) == b"b"
    assert await asyncio.wait_for(late_reader.readexactly(1), 5) == b"c"
    assert echo.connections == 2
    writer.close()
    late_writer.close()


async def test_reset_sends_rst_to_old_and_new_connections(link: tuple[Echo, FaultProxy]) -> None:
    _, proxy = link
    reader, writer = await connect(proxy)
    writer.write(b"x")
    assert await asyncio.wait_for(reader.readexactly(1), 5) == b"x"
    proxy.set_mode(RESET)
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(reader.read(1), 5)
    writer.close()
    new_reader, new_writer = await connect(proxy)
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(new_reader.read(1), 5)
    new_writer.close()
    proxy.set_mode(PASS)
    assert await roundtrip(proxy) == b"ping"


async def test_blackhole_accepts_and_never_answers(link: tuple[Echo, FaultProxy]) -> None:
    echo, proxy = link
    old_reader, old_writer = await connect(proxy)
    old_writer.write(b"1")
    assert await asyncio.wait_for(old_reader.readexactly(1), 5) == b"1"
    echo.got.clear()
    proxy.set_mode(BLACKHOLE)
    old_writer.write(b"2")
    reader, writer = await connect(proxy)
    writer.write(b"3")
    await proxy.wait_accepted(2)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), QUIET)
    assert not echo.got.is_set()
    assert echo.connections == 1
    proxy.set_mode(PASS)
    # The black-holed streams stay dead (their bytes are gone); new connections pass.
    assert await roundtrip(proxy) == b"ping"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(old_reader.read(1), QUIET)
    assert bytes(echo.received) == b"1ping"
    writer.close()
    old_writer.close()


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        FaultProxy("127.0.0.1", 1).set_mode("cut")
