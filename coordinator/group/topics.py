"""What the group core knows about topics: a read-only view of the topic catalog.

How this works: the core never reads the catalog itself (it is pure); it is handed a
``TopicsImage`` that answers "which topic has this name / this id, with how many
partitions". Kafka's coordinator reads its ``MetadataImage`` the same way. Consumer groups
(KIP-848) speak topic ids and hash the subscribed topics' metadata to notice changes;
OffsetCommit/OffsetFetch v10 name topics by id. Changes reach the core as calls
(``GroupShard.topics_changed``), never by polling, so a test can drive them with a
``StaticTopics`` and a fake clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple, Protocol

__all__ = ["StaticTopics", "TopicImage", "TopicsImage"]


class TopicImage(NamedTuple):
    name: str
    topic_id: bytes  # Kafka's Uuid, 16 bytes
    num_partitions: int
    # Racks of each partition's replicas, as Kafka's metadata hash reads them: one tuple
    # per partition (index = partition id), empty when the brokers carry no rack.
    partition_racks: tuple[tuple[str, ...], ...] = ()


class TopicsImage(Protocol):
    def topic(self, name: str) -> TopicImage | None:
        """The topic named ``name``, None if it does not exist."""
        ...

    def topic_by_id(self, topic_id: bytes) -> TopicImage | None:
        """The topic with id ``topic_id``, None if it does not exist."""
        ...

    def topic_names(self) -> Iterable[str]:
        """Every topic's name (regular-expression subscriptions scan these)."""
        ...


class StaticTopics:
    """A TopicsImage held in memory: unit tests, and anything without a catalog."""

    def __init__(self, topics: Iterable[TopicImage] = ()) -> None:
        self._by_name: dict[str, TopicImage] = {}
        self._by_id: dict[bytes, TopicImage] = {}
        for t in topics:
            self.put(t)

    def put(self, topic: TopicImage) -> None:
        old = self._by_name.get(topic.name)
        if old is not None:
            self._by_id.pop(old.topic_id, None)
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def add(self, name: str, num_partitions: int, topic_id: bytes | None = None) -> TopicImage:
        """Create (or grow) ``name``; the id is derived from the name unless given."""
        old = self._by_name.get(name)
        if topic_id is None:
            topic_id = old.topic_id if old is not None else _id_for(name)
        t = TopicImage(name, topic_id, num_partitions)
        self.put(t)
        return t

    def remove(self, name: str) -> None:
        t = self._by_name.pop(name, None)
        if t is not None:
            self._by_id.pop(t.topic_id, None)

    def topic(self, name: str) -> TopicImage | None:
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: bytes) -> TopicImage | None:
        return self._by_id.get(topic_id)

    def topic_names(self) -> Iterator[str]:
        return iter(list(self._by_name))


def _id_for(name: str) -> bytes:
    import hashlib

    return hashlib.blake2b(name.encode(), digest_size=16).digest()
