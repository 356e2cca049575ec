"""OffsetGroup: what the offsets manager needs from a group, whatever its type.

How this works: the offsets manager never looks inside a group; it asks the questions of
this protocol (may this member commit or fetch, may offsets be deleted, which topics are
in use, when offsets expire), and ``ClassicGroup`` and ``ConsumerGroup`` each answer them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from protocol.errors import ErrorCode

__all__ = ["OffsetGroup"]


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
