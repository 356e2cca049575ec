"""A consumer-group (KIP-848) test harness over the pure shard with a fake clock.

``Cluster`` holds a shard with a ``StaticTopics`` image; ``Member`` plays a consumer the way
librdkafka and the Java client do: a full heartbeat to join, partial heartbeats after, the
owned partitions re-sent after each local reconciliation (which is how a revocation is
acknowledged). Every record the shard writes is kept, so a test can replay them into a
second shard and compare.
"""

from __future__ import annotations

import itertools
from typing import Any

from coordinator.group.shard import GroupShard
from coordinator.group.timers import Timer
from coordinator.group.topics import StaticTopics
from coordinator.group.types import GroupConfig, RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    DescribedGroup,
)
from protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)

Owned = dict[str, set[int]]


class Cluster:
    def __init__(self, config: GroupConfig | None = None, **topics: int) -> None:
        self.topics = StaticTopics()
        for name, n in topics.items():
            self.topics.add(name, n)
        self.ids = itertools.count(1)
        self.shard = GroupShard(
            config or GroupConfig(),
            topics=self.topics,
            consumer_member_id=lambda: f"gen-{next(self.ids)}",
        )
        self.now = 0
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.results: list[Result] = []
        self._handle = itertools.count(1)
        self.take(self.shard.mark_all_loaded(0))

    def take(self, result: Result) -> Result:
        self.records.extend(result.records)
        self.results.append(result)
        return result

    def ctx(self, version: int = 1, client_id: str = "client") -> RequestContext:
        return RequestContext(version, client_id, "/127.0.0.1", next(self._handle))

    def heartbeat(
        self, req: ConsumerGroupHeartbeatRequest, version: int = 1
    ) -> ConsumerGroupHeartbeatResponse:
        ctx = self.ctx(version)
        out = self.take(self.shard.consumer_group_heartbeat(ctx, req, self.now))
        (reply,) = [r for h, r in out.replies if h == ctx.reply_to]
        assert isinstance(reply, ConsumerGroupHeartbeatResponse)
        return reply

    def describe(self, *group_ids: str, version: int = 1) -> list[DescribedGroup]:
        ctx = self.ctx(version)
        out = self.shard.consumer_group_describe(
            ctx, ConsumerGroupDescribeRequest(group_ids=list(group_ids)), self.now
        )
        return out.replies[0][1].groups  # type: ignore[attr-defined,no-any-return]

    def advance(self, ms: int) -> list[Result]:
        """Move the clock, firing every timer that comes due."""
        self.now += ms
        fired = []
        while True:
            timer: Timer | None = self.shard.timers.pop_due(self.now)
            if timer is None:
                return fired
            fired.append(self.take(self.shard.on_timer(timer, self.now)))

    def tid(self, name: str) -> bytes:
        t = self.topics.topic(name)
        assert t is not None
        return t.topic_id

    def name(self, topic_id: bytes) -> str:
        t = self.topics.topic_by_id(topic_id)
        assert t is not None
        return t.name

    def replayed(self) -> GroupShard:
        """A second shard rebuilt from every record written so far."""
        other = GroupShard(GroupConfig(), topics=self.topics)
        for p in range(other.config.offsets_topic_num_partitions):
            other.begin_load(p)
        for p, k, v in self.records:
            other.replay(p, k, v)
        for p in range(other.config.offsets_topic_num_partitions):
            other.load_complete(p, self.now)
        return other


class Member:
    """A consumer-protocol client (as librdkafka drives it)."""

    def __init__(
        self,
        cluster: Cluster,
        group_id: str,
        member_id: str,
        topics: list[str] | None = None,
        *,
        regex: str | None = None,
        instance_id: str | None = None,
        assignor: str | None = None,
        rack: str | None = None,
        rebalance_timeout_ms: int = 300000,
    ) -> None:
        self.c = cluster
        self.group_id = group_id
        self.member_id = member_id
        self.topics = topics if topics is not None else []
        self.regex = regex
        self.instance_id = instance_id
        self.assignor = assignor
        self.rack = rack
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.epoch = 0
        self.owned: Owned = {}
        self.last: ConsumerGroupHeartbeatResponse | None = None

    def _tps(self) -> list[TopicPartitions]:
        return [
            TopicPartitions(topic_id=self.c.tid(t), partitions=sorted(ps))
            for t, ps in sorted(self.owned.items())
            if ps
        ]

    def send(
        self, req: ConsumerGroupHeartbeatRequest, version: int = 1
    ) -> ConsumerGroupHeartbeatResponse:
        resp = self.c.heartbeat(req, version)
        self.last = resp
        if resp.error_code == ErrorCode.NO_ERROR:
            if resp.member_id:
                self.member_id = resp.member_id
            self.epoch = resp.member_epoch
            if resp.assignment is not None:
                # The client revokes and assigns locally at once (no callbacks pending).
                self.owned = {
                    self.c.name(tp.topic_id): set(tp.partitions)
                    for tp in resp.assignment.topic_partitions
                }
        return resp

    def join(self, version: int = 1) -> ConsumerGroupHeartbeatResponse:
        self.epoch = 0
        self.owned = {}
        return self.send(
            ConsumerGroupHeartbeatRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=0,
                instance_id=self.instance_id,
                rack_id=self.rack,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                subscribed_topic_names=list(self.topics),
                subscribed_topic_regex=self.regex if self.regex is not None else "",
                server_assignor=self.assignor,
                topic_partitions=[],
            ),
            version,
        )

    def beat(self, ack: bool = True, **changes: Any) -> ConsumerGroupHeartbeatResponse:
        """A partial heartbeat; ``ack``: also report the owned partitions (acknowledging)."""
        req = ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.epoch,
            topic_partitions=self._tps() if ack else None,
        )
        for k, v in changes.items():
            setattr(req, k, v)
        return self.send(req)

    def leave(self, epoch: int = -1) -> ConsumerGroupHeartbeatResponse:
        return self.send(
            ConsumerGroupHeartbeatRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=epoch,
                instance_id=self.instance_id,
            )
        )

    def partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def settle(members: list[Member], rounds: int = 10) -> None:
    """Heartbeat every member (acknowledging) until nobody's assignment changes."""
    for _ in range(rounds):
        before = [m.partitions() for m in members]
        epochs = [m.epoch for m in members]
        for m in members:
            m.beat()
        if [m.partitions() for m in members] == before and [m.epoch for m in members] == epochs:
            return
    raise AssertionError("the group did not settle")


# ------------------------------------------------------------ additions for the rule tests


def decode(records: list[tuple[int, bytes, bytes | None]]) -> list[tuple[Any, Any]]:
    """The consumer-group records among ``records``, decoded: (key, value or None)."""
    from storage.records import (
        CONSUMER_GROUP_RECORD_TYPES,
        decode_consumer_group_key,
        decode_consumer_group_value,
    )

    out: list[tuple[Any, Any]] = []
    for _, k, v in records:
        if int.from_bytes(k[:2], "big") not in CONSUMER_GROUP_RECORD_TYPES:
            continue
        key = decode_consumer_group_key(k)
        out.append((key, None if v is None else decode_consumer_group_value(key, v)))
    return out


def kinds(records: list[tuple[Any, Any]]) -> list[str]:
    """Record types as Kafka's tests name them: "5", "8✝" (tombstone), ..."""
    return [f"{k.version}{'✝' if v is None else ''}" for k, v in records]


def group_state(shard: GroupShard, group_id: str) -> dict[str, Any]:
    """Everything persistent about one consumer group, in comparable form."""
    g = shard.consumer.groups[group_id]
    return {
        "group_epoch": g.group_epoch,
        "assignment_epoch": g.assignment_epoch,
        "metadata_hash": g.metadata_hash,
        "state": g.state,
        "members": {
            mid: (
                m.member_epoch,
                m.previous_member_epoch,
                m.state,
                dict(m.assigned),
                dict(m.pending_revocation),
                m.instance_id,
                m.rack_id,
                m.client_id,
                m.client_host,
                m.subscribed_topic_names,
                m.subscribed_topic_regex,
                m.rebalance_timeout_ms,
                m.server_assignor,
            )
            for mid, m in g.members.items()
        },
        "static_members": dict(g.static_members),
        "target": {k: dict(v) for k, v in g.target.items()},
        "target_owner": {k: dict(v) for k, v in g.target_owner.items()},
        "partition_epochs": {k: dict(v) for k, v in g.partition_epochs.items() if v},
        "names_count": dict(g.names_count),
        "regex_count": dict(g.regex_count),
        "resolved_regexes": dict(g.resolved_regexes),
        "assignor_count": dict(g.assignor_count),
    }


class Mark:
    """A position in a cluster's record list: ``new()`` decodes what was written after it."""

    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster
        self.at = len(cluster.records)

    def new(self) -> list[tuple[Any, Any]]:
        return decode(self.c.records[self.at :])


def list_groups(
    cluster: Cluster,
    version: int = 5,
    states: list[str] | None = None,
    types: list[str] | None = None,
) -> list[Any]:
    from protocol.messages.list_groups import ListGroupsRequest

    req = ListGroupsRequest(states_filter=states or [], types_filter=types or [])
    out = cluster.take(cluster.shard.list_groups(cluster.ctx(version), req, cluster.now))
    return out.replies[0][1].groups  # type: ignore[attr-defined,no-any-return]


def delete_groups(cluster: Cluster, *group_ids: str) -> dict[str, int]:
    from protocol.messages.delete_groups import DeleteGroupsRequest

    req = DeleteGroupsRequest(groups_names=list(group_ids))
    out = cluster.take(cluster.shard.delete_groups(cluster.ctx(2), req, cluster.now))
    return {r.group_id: r.error_code for r in out.replies[0][1].results}  # type: ignore[attr-defined]


def describe_groups(cluster: Cluster, *group_ids: str, version: int = 6) -> list[Any]:
    from protocol.messages.describe_groups import DescribeGroupsRequest

    req = DescribeGroupsRequest(groups=list(group_ids))
    out = cluster.shard.describe_groups(cluster.ctx(version), req, cluster.now)
    return out.replies[0][1].groups  # type: ignore[attr-defined,no-any-return]
