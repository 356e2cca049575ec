"""Metadata and FindCoordinator answers, field by field as Kafka gives them, in process.

The real broker, group runtime and data plane over real logs (no sockets), wired as
``coordinator.node.assemble`` wires them. Each case is one the differential suite (tests/differential) found
answered otherwise than by Apache Kafka.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.brokernodekit import Node

from coordinator import topic_configs
from coordinator.catalog import TopicExistsError
from protocol.errors import ErrorCode
from protocol.messages import create_topics, delete_topics, find_coordinator, metadata

# Errors.INVALID_REQUEST.message(): what Kafka answers for a key type it does not know.
INVALID_REQUEST_MESSAGE = (
    "This most likely occurs because of a request being malformed by the client library or "
    "the message was sent to an incompatible broker. See the broker logs for more details."
)


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


async def test_metadata_by_topic_id_ignores_the_empty_name_the_java_client_sends(
    node: Node,
) -> None:
    """The Java client asks for the topics of a KIP-848 assignment by id with the name left
    at its default, "" (not null). Kafka looks topics up by id as soon as one id is given
    and ignores every name then; kgc answered "" as an invalid topic name, so a consumer
    subscribed with a SubscriptionPattern never learned its partitions."""
    node.broker.create_topic("t", 2, {})
    tid = node.catalog.get("t").topic_id  # type: ignore[union-attr]
    by_id = metadata.MetadataRequestTopic(name="", topic_id=tid)
    resp = await node.call(metadata.API_KEY, 12, _meta(by_id))
    assert [(x.error_code, x.name, x.topic_id, len(x.partitions)) for x in resp.topics] == [
        (0, "t", tid, 2)
    ]
    unrelated_name = metadata.MetadataRequestTopic(name="other", topic_id=bytes(16))
    resp = await node.call(metadata.API_KEY, 12, _meta(by_id, unrelated_name, by_id))
    assert [x.name for x in resp.topics] == ["t"]
    node.broker.create_topic("u", 1, {})
    uid = node.catalog.get("u").topic_id  # type: ignore[union-attr]
    resp = await node.call(
        metadata.API_KEY, 12, _meta(metadata.MetadataRequestTopic(name="", topic_id=uid))
    )
    assert [(x.name, x.topic_id) for x in resp.topics] == [("u", uid)]
    unknown = metadata.MetadataRequestTopic(name="", topic_id=b"\x07" * 16)
    resp = await node.call(metadata.API_KEY, 12, _meta(unknown))
    assert [(x.error_code, x.name) for x in resp.topics] == [(ErrorCode.UNKNOWN_TOPIC_ID, None)]


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


async def test_find_coordinator_share_key_is_the_state_partitions_holder(node: Node) -> None:
    """Key type 2 (SHARE, v6+): "group:topicId:partition", the holder of its
    __share_group_state partition (here, the one node); older versions and a malformed
    key answer INVALID_REQUEST."""
    key = "g:AAECAwQFBgcICQoLDA0ODw:0"
    req = find_coordinator.FindCoordinatorRequest(key_type=2, coordinator_keys=[key])
    resp = await node.call(find_coordinator.API_KEY, 6, req)
    assert [(c.key, c.error_code, c.node_id) for c in resp.coordinators] == [(key, 0, 0)]
    resp = await node.call(find_coordinator.API_KEY, 5, req)
    assert resp.coordinators[0].error_code == ErrorCode.INVALID_REQUEST
    for bad in (
        "g",
        "g:not-a-topic-id:0",
        "g:AAECAwQFBgcICQoLDA0ODw:x",
        ":AAECAwQFBgcICQoLDA0ODw:0",
    ):
        req = find_coordinator.FindCoordinatorRequest(key_type=2, coordinator_keys=[bad])
        resp = await node.call(find_coordinator.API_KEY, 6, req)
        assert resp.coordinators[0].error_code == ErrorCode.INVALID_REQUEST, bad


def _creatable(
    name: str, partitions: int = 1, replication: int = 1, assignments: list[list[int]] | None = None
) -> create_topics.CreatableTopic:
    return create_topics.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=replication,
        assignments=[
            create_topics.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
            for i, b in enumerate(assignments or [])
        ],
    )


async def _create_one(node: Node, topic: create_topics.CreatableTopic, **kw: Any) -> Any:
    resp = await node.call(
        create_topics.API_KEY, 7, create_topics.CreateTopicsRequest(topics=[topic], **kw)
    )
    [result] = resp.topics
    return result


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Topic name is invalid: the empty string is not allowed"),
        (".", "Topic name is invalid: '.' is not allowed"),
        ("..", "Topic name is invalid: '..' is not allowed"),
        (
            "n" * 250,
            f"Topic name is invalid: the length of '{'n' * 250}' is longer than the max "
            "allowed length 249",
        ),
        (
            "bad/name",
            "Topic name is invalid: 'bad/name' contains one or more characters other than "
            "ASCII alphanumerics, '.', '_' and '-'",
        ),
    ],
)
async def test_create_topics_invalid_name_has_kafkas_message(
    node: Node, name: str, message: str
) -> None:
    result = await _create_one(node, _creatable(name))
    assert (result.error_code, result.error_message) == (ErrorCode.INVALID_TOPIC, message)


@pytest.mark.parametrize(
    ("topic", "code", "message"),
    [
        (
            _creatable("t", 0),
            ErrorCode.INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        ),
        (
            _creatable("t", 1, 0),
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        ),
        (
            _creatable("t", 1, -2),
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        ),
        (
            _creatable("t", 1, 3),
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
            "cannot be reached because only 1 broker(s) are registered or some brokers have "
            "all their log directories cordoned.",
        ),
        (
            _creatable("t", -1, -1, [[1234]]),
            ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
            "The manual partition assignment includes broker 1234, but no such broker is "
            "registered.",
        ),
    ],
)
async def test_create_topics_refusals_have_kafkas_messages(
    node: Node, topic: create_topics.CreatableTopic, code: int, message: str
) -> None:
    result = await _create_one(node, topic)
    assert (result.error_code, result.error_message) == (code, message)


async def test_create_topics_success_has_no_message_and_validate_only_an_id(node: Node) -> None:
    created = await _create_one(node, _creatable("t", 2))
    assert (created.error_code, created.error_message) == (0, None)
    checked = await _create_one(node, _creatable("u", 2), validate_only=True)
    assert (checked.error_code, checked.error_message) == (0, None)
    # Kafka names the id the topic would get; nothing is created.
    assert checked.topic_id != bytes(16)
    assert node.catalog.get("u") is None


async def test_create_topics_names_a_duplicated_topic_once_as_invalid_request(node: Node) -> None:
    resp = await node.call(
        create_topics.API_KEY,
        7,
        create_topics.CreateTopicsRequest(
            topics=[_creatable("d"), _creatable("ok"), _creatable("d", 3)]
        ),
    )
    assert [(t.name, t.error_code, t.error_message) for t in resp.topics] == [
        ("d", ErrorCode.INVALID_REQUEST, "Duplicate topic name."),
        ("ok", 0, None),
    ]
    assert node.catalog.get("d") is None


async def test_delete_topics_errors_have_kafkas_messages(node: Node) -> None:
    req = delete_topics.DeleteTopicsRequest(
        topics=[
            delete_topics.DeleteTopicState(name="nope"),
            delete_topics.DeleteTopicState(name=None, topic_id=b"\x05" * 16),
            delete_topics.DeleteTopicState(name="x", topic_id=b"\x05" * 16),
            delete_topics.DeleteTopicState(name=None),
        ]
    )
    resp = await node.call(delete_topics.API_KEY, 6, req)
    assert [(r.error_code, r.error_message) for r in resp.responses] == [
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."),
        (ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID."),
        (ErrorCode.INVALID_REQUEST, "You may not specify both topic name and topic id."),
        (ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified."),
    ]


async def test_create_topics_lists_every_kafka_topic_config_as_kafka_does(node: Node) -> None:
    topic = _creatable("t")
    topic.configs = [create_topics.CreatableTopicConfig(name="retention.ms", value="1000")]
    result = await _create_one(node, topic)
    got = {c.name: (c.value, c.config_source, c.read_only) for c in result.configs}
    # Kafka lists its whole topic config table, sorted by name (not only the ones kgc honours).
    assert [c.name for c in result.configs] == sorted(topic_configs.KAFKA_TOPIC_CONFIGS)
    assert got["retention.ms"] == ("1000", 1, False)
    assert got["index.interval.bytes"] == ("4096", 5, False)
    assert got["segment.bytes"] == ("1073741824", 5, False)


async def test_create_topics_lists_the_configs_kafka_4_4_added_at_its_defaults(node: Node) -> None:
    result = await _create_one(node, _creatable("t"))
    got = {c.name: c.value for c in result.configs}
    assert {
        k: got.get(k)
        for k in (
            "errors.deadletterqueue.group.enable",
            "max.decompressed.message.bytes",
            "remote.copy.lag.bytes",
            "remote.copy.lag.ms",
            "message.timestamp.after.max.ms",
        )
    } == {
        "errors.deadletterqueue.group.enable": "false",
        "max.decompressed.message.bytes": "2147483639",
        "remote.copy.lag.bytes": "-1",
        "remote.copy.lag.ms": "0",
        "message.timestamp.after.max.ms": "3600000",  # Kafka 4's default (KIP-937)
    }


async def test_creating_an_existing_topic_again_keeps_its_id(node: Node, tmp_path: Path) -> None:
    """A streams group's heartbeat may ask for an internal topic that an earlier heartbeat's
    creation just made (the group learns of new topics after the catalog does). Creating it
    again must be refused (TopicExistsError, which the creator takes as done), not give the
    topic a new id in the catalog while its partition directories keep the first one: kgc
    would then refuse to start after a crash ("holds topic id ... but topics.json says")."""
    first = node.broker.create_topic("again", 2, {})
    with pytest.raises(TopicExistsError):
        node.broker.create_topic("again", 2, {})
    info = node.catalog.get("again")
    assert info is not None and info.topic_id == first.topic_id
    await node.close()
    restarted = Node(tmp_path / "data")  # reconcile agrees with the directories
    try:
        again = restarted.catalog.get("again")
        assert again is not None and again.topic_id == first.topic_id
    finally:
        await restarted.close()
