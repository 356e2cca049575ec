"""Fixtures of the Kafka-tools comparisons: the reference broker and one kgc next to it.

``pair`` is ``[Server(kafka), Server(kgc)]``: the session's Kafka broker and one ``kgc serve``
for this directory's tests, started with Kafka's node id and cluster id so tool outputs need
no rewriting of either. Tests use names of their own with a '.' (see tools_kit.normalise);
tools_setup.py sets up the same state on both with real clients.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.kafkaserver import KafkaServer
from support.kgc_process import KgcProcess
from support.tools_kit import Server
from support.tools_setup import LiveMembers


@pytest.fixture(scope="session")
def tools_kgc(
    kafka_broker: KafkaServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KgcProcess]:
    proc = KgcProcess(
        tmp_path_factory.mktemp("tools-kgc") / "data",
        "--node-id",
        "1",
        f"--cluster-id={kafka_broker.cluster_id}",  # an id may start with '-'
    )
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        proc.stop()


@pytest.fixture
def pair(kafka_broker: KafkaServer, tools_kgc: KgcProcess) -> list[Server]:
    return [Server("kafka", kafka_broker.bootstrap), Server("kgc", tools_kgc.bootstrap)]


@pytest.fixture
def live_members() -> Iterator[LiveMembers]:
    members = LiveMembers()
    yield members
    members.close()
