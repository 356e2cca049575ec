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

from collections.abc import Callable, Mapping

from coordinator.group.consumer.assignors.spec import (
    GroupSpec,
    MemberSpec,
    PartitionAssignor,
    SubscriptionType,
)
from coordinator.group.consumer.group import ConsumerGroup
from coordinator.group.consumer.member import Assignment, ConsumerGroupMember
from coordinator.group.consumer.spec_cache import SpecCache
from coordinator.group.topics import TopicsImage

__all__ = ["ImageTopics", "TargetBuilder", "build_target"]

TargetBuilder = Callable[..., tuple[dict[str, Assignment], list[tuple[str, Assignment]]]]
"""``build_target``'s type: what ``ConsumerGroupManager.compute_target`` holds (the metrics
wrap it in a timer)."""


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
    cache: SpecCache | None = None,
    topics_version: int = 0,
) -> tuple[dict[str, Assignment], list[tuple[str, Assignment]]]:
    """(every member's new target, the (member, target) pairs to write, in member order).

    ``regex_topics``: what each regular expression resolves to, as the caller sees it;
    ``cache``/``topics_version``: reuse of earlier member specs (``SpecCache``).
    """
    if cache is None:
        cache = SpecCache()
    if cache.topics_version != topics_version:
        cache.topics_version = topics_version
        cache.ids.clear()
        cache.specs.clear()
    members: dict[str, ConsumerGroupMember] = {}
    previous: dict[str, Assignment] = {}
    target = group.target
    for mid, m in group.members.items():
        if mid in removed or mid == replaced_member_id:
            continue
        members[mid] = m
        previous[mid] = target.get(mid, _EMPTY)
    if updated is not None:
        members[updated.member_id] = updated
        if replaced_member_id is not None and updated.member_id not in target:
            previous[updated.member_id] = target.get(replaced_member_id, _EMPTY)
        else:
            previous.setdefault(updated.member_id, target.get(updated.member_id, _EMPTY))
    ids_cache = cache.ids
    old_specs = cache.specs
    specs: dict[str, MemberSpec] = {}
    for mid, m in members.items():
        resolved = regex_topics.get(m.subscribed_topic_regex) if m.subscribed_topic_regex else None
        key = (m.subscribed_topic_names, resolved)
        ids = ids_cache.get(key)
        if ids is None:
            names = (
                m.subscribed_topic_names
                if resolved is None
                else m.subscribed_topic_names | resolved
            )
            found = []
            for name in names:
                t = topics.topic(name)
                if t is not None:
                    found.append(t.topic_id)
            ids = ids_cache[key] = frozenset(found)
        prev = previous[mid]
        spec = old_specs.get(mid)
        if (
            spec is None
            or spec.subscribed_topic_ids is not ids
            or spec.assigned_partitions is not prev
            or spec.rack_id != m.rack_id
            or spec.instance_id != m.instance_id
        ):
            spec = MemberSpec(
                subscribed_topic_ids=ids,
                assigned_partitions=prev,
                rack_id=m.rack_id,
                instance_id=m.instance_id,
            )
        specs[mid] = spec
    cache.specs = specs
    # The assignors read who held what from the previous targets; the group's inverted
    # target is what GroupSpec exposes (a replaced static member's partitions count as
    # assigned either way).
    group_spec = GroupSpec(
        members=specs, subscription_type=subscription_type, inverted_target=group.target_owner
    )
    result = assignor.assign(group_spec, ImageTopics(topics))
    new_targets: dict[str, Assignment] = {}
    changed: list[tuple[str, Assignment]] = []
    for mid in members:
        # The assignors' contract (assignors/spec.py): frozensets, no empty topic.
        new = result.get(mid, _EMPTY)
        old = target.get(mid)
        if old is not None and old == new:
            new = old  # keep the stored object: unchanged specs stay reusable
        else:
            changed.append((mid, new))
        new_targets[mid] = new
    return new_targets, changed


_EMPTY: Assignment = {}
