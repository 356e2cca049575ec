"""Authorization of each API, as Kafka's KafkaApis checks it, in front of the handlers.

How this works: with an authorizer configured (``authorizer.class.name``), every handler is
wrapped by ``ApiAuthorizer.wrap``. The wrapper asks the authorizer exactly what Kafka's
``KafkaApis`` asks for the API -- READ on the group for JoinGroup, READ on each topic of an
OffsetCommit, DESCRIBE on each group a ListGroups may show... -- and then either answers with
Kafka's error code in the API's own shape (GROUP_AUTHORIZATION_FAILED for the group,
TOPIC_AUTHORIZATION_FAILED per partition, CLUSTER_AUTHORIZATION_FAILED...), or hands the
handler the part of the request that is allowed and merges the refused part back into its
answer, in the request's order. The group core and the data plane never see a principal:
authorization happens before them, as in Kafka, where the coordinator is not asked about
what the caller may not touch.

Without an authorizer nothing is wrapped: the embedded default allows everything.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any, cast

from coordinator.runtime.responses import error_response
from coordinator.security.acl import AclOperation, Authorizer, ResourceType
from coordinator.server.handler import ClientInfo, Deferred, Handler, HandlerResult
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import (
    consumer_group_describe,
    consumer_group_heartbeat,
    create_topics,
    delete_groups,
    delete_topics,
    describe_groups,
    fetch,
    find_coordinator,
    heartbeat,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    produce,
    sync_group,
    txn_offset_commit,
)

__all__ = ["ApiAuthorizer", "cluster_authorize"]

_O = AclOperation
_R = ResourceType
_GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
_TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER = "kafka-cluster"
# The ACL and SCRAM admin APIs (Describe/Create/DeleteAcls, Describe/AlterUserScramCredentials);
# CreatePartitions (37: duplicates before ALTER on each topic), DeleteRecords (21: DELETE per
# topic), DescribeCluster (60: DESCRIBE on the cluster for its authorized operations only),
# DescribeLogDirs (35: DESCRIBE on the cluster), in coordinator/dataplane/admin.py;
# DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44): DESCRIBE_CONFIGS /
# ALTER_CONFIGS per resource (topic, group or cluster), and ListConfigResources (74:
# DESCRIBE_CONFIGS on the cluster), in coordinator/server/config_admin.py.
_CHECKED_BY_HANDLER = (29, 30, 31, 50, 51, 37, 21, 60, 35, 32, 33, 44, 74)
# ApiVersions, SaslHandshake and SaslAuthenticate: answered before anyone is known, as in Kafka.
_NEEDS_NO_AUTHORIZATION = frozenset((18, 17, 36))


def _answer(x: Any) -> HandlerResult:
    """A response built here (a generated message), typed as a handler's answer."""
    return cast(HandlerResult, x)


def _error(header: RequestHeader, req: Any, code: ErrorCode) -> HandlerResult:
    return _answer(error_response(header.api_key, header.api_version, req, code))


def _append_topics(response: Callable[..., Any]) -> Callable[[Any, list[Any]], Any]:
    """Merge refused topics after the handler's (a response with ``topics``), or make the
    whole answer of them when nothing reached the handler."""

    def merge(resp: Any, refused: list[Any]) -> Any:
        if resp is None:
            return response(topics=refused)
        return dataclasses.replace(resp, topics=[*resp.topics, *refused])

    return merge


def _then(result: HandlerResult, fn: Callable[[Any], Any]) -> HandlerResult:
    """Apply ``fn`` to the handler's answer, now or when a Deferred one arrives."""
    if type(result) is not Deferred:
        return _answer(fn(result))
    inner = result.future
    out: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def done(f: asyncio.Future[Any]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
        elif f.exception() is not None:
            out.set_exception(f.exception())  # type: ignore[arg-type]
        else:
            out.set_result(fn(f.result()))

    def cancelled(o: asyncio.Future[Any]) -> None:
        if o.cancelled() and not inner.done():
            inner.cancel()

    inner.add_done_callback(done)
    out.add_done_callback(cancelled)
    return Deferred(out)


class ApiAuthorizer:
    def __init__(
        self,
        authorizer: Authorizer,
        topic_name: Callable[[bytes], str | None] = lambda _id: None,
    ) -> None:
        self.authorizer = authorizer
        self.topic_name = topic_name  # topic id -> name (v10 OffsetCommit, Fetch v13+)
        # The API whose checks are running (-1 between requests): the metrics count the
        # authorizer's denials by API with it (kgc_authorization_denied_total).
        self.api_key = -1

    # -- decisions

    def allowed(self, client: ClientInfo, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(client.principal, client.host, op, rtype, name)

    def quietly(self, client: ClientInfo, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        """A check that only filters what is shown: a denial is not audited."""
        return self.authorizer.authorize(
            client.principal, client.host, op, rtype, name, audit=False
        )

    def wrap(self, handlers: dict[int, Handler]) -> dict[int, Handler]:
        checks: dict[int, Callable[..., HandlerResult]] = {
            join_group.API_KEY: self._group_read,
            sync_group.API_KEY: self._group_read,
            heartbeat.API_KEY: self._group_read,
            leave_group.API_KEY: self._group_read,
            consumer_group_heartbeat.API_KEY: self._consumer_group_heartbeat,
            consumer_group_describe.API_KEY: self._consumer_group_describe,
            find_coordinator.API_KEY: self._find_coordinator,
            offset_commit.API_KEY: self._offset_commit,
            txn_offset_commit.API_KEY: self._txn_offset_commit,
            offset_fetch.API_KEY: self._offset_fetch,
            describe_groups.API_KEY: self._describe_groups,
            list_groups.API_KEY: self._list_groups,
            delete_groups.API_KEY: self._delete_groups,
            offset_delete.API_KEY: self._offset_delete,
            metadata.API_KEY: self._metadata,
            produce.API_KEY: self._produce,
            fetch.API_KEY: self._fetch,
            list_offsets.API_KEY: self._list_offsets,
            create_topics.API_KEY: self._create_topics,
            delete_topics.API_KEY: self._delete_topics,
            init_producer_id.API_KEY: self._init_producer_id,
            # Their handlers check CLUSTER DESCRIBE/ALTER themselves; wrapped only so that
            # their denials are counted under their API.
            **dict.fromkeys(_CHECKED_BY_HANDLER, self._checked_by_handler),
        }
        # Fail closed: an API served without a check would be open to everyone.
        unchecked = set(handlers) - set(checks) - _NEEDS_NO_AUTHORIZATION
        if unchecked:
            raise ValueError(f"api keys served without an authorization check: {sorted(unchecked)}")
        wrapped = dict(handlers)
        for key, check in checks.items():
            handler = handlers.get(key)
            if handler is not None:
                wrapped[key] = self._bind(check, handler)
        return wrapped

    def _bind(self, check: Callable[..., HandlerResult], handler: Handler) -> Handler:
        if check == self._group_read:
            return self._bind_group_read(handler)

        def authorized(header: RequestHeader, body: Any, client: ClientInfo) -> HandlerResult:
            # The API whose checks run now, for the denial metric (a plain store: a denial
            # can only happen inside a check, which sets it first).
            self.api_key = header.api_key
            return check(handler, header, body, client)

        return authorized

    def _bind_group_read(self, handler: Handler) -> Handler:
        """JoinGroup/SyncGroup/Heartbeat/LeaveGroup: READ on the group, on the hot path of
        every heartbeat, so in one frame, and remembered per connection (its principal and
        host are fixed) until the ACLs change: a dict lookup per heartbeat."""
        authorizer = self.authorizer
        authorize = authorizer.authorize
        read, group = _O.READ, _R.GROUP

        def authorized(header: RequestHeader, body: Any, client: ClientInfo) -> HandlerResult:
            self.api_key = header.api_key
            reads = client.group_reads
            if reads is None or client.acl_epoch != authorizer.epoch or len(reads) > 1000:
                reads = client.group_reads = {}
                client.acl_epoch = authorizer.epoch
            group_id = body.group_id
            allowed = reads.get(group_id)
            if allowed is None:
                allowed = reads[group_id] = authorize(
                    client.principal, client.host, read, group, group_id, audit=False
                )
            if allowed:
                return handler(header, body, client)
            authorize(client.principal, client.host, read, group, group_id)  # log and count it
            return _error(header, body, _GROUP_DENIED)

        return authorized

    @staticmethod
    def _checked_by_handler(
        handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        return handler(header, req, client)

    # -- groups

    def _group_read(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        if not self.allowed(client, _O.READ, _R.GROUP, req.group_id):
            return _error(header, req, _GROUP_DENIED)
        return handler(header, req, client)

    def _consumer_group_heartbeat(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        if not self.allowed(client, _O.READ, _R.GROUP, req.group_id):
            return consumer_group_heartbeat.Response(error_code=_GROUP_DENIED)
        for name in req.subscribed_topic_names or ():
            if not self.allowed(client, _O.DESCRIBE, _R.TOPIC, name):
                return consumer_group_heartbeat.Response(error_code=_TOPIC_DENIED)
        return handler(header, req, client)

    def _consumer_group_describe(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        denied = [g for g in req.group_ids if not self.allowed(client, _O.DESCRIBE, _R.GROUP, g)]
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
            return _answer(merge(consumer_group_describe.Response()))
        return _then(handler(header, dataclasses.replace(req, group_ids=allowed), client), merge)

    def _find_coordinator(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        if req.key_type == 1:
            rtype, denied_code = (
                _R.TRANSACTIONAL_ID,
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            )
        else:
            rtype, denied_code = _R.GROUP, _GROUP_DENIED
        if header.api_version < 4:
            if not self.allowed(client, _O.DESCRIBE, rtype, req.key):
                return find_coordinator.Response(
                    error_code=denied_code, error_message=None, node_id=-1, host="", port=-1
                )
            return handler(header, req, client)
        keys = list(req.coordinator_keys)
        denied = {k for k in keys if not self.allowed(client, _O.DESCRIBE, rtype, k)}
        if not denied:
            return handler(header, req, client)

        def merge(resp: Any) -> Any:
            got = {c.key: c for c in resp.coordinators}
            for k in denied:
                got[k] = find_coordinator.Coordinator(
                    key=k, node_id=-1, host="", port=-1, error_code=denied_code, error_message=None
                )
            return dataclasses.replace(resp, coordinators=[got[k] for k in keys if k in got])

        allowed = [k for k in keys if k not in denied]
        if not allowed:
            return _answer(merge(find_coordinator.Response()))
        return _then(
            handler(header, dataclasses.replace(req, coordinator_keys=allowed), client), merge
        )

    def _topic_of(self, t: Any) -> str:
        name: str = getattr(t, "name", "") or ""
        if not name:
            tid = getattr(t, "topic_id", None)
            if tid:
                name = self.topic_name(tid) or ""
        return name

    def _split_topics(
        self,
        handler: Handler,
        header: RequestHeader,
        req: Any,
        client: ClientInfo,
        op: AclOperation,
        refuse: Callable[[Any], Any],
        merge_into: Callable[[Any, list[Any]], Any],
        field: str = "topics",
    ) -> HandlerResult:
        """Pass the topics allowed ``op`` to the handler; answer the others with ``refuse``."""
        topics = getattr(req, field)
        denied = [t for t in topics if not self.allowed(client, op, _R.TOPIC, self._topic_of(t))]
        if not denied:
            return handler(header, req, client)
        allowed = [t for t in topics if t not in denied]
        refused = [refuse(t) for t in denied]
        if not allowed:
            return _answer(merge_into(None, refused))
        return _then(
            handler(header, dataclasses.replace(req, **{field: allowed}), client),
            lambda resp: merge_into(resp, refused),
        )

    def _offset_commit(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        if not self.allowed(client, _O.READ, _R.GROUP, req.group_id):
            return _error(header, req, _GROUP_DENIED)

        def refuse(t: Any) -> Any:
            return offset_commit.OffsetCommitResponseTopic(
                name=t.name,
                topic_id=t.topic_id,
                partitions=[
                    offset_commit.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=_TOPIC_DENIED
                    )
                    for p in t.partitions
                ],
            )

        merge = _append_topics(offset_commit.Response)

        return self._split_topics(handler, header, req, client, _O.READ, refuse, merge)

    def _txn_offset_commit(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        if not self.allowed(client, _O.WRITE, _R.TRANSACTIONAL_ID, req.transactional_id):
            return _error(header, req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.allowed(client, _O.READ, _R.GROUP, req.group_id):
            return _error(header, req, _GROUP_DENIED)

        def refuse(t: Any) -> Any:
            return txn_offset_commit.TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    txn_offset_commit.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=_TOPIC_DENIED
                    )
                    for p in t.partitions
                ],
            )

        merge = _append_topics(txn_offset_commit.Response)

        return self._split_topics(handler, header, req, client, _O.READ, refuse, merge)

    def _offset_fetch(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        v = header.api_version
        if v < 8:
            if not self.allowed(client, _O.DESCRIBE, _R.GROUP, req.group_id):
                return _error(header, req, _GROUP_DENIED)
            return _then(handler(header, req, client), lambda r: self._fetch_filter_old(r, client))
        denied = {
            g.group_id
            for g in req.groups
            if not self.allowed(client, _O.DESCRIBE, _R.GROUP, g.group_id)
        }
        order = [g.group_id for g in req.groups]
        allowed = [g for g in req.groups if g.group_id not in denied]

        def merge(resp: Any) -> Any:
            got = {g.group_id: self._fetch_filter_group(g, client) for g in resp.groups}
            for gid in denied:
                got[gid] = offset_fetch.OffsetFetchResponseGroup(
                    group_id=gid, error_code=_GROUP_DENIED
                )
            return dataclasses.replace(resp, groups=[got[g] for g in order if g in got])

        if not allowed:
            return _answer(merge(offset_fetch.Response()))
        return _then(handler(header, dataclasses.replace(req, groups=allowed), client), merge)

    def _fetch_filter_group(self, g: Any, client: ClientInfo) -> Any:
        topics = []
        for t in g.topics:
            name = self._topic_of(t)
            if self.quietly(client, _O.DESCRIBE, _R.TOPIC, name):
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

    def _fetch_filter_old(self, resp: Any, client: ClientInfo) -> Any:
        if not hasattr(resp, "topics"):
            return resp
        return self._fetch_filter_group(resp, client)

    def _describe_groups(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        order = list(req.groups)
        denied = {g for g in order if not self.allowed(client, _O.DESCRIBE, _R.GROUP, g)}
        ops = header.api_version >= 3 and req.include_authorized_operations

        def merge(resp: Any) -> Any:
            got = {}
            for d in resp.groups:
                if ops and d.error_code == 0:
                    d = dataclasses.replace(
                        d,
                        authorized_operations=self.authorizer.authorized_operations(
                            client.principal, client.host, _R.GROUP, d.group_id
                        ),
                    )
                got[d.group_id] = d
            for g in denied:
                got[g] = describe_groups.DescribedGroup(group_id=g, error_code=_GROUP_DENIED)
            return dataclasses.replace(resp, groups=[got[g] for g in order if g in got])

        allowed = [g for g in order if g not in denied]
        if not allowed:
            return _answer(merge(describe_groups.Response()))
        return _then(handler(header, dataclasses.replace(req, groups=allowed), client), merge)

    def _list_groups(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        if self.quietly(client, _O.DESCRIBE, _R.CLUSTER, CLUSTER):
            return handler(header, req, client)

        def shown(resp: Any) -> Any:
            return dataclasses.replace(
                resp,
                groups=[
                    g
                    for g in resp.groups
                    if self.quietly(client, _O.DESCRIBE, _R.GROUP, g.group_id)
                ],
            )

        return _then(handler(header, req, client), shown)

    def _delete_groups(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        order = list(req.groups_names)
        denied = {g for g in order if not self.allowed(client, _O.DELETE, _R.GROUP, g)}
        if not denied:
            return handler(header, req, client)

        def merge(resp: Any) -> Any:
            got = {r.group_id: r for r in resp.results}
            for g in denied:
                got[g] = delete_groups.DeletableGroupResult(group_id=g, error_code=_GROUP_DENIED)
            return dataclasses.replace(resp, results=[got[g] for g in order if g in got])

        allowed = [g for g in order if g not in denied]
        if not allowed:
            return _answer(merge(delete_groups.Response()))
        return _then(handler(header, dataclasses.replace(req, groups_names=allowed), client), merge)

    def _offset_delete(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        if not self.allowed(client, _O.DELETE, _R.GROUP, req.group_id):
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

        merge = _append_topics(offset_delete.Response)

        return self._split_topics(handler, header, req, client, _O.READ, refuse, merge)

    # -- topics and the cluster

    def _metadata(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        v = header.api_version
        named = req.topics is not None and not (v == 0 and not req.topics)
        if named:
            order = [self._topic_of(t) for t in req.topics]
            denied = {n for n in order if not self.allowed(client, _O.DESCRIBE, _R.TOPIC, n)}
            allowed = [t for t, n in zip(req.topics, order, strict=True) if n not in denied]
            creatable = self.quietly(client, _O.CREATE, _R.CLUSTER, CLUSTER) or all(
                self.quietly(client, _O.CREATE, _R.TOPIC, self._topic_of(t)) for t in allowed
            )
            inner = dataclasses.replace(
                req,
                topics=allowed,
                allow_auto_topic_creation=req.allow_auto_topic_creation and creatable,
            )
            if v < 4 and not creatable:
                inner = dataclasses.replace(inner, allow_auto_topic_creation=False)
        else:
            denied = set()
            inner = req

        def filtered(resp: Any) -> Any:
            if type(resp) is bytes:
                resp, _ = metadata.RESPONSE_DECODERS[v](resp, 0)
            topics = [
                t for t in resp.topics if self.quietly(client, _O.DESCRIBE, _R.TOPIC, t.name or "")
            ]
            topics += [
                metadata.MetadataResponseTopic(error_code=_TOPIC_DENIED, name=n, partitions=[])
                for n in sorted(denied)
            ]
            return self._metadata_operations(
                dataclasses.replace(resp, topics=topics), req, v, client
            )

        return _then(handler(header, inner, client), filtered)

    def _metadata_operations(self, resp: Any, req: Any, v: int, client: ClientInfo) -> Any:
        """Metadata v8+'s authorized operations as KafkaApis computes them: the cluster's
        (v8-10) only with DESCRIBE on it (else 0), each listed topic's."""
        if v < 8:
            return resp
        if v <= 10 and req.include_cluster_authorized_operations:
            ops = 0
            if self.allowed(client, _O.DESCRIBE, _R.CLUSTER, CLUSTER):
                ops = self.authorizer.authorized_operations(
                    client.principal, client.host, _R.CLUSTER, CLUSTER
                )
            resp = dataclasses.replace(resp, cluster_authorized_operations=ops)
        if req.include_topic_authorized_operations:
            for t in resp.topics:
                t.topic_authorized_operations = self.authorizer.authorized_operations(
                    client.principal, client.host, _R.TOPIC, t.name or ""
                )
        return resp

    def _produce(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        if req.transactional_id and not self.allowed(
            client, _O.WRITE, _R.TRANSACTIONAL_ID, req.transactional_id
        ):
            code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            denied_all = True
        else:
            code = _TOPIC_DENIED
            denied_all = False
        topics = req.topic_data
        denied = [
            t
            for t in topics
            if denied_all or not self.allowed(client, _O.WRITE, _R.TOPIC, self._topic_of(t))
        ]
        if not denied:
            return handler(header, req, client)
        refused = [
            produce.TopicProduceResponse(
                name=t.name,
                topic_id=t.topic_id,
                partition_responses=[
                    produce.PartitionProduceResponse(index=p.index, error_code=code)
                    for p in t.partition_data
                ],
            )
            for t in denied
        ]
        allowed = [t for t in topics if t not in denied]
        if not allowed:
            return produce.Response(responses=refused)
        return _then(
            handler(header, dataclasses.replace(req, topic_data=allowed), client),
            lambda r: (
                r
                if not hasattr(r, "responses")
                else dataclasses.replace(r, responses=[*r.responses, *refused])
            ),
        )

    def _fetch(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        topics = req.topics
        names = [t.topic or self.topic_name(t.topic_id) or "" for t in topics]
        denied = [
            t
            for t, n in zip(topics, names, strict=True)
            if not self.allowed(client, _O.READ, _R.TOPIC, n)
        ]
        if not denied:
            return handler(header, req, client)
        refused = [
            fetch.FetchableTopicResponse(
                topic=t.topic,
                topic_id=t.topic_id,
                partitions=[
                    fetch.PartitionData(
                        partition_index=p.partition, error_code=_TOPIC_DENIED, records=None
                    )
                    for p in t.partitions
                ],
            )
            for t in denied
        ]
        allowed = [t for t in topics if t not in denied]
        return _then(
            handler(header, dataclasses.replace(req, topics=allowed), client),
            lambda r: dataclasses.replace(r, responses=[*r.responses, *refused]),
        )

    def _list_offsets(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        def refuse(t: Any) -> Any:
            return list_offsets.ListOffsetsTopicResponse(
                name=t.name,
                partitions=[
                    list_offsets.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=_TOPIC_DENIED
                    )
                    for p in t.partitions
                ],
            )

        merge = _append_topics(list_offsets.Response)

        return self._split_topics(handler, header, req, client, _O.DESCRIBE, refuse, merge)

    def _create_topics(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        if self.quietly(client, _O.CREATE, _R.CLUSTER, CLUSTER):
            return handler(header, req, client)

        def refuse(t: Any) -> Any:
            return create_topics.CreatableTopicResult(
                name=t.name, error_code=_TOPIC_DENIED, error_message=None
            )

        merge = _append_topics(create_topics.Response)

        return self._split_topics(handler, header, req, client, _O.CREATE, refuse, merge)

    def _delete_topics(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        field = "topics" if header.api_version >= 6 else "topic_names"
        entries = getattr(req, field)

        def name_of(e: Any) -> str:
            return e if isinstance(e, str) else (e.name or self.topic_name(e.topic_id) or "")

        denied = [e for e in entries if not self.allowed(client, _O.DELETE, _R.TOPIC, name_of(e))]
        if not denied:
            return handler(header, req, client)
        refused = [
            delete_topics.DeletableTopicResult(
                name=name_of(e),
                topic_id=getattr(e, "topic_id", bytes(16)),
                error_code=_TOPIC_DENIED,
            )
            for e in denied
        ]
        allowed = [e for e in entries if e not in denied]
        if not allowed:
            return delete_topics.Response(responses=refused)
        return _then(
            handler(header, dataclasses.replace(req, **{field: allowed}), client),
            lambda r: dataclasses.replace(r, responses=[*r.responses, *refused]),
        )

    def _init_producer_id(
        self, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        if req.transactional_id:
            if not self.allowed(client, _O.WRITE, _R.TRANSACTIONAL_ID, req.transactional_id):
                return init_producer_id.Response(
                    error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                )
        elif not (
            self.quietly(client, _O.IDEMPOTENT_WRITE, _R.CLUSTER, CLUSTER)
            or self.authorizer.authorize_by_resource_type(
                client.principal, client.host, _O.WRITE, _R.TOPIC
            )
        ):
            return init_producer_id.Response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return handler(header, req, client)


def cluster_authorize(authorizer: Authorizer | None) -> Callable[[ClientInfo, str], bool] | None:
    """The CLUSTER check of the SCRAM admin APIs ("DESCRIBE"/"ALTER"), None without ACLs."""
    if authorizer is None:
        return None

    def check(client: ClientInfo, operation: str) -> bool:
        return authorizer.authorize(
            client.principal, client.host, AclOperation[operation], _R.CLUSTER, CLUSTER
        )

    return check
