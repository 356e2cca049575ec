"""Topic configs are validated as Kafka validates them, and a bad catalog entry stays local.

CreateTopics with an invalid value answers INVALID_CONFIG with Kafka's own message
(``ConfigDef`` parsing and validators) and stores nothing, through every client; the
server still restarts afterwards. A hand-edited ``topics.json`` whose entry cannot be read
or holds an invalid config starts the server anyway: that one topic is offline (one ERROR
line; Metadata says LEADER_NOT_AVAILABLE), every other topic serves its data.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic
from support.crashkit import read_all_confluent
from support.faultkit import metadata_of, produce_acked, report
from support.kgc_process import KgcProcess

from protocol.errors import ErrorCode

pytestmark = pytest.mark.integration

# Each invalid config from the issue (and a few neighbours), with Kafka's error message.
INVALID = [
    (
        "retention.ms",
        "abc",
        "Invalid value abc for configuration retention.ms: Not a number of type LONG",
    ),
    (
        "segment.bytes",
        "-1",
        "Invalid value -1 for configuration segment.bytes: Value must be at least 14",
    ),
    (
        "max.message.bytes",
        "-5",
        "Invalid value -5 for configuration max.message.bytes: Value must be at least 0",
    ),
    (
        "min.cleanable.dirty.ratio",
        "abc",
        "Invalid value abc for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE",
    ),
    (
        "cleanup.policy",
        "bogus",
        "Invalid value bogus for configuration cleanup.policy: String must be one of: compact, delete",
    ),
    (
        "min.cleanable.dirty.ratio",
        "2",
        "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be no more than 1",
    ),
    (
        "retention.ms",
        "-2",
        "Invalid value -2 for configuration retention.ms: Value must be at least -1",
    ),
    (
        "segment.bytes",
        "4294967296",
        "Invalid value 4294967296 for configuration segment.bytes: Not a number of type INT",
    ),
    (
        "message.timestamp.type",
        "Wallclock",
        "Invalid value Wallclock for configuration message.timestamp.type: "
        "String must be one of: CreateTime, LogAppendTime",
    ),
    ("no.such.config", "1", "Unknown topic config name: no.such.config"),
]


def topic_names(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return set(admin.list_topics(timeout=10).topics)


def test_invalid_configs_refused_by_create_topics(kgc: KgcProcess) -> None:
    confluent = AdminClient({"bootstrap.servers": kgc.bootstrap})
    kp = KafkaAdminClient(bootstrap_servers=kgc.bootstrap)
    try:
        for i, (name, value, message) in enumerate(INVALID):
            topic = f"bad-{i}"
            fut = confluent.create_topics(
                [NewTopic(topic, num_partitions=1, replication_factor=1, config={name: value})]
            )[topic]
            with pytest.raises(KafkaException) as exc:
                fut.result(10)
            err = exc.value.args[0]
            assert err.code() == KafkaError.INVALID_CONFIG, err
            assert message in err.str(), err.str()

            res = kp.create_topics(
                [KpNewTopic(topic, 1, 1, topic_configs={name: value})], raise_errors=False
            )
            [t] = res["topics"]
            assert t["error_code"] == ErrorCode.INVALID_CONFIG, t
            assert t["error_message"] == message, t

            # validate_only answers the same and also stores nothing.
            fut = confluent.create_topics(
                [NewTopic(topic, 1, 1, config={name: value})], validate_only=True
            )[topic]
            with pytest.raises(KafkaException):
                fut.result(10)
        # A valid validate_only request succeeds and creates nothing either.
        confluent.create_topics(
            [NewTopic("checked", 1, 1, config={"retention.ms": "1000"})], validate_only=True
        )["checked"].result(10)
    finally:
        kp.close()
    names = topic_names(kgc.bootstrap)
    assert not {n for n in names if n.startswith("bad-") or n == "checked"}, names
    stored = (
        json.loads((kgc.data_dir / "topics.json").read_text())
        if (kgc.data_dir / "topics.json").exists()
        else []
    )
    assert stored == []
    assert not [p for p in kgc.data_dir.iterdir() if p.name.startswith("bad-")]

    # The server still starts, and a valid topic works after all of that.
    kgc.stop()
    kgc.start()
    confluent.create_topics([NewTopic("good", 1, 1, config={"retention.ms": "-1"})])["good"].result(
        10
    )
    assert len(produce_acked(kgc.bootstrap, "good", [b"v"] * 5)) == 5
    report(
        "invalid_topic_configs",
        injected=f"{len(INVALID)} invalid topic configs via confluent-kafka, kafka-python, "
        "validate_only",
        verified="INVALID_CONFIG with Kafka's message each time, nothing stored, restart works",
    )


def edit_catalog(
    data_dir: Path, change: dict[str, object], extra: list[object]
) -> dict[str, object]:
    """Apply ``change`` to topic 'bad''s entry and append ``extra`` entries; returns the original."""
    path = data_dir / "topics.json"
    entries = json.loads(path.read_text())
    [original] = [e for e in entries if e["name"] == "bad"]
    entries = [e for e in entries if e is not original]
    path.write_text(json.dumps([*entries, {**original, **change}, *extra]))
    return dict(original)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"configs": {"retention.ms": "abc"}}, "Not a number of type LONG"),
        ({"configs": {"cleanup.policy": "bogus"}}, "String must be one of: compact, delete"),
        ({"configs": {"segment.bytes": "-1"}}, "Value must be at least 14"),
        ({"configs": {"max.message.bytes": "-5"}}, "Value must be at least 0"),
        ({"configs": {"min.cleanable.dirty.ratio": "abc"}}, "Not a number of type DOUBLE"),
        ({"partitions": "three"}, "partitions"),
        ({"id": "not-hex"}, "id"),
    ],
)
def test_bad_catalog_entry_keeps_only_that_topic_offline(
    kgc: KgcProcess, change: dict[str, object], why: str
) -> None:
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})  # must outlive its futures
    for name in ("good", "bad"):
        admin.create_topics([NewTopic(name, 2, 1)])[name].result(10)
    acked = produce_acked(kgc.bootstrap, "good", [f"g{i}".encode() for i in range(50)])
    bad_acked = produce_acked(kgc.bootstrap, "bad", [f"b{i}".encode() for i in range(20)])
    kgc.stop()
    original = edit_catalog(kgc.data_dir, change, [{"name": "nameless"}, 17])

    kgc.start()
    log = kgc.log()
    errors = [ln for ln in log.splitlines() if "ERROR" in ln and "'bad'" in ln]
    assert len(errors) == 1, log
    assert why in errors[0], errors[0]
    assert "Traceback" not in log, log

    # The other topic serves everything it acknowledged, and takes new records.
    assert [v for _p, _k, v in read_all_confluent(kgc.bootstrap, "good", 2)] == acked
    assert len(produce_acked(kgc.bootstrap, "good", [b"more"] * 5)) == 5
    # The bad one is offline: no leader, nothing written, its data untouched on disk.
    t = metadata_of(kgc.bootstrap, "bad")
    assert t.error_code == ErrorCode.LEADER_NOT_AVAILABLE or all(
        p.error_code == ErrorCode.LEADER_NOT_AVAILABLE and p.leader_id == -1 for p in t.partitions
    ), t
    assert (kgc.data_dir / "bad-0").is_dir()
    # Creating a topic rewrites the catalog: the unreadable entries are kept as they were.
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    admin.create_topics([NewTopic("new", 1, 1)])["new"].result(10)
    entries = json.loads((kgc.data_dir / "topics.json").read_text())
    assert 17 in entries and {"name": "nameless"} in entries
    assert [e for e in entries if isinstance(e, dict) and e.get("name") == "bad"]

    # Fixing the entry by hand brings the topic and all its data back.
    kgc.stop()
    path = kgc.data_dir / "topics.json"
    fixed = [
        original if isinstance(e, dict) and e.get("name") == "bad" else e
        for e in json.loads(path.read_text())
    ]
    path.write_text(json.dumps(fixed))
    kgc.start()
    values = [v for _p, _k, v in read_all_confluent(kgc.bootstrap, "bad", 2)]
    assert sorted(values) == sorted(bad_acked)
    report(
        f"bad_catalog_entry[{why}]",
        injected=f"topics.json entry of topic 'bad' edited: {change}, plus two unreadable entries",
        verified="server started, one ERROR line, 'bad' offline, 'good' served all "
        f"{len(acked)} records; after fixing the entry 'bad' served all {len(bad_acked)}",
    )
