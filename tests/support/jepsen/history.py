"""The operation history of a run: every client call recorded as invoke, then ok, fail or info.

How this works: a client calls ``History.invoke`` before sending a request and one of ``ok``,
``fail`` (it certainly did not happen) or ``info`` (unknown: timeout, lost connection) after.
Each event carries a monotonic nanosecond timestamp, the process id, the op type, the key
``(group, topic, partition)`` and a JSON value. Events are appended to a JSON-lines file kept
with the run as they happen (a crash of the harness leaves every event before it on disk) and
``read_history`` reads them back. ``pair_ops`` joins each invoke with its completion into one
``Op`` with an interval; an invoke without a completion counts as ``info`` (end = infinity).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

Key = tuple[str, str, int]

INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
INFO = "info"
COMPLETIONS = (OK, FAIL, INFO)


@dataclass(frozen=True)
class Event:
    """One line of a history."""

    kind: str
    process: int
    f: str
    key: Key | None
    value: Any
    time_ns: int
    index: int

    def to_json(self) -> str:
        return json.dumps(
            {
                "index": self.index,
                "type": self.kind,
                "process": self.process,
                "f": self.f,
                "key": list(self.key) if self.key is not None else None,
                "value": self.value,
                "time": self.time_ns,
            },
            separators=(",", ":"),
        )

    @staticmethod
    def from_json(line: str) -> Event:
        d = json.loads(line)
        raw_key = d["key"]
        key = (str(raw_key[0]), str(raw_key[1]), int(raw_key[2])) if raw_key else None
        return Event(d["type"], d["process"], d["f"], key, d["value"], d["time"], d["index"])


@dataclass
class Op:
    """An invoke joined with its completion: the interval ``[start, end]`` and the outcome."""

    process: int
    f: str
    key: Key | None
    value: Any
    start: float
    end: float
    status: str
    invoke_value: Any = None
    index: int = 0

    @property
    def ok(self) -> bool:
        return self.status == OK


@dataclass
class History:
    """An append-only history, optionally mirrored line by line to a file."""

    path: Path | None = None
    events: list[Event] = field(default_factory=list)
    _open: dict[int, Event] = field(default_factory=dict)
    _file: IO[str] | None = None

    def __post_init__(self) -> None:
        if self.path is not None:
            self._file = self.path.open("a", encoding="utf-8")

    def _add(self, kind: str, process: int, f: str, key: Key | None, value: Any) -> Event:
        event = Event(kind, process, f, key, value, time.monotonic_ns(), len(self.events))
        self.events.append(event)
        if self._file is not None:
            self._file.write(event.to_json() + "\n")
            self._file.flush()
        return event

    def invoke(self, process: int, f: str, key: Key | None, value: Any = None) -> Event:
        if process in self._open:
            raise ValueError(f"process {process} already has an operation in flight")
        event = self._add(INVOKE, process, f, key, value)
        self._open[process] = event
        return event

    def complete(self, process: int, kind: str, value: Any = None) -> Event:
        if kind not in COMPLETIONS:
            raise ValueError(f"not a completion: {kind}")
        started = self._open.pop(process)
        return self._add(kind, process, started.f, started.key, value)

    def ok(self, process: int, value: Any = None) -> Event:
        return self.complete(process, OK, value)

    def fail(self, process: int, value: Any = None) -> Event:
        return self.complete(process, FAIL, value)

    def info(self, process: int, value: Any = None) -> Event:
        return self.complete(process, INFO, value)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_history(path: Path) -> list[Event]:
    """The events of a history file, in the order they were written."""
    with path.open(encoding="utf-8") as fh:
        return [Event.from_json(line) for line in fh if line.strip()]


def pair_ops(events: Iterable[Event]) -> list[Op]:
    """Join invokes with completions. The value of an ok op is the completion's (a read's
    result), else the invoke's; an invoke never completed is ``info`` ending at infinity."""
    open_: dict[int, tuple[Event, int]] = {}
    ops: list[Op | None] = []
    for event in events:
        if event.kind == INVOKE:
            open_[event.process] = (event, len(ops))
            ops.append(None)
            continue
        start, slot = open_.pop(event.process)
        value = event.value if event.kind == OK and event.value is not None else start.value
        end = math.inf if event.kind == INFO else float(event.time_ns)
        ops[slot] = Op(
            event.process,
            start.f,
            start.key,
            value,
            float(start.time_ns),
            end,
            event.kind,
            start.value,
            slot,
        )
    for start, slot in open_.values():
        ops[slot] = Op(
            start.process,
            start.f,
            start.key,
            start.value,
            float(start.time_ns),
            math.inf,
            INFO,
            start.value,
            slot,
        )
    return [op for op in ops if op is not None]


def by_key(ops: Iterable[Op]) -> Iterator[tuple[Key | None, list[Op]]]:
    """Ops grouped per key, each group in invocation order."""
    groups: dict[Key | None, list[Op]] = {}
    for op in ops:
        groups.setdefault(op.key, []).append(op)
    yield from groups.items()
