"""connections.max.idle.ms on a real listener: a quiet connection is closed, a busy one and
one awaiting an answer are not (Kafka's Selector expires idle connections the same way).

A ``KafkaServer`` runs in-process with one PLAINTEXT listener and two handlers: Heartbeat
answers at once, JoinGroup answers only when the test says so (a request in flight).
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from coordinator.apis import dispatcher
from coordinator.server.handler import ClientInfo, Deferred
from coordinator.server.listener import KafkaServer, listen
from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import heartbeat, join_group

IDLE_MS = 300


class Served:
    def __init__(self) -> None:
        self.server: KafkaServer | None = None
        self.pending: list[asyncio.Future[Any]] = []

    def heartbeat(self, header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        return heartbeat.Response(error_code=0)

    def join_group(self, header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append(fut)
        return Deferred(fut)


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    s = Served()
    listening = await listen("127.0.0.1", 0, idle_ms=IDLE_MS)
    dispatch = dispatcher({heartbeat.API_KEY: s.heartbeat, join_group.API_KEY: s.join_group})
    s.server = KafkaServer(listening, dispatch, max_request_size=1 << 20)
    s.server.start()
    yield s
    await s.server.stop(grace_s=0.1)


async def connect(s: Served) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert s.server is not None
    return await asyncio.open_connection("127.0.0.1", s.server.port)


def send(w: asyncio.StreamWriter, key: int, version: int, body: Any, cid: int = 1) -> None:
    w.write(encode_request(RequestHeader(key, version, cid, "c"), body))


async def answer(r: asyncio.StreamReader, key: int, version: int) -> Any:
    size = struct.unpack(">i", await r.readexactly(4))[0]
    return decode_response(key, version, await r.readexactly(size))[1]


async def closed_within(r: asyncio.StreamReader, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            return await r.read(1) == b""
    except TimeoutError:
        return False


HB = heartbeat.Request(group_id="g", generation_id=1, member_id="m")


async def test_a_quiet_connection_is_closed_after_the_idle_limit(served: Served) -> None:
    r, w = await connect(served)
    send(w, heartbeat.API_KEY, 4, HB)
    assert (await answer(r, heartbeat.API_KEY, 4)).error_code == 0
    started = time.monotonic()
    assert await closed_within(r, IDLE_MS / 1000 * 5)
    waited_ms = (time.monotonic() - started) * 1000
    assert IDLE_MS * 0.9 <= waited_ms < IDLE_MS * 2, waited_ms
    w.close()


async def test_a_busy_connection_stays_open(served: Served) -> None:
    r, w = await connect(served)
    deadline = time.monotonic() + IDLE_MS / 1000 * 4
    cid = 0
    while time.monotonic() < deadline:  # a request every third of the idle limit
        cid += 1
        send(w, heartbeat.API_KEY, 4, HB, cid)
        assert (await answer(r, heartbeat.API_KEY, 4)).error_code == 0
        assert not await closed_within(r, IDLE_MS / 1000 / 3)
    w.close()


async def test_a_connection_awaiting_an_answer_is_not_idle(served: Served) -> None:
    r, w = await connect(served)
    req = join_group.Request(
        group_id="g",
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id="",
        protocol_type="consumer",
        protocols=[],
    )
    send(w, join_group.API_KEY, 5, req)
    # Three idle limits pass with the request in flight: the connection stays.
    assert not await closed_within(r, IDLE_MS / 1000 * 3)
    served.pending[0].set_result(join_group.Response(error_code=0, member_id="m"))
    assert (await answer(r, join_group.API_KEY, 5)).member_id == "m"
    # Once answered it is quiet, and the limit counts from the answer.
    assert await closed_within(r, IDLE_MS / 1000 * 5)
    w.close()
