"""DescribeShareGroupOffsets (90): each share partition's start offset and lag, as Kafka.

How this works (Kafka's GroupCoordinatorService.describeShareGroupOffsets and
KafkaApis.handleDescribeShareGroupOffsetsRequest): per group, DESCRIBE on the group is
required (else GROUP_AUTHORIZATION_FAILED for that group). The group's existence is not
checked:

* ``Topics = null`` means every *initialized* partition of the group's state-partition
  metadata (``initialized``, the group coordinator's view; an unknown group has none);
  topics without DESCRIBE are left out;
* named topics: one without DESCRIBE answers each partition with a zero topic id, start
  offset -1, lag -1 and TOPIC_AUTHORIZATION_FAILED; an unknown topic a zero topic id and
  start offset -1 with no error; a known one reads the share state's summary, where a
  partition never initialized answers start offset -1, leader epoch 0, lag -1.

Lag (v1) is the high watermark minus the start offset minus the delivery complete count
(terminal offsets at or past the start), -1 when either is unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from coordinator.catalog import TopicCatalog
from coordinator.dataplane import DataPlane
from coordinator.dataplane.reads import high_watermark
from coordinator.security.acl import AclOperation, ResourceType
from coordinator.server.handler import ClientInfo, HandlerResult
from coordinator.share.persister import ShareStateStore
from coordinator.share.requests import Allowed
from coordinator.share.state_shard import topic_id_str
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import describe_share_group_offsets as dsgo

ZERO_ID = b"\x00" * 16

# group id -> topic id -> (topic name, initialized partitions); {} for an unknown group.
Initialized = Callable[[str], Mapping[bytes, tuple[str, frozenset[int]]]]


def _no_groups(group_id: str) -> Mapping[bytes, tuple[str, frozenset[int]]]:
    return {}


class ShareAdmin:
    """The share offsets admin APIs over the share state and the group coordinator."""

    def __init__(
        self,
        state: ShareStateStore,
        data: DataPlane,
        catalog: TopicCatalog,
        initialized: Initialized = _no_groups,
    ) -> None:
        self.state = state
        self.data = data
        self.catalog = catalog
        self.initialized = initialized

    def _partition(self, group_id: str, topic_id: bytes, partition: int, version: int) -> Any:
        out = dsgo.DescribeShareGroupOffsetsResponsePartition(partition_index=partition)
        summary = self.state.summary(group_id, topic_id_str(topic_id), partition)
        if summary is None:
            out.start_offset, out.leader_epoch, out.lag = -1, 0, -1
            return out
        _, leader_epoch, start, complete = summary
        out.start_offset, out.leader_epoch = start, max(leader_epoch, 0)
        if start == -1 or complete == -1:
            out.lag = -1
            return out
        info = self.catalog.by_id.get(topic_id)
        plog, error = (None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if info is not None:
            plog, error = self.data.served_log(info, partition)
        if plog is None:
            out.lag, out.error_code = -1, error
        else:
            out.lag = high_watermark(plog) - start - complete
        return out

    def describe_share_group_offsets(
        self, allowed: Allowed, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        version = header.api_version
        groups = []
        for g in req.groups:
            out = dsgo.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id)
            groups.append(out)
            if allowed is not None and not allowed(
                client, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id
            ):
                out.error_code = ErrorCode.GROUP_AUTHORIZATION_FAILED
                continue
            if g.topics is None:
                for topic_id, (name, parts) in sorted(
                    self.initialized(g.group_id).items(), key=lambda kv: kv[1][0]
                ):
                    if allowed is not None and not allowed(
                        client, AclOperation.DESCRIBE, ResourceType.TOPIC, name
                    ):
                        continue
                    out.topics.append(
                        dsgo.DescribeShareGroupOffsetsResponseTopic(
                            topic_name=name,
                            topic_id=topic_id,
                            partitions=[
                                self._partition(g.group_id, topic_id, p, version)
                                for p in sorted(parts)
                            ],
                        )
                    )
                continue
            for t in g.topics:
                topic = dsgo.DescribeShareGroupOffsetsResponseTopic(topic_name=t.topic_name)
                out.topics.append(topic)
                denied = allowed is not None and not allowed(
                    client, AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic_name
                )
                info = self.catalog.get(t.topic_name)
                for p in t.partitions:
                    if denied or info is None:
                        topic.partitions.append(
                            dsgo.DescribeShareGroupOffsetsResponsePartition(
                                partition_index=p,
                                start_offset=-1,
                                lag=-1,
                                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED if denied else 0,
                            )
                        )
                        continue
                    topic.topic_id = info.topic_id
                    topic.partitions.append(self._partition(g.group_id, info.topic_id, p, version))
        return dsgo.Response(groups=groups)
