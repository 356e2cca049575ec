"""Authorization as Kafka's KafkaApis does it: the helpers every API's check shares.

How this works: with an authorizer configured (``authorizer.class.name``), each API's entry
in the table (``coordinator/apis/__init__.py``) names how its handler is authorized, and
that check sits beside the handler, in the API's family module (``groups.py``, ``data.py``,
``topics.py``, ``cluster.py``; the admin APIs check inside their handlers). A check asks
the authorizer exactly what KafkaApis asks for the API -- READ on the group for JoinGroup,
READ on each topic of an OffsetCommit, DESCRIBE on each group a ListGroups may show... --
and then either answers with Kafka's error code in the API's own shape
(GROUP_AUTHORIZATION_FAILED for the group, TOPIC_AUTHORIZATION_FAILED per partition,
CLUSTER_AUTHORIZATION_FAILED...), or hands the handler the part of the request that is
allowed and merges the refused part back into its answer, in the request's order. The
group core and the data plane never see a principal: authorization happens before them,
as in Kafka, where the coordinator is not asked about what the caller may not touch.

``ApiAuthorizer`` binds a check to its handler once, at start-up: the route then calls one
closure per request. JoinGroup/SyncGroup/Heartbeat/LeaveGroup, on the hot path of every
heartbeat, remember their READ decision per connection (``group_read``).

Without an authorizer nothing is bound: the embedded default allows everything.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any, cast

from coordinator.security.acl import AclOperation, Authorizer, ResourceType
from coordinator.server.handler import ClientInfo, Deferred, Handler, HandlerResult
from protocol.error_responses import error_response
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader

__all__ = [
    "CLUSTER",
    "ApiAuthorizer",
    "Check",
    "answer",
    "append_topics",
    "cluster_authorize",
    "error",
    "refusal",
    "then",
]

CLUSTER = "kafka-cluster"

# An API's check: (authorizer, handler, header, request, client) -> the answer.
Check = Callable[["ApiAuthorizer", Handler, RequestHeader, Any, ClientInfo], HandlerResult]


def answer(x: Any) -> HandlerResult:
    """A response built here (a generated message), typed as a handler's answer."""
    return cast(HandlerResult, x)


def error(header: RequestHeader, req: Any, code: ErrorCode) -> HandlerResult:
    """The whole request refused with ``code``, in the API's shape."""
    return answer(error_response(header.api_key, header.api_version, req, code))


def refusal(header: RequestHeader, req: Any, code: ErrorCode, **part: Any) -> Any:
    """The API's answer to the refused ``part`` of ``req`` (e.g. ``topics=denied``): its
    whole-request error shape for a request of that part alone."""
    return error_response(
        header.api_key, header.api_version, dataclasses.replace(req, **part), code
    )


def append_topics(response: Callable[..., Any]) -> Callable[[Any, list[Any]], Any]:
    """Merge refused topics after the handler's (a response with ``topics``), or make the
    whole answer of them when nothing reached the handler."""

    def merge(resp: Any, refused: list[Any]) -> Any:
        if resp is None:
            return response(topics=refused)
        return dataclasses.replace(resp, topics=[*resp.topics, *refused])

    return merge


def then(result: HandlerResult, fn: Callable[[Any], Any]) -> HandlerResult:
    """Apply ``fn`` to the handler's answer, now or when a Deferred one arrives."""
    if type(result) is not Deferred:
        return answer(fn(result))
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
    """One authorizer's checks, bound to the handlers at start-up."""

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

    def topic_of(self, t: Any) -> str:
        """A request topic's name, looked up by id where the request names none."""
        name: str = getattr(t, "name", "") or ""
        if not name:
            tid = getattr(t, "topic_id", None)
            if tid:
                name = self.topic_name(tid) or ""
        return name

    # -- binding a check to its handler

    def bind(self, check: Check, handler: Handler) -> Handler:
        def authorized(header: RequestHeader, body: Any, client: ClientInfo) -> HandlerResult:
            # The API whose checks run now, for the denial metric (a plain store: a denial
            # can only happen inside a check, which sets it first).
            self.api_key = header.api_key
            return check(self, handler, header, body, client)

        return authorized

    def counted(self, handler: Handler) -> Handler:
        """An API that checks inside its handler (the admin APIs): bound only so that its
        denials are counted under its API."""

        def authorized(header: RequestHeader, body: Any, client: ClientInfo) -> HandlerResult:
            self.api_key = header.api_key
            return handler(header, body, client)

        return authorized

    def group_read(self, handler: Handler) -> Handler:
        """JoinGroup/SyncGroup/Heartbeat/LeaveGroup: READ on the group, on the hot path of
        every heartbeat, so in one frame, and remembered per connection (its principal and
        host are fixed) until the ACLs change: a dict lookup per heartbeat."""
        authorizer = self.authorizer
        authorize = authorizer.authorize
        read, group = AclOperation.READ, ResourceType.GROUP

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
            return error(header, body, ErrorCode.GROUP_AUTHORIZATION_FAILED)

        return authorized

    def split_topics(
        self,
        handler: Handler,
        header: RequestHeader,
        req: Any,
        client: ClientInfo,
        op: AclOperation,
        merge_into: Callable[[Any, list[Any]], Any],
        refuse: Callable[[Any], Any] | None = None,
        field: str = "topics",
    ) -> HandlerResult:
        """Pass the topics allowed ``op`` to the handler; answer the others with ``refuse``,
        by default as the API answers a request of them alone failing with
        TOPIC_AUTHORIZATION_FAILED (its error shape)."""
        topics = getattr(req, field)
        denied = [
            t for t in topics if not self.allowed(client, op, ResourceType.TOPIC, self.topic_of(t))
        ]
        if not denied:
            return handler(header, req, client)
        allowed = [t for t in topics if t not in denied]
        if refuse is None:
            shape = refusal(header, req, ErrorCode.TOPIC_AUTHORIZATION_FAILED, **{field: denied})
            refused = list(getattr(shape, field))
        else:
            refused = [refuse(t) for t in denied]
        if not allowed:
            return answer(merge_into(None, refused))
        return then(
            handler(header, dataclasses.replace(req, **{field: allowed}), client),
            lambda resp: merge_into(resp, refused),
        )


def cluster_authorize(authorizer: Authorizer | None) -> Callable[[ClientInfo, str], bool] | None:
    """The CLUSTER check of the SCRAM admin APIs ("DESCRIBE"/"ALTER"), None without ACLs."""
    if authorizer is None:
        return None

    def check(client: ClientInfo, operation: str) -> bool:
        return authorizer.authorize(
            client.principal, client.host, AclOperation[operation], ResourceType.CLUSTER, CLUSTER
        )

    return check
