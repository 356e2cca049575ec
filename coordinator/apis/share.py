"""The share partitions' APIs: ShareFetch, ShareAcknowledge, DescribeShareGroupOffsets.

How this works: the handlers are ``coordinator.share.requests.ShareRequests``'; each
authorizes inside, where Kafka's KafkaApis checks: READ on the group first (the whole
request answered GROUP_AUTHORIZATION_FAILED), then READ on each topic (that partition
answered TOPIC_AUTHORIZATION_FAILED), so the factories hand them the authorizer's check.
"""

from __future__ import annotations

import functools

from coordinator.apis.parts import Parts, need
from coordinator.server.handler import Handler
from coordinator.share.requests import Allowed


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
