"""Logging for ``kgc serve``: human text by default, JSON lines with ``--log-format json``.

How this works: ``setup_logging`` puts one handler on the root logger, writing to stderr
(where containers and systemd collect it). Text lines are
``2024-05-01T12:00:00.123Z INFO kgc.groups: <message>``; JSON lines carry ``ts``, ``level``,
``logger`` and ``msg`` plus any ``extra=`` fields a caller attached, and the traceback as
``exc`` when there is one.

Group lines (the core's ``Result.events``, logged by the runtime on ``kgc.groups``) start
with ``group <id>``; the JSON formatter lifts the group id, generation, member id and
rebalance cause out of the text into their own fields so a log pipeline can filter on them
without parsing prose. The text is unchanged, so nothing depends on the extraction.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import IO, Any

# Attributes every LogRecord has; anything else came from ``extra=`` and is emitted as a field.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}

_GROUP = re.compile(r"^group (?P<group>\S+?):? ")
_GENERATION = re.compile(r"\bgeneration (?P<generation>\d+)")
_CAUSE = re.compile(r"preparing rebalance from generation \d+ \((?P<cause>[a-z_]+)\)")
_MEMBER = re.compile(r"\b(?:member|leader) (?P<member>\S+?)[,;:)]?(?:\s|$)")


def group_fields(message: str) -> dict[str, Any]:
    """Group id, generation, member and cause found in a group event line (best effort)."""
    m = _GROUP.match(message)
    if m is None:
        return {}
    out: dict[str, Any] = {"group": m["group"]}
    if g := _GENERATION.search(message):
        out["generation"] = int(g["generation"])
    if c := _CAUSE.search(message):
        out["cause"] = c["cause"]
    if mm := _MEMBER.search(message, m.end()):
        out["member"] = mm["member"]
    return out


def _utc(created: float) -> str:
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
        + f".{int(created % 1 * 1000):03d}Z"
    )


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{_utc(record.created)} {record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        obj: dict[str, Any] = {
            "ts": _utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": msg,
        }
        if record.name == "kgc.groups":
            obj.update(group_fields(msg))
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                obj[key] = value
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        return json.dumps(obj, default=str)


def setup_logging(
    level: str = "INFO", fmt: str = "text", stream: IO[str] | None = None
) -> logging.Handler:
    """Replace the root logger's handlers with one writing ``fmt`` lines to ``stream``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    # asyncio's debug chatter and the HTTP server's access lines are noise at INFO.
    logging.getLogger("asyncio").setLevel(max(root.level, logging.WARNING))
    return handler
