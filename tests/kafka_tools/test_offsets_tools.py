"""kafka-get-offsets (GetOffsetShell), kafka-delete-records and kafka-log-dirs against Kafka
and kgc, on the same records (one batch per record, so the logs' sizes match too)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer
from support.tools_kit import DELETE_RECORDS, GET_OFFSETS, LOG_DIRS, Server, compare, run_pair
from support.tools_setup import BASE_TS, create_topic

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def produce_one_per_batch(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True})
    for i in range(count):
        for part in range(partitions):
            p.produce(
                topic,
                key=b"k%d" % i,
                value=b"v%d" % i,
                partition=part,
                timestamp=BASE_TS + i * 10_000,
            )
            assert p.flush(30) == 0


def test_get_offsets_delete_records_and_log_dirs(pair: list[Server], tmp_path: Path) -> None:
    topic = "kt.offsets.t"
    for s in pair:
        create_topic(s.bootstrap, topic, 2)
        produce_one_per_batch(s.bootstrap, topic, 2, 6)
    boot = ["--bootstrap-server", "{bootstrap}"]

    def offsets(scenario: str, *args: str) -> None:
        runs = run_pair(GET_OFFSETS, [*boot, *args], pair)
        compare(f"tools.get-offsets.{scenario}", runs)
        compare(f"tools.get-offsets.{scenario}", runs, stream="stderr")

    offsets("latest", "--topic", topic)
    offsets("earliest", "--topic", topic, "--time", "-2")
    offsets("max-timestamp", "--topic", topic, "--time", "-3")
    offsets("by-timestamp", "--topic-partitions", f"{topic}:0", "--time", str(BASE_TS + 25_000))
    offsets("earliest-local", "--topic", topic, "--time", "-4")

    plan = tmp_path / "delete.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": topic, "partition": 0, "offset": 3},
                    {"topic": topic, "partition": 1, "offset": -1},
                ],
            }
        )
    )
    runs = run_pair(DELETE_RECORDS, [*boot, "--offset-json-file", str(plan)], pair)
    compare("tools.delete-records", runs, transform=sorted)  # printed as each one completes
    compare("tools.delete-records", runs, stream="stderr")
    offsets("earliest-after-delete", "--topic", topic, "--time", "-2")

    # kafka-log-dirs prints one JSON line: its log directory is each server's own.
    dirs = (r"\"logDir\":\"[^\"]*\"", '"logDir":"DIR"')
    runs = run_pair(LOG_DIRS, [*boot, "--describe", "--topic-list", topic], pair)
    compare("tools.log-dirs", runs, extra=[dirs])
    compare("tools.log-dirs", runs, stream="stderr")
