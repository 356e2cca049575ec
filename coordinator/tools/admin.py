"""Protocol-level admin operations behind ``kgc groups|offsets|topics|health``.

How this works: an ``Admin`` holds a connection to the bootstrap server and, lazily, one per
other broker it needs. Group operations go to the group's coordinator (FindCoordinator),
offset look-ups (ListOffsets) to each partition's leader (Metadata), so the same code works
against kgc and a multi-broker Kafka cluster. Everything speaks the plain Kafka protocol
through ``coordinator.tools.client``; no kgc internals are used.

Groups come in two types (KIP-848): ``classic`` (JoinGroup/SyncGroup, described by
DescribeGroups) and ``consumer`` (ConsumerGroupHeartbeat, described by
ConsumerGroupDescribe, with epochs and server-side targets). ``describe_group`` asks
ConsumerGroupDescribe first when the coordinator serves it and falls back to DescribeGroups
when the group is not a consumer group, as Kafka's admin client does; both land in one
``GroupDescription`` (``group_type`` says which, the epoch fields are set for consumer groups).

Secured listeners: ``security`` (a ``ClientSecurity``, from ``--command-config``) is used for
every connection, the bootstrap's and each coordinator's or leader's, as a Kafka client uses
one configuration for every broker.

Failures come out as exception types the CLI maps to exit codes: ``Unreachable`` (no
TCP connection or the connection dropped: exit 3), ``AdminError`` (the server answered
with an error, refused the credentials or the TLS handshake failed, or the thing asked for
does not exist: exit 1) and ``UsageError`` (an argument that cannot be used: exit 2).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from coordinator.tools.assignment import Assignment, decode_assignment, encode_assignment
from coordinator.tools.client import AuthenticationFailed, ClientSecurity, Connection, KafkaError
from protocol.errors import ErrorCode
from protocol.messages import (
    consumer_group_describe,
    create_topics,
    delete_groups,
    delete_topics,
    describe_group_history,
    describe_groups,
    find_coordinator,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    streams_group_describe,
)

EARLIEST = -2  # ListOffsets timestamp sentinels
LATEST = -1
TopicPartition = tuple[str, int]

# Versions this module fills the fields of; newer ones address topics by id.
MAX_OFFSET_FETCH = 9
MAX_OFFSET_COMMIT = 9
_COORDINATOR_RETRIABLE = (
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
)
# A group API's answers that Kafka's admin client retries within its timeout, looking the
# coordinator up again (the group moved, or its coordinator cannot answer yet).
_GROUP_RETRIABLE = (*_COORDINATOR_RETRIABLE, ErrorCode.NOT_COORDINATOR)
_RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms


class AdminError(Exception):
    """The server answered with an error, or the group/topic does not exist."""


class Unreachable(Exception):
    """No connection to the server (refused, timed out, dropped)."""


class _CoordinatorGone(Unreachable):
    """The group's coordinator (not the bootstrap server) cannot be reached or dropped the
    connection: a request retried as Kafka's admin client retries a disconnection."""


class UsageError(Exception):
    """Bad usage found only when the command runs (e.g. a malformed --bootstrap-server): exit 2."""


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def check(code: int, what: str, message: str | None = None) -> None:
    if code:
        detail = f": {message}" if message else ""
        raise AdminError(f"{what} failed with {error_name(code)}{detail}")


# -- results


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]]
    # Consumer groups (ConsumerGroupDescribe) only; None/empty for classic groups.
    member_epoch: int | None = None
    member_type: str | None = None  # "consumer", "classic" (a classic member of a consumer group)
    rack_id: str | None = None
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    target_assignment: dict[str, list[int]] = field(default_factory=dict)
    # Streams groups (StreamsGroupDescribe) only: the instance and its tasks by role
    # ("active", "standby", "warmup") and subtopology id.
    process_id: str | None = None
    tasks: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    target_tasks: dict[str, dict[str, list[int]]] = field(default_factory=dict)


@dataclass(slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignment strategy; a consumer group's server-side assignor
    coordinator: tuple[int, str, int]  # node id, host, port
    members: list[Member] = field(default_factory=list)
    group_type: str = "classic"
    group_epoch: int | None = None  # consumer groups only
    assignment_epoch: int | None = None  # consumer groups only (the target's epoch)
    # Streams groups only: the topology's epoch and its subtopologies' source topics.
    topology_epoch: int | None = None
    subtopologies: dict[str, list[str]] = field(default_factory=dict)


@dataclass(slots=True)
class TopicDescription:
    name: str
    topic_id: bytes
    internal: bool
    partitions: list[tuple[int, int, list[int], list[int]]]  # index, leader, replicas, isr


# ConsumerGroupDescribe v1's MemberType (-1: a v0 answer, which does not say).
MEMBER_TYPES = {0: "classic", 1: "consumer"}


def _by_name(topics: Iterable[Any]) -> dict[str, list[int]]:
    """ConsumerGroupDescribe's [topic id, topic name, partitions] as topic name -> partitions."""
    out: dict[str, list[int]] = {}
    for t in topics:
        out.setdefault(t.topic_name, []).extend(t.partitions)
    return {name: sorted(ps) for name, ps in sorted(out.items())}


def _split(bootstrap: str) -> tuple[str, int]:
    host, sep, port = bootstrap.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"bad --bootstrap-server {bootstrap!r}: expected host:port")
    return host.strip("[]") or "127.0.0.1", int(port)


class Admin:
    def __init__(
        self,
        bootstrap: str,
        *,
        timeout: float = 10.0,
        client_id: str = "kgc-admin",
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = _split(bootstrap.split(",")[0].strip())
        self.timeout = timeout
        self.client_id = client_id
        self.security = security or ClientSecurity()
        self.conns: dict[tuple[str, int], Connection] = {}
        self.brokers: dict[int, tuple[str, int]] = {}

    def close(self) -> None:
        for c in self.conns.values():
            c.close()
        self.conns.clear()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing
    def connect(self, addr: tuple[str, int] | None = None) -> Connection:
        addr = addr or self.bootstrap
        conn = self.conns.get(addr)
        if conn is None:
            where = f"{addr[0]}:{addr[1]}"
            try:
                conn = Connection(
                    addr[0],
                    addr[1],
                    client_id=self.client_id,
                    timeout=self.timeout,
                    security=self.security,
                )
            except AuthenticationFailed as exc:
                raise AdminError(f"{where}: {exc}") from None
            except ssl.SSLCertVerificationError as exc:
                raise AdminError(
                    f"TLS: cannot verify {where}'s certificate: {exc.verify_message or exc.reason}"
                    " (check ssl.truststore.location / ssl.ca.location and the host name)"
                ) from None
            except ssl.SSLError as exc:
                raise AdminError(
                    f"TLS handshake with {where} failed: {exc.reason or exc}"
                    " (is it an SSL or SASL_SSL listener?)"
                ) from None
            except TimeoutError:
                raise Unreachable(f"{where} did not answer within {self.timeout:g} s") from None
            except KafkaError as exc:
                raise AdminError(f"{where}: {exc}") from None
            except OSError as exc:
                raise Unreachable(
                    f"cannot reach {where}: {exc.strerror or exc}{self._hint(exc)}"
                ) from None
            self.conns[addr] = conn
        return conn

    def _hint(self, exc: OSError) -> str:
        """Why a plaintext client is cut off: a TLS or SASL listener closes it (a refused
        connection is no listener at all)."""
        if (
            self.security.security_protocol == "PLAINTEXT"
            and isinstance(exc, ConnectionError)
            and not isinstance(exc, ConnectionRefusedError)
        ):
            return (
                " (a TLS or SASL listener closes unauthenticated plaintext connections:"
                " give its settings with --command-config)"
            )
        return ""

    def call(
        self,
        api_key: int,
        body: Any,
        *,
        addr: tuple[str, int] | None = None,
        max_version: int | None = None,
    ) -> tuple[int, Any]:
        conn = self.connect(addr)
        where = addr or self.bootstrap
        try:
            version = conn.version_for(api_key)
            if max_version is not None:
                version = min(version, max_version)
            return conn.request(api_key, body, version)
        except TimeoutError:
            raise Unreachable(
                f"{where[0]}:{where[1]} did not answer within {self.timeout:g} s"
            ) from None
        except KafkaError as exc:
            raise AdminError(str(exc)) from None
        except OSError as exc:  # includes ConnectionError: the server went away mid-request
            self.conns.pop(where, None)
            raise Unreachable(
                f"lost connection to {where[0]}:{where[1]}: {exc.strerror or exc}{self._hint(exc)}"
            ) from None

    # -- cluster
    def api_versions(self) -> dict[int, tuple[int, int]]:
        conn = self.connect()
        try:
            conn.negotiate()
        except TimeoutError:
            raise Unreachable(
                f"{self.bootstrap[0]}:{self.bootstrap[1]} did not answer within {self.timeout:g} s"
            ) from None
        except KafkaError as exc:
            raise AdminError(str(exc)) from None
        except OSError as exc:
            raise Unreachable(
                f"lost connection to {self.bootstrap[0]}:{self.bootstrap[1]}: {exc}{self._hint(exc)}"
            ) from None
        return dict(conn.versions)

    def metadata(self, topics: list[str] | None) -> Any:
        req = metadata.Request(
            topics=None
            if topics is None
            else [metadata.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        _, resp = self.call(metadata.API_KEY, req)
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        return resp

    def broker_addr(self, node_id: int) -> tuple[str, int]:
        if node_id not in self.brokers:
            self.metadata([])
        if node_id not in self.brokers:
            raise AdminError(f"broker {node_id} is not in the cluster metadata")
        return self.brokers[node_id]

    def partitions(self, topic: str) -> dict[int, int]:
        """partition -> leader of an existing topic."""
        resp = self.metadata([topic])
        t = resp.topics[0]
        if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise AdminError(f"topic {topic!r} does not exist")
        check(t.error_code, f"Metadata for topic {topic!r}")
        return {p.partition_index: p.leader_id for p in t.partitions}

    # -- topics
    def list_topics(self, include_internal: bool = False) -> list[TopicDescription]:
        return [t for t in self.describe_topics(None) if include_internal or not t.internal]

    def describe_topics(self, names: list[str] | None) -> list[TopicDescription]:
        resp = self.metadata(names)
        out = []
        for t in resp.topics:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise AdminError(f"topic {t.name!r} does not exist")
            check(t.error_code, f"Metadata for topic {t.name!r}")
            parts = sorted(
                (p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes))
                for p in t.partitions
            )
            out.append(TopicDescription(t.name or "", t.topic_id, t.is_internal, parts))
        return sorted(out, key=lambda d: d.name)

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        req = create_topics.Request(
            topics=[
                create_topics.CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=replication_factor,
                    configs=[
                        create_topics.CreatableTopicConfig(name=k, value=v)
                        for k, v in configs.items()
                    ],
                )
            ],
            timeout_ms=int(self.timeout * 1000),
        )
        _, resp = self.call(create_topics.API_KEY, req)
        r = resp.topics[0]
        check(r.error_code, f"creating topic {name!r}", r.error_message)

    def delete_topic(self, name: str) -> None:
        req = delete_topics.Request(
            topics=[delete_topics.DeleteTopicState(name=name)],
            topic_names=[name],
            timeout_ms=int(self.timeout * 1000),
        )
        _, resp = self.call(delete_topics.API_KEY, req)
        r = resp.responses[0]
        if r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise AdminError(f"topic {name!r} does not exist")
        check(r.error_code, f"deleting topic {name!r}", r.error_message)

    def log_offsets(
        self, tps: Iterable[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        """Offsets for ``timestamp`` (EARLIEST, LATEST or ms): -1 where no record is that late."""
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, parts in by_topic.items():
            leaders = self.partitions(topic)
            for p in parts:
                if p not in leaders:
                    raise AdminError(f"topic {topic!r} has no partition {p}")
                by_leader.setdefault(leaders[p], {}).setdefault(topic, []).append(p)
        out: dict[TopicPartition, int] = {}
        for leader, topics in by_leader.items():
            req = list_offsets.Request(
                replica_id=-1,
                topics=[
                    list_offsets.ListOffsetsTopic(
                        name=t,
                        partitions=[
                            list_offsets.ListOffsetsPartition(
                                partition_index=p, timestamp=timestamp
                            )
                            for p in ps
                        ],
                    )
                    for t, ps in topics.items()
                ],
                timeout_ms=int(self.timeout * 1000),
            )
            _, resp = self.call(list_offsets.API_KEY, req, addr=self.broker_addr(leader))
            for t in resp.topics:
                for p in t.partitions:
                    check(p.error_code, f"ListOffsets for {t.name}-{p.partition_index}")
                    out[(t.name, p.partition_index)] = p.offset
        return out

    # -- groups
    def coordinator(self, group: str) -> tuple[int, str, int]:
        # Retried while the offsets topic is being created or loaded, as Kafka's admin
        # client retries these retriable errors within its timeout.
        deadline = time.monotonic() + self.timeout
        while True:
            node, host, port, code, msg = self._find_coordinator(group)
            if code not in _COORDINATOR_RETRIABLE or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        check(code, f"FindCoordinator for group {group!r}", msg)
        return node, host, port

    def _find_coordinator(self, group: str) -> tuple[int, str, int, int, str | None]:
        version, resp = self.call(
            find_coordinator.API_KEY,
            find_coordinator.Request(key=group, key_type=0, coordinator_keys=[group]),
        )
        if version >= 4:
            c = resp.coordinators[0]
            code, msg, node, host, port = c.error_code, c.error_message, c.node_id, c.host, c.port
        else:
            code, msg, node, host, port = (
                resp.error_code,
                resp.error_message,
                resp.node_id,
                resp.host,
                resp.port,
            )
        return node, host, port, code, msg

    def _coordinator_addr(self, group: str) -> tuple[str, int]:
        _, host, port = self.coordinator(group)
        return self._reachable(host, port)

    def _reachable(self, host: str, port: int) -> tuple[str, int]:
        # A single-node server advertising its bind address: same server as the bootstrap.
        if (
            (host, port) not in self.conns
            and port == self.bootstrap[1]
            and host in ("0.0.0.0", "::", "")
        ):
            return self.bootstrap
        return host, port

    def list_groups(
        self, states: list[str] | None = None, types: list[str] | None = None
    ) -> list[tuple[str, str, str, str]]:
        """(group id, state, protocol type, group type) of every group on every broker.

        ``states`` and ``types`` filter as ListGroups v4/v5 do (case-insensitive); brokers
        too old for a filter are filtered here. A broker before v5 knows classic groups only.
        """
        self.metadata([])
        addrs = [self._reachable(h, p) for h, p in self.brokers.values()] or [self.bootstrap]
        want_states = {s.lower() for s in states or ()}
        want_types = {t.lower() for t in types or ()}
        seen: dict[str, tuple[str, str, str, str]] = {}
        for addr in addrs:
            version, resp = self.call(
                list_groups.API_KEY,
                list_groups.Request(states_filter=states or [], types_filter=types or []),
                addr=addr,
            )
            check(resp.error_code, "ListGroups")
            for g in resp.groups:
                state = g.group_state or ""
                group_type = (g.group_type or "classic").lower() if version >= 5 else "classic"
                if want_states and state and state.lower() not in want_states:
                    continue
                if want_types and group_type not in want_types:
                    continue
                seen[g.group_id] = (g.group_id, state, g.protocol_type, group_type)
        return sorted(seen.values())

    def describe_group(self, group: str) -> GroupDescription:
        """A consumer group through ConsumerGroupDescribe, any other through DescribeGroups.

        An unknown group comes back with state ``Dead`` (as DescribeGroups reports it).
        """
        node, host, port = self.coordinator(group)
        addr = self._reachable(host, port)
        versions = self._versions(addr)
        if consumer_group_describe.API_KEY in versions:
            found = self._describe_consumer_group(group, (node, host, port), addr)
            if found is not None:
                return found
        if streams_group_describe.API_KEY in versions:
            found = self._describe_streams_group(group, (node, host, port), addr)
            if found is not None:
                return found
        _, resp = self.call(
            describe_groups.API_KEY, describe_groups.Request(groups=[group]), addr=addr
        )
        g = resp.groups[0]
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            g.error_code = 0  # v6+ (KIP-1043): an unknown group; earlier versions say Dead
        check(g.error_code, f"DescribeGroups for {group!r}", g.error_message)
        desc = GroupDescription(
            g.group_id, g.group_state, g.protocol_type, g.protocol_data, (node, host, port)
        )
        for m in g.members:
            parts: dict[str, list[int]] = {}
            if g.protocol_type == "consumer" and m.member_assignment:
                try:
                    parts = decode_assignment(m.member_assignment).partitions
                except ValueError:
                    parts = {}
            desc.members.append(
                Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, parts)
            )
        return desc

    def _versions(self, addr: tuple[str, int]) -> dict[int, tuple[int, int]]:
        conn = self.connect(addr)
        if not conn.versions:
            try:
                conn.negotiate()
            except TimeoutError:
                raise Unreachable(
                    f"{addr[0]}:{addr[1]} did not answer within {self.timeout:g} s"
                ) from None
            except KafkaError as exc:
                raise AdminError(str(exc)) from None
            except OSError as exc:
                self.conns.pop(addr, None)
                raise Unreachable(f"lost connection to {addr[0]}:{addr[1]}: {exc}") from None
        return conn.versions

    def _describe_consumer_group(
        self, group: str, coordinator: tuple[int, str, int], addr: tuple[str, int]
    ) -> GroupDescription | None:
        """ConsumerGroupDescribe; None when the group is not a consumer group (or unknown)."""
        _, resp = self.call(
            consumer_group_describe.API_KEY,
            consumer_group_describe.Request(group_ids=[group]),
            addr=addr,
        )
        g = resp.groups[0]
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None  # a classic group, or none at all: DescribeGroups says which
        check(g.error_code, f"ConsumerGroupDescribe for {group!r}", g.error_message)
        desc = GroupDescription(
            g.group_id,
            g.group_state,
            "consumer",
            g.assignor_name,
            coordinator,
            group_type="consumer",
            group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch,
        )
        for m in g.members:
            desc.members.append(
                Member(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    _by_name(m.assignment.topic_partitions),
                    member_epoch=m.member_epoch,
                    member_type=MEMBER_TYPES.get(m.member_type),
                    rack_id=m.rack_id,
                    subscribed_topic_names=list(m.subscribed_topic_names),
                    subscribed_topic_regex=m.subscribed_topic_regex or None,  # "" is none too
                    target_assignment=_by_name(m.target_assignment.topic_partitions),
                )
            )
        return desc

    def _describe_streams_group(
        self, group: str, coordinator: tuple[int, str, int], addr: tuple[str, int]
    ) -> GroupDescription | None:
        """StreamsGroupDescribe; None when the group is not a streams group (or unknown)."""
        _, resp = self.call(
            streams_group_describe.API_KEY,
            streams_group_describe.Request(group_ids=[group]),
            addr=addr,
        )
        g = resp.groups[0]
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        check(g.error_code, f"StreamsGroupDescribe for {group!r}", g.error_message)
        desc = GroupDescription(
            g.group_id,
            g.group_state,
            "streams",
            g.assignor_name or "",
            coordinator,
            group_type="streams",
            group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch,
        )
        if g.topology is not None:
            desc.topology_epoch = g.topology.epoch
            for sub in g.topology.subtopologies or ():
                desc.subtopologies[sub.subtopology_id] = sorted(
                    [*sub.source_topics, *(t.name for t in sub.repartition_source_topics)]
                )

        def tasks(a: Any) -> dict[str, dict[str, list[int]]]:
            return {
                role: {t.subtopology_id: list(t.partitions) for t in getattr(a, f"{role}_tasks")}
                for role in ("active", "standby", "warmup")
            }

        for m in g.members:
            desc.members.append(
                Member(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    {},
                    member_epoch=m.member_epoch,
                    member_type="streams",
                    rack_id=m.rack_id,
                    process_id=m.process_id,
                    tasks=tasks(m.assignment),
                    target_tasks=tasks(m.target_assignment),
                )
            )
        return desc

    def committed_offsets(self, group: str) -> dict[TopicPartition, tuple[int, str | None]]:
        addr = self._coordinator_addr(group)
        version = min(self.connect(addr).version_for(offset_fetch.API_KEY), MAX_OFFSET_FETCH)
        if version >= 8:
            req = offset_fetch.Request(
                groups=[offset_fetch.OffsetFetchRequestGroup(group_id=group, topics=None)]
            )
        else:
            req = offset_fetch.Request(group_id=group, topics=None)
        _, resp = self.call(offset_fetch.API_KEY, req, addr=addr, max_version=version)
        out: dict[TopicPartition, tuple[int, str | None]] = {}
        if version >= 8:
            g = resp.groups[0]
            check(g.error_code, f"OffsetFetch for {group!r}")
            topics: list[Any] = g.topics
        else:
            check(resp.error_code, f"OffsetFetch for {group!r}")
            topics = resp.topics
        for t in topics:
            for p in t.partitions:
                check(p.error_code, f"OffsetFetch for {group!r} {t.name}-{p.partition_index}")
                if p.committed_offset >= 0:
                    out[(t.name, p.partition_index)] = (p.committed_offset, p.metadata)
        return out

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit as an admin (generation -1, no member id): only accepted for an empty group."""
        by_topic: dict[str, list[offset_commit.OffsetCommitRequestPartition]] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(
                offset_commit.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=off, committed_metadata=""
                )
            )
        req = offset_commit.Request(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                offset_commit.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        _, resp = self.call(
            offset_commit.API_KEY,
            req,
            addr=self._coordinator_addr(group),
            max_version=MAX_OFFSET_COMMIT,
        )
        for t in resp.topics:
            for p in t.partitions:
                check(p.error_code, f"OffsetCommit for {group!r} {t.name}-{p.partition_index}")

    def delete_offsets(self, group: str, topic: str, partitions: list[int]) -> None:
        req = offset_delete.Request(
            group_id=group,
            topics=[
                offset_delete.OffsetDeleteRequestTopic(
                    name=topic,
                    partitions=[
                        offset_delete.OffsetDeleteRequestPartition(partition_index=p)
                        for p in partitions
                    ],
                )
            ],
        )
        _, resp = self.call(offset_delete.API_KEY, req, addr=self._coordinator_addr(group))
        if resp.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise AdminError(f"group {group!r} does not exist")
        check(resp.error_code, f"OffsetDelete for {group!r}")
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC:
                    raise AdminError(
                        f"group {group!r} is still subscribed to {t.name!r}: its offsets cannot be deleted"
                    )
                check(p.error_code, f"OffsetDelete for {group!r} {t.name}-{p.partition_index}")

    def group_history(
        self,
        group: str,
        from_ms: int = -1,
        to_ms: int = -1,
        topics: dict[str, list[int] | None] | None = None,
        changes: bool = True,
        retry: bool = True,
    ) -> Any:
        """kgc's DescribeGroupHistory from the group's coordinator (its whole response;
        ``changes=False``: the partitions' current state and status only).

        COORDINATOR_NOT_AVAILABLE (e.g. a kgc.workers node's worker that holds some of the
        group's history is restarting), COORDINATOR_LOAD_IN_PROGRESS and NOT_COORDINATOR
        are retried, the coordinator looked up again each time, until the timeout, as
        Kafka's admin client retries them; then one line says so (``retry=False``: the
        first answer). So is a coordinator that cannot be reached or drops the connection
        (the coordinating worker restarting), as Kafka's admin client retries a
        disconnection; an unreachable bootstrap server fails at once."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                resp = self._group_history_once(group, from_ms, to_ms, topics, changes)
            except _CoordinatorGone as exc:
                if not retry:
                    raise Unreachable(str(exc)) from None
                if time.monotonic() + _RETRY_BACKOFF_S >= deadline:
                    raise Unreachable(f"{exc} (retried for {self.timeout:g} s)") from None
                time.sleep(_RETRY_BACKOFF_S)
                continue
            if resp.error_code not in _GROUP_RETRIABLE or not retry:
                break
            if time.monotonic() + _RETRY_BACKOFF_S >= deadline:
                check(
                    resp.error_code,
                    f"DescribeGroupHistory for {group!r} (retried for {self.timeout:g} s)",
                    resp.error_message,
                )
            time.sleep(_RETRY_BACKOFF_S)
        if resp.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise AdminError(f"group {group!r} does not exist and has no history")
        check(resp.error_code, f"DescribeGroupHistory for {group!r}", resp.error_message)
        return resp

    def _group_history_once(
        self,
        group: str,
        from_ms: int,
        to_ms: int,
        topics: dict[str, list[int] | None] | None,
        changes: bool,
    ) -> Any:
        addr = self._coordinator_addr(group)
        try:
            if describe_group_history.API_KEY not in self._versions(addr):
                raise AdminError(
                    "the server keeps no group history (not kgc, or offsets.history.retention.ms=0)"
                )
            req = describe_group_history.Request(
                group_id=group,
                from_ms=from_ms,
                to_ms=to_ms,
                topics=None
                if topics is None
                else [
                    describe_group_history.HistoryTopic(name=t, partition_indexes=ps)
                    for t, ps in topics.items()
                ],
                include_offset_changes=changes,
                include_membership_changes=changes,
            )
            _, resp = self.call(describe_group_history.API_KEY, req, addr=addr)
        except Unreachable as exc:
            if addr == self.bootstrap:
                raise
            raise _CoordinatorGone(str(exc)) from None
        return resp

    def partition_statuses(self, group: str) -> dict[TopicPartition, str]:
        """Each partition's status (OK, WARN, STALL, STOP, ERR) where the group's coordinator
        keeps history and serves the partition; empty where it keeps none."""
        addr = self._coordinator_addr(group)
        if describe_group_history.API_KEY not in self._versions(addr):
            return {}
        try:
            # A status is no reason to wait: the first answer (the history may come back).
            resp = self.group_history(group, changes=False, retry=False)
        except AdminError:
            return {}
        return {(p.topic, p.partition_index): p.status for p in resp.partitions if p.status}

    def delete_group(self, group: str) -> None:
        _, resp = self.call(
            delete_groups.API_KEY,
            delete_groups.Request(groups_names=[group]),
            addr=self._coordinator_addr(group),
        )
        r = resp.results[0]
        if r.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise AdminError(f"group {group!r} does not exist")
        if r.error_code == ErrorCode.NON_EMPTY_GROUP:
            raise AdminError(f"group {group!r} is not empty: stop its consumers first")
        check(r.error_code, f"DeleteGroups for {group!r}")


__all__ = [
    "EARLIEST",
    "LATEST",
    "Admin",
    "AdminError",
    "Assignment",
    "GroupDescription",
    "Member",
    "TopicDescription",
    "Unreachable",
    "UsageError",
    "decode_assignment",
    "encode_assignment",
]
