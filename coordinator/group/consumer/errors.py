"""HeartbeatError: how a consumer-group heartbeat is refused, for every module that refuses one.

How this works: the heartbeat's steps (validation, the classic-group conversion in
``conversion.py``, the target and the reconciliation) raise it with the error code and message
the answer carries; ``heartbeat.consumer_group_heartbeat`` catches it and answers.
Nothing has been applied when it is raised, so the answer is all that happens.
"""

from __future__ import annotations

from protocol.errors import ErrorCode

__all__ = ["HeartbeatError"]


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
