"""A hypothesis state machine driving a consumer group (KIP-848) through the pure shard.

Several members (two dynamic, two static) join, heartbeat with and without acknowledging,
change subscriptions, leave (-1), leave temporarily (-2) and rejoin under a new member id,
and lose their sessions as the fake clock moves; topics are created and grow. After every
step:

* no partition is held (assigned or pending revocation) by two members, and what a client
  believes it owns is held by it on the server;
* member epochs never decrease, except through a leave, a fence or a rejoin; the group
  epoch never decreases;
* the shard rebuilt from the records written so far equals the live one.

The ``quiet`` rule heartbeats every member (acknowledging) until nothing changes, then every
partition of every subscribed topic must be assigned to exactly one member subscribing to it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support.consumer_member import Member, group_state
from support.group_context import GroupContext

from coordinator.group.consumer.group import ConsumerGroupState
from coordinator.group.consumer.member import MemberState
from protocol.errors import ErrorCode

TOPICS = ["t0", "t1", "t2", "t3"]
subscriptions = st.lists(st.sampled_from(TOPICS), max_size=3, unique=True)
REBALANCE_TIMEOUT = 20_000


class ConsumerGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = GroupContext.with_topics(t0=2, t1=3)
        self.members = [
            Member(self.c, "g", "d0", rebalance_timeout_ms=REBALANCE_TIMEOUT),
            Member(self.c, "g", "d1", rebalance_timeout_ms=REBALANCE_TIMEOUT),
            Member(self.c, "g", "s2", instance_id="i2", rebalance_timeout_ms=REBALANCE_TIMEOUT),
            Member(self.c, "g", "s3", instance_id="i3", rebalance_timeout_ms=REBALANCE_TIMEOUT),
        ]
        self.joined = [False] * 4
        self.away = [False] * 4  # static member left with -2
        self.generation = 0
        self.last_epochs: dict[str, int] = {}
        self.last_group_epoch = 0

    # ------------------------------------------------------------ helpers

    def group(self) -> Any:
        return self.c.shard.consumer.groups.get("g")

    def live(self, i: int) -> bool:
        return self.joined[i] and not self.away[i]

    def sync_membership(self) -> None:
        """Members the server removed (session or rebalance timeout) are out on our side too."""
        g = self.group()
        for i, m in enumerate(self.members):
            if self.joined[i] and (g is None or m.member_id not in g.members):
                self.forget(i)

    def forget(self, i: int) -> None:
        m = self.members[i]
        self.joined[i] = False
        self.away[i] = False
        m.owned = {}
        self.last_epochs.pop(m.member_id, None)

    def beat_ok(self, i: int, **kw: Any) -> None:
        r = self.members[i].beat(**kw)
        assert r.error_code == ErrorCode.NO_ERROR, (i, r)

    # ------------------------------------------------------------ rules

    @rule(i=st.integers(0, 3), topics=subscriptions)
    def join(self, i: int, topics: list[str]) -> None:
        m = self.members[i]
        if self.live(i):
            # a known member rejoining at epoch 0 (Kafka 4.2)
            r = m.join()
            assert r.error_code == ErrorCode.NO_ERROR, r
            return
        if self.away[i]:
            # a static member comes back under a new member id
            self.last_epochs.pop(m.member_id, None)
            self.generation += 1
            m.member_id = f"{m.member_id.split('#')[0]}#{self.generation}"
        self.last_epochs.pop(m.member_id, None)
        m.topics = topics
        r = m.join()
        assert r.error_code == ErrorCode.NO_ERROR, r
        self.joined[i] = True
        self.away[i] = False

    @rule(i=st.integers(0, 3), ack=st.booleans())
    def heartbeat(self, i: int, ack: bool) -> None:
        if self.live(i):
            self.beat_ok(i, ack=ack)

    @rule(i=st.integers(0, 3), topics=subscriptions)
    def change_subscription(self, i: int, topics: list[str]) -> None:
        if self.live(i):
            self.members[i].topics = topics
            self.beat_ok(i, subscribed_topic_names=topics)

    @rule(i=st.integers(0, 3))
    def leave(self, i: int) -> None:
        if self.live(i):
            r = self.members[i].leave()
            assert (r.error_code, r.member_epoch) == (0, -1)
            self.forget(i)

    @rule(i=st.integers(2, 3))
    def leave_temporarily(self, i: int) -> None:
        if self.live(i):
            m = self.members[i]
            r = m.leave(epoch=-2)
            assert (r.error_code, r.member_epoch) == (0, -2)
            self.away[i] = True
            self.last_epochs.pop(m.member_id, None)

    @rule(ms=st.sampled_from([1_000, 10_000, 25_000, 46_000]))
    def advance(self, ms: int) -> None:
        self.c.sleep(ms)
        self.sync_membership()

    @rule(name=st.sampled_from(["t2", "t3"]), n=st.integers(1, 3))
    def create_topic(self, name: str, n: int) -> None:
        if self.c.topics.topic(name) is None:
            self.c.topics.add(name, n)
            self.c.apply(self.c.shard.topics_changed([name], created=True, now_ms=self.c.now))

    @rule(name=st.sampled_from(TOPICS), more=st.integers(1, 2))
    def grow_topic(self, name: str, more: int) -> None:
        t = self.c.topics.topic(name)
        if t is not None:
            self.c.topics.add(name, t.num_partitions + more)
            self.c.apply(self.c.shard.topics_changed([name], created=False, now_ms=self.c.now))

    @precondition(lambda self: any(self.joined))
    @rule()
    def quiet(self) -> None:
        """Every member acknowledges until nothing changes; then the assignment is complete."""
        live = [i for i in range(4) if self.live(i)]
        for _ in range(12):
            before = [(self.members[i].epoch, self.members[i].partitions()) for i in live]
            for i in live:
                self.beat_ok(i)
            after = [(self.members[i].epoch, self.members[i].partitions()) for i in live]
            if before == after:
                break
        else:
            raise AssertionError("the group did not settle")
        if any(self.away) or not live:
            return  # a -2 member keeps its partitions until it returns or expires
        g = self.group()
        assert g.state is ConsumerGroupState.STABLE, g.state
        owners: dict[tuple[str, int], str] = {}
        for m in g.members.values():
            assert m.state is MemberState.STABLE and m.member_epoch == g.group_epoch, m
            assert not m.pending_revocation
            for topic_id, ps in m.assigned.items():
                name = self.c.name(topic_id)
                assert name in m.subscribed_topic_names, (m, name)
                for p in ps:
                    assert (name, p) not in owners
                    owners[(name, p)] = m.member_id
        subscribed = {t for m in g.members.values() for t in m.subscribed_topic_names}
        expected = set()
        for name in subscribed:
            t = self.c.topics.topic(name)
            if t is not None:
                expected |= {(name, p) for p in range(t.num_partitions)}
        assert set(owners) == expected
        for i in live:
            m = self.members[i]
            assert m.partitions() == {k for k, v in owners.items() if v == m.member_id}

    # ------------------------------------------------------------ invariants

    @invariant()
    def partitions_held_once(self) -> None:
        g = self.group()
        if g is None:
            return
        holder: dict[tuple[bytes, int], str] = {}
        for m in g.members.values():
            for parts in (m.assigned, m.pending_revocation):
                for topic_id, ps in parts.items():
                    for p in ps:
                        assert (topic_id, p) not in holder, (m.member_id, holder[(topic_id, p)])
                        holder[(topic_id, p)] = m.member_id
        for i, cm in enumerate(self.members):
            if not self.joined[i]:
                continue
            for t, ps in cm.owned.items():
                for p in ps:
                    assert holder.get((self.c.tid(t), p)) == cm.member_id, (cm.member_id, t, p)

    @invariant()
    def epochs_never_go_back(self) -> None:
        g = self.group()
        if g is None:
            return
        assert g.group_epoch >= self.last_group_epoch
        self.last_group_epoch = g.group_epoch
        for m in g.members.values():
            if m.member_epoch < 0:
                continue  # -2: a temporary leave
            last = self.last_epochs.get(m.member_id)
            if last is not None:
                assert m.member_epoch >= last, (m, last)
            self.last_epochs[m.member_id] = m.member_epoch

    @invariant()
    def replay_rebuilds_the_same_group(self) -> None:
        if self.group() is None:
            return
        assert group_state(self.c.replayed(), "g") == group_state(self.c.shard, "g")


ConsumerGroupMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestConsumerGroup = ConsumerGroupMachine.TestCase
