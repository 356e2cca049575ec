"""Partition loading, replay of the offsets log and timers after a restart."""

from support.group_context import GroupContext

from coordinator.group import ClassicGroupState, GroupShard
from protocol.errors import ErrorCode
from protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from protocol.messages.join_group import JoinGroupResponse
from protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from protocol.messages.sync_group import SyncGroupResponse


def restart(h: GroupContext) -> GroupContext:
    """A new harness whose shard is loaded from everything ``h`` wrote."""
    h2 = GroupContext(h.config, now=h.now)
    shard = GroupShard(h.config)
    h2.shard = shard
    parts = sorted({p for p, _, _ in h.records})
    for p in parts:
        shard.begin_load(p)
    for rec in h.records:
        shard.replay(*rec)
        h2.mirror.replay(*rec)
    h2.records = list(h.records)
    for p in range(h.config.offsets_topic_num_partitions):
        h2.apply(shard.load_complete(p, h2.now))
    return h2


def test_requests_while_loading_answer_coordinator_load_in_progress() -> None:
    h = GroupContext()
    p = h.shard.partition_of("g")
    h.shard.begin_load(p)
    r = h.reply(h.join("g"))
    assert (
        isinstance(r, JoinGroupResponse) and r.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    )
    s = h.reply(h.sync("g", "m", 1))
    assert (
        isinstance(s, SyncGroupResponse) and s.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    )
    assert h.heartbeat("g", "m", 1) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert h.leave("g", ("m", None)).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert h.fetch("g", {"t": [0]}).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    # v1 has no top-level error: it goes on each partition.
    v1 = h.fetch("g", {"t": [0]}, version=1)
    assert v1.topics[0].partitions[0].error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    ctx = h.ctx(5)
    h.apply(h.shard.describe_groups(ctx, DescribeGroupsRequest(["g"]), h.now))
    d = h.reply(ctx.reply_to)
    assert isinstance(d, DescribeGroupsResponse)
    assert d.groups[0].error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    ctx = h.ctx(4)
    h.apply(h.shard.list_groups(ctx, ListGroupsRequest(), h.now))
    lg = h.reply(ctx.reply_to)
    assert isinstance(lg, ListGroupsResponse)
    assert lg.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    # Invalid session timeout is checked before the load status, as in Kafka.
    r = h.reply(h.join("g", session=1))
    assert isinstance(r, JoinGroupResponse) and r.error_code == ErrorCode.INVALID_SESSION_TIMEOUT


def test_unowned_partition_answers_not_coordinator() -> None:
    shard = GroupShard()
    h = GroupContext()
    h.shard = shard
    assert h.heartbeat("g", "m", 1) == ErrorCode.NOT_COORDINATOR


def test_replaying_records_rebuilds_groups_and_offsets() -> None:
    h = GroupContext()
    (a, b), gen = h.stable_group("g", 2)
    h.commit("g", {("t", 0): 5}, member_id=a, generation=gen)
    h.stable_group("h", 1)
    h.leave("h", *[(m, None) for m in list(h.shard.groups["h"].members)])
    h.commit("s", {("x", 1): 9})
    h2 = restart(h)
    g = h2.shard.groups["g"]
    assert (g.state, g.generation, g.leader_id, list(g.members)) == (
        ClassicGroupState.STABLE,
        gen,
        a,
        [a, b],
    )
    assert g.members[b].assignment == b.encode()
    assert h2.shard.groups["h"].state is ClassicGroupState.EMPTY
    assert h2.committed("g", "t", 0) == 5 and h2.committed("s", "x", 1) == 9
    # Same view as the live shard had.
    h.shard, h.mirror = h.shard, h2.shard
    h.assert_replay_equivalent()


def test_load_rearms_session_timers_and_stable_group_survives_with_heartbeats() -> None:
    h = GroupContext()
    (a, b), gen = h.stable_group("g", 2, session=10000)
    h2 = restart(h)
    assert f"heartbeat-g-{a}" in h2.timers and h2.timers[f"heartbeat-g-{a}"] == h2.now + 10000
    assert "expire-offsets" in h2.timers
    for _ in range(5):
        h2.advance(5000)
        assert h2.heartbeat("g", a, gen) == ErrorCode.NO_ERROR
        assert h2.heartbeat("g", b, gen) == ErrorCode.NO_ERROR
    assert h2.state("g") is ClassicGroupState.STABLE
    # b stops: its re-armed session expires and the group rebalances.
    for _ in range(3):
        h2.advance(5000)
        h2.heartbeat("g", a, gen)
    assert h2.state("g") is ClassicGroupState.PREPARING_REBALANCE
    assert b not in h2.shard.groups["g"].members


def test_unload_answers_parked_requests_with_not_coordinator() -> None:
    h = GroupContext()
    _, hj = h.join_new("g")
    assert "join-g" in h.timers
    h.apply(h.shard.unload(h.shard.partition_of("g"), h.now))
    r = h.reply(hj)
    assert isinstance(r, JoinGroupResponse) and r.error_code == ErrorCode.NOT_COORDINATOR
    assert "g" not in h.shard.groups
    assert "join-g" not in h.timers  # the unloaded group's timers are gone
    assert h.heartbeat("g", "x", 1) == ErrorCode.NOT_COORDINATOR
