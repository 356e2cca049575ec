"""The test context itself: one GroupContext serves classic and consumer groups side by side.

Kafka's GroupMetadataManagerTest does the same with its one test context: the builder, the
fake clock's ``sleep`` firing the timers, and the timer assertions hold for either type.
"""

from __future__ import annotations

from support.consumer_member import Member
from support.group_context import GroupContext

from coordinator.group import ClassicGroupState
from coordinator.group.timers import consumer_session_key, heartbeat_key


def test_one_context_runs_a_classic_and_a_consumer_group_on_one_clock() -> None:
    c = GroupContext.builder().with_topic("foo", 2).build()
    (m1, m2), _ = c.stable_group("classic", 2, session=10_000)
    c.assert_timer(heartbeat_key("classic", m1), 10_000)  # re-armed by its SyncGroup
    a = Member(c, "consumer", "a", ["foo"])
    a.join()
    c.assert_timer(consumer_session_key("consumer", "a"), 45_000)

    c.sleep(10_000)  # the classic members never heartbeat: their sessions end
    assert c.state("classic") is ClassicGroupState.EMPTY
    c.assert_no_timer(heartbeat_key("classic", m2))
    c.assert_timer(consumer_session_key("consumer", "a"), 35_000)
    a.beat()
    c.assert_timer(consumer_session_key("consumer", "a"), 45_000)
    c.assert_replay_equivalent()
    assert c.replayed().consumer.groups["consumer"].members.keys() == {"a"}
