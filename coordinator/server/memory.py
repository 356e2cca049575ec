"""Request memory bounded across connections (Kafka's ``queued.max.request.bytes`` and
``queued.max.requests``).

How this works: a frame's size is reserved from the shared pool as soon as its 4-byte size
has been read, before its body is buffered; a request gives its bytes back once it is
answered. A connection whose next frame does not fit stops being read (its client's data
waits in the kernel) until memory is given back. Frames up to 1 MiB are admitted while the
pool is not yet full (Kafka's non-strict ``SimpleMemoryPool``); larger ones share three
quarters of it, so a few huge produce requests (or clients sending them slowly) never
starve heartbeats and commits, and one of them is always admitted when no other is queued,
so a request larger than the whole pool is still served. Requests parked in a purgatory (a
JoinGroup waiting for the rebalance, a SyncGroup waiting for the leader, a long-polling
Fetch) give their place back when their handler returns, as in Kafka, where such a request
has left the request queue: they wait on other clients, and holding their place could
stall a large rebalance (``connection.PURGATORY_APIS``).

A waiter is anything ``Resumable`` (a connection): the queue only offers it room again, so
this module knows nothing of the server above it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

LARGE_REQUEST_BYTES = 1 << 20  # frames above this may fill only LARGE_SHARE of the pool
LARGE_SHARE = 0.75


class Resumable(Protocol):
    """A waiter for room in the queue: told to ``resume`` reading when there may be room,
    unless it has ``closed`` meanwhile."""

    closed: bool

    def resume(self) -> None: ...


class RequestQueue:
    """The memory and the number of requests read but not yet answered, shared by all
    connections (Kafka's ``queued.max.request.bytes`` and ``queued.max.requests``).

    Frames of at most 1 MiB (heartbeats, commits, ordinary produce batches) are admitted
    while the pool is not full, as Kafka's non-strict pool admits them, and always while
    they take less than their own quarter of it. Larger frames are admitted only if they
    fit, within three quarters of the pool and within the whole; a single one that does not
    fit is admitted anyway when no other large frame is queued and the small ones keep to
    their quarter (so a request larger than the pool is still served). Queued bytes thus
    stay under the pool plus 1 MiB, or a quarter of the pool plus one request
    (``socket.request.max.bytes``), whichever is more.

    ``max_bytes`` < 0 means no byte limit (Kafka's -1). Connections that cannot be admitted
    wait in ``waiters`` and are offered room again, in order, when anything is given back.
    """

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.large_limit = int(max_bytes * LARGE_SHARE)
        self.small_share = max_bytes - self.large_limit
        self.large = 0  # bytes reserved by frames over LARGE_REQUEST_BYTES
        self.small = 0  # bytes reserved by the others
        self.requests = 0  # unanswered requests outside a purgatory
        self.waiters: deque[Resumable] = deque()
        self._wake_scheduled = False

    def admits(self, size: int) -> bool:
        if self.requests >= self.max_requests:
            return False
        if self.max_bytes < 0:
            return True
        large, small = self.large, self.small
        if size > LARGE_REQUEST_BYTES:
            if large + size <= self.large_limit and large + small + size <= self.max_bytes:
                return True
            return not large and small < self.small_share
        return small < self.small_share or large + small < self.max_bytes

    def take(self, size: int) -> None:
        if size > LARGE_REQUEST_BYTES:
            self.large += size
        else:
            self.small += size

    def give_back(self, size: int, requests: int = 0) -> None:
        if size > LARGE_REQUEST_BYTES:
            self.large -= size
        else:
            self.small -= size
        self.requests -= requests
        if self.waiters and not self._wake_scheduled:
            # Not from inside the caller's stack: it may be a connection's frame loop.
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def wait(self, conn: Resumable) -> None:
        self.waiters.append(conn)

    def _wake(self) -> None:
        self._wake_scheduled = False
        waiting, self.waiters = self.waiters, deque()
        for conn in waiting:
            if not conn.closed:
                conn.resume()  # waits again, appended in the same order, if still no room
