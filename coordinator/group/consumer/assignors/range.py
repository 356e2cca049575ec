"""The ``range`` server-side assignor (Kafka's ``RangeAssignor``): contiguous ranges per topic.

How this works: members are sorted -- those with an instance id (static members) first,
by instance id, then the others by member id, both compared as Java's ``String.compareTo``
does (UTF-16 code units). For each topic with n partitions and s subscribers, every
subscriber gets n // s partitions and the first n % s subscribers one more, as the next
contiguous range ``[next, next + quota)`` in that member order. Homogeneous groups use the
first member's topics with s = all members; heterogeneous groups count each topic's own
subscribers and each member walks only its own topics. Topics are independent, so topics
with equal partition counts are co-partitioned (member k gets the same partition ids of
each), which is what range is for.

Like Kafka's, it never reads the previous target: the same members and metadata give the
same result, which is all the stickiness it has. It ignores racks (as Kafka does). A topic
whose ``num_partitions`` is -1 is skipped (Kafka raises, unreachably: unknown topics are
dropped before the assignor runs). Every member of the spec appears in the result.
"""

from __future__ import annotations

from collections.abc import Mapping

from .spec import Assignment, GroupSpec, MemberSpec, SubscribedTopics, SubscriptionType

__all__ = ["RangeAssignor"]


def _java_order(s: str) -> bytes:
    # UTF-16BE bytes compare exactly as Java compares UTF-16 code units.
    return s.encode("utf-16-be", "surrogatepass")


def sorted_member_ids(members: Mapping[str, MemberSpec]) -> list[str]:
    """Kafka's ``sortMemberIds``: static members by instance id, then the rest by member id."""
    static: list[tuple[bytes, str]] = []
    dynamic: list[tuple[bytes, str]] = []
    for member_id, member in members.items():
        if member.instance_id is not None:
            static.append((_java_order(member.instance_id), member_id))
        else:
            dynamic.append((_java_order(member_id), member_id))
    static.sort()
    dynamic.sort()
    return [m for _, m in static] + [m for _, m in dynamic]


class RangeAssignor:
    """Kafka's ``range`` assignor."""

    name = "range"

    def assign(self, spec: GroupSpec, topics: SubscribedTopics) -> dict[str, Assignment]:
        members = spec.members
        if not members:
            return {}
        order = sorted_member_ids(members)
        result: dict[str, Assignment] = {m: {} for m in order}
        # Ranges repeat across topics with equal counts: share the frozensets.
        cache: dict[tuple[int, int], frozenset[int]] = {}
        if spec.subscription_type is SubscriptionType.HOMOGENEOUS:
            for t in members[order[0]].subscribed_topic_ids:
                n = topics.num_partitions(t)
                if n > 0:
                    _deal_topic(t, n, order, result, cache)
        else:
            subscribers: dict[bytes, list[str]] = {}
            for m in order:
                for t in members[m].subscribed_topic_ids:
                    subscribers.setdefault(t, []).append(m)
            for t, subs in subscribers.items():
                n = topics.num_partitions(t)
                if n > 0:
                    _deal_topic(t, n, subs, result, cache)
        return result


def _deal_topic(
    t: bytes,
    n: int,
    subscribers: list[str],
    result: dict[str, Assignment],
    cache: dict[tuple[int, int], frozenset[int]],
) -> None:
    min_quota, extra = divmod(n, len(subscribers))
    start = 0
    for m in subscribers:
        end = start + min_quota + (1 if extra > 0 else 0)
        if extra > 0:
            extra -= 1
        if end > n:
            end = n
        if start >= end:
            # Every later subscriber's range is empty too.
            break
        key = (start, end)
        parts = cache.get(key)
        if parts is None:
            parts = cache[key] = frozenset(range(start, end))
        result[m][t] = parts
        start = end
