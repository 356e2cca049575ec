"""StreamsGroupTopologyDescriptionUpdate (KIP-1331) as Kafka 4.4 answers it without a topology
description plugin (its default): READ on the group first (GROUP_AUTHORIZATION_FAILED, no
message), then every push refused with UNSUPPORTED_VERSION and Kafka's text, whatever the
group, member or description. The authorizer is the real one with real bindings."""

from __future__ import annotations

from typing import Any, cast

from coordinator.apis import Parts, authorized
from coordinator.apis.authorize import ApiAuthorizer
from coordinator.apis.streams import (
    NO_PLUGIN_MESSAGE,
    streams_group_topology_description_update_handler,
)
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
from protocol.messages import streams_group_topology_description_update as sgtdu

ALICE = ClientInfo("c", "10.0.0.1", 1, 1, principal=KafkaPrincipal("User", "alice"))
KEY = sgtdu.API_KEY


def push(bindings: list[AclBinding], group: str, member: str) -> Any:
    # The handler touches no group state: any runtime stands for the group coordinator.
    handler = streams_group_topology_description_update_handler(Parts(groups=cast(Any, object())))
    table = authorized(ApiAuthorizer(Authorizer(bindings)), {KEY: handler})
    req = sgtdu.StreamsGroupTopologyDescriptionUpdateRequest(group_id=group, member_id=member)
    return table[KEY](RequestHeader(KEY, 0, 1, "c"), req, ALICE)


def test_read_on_the_group_then_refused_for_want_of_a_plugin() -> None:
    denied = push([], "g", "m")
    assert (denied.error_code, denied.error_message) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    read = AclBinding(
        ResourceType.GROUP,
        "g",
        PatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    for member in ("m", ""):
        refused = push([read], "g", member)
        assert (refused.error_code, refused.error_message) == (
            ErrorCode.UNSUPPORTED_VERSION,
            NO_PLUGIN_MESSAGE,
        )
