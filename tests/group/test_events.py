"""Typed events and their one rendering as a log line (the lines kgc logged before)."""

import pytest

from coordinator.group.events import (
    GenerationCompleted,
    GroupDeleted,
    GroupEmptied,
    GroupEvent,
    GroupStable,
    JoinPhaseExtended,
    MembersRemoved,
    OffsetsExpired,
    PartitionLoaded,
    PendingMemberExpired,
    RebalanceStarted,
    StaticMemberReplaced,
    TopicOffsetsDeleted,
    render,
)


@pytest.mark.parametrize(
    ("event", "line"),
    [
        (
            RebalanceStarted("g", 3, "leave", "members left the group: m"),
            "group g preparing rebalance from generation 3 (leave): members left the group: m",
        ),
        (
            GenerationCompleted("g", 4, "new member m joined", 2, "range", "m"),
            "group g generation 4: new member m joined; 2 members, protocol range, leader m",
        ),
        (
            GroupEmptied("g", 5, "member m session expired"),
            "group g generation 5: member m session expired; now empty",
        ),
        (
            GroupStable("g", 4, "m", 2, ()),
            "group g generation 4 stable: leader m assigned 2 members",
        ),
        (
            GroupStable("g", 4, "m", 3, ("a", "b")),
            "group g generation 4 stable: leader m assigned 3 members; empty assignment for a, b",
        ),
        (
            MembersRemoved("g", ("a", "b")),
            "group g: removed dynamic members that did not rejoin: a, b",
        ),
        (JoinPhaseExtended("g"), "group g: no member rejoined; extending the join phase"),
        (PendingMemberExpired("g", "m"), "group g: pending member m never joined; forgotten"),
        (
            StaticMemberReplaced("g", "i", "old", "new"),
            "group g: static member i replaced old with new",
        ),
        (GroupDeleted("g"), "group g deleted"),
        (OffsetsExpired(0, ("g",)), "offset expiration: 0 offsets expired, groups deleted: g"),
        (OffsetsExpired(5, ()), "offset expiration: 5 offsets expired, groups deleted: none"),
        (TopicOffsetsDeleted("t", 4), "topic t deleted: 4 committed offsets removed"),
        (PartitionLoaded(7, 12), "offsets partition 7 loaded: 12 groups"),
    ],
)
def test_each_event_renders_as_its_log_line(event: GroupEvent, line: str) -> None:
    assert render(event) == line
