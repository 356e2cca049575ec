"""The offset APIs at Kafka 4.1's versions: topic ids (v10), member epochs, DescribeGroups v6.

How this works: each test drives a real ``GroupShard`` with the fake-clock ``GroupContext``. Topic
ids are resolved through a ``StaticTopics`` image handed to the offsets manager; member-epoch
rules are checked through a tiny consumer group (``EpochGroup``) that implements the
``OffsetGroup`` protocol the way Kafka's ConsumerGroup does, found by the manager's
``find_group`` lookup next to the classic groups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from support.group_context import GroupContext, end_txn, offset_delete, subscription

from coordinator.apis import SUPPORTED
from coordinator.group import ClassicGroupState, GroupConfig, Result
from coordinator.group.classic import describe as classic_describe
from coordinator.group.offsets import OffsetGroup
from coordinator.group.topics import StaticTopics
from protocol.errors import ErrorCode
from protocol.messages import describe_groups, offset_commit, offset_fetch, txn_offset_commit
from protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
)
from protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)
from storage.records import OffsetCommitKey, decode_key

ZERO = bytes(16)
UNKNOWN_ID = b"\x42" * 16


def roundtrip(module: Any, response: Any, version: int) -> Any:
    """``response`` encoded at ``version`` and decoded back: what reaches the client."""
    buf = bytearray()
    module.RESPONSE_ENCODERS[version](response, buf)
    decoded, _ = module.RESPONSE_DECODERS[version](bytes(buf), 0)
    return decoded


def with_topics(h: GroupContext, **partitions: int) -> StaticTopics:
    image = StaticTopics()
    for name, n in partitions.items():
        image.add(name, n)
    h.shard.offset_manager.topics = image
    return image


def tid(image: StaticTopics, name: str) -> bytes:
    t = image.topic(name)
    assert t is not None
    return t.topic_id


# ------------------------------------------------------------------ requests


def commit_by_id(
    h: GroupContext,
    group: str,
    offsets: dict[bytes, dict[int, int]],
    *,
    member_id: str = "",
    epoch: int = -1,
    version: int = 10,
) -> OffsetCommitResponse:
    ctx = h.ctx(version)
    req = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=epoch,
        member_id=member_id,
        topics=[
            OffsetCommitRequestTopic(
                topic_id=topic_id,
                partitions=[OffsetCommitRequestPartition(p, o) for p, o in parts.items()],
            )
            for topic_id, parts in offsets.items()
        ],
    )
    h.apply(h.shard.offset_commit(ctx, req, h.now))
    resp = h.reply(ctx.reply_to)
    assert isinstance(resp, OffsetCommitResponse)
    return resp


def commit_by_name(
    h: GroupContext,
    group: str,
    offsets: dict[str, dict[int, int]],
    *,
    member_id: str = "",
    epoch: int = -1,
    version: int = 9,
) -> dict[tuple[str, int], int]:
    ctx = h.ctx(version)
    req = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=epoch,
        member_id=member_id,
        topics=[
            OffsetCommitRequestTopic(
                name=name, partitions=[OffsetCommitRequestPartition(p, o) for p, o in ps.items()]
            )
            for name, ps in offsets.items()
        ],
    )
    h.apply(h.shard.offset_commit(ctx, req, h.now))
    resp = h.reply(ctx.reply_to)
    assert isinstance(resp, OffsetCommitResponse)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def codes_by_id(resp: OffsetCommitResponse) -> dict[tuple[bytes, int], int]:
    return {
        (t.topic_id, p.partition_index): p.error_code for t in resp.topics for p in t.partitions
    }


def fetch_group(
    h: GroupContext,
    group: str,
    topics: list[OffsetFetchRequestTopics] | None,
    *,
    member_id: str | None = None,
    epoch: int = -1,
    version: int = 10,
    require_stable: bool = False,
) -> OffsetFetchResponseGroup:
    ctx = h.ctx(version)
    req = OffsetFetchRequest(
        groups=[
            OffsetFetchRequestGroup(
                group_id=group, member_id=member_id, member_epoch=epoch, topics=topics
            )
        ],
        require_stable=require_stable,
    )
    h.apply(h.shard.offset_fetch(ctx, req, h.now))
    resp = h.reply(ctx.reply_to)
    assert isinstance(resp, OffsetFetchResponse)
    (g,) = resp.groups
    return g


def fetched(g: OffsetFetchResponseGroup) -> list[tuple[bytes, str, int, int, int]]:
    """(topic id, name, partition, offset, error) of every partition, in answer order."""
    return [
        (t.topic_id, t.name, p.partition_index, p.committed_offset, p.error_code)
        for t in g.topics
        for p in t.partitions
    ]


def txn_commit_member(
    h: GroupContext,
    group: str,
    member_id: str,
    generation: int,
    offsets: dict[tuple[str, int], int],
) -> TxnOffsetCommitResponse:
    ctx = h.ctx(5)
    req = TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id=group,
        producer_id=7,
        producer_epoch=0,
        generation_id=generation,
        member_id=member_id,
        topics=[
            TxnOffsetCommitRequestTopic(t, [TxnOffsetCommitRequestPartition(p, o)])
            for (t, p), o in offsets.items()
        ],
    )
    h.apply(h.shard.txn_offset_commit(ctx, req, h.now))
    r = h.reply(ctx.reply_to)
    assert isinstance(r, TxnOffsetCommitResponse)
    return r


# ------------------------------------------------------------------ a consumer group


@dataclass
class EpochGroup:
    """A consumer group as the offsets manager sees it (Kafka's ConsumerGroup rules)."""

    group_id: str
    members: dict[str, int] = field(default_factory=dict)  # member id -> member epoch
    classic_members: set[str] = field(default_factory=set)  # members on the classic protocol
    subscribed: set[str] = field(default_factory=set)

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
        # Exact epochs only: the assignment epochs of KIP-1251 (``partitions``) are the
        # real consumer group's (tests/group/consumer/test_cg_kafka44.py).
        if generation_or_epoch < 0 and not self.members:
            return None
        if transactional and generation_or_epoch == -1 and member_id == "" and instance_id is None:
            return None
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        classic = member_id in self.classic_members
        if not transactional and not classic and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        return self._epoch(member_id, generation_or_epoch)

    def validate_offset_fetch(
        self, member_id: str | None, member_epoch: int, api_version: int, /
    ) -> ErrorCode | None:
        if member_id is None and member_epoch < 0:
            return None
        if member_id is None or member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return self._epoch(member_id, member_epoch)

    def _epoch(self, member_id: str, received: int) -> ErrorCode | None:
        if received == self.members[member_id]:
            return None
        if member_id in self.classic_members:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.STALE_MEMBER_EPOCH

    def validate_offset_delete(self) -> ErrorCode | None:
        return None

    def is_subscribed_to(self, topic: str, /) -> bool:
        return topic in self.subscribed

    def offset_expiration_base(self) -> Callable[[int], int] | None:
        return lambda commit_ms: commit_ms  # whatever the state

    def is_empty(self) -> bool:
        return not self.members


def with_consumer_group(h: GroupContext, group: EpochGroup) -> EpochGroup:
    """Make ``group`` findable by the offsets manager, next to the classic groups."""
    checked: OffsetGroup = group  # mypy: the fake satisfies the contract
    classic = h.shard.classic.groups
    others: dict[str, OffsetGroup] = {group.group_id: checked}

    def find(group_id: str) -> OffsetGroup | None:
        found = others.get(group_id)
        return found if found is not None else classic.get(group_id)

    h.shard.offset_manager.find_group = find
    return group


# ------------------------------------------------------------------ versions


def test_kafka_4_1_versions_are_advertised_and_decodable() -> None:
    # From Kafka 3.9's first version: OffsetCommit v0-1 and OffsetFetch v0 (KIP-896 cut them).
    assert SUPPORTED[offset_commit.API_KEY] == (0, 10)
    assert SUPPORTED[offset_fetch.API_KEY] == (0, 10)
    assert SUPPORTED[txn_offset_commit.API_KEY] == (0, 5)
    assert SUPPORTED[describe_groups.API_KEY] == (0, 6)
    for module in (offset_commit, offset_fetch, txn_offset_commit, describe_groups):
        lo, hi = SUPPORTED[module.API_KEY]
        assert lo >= module.MIN_VERSION and hi <= module.MAX_VERSION


# ------------------------------------------------------------------ OffsetCommit v10


def test_v10_commit_by_topic_id_is_stored_by_name_and_echoes_the_id() -> None:
    h = GroupContext()
    image = with_topics(h, orders=3)
    orders = tid(image, "orders")
    resp = commit_by_id(h, "g", {orders: {0: 10, 2: 30}})
    assert [(t.topic_id, t.name) for t in resp.topics] == [(orders, "orders")]
    assert codes_by_id(resp) == {(orders, 0): 0, (orders, 2): 0}
    # The record names the topic: Kafka's OffsetCommitKey has no id.
    keys = [decode_key(k) for _, k, _ in h.records]
    assert all(isinstance(k, OffsetCommitKey) and k.topic == "orders" for k in keys)
    assert len(keys) == 2
    # Fetched by name on an older version, the same offsets.
    assert h.committed("g", "orders", 2) == 30
    h.assert_replay_equivalent()
    # The v10 answer carries the id on the wire, not the name.
    back = roundtrip(offset_commit, resp, 10)
    assert back.topics[0].topic_id == orders and back.topics[0].name == ""


def test_v10_unknown_topic_id_is_unknown_topic_id_per_partition_and_writes_nothing() -> None:
    h = GroupContext()
    with_topics(h, orders=3)
    resp = commit_by_id(h, "g", {UNKNOWN_ID: {0: 1, 1: 2}, ZERO: {0: 3}})
    assert codes_by_id(resp) == {
        (UNKNOWN_ID, 0): ErrorCode.UNKNOWN_TOPIC_ID,
        (UNKNOWN_ID, 1): ErrorCode.UNKNOWN_TOPIC_ID,
        (ZERO, 0): ErrorCode.UNKNOWN_TOPIC_ID,
    }
    # Two unknown ids share the empty name; each keeps its own id and answer.
    assert [t.topic_id for t in resp.topics] == [UNKNOWN_ID, ZERO]
    assert h.records == [] and "g" not in h.shard.groups


def test_v10_mixed_request_commits_known_topics_and_keeps_unknown_codes() -> None:
    h = GroupContext()
    image = with_topics(h, orders=2)
    orders = tid(image, "orders")
    resp = commit_by_id(h, "g", {UNKNOWN_ID: {0: 1}, orders: {0: 5, 7: 6}})
    assert codes_by_id(resp) == {
        (UNKNOWN_ID, 0): ErrorCode.UNKNOWN_TOPIC_ID,
        (orders, 0): 0,
        (orders, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,  # the topic has 2 partitions
    }
    assert h.committed("g", "orders", 0) == 5


def test_v10_request_level_error_does_not_overwrite_unknown_topic_id() -> None:
    h = GroupContext()
    image = with_topics(h, orders=1)
    orders = tid(image, "orders")
    # A generation for a group that does not exist: GROUP_ID_NOT_FOUND (v9+) for the rest.
    resp = commit_by_id(h, "nope", {UNKNOWN_ID: {0: 1}, orders: {0: 1}}, member_id="m", epoch=3)
    assert codes_by_id(resp) == {
        (UNKNOWN_ID, 0): ErrorCode.UNKNOWN_TOPIC_ID,
        (orders, 0): ErrorCode.GROUP_ID_NOT_FOUND,
    }


def test_v10_topic_ids_without_an_image_are_unknown() -> None:
    h = GroupContext()  # no TopicsImage: nothing can resolve an id
    resp = commit_by_id(h, "g", {b"\x01" * 16: {0: 1}})
    assert codes_by_id(resp) == {(b"\x01" * 16, 0): ErrorCode.UNKNOWN_TOPIC_ID}


def test_partition_counts_come_from_the_image_when_given() -> None:
    h = GroupContext()
    with_topics(h, orders=2)
    assert commit_by_name(h, "g", {"orders": {1: 1, 2: 2}, "ghost": {0: 1}}) == {
        ("orders", 1): 0,
        ("orders", 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("ghost", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_image_falls_back_to_topic_partitions_for_names_it_does_not_know() -> None:
    # The offsets topic is in the catalog lookup but not in a topics image.
    h = GroupContext(topic_partitions=lambda t: 50 if t == "__consumer_offsets" else None)
    with_topics(h, orders=1)
    assert commit_by_name(h, "g", {"__consumer_offsets": {3: 1}, "orders": {0: 1}}) == {
        ("__consumer_offsets", 3): 0,
        ("orders", 0): 0,
    }


# ------------------------------------------------------------------ OffsetFetch v10


def test_v10_fetch_by_id_answers_by_id_with_unknown_ids_last() -> None:
    h = GroupContext()
    image = with_topics(h, orders=2, audit=1)
    orders, audit = tid(image, "orders"), tid(image, "audit")
    commit_by_id(h, "g", {orders: {0: 10, 1: 11}, audit: {0: 20}})
    g = fetch_group(
        h,
        "g",
        [
            OffsetFetchRequestTopics(topic_id=UNKNOWN_ID, partition_indexes=[0]),
            OffsetFetchRequestTopics(topic_id=orders, partition_indexes=[1, 0]),
            OffsetFetchRequestTopics(topic_id=audit, partition_indexes=[0, 5]),
        ],
    )
    assert g.error_code == 0
    assert fetched(g) == [
        (orders, "orders", 1, 11, 0),
        (orders, "orders", 0, 10, 0),
        (audit, "audit", 0, 20, 0),
        (audit, "audit", 5, -1, 0),  # nothing committed: -1, no error
        (UNKNOWN_ID, "", 0, -1, ErrorCode.UNKNOWN_TOPIC_ID),  # Kafka appends these last
    ]
    # On the wire v10 carries ids only.
    back = roundtrip(offset_fetch, OffsetFetchResponse(groups=[g]), 10)
    assert [t.topic_id for t in back.groups[0].topics] == [orders, audit, UNKNOWN_ID]


def test_v10_fetch_of_all_topics_answers_by_id_and_leaves_out_topics_without_one() -> None:
    h = GroupContext()
    image = with_topics(h, orders=1, gone=1)
    orders = tid(image, "orders")
    commit_by_id(h, "g", {orders: {0: 1}, tid(image, "gone"): {0: 2}})
    image.remove("gone")  # deleted from the catalog; its offsets are still there
    g = fetch_group(h, "g", None)
    assert fetched(g) == [(orders, "orders", 0, 1, 0)]
    # v9 names topics: both are answered.
    g9 = fetch_group(h, "g", None, version=9)
    assert [(t.name, t.topic_id) for t in g9.topics] == [("gone", ZERO), ("orders", ZERO)]


def test_v10_fetch_unknown_group_answers_minus_one_and_unknown_ids() -> None:
    h = GroupContext()
    image = with_topics(h, orders=1)
    orders = tid(image, "orders")
    g = fetch_group(
        h,
        "nobody",
        [
            OffsetFetchRequestTopics(topic_id=orders, partition_indexes=[0]),
            OffsetFetchRequestTopics(topic_id=UNKNOWN_ID, partition_indexes=[0]),
        ],
    )
    assert g.error_code == 0
    assert fetched(g) == [
        (orders, "orders", 0, -1, 0),
        (UNKNOWN_ID, "", 0, -1, ErrorCode.UNKNOWN_TOPIC_ID),
    ]


def test_dead_classic_group_is_fetched_as_absent() -> None:
    h = GroupContext()
    commit_by_name(h, "g", {"t": {0: 5}})
    h.shard.groups["g"].state = ClassicGroupState.DEAD  # as while being deleted
    g = fetch_group(h, "g", [OffsetFetchRequestTopics(name="t", partition_indexes=[0])], version=9)
    assert g.error_code == 0 and fetched(g) == [(ZERO, "t", 0, -1, 0)]
    assert fetch_group(h, "g", None, version=9).topics == []


# ------------------------------------------------------------------ member epochs


def test_consumer_group_commit_checks_member_and_epoch() -> None:
    h = GroupContext()
    with_consumer_group(h, EpochGroup("cg", members={"m1": 5}))
    t0 = {"t": {0: 1}}
    assert commit_by_name(h, "cg", t0, member_id="m1", epoch=4) == {
        ("t", 0): ErrorCode.STALE_MEMBER_EPOCH
    }
    assert commit_by_name(h, "cg", t0, member_id="ghost", epoch=5) == {
        ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID
    }
    # Epoch -1 without a member while members exist: UNKNOWN_MEMBER_ID, as Kafka.
    assert commit_by_name(h, "cg", t0) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    # A consumer-protocol member must use v9+.
    assert commit_by_name(h, "cg", t0, member_id="m1", epoch=5, version=8) == {
        ("t", 0): ErrorCode.UNSUPPORTED_VERSION
    }
    assert h.records == []
    assert commit_by_name(h, "cg", {"t": {0: 42}}, member_id="m1", epoch=5) == {("t", 0): 0}
    assert h.shard.offsets["cg"][("t", 0)].offset == 42
    # Found as a consumer group: no classic group was made for it, no session re-armed.
    assert "cg" not in h.shard.groups
    assert not any("cg" in key for key in h.shard.pending_timers())


def test_consumer_group_classic_member_stale_epoch_is_illegal_generation() -> None:
    h = GroupContext()
    with_consumer_group(h, EpochGroup("cg", members={"old": 3}, classic_members={"old"}))
    # Classic-protocol members commit with any version, and are told ILLEGAL_GENERATION.
    assert commit_by_name(h, "cg", {"t": {0: 1}}, member_id="old", epoch=2, version=8) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert commit_by_name(h, "cg", {"t": {0: 1}}, member_id="old", epoch=3, version=8) == {
        ("t", 0): 0
    }


def test_consumer_group_v10_commit_by_id_with_epoch() -> None:
    h = GroupContext()
    image = with_topics(h, orders=1)
    orders = tid(image, "orders")
    with_consumer_group(h, EpochGroup("cg", members={"m1": 7}))
    stale = commit_by_id(h, "cg", {orders: {0: 1}, UNKNOWN_ID: {0: 1}}, member_id="m1", epoch=6)
    assert codes_by_id(stale) == {
        (orders, 0): ErrorCode.STALE_MEMBER_EPOCH,
        (UNKNOWN_ID, 0): ErrorCode.UNKNOWN_TOPIC_ID,
    }
    ok = commit_by_id(h, "cg", {orders: {0: 9}}, member_id="m1", epoch=7)
    assert codes_by_id(ok) == {(orders, 0): 0}


def test_empty_consumer_group_accepts_admin_commits() -> None:
    h = GroupContext()
    with_consumer_group(h, EpochGroup("cg"))
    assert commit_by_name(h, "cg", {"t": {0: 3}}) == {("t", 0): 0}
    assert "cg" not in h.shard.groups  # not turned into a simple classic group


def test_txn_commit_stale_member_epoch_is_illegal_generation() -> None:
    h = GroupContext()
    with_consumer_group(h, EpochGroup("cg", members={"m1": 5}))
    stale = txn_commit_member(h, "cg", "m1", 4, {("t", 0): 1})
    assert stale.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
    unknown = txn_commit_member(h, "cg", "ghost", 5, {("t", 0): 1})
    assert unknown.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # No member id, generation -1, no instance id: accepted even with members.
    anonymous = txn_commit_member(h, "cg", "", -1, {("t", 0): 1})
    assert anonymous.topics[0].partitions[0].error_code == 0
    ok = txn_commit_member(h, "cg", "m1", 5, {("t", 1): 1})
    assert ok.topics[0].partitions[0].error_code == 0
    assert set(h.shard.pending_txn_offsets["cg"][7]) == {("t", 0), ("t", 1)}
    # Committed: the records are written under the consumer group, no classic group made.
    end_txn(h, "cg", 7, True)
    assert set(h.shard.offsets["cg"]) == {("t", 0), ("t", 1)} and "cg" not in h.shard.groups


def test_consumer_group_fetch_checks_member_and_epoch() -> None:
    h = GroupContext()
    with_consumer_group(h, EpochGroup("cg", members={"m1": 5}))
    commit_by_name(h, "cg", {"t": {0: 8}}, member_id="m1", epoch=5)
    want = [OffsetFetchRequestTopics(name="t", partition_indexes=[0])]
    stale = fetch_group(h, "cg", want, member_id="m1", epoch=4, version=9)
    assert (stale.error_code, stale.topics) == (ErrorCode.STALE_MEMBER_EPOCH, [])
    ghost = fetch_group(h, "cg", want, member_id="ghost", epoch=5, version=9)
    assert (ghost.error_code, ghost.topics) == (ErrorCode.UNKNOWN_MEMBER_ID, [])
    ok = fetch_group(h, "cg", want, member_id="m1", epoch=5, version=9)
    assert ok.error_code == 0 and fetched(ok) == [(ZERO, "t", 0, 8, 0)]
    # Admin clients (no member id, epoch -1) and older versions are not checked.
    admin = fetch_group(h, "cg", want, version=9)
    assert admin.error_code == 0 and fetched(admin) == [(ZERO, "t", 0, 8, 0)]
    assert h.fetch("cg", {"t": [0]}, version=7).topics[0].partitions[0].committed_offset == 8


def test_v10_fetch_with_a_group_error_answers_no_topics_at_all() -> None:
    h = GroupContext()
    image = with_topics(h, orders=1)
    with_consumer_group(h, EpochGroup("cg", members={"m1": 5}))
    g = fetch_group(
        h,
        "cg",
        [
            OffsetFetchRequestTopics(topic_id=tid(image, "orders"), partition_indexes=[0]),
            OffsetFetchRequestTopics(topic_id=UNKNOWN_ID, partition_indexes=[0]),
        ],
        member_id="m1",
        epoch=1,
    )
    assert (g.error_code, g.topics) == (ErrorCode.STALE_MEMBER_EPOCH, [])


def test_consumer_group_offset_delete_refuses_only_subscribed_topics() -> None:
    h = GroupContext()
    with_consumer_group(h, EpochGroup("cg", members={"m1": 5}, subscribed={"in-use"}))
    commit_by_name(h, "cg", {"in-use": {0: 1}, "old": {0: 2}}, member_id="m1", epoch=5)
    r = offset_delete(h, "cg", {"in-use": [0], "old": [0]})
    # A group with members: no NON_EMPTY_GROUP for a consumer group.
    assert r.error_code == 0
    assert {t.name: t.partitions[0].error_code for t in r.topics} == {
        "in-use": ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
        "old": 0,
    }
    assert set(h.shard.offsets["cg"]) == {("in-use", 0)}


def test_consumer_group_offsets_expire_by_commit_time_whatever_the_state() -> None:
    h = GroupContext(config=GroupConfig(offsets_retention_minutes=1))
    with_consumer_group(h, EpochGroup("cg", members={"m1": 5}, subscribed={"in-use"}))
    commit_by_name(h, "cg", {"in-use": {0: 1}, "old": {0: 2}}, member_id="m1", epoch=5)
    h.advance(30_000)
    commit_by_name(h, "cg", {"recent": {0: 3}}, member_id="m1", epoch=5)
    h.advance(30_000)  # 60 s after the first commits, 30 s after "recent"
    out = Result()
    all_gone = h.shard.offset_manager.cleanup_expired_offsets(out, "cg", h.now)
    h.apply(out)
    assert not all_gone
    # "old" expired although the group has members; "in-use" is subscribed; "recent" is young.
    assert set(h.shard.offsets["cg"]) == {("in-use", 0), ("recent", 0)}
    assert [(decode_key(k), v) for _, k, v in out.records] == [
        (OffsetCommitKey("cg", "old", 0), None)
    ]


def test_offsets_replayed_for_a_consumer_group_make_no_classic_group() -> None:
    h = GroupContext()
    with_consumer_group(h, EpochGroup("cg"))
    commit_by_name(h, "cg", {"t": {0: 4}})
    (_, key, value), *_ = h.records
    k = decode_key(key)
    assert isinstance(k, OffsetCommitKey)
    manager = h.shard.offset_manager
    manager.forget("cg")
    manager.replay(k, value)
    assert manager.offsets["cg"][("t", 0)].offset == 4 and "cg" not in h.shard.groups
    # Without a group of any type the replay makes the "simple" classic group, as Kafka.
    manager.replay(OffsetCommitKey("plain", "t", 0), value)
    assert h.shard.groups["plain"].protocol_type is None


def test_classic_group_satisfies_the_protocol_unchanged() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1, protocols=(("range", subscription("t")),))
    group: OffsetGroup = h.shard.groups["g"]
    assert group.validate_offset_commit(a, None, gen, transactional=False, api_version=8) is None
    assert (
        group.validate_offset_commit(a, None, gen + 1, transactional=False, api_version=10)
        is ErrorCode.ILLEGAL_GENERATION
    )
    assert group.validate_offset_fetch(None, -1, 10) is None
    assert group.validate_offset_delete() is None  # consumer protocol: per-topic refusals
    assert group.is_subscribed_to("t") and not group.is_subscribed_to("u")
    assert not group.is_empty()
    assert group.offset_expiration_base() is not None  # Stable with known subscriptions


# ------------------------------------------------------------------ DescribeGroups v6


def describe(
    h: GroupContext,
    groups: list[str],
    version: int,
    *,
    ops: bool = False,
    non_classic: Callable[[str], bool] | None = None,
) -> DescribeGroupsResponse:
    ctx = h.ctx(version)
    req = DescribeGroupsRequest(groups=groups, include_authorized_operations=ops)
    h.apply(
        classic_describe.describe_groups(h.shard.classic, ctx, req, h.now, non_classic=non_classic)
    )
    resp = h.reply(ctx.reply_to)
    assert isinstance(resp, DescribeGroupsResponse)
    return resp


def test_describe_v6_unknown_group_is_group_id_not_found() -> None:
    h = GroupContext()
    (g,) = describe(h, ["nope"], 6, ops=True).groups
    assert (g.group_id, g.group_state, g.error_code, g.error_message) == (
        "nope",
        "Dead",
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group nope not found.",
    )
    assert g.authorized_operations == -2147483648  # only answers without error carry them
    # Older versions keep the answer they had: Dead, no error.
    (old,) = describe(h, ["nope"], 5, ops=True).groups
    assert (old.group_state, old.error_code) == ("Dead", 0)
    assert old.authorized_operations != -2147483648
    # The message reaches the wire on v6.
    back = roundtrip(describe_groups, DescribeGroupsResponse(groups=[g]), 6)
    assert back.groups[0].error_message == "Group nope not found."


def test_describe_v6_of_a_group_of_another_type() -> None:
    h = GroupContext()
    h.stable_group("classic", 1)
    resp = describe(h, ["cg", "classic"], 6, non_classic=lambda gid: gid == "cg")
    cg, classic = resp.groups
    assert (cg.group_state, cg.error_code, cg.error_message) == (
        "Dead",
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group cg is not a classic group.",
    )
    assert (classic.group_state, classic.error_code) == ("Stable", 0)
    (cg5,) = describe(h, ["cg"], 5, non_classic=lambda gid: gid == "cg").groups
    assert (cg5.group_state, cg5.error_code) == ("Dead", 0)


# ------------------------------------------------------------------ ListGroups v5


def list_groups(h: GroupContext, types: list[str], states: list[str] | None = None) -> list[str]:
    ctx = h.ctx(5)
    req = ListGroupsRequest(states_filter=states or [], types_filter=types)
    h.apply(h.shard.list_groups(ctx, req, h.now))
    resp = h.reply(ctx.reply_to)
    assert isinstance(resp, ListGroupsResponse)
    return sorted(g.group_id for g in resp.groups)


def test_list_groups_type_filter_is_case_insensitive_and_unknown_types_match_nothing() -> None:
    h = GroupContext()
    h.stable_group("a", 1)
    commit_by_name(h, "b", {"t": {0: 1}})
    assert list_groups(h, ["CLASSIC"]) == ["a", "b"]
    assert list_groups(h, ["Classic"], ["STABLE"]) == ["a"]
    assert list_groups(h, ["bogus"]) == []
    assert list_groups(h, ["bogus", "classic"]) == ["a", "b"]


# ------------------------------------------------------------------ before the coordinator


def test_empty_commit_never_reaches_the_group() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1)
    deadlines = h.shard.pending_timers()
    h.advance(1000)
    # No topics: Kafka's KafkaApis answers alone; no validation, no session refresh.
    assert commit_by_name(h, "g", {}, member_id=a, epoch=gen) == {}
    assert commit_by_name(h, "nobody", {}, member_id="m", epoch=1) == {}
    assert h.shard.pending_timers() == deadlines and "nobody" not in h.shard.groups


def test_txn_commit_v0_v1_while_loading_is_coordinator_not_available() -> None:
    h = GroupContext()
    partition = h.shard.partition_of("g")
    h.shard.begin_load(partition)

    def code(version: int) -> int:
        ctx = h.ctx(version)
        req = TxnOffsetCommitRequest(
            transactional_id="tx",
            group_id="g",
            producer_id=1,
            topics=[TxnOffsetCommitRequestTopic("t", [TxnOffsetCommitRequestPartition(0, 1)])],
        )
        h.apply(h.shard.txn_offset_commit(ctx, req, h.now))
        r = h.reply(ctx.reply_to)
        assert isinstance(r, TxnOffsetCommitResponse)
        return r.topics[0].partitions[0].error_code

    assert code(1) == ErrorCode.COORDINATOR_NOT_AVAILABLE  # old producers crash on the other
    assert code(2) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


# ------------------------------------------------------------------ OffsetCommit v0-1, OffsetFetch v0


def _commit_v1(
    h: GroupContext, group: str, timestamp: int, *, generation: int = -1, member: str = ""
) -> int:
    ctx = h.ctx(1)
    part = OffsetCommitRequestPartition(0, 42, commit_timestamp=timestamp)
    req = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        topics=[OffsetCommitRequestTopic(name="t", partitions=[part])],
    )
    h.apply(h.shard.offset_commit(ctx, req, h.now))
    resp = h.reply(ctx.reply_to)
    assert isinstance(resp, OffsetCommitResponse)
    return resp.topics[0].partitions[0].error_code


def test_v1_commit_keeps_the_partitions_commit_timestamp() -> None:
    """Kafka's OffsetAndMetadata.fromRequest: v1's per-partition timestamp, -1 meaning now."""
    h = GroupContext()
    assert _commit_v1(h, "old", 1_500_000_000_000) == ErrorCode.NO_ERROR
    entry = h.shard.offset_manager.offsets["old"][("t", 0)]
    assert (entry.offset, entry.commit_timestamp_ms) == (42, 1_500_000_000_000)
    assert entry.expire_timestamp_ms is None  # v1 has no retention time
    assert _commit_v1(h, "old", -1) == ErrorCode.NO_ERROR
    assert h.shard.offset_manager.offsets["old"][("t", 0)].commit_timestamp_ms == h.now


def test_v0_commit_is_a_memberless_commit_and_v0_fetch_reads_it() -> None:
    """v0 has no generation or member (ZooKeeper offsets in Kafka's day): kgc stores it in the
    coordinator as a generation -1 commit, accepted for a group without members and refused
    (UNKNOWN_MEMBER_ID) for a group with members, as Kafka refuses any member-less commit."""
    h = GroupContext()
    assert h.commit("old", {("t", 0): 7}, version=0) == {("t", 0): ErrorCode.NO_ERROR}
    resp = h.fetch("old", {"t": [0]}, version=0)
    p = resp.topics[0].partitions[0]
    assert (p.committed_offset, p.error_code) == (7, ErrorCode.NO_ERROR)
    assert roundtrip(offset_fetch, resp, 0).topics[0].partitions[0].committed_offset == 7
    h.stable_group("live", 1)
    assert h.commit("live", {("t", 0): 9}, version=0) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
