"""The cluster's APIs: ApiVersions, FindCoordinator, DescribeCluster, DescribeLogDirs, SASL.

How this works: ApiVersions answers the table of what this node serves (each API's version
range, exactly the APIs that have a handler), once encoded per version; from v3 a client
software name or version outside KIP-511's pattern is answered INVALID_REQUEST without a
table, as ApiVersionsRequest.isValid decides. FindCoordinator is the broker's (``topics.py``:
it knows where each offsets partition is led), checked below as KafkaApis checks it:
DESCRIBE on each group (or transactional id) asked for. DescribeCluster and DescribeLogDirs
are the partition admin's (``partitions.py``), which checks DESCRIBE on the cluster itself.
SaslHandshake and SaslAuthenticate reach a handler only after authentication or on a
listener without SASL (the connection's SASL session answers them before), and need no
authorization, as in Kafka: they come before anyone is known.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import Any

from coordinator.apis.authorize import CLUSTER, ApiAuthorizer, answer, error, then
from coordinator.apis.parts import Parts, need
from coordinator.apis.topics import Broker
from coordinator.placement import endpoint
from coordinator.security.acl import AclOperation, ResourceType
from coordinator.server import sasl as sasl_handlers
from coordinator.server.handler import ClientInfo, Handler, HandlerResult
from coordinator.share.state_shard import SHARE_STATE_TOPIC, partition_for, topic_id_bytes
from coordinator.txn.coordinator import partition_for_transactional_id
from coordinator.txn.records import TRANSACTION_STATE_TOPIC
from protocol.errors import ErrorCode
from protocol.framing import API_VERSIONS_KEY, RequestHeader, encode_body
from protocol.messages import find_coordinator
from protocol.messages.api_versions import (
    ApiVersion,
    ApiVersionsResponse,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)
from protocol.messages.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from storage.records import OFFSETS_TOPIC

_O = AclOperation
_R = ResourceType
_GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED

# KIP-511: from v3 the client names its software and version; Kafka answers INVALID_REQUEST
# (and no table) unless both match this pattern (ApiVersionsRequest.isValid).
TRANSACTION_VERSION = "transaction.version"
# Kafka 4.4 finalizes share.version 2 (ShareFetch/ShareAcknowledge v2's renewals), supported
# 0-2; kgc lists it wherever it serves share groups (ShareGroupHeartbeat advertised).
SHARE_VERSION = "share.version"
SHARE_VERSION_LEVEL = 2
SHARE_GROUP_HEARTBEAT_KEY = 76
SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


class ApiVersions:
    """The ApiVersions handler over the versions this node advertises."""

    def __init__(
        self, supported: Mapping[int, tuple[int, int]], transaction_version: int = 1
    ) -> None:
        self.supported = supported
        self.transaction_version = transaction_version
        self._bodies: dict[int, bytes] = {}  # encoded bodies by version

    def __call__(self, header: RequestHeader, req: Any, client: ClientInfo) -> bytes:
        if header.api_version >= 3 and not (
            SOFTWARE_NAME_VERSION.fullmatch(req.client_software_name)
            and SOFTWARE_NAME_VERSION.fullmatch(req.client_software_version)
        ):
            return encode_body(
                API_VERSIONS_KEY,
                header.api_version,
                ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST, api_keys=[]),
            )
        cached = self._bodies.get(header.api_version)
        if cached is None:
            keys = [
                ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(self.supported.items())
            ]
            body = ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)
            # The features kgc supports (v3+'s tagged fields): (name, supported max, finalized
            # level). As Kafka 4.4, transaction.version is supported 0-2 at every level and
            # finalized only from 1 (a level 0 feature is absent from Kafka's finalized map);
            # the Java client turns TV2 on when it sees level >= 2 at an epoch newer than it knew.
            features: list[tuple[str, int, int]] = []
            if SHARE_GROUP_HEARTBEAT_KEY in self.supported:
                features.append((SHARE_VERSION, SHARE_VERSION_LEVEL, SHARE_VERSION_LEVEL))
            features.append((TRANSACTION_VERSION, 2, self.transaction_version))
            # Below v4 Kafka leaves out supported features whose range starts at 0 (older
            # clients cannot read such a range, KIP-1022): every one of kgc's.
            body.supported_features = (
                [SupportedFeatureKey(name, 0, top) for name, top, _ in features]
                if header.api_version >= 4
                else []
            )
            body.finalized_features_epoch = 1
            body.finalized_features = [
                FinalizedFeatureKey(name, level, level) for name, _, level in features if level > 0
            ]
            cached = self._bodies[header.api_version] = encode_body(
                API_VERSIONS_KEY, header.api_version, body
            )
        return cached


# -- handlers


def find_coordinator_handler(parts: Parts) -> Handler:
    return functools.partial(find_coordinator_of, need(parts.broker, "broker"))


# A connection authenticating never gets these (its SaslSession answers them, see
# coordinator/security/sasl); these are the answers after authentication or on a listener
# without SASL, KafkaApis' ones.
def sasl_handshake_handler(parts: Parts) -> Handler:
    need(parts.broker, "broker")  # served beside the broker's APIs
    return sasl_handlers.sasl_handshake_after_authentication


def sasl_authenticate_handler(parts: Parts) -> Handler:
    need(parts.broker, "broker")
    return sasl_handlers.sasl_authenticate_after_authentication


# -- FindCoordinator

COORDINATOR_KEY_GROUP = 0
COORDINATOR_KEY_TRANSACTION = 1
COORDINATOR_KEY_SHARE = 2
# Errors.INVALID_REQUEST.message(), Kafka's answer to a coordinator key type it does not know.
INVALID_REQUEST_MESSAGE = (
    "This most likely occurs because of a request being malformed by the client library or "
    "the message was sent to an incompatible broker. See the broker logs for more details."
)


def find_coordinator_of(
    broker: Broker, header: RequestHeader, req: FindCoordinatorRequest, client: ClientInfo
) -> FindCoordinatorResponse:
    """FindCoordinator: the node leading the group's offsets partition, as the request's
    listener reaches it."""
    version = header.api_version
    if version >= 4:
        coordinators = [
            _coordinator(broker, k, req.key_type, client.listener, version)
            for k in req.coordinator_keys
        ]
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    c = _coordinator(broker, req.key, req.key_type, client.listener, version)
    return FindCoordinatorResponse(
        throttle_time_ms=0,
        error_code=c.error_code,
        # Kafka's single-key answer carries Errors.message(), "NONE" for success.
        error_message=c.error_message if c.error_code else "NONE",
        node_id=c.node_id,
        host=c.host,
        port=c.port,
    )


def _coordinator(
    broker: Broker, key: str, key_type: int, listener: str, version: int
) -> Coordinator:
    if key_type == COORDINATOR_KEY_SHARE and version >= 6:
        # The share coordinator of a share partition's state: the holder of the
        # __share_group_state partition of "group:topicId:partition" (brokers ask this).
        s = broker.settings
        partition = _share_state_partition(key, s.share_coordinator_state_topic_num_partitions)
        if partition is not None:
            return _leader_of(broker, key, SHARE_STATE_TOPIC, partition, listener)
        # A malformed key: INVALID_REQUEST with an empty message, as Kafka 4.4 answers it.
        return Coordinator(
            key=key, node_id=-1, host="", port=-1, error_code=ErrorCode.INVALID_REQUEST
        )
    if key_type == COORDINATOR_KEY_GROUP:
        return _leader_of(
            broker, key, OFFSETS_TOPIC, broker.groups.shard.partitions.partition_of(key), listener
        )
    if key_type == COORDINATOR_KEY_TRANSACTION:
        s = broker.settings
        partition = partition_for_transactional_id(key, s.transaction_state_log_num_partitions)
        return _leader_of(broker, key, TRANSACTION_STATE_TOPIC, partition, listener)
    return Coordinator(
        key=key,
        node_id=-1,
        host="",
        port=-1,
        error_code=ErrorCode.INVALID_REQUEST,
        error_message=INVALID_REQUEST_MESSAGE,  # Kafka's default message, as it answers
    )


def _share_state_partition(key: str, num_partitions: int) -> int | None:
    """Kafka's SharePartitionKey.getInstance then partitionFor; None for a malformed key."""
    group_id, _, rest = key.partition(":")
    topic_id, _, partition = rest.partition(":")
    if not group_id or not partition.isdigit():
        return None
    try:
        topic_id_bytes(topic_id)
    except ValueError:
        return None
    return partition_for(group_id, topic_id, int(partition), num_partitions)


def _leader_of(broker: Broker, key: str, topic: str, partition: int, listener: str) -> Coordinator:
    """The node leading the coordinator's partition, as the request's listener reaches it."""
    owner = broker.placement.owner(topic, partition)
    # A node without that listener cannot be the client's coordinator (Kafka: not available).
    address = endpoint(owner, listener) if owner is not None else None
    if owner is None or address is None:
        # No live node holds the partition yet (a failover in progress): Kafka's answer
        # while the partition has no leader.
        return _not_available(key)
    return Coordinator(
        key=key, node_id=owner.node_id, host=address[0], port=address[1], error_code=0
    )


def _not_available(key: str) -> Coordinator:
    return Coordinator(
        key=key,
        node_id=-1,
        host="",
        port=-1,
        error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
        error_message="The coordinator is not available.",
    )


# -- authorization


def authorize_find_coordinator(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    if req.key_type == COORDINATOR_KEY_SHARE:
        # Brokers only: CLUSTER_ACTION on the cluster (v6+; older versions answer
        # INVALID_REQUEST before any check).
        if header.api_version < 6 or a.allowed(client, _O.CLUSTER_ACTION, _R.CLUSTER, CLUSTER):
            return handler(header, req, client)
        return error(header, req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if req.key_type == 1:
        rtype, denied_code = (
            _R.TRANSACTIONAL_ID,
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        )
    else:
        rtype, denied_code = _R.GROUP, _GROUP_DENIED
    if header.api_version < 4:
        if not a.allowed(client, _O.DESCRIBE, rtype, req.key):
            return find_coordinator.Response(
                error_code=denied_code, error_message=None, node_id=-1, host="", port=-1
            )
        return handler(header, req, client)
    keys = list(req.coordinator_keys)
    denied = {k for k in keys if not a.allowed(client, _O.DESCRIBE, rtype, k)}
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
        return answer(merge(find_coordinator.Response()))
    return then(handler(header, dataclasses.replace(req, coordinator_keys=allowed), client), merge)
