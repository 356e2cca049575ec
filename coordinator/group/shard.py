"""GroupShard: the pure classic-group coordinator, one object per node.

How this works
--------------
``GroupShard`` assembles the concern-specific mixins -- join (``join.py``),
sync (``sync.py``), heartbeat and leave (``heartbeat.py``), offsets
(``offsets.py``), describe/list/delete (``admin.py``), log replay and
partition loading (``replay.py``) -- on top of the rebalance engine
(``rebalance.py``) and shared state (``base.py``).

It performs no I/O and reads no clock: each method takes ``now_ms`` and
returns a ``Result`` (records to append, replies to release once those are
durable, timers to arm or cancel, log lines).  Timers come back through
``on_timer(key, now_ms)``.  Because everything is a function of its inputs,
a test can drive it with a fake clock and replay its records into a second
shard to check they rebuild the same state.
"""

from __future__ import annotations

from coordinator.group.base import TimerKind
from coordinator.group.classic.admin import AdminMixin
from coordinator.group.classic.heartbeat import HeartbeatMixin
from coordinator.group.classic.join import JoinMixin
from coordinator.group.classic.sync import SyncMixin
from coordinator.group.replay import ReplayMixin
from coordinator.group.types import GroupConfig, RequestContext, Result

__all__ = ["GroupConfig", "GroupShard", "RequestContext", "Result"]


class GroupShard(JoinMixin, SyncMixin, HeartbeatMixin, AdminMixin, ReplayMixin):
    def on_timer(self, key: str, now_ms: int) -> Result:
        out = Result()
        if self._armed.pop(key, None) is None:
            return out  # cancelled, or never ours
        timer = self._timers[key]  # armed implies wanted: ``_cancel`` drops both
        if now_ms < timer.deadline_ms:  # the deadline moved later since the timer was armed
            self._armed[key] = timer.deadline_ms
            out.timers.append((key, timer.deadline_ms))
            return out
        del self._timers[key]
        action = timer.action
        if action.kind is TimerKind.EXPIRE_OFFSETS:
            self._expire_offsets(out, now_ms)
            return out
        group = self.groups.get(action.group_id)
        if action.kind is TimerKind.HEARTBEAT:
            self._expire_heartbeat(out, action.group_id, action.member_id, now_ms)
        elif action.kind is TimerKind.PENDING:
            self._expire_pending_member(out, action.group_id, action.member_id, now_ms)
        elif group is None:
            pass
        elif action.kind is TimerKind.JOIN:
            self._complete_join(out, group, now_ms)
        elif action.kind is TimerKind.INITIAL_JOIN:
            self._initial_join_timer(out, group, now_ms)
        elif action.kind is TimerKind.SYNC:
            self._expire_pending_sync(out, group, action.generation, now_ms)
        return out
