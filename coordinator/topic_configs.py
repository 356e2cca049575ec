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

``KAFKA_TOPIC_CONFIGS`` is Kafka 4.x's whole topic config table (what DescribeConfigs lists
for a topic), each with its broker synonyms (``ServerTopicConfigSynonyms``) and whether
kgc honours it; ``effective`` is every config's value for a topic (its own, else the
broker's default, else Kafka's); ``apply_incremental`` is the KRaft controller's
SET/DELETE/APPEND/SUBTRACT on a topic's configs (coordinator/apis/configs.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from storage.interface import LogConfig

if TYPE_CHECKING:
    from coordinator.config import Settings

__all__ = [
    "CONFIGS",
    "KAFKA_TOPIC_CONFIGS",
    "InvalidConfigError",
    "TopicConfigDef",
    "apply_incremental",
    "broker_default",
    "effective",
    "log_config",
    "to_string",
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
    # Broker settings that give the topic its default, first wins (ServerTopicConfigSynonyms).
    synonyms: tuple[str, ...] = ()
    doc: str = ""  # kgc's own one-line documentation (DescribeConfigs v3+)
    supported: bool = True  # False: kgc does not honour it (refused when set)

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


LONG_MAX_S = str(LONG_MAX)


def _def(
    name: str,
    type_: str,
    default: str,
    doc: str,
    synonyms: tuple[str, ...] = (),
    *,
    supported: bool = True,
    at_least: int | None = None,
    no_more_than: int | None = None,
    one_of: tuple[str, ...] | None = None,
) -> TopicConfigDef:
    return TopicConfigDef(
        name, type_, default, at_least, no_more_than, one_of, synonyms, doc, supported
    )


# Every topic config Kafka 4.x defines (storage/internals/log/LogConfig.java), in its
# definition order: validation reports the first failure in it, DescribeConfigs lists them
# so. ``synonyms`` are the broker settings that give the topic its default, first wins
# (ServerTopicConfigSynonyms). ``supported=False``: kgc does not honour the config; it is
# reported at Kafka's default (read-only) and refused by name when set, never ignored. The
# replication ones kgc accepts are meaningless on a one-replica log but harmless, and
# clients set them. (Kafka 4.0 removed message.format.version,
# message.timestamp.difference.max.ms and message.downconversion.enable.)
KAFKA_TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        _def(
            "segment.bytes",
            "INT",
            "1073741824",
            "Size in bytes at which the partition's active segment is closed and a new one begun.",
            ("log.segment.bytes",),
            at_least=14,
        ),
        _def(
            "segment.ms",
            "LONG",
            "604800000",
            "Age in ms after which the active segment is rolled even if not full.",
            ("log.roll.ms", "log.roll.hours"),
            at_least=1,
        ),
        _def(
            "segment.jitter.ms",
            "LONG",
            "0",
            "Random jitter subtracted from segment.ms (kgc rolls without jitter).",
            ("log.roll.jitter.ms", "log.roll.jitter.hours"),
            supported=False,
            at_least=0,
        ),
        _def(
            "segment.index.bytes",
            "INT",
            "10485760",
            "Largest offset index of a segment (kgc sizes its indexes itself).",
            ("log.index.size.max.bytes",),
            supported=False,
            at_least=4,
        ),
        _def(
            "flush.messages",
            "LONG",
            LONG_MAX_S,
            "Messages between forced fsyncs (kgc: log.flush.policy decides).",
            ("log.flush.interval.messages",),
            supported=False,
            at_least=1,
        ),
        _def(
            "flush.ms",
            "LONG",
            LONG_MAX_S,
            "Time between forced fsyncs (kgc: log.flush.policy decides).",
            ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
            supported=False,
            at_least=0,
        ),
        _def(
            "retention.bytes",
            "LONG",
            "-1",
            "Largest size of a partition before its oldest segments are deleted; -1: no limit.",
            ("log.retention.bytes",),
        ),
        _def(
            "retention.ms",
            "LONG",
            "604800000",
            "Age in ms after which a segment is deleted (delete policy); -1: keep forever.",
            ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
            at_least=-1,
        ),
        _def(
            "max.message.bytes",
            "INT",
            "1048588",
            "Largest record batch the partition accepts.",
            ("message.max.bytes",),
            at_least=0,
        ),
        _def(
            "index.interval.bytes",
            "INT",
            "4096",
            "Bytes between offset index entries (kgc uses its own spacing).",
            ("log.index.interval.bytes",),
            supported=False,
            at_least=0,
        ),
        _def(
            "delete.retention.ms",
            "LONG",
            "86400000",
            "How long a compacted topic keeps tombstones readable.",
            ("log.cleaner.delete.retention.ms",),
            at_least=0,
        ),
        _def(
            "min.compaction.lag.ms",
            "LONG",
            "0",
            "Least age of a record before compaction may remove it.",
            ("log.cleaner.min.compaction.lag.ms",),
            at_least=0,
        ),
        _def(
            "max.compaction.lag.ms",
            "LONG",
            LONG_MAX_S,
            "Longest a record may stay uncompacted (kgc compacts by dirty ratio only).",
            ("log.cleaner.max.compaction.lag.ms",),
            supported=False,
            at_least=1,
        ),
        _def(
            "file.delete.delay.ms",
            "LONG",
            "60000",
            "Delay before a deleted segment's files are removed (kgc removes them at once).",
            ("log.segment.delete.delay.ms",),
            supported=False,
            at_least=0,
        ),
        _def(
            "min.cleanable.dirty.ratio",
            "DOUBLE",
            "0.5",
            "Share of the log not yet compacted at which compaction runs.",
            ("log.cleaner.min.cleanable.ratio",),
            at_least=0,
            no_more_than=1,
        ),
        _def(
            "cleanup.policy",
            "LIST",
            "delete",
            "delete (retention removes old segments), compact (latest record per key), or both.",
            ("log.cleanup.policy",),
            one_of=("compact", "delete"),
        ),
        _def(
            "unclean.leader.election.enable",
            "BOOLEAN",
            "false",
            "Accepted for compatibility: a kgc partition has one replica.",
            ("unclean.leader.election.enable",),
        ),
        _def(
            "min.insync.replicas",
            "INT",
            "1",
            "Accepted for compatibility: a kgc partition has one replica.",
            ("min.insync.replicas",),
            at_least=1,
        ),
        _def(
            "compression.type",
            "STRING",
            "producer",
            "Accepted for compatibility: kgc stores batches as the producer compressed them.",
            ("compression.type",),
            one_of=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        ),
        _def(
            "compression.gzip.level",
            "INT",
            "-1",
            "gzip level for recompression (kgc never recompresses).",
            ("compression.gzip.level",),
            supported=False,
        ),
        _def(
            "compression.lz4.level",
            "INT",
            "9",
            "lz4 level for recompression (kgc never recompresses).",
            ("compression.lz4.level",),
            supported=False,
        ),
        _def(
            "compression.zstd.level",
            "INT",
            "3",
            "zstd level for recompression (kgc never recompresses).",
            ("compression.zstd.level",),
            supported=False,
        ),
        _def(
            "preallocate",
            "BOOLEAN",
            "false",
            "Preallocate segment files (kgc does not).",
            ("log.preallocate",),
            supported=False,
        ),
        _def(
            "message.timestamp.type",
            "STRING",
            "CreateTime",
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps the append time.",
            ("log.message.timestamp.type",),
            one_of=("CreateTime", "LogAppendTime"),
        ),
        _def(
            "message.timestamp.before.max.ms",
            "LONG",
            LONG_MAX_S,
            "Largest allowed lag of a record's timestamp behind the broker's clock (not checked).",
            ("log.message.timestamp.before.max.ms",),
            supported=False,
            at_least=0,
        ),
        _def(
            "message.timestamp.after.max.ms",
            "LONG",
            "3600000",  # Kafka 4's default (KIP-937)
            "Largest allowed lead of a record's timestamp over the broker's clock (kgc checks Kafka's default, one hour; not settable).",
            ("log.message.timestamp.after.max.ms",),
            supported=False,
            at_least=0,
        ),
        _def(
            "leader.replication.throttled.replicas",
            "LIST",
            "",
            "Replication throttling (kgc does not replicate).",
            supported=False,
        ),
        _def(
            "follower.replication.throttled.replicas",
            "LIST",
            "",
            "Replication throttling (kgc does not replicate).",
            supported=False,
        ),
        _def(
            "remote.storage.enable",
            "BOOLEAN",
            "false",
            "Tiered storage (kgc has none).",
            supported=False,
        ),
        _def(
            "local.retention.ms",
            "LONG",
            "-2",
            "Local retention under tiered storage (kgc has none).",
            ("log.local.retention.ms",),
            supported=False,
            at_least=-2,
        ),
        _def(
            "local.retention.bytes",
            "LONG",
            "-2",
            "Local retention under tiered storage (kgc has none).",
            ("log.local.retention.bytes",),
            supported=False,
            at_least=-2,
        ),
        _def(
            "remote.log.copy.disable",
            "BOOLEAN",
            "false",
            "Tiered storage (kgc has none).",
            supported=False,
        ),
        _def(
            "remote.log.delete.on.disable",
            "BOOLEAN",
            "false",
            "Tiered storage (kgc has none).",
            supported=False,
        ),
        # Added by Kafka 4.x after the table above (listed by 4.4's DescribeConfigs).
        _def(
            "remote.copy.lag.bytes",
            "LONG",
            "-1",
            "Tiered storage upload lag by size (kgc has none).",
            ("log.remote.copy.lag.bytes",),
            supported=False,
            at_least=-1,
        ),
        _def(
            "remote.copy.lag.ms",
            "LONG",
            "0",
            "Tiered storage upload lag by time (kgc has none).",
            ("log.remote.copy.lag.ms",),
            supported=False,
            at_least=-1,
        ),
        _def(
            "max.decompressed.message.bytes",
            "INT",
            "2147483639",
            "Largest decompressed record accepted (kgc does not check it).",
            ("max.decompressed.message.bytes",),
            supported=False,
            at_least=0,
        ),
        _def(
            "errors.deadletterqueue.group.enable",
            "BOOLEAN",
            "false",
            "Whether share groups may use the topic as their dead-letter topic (KIP-1191).",
        ),
    )
}

# The topic configs kgc accepts (CreateTopics, AlterConfigs), in Kafka's order.
CONFIGS: dict[str, TopicConfigDef] = {
    name: d for name, d in KAFKA_TOPIC_CONFIGS.items() if d.supported
}

# Topic configs Kafka defines (or defined before 4.0) that kgc does not honour: refused by
# name, never ignored.
UNSUPPORTED = frozenset(
    {name for name, d in KAFKA_TOPIC_CONFIGS.items() if not d.supported}
    | {
        "message.format.version",
        "message.timestamp.difference.max.ms",
        "message.downconversion.enable",
    }
)

# The kgc setting each honoured config defaults to when the topic does not set it (the
# broker's own name for it is the config's first synonym).
BROKER_DEFAULT_FIELDS = {
    "segment.bytes": "log_segment_bytes",
    "segment.ms": "log_roll_ms",
    "retention.ms": "log_retention_ms",
    "retention.bytes": "log_retention_bytes",
    "delete.retention.ms": "log_cleaner_delete_retention_ms",
    "max.message.bytes": "message_max_bytes",
}


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


def to_string(d: TopicConfigDef, value: Value) -> str:
    """``ConfigDef.convertToString``: a parsed value as DescribeConfigs shows it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def broker_default(settings: Settings, name: str) -> str:
    """The value a topic without its own ``name`` gets: the broker's setting for it, else
    Kafka's default (for the configs kgc does not honour, what Kafka would report)."""
    d = KAFKA_TOPIC_CONFIGS[name]
    field = BROKER_DEFAULT_FIELDS.get(name)
    if field is None and d.synonyms:
        # A broker setting of the synonym's name, if kgc has one (e.g. log.cleanup.policy).
        candidate = d.synonyms[0].replace(".", "_")
        if candidate in type(settings).model_fields:
            field = candidate
    if field is not None:
        value = getattr(settings, field, None)
        if value is not None:
            return to_string(d, d.parse(str(value)))
    return d.default


def effective(settings: Settings, configs: dict[str, str]) -> dict[str, str]:
    """Every Kafka topic config's value for a topic with ``configs`` (validated), in
    Kafka's order: its own where set, the broker's default otherwise."""
    out: dict[str, str] = {}
    for name, d in KAFKA_TOPIC_CONFIGS.items():
        raw = configs.get(name)
        out[name] = (
            to_string(d, d.parse(raw)) if raw is not None else broker_default(settings, name)
        )
    return out


def _parts(value: str) -> list[str]:
    # Java's String.split(","), which drops trailing empty strings.
    parts = value.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    return parts or [""]


def apply_incremental(
    current: dict[str, str], ops: list[tuple[str, int, str | None]]
) -> dict[str, str]:
    """Kafka's ConfigurationControlManager.incrementalAlterConfigResource on a topic's
    configs: SET (0), DELETE (1), APPEND (2), SUBTRACT (3), each against the value before
    it (a list's default is Kafka's topic default). Returns the new configs (not validated);
    raises ``InvalidConfigError`` for APPEND/SUBTRACT on a config that is not a LIST."""
    new = dict(current)
    for name, op, value in ops:
        if op == SET:
            assert value is not None
            new[name] = value
        elif op == DELETE:
            new.pop(name, None)
        else:
            new[name] = list_op(name, op, value or "", new.get(name), KAFKA_TOPIC_CONFIGS)
    return new


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def list_op(
    name: str,
    op: int,
    value: str,
    current: str | None,
    defs: dict[str, TopicConfigDef],
) -> str:
    """APPEND or SUBTRACT ``value``'s comma-separated items to/from a LIST config."""
    d = defs.get(name)
    if d is None or d.type != "LIST":
        raise InvalidConfigError(
            f"Can't {OP_NAMES[op]} to key {name} because its type is not LIST."
        )
    base = current if current is not None else d.default
    old = [p for p in base.split(",") if p]
    if op == APPEND:
        for item in _parts(value):
            if item not in old:
                old.append(item)
    else:
        for item in _parts(value):
            if item in old:
                old.remove(item)
    return ",".join(old)


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
