"""A Java properties file (``--config server.properties``) as kgc settings.

How this works: a ``server.properties`` written for Kafka starts kgc (``read_properties``):
the file is read with a Java properties parser (``key=value``, ``key: value``, ``key value``,
continuation lines, ``\\uXXXX`` and other escapes, ``#``/``!`` comments); Kafka names kgc
honours under another setting are read as Kafka reads them (``log.dirs``/``log.dir`` as
``data.dir``, ``broker.id`` as ``node.id``, ``log.retention.hours``/``minutes`` and
``log.roll.hours`` as milliseconds, with Kafka's precedence); other Kafka settings
(``coordinator.kafka_broker_configs``) are ignored and listed once at start, and names
neither Kafka nor kgc knows are warned about, as Kafka warns about unused settings. kgc's own
logging settings are ``kgc.log.format``/``kgc.log.level``: Kafka's ``log.*`` names are its
data log's, so the old ``log.format``/``log.level`` are still accepted with a deprecation
line. What reading found besides values is kept in ``ConfigNotes``.

``PropertiesSource`` is the file's place among the settings' sources: ``config.load`` sets
``_PROPERTIES_PATH`` (and ``_READING_NOTES``) for the one ``Settings()`` it builds.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import PydanticBaseSettingsSource

from coordinator.kafka_broker_configs import is_kafka_broker_config

# The properties file the Settings() under construction reads (None: no file).
_PROPERTIES_PATH: Path | None = None
# The notes of the properties file being read by a Settings() under construction.
_READING_NOTES: ConfigNotes | None = None


@dataclass
class ConfigNotes:
    """What loading the configuration found besides values, logged once at start."""

    ignored: list[str] = field(default_factory=list)  # Kafka settings meaningless for kgc
    unknown: list[str] = field(default_factory=list)  # names neither Kafka nor kgc knows
    unknown_env: list[str] = field(default_factory=list)  # KGC_* naming no setting, with a hint
    deprecated: list[str] = field(default_factory=list)  # "old (now new)"
    warnings: list[str] = field(default_factory=list)  # other one-line warnings
    # Setting -> the name it was given under in the properties file, when not its own
    # (log.dirs for data_dir): errors name what the user wrote.
    file_names: dict[str, str] = field(default_factory=dict)


# Old names of kgc's settings, still accepted: {old Kafka-style name: field}.
DEPRECATED_NAMES = {"log.format": "kgc_log_format", "log.level": "kgc_log_level"}
# Kafka names kgc reads into another setting, strongest first (Kafka's order), and the
# factor to milliseconds where Kafka converts (ServerTopicConfigSynonyms, KafkaConfig).
SYNONYMS: dict[str, list[tuple[str, int]]] = {
    "data_dir": [("data.dir", 0), ("log.dirs", 0), ("log.dir", 0)],
    "node_id": [("node.id", 0), ("broker.id", 0)],
    "log_retention_ms": [
        ("log.retention.ms", 0),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ],
    "log_roll_ms": [("log.roll.ms", 0), ("log.roll.hours", 3_600_000)],
}
_SYNONYM_OF = {name: f for f, names in SYNONYMS.items() for name, _ in names[1:]}
_JAVA_INT = re.compile(r"^[+-]?[0-9]+$")


class PropertiesSource(PydanticBaseSettingsSource):
    """The properties file (``--config``), Kafka's dotted names; see ``read_properties``."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        if _PROPERTIES_PATH is None:
            return {}
        values, notes = read_properties(_PROPERTIES_PATH, self.settings_cls.model_fields)
        if _READING_NOTES is not None:
            _READING_NOTES.ignored += notes.ignored
            _READING_NOTES.unknown += notes.unknown
            _READING_NOTES.deprecated += notes.deprecated
            _READING_NOTES.warnings += notes.warnings
            _READING_NOTES.file_names.update(notes.file_names)
        return values


def load_properties(path: Path) -> dict[str, str]:
    """A Java properties file as {key: value}, the last of a repeated key winning as in Java.

    Java reads ``server.properties`` as ISO-8859-1 (non-ASCII as ``\\uXXXX``); a UTF-8 file
    is read as UTF-8, so a value typed with accents means what it shows.
    """
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    # Imported here: only a properties file needs it (~25 ms of every start otherwise).
    import javaproperties

    return dict(javaproperties.loads(text))


def read_properties(path: Path, fields: Collection[str]) -> tuple[dict[str, Any], ConfigNotes]:
    """The settings a Kafka ``server.properties`` gives kgc (``fields``: the names of the
    settings), and what else it holds.

    Values are trimmed, as Kafka's ConfigDef trims them. Raises ``ValueError`` naming the
    setting when a Kafka synonym kgc converts (``log.retention.hours``) is not a number.
    """
    props = {key: value.strip() for key, value in load_properties(path).items()}
    notes = ConfigNotes()
    out: dict[str, Any] = {}
    for target, names in SYNONYMS.items():
        present = [(name, factor) for name, factor in names if name in props]
        if not present:
            continue
        name, factor = present[0]
        value: Any = props[name]
        if name in ("log.dirs", "log.dir"):
            dirs = [d.strip() for d in value.split(",") if d.strip()]
            if not dirs:
                raise ValueError(f"invalid setting {name}: no directory (got {value!r})")
            if len(dirs) > 1:
                notes.warnings.append(
                    f"{name} names {len(dirs)} directories; kgc keeps its data in one, the "
                    f"first: {dirs[0]} (not used: {', '.join(dirs[1:])})"
                )
            value = dirs[0]
        elif factor:
            value = _java_int(name, value) * factor
            if name == "log.roll.hours" and value < factor:
                raise ValueError(
                    f"invalid setting {name}: must be at least 1 (got {props[name]!r})"
                )
            value = max(value, -1)  # Kafka: any negative retention means unlimited (-1)
        if target == "node_id" and props.get("broker.id", value) != value:
            # Kafka's rule: broker.id is another name for node.id, so both must agree.
            raise ValueError("invalid configuration: node.id must be the same as broker.id")
        out[target] = value
        if name != kafka_name(target):
            notes.file_names[target] = name
    for key, value in props.items():
        if key.startswith("listener.name."):  # per-listener: Settings.listener_config
            out.setdefault("listener_name_configs", {})[key] = value
            continue
        if key in _SYNONYM_OF or any(key == n for names in SYNONYMS.values() for n, _ in names):
            continue
        if key in DEPRECATED_NAMES:
            new = DEPRECATED_NAMES[key]
            notes.deprecated.append(f"{key} (now {kafka_name(new)})")
            if kafka_name(new) not in props:
                out[new] = value
                notes.file_names[new] = key
            continue
        name = key.replace(".", "_").replace("-", "_")
        if name in fields and name != "listener_name_configs":
            out[name] = value
        elif is_kafka_broker_config(key):
            notes.ignored.append(key)
        else:
            notes.unknown.append(key)
    return out, notes


def _java_int(name: str, value: str) -> int:
    """Kafka's INT type: a 32-bit integer, else the setting is invalid."""
    if not _JAVA_INT.match(value) or not -(2**31) <= int(value) < 2**31:
        raise ValueError(f"invalid setting {name}: not a 32-bit integer (got {value!r})")
    return int(value)


def kafka_name(field_name: str) -> str:
    return field_name.replace("_", ".")
