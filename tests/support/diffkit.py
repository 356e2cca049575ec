"""The differential harness: one scenario, run against Apache Kafka and against kgc, compared.

How this works: a scenario is a function of one ``Side``. ``run_both(scenario, kafka, kgc)``
runs it once against the reference broker and once against kgc; every request it makes
through ``side.call`` (or a ``side.member``'s connection) is recorded with its answer in a
``Transcript``. The two transcripts are then normalised (``normalise``) and compared field by
field (``compare``): any difference not listed in ``known_differences.toml`` fails the test,
with every differing path and both values in the message.

Normalised, because they legitimately differ between two servers:

* generated ids: member ids, cluster ids, topic ids (UUIDs), producer ids. Each distinct
  value becomes ``<kind#n>`` by order of first appearance in its transcript, so the *shape*
  (which answers name the same member, which a new one) is still compared. A member id's
  ``client_id-`` prefix is kept, since Kafka's tools show it;
* node ids, hosts and ports of the brokers and coordinators (``<node>``, ``<host>``,
  ``<port>``);
* throttle times and timestamps (fields ending in ``timestamp`` or ``_time_ms`` that are
  clock readings; ``-1`` is kept, it means "none").

Everything else is compared: error codes and messages, states, generations, epochs,
assignments, offsets, leader epochs, protocol names, member lists and their order,
authorized operations, config entries.

Scenario names are unique per run (``side.name("group")`` gives the same name on both sides,
suffixed with the run's token), so one Kafka broker serves every test of a session.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import threading
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import BY_KEY, create_topics, find_coordinator

__all__ = [
    "KNOWN_DIFFERENCES",
    "Difference",
    "Known",
    "Outcome",
    "Runner",
    "Side",
    "Transcript",
    "api_name",
    "compare",
    "load_known",
    "normalise",
    "run_both",
]

KNOWN_DIFFERENCES = (
    Path(__file__).resolve().parent.parent / "differential" / "known_differences.toml"
)

# Fields whose values are generated ids, by name -> the kind of id.
ID_FIELDS = {
    "member_id": "member",
    "leader": "member",  # JoinGroup's leader is a member id (Metadata's leader_id a node)
    "cluster_id": "cluster",
    "topic_id": "topic-id",
    "producer_id": "producer",
    "assignor_member_id": "member",
}
NODE_FIELDS = {"node_id", "coordinator_id", "controller_id", "broker_id", "leader_id", "replicas"}
NODE_LIST_FIELDS = {"replica_nodes", "isr_nodes", "offline_replicas", "replicas", "isr"}
HOST_FIELDS = {"host"}
# A log directory's path and its disk's sizes are the machine's, not the protocol's.
DISK_FIELDS = {"log_dir", "total_bytes", "usable_bytes"}
ZERO_UUID = b"\x00" * 16
PORT_FIELDS = {"port"}
CLOCK_FIELDS = re.compile(r"(^throttle_time_ms$|timestamp$|^log_append_time_ms$|_time_ms$)")
# Clock-valued fields that are not readings of a clock: durations and settings compare as is.
NOT_CLOCK = {
    "session_timeout_ms",
    "rebalance_timeout_ms",
    "retention_time_ms",
    "heartbeat_interval_ms",
    "transaction_timeout_ms",
}
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


# -- recording


@dataclass
class Exchange:
    """One request and its answer (or the failure the connection saw)."""

    step: str
    api_key: int
    version: int
    request: Any
    response: Any  # a decoded response body, or the string "closed: ..." for a closed link


@dataclass
class Transcript:
    side: str
    exchanges: list[Exchange] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, exchange: Exchange) -> None:
        with self.lock:
            self.exchanges.append(exchange)


class Member:
    """One simulated client: its own connection, its requests recorded under ``step``s."""

    def __init__(self, side: Side, label: str, client_id: str) -> None:
        self.side = side
        self.label = label
        self.conn = Connection.to(side.bootstrap, client_id=client_id, timeout=side.timeout)

    def call(self, api_key: int, version: int, body: Any, *, step: str = "") -> Any:
        # Recorded when sent, answered in place: concurrent calls (``Side.together``) keep
        # their sending order in the transcript whatever order their answers come back in.
        exchange = Exchange(
            step or f"{self.label}.{api_name(api_key)}", api_key, version, body, None
        )
        self.side.transcript.add(exchange)
        try:
            exchange.response = self.conn.call(api_key, version, body)
        except (ConnectionError, OSError) as e:
            exchange.response = f"closed: {type(e).__name__}"
        return exchange.response

    def close(self) -> None:
        self.conn.close()


class Side:
    """What a scenario sees of one server: named members, unique names, untimed setup."""

    def __init__(self, label: str, bootstrap: str, token: str, *, timeout: float = 30.0) -> None:
        self.label = label  # "kafka" or "kgc"
        self.bootstrap = bootstrap
        self.token = token
        self.timeout = timeout
        self.transcript = Transcript(label)
        self._members: dict[str, Member] = {}
        self._pool = ThreadPoolExecutor(max_workers=8)

    def name(self, base: str) -> str:
        """A name unique to this run, the same on both sides."""
        return f"{base}-{self.token}"

    def member(self, label: str, client_id: str | None = None) -> Member:
        if label not in self._members:
            self._members[label] = Member(self, label, client_id or f"diff-{label}")
        return self._members[label]

    def call(self, api_key: int, version: int, body: Any, *, step: str = "") -> Any:
        return self.member("admin").call(api_key, version, body, step=step)

    def note(self, step: str, api_key: int, version: int, value: Any) -> None:
        """Record ``value`` (derived from answers, e.g. the part of a long answer that is
        comparable, or the outcome of a raw frame) as step ``step``, compared like an answer."""
        self.transcript.add(Exchange(step, api_key, version, None, value))

    def together(self, calls: Sequence[Callable[[], Any]], *, stagger: float = 0.05) -> list[Any]:
        """Start ``calls`` concurrently, in order (``stagger`` apart, so both servers see the
        same arrival order), and return their answers in that order."""
        futures = []
        for fn in calls:
            futures.append(self._pool.submit(fn))
            time.sleep(stagger)
        return [f.result(timeout=self.timeout * 2) for f in futures]

    # -- setup, not compared

    def untimed(self) -> Connection:
        return self.member("setup").conn

    def create_topic(self, topic: str, partitions: int = 1, **configs: str) -> None:
        """Create ``topic`` (not recorded) and wait until the server leads its partitions."""
        req = create_topics.CreateTopicsRequest(
            topics=[
                create_topics.CreatableTopic(
                    name=topic,
                    num_partitions=partitions,
                    replication_factor=1,
                    configs=[
                        create_topics.CreatableTopicConfig(name=k.replace("_", "."), value=v)
                        for k, v in configs.items()
                    ],
                )
            ],
            timeout_ms=30000,
        )
        _, resp = self.untimed().request(create_topics.API_KEY, req)
        code = resp.topics[0].error_code
        if code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise AssertionError(f"{self.label}: CreateTopics {topic} failed with {code}")
        self.wait_leaders(topic, partitions)

    def wait_leaders(self, topic: str, partitions: int) -> None:
        from protocol.messages import metadata

        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            _, meta = self.untimed().request(
                metadata.API_KEY,
                metadata.MetadataRequest(topics=[metadata.MetadataRequestTopic(name=topic)]),
            )
            parts = meta.topics[0].partitions if meta.topics else []
            if len(parts) == partitions and all(
                p.error_code == 0 and p.leader_id >= 0 for p in parts
            ):
                return
            time.sleep(0.05)
        raise AssertionError(f"{self.label}: {topic} has no leaders after {self.timeout}s")

    def wait_coordinator(self, key: str, key_type: int = 0) -> None:
        """Wait until FindCoordinator for ``key`` answers (Kafka creates its offsets topic on
        the first ask and answers COORDINATOR_NOT_AVAILABLE meanwhile)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            _, resp = self.untimed().request(
                find_coordinator.API_KEY,
                find_coordinator.FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]),
            )
            coords = getattr(resp, "coordinators", None)
            code = coords[0].error_code if coords else resp.error_code
            if code == 0 and (key_type != 0 or self._group_loaded(key)):
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.label}: no coordinator for {key} after {self.timeout}s")

    def _group_loaded(self, group: str) -> bool:
        """Whether the group's coordinator serves it: DescribeGroups answers without
        NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (Kafka loads the offsets partition
        a moment after FindCoordinator names its leader)."""
        from protocol.messages import describe_groups

        _, resp = self.untimed().request(
            describe_groups.API_KEY, describe_groups.DescribeGroupsRequest(groups=[group])
        )
        return resp.groups[0].error_code in (0, ErrorCode.GROUP_ID_NOT_FOUND)

    def close(self) -> None:
        for m in self._members.values():
            m.close()
        self._pool.shutdown(wait=False, cancel_futures=True)


# -- normalising


class _Ids:
    def __init__(self) -> None:
        self.seen: dict[tuple[str, Any], str] = {}
        self.count: dict[str, int] = {}

    def canon(self, kind: str, value: Any) -> str:
        key = (kind, value)
        if key not in self.seen:
            n = self.count.get(kind, 0) + 1
            self.count[kind] = n
            self.seen[key] = f"<{kind}#{n}>"
        return self.seen[key]


def _member_canon(ids: _Ids, value: Any) -> Any:
    if not isinstance(value, str) or value == "":
        return value
    # Kafka's classic member ids are "<client id>-<uuid>"; keep the prefix.
    prefix, sep, tail = value.rpartition("-")
    if sep and len(tail) >= 8 and prefix:
        m = re.match(r"^(.*)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", value)
        if m:
            return f"{m.group(1)}-{ids.canon('member', value)}"
    return ids.canon("member", value)


def _batches(data: bytes) -> Any:
    """A fetched ``records`` field as its batches (headers and records), so a difference names
    the field; the CRC is left out (it covers the producer id, an id normalised apart)."""
    from storage.record_batch import decode_records, iter_batches

    out: list[Any] = []
    try:
        for header, start, end in iter_batches(data):
            h = {f.name: getattr(header, f.name) for f in dataclasses.fields(header)}
            h["crc"] = "<crc>"
            if header.magic == 2 and not header.compression:
                h["records"] = [_to_plain(r) for r in decode_records(data[start:end])]
            out.append(h)
    except Exception as exc:  # an answer kgc's reader cannot parse is itself a finding
        out.append(f"<unreadable: {type(exc).__name__}>")
    return out


def _to_plain(value: Any, key: str = "") -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _to_plain(getattr(value, f.name), f.name) for f in dataclasses.fields(value)
        }
    if key == "records" and isinstance(value, bytes | bytearray | memoryview) and value:
        return _batches(bytes(value))
    if isinstance(value, list | tuple):
        return [_to_plain(v, key) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _norm(value: Any, key: str, ids: _Ids) -> Any:
    if isinstance(value, dict):
        return {k: _norm(v, k, ids) for k, v in value.items()}
    if isinstance(value, list):
        if key in NODE_LIST_FIELDS:
            return ["<node>" if isinstance(v, int) and v >= 0 else v for v in value]
        return [_norm(v, key, ids) for v in value]
    if key in NOT_CLOCK:
        return value
    if key in DISK_FIELDS and value not in ("", -1, None):
        return f"<{key}>"
    if key in HOST_FIELDS and isinstance(value, str) and value:
        return "<host>"
    if key in PORT_FIELDS and isinstance(value, int) and value > 0:
        return "<port>"
    if key in NODE_FIELDS and isinstance(value, int) and value >= 0 and key != "leader_id":
        return "<node>"
    if key == "leader_id" and isinstance(value, int):
        return "<node>" if value >= 0 else value
    if key in ("member_id", "leader", "assignor_member_id"):
        return _member_canon(ids, value)
    if key == "error_message" and isinstance(value, str):
        # Messages name members by their generated ids ("Member X is not a member ...").
        for (kind, seen), canon in ids.seen.items():
            if kind == "member" and isinstance(seen, str) and len(seen) >= 8 and seen in value:
                value = value.replace(seen, canon)
        return value
    if (
        key in ID_FIELDS
        and value not in (None, "", -1, 0, ZERO_UUID)
        and not isinstance(value, bool)
    ):
        return ids.canon(ID_FIELDS[key], value)
    if isinstance(value, str) and UUID_RE.match(value) and value != str(uuid.UUID(int=0)):
        return ids.canon("uuid", value)
    if CLOCK_FIELDS.search(key) and isinstance(value, int) and value > 0:
        return "<time>"
    return value


def api_name(api_key: int) -> str:
    mod = BY_KEY.get(api_key)
    return mod.__name__.rsplit(".", 1)[-1] if mod else f"api_key_{api_key}"


# Lists compared as sets (sorted after normalising), by API and field name: a classic
# group's members come in the order of Kafka's HashMap of member ids, random UUIDs, so no
# order can be matched (kgc lists them in join order; clients sort them themselves). An
# OffsetFetch of all partitions lists them in the order of Kafka's TimelineHashMap (its
# Fibonacci-hashed slots: 2, 0, 1 for partitions 0-2); kgc sorts them. The groups of one
# DescribeGroups, DeleteGroups, OffsetFetch v8+ or ConsumerGroupDescribe come in the order
# of Kafka's HashMap of their offsets partitions (GroupCoordinatorService groups the ids
# by partition and concatenates the answers); kgc keeps the request's order.
UNORDERED = {
    ("join_group", "members"),
    ("describe_groups", "members"),
    ("describe_groups", "groups"),
    ("delete_groups", "results"),
    ("offset_fetch", "topics"),
    ("offset_fetch", "partitions"),
    ("offset_fetch", "groups"),
    ("consumer_group_describe", "groups"),
    ("consumer_group_describe", "members"),
    # A member's assignment, by topic: Kafka's HashMap of topic ids (random UUIDs).
    ("consumer_group_heartbeat", "topic_partitions"),
    ("consumer_group_describe", "topic_partitions"),
    # A member's subscribed topic names: a HashSet of names in Kafka.
    ("consumer_group_describe", "subscribed_topic_names"),
    # Share groups: the same HashMaps (groups, members, topic ids) and HashSet of names.
    ("share_group_describe", "groups"),
    ("share_group_describe", "members"),
    ("share_group_describe", "topic_partitions"),
    ("share_group_describe", "subscribed_topic_names"),
    ("share_group_heartbeat", "topic_partitions"),
    # ShareFetch's partitions: Kafka's ShareFetchUtils.processFetchResponse fills a HashMap
    # of TopicIdPartition (topic ids are random UUIDs).
    ("share_fetch", "responses"),
    ("share_fetch", "partitions"),
}


def _identity(v: Any) -> tuple[str, str]:
    """An unordered list's sort key: the item's id when it has one (so a difference pairs the
    same member, group or topic on both sides), else its whole text."""
    if isinstance(v, dict):
        for k in ("member_id", "group_id", "topic_id", "name", "topic_name", "partition_index"):
            if k in v:
                return (f"{len(str(v[k])):04d}{v[k]}", repr(v))
    return (f"{len(repr(v)):04d}", repr(v))


def _sort_unordered(value: Any, api: str, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _sort_unordered(v, api, k) for k, v in value.items()}
    if isinstance(value, list):
        items = [_sort_unordered(v, api, key) for v in value]
        if (api, key) in UNORDERED:
            items.sort(key=_identity)
        return items
    return value


def normalise(transcript: Transcript) -> list[dict[str, Any]]:
    ids = _Ids()
    out = []
    for ex in transcript.exchanges:
        api = api_name(ex.api_key)
        out.append(
            {
                "step": ex.step,
                "api": api,
                "version": ex.version,
                "response": _sort_unordered(_norm(_to_plain(ex.response), "response", ids), api),
            }
        )
    return out


# -- comparing


@dataclass(frozen=True)
class Difference:
    scenario: str
    step: str
    path: str
    kafka: Any
    kgc: Any

    def __str__(self) -> str:
        return f"{self.step}: {self.path}: kafka={self.kafka!r} kgc={self.kgc!r}"


@dataclass(frozen=True)
class Known:
    scenario: str
    path: str
    kind: str
    reason: str
    ticket: str = ""

    def matches(self, d: Difference) -> bool:
        return fnmatch.fnmatchcase(d.scenario, self.scenario) and _path_matches(self.path, d.path)


def _path_matches(pattern: str, path: str) -> bool:
    pp, ps = pattern.split("."), path.split(".")
    return len(pp) == len(ps) and all(a == "*" or a == b for a, b in zip(pp, ps, strict=True))


def load_known(path: Path = KNOWN_DIFFERENCES) -> list[Known]:
    data = tomllib.loads(path.read_text())
    known = []
    for entry in data.get("difference", []):
        if entry.get("kind") not in ("deliberate", "kafka-bug") or not entry.get("reason"):
            raise ValueError(f"{path}: every difference needs kind and reason: {entry}")
        if entry["kind"] == "kafka-bug" and not str(entry.get("ticket", "")).startswith("KAFKA-"):
            raise ValueError(f"{path}: a kafka-bug names its KAFKA- ticket: {entry}")
        known.append(
            Known(
                entry["scenario"],
                entry["path"],
                entry["kind"],
                entry["reason"],
                entry.get("ticket", ""),
            )
        )
    return known


def _walk(a: Any, b: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            yield from _walk(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path}.#len", len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from _walk(x, y, f"{path}.{i}")
    elif a != b:
        yield path, a, b


def compare(scenario: str, kafka: Transcript, kgc: Transcript) -> list[Difference]:
    ka, kg = normalise(kafka), normalise(kgc)
    diffs = []
    if [e["step"] for e in ka] != [e["step"] for e in kg]:
        diffs.append(
            Difference(
                scenario, "<steps>", "steps", [e["step"] for e in ka], [e["step"] for e in kg]
            )
        )
    for x, y in zip(ka, kg, strict=False):
        for path, va, vb in _walk(x["response"], y["response"], "response"):
            # A path names list positions by index; a known difference uses '*' for them.
            diffs.append(Difference(scenario, x["step"], path, va, vb))
    return diffs


# -- running


@dataclass
class Outcome:
    scenario: str
    kafka: Transcript
    kgc: Transcript
    differences: list[Difference]
    unexplained: list[Difference]
    explained: list[tuple[Difference, Known]]

    def apis(self) -> set[str]:
        return {api_name(e.api_key) for e in self.kafka.exchanges}


# Every outcome of the session, for the summary the differential conftest prints.
OUTCOMES: list[Outcome] = []


def run_both(
    scenario: Callable[[Side], None],
    kafka_bootstrap: str,
    kgc_bootstrap: str,
    *,
    name: str | None = None,
    known: list[Known] | None = None,
    parallel: bool = False,
) -> Outcome:
    """Run ``scenario`` on Kafka, then on kgc; compare; fail on an unexplained difference.

    ``parallel``: run both sides at once (each in its own thread, on its own server), for
    scenarios that mostly wait on timeouts (a session expiring takes 6 s on each)."""
    label = name or scenario.__name__
    token = uuid.uuid4().hex[:8]
    sides = {
        which: Side(which, bootstrap, token)
        for which, bootstrap in (("kafka", kafka_bootstrap), ("kgc", kgc_bootstrap))
    }

    def play(side: Side) -> None:
        try:
            scenario(side)
        finally:
            side.close()

    if parallel:
        with ThreadPoolExecutor(max_workers=2) as pool:
            for f in [pool.submit(play, side) for side in sides.values()]:
                f.result()
    else:
        for side in sides.values():
            play(side)
    diffs = compare(label, sides["kafka"].transcript, sides["kgc"].transcript)
    known = load_known() if known is None else known
    explained, unexplained = [], []
    for d in diffs:
        hit = next((k for k in known if k.matches(d)), None)
        if hit is None:
            unexplained.append(d)
        else:
            explained.append((d, hit))
    outcome = Outcome(
        label, sides["kafka"].transcript, sides["kgc"].transcript, diffs, unexplained, explained
    )
    OUTCOMES.append(outcome)
    if unexplained:
        lines = "\n  ".join(str(d) for d in unexplained[:60])
        more = f"\n  ... and {len(unexplained) - 60} more" if len(unexplained) > 60 else ""
        raise AssertionError(
            f"{label}: {len(unexplained)} difference(s) between Kafka and kgc not in "
            f"{KNOWN_DIFFERENCES.name}:\n  {lines}{more}"
        )
    return outcome


Runner = Callable[..., Outcome]
