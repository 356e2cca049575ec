"""Topic administration, Kafka vs kgc: CreateTopics, DeleteTopics, CreatePartitions and
DeleteRecords, the valid requests and the refused ones, answer by answer."""

from __future__ import annotations

import time

import pytest
from support.diffkit import Runner, Side

from protocol.messages import (
    create_partitions,
    create_topics,
    delete_records,
    delete_topics,
    list_offsets,
    metadata,
    produce,
)
from storage.record_batch import encode_batch

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

PRODUCE, LIST_OFFSETS, METADATA = 0, 2, 3
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, CREATE_PARTITIONS = 19, 20, 21, 37


def _topic(
    name: str,
    partitions: int = 1,
    replication: int = 1,
    configs: dict[str, str | None] | None = None,
    assignments: list[list[int]] | None = None,
) -> create_topics.CreatableTopic:
    return create_topics.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=replication,
        assignments=[
            create_topics.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
            for i, b in enumerate(assignments or [])
        ],
        configs=[
            create_topics.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()
        ],
    )


def _create(*topics: create_topics.CreatableTopic, validate_only: bool = False) -> object:
    return create_topics.CreateTopicsRequest(
        topics=list(topics), timeout_ms=30000, validate_only=validate_only
    )


def _configs_of(resp: create_topics.CreateTopicsResponse) -> None:
    """CreateTopics v5+ lists every config of a created topic: compared by name (a name's
    dots become '_', so a difference's path names the config in one part)."""
    for t in resp.topics:
        if t.configs:
            t.configs = {  # type: ignore[assignment]
                c.name.replace(".", "_"): {
                    "value": c.value,
                    "read_only": c.read_only,
                    "config_source": c.config_source,
                    "is_sensitive": c.is_sensitive,
                }
                for c in sorted(t.configs, key=lambda c: c.name)
            }


def create_topics_scenario(side: Side) -> None:
    ok = side.name("ct-ok")
    resp = side.call(CREATE_TOPICS, 7, _create(_topic(ok, 3)), step="create.v7")
    _configs_of(resp)
    side.wait_leaders(ok, 3)
    for v in (2, 4, 5):
        side.call(CREATE_TOPICS, v, _create(_topic(ok, 3)), step=f"create.v{v}.exists")
    resp = side.call(
        CREATE_TOPICS,
        7,
        _create(
            _topic(side.name("ct-validate"), 2, configs={"retention.ms": "1000"}),
            validate_only=True,
        ),
        step="create.validate_only",
    )
    _configs_of(resp)
    side.call(
        METADATA,
        12,
        metadata.MetadataRequest(
            topics=[metadata.MetadataRequestTopic(name=side.name("ct-validate"))],
            allow_auto_topic_creation=False,
        ),
        step="create.validate_only_created_nothing",
    )
    cases: dict[str, create_topics.CreatableTopic] = {
        "zero_partitions": _topic(side.name("ct-zero"), 0),
        "negative_partitions": _topic(side.name("ct-neg"), -5),
        "replication_3": _topic(side.name("ct-rf3"), 1, 3),
        "replication_0": _topic(side.name("ct-rf0"), 1, 0),
        "bad_name": _topic("bad/name", 1),
        "dot_name": _topic(".", 1),
        "long_name": _topic("n" * 250, 1),
        "unknown_config": _topic(side.name("ct-cfg"), 1, configs={"no.such.config": "1"}),
        "bad_config_value": _topic(side.name("ct-cfgv"), 1, configs={"retention.ms": "soon"}),
        "bad_cleanup_policy": _topic(
            side.name("ct-cp"), 1, configs={"cleanup.policy": "sometimes"}
        ),
        "null_config_value": _topic(side.name("ct-null"), 1, configs={"retention.ms": None}),
        "assignment_unknown_broker": _topic(side.name("ct-asg"), -1, -1, assignments=[[1234]]),
    }
    for label, topic in cases.items():
        resp = side.call(CREATE_TOPICS, 7, _create(topic), step=f"create.{label}")
        _configs_of(resp)
    dup = side.name("ct-dup")
    side.call(CREATE_TOPICS, 7, _create(_topic(dup), _topic(dup)), step="create.same_name_twice")
    default = side.name("ct-default")
    resp = side.call(CREATE_TOPICS, 7, _create(_topic(default, -1, -1)), step="create.defaults")
    _configs_of(resp)


def _by_name(resp: object, field: str) -> None:
    """Results named by topic come in no order a client relies on (Kafka answers the
    topics it refuses up front before the ones its controller handled): sorted by name."""
    getattr(resp, field).sort(key=lambda r: (r.name or "", r.error_code))


def create_topic_with_a_config_kgc_does_not_honour(side: Side) -> None:
    """kgc refuses a config Kafka knows but kgc would ignore (argued in
    known_differences.toml), apart so that no other step shares its entries."""
    resp = side.call(
        CREATE_TOPICS,
        7,
        _create(_topic(side.name("ct-pre"), 1, configs={"preallocate": "true"})),
        step="create.config_kgc_does_not_honour",
    )
    _configs_of(resp)


def delete_topics_scenario(side: Side) -> None:
    a, b = side.name("dt-a"), side.name("dt-b")
    side.create_topic(a, 2)
    side.create_topic(b, 1)
    resp = side.call(
        DELETE_TOPICS,
        4,
        delete_topics.DeleteTopicsRequest(topic_names=[a, side.name("dt-none")], timeout_ms=30000),
        step="delete.v4_by_name",
    )
    _by_name(resp, "responses")
    topic_id = (
        side.call(
            METADATA,
            12,
            metadata.MetadataRequest(
                topics=[metadata.MetadataRequestTopic(name=b)], allow_auto_topic_creation=False
            ),
            step="delete.id_of",
        )
        .topics[0]
        .topic_id
    )
    resp = side.call(
        DELETE_TOPICS,
        6,
        delete_topics.DeleteTopicsRequest(
            topics=[
                delete_topics.DeleteTopicState(name=None, topic_id=topic_id),
                delete_topics.DeleteTopicState(name=None, topic_id=b"\x05" * 16),
            ],
            timeout_ms=30000,
        ),
        step="delete.v6_by_id",
    )
    _by_name(resp, "responses")
    side.call(
        DELETE_TOPICS,
        6,
        delete_topics.DeleteTopicsRequest(
            topics=[delete_topics.DeleteTopicState(name=a)], timeout_ms=30000
        ),
        step="delete.v6_deleted_name",
    )
    side.call(
        DELETE_TOPICS,
        6,
        delete_topics.DeleteTopicsRequest(
            topics=[delete_topics.DeleteTopicState(name=side.name("dt-x"), topic_id=topic_id)],
            timeout_ms=30000,
        ),
        step="delete.v6_name_and_id",
    )
    side.call(
        DELETE_TOPICS,
        6,
        delete_topics.DeleteTopicsRequest(
            topics=[delete_topics.DeleteTopicState(name=None)], timeout_ms=30000
        ),
        step="delete.v6_neither",
    )
    resp = side.call(
        DELETE_TOPICS,
        5,
        delete_topics.DeleteTopicsRequest(topic_names=["bad/name", ""], timeout_ms=30000),
        step="delete.v5_invalid_names",
    )
    _by_name(resp, "responses")


def _partitions(topic: str, count: int) -> create_partitions.CreatePartitionsTopic:
    return create_partitions.CreatePartitionsTopic(name=topic, count=count, assignments=None)


def create_partitions_scenario(side: Side) -> None:
    topic = side.name("cp")
    side.create_topic(topic, 2)
    for label, count, validate in (
        ("validate_only", 4, True),
        ("increase", 3, False),
        ("same", 3, False),
        ("decrease", 1, False),
        ("zero", 0, False),
    ):
        side.call(
            CREATE_PARTITIONS,
            3,
            create_partitions.CreatePartitionsRequest(
                topics=[_partitions(topic, count)], timeout_ms=30000, validate_only=validate
            ),
            step=f"create_partitions.{label}",
        )
    side.wait_leaders(topic, 3)
    resp = side.call(
        CREATE_PARTITIONS,
        3,
        create_partitions.CreatePartitionsRequest(
            topics=[
                _partitions(side.name("cp-none"), 2),
                _partitions(topic, 4),
                _partitions(topic, 5),
            ],
            timeout_ms=30000,
        ),
        step="create_partitions.unknown_and_duplicate",
    )
    _by_name(resp, "results")
    side.call(
        CREATE_PARTITIONS,
        1,
        create_partitions.CreatePartitionsRequest(
            topics=[
                create_partitions.CreatePartitionsTopic(
                    name=topic,
                    count=4,
                    assignments=[create_partitions.CreatePartitionsAssignment(broker_ids=[99])],
                )
            ],
            timeout_ms=30000,
        ),
        step="create_partitions.assignment_unknown_broker",
    )
    side.call(
        METADATA,
        12,
        metadata.MetadataRequest(
            topics=[metadata.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
        ),
        step="create_partitions.metadata_after",
    )


def _produce(topic: str, n: int) -> produce.ProduceRequest:
    batch = encode_batch(
        0, [(None, f"v{i}".encode()) for i in range(n)], timestamp_ms=1_700_000_000_000
    )
    return produce.ProduceRequest(
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            produce.TopicProduceData(
                name=topic, partition_data=[produce.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )


def _delete_records(topic: str, *offsets: tuple[int, int]) -> delete_records.DeleteRecordsRequest:
    return delete_records.DeleteRecordsRequest(
        topics=[
            delete_records.DeleteRecordsTopic(
                name=topic,
                partitions=[
                    delete_records.DeleteRecordsPartition(partition_index=p, offset=o)
                    for p, o in offsets
                ],
            )
        ],
        timeout_ms=30000,
    )


def _ready(side: Side, topic: str, partitions: int) -> None:
    """Create ``topic`` and wait until its partitions serve ListOffsets (Kafka's replica
    manager takes its leadership a moment after Metadata names the leader). No
    retention by time: the records are stamped years ago, and either server's periodic
    retention check could otherwise delete them between the two runs of a scenario."""
    side.create_topic(topic, partitions, retention_ms="-1")
    req = list_offsets.ListOffsetsRequest(
        replica_id=-1,
        topics=[
            list_offsets.ListOffsetsTopic(
                name=topic,
                partitions=[
                    list_offsets.ListOffsetsPartition(partition_index=p, timestamp=-1)
                    for p in range(partitions)
                ],
            )
        ],
    )
    deadline = time.monotonic() + side.timeout
    while time.monotonic() < deadline:
        _, resp = side.untimed().request(LIST_OFFSETS, req, version=7)
        if all(p.error_code == 0 for t in resp.topics for p in t.partitions):
            return
        time.sleep(0.05)
    raise AssertionError(f"{side.label}: {topic} does not serve ListOffsets")


def delete_records_scenario(side: Side) -> None:
    topic = side.name("dr")
    _ready(side, topic, 2)
    side.call(PRODUCE, 9, _produce(topic, 10), step="delete_records.produce")
    for label, offsets in (
        ("to_3", [(0, 3)]),
        ("backwards", [(0, 1)]),
        ("at_high_watermark", [(0, 10)]),
        ("beyond_high_watermark", [(0, 11)]),
        ("high_watermark_minus_one", [(0, -1)]),
        ("negative", [(0, -7)]),
        ("empty_partition", [(1, 0)]),
        ("unknown_partition", [(5, 0)]),
    ):
        side.call(
            DELETE_RECORDS, 2, _delete_records(topic, *offsets), step=f"delete_records.{label}"
        )
    side.call(
        DELETE_RECORDS,
        2,
        _delete_records(side.name("dr-none"), (0, 0)),
        step="delete_records.unknown_topic",
    )
    resp = side.call(
        DELETE_RECORDS, 0, _delete_records(topic, (0, 10), (1, 0)), step="delete_records.v0"
    )
    # DeleteRecords answers partitions in Kafka's hash-map order: compared sorted.
    resp.topics[0].partitions.sort(key=lambda p: p.partition_index)
    side.call(
        LIST_OFFSETS,
        7,
        list_offsets.ListOffsetsRequest(
            replica_id=-1,
            topics=[
                list_offsets.ListOffsetsTopic(
                    name=topic,
                    partitions=[list_offsets.ListOffsetsPartition(partition_index=0, timestamp=-2)],
                )
            ],
        ),
        step="delete_records.log_start_after",
    )


def test_create_and_delete_topics(diff: Runner) -> None:
    outcome = diff(create_topics_scenario)
    assert outcome.kafka.exchanges[0].response.topics[0].error_code == 0
    diff(create_topic_with_a_config_kgc_does_not_honour)
    diff(delete_topics_scenario)


def test_create_partitions_and_delete_records(diff: Runner) -> None:
    diff(create_partitions_scenario)
    outcome = diff(delete_records_scenario)
    assert outcome.kafka.exchanges[1].response.topics[0].partitions[0].low_watermark == 3
