"""GROUP configs (KIP-848, KIP-932, KIP-1071): a consumer, share or streams group's own settings.

How this works
--------------
Kafka 4.x lets an operator give one group its own settings (IncrementalAlterConfigs on a
GROUP resource): a consumer group's ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms``; a share group's ``share.session.timeout.ms``,
``share.heartbeat.interval.ms``, ``share.record.lock.duration.ms``,
``share.delivery.count.limit``, ``share.partition.max.record.locks``,
``share.auto.offset.reset``, ``share.isolation.level``, ``share.renew.acknowledge.enable``
and its dead-letter topic (``errors.deadletterqueue.topic.name``, whose name must not start
with ``__``, and ``errors.deadletterqueue.copy.record.enable``: KIP-1191); a streams group's
``streams.*`` (its rack-aware tags a list without duplicates); the numbers within the
broker's min/max bounds.
``validate`` is Kafka's ``GroupConfig.validate`` for them, with its messages: an unknown
name, a value that does not parse, or one outside the broker's bounds is
``InvalidConfigError`` (INVALID_CONFIG), and nothing is stored. Kafka's group configs kgc
does not honour (the assignment batching, the assignor offload, the streams assignor's name
and warm-up replicas) are refused by name.

The store keeps every group's configs durably: embedded, ``group_configs.json`` in the data
directory, rewritten whole and atomically on each change (like the topic catalog); in
cluster mode, the ``kgc_group_config`` table, each change bumping the cluster's change
version so every node reloads it (``node/pg_stores.PgGroupConfigs.refresh``). After
every change the store tells ``on_change`` the resolved (session timeout, heartbeat
interval) of every configured group; the consumer-group core reads them on each heartbeat
(``ConsumerGroupManager.group_configs``), and ``on_share_change`` the share groups' pair
(``ShareGroupManager.group_configs``). The share-partition leader reads the others by name
(``get``).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator.topic_configs import InvalidConfigError, TopicConfigDef, to_string
from storage.files import DataDirError, fsync_dir

if TYPE_CHECKING:
    from coordinator.config import Settings

__all__ = [
    "GROUP_CONFIGS",
    "GROUP_CONFIGS_FILE",
    "LocalGroupConfigs",
    "StoredGroupConfigs",
    "resolved",
    "resolved_share",
    "streams_overrides",
    "streams_tags",
    "validate",
]

log = logging.getLogger("kgc.group_configs")

GROUP_CONFIGS_FILE = "group_configs.json"  # in the data directory (embedded)
SESSION = "consumer.session.timeout.ms"
HEARTBEAT = "consumer.heartbeat.interval.ms"
STREAMS_SESSION = "streams.session.timeout.ms"
STREAMS_HEARTBEAT = "streams.heartbeat.interval.ms"
STREAMS_STANDBYS = "streams.num.standby.replicas"
STREAMS_INITIAL_DELAY = "streams.initial.rebalance.delay.ms"
STREAMS_TAGS = "streams.rack.aware.assignment.tags"
STREAMS_ASSIGNMENT_INTERVAL = "streams.assignment.interval.ms"
STREAMS_TASK_OFFSET_INTERVAL = "streams.task.offset.interval.ms"
STREAMS_RECOVERY_LAG = "streams.acceptable.recovery.lag"
STREAMS_CONFIGS = (
    STREAMS_SESSION,
    STREAMS_HEARTBEAT,
    STREAMS_STANDBYS,
    STREAMS_INITIAL_DELAY,
    STREAMS_ASSIGNMENT_INTERVAL,
    STREAMS_TASK_OFFSET_INTERVAL,
    STREAMS_RECOVERY_LAG,
)
SHARE_SESSION = "share.session.timeout.ms"
SHARE_HEARTBEAT = "share.heartbeat.interval.ms"
SHARE_LOCK = "share.record.lock.duration.ms"
SHARE_DELIVERY_LIMIT = "share.delivery.count.limit"
SHARE_RESET = "share.auto.offset.reset"
SHARE_ISOLATION = "share.isolation.level"
SHARE_RECORD_LOCKS = "share.partition.max.record.locks"
SHARE_RENEW = "share.renew.acknowledge.enable"
DLQ_TOPIC = "errors.deadletterqueue.topic.name"
DLQ_COPY = "errors.deadletterqueue.copy.record.enable"

# Kafka's GroupConfig definitions kgc honours (the defaults come from the broker's
# group.consumer.* settings, as GroupConfig.fromProps takes them).
GROUP_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        TopicConfigDef(
            SESSION,
            "INT",
            "45000",
            at_least=1,
            synonyms=("group.consumer.session.timeout.ms",),
            doc="Session timeout of this consumer group's members (consumer protocol), "
            "within group.consumer.min/max.session.timeout.ms.",
        ),
        TopicConfigDef(
            HEARTBEAT,
            "INT",
            "5000",
            at_least=1,
            synonyms=("group.consumer.heartbeat.interval.ms",),
            doc="Heartbeat interval of this consumer group's members (consumer protocol), "
            "within group.consumer.min/max.heartbeat.interval.ms.",
        ),
        TopicConfigDef(
            STREAMS_SESSION,
            "INT",
            "45000",
            at_least=1,
            synonyms=("group.streams.session.timeout.ms",),
            doc="Session timeout of this streams group's members, "
            "within group.streams.min/max.session.timeout.ms.",
        ),
        TopicConfigDef(
            STREAMS_HEARTBEAT,
            "INT",
            "5000",
            at_least=1,
            synonyms=("group.streams.heartbeat.interval.ms",),
            doc="Heartbeat interval of this streams group's members, "
            "within group.streams.min/max.heartbeat.interval.ms.",
        ),
        TopicConfigDef(
            STREAMS_STANDBYS,
            "INT",
            "0",
            at_least=0,
            synonyms=("group.streams.num.standby.replicas",),
            doc="Standby replicas of each stateful task of this streams group, "
            "at most group.streams.max.standby.replicas.",
        ),
        TopicConfigDef(
            STREAMS_INITIAL_DELAY,
            "INT",
            "3000",
            at_least=0,
            synonyms=("group.streams.initial.rebalance.delay.ms",),
            doc="How long a new streams group waits for more members before its first assignment.",
        ),
        TopicConfigDef(
            STREAMS_ASSIGNMENT_INTERVAL,
            "INT",
            "1000",
            at_least=0,
            synonyms=("group.streams.assignment.interval.ms",),
            doc="Least time between two target assignments of this streams group, "
            "within group.streams.min/max.assignment.interval.ms.",
        ),
        TopicConfigDef(
            STREAMS_TASK_OFFSET_INTERVAL,
            "INT",
            "60000",
            at_least=1,
            synonyms=("group.streams.task.offset.interval.ms",),
            doc="How often this streams group's members report their task offsets, "
            "at least group.streams.min.task.offset.interval.ms.",
        ),
        TopicConfigDef(
            STREAMS_RECOVERY_LAG,
            "LONG",
            "10000",
            at_least=0,
            synonyms=("group.streams.acceptable.recovery.lag",),
            doc="The lag under which this streams group's members count a task's state as "
            "caught up.",
        ),
        TopicConfigDef(
            STREAMS_TAGS,
            "LIST",
            "",
            synonyms=("group.streams.rack.aware.assignment.tags",),
            doc="Client tag keys every member of this streams group must send "
            "(client.tag.<key>); a member missing one is told MISSING_CLIENT_TAGS.",
        ),
        TopicConfigDef(
            SHARE_SESSION,
            "INT",
            "45000",
            at_least=1,
            synonyms=("group.share.session.timeout.ms",),
            doc="Session timeout of this share group's members, "
            "within group.share.min/max.session.timeout.ms.",
        ),
        TopicConfigDef(
            SHARE_HEARTBEAT,
            "INT",
            "5000",
            at_least=1,
            synonyms=("group.share.heartbeat.interval.ms",),
            doc="Heartbeat interval of this share group's members, "
            "within group.share.min/max.heartbeat.interval.ms.",
        ),
        TopicConfigDef(
            SHARE_LOCK,
            "INT",
            "30000",
            at_least=1000,
            synonyms=("group.share.record.lock.duration.ms",),
            doc="How long a share consumer holds the records it acquired, "
            "within group.share.min/max.record.lock.duration.ms.",
        ),
        TopicConfigDef(
            SHARE_DELIVERY_LIMIT,
            "INT",
            "5",
            at_least=2,
            synonyms=("group.share.delivery.count.limit",),
            doc="Deliveries of a record to this share group before it is archived, "
            "within group.share.min/max.delivery.count.limit.",
        ),
        TopicConfigDef(
            SHARE_RECORD_LOCKS,
            "INT",
            "2000",
            at_least=100,
            synonyms=("group.share.partition.max.record.locks",),
            doc="Share-group record lock limit per share-partition.",
        ),
        TopicConfigDef(
            SHARE_RESET,
            "STRING",
            "latest",
            doc="Where a share-partition starts when the group first reads it: earliest, "
            "latest, or by_duration:<ISO-8601 duration> before now.",
        ),
        TopicConfigDef(
            SHARE_ISOLATION,
            "STRING",
            "read_uncommitted",
            one_of=("read_committed", "read_uncommitted"),
            doc="Whether this share group is given records of transactions not (yet) "
            "committed: read_uncommitted, or read_committed.",
        ),
        TopicConfigDef(
            SHARE_RENEW,
            "BOOLEAN",
            "true",
            doc="Whether the renew acknowledge type is enabled for the share group.",
        ),
        TopicConfigDef(
            DLQ_TOPIC,
            "STRING",
            "",
            doc="The topic this share group copies the records it gives up on to (rejected, "
            "or delivered share.delivery.count.limit times); empty: none.",
        ),
        TopicConfigDef(
            DLQ_COPY,
            "BOOLEAN",
            "false",
            doc="Whether a dead letter carries the original record's key and value, or only "
            "the headers saying where it came from.",
        ),
    )
}
# Kafka's group configs kgc does not honour: refused by name.
UNSUPPORTED = frozenset(
    {
        "consumer.assignment.interval.ms",
        "consumer.assignor.offload.enable",
        "share.assignment.interval.ms",
        "streams.assignor.offload.enable",
        "streams.num.warmup.replicas",
        "streams.assignor.name",
    }
)
# Java's Duration.parse forms (PnDTnHnMn.nS), as share.auto.offset.reset's validator takes them.
_DURATION = re.compile(
    r"[-+]?P(?:[-+]?[0-9]+D)?(?:T(?:[-+]?[0-9]+H)?(?:[-+]?[0-9]+M)?"
    r"(?:[-+]?[0-9]+(?:[.,][0-9]{0,9})?S)?)?",
    re.IGNORECASE,
)


def defaults(settings: Settings) -> dict[str, int]:
    """The broker's values of the numeric group configs (GroupCoordinatorConfig's
    extractConsumerGroupConfigMap, extractShareGroupConfigMap...)."""
    return {
        SESSION: settings.group_consumer_session_timeout_ms,
        HEARTBEAT: settings.group_consumer_heartbeat_interval_ms,
        STREAMS_SESSION: settings.group_streams_session_timeout_ms,
        STREAMS_HEARTBEAT: settings.group_streams_heartbeat_interval_ms,
        STREAMS_STANDBYS: settings.group_streams_num_standby_replicas,
        STREAMS_INITIAL_DELAY: settings.group_streams_initial_rebalance_delay_ms,
        STREAMS_ASSIGNMENT_INTERVAL: settings.group_streams_assignment_interval_ms,
        STREAMS_TASK_OFFSET_INTERVAL: settings.group_streams_task_offset_interval_ms,
        STREAMS_RECOVERY_LAG: settings.group_streams_acceptable_recovery_lag,
        SHARE_SESSION: settings.group_share_session_timeout_ms,
        SHARE_HEARTBEAT: settings.group_share_heartbeat_interval_ms,
        SHARE_LOCK: settings.group_share_record_lock_duration_ms,
        SHARE_DELIVERY_LIMIT: settings.group_share_delivery_count_limit,
        SHARE_RECORD_LOCKS: settings.group_share_partition_max_record_locks,
    }


def validate(settings: Settings, configs: dict[str, str | None]) -> dict[str, int]:
    """A group's configs parsed and checked as Kafka's ControllerConfigurationValidator and
    GroupConfig.validate check them; raises ``InvalidConfigError`` with Kafka's message."""
    nulls = sorted(k for k, v in configs.items() if v is None)
    if nulls:
        raise InvalidConfigError(f"Null value not supported for group configs: {','.join(nulls)}")
    for name in sorted(configs):
        if name in UNSUPPORTED:
            raise InvalidConfigError(f"Group config {name} is not supported by kgc")
        if name not in GROUP_CONFIGS:
            raise InvalidConfigError(f"Unknown group config name: {name}")
    tags = streams_tags(configs.get(STREAMS_TAGS))
    if tags is not None and len(set(tags)) != len(tags):
        raise InvalidConfigError(f"{STREAMS_TAGS} must not contain duplicate tag keys.")
    values: dict[str, int] = defaults(settings)
    for name, d in GROUP_CONFIGS.items():
        raw = configs.get(name)
        if raw is not None and name != STREAMS_TAGS:
            if name == SHARE_RESET and not _valid_reset(raw.strip()):
                raise InvalidConfigError(
                    f"Invalid value {raw} for configuration {name}: Invalid value `{raw}` for "
                    f"configuration {name}. The value must be either 'earliest', 'latest' or "
                    "of the format 'by_duration:<PnDTnHnMn.nS>'."
                )
            parsed = d.parse(raw)
            if isinstance(parsed, int):
                values[name] = parsed
    heartbeat, session = values[HEARTBEAT], values[SESSION]
    s = settings
    # Kafka 4.4's GroupConfig.validateIntRange: the broker's bounds, named.
    hb_lo, hb_hi = (
        s.group_consumer_min_heartbeat_interval_ms,
        s.group_consumer_max_heartbeat_interval_ms,
    )
    st_lo, st_hi = s.group_consumer_min_session_timeout_ms, s.group_consumer_max_session_timeout_ms
    checks = (
        (
            not hb_lo <= heartbeat <= hb_hi,
            f"{HEARTBEAT} must be in the range {hb_lo} to {hb_hi} inclusive.",
        ),
        (
            not st_lo <= session <= st_hi,
            f"{SESSION} must be in the range {st_lo} to {st_hi} inclusive.",
        ),
        (session <= heartbeat, f"{SESSION} must be greater than {HEARTBEAT}"),
        *_streams_checks(settings, values, configs),
        *_share_checks(settings, values),
        (
            (configs.get(DLQ_TOPIC) or "").startswith("__"),
            f"{DLQ_TOPIC}: DLQ topic name must not start with '__'",
        ),
    )
    for failed, message in checks:
        if failed:
            raise InvalidConfigError(message)
    return values


def _streams_checks(
    s: Settings, values: dict[str, int], configs: dict[str, str | None]
) -> list[tuple[bool, str]]:
    """Kafka 4.4's GroupConfig.validateValues for the streams configs set here."""
    out: list[tuple[bool, str]] = []
    for name, lo, hi in (
        (
            STREAMS_HEARTBEAT,
            s.group_streams_min_heartbeat_interval_ms,
            s.group_streams_max_heartbeat_interval_ms,
        ),
        (
            STREAMS_SESSION,
            s.group_streams_min_session_timeout_ms,
            s.group_streams_max_session_timeout_ms,
        ),
    ):
        if name in configs:
            out.append(
                (
                    not lo <= values[name] <= hi,
                    f"{name} must be in the range {lo} to {hi} inclusive.",
                )
            )
    if STREAMS_STANDBYS in configs:
        top = s.group_streams_max_standby_replicas
        out.append(
            (
                values[STREAMS_STANDBYS] > top,
                f"{STREAMS_STANDBYS} must be less than or equal to {top}",
            )
        )
    if STREAMS_ASSIGNMENT_INTERVAL in configs:
        lo = s.group_streams_min_assignment_interval_ms
        hi = s.group_streams_max_assignment_interval_ms
        out.append(
            (
                not lo <= values[STREAMS_ASSIGNMENT_INTERVAL] <= hi,
                f"{STREAMS_ASSIGNMENT_INTERVAL} must be in the range {lo} to {hi} inclusive.",
            )
        )
    if STREAMS_TASK_OFFSET_INTERVAL in configs:
        lo = s.group_streams_min_task_offset_interval_ms
        out.append(
            (
                values[STREAMS_TASK_OFFSET_INTERVAL] < lo,
                f"{STREAMS_TASK_OFFSET_INTERVAL} must be greater than or equal to {lo}",
            )
        )
    return out


def streams_tags(raw: str | None) -> list[str] | None:
    """``streams.rack.aware.assignment.tags`` as Kafka's LIST type reads it (None: not set)."""
    if raw is None:
        return None
    trimmed = raw.strip()
    return re.split(r"\s*,\s*", trimmed) if trimmed else []


def streams_overrides(configs: dict[str, str]) -> dict[str, int | str]:
    """The streams.* configs a group sets itself (the streams core falls back to the broker's);
    the rack-aware tags as the comma-joined list."""
    out: dict[str, int | str] = {}
    for name in STREAMS_CONFIGS:
        raw = configs.get(name)
        if raw is not None:
            parsed = GROUP_CONFIGS[name].parse(raw)
            assert isinstance(parsed, int)
            out[name] = parsed
    tags = streams_tags(configs.get(STREAMS_TAGS))
    if tags is not None:
        out[STREAMS_TAGS] = ",".join(tags)
    return out


def _valid_reset(raw: str) -> bool:
    """ShareGroupAutoOffsetResetStrategy.fromString's checks, case-sensitive."""
    if raw in ("earliest", "latest"):
        return True
    if not raw.startswith("by_duration:"):
        return False
    duration = raw[len("by_duration:") :]
    return (
        bool(_DURATION.fullmatch(duration))
        and any(c.isdigit() for c in duration)  # Java wants at least one section
        and not duration.upper().endswith("T")
        and not duration.startswith("-")  # Kafka refuses a negative duration
    )


def _share_checks(s: Settings, values: dict[str, int]) -> list[tuple[bool, str]]:
    """Kafka 4.4's GroupConfig.validate for the share group configs: each number within
    the broker's bounds, named."""
    out: list[tuple[bool, str]] = []
    for name, lo, hi in (
        (
            SHARE_HEARTBEAT,
            s.group_share_min_heartbeat_interval_ms,
            s.group_share_max_heartbeat_interval_ms,
        ),
        (SHARE_SESSION, s.group_share_min_session_timeout_ms, s.group_share_max_session_timeout_ms),
        (
            SHARE_LOCK,
            s.group_share_min_record_lock_duration_ms,
            s.group_share_max_record_lock_duration_ms,
        ),
        (
            SHARE_DELIVERY_LIMIT,
            s.group_share_min_delivery_count_limit,
            s.group_share_max_delivery_count_limit,
        ),
        (
            SHARE_RECORD_LOCKS,
            s.group_share_min_partition_max_record_locks,
            s.group_share_max_partition_max_record_locks,
        ),
    ):
        out.append(
            (not lo <= values[name] <= hi, f"{name} must be in the range {lo} to {hi} inclusive.")
        )
    out.append(
        (
            values[SHARE_SESSION] <= values[SHARE_HEARTBEAT],
            f"{SHARE_SESSION} must be greater than {SHARE_HEARTBEAT}",
        )
    )
    return out


def resolved(settings: Settings, configs: dict[str, str]) -> tuple[int, int]:
    """(session timeout, heartbeat interval) of a consumer group with these (stored) configs."""
    v = validate(settings, dict(configs))
    return v[SESSION], v[HEARTBEAT]


def resolved_share(settings: Settings, configs: dict[str, str]) -> tuple[int, int]:
    """(session timeout, heartbeat interval) of a share group with these (stored) configs."""
    v = validate(settings, dict(configs))
    return v[SHARE_SESSION], v[SHARE_HEARTBEAT]


def effective(settings: Settings, configs: dict[str, str]) -> dict[str, str]:
    """Every group config's value as DescribeConfigs reports it."""
    base = defaults(settings)
    out = {}
    for name, d in GROUP_CONFIGS.items():
        raw = configs.get(name)
        if name == STREAMS_TAGS:
            tags = streams_tags(raw)
            out[name] = ",".join(
                tags if tags is not None else settings.streams_rack_aware_assignment_tags
            )
            continue
        out[name] = (
            to_string(d, d.parse(raw)) if raw is not None else str(base.get(name, d.default))
        )
    return out


OnChange = Callable[[dict[str, tuple[int, int]]], None]


class StoredGroupConfigs:
    """What both stores share: the configs by group, and telling ``on_change``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.configs: dict[str, dict[str, str]] = {}
        self.on_change: list[OnChange] = []
        self.on_share_change: list[OnChange] = []

    def get(self, group: str) -> dict[str, str]:
        return dict(self.configs.get(group, {}))

    def _install(self, configs: dict[str, dict[str, str]]) -> None:
        self.configs = {g: c for g, c in configs.items() if c}
        timeouts: dict[str, tuple[int, int]] = {}
        share_timeouts: dict[str, tuple[int, int]] = {}
        for group, c in self.configs.items():
            try:
                timeouts[group] = resolved(self.settings, c)
                share_timeouts[group] = resolved_share(self.settings, c)
            except InvalidConfigError as e:
                # Stored under other broker bounds (a restart with new group.consumer.*):
                # the group falls back to the broker's defaults, as it could not be set now.
                log.error("group '%s' configs %s no longer valid, not applied: %s", group, c, e)
        for callback in self.on_change:
            callback(timeouts)
        for callback in self.on_share_change:
            callback(share_timeouts)


class LocalGroupConfigs(StoredGroupConfigs):
    """Embedded: ``group_configs.json`` in the data directory, rewritten atomically."""

    def __init__(self, settings: Settings, path: Path) -> None:
        super().__init__(settings)
        self.path = path
        if path.exists():
            try:
                raw = json.loads(path.read_bytes())
            except (ValueError, UnicodeDecodeError) as e:
                raise self._unreadable(str(e)) from None
            if not isinstance(raw, dict) or not all(isinstance(c, dict) for c in raw.values()):
                raise self._unreadable("expected a JSON object of group configs")
            self.configs = {str(g): {str(k): str(v) for k, v in c.items()} for g, c in raw.items()}

    def _unreadable(self, why: str) -> DataDirError:
        # One line at start-up, as for the topic catalog: guessing would drop every
        # group's configs silently.
        return DataDirError(
            f"group configs {self.path} cannot be read ({why}); move it aside to start "
            "without them (every group then uses the broker's group.consumer.* settings)"
        )

    async def load(self) -> None:
        self._install(self.configs)

    async def set(self, group: str, configs: dict[str, str]) -> None:
        new = dict(self.configs)
        new[group] = dict(configs)
        new = {g: c for g, c in new.items() if c}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(new, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self._install(new)
