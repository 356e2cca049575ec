"""The Kafka Streams word count of tests/streams: its JVMs and the client side around them.

How this works: ``StreamsInstance`` starts one ``kgc.streams.WordCount`` JVM (tests/jvm:
words counted through a repartition topic, ``groupBy`` on the word, into a store logged to
a compacted changelog) against a bootstrap address with a group protocol and a processing
guarantee (at-least-once unless told), and a reader
thread collects its stdout lines, on which the program reports ``state``, ``tasks`` and
``error``; ``wait_until`` polls a check and fails at once when an instance reports an
error. ``Cluster`` is the client side: the input and output topics (``PARTITIONS`` each,
so ``ALL_TASKS`` are four, unless given another count), producing lines (``lines_of`` shuffles counted words into
them), the output's latest count per word, whether the group's committed offsets reached
the end of the input and repartition topics, their log start offsets and the internal
topics' configs. ``repartition_of`` is the partition Streams' default partitioner gives a
word.
"""

from __future__ import annotations

import random
import signal
import struct
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kafka.partitioner.default import murmur2

from support.kafkaserver import java_command

PARTITIONS = 2
ALL_TASKS = {"0_0", "0_1", "1_0", "1_1"}


class StreamsInstance:
    """One ``kgc.streams.WordCount`` JVM; its stdout lines collected by a reader thread."""

    def __init__(
        self,
        name: str,
        server: tuple[str, str],
        app: str,
        topics: tuple[str, str],
        state: Path,
        guarantee: str = "at_least_once",  # processing.guarantee
    ):
        self.name = name
        bootstrap, protocol = server
        args = [bootstrap, app, topics[0], topics[1], str(state), guarantee, protocol]
        cmd = java_command("kgc.streams.WordCount", *args)
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()

    def last(self, prefix: str) -> str | None:
        with self.changed:
            for line in reversed(self.lines):
                if line.startswith(prefix + " "):
                    return line[len(prefix) + 1 :]
        return None

    def tasks(self) -> set[str]:
        last = self.last("tasks")
        return set(last.split(",")) - {""} if last is not None else set()

    def logged(self, text: str) -> bool:
        with self.changed:
            return any(text in line for line in self.lines)

    def running(self) -> bool:
        return self.last("state") == "RUNNING"

    def output(self) -> str:
        with self.changed:
            return "\n".join(self.lines[-60:])

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """At the end of a test: a clean close is not what it tests, so a kill is enough."""
        if self.proc.poll() is None:
            self.kill()
        self.reader.join(timeout=10)


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    instances: list[StreamsInstance],
    poll: float = 0.2,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        for inst in instances:
            assert inst.last("error") is None, f"{inst.name} failed:\n{inst.output()}"
        time.sleep(poll)
    logs = "\n".join(f"--- {i.name}\n{i.output()}" for i in instances)
    raise AssertionError(f"timed out waiting for {what}\n{logs}")


def repartition_of(word: str) -> int:
    """The partition Streams' default partitioner writes ``word`` to (murmur2, as Kafka's)."""
    return (murmur2(word.encode()) & 0x7FFFFFFF) % PARTITIONS


def lines_of(words: Counter[str], seed: int) -> list[str]:
    """The words, each as often as counted, shuffled into lines of (up to) four."""
    flat = [w for w, n in sorted(words.items()) for _ in range(n)]
    random.Random(seed).shuffle(flat)
    return [" ".join(flat[i : i + 4]) for i in range(0, len(flat), 4)]


class Cluster:
    """The client side of the scenario: topics, producing, the output and the group's offsets."""

    def __init__(
        self,
        bootstrap: str,
        app: str,
        input_topic: str,
        output_topic: str,
        partitions: int = PARTITIONS,
    ):
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.app = app
        self.input = input_topic
        self.output = output_topic
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})

    def create_topics(self) -> None:
        new = [NewTopic(t, self.partitions, 1) for t in (self.input, self.output)]
        for future in self.admin.create_topics(new, operation_timeout=10).values():
            future.result()

    def produce(self, lines: list[str]) -> None:
        for i, line in enumerate(lines):
            self.producer.produce(self.input, value=line.encode(), partition=i % self.partitions)
            self.producer.poll(0)
        assert self.producer.flush(30) == 0

    def counts(self) -> dict[str, int]:
        """The output topic's latest value per word, read from the beginning to its end."""
        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": "unused", "enable.auto.commit": False}
        )
        latest: dict[str, int] = {}
        try:
            for p in range(self.partitions):
                _, high = consumer.get_watermark_offsets(TopicPartition(self.output, p), 10)
                if high == 0:
                    continue
                consumer.assign([TopicPartition(self.output, p, 0)])
                offset = 0
                deadline = time.monotonic() + 30
                while offset < high:
                    assert time.monotonic() < deadline, f"output partition {p} short of {high}"
                    msg = consumer.poll(0.5)
                    if msg is None:
                        continue
                    if msg.error():
                        raise KafkaException(msg.error())
                    latest[msg.key().decode()] = struct.unpack(">q", msg.value())[0]
                    offset = msg.offset() + 1
        finally:
            consumer.close()
        return latest

    def quiesced(self) -> bool:
        """The group's committed offsets are at the end of the input and repartition topics."""
        topics = [self.input, f"{self.app}-words-repartition"]
        result = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(self.app)])
        committed = {
            (tp.topic, tp.partition): tp.offset for tp in result[self.app].result().topic_partitions
        }
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "unused"})
        try:
            for topic in topics:
                for p in range(self.partitions):
                    _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), 10)
                    if committed.get((topic, p), -1) != high:
                        return False
        finally:
            consumer.close()
        return True

    def log_starts(self, topic: str) -> list[int]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "unused"})
        try:
            return [
                consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[0]
                for p in range(self.partitions)
            ]
        finally:
            consumer.close()

    def internal_topics(self) -> dict[str, tuple[int, dict[str, str]]]:
        """Streams' internal topics: their partition count and the configs set on the topic."""
        names = [f"{self.app}-words-repartition", f"{self.app}-counts-changelog"]
        meta = self.admin.list_topics(timeout=10).topics
        found: dict[str, tuple[int, dict[str, str]]] = {}
        for name in names:
            if name not in meta:
                continue
            res = ConfigResource(ConfigResource.Type.TOPIC, name)
            configs = self.admin.describe_configs([res])[res].result()
            own = {
                c.name: c.value
                for c in configs.values()
                if c.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            }
            found[name] = (len(meta[name].partitions), own)
        return found
