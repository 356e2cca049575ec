"""SpecCache: the member specs a group's last target computation described, kept for the next.

How this works: ``consumer/target.py`` reads and refills the cache of the group it computes
a target for; the group only owns it (``ConsumerGroup.spec_cache``), as soft state that is
never written to the log.  It lives apart from both so that the target builder imports the
group and never the reverse.
"""

from __future__ import annotations

from coordinator.group.consumer.assignors.spec import MemberSpec

__all__ = ["SpecCache"]


class SpecCache:
    """What the last target computations of a group described, kept to be reused.

    A group of N members computes a target once per epoch bump, and N members joining bump
    it N times: describing every member afresh each time makes joins cost N^2. Members whose
    subscription, previous target, rack and instance id are unchanged reuse their spec, and
    members subscribing to the same topics share one frozenset of ids (which the uniform
    assignor compares by identity). Soft state: dropped when topics change.
    """

    __slots__ = ("ids", "specs", "topics_version")

    def __init__(self) -> None:
        self.topics_version = -1
        self.ids: dict[tuple[frozenset[str], frozenset[str] | None], frozenset[bytes]] = {}
        self.specs: dict[str, MemberSpec] = {}
