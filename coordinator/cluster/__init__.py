"""Cluster mode: node membership, partition leases and who owns what (on PostgreSQL).

``Cluster`` (``membership``) registers this node, heartbeats on a dedicated connection,
claims and hands off partition leases as nodes come and go, and tells the node what to
load and unload through its callbacks; ``ownership.assign`` is the placement rule.
"""

from coordinator.cluster.membership import Cluster, NodeIdInUseError, NodeInfo

__all__ = ["Cluster", "NodeIdInUseError", "NodeInfo"]
