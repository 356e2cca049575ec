"""Workload (b): classic and KIP-848 members join, heartbeat, commit, leave, crash and rejoin.

How this works. Members are raw-protocol clients, so every generation, epoch, member id and
assignment is visible; each member incarnation (a fresh member id) lives a random 8-30 s,
then leaves (LeaveGroup, or a heartbeat at epoch -1) or crashes (stops without a word, so
the coordinator must expire it), and its thread starts a new incarnation. History ops carry
the key ``(group, "", -1)``, as ``checks.check_membership`` reads them:

- classic groups (``cls-*``, protocol type ``jepsen``): JoinGroup v9 (MEMBER_ID_REQUIRED,
  then the join with the id given); the leader computes a range assignment of ``t1`` over
  the members it was given and sends it in SyncGroup v5 (JSON bytes: the coordinator does not
  read them); Heartbeat v4 every second; REBALANCE_IN_PROGRESS rejoins. ``view`` ops: the
  JoinGroup answer (generation, no partitions, ``"phase": "join"``: not yet durable) and the
  SyncGroup answer (generation and the partitions it delivered);
- KIP-848 groups (``kip-*``): ConsumerGroupHeartbeat v1 with a member id of the harness,
  the owned partitions on every heartbeat, the assignment taken at once (revocations are
  acknowledged by the next heartbeat); ``view`` ops carry the member epoch and the
  partitions owned at it;
- both: FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION end the incarnation
  with a ``fenced`` op; ``commit`` ops (OffsetCommit v9 with the generation or member
  epoch) commit unique values for the owned partitions now and then.

A heartbeat or join whose answer is lost is ``info`` (its process retires); any error is
``fail``. The final phase has nothing to read: the checks are real-time invariants.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from typing import Any

from protocol.errors import ErrorCode
from protocol.messages import (
    consumer_group_heartbeat as cgh,
)
from protocol.messages import (
    heartbeat,
    join_group,
    leave_group,
    metadata,
    offset_commit,
    sync_group,
)
from support.jepsen.checks import check_membership, kinds
from support.jepsen.client import Indefinite, RawClient
from support.jepsen.history import OK, Key, Op
from support.jepsen.workload import REDISCOVER, Ctx, Thread, classify_commit, error_name

TOPIC = "t1"
PARTITIONS = 6
FENCED = frozenset(
    {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION}
)
SESSION_MS = 6000


class _Member:
    """One incarnation's connection to its group's coordinator, rediscovered on demand."""

    def __init__(self, ctx: Ctx, group: str, t: Thread) -> None:
        self.ctx, self.group, self.t = ctx, group, t
        self.key: Key = (group, "", -1)
        self.client: RawClient | None = None

    async def call(self, api_key: int, version: int, body: Any, timeout: float = 5.0) -> Any:
        address = await self.ctx.coordinator(self.group)
        if address is None:
            raise Indefinite("no coordinator known")
        if self.client is None or self.client.address != address:
            if self.client is not None:
                self.client.close()
            self.client = self.ctx.client(address, self.group)
        return await self.client.call(api_key, version, body, timeout)

    async def op(
        self, f: str, api_key: int, version: int, body: Any, invoke: Any = None, timeout: float = 5
    ) -> Any:
        """One recorded request: invoke, then ok/fail/info; the response, or None."""
        self.ctx.history.invoke(self.t.process, f, self.key, invoke)
        try:
            resp = await self.call(api_key, version, body, timeout)
        except Indefinite as exc:
            self.ctx.history.info(self.t.process, {"err": str(exc)})
            self.ctx.forget(self.group)
            self.t.retire()
            return None
        return resp

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def _range(members: list[str], partitions: int) -> dict[str, list[int]]:
    """Kafka's range assignor over one topic."""
    members = sorted(members)
    per, extra = divmod(partitions, len(members))
    out: dict[str, list[int]] = {}
    start = 0
    for i, m in enumerate(members):
        n = per + (1 if i < extra else 0)
        out[m] = list(range(start, start + n))
        start += n
    return out


class Membership:
    name = "membership"

    def __init__(self, classic_groups: int = 1, consumer_groups: int = 1, members: int = 3):
        self.classic_groups = [f"cls-{i}" for i in range(classic_groups)]
        self.consumer_groups = [f"kip-{i}" for i in range(consumer_groups)]
        self.members = members
        self.topic_id = b""
        self.counter = itertools.count(1)

    async def setup(self, ctx: Ctx) -> None:
        await ctx.create_topic(TOPIC, PARTITIONS)
        for address in sorted(ctx.topology.addresses()):
            c = ctx.client(address, "meta")
            try:
                resp = await c.call(
                    metadata.API_KEY,
                    12,
                    metadata.Request(topics=[metadata.MetadataRequestTopic(name=TOPIC)]),
                )
            except Indefinite:
                continue
            finally:
                c.close()
            self.topic_id = bytes(resp.topics[0].topic_id)
            return
        raise RuntimeError("no node answered Metadata")

    # -- shared

    async def _commit(
        self, m: _Member, member_id: str, epoch: int, owned: list[int], version: int, protocol: str
    ) -> None:
        if not owned:
            return
        value = next(self.counter)
        body = offset_commit.Request(
            group_id=m.group,
            generation_id_or_member_epoch=epoch,
            member_id=member_id,
            topics=[
                offset_commit.OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=[
                        offset_commit.OffsetCommitRequestPartition(
                            partition_index=p, committed_offset=value
                        )
                        for p in owned
                    ],
                )
            ],
        )
        invoke = {"member": member_id, "generation": epoch, "protocol": protocol, "value": value}
        resp = await m.op("commit", offset_commit.API_KEY, version, body, invoke)
        if resp is None:
            return
        codes = {p.error_code for t in resp.topics for p in t.partitions}
        code = max(codes) if codes else 0
        status = classify_commit(code)
        m.ctx.history.complete(
            m.t.process, status, None if code == 0 else {"err": error_name(code)}
        )
        if status not in (OK, "fail"):
            m.t.retire()
        if code in REDISCOVER:
            m.ctx.forget(m.group)

    def _fenced(self, m: _Member, member_id: str, epoch: int, code: int) -> None:
        m.ctx.history.invoke(m.t.process, "fenced", m.key, {"member": member_id})
        m.ctx.history.ok(
            m.t.process, {"member": member_id, "generation": epoch, "err": error_name(code)}
        )

    # -- KIP-848

    async def _consumer(self, ctx: Ctx, group: str, t: Thread) -> None:
        while ctx.running():
            m = _Member(ctx, group, t)
            try:
                await self._consumer_life(ctx, m)
            finally:
                m.close()

    async def _consumer_life(self, ctx: Ctx, m: _Member) -> None:
        member_id = uuid.uuid4().hex[:22]
        epoch, owned = 0, list[int]()
        ends = min(ctx.deadline, time.monotonic() + ctx.rng.uniform(8, 30))
        while ctx.running() and time.monotonic() < ends:
            body = cgh.Request(
                group_id=m.group,
                member_id=member_id,
                member_epoch=epoch,
                rebalance_timeout_ms=SESSION_MS if epoch == 0 else -1,
                subscribed_topic_names=[TOPIC] if epoch == 0 else None,
                server_assignor="uniform" if epoch == 0 else None,
                topic_partitions=[cgh.TopicPartitions(topic_id=self.topic_id, partitions=owned)]
                if owned
                else [],
            )
            invoke = {"member": member_id, "protocol": "consumer"}
            resp = await m.op("view", cgh.API_KEY, 1, body, invoke)
            if resp is None:
                await asyncio.sleep(0.5)
                continue
            code = resp.error_code
            if code != 0:
                ctx.history.fail(m.t.process, {"err": error_name(code)})
                if code in FENCED:
                    self._fenced(m, member_id, epoch, code)
                    return
                if code in REDISCOVER:
                    ctx.forget(m.group)
                await asyncio.sleep(0.5)
                continue
            epoch = resp.member_epoch
            if resp.assignment is not None:
                owned = sorted(
                    p
                    for tp in resp.assignment.topic_partitions
                    if tp.topic_id == self.topic_id
                    for p in tp.partitions
                )
            ctx.history.ok(
                m.t.process,
                {
                    "member": member_id,
                    "generation": epoch,
                    "assignment": [[TOPIC, p] for p in owned],
                },
            )
            if ctx.rng.random() < 0.3:
                await self._commit(m, member_id, epoch, owned, 9, "consumer")
            await asyncio.sleep(min(resp.heartbeat_interval_ms / 1000, 1.0))
        if ctx.running() and epoch > 0 and ctx.rng.random() < 0.5:
            body = cgh.Request(group_id=m.group, member_id=member_id, member_epoch=-1)
            resp = await m.op("leave", cgh.API_KEY, 1, body, {"member": member_id})
            if resp is not None:
                ctx.history.complete(m.t.process, OK if resp.error_code == 0 else "fail")
        # else: a crash -- the member stops without a word

    # -- classic

    async def _classic(self, ctx: Ctx, group: str, t: Thread) -> None:
        while ctx.running():
            m = _Member(ctx, group, t)
            try:
                await self._classic_life(ctx, m)
            finally:
                m.close()

    async def _join(self, ctx: Ctx, m: _Member, member_id: str) -> tuple[str, Any] | None:
        """JoinGroup until it answers (MEMBER_ID_REQUIRED answered once): the member id and
        the response, or None when the incarnation should end."""
        for _ in range(20):
            if not ctx.running():
                return None
            body = join_group.Request(
                group_id=m.group,
                session_timeout_ms=SESSION_MS,
                rebalance_timeout_ms=SESSION_MS,
                member_id=member_id,
                protocol_type="jepsen",
                protocols=[join_group.JoinGroupRequestProtocol(name="range", metadata=b"")],
            )
            resp = await m.op("view", join_group.API_KEY, 9, body, {"member": member_id}, 15)
            if resp is None:
                await asyncio.sleep(0.3)  # the coordinator is unreachable: not a busy loop
                continue
            code = resp.error_code
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                ctx.history.fail(m.t.process, {"err": error_name(code)})
                member_id = resp.member_id
                continue
            if code != 0:
                ctx.history.fail(m.t.process, {"err": error_name(code)})
                if code in REDISCOVER:
                    ctx.forget(m.group)
                if code == ErrorCode.UNKNOWN_MEMBER_ID:
                    member_id = ""
                await asyncio.sleep(0.3)
                continue
            # The join phase persists nothing (Kafka writes the generation with the leader's
            # SyncGroup): a coordinator lost before it may load the generation before.
            ctx.history.ok(
                m.t.process,
                {
                    "member": resp.member_id,
                    "generation": resp.generation_id,
                    "assignment": [],
                    "phase": "join",
                },
            )
            return resp.member_id, resp
        return None

    async def _classic_life(self, ctx: Ctx, m: _Member) -> None:
        ends = min(ctx.deadline, time.monotonic() + ctx.rng.uniform(8, 30))
        member_id = ""
        while ctx.running() and time.monotonic() < ends:
            joined = await self._join(ctx, m, member_id)
            if joined is None:
                return
            member_id, jr = joined
            generation = jr.generation_id
            assignments = []
            if jr.leader == member_id:
                plan = _range([x.member_id for x in jr.members], PARTITIONS)
                assignments = [
                    sync_group.SyncGroupRequestAssignment(
                        member_id=k, assignment=json.dumps(v).encode()
                    )
                    for k, v in plan.items()
                ]
            body = sync_group.Request(
                group_id=m.group,
                generation_id=generation,
                member_id=member_id,
                protocol_type="jepsen",
                protocol_name="range",
                assignments=assignments,
            )
            resp = await m.op("view", sync_group.API_KEY, 5, body, {"member": member_id}, 15)
            if resp is None:
                await asyncio.sleep(0.3)
                continue
            if resp.error_code != 0:
                ctx.history.fail(m.t.process, {"err": error_name(resp.error_code)})
                if resp.error_code in FENCED:
                    self._fenced(m, member_id, generation, resp.error_code)
                    member_id = ""
                continue
            owned = json.loads(resp.assignment) if resp.assignment else []
            ctx.history.ok(
                m.t.process,
                {
                    "member": member_id,
                    "generation": generation,
                    "assignment": [[TOPIC, p] for p in owned],
                },
            )
            member_id = await self._beat(ctx, m, member_id, generation, owned, ends)
        if ctx.running() and member_id and ctx.rng.random() < 0.5:
            leave = leave_group.Request(
                group_id=m.group, members=[leave_group.MemberIdentity(member_id=member_id)]
            )
            resp = await m.op("leave", leave_group.API_KEY, 5, leave, {"member": member_id})
            if resp is not None:
                ctx.history.complete(m.t.process, OK if resp.error_code == 0 else "fail")

    async def _beat(
        self, ctx: Ctx, m: _Member, member_id: str, generation: int, owned: list[int], ends: float
    ) -> str:
        """Heartbeat (and commit now and then) until a rebalance or the end of this life;
        the member id to rejoin with ("" once fenced)."""
        while ctx.running() and time.monotonic() < ends:
            await asyncio.sleep(1.0)
            if ctx.rng.random() < 0.5:
                await self._commit(m, member_id, generation, owned, 9, "classic")
            body = heartbeat.Request(
                group_id=m.group, generation_id=generation, member_id=member_id
            )
            try:
                resp = await m.call(heartbeat.API_KEY, 4, body)
            except Indefinite:
                ctx.forget(m.group)
                continue
            code = resp.error_code
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                return member_id
            if code in FENCED:
                self._fenced(m, member_id, generation, code)
                return ""
            if code in REDISCOVER:
                ctx.forget(m.group)
        return member_id

    # -- run and check

    async def run(self, ctx: Ctx) -> None:
        groups = [(g, self._classic) for g in self.classic_groups] + [
            (g, self._consumer) for g in self.consumer_groups
        ]
        stride = len(groups) * self.members
        tasks = []
        p = 0
        for group, life in groups:
            for _ in range(self.members):
                tasks.append(life(ctx, group, Thread(p, stride)))
                p += 1
        await asyncio.gather(*tasks)

    async def final(self, ctx: Ctx) -> None:
        return None

    def check(self, ops: list[Op]) -> dict[str, Any]:
        groups = set(self.classic_groups) | set(self.consumer_groups)
        mine = [op for op in ops if op.key is not None and op.key[0] in groups]
        found = check_membership(mine)
        views = [op for op in mine if op.f == "view" and op.ok]
        commits = [op for op in mine if op.f == "commit" and op.ok]
        detail = [
            f"{a.kind}: {a.detail} "
            + "; ".join(
                f"p{o.process} {o.f} {o.status} {o.invoke_value} -> {o.value}" for o in a.ops
            )
            for a in found[:50]
        ]
        anomalies = sorted(kinds(found))
        if not views or not commits:
            anomalies.append("no-progress")
            detail.append(f"{len(views)} views and {len(commits)} commits acknowledged")
        return {"ops": len(mine), "anomalies": anomalies, "detail": detail}
