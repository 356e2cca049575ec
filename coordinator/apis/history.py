"""DescribeGroupHistory (kgc's own API, key 10000): a group's history, from its coordinator.

How this works: the request goes to the group's coordinator (FindCoordinator), as
OffsetFetch does; the handler reads the group's entries from its offsets partition's
history log (``coordinator.history.store``) between ``FromMs`` and ``ToMs``, oldest first,
and adds each partition's current committed offset, the time of its last commit and the
commits since its last change (what a stalled consumer looks like). The group must be
coordinated here and loaded (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS otherwise); a
group that neither exists nor has history is GROUP_ID_NOT_FOUND. Authorization is
OffsetFetch's: DESCRIBE on the group for the request, DESCRIBE on each topic for its
entries (the others are left out, as OffsetFetch leaves them out). Membership changes
name no topic and come with the group's DESCRIBE.

In cluster mode the history is the shared table ``kgc_group_history``
(``coordinator.history.table``): any node answers, from the table, with the offset and
membership changes; the group's coordinator adds its current offsets and their statuses
(elsewhere ``Partitions`` is empty; a group without history there is GROUP_ID_NOT_FOUND).
A database that cannot be read is COORDINATOR_NOT_AVAILABLE, which clients retry.

The API is in the table only when history is kept (``offsets.history.retention.ms`` > 0):
otherwise ApiVersions does not announce it.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from coordinator.apis.authorize import ApiAuthorizer, error, then
from coordinator.apis.parts import MissingPart, Parts, need
from coordinator.dataplane.reads import high_watermark
from coordinator.history.model import MembershipChange, OffsetHistoryEntry
from coordinator.history.status import StatusSettings, partition_status
from coordinator.history.store import HistoryLog
from coordinator.history.table import HistoryTable
from coordinator.runtime import GroupRuntime
from coordinator.security.acl import AclOperation, ResourceType
from coordinator.server.handler import ClientInfo, Deferred, Handler, HandlerResult
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import describe_group_history as dgh

__all__ = ["authorize_describe_group_history", "describe_group_history_handler"]

log = logging.getLogger("kgc.history")

_INT32_MAX = 2**31 - 1

Entry = OffsetHistoryEntry | MembershipChange


def describe_group_history_handler(parts: Parts) -> Handler:
    runtime = need(parts.groups, "groups")
    if runtime.history is None:
        raise MissingPart("history")
    if isinstance(runtime.history, HistoryTable):
        return lambda header, req, client: Deferred.task(describe_table(runtime, req))
    return lambda header, req, client: describe(runtime, req)


def _wanted(req: dgh.Request) -> dict[str, set[int] | None] | None:
    if req.topics is None:
        return None
    return {
        t.name: None if t.partition_indexes is None else set(t.partition_indexes)
        for t in req.topics
    }


def _in(wanted: dict[str, set[int] | None] | None, topic: str, partition: int) -> bool:
    if wanted is None:
        return True
    parts = wanted.get(topic, set())
    return parts is None or partition in parts


def describe(runtime: GroupRuntime, req: dgh.Request) -> dgh.Response:
    """The answer from this process's history log (one node, or a worker)."""
    history = runtime.history
    assert isinstance(history, HistoryLog)
    gid = req.group_id
    err = runtime.shard.partitions.precheck(gid)
    if err is not None:
        return dgh.Response(error_code=err)
    try:
        start = history.start_ms()
        entries = list(history.read(gid, max(req.from_ms, 0), None if req.to_ms < 0 else req.to_ms))
        recent = list(history.read(gid, runtime.clock() - 3 * history.status.stop_ms))
    except Exception as exc:  # a damaged history log: said, never a crash
        log.exception("reading the history of group %r failed", gid)
        return dgh.Response(
            error_code=ErrorCode.UNKNOWN, error_message=f"history unreadable: {exc}"
        )
    return _answer(runtime, req, start, entries, recent, coordinated=True)


async def describe_table(runtime: GroupRuntime, req: dgh.Request) -> dgh.Response:
    """The answer from the cluster's history table: any node reads any group's history;
    the group's coordinator adds its current offsets and their statuses."""
    table = runtime.history
    assert isinstance(table, HistoryTable)
    gid = req.group_id
    err = runtime.shard.partitions.precheck(gid)
    if err is not None and err != ErrorCode.NOT_COORDINATOR:
        return dgh.Response(error_code=err)
    coordinated = err is None
    try:
        start = await table.start_ms(gid)
        entries = await table.read(gid, max(req.from_ms, 0), None if req.to_ms < 0 else req.to_ms)
        recent = (
            await table.read(gid, runtime.clock() - 3 * table.status.stop_ms) if coordinated else []
        )
    except Exception as exc:  # the database is away: an answer the client retries
        log.warning("reading the history of group %r failed: %r", gid, exc)
        return dgh.Response(
            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
            error_message=f"history unreadable: {exc}",
        )
    return _answer(runtime, req, start, entries, recent, coordinated=coordinated)


def _answer(
    runtime: GroupRuntime,
    req: dgh.Request,
    start: int | None,
    entries: list[Entry],
    recent: list[Entry],
    *,
    coordinated: bool,
) -> dgh.Response:
    """The response from the entries read; the current offsets where the group is
    coordinated here."""
    history = runtime.history
    assert history is not None
    gid = req.group_id
    shard = runtime.shard
    wanted = _wanted(req)
    resp = dgh.Response(retention_ms=history.retention_ms)
    resp.history_start_ms = -1 if start is None else start
    for e in entries:
        if isinstance(e, OffsetHistoryEntry):
            if req.include_offset_changes and _in(wanted, e.topic, e.partition):
                resp.offset_changes.append(
                    dgh.OffsetChange(
                        e.timestamp_ms, e.topic, e.partition, e.offset, e.previous,
                        e.leader_epoch, e.metadata, e.commit_timestamp_ms, e.member_id,
                        e.client_id, e.host, min(e.unchanged, _INT32_MAX),
                    )
                )  # fmt: skip
        elif isinstance(e, MembershipChange) and req.include_membership_changes:
            resp.membership_changes.append(
                dgh.MembershipChange(
                    e.timestamp_ms, e.kind, e.generation, e.cause, e.reason, e.member_id,
                    e.members, e.duration_ms,
                )
            )  # fmt: skip
    if not coordinated:
        if not entries:
            return dgh.Response(error_code=ErrorCode.GROUP_ID_NOT_FOUND)
        return resp
    mgr = shard.offset_manager
    unchanged = mgr.unchanged.get(gid, {})
    for (topic, partition), entry in sorted(mgr.offsets.get(gid, {}).items()):
        if _in(wanted, topic, partition):
            resp.partitions.append(
                dgh.CurrentPartition(
                    topic,
                    partition,
                    entry.offset,
                    entry.commit_timestamp_ms,
                    min(unchanged.get((topic, partition), 0), _INT32_MAX),
                    -1,
                    "",
                )
            )
    if shard.find_group(gid) is None and not entries and not resp.partitions:
        return dgh.Response(error_code=ErrorCode.GROUP_ID_NOT_FOUND)
    try:
        _statuses(runtime, history.status, recent, resp.partitions)
    except Exception:  # a damaged log: the statuses stay unknown, the history is answered
        log.exception("judging the partitions of group %r failed", gid)
    return resp


def _statuses(
    runtime: GroupRuntime,
    s: StatusSettings,
    recent: list[Entry],
    partitions: list[dgh.CurrentPartition],
) -> None:
    """Each partition's status (``history.status``) from its recent offset changes
    (``recent``), the lag it had at each (the log's end at that time: its first offset
    written at or after it), and its log now; partitions whose log this node does not serve
    stay ""."""
    now = runtime.clock()
    changes: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for e in recent:
        if isinstance(e, OffsetHistoryEntry) and e.offset >= 0:
            changes.setdefault((e.topic, e.partition), []).append((e.timestamp_ms, e.offset))
    for cp in partitions:
        plog = runtime.logs.get(cp.topic, cp.partition_index)
        if plog is None or plog.closed:
            continue
        end = high_watermark(plog)
        cp.log_end_offset = end
        lags = []
        for ts, offset in changes.get((cp.topic, cp.partition_index), [])[-s.window_commits :]:
            found = plog.offset_for_timestamp(ts)
            lags.append(max((end if found is None else found[0]) - offset, 0))
        cp.status = partition_status(
            s,
            now,
            cp.committed_offset,
            cp.last_commit_timestamp_ms,
            cp.unchanged_commits,
            plog.log_start_offset,
            end,
            lags,
        )


def authorize_describe_group_history(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    """DESCRIBE on the group, then DESCRIBE on each topic its entries name (OffsetFetch's)."""
    if not a.allowed(client, AclOperation.DESCRIBE, ResourceType.GROUP, req.group_id):
        return error(header, req, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    seen: dict[str, bool] = {}

    def visible(topic: str) -> bool:
        ok = seen.get(topic)
        if ok is None:
            ok = seen[topic] = a.quietly(client, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
        return ok

    def only_visible(resp: dgh.Response) -> dgh.Response:
        return dataclasses.replace(
            resp,
            offset_changes=[c for c in resp.offset_changes if visible(c.topic)],
            partitions=[c for c in resp.partitions if visible(c.topic)],
        )

    return then(handler(header, req, client), only_visible)
