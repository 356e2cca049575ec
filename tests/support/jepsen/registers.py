"""Workload (a): committed offsets as registers, checked for linearizability.

How this works. Keys are (group, "t0", partition) for ``groups`` simple groups (their
coordinators spread over the nodes) x ``partitions`` partitions. ``writers`` threads per key
commit increasing values: ``write`` = OffsetCommit v8, generation -1, empty member id, offset
v and metadata ``"v=<v>"``, v from one run-wide counter (unique, increasing in invocation
order). ``readers`` threads each read a random key: ``read`` = OffsetFetch v8 of that one
partition, ok with the committed offset, or None when nothing is committed. A read whose
metadata is not ``"v=<offset>"`` is recorded with the pair, which no write wrote (a phantom).

After the nemesis heals, ``final`` reads every key until one read succeeds (bounded in count
and time); ``check`` runs ``linear.check_registers`` (fast invariants, then the Wing-Gong-Lowe
search per key) and, for each key's last successful read, ``linear.final_read_check``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from protocol.messages import offset_commit, offset_fetch
from support.clusterkit import groups_on_distinct_nodes
from support.jepsen.client import Indefinite, RawClient
from support.jepsen.history import OK, Key, Op, by_key
from support.jepsen.linear import READ, WRITE, check_registers, final_read_check
from support.jepsen.workload import (
    REDISCOVER,
    Ctx,
    Thread,
    classify_commit,
    error_name,
    pace,
)

TOPIC = "t0"


class Registers:
    name = "registers"

    def __init__(
        self,
        groups: int = 4,
        partitions: int = 2,
        writers: int = 1,
        readers: int = 4,
        pace_s: float = 0.05,
    ) -> None:
        self.n_groups, self.partitions = groups, partitions
        self.writers, self.readers = writers, readers
        self.pace_s = pace_s
        self.keys: list[Key] = []
        self.counter = itertools.count(1)
        self.finals: dict[Key, int] = {}  # key -> index of its final read's op

    async def setup(self, ctx: Ctx) -> None:
        await ctx.create_topic(TOPIC, self.partitions)
        assert ctx.topology.cluster is not None
        groups = await asyncio.to_thread(
            groups_on_distinct_nodes, ctx.topology.cluster, self.n_groups, "reg"
        )
        self.keys = [(g, TOPIC, p) for g in groups for p in range(self.partitions)]

    # -- one operation each

    async def _call(
        self,
        ctx: Ctx,
        clients: dict[tuple[str, int], RawClient],
        key: Key,
        api_key: int,
        version: int,
        body: Any,
    ) -> Any:
        address = await ctx.coordinator(key[0])
        if address is None:
            raise Indefinite("no coordinator known")
        if address not in clients:
            clients[address] = ctx.client(address, "reg")
        return await clients[address].call(api_key, version, body)

    async def write(
        self, ctx: Ctx, t: Thread, clients: dict[tuple[str, int], RawClient], key: Key
    ) -> None:
        group, topic, partition = key
        address = await ctx.coordinator(group)
        if address is None:
            await pace(ctx, 0.2)
            return
        value = next(self.counter)
        body = offset_commit.Request(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                offset_commit.OffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        offset_commit.OffsetCommitRequestPartition(
                            partition_index=partition,
                            committed_offset=value,
                            committed_metadata=f"v={value}",
                        )
                    ],
                )
            ],
        )
        ctx.history.invoke(t.process, WRITE, key, value)
        try:
            resp = await self._call(ctx, clients, key, offset_commit.API_KEY, 8, body)
        except Indefinite as exc:
            ctx.history.info(t.process, {"err": str(exc)})
            ctx.forget(group)
            t.retire()
            return
        code = resp.topics[0].partitions[0].error_code
        status = classify_commit(code)
        ctx.history.complete(t.process, status, None if status == OK else {"err": error_name(code)})
        if status != OK:
            if code in REDISCOVER:
                ctx.forget(group)
            if status != "fail":
                t.retire()

    async def read(
        self, ctx: Ctx, t: Thread, clients: dict[tuple[str, int], RawClient], key: Key
    ) -> bool:
        group, topic, partition = key
        address = await ctx.coordinator(group)
        if address is None:
            await pace(ctx, 0.2)
            return False
        body = offset_fetch.Request(
            groups=[
                offset_fetch.OffsetFetchRequestGroup(
                    group_id=group,
                    topics=[
                        offset_fetch.OffsetFetchRequestTopics(
                            name=topic, partition_indexes=[partition]
                        )
                    ],
                )
            ]
        )
        ctx.history.invoke(t.process, READ, key)
        try:
            resp = await self._call(ctx, clients, key, offset_fetch.API_KEY, 8, body)
        except Indefinite as exc:
            # A read changes nothing: its process may go on.
            ctx.history.fail(t.process, {"err": str(exc)})
            ctx.forget(group)
            return False
        g = resp.groups[0]
        code = g.error_code
        part = g.topics[0].partitions[0] if code == 0 else None
        if part is not None:
            code = part.error_code
        if part is None or code != 0:
            ctx.history.fail(t.process, {"err": error_name(code)})
            if code in REDISCOVER:
                ctx.forget(group)
            return False
        offset = part.committed_offset
        value: Any = None
        if offset >= 0:
            value = offset if part.metadata == f"v={offset}" else [offset, part.metadata]
        ctx.history.ok(t.process, value)
        return True

    # -- the threads

    async def _writer(self, ctx: Ctx, t: Thread, key: Key) -> None:
        clients: dict[tuple[str, int], RawClient] = {}
        try:
            while ctx.running():
                await self.write(ctx, t, clients, key)
                await pace(ctx, self.pace_s)
        finally:
            for c in clients.values():
                c.close()

    async def _reader(self, ctx: Ctx, t: Thread) -> None:
        clients: dict[tuple[str, int], RawClient] = {}
        try:
            while ctx.running():
                await self.read(ctx, t, clients, ctx.rng.choice(self.keys))
                await pace(ctx, self.pace_s)
        finally:
            for c in clients.values():
                c.close()

    async def run(self, ctx: Ctx) -> None:
        stride = len(self.keys) * self.writers + self.readers
        tasks = []
        p = 0
        for key in self.keys:
            for _ in range(self.writers):
                tasks.append(self._writer(ctx, Thread(p, stride), key))
                p += 1
        for _ in range(self.readers):
            tasks.append(self._reader(ctx, Thread(p, stride)))
            p += 1
        await asyncio.gather(*tasks)

    async def final(self, ctx: Ctx, timeout: float = 60.0, attempts: int = 200) -> None:
        """Read every key until a read succeeds (bounded in attempts and time)."""
        t = Thread(10**6, 1)
        clients: dict[tuple[str, int], RawClient] = {}
        deadline = time.monotonic() + timeout
        try:
            for key in self.keys:
                for _ in range(attempts):
                    if time.monotonic() > deadline:
                        break
                    if await self.read(ctx, t, clients, key):
                        break
                    await asyncio.sleep(0.1)
        finally:
            for c in clients.values():
                c.close()

    def check(self, ops: list[Op], max_steps: int = 2_000_000) -> dict[str, Any]:
        mine = [op for op in ops if op.f in (READ, WRITE) and op.key in set(self.keys)]
        result = check_registers(mine, max_steps=max_steps)
        anomalies = [(a.kind, a.key, a.detail) for a in result.anomalies]
        unread: list[Key] = []
        for key, key_ops in by_key(mine):
            assert key is not None
            finals = [op for op in key_ops if op.f == READ and op.process == 10**6 and op.ok]
            if not finals:
                unread.append(key)
                continue
            for a in final_read_check(key_ops, finals[-1], key):
                anomalies.append((f"final-{a.kind}", a.key, a.detail))
        for key in unread:
            anomalies.append(("final-unread", key, "no read succeeded after the heal"))
        kinds = sorted(result.kinds() | {k for k, _, _ in anomalies})
        return {
            "ops": len(mine),
            "ok": sum(1 for op in mine if op.status == OK),
            "anomalies": kinds,
            "detail": [f"{k} {key}: {d}" for k, key, d in anomalies][:50]
            + [
                f"{r.verdict} {r.key}: blocked at {r.witness.op if r.witness else None}"
                for r in result.keys
                if r.verdict != "ok"
            ],
            "final_unread": [list(k) for k in unread],
        }
