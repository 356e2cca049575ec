"""Where settings come from, strongest first, and ``load``, which builds them.

How this works: command-line flags (``--group-initial-rebalance-delay-ms``, one per setting:
``add_arguments``), the environment (``KGC_GROUP_INITIAL_REBALANCE_DELAY_MS``), a Java
properties file (``--config server.properties``, properties.py) using Kafka's own names, then
the defaults of ``Settings``. Invalid values fail in ``load`` with one line per setting,
named as Kafka names it (or as the properties file named it). The old ``--log-format``/
``--log-level`` flags and ``KGC_LOG_FORMAT``/``KGC_LOG_LEVEL`` variables are still accepted
with a deprecation line; ``KGC_*`` variables that name no setting are warned about.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from coordinator.config import properties
from coordinator.config.properties import _SYNONYM_OF, DEPRECATED_NAMES, ConfigNotes, kafka_name
from coordinator.config.settings import Settings
from coordinator.kafka_broker_configs import is_kafka_broker_config
from storage.urls import redact_url

# Environment variables kgc's operator commands read (tools.commands.common), not settings.
TOOL_ENVIRONMENT = frozenset({"KGC_BOOTSTRAP_SERVER", "KGC_COMMAND_CONFIG"})
# Old flags of kgc's own settings, still accepted: {flag: field}.
DEPRECATED_FLAGS = {"--log-format": "kgc_log_format", "--log-level": "kgc_log_level"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per setting, documented with its Kafka name and default."""
    parser.add_argument("--config", type=Path, help="properties file with Kafka-style settings")
    for name, info in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        default = info.default
        helptext = (
            f"{info.description} [{kafka_name(name)}; env KGC_{name.upper()}; default: {default}]"
        )
        parser.add_argument(flag, dest=name, default=None, help=helptext)
    for flag in DEPRECATED_FLAGS:
        parser.add_argument(flag, dest=_deprecated_dest(flag), default=None, help=argparse.SUPPRESS)


def _deprecated_dest(flag: str) -> str:
    return "deprecated_" + flag.removeprefix("--").replace("-", "_")


def _environment(notes: ConfigNotes, overrides: dict[str, Any]) -> None:
    """Check the ``KGC_*`` variables: deprecated names are taken (below the new name's
    variable and the flags), names of no setting are noted with a hint."""
    env = {k.upper(): v for k, v in os.environ.items() if k.upper().startswith("KGC_")}
    for var in sorted(env):
        name = var.removeprefix("KGC_").lower()
        if name in Settings.model_fields or var in TOOL_ENVIRONMENT:
            continue
        old = name.replace("_", ".")
        if old in DEPRECATED_NAMES:
            new = DEPRECATED_NAMES[old]
            notes.deprecated.append(f"{var} (now KGC_{new.upper()})")
            if new not in overrides and f"KGC_{new.upper()}" not in env:
                overrides[new] = env[var]
            continue
        target = _SYNONYM_OF.get(old)
        if target is not None:
            notes.unknown_env.append(f"{var} (in the environment it is KGC_{target.upper()})")
        elif is_kafka_broker_config(old):
            notes.unknown_env.append(f"{var} ({old} means nothing for kgc)")
        else:
            notes.unknown_env.append(var)


def load(args: argparse.Namespace | None = None) -> Settings:
    """Build the settings from parsed flags, the environment and the properties file.

    Raises ``SystemExit`` with one line per invalid setting, named as Kafka names it (or as
    the properties file named it). What else was found is logged by ``log_startup``.
    """
    notes = ConfigNotes()
    overrides: dict[str, Any] = {}
    if args is not None:
        properties._PROPERTIES_PATH = getattr(args, "config", None)
        for name in Settings.model_fields:
            value = getattr(args, name, None)
            if value is not None:
                overrides[name] = value
        for flag, new in DEPRECATED_FLAGS.items():
            value = getattr(args, _deprecated_dest(flag), None)
            if value is not None:
                notes.deprecated.append(f"{flag} (now --{new.replace('_', '-')})")
                overrides.setdefault(new, value)
    _environment(notes, overrides)
    properties._READING_NOTES = notes
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            if not loc:
                # A rule across settings (``_check``): its message names them; the input
                # is every setting, which may hold a password (storage.url).
                lines.append(f"invalid configuration: {err['msg'].removeprefix('Value error, ')}")
                continue
            got = err.get("input")
            if loc == "storage_url" and isinstance(got, str):
                got = redact_url(got)
            name = kafka_name(loc)
            if loc not in overrides and f"KGC_{loc.upper()}" not in os.environ:
                name = notes.file_names.get(loc, name)
            lines.append(f"invalid setting {name}: {err['msg']} (got {got!r})")
        raise SystemExit("\n".join(lines)) from None
    except ValueError as exc:
        message = str(exc)
        if not message.startswith(("invalid setting", "invalid configuration")):
            message = f"invalid configuration: {message}"
        raise SystemExit(message) from None
    finally:
        # Only this construction reads the file: a later Settings() is not given it.
        properties._PROPERTIES_PATH = properties._READING_NOTES = None
    settings._notes = notes
    return settings
