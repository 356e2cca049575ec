"""librdkafka consumer-protocol (KIP-848) members for the CLI and metrics tests.

A ``Member`` is a confluent-kafka ``Consumer`` with ``group.protocol=consumer`` polled in its
own thread (so it keeps heartbeating while the test runs the CLI); ``CONSUMER_FLAGS`` start
kgc with short consumer heartbeat intervals and sessions so groups settle within seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from support.kgc_process import KgcProcess

CONSUMER_FLAGS = (
    "--group-consumer-min-heartbeat-interval-ms",
    "100",
    "--group-consumer-heartbeat-interval-ms",
    "250",
    # A closed static member only leaves temporarily (epoch -2) and is removed when its
    # session expires: a short session keeps that within a test.
    "--group-consumer-min-session-timeout-ms",
    "1000",
    "--group-consumer-session-timeout-ms",
    "3000",
)


def wait_until(check: Callable[[], Any], what: str, timeout: float = 40.0) -> Any:
    """Poll ``check`` (a CLI call or member state) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class Member:
    """A librdkafka consumer-protocol member polled in its own thread."""

    def __init__(
        self,
        kgc: KgcProcess,
        client_id: str,
        instance_id: str | None = None,
        *,
        group: str,
        topic: str,
    ) -> None:
        from confluent_kafka import Consumer

        conf: dict[str, Any] = {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "client.id": client_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
        if instance_id is not None:
            conf["group.instance.id"] = instance_id
        self.consumer = Consumer(conf)
        self.client_id = client_id
        self.assigned: set[tuple[str, int]] = set()
        self.member_id = ""
        self.to_commit: dict[int, int] | None = None
        self.committed = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.topic = topic
        self.consumer.subscribe([topic])
        self.thread.start()

    def _run(self) -> None:
        from confluent_kafka import TopicPartition as CTP

        try:
            while not self.stop.is_set():
                self.consumer.poll(0.05)
                self.assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
                self.member_id = self.consumer.memberid() or ""
                todo = self.to_commit
                if todo is not None:
                    self.consumer.commit(
                        offsets=[CTP(self.topic, p, off) for p, off in todo.items()],
                        asynchronous=False,
                    )
                    self.to_commit = None
                    self.committed.set()
        except BaseException as exc:  # surfaced by the test
            self.error = exc
        finally:
            self.consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(20)
