"""The transport sends each connection's answers with one write per read or loop turn.

A ``KafkaConnection`` is driven directly (``data_received``) over a transport that records
its writes, with handlers answering at once or through a ``Pending`` completed by the test,
so the number of writes, their content and their order can be asserted exactly.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

from coordinator.apis import dispatcher
from coordinator.server.handler import (
    ClientInfo,
    Deferred,
    HandlerResult,
    Pending,
)
from coordinator.server.listener import KafkaServer, listen
from coordinator.server.transport import KafkaConnection
from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import heartbeat

V = 4


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class Later:
    """Heartbeat handler: group ``later-N`` is answered through a Pending the test holds."""

    def __init__(self) -> None:
        self.pending: dict[str, Pending] = {}

    def __call__(self, header: RequestHeader, req: Any, client: ClientInfo) -> HandlerResult:
        if req.group_id.startswith("later"):
            p = self.pending[req.group_id] = Pending()
            return Deferred(p)
        return heartbeat.Response(error_code=0)


@pytest.fixture
async def conn() -> AsyncIterator[tuple[KafkaConnection, RecordingTransport, Later]]:
    later = Later()
    listening = await listen("127.0.0.1", 0)
    server = KafkaServer(
        listening, dispatcher({heartbeat.API_KEY: later}), max_request_size=1 << 20
    )
    c = KafkaConnection(server.context(listening))
    t = RecordingTransport()
    c.connection_made(t)
    yield c, t, later
    c.connection_lost(None)
    for s in listening.sockets:
        s.close()


def beat(cid: int, group: str) -> bytes:
    header = RequestHeader(heartbeat.API_KEY, V, cid, "coalesce")
    return encode_request(header, heartbeat.Request(group_id=group))


def frames(data: bytes) -> list[int]:
    """The correlation ids of the response frames in ``data``, in order."""
    out = []
    pos = 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos)[0]
        cid, _ = decode_response(heartbeat.API_KEY, V, data[pos + 4 : pos + 4 + size])
        out.append(cid)
        pos += 4 + size
    return out


def answer() -> heartbeat.Response:
    return heartbeat.Response(error_code=0)


async def test_answers_completed_together_go_out_in_one_write_in_request_order(
    conn: tuple[KafkaConnection, RecordingTransport, Later],
) -> None:
    c, t, later = conn
    c.data_received(beat(1, "later-1") + beat(2, "later-2") + beat(3, "now") + beat(4, "later-4"))
    assert t.writes == []  # "now" waits behind later-1
    # A round of commits made durable: every answer completed in one go, out of order.
    later.pending["later-4"].set_result(answer())
    later.pending["later-2"].set_result(answer())
    later.pending["later-1"].set_result(answer())
    assert t.writes == []  # queued: sent once at the end of the loop turn
    await asyncio.sleep(0)
    assert len(t.writes) == 1
    assert frames(t.writes[0]) == [1, 2, 3, 4]


async def test_a_read_after_a_completion_sends_both_in_one_write_in_order(
    conn: tuple[KafkaConnection, RecordingTransport, Later],
) -> None:
    c, t, later = conn
    c.data_received(beat(1, "later-1"))
    later.pending["later-1"].set_result(answer())  # queued for the end of the turn
    c.data_received(beat(2, "now") + beat(3, "now"))  # same turn: the read sends all
    assert len(t.writes) == 1 and frames(t.writes[0]) == [1, 2, 3]
    await asyncio.sleep(0)
    assert len(t.writes) == 1  # the turn's scheduled send found nothing left


async def test_immediate_answers_of_one_read_are_one_write(
    conn: tuple[KafkaConnection, RecordingTransport, Later],
) -> None:
    c, t, _ = conn
    c.data_received(b"".join(beat(i, "now") for i in range(1, 11)))
    assert len(t.writes) == 1 and frames(t.writes[0]) == list(range(1, 11))


async def test_answers_completed_in_different_turns_keep_the_order(
    conn: tuple[KafkaConnection, RecordingTransport, Later],
) -> None:
    c, t, later = conn
    c.data_received(beat(1, "later-1") + beat(2, "later-2") + beat(3, "now"))
    later.pending["later-2"].set_result(answer())
    await asyncio.sleep(0)
    assert t.writes == []  # 2 is ready, but 1 is not: nothing may overtake it
    later.pending["later-1"].set_result(answer())
    c.data_received(beat(4, "later-4"))
    c.data_received(beat(5, "now"))
    await asyncio.sleep(0)
    later.pending["later-4"].set_result(answer())
    await asyncio.sleep(0)
    assert [cid for w in t.writes for cid in frames(w)] == [1, 2, 3, 4, 5]


async def test_nothing_is_written_after_the_connection_is_lost(
    conn: tuple[KafkaConnection, RecordingTransport, Later],
) -> None:
    c, t, later = conn
    c.data_received(beat(1, "later-1"))
    p = later.pending["later-1"]
    c.connection_lost(None)
    assert p.cancelled()  # nobody will read the answer
    await asyncio.sleep(0)
    assert t.writes == []
