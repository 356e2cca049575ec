"""The streams coordinator's internal-topic creation never replaces a topic that exists.

The group core decides which internal topics are missing from its view of the topics,
which can lag a creation just made (a second heartbeat within that moment asks again);
the creation must then leave the topic as it is, as Kafka's CreateTopics answers
TOPIC_ALREADY_EXISTS, instead of giving it a new topic id (clients holding the first id
would fetch an unknown topic). The real broker over real logs (``test_topics.Node``).
"""

from __future__ import annotations

from pathlib import Path

from support.brokernodekit import Node

from coordinator.apis import Parts
from coordinator.apis.streams import InternalTopicCreator


async def test_a_second_creation_of_an_internal_topic_keeps_it(tmp_path: Path) -> None:
    node = Node(tmp_path / "data")
    try:
        creator = InternalTopicCreator(Parts(broker=node.broker))
        name, configs = "app-counts-changelog", {"cleanup.policy": "compact"}
        await creator._create(name, 3, configs, -1, 0)
        first = node.catalog.get(name)
        assert first is not None and first.num_partitions == 3
        await creator._create(name, 3, configs, -1, 0)
        again = node.catalog.get(name)
        assert again is not None and again.topic_id == first.topic_id
        assert creator.errors == {}
    finally:
        await node.close()
