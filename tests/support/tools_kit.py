"""Run Kafka's command-line tools against Kafka and kgc and compare what they print.

How this works: ``run_pair(main, args, servers)`` starts the tool (a main class of the pinned
4.4.0 jars, through ``kafkaserver.java_command``) once per server, both JVMs at once, with
``{bootstrap}`` in the arguments replaced by that server's address. ``normalise`` turns an
output into lines free of what legitimately differs between two brokers: each server's port,
UUIDs (classic member ids' suffixes), Kafka Uuids (topic ids, KIP-848 member ids), generated
client-id counters, timestamps the servers chose, and column widths (a line becomes its
whitespace-separated tokens joined by one space). kgc runs with Kafka's node id and cluster
id, so those need no rewriting.

``compare(scenario, kafka, kgc)`` then matches the two line lists. A table (a header line of
upper-case column names, then rows up to a blank line) is compared as a set of rows, each
cell named by its column, because a broker may list members or groups in any order; other
lines are compared in order (their path is ``line``). Where the first cell names a row (a
config, a group) rows are matched by it and a cell's path is ``<row>.<COLUMN>``. A cell or
line that differs must be listed in ``tests/differential/known_differences.toml`` under the
scenario (``tools.*`` names) and path (``*`` matches anything), else the comparison fails
showing both outputs. ``compare_records`` does the same for JSON records, field by field.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from support.kafkaserver import java_command

__all__ = [
    "ACL",
    "CONFIGS",
    "CONSOLE_CONSUMER",
    "CONSOLE_PRODUCER",
    "CONSUMER_GROUPS",
    "DELETE_RECORDS",
    "GET_OFFSETS",
    "LOG_DIRS",
    "TOPICS",
    "VERIFIABLE_CONSUMER",
    "VERIFIABLE_PRODUCER",
    "Server",
    "ToolRun",
    "compare",
    "normalise",
    "run_pair",
    "run_tool",
]

# The main classes behind bin/kafka-*.sh in 4.4.
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
ACL = "org.apache.kafka.tools.AclCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"

KNOWN_DIFFERENCES = (
    Path(__file__).resolve().parent.parent / "differential" / "known_differences.toml"
)


@dataclass(frozen=True)
class Server:
    """One side of a comparison: its name in messages and its bootstrap address."""

    name: str
    bootstrap: str

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])


@dataclass
class ToolRun:
    server: Server
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return (
            f"--- {self.server.name} ({' '.join(self.args)}) exit {self.returncode}\n"
            f"{self.stdout}--- stderr\n{self.stderr}"
        )


def _command(main: str, args: Sequence[str], server: Server) -> list[str]:
    return java_command(main, *(a.replace("{bootstrap}", server.bootstrap) for a in args))


def run_tool(
    main: str, args: Sequence[str], server: Server, *, stdin: str | None = None, timeout: float = 90
) -> ToolRun:
    """One tool run against one server."""
    cmd = _command(main, args, server)
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    return ToolRun(server, list(args), done.returncode, done.stdout, done.stderr)


def run_pair(
    main: str,
    args: Sequence[str],
    servers: Sequence[Server],
    *,
    stdin: str | None = None,
    timeout: float = 90,
) -> list[ToolRun]:
    """The same tool run against each server at once (one JVM each): their runs, in order."""
    procs = [
        subprocess.Popen(
            _command(main, args, s),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in servers
    ]
    runs = []
    for server, proc in zip(servers, procs, strict=True):
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += f"\n(killed after {timeout} s)"
        runs.append(ToolRun(server, list(args), proc.returncode, out, err))
    return runs


# log4j's time stamp on each line a tool logs to stderr.
_LOG_TIME = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# A Kafka Uuid (topic id, KIP-848 member id): 22 chars of base64, URL-safe (Kafka) or not
# (librdkafka's member ids). Test names carry a
# '.', which is not in the alphabet, so no part of a name is ever taken for one.
_KAFKA_UUID = re.compile(r"(?<![A-Za-z0-9_+/-])[A-Za-z0-9_+/-]{22}(?![A-Za-z0-9_+/-])")
# The Java client's generated client ids: consumer-<group>-<n>, producer-<n>, adminclient-<n>.
_CLIENT_SUFFIX = re.compile(r"\b((?:consumer|producer|adminclient)-(?:\S+-)?)\d+\b")


def normalise(
    text: str,
    servers: Iterable[Server],
    *,
    extra: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """``text`` as comparable lines (see the module docstring); ``extra`` are further
    (pattern, replacement) rewrites applied first, e.g. a tool's timestamps."""
    for pattern, repl in extra:
        text = re.sub(pattern, repl, text)
    text = _LOG_TIME.sub("[TIME]", text)
    for s in servers:
        text = re.sub(rf"\b{re.escape(s.bootstrap)}\b", "127.0.0.1:PORT", text)
        text = re.sub(rf"(?<=:){s.port}\b", "PORT", text)
    text = _UUID.sub("UUID", text)
    text = _KAFKA_UUID.sub("ID", text)
    text = _CLIENT_SUFFIX.sub(r"\1N", text)
    return [" ".join(line.split()) for line in text.splitlines()]


@dataclass(frozen=True)
class Difference:
    path: str
    kafka: str
    kgc: str


@dataclass
class _Block:
    header: list[str] | None  # column names for a table, None for a plain line
    rows: list[list[str]] = field(default_factory=list)
    line: str = ""


_COLUMN = re.compile(r"^[A-Z#(][A-Z0-9#()_-]*$")


def _is_header(tokens: list[str]) -> bool:
    return len(tokens) >= 2 and all(_COLUMN.match(t) for t in tokens)


def _blocks(lines: list[str]) -> list[_Block]:
    blocks: list[_Block] = []
    table: _Block | None = None
    for line in lines:
        tokens = line.split(" ") if line else []
        if table is not None and tokens:
            table.rows.append(tokens)
            continue
        table = None
        if _is_header(tokens):
            table = _Block(header=tokens)
            blocks.append(table)
        elif line:
            blocks.append(_Block(header=None, line=line))
    return blocks


def _diff_tables(a: _Block, b: _Block) -> list[Difference]:
    assert a.header is not None and b.header is not None
    if a.header != b.header:
        return [Difference("header", " ".join(a.header), " ".join(b.header))]
    keys_a, keys_b = [r[0] for r in a.rows], [r[0] for r in b.rows]
    if len(set(keys_a)) == len(keys_a) and len(set(keys_b)) == len(keys_b):
        # Rows named by their first cell (a config, a group): matched by it, so one row
        # missing on one side is that one difference; a cell's path is "<row>.<COLUMN>".
        by_a, by_b = dict(zip(keys_a, a.rows, strict=True)), dict(zip(keys_b, b.rows, strict=True))
        pairs = [(k, by_a.get(k), by_b.get(k)) for k in sorted(by_a.keys() | by_b.keys())]
    else:
        rows_a, rows_b = sorted(a.rows), sorted(b.rows)
        pairs = [(None, ra, rb) for ra, rb in zip(rows_a, rows_b, strict=False)]
        if len(rows_a) != len(rows_b):
            pairs.append((None, None, None))
    out: list[Difference] = []
    for key, ra, rb in pairs:
        if ra is None or rb is None:
            out.append(
                Difference(
                    key or "rows",
                    " ".join(ra) if ra else f"<{len(a.rows)} rows>" if key is None else "<absent>",
                    " ".join(rb) if rb else f"<{len(b.rows)} rows>" if key is None else "<absent>",
                )
            )
            continue
        if not len(ra) == len(rb) == len(a.header):  # a cell with spaces: the whole row
            if ra != rb:
                out.append(Difference(f"{key}.row" if key else "row", " ".join(ra), " ".join(rb)))
            continue
        for name, ca, cb in zip(a.header, ra, rb, strict=True):
            if ca != cb:
                out.append(Difference(f"{key}.{name}" if key else name, ca, cb))
    return out


def differences(kafka: list[str], kgc: list[str]) -> list[Difference]:
    """What differs between two normalised outputs, cell by cell in tables."""
    ba, bb = _blocks(kafka), _blocks(kgc)
    out: list[Difference] = []
    if len(ba) != len(bb):
        out.append(Difference("blocks", str(len(ba)), str(len(bb))))
    for a, b in zip(ba, bb, strict=False):
        if a.header is not None and b.header is not None:
            out.extend(_diff_tables(a, b))
        elif a.header is None and b.header is None:
            if a.line != b.line:
                out.append(Difference("line", a.line, b.line))
        else:
            out.append(Difference("block", repr(a.header or a.line), repr(b.header or b.line)))
    return out


def known_differences() -> list[dict[str, str]]:
    data = tomllib.loads(KNOWN_DIFFERENCES.read_text())
    return [
        d for d in data.get("difference", []) if d.get("scenario", "").startswith(("tools.", "*"))
    ]


def is_known(scenario: str, path: str, known: list[dict[str, str]]) -> bool:
    return any(
        fnmatch.fnmatchcase(scenario, d["scenario"]) and fnmatch.fnmatchcase(path, d["path"])
        for d in known
    )


def _flatten(obj: object, prefix: str, masked: Sequence[str]) -> dict[str, str]:
    if isinstance(obj, dict):
        out: dict[str, str] = {}
        for k, v in obj.items():
            path = f"{prefix}.{k}" if prefix else k
            out.update(_flatten("MASKED" if k in masked else v, path, masked))
        return out
    if isinstance(obj, list):
        out = {f"{prefix}.#": str(len(obj))}
        for i, v in enumerate(obj):
            out.update(_flatten(v, f"{prefix}.{i}", masked))
        return out
    return {prefix: json.dumps(obj)}


def compare_records(
    scenario: str,
    runs: Sequence[ToolRun],
    records: Sequence[Sequence[object]],
    *,
    masked: Sequence[str] = (),
) -> list[Difference]:
    """Compare two lists of JSON records field by field (path ``record.<n>.<field path>``,
    fields named in ``masked`` not compared), as ``compare`` does lines."""
    servers = [r.server for r in runs]

    def fields(rec: object) -> dict[str, str]:
        flat = _flatten(rec, "", masked)
        return {k: " ".join(normalise(v, servers)) for k, v in flat.items()}

    kafka_recs, kgc_recs = records
    found: list[Difference] = []
    if len(kafka_recs) != len(kgc_recs):
        found.append(Difference("records", str(len(kafka_recs)), str(len(kgc_recs))))
    for i, (a, b) in enumerate(zip(kafka_recs, kgc_recs, strict=False)):
        fa, fb = fields(a), fields(b)
        for key in sorted(fa.keys() | fb.keys()):
            va, vb = fa.get(key, "<absent>"), fb.get(key, "<absent>")
            if va != vb:
                found.append(Difference(f"record.{i}.{key}", va, vb))
    return _check(scenario, runs, found)


def _check(scenario: str, runs: Sequence[ToolRun], found: list[Difference]) -> list[Difference]:
    kafka_run, kgc_run = runs
    if kafka_run.returncode != kgc_run.returncode:
        found.append(Difference("exit", str(kafka_run.returncode), str(kgc_run.returncode)))
    known = known_differences()
    unlisted = [d for d in found if not is_known(scenario, d.path, known)]
    assert not unlisted, (
        f"{scenario}: differences not in known_differences.toml:\n"
        + "\n".join(f"  {d.path}: kafka={d.kafka!r} kgc={d.kgc!r}" for d in unlisted)
        + f"\n{kafka_run}\n{kgc_run}"
    )
    return [d for d in found if d not in unlisted]


def compare(
    scenario: str,
    runs: Sequence[ToolRun],
    *,
    stream: str = "stdout",
    extra: Sequence[tuple[str, str]] = (),
    transform: Callable[[list[str]], list[str]] | None = None,
) -> list[Difference]:
    """Compare Kafka's run (first) with kgc's (second): fails on a difference not listed in
    known_differences.toml; returns the listed ones that showed."""
    servers = [r.server for r in runs]
    outs = []
    for r in runs:
        lines = normalise(getattr(r, stream), servers, extra=extra)
        outs.append(transform(lines) if transform else lines)
    return _check(scenario, runs, differences(outs[0], outs[1]))
