"""``kgc offsets translate`` between kgc and Apache Kafka 4.4, both ways: the same records at
other offsets on each (see ``support.translatekit``), placed by Fetch, ListOffsets and
OffsetCommit against the real broker."""

from __future__ import annotations

import pytest
from support.kafkaserver import KafkaServer
from support.kgc_process import KgcProcess
from support.translatekit import (
    DELETED,
    OWN,
    cli,
    commit,
    committed,
    wait_group_served,
    write_copies,
)

pytestmark = pytest.mark.kafka


def _translate(src: str, dst: str, group: str) -> dict[int, int]:
    run = cli(src, "offsets", "translate", group, "--to-bootstrap-server", dst,
              "--output", "json", "--execute")  # fmt: skip
    assert run.code == 0, run
    got = run.json()
    return {o["partition"]: o["new_offset"] for o in got["offsets"]} | {
        u["partition"]: -1 for u in got["unplaced"]
    }


def test_translate_kgc_to_kafka_and_back(kgc: KgcProcess, kafka_broker: KafkaServer) -> None:
    k, kafka = kgc.bootstrap, kafka_broker.bootstrap
    topic = "translate-kgc-first"
    write_copies(k, kafka, topic)  # kgc drops its first 5; Kafka has 7 of its own first
    commit(k, "tr-billing", topic, {0: 12, 1: 20, 2: 3})
    wait_group_served(kafka, "tr-billing")
    assert _translate(k, kafka, "tr-billing") == {0: 12 + OWN, 1: 20 + OWN, 2: -1}
    assert committed(kafka, "tr-billing") == {(topic, 0): 12 + OWN, (topic, 1): 20 + OWN}

    topic = "translate-kafka-first"
    write_copies(kafka, k, topic)  # Kafka drops its first 5; kgc has 7 of its own first
    wait_group_served(kafka, "tr-audit")
    commit(kafka, "tr-audit", topic, {0: 9, 1: 20, 2: DELETED - 1})
    assert _translate(kafka, k, "tr-audit") == {0: 9 + OWN, 1: 20 + OWN, 2: -1}
    assert committed(k, "tr-audit") == {(topic, 0): 9 + OWN, (topic, 1): 20 + OWN}
    # and back again, from kgc to Kafka: the same offsets as before
    commit(k, "tr-back", topic, {0: 9 + OWN, 1: OWN + DELETED})
    wait_group_served(kafka, "tr-back")
    assert _translate(k, kafka, "tr-back") == {0: 9, 1: DELETED}
