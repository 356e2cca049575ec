"""Pure (sans-IO) classic consumer-group coordinator: see ``shard.GroupShard``."""

from coordinator.group.classic.state import GroupState, IllegalStateTransition
from coordinator.group.shard import GroupShard
from coordinator.group.types import GroupConfig, RequestContext, Result

__all__ = [
    "GroupConfig",
    "GroupShard",
    "GroupState",
    "IllegalStateTransition",
    "RequestContext",
    "Result",
]
