"""Metadata and FindCoordinator answers, field by field as Kafka gives them, in process.

The real broker, group runtime and data plane over real logs (no sockets), wired as
``App.start`` wires them. Each case is one the differential suite (tests/differential) found
answered otherwise than by Apache Kafka.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.app import group_core, log_config_for
from coordinator.catalog import TopicCatalog
from coordinator.config import Settings
from coordinator.dataplane import DataPlane
from coordinator.dataplane.offsets_topic import OffsetsTopic
from coordinator.server.broker import Broker
from coordinator.server.handler import ClientInfo, Deferred
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import find_coordinator, metadata
from storage.local.durability import Flusher
from storage.local.manager import LogManager

CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)
# Errors.INVALID_REQUEST.message(): what Kafka answers for a key type it does not know.
INVALID_REQUEST_MESSAGE = (
    "This most likely occurs because of a request being malformed by the client library or "
    "the message was sent to an incompatible broker. See the broker logs for more details."
)


class Node:
    def __init__(self, data_dir: Path) -> None:
        s = self.settings = Settings(
            data_dir=data_dir, offsets_topic_num_partitions=4, group_initial_rebalance_delay_ms=0
        )
        self.flusher = Flusher()
        self.logs = LogManager(data_dir, flusher=self.flusher)
        self.catalog = TopicCatalog(data_dir / "topics.json")
        self.catalog.reconcile(self.logs)
        self.logs.open_all(functools.partial(log_config_for, s, self.catalog))
        _, _, self.groups = group_core(s, self.catalog, self.logs, self.flusher, hosted=True)
        self.offsets = OffsetsTopic(self.groups, s.cluster_id)
        self.data = DataPlane(s, self.catalog, self.logs, self.flusher, offsets_topic=self.offsets)
        self.broker = Broker(
            s, self.catalog, self.logs, self.groups, self.data, advertised_port=9092
        )
        self.h = self.broker.handlers()

    async def call(self, key: int, version: int, body: Any) -> Any:
        res = self.h[key](RequestHeader(key, version, 1, "test"), body, CLIENT)
        if isinstance(res, Deferred):
            res = await res
        return res

    async def close(self) -> None:
        await self.data.stop()
        self.groups.close()
        await self.flusher.stop()
        self.logs.close_all()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path / "data")
    yield n
    await n.close()


def _meta(*topics: metadata.MetadataRequestTopic, auto: bool = False) -> metadata.MetadataRequest:
    return metadata.MetadataRequest(topics=list(topics), allow_auto_topic_creation=auto)


async def test_metadata_answers_a_topic_named_twice_once(node: Node) -> None:
    node.broker.create_topic("t", 2, {})
    node.broker.create_topic("u", 1, {})
    t, u = metadata.MetadataRequestTopic(name="t"), metadata.MetadataRequestTopic(name="u")
    resp = await node.call(metadata.API_KEY, 12, _meta(t, u, t, u))
    assert [x.name for x in resp.topics] == ["t", "u"]


async def test_metadata_for_an_unknown_topic_id_names_that_id(node: Node) -> None:
    unknown = b"\x07" * 16
    resp = await node.call(
        metadata.API_KEY, 12, _meta(metadata.MetadataRequestTopic(topic_id=unknown, name=None))
    )
    [topic] = resp.topics
    assert (topic.error_code, topic.name, topic.topic_id) == (
        ErrorCode.UNKNOWN_TOPIC_ID,
        None,
        unknown,
    )


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_find_coordinator_v1_to_v3_success_says_none(node: Node, version: int) -> None:
    # Kafka fills the single-key answer's message from Errors.NONE.message(): "NONE".
    resp = await node.call(
        find_coordinator.API_KEY, version, find_coordinator.FindCoordinatorRequest(key="g")
    )
    assert (resp.error_code, resp.error_message) == (0, "NONE")


async def test_find_coordinator_v4_success_has_an_empty_message(node: Node) -> None:
    resp = await node.call(
        find_coordinator.API_KEY,
        4,
        find_coordinator.FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]),
    )
    assert [(c.error_code, c.error_message) for c in resp.coordinators] == [(0, "")]


@pytest.mark.parametrize("version", [1, 3, 4, 6])
async def test_find_coordinator_unknown_key_type_is_invalid_request_with_kafkas_message(
    node: Node, version: int
) -> None:
    req = find_coordinator.FindCoordinatorRequest(key="g", key_type=7, coordinator_keys=["g"])
    resp = await node.call(find_coordinator.API_KEY, version, req)
    answer = resp.coordinators[0] if version >= 4 else resp
    assert (answer.error_code, answer.error_message, answer.node_id) == (
        ErrorCode.INVALID_REQUEST,
        INVALID_REQUEST_MESSAGE,
        -1,
    )
