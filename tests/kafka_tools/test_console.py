"""kafka-console-producer and kafka-console-consumer against Kafka and kgc, and the console
consumer reading ``__consumer_offsets`` with Kafka's formatters -- what Burrow and kminion
read -- after the same commits on both.

The producer writes keyed lines; a console consumer in a classic group and one in a
consumer-protocol group read them back with keys, partitions and offsets and commit when
they close. Then the console consumer reads the groups' ``__consumer_offsets`` partitions
with ``OffsetsMessageFormatter`` and ``GroupMetadataMessageFormatter``: each record is one
JSON object, compared field by field (path ``record.<n>.<field path>``), the stamps each
server takes from its own clock left out.
"""

from __future__ import annotations

import json

import pytest
from support.tools_kit import (
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    Server,
    ToolRun,
    compare,
    compare_records,
    run_pair,
)
from support.tools_setup import committed, create_topic, group_settled, wait_until

from coordinator.tools.client import Connection
from protocol.messages import list_offsets
from storage.records import partition_for

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

FORMATTERS = "org.apache.kafka.tools.consumer."


def log_range(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """(log start, log end) of one partition, by ListOffsets."""
    out = []
    for ts in (-2, -1):
        with Connection.to(bootstrap) as c:
            c.negotiate()
            _, resp = c.request(
                list_offsets.API_KEY,
                list_offsets.Request(
                    replica_id=-1,
                    topics=[
                        list_offsets.ListOffsetsTopic(
                            name=topic,
                            partitions=[
                                list_offsets.ListOffsetsPartition(
                                    partition_index=partition, timestamp=ts
                                )
                            ],
                        )
                    ],
                ),
            )
        part = resp.topics[0].partitions[0]
        assert part.error_code == 0, part
        out.append(part.offset)
    return out[0], out[1]


# Stamps each server takes from its own clock.
SERVER_STAMPS = ("commitTimestamp", "currentStateTimestamp", "expireTimestamp")


def records_of(run: ToolRun, group: str) -> list[object]:
    """The formatter's JSON records of ``group`` (it prints them without separators)."""
    text = run.stdout.replace('}{"key"', '}\n{"key"')
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [r for r in records if r["key"]["data"]["group"] == group]


def test_console_producer_and_consumer_in_groups_then_offsets_formatters(
    pair: list[Server],
) -> None:
    topic = "kt.console.t"
    groups = ["kt.console.classic", "kt.console.consumer"]
    boot = ["--bootstrap-server", "{bootstrap}"]
    for s in pair:
        create_topic(s.bootstrap, topic, 2)

    lines = "".join(f"key{i % 3}:value {i}\n" for i in range(9))
    runs = run_pair(
        CONSOLE_PRODUCER,
        [
            *boot,
            "--topic",
            topic,
            "--reader-property",
            "parse.key=true",
            "--reader-property",
            "key.separator=:",
            "--producer-property",
            "linger.ms=0",
        ],
        pair,
        stdin=lines,
    )
    compare("tools.console-producer", runs)
    compare("tools.console-producer", runs, stream="stderr")

    printed = [
        "--formatter-property",
        "print.key=true",
        "--formatter-property",
        "print.partition=true",
        "--formatter-property",
        "print.offset=true",
    ]
    for group, protocol in zip(groups, ("classic", "consumer"), strict=True):
        runs = run_pair(
            CONSOLE_CONSUMER,
            [
                *boot,
                "--topic",
                topic,
                "--group",
                group,
                "--from-beginning",
                "--max-messages",
                "9",
                "--timeout-ms",
                "60000",
                *printed,
                "--consumer-property",
                f"group.protocol={protocol}",
                # One commit, when it closes (a periodic one would depend on timing).
                "--consumer-property",
                "auto.commit.interval.ms=600000",
                "--consumer-property",
                "client.id=console",
            ],
            pair,
        )
        # Which partition comes first depends on fetch timing: records compared as a set.
        compare(f"tools.console-consumer.{protocol}", runs, transform=sorted)
        compare(f"tools.console-consumer.{protocol}", runs, stream="stderr")
        for s in pair:
            wait_until(
                f"{group} empty on {s.name}", lambda s=s, g=group: group_settled(s.bootstrap, g, 0)
            )
        assert committed(pair[0].bootstrap, group) == committed(pair[1].bootstrap, group)

    for formatter in ("OffsetsMessageFormatter", "GroupMetadataMessageFormatter"):
        for group in groups:
            partition = partition_for(group, 50)
            runs, records = [], []
            for s in pair:
                start, end = log_range(s.bootstrap, "__consumer_offsets", partition)
                (run,) = run_pair(
                    CONSOLE_CONSUMER,
                    [
                        *boot,
                        "--topic",
                        "__consumer_offsets",
                        "--partition",
                        str(partition),
                        "--offset",
                        str(start),
                        "--max-messages",
                        str(end - start),
                        "--timeout-ms",
                        "60000",
                        "--formatter",
                        FORMATTERS + formatter,
                    ],
                    [s],
                )
                assert run.returncode == 0, run
                runs.append(run)
                records.append(records_of(run, group))
            if formatter == "OffsetsMessageFormatter" or group.endswith("classic"):
                assert records[0], f"{formatter}: Kafka printed no record of {group}"
            compare_records(
                f"tools.console-consumer.{formatter}", runs, records, masked=SERVER_STAMPS
            )
