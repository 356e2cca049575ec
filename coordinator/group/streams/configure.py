"""Configuring a streams topology against the cluster's topics (Kafka's InternalTopicManager).

How this works: ``configure_topics`` takes the declared topology and the topic image and
decides every internal topic's partition count, or says why it cannot:

1. Missing source topics -> status MISSING_SOURCE_TOPICS ("Source topics a, b are
   missing.", sorted); nothing is configured.
2. Repartition topics (``_repartition_counts``): those declaring a count keep it; the others
   get, until a fixed point, the largest count among the writing subtopology's repartition
   sources and external sources. No progress -> STREAMS_INVALID_TOPOLOGY (loops); a
   repartition source no subtopology writes -> STREAMS_INVALID_TOPOLOGY.
3. Copartition groups (``_enforce``): a group of only repartition topics takes the common
   count of the topology's fixed repartition topics (all must agree), else its largest;
   a group with external topics takes their count (all must agree), forced onto its
   repartition topics; disagreement -> status INCORRECTLY_PARTITIONED_TOPICS.
4. Changelogs get their subtopology's task count (max over its sources); a subtopology
   without sources -> STREAMS_INVALID_TOPOLOGY.
5. Internal topics that exist must have the decided count (else INCORRECTLY_PARTITIONED);
   those that do not are returned to be created, with status MISSING_INTERNAL_TOPICS and
   the configured subtopologies present but not ready.

Statuses are ``TopicConfigurationError`` caught here into the result (the group is
NotReady, every member's target empty); ``StreamsInvalidTopology`` escapes and fails the
heartbeat with STREAMS_INVALID_TOPOLOGY. Java's HashMap orders are kept where a message or
a list shows them (``javaorder``), so a texts and lists match the broker's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from coordinator.group.streams.javaorder import java_hash_order
from coordinator.group.streams.topology import StreamsTopology
from coordinator.group.topics import TopicsImage
from storage.records.messages.streams_group import Subtopology, TopicInfo

__all__ = [
    "ConfiguredInternalTopic",
    "ConfiguredSubtopology",
    "ConfiguredTopology",
    "Status",
    "StreamsInvalidTopology",
    "TopicConfigurationError",
    "configure_topics",
    "summarize_topics",
]


class Status:
    """StreamsGroupHeartbeatResponse's status codes (the client's ``Status`` enum)."""

    STALE_TOPOLOGY = 0
    MISSING_SOURCE_TOPICS = 1
    INCORRECTLY_PARTITIONED_TOPICS = 2
    MISSING_INTERNAL_TOPICS = 3
    SHUTDOWN_APPLICATION = 4
    ASSIGNMENT_DELAYED = 5
    # Sent to v1 requests only: a v0 client maps an unknown code to null and fails on it.
    MISSING_CLIENT_TAGS = 6


class StreamsInvalidTopology(Exception):
    """The topology cannot be configured whatever the cluster holds: STREAMS_INVALID_TOPOLOGY."""


class TopicConfigurationError(Exception):
    """The topology does not fit the cluster's topics now: a status, not an error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def summarize_topics(names: Iterable[str]) -> str:
    """Up to three names, then " and N additional topics" (``<none>`` if empty)."""
    items = list(names)
    if not items:
        return "<none>"
    text = ", ".join(items[:3])
    if len(items) > 3:
        text += f" and {len(items) - 3} additional topics"
    return text


def _java_map(counts: Mapping[str, int]) -> str:
    """A sorted map as Java's ``TreeMap.toString`` prints it: ``{a=3, b=6}``."""
    return "{" + ", ".join(f"{k}={counts[k]}" for k in sorted(counts)) + "}"


@dataclass(frozen=True, slots=True)
class ConfiguredInternalTopic:
    name: str
    num_partitions: int
    # None when the client left it to the broker (0 in the topology).
    replication_factor: int | None
    # In the order Kafka's HashMap iterates them (describe lists them so).
    configs: tuple[tuple[str, str], ...]

    def creation_replication_factor(self) -> int:
        """What CreateTopics is asked for: the client's factor, -1 for the broker default."""
        return self.replication_factor if self.replication_factor else -1


@dataclass(frozen=True, slots=True)
class ConfiguredSubtopology:
    number_of_tasks: int
    source_topics: frozenset[str]
    repartition_source_topics: dict[str, ConfiguredInternalTopic]
    repartition_sink_topics: frozenset[str]
    state_changelog_topics: dict[str, ConfiguredInternalTopic]

    @property
    def stateful(self) -> bool:
        """Only stateful subtopologies (with a changelog) get standby tasks."""
        return bool(self.state_changelog_topics)


@dataclass(frozen=True, slots=True)
class ConfiguredTopology:
    topology_epoch: int
    metadata_hash: int
    # Subtopology id -> configured subtopology, sorted by id; None when configuration
    # stopped before deciding the counts (missing sources, incorrect partitioning).
    subtopologies: dict[str, ConfiguredSubtopology] | None
    # Name -> topic, in the order Kafka lists them; non-empty only with MISSING_INTERNAL_TOPICS.
    internal_topics_to_create: dict[str, ConfiguredInternalTopic]
    status: TopicConfigurationError | None

    @property
    def is_ready(self) -> bool:
        return self.status is None


def configure_topics(
    topology: StreamsTopology, topics: TopicsImage, metadata_hash: int
) -> ConfiguredTopology:
    """Decide the internal topics' counts against ``topics`` (see the module docstring)."""
    # Kafka reads the subtopologies from a HashMap keyed by id: that order decides which
    # of several problems is reported.
    order = java_hash_order(topology.subtopologies)
    subs = [topology.subtopologies[i] for i in order]
    try:
        _check_sources(subs, topics)
        decided = _decide_counts(subs, topics)
        configured = {
            s.subtopology_id: _configure(s, topics, decided)
            for s in sorted(subs, key=lambda s: s.subtopology_id)
        }
        to_create = _missing_internal_topics(configured, subs, topics)
    except TopicConfigurationError as e:
        return ConfiguredTopology(topology.epoch, metadata_hash, None, {}, e)
    status = None
    if to_create:
        status = TopicConfigurationError(
            Status.MISSING_INTERNAL_TOPICS,
            "Internal topics are missing: " + summarize_topics(to_create),
        )
    return ConfiguredTopology(topology.epoch, metadata_hash, configured, to_create, status)


def _partition_count(name: str, topics: TopicsImage, decided: Mapping[str, int]) -> int | None:
    t = topics.topic(name)
    if t is not None:
        return t.num_partitions
    return decided.get(name)


def _check_sources(subs: list[Subtopology], topics: TopicsImage) -> None:
    missing = sorted({n for s in subs for n in s.source_topics if topics.topic(n) is None})
    if missing:
        raise TopicConfigurationError(
            Status.MISSING_SOURCE_TOPICS, f"Source topics {summarize_topics(missing)} are missing."
        )


def _decide_counts(subs: list[Subtopology], topics: TopicsImage) -> dict[str, int]:
    decided = _repartition_counts(subs, topics)
    fixed = {t.name for s in subs for t in s.repartition_source_topics if t.partitions != 0}
    flexible = {t.name for s in subs for t in s.repartition_source_topics if t.partitions == 0}
    fixed_order = java_hash_order(
        t.name for s in subs for t in s.repartition_source_topics if t.partitions != 0
    )
    for s in subs:
        for group in _copartition_groups(s):
            decided.update(_enforce(group, fixed, fixed_order, flexible, topics, decided))
    decided.update(_changelog_counts(subs, topics, decided))
    return decided


def _repartition_counts(subs: list[Subtopology], topics: TopicsImage) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in subs:
        for t in s.repartition_source_topics:
            if t.partitions != 0:
                counts[t.name] = t.partitions
    while True:
        needed = progress = False
        for s in subs:
            for sink in s.repartition_sink_topics:
                if sink in counts:
                    continue
                n = _writer_count(s, counts, topics)
                if n is None:
                    needed = True
                else:
                    counts[sink] = n
                    progress = True
        if needed and not progress:
            raise StreamsInvalidTopology(
                "Failed to compute number of partitions for all repartition topics. "
                "There may be loops in the topology that cannot be resolved."
            )
        if not needed:
            break
    for s in subs:
        if any(t.name not in counts for t in s.repartition_source_topics):
            raise StreamsInvalidTopology(
                "Failed to compute number of partitions for all repartition topics, because "
                "a repartition source topic is never used as a sink topic."
            )
    return counts


def _writer_count(s: Subtopology, counts: Mapping[str, int], topics: TopicsImage) -> int | None:
    """The largest known count among a subtopology's inputs (None if none is known yet)."""
    best: int | None = None
    for t in s.repartition_source_topics:
        n = counts.get(t.name)
        if n is not None and (best is None or n > best):
            best = n
    for name in s.source_topics:
        topic = topics.topic(name)
        if topic is not None and (best is None or topic.num_partitions > best):
            best = topic.num_partitions
    return best


def _copartition_groups(s: Subtopology) -> list[list[str]]:
    groups = []
    for g in s.copartition_groups:
        names = [s.source_topics[i] for i in g.source_topics]
        names += [s.repartition_source_topics[i].name for i in g.repartition_source_topics]
        groups.append(java_hash_order(names))
    return groups


def _enforce(
    group: list[str],
    fixed: set[str],
    fixed_order: list[str],
    flexible: set[str],
    topics: TopicsImage,
    decided: Mapping[str, int],
) -> dict[str, int]:
    """Kafka's CopartitionedTopicsEnforcer.enforce for one copartition group."""
    if not group:
        return {}

    def count(name: str) -> int:
        n = _partition_count(name, topics, decided)
        if n is None:
            raise RuntimeError(f"Number of partitions is not set for topic: {name}")
        return n

    repartition = {n: count(n) for n in group if n in fixed or n in flexible}
    external = {n: count(n) for n in group if n not in repartition}
    if not external:
        if fixed:
            # Kafka compares every fixed repartition topic of the whole topology here, and
            # reports the group's own topics.
            use = count(fixed_order[0])
            if any(count(n) != use for n in fixed_order):
                raise TopicConfigurationError(
                    Status.INCORRECTLY_PARTITIONED_TOPICS,
                    "Following topics do not have the same number of partitions: "
                    f"[{_java_map(repartition)}]",
                )
        else:
            use = max(repartition.values(), default=0)
            if use == 0:
                raise StreamsInvalidTopology(
                    "All topics in the copartition group had undefined partition number: "
                    f"[{', '.join(java_hash_order(repartition))}]"
                )
    else:
        use = next(iter(external.values()))
        if any(n != use for n in external.values()):
            raise TopicConfigurationError(
                Status.INCORRECTLY_PARTITIONED_TOPICS,
                f"Following topics do not have the same number of partitions: [{_java_map(external)}]",
            )
    result: dict[str, int] = {}
    for name, n in repartition.items():
        result[name] = use
        if name in fixed and n != use:
            raise TopicConfigurationError(
                Status.INCORRECTLY_PARTITIONED_TOPICS,
                f"Number of partitions [{n}] of repartition topic [{name}] doesn't match "
                f"number of partitions [{use}] of the source topic.",
            )
    return result


def _task_count(s: Subtopology, topics: TopicsImage, decided: Mapping[str, int]) -> int | None:
    best: int | None = None
    names = [*s.source_topics, *(t.name for t in s.repartition_source_topics)]
    for name in names:
        n = _partition_count(name, topics, decided)
        if n is None:
            raise RuntimeError(f"No partition count for source topic {name}")
        best = n if best is None else max(best, n)
    return best


def _changelog_counts(
    subs: list[Subtopology], topics: TopicsImage, decided: Mapping[str, int]
) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in subs:
        n = _task_count(s, topics, decided)
        if n is None:
            raise StreamsInvalidTopology(
                f"No source topics found for subtopology {s.subtopology_id}"
            )
        for t in s.state_changelog_topics:
            counts[t.name] = n
    return counts


def _internal_topic(t: TopicInfo, decided: Mapping[str, int]) -> ConfiguredInternalTopic:
    if t.partitions == 0 and t.name not in decided:
        raise RuntimeError(f"Number of partitions must be set for topic {t.name}")
    configs = {c.key: c.value for c in t.topic_configs}
    return ConfiguredInternalTopic(
        name=t.name,
        num_partitions=t.partitions if t.partitions != 0 else decided[t.name],
        replication_factor=t.replication_factor if t.replication_factor != 0 else None,
        configs=tuple((k, configs[k]) for k in java_hash_order(configs)),
    )


def _configure(
    s: Subtopology, topics: TopicsImage, decided: Mapping[str, int]
) -> ConfiguredSubtopology:
    tasks = _task_count(s, topics, decided)
    if tasks is None:
        raise RuntimeError("Subtopology does not contain any source topics")
    return ConfiguredSubtopology(
        number_of_tasks=tasks,
        source_topics=frozenset(s.source_topics),
        repartition_source_topics={
            t.name: _internal_topic(t, decided) for t in s.repartition_source_topics
        },
        repartition_sink_topics=frozenset(s.repartition_sink_topics),
        state_changelog_topics={
            t.name: _internal_topic(t, decided) for t in s.state_changelog_topics
        },
    )


def _missing_internal_topics(
    configured: dict[str, ConfiguredSubtopology], subs: list[Subtopology], topics: TopicsImage
) -> dict[str, ConfiguredInternalTopic]:
    puts: list[ConfiguredInternalTopic] = []
    for c in configured.values():
        for group in (c.repartition_source_topics, c.state_changelog_topics):
            puts.extend(group[n] for n in java_hash_order(group))
    wanted = {t.name: t for t in puts}
    required = java_hash_order(
        n
        for s in subs
        for n in (
            *s.source_topics,
            *(t.name for t in s.repartition_source_topics),
            *(t.name for t in s.state_changelog_topics),
        )
    )
    for name in required:
        existing = topics.topic(name)
        if existing is None:
            continue
        expected = wanted.pop(name, None)
        if expected is not None and existing.num_partitions != expected.num_partitions:
            raise TopicConfigurationError(
                Status.INCORRECTLY_PARTITIONED_TOPICS,
                f"Existing topic {name} has different number of partitions: expected "
                f"{expected.num_partitions}, found {existing.num_partitions}",
            )
    order = java_hash_order(t.name for t in puts)
    return {n: wanted[n] for n in order if n in wanted}
