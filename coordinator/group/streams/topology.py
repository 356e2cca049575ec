"""A streams group's topology as the client declares it, and the names it needs.

How this works: a Kafka Streams member sends its topology on (re)join; the group keeps it
as the ``StreamsGroupTopology`` record value, a field-by-field copy of the request in the
order it was sent (two topologies are "the same" when those values are equal, as Kafka's
record equality). A subtopology is a unit of parallelism: its tasks read the same partition
of its source topics (external, must exist) and repartition source topics (internal, written
by another subtopology's repartition sinks); its state changelog topics (internal,
compacted) back its stores. Copartition groups name, by index into the subtopology's own
lists, the topics a join needs equally partitioned. Kafka's ``StreamsTopology``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.messages import streams_group_heartbeat as hb
from storage.records.messages.streams_group import (
    CopartitionGroup,
    StreamsGroupTopologyValue,
    Subtopology,
    TopicConfig,
    TopicInfo,
)

__all__ = ["StreamsTopology", "topology_record"]


def _topic_info(t: hb.TopicInfo | hb.SubtopologyTopicInfo) -> TopicInfo:
    return TopicInfo(
        name=t.name,
        partitions=t.partitions,
        replication_factor=t.replication_factor,
        topic_configs=[TopicConfig(key=c.key, value=c.value) for c in t.topic_configs],
    )


def topology_record(topology: hb.Topology) -> StreamsGroupTopologyValue:
    """The record value of a heartbeat's topology (Kafka's convertToStreamsGroupTopologyRecord)."""
    return StreamsGroupTopologyValue(
        epoch=topology.epoch,
        subtopologies=[
            Subtopology(
                subtopology_id=s.subtopology_id,
                source_topics=list(s.source_topics),
                source_topic_regex=list(s.source_topic_regex),
                state_changelog_topics=[_topic_info(t) for t in s.state_changelog_topics],
                repartition_sink_topics=list(s.repartition_sink_topics),
                repartition_source_topics=[_topic_info(t) for t in s.repartition_source_topics],
                copartition_groups=[
                    CopartitionGroup(
                        source_topics=list(g.source_topics),
                        source_topic_regex=list(g.source_topic_regex),
                        repartition_source_topics=list(g.repartition_source_topics),
                    )
                    for g in s.copartition_groups
                ],
            )
            for s in topology.subtopologies
        ],
    )


@dataclass(slots=True)
class StreamsTopology:
    """The topology record plus the indexes the group reads it through."""

    record: StreamsGroupTopologyValue
    # Subtopology id -> subtopology, in the order sent (a later duplicate id wins, as the
    # record's map in Kafka).
    subtopologies: dict[str, Subtopology] = field(init=False)
    # Source or repartition-source topic -> the subtopology reading it (offset commits map
    # a committed partition to its task through it).
    source_topic_map: dict[str, Subtopology] = field(init=False)

    def __post_init__(self) -> None:
        self.subtopologies = {s.subtopology_id: s for s in self.record.subtopologies}
        self.source_topic_map = {}
        for s in self.subtopologies.values():
            for name in s.source_topics:
                self.source_topic_map[name] = s
            for t in s.repartition_source_topics:
                self.source_topic_map[t.name] = s

    @property
    def epoch(self) -> int:
        return self.record.epoch

    def required_topics(self) -> set[str]:
        """Source, repartition-source and changelog topics: what the metadata hash covers."""
        names: set[str] = set()
        for s in self.subtopologies.values():
            names.update(s.source_topics)
            names.update(t.name for t in s.repartition_source_topics)
            names.update(t.name for t in s.state_changelog_topics)
        return names

    def all_topics(self) -> list[str]:
        """Every topic the topology names (sources, sinks, repartition sources, changelogs)."""
        names: list[str] = []
        for s in self.record.subtopologies:
            names.extend(s.source_topics)
            names.extend(s.repartition_sink_topics)
            names.extend(t.name for t in s.repartition_source_topics)
            names.extend(t.name for t in s.state_changelog_topics)
        return names
