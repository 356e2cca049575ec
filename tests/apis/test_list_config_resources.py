"""ListConfigResources (API 74, KIP-1142): which resources have configs, as Kafka 4.4 answers.

kafka-configs --describe --entity-type groups asks it which groups have configs, to tell a
name that is neither a group nor configured ("doesn't exist and doesn't have dynamic
config"). Kafka's KafkaApis.handleListConfigResources: DESCRIBE_CONFIGS on the cluster, else
CLUSTER_AUTHORIZATION_FAILED; v0 knows client metrics only, v1 topics, brokers, broker
loggers, client metrics and groups (all of them when the request names none); a type outside
those is UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.apis import Parts, authorized, handlers
from coordinator.apis.authorize import ApiAuthorizer
from coordinator.apis.configs import ConfigAdmin
from coordinator.catalog import TopicCatalog
from coordinator.config import Settings
from coordinator.dataplane import DataPlane
from coordinator.group.shard import GroupShard
from coordinator.group_configs import GROUP_CONFIGS_FILE, LocalGroupConfigs
from coordinator.node.reconcile import reconcile
from coordinator.security import KafkaPrincipal
from coordinator.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
)
from coordinator.server.handler import ClientInfo, Deferred
from protocol.errors import ErrorCode
from protocol.framing import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from protocol.messages import list_config_resources as lcr
from storage.local.durability import Flusher
from storage.local.manager import LogManager

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
ALICE = ClientInfo("c", "10.0.0.1", 1, 1, principal=KafkaPrincipal("User", "alice"))


class _Runtime:
    def __init__(self, shard: GroupShard) -> None:
        self.shard = shard


async def _admin(data_dir: Path, authorizer: Authorizer | None = None) -> Any:
    settings = Settings(data_dir=data_dir, node_id=3)
    flusher = Flusher()
    logs = LogManager(data_dir, flusher=flusher)
    catalog = TopicCatalog(data_dir / "topics.json")
    reconcile(catalog, logs)
    logs.open_all()
    dp = DataPlane(settings, catalog, logs, flusher)
    dp.create_partitions(catalog.create("orders", 1, {}))
    store = LocalGroupConfigs(settings, data_dir / GROUP_CONFIGS_FILE)
    shard = GroupShard()
    shard.mark_all_loaded(0)
    admin = await ConfigAdmin.start(
        settings,
        catalog,
        dp,
        _Runtime(shard),
        store,
        authorizer=authorizer,  # type: ignore[arg-type]
    )
    await store.set("billing", {"consumer.session.timeout.ms": "50000"})
    table = handlers(Parts(configs=admin))
    return authorized(ApiAuthorizer(authorizer), table) if authorizer else table


async def _call(handlers: Any, version: int, types: list[int], client: ClientInfo = ALICE) -> Any:
    frame = encode_request(
        RequestHeader(lcr.API_KEY, version, 7, "test"), lcr.Request(resource_types=types)
    )
    header, decoded = decode_request(frame[4:], strict=True)
    res = handlers[lcr.API_KEY](header, decoded, client)
    if isinstance(res, Deferred):
        res = await res
    out = encode_response(lcr.API_KEY, version, 7, res)
    _, answer = decode_response(lcr.API_KEY, version, out[4:])
    return answer


async def test_every_type_lists_what_has_configs(tmp_path: Path) -> None:
    handlers = await _admin(tmp_path)
    resp = await _call(handlers, 1, [])
    assert resp.error_code == 0
    got = {(r.resource_type, r.resource_name) for r in resp.config_resources}
    assert len(got) == len(resp.config_resources)  # each once
    assert got == {
        (GROUP, "billing"),
        (BROKER_LOGGER, "3"),
        (BROKER, "3"),
        (TOPIC, "orders"),
        (TOPIC, "__consumer_offsets"),
    }
    # Kafka's order: groups, client metrics, broker loggers, brokers, topics.
    types = [r.resource_type for r in resp.config_resources]
    assert types == sorted(types, key=[GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC].index)


async def test_one_type_and_the_versions(tmp_path: Path) -> None:
    handlers = await _admin(tmp_path)
    resp = await _call(handlers, 1, [GROUP])
    assert [(r.resource_type, r.resource_name) for r in resp.config_resources] == [
        (GROUP, "billing")
    ]
    # v0 was ListClientMetricsResources: client metrics only, of which kgc has none.
    resp = await _call(handlers, 0, [])
    assert (resp.error_code, resp.config_resources) == (0, [])
    # A type v1 does not list (here UNKNOWN) fails the request.
    resp = await _call(handlers, 1, [GROUP, 0])
    assert (resp.error_code, resp.config_resources) == (ErrorCode.UNSUPPORTED_VERSION, [])


async def test_needs_describe_configs_on_the_cluster(tmp_path: Path) -> None:
    authorizer = Authorizer(frozenset())
    handlers = await _admin(tmp_path, authorizer)
    resp = await _call(handlers, 1, [])
    assert (resp.error_code, resp.config_resources) == (
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        [],
    )
    allow = AclBinding(
        ResourceType.CLUSTER,
        "kafka-cluster",
        PatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.DESCRIBE_CONFIGS,
        AclPermissionType.ALLOW,
    )
    authorizer.update(authorizer.bindings | {allow})
    resp = await _call(handlers, 1, [GROUP])
    assert resp.error_code == 0
    assert [r.resource_name for r in resp.config_resources] == ["billing"]
