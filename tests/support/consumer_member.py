"""A consumer-protocol client over a GroupContext, and readers of the records it makes write.

How this works: ``Member`` plays a consumer the way librdkafka and the Java client do: a
full heartbeat to join, partial heartbeats after, the owned partitions re-sent after each
local reconciliation (which is how a revocation is acknowledged); ``settle`` heartbeats
members until their assignments stop moving.  ``Mark``, ``decode`` and ``kinds`` read the
consumer group records a context has written since a point, as Kafka's tests name them;
``group_state`` is everything persistent about a group, to compare a shard with its replay.
"""

from __future__ import annotations

from typing import Any

from coordinator.group import GroupShard
from protocol.errors import ErrorCode
from protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from support.group_context import GroupContext

Owned = dict[str, set[int]]


class Member:
    """A consumer-protocol client (as librdkafka drives it)."""

    def __init__(
        self,
        cluster: GroupContext,
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
        resp = self.c.consumer_group_heartbeat(req, version)
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

    def __init__(self, cluster: GroupContext) -> None:
        self.c = cluster
        self.at = len(cluster.records)

    def new(self) -> list[tuple[Any, Any]]:
        return decode(self.c.records[self.at :])
