"""The data plane's APIs: Produce, Fetch, ListOffsets, InitProducerId, WriteTxnMarkers and
DescribeProducers, and their authorization.

How this works: the handlers are the data plane's own (``DataPlane.produce``...,
``DataPlane.txn.write_txn_markers``...), called directly; with an authorizer each is bound
to its check below, as KafkaApis checks it: WRITE on each topic (and on the transactional
id) for Produce, READ on each topic for Fetch, DESCRIBE on each topic for ListOffsets,
WRITE on the transactional id or IDEMPOTENT_WRITE on the cluster for InitProducerId, ALTER
or else CLUSTER_ACTION on the cluster for WriteTxnMarkers (a refusal fails every partition
with CLUSTER_AUTHORIZATION_FAILED), READ on each topic for DescribeProducers. Refused topics are answered with
TOPIC_AUTHORIZATION_FAILED per partition beside the data plane's answer for the rest.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coordinator.apis.authorize import (
    CLUSTER,
    ApiAuthorizer,
    append_topics,
    error,
    refusal,
    then,
)
from coordinator.security.acl import AclOperation, ResourceType
from coordinator.server.handler import ClientInfo, Handler, HandlerResult
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import (
    describe_producers,
    fetch,
    init_producer_id,
    list_offsets,
    produce,
)

_O = AclOperation
_R = ResourceType
_TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


# -- authorization


def authorize_produce(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    if req.transactional_id and not a.allowed(
        client, _O.WRITE, _R.TRANSACTIONAL_ID, req.transactional_id
    ):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        denied_all = True
    else:
        code = _TOPIC_DENIED
        denied_all = False
    topics = req.topic_data
    denied = [
        t for t in topics if denied_all or not a.allowed(client, _O.WRITE, _R.TOPIC, a.topic_of(t))
    ]
    if not denied:
        return handler(header, req, client)
    refused = refusal(header, req, code, topic_data=denied).responses
    allowed = [t for t in topics if t not in denied]
    if not allowed:
        return produce.Response(responses=refused)
    return then(
        handler(header, dataclasses.replace(req, topic_data=allowed), client),
        lambda r: (
            r
            if not hasattr(r, "responses")
            else dataclasses.replace(r, responses=[*r.responses, *refused])
        ),
    )


def authorize_fetch(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    topics = req.topics
    names = [t.topic or a.topic_name(t.topic_id) or "" for t in topics]
    denied = [
        t for t, n in zip(topics, names, strict=True) if not a.allowed(client, _O.READ, _R.TOPIC, n)
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
    return then(
        handler(header, dataclasses.replace(req, topics=allowed), client),
        lambda r: dataclasses.replace(r, responses=[*r.responses, *refused]),
    )


def authorize_list_offsets(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    merge = append_topics(list_offsets.Response)

    return a.split_topics(handler, header, req, client, _O.DESCRIBE, merge)


def authorize_init_producer_id(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    if req.transactional_id:
        if not a.allowed(client, _O.WRITE, _R.TRANSACTIONAL_ID, req.transactional_id):
            return init_producer_id.Response(
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            )
    elif not (
        a.quietly(client, _O.IDEMPOTENT_WRITE, _R.CLUSTER, CLUSTER)
        or a.authorizer.authorize_by_resource_type(
            client.principal, client.host, _O.WRITE, _R.TOPIC
        )
    ):
        return init_producer_id.Response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return handler(header, req, client)


def authorize_write_txn_markers(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    if a.quietly(client, _O.ALTER, _R.CLUSTER, CLUSTER) or a.allowed(
        client, _O.CLUSTER_ACTION, _R.CLUSTER, CLUSTER
    ):
        return handler(header, req, client)
    return error(header, req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


def authorize_describe_producers(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    def refuse(t: Any) -> describe_producers.TopicResponse:
        return describe_producers.TopicResponse(
            name=t.name,
            partitions=[
                describe_producers.PartitionResponse(
                    partition_index=p,
                    error_code=_TOPIC_DENIED,
                    error_message="Topic authorization failed.",
                )
                for p in t.partition_indexes
            ],
        )

    merge = append_topics(describe_producers.Response)
    return a.split_topics(handler, header, req, client, _O.READ, merge, refuse)
