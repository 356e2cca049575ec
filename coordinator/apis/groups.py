"""The group coordinator's APIs: their handlers and their authorization, as KafkaApis.

How this works: each group API's handler calls the group runtime with the shard's function
for it (``GroupRuntime.call``: the shard prepares the answer and its records, the runtime
appends them and answers once they are durable). JoinGroup, SyncGroup, Heartbeat and
LeaveGroup need READ on the group (``ApiAuthorizer.group_read``, remembered per
connection); the others are checked by the functions below, each as its
``KafkaApis.handleXxx`` checks: the group first, then each topic, the refused ones answered
in the API's shape and merged back in request order. SyncGroup v5+ without a protocol type
or name is refused before any group check, as KafkaApis.handleSyncGroupRequest does.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from coordinator.apis.authorize import CLUSTER, ApiAuthorizer, answer, append_topics, error, then
from coordinator.apis.parts import Parts, need
from coordinator.group.shard import GroupShard
from coordinator.group.share.offsets_admin import OffsetsStep, delete_groups_begin
from coordinator.group.types import Result
from coordinator.runtime import txn_commit
from coordinator.security.acl import AclOperation, ResourceType
from coordinator.server.handler import ClientInfo, Deferred, Handler, HandlerResult
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import (
    consumer_group_describe,
    consumer_group_heartbeat,
    delete_groups,
    describe_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    share_group_describe,
    share_group_heartbeat,
    sync_group,
    txn_offset_commit,
)
from storage.interface import kafka_uuid

_O = AclOperation
_R = ResourceType
_GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
_TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


# -- handlers


def on_shard(method: Callable[[GroupShard], Callable[..., Result]]) -> Callable[[Parts], Handler]:
    """The handler of a group API: the runtime calling the shard's ``method``."""

    def factory(parts: Parts) -> Handler:
        runtime = need(parts.groups, "groups")
        return functools.partial(runtime.call, method(runtime.shard))

    return factory


def txn_offset_commit_handler(parts: Parts) -> Handler:
    """TxnOffsetCommit: verified with the transaction coordinator, then the shard
    (runtime/txn_commit.py)."""
    return functools.partial(txn_commit.txn_offset_commit, need(parts.groups, "groups"))


def share_group_heartbeat_handler(parts: Parts) -> Handler:
    """ShareGroupHeartbeat: the API layer's check of the member id, then the shard."""
    return functools.partial(
        _share_group_heartbeat_checked, on_shard(lambda s: s.share_group_heartbeat)(parts)
    )


def _valid_share_member_id(member_id: str | None) -> bool:
    """KafkaApis.isMemberIdValid: set, and at most 36 characters."""
    return bool(member_id) and len(member_id or "") <= 36


def _share_group_heartbeat_checked(
    inner: Handler, header: RequestHeader, body: Any, client: ClientInfo
) -> HandlerResult:
    if not _valid_share_member_id(body.member_id):
        return share_group_heartbeat.Response(error_code=ErrorCode.INVALID_REQUEST)
    return inner(header, body, client)


def delete_groups_handler(parts: Parts) -> Handler:
    """DeleteGroups: an empty share group's share-partition state is deleted first (the
    share coordinator's DeleteShareGroupState), then every group goes the shard's way."""
    runtime = need(parts.groups, "groups")
    inner = functools.partial(runtime.call, runtime.shard.delete_groups)

    def handle(header: RequestHeader, body: Any, client: ClientInfo) -> HandlerResult:
        share = runtime.shard.share
        states: dict[str, dict[bytes, list[int]]] = {}
        for g in body.groups_names:
            state = share.deletable_state(g)
            if state:
                states[g] = state
        if not states or runtime.share_persister is None:
            return inner(header, body, client)  # type: ignore[no-any-return]
        return Deferred.task(_delete_share_state_then(runtime, inner, header, body, client, states))

    return handle


async def _delete_share_state_then(
    runtime: Any,
    inner: Handler,
    header: RequestHeader,
    body: Any,
    client: ClientInfo,
    states: dict[str, dict[bytes, list[int]]],
) -> Any:
    """Kafka's deleteShareGroups: the groups' topics are written *deleting* first (durable,
    so a crash before the tombstones leaves them for the next DeleteGroups), then their
    state deleted; a group whose state the share coordinator could not delete answers that
    error and is not deleted; the others are deleted as usual."""
    gids = list(states)

    def begin(ctx: Any, _body: Any, _now_ms: int) -> Result:
        return delete_groups_begin(runtime.shard.share, ctx.reply_to, gids)

    step = runtime.call(begin, header, body, client)
    if isinstance(step, Deferred):
        step = await step
    if not isinstance(step, OffsetsStep) or step.error != ErrorCode.NO_ERROR:
        result = inner(header, body, client)  # the shard's answer (not loaded here, ...)
        return await result if isinstance(result, Deferred) else result
    states = step.value  # as the shard saw them when it wrote them
    failed: dict[str, ErrorCode] = {}
    for gid, topics in states.items():
        for topic_id, partitions in topics.items():
            try:
                errors = await runtime.share_persister.delete(gid, kafka_uuid(topic_id), partitions)
            except Exception:
                errors = {p: ErrorCode.UNKNOWN for p in partitions}
            bad = [e for e in errors.values() if e != ErrorCode.NO_ERROR]
            if bad:
                failed[gid] = ErrorCode(bad[0])
                break
    order = list(body.groups_names)
    rest = [g for g in order if g not in failed]
    got: dict[str, Any] = {
        g: delete_groups.DeletableGroupResult(group_id=g, error_code=code)
        for g, code in failed.items()
    }
    if rest:
        result = inner(header, dataclasses.replace(body, groups_names=rest), client)
        resp: Any = await result if isinstance(result, Deferred) else result
        for r in resp.results:
            got[r.group_id] = r
    return delete_groups.Response(results=[got[g] for g in order if g in got])


def sync_group_handler(parts: Parts) -> Handler:
    """SyncGroup: the API layer's check of v5's mandatory fields, then the shard."""
    return functools.partial(_sync_group_checked, on_shard(lambda s: s.sync_group)(parts))


def _sync_group_checked(
    inner: Handler, header: RequestHeader, body: Any, client: ClientInfo
) -> HandlerResult:
    """SyncGroup as Kafka's API layer takes it (KafkaApis.handleSyncGroupRequest): from v5
    the protocol type and name are mandatory, else INCONSISTENT_GROUP_PROTOCOL before any
    group check."""
    if header.api_version >= 5 and (body.protocol_type is None or body.protocol_name is None):
        return sync_group.Response(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    return inner(header, body, client)


# -- authorization


def authorize_consumer_group_heartbeat(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    if not a.allowed(client, _O.READ, _R.GROUP, req.group_id):
        return consumer_group_heartbeat.Response(error_code=_GROUP_DENIED)
    for name in req.subscribed_topic_names or ():
        if not a.allowed(client, _O.DESCRIBE, _R.TOPIC, name):
            return consumer_group_heartbeat.Response(error_code=_TOPIC_DENIED)
    return handler(header, req, client)


def authorize_consumer_group_describe(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    denied = [g for g in req.group_ids if not a.allowed(client, _O.DESCRIBE, _R.GROUP, g)]
    if not denied:
        return handler(header, req, client)
    order = list(req.group_ids)
    allowed = [g for g in order if g not in denied]
    refused = {
        g: consumer_group_describe.DescribedGroup(group_id=g, error_code=_GROUP_DENIED)
        for g in denied
    }

    def merge(resp: Any) -> Any:
        got = {d.group_id: d for d in resp.groups}
        got.update(refused)
        return dataclasses.replace(resp, groups=[got[g] for g in order if g in got])

    if not allowed:
        return answer(merge(consumer_group_describe.Response()))
    return then(handler(header, dataclasses.replace(req, group_ids=allowed), client), merge)


def authorize_share_group_heartbeat(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    """KafkaApis.handleShareGroupHeartbeat: READ on the group, a valid member id (set, at
    most 36 characters), DESCRIBE on each subscribed topic -- in that order."""
    if not a.allowed(client, _O.READ, _R.GROUP, req.group_id):
        return share_group_heartbeat.Response(error_code=_GROUP_DENIED)
    if not _valid_share_member_id(req.member_id):
        return share_group_heartbeat.Response(error_code=ErrorCode.INVALID_REQUEST)
    for name in req.subscribed_topic_names or ():
        if not a.allowed(client, _O.DESCRIBE, _R.TOPIC, name):
            return share_group_heartbeat.Response(error_code=_TOPIC_DENIED)
    return handler(header, req, client)


_TOPICS_HIDDEN = "The group has described topic(s) that the client is not authorized to describe."


def authorize_share_group_describe(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    """KafkaApis.handleShareGroupDescribe: DESCRIBE on each group; a group with an
    assigned topic the client may not describe answers TOPIC_AUTHORIZATION_FAILED without
    members; authorized operations when asked."""
    order = list(req.group_ids)
    denied = {g for g in order if not a.allowed(client, _O.DESCRIBE, _R.GROUP, g)}
    ops = req.include_authorized_operations

    def checked(d: Any) -> Any:
        if d.error_code:
            return d
        for m in d.members:
            for tp in m.assignment.topic_partitions:
                if not a.quietly(client, _O.DESCRIBE, _R.TOPIC, tp.topic_name):
                    return dataclasses.replace(
                        d,
                        error_code=_TOPIC_DENIED,
                        error_message=_TOPICS_HIDDEN,
                        members=[],
                    )
        if ops:
            return dataclasses.replace(
                d,
                authorized_operations=a.authorizer.authorized_operations(
                    client.principal, client.host, _R.GROUP, d.group_id
                ),
            )
        return d

    def merge(resp: Any) -> Any:
        got = {d.group_id: checked(d) for d in resp.groups}
        for g in denied:
            got[g] = share_group_describe.DescribedGroup(group_id=g, error_code=_GROUP_DENIED)
        return dataclasses.replace(resp, groups=[got[g] for g in order if g in got])

    allowed = [g for g in order if g not in denied]
    if not allowed:
        return answer(merge(share_group_describe.Response()))
    return then(handler(header, dataclasses.replace(req, group_ids=allowed), client), merge)


def authorize_offset_commit(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    if not a.allowed(client, _O.READ, _R.GROUP, req.group_id):
        return error(header, req, _GROUP_DENIED)

    merge = append_topics(offset_commit.Response)

    return a.split_topics(handler, header, req, client, _O.READ, merge)


def authorize_txn_offset_commit(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    if not a.allowed(client, _O.WRITE, _R.TRANSACTIONAL_ID, req.transactional_id):
        return error(header, req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not a.allowed(client, _O.READ, _R.GROUP, req.group_id):
        return error(header, req, _GROUP_DENIED)

    merge = append_topics(txn_offset_commit.Response)

    return a.split_topics(handler, header, req, client, _O.READ, merge)


def authorize_offset_fetch(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    v = header.api_version
    if v < 8:
        if not a.allowed(client, _O.DESCRIBE, _R.GROUP, req.group_id):
            return error(header, req, _GROUP_DENIED)
        return then(handler(header, req, client), lambda r: _fetch_filter_old(a, r, client))
    denied = {
        g.group_id for g in req.groups if not a.allowed(client, _O.DESCRIBE, _R.GROUP, g.group_id)
    }
    order = [g.group_id for g in req.groups]
    allowed = [g for g in req.groups if g.group_id not in denied]

    def merge(resp: Any) -> Any:
        got = {g.group_id: _fetch_filter_group(a, g, client) for g in resp.groups}
        for gid in denied:
            got[gid] = offset_fetch.OffsetFetchResponseGroup(group_id=gid, error_code=_GROUP_DENIED)
        return dataclasses.replace(resp, groups=[got[g] for g in order if g in got])

    if not allowed:
        return answer(merge(offset_fetch.Response()))
    return then(handler(header, dataclasses.replace(req, groups=allowed), client), merge)


def _fetch_filter_group(a: ApiAuthorizer, g: Any, client: ClientInfo) -> Any:
    topics = []
    for t in g.topics:
        name = a.topic_of(t)
        if a.quietly(client, _O.DESCRIBE, _R.TOPIC, name):
            topics.append(t)
        else:
            topics.append(
                dataclasses.replace(
                    t,
                    partitions=[
                        dataclasses.replace(p, committed_offset=-1, error_code=_TOPIC_DENIED)
                        for p in t.partitions
                    ],
                )
            )
    return dataclasses.replace(g, topics=topics)


def _fetch_filter_old(a: ApiAuthorizer, resp: Any, client: ClientInfo) -> Any:
    if not hasattr(resp, "topics"):
        return resp
    return _fetch_filter_group(a, resp, client)


def authorize_describe_groups(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    order = list(req.groups)
    denied = {g for g in order if not a.allowed(client, _O.DESCRIBE, _R.GROUP, g)}
    ops = header.api_version >= 3 and req.include_authorized_operations

    def merge(resp: Any) -> Any:
        got = {}
        for d in resp.groups:
            if ops and d.error_code == 0:
                d = dataclasses.replace(
                    d,
                    authorized_operations=a.authorizer.authorized_operations(
                        client.principal, client.host, _R.GROUP, d.group_id
                    ),
                )
            got[d.group_id] = d
        for g in denied:
            got[g] = describe_groups.DescribedGroup(group_id=g, error_code=_GROUP_DENIED)
        return dataclasses.replace(resp, groups=[got[g] for g in order if g in got])

    allowed = [g for g in order if g not in denied]
    if not allowed:
        return answer(merge(describe_groups.Response()))
    return then(handler(header, dataclasses.replace(req, groups=allowed), client), merge)


def authorize_list_groups(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    if a.quietly(client, _O.DESCRIBE, _R.CLUSTER, CLUSTER):
        return handler(header, req, client)

    def shown(resp: Any) -> Any:
        return dataclasses.replace(
            resp,
            groups=[g for g in resp.groups if a.quietly(client, _O.DESCRIBE, _R.GROUP, g.group_id)],
        )

    return then(handler(header, req, client), shown)


def authorize_delete_groups(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    order = list(req.groups_names)
    denied = {g for g in order if not a.allowed(client, _O.DELETE, _R.GROUP, g)}
    if not denied:
        return handler(header, req, client)

    def merge(resp: Any) -> Any:
        got = {r.group_id: r for r in resp.results}
        for g in denied:
            got[g] = delete_groups.DeletableGroupResult(group_id=g, error_code=_GROUP_DENIED)
        return dataclasses.replace(resp, results=[got[g] for g in order if g in got])

    allowed = [g for g in order if g not in denied]
    if not allowed:
        return answer(merge(delete_groups.Response()))
    return then(handler(header, dataclasses.replace(req, groups_names=allowed), client), merge)


def authorize_offset_delete(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    if not a.allowed(client, _O.DELETE, _R.GROUP, req.group_id):
        return offset_delete.Response(error_code=_GROUP_DENIED)

    def refuse(t: Any) -> Any:
        return offset_delete.OffsetDeleteResponseTopic(
            name=t.name,
            partitions=[
                offset_delete.OffsetDeleteResponsePartition(
                    partition_index=p.partition_index, error_code=_TOPIC_DENIED
                )
                for p in t.partitions
            ],
        )

    merge = append_topics(offset_delete.Response)

    # OffsetDelete's error shape is its top-level code: the refused topics are listed.
    return a.split_topics(handler, header, req, client, _O.READ, merge, refuse)
