"""The other group APIs on a share group's id, ListGroups and DeleteGroups of share groups:
the pure core's answers, as Kafka 4.4 gives them (checked against it by
tests/differential/test_share_heartbeat.py), on a fake clock."""

from __future__ import annotations

from support.group_context import delete_groups, describe_groups, list_groups
from support.share_group_context import ShareContext

from coordinator.group.share.offsets_admin import delete_groups_begin
from protocol.errors import ErrorCode
from protocol.messages import consumer_group_heartbeat as cgh
from storage.records import decode_key

G = "g"


def share_group(sc: ShareContext, members: tuple[str, ...] = ("m1",)) -> None:
    for m in members:
        r = sc.hb(G, m, 0, ["foo"])
        assert r.error_code == 0
    sc.complete_init()


def test_offset_apis_answer_group_id_not_found() -> None:
    sc = ShareContext(foo=1)
    share_group(sc)
    assert sc.gc.commit(G, {("foo", 0): 5}) == {("foo", 0): ErrorCode.GROUP_ID_NOT_FOUND}
    assert sc.gc.commit(G, {("foo", 0): 5}, member_id="m1", generation=2) == {
        ("foo", 0): ErrorCode.GROUP_ID_NOT_FOUND
    }
    assert G not in sc.shard.groups  # no classic group was made beside it
    assert sc.gc.committed(G, "foo", 0) == -1


def test_classic_apis_see_no_member() -> None:
    sc = ShareContext(foo=1)
    share_group(sc)
    assert sc.gc.reply(sc.gc.sync(G, "x", 1)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert sc.gc.heartbeat(G, "x", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    v5 = sc.gc.leave(G, ("x", None))
    assert v5.error_code == 0
    assert [m.error_code for m in v5.members] == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert sc.gc.leave(G, ("x", None), version=2).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    join = sc.gc.reply(sc.gc.join(G, "x"))
    assert (join.error_code, join.member_id) == (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
    (d6,) = describe_groups(sc.gc, G)
    assert (d6.error_code, d6.error_message, d6.group_state) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group g is not a classic group.",
        "Dead",
    )
    (d5,) = describe_groups(sc.gc, G, version=5)
    assert (d5.error_code, d5.group_state) == (0, "Dead")


def test_consumer_and_share_ids_exclude_each_other() -> None:
    sc = ShareContext(foo=1)
    share_group(sc)
    req = cgh.ConsumerGroupHeartbeatRequest(
        group_id=G,
        member_id="c",
        member_epoch=0,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=["foo"],
        topic_partitions=[],
    )
    r = sc.gc.consumer_group_heartbeat(req)
    assert (r.error_code, r.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group g is not a consumer group.",
    )
    req.group_id = "cg"
    assert sc.gc.consumer_group_heartbeat(req).error_code == 0
    r2 = sc.hb("cg", "m", 0, ["foo"])
    assert (r2.error_code, r2.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group cg is not a share group.",
    )
    (d,) = sc.describe("cg")
    assert (d.error_code, d.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group cg is not a share group.",
    )
    # An empty classic group (offsets only) keeps its id too.
    assert sc.gc.commit("simple", {("foo", 0): 1}) == {("foo", 0): 0}
    r3 = sc.hb("simple", "m", 0, ["foo"])
    assert (r3.error_code, r3.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group simple is not a share group.",
    )


def test_list_groups_of_type_share_and_states() -> None:
    sc = ShareContext(foo=1)
    share_group(sc)
    sc.hb("empty", "m", 0, ["foo"])
    sc.hb("empty", "m", -1)
    listed = {
        (g.group_id, g.group_type, g.protocol_type, g.group_state) for g in list_groups(sc.gc)
    }
    assert listed == {("g", "share", "share", "Stable"), ("empty", "share", "share", "Empty")}
    assert [g.group_id for g in list_groups(sc.gc, types=["SHARE"], states=["empty"])] == ["empty"]
    assert list_groups(sc.gc, types=["consumer", "classic"]) == []


def test_delete_groups_only_empty_share_groups() -> None:
    sc = ShareContext(foo=1)
    share_group(sc)
    assert delete_groups(sc.gc, G) == {G: ErrorCode.NON_EMPTY_GROUP}
    sc.hb(G, "m1", -1)
    before = len(sc.gc.records)
    assert sc.shard.share.deletable_state(G) == {sc.gc.tid("foo"): [0]}
    assert delete_groups(sc.gc, G) == {G: 0}
    written = [(decode_key(k).version, v) for _, k, v in sc.gc.records[before:]]
    # Kafka's group tombstone set: target metadata, state metadata, group epoch last.
    assert written == [(12, None), (15, None), (11, None)]
    assert G not in sc.shard.share.groups and G not in sc.gc.mirror.share.groups
    assert delete_groups(sc.gc, G) == {G: ErrorCode.GROUP_ID_NOT_FOUND}
    r = sc.hb(G, "m1", 0, ["foo"])
    assert (r.member_epoch, sc.assigned(r)) == (2, {})
    assert len(sc.initializing) == 1  # a new group initializes its partitions again


def test_delete_groups_writes_deleting_first_and_a_half_done_delete_finishes_after_replay() -> None:
    """Kafka's sharePartitionDeleteRequests: DeleteGroups first writes the group's
    initialized and initializing topics as *deleting* (ShareGroupStatePartitionMetadata),
    then deletes their state, then tombstones the group. A crash after the first write
    leaves the replayed group Empty with its topics *deleting*: no heartbeat initializes
    them, and the next DeleteGroups deletes every partition of them again, then the group."""
    sc = ShareContext(foo=2)
    share_group(sc)
    sc.hb(G, "m1", -1)
    foo = sc.gc.tid("foo")
    before = len(sc.gc.records)
    out = sc.gc.apply(delete_groups_begin(sc.shard.share, 7, [G, G, "nope"]))
    assert out.replies[0][1].value == {G: {foo: [0, 1]}}
    ((_, key, value),) = sc.gc.records[before:]
    assert decode_key(key).version == 15 and value is not None
    # The crash: neither the share coordinator's delete nor the tombstones happened.
    replayed = sc.gc.replayed().share
    group = replayed.groups[G]
    assert (group.initializing, group.initialized, group.deleting) == ({}, {}, {foo: "foo"})
    assert replayed.deletable_state(G) == {foo: [0, 1]}
    assert sc.shard.share.groups[G].deleting == {foo: "foo"}
    pending = len(sc.initializing)
    r = sc.hb(G, "m2", 0, ["foo"])  # a member back meanwhile: foo is not initialized
    assert sc.assigned(r) == {} and len(sc.initializing) == pending
    sc.hb(G, "m2", -1)
    # The next DeleteGroups: foo deleting again (all its partitions), then the tombstones.
    out = sc.gc.apply(delete_groups_begin(sc.shard.share, 8, [G]))
    assert out.replies[0][1].value == {G: {foo: [0, 1]}}
    assert delete_groups(sc.gc, G) == {G: 0}
    assert G not in sc.gc.replayed().share.groups
