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
from coordinator.metrics.requests import error_label
from coordinator.runtime import GroupRuntime
from coordinator.runtime.older_history import Unavailable
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
    older = runtime.older_history
    if older is not None and older.ask is not None:
        return lambda header, req, client: Deferred.task(describe_workers(runtime, req, client))
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
    """The answer from this process's history logs (one node, or a worker)."""
    err = runtime.shard.partitions.precheck(req.group_id)
    if err is not None:
        return dgh.Response(error_code=err)
    try:
        start, entries, recent = _read_logs(runtime, req)
    except Exception as exc:  # a damaged history log: said, never a crash
        log.exception("reading the history of group %r failed", req.group_id)
        return dgh.Response(
            error_code=ErrorCode.UNKNOWN, error_message=f"history unreadable: {exc}"
        )
    return _answer(runtime, req, start, entries, recent, coordinated=True)


def _logs(runtime: GroupRuntime) -> list[HistoryLog]:
    """This process's history log, then the older ones it holds (``older_history``)."""
    history = runtime.history
    assert isinstance(history, HistoryLog)
    older = runtime.older_history
    return [history, *(older.logs if older is not None else ())]


def _read_logs(
    runtime: GroupRuntime, req: dgh.Request
) -> tuple[int | None, list[Entry], list[Entry]]:
    """(history start, the request's entries, the recent entries the statuses judge) from
    this process's history logs, each list oldest first."""
    gid, logs = req.group_id, _logs(runtime)
    from_ms, to_ms = max(req.from_ms, 0), None if req.to_ms < 0 else req.to_ms
    recent_ms = runtime.clock() - 3 * logs[0].status.stop_ms
    starts = [ms for ms in (h.start_ms() for h in logs) if ms is not None]
    entries = [e for h in logs for e in h.read(gid, from_ms, to_ms)]
    recent = [e for h in logs for e in h.read(gid, recent_ms)]
    if len(logs) > 1:  # each log is in time order; older runs' logs hold older entries
        entries.sort(key=_time)
        recent.sort(key=_time)
    return min(starts, default=None), entries, recent


def _time(e: Entry) -> int:
    return e.timestamp_ms


async def describe_workers(
    runtime: GroupRuntime, req: dgh.Request, client: ClientInfo
) -> dgh.Response:
    """A worker's answer: its history logs and the other workers' (``older_history``), for
    a group it coordinates; to another worker, its own logs' entries of any group."""
    older = runtime.older_history
    assert older is not None and older.ask is not None
    gid = req.group_id
    err = runtime.shard.partitions.precheck(gid)
    asked_by_worker = err == ErrorCode.NOT_COORDINATOR and older.from_worker(client.client_id)
    if err is not None and not asked_by_worker:
        return dgh.Response(error_code=err)
    try:
        start, entries, recent = _read_logs(runtime, req)
    except Exception as exc:  # a damaged history log: said, never a crash
        log.exception("reading the history of group %r failed", gid)
        return dgh.Response(
            error_code=ErrorCode.UNKNOWN, error_message=f"history unreadable: {exc}"
        )
    if asked_by_worker:
        return _answer(runtime, req, start, entries, [], coordinated=False)
    from_ms, to_ms = max(req.from_ms, 0), None if req.to_ms < 0 else req.to_ms
    recent_ms = runtime.clock() - 3 * _logs(runtime)[0].status.stop_ms
    # Both ranges at once, every kind of entry (the statuses judge the offset changes).
    ask = dgh.Request(group_id=gid, from_ms=min(from_ms, recent_ms), to_ms=-1, topics=req.topics)
    try:
        # Only the workers that may hold some of it (``OlderHistory.holders``): often none.
        which = None if older.holders is None else older.holders(runtime.shard.partition_of(gid))
        answers = [] if which is not None and not which else await older.ask(ask, which)
    except Unavailable as exc:
        return dgh.Response(
            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
            error_message=f"history unreadable: {exc}",
        )
    elsewhere: list[Entry] = []
    for answer in answers:
        if answer.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            continue  # none of it there
        if answer.error_code:
            return dgh.Response(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message=f"history unreadable: a worker answered {error_label(answer.error_code)}",
            )
        if answer.history_start_ms >= 0:
            start = (
                answer.history_start_ms if start is None else min(start, answer.history_start_ms)
            )
        elsewhere += _entries(gid, answer)
    if elsewhere:
        entries = sorted(
            entries
            + [
                e
                for e in elsewhere
                if from_ms <= e.timestamp_ms and (to_ms is None or e.timestamp_ms <= to_ms)
            ],
            key=_time,
        )
        recent = sorted(recent + [e for e in elsewhere if e.timestamp_ms >= recent_ms], key=_time)
    return _answer(runtime, req, start, entries, recent, coordinated=True)


def _entries(gid: str, resp: dgh.Response) -> list[Entry]:
    """A worker's answer back into the history's entries."""
    out: list[Entry] = [
        OffsetHistoryEntry(
            c.timestamp_ms, gid, c.topic, c.partition_index, c.committed_offset,
            c.previous_offset, c.committed_leader_epoch, c.metadata, c.commit_timestamp_ms,
            c.member_id, c.client_id, c.client_host, c.unchanged_commits,
        )
        for c in resp.offset_changes
    ]  # fmt: skip
    out += [
        MembershipChange(
            m.timestamp_ms, gid, m.kind, m.generation_or_epoch, m.cause, m.reason,
            m.member_id, m.members, m.duration_ms,
        )
        for m in resp.membership_changes
    ]  # fmt: skip
    return out


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
