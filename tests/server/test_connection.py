"""The connection's rules, byte for byte, with no socket and no event loop.

A ``Connection`` (coordinator/server/connection.py) is fed bytes as ``data_received`` would
be, writes to a ``Wire`` that records what it sent and how it ended (open, closed after
sending, aborted), and schedules on ``Turns``, where the test ends the loop turn or fires
the timers itself. ``CASES`` is a golden table: the reads a client makes, the exact bytes
answered, and the state the connection is left in. The tests below it state the ordering,
backpressure, SASL and idleness rules one each.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import struct
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from coordinator.apis import dispatcher
from coordinator.security import KafkaPrincipal
from coordinator.security.jaas import parse_single
from coordinator.security.sasl import SaslListener
from coordinator.security.sasl.plain import PlainMechanism
from coordinator.server.connection import MAX_IN_FLIGHT, Connection, ServerContext
from coordinator.server.handler import (
    CLOSE_CONNECTION,
    NO_RESPONSE,
    ClientInfo,
    Deferred,
    Handler,
    HandlerResult,
    Pending,
)
from coordinator.server.memory import RequestQueue
from coordinator.server.transport import KafkaConnection
from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import heartbeat, metadata, sasl_authenticate, sasl_handshake

V = 4  # Heartbeat v4: flexible headers, the shape most clients send today
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
DELAY_MS = 100  # connection.failed.authentication.delay.ms


class Wire:
    """The socket as the connection sees it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.state = "open"  # "closed" (after sending what was written) or "aborted"
        self.reading = True

    def write(self, data: bytes) -> None:
        assert self.state == "open", "written after the connection ended"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.state = "closed"

    def abort(self) -> None:
        self.state = "aborted"

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    @property
    def sent(self) -> bytes:
        return b"".join(self.writes)


class Timer:
    def __init__(self, delay: float, fire: Callable[[], object]) -> None:
        self.delay, self.fire, self.cancelled = delay, fire, False

    def cancel(self) -> None:
        self.cancelled = True


class Turns:
    """The event loop as the connection sees it: nothing runs until the test says so."""

    def __init__(self) -> None:
        self.soon: list[Callable[[], object]] = []
        self.timers: list[Timer] = []

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        self.soon.append(functools.partial(callback, *args))

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timer:
        timer = Timer(delay, functools.partial(callback, *args))
        self.timers.append(timer)
        return timer

    def end_turn(self) -> None:
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()

    def fire_timers(self) -> None:
        timers, self.timers = self.timers, []
        for timer in timers:
            if not timer.cancelled:
                timer.fire()


class Beats:
    """A Heartbeat handler: group ``later-N`` is answered through a Pending the test holds,
    ``close`` and ``silent`` with the two Outcomes, ``boom`` raises; the rest at once."""

    def __init__(self) -> None:
        self.pending: dict[str, Pending] = {}
        self.clients: list[ClientInfo] = []

    def __call__(self, header: RequestHeader, req: Any, client: ClientInfo) -> HandlerResult:
        self.clients.append(client)
        group = req.group_id
        if group.startswith("later"):
            p = self.pending[group] = Pending()
            return Deferred(p)
        if group == "close":
            return CLOSE_CONNECTION
        if group == "silent":
            return NO_RESPONSE
        if group == "boom":
            raise RuntimeError("handler bug")
        return heartbeat.Response(error_code=0)


def connect(
    handlers: Mapping[int, Handler],
    *,
    sasl: SaslListener | None = None,
    queue: RequestQueue | None = None,
    idle_ms: int = 600000,
    kind: type[Connection] = Connection,
) -> tuple[Connection, Wire, Turns]:
    turns = Turns()
    protocol = "PLAINTEXT" if sasl is None else "SASL_PLAINTEXT"
    ctx = ServerContext(
        listener=protocol,
        security_protocol=protocol,
        tls=False,
        principal_mapper=None,
        idle_ms=idle_ms,
        sasl=sasl,
        loop=turns,
        queue=queue or RequestQueue(500, -1),
        dispatch=dispatcher(handlers),
        max_request_size=1 << 20,
        connections=set(),
        conn_ids=itertools.count(1),
        on_request=None,
        on_connection=lambda delta: None,
        on_closed=lambda: None,
    )
    conn = kind(ctx)
    wire = Wire()
    conn.transport = wire  # what the asyncio protocol's connection_made attaches
    return conn, wire, turns


def beat(cid: int, group: str = "g") -> bytes:
    header = RequestHeader(heartbeat.API_KEY, V, cid, "c")
    return encode_request(header, heartbeat.Request(group_id=group, generation_id=1, member_id="m"))


def answered(data: bytes) -> list[tuple[int, int]]:
    """(correlation id, error code) of each Heartbeat response frame in ``data``."""
    out = []
    pos = 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos)[0]
        cid, body = decode_response(heartbeat.API_KEY, V, data[pos + 4 : pos + 4 + size])
        out.append((cid, body.error_code))
        pos += 4 + size
    return out


# Heartbeat v4, correlation id 7, client "c", group "g", generation 1, member "m".
HB7 = bytes.fromhex("00000016000c00040000000700016300026700000001026d0000")
assert beat(7) == HB7
# Its answer: size, correlation id, header tags, throttle_time_ms 0, error_code 0, tags.
OK7 = "0000000c000000070000000000000000"
OK8 = "0000000c000000080000000000000000"
# ApiVersions v99, correlation id 9, client "c": a version no broker knows.
AV99 = bytes.fromhex("0000000b001200630000000900016300")
# Kafka's answer to it: v0, UNSUPPORTED_VERSION (35), and the ApiVersions range (0-4).
AV_UNSUPPORTED = "0000001000000009002300000001001200000004"
METADATA = encode_request(RequestHeader(metadata.API_KEY, 12, 3, "c"), metadata.Request())

CASES: list[tuple[str, list[bytes], str, str]] = [
    ("a heartbeat is answered", [HB7], OK7, "open"),
    ("a frame split over three reads is answered once whole", [HB7[:3], HB7[3:9], HB7[9:]], OK7, "open"),
    ("two frames in one read are both answered", [HB7 + beat(8)], OK7 + OK8, "open"),
    ("an ApiVersions at an unknown version is answered v0 UNSUPPORTED_VERSION", [AV99], AV_UNSUPPORTED, "open"),
    ("a negative size closes the connection unanswered", [b"\xff\xff\xff\xff"], "", "aborted"),
    ("a size over socket.request.max.bytes closes it unanswered", [struct.pack(">i", (1 << 20) + 1)], "", "aborted"),
    ("an API without a handler closes it unanswered", [METADATA], "", "aborted"),
    ("a Heartbeat at a version Kafka never had closes it unanswered", [HB7[:6] + b"\x00\x63" + HB7[8:]], "", "aborted"),
    ("a body that does not parse closes it unanswered", [struct.pack(">i", 12) + HB7[4:16]], "", "aborted"),
    ("bad input aborts, the answers of its read unsent", [HB7 + b"\xff\xff\xff\xff"], "", "aborted"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("reads", "sent", "state"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_golden(reads: list[bytes], sent: str, state: str) -> None:
    conn, wire, _ = connect({heartbeat.API_KEY: Beats()})
    for data in reads:
        conn.data_received(data)
    assert (wire.sent.hex(), wire.state) == (sent, state)


def test_answers_of_one_read_go_out_in_one_write() -> None:
    conn, wire, _ = connect({heartbeat.API_KEY: Beats()})
    conn.data_received(b"".join(beat(cid) for cid in range(1, 6)))
    assert len(wire.writes) == 1
    assert answered(wire.sent) == [(cid, 0) for cid in range(1, 6)]


def test_an_answer_ready_first_waits_for_the_earlier_request_still_owed() -> None:
    beats = Beats()
    conn, wire, turns = connect({heartbeat.API_KEY: beats})
    conn.data_received(beat(1, "later-1") + beat(2) + beat(3))
    assert wire.writes == []
    beats.pending["later-1"].set_result(heartbeat.Response(error_code=0))
    assert wire.writes == []  # a completion outside a read is sent at the end of the turn
    turns.end_turn()
    assert len(wire.writes) == 1
    assert answered(wire.sent) == [(1, 0), (2, 0), (3, 0)]


def test_answers_completed_in_one_turn_go_out_together_in_request_order() -> None:
    beats = Beats()
    conn, wire, turns = connect({heartbeat.API_KEY: beats})
    conn.data_received(b"".join(beat(cid, f"later-{cid}") for cid in (1, 2, 3)))
    for cid in (3, 1, 2):
        beats.pending[f"later-{cid}"].set_result(heartbeat.Response(error_code=cid))
    turns.end_turn()
    assert wire.writes and len(wire.writes) == 1
    assert answered(wire.sent) == [(1, 1), (2, 2), (3, 3)]


def test_close_connection_goes_after_the_answers_still_owed() -> None:
    beats = Beats()
    conn, wire, _ = connect({heartbeat.API_KEY: beats})
    conn.data_received(beat(1, "later-1") + beat(2, "close"))
    assert wire.state == "open"
    beats.pending["later-1"].set_result(heartbeat.Response(error_code=0))
    assert (answered(wire.sent), wire.state) == ([(1, 0)], "closed")


def test_no_response_is_skipped_in_the_order() -> None:
    conn, wire, _ = connect({heartbeat.API_KEY: Beats()})
    conn.data_received(beat(1) + beat(2, "silent") + beat(3))
    assert answered(wire.sent) == [(1, 0), (3, 0)]


def test_a_handler_that_raises_closes_the_connection() -> None:
    conn, wire, _ = connect({heartbeat.API_KEY: Beats()})
    conn.data_received(beat(1) + beat(2, "boom") + beat(3))
    assert (wire.sent, wire.state) == (b"", "aborted")


def test_a_deferred_answer_that_fails_closes_the_connection() -> None:
    beats = Beats()
    conn, wire, _ = connect({heartbeat.API_KEY: beats})
    conn.data_received(beat(1, "later-1"))
    beats.pending["later-1"].set_exception(RuntimeError("handler bug"))
    assert wire.state == "aborted"


def test_a_cancelled_deferred_answer_gives_its_memory_back_and_answers_nothing() -> None:
    beats = Beats()
    queue = RequestQueue(500, -1)
    conn, wire, turns = connect({heartbeat.API_KEY: beats}, queue=queue)
    conn.data_received(beat(1, "later-1"))
    assert queue.requests == 1
    beats.pending["later-1"].cancel()
    turns.end_turn()
    assert (queue.requests, queue.small, wire.sent, wire.state) == (0, 0, b"", "open")


def test_reading_pauses_while_too_many_answers_are_owed() -> None:
    beats = Beats()
    queue = RequestQueue(2 * MAX_IN_FLIGHT, -1)  # room for them all: only the count pauses
    conn, wire, turns = connect({heartbeat.API_KEY: beats}, queue=queue)
    conn.data_received(b"".join(beat(cid, f"later-{cid}") for cid in range(MAX_IN_FLIGHT)))
    assert not wire.reading
    beats.pending["later-0"].set_result(heartbeat.Response(error_code=0))
    assert wire.reading
    turns.end_turn()
    assert answered(wire.sent) == [(0, 0)]


def test_a_client_that_does_not_read_pauses_our_reading() -> None:
    conn, wire, _ = connect({heartbeat.API_KEY: Beats()})
    conn.pause_writing()
    assert not wire.reading
    conn.resume_writing()
    assert wire.reading


async def test_a_frame_the_request_memory_cannot_hold_waits_unread_until_memory_is_back() -> None:
    # The pool is full with another connection's frame: this one's next frame waits.
    queue = RequestQueue(500, 64)
    queue.take(64)
    conn, wire, _ = connect({heartbeat.API_KEY: Beats()}, queue=queue)
    conn.data_received(HB7)
    assert (wire.sent, wire.reading, conn.waiting) == (b"", False, True)
    queue.give_back(64)  # the queue offers the room at the end of the turn
    assert wire.sent == b""
    await asyncio.sleep(0)
    assert (wire.sent.hex(), wire.reading) == (OK7, True)


# -- SASL: the gate on a SASL listener


def plain_listener() -> SaslListener:
    return SaslListener(
        "SASL_PLAINTEXT",
        {"PLAIN": PlainMechanism.from_jaas(parse_single(JAAS))},
        reauth_ms={"PLAIN": 60000},
        failed_authentication_delay_ms=DELAY_MS,
    )


def handshake(cid: int) -> bytes:
    header = RequestHeader(sasl_handshake.API_KEY, 1, cid, "c")
    return encode_request(header, sasl_handshake.Request(mechanism="PLAIN"))


def authenticate(cid: int, password: str) -> bytes:
    header = RequestHeader(sasl_authenticate.API_KEY, 2, cid, "c")
    token = f"\0alice\0{password}".encode()
    return encode_request(header, sasl_authenticate.Request(auth_bytes=token))


def sasl_errors(data: bytes) -> list[int]:
    """The error codes of the SaslHandshake v1 and SaslAuthenticate v2 answers in ``data``."""
    codes = []
    pos = 0
    for api_key, version in ((sasl_handshake.API_KEY, 1), (sasl_authenticate.API_KEY, 2)):
        if pos >= len(data):
            break
        size = struct.unpack_from(">i", data, pos)[0]
        _, body = decode_response(api_key, version, data[pos + 4 : pos + 4 + size])
        codes.append(body.error_code)
        pos += 4 + size
    return codes


def test_a_request_before_authentication_closes_the_connection_unanswered() -> None:
    beats = Beats()
    conn, wire, _ = connect({heartbeat.API_KEY: beats}, sasl=plain_listener())
    conn.data_received(HB7)
    assert (wire.sent, wire.state, beats.clients) == (b"", "aborted", [])


def test_after_authenticating_requests_reach_handlers_as_the_principal() -> None:
    beats = Beats()
    conn, wire, turns = connect({heartbeat.API_KEY: beats}, sasl=plain_listener())
    conn.data_received(handshake(1) + authenticate(2, "alice-secret"))
    turns.end_turn()
    assert sasl_errors(wire.sent) == [0, 0]
    wire.writes.clear()
    conn.data_received(HB7)
    assert wire.sent.hex() == OK7
    assert beats.clients[-1].principal == KafkaPrincipal("User", "alice")


def test_a_failed_authentication_is_answered_after_the_delay_then_closed() -> None:
    conn, wire, turns = connect({heartbeat.API_KEY: Beats()}, sasl=plain_listener())
    conn.data_received(handshake(1) + authenticate(2, "wrong"))
    turns.end_turn()
    assert sasl_errors(wire.sent) == [0]  # the handshake; the failure waits
    assert not wire.reading
    conn.data_received(HB7)  # nothing more is read meanwhile
    assert [t.delay for t in turns.timers] == [DELAY_MS / 1000]
    turns.fire_timers()
    assert sasl_errors(wire.sent) == [0, 58]  # SASL_AUTHENTICATION_FAILED
    assert wire.state == "closed"


def test_a_frame_over_the_sasl_receive_size_fails_the_authentication() -> None:
    conn, wire, turns = connect({heartbeat.API_KEY: Beats()}, sasl=plain_listener())
    conn.data_received(struct.pack(">i", 524289))
    assert (wire.reading, wire.state) == (False, "open")
    turns.fire_timers()
    assert (wire.sent, wire.state) == (b"", "closed")


def test_a_request_after_the_session_lifetime_closes_the_connection() -> None:
    beats = Beats()
    conn, wire, turns = connect({heartbeat.API_KEY: beats}, sasl=plain_listener())
    now = [10**12]
    assert conn.sasl is not None
    conn.sasl.clock_ns = lambda: now[0]
    conn.data_received(handshake(1) + authenticate(2, "alice-secret"))
    turns.end_turn()
    wire.writes.clear()
    now[0] += 60_001 * 1_000_000  # connections.max.reauth.ms is 60 s
    conn.data_received(HB7)
    assert (wire.sent, wire.state, len(beats.clients)) == (b"", "aborted", 0)


def test_a_handshake_within_the_lifetime_reauthenticates_behind_the_answers_owed() -> None:
    beats = Beats()
    conn, wire, turns = connect({heartbeat.API_KEY: beats}, sasl=plain_listener())
    conn.data_received(handshake(1) + authenticate(2, "alice-secret"))
    turns.end_turn()
    wire.writes.clear()
    conn.data_received(beat(3, "later-3") + handshake(4))
    assert wire.writes == []  # the handshake's answer waits behind the heartbeat's
    beats.pending["later-3"].set_result(heartbeat.Response(error_code=0))
    turns.end_turn()
    size = struct.unpack_from(">i", wire.sent)[0]
    assert answered(wire.sent[: 4 + size]) == [(3, 0)]
    assert sasl_errors(wire.sent[4 + size :]) == [0]
    assert conn.authenticating


# -- the asyncio protocol's bookkeeping, still without a socket


def test_a_lost_connection_cancels_what_it_waits_for_and_gives_its_memory_back() -> None:
    beats = Beats()
    queue = RequestQueue(500, -1)
    conn, _, _ = connect({heartbeat.API_KEY: beats}, queue=queue, kind=KafkaConnection)
    assert isinstance(conn, KafkaConnection)
    conn.ctx.connections.add(conn)
    conn.data_received(beat(1, "later-1") + HB7[:10])  # one owed, one frame half read
    assert (queue.requests, queue.small) == (1, len(HB7) - 4 + len(beat(1, "later-1")) - 4)
    conn.connection_lost(None)
    assert beats.pending["later-1"].cancelled()
    assert (queue.requests, queue.small, conn.ctx.connections) == (0, 0, set())


# -- idleness


def test_a_quiet_connection_is_closed_after_connections_max_idle_ms() -> None:
    conn, wire, _ = connect({heartbeat.API_KEY: Beats()}, idle_ms=1000)
    start = conn.quiet_since
    conn.expire_if_idle(start + 0.5)
    assert wire.state == "open"
    conn.expire_if_idle(start + 1.5)
    assert wire.state == "aborted"


def test_a_read_restarts_the_idle_clock() -> None:
    conn, wire, _ = connect({heartbeat.API_KEY: Beats()}, idle_ms=1000)
    start = conn.quiet_since
    conn.data_received(HB7)
    conn.expire_if_idle(start + 0.9)  # the sweep sees the read: quiet from now
    conn.expire_if_idle(start + 1.5)
    assert wire.state == "open"
    conn.expire_if_idle(start + 2.0)
    assert wire.state == "aborted"


def test_a_connection_owed_an_answer_is_not_idle() -> None:
    beats = Beats()
    conn, wire, _ = connect({heartbeat.API_KEY: beats}, idle_ms=1000)
    conn.data_received(beat(1, "later-1"))
    conn.expire_if_idle(conn.quiet_since + 0.1)
    conn.expire_if_idle(conn.quiet_since + 10.0)
    assert wire.state == "open"
