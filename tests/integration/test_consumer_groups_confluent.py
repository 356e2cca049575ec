"""KIP-848 consumer groups with real librdkafka consumers (group.protocol=consumer) against kgc.

Each test starts its own ``kgc serve`` with 250 ms consumer heartbeats, runs confluent-kafka
consumers on their own polling threads (``consumer848kit.Member``) and waits on conditions
with deadlines. Ownership is checked from the members' own rebalance callbacks, replayed in
order: no partition may be assigned to one member while another still holds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient
from support.consumer848kit import (
    TP,
    Member,
    OwnershipLog,
    create_topics,
    describe,
    described_assignment,
    owned_twice,
    produce,
    settled,
    start_kgc,
    wait_until,
)
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration

TOPIC = "t6"
N = 6
ALL: set[TP] = {(TOPIC, p) for p in range(N)}


@pytest.fixture
def kgc(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = start_kgc(tmp_path)
    yield proc
    if proc.alive():
        proc.stop()


class Group:
    """The members a test starts in one group, all closed at the end of the test."""

    def __init__(self, kgc: KgcProcess, group_id: str) -> None:
        self.kgc = kgc
        self.group_id = group_id
        self.log = OwnershipLog()
        self.members: list[Member] = []
        self.samples_owned_twice: list[dict[str, set[TP]]] = []

    def add(self, topics: list[str] | None = None, **conf: object) -> Member:
        m = Member(
            self.kgc.bootstrap,
            self.group_id,
            topics or [TOPIC],
            self.log,
            f"{self.group_id}-m{len(self.members)}",
            **conf,
        )
        self.members.append(m)
        return m

    def live(self) -> list[Member]:
        return [m for m in self.members if m.running]

    def layout(self) -> dict[str, set[TP]]:
        """A consistent snapshot of the live members' partitions; kept if one is owned twice."""
        layout = self.log.snapshot(self.live())
        if owned_twice(layout):
            self.samples_owned_twice.append(layout)
        return layout

    def wait_settled(self, want: set[TP], sizes: list[int], timeout: float = 30.0) -> None:
        """Sample the layout until it covers ``want`` once with these sizes (any order)."""

        def done() -> bool:
            layout = self.layout()
            return settled(layout, want) and sorted(map(len, layout.values())) == sizes

        wait_until(
            done,
            timeout=timeout,
            what=f"{len(self.live())} members to settle as {sizes}",
            detail=lambda: (self.layout(), self.kgc.log()[-2000:]),
        )

    def assert_clean(self) -> None:
        """No partition owned twice: at no sampled moment, and nowhere in the replayed log."""
        assert self.samples_owned_twice == []
        assert self.log.double_ownership() == []
        for m in self.members:
            assert m.fatal_errors() == [], (m.name, m.fatal_errors())

    def close(self) -> None:
        for m in self.members:
            if m.running:
                m.close()


@pytest.fixture
def group(kgc: KgcProcess, request: pytest.FixtureRequest) -> Iterator[Group]:
    g = Group(kgc, request.node.name.replace("test_", "g-")[:60])
    try:
        yield g
    finally:
        g.close()


def test_three_members_settle_balanced_and_consume_everything(
    kgc: KgcProcess, group: Group
) -> None:
    create_topics(kgc.bootstrap, {TOPIC: N})
    produced = produce(kgc.bootstrap, TOPIC, N, 10)
    for _ in range(3):
        group.add()
    group.wait_settled(ALL, [2, 2, 2])
    wait_until(
        lambda: {r for m in group.members for r in m.records()} >= produced,
        what="every produced record consumed",
        detail=lambda: len({r for m in group.members for r in m.records()}),
    )
    consumed = {r for m in group.members for r in m.records()}
    assert consumed == produced
    group.assert_clean()


def test_fourth_member_takes_only_what_others_give_up(kgc: KgcProcess, group: Group) -> None:
    create_topics(kgc.bootstrap, {TOPIC: N})
    old = [group.add() for _ in range(3)]
    group.wait_settled(ALL, [2, 2, 2])
    before = {m.name: m.partitions() for m in old}
    mark = group.log.mark()

    group.add()
    group.wait_settled(ALL, [1, 1, 2, 2])
    for m in old:
        # Old members only give up partitions; nothing of another member reaches them.
        assert m.partitions() <= before[m.name], (m.name, before[m.name], m.partitions())
        gained = [e for e in group.log.since(mark) if e[0] == m.name and e[1] == "assign" and e[2]]
        assert gained == [], group.log.since(mark)
    group.assert_clean()


def test_closing_member_hands_over_all_its_partitions(kgc: KgcProcess, group: Group) -> None:
    create_topics(kgc.bootstrap, {TOPIC: N})
    for _ in range(3):
        group.add()
    group.wait_settled(ALL, [2, 2, 2])
    before = {m.name: m.partitions() for m in group.members}

    leaving = group.members[0]
    leaving.close()  # leaves with epoch -1: the hand-over starts at once, not after a session
    group.wait_settled(ALL, [3, 3])
    for m in group.live():
        # The uniform assignor is sticky: the survivors keep theirs and split the leaver's.
        assert m.partitions() >= before[m.name]
    assert (
        set().union(*(m.partitions() - before[m.name] for m in group.live()))
        == (before[leaving.name])
    )
    group.assert_clean()


def test_range_assignor_reported_and_laid_out_by_range(kgc: KgcProcess, group: Group) -> None:
    # Two topics with equal counts: range co-partitions them (member k gets the same ids of
    # both), in contiguous blocks dealt in member-id order; uniform would do neither here.
    create_topics(kgc.bootstrap, {"ra": N, "rb": N})
    want = {(t, p) for t in ("ra", "rb") for p in range(N)}
    for _ in range(3):
        group.add(["ra", "rb"], **{"group.remote.assignor": "range"})
    group.wait_settled(want, [4, 4, 4])

    d = describe(kgc.bootstrap, group.group_id)
    assert d.error_code == 0
    assert d.assignor_name == "range"
    by_id = sorted(group.members, key=lambda m: m.member_id().encode("utf-16-be"))
    for k, m in enumerate(by_id):
        block = set(range(2 * k, 2 * k + 2))
        assert m.partition_ids("ra") == block, (k, m.partitions())
        assert m.partition_ids("rb") == block, (k, m.partitions())

    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    desc = admin.describe_consumer_groups([group.group_id])[group.group_id].result(timeout=20)
    assert desc.partition_assignor == "range"
    group.assert_clean()


# Slow (Kafka's 10 s regex refresh floor): tests/group/consumer/test_cg_regex.py covers the
# refresh; test_java_consumer_848.py (kafka suite) a real client's regex.
@pytest.mark.slow
def test_regex_subscription_picks_up_a_topic_created_later(kgc: KgcProcess, group: Group) -> None:
    create_topics(kgc.bootstrap, {"t-first": 2, "other": 2})
    m = group.add(["^t-.*"])
    wait_until(
        lambda: m.partitions() == {("t-first", 0), ("t-first", 1)},
        what="the regex member to get t-first",
        detail=m.partitions,
    )

    create_topics(kgc.bootstrap, {"t-later": 3})
    want = {("t-first", 0), ("t-first", 1)} | {("t-later", p) for p in range(3)}
    # kgc refreshes a group's regexes at most every 10 s (Kafka's batch refresh interval).
    wait_until(
        lambda: m.partitions() == want,
        timeout=40,
        what="the new matching topic to be assigned",
        detail=lambda: (m.partitions(), kgc.log()[-2000:]),
    )
    produced = produce(kgc.bootstrap, "t-later", 3, 2)
    wait_until(
        lambda: set(m.records()) >= produced,
        what="the new topic's records consumed",
        detail=m.records,
    )
    assert all(t != "other" for t, _, _, _ in m.records())
    group.assert_clean()


def test_committed_offsets_resume_a_new_consumer(kgc: KgcProcess, group: Group) -> None:
    create_topics(kgc.bootstrap, {TOPIC: N})
    first = produce(kgc.bootstrap, TOPIC, N, 10, tag="a")
    a = group.add()
    wait_until(lambda: set(a.records()) >= first, what="the first consumer to read everything")
    committed = a.commit()
    assert all(tp.error is None for tp in committed), committed
    assert {(tp.topic, tp.partition): tp.offset for tp in committed} == {tp: 10 for tp in ALL}
    a.close()

    second = produce(kgc.bootstrap, TOPIC, N, 5, tag="b")
    b = group.add()
    wait_until(lambda: set(b.records()) >= second, what="the new consumer to read the new records")
    # Per partition the records arrive in order, so a re-delivered committed record
    # (offset < 10) would have come before the new ones: b starts exactly at the commits.
    assert sorted(b.records()) == sorted(second)
    got = b.on_poll_thread(lambda c: c.committed([TopicPartition(TOPIC, p) for p in range(N)]))
    assert {(tp.topic, tp.partition): tp.offset for tp in got} == {tp: 10 for tp in ALL}
    group.assert_clean()


def test_group_survives_a_kgc_sigkill_restart(kgc: KgcProcess, group: Group) -> None:
    create_topics(kgc.bootstrap, {TOPIC: N})
    produce(kgc.bootstrap, TOPIC, N, 5, tag="a")
    members = [group.add() for _ in range(3)]
    group.wait_settled(ALL, [2, 2, 2])

    def caught_up(m: Member) -> bool:
        # Each member read its own partitions to the end (a partition that moved while the
        # group settled may have been read by its first owner only; the new owner would
        # then have no position for it to commit).
        read = {(t, p, o) for t, p, o, _ in m.records()}
        return all((t, p, 4) in read for t, p in m.partitions())

    wait_until(lambda: all(caught_up(m) for m in members), what="every member caught up")
    for m in members:
        assert {(tp.topic, tp.partition, tp.offset, tp.error) for tp in m.commit()} == {
            (t, p, 5, None) for t, p in m.partitions()
        }
    wait_until(
        lambda: describe(kgc.bootstrap, group.group_id).group_state == "Stable",
        what="the group to be Stable",
    )
    before = describe(kgc.bootstrap, group.group_id)
    owned_before = {m.name: m.partitions() for m in members}
    mark = group.log.mark()

    kgc.kill()
    kgc.start()
    kgc.wait_loaded()
    # Every member heartbeats the restarted kgc a few times, each answered NONE (a fenced
    # or unknown member would be answered an error and rejoin with epoch 0).
    wait_until(
        lambda: kgc.requests_total(api="ConsumerGroupHeartbeat", error="NONE") >= 4 * len(members),
        what="heartbeats answered by the restarted kgc",
        detail=lambda: kgc.log()[-2000:],
    )
    after = describe(kgc.bootstrap, group.group_id)
    assert after.error_code == 0
    assert after.group_state == "Stable"
    assert after.group_epoch == before.group_epoch
    assert after.assignment_epoch == before.assignment_epoch
    assert {m.member_id: m.member_epoch for m in after.members} == {
        m.member_id: m.member_epoch for m in before.members
    }
    assert described_assignment(after) == described_assignment(before)
    assert group.log.since(mark) == []  # no partition moved, nothing revoked or lost
    assert {m.name: m.partitions() for m in members} == owned_before
    errors = [
        e
        for m in members
        for e in m.errors
        if e.code() not in (-195, -185, -187)  # transport / timed out / all brokers down
    ]
    assert errors == []

    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group.group_id)])
    offsets = res[group.group_id].result(timeout=20).topic_partitions
    assert {(tp.topic, tp.partition): tp.offset for tp in offsets} == {tp: 5 for tp in ALL}

    # And the group still works: new records reach their (unchanged) owners.
    second = produce(kgc.bootstrap, TOPIC, N, 2, tag="b")
    wait_until(
        lambda: {r for m in members for r in m.records()} >= second,
        what="records produced after the restart consumed",
    )
    for m in members:
        new = [r for r in m.records() if r in second]
        assert {(t, p) for t, p, _, _ in new} <= owned_before[m.name]
        # A commit carries the member id and epoch: kgc accepting it means it still knows
        # this member at the epoch it had before the crash (else STALE_MEMBER_EPOCH).
        assert {(tp.topic, tp.partition, tp.offset, tp.error) for tp in m.commit()} == {
            (t, p, 7, None) for t, p in owned_before[m.name]
        }
    assert {
        m.member_id: m.member_epoch for m in describe(kgc.bootstrap, group.group_id).members
    } == {m.member_id: m.member_epoch for m in before.members}
    group.assert_clean()


def test_admin_describe_and_list_consumer_groups(kgc: KgcProcess, group: Group) -> None:
    create_topics(kgc.bootstrap, {TOPIC: N})
    members = [group.add() for _ in range(2)]
    group.wait_settled(ALL, [3, 3])
    admin = AdminClient({"bootstrap.servers": kgc.bootstrap})

    def stable() -> bool:
        d = admin.describe_consumer_groups([group.group_id])[group.group_id].result(timeout=20)
        return bool(d.state == ConsumerGroupState.STABLE)

    wait_until(stable, what="the admin client to see the group Stable")
    d = admin.describe_consumer_groups([group.group_id])[group.group_id].result(timeout=20)
    assert d.group_id == group.group_id
    assert d.type == ConsumerGroupType.CONSUMER
    assert d.state == ConsumerGroupState.STABLE
    assert d.is_simple_consumer_group is False
    assert d.partition_assignor == "uniform"
    described = {
        md.member_id: (
            {(tp.topic, tp.partition) for tp in md.assignment.topic_partitions},
            {(tp.topic, tp.partition) for tp in md.target_assignment.topic_partitions},
            md.client_id,
        )
        for md in d.members
    }
    assert described == {m.member_id(): (m.partitions(), m.partitions(), m.name) for m in members}

    classic = Member(
        kgc.bootstrap,
        "classic-g",
        [TOPIC],
        OwnershipLog(),
        "classic-m0",
        **{"group.protocol": "classic"},
    )
    try:
        wait_until(lambda: bool(classic.partitions()), what="the classic group's member assigned")

        def listed(types: set[ConsumerGroupType]) -> dict[str, ConsumerGroupType]:
            r = admin.list_consumer_groups(types=types).result(timeout=20)
            assert not r.errors, r.errors
            return {g.group_id: g.type for g in r.valid}

        assert listed({ConsumerGroupType.CONSUMER}) == {group.group_id: ConsumerGroupType.CONSUMER}
        assert listed({ConsumerGroupType.CLASSIC}) == {"classic-g": ConsumerGroupType.CLASSIC}
        assert listed(set()).keys() >= {group.group_id, "classic-g"}
    finally:
        classic.close()
    group.assert_clean()
