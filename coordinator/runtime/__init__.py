"""The runtime: the loop, the clock, timers and the path to the log around the group core."""

from coordinator.runtime.group_runtime import GroupRuntime, error_response

__all__ = ["GroupRuntime", "error_response"]
