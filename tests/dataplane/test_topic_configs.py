"""Topic config validation: Kafka's ConfigDef parsing, validators and messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.config import Settings
from coordinator.topic_configs import (
    CONFIGS,
    InvalidConfigError,
    java_double,
    log_config,
    validate,
)


@pytest.mark.parametrize(
    ("name", "raw", "parsed"),
    [
        ("retention.ms", " 1000 ", 1000),  # Kafka trims
        ("retention.ms", "+5", 5),  # Long.parseLong takes a plus sign
        ("retention.ms", "-1", -1),
        ("retention.bytes", "-9223372036854775808", -(2**63)),
        ("segment.bytes", "2147483647", 2**31 - 1),
        ("min.cleanable.dirty.ratio", "1e-1", 0.1),
        ("min.cleanable.dirty.ratio", ".5", 0.5),
        ("min.cleanable.dirty.ratio", "1d", 1.0),
        ("unclean.leader.election.enable", "TRUE", True),
        ("cleanup.policy", "compact , delete", ["compact", "delete"]),
        ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
        ("compression.type", "zstd", "zstd"),
    ],
)
def test_valid_values_parse_as_kafka_parses_them(name: str, raw: str, parsed: object) -> None:
    assert validate({name: raw}) == {name: parsed}


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        (
            "retention.ms",
            "1_000",
            "Invalid value 1_000 for configuration retention.ms: Not a number of type LONG",
        ),
        (
            "retention.ms",
            "1.5",
            "Invalid value 1.5 for configuration retention.ms: Not a number of type LONG",
        ),
        ("retention.ms", "\u0661", "Not a number of type LONG"),  # Python's int() would take it
        ("retention.bytes", "9223372036854775808", "Not a number of type LONG"),
        (
            "segment.bytes",
            "13",
            "Invalid value 13 for configuration segment.bytes: Value must be at least 14",
        ),
        (
            "segment.ms",
            "0",
            "Invalid value 0 for configuration segment.ms: Value must be at least 1",
        ),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("min.cleanable.dirty.ratio", "inf", "Not a number of type DOUBLE"),
        (
            "min.cleanable.dirty.ratio",
            "Infinity",
            "Invalid value Infinity for configuration min.cleanable.dirty.ratio: Value must be no more than 1",
        ),
        (
            "min.cleanable.dirty.ratio",
            "-0.5",
            "Invalid value -0.5 for configuration min.cleanable.dirty.ratio: Value must be at least 0",
        ),
        (
            "unclean.leader.election.enable",
            "yes",
            "Invalid value yes for configuration unclean.leader.election.enable: Expected value to be either true or false",
        ),
        (
            "cleanup.policy",
            "compact,,delete",
            "Invalid value  for configuration cleanup.policy: String must be one of: compact, delete",
        ),
        ("cleanup.policy", "", "cleanup.policy"),
        (
            "compression.type",
            "brotli",
            "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer",
        ),
        (
            "message.timestamp.type",
            "createtime",
            "String must be one of: CreateTime, LogAppendTime",
        ),
        ("segment.jitter.ms", "1", "Topic config segment.jitter.ms is not supported by kgc"),
        ("bogus", "1", "Unknown topic config name: bogus"),
    ],
)
def test_invalid_values_get_kafkas_message(name: str, raw: str, message: str) -> None:
    with pytest.raises(InvalidConfigError) as exc:
        validate({name: raw})
    assert message in str(exc.value)


def test_first_failure_in_kafkas_definition_order_and_nulls() -> None:
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
        validate({"retention.ms": "x", "segment.bytes": "x"})
    with pytest.raises(InvalidConfigError, match="Unknown topic config name: a"):
        validate({"retention.ms": "x", "a": "1"})  # names are checked before values
    with pytest.raises(
        InvalidConfigError, match=r"Null value not supported for topic configs: retention\.ms"
    ):
        validate({"retention.ms": None})
    assert list(CONFIGS)[:4] == ["segment.bytes", "segment.ms", "retention.bytes", "retention.ms"]


def test_nan_passes_as_in_kafka_and_doubles_print_as_java_does() -> None:
    assert validate({"min.cleanable.dirty.ratio": "NaN"})
    assert [java_double(x) for x in (2.0, 0.5, 1e7, 1.5e-5, 12345.678, -3e20)] == [
        "2.0",
        "0.5",
        "1.0E7",
        "1.5E-5",
        "12345.678",
        "-3.0E20",
    ]


def test_log_config_uses_broker_defaults_and_topic_overrides(tmp_path: Path) -> None:
    s = Settings(data_dir=tmp_path, log_retention_ms=5000, message_max_bytes=2000)
    default = log_config(s)
    assert default.retention_ms == 5000 and default.max_message_bytes == 2000
    assert default.cleanup_policy == "delete" and default.min_cleanable_dirty_ratio == 0.5
    cfg = log_config(s, {"retention.ms": "-1", "cleanup.policy": "compact,delete"})
    assert cfg.retention_ms == -1 and cfg.compact and cfg.delete
    with pytest.raises(InvalidConfigError):
        log_config(s, {"cleanup.policy": "bogus"})
