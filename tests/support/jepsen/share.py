"""Workload: a share group, checked for redelivered acknowledgements, lost records, counts going back.

How this works. Stock clients (confluent-kafka / librdkafka: its idempotent producer and its
``ShareConsumer`` in explicit acknowledgement mode) against topic ``sq`` of ``PARTITIONS``
partitions and share group ``jsg`` (``share.auto.offset.reset=earliest``, set before any
consumer joins, so every produced record belongs to the group). Blocking client calls run
in the workload's own thread pool; the history is written from the event loop only.

- producers: ``send`` of a unique value ``"s<n>"`` (flushed at once), ok ``[partition,
  offset]``, ``info`` on any error (it may still have been appended).
- consumers: ``poll`` ok ``[[partition, offset, value, delivery_count], ...]``; then each
  record is accepted (most), released or rejected, and ``ack`` (``commit_sync``) is ok with
  ``[[partition, offset, type, answered], ...]``: ``answered`` true when the broker answered
  that partition's acknowledgements without error, false when it refused them (``info``
  when ``commit_sync`` raised: unknown). A consumer closes and a new one (new process)
  takes its place every ``rejoin_s`` s.
- ``final``: after the heal, one consumer polls and accepts everything until the group
  has settled every sent record or nothing came for a while (bounded).

``check_share`` (pure; planted histories in ``tests/jepsen/test_share_checker.py``):
- ``redelivered``: a record delivered by a poll invoked after an accept or reject of it was
  answered;
- ``count-back``: a poll invoked after another's answer saw a lower delivery count of the
  same record. An equal one is Kafka's behaviour: acquisitions are not persisted, so a
  record acquired when its share-partition is reloaded comes back with its persisted count
  plus one, one lower than the times it was handed out;
- ``lost``: a sent record never delivered;
- ``unsettled``: delivered, yet no accept or reject of it was ever sent and it was not
  archived at its delivery count limit by the end. An acknowledgement whose partition
  answered an error may still have been applied (the error may be the connection's, lost
  with a killed node), so it counts as tried;
- ``phantom`` (a delivered value no send wrote), ``inconsistent-offset`` (one offset
  delivered with two values).

The embedded node runs with 6 s share sessions: members are persisted, and those a restart
left behind hold their partitions until their session expires, as in Kafka; ``final`` waits
longer than that before it gives up on a record.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from support.jepsen.checks import Anomaly
from support.jepsen.history import OK, Op
from support.jepsen.txn import bootstrap
from support.jepsen.workload import Ctx, Thread, pace

TOPIC = "sq"
GROUP = "jsg"
PARTITIONS = 2
LIMIT = 5  # group.share.delivery.count.limit's default, Kafka's and kgc's
ACCEPT, RELEASE, REJECT = "accept", "release", "reject"
T = TypeVar("T")


class Share:
    name = "share"

    def __init__(self, producers: int = 2, consumers: int = 2, rejoin_s: float = 20.0) -> None:
        self.producers, self.consumers, self.rejoin_s = producers, consumers, rejoin_s
        self.counter = itertools.count(1)
        self.acked: set[str] = set()  # values whose send was acknowledged
        self.pool = ThreadPoolExecutor(32, thread_name_prefix="jsh")

    async def _blocking(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn)

    async def setup(self, ctx: Ctx) -> None:
        await ctx.create_topic(TOPIC, PARTITIONS)
        await self._blocking(partial(self._earliest, bootstrap(ctx)))

    @staticmethod
    def _earliest(servers: str) -> None:
        ck: Any = importlib.import_module("confluent_kafka.admin")
        resource_type = ck.ResourceType
        AdminClient, AlterConfigOpType = ck.AdminClient, ck.AlterConfigOpType
        ConfigEntry, ConfigResource = ck.ConfigEntry, ck.ConfigResource

        admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
        entry = ConfigEntry(
            "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
        )
        resource = ConfigResource(resource_type.GROUP, GROUP, incremental_configs=[entry])
        for fut in admin.incremental_alter_configs([resource]).values():
            fut.result(timeout=30)

    async def run(self, ctx: Ctx) -> None:
        stride = self.producers + self.consumers
        try:
            await asyncio.gather(
                *(self._producer(ctx, Thread(i, stride)) for i in range(self.producers)),
                *(
                    self._consumer(ctx, Thread(self.producers + i, stride))
                    for i in range(self.consumers)
                ),
            )
        except BaseException:
            self.pool.shutdown(wait=False, cancel_futures=True)
            raise

    # -- producers

    @staticmethod
    def _send(producer: Any, value: str) -> list[int]:
        got: list[Any] = []
        producer.produce(TOPIC, value=value.encode(), on_delivery=lambda e, m: got.append((e, m)))
        producer.flush(8)
        if not got or got[0][0] is not None:
            raise RuntimeError(str(got[0][0]) if got else "not delivered in time")
        m = got[0][1]
        return [m.partition(), m.offset()]

    async def _producer(self, ctx: Ctx, t: Thread) -> None:
        from confluent_kafka import Producer

        config = {
            "bootstrap.servers": bootstrap(ctx),
            "enable.idempotence": True,
            "message.timeout.ms": 6000,
            "linger.ms": 1,
            "log_level": 0,
        }
        producer = Producer(config)
        while ctx.running():
            value = f"s{next(self.counter)}"
            ctx.history.invoke(t.process, "send", None, value)
            try:
                where = await self._blocking(partial(self._send, producer, value))
                ctx.history.ok(t.process, where)
                self.acked.add(value)
            except Exception as exc:
                ctx.history.info(t.process, {"error": f"{type(exc).__name__}: {exc}"})
                t.retire()
                producer = Producer(config)  # its queue may still hold the value: a new one
            await pace(ctx, 0.03)

    # -- consumers

    @staticmethod
    def _new_consumer(servers: str) -> Any:
        from confluent_kafka import ShareConsumer

        c = ShareConsumer(
            {
                "bootstrap.servers": servers,
                "group.id": GROUP,
                "share.acknowledgement.mode": "explicit",
                "fetch.wait.max.ms": 200,
                "socket.timeout.ms": 5000,
                "log_level": 0,
            }
        )
        c.subscribe([TOPIC])
        return c

    @staticmethod
    def _poll(c: Any, timeout: float) -> list[Any]:
        return [m for m in c.poll(timeout) or [] if m.error() is None]

    @staticmethod
    def _ack(c: Any, msgs: list[Any], types: list[str]) -> list[list[Any]]:
        from confluent_kafka import AcknowledgeType

        kinds = {
            ACCEPT: AcknowledgeType.ACCEPT,
            RELEASE: AcknowledgeType.RELEASE,
            REJECT: AcknowledgeType.REJECT,
        }
        for m, kind in zip(msgs, types, strict=True):
            c.acknowledge(m, kinds[kind])
        result = c.commit_sync(5)
        refused = {tp.partition for tp, err in (result or {}).items() if err is not None}
        return [
            [m.partition(), m.offset(), kind, m.partition() not in refused]
            for m, kind in zip(msgs, types, strict=True)
        ]

    def _types(self, ctx: Ctx, n: int, final: bool) -> list[str]:
        if final:
            return [ACCEPT] * n
        out = []
        for _ in range(n):
            r = ctx.rng.random()
            out.append(ACCEPT if r < 0.85 else RELEASE if r < 0.95 else REJECT)
        return out

    async def _session(self, ctx: Ctx, t: Thread, until: Callable[[], bool], final: bool) -> None:
        """One consumer: poll, acknowledge, commit, until ``until()``; then close."""
        c = await self._blocking(partial(self._new_consumer, bootstrap(ctx)))
        try:
            while not until():
                ctx.history.invoke(t.process, "poll", None)
                try:
                    msgs = await self._blocking(partial(self._poll, c, 0.5))
                except Exception as exc:
                    ctx.history.fail(t.process, {"error": f"{type(exc).__name__}: {exc}"})
                    await pace(ctx, 0.2)
                    continue
                got = [
                    [m.partition(), m.offset(), m.value().decode(), m.delivery_count()]
                    for m in msgs
                ]
                ctx.history.ok(t.process, got)
                if not msgs:
                    continue
                types = self._types(ctx, len(msgs), final)
                ctx.history.invoke(
                    t.process,
                    "ack",
                    None,
                    [[g[0], g[1], k] for g, k in zip(got, types, strict=True)],
                )
                try:
                    ctx.history.ok(
                        t.process, await self._blocking(partial(self._ack, c, msgs, types))
                    )
                except Exception as exc:
                    ctx.history.info(t.process, {"error": f"{type(exc).__name__}: {exc}"})
                    t.retire()
                    return  # a consumer whose acknowledgements are unknown starts over
        finally:
            with contextlib.suppress(Exception):
                await self._blocking(partial(c.close))

    async def _consumer(self, ctx: Ctx, t: Thread) -> None:
        while ctx.running():
            rejoin = time.monotonic() + self.rejoin_s * (0.5 + ctx.rng.random())

            def until(rejoin: float = rejoin) -> bool:
                return not ctx.running() or time.monotonic() > rejoin

            await self._session(ctx, t, until, False)
            t.retire()

    async def final(self, ctx: Ctx, timeout: float = 60.0) -> None:
        sent = set(self.acked)
        settled: set[str] = set()
        now = time.monotonic()
        state: dict[str, Any] = {"quiet": now, "seen": len(ctx.history.events)}
        deadline = now + timeout

        def done() -> bool:
            events = ctx.history.events
            for e in events[state["seen"] :]:
                if e.f == "poll" and e.kind == OK and e.value:
                    state["quiet"] = time.monotonic()
                    settled.update(v for _, _, v, _ in e.value)
            state["seen"] = len(events)
            now = time.monotonic()
            return now > deadline or now - state["quiet"] > (3.0 if sent <= settled else 10.0)

        try:
            await self._session(ctx, Thread(10**6, 1), done, True)
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def check(self, ops: list[Op]) -> dict[str, Any]:
        found = check_share(ops)
        return {
            "ops": sum(1 for o in ops if o.f in ("send", "poll", "ack")),
            "anomalies": sorted({a.kind for a in found}),
            "detail": [f"{a.kind}: {a.detail}" for a in found[:50]],
        }


def check_share(ops: list[Op], limit: int = LIMIT) -> list[Anomaly]:
    """The anomalies of a share-group history (see the module's docstring)."""
    found: list[Anomaly] = []
    sent: dict[tuple[int, int], str] = {}
    values: set[str] = set()
    for op in ops:
        if op.f == "send":
            values.add(op.invoke_value)
            if op.status == OK:
                sent[(op.value[0], op.value[1])] = op.invoke_value
    terminal: dict[tuple[int, int], Op] = {}  # the first answered accept / reject
    tried: set[tuple[int, int]] = set()  # an accept / reject sent, maybe applied
    for op in ops:
        if op.f == "ack":
            tried.update((p, o) for p, o, kind in op.invoke_value if kind in (ACCEPT, REJECT))
        if op.f == "ack" and op.status == OK:
            for p, offset, kind, answered in op.value:
                if answered and kind in (ACCEPT, REJECT):
                    prior = terminal.get((p, offset))
                    if prior is None or op.end < prior.end:
                        terminal[(p, offset)] = op
    deliveries: dict[tuple[int, int], list[tuple[Op, int]]] = defaultdict(list)
    at: dict[tuple[int, int], str] = {}
    for op in ops:
        if op.f != "poll" or op.status != OK:
            continue
        for p, offset, value, count in op.value or []:
            key = (p, offset)
            if value not in values:
                found.append(Anomaly("phantom", [op], f"{value} at {p}/{offset}"))
            if at.setdefault(key, value) != value:
                found.append(
                    Anomaly("inconsistent-offset", [op], f"{p}/{offset}: {at[key]}, {value}")
                )
            done = terminal.get(key)
            if done is not None and op.start > done.end:
                found.append(
                    Anomaly("redelivered", [done, op], f"{p}/{offset} ({value}) count {count}")
                )
            deliveries[key].append((op, count))
    for key, seen in deliveries.items():
        for i, (a, ca) in enumerate(seen):
            for b, cb in seen[i + 1 :]:
                if b.start > a.end and cb < ca:
                    found.append(Anomaly("count-back", [a, b], f"{key}: {ca} then {cb}"))
    for key, value in sent.items():
        if key not in deliveries:
            found.append(Anomaly("lost", [], f"{value} at {key[0]}/{key[1]} never delivered"))
        elif key not in tried and max(c for _, c in deliveries[key]) < limit:
            found.append(Anomaly("unsettled", [], f"{value} at {key[0]}/{key[1]}"))
    return found
