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


def test_share_state_apis_need_cluster_action_on_the_cluster() -> None:
    """Kafka's authorizeClusterOperation(CLUSTER_ACTION) before each of the share
    coordinator's inter-broker APIs: refused, every partition named is
    CLUSTER_AUTHORIZATION_FAILED (getErrorResponse); FindCoordinator of key type 2 likewise."""
    from protocol.messages import find_coordinator as fc
    from protocol.messages import read_share_group_state as rs
    from protocol.messages import write_share_group_state as ws

    def read(header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        return rs.Response(results=[rs.ReadStateResult(topic_id=b"t" * 16, partitions=[])])

    def write(header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        return ws.Response(results=[])

    def find(header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        return fc.Response(coordinators=[fc.Coordinator(key=k) for k in req.coordinator_keys])

    def table(*bindings: AclBinding) -> dict[int, Any]:
        t = {rs.API_KEY: read, ws.API_KEY: write, fc.API_KEY: find}
        return authorized(ApiAuthorizer(Authorizer(bindings)), t)

    req = rs.Request(
        group_id="g",
        topics=[
            rs.ReadStateData(
                topic_id=b"t" * 16, partitions=[rs.PartitionData(0, 1), rs.PartitionData(3, 1)]
            )
        ],
    )
    denied = table(allow(_R.GROUP, "g", _O.READ), allow(_R.CLUSTER, "kafka-cluster", _O.ALTER))
    resp = denied[rs.API_KEY](RequestHeader(rs.API_KEY, 0, 1, "c"), req, ALICE)
    assert [(p.partition, p.error_code) for p in resp.results[0].partitions] == [
        (0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        (3, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    ]
    wreq = ws.Request(
        group_id="g",
        topics=[ws.WriteStateData(topic_id=b"t" * 16, partitions=[ws.PartitionData(2)])],
    )
    resp = denied[ws.API_KEY](RequestHeader(ws.API_KEY, 1, 1, "c"), wreq, ALICE)
    assert resp.results[0].partitions[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    freq = fc.FindCoordinatorRequest(key_type=2, coordinator_keys=["g:AAECAwQFBgcICQoLDA0ODw:0"])
    resp = denied[fc.API_KEY](RequestHeader(fc.API_KEY, 6, 1, "c"), freq, ALICE)
    assert resp.coordinators[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    allowed = table(allow(_R.CLUSTER, "kafka-cluster", _O.CLUSTER_ACTION))
    resp = allowed[rs.API_KEY](RequestHeader(rs.API_KEY, 0, 1, "c"), req, ALICE)
    assert resp.results[0].partitions == []  # the stand-in handler answered
    resp = allowed[fc.API_KEY](RequestHeader(fc.API_KEY, 6, 1, "c"), freq, ALICE)
    assert resp.coordinators[0].error_code == 0
