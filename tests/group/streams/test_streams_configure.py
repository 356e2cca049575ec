"""The topology configured against the topics (Kafka's InternalTopicManagerTest,
RepartitionTopicsTest, CopartitionedTopicsEnforcerTest, ChangelogTopicsTest)."""

from __future__ import annotations

import pytest

from coordinator.group.streams.configure import (
    Status,
    StreamsInvalidTopology,
    configure_topics,
    summarize_topics,
)
from coordinator.group.streams.javaorder import java_hash_order, java_string_hash
from coordinator.group.streams.topology import StreamsTopology, topology_record
from coordinator.group.topics import StaticTopics
from protocol.messages import streams_group_heartbeat as hb
from storage.records.messages.streams_group import (
    CopartitionGroup,
    StreamsGroupTopologyValue,
    Subtopology,
    TopicConfig,
    TopicInfo,
)


def _info(name: str, partitions: int = 0, **configs: str) -> TopicInfo:
    return TopicInfo(
        name=name,
        partitions=partitions,
        topic_configs=[TopicConfig(key=k.replace("_", "."), value=v) for k, v in configs.items()],
    )


def wordcount() -> StreamsTopology:
    """Kafka Streams' word count: source -> repartition -> count with a changelog."""
    return StreamsTopology(
        StreamsGroupTopologyValue(
            epoch=0,
            subtopologies=[
                Subtopology(
                    subtopology_id="0",
                    source_topics=["input"],
                    repartition_sink_topics=["wc-repartition"],
                ),
                Subtopology(
                    subtopology_id="1",
                    repartition_source_topics=[
                        _info("wc-repartition", cleanup_policy="delete", retention_ms="-1")
                    ],
                    state_changelog_topics=[_info("wc-counts-changelog", cleanup_policy="compact")],
                ),
            ],
        )
    )


def test_wordcount_missing_internal_topics_then_ready() -> None:
    topics = StaticTopics()
    topics.add("input", 3)
    c = configure_topics(wordcount(), topics, 7)
    assert not c.is_ready and c.status is not None
    assert c.status.status == Status.MISSING_INTERNAL_TOPICS
    assert c.subtopologies is not None
    assert c.subtopologies["0"].number_of_tasks == 3
    assert c.subtopologies["1"].number_of_tasks == 3
    assert c.subtopologies["1"].stateful and not c.subtopologies["0"].stateful
    create = c.internal_topics_to_create
    assert {n: t.num_partitions for n, t in create.items()} == {
        "wc-repartition": 3,
        "wc-counts-changelog": 3,
    }
    assert dict(create["wc-counts-changelog"].configs) == {"cleanup.policy": "compact"}
    assert create["wc-repartition"].creation_replication_factor() == -1
    # Kafka joins the names in its HashMap's order.
    assert c.status.message == "Internal topics are missing: " + ", ".join(
        java_hash_order(["wc-repartition", "wc-counts-changelog"])
    )
    topics.add("wc-repartition", 3)
    topics.add("wc-counts-changelog", 3)
    ready = configure_topics(wordcount(), topics, 8)
    assert ready.is_ready and not ready.internal_topics_to_create
    assert ready.metadata_hash == 8


def test_missing_source_topics_sorted_and_summarized() -> None:
    t = StreamsTopology(
        StreamsGroupTopologyValue(
            subtopologies=[Subtopology(subtopology_id="0", source_topics=["d", "c", "b", "a"])]
        )
    )
    c = configure_topics(t, StaticTopics(), 0)
    assert c.status is not None and c.status.status == Status.MISSING_SOURCE_TOPICS
    assert c.status.message == "Source topics a, b, c and 1 additional topics are missing."
    assert c.subtopologies is None and not c.internal_topics_to_create
    assert summarize_topics([]) == "<none>"


def test_existing_internal_topic_with_wrong_count() -> None:
    topics = StaticTopics()
    topics.add("input", 3)
    topics.add("wc-repartition", 3)
    topics.add("wc-counts-changelog", 5)
    c = configure_topics(wordcount(), topics, 0)
    assert c.status is not None and c.status.status == Status.INCORRECTLY_PARTITIONED_TOPICS
    assert c.status.message == (
        "Existing topic wc-counts-changelog has different number of partitions: expected 3, found 5"
    )


def test_repartition_count_is_max_of_writer_inputs_through_chains() -> None:
    t = StreamsTopology(
        StreamsGroupTopologyValue(
            subtopologies=[
                Subtopology(
                    subtopology_id="0", source_topics=["a", "b"], repartition_sink_topics=["r1"]
                ),
                Subtopology(
                    subtopology_id="1",
                    repartition_source_topics=[_info("r1")],
                    repartition_sink_topics=["r2"],
                ),
                Subtopology(subtopology_id="2", repartition_source_topics=[_info("r2")]),
            ]
        )
    )
    topics = StaticTopics()
    topics.add("a", 2)
    topics.add("b", 5)
    c = configure_topics(t, topics, 0)
    assert c.subtopologies is not None
    assert [c.subtopologies[i].number_of_tasks for i in "012"] == [5, 5, 5]


def test_repartition_fixed_count_kept() -> None:
    t = StreamsTopology(
        StreamsGroupTopologyValue(
            subtopologies=[
                Subtopology(subtopology_id="0", source_topics=["a"], repartition_sink_topics=["r"]),
                Subtopology(subtopology_id="1", repartition_source_topics=[_info("r", 7)]),
            ]
        )
    )
    topics = StaticTopics()
    topics.add("a", 2)
    c = configure_topics(t, topics, 0)
    assert c.subtopologies is not None and c.subtopologies["1"].number_of_tasks == 7


def test_repartition_loop_is_invalid_topology() -> None:
    t = StreamsTopology(
        StreamsGroupTopologyValue(
            subtopologies=[
                Subtopology(subtopology_id="0", source_topics=["a"]),
                Subtopology(
                    subtopology_id="1",
                    repartition_source_topics=[_info("r1")],
                    repartition_sink_topics=["r2"],
                ),
                Subtopology(
                    subtopology_id="2",
                    repartition_source_topics=[_info("r2")],
                    repartition_sink_topics=["r1"],
                ),
            ]
        )
    )
    topics = StaticTopics()
    topics.add("a", 1)
    with pytest.raises(StreamsInvalidTopology, match="There may be loops in the topology"):
        configure_topics(t, topics, 0)


def test_repartition_source_never_written() -> None:
    t = StreamsTopology(
        StreamsGroupTopologyValue(
            subtopologies=[
                Subtopology(subtopology_id="0", source_topics=["a"]),
                Subtopology(subtopology_id="1", repartition_source_topics=[_info("r")]),
            ]
        )
    )
    topics = StaticTopics()
    topics.add("a", 1)
    with pytest.raises(StreamsInvalidTopology, match="never used as a sink topic"):
        configure_topics(t, topics, 0)


def test_subtopology_without_sources() -> None:
    t = StreamsTopology(StreamsGroupTopologyValue(subtopologies=[Subtopology(subtopology_id="0")]))
    with pytest.raises(StreamsInvalidTopology, match="No source topics found for subtopology 0"):
        configure_topics(t, StaticTopics(), 0)


def _join(left: int, right: int, fixed: int = 0) -> tuple[StreamsTopology, StaticTopics]:
    """A join of external topic ``l`` with the repartitioned ``r`` (copartitioned)."""
    t = StreamsTopology(
        StreamsGroupTopologyValue(
            subtopologies=[
                Subtopology(
                    subtopology_id="0", source_topics=["src"], repartition_sink_topics=["r"]
                ),
                Subtopology(
                    subtopology_id="1",
                    source_topics=["l"],
                    repartition_source_topics=[_info("r", fixed)],
                    copartition_groups=[
                        CopartitionGroup(source_topics=[0], repartition_source_topics=[0])
                    ],
                ),
            ]
        )
    )
    topics = StaticTopics()
    topics.add("src", right)
    topics.add("l", left)
    return t, topics


def test_copartition_forces_external_count_onto_repartition_topic() -> None:
    t, topics = _join(3, 6)
    c = configure_topics(t, topics, 0)
    assert c.subtopologies is not None
    assert c.subtopologies["1"].repartition_source_topics["r"].num_partitions == 3
    assert c.subtopologies["1"].number_of_tasks == 3


def test_copartition_fixed_repartition_disagrees() -> None:
    t, topics = _join(3, 6, fixed=4)
    c = configure_topics(t, topics, 0)
    assert c.status is not None and c.status.status == Status.INCORRECTLY_PARTITIONED_TOPICS
    assert c.status.message == (
        "Number of partitions [4] of repartition topic [r] doesn't match number of "
        "partitions [3] of the source topic."
    )


def test_copartition_external_topics_disagree() -> None:
    t = StreamsTopology(
        StreamsGroupTopologyValue(
            subtopologies=[
                Subtopology(
                    subtopology_id="0",
                    source_topics=["b", "a"],
                    copartition_groups=[CopartitionGroup(source_topics=[0, 1])],
                )
            ]
        )
    )
    topics = StaticTopics()
    topics.add("a", 3)
    topics.add("b", 6)
    c = configure_topics(t, topics, 0)
    assert c.status is not None and c.status.status == Status.INCORRECTLY_PARTITIONED_TOPICS
    assert c.status.message == (
        "Following topics do not have the same number of partitions: [{a=3, b=6}]"
    )


def test_copartition_of_repartition_topics_takes_max() -> None:
    t = StreamsTopology(
        StreamsGroupTopologyValue(
            subtopologies=[
                Subtopology(
                    subtopology_id="0", source_topics=["a"], repartition_sink_topics=["r1"]
                ),
                Subtopology(
                    subtopology_id="1", source_topics=["b"], repartition_sink_topics=["r2"]
                ),
                Subtopology(
                    subtopology_id="2",
                    repartition_source_topics=[_info("r1"), _info("r2")],
                    copartition_groups=[CopartitionGroup(repartition_source_topics=[0, 1])],
                ),
            ]
        )
    )
    topics = StaticTopics()
    topics.add("a", 2)
    topics.add("b", 4)
    c = configure_topics(t, topics, 0)
    assert c.subtopologies is not None
    sub = c.subtopologies["2"]
    assert {n: x.num_partitions for n, x in sub.repartition_source_topics.items()} == {
        "r1": 4,
        "r2": 4,
    }


def test_topology_record_copies_request_in_order() -> None:
    req = hb.Topology(
        epoch=0,
        subtopologies=[
            hb.Subtopology(
                subtopology_id="1",
                source_topics=["x"],
                state_changelog_topics=[
                    hb.TopicInfo(name="c", topic_configs=[hb.KeyValue(key="k", value="v")])
                ],
                repartition_source_topics=[hb.SubtopologyTopicInfo(name="r", partitions=2)],
                copartition_groups=[hb.CopartitionGroup(source_topics=[0])],
            )
        ],
    )
    rec = topology_record(req)
    s = rec.subtopologies[0]
    assert s.subtopology_id == "1" and s.source_topics == ["x"]
    assert s.state_changelog_topics == [_info("c", k="v")]
    assert s.repartition_source_topics[0].partitions == 2
    assert s.copartition_groups == [CopartitionGroup(source_topics=[0])]
    st = StreamsTopology(rec)
    assert st.required_topics() == {"x", "c", "r"}
    assert st.source_topic_map["r"] is s


def test_java_hash_order_matches_java() -> None:
    # Printed by OpenJDK 17's HashMap for these keys put in this order.
    names = [
        "app-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog",
        "app-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition",
        "wc-counts-changelog",
        "wc-repartition",
        "a",
        "b",
        "zz",
        "topic-17",
        "cleanup.policy",
        "message.timestamp.type",
        "segment.bytes",
        "retention.ms",
        *(f"x{i}" for i in range(1, 12)),
    ]
    assert "|".join(java_hash_order(names)) == (
        "zz|x8|a|x9|b|app-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog|"
        "app-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition|message.timestamp.type|"
        "cleanup.policy|topic-17|x10|x1|x11|x2|segment.bytes|retention.ms|x3|x4|"
        "wc-counts-changelog|x5|wc-repartition|x6|x7"
    )
    assert java_string_hash("abc") == 96354
    assert java_string_hash(names[0]) == 1174966222
