"""The data-plane helpers of the real-client tests: topics, keyed messages, produce, order.

How this works: ``keyed_messages`` makes (key, value) pairs whose value carries its key and a
per-key sequence number, so ``check_order`` can prove that every key stayed in one partition
and arrived in order; ``produce_confluent`` sends them with librdkafka and fails on any
delivery error; ``create_topic`` asks kgc for a topic (already existing is fine).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from confluent_kafka import Producer

from coordinator.tools.client import Connection
from protocol.messages import create_topics

JS_DIR = Path(__file__).parent.parent / "js"


def create_topic(
    bootstrap: str, name: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    with Connection.to(bootstrap) as c:
        topic = create_topics.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1
        )
        topic.configs = [
            create_topics.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()
        ]
        _, resp = c.request(create_topics.API_KEY, create_topics.Request(topics=[topic]))
        assert resp.topics[0].error_code in (0, 36), resp


def keyed_messages(n: int, keys: int = 60, size: int = 32) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs; the value carries the key and a per-key sequence number."""
    out = []
    seq: dict[int, int] = defaultdict(int)
    for i in range(n):
        k = i % keys
        v = f"{k}:{seq[k]}:".encode().ljust(size, b".")
        seq[k] += 1
        out.append((f"key-{k}".encode(), v))
    return out


def check_order(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, int]:
    """Every key stays in one partition and its sequence numbers arrive in order."""
    partition_of: dict[bytes, int] = {}
    last: dict[bytes, int] = {}
    for partition, key, value in records:
        assert key is not None and value is not None
        assert partition_of.setdefault(key, partition) == partition, f"{key!r} in two partitions"
        k, s, _ = value.split(b":", 2)
        assert key == b"key-" + k
        assert int(s) == last.get(key, -1) + 1, f"{key!r}: {int(s)} after {last.get(key)}"
        last[key] = int(s)
    return {k: v + 1 for k, v in last.items()}


def produce_confluent(
    bootstrap: str, topic: str, msgs: list[tuple[bytes, bytes]], **conf: object
) -> None:
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **conf})
    for i, (k, v) in enumerate(msgs):
        p.produce(topic, key=k, value=v, on_delivery=on_delivery)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors[:5]
