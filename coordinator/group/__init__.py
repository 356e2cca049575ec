"""The pure (sans-IO) group coordinator: see ``shard.GroupShard``.

What all group types share lives here (the shard, offsets and their retention, partition
status, timers, events, the Result type); the classic protocol lives in ``classic/``.
"""

from coordinator.group.classic.state import ClassicGroupState, IllegalStateTransition
from coordinator.group.shard import GroupShard
from coordinator.group.types import GroupConfig, RequestContext, Result

__all__ = [
    "ClassicGroupState",
    "GroupConfig",
    "GroupShard",
    "IllegalStateTransition",
    "RequestContext",
    "Result",
]
