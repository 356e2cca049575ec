"""ConsumerGroupHeartbeat on the pure shard: joins, hand-over, leaves, replay."""

from __future__ import annotations

from support.consumer_member import Member, settle
from support.group_context import GroupContext

from coordinator.group.consumer.group import ConsumerGroupState
from protocol.errors import ErrorCode


def test_first_member_gets_every_partition_at_epoch_2() -> None:
    """A new group is at epoch 1; its first member's subscription moves it to 2 (Kafka 4.4)."""
    c = GroupContext.with_topics(foo=6)
    m = Member(c, "g", "m1", ["foo"])
    r = m.join()
    assert r.error_code == 0
    assert r.member_epoch == 2
    assert r.heartbeat_interval_ms == 5000
    assert m.partitions() == {("foo", p) for p in range(6)}
    g = c.shard.consumer.groups["g"]
    assert (g.group_epoch, g.assignment_epoch) == (2, 2)
    assert g.state is ConsumerGroupState.STABLE


def test_three_members_settle_disjoint_and_balanced_and_replay_rebuilds() -> None:
    c = GroupContext.with_topics(foo=6)
    ms = [Member(c, "g", f"m{i}", ["foo"]) for i in range(3)]
    for m in ms:
        m.join()
    settle(ms)
    owned = [m.partitions() for m in ms]
    assert sorted(len(o) for o in owned) == [2, 2, 2]
    assert set().union(*owned) == {("foo", p) for p in range(6)}
    g = c.shard.consumer.groups["g"]
    assert g.state is ConsumerGroupState.STABLE
    assert {m.epoch for m in ms} == {g.group_epoch}
    other = c.replayed().consumer.groups["g"]
    assert other.group_epoch == g.group_epoch
    assert other.assignment_epoch == g.assignment_epoch
    assert {k: (v.member_epoch, dict(v.assigned)) for k, v in other.members.items()} == {
        k: (v.member_epoch, dict(v.assigned)) for k, v in g.members.items()
    }
    assert other.target == g.target


def test_partition_is_never_given_before_its_owner_revoked_it() -> None:
    c = GroupContext.with_topics(foo=4)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    b = Member(c, "g", "b", ["foo"])
    b.join()
    assert b.partitions() == set()  # everything is still a's
    # a heartbeats without acknowledging: it is told what to keep, b still waits
    a.beat(ack=False)
    assert len(a.partitions()) == 2
    b.beat()
    assert b.partitions() == set()
    a.beat()  # acknowledges the revocation
    b.beat()
    assert len(b.partitions()) == 2
    assert a.partitions().isdisjoint(b.partitions())


def test_leave_bumps_epoch_and_the_others_take_over() -> None:
    c = GroupContext.with_topics(foo=4)
    a, b = Member(c, "g", "a", ["foo"]), Member(c, "g", "b", ["foo"])
    a.join()
    b.join()
    settle([a, b])
    epoch = c.shard.consumer.groups["g"].group_epoch
    r = b.leave()
    assert (r.error_code, r.member_epoch) == (0, -1)
    assert c.shard.consumer.groups["g"].group_epoch == epoch + 1
    settle([a])
    assert a.partitions() == {("foo", p) for p in range(4)}


def test_session_timeout_fences_member() -> None:
    c = GroupContext.with_topics(foo=2)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    c.sleep(44_999)
    assert "a" in c.shard.consumer.groups["g"].members
    c.sleep(1)
    assert "a" not in c.shard.consumer.groups["g"].members
    assert a.beat().error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_validation_errors() -> None:
    c = GroupContext.with_topics(foo=1)
    m = Member(c, "g", "", ["foo"])
    assert m.join().error_code == ErrorCode.INVALID_REQUEST
    assert m.last is not None and m.last.error_message == "MemberId can't be empty."
    r = m.join(version=0)  # v0: the server makes up the id
    assert r.error_code == 0 and r.member_id == "gen-1"
    assert r.assignment is not None


def test_describe_and_list() -> None:
    c = GroupContext.with_topics(foo=2)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    (d,) = c.consumer_group_describe("g")
    assert d.group_state == "Stable"
    assert d.assignor_name == "uniform"
    assert d.members[0].member_id == "a"
    assert d.members[0].member_type == 1
    assert [tp.topic_name for tp in d.members[0].assignment.topic_partitions] == ["foo"]
    (missing,) = c.consumer_group_describe("nope")
    assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
