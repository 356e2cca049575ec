"""The handler contract, end to end through a real listener and transport.

A ``KafkaServer`` runs in-process with a dispatch table of small handlers that return each
kind of result the contract allows (a response, a ``Deferred``, an ``Outcome``); a plain
asyncio socket client pipelines requests and reads the frames back.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from coordinator.apis import dispatcher
from coordinator.server.handler import (
    CLOSE_CONNECTION,
    NO_RESPONSE,
    Answer,
    ClientInfo,
    Deferred,
    HandlerResult,
)
from coordinator.server.listener import KafkaServer, listen
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import api_versions, heartbeat, sync_group

HB_VERSION = 4


@dataclass
class Handlers:
    """Heartbeat answers by group id: ``now`` at once, ``later-N`` deferred, ``silent``
    with NO_RESPONSE, ``close`` with CLOSE_CONNECTION."""

    deferred: dict[str, asyncio.Future[Answer]] = field(default_factory=dict)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def heartbeat(self, header: RequestHeader, req: Any, client: ClientInfo) -> HandlerResult:
        gid = req.group_id
        if gid.startswith("later"):
            fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
            self.deferred[gid] = fut
            self.arrived.set()
            return Deferred(fut)
        if gid == "silent":
            return NO_RESPONSE
        if gid == "close":
            return CLOSE_CONNECTION
        return heartbeat.Response(error_code=0)


@pytest.fixture
async def served() -> AsyncIterator[tuple[Handlers, int]]:
    handlers = Handlers()
    listening = await listen("127.0.0.1", 0)
    server = KafkaServer(
        listening,
        dispatcher({heartbeat.API_KEY: handlers.heartbeat}),
        max_request_size=1 << 20,
    )
    server.start()
    yield handlers, server.port
    await server.stop(grace_s=0.5)


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.cid = 0

    @classmethod
    async def to(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def beat(self, group: str) -> int:
        self.cid += 1
        header = RequestHeader(heartbeat.API_KEY, HB_VERSION, self.cid, "contract")
        self.writer.write(encode_request(header, heartbeat.Request(group_id=group)))
        return self.cid

    async def read(self, api_key: int = heartbeat.API_KEY, version: int = HB_VERSION) -> Any:
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        return decode_response(api_key, version, await self.reader.readexactly(size))

    async def at_eof(self) -> bool:
        return await asyncio.wait_for(self.reader.read(1), 5) == b""


async def wait_for(cond: Callable[[], bool], event: asyncio.Event) -> None:
    async with asyncio.timeout(5):
        while not cond():
            event.clear()
            await event.wait()


async def test_every_kind_of_result_is_answered_in_request_order(
    served: tuple[Handlers, int],
) -> None:
    handlers, port = served
    c = await Client.to(port)
    later = c.beat("later-1")
    now = c.beat("now")
    c.beat("silent")  # no answer at all
    last = c.beat("now")
    await wait_for(lambda: "later-1" in handlers.deferred, handlers.arrived)
    handlers.deferred["later-1"].set_result(
        heartbeat.Response(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
    )
    got = [await c.read() for _ in range(3)]
    assert [cid for cid, _ in got] == [later, now, last]
    assert [r.error_code for _, r in got] == [ErrorCode.REBALANCE_IN_PROGRESS, 0, 0]
    c.writer.close()


@pytest.mark.parametrize("how", ["at once", "deferred"])
async def test_close_connection_goes_after_the_earlier_answers(
    served: tuple[Handlers, int], how: str
) -> None:
    handlers, port = served
    c = await Client.to(port)
    first = c.beat("later-1")
    if how == "at once":
        c.beat("close")
    else:
        c.beat("later-2")
        c.beat("now")  # read before the close is known, never answered
    await wait_for(
        lambda: len(handlers.deferred) == (1 if how == "at once" else 2), handlers.arrived
    )
    if how == "deferred":
        handlers.deferred["later-2"].set_result(CLOSE_CONNECTION)
    handlers.deferred["later-1"].set_result(heartbeat.Response(error_code=0))
    cid, resp = await c.read()
    assert (cid, resp.error_code) == (first, 0)
    assert await c.at_eof()


async def test_a_closed_connection_cancels_its_deferred_answers(
    served: tuple[Handlers, int],
) -> None:
    handlers, port = served
    c = await Client.to(port)
    c.beat("later-1")
    await wait_for(lambda: "later-1" in handlers.deferred, handlers.arrived)
    fut = handlers.deferred["later-1"]
    cancelled = asyncio.Event()
    fut.add_done_callback(lambda _: cancelled.set())
    c.writer.close()
    await asyncio.wait_for(cancelled.wait(), 5)
    assert fut.cancelled()


async def test_a_coroutine_deferred_gives_its_answer() -> None:
    async def answer_later() -> Answer:
        await asyncio.sleep(0)
        return heartbeat.Response(error_code=0)

    d = Deferred.task(answer_later())
    answer = await d
    assert isinstance(answer, heartbeat.Response) and answer.error_code == 0


def test_dispatch_advertises_exactly_the_apis_with_a_handler() -> None:
    def answer(header: RequestHeader, req: Any, client: ClientInfo) -> HandlerResult:
        return heartbeat.Response()

    dispatch = dispatcher({heartbeat.API_KEY: answer})
    assert set(dispatch.supported) == {heartbeat.API_KEY, api_versions.API_KEY}
    with pytest.raises(ValueError, match="two handlers"):
        dispatcher({heartbeat.API_KEY: answer}, {heartbeat.API_KEY: answer})
    with pytest.raises(ValueError, match="two handlers"):
        dispatcher({api_versions.API_KEY: answer})
    assert sync_group.API_KEY not in dispatch.supported


def test_dispatch_routes_cover_exactly_the_supported_versions() -> None:
    """The transport's per-version routes: one per supported version of each API, none
    outside the range."""

    def plain(header: RequestHeader, req: Any, client: ClientInfo) -> HandlerResult:
        return heartbeat.Response()

    dispatch = dispatcher({heartbeat.API_KEY: plain})
    routes = dispatch.routes
    lo, hi = dispatch.supported[heartbeat.API_KEY]
    assert all(routes[heartbeat.API_KEY << 16 | v] is plain for v in range(lo, hi + 1))
    assert (heartbeat.API_KEY << 16 | (hi + 1)) not in routes
    assert routes[api_versions.API_KEY << 16] == dispatch.api_versions


async def test_api_versions_lists_the_dispatch_table(served: tuple[Handlers, int]) -> None:
    _, port = served
    c = await Client.to(port)
    header = RequestHeader(api_versions.API_KEY, 3, 7, "contract")
    c.writer.write(
        encode_request(
            header, api_versions.Request(client_software_name="t", client_software_version="1")
        )
    )
    cid, resp = await c.read(api_versions.API_KEY, 3)
    assert cid == 7 and resp.error_code == 0
    assert sorted(k.api_key for k in resp.api_keys) == sorted(
        [api_versions.API_KEY, heartbeat.API_KEY]
    )
    c.writer.close()
