"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, retention.

How this works
--------------
``OffsetMetadataManager`` (Kafka's OffsetMetadataManager, ``manager.py``) owns the
committed offsets, ``offsets[group][(topic, partition)]``; every change is also emitted as
an OffsetCommit record (or a tombstone) for the offsets log.  Each API is a function of the
manager in its own module -- ``commit.py`` OffsetCommit, ``txn.py`` TxnOffsetCommit and the
end of a transaction, ``fetch.py`` OffsetFetch, ``delete.py`` OffsetDelete -- bound to it by
the shard; the manager imports none of them.  Groups are not its own: it finds them through
one lookup over every group type (``find_group``, by default the classic manager's groups)
and asks each group what only the group knows through the ``OffsetGroup`` protocol
(``group.py``): may this member commit or fetch, may offsets be deleted, which topics it
subscribes to, when its offsets expire.  ``ClassicGroup`` implements it; so does a
consumer group (KIP-848).  Unknown groups committing with generation -1 become "simple"
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

Transactional commits (``txn.py``) are written as one transactional batch of their
producer and held per producer id as pending until the transaction coordinator's marker
(``complete_transaction``, a COMMIT/ABORT control batch) commits or drops them; replay
rebuilds both from the log.  While pending they make ``require_stable`` fetches answer
UNSTABLE_OFFSET_COMMIT and keep the partition from expiring; tombstones (OffsetDelete,
DeleteGroups, a deleted topic) clear them.  A stale member epoch on TxnOffsetCommit
answers ILLEGAL_GENERATION, as Kafka.

Retention (KIP-211), on the shard's ``expire-offsets`` timer:
``cleanup_expired_offsets`` removes a group's expired offsets, counted from
when the group says (``OffsetGroup.offset_expiration_base``: for a classic
group since it became Empty, or since the commit; for a consumer group since
the commit, whatever its state), never those of subscribed topics; offsets
with an explicit expire timestamp use it.  The shard then deletes groups left
empty (``OffsetGroup.is_empty``) without offsets.
"""

from coordinator.group.offsets.group import OffsetGroup
from coordinator.group.offsets.manager import (
    ZERO_ID,
    OffsetEntry,
    OffsetMetadataManager,
    TopicPartition,
)

__all__ = ["ZERO_ID", "OffsetEntry", "OffsetGroup", "OffsetMetadataManager", "TopicPartition"]
