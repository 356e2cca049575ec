"""Share groups' state initialization: the runtime's side of the deferred handshake (KIP-932).

How this works: share groups keep their share-partitions' state in the share coordinator,
which the pure group core cannot call. A heartbeat that records partitions as initializing
reports ``ShareStateInitializing``; ``on_events`` starts, for each, a task that calls
``SharePersister.initialize`` (start offset -1: the leader applies
``share.auto.offset.reset`` when it first loads the partition) and hands the answer back to
``GroupShard.share_state_initialized``, whose Result the runtime applies like any other --
Kafka's GroupCoordinatorService does the same from a timer task after the heartbeat's write.
The answer only moves partitions the group still records as initializing, so it may arrive
before or after the heartbeat's records are durable, or after a rebuild, without harm; a
refused partition leaves *initializing* and a later heartbeat tries again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from coordinator.group.events import GroupEvent, ShareStateInitializing
from protocol.errors import ErrorCode
from storage.interface import kafka_uuid

__all__ = ["on_events"]

log = logging.getLogger("kgc.groups")


def on_events(runtime: Any, events: Iterable[GroupEvent]) -> None:
    """Start the initialization of every ``ShareStateInitializing`` among ``events``."""
    for event in events:
        if isinstance(event, ShareStateInitializing):
            task = asyncio.ensure_future(_initialize(runtime, event))
            runtime.background.add(task)
            task.add_done_callback(runtime.background.discard)


async def _initialize(runtime: Any, event: ShareStateInitializing) -> None:
    done: dict[bytes, list[int]] = {}
    failed: dict[bytes, list[int]] = {}
    for topic_id, name, partitions in event.topics:
        try:
            errors = await runtime.share_persister.initialize(
                event.group_id, kafka_uuid(topic_id), partitions, event.state_epoch, -1
            )
        except Exception:
            log.exception(
                "initializing the share state of group %s, topic %s failed", event.group_id, name
            )
            errors = {}
        for p in partitions:
            ok = errors.get(p, ErrorCode.UNKNOWN) == ErrorCode.NO_ERROR
            (done if ok else failed).setdefault(topic_id, []).append(p)
    if failed:
        log.warning(
            "share group %s: the share coordinator refused to initialize %s",
            event.group_id,
            {kafka_uuid(t): ps for t, ps in failed.items()},
        )
    try:
        result = runtime.shard.share_state_initialized(
            event.group_id, done, failed, runtime.clock()
        )
    except Exception:
        log.exception("recording the share state of group %s failed", event.group_id)
        return
    runtime.apply(result)
