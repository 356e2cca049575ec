"""Topic configs: one table, validated exactly as Kafka validates them.

How this works
--------------
``CONFIGS`` lists every topic config kgc accepts, in the order Kafka's ``LogConfig`` defines
them, each with Kafka's type, default and validator. ``validate`` is Kafka's
``LogConfig.validate`` for these: an unknown name is ``Unknown topic config name: x``, then
each value is parsed as ``ConfigDef.parseType`` parses it (Java's ``Long.parseLong``,
``Double.parseDouble``, ... on the trimmed string) and checked by its validator, the first
failure raising ``InvalidConfigError`` with ``ConfigException``'s message, e.g.
``Invalid value abc for configuration retention.ms: Not a number of type LONG``.
CreateTopics answers that message with INVALID_CONFIG and stores nothing; the catalog
checks every entry with it at start-up, so a hand-edited value keeps that one topic
offline instead of stopping the server.

``log_config`` turns validated configs plus the broker defaults (``Settings``) into the log
engine's ``LogConfig``; it is the only place that does, so nothing reaches the engine
unvalidated. Configs Kafka knows but kgc does not honour are refused by name rather than
silently ignored.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from storage.local.log import LogConfig

if TYPE_CHECKING:
    from coordinator.config import Settings

__all__ = [
    "CONFIGS",
    "InvalidConfigError",
    "TopicConfigDef",
    "log_config",
    "validate",
]

Value = int | float | bool | str | list[str]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
# java.lang.String.trim() strips every char <= U+0020, not Unicode whitespace.
_JAVA_TRIM = "".join(chr(i) for i in range(33))
_INTEGER = re.compile(r"[+-]?[0-9]+")
# What Double.parseDouble accepts, hexadecimal floats aside.
_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)")
_COMMA = re.compile(r"\s*,\s*")  # ConfigDef's COMMA_WITH_WHITESPACE


class InvalidConfigError(ValueError):
    """A topic config Kafka would refuse; ``str()`` is Kafka's message (INVALID_CONFIG)."""


def _invalid(name: str, value: object, why: str) -> InvalidConfigError:
    # ConfigException(name, value, message)
    return InvalidConfigError(f"Invalid value {value} for configuration {name}: {why}")


def java_double(x: float) -> str:
    """``Double.toString``: how Kafka prints a parsed double in its messages."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1, x) < 0 else "0.0"
    if 1e-3 <= abs(x) < 1e7:
        return repr(x)  # plain notation in this range, as Java's
    sign, digits, exponent = Decimal(repr(x)).normalize().as_tuple()
    assert isinstance(exponent, int)
    ds = "".join(map(str, digits))
    power = exponent + len(ds) - 1
    return f"{'-' if sign else ''}{ds[0]}.{ds[1:] or '0'}E{power}"


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One of Kafka's topic configs: ``ConfigDef.define(name, type, default, validator)``."""

    name: str
    type: str  # ConfigDef.Type: INT, LONG, DOUBLE, BOOLEAN, STRING, LIST
    default: str  # Kafka's default, as CreateTopics reports it
    at_least: int | None = None  # Range.atLeast / between
    no_more_than: int | None = None
    one_of: tuple[str, ...] | None = None  # ValidString.in / ValidList.in

    def parse(self, raw: str) -> Value:
        """``ConfigDef.parseType`` then ``ensureValid``; raises ``InvalidConfigError``."""
        trimmed = raw.strip(_JAVA_TRIM)
        value: Value
        if self.type in ("INT", "LONG"):
            lo, hi = (INT_MIN, INT_MAX) if self.type == "INT" else (LONG_MIN, LONG_MAX)
            if not _INTEGER.fullmatch(trimmed) or not lo <= int(trimmed) <= hi:
                raise _invalid(self.name, raw, f"Not a number of type {self.type}")
            value = int(trimmed)
            self._check_range(value, str(value))
        elif self.type == "DOUBLE":
            if not _DOUBLE.fullmatch(trimmed):
                raise _invalid(self.name, raw, "Not a number of type DOUBLE")
            value = float(trimmed.rstrip("fFdD").replace("Infinity", "inf"))
            # Range.ensureValid compares doubles, so NaN passes, as it does in Kafka.
            self._check_range(value, java_double(value))
        elif self.type == "BOOLEAN":
            if trimmed.lower() not in ("true", "false"):
                raise _invalid(self.name, raw, "Expected value to be either true or false")
            value = trimmed.lower() == "true"
        elif self.type == "LIST":
            value = _COMMA.split(trimmed) if trimmed else []
            for item in value:
                self._check_one_of(item)
            if not value:
                # Kafka 3.x reads an empty cleanup.policy as "neither"; kgc's log engine has
                # no such mode, so it refuses it rather than guess one.
                raise _invalid(self.name, raw, "kgc needs at least one of: compact, delete")
        else:
            value = trimmed
            self._check_one_of(value)
        return value

    def _check_range(self, value: float, shown: str) -> None:
        if self.at_least is not None and value < self.at_least:
            raise _invalid(self.name, shown, f"Value must be at least {self.at_least}")
        if self.no_more_than is not None and value > self.no_more_than:
            raise _invalid(self.name, shown, f"Value must be no more than {self.no_more_than}")

    def _check_one_of(self, value: str) -> None:
        if self.one_of is not None and value not in self.one_of:
            raise _invalid(self.name, value, "String must be one of: " + ", ".join(self.one_of))


# Kafka's LogConfig definitions (storage/internals/log/LogConfig.java) for the topic configs
# kgc accepts, in Kafka's definition order (validation reports the first failure in it).
# The first group the log engine honours; the replication ones are meaningless on one node
# but harmless, and clients set them.
CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        TopicConfigDef("segment.bytes", "INT", "1073741824", at_least=14),
        TopicConfigDef("segment.ms", "LONG", "604800000", at_least=1),
        TopicConfigDef("retention.bytes", "LONG", "-1"),
        TopicConfigDef("retention.ms", "LONG", "604800000", at_least=-1),
        TopicConfigDef("max.message.bytes", "INT", "1048588", at_least=0),
        TopicConfigDef("delete.retention.ms", "LONG", "86400000", at_least=0),
        TopicConfigDef("min.compaction.lag.ms", "LONG", "0", at_least=0),
        TopicConfigDef("min.cleanable.dirty.ratio", "DOUBLE", "0.5", at_least=0, no_more_than=1),
        TopicConfigDef("cleanup.policy", "LIST", "delete", one_of=("compact", "delete")),
        TopicConfigDef("unclean.leader.election.enable", "BOOLEAN", "false"),
        TopicConfigDef("min.insync.replicas", "INT", "1", at_least=1),
        TopicConfigDef(
            "compression.type",
            "STRING",
            "producer",
            one_of=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        ),
        TopicConfigDef(
            "message.timestamp.type", "STRING", "CreateTime", one_of=("CreateTime", "LogAppendTime")
        ),
    )
}

# Topic configs Kafka defines that kgc does not honour: refused by name, never ignored.
UNSUPPORTED = frozenset(
    {
        "segment.jitter.ms",
        "segment.index.bytes",
        "flush.messages",
        "flush.ms",
        "index.interval.bytes",
        "max.compaction.lag.ms",
        "file.delete.delay.ms",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "preallocate",
        "message.format.version",
        "message.timestamp.difference.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.after.max.ms",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "message.downconversion.enable",
        "remote.storage.enable",
        "local.retention.ms",
        "local.retention.bytes",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
    }
)


def validate(configs: dict[str, str | None]) -> dict[str, Value]:
    """The parsed values of ``configs`` (names Kafka's); raises ``InvalidConfigError``."""
    nulls = sorted(k for k, v in configs.items() if v is None)
    if nulls:
        # ControllerConfigurationValidator's answer to a config set to null.
        raise InvalidConfigError(f"Null value not supported for topic configs: {','.join(nulls)}")
    for name in sorted(configs):
        if name in UNSUPPORTED:
            raise InvalidConfigError(f"Topic config {name} is not supported by kgc")
        if name not in CONFIGS:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
    parsed: dict[str, Value] = {}
    for name, definition in CONFIGS.items():
        raw = configs.get(name)
        if raw is not None:
            parsed[name] = definition.parse(raw)
    return parsed


def log_config(settings: Settings, configs: dict[str, str] | None = None) -> LogConfig:
    """The log engine's settings for a topic: its configs over the broker's defaults.

    Raises ``InvalidConfigError`` for configs Kafka would refuse.
    """
    v = validate(dict(configs or {}))

    def num(name: str, default: int) -> int:
        value = v.get(name, default)
        assert isinstance(value, int)
        return value

    policy = v.get("cleanup.policy", ["delete"])
    ratio = v.get("min.cleanable.dirty.ratio", 0.5)
    assert isinstance(policy, list) and isinstance(ratio, float | int)
    return LogConfig(
        # A floor kgc has always applied: a segment per batch would exhaust descriptors.
        segment_bytes=max(num("segment.bytes", settings.log_segment_bytes), 1024),
        segment_ms=num("segment.ms", settings.log_roll_ms),
        retention_ms=num("retention.ms", settings.log_retention_ms),
        retention_bytes=num("retention.bytes", settings.log_retention_bytes),
        cleanup_policy=",".join(policy),
        delete_retention_ms=num("delete.retention.ms", settings.log_cleaner_delete_retention_ms),
        min_cleanable_dirty_ratio=float(ratio),
        max_message_bytes=num("max.message.bytes", settings.message_max_bytes),
        flush_policy=settings.log_flush_policy,
        flush_interval_ms=settings.log_flush_interval_ms,
        flush_interval_messages=settings.log_flush_interval_messages,
    )
