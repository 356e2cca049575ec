"""Workload (c): a queue through topic ``t2`` and the committed offsets of group ``q``.

How this works, Jepsen's Kafka queue model on raw requests (one op = one request, nothing
retried behind the history's back). Keys are the partitions of ``t2``; values are unique
integers from one counter.

- ``send``: Produce v9, acks=all, one record whose value is the integer, to the partition's
  leader (from Metadata, through the proxies); ok with ``[offset, value]``. Every error is
  ``info``: a produce that failed at the leader may still have been appended before the
  failure was seen, and the checker then only asks whether it was read (never "lost").
- consumers: each thread owns a fixed set of partitions (assign mode). It starts by reading
  group ``q``'s committed offsets (an ``assign`` op: positions restart there), then ``poll``s
  one partition at a time (Fetch v12 at its position; ok with ``{key: [[offset, value],
  ...]}``) and commits the new position for ``q`` (``qcommit``, OffsetCommit v8 of a simple
  group). Every ~20 s a consumer "crashes": its process retires and the next one restarts
  from ``q``'s committed offsets, as a new member of a consumer group does.
- ``final``: per key, a fresh process reads from offset 0 up to the highest offset any op
  saw (bounded in count and time).

``check`` is ``checks.check_queue``: inconsistent offsets, duplicates, lost writes, unseen
acknowledged writes, poll skips and non-monotonic polls (per process, reset by ``assign``),
non-monotonic sends.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from protocol.errors import ErrorCode
from protocol.messages import fetch, metadata, offset_commit, offset_fetch, produce
from storage.record_batch import encode_batch, iter_batches, iter_record_tuples
from support.jepsen.checks import check_queue, kinds
from support.jepsen.client import Indefinite, RawClient
from support.jepsen.history import OK, Key, Op
from support.jepsen.workload import Ctx, Thread, error_name, pace

TOPIC = "t2"
GROUP = "q"


class Queue:
    name = "queue"

    def __init__(self, partitions: int = 4, producers: int = 2, consumers: int = 2) -> None:
        self.partitions = partitions
        self.producers, self.consumers = producers, consumers
        self.counter = itertools.count(1)
        self.leaders: dict[int, tuple[str, int]] = {}
        self.highest: dict[int, int] = {}

    def _key(self, k: int) -> Key:
        return (TOPIC, "", k)

    async def setup(self, ctx: Ctx) -> None:
        await ctx.create_topic(TOPIC, self.partitions)
        await self._refresh(ctx)

    async def _refresh(self, ctx: Ctx) -> None:
        """The partitions' leaders, from any node's Metadata (their advertised proxies)."""
        for address in sorted(ctx.topology.addresses(), key=lambda _: ctx.rng.random()):
            c = ctx.client(address, "meta")
            try:
                resp = await c.call(
                    metadata.API_KEY,
                    12,
                    metadata.Request(topics=[metadata.MetadataRequestTopic(name=TOPIC)]),
                    timeout=2,
                )
            except Indefinite:
                continue
            finally:
                c.close()
            brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
            for p in resp.topics[0].partitions:
                if p.leader_id in brokers:
                    self.leaders[p.partition_index] = brokers[p.leader_id]
            return

    async def _leader(
        self, ctx: Ctx, clients: dict[tuple[str, int], RawClient], k: int
    ) -> RawClient | None:
        address = self.leaders.get(k)
        if address is None:
            await self._refresh(ctx)
            address = self.leaders.get(k)
        if address is None:
            return None
        if address not in clients:
            clients[address] = ctx.client(address, "queue")
        return clients[address]

    # -- producers

    async def send(self, ctx: Ctx, t: Thread, clients: dict[tuple[str, int], RawClient]) -> None:
        k = ctx.rng.randrange(self.partitions)
        client = await self._leader(ctx, clients, k)
        if client is None:
            await pace(ctx, 0.2)
            return
        value = next(self.counter)
        batch = encode_batch(0, [(None, str(value).encode())], timestamp_ms=int(time.time() * 1000))
        body = produce.Request(
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                produce.TopicProduceData(
                    name=TOPIC,
                    partition_data=[produce.PartitionProduceData(index=k, records=batch)],
                )
            ],
        )
        ctx.history.invoke(t.process, "send", self._key(k), {"key": k, "value": value})
        try:
            resp = await client.call(produce.API_KEY, 9, body)
        except Indefinite as exc:
            ctx.history.info(t.process, {"err": str(exc)})
            self.leaders.pop(k, None)
            t.retire()
            return
        part = resp.responses[0].partition_responses[0]
        if part.error_code == 0:
            ctx.history.ok(t.process, [part.base_offset, value])
            self.highest[k] = max(self.highest.get(k, -1), part.base_offset)
        else:
            ctx.history.info(t.process, {"err": error_name(part.error_code)})
            self.leaders.pop(k, None)
            t.retire()

    async def _producer(self, ctx: Ctx, t: Thread) -> None:
        clients: dict[tuple[str, int], RawClient] = {}
        try:
            while ctx.running():
                await self.send(ctx, t, clients)
                await pace(ctx, 0.03)
        finally:
            for c in clients.values():
                c.close()

    # -- consumers

    async def _committed(self, ctx: Ctx, keys: list[int]) -> dict[int, int] | None:
        address = await ctx.coordinator(GROUP)
        if address is None:
            return None
        c = ctx.client(address, "q")
        body = offset_fetch.Request(
            groups=[
                offset_fetch.OffsetFetchRequestGroup(
                    group_id=GROUP,
                    topics=[
                        offset_fetch.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=keys)
                    ],
                )
            ]
        )
        try:
            resp = await c.call(offset_fetch.API_KEY, 8, body)
        except Indefinite:
            ctx.forget(GROUP)
            return None
        finally:
            c.close()
        g = resp.groups[0]
        if g.error_code != 0:
            ctx.forget(GROUP)
            return None
        return {
            p.partition_index: max(p.committed_offset, 0) for t in g.topics for p in t.partitions
        }

    async def poll(
        self, ctx: Ctx, t: Thread, clients: dict[tuple[str, int], RawClient], k: int, at: int
    ) -> int | None:
        """One Fetch of key ``k`` at ``at``: the next position, or None if it failed."""
        client = await self._leader(ctx, clients, k)
        if client is None:
            return None
        body = fetch.Request(
            max_wait_ms=100,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[
                fetch.FetchTopic(
                    topic=TOPIC,
                    partitions=[
                        fetch.FetchPartition(
                            partition=k, fetch_offset=at, partition_max_bytes=1 << 16
                        )
                    ],
                )
            ],
        )
        ctx.history.invoke(t.process, "poll", self._key(k))
        try:
            resp = await client.call(fetch.API_KEY, 12, body)
        except Indefinite as exc:
            ctx.history.fail(t.process, {"err": str(exc)})  # a read changes nothing
            self.leaders.pop(k, None)
            return None
        part = resp.responses[0].partitions[0]
        if resp.error_code or part.error_code:
            ctx.history.fail(t.process, {"err": error_name(resp.error_code or part.error_code)})
            if part.error_code != ErrorCode.OFFSET_OUT_OF_RANGE:
                self.leaders.pop(k, None)
            return None
        records: list[list[int]] = []
        buf = part.records or b""
        for _h, start, end in iter_batches(buf):
            for offset, _ts, _key, value in iter_record_tuples(buf[start:end]):
                if offset >= at and value is not None:
                    records.append([offset, int(value)])
        ctx.history.ok(t.process, {str(k): records})
        if records:
            self.highest[k] = max(self.highest.get(k, -1), records[-1][0])
            return records[-1][0] + 1
        return at

    async def _commit(self, ctx: Ctx, t: Thread, positions: dict[int, int]) -> None:
        address = await ctx.coordinator(GROUP)
        if address is None:
            return
        c = ctx.client(address, "q")
        body = offset_commit.Request(
            group_id=GROUP,
            topics=[
                offset_commit.OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=[
                        offset_commit.OffsetCommitRequestPartition(
                            partition_index=k, committed_offset=o
                        )
                        for k, o in positions.items()
                    ],
                )
            ],
        )
        ctx.history.invoke(t.process, "qcommit", (GROUP, TOPIC, -1), dict(positions))
        try:
            resp = await c.call(offset_commit.API_KEY, 8, body)
            code = max(p.error_code for tt in resp.topics for p in tt.partitions)
            ctx.history.complete(t.process, OK if code == 0 else "info", {"err": error_name(code)})
            if code:
                ctx.forget(GROUP)
                t.retire()
        except Indefinite as exc:
            ctx.history.info(t.process, {"err": str(exc)})
            ctx.forget(GROUP)
            t.retire()
        finally:
            c.close()

    async def _consumer(self, ctx: Ctx, t: Thread, keys: list[int]) -> None:
        clients: dict[tuple[str, int], RawClient] = {}
        try:
            while ctx.running():
                positions = await self._committed(ctx, keys)
                if positions is None:
                    await pace(ctx, 0.3)
                    continue
                ctx.history.invoke(t.process, "assign", None, keys)
                ctx.history.ok(t.process, positions)
                life = time.monotonic() + ctx.rng.uniform(10, 30)
                while ctx.running() and time.monotonic() < life:
                    for k in keys:
                        after = await self.poll(ctx, t, clients, k, positions[k])
                        if after is not None and after != positions[k]:
                            positions[k] = after
                            await self._commit(ctx, t, {k: after})
                    await pace(ctx, 0.05)
                t.retire()  # a crash: the next incarnation restarts from q's commits
        finally:
            for c in clients.values():
                c.close()

    async def run(self, ctx: Ctx) -> None:
        stride = self.producers + self.consumers
        tasks = [self._producer(ctx, Thread(p, stride)) for p in range(self.producers)]
        for i in range(self.consumers):
            keys = [k for k in range(self.partitions) if k % self.consumers == i]
            tasks.append(self._consumer(ctx, Thread(self.producers + i, stride), keys))
        await asyncio.gather(*tasks)

    async def final(self, ctx: Ctx, timeout: float = 60.0) -> None:
        """Per key, read from 0 to the highest offset seen (bounded in count and time)."""
        t = Thread(10**6, 1)
        clients: dict[tuple[str, int], RawClient] = {}
        deadline = time.monotonic() + timeout
        try:
            for k in range(self.partitions):
                ctx.history.invoke(t.process, "assign", None, [k])
                ctx.history.ok(t.process, {k: 0})
                at = 0
                for _ in range(10_000):
                    if at > self.highest.get(k, -1) or time.monotonic() > deadline:
                        break
                    after = await self.poll(ctx, t, clients, k, at)
                    if after is None:
                        await asyncio.sleep(0.1)
                    else:
                        at = after
                t.retire()
        finally:
            for c in clients.values():
                c.close()

    def check(self, ops: list[Op]) -> dict[str, Any]:
        mine = [op for op in ops if op.f in ("send", "poll", "assign")]
        found = check_queue(mine)
        detail = [
            f"{a.kind}: {a.detail} "
            + "; ".join(f"p{o.process} {o.f} {o.status} {o.invoke_value}" for o in a.ops[:3])
            for a in found[:50]
        ]
        anomalies = sorted(kinds(found))
        sent = sum(1 for op in mine if op.f == "send" and op.ok)
        if not sent:
            anomalies.append("no-progress")
        return {"ops": len(mine), "anomalies": anomalies, "detail": detail}
