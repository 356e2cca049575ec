"""What DescribeConfigs reports of each resource, beside the APIs that answer with it.

How this works: Kafka's ConfigResource types and config sources and types as numbers; the
legal topic names in Kafka's words; kgc's settings as Kafka's broker configs
(``broker_entries``: name, value, source, Kafka's type, sensitivity) and their synonyms in
Kafka's ConfigHelper order (``config_synonyms``); Python's loggers under Kafka's level
names. ``coordinator/apis/configs.py`` answers Describe/Alter/IncrementalAlterConfigs with
these; nothing here knows a request, a connection or an authorizer.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from coordinator import topic_configs
from coordinator.catalog import MAX_NAME_LENGTH
from coordinator.config import Settings, kafka_name
from protocol.errors import ErrorCode
from protocol.messages.describe_configs import DescribeConfigsSynonym

__all__ = [
    "BrokerSetting",
    "ConfigApiError",
    "alter_loggers",
    "broker_entries",
    "check_broker_change",
    "config_synonyms",
    "denied",
    "invalid_request",
    "java_int",
    "kafka_topic_error",
    "loggers",
]

log = logging.getLogger("kgc.config_admin")


# ConfigResource.Type
UNKNOWN, TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 0, 2, 4, 8, 16, 32
KNOWN_TYPES = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)
# DescribeConfigsResponse.ConfigSource
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_BROKER_LOGGER_CONFIG = 6
GROUP_CONFIG = 8
# DescribeConfigsResponse.ConfigType
CONFIG_TYPES = {
    "BOOLEAN": 1,
    "STRING": 2,
    "INT": 3,
    "SHORT": 4,
    "LONG": 5,
    "DOUBLE": 6,
    "LIST": 7,
    "CLASS": 8,
    "PASSWORD": 9,
}
# AlterConfigOp.OpType
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def kafka_topic_error(name: str) -> str | None:
    """Why ``name`` is not a legal topic name, in Kafka's Topic.validate words, or None."""
    if not name:
        why = "the empty string is not allowed"
    elif name == ".":
        why = "'.' is not allowed"
    elif name == "..":
        why = "'..' is not allowed"
    elif len(name) > MAX_NAME_LENGTH:
        why = f"the length of '{name}' is longer than the max allowed length {MAX_NAME_LENGTH}"
    elif not re.fullmatch(r"[a-zA-Z0-9._-]+", name):
        why = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    else:
        return None
    return f"Topic name is invalid: {why}"


# -------------------------------------------------------------------- broker settings

# Kafka's types of the broker settings kgc has, where not plain INT/STRING/BOOLEAN.
_LONG = frozenset(
    {
        "log.roll.ms",
        "log.retention.ms",
        "log.retention.bytes",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.backoff.ms",
        "log.retention.check.interval.ms",
        "log.flush.interval.ms",
        "log.flush.interval.messages",
        "offsets.retention.check.interval.ms",
        "queued.max.request.bytes",
        "connections.max.idle.ms",
        "connections.max.reauth.ms",
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
    }
)
_LIST = frozenset(
    {
        "listeners",
        "advertised.listeners",
        "sasl.enabled.mechanisms",
        "ssl.enabled.protocols",
        "ssl.cipher.suites",
        "group.consumer.assignors",
        "sasl.oauthbearer.expected.audience",
    }
)
# PASSWORD-typed (Kafka) or holding a secret (storage.url's password): sensitive, never shown.
_PASSWORD = frozenset(
    {
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.certificates",
        "sasl.jaas.config",
        "storage.url",
    }
)
# Kafka's ListenerMechanismConfigs: listener.name.<l>.<mechanism>.<config> has <config> as synonym.
_MECHANISM_CONFIGS = (
    "sasl.jaas.config",
    "sasl.server.callback.handler.class",
    "sasl.login.class",
    "sasl.login.callback.handler.class",
    "connections.max.reauth.ms",
    "sasl.server.max.receive.size",
)
_LISTENER_CONFIG = re.compile(r"listener\.name\.[^.]*\.(.*)")


def _base_name(name: str) -> str:
    """The unprefixed name of a listener-scoped setting (``listener.name.x.ssl.a`` -> ``ssl.a``)."""
    m = _LISTENER_CONFIG.fullmatch(name)
    if m is None:
        return name
    base = m.group(1)
    return next((c for c in _MECHANISM_CONFIGS if base.endswith(c)), base)


def broker_synonyms(name: str) -> list[str]:
    """DynamicBrokerConfig.brokerConfigSynonyms(name, matchListenerOverride = true)."""
    families = (
        ("log.roll.ms", "log.roll.hours"),
        ("log.roll.jitter.ms", "log.roll.jitter.hours"),
        ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    )
    for family in families:
        if name in family:
            return list(family)
    if _LISTENER_CONFIG.fullmatch(name):
        return [name, _base_name(name)]
    return [name]


def _kafka_type(name: str, annotation: Any) -> str:
    base = _base_name(name)
    if base in _PASSWORD:
        return "PASSWORD"
    if base in _LIST:
        return "LIST"
    if base in _LONG:
        return "LONG"
    args = get_args(annotation) if get_origin(annotation) in (Union, type(int | None)) else ()
    kinds = [a for a in args if a is not type(None)] or [annotation]
    if bool in kinds:
        return "BOOLEAN"
    if int in kinds:
        return "INT"
    if get_origin(kinds[0]) is Literal or kinds[0] in (str, Path):
        return "STRING"
    return "STRING"


def _as_string(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class BrokerSetting:
    """One broker setting as DescribeConfigs reports it."""

    name: str  # Kafka's name
    value: str | None
    type: str  # Kafka's ConfigDef.Type name
    doc: str
    default: str | None  # its default (DEFAULT_CONFIG synonym), None if it has none
    static: bool  # given explicitly (STATIC_BROKER_CONFIG)

    @property
    def sensitive(self) -> bool:
        return self.type == "PASSWORD"


def broker_entries(settings: Settings) -> dict[str, BrokerSetting]:
    """Every kgc setting under its Kafka name (listener-scoped ones included)."""
    fields = type(settings).model_fields
    given = settings.model_fields_set
    out: dict[str, BrokerSetting] = {}
    for field, info in fields.items():
        if field == "listener_name_configs":
            continue
        name = kafka_name(field)
        default = info.get_default(call_default_factory=True)
        out[name] = BrokerSetting(
            name=name,
            value=_as_string(getattr(settings, field)),
            type=_kafka_type(name, info.annotation),
            doc=info.description or "",
            default=_as_string(default),
            static=field in given,
        )
    for name, value in sorted(settings.listener_name_configs.items()):
        base = _base_name(name)
        field = base.replace(".", "_")
        annotation = fields[field].annotation if field in fields else str
        doc = fields[field].description or "" if field in fields else ""
        out[name] = BrokerSetting(
            name=name,
            value=_as_string(value),
            type=_kafka_type(name, annotation),
            doc=f"{doc} (on listener {name.split('.')[2].upper()})",
            default=None,
            static=True,
        )
    return out


# Kafka's static defaults (KafkaConfig.defaultValues) of the broker settings that give topics
# their defaults, for the ones kgc does not have (None: Kafka defines no default).
_KAFKA_BROKER_DEFAULTS: dict[str, str | None] = {
    "log.roll.ms": None,
    "log.roll.hours": "168",
    "log.roll.jitter.ms": None,
    "log.roll.jitter.hours": "0",
    "log.index.size.max.bytes": "10485760",
    "log.flush.interval.messages": str(topic_configs.LONG_MAX),
    "log.flush.interval.ms": None,
    "log.flush.scheduler.interval.ms": str(topic_configs.LONG_MAX),
    "log.retention.ms": None,
    "log.retention.minutes": None,
    "log.retention.hours": "168",
    "log.index.interval.bytes": "4096",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.max.compaction.lag.ms": str(topic_configs.LONG_MAX),
    "log.segment.delete.delay.ms": "60000",
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.cleanup.policy": "delete",
    "unclean.leader.election.enable": "false",
    "min.insync.replicas": "1",
    "compression.type": "producer",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "log.preallocate": "false",
    "log.message.timestamp.type": "CreateTime",
    "log.message.timestamp.before.max.ms": str(topic_configs.LONG_MAX),
    "log.message.timestamp.after.max.ms": "3600000",  # Kafka 4's default (KIP-937)
    "log.local.retention.ms": "-2",
    "log.local.retention.bytes": "-2",
    "log.remote.copy.lag.bytes": "-1",
    "log.remote.copy.lag.ms": "0",
    "max.decompressed.message.bytes": "2147483639",
}


def config_synonyms(
    name: str, names: list[str], sensitive: bool, broker: dict[str, BrokerSetting]
) -> list[DescribeConfigsSynonym]:
    """ConfigHelper.configSynonyms: ``names``'s values by source, from ``name`` on."""
    out: list[DescribeConfigsSynonym] = []
    # kgc has no dynamic broker configs: DYNAMIC_BROKER_CONFIG and
    # DYNAMIC_DEFAULT_BROKER_CONFIG never appear.
    for n in names:
        s = broker.get(n)
        if s is not None and s.static and s.value is not None:
            out.append(_synonym(n, s.value, STATIC_BROKER_CONFIG, sensitive))
    for n in names:
        s = broker.get(n)
        # A Kafka setting's default is reported where Kafka defines one; kgc's own default
        # stands for it when kgc has the setting (and a Kafka default to stand for).
        kafka_default = _KAFKA_BROKER_DEFAULTS.get(n, "" if s is not None else None)
        if kafka_default is None:
            continue
        default = s.default if s is not None else kafka_default
        if default is not None:
            out.append(_synonym(n, default, DEFAULT_CONFIG, sensitive))
    # Drop what comes before the name itself (e.g. listener overrides of a base config).
    while out and out[0].name != name:
        out.pop(0)
    return out


def _synonym(name: str, value: str | None, source: int, sensitive: bool) -> DescribeConfigsSynonym:
    return DescribeConfigsSynonym(name=name, value=None if sensitive else value, source=source)


# -------------------------------------------------------------------- loggers

ROOT_LOGGER = "root"
KAFKA_LEVELS = ("DEBUG", "ERROR", "FATAL", "INFO", "TRACE", "WARN")  # sorted, as Kafka lists them
PYTHON_LEVELS = {
    "TRACE": 5,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}


def kafka_level(level: int) -> str:
    for name, number in sorted(PYTHON_LEVELS.items(), key=lambda kv: -kv[1]):
        if level >= number:
            return name
    return "TRACE"


def logger_named(name: str) -> logging.Logger | None:
    if name == ROOT_LOGGER:
        return logging.getLogger()
    existing = logging.Logger.manager.loggerDict.get(name)
    return existing if isinstance(existing, logging.Logger) else None


def loggers() -> dict[str, str]:
    """Log4jController.loggers: every logger with its (effective) level, root first."""
    out = {ROOT_LOGGER: kafka_level(logging.getLogger().level)}
    for name, logger in sorted(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            out[name] = kafka_level(logger.getEffectiveLevel())
    return out


# -------------------------------------------------------------------- answers and checks

# Errors.message() of the codes answered with Kafka's default message.
DEFAULT_MESSAGES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.INVALID_REQUEST: (
        "This most likely occurs because of a request being malformed by the client "
        "library or the message was sent to an incompatible broker. See the broker logs "
        "for more details."
    ),
}


class ConfigApiError(Exception):
    """A resource's answer: ``code`` and Kafka's message (None: no message)."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def denied(code: ErrorCode) -> ConfigApiError:
    return ConfigApiError(code, DEFAULT_MESSAGES[code])


def invalid_request(message: str) -> ConfigApiError:
    return ConfigApiError(ErrorCode.INVALID_REQUEST, message)


def java_int(text: str) -> int:
    """Integer.parseInt: an optional sign and ASCII digits, in int range; else ValueError."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(text)
    value = int(text)
    if not -(2**31) <= value < 2**31:
        raise ValueError(text)
    return value


def check_broker_change(
    settings: Settings, name: str, ops: list[tuple[str, int, str | None]]
) -> None:
    """ConfigAdminManager.validateBrokerConfigChange: every setting kgc has is
    read-only, so any SET (or list change) is refused as a non-dynamic config."""
    if name:
        try:
            node = java_int(name)
        except ValueError:
            raise invalid_request(f"Node id must be an integer, but it is: {name}") from None
        if node != settings.node_id:
            raise invalid_request(
                f"Unexpected broker id, expected {settings.node_id}, but received {name}"
            )
    broker = broker_entries(settings)
    changed = []
    for n, op, _ in ops:
        if op not in OP_NAMES:
            raise invalid_request(f"Unknown operations type {op}")
        if op in (APPEND, SUBTRACT):
            setting = broker.get(n)
            if setting is None:
                raise ConfigApiError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {n}")
            if setting.type != "LIST":
                verb = "append" if op == APPEND else "subtract"
                raise ConfigApiError(
                    ErrorCode.INVALID_CONFIG,
                    f"Config value {verb} is not allowed for config key: {n}",
                )
        if op != DELETE:
            changed.append(n)
    if changed:
        # Kafka 4.4 prints a Java list (3.x printed a Scala Set).
        raise invalid_request(
            "Cannot update these configs dynamically: [" + ", ".join(changed) + "]"
        )


def alter_loggers(
    node_id: int, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool
) -> None:
    """RuntimeLoggerManager.applyChangesForResource: every op checked, then applied at
    once (not persisted: a restart goes back to the configured levels, as in Kafka)."""
    try:
        node = java_int(name)
    except ValueError:
        raise invalid_request(f"Node id must be an integer, but it is: {name}") from None
    if node != node_id:
        # Kafka's message names its own id twice.
        raise invalid_request(f"Unexpected node id. Expected {node_id}, but received {node_id}")
    for logger, op, level in ops:
        if op in (SET, DELETE) and logger_named(logger) is None:
            raise ConfigApiError(ErrorCode.INVALID_CONFIG, f"Logger {logger} does not exist!")
        if op == SET:
            if level not in KAFKA_LEVELS:
                raise ConfigApiError(
                    ErrorCode.INVALID_CONFIG,
                    f"Cannot set the log level of {logger} to {level} as it is not a "
                    f"supported log level. Valid log levels are {', '.join(KAFKA_LEVELS)}",
                )
        elif op == DELETE:
            if logger == ROOT_LOGGER:
                raise invalid_request(
                    f"Removing the log level of the {ROOT_LOGGER} logger is not allowed"
                )
        elif op in (APPEND, SUBTRACT):
            raise invalid_request(
                f"{OP_NAMES[op]} operation is not allowed for the BROKER_LOGGER resource"
            )
        else:
            raise invalid_request(
                f"Unknown operation type {op} is not allowed for the BROKER_LOGGER resource"
            )
    if validate_only:
        return
    for logger_name, op, level in ops:
        target = logger_named(logger_name)
        assert target is not None
        if op == SET:
            assert level is not None
            target.setLevel(PYTHON_LEVELS[level])
            log.warning("Updated the log level of %s to %s", logger_name, level)
        else:
            target.setLevel(logging.NOTSET)  # inherits its parent's again
            log.warning("Unset the log level of %s", logger_name)
