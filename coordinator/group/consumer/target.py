"""Computing a consumer group's target assignment (Kafka's ``TargetAssignmentBuilder``).

How this works: the target is recomputed when the group epoch has moved past the epoch the
stored target was computed for. Every member -- with the heartbeating member's update
applied, and a static member's replacement taking over the replaced member's place -- is
described to the assignor with the topic ids it subscribes to (names, plus what its regular
expression resolved to; topics that do not exist are left out) and its *previous target*,
which is what lets the assignor keep partitions where they are. The result is written as
one target-member record per member whose target changed (new members always) and one
target-metadata record carrying the new assignment epoch.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.group.consumer.assignors.spec import (
    GroupSpec,
    MemberSpec,
    PartitionAssignor,
    SubscriptionType,
)
from coordinator.group.consumer.group import ConsumerGroup
from coordinator.group.consumer.member import Assignment, ConsumerGroupMember, freeze
from coordinator.group.topics import TopicsImage

__all__ = ["ImageTopics", "build_target"]


class ImageTopics:
    """The assignors' view of the topics (``SubscribedTopics``) over a TopicsImage."""

    __slots__ = ("_image",)

    def __init__(self, image: TopicsImage) -> None:
        self._image = image

    def num_partitions(self, topic_id: bytes) -> int:
        t = self._image.topic_by_id(topic_id)
        return -1 if t is None else t.num_partitions

    def racks_for_partition(self, topic_id: bytes, partition: int) -> frozenset[str]:
        t = self._image.topic_by_id(topic_id)
        if t is None or partition >= len(t.partition_racks):
            return frozenset()
        return frozenset(t.partition_racks[partition])


def build_target(
    group: ConsumerGroup,
    updated: ConsumerGroupMember | None,
    replaced_member_id: str | None,
    removed: frozenset[str],
    topics: TopicsImage,
    assignor: PartitionAssignor,
    subscription_type: SubscriptionType,
    regex_topics: Mapping[str, frozenset[str]],
) -> tuple[dict[str, Assignment], list[tuple[str, Assignment]]]:
    """(every member's new target, the (member, target) pairs to write, in member order).

    ``regex_topics``: what each regular expression resolves to, as the caller sees it.
    """
    members: dict[str, ConsumerGroupMember] = {}
    previous: dict[str, Assignment] = {}
    for mid, m in group.members.items():
        if mid in removed or mid == replaced_member_id:
            continue
        members[mid] = m
        previous[mid] = group.target.get(mid, {})
    if updated is not None:
        members[updated.member_id] = updated
        if replaced_member_id is not None and updated.member_id not in group.target:
            previous[updated.member_id] = group.target.get(replaced_member_id, {})
        else:
            previous.setdefault(updated.member_id, group.target.get(updated.member_id, {}))
    specs: dict[str, MemberSpec] = {}
    for mid, m in members.items():
        names = m.subscribed_topic_names
        if m.subscribed_topic_regex:
            names = names | regex_topics.get(m.subscribed_topic_regex, frozenset())
        ids = []
        for name in names:
            t = topics.topic(name)
            if t is not None:
                ids.append(t.topic_id)
        specs[mid] = MemberSpec(
            subscribed_topic_ids=frozenset(ids),
            assigned_partitions=previous[mid],
            rack_id=m.rack_id,
            instance_id=m.instance_id,
        )
    inverted: dict[bytes, dict[int, str]] = {}
    for mid, parts in previous.items():
        for topic_id, ps in parts.items():
            owners = inverted.setdefault(topic_id, {})
            for p in ps:
                owners[p] = mid
    spec = GroupSpec(members=specs, subscription_type=subscription_type, inverted_target=inverted)
    result = assignor.assign(spec, ImageTopics(topics))
    new_targets: dict[str, Assignment] = {}
    changed: list[tuple[str, Assignment]] = []
    for mid in members:
        new = freeze(result.get(mid, {}))
        new_targets[mid] = new
        if mid not in group.target or group.target[mid] != new:
            changed.append((mid, new))
    return new_targets, changed
