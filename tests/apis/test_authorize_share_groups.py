"""ShareGroupHeartbeat's and ShareGroupDescribe's authorization, as KafkaApis checks them:
READ on the group, then the member id, then DESCRIBE on each subscribed topic (heartbeat);
DESCRIBE on each group, an assigned topic the client may not describe hiding the group's
members, authorized operations on request (describe). The handlers are stand-ins that answer
what they were asked; the authorizer is the real one with real bindings."""

from __future__ import annotations

from typing import Any

from coordinator.apis import authorized
from coordinator.apis.authorize import ApiAuthorizer
from coordinator.security import KafkaPrincipal
from coordinator.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
)
from coordinator.server.handler import ClientInfo
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import share_group_describe as sgd
from protocol.messages import share_group_heartbeat as sgh

ALICE = ClientInfo("c", "10.0.0.1", 1, 1, principal=KafkaPrincipal("User", "alice"))
_O, _R = AclOperation, ResourceType


def allow(rtype: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(
        rtype, name, PatternType.LITERAL, "User:alice", "*", op, AclPermissionType.ALLOW
    )


def handlers(*bindings: AclBinding) -> dict[int, Any]:
    def heartbeat(header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        return sgh.Response(member_id=req.member_id, member_epoch=7)

    def describe(header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        groups = []
        for g in req.group_ids:
            member = sgd.Member(
                member_id="m",
                assignment=sgd.Assignment(
                    topic_partitions=[sgd.TopicPartitions(topic_name=f"{g}-t", partitions=[0])]
                ),
            )
            groups.append(sgd.DescribedGroup(group_id=g, group_state="Stable", members=[member]))
        return sgd.Response(groups=groups)

    table = {sgh.API_KEY: heartbeat, sgd.API_KEY: describe}
    return authorized(ApiAuthorizer(Authorizer(bindings)), table)


def hb(table: dict[int, Any], member: str, topics: list[str] | None = None) -> Any:
    req = sgh.ShareGroupHeartbeatRequest(
        group_id="g", member_id=member, member_epoch=0, subscribed_topic_names=topics
    )
    return table[sgh.API_KEY](RequestHeader(sgh.API_KEY, 1, 1, "c"), req, ALICE)


def test_heartbeat_checks_group_then_member_id_then_topics() -> None:
    nothing = handlers()
    assert hb(nothing, "", ["t"]).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    group_only = handlers(allow(_R.GROUP, "g", _O.READ))
    assert hb(group_only, "", ["t"]).error_code == ErrorCode.INVALID_REQUEST
    assert hb(group_only, "m" * 37, ["t"]).error_code == ErrorCode.INVALID_REQUEST
    assert hb(group_only, "m", ["t"]).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert hb(group_only, "m", None).member_epoch == 7  # no subscription named: no topic check
    full = handlers(allow(_R.GROUP, "g", _O.READ), allow(_R.TOPIC, "t", _O.DESCRIBE))
    assert hb(full, "m" * 36, ["t"]).member_epoch == 7


def test_describe_per_group_hiding_members_of_undescribable_topics() -> None:
    table = handlers(
        allow(_R.GROUP, "a", _O.DESCRIBE),
        allow(_R.GROUP, "b", _O.DESCRIBE),
        allow(_R.TOPIC, "a-t", _O.DESCRIBE),
    )
    req = sgd.ShareGroupDescribeRequest(
        group_ids=["a", "b", "c"], include_authorized_operations=True
    )
    resp = table[sgd.API_KEY](RequestHeader(sgd.API_KEY, 1, 1, "c"), req, ALICE)
    a, b, c = resp.groups
    assert (a.group_id, a.error_code, len(a.members)) == ("a", 0, 1)
    assert a.authorized_operations != -2147483648  # asked for: DESCRIBE among them
    assert (b.group_id, b.error_code, b.members) == ("b", ErrorCode.TOPIC_AUTHORIZATION_FAILED, [])
    assert b.error_message == (
        "The group has described topic(s) that the client is not authorized to describe."
    )
    assert (c.group_id, c.error_code) == ("c", ErrorCode.GROUP_AUTHORIZATION_FAILED)
