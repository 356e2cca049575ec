"""The built-in server-side assignors of consumer groups (KIP-848), by name.

How this works: ``BUILTIN_ASSIGNORS`` lists Kafka's built-ins in Kafka's order
(``GroupCoordinatorConfig.CONSUMER_GROUP_BUILTIN_ASSIGNORS``): ``uniform`` first, the
default when no member names one, then ``range``. ``assignor(name)`` resolves a member's
``ServerAssignor`` (or a ``group.consumer.assignors`` entry); an unknown name gives None.
The interface every assignor implements is in ``spec.py``.
"""

from __future__ import annotations

from .range import RangeAssignor
from .spec import PartitionAssignor
from .uniform import UniformAssignor

__all__ = ["BUILTIN_ASSIGNORS", "RangeAssignor", "UniformAssignor", "assignor"]

BUILTIN_ASSIGNORS: dict[str, PartitionAssignor] = {
    "uniform": UniformAssignor(),
    "range": RangeAssignor(),
}


def assignor(name: str) -> PartitionAssignor | None:
    """The built-in assignor called ``name``, or None."""
    return BUILTIN_ASSIGNORS.get(name)
