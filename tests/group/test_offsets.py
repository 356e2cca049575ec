"""OffsetCommit / TxnOffsetCommit / OffsetFetch / OffsetDelete and retention."""

from support.group_context import GroupContext, end_txn, offset_delete, subscription, txn_commit

from coordinator.group import ClassicGroupState, GroupConfig
from coordinator.group.events import OffsetsExpired
from protocol.errors import ErrorCode
from protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
)
from storage.records import decode_key, decode_offset_commit_value

T0 = ("t", 0)


def test_simple_commit_without_member_id_creates_empty_group() -> None:
    h = GroupContext()
    assert h.commit("s", {T0: 42, ("t", 1): 7}, metadata="m") == {T0: 0, ("t", 1): 0}
    g = h.shard.groups["s"]
    assert g.state is ClassicGroupState.EMPTY and g.protocol_type is None
    r = h.fetch("s", {"t": [0, 1, 2]})
    assert [
        (p.partition_index, p.committed_offset, p.metadata) for p in r.topics[0].partitions
    ] == [
        (0, 42, "m"),
        (1, 7, "m"),
        (2, -1, ""),
    ]
    # Records: OffsetCommit key v1, value v3 with the commit timestamp.
    _, key, value = h.records[-1]
    k = decode_key(key)
    assert (k.group, k.topic, k.partition, k.version) == ("s", "t", 1, 1)  # type: ignore[union-attr]
    assert value is not None
    v = decode_offset_commit_value(value)
    assert (v.offset, v.metadata, v.version, v.expire_timestamp) == (7, "m", 3, -1)
    h.assert_replay_equivalent()


def test_commit_to_unknown_group_with_generation_is_illegal_generation_or_group_id_not_found() -> (
    None
):
    h = GroupContext()
    assert h.commit("x", {T0: 1}, member_id="m", generation=1, version=8) == {
        T0: ErrorCode.ILLEGAL_GENERATION
    }
    assert h.commit("x", {T0: 1}, member_id="m", generation=1, version=9) == {
        T0: ErrorCode.GROUP_ID_NOT_FOUND
    }
    assert "x" not in h.shard.groups


def test_commit_without_member_id_on_non_empty_group_is_unknown_member_id() -> None:
    h = GroupContext()
    h.stable_group("g", 1)
    assert h.commit("g", {T0: 1}) == {T0: ErrorCode.UNKNOWN_MEMBER_ID}


def test_commit_with_stale_generation_or_unknown_member() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1)
    assert h.commit("g", {T0: 1}, member_id=a, generation=gen - 1) == {
        T0: ErrorCode.ILLEGAL_GENERATION
    }
    assert h.commit("g", {T0: 1}, member_id="ghost", generation=gen) == {
        T0: ErrorCode.UNKNOWN_MEMBER_ID
    }
    assert h.commit("g", {T0: 1}, member_id=a, generation=gen) == {T0: 0}


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    h = GroupContext()
    a, ha = h.join_new("g")
    h.advance_until_answered([ha])
    assert h.state("g") is ClassicGroupState.COMPLETING_REBALANCE
    assert h.commit("g", {T0: 1}, member_id=a, generation=1) == {
        T0: ErrorCode.REBALANCE_IN_PROGRESS
    }


def test_commit_during_preparing_rebalance_with_previous_generation_is_accepted() -> None:
    h = GroupContext()
    (a, b), gen = h.stable_group("g", 2)
    h.join("g", a)
    assert h.state("g") is ClassicGroupState.PREPARING_REBALANCE
    assert h.commit("g", {T0: 9}, member_id=b, generation=gen) == {T0: 0}


def test_offset_metadata_too_large_is_per_partition() -> None:
    h = GroupContext(GroupConfig(offset_metadata_max_bytes=10))
    from protocol.messages.offset_commit import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
        OffsetCommitResponse,
    )

    ctx = h.ctx(8)
    req = OffsetCommitRequest(
        group_id="s",
        topics=[
            OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OffsetCommitRequestPartition(0, 5, committed_metadata="x" * 11),
                    OffsetCommitRequestPartition(1, 6, committed_metadata="x" * 10),
                    OffsetCommitRequestPartition(2, 7, committed_metadata=None),
                ],
            )
        ],
    )
    h.apply(h.shard.offset_commit(ctx, req, h.now))
    r = h.reply(ctx.reply_to)
    assert isinstance(r, OffsetCommitResponse)
    assert [p.error_code for p in r.topics[0].partitions] == [
        ErrorCode.OFFSET_METADATA_TOO_LARGE,
        0,
        0,
    ]
    assert h.committed("s", "t", 0) == -1 and h.committed("s", "t", 1) == 6


def test_retention_time_writes_value_v1_with_expire_timestamp() -> None:
    h = GroupContext()
    h.advance(1000)
    h.commit("s", {T0: 3}, retention=5000, version=2)
    value = h.records[-1][2]
    assert value is not None
    v = decode_offset_commit_value(value)
    assert v.version == 1 and v.expire_timestamp == 6000 and v.commit_timestamp == 1000
    # v5+ has no retention field: ignored.
    h.commit("s", {T0: 4}, retention=5000, version=5)
    value = h.records[-1][2]
    assert value is not None and decode_offset_commit_value(value).version == 3
    h.assert_replay_equivalent()


def test_fetch_null_topics_returns_all_committed_offsets() -> None:
    h = GroupContext()
    h.commit("s", {("b", 1): 11, ("a", 0): 10, ("b", 0): 12})
    r = h.fetch("s", None)
    got = {(t.name, p.partition_index): p.committed_offset for t in r.topics for p in t.partitions}
    assert got == {("a", 0): 10, ("b", 0): 12, ("b", 1): 11}
    assert h.fetch("unknown", None).topics == []
    assert h.fetch("unknown", {"t": [0]}).topics[0].partitions[0].committed_offset == -1


def test_fetch_v8_multiple_groups() -> None:
    h = GroupContext()
    h.commit("g1", {T0: 1})
    h.commit("g2", {T0: 2})
    ctx = h.ctx(8)
    req = OffsetFetchRequest(
        groups=[
            OffsetFetchRequestGroup(
                "g1", topics=[OffsetFetchRequestTopics("t", partition_indexes=[0])]
            ),
            OffsetFetchRequestGroup("g2", topics=None),
            OffsetFetchRequestGroup(
                "g3", topics=[OffsetFetchRequestTopics("t", partition_indexes=[0])]
            ),
        ]
    )
    h.apply(h.shard.offset_fetch(ctx, req, h.now))
    r = h.reply(ctx.reply_to)
    assert isinstance(r, OffsetFetchResponse)
    got = [
        (
            g.group_id,
            g.error_code,
            [(t.name, [p.committed_offset for p in t.partitions]) for t in g.topics],
        )
        for g in r.groups
    ]
    assert got == [("g1", 0, [("t", [1])]), ("g2", 0, [("t", [2])]), ("g3", 0, [("t", [-1])])]


def test_pending_transactional_offsets_unstable_until_committed() -> None:
    h = GroupContext()
    h.commit("g", {T0: 1})
    r = txn_commit(h, "g", 77, {T0: 5})
    assert r.topics[0].partitions[0].error_code == 0
    assert h.committed("g", "t", 0) == 1  # not visible before the transaction commits
    stable = h.fetch("g", {"t": [0]}, require_stable=True)
    assert stable.topics[0].partitions[0].error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert stable.topics[0].partitions[0].committed_offset == -1
    end_txn(h, "g", 77, True)
    assert h.committed("g", "t", 0) == 5
    assert h.fetch("g", {"t": [0]}, require_stable=True).topics[0].partitions[0].error_code == 0
    txn_commit(h, "g", 78, {T0: 9})
    end_txn(h, "g", 78, False)
    assert h.committed("g", "t", 0) == 5
    h.assert_replay_equivalent()


def test_expired_offsets_of_empty_group_are_cleaned_up_and_group_deleted() -> None:
    cfg = GroupConfig(offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000)
    h = GroupContext(cfg)
    (a,), gen = h.stable_group("g", 1)
    h.commit("g", {T0: 3}, member_id=a, generation=gen)
    for _ in range(24):  # committed long ago, but the group is not Empty: kept
        h.advance(5000)
        h.heartbeat("g", a, gen)
    assert h.committed("g", "t", 0) == 3
    h.leave("g", (a, None))
    became_empty = h.now
    assert h.state("g") is ClassicGroupState.EMPTY
    h.advance(50_000)
    assert h.committed("g", "t", 0) == 3  # retention counts from when it became Empty
    h.advance(20_000)
    assert h.now - became_empty >= 60_000
    assert "g" not in h.shard.groups
    assert h.committed("g", "t", 0) == -1
    assert h.records[-1][2] is None and h.records[-2][2] is None  # offset then group tombstone
    assert "g" not in h.mirror.groups and "g" not in h.mirror.offsets
    assert [e.groups_deleted for e in h.events if isinstance(e, OffsetsExpired)] == [("g",)]


def test_simple_group_offsets_expire_after_commit_timestamp() -> None:
    cfg = GroupConfig(offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000)
    h = GroupContext(cfg)
    h.commit("s", {T0: 1})
    h.advance(30_000)
    h.commit("s", {("t", 1): 2})
    h.advance(35_000)  # t=65000: partition 0 expired, partition 1 not yet
    assert h.committed("s", "t", 0) == -1 and h.committed("s", "t", 1) == 2
    h.advance(30_000)
    assert "s" not in h.shard.groups
    h.assert_replay_equivalent()


def test_explicit_expire_timestamp_is_honoured() -> None:
    cfg = GroupConfig(offsets_retention_check_interval_ms=10_000)
    h = GroupContext(cfg)
    h.commit("s", {T0: 1}, retention=15_000, version=2)
    h.advance(10_000)
    assert h.committed("s", "t", 0) == 1
    h.advance(10_000)
    assert h.committed("s", "t", 0) == -1


def test_stable_consumer_group_expires_offsets_of_unsubscribed_topics_only() -> None:
    cfg = GroupConfig(offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000)
    h = GroupContext(cfg)
    (a,), gen = h.stable_group("g", 1, session=30000)
    h.commit("g", {T0: 1, ("old", 0): 2}, member_id=a, generation=gen)
    for _ in range(10):
        h.advance(10_000)
        h.heartbeat("g", a, gen)
    assert h.committed("g", "t", 0) == 1
    assert h.committed("g", "old", 0) == -1


def test_offset_delete_on_subscribed_topic_is_rejected() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1, protocols=(("range", subscription("t")),))
    h.commit("g", {T0: 1, ("u", 0): 2}, member_id=a, generation=gen)
    r = offset_delete(h, "g", {"t": [0], "u": [0]})
    assert r.error_code == 0
    codes = {t.name: [p.error_code for p in t.partitions] for t in r.topics}
    assert codes == {"t": [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC], "u": [0]}
    assert h.committed("g", "t", 0) == 1 and h.committed("g", "u", 0) == -1
    h.assert_replay_equivalent()


def test_offset_delete_with_unparseable_subscription_assumes_subscribed() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1, protocols=(("range", b"\x00\x00garbage"),))
    h.commit("g", {("u", 0): 2}, member_id=a, generation=gen)
    r = offset_delete(h, "g", {"u": [0]})
    assert r.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


def test_offset_delete_on_non_consumer_group_is_non_empty_group() -> None:
    h = GroupContext()
    h.stable_group("g", 1, protocol_type="connect")
    assert offset_delete(h, "g", {"t": [0]}).error_code == ErrorCode.NON_EMPTY_GROUP
    assert offset_delete(h, "nope", {"t": [0]}).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_offset_delete_on_empty_group_removes_offsets() -> None:
    h = GroupContext()
    h.commit("s", {T0: 1, ("t", 1): 2})
    r = offset_delete(h, "s", {"t": [0, 5]})
    assert [p.error_code for p in r.topics[0].partitions] == [0, 0]
    assert h.committed("s", "t", 0) == -1 and h.committed("s", "t", 1) == 2
    h.assert_replay_equivalent()


def test_topic_deletion_tombstones_its_offsets_in_every_group() -> None:
    h = GroupContext()
    h.commit("a", {("gone", 0): 1, ("kept", 0): 2})
    h.commit("b", {("gone", 3): 4})
    res = h.apply(h.shard.topic_deleted("gone", h.now))
    assert len(res.records) == 2 and all(v is None for _, _, v in res.records)
    assert h.committed("a", "gone", 0) == -1 and h.committed("a", "kept", 0) == 2
    h.assert_replay_equivalent()


def test_commit_request_errors_precede_group_logic() -> None:
    h = GroupContext()
    # The empty group id is served: Kafka keeps it for backward compatibility.
    assert h.commit("", {T0: 1}) == {T0: 0}
    p = h.shard.partition_of("g")
    h.shard.begin_load(p)
    assert h.commit("g", {T0: 1}) == {T0: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


def test_commit_from_member_keeps_its_session_alive() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1, session=10000)
    for _ in range(5):
        h.advance(6000)
        assert h.commit("g", {T0: 1}, member_id=a, generation=gen) == {T0: 0}
    assert h.state("g") is ClassicGroupState.STABLE
    h.advance(10000)
    assert h.state("g") is ClassicGroupState.EMPTY
