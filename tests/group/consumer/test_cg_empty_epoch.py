"""A consumer group left empty records its assignment epoch at the new group epoch, as Kafka
4.4 does (KAFKA-20442; found by the differential suite: Kafka describes such a group with
assignment epoch = group epoch, kgc kept the last computed one)."""

from __future__ import annotations

from support.consumer_member import Member, settle
from support.group_context import GroupContext


def test_last_member_leaving_moves_the_assignment_epoch_along() -> None:
    c = GroupContext.with_topics(t=2)
    a, b = Member(c, "g", "a", ["t"]), Member(c, "g", "b", ["t"])
    a.join()
    b.join()
    settle([a, b])
    b.leave()
    (before,) = c.consumer_group_describe("g")
    assert before.group_state == "Reconciling" or before.group_epoch > before.assignment_epoch
    a.leave()
    (after,) = c.consumer_group_describe("g")
    assert after.group_state == "Empty"
    assert after.assignment_epoch == after.group_epoch == before.group_epoch + 1
    # ... and survives a replay of the log.
    replayed = c.replayed().consumer.groups["g"]
    assert replayed.assignment_epoch == replayed.group_epoch


def test_a_member_leaving_a_non_empty_group_leaves_the_target_to_the_next_heartbeat() -> None:
    c = GroupContext.with_topics(t=2)
    a, b = Member(c, "g", "a", ["t"]), Member(c, "g", "b", ["t"])
    a.join()
    b.join()
    settle([a, b])
    b.leave()
    (d,) = c.consumer_group_describe("g")
    assert d.group_epoch == d.assignment_epoch + 1
