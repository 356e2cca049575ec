"""Share groups (KIP-932) over the pure group core: heartbeats, describes, the share coordinator's answers.

How this works: ``ShareContext`` wraps a ``GroupContext`` (fake clock, a topics image, every
record replayed into a mirror shard) and plays the runtime's part for share groups: the
``ShareStateInitializing`` events a heartbeat reports are collected in ``initializing``,
and ``complete_init`` answers them as the share coordinator would (all partitions
initialized, or some refused), feeding ``GroupShard.share_state_initialized`` as the
runtime does. ``hb`` sends a ShareGroupHeartbeat and returns the response.
"""

from __future__ import annotations

from typing import Any

from coordinator.group import GroupConfig
from coordinator.group.events import ShareStateInitializing
from protocol.messages import share_group_describe as sgd
from protocol.messages import share_group_heartbeat as sgh
from support.group_context import GroupContext

__all__ = ["ShareContext"]

_UNSET: Any = object()


class ShareContext:
    def __init__(self, config: GroupConfig | None = None, **topics: int) -> None:
        self.gc = GroupContext.with_topics(config, **topics)
        self.shard = self.gc.shard
        self.initializing: list[ShareStateInitializing] = []
        self._seen_events = 0

    @property
    def now(self) -> int:
        return self.gc.now

    def _collect(self) -> None:
        for e in self.gc.events[self._seen_events :]:
            if isinstance(e, ShareStateInitializing):
                self.initializing.append(e)
        self._seen_events = len(self.gc.events)

    def hb(
        self,
        group: str,
        member_id: str,
        epoch: int,
        topics: list[str] | Any | None = _UNSET,
        *,
        rack: str | None = None,
        client_id: str | None = None,
    ) -> sgh.ShareGroupHeartbeatResponse:
        if topics is _UNSET:
            topics = None
        req = sgh.ShareGroupHeartbeatRequest(
            group_id=group,
            member_id=member_id,
            member_epoch=epoch,
            rack_id=rack,
            subscribed_topic_names=topics,
        )
        ctx = self.gc.ctx(1, client_id)
        self.gc.apply(self.shard.share_group_heartbeat(ctx, req, self.gc.now))
        self._collect()
        reply = self.gc.replies[ctx.reply_to]
        assert isinstance(reply, sgh.ShareGroupHeartbeatResponse)
        return reply

    def describe(self, *groups: str) -> list[sgd.DescribedGroup]:
        ctx = self.gc.ctx(1)
        out = self.shard.share_group_describe(
            ctx, sgd.ShareGroupDescribeRequest(group_ids=list(groups)), self.gc.now
        )
        return out.replies[0][1].groups  # type: ignore[attr-defined,no-any-return]

    def complete_init(self, fail: dict[str, list[int]] | None = None) -> None:
        """Answer every pending initialization as the share coordinator: the partitions
        named in ``fail`` (topic name -> partitions) are refused, the others initialized."""
        fail = fail or {}
        pending, self.initializing = self.initializing, []
        for e in pending:
            done: dict[bytes, list[int]] = {}
            failed: dict[bytes, list[int]] = {}
            for tid, name, parts in e.topics:
                bad = [p for p in parts if p in fail.get(name, [])]
                good = [p for p in parts if p not in bad]
                if good:
                    done[tid] = good
                if bad:
                    failed[tid] = bad
            self.gc.apply(self.shard.share_state_initialized(e.group_id, done, failed, self.now))
        self._collect()

    def sleep(self, ms: int) -> None:
        self.gc.sleep(ms)
        self._collect()

    def assigned(self, resp: sgh.ShareGroupHeartbeatResponse) -> dict[str, list[int]] | None:
        """The response's assignment by topic name (None: not sent)."""
        if resp.assignment is None:
            return None
        return {
            self.gc.name(tp.topic_id): sorted(tp.partitions)
            for tp in resp.assignment.topic_partitions
        }
