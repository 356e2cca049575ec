"""ShareGroupHeartbeat on the pure core with a fake clock: Kafka's GroupMetadataManagerTest
share cases (the notes' checklist A1-A8, A10-A12), answers as Kafka 4.4 gives them."""

from __future__ import annotations

from support.share_group_context import ShareContext

from coordinator.group import GroupConfig
from coordinator.group.events import ShareMembersFenced
from coordinator.group.timers import share_session_key
from protocol.errors import ErrorCode
from storage.records import decode_key

G = "g"


def joined(sc: ShareContext, member: str = "m1", topics: tuple[str, ...] = ("foo",)) -> int:
    """Join and complete the initialization; the member's epoch once it is assigned."""
    r = sc.hb(G, member, 0, list(topics))
    sc.complete_init()
    r = sc.hb(G, member, r.member_epoch)
    return r.member_epoch


def test_first_join_is_empty_then_assigned_after_initialization() -> None:
    sc = ShareContext(foo=3)
    r = sc.hb(G, "m1", 0, ["foo"])
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (
        0,
        "m1",
        2,
        5000,
    )
    assert sc.assigned(r) == {}
    (init,) = sc.initializing
    assert (init.group_id, init.state_epoch) == (G, 2)
    assert [(name, ps) for _, name, ps in init.topics] == [("foo", (0, 1, 2))]
    # Until the share coordinator answers, nothing is assignable.
    r = sc.hb(G, "m1", 2)
    assert (r.member_epoch, r.assignment) == (2, None)
    sc.complete_init()
    r = sc.hb(G, "m1", 2)
    assert r.member_epoch == 3
    assert sc.assigned(r) == {"foo": [0, 1, 2]}
    # A steady heartbeat: same epoch, no assignment.
    r = sc.hb(G, "m1", 3)
    assert (r.member_epoch, r.assignment) == (3, None)


def test_join_records_in_kafkas_order() -> None:
    sc = ShareContext(foo=1)
    sc.hb(G, "m1", 0, ["foo"])
    types = [decode_key(k).version for _, k, _ in sc.gc.records]
    # member metadata, group epoch, target member, target metadata, current assignment,
    # state-partition metadata.
    assert types == [10, 11, 13, 12, 14, 15]


def test_validation_errors_and_messages() -> None:
    sc = ShareContext(foo=1)
    bad = ErrorCode.INVALID_REQUEST
    cases = [
        ((" ", 0, ["foo"]), {}, "MemberId can't be empty."),
        (("m", 0, None), {}, "SubscribedTopicNames must be set in first request."),
        (("m", 0, []), {}, "SubscribedTopicNames must be set in first request."),
        (("m", 0, ["foo"]), {"rack": " "}, "RackId can't be empty."),
        (("m", -2, ["foo"]), {}, "MemberEpoch is invalid."),
    ]
    for args, kw, message in cases:
        r = sc.hb(G, *args, **kw)
        assert (r.error_code, r.error_message) == (bad, message), args
    r = sc.hb(" ", "m", 0, ["foo"])
    assert (r.error_code, r.error_message) == (bad, "GroupId can't be empty.")
    assert sc.gc.records == []


def test_unknown_group_and_member() -> None:
    sc = ShareContext(foo=1)
    r = sc.hb(G, "m1", 1, ["foo"])
    assert (r.error_code, r.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Share group g not found.",
    )
    r = sc.hb(G, "m1", -1)
    assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group g not found.")
    sc.hb(G, "m1", 0, ["foo"])
    r = sc.hb(G, "m9", 3)
    assert (r.error_code, r.error_message) == (
        ErrorCode.UNKNOWN_MEMBER_ID,
        "Member m9 is not a member of group g.",
    )


def test_epoch_checks_and_rejoin_with_zero() -> None:
    sc = ShareContext(foo=2)
    epoch = joined(sc)
    assert epoch == 3
    r = sc.hb(G, "m1", 13)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert r.error_message == (
        "The share group member has a greater member epoch (13) than the one known by the "
        "group coordinator (3). The member must abandon all its partitions and rejoin."
    )
    # The previous epoch is accepted (the answer carrying the new one may have been lost).
    assert sc.hb(G, "m1", 2).error_code == 0
    r = sc.hb(G, "m1", 1)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert "smaller member epoch (1)" in (r.error_message or "")
    r = sc.hb(G, "m1", 0, ["foo"])
    assert (r.error_code, r.member_epoch, sc.assigned(r)) == (0, 3, {"foo": [0, 1]})


def test_leave_bumps_the_epoch_and_writes_tombstones() -> None:
    sc = ShareContext(foo=2)
    joined(sc)
    before = len(sc.gc.records)
    r = sc.hb(G, "m1", -1)
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (
        0,
        "m1",
        -1,
        0,
    )
    written = [(decode_key(k).version, v is None) for _, k, v in sc.gc.records[before:]]
    # The last member gone, the empty target is current at the new epoch (Kafka 4.4).
    assert written == [(14, True), (13, True), (10, True), (11, False), (12, False)]
    (d,) = sc.describe(G)
    assert (d.group_state, d.group_epoch, d.assignment_epoch, d.members) == ("Empty", 4, 4, [])
    r = sc.hb(G, "m1", -1)
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    sc.gc.assert_no_timer(share_session_key(G, "m1"))


def test_session_expiry_fences_the_member_also_after_a_reload() -> None:
    sc = ShareContext(foo=1)
    joined(sc)
    sc.gc.assert_timer(share_session_key(G, "m1"), 45000)
    sc.sleep(44999)
    assert G in sc.shard.share.groups and "m1" in sc.shard.share.groups[G].members
    sc.sleep(1)
    assert "m1" not in sc.shard.share.groups[G].members
    fenced = [e for e in sc.gc.events if isinstance(e, ShareMembersFenced)]
    assert [(e.member_ids, e.kind) for e in fenced] == [(("m1",), "session_timeout")]
    # A reloaded shard re-arms the sessions of its members.
    sc2 = ShareContext(foo=1)
    joined(sc2)
    other = sc2.gc.replayed()
    assert share_session_key(G, "m1") in other.pending_timers()


def test_max_size_refuses_only_new_members() -> None:
    sc = ShareContext(GroupConfig(share_group_max_size=1), foo=1)
    epoch = joined(sc)
    r = sc.hb(G, "m2", 0, ["foo"])
    assert (r.error_code, r.error_message) == (
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        "The share group has reached its maximum capacity of 1 members.",
    )
    assert sc.hb(G, "m1", epoch).error_code == 0


def test_members_share_a_partition_when_there_are_more_members() -> None:
    sc = ShareContext(foo=1)
    joined(sc)
    r2 = sc.hb(G, "m2", 0, ["foo"])
    assert (r2.member_epoch, sc.assigned(r2)) == (4, {"foo": [0]})
    r1 = sc.hb(G, "m1", 3)
    # m1 moves to epoch 4 keeping p0: its assignment did not change, so none is sent.
    assert (r1.member_epoch, r1.assignment) == (4, None)
    (d,) = sc.describe(G)
    assert {m.member_id: m.assignment.topic_partitions[0].partitions for m in d.members} == {
        "m1": [0],
        "m2": [0],
    }


def test_a_second_member_takes_its_share_as_kafka_moves_it() -> None:
    # Kafka 4.4: m1 holding 0-2 keeps 1-2 and m2 gets 0.
    sc = ShareContext(foo=3)
    joined(sc)
    r2 = sc.hb(G, "m2", 0, ["foo"])
    assert (r2.member_epoch, sc.assigned(r2)) == (4, {"foo": [0]})
    r1 = sc.hb(G, "m1", 3)
    assert (r1.member_epoch, sc.assigned(r1)) == (4, {"foo": [1, 2]})


def test_topic_changes_initialize_only_new_partitions() -> None:
    sc = ShareContext(foo=2)
    epoch = joined(sc, topics=("foo", "bar"))
    assert epoch == 3
    # bar appears: the hash changes (epoch 4), its partitions are initialized, then
    # assigned at the next epoch.
    assert sc.gc.topics is not None
    sc.gc.topics.add("bar", 1)
    sc.gc.apply(sc.shard.topics_changed(["bar"], True, sc.now))
    r = sc.hb(G, "m1", epoch)
    assert r.member_epoch == 4
    (init,) = sc.initializing
    assert [(n, ps) for _, n, ps in init.topics] == [("bar", (0,))]
    sc.complete_init()
    r = sc.hb(G, "m1", 4)
    assert (r.member_epoch, sc.assigned(r)) == (5, {"foo": [0, 1], "bar": [0]})
    # foo grows: only the new partition is initialized.
    sc.gc.topics.add("foo", 3)
    sc.gc.apply(sc.shard.topics_changed(["foo"], False, sc.now))
    r = sc.hb(G, "m1", 5)
    (init,) = sc.initializing
    assert [(n, ps) for _, n, ps in init.topics] == [("foo", (2,))]
    sc.complete_init()
    r = sc.hb(G, "m1", r.member_epoch)
    assert sc.assigned(r) == {"foo": [0, 1, 2], "bar": [0]}


def test_refused_initialization_is_retried_after_the_interval() -> None:
    sc = ShareContext(foo=2)
    r = sc.hb(G, "m1", 0, ["foo"])
    sc.complete_init(fail={"foo": [1]})
    r = sc.hb(G, "m1", r.member_epoch)
    assert sc.assigned(r) == {"foo": [0]}
    (retry,) = sc.initializing  # refused partitions leave "initializing" and are retried
    assert [(n, ps) for _, n, ps in retry.topics] == [("foo", (1,))]
    # An initialization without an answer is retried only after the retry interval.
    r = sc.hb(G, "m1", r.member_epoch)
    assert len(sc.initializing) == 1
    sc.sleep(30000)
    r = sc.hb(G, "m1", r.member_epoch)
    assert len(sc.initializing) == 2
    sc.complete_init()
    r = sc.hb(G, "m1", r.member_epoch)
    assert sc.assigned(r) == {"foo": [0, 1]}


def test_deleted_topic_leaves_the_state_metadata() -> None:
    sc = ShareContext(foo=1)
    joined(sc)
    assert sc.gc.topics is not None
    tid = sc.gc.tid("foo")
    sc.gc.topics.remove("foo")
    sc.gc.apply(sc.shard.topics_changed(["foo"], False, sc.now))
    group = sc.shard.share.groups[G]
    assert tid not in group.initialized
    r = sc.hb(G, "m1", 3)
    assert (r.member_epoch, sc.assigned(r)) == (4, {})


def test_replay_rebuilds_the_groups() -> None:
    sc = ShareContext(foo=3, bar=1)
    joined(sc, "m1", ("foo",))
    sc.hb(G, "m2", 0, ["foo", "bar"], rack="r1")
    sc.complete_init()
    sc.hb(G, "m2", sc.shard.share.groups[G].members["m2"].member_epoch)
    sc.hb(G, "m3", 0, ["bar"])
    sc.hb(G, "m3", -1)
    for shard in (sc.gc.replayed(), sc.gc.mirror):
        live, back = sc.shard.share.groups[G], shard.share.groups[G]
        assert back.members == live.members
        assert back.target == live.target
        assert (back.group_epoch, back.assignment_epoch, back.metadata_hash) == (
            live.group_epoch,
            live.assignment_epoch,
            live.metadata_hash,
        )
        assert (back.initializing, back.initialized, back.deleting) == (
            live.initializing,
            live.initialized,
            live.deleting,
        )
