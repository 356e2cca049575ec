"""Classic and consumer groups meeting (Kafka's online upgrade/downgrade and mixed groups)."""

from __future__ import annotations

from support.consumer_member import Member, settle
from support.group_context import GroupContext

from coordinator.group.classic.state import ClassicGroupState
from coordinator.group.classic.subscription import encode_subscription, parse_assignment
from protocol.errors import ErrorCode
from protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from protocol.messages.join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
)
from protocol.messages.leave_group import LeaveGroupRequest, MemberIdentity
from protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse


class ClassicClient:
    """A classic consumer (cooperative-sticky, as librdkafka's group.protocol=classic)."""

    def __init__(self, c: GroupContext, group_id: str, topics: list[str]) -> None:
        self.c, self.group_id, self.topics = c, group_id, topics
        self.member_id = ""
        self.generation = -1
        self.owned: dict[str, list[int]] = {}

    def _call(self, api: str, req: object, version: int) -> object:
        """Send ``req``; a request the classic group parks is answered by a later timer."""
        ctx = self.c.ctx(version)
        out = self.c.apply(getattr(self.c.shard, api)(ctx, req, self.c.now))
        replies = [r for h, r in out.replies if h == ctx.reply_to]
        while not replies:
            fired = self.c.sleep(1000)
            replies = [r for res in fired for h, r in res.replies if h == ctx.reply_to]
        return replies[0]

    def join(self) -> JoinGroupResponse:
        meta = encode_subscription(3, self.topics, sorted(self.owned.items()), self.generation)
        req = JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=10000,
            rebalance_timeout_ms=30000,
            member_id=self.member_id,
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name="cooperative-sticky", metadata=meta)],
        )
        resp = self._call("join_group", req, 9)
        assert isinstance(resp, JoinGroupResponse)
        if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id
            return self.join()
        if resp.error_code == 0:
            self.member_id = resp.member_id
            self.generation = resp.generation_id
        return resp

    def sync(self) -> SyncGroupResponse:
        req = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            protocol_type="consumer",
            protocol_name="cooperative-sticky",
        )
        resp = self._call("sync_group", req, 5)
        assert isinstance(resp, SyncGroupResponse)
        if resp.error_code == 0:
            parsed = parse_assignment(resp.assignment)
            assert parsed is not None
            self.owned = dict(parsed[0])
        return resp

    def heartbeat(self) -> int:
        req = HeartbeatRequest(
            group_id=self.group_id, generation_id=self.generation, member_id=self.member_id
        )
        resp = self._call("heartbeat", req, 4)
        assert isinstance(resp, HeartbeatResponse)
        return resp.error_code

    def partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def test_classic_member_joins_a_consumer_group_and_shares_the_partitions() -> None:
    c = GroupContext.with_topics(foo=4)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    b = ClassicClient(c, "g", ["foo"])
    resp = b.join()
    assert resp.error_code == 0 and resp.protocol_type == "consumer"
    assert resp.leader == "" and resp.members == []
    g = c.shard.consumer.groups["g"]
    assert g.members[b.member_id].classic_member_metadata is not None
    assert b.sync().error_code == 0
    # The classic member is asked to rejoin until it has its share.
    for _ in range(5):
        a.beat()
        if b.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS:
            b.join()
            b.sync()
    assert len(a.partitions()) == 2 and len(b.partitions()) == 2
    assert a.partitions().isdisjoint(b.partitions())
    assert "g" not in c.shard.groups  # one group, of type consumer


def test_empty_classic_group_is_replaced_by_a_consumer_group() -> None:
    c = GroupContext.with_topics(foo=2)
    b = ClassicClient(c, "g", ["foo"])
    b.join()
    b.sync()
    leave = LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id=b.member_id)])
    c.apply(c.shard.leave_group(c.ctx(5), leave, c.now))
    assert c.shard.groups["g"].is_in(ClassicGroupState.EMPTY)
    a = Member(c, "g", "a", ["foo"])
    assert a.join().error_code == 0
    assert "g" not in c.shard.groups and "g" in c.shard.consumer.groups
    replayed = c.replayed()
    assert "g" not in replayed.groups and "g" in replayed.consumer.groups


def test_online_upgrade_keeps_the_classic_members_assignment() -> None:
    c = GroupContext.with_topics(foo=4)
    b = ClassicClient(c, "g", ["foo"])
    b.join()  # answered after the initial rebalance delay
    # the classic leader assigns everything to itself
    assert c.shard.groups["g"].generation >= 1
    leader_assignment = b"\x00\x03" + b"\x00\x00\x00\x01" + b"\x00\x03foo" + b"\x00\x00\x00\x04"
    leader_assignment += b"".join(p.to_bytes(4, "big") for p in range(4)) + b"\xff\xff\xff\xff"
    b.generation = c.shard.groups["g"].generation
    ctx = c.ctx(5)
    from protocol.messages.sync_group import SyncGroupRequestAssignment

    req = SyncGroupRequest(
        group_id="g",
        generation_id=b.generation,
        member_id=b.member_id,
        protocol_type="consumer",
        protocol_name="cooperative-sticky",
        assignments=[
            SyncGroupRequestAssignment(member_id=b.member_id, assignment=leader_assignment)
        ],
    )
    c.apply(c.shard.sync_group(ctx, req, c.now))
    assert c.shard.groups["g"].is_in(ClassicGroupState.STABLE)
    a = Member(c, "g", "a", ["foo"])
    assert a.join().error_code == 0
    g = c.shard.consumer.groups["g"]
    assert "g" not in c.shard.groups
    assert g.members[b.member_id].classic_member_metadata is not None
    # the classic member still owns its partitions until it revokes them
    assert sum(len(ps) for ps in g.members[b.member_id].assigned.values()) == 4
    assert b.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS


def test_last_consumer_member_leaving_downgrades_to_classic() -> None:
    c = GroupContext.with_topics(foo=2)
    a = Member(c, "g", "a", ["foo"])
    a.join()
    b = ClassicClient(c, "g", ["foo"])
    b.join()
    b.sync()
    settle([a])
    a.leave()
    assert "g" not in c.shard.consumer.groups
    classic = c.shard.groups["g"]
    assert classic.is_in(ClassicGroupState.PREPARING_REBALANCE)
    assert list(classic.members) == [b.member_id]
    replayed = c.replayed()
    assert "g" in replayed.groups and "g" not in replayed.consumer.groups
