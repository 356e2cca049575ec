"""States, subscription parsing and observability."""

import pytest
from support.group_context import GroupContext, subscription

from coordinator.group import ClassicGroupState, IllegalStateTransition
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.subscription import parse_subscription_topics
from coordinator.group.events import GenerationCompleted, GroupStable


def test_state_values_are_kafkas_names() -> None:
    assert [s.value for s in ClassicGroupState] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]
    for s in ClassicGroupState:
        assert "action:" in (s.__doc__ or "") and "transition:" in (s.__doc__ or "")


@pytest.mark.parametrize(
    ("start", "target"),
    [
        (ClassicGroupState.EMPTY, ClassicGroupState.STABLE),
        (ClassicGroupState.EMPTY, ClassicGroupState.COMPLETING_REBALANCE),
        (ClassicGroupState.STABLE, ClassicGroupState.EMPTY),
        (ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.EMPTY),
        (ClassicGroupState.PREPARING_REBALANCE, ClassicGroupState.STABLE),
        (ClassicGroupState.DEAD, ClassicGroupState.EMPTY),
    ],
)
def test_illegal_transitions_raise(start: ClassicGroupState, target: ClassicGroupState) -> None:
    g = ClassicGroup("g", state=start)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(target, 0)
    assert g.state is start


def test_legal_transitions_record_previous_state_and_time() -> None:
    g = ClassicGroup("g")
    g.transition_to(ClassicGroupState.PREPARING_REBALANCE, 5)
    g.transition_to(ClassicGroupState.COMPLETING_REBALANCE, 6)
    g.transition_to(ClassicGroupState.STABLE, 7)
    g.transition_to(ClassicGroupState.DEAD, 8)
    assert (g.previous_state, g.state, g.state_timestamp_ms) == (
        ClassicGroupState.STABLE,
        ClassicGroupState.DEAD,
        8,
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_topics_parsed_for_every_version(version: int) -> None:
    data = subscription("a", "b", user_data=b"xyz", version=version)
    assert parse_subscription_topics(data) == frozenset({"a", "b"})


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\x00\x00\x00\x00\x00\x05",
        b"\xff\xff\x00\x00\x00\x00",
        b"\x00\x00\x00\x00\x00\x01\x00\x09ab",
        b"\x00\x00\xff\xff\xff\xff",
    ],
)
def test_garbage_subscription_is_unknown_not_an_error(data: bytes) -> None:
    assert parse_subscription_topics(data) is None


def test_events_and_counters_explain_each_rebalance() -> None:
    h = GroupContext()
    (a, b), gen = h.stable_group("g", 2)
    assert h.shard.rebalances["join"] == 1
    done = [e for e in h.events if isinstance(e, GenerationCompleted)]
    assert [(e.generation, e.members, e.protocol) for e in done] == [(gen, 2, "range")]
    assert done[0].reason.startswith("new member")
    assert [(e.generation, e.members) for e in h.events if isinstance(e, GroupStable)] == [(gen, 2)]
    h.leave("g", (b, None))
    assert h.shard.rebalances["leave"] == 1
    h.reply(h.join("g", a))
    assert any(
        f"group g generation {gen + 1}: members left the group: {b}; 1 members, protocol range" in e
        for e in h.event_lines()
    )
