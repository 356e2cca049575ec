"""What loading the configuration found, and the effective configuration, logged once at start.

How this works: ``log_startup`` logs the notes of loading (deprecated names, unknown settings
and ``KGC_*`` variables, ignored Kafka settings) and every setting that differs from its
default, by Kafka name, secrets (passwords, JAAS configs, keys, the database URL's password)
hidden.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from coordinator.config.properties import kafka_name
from coordinator.config.settings import Settings
from storage.urls import redact_url

log = logging.getLogger("kgc.config")


# Settings whose values are secrets (Kafka's PASSWORD type, and JAAS lines that carry
# passwords): the effective configuration shows them as [hidden], as Kafka logs them.
_SECRET = re.compile(r"password|jaas\.config|keystore\.key|certificate|secret|token", re.I)


def _shown(name: str, value: Any) -> str:
    if value is None:
        return "null"
    if name == "storage.url":
        return redact_url(str(value))
    if _SECRET.search(name):
        return "[hidden]"
    return str(value)


def effective_settings(settings: Settings) -> dict[str, str]:
    """Every setting that differs from its default, by Kafka name, secrets hidden."""
    out: dict[str, str] = {}
    for name, info in Settings.model_fields.items():
        value = getattr(settings, name)
        if name == "listener_name_configs":
            for key, scoped in sorted(value.items()):
                out[key] = _shown(key, scoped)
            continue
        default = info.get_default(call_default_factory=True)
        if value != default:
            out[kafka_name(name)] = _shown(kafka_name(name), value)
    return out


def startup_report(settings: Settings) -> list[tuple[int, str]]:
    """The lines ``log_startup`` logs, as (level, message)."""
    notes = settings._notes
    out: list[tuple[int, str]] = []
    if notes.deprecated:
        out.append(
            (logging.WARNING, "deprecated names, still accepted: " + ", ".join(notes.deprecated))
        )
    if notes.unknown:
        out.append(
            (
                logging.WARNING,
                "unknown settings in the properties file, not used: " + ", ".join(notes.unknown),
            )
        )
    if notes.unknown_env:
        out.append(
            (
                logging.WARNING,
                "unknown KGC_* environment variables, not used: " + ", ".join(notes.unknown_env),
            )
        )
    out += [(logging.WARNING, w) for w in notes.warnings]
    if notes.ignored:
        out.append(
            (
                logging.INFO,
                "Kafka settings ignored (they mean nothing for kgc): " + ", ".join(notes.ignored),
            )
        )
    if settings.controller_listener_names:
        out.append(
            (
                logging.INFO,
                f"listeners {settings.controller_listener_names} (controller.listener.names) "
                "are not bound: kgc runs no KRaft controller",
            )
        )
    shown = effective_settings(settings)
    out.append(
        (
            logging.INFO,
            "configuration (settings other than their defaults): "
            + (", ".join(f"{k}={v}" for k, v in shown.items()) or "all defaults"),
        )
    )
    return out


def log_startup(settings: Settings) -> None:
    """Log what loading the configuration found and the effective configuration, once."""
    for level, message in startup_report(settings):
        log.log(level, message)
