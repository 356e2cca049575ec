"""KIP-1251 (KAFKA-20066, Kafka 4.3+) against Kafka 4.4: which commits with an older member
epoch a consumer group accepts, compared answer by answer.

Each partition a member holds keeps the epoch at which it was assigned to the member; an
OffsetCommit whose member epoch is older than the member's is accepted when every partition
in it was assigned to the member at that epoch or before, and refused as a whole
(STALE_MEMBER_EPOCH) otherwise. A newer epoch is refused, and OffsetFetch still wants the
member's epoch exactly. The unit tests are tests/group/consumer/test_cg_kafka44.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.diffkit import Runner, Side
from support.groupops import (
    CG_HEARTBEAT,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    cg_req,
    commit_req,
    fetch_groups_req,
    synchronous_assignment,
    wait_topic_assignable,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def _owned(resp: Any, before: list[Any]) -> list[Any]:
    if resp.assignment is None:
        return before
    return [(t.topic_id, list(t.partitions)) for t in resp.assignment.topic_partitions]


def older_epoch_commits(side: Side) -> None:
    topic, other_topic = side.name("kip1251-t"), side.name("kip1251-u")
    side.create_topic(topic, 2)
    side.create_topic(other_topic, 1)
    wait_topic_assignable(side, topic, 2)
    wait_topic_assignable(side, other_topic, 1)
    group = side.name("kip1251-older")
    side.wait_coordinator(group)
    synchronous_assignment(side, group)

    def beat(step: str, mid: str, epoch: int, **kw: Any) -> Any:
        return side.call(CG_HEARTBEAT, 1, cg_req(group, mid, epoch, **kw), step=step)

    def commit(step: str, epoch: int, offsets: dict[str, dict[int, int]]) -> None:
        side.call(
            OFFSET_COMMIT, 9, commit_req(group, offsets, generation=epoch, member_id="m"), step=step
        )

    r = beat("m.joins", "m", 0, rebalance=30000, topics=[], owned=[])
    r = beat("m.subscribes", "m", r.member_epoch, topics=[topic])
    assigned_at = r.member_epoch
    held = _owned(r, [])
    beat("other.joins", "other", 0, rebalance=30000, topics=[other_topic], owned=[])
    r = beat("m.reaches_the_new_epoch", "m", r.member_epoch, owned=held)
    now = r.member_epoch
    commit("commit.at_assignment_epoch", assigned_at, {topic: {0: 1, 1: 1}})
    commit("commit.before_assignment_epoch", assigned_at - 1, {topic: {0: 2}})
    commit("commit.newer_than_member", now + 1, {topic: {0: 3}})
    commit("commit.with_a_partition_not_held", assigned_at, {topic: {0: 4}, other_topic: {0: 4}})
    commit("commit.at_member_epoch_not_held", now, {other_topic: {0: 5}})
    side.call(
        OFFSET_FETCH,
        9,
        fetch_groups_req({group: {topic: [0, 1]}}, member_id="m", member_epoch=assigned_at),
        step="fetch.older_epoch",
    )
    side.call(
        OFFSET_FETCH,
        9,
        fetch_groups_req({group: {topic: [0, 1]}}, member_id="m", member_epoch=now),
        step="fetch.member_epoch",
    )


def test_older_epoch_commits_answer_as_on_kafka(diff_shared: Runner) -> None:
    outcome = diff_shared(older_epoch_commits)
    assert not outcome.explained
    steps = {e.step: e.response for e in outcome.kafka.exchanges}

    def codes(step: str) -> set[int]:
        return {p.error_code for t in steps[step].topics for p in t.partitions}

    assert codes("commit.at_assignment_epoch") == {0}
    stale = 113  # STALE_MEMBER_EPOCH
    assert codes("commit.before_assignment_epoch") == {stale}
    assert codes("commit.newer_than_member") == {stale}
    assert codes("commit.with_a_partition_not_held") == {stale}
    assert codes("commit.at_member_epoch_not_held") == {0}
    assert steps["fetch.older_epoch"].groups[0].error_code == stale
    assert steps["fetch.member_epoch"].groups[0].error_code == 0


def newly_assigned_partitions(side: Side) -> None:
    topic = side.name("kip1251-new")
    side.create_topic(topic, 4)
    wait_topic_assignable(side, topic, 4)
    group = side.name("kip1251-new")
    side.wait_coordinator(group)
    synchronous_assignment(side, group)

    def beat(step: str, mid: str, epoch: int, **kw: Any) -> Any:
        return side.call(CG_HEARTBEAT, 1, cg_req(group, mid, epoch, **kw), step=step)

    a = beat("a.joins", "a", 0, rebalance=30000, topics=[topic], owned=[])
    a_owned = _owned(a, [])
    b = beat("b.joins", "b", 0, rebalance=30000, topics=[topic], owned=[])
    b_owned = _owned(b, [])
    # a is told what to give up, acknowledges, and reaches b's epoch; b then gets the rest.
    a2 = beat("a.told", "a", a.member_epoch, owned=a_owned)
    a_owned = _owned(a2, a_owned)
    a3 = beat("a.acknowledges", "a", a2.member_epoch, owned=a_owned)
    a_owned = _owned(a3, a_owned)
    b2 = beat("b.gets_the_released", "b", b.member_epoch, owned=b_owned)
    b_owned = _owned(b2, b_owned)

    def commit(step: str, mid: str, epoch: int, owned: list[Any]) -> None:
        parts = {p: 1 for _, ps in owned for p in ps}
        side.call(
            OFFSET_COMMIT,
            9,
            commit_req(group, {topic: parts}, generation=epoch, member_id=mid),
            step=step,
        )

    # a kept its partitions from its first epoch; b's were assigned at the new one.
    commit("a.commits_kept_at_its_first_epoch", "a", a.member_epoch, a_owned)
    commit("b.commits_at_an_epoch_before_its_partitions", "b", a.member_epoch, b_owned)


def test_newly_assigned_partitions_answer_as_on_kafka(diff_shared: Runner) -> None:
    outcome = diff_shared(newly_assigned_partitions)
    assert not outcome.explained
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    kept = steps["a.commits_kept_at_its_first_epoch"]
    assert {p.error_code for t in kept.topics for p in t.partitions} == {0}
    new = steps["b.commits_at_an_epoch_before_its_partitions"]
    assert {p.error_code for t in new.topics for p in t.partitions} == {113}
