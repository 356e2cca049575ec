"""The share partitions' APIs: ShareFetch, ShareAcknowledge, DescribeShareGroupOffsets, and
the share coordinator's inter-broker APIs (Initialize/Read/Write/Delete/ReadSummary
ShareGroupState).

How this works: the handlers are ``coordinator.share.requests.ShareRequests``'; each
authorizes inside, where Kafka's KafkaApis checks: READ on the group first (the whole
request answered GROUP_AUTHORIZATION_FAILED), then READ on each topic (that partition
answered TOPIC_AUTHORIZATION_FAILED), so the factories hand them the authorizer's check. The inter-broker APIs need
CLUSTER_ACTION on the cluster (Kafka's authorizeClusterOperation): a refusal answers every
partition CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from coordinator.apis.authorize import CLUSTER, ApiAuthorizer, error
from coordinator.apis.parts import Parts, need
from coordinator.security.acl import AclOperation as _O
from coordinator.security.acl import ResourceType as _R
from coordinator.server.handler import ClientInfo, Handler, HandlerResult
from coordinator.share.requests import Allowed
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader


def _allowed(p: Parts) -> Allowed:
    return None if p.checks is None else p.checks.allowed


def share_fetch_handler(p: Parts) -> Handler:
    return functools.partial(need(p.share, "share").share_fetch, _allowed(p))


def share_acknowledge_handler(p: Parts) -> Handler:
    return functools.partial(need(p.share, "share").share_acknowledge, _allowed(p))


def describe_share_group_offsets_handler(p: Parts) -> Handler:
    admin = need(p.share_admin, "share_admin")
    return functools.partial(admin.describe_share_group_offsets, _allowed(p))


def alter_share_group_offsets_handler(p: Parts) -> Handler:
    admin = need(p.share_admin, "share_admin")
    return functools.partial(admin.alter_share_group_offsets, _allowed(p))


def delete_share_group_offsets_handler(p: Parts) -> Handler:
    admin = need(p.share_admin, "share_admin")
    return functools.partial(admin.delete_share_group_offsets, _allowed(p))


def share_state_handler(name: str) -> Callable[[Parts], Handler]:
    """One of the share coordinator's inter-broker APIs, by its handler's name."""
    return lambda p: getattr(need(p.share_state, "share_state"), name)


def authorize_share_state(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    if a.allowed(client, _O.CLUSTER_ACTION, _R.CLUSTER, CLUSTER):
        return handler(header, req, client)
    return error(header, req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
