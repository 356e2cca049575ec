"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, retention.

How this works
--------------
``OffsetMetadataManager`` (Kafka's OffsetMetadataManager) owns the committed
offsets, ``offsets[group][(topic, partition)]``; every change is also emitted as
an OffsetCommit record (or a tombstone) for the offsets log.  Groups are not
its own: it finds them through one lookup over every group type
(``find_group``, by default the classic manager's groups) and asks each group
what only the group knows through the ``OffsetGroup`` protocol below: may this
member commit or fetch, may offsets be deleted, which topics it subscribes to,
when its offsets expire.  ``ClassicGroup`` implements it; so does a consumer
group (KIP-848).  Unknown groups committing with generation -1 become "simple"
classic groups, created through the ``ClassicGroupManager``.

Topics.  Offsets are stored by topic *name*, as Kafka's OffsetCommitKey is.
OffsetCommit and OffsetFetch v10 name topics by id: the request's ids are
resolved through the ``TopicsImage`` first (Kafka's KafkaApis does this before
its coordinator sees the request); an unknown id answers UNKNOWN_TOPIC_ID on
each of its partitions, a known topic with a partition it lacks
UNKNOWN_TOPIC_OR_PARTITION.  A v10 answer echoes the ids (names are not on the
wire); a v10 "all topics" fetch answers by id and leaves out topics the image
does not know (they cannot be named on v10).

OffsetCommit validation follows Kafka's OffsetMetadataManager.validateOffsetCommit:
an unknown group is created as a "simple" group when the generation is -1
(admin tools, assign()-mode consumers) and rejected otherwise
(ILLEGAL_GENERATION, v9+ GROUP_ID_NOT_FOUND); otherwise the group validates the
member (``OffsetGroup.validate_offset_commit``: for a classic group, static
fencing, generation, REBALANCE_IN_PROGRESS while CompletingRebalance; for a
consumer group, member epochs).  A commit from a member of a Stable or
PreparingRebalance classic group also re-arms its session timer, as Kafka does
for the classic protocol.  Request-level errors apply to every partition;
OFFSET_METADATA_TOO_LARGE is per partition.  Values are written as v3, or v1
when a v2-v4 request sets retention_time_ms (v1 alone carries an expire
timestamp). An OffsetCommit v1 partition's own commit timestamp is kept (now when -1); v0
(no generation or member: ZooKeeper's offsets in Kafka's day) is a generation -1 commit,
accepted like an admin's.

Transactional commits have no transaction coordinator here: they are held
in memory per producer id until ``end_transaction`` commits (records are
then written) or aborts them.  While held they make ``require_stable``
fetches answer UNSTABLE_OFFSET_COMMIT and keep the partition from expiring.
A stale member epoch on TxnOffsetCommit answers ILLEGAL_GENERATION, as Kafka.

Retention (KIP-211), on the shard's ``expire-offsets`` timer:
``cleanup_expired_offsets`` removes a group's expired offsets, counted from
when the group says (``OffsetGroup.offset_expiration_base``: for a classic
group since it became Empty, or since the commit; for a consumer group since
the commit, whatever its state), never those of subscribed topics; offsets
with an explicit expire timestamp use it.  The shard then deletes groups left
empty (``OffsetGroup.is_empty``) without offsets.
"""

from __future__ import annotations

import codecs
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.manager import ClassicGroupManager
from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.events import TopicOffsetsDeleted
from coordinator.group.partitions import Partitions
from coordinator.group.records import offset_commit_record, offset_commit_tombstone
from coordinator.group.topics import TopicsImage
from coordinator.group.types import GroupConfig, Record, RequestContext, Result
from protocol.errors import ErrorCode
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from storage.records import OffsetCommitKey, decode_offset_commit_value

__all__ = ["OffsetEntry", "OffsetGroup", "OffsetMetadataManager"]

_S = ClassicGroupState.STABLE
_P = ClassicGroupState.PREPARING_REBALANCE
_OK = ErrorCode.NO_ERROR

ZERO_ID = bytes(16)  # Kafka's Uuid.ZERO_UUID: "no topic id"

# Codes answered before the coordinator sees a commit (Kafka's KafkaApis): a request-level
# error of the coordinator does not overwrite them.
_BEFORE_COORDINATOR = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID)

# A fetched partition: (partition, offset, leader epoch, metadata, error).
_Fetched = tuple[int, int, int, str, int]
# A fetched topic: (name, topic id -- ZERO_ID when the request named it, partitions).
_FetchedTopic = tuple[str, bytes, list[_Fetched]]
TopicPartition = tuple[str, int]


class OffsetGroup(Protocol):
    """What the offsets manager needs from a group, whatever its type: the contract.

    Kafka's ``Group`` interface, offset part.  ``ClassicGroup`` implements it; a consumer
    group (KIP-848) does too.  Every method is a pure question: none changes the group,
    writes records or reads a clock.  Errors are returned (``None``: accepted), never
    raised; the manager applies a returned code to every partition of the request.

    What a consumer group answers (Kafka's ConsumerGroup, notes §7.7 and §5.6) is given
    with each method, so that the two implementations can be checked against one text.
    """

    def validate_offset_commit(
        self,
        member_id: str,
        instance_id: str | None,
        generation_or_epoch: int,
        /,
        *,
        transactional: bool,
        api_version: int,
        partitions: Iterable[tuple[bytes, int]] | None = None,
    ) -> ErrorCode | None:
        """May this OffsetCommit (or, ``transactional``, TxnOffsetCommit) be written?

        ``generation_or_epoch``: the request's generation id (classic members) or member
        epoch (consumer members); ``api_version``: the request's version; ``partitions``:
        the (topic id, partition) pairs to be written (those not already refused, nor with
        metadata too large), the zero id for a topic the image does not know; None when
        the caller has not listed them (an older epoch is then refused).

        Classic group: Dead -> COORDINATOR_NOT_AVAILABLE; generation < 0 while Empty ->
        accepted; else the member must be known (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) and
        of the current generation (ILLEGAL_GENERATION); non-transactional commits while
        CompletingRebalance -> REBALANCE_IN_PROGRESS.

        Consumer group, in this order: epoch < 0 and no members -> accepted (admin, manual
        commits); transactional with member id "", epoch -1 and no instance id -> accepted;
        an unknown member -> UNKNOWN_MEMBER_ID (epoch -1 with members present included); a
        non-transactional commit by a consumer-protocol member with ``api_version`` < 9 ->
        UNSUPPORTED_VERSION; an epoch newer than the member's -> STALE_MEMBER_EPOCH
        (ILLEGAL_GENERATION for a classic-protocol member in the group); an older one
        (KIP-1251, Kafka 4.3+) is accepted only if every partition is held by the member
        (assigned or pending revocation) and was assigned to it at that epoch or before,
        else the same error for the whole request.
        The manager turns STALE_MEMBER_EPOCH into ILLEGAL_GENERATION on TxnOffsetCommit,
        as Kafka's OffsetMetadataManager does, so a group need not know which API asks.
        """
        ...

    def validate_offset_fetch(
        self, member_id: str | None, member_epoch: int, api_version: int, /
    ) -> ErrorCode | None:
        """May offsets be fetched?  ``member_id``/``member_epoch``: OffsetFetch v9+'s fields
        (None and -1 on older versions and from admin clients).

        GROUP_ID_NOT_FOUND means "treat the group as absent": a fetch of named partitions
        answers each with offset -1 and no error, an all-topics fetch answers no topics.
        Any other code is the group's error code in the answer.

        Classic group: Dead -> GROUP_ID_NOT_FOUND, otherwise accepted (members are not
        checked).  Consumer group: member id None and epoch < 0 -> accepted; otherwise
        an unknown member -> UNKNOWN_MEMBER_ID, a different epoch -> STALE_MEMBER_EPOCH
        (ILLEGAL_GENERATION for a classic-protocol member).
        """
        ...

    def validate_offset_delete(self) -> ErrorCode | None:
        """May OffsetDelete remove offsets of this group at all?

        Classic group: Dead -> GROUP_ID_NOT_FOUND; members present and not the consumer
        protocol -> NON_EMPTY_GROUP.  Consumer group: always accepted (subscribed topics
        are refused per partition through ``is_subscribed_to``).
        """
        ...

    def is_subscribed_to(self, topic: str, /) -> bool:
        """Is ``topic`` (a name) in use by the group?  Its offsets then neither expire nor
        can be deleted (OffsetDelete: GROUP_SUBSCRIBED_TO_TOPIC per partition).

        Classic group: in the members' subscriptions; when those are unknown, True for a
        "consumer" protocol group.  Consumer group: subscribed by name, or matched by a
        resolved regular expression.
        """
        ...

    def offset_expiration_base(self) -> Callable[[int], int] | None:
        """When retention of an offset committed at a given time (ms) starts, or None if
        no offset of this group expires now (Kafka's offsetExpirationCondition).

        Classic group: see ``ClassicGroup.offset_expiration_base``.  Consumer group: the
        commit time itself, whatever the state (``lambda commit_ms: commit_ms``); topics
        it subscribes to are kept through ``is_subscribed_to``.
        """
        ...

    def is_empty(self) -> bool:
        """No members: a group left without offsets is then deleted by offset expiry."""
        ...


@dataclass(slots=True)
class OffsetEntry:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


def _code(
    codes: dict[tuple[int, int], ErrorCode], key: tuple[int, int], rest: ErrorCode | None
) -> ErrorCode:
    code = codes.get(key)
    if rest is None or code in _BEFORE_COORDINATOR:
        assert code is not None
        return code
    return rest


# Looked up at import, not on first use: a codec's module is imported lazily, and an import
# inside a request handler fails (EMFILE) when connections hold every file descriptor.
codecs.lookup("utf-16-le")


def _java_length(s: str) -> int:
    # Kafka compares String.length(): UTF-16 code units, not bytes.
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def _metadata_too_large(s: str, limit: int) -> bool:
    """``_java_length(s) > limit`` without encoding when the answer is plain: a code
    point is one or two UTF-16 units, so ``len(s) <= units <= 2 * len(s)``."""
    n = len(s)
    if n * 2 <= limit:
        return False
    return n > limit or _java_length(s) > limit


def _commit_response(
    out: Result,
    reply_to: int,
    req: OffsetCommitRequest,
    names: list[str | None],
    codes: dict[tuple[int, int], ErrorCode],
    rest: ErrorCode | None = None,
) -> Result:
    """Answer an OffsetCommit with ``codes``; ``rest``: the coordinator's error for every
    other partition. (A function of the module, not a closure: built on every commit.)

    In the order of Kafka's OffsetCommitResponse.Builder: the partitions refused before the
    coordinator first (their topics in request order), then the coordinator's, appended to
    their topic when it is already listed; without refused partitions, the coordinator's
    answer as it is (a topic named twice twice). A topic without partitions is left out."""
    topics: list[OffsetCommitResponseTopic] = []
    if not any(c in _BEFORE_COORDINATOR for c in codes.values()):
        for i, (t, name) in enumerate(zip(req.topics, names, strict=True)):
            if t.partitions:
                parts = [
                    OffsetCommitResponsePartition(
                        p.partition_index, _code(codes, (i, p.partition_index), rest)
                    )
                    for p in t.partitions
                ]
                topics.append(OffsetCommitResponseTopic(name or "", t.topic_id, parts))
        out.replies.append((reply_to, OffsetCommitResponse(topics=topics)))
        return out
    by_key: dict[object, OffsetCommitResponseTopic] = {}
    for before in (True, False):
        for i, (t, name) in enumerate(zip(req.topics, names, strict=True)):
            key = i if name is None else name
            for p in t.partitions:
                code = codes.get((i, p.partition_index))
                if (code in _BEFORE_COORDINATOR) is not before:
                    continue
                topic = by_key.get(key)
                if topic is None:
                    topic = by_key[key] = OffsetCommitResponseTopic(name or "", t.topic_id, [])
                    topics.append(topic)
                topic.partitions.append(
                    OffsetCommitResponsePartition(
                        p.partition_index, _code(codes, (i, p.partition_index), rest)
                    )
                )
    out.replies.append((reply_to, OffsetCommitResponse(topics=topics)))
    return out


class OffsetMetadataManager:
    def __init__(
        self,
        config: GroupConfig,
        partitions: Partitions,
        classic: ClassicGroupManager,
        *,
        topic_partitions: Callable[[str], int | None] | None = None,
        topics: TopicsImage | None = None,
        find_group: Callable[[str], OffsetGroup | None] | None = None,
    ) -> None:
        self.config = config
        self.partitions = partitions
        self.classic = classic
        self.offsets: dict[str, dict[TopicPartition, OffsetEntry]] = {}
        # group -> producer id -> partition -> offset, awaiting the transaction's end.
        self.pending_txn_offsets: dict[str, dict[int, dict[TopicPartition, OffsetEntry]]] = {}
        # Partition count of a topic, None if it does not exist (the catalog's answer;
        # None here: every topic exists, as in most unit tests). Kafka refuses offsets of
        # unknown partitions before its coordinator sees them.
        self._topic_partitions = topic_partitions
        # The topics by name and id: resolves v10's topic ids, and when given, answers
        # partition counts (``topic_partitions`` then only covers names it does not know).
        # Without it a v10 request's ids are all unknown. Public: set by whoever builds it.
        self.topics = topics
        # A group of any type by id, None if there is none: the one lookup every API here
        # goes through (the classic groups when not given).
        self.find_group: Callable[[str], OffsetGroup | None] = (
            find_group if find_group is not None else classic.groups.get
        )

    def _unknown_partition(self, topic: str, partition: int) -> bool:
        n = self._partition_bound(topic)
        return n >= 0 and not 0 <= partition < n

    def _partition_bound(self, topic: str) -> int:
        """The partitions of ``topic`` are ``0 <= p < bound`` (0 for an unknown topic), or
        every partition exists when the bound is -1 (no topic table to ask)."""
        if self.topics is not None:
            image = self.topics.topic(topic)
            if image is not None:
                return image.num_partitions
            if self._topic_partitions is None:
                return 0
        lookup = self._topic_partitions
        if lookup is None:
            return -1
        n = lookup(topic)
        return 0 if n is None else n

    def _topic_name(self, topic_id: bytes) -> str | None:
        """The name of the topic with ``topic_id``; None if unknown (or the zero id)."""
        if topic_id == ZERO_ID or self.topics is None:
            return None
        image = self.topics.topic_by_id(topic_id)
        return None if image is None else image.name

    def _topic_id(self, name: str) -> bytes:
        """The id of topic ``name``; ZERO_ID if unknown."""
        image = None if self.topics is None else self.topics.topic(name)
        return ZERO_ID if image is None else image.topic_id

    # ------------------------------------------------------------ commit

    def offset_commit(self, ctx: RequestContext, req: OffsetCommitRequest, now_ms: int) -> Result:
        """OffsetCommit: the usual request by the fast path, anything else by the general one.

        ``_commit_fast`` answers the common case -- a v1-v9 request of known topics and
        partitions to a loaded, existing group that accepts it, every metadata short --
        without the per-partition code table; it returns None, having changed nothing,
        whenever the request is anything else, and the general path decides (same answers,
        same records: tests/group check both paths against each other).
        """
        if 1 <= ctx.api_version < 10:
            out = self._commit_fast(ctx, req, now_ms)
            if out is not None:
                return out
        return self._commit(ctx, req, now_ms)

    def _commit_fast(
        self, ctx: RequestContext, req: OffsetCommitRequest, now_ms: int
    ) -> Result | None:
        gid = req.group_id
        partitions = self.partitions
        if partitions.precheck(gid) is not None:
            return None  # the general path answers the error
        p = partitions.partition_of(gid)
        group = self.find_group(gid)
        if group is None:
            return None  # a new "simple" group or an error: the general path decides
        if (
            group.validate_offset_commit(
                req.member_id,
                req.group_instance_id,
                req.generation_id_or_member_epoch,
                transactional=False,
                api_version=ctx.api_version,
            )
            is not None
        ):
            return None
        v = ctx.api_version
        expire: int | None = None
        if 2 <= v <= 4 and req.retention_time_ms != -1:
            expire = now_ms + req.retention_time_ms
        half_limit = self.config.offset_metadata_max_bytes // 2
        stored: list[tuple[TopicPartition, OffsetEntry]] = []
        records: list[Record] = []
        answer = []
        bound = self._partition_bound
        try:
            for t in req.topics:
                name = t.name
                n = bound(name)
                if len(t.partitions) > 1 and len({rp.partition_index for rp in t.partitions}) < len(
                    t.partitions
                ):
                    return None  # a partition named twice: the general path keeps the first
                parts = []
                for rp in t.partitions:
                    index = rp.partition_index
                    if n >= 0 and not 0 <= index < n:
                        return None  # an unknown partition: the general path answers it
                    metadata = rp.committed_metadata or ""
                    if len(metadata) > half_limit:
                        return None  # perhaps too large: the general path measures it
                    ts = rp.commit_timestamp
                    if ts == -1:
                        ts = now_ms
                    entry = OffsetEntry(
                        rp.committed_offset, rp.committed_leader_epoch, metadata, ts, expire
                    )
                    records.append(
                        offset_commit_record(
                            p,
                            gid,
                            name,
                            index,
                            rp.committed_offset,
                            metadata,
                            ts,
                            rp.committed_leader_epoch,
                            expire,
                        )
                    )
                    stored.append(((name, index), entry))
                    parts.append(OffsetCommitResponsePartition(index, _OK))
                if parts:  # Kafka's API layer does not pass a topic without partitions on
                    answer.append(OffsetCommitResponseTopic(name, t.topic_id, parts))
        except (struct.error, ValueError):
            return None  # a record that cannot be serialized: the general path answers
        out = Result()
        if stored:
            if isinstance(group, ClassicGroup) and (group.state is _S or group.state is _P):
                # With the classic protocol a commit also proves the member is alive.
                member = group.members.get(req.member_id)
                if member is not None:
                    self.classic.reschedule_heartbeat(out, group, member, now_ms)
            by_group = self.offsets.get(gid)
            if by_group is None:
                by_group = self.offsets[gid] = {}
            for tp, entry in stored:
                by_group[tp] = entry
            out.records = records
        out.replies.append((ctx.reply_to, OffsetCommitResponse(0, answer)))
        return out

    def _commit(self, ctx: RequestContext, req: OffsetCommitRequest, now_ms: int) -> Result:
        out = Result()
        v = ctx.api_version
        # Topics are resolved and unknown partitions answered first, as Kafka's KafkaApis
        # does before the coordinator sees the request; the coordinator's codes fill in the
        # rest. Codes are keyed by (topic's index in the request, partition): on v10 two
        # unknown ids share the empty name.
        names: list[str | None] = [
            t.name if v < 10 else self._topic_name(t.topic_id) for t in req.topics
        ]
        codes: dict[tuple[int, int], ErrorCode] = {}
        wanted = 0
        for i, (t, name) in enumerate(zip(req.topics, names, strict=True)):
            for p in t.partitions:
                wanted += 1
                if name is None:
                    codes[(i, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_ID
                elif self._unknown_partition(name, p.partition_index):
                    codes[(i, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        reply_to = ctx.reply_to
        if len(codes) == wanted:
            # Nothing left for the coordinator (an empty request included): Kafka answers
            # without it, so no group is validated, created or kept alive.
            return _commit_response(out, reply_to, req, names, codes)
        # The empty group id commits: Kafka keeps it "for backwards compatibility".
        gid = req.group_id
        err = self.partitions.precheck(gid) if gid else self.partitions.availability_error(gid)
        if err is not None:
            return _commit_response(out, reply_to, req, names, codes, err)
        generation = req.generation_id_or_member_epoch
        group = self.find_group(gid)
        simple: ClassicGroup | None = None  # a new "simple" group, kept if a commit is written
        if group is None:
            if generation >= 0:
                return _commit_response(
                    out,
                    reply_to,
                    req,
                    names,
                    codes,
                    ErrorCode.GROUP_ID_NOT_FOUND if v >= 9 else ErrorCode.ILLEGAL_GENERATION,
                )
            group = simple = ClassicGroup(gid)
        limit = self.config.offset_metadata_max_bytes
        err = group.validate_offset_commit(
            req.member_id,
            req.group_instance_id,
            generation,
            transactional=False,
            api_version=v,
            # What would be written (a consumer group checks each partition's assignment
            # epoch when the member epoch is older than the member's).
            partitions=(
                (self._topic_id(name), p.partition_index)
                for i, (t, name) in enumerate(zip(req.topics, names, strict=True))
                if name is not None
                for p in t.partitions
                if (i, p.partition_index) not in codes
                and not (p.committed_metadata and _metadata_too_large(p.committed_metadata, limit))
            ),
        )
        if err is not None:
            return _commit_response(out, reply_to, req, names, codes, err)

        # Encode every record before changing anything: a commit is all-or-nothing.
        expire: int | None = None
        if 2 <= v <= 4 and req.retention_time_ms != -1:
            expire = now_ms + req.retention_time_ms
        stored: list[tuple[str, int, OffsetEntry]] = []
        records: list[Record] = []
        for i, (t, name) in enumerate(zip(req.topics, names, strict=True)):
            for p in t.partitions:
                key = (i, p.partition_index)
                if key in codes:
                    continue
                assert name is not None  # unknown ids have their code already
                metadata = p.committed_metadata or ""
                if metadata and _metadata_too_large(
                    metadata, self.config.offset_metadata_max_bytes
                ):
                    codes[key] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    continue
                # (offset, leader epoch, metadata, commit timestamp, expire timestamp); v1
                # carries a commit timestamp per partition (-1: now), as Kafka keeps it.
                entry = OffsetEntry(
                    p.committed_offset,
                    p.committed_leader_epoch,
                    metadata,
                    now_ms if p.commit_timestamp == -1 else p.commit_timestamp,
                    expire,
                )
                try:
                    records.append(self._offset_record(gid, name, p.partition_index, entry))
                except (struct.error, ValueError):
                    # Kafka fails the whole write when a record cannot be serialized.
                    return _commit_response(out, reply_to, req, names, codes, ErrorCode.UNKNOWN)
                stored.append((name, p.partition_index, entry))
                codes[key] = ErrorCode.NO_ERROR
        if simple is not None and stored:
            self.classic.groups[gid] = simple
        if isinstance(group, ClassicGroup) and group.is_in(_S, _P):
            # With the classic protocol a commit also proves the member is alive.
            member = group.members.get(req.member_id)
            if member is not None:
                self.classic.reschedule_heartbeat(out, group, member, now_ms)
        by_group = self.offsets.setdefault(gid, {}) if stored else None
        for topic, partition, entry in stored:
            assert by_group is not None
            by_group[(topic, partition)] = entry
        out.records.extend(records)
        return _commit_response(out, reply_to, req, names, codes)

    def _offset_record(
        self, group_id: str, topic: str, partition: int, entry: OffsetEntry
    ) -> Record:
        return offset_commit_record(
            self.partitions.partition_of(group_id),
            group_id,
            topic,
            partition,
            entry.offset,
            entry.metadata,
            entry.commit_timestamp_ms,
            entry.leader_epoch,
            entry.expire_timestamp_ms,
        )

    def _store_offset(
        self, out: Result, group_id: str, topic: str, partition: int, entry: OffsetEntry
    ) -> None:
        record = self._offset_record(group_id, topic, partition, entry)  # encode first
        self.offsets.setdefault(group_id, {})[(topic, partition)] = entry
        out.records.append(record)

    def _delete_offset(self, out: Result, group_id: str, topic: str, partition: int) -> None:
        offsets = self.offsets.get(group_id)
        if offsets is not None and offsets.pop((topic, partition), None) is not None:
            out.records.append(
                offset_commit_tombstone(
                    self.partitions.partition_of(group_id), group_id, topic, partition
                )
            )
            if not offsets:
                del self.offsets[group_id]

    def _has_pending_txn(self, group_id: str, tp: tuple[str, int] | None = None) -> bool:
        by_producer = self.pending_txn_offsets.get(group_id)
        if not by_producer:
            return False
        if tp is None:
            return True
        return any(tp in parts for parts in by_producer.values())

    def _ensure_group(self, group_id: str) -> None:
        """Offsets are being written for ``group_id``: a group without one gets a "simple"
        classic group, as Kafka's replay does."""
        if self.find_group(group_id) is None:
            self.classic.get_or_create_group(group_id)

    # ------------------------------------------------------------ transactional commit

    def txn_offset_commit(
        self, ctx: RequestContext, req: TxnOffsetCommitRequest, now_ms: int
    ) -> Result:
        out = Result()
        codes: dict[tuple[int, int], ErrorCode] = {}
        wanted = 0
        for i, t in enumerate(req.topics):
            for p in t.partitions:
                wanted += 1
                if self._unknown_partition(t.name, p.partition_index):
                    codes[(i, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        def respond(rest: ErrorCode | None = None) -> Result:
            topics = [
                TxnOffsetCommitResponseTopic(
                    name=t.name,
                    partitions=[
                        TxnOffsetCommitResponsePartition(
                            partition_index=p.partition_index,
                            error_code=_code(codes, (i, p.partition_index), rest),
                        )
                        for p in t.partitions
                    ],
                )
                for i, t in enumerate(req.topics)
            ]
            out.replies.append((ctx.reply_to, TxnOffsetCommitResponse(topics=topics)))
            return out

        if len(codes) == wanted:
            return respond()  # nothing left for the coordinator, as in offset_commit
        err = self.partitions.precheck(req.group_id)
        if err is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and ctx.api_version < 2:
            # Kafka's KafkaApis: producers before 2.0 (v0-1) could crash on this code.
            err = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if err is not None:
            return respond(err)
        gid = req.group_id
        group = self.find_group(gid)
        simple: ClassicGroup | None = None
        if group is None:
            if req.generation_id >= 0:
                return respond(ErrorCode.ILLEGAL_GENERATION)
            group = simple = ClassicGroup(gid)
        limit = self.config.offset_metadata_max_bytes
        err = group.validate_offset_commit(
            req.member_id,
            req.group_instance_id,
            req.generation_id,
            transactional=True,
            api_version=ctx.api_version,
            partitions=(
                (self._topic_id(t.name), p.partition_index)
                for i, t in enumerate(req.topics)
                for p in t.partitions
                if (i, p.partition_index) not in codes
                and _java_length(p.committed_metadata or "") <= limit
            ),
        )
        if err is ErrorCode.STALE_MEMBER_EPOCH:
            err = ErrorCode.ILLEGAL_GENERATION  # Kafka maps it for TxnOffsetCommit
        if err is not None:
            return respond(err)
        held: dict[tuple[str, int], OffsetEntry] = {}
        for i, t in enumerate(req.topics):
            for p in t.partitions:
                key = (i, p.partition_index)
                if key in codes:
                    continue
                metadata = p.committed_metadata or ""
                if _java_length(metadata) > self.config.offset_metadata_max_bytes:
                    codes[key] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    continue
                entry = OffsetEntry(p.committed_offset, p.committed_leader_epoch, metadata, now_ms)
                try:
                    # Written when the transaction commits: it must be encodable then.
                    self._offset_record(gid, t.name, p.partition_index, entry)
                except (struct.error, ValueError):
                    return respond(ErrorCode.UNKNOWN)
                held[(t.name, p.partition_index)] = entry
                codes[key] = ErrorCode.NO_ERROR
        if held:
            if simple is not None:
                self.classic.groups[gid] = simple
            self.pending_txn_offsets.setdefault(gid, {}).setdefault(req.producer_id, {}).update(
                held
            )
        return respond()

    def end_transaction(self, producer_id: int, committed: bool, now_ms: int) -> Result:
        """The transaction of ``producer_id`` ended: write its offsets if it committed.

        Stands in for the transaction markers Kafka's transaction coordinator writes.
        """
        out = Result()
        for gid in list(self.pending_txn_offsets):
            by_producer = self.pending_txn_offsets[gid]
            parts = by_producer.pop(producer_id, None)
            if not by_producer:
                del self.pending_txn_offsets[gid]
            if parts is None or not committed:
                continue
            self._ensure_group(gid)
            for (topic, partition), entry in parts.items():
                self._store_offset(out, gid, topic, partition, entry)
        return out

    # ------------------------------------------------------------ fetch

    def offset_fetch(self, ctx: RequestContext, req: OffsetFetchRequest, now_ms: int) -> Result:
        out = Result()
        v = ctx.api_version
        if v >= 8:
            groups = []
            for g in req.groups:
                err, fetched = self._fetch_group_topics(
                    v, g.group_id, g.member_id, g.member_epoch, g.topics, req.require_stable
                )
                groups.append(
                    OffsetFetchResponseGroup(
                        group_id=g.group_id,
                        error_code=err,
                        topics=[
                            OffsetFetchResponseTopics(
                                name=name,
                                topic_id=topic_id,
                                partitions=[
                                    OffsetFetchResponsePartitions(
                                        partition_index=p,
                                        committed_offset=o,
                                        committed_leader_epoch=e,
                                        metadata=m,
                                        error_code=c,
                                    )
                                    for p, o, e, m, c in parts
                                ],
                            )
                            for name, topic_id, parts in fetched
                        ],
                    )
                )
            out.replies.append((ctx.reply_to, OffsetFetchResponse(groups=groups)))
            return out

        # v0-v1 cannot express "all topics"; treat an absent list as empty there.
        wanted_single = (
            None
            if req.topics is None and v >= 2
            else [(t.name, ZERO_ID, list(t.partition_indexes)) for t in (req.topics or [])]
        )
        err, fetched = self._fetch_group(
            req.group_id, None, -1, v, wanted_single, req.require_stable
        )
        if err != ErrorCode.NO_ERROR and v < 2:
            # No top-level error code before v2: the error goes on every partition.
            fetched = [
                (name, topic_id, [(p, -1, -1, "", err) for p in parts])
                for name, topic_id, parts in (wanted_single or [])
            ]
        elif err != ErrorCode.NO_ERROR:
            fetched = []
        resp = OffsetFetchResponse(
            error_code=err if v >= 2 else 0,
            topics=[
                OffsetFetchResponseTopic(
                    name=name,
                    partitions=[
                        OffsetFetchResponsePartition(
                            partition_index=p,
                            committed_offset=o,
                            committed_leader_epoch=e,
                            metadata=m,
                            error_code=c,
                        )
                        for p, o, e, m, c in parts
                    ],
                )
                for name, _, parts in fetched
            ],
        )
        out.replies.append((ctx.reply_to, resp))
        return out

    def _fetch_group_topics(
        self,
        v: int,
        group_id: str,
        member_id: str | None,
        member_epoch: int,
        topics: list[OffsetFetchRequestTopics] | None,
        require_stable: bool,
    ) -> tuple[ErrorCode, list[_FetchedTopic]]:
        """One group of a v8+ fetch, with v10's topic ids (Kafka's KafkaApis part)."""
        if v < 10:
            wanted = (
                None
                if topics is None
                else [(t.name, ZERO_ID, list(t.partition_indexes)) for t in topics]
            )
            return self._fetch_group(group_id, member_id, member_epoch, v, wanted, require_stable)
        if topics is None:
            err, fetched = self._fetch_group(
                group_id, member_id, member_epoch, v, None, require_stable
            )
            # Answered by id: a topic without one (deleted since) cannot be named on v10.
            by_id = [(name, self._topic_id(name), parts) for name, _, parts in fetched]
            return err, [t for t in by_id if t[1] != ZERO_ID]
        known: list[tuple[str, bytes, list[int]]] = []
        unknown: list[_FetchedTopic] = []
        for t in topics:
            name = self._topic_name(t.topic_id)
            if name is None:
                # Kafka answers these after the coordinator's topics (offset -1, no epoch).
                unknown.append(
                    (
                        "",
                        t.topic_id,
                        [(p, -1, -1, "", ErrorCode.UNKNOWN_TOPIC_ID) for p in t.partition_indexes],
                    )
                )
            else:
                known.append((name, t.topic_id, list(t.partition_indexes)))
        err, fetched = self._fetch_group(
            group_id, member_id, member_epoch, v, known, require_stable
        )
        if err != ErrorCode.NO_ERROR:
            return err, fetched
        return err, fetched + unknown

    def _fetch_group(
        self,
        group_id: str,
        member_id: str | None,
        member_epoch: int,
        api_version: int,
        wanted: list[tuple[str, bytes, list[int]]] | None,
        require_stable: bool,
    ) -> tuple[ErrorCode, list[_FetchedTopic]]:
        """Kafka's fetchOffsets (``wanted``: (name, id to echo, partitions)) or, when
        ``wanted`` is None, fetchAllOffsets (topics answered with ZERO_ID)."""
        # An empty group id is served (Kafka keeps that for backward compatibility).
        err = self.partitions.availability_error(group_id)
        if err is not None:
            return err, []
        group = self.find_group(group_id)
        if group is not None:
            err = group.validate_offset_fetch(member_id, member_epoch, api_version)
            if err is ErrorCode.GROUP_ID_NOT_FOUND:
                group = None  # answered as a group that does not exist
            elif err is not None:
                return err, []
        offsets = {} if group is None else self.offsets.get(group_id, {})

        def one(topic: str, partition: int) -> _Fetched | None:
            if require_stable and self._has_pending_txn(group_id, (topic, partition)):
                return (partition, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
            entry = offsets.get((topic, partition))
            if entry is None:
                return None
            return (partition, entry.offset, entry.leader_epoch, entry.metadata, 0)

        result: list[_FetchedTopic] = []
        if wanted is None:
            by_topic: dict[str, list[_Fetched]] = {}
            for topic, partition in sorted(offsets):
                got = one(topic, partition)
                if got is not None:
                    by_topic.setdefault(topic, []).append(got)
            result = [(name, ZERO_ID, parts) for name, parts in by_topic.items()]
        else:
            for topic, topic_id, partitions in wanted:
                parts: list[_Fetched] = []
                for partition in partitions:
                    got = one(topic, partition)
                    parts.append(got if got is not None else (partition, -1, -1, "", 0))
                result.append((topic, topic_id, parts))
        return ErrorCode.NO_ERROR, result

    # ------------------------------------------------------------ delete

    def offset_delete(self, ctx: RequestContext, req: OffsetDeleteRequest, now_ms: int) -> Result:
        out = Result()

        def whole(code: ErrorCode) -> Result:
            out.replies.append((ctx.reply_to, OffsetDeleteResponse(error_code=code)))
            return out

        # Unknown topics and partitions are refused first, as Kafka's KafkaApis does; the
        # coordinator is asked even when nothing is left, and its error replaces them.
        unknown = {
            (t.name, p.partition_index)
            for t in req.topics
            for p in t.partitions
            if self._unknown_partition(t.name, p.partition_index)
        }
        err = self.partitions.precheck(req.group_id)
        if err is not None:
            return whole(err)
        gid = req.group_id
        group = self.find_group(gid)
        if group is None:
            return whole(ErrorCode.GROUP_ID_NOT_FOUND)
        err = group.validate_offset_delete()
        if err is not None:
            return whole(err)

        # In the order of Kafka's OffsetDeleteResponse.Builder: the refused partitions first,
        # then the coordinator's answer merged by topic name.
        topics: list[OffsetDeleteResponseTopic] = []
        by_name: dict[str, OffsetDeleteResponseTopic] = {}
        for refused in (True, False):
            for t in req.topics:
                subscribed = group.is_subscribed_to(t.name)
                for p in t.partitions:
                    if ((t.name, p.partition_index) in unknown) is not refused:
                        continue
                    if refused:
                        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif subscribed:
                        code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                    else:
                        code = ErrorCode.NO_ERROR
                        self._delete_offset(out, gid, t.name, p.partition_index)
                        self._drop_pending_txn(gid, (t.name, p.partition_index))
                    topic = by_name.get(t.name)
                    if topic is None:
                        topic = by_name[t.name] = OffsetDeleteResponseTopic(name=t.name)
                        topics.append(topic)
                    topic.partitions.append(
                        OffsetDeleteResponsePartition(
                            partition_index=p.partition_index, error_code=code
                        )
                    )
        out.replies.append((ctx.reply_to, OffsetDeleteResponse(error_code=0, topics=topics)))
        return out

    def _drop_pending_txn(self, group_id: str, tp: tuple[str, int] | None = None) -> None:
        by_producer = self.pending_txn_offsets.get(group_id)
        if by_producer is None:
            return
        if tp is None:
            del self.pending_txn_offsets[group_id]
            return
        for pid in list(by_producer):
            by_producer[pid].pop(tp, None)
            if not by_producer[pid]:
                del by_producer[pid]
        if not by_producer:
            del self.pending_txn_offsets[group_id]

    def topic_deleted(self, topic: str, now_ms: int) -> Result:
        """Tombstone every group's offsets of a deleted topic (Kafka's onPartitionsDeleted)."""
        out = Result()
        for gid in list(self.offsets):
            if self.partitions.availability_error(gid) is not None:
                continue
            for t, p in [tp for tp in self.offsets[gid] if tp[0] == topic]:
                self._delete_offset(out, gid, t, p)
        for gid in list(self.pending_txn_offsets):
            for pid, parts in list(self.pending_txn_offsets[gid].items()):
                for tp in [tp for tp in parts if tp[0] == topic]:
                    del parts[tp]
                if not parts:
                    del self.pending_txn_offsets[gid][pid]
            if not self.pending_txn_offsets[gid]:
                del self.pending_txn_offsets[gid]
        if out.records:
            out.events.append(TopicOffsetsDeleted(topic, len(out.records)))
        return out

    # ------------------------------------------------------------ retention

    def cleanup_expired_offsets(self, out: Result, group_id: str, now_ms: int) -> bool:
        """Tombstone expired offsets; True if the group has no offsets left at all."""
        offsets = self.offsets.get(group_id)
        if offsets is None:
            return not self._has_pending_txn(group_id)
        group = self.find_group(group_id)
        if group is None:
            return False  # offsets are replayed with their group: nothing to judge them by
        base = group.offset_expiration_base()
        if base is None:
            return False
        retention = self.config.offsets_retention_ms
        all_expired = True
        for (topic, partition), entry in list(offsets.items()):
            if group.is_subscribed_to(topic) or self._has_pending_txn(group_id, (topic, partition)):
                all_expired = False
                continue
            if entry.expire_timestamp_ms is not None:
                expired = now_ms >= entry.expire_timestamp_ms
            else:
                expired = now_ms - base(entry.commit_timestamp_ms) >= retention
            if expired:
                self._delete_offset(out, group_id, topic, partition)
            else:
                all_expired = False
        return all_expired and not self._has_pending_txn(group_id)

    def delete_all_offsets(self, out: Result, group_id: str) -> None:
        """Tombstone every offset of a group being deleted, and drop its pending ones."""
        for topic, partition in list(self.offsets.get(group_id, {})):
            self._delete_offset(out, group_id, topic, partition)
        self._drop_pending_txn(group_id)

    # ------------------------------------------------------------ replay

    def replay(self, k: OffsetCommitKey, value: bytes | None) -> None:
        """Apply an OffsetCommit record: set one offset, or (tombstone) remove it."""
        tp = (k.topic, k.partition)
        if value is None:
            offsets = self.offsets.get(k.group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self.offsets[k.group]
            return
        v = decode_offset_commit_value(value)
        self._ensure_group(k.group)
        self.offsets.setdefault(k.group, {})[tp] = OffsetEntry(
            offset=v.offset,
            leader_epoch=v.leader_epoch,
            metadata=v.metadata,
            commit_timestamp_ms=v.commit_timestamp,
            expire_timestamp_ms=None if v.expire_timestamp == -1 else v.expire_timestamp,
        )

    def forget(self, group_id: str) -> None:
        """Drop a group's offsets from memory (its partition is no longer ours)."""
        self.offsets.pop(group_id, None)
        self.pending_txn_offsets.pop(group_id, None)
