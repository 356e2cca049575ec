"""Share sessions (Kafka's ShareSessionCache), pure.

How this works: a share consumer keeps one session per broker, keyed by (group id, member
id): the partitions it fetches, the epoch the next request must carry, and the connection
that opened it. ShareFetch and ShareAcknowledge share the epoch counter:

* epoch 0 (ShareFetch only) replaces any session of the key with a new one holding the
  request's partitions, next epoch 1; the cache full (``group.share.max.share.sessions``)
  is SHARE_SESSION_LIMIT_REACHED;
* epoch -1 closes: no session is SHARE_SESSION_NOT_FOUND; the session ends after the answer
  (the runtime then releases the member's records);
* any other epoch must equal the session's (SHARE_SESSION_NOT_FOUND without one,
  INVALID_SHARE_SESSION_EPOCH otherwise) and moves it on by one, wrapping from
  Integer.MAX_VALUE to 1, whatever later happens to the request's partitions.

There is no idle eviction: a session ends when closed, replaced, or when its connection
closes (``connection_closed``); a session replaced over a newer connection is not ended by
its old connection's close.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1

SessionKey = tuple[str, str]  # group id, member id
TopicPartition = tuple[bytes, int]  # topic id, partition


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


@dataclass(slots=True, eq=False)
class ShareSession:
    key: SessionKey
    conn_id: int
    epoch: int = 1  # what the next request must carry
    # The session's partitions in the order they were added; True: must appear in the next
    # incremental response (newly added).
    partitions: dict[TopicPartition, bool] = field(default_factory=dict)


class ShareSessionCache:
    """The sessions of this broker (see the module docstring)."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[SessionKey, ShareSession] = {}

    def open(
        self, key: SessionKey, conn_id: int, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, ShareSession | None, ShareSession | None]:
        """Epoch 0: (error, the new session, the one it replaced)."""
        old = self.sessions.pop(key, None)
        if len(self.sessions) >= self.max_sessions:
            if old is not None:
                self.sessions[key] = old
            return ErrorCode.SHARE_SESSION_LIMIT_REACHED, None, None
        session = ShareSession(key, conn_id, partitions=dict.fromkeys(partitions, False))
        self.sessions[key] = session
        return ErrorCode.NO_ERROR, session, old

    def use(self, key: SessionKey, epoch: int) -> tuple[ErrorCode, ShareSession | None]:
        """A request with ``epoch`` != 0 on the key's session: the epoch checked (and moved
        on, unless final)."""
        session = self.sessions.get(key)
        if session is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None
        if epoch == FINAL_EPOCH:
            return ErrorCode.NO_ERROR, session
        if epoch != session.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
        session.epoch = next_epoch(session.epoch)
        return ErrorCode.NO_ERROR, session

    def close(self, session: ShareSession) -> bool:
        """End ``session`` if it is still the key's; whether it was."""
        if self.sessions.get(session.key) is session:
            del self.sessions[session.key]
            return True
        return False

    def connection_closed(self, conn_id: int) -> list[ShareSession]:
        """The sessions opened over ``conn_id``, ended."""
        gone = [s for s in self.sessions.values() if s.conn_id == conn_id]
        for s in gone:
            del self.sessions[s.key]
        return gone

    def group_has_sessions(self, group_id: str) -> bool:
        return any(k[0] == group_id for k in self.sessions)
