"""DescribeConfigs (v1-4), AlterConfigs (v0-2) and IncrementalAlterConfigs (v0-1), as Kafka 4.x.

How this works
--------------
Resources, by Kafka's ConfigResource type:

* **TOPIC (2)**: every config Kafka defines for a topic (``topic_configs.KAFKA_TOPIC_CONFIGS``,
  in its order), each the topic's own value (source DYNAMIC_TOPIC_CONFIG) or the broker's
  default for it (``topic_configs.broker_default``). Alters are validated exactly as the
  KRaft controller validates them (``ConfigurationControlManager`` + ``LogConfig.validate``):
  name, values, then existence; any failure is the whole resource's error and nothing is
  stored. A change goes to the topic catalog (``topics.json`` crash-safely, or ``kgc_topic``
  in cluster mode, every node told through the catalog version) and then to the partition
  logs open here (``apply_topic_configs``): retention, cleanup.policy, segment size and age
  take effect at the next append, retention pass or compaction pass.
* **BROKER (4)**: kgc's settings under their Kafka names (``broker_entries``), read-only:
  kgc changes none of them while running, so an alter that sets one is answered as Kafka
  answers a non-dynamic config (INVALID_REQUEST "Cannot update these configs dynamically").
  The empty name (cluster-wide dynamic defaults) has no configs.
* **BROKER_LOGGER (8)**: Python's loggers with Kafka's level names; IncrementalAlterConfigs
  SET/DELETE changes a level at run time (not persisted, as in Kafka).
* **GROUP (32)**: a consumer group's ``consumer.session.timeout.ms`` and
  ``consumer.heartbeat.interval.ms``, a share group's ``share.*`` settings
  (``coordinator/group_configs.py``).

Synonyms (v1+ ``include_synonyms``) follow Kafka's ConfigHelper: the resource's own entry,
then the broker settings of the config's name family (``log.retention.ms``,
``log.retention.minutes``, ``log.retention.hours``...) by source -- DYNAMIC_BROKER_CONFIG
and DYNAMIC_DEFAULT_BROKER_CONFIG (never, in kgc), STATIC_BROKER_CONFIG (a setting given
in the properties file, the environment or on the command line), DEFAULT_CONFIG (the
setting's default) -- cut before the config's own broker name, as Kafka cuts them. The
source of an entry is its first synonym's. Sensitive values (passwords, keys, JAAS lines,
``storage.url``) are null.

ListConfigResources (KIP-1142) names the resources that have configs, as
KafkaApis.handleListConfigResources does: the groups with group configs, the brokers (and
their loggers), every topic; kgc has no client-metrics subscriptions. kafka-configs asks it
to tell a name that is neither a group nor configured.

Authorization is checked here, per resource, as KafkaApis and ControllerApis check it:
DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, the group, or the CLUSTER for broker
resources, answered with TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED for that resource.
The order of the checks is Kafka's: an alter's request-shape errors (duplicates, nulls, a
broker config that cannot change) come before authorization, validation after it.
DescribeConfigs lists the authorized resources first, then the refused ones, as Kafka does;
the alters answer in request order.

Documentation strings (v3+) are kgc's own one-liners (the settings' descriptions for the
broker), not Kafka's text.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator import group_configs, topic_configs
from coordinator.catalog import LocalTopicStore, TopicCatalog, TopicInfo
from coordinator.config import Settings, offsets_log_config
from coordinator.config_resources import (
    BROKER,
    BROKER_LOGGER,
    CLIENT_METRICS,
    CONFIG_TYPES,
    DEFAULT_CONFIG,
    DEFAULT_MESSAGES,
    DELETE,
    DYNAMIC_BROKER_LOGGER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    GROUP,
    GROUP_CONFIG,
    KNOWN_TYPES,
    OP_NAMES,
    SET,
    TOPIC,
    BrokerSetting,
    ConfigApiError,
    alter_loggers,
    broker_entries,
    broker_synonyms,
    check_broker_change,
    config_synonyms,
    denied,
    invalid_request,
    java_int,
    kafka_topic_error,
    loggers,
)
from coordinator.security.acl import AclOperation, Authorizer, ResourceType
from coordinator.server.handler import ClientInfo, Deferred
from coordinator.topic_configs import InvalidConfigError
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import (
    alter_configs,
    incremental_alter_configs,
    list_config_resources,
)
from protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)
from storage.interface import UnknownTopicError
from storage.records import OFFSETS_TOPIC

if TYPE_CHECKING:
    from coordinator.dataplane import DataPlane
    from coordinator.runtime import GroupRuntime
    from coordinator.stores import GroupConfigStore, TopicStore

__all__ = ["ConfigAdmin", "apply_topic_configs"]

log = logging.getLogger("kgc.config_admin")

CLUSTER_NAME = "kafka-cluster"

# The configs Kafka's __consumer_offsets is created with (GroupCoordinator.groupMetadataTopicConfigs).
_OFFSETS_TOPIC_OVERRIDES = ("cleanup.policy", "compression.type", "segment.bytes")


# -------------------------------------------------------------------- applying topic configs


def apply_topic_configs(data: DataPlane, info: TopicInfo) -> None:
    """Give a topic's open partition logs its new configs (the catalog holds them already)."""
    if info.offline is not None or info.is_internal:
        return
    cfg = topic_configs.log_config(data.settings, info.configs)
    for p in range(info.num_partitions):
        plog = data.logs.get(info.name, p)
        if plog is not None and not plog.closed:
            plog.config = cfg
    if info.configs.get("message.timestamp.type") == "LogAppendTime":
        data.append_time_topics.add(info.name)
    else:
        data.append_time_topics.discard(info.name)


# -------------------------------------------------------------------- the APIs


@dataclass(slots=True)
class _Change:
    """A validated change to store: the resource's whole new configs."""

    rtype: int
    name: str
    configs: dict[str, str]


Authorize = Callable[[ClientInfo, AclOperation, ResourceType, str], bool]


class ConfigAdmin:
    def __init__(
        self,
        settings: Settings,
        catalog: TopicCatalog,
        groups: GroupConfigStore,
        *,
        shared_topics: TopicStore | None = None,
        authorizer: Authorizer | None = None,
        nodes: Callable[[], list[int]] | None = None,
    ) -> None:
        """``shared_topics``: cluster mode's catalog in the database (None: ``catalog``'s
        own file); ``nodes``: the live brokers' ids (None: this node alone)."""
        self.settings = settings
        self.catalog = catalog
        self.groups = groups
        self.topics: TopicStore = (
            LocalTopicStore(catalog) if shared_topics is None else shared_topics
        )
        self.authorizer = authorizer
        self.nodes = nodes or (lambda: [settings.node_id])
        # One alter at a time on this node, so that read-modify-write of a resource's
        # configs does not interleave with another request's.
        self._lock = asyncio.Lock()

    @classmethod
    async def start(
        cls,
        settings: Settings,
        catalog: TopicCatalog,
        data: DataPlane,
        runtime: GroupRuntime,
        groups: GroupConfigStore,
        *,
        shared_topics: TopicStore | None = None,
        authorizer: Authorizer | None = None,
        nodes: Callable[[], list[int]] | None = None,
    ) -> ConfigAdmin:
        """The APIs, with what a change must reach: topic configs the open logs (on this
        node and, through the catalog version, every other), group configs the
        consumer-group core; the group configs loaded."""

        def topics_reconfigured(names: list[str]) -> None:
            for name in names:
                info = catalog.get(name)
                if info is not None:
                    apply_topic_configs(data, info)

        def groups_reconfigured(timeouts: dict[str, tuple[int, int]]) -> None:
            runtime.shard.consumer.group_configs = timeouts
            streams: dict[str, dict[str, int | str]] = {}
            for group, own in groups.configs.items():
                try:
                    streams[group] = group_configs.streams_overrides(own)
                except topic_configs.InvalidConfigError:
                    continue  # logged by the store; the broker's values apply
            runtime.shard.streams.group_configs = streams

        def share_groups_reconfigured(timeouts: dict[str, tuple[int, int]]) -> None:
            runtime.shard.share.group_configs = timeouts

        catalog.on_configs.append(topics_reconfigured)
        groups.on_change.append(groups_reconfigured)
        groups.on_share_change.append(share_groups_reconfigured)
        await groups.load()
        return cls(
            settings,
            catalog,
            groups,
            shared_topics=shared_topics,
            authorizer=authorizer,
            nodes=nodes,
        )

    def _allowed(self, client: ClientInfo, op: AclOperation, rtype: int, name: str) -> bool:
        if self.authorizer is None:
            return True
        if rtype == TOPIC:
            return self.authorizer.authorize(
                client.principal, client.host, op, ResourceType.TOPIC, name
            )
        if rtype == GROUP:
            return self.authorizer.authorize(
                client.principal, client.host, op, ResourceType.GROUP, name
            )
        return self.authorizer.authorize(
            client.principal, client.host, op, ResourceType.CLUSTER, CLUSTER_NAME
        )

    @staticmethod
    def _denial(rtype: int) -> ConfigApiError:
        if rtype == TOPIC:
            return denied(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        if rtype == GROUP:
            return denied(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        return denied(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)

    # ---------------------------------------------------------------- ListConfigResources

    def list_config_resources(
        self, header: RequestHeader, req: Any, client: ClientInfo
    ) -> list_config_resources.Response:
        """The resources that have configs, by type, in KafkaApis' order (groups, client
        metrics, broker loggers, brokers, topics); v0 was ListClientMetricsResources."""
        response = list_config_resources.Response
        if not self._allowed(client, AclOperation.DESCRIBE_CONFIGS, BROKER, ""):
            return response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        supported = (
            (CLIENT_METRICS,)
            if header.api_version == 0
            else (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)
        )
        wanted = list(req.resource_types) or list(supported)
        if any(t not in supported for t in wanted):
            return response(error_code=ErrorCode.UNSUPPORTED_VERSION)
        found: list[tuple[str, int]] = []
        if GROUP in wanted:
            found += [(g, GROUP) for g in self.groups.configs]
        # CLIENT_METRICS: kgc has no client-metrics subscriptions (KIP-714).
        brokers = [str(n) for n in self.nodes()]
        if BROKER_LOGGER in wanted:
            found += [(n, BROKER_LOGGER) for n in brokers]
        if BROKER in wanted:
            found += [(n, BROKER) for n in brokers]
        if TOPIC in wanted:
            found += [(t, TOPIC) for t in (OFFSETS_TOPIC, *self.catalog.topics)]
        return response(
            config_resources=[
                list_config_resources.ConfigResource(resource_name=n, resource_type=t)
                for n, t in found
            ]
        )

    # ---------------------------------------------------------------- DescribeConfigs

    def describe_configs(
        self, header: RequestHeader, req: DescribeConfigsRequest, client: ClientInfo
    ) -> DescribeConfigsResponse:
        if any(r.resource_type not in KNOWN_TYPES for r in req.resources):
            # KafkaApis fails the whole request (getErrorResponse) on an unknown type.
            code = ErrorCode.INVALID_REQUEST
            return DescribeConfigsResponse(
                results=[
                    DescribeConfigsResult(
                        error_code=code,
                        error_message=DEFAULT_MESSAGES[code],
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                    )
                    for r in req.resources
                ]
            )
        allowed, refused = [], []
        for r in req.resources:
            if self._allowed(
                client, AclOperation.DESCRIBE_CONFIGS, r.resource_type, r.resource_name
            ):
                allowed.append(r)
            else:
                refused.append(r)
        synonyms = req.include_synonyms
        docs = header.api_version >= 3 and req.include_documentation
        results = []
        broker = broker_entries(self.settings)
        for r in allowed:
            try:
                entries = self._describe(r.resource_type, r.resource_name, synonyms, docs, broker)
            except ConfigApiError as e:
                results.append(
                    DescribeConfigsResult(
                        error_code=e.code,
                        error_message=e.message,
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                    )
                )
                continue
            keys = r.configuration_keys
            if keys:
                wanted = set(keys)
                entries = [e for e in entries if e.name in wanted]
            results.append(
                DescribeConfigsResult(
                    resource_type=r.resource_type, resource_name=r.resource_name, configs=entries
                )
            )
        for r in refused:
            denial = self._denial(r.resource_type)
            results.append(
                DescribeConfigsResult(
                    error_code=denial.code,
                    error_message=denial.message,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                )
            )
        return DescribeConfigsResponse(results=results)

    def _describe(
        self,
        rtype: int,
        name: str,
        synonyms: bool,
        docs: bool,
        broker: dict[str, BrokerSetting],
    ) -> list[DescribeConfigsResourceResult]:
        if rtype == TOPIC:
            return self._describe_topic(name, synonyms, docs, broker)
        if rtype == BROKER:
            if not name:
                return []  # the cluster-wide dynamic defaults: kgc has none
            if self._broker_id(name, "Broker id") != self.settings.node_id:
                raise invalid_request(
                    f"Unexpected broker id, expected {self.settings.node_id} or empty string, "
                    f"but received {name}"
                )
            return [self._broker_entry(s, synonyms, docs, broker) for s in broker.values()]
        if rtype == BROKER_LOGGER:
            if not name:
                raise invalid_request("Broker id must not be empty")
            if self._broker_id(name, "Broker id") != self.settings.node_id:
                raise invalid_request(
                    f"Unexpected broker id, expected {self.settings.node_id} but received {name}"
                )
            return [
                DescribeConfigsResourceResult(
                    name=logger,
                    value=level,
                    config_source=DYNAMIC_BROKER_LOGGER_CONFIG,
                    is_sensitive=False,
                    read_only=False,
                    synonyms=[],
                )
                for logger, level in loggers().items()
            ]
        if rtype == CLIENT_METRICS:
            if not name:
                raise invalid_request("Client metrics subscription name must not be empty")
            return []  # kgc has no client metrics subscriptions (KIP-714)
        # GROUP
        if not name:
            raise invalid_request("Group name must not be empty")
        return self._describe_group(name, synonyms, docs, broker)

    @staticmethod
    def _broker_id(name: str, what: str) -> int:
        try:
            return java_int(name)
        except ValueError:
            raise invalid_request(f"{what} must be an integer, but it is: {name}") from None

    def _describe_topic(
        self, name: str, synonyms: bool, docs: bool, broker: dict[str, BrokerSetting]
    ) -> list[DescribeConfigsResourceResult]:
        why = kafka_topic_error(name)
        if why is not None:
            raise ConfigApiError(ErrorCode.INVALID_TOPIC, why)
        if name == OFFSETS_TOPIC:
            own = self._offsets_topic_configs()
        else:
            info = self.catalog.get(name)
            if info is None:
                raise ConfigApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "")
            if info.offline is not None:
                raise ConfigApiError(ErrorCode.KAFKA_STORAGE_ERROR, info.offline)
            own = info.configs
        values = topic_configs.effective(self.settings, own)
        out = []
        for config, d in topic_configs.KAFKA_TOPIC_CONFIGS.items():
            value = values[config]
            all_synonyms = (
                config_synonyms(d.synonyms[0], broker_synonyms(d.synonyms[0]), False, broker)
                if d.synonyms
                else []
            )
            if config in own:
                all_synonyms.insert(
                    0, DescribeConfigsSynonym(name=config, value=value, source=DYNAMIC_TOPIC_CONFIG)
                )
            out.append(
                DescribeConfigsResourceResult(
                    name=config,
                    value=value,
                    # Configs kgc does not honour cannot be set, so they are read-only here.
                    read_only=not d.supported,
                    config_source=all_synonyms[0].source if all_synonyms else DEFAULT_CONFIG,
                    is_sensitive=False,
                    synonyms=all_synonyms if synonyms else [],
                    config_type=CONFIG_TYPES[d.type],
                    documentation=d.doc if docs else None,
                )
            )
        return out

    def _offsets_topic_configs(self) -> dict[str, str]:
        """__consumer_offsets' own configs, as Kafka creates the topic."""
        cfg = offsets_log_config(self.settings)
        return {
            "cleanup.policy": cfg.cleanup_policy,
            "compression.type": "producer",
            "segment.bytes": str(self.settings.offsets_topic_segment_bytes),
        }

    @staticmethod
    def _broker_entry(
        s: BrokerSetting, synonyms: bool, docs: bool, broker: dict[str, BrokerSetting]
    ) -> DescribeConfigsResourceResult:
        all_synonyms = config_synonyms(s.name, broker_synonyms(s.name), s.sensitive, broker)
        return DescribeConfigsResourceResult(
            name=s.name,
            value=None if s.sensitive else s.value,
            # kgc changes no broker setting at run time (DynamicBrokerConfig has none).
            read_only=True,
            config_source=all_synonyms[0].source if all_synonyms else DEFAULT_CONFIG,
            is_sensitive=s.sensitive,
            synonyms=all_synonyms if synonyms else [],
            config_type=CONFIG_TYPES[s.type],
            documentation=s.doc if docs else None,
        )

    def _describe_group(
        self, name: str, synonyms: bool, docs: bool, broker: dict[str, BrokerSetting]
    ) -> list[DescribeConfigsResourceResult]:
        own = self.groups.get(name)
        values = group_configs.effective(self.settings, own)
        out = []
        for config, d in group_configs.GROUP_CONFIGS.items():
            value = values[config]
            source = GROUP_CONFIG if config in own else DEFAULT_CONFIG
            # Kafka's synonyms: the group's own value (once set), then the broker setting
            # that gives the default, group.<name> (a config without one names itself).
            if d.synonyms:
                default_name = d.synonyms[0]
                defaults = config_synonyms(default_name, [default_name], False, broker)
            else:
                defaults = [
                    DescribeConfigsSynonym(name=config, value=d.default, source=DEFAULT_CONFIG)
                ]
            all_synonyms = [
                *(
                    [DescribeConfigsSynonym(name=config, value=value, source=GROUP_CONFIG)]
                    if config in own
                    else []
                ),
                *defaults,
            ]
            out.append(
                DescribeConfigsResourceResult(
                    name=config,
                    value=value,
                    read_only=False,
                    config_source=source,
                    is_sensitive=False,
                    synonyms=all_synonyms if synonyms else [],
                    config_type=CONFIG_TYPES[d.type],
                    documentation=d.doc if docs else None,
                )
            )
        return out

    # ---------------------------------------------------------------- the alters

    def alter_configs(self, header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        """AlterConfigs: each resource's configs replaced whole."""
        ops = [
            (r.resource_type, r.resource_name, [(c.name, SET, c.value) for c in r.configs])
            for r in req.resources
        ]
        return self._alter(ops, req.validate_only, client, incremental=False)

    def incremental_alter_configs(self, header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        ops = [
            (
                r.resource_type,
                r.resource_name,
                [(c.name, c.config_operation, c.value) for c in r.configs],
            )
            for r in req.resources
        ]
        return self._alter(ops, req.validate_only, client, incremental=True)

    def _alter(
        self,
        resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
        validate_only: bool,
        client: ClientInfo,
        *,
        incremental: bool,
    ) -> Any:
        module = incremental_alter_configs if incremental else alter_configs
        results: list[ConfigApiError | _Change | None] = []
        seen: dict[tuple[int, str], int] = {}
        for i, (rtype, name, _) in enumerate(resources):
            first = seen.setdefault((rtype, name), i)
            results.append(None)
            if first != i:
                dup = invalid_request("Each resource must appear at most once.")
                results[first] = results[i] = dup
        for i, (rtype, name, ops) in enumerate(resources):
            if results[i] is not None:
                continue
            try:
                results[i] = self._alter_one(rtype, name, ops, client, incremental, validate_only)
            except ConfigApiError as e:
                results[i] = e
        changes = [r for r in results if isinstance(r, _Change)]

        def answer() -> Any:
            out = []
            for (rtype, name, _), r in zip(resources, results, strict=True):
                if isinstance(r, ConfigApiError):
                    code, message = int(r.code), r.message
                else:
                    code, message = 0, None
                out.append(
                    module.AlterConfigsResourceResponse(
                        error_code=code,
                        error_message=message,
                        resource_type=rtype,
                        resource_name=name,
                    )
                )
            return module.Response(responses=out)

        if validate_only or not changes:
            return answer()

        async def store() -> Any:
            async with self._lock:
                for i, r in enumerate(results):
                    if isinstance(r, _Change):
                        try:
                            await self._store(r)
                        except ConfigApiError as e:
                            results[i] = e
                        except Exception as exc:
                            log.error("storing configs of %s failed: %r", r.name, exc)
                            results[i] = ConfigApiError(ErrorCode.UNKNOWN, None)
            return answer()

        return Deferred.task(store())

    def _alter_one(
        self,
        rtype: int,
        name: str,
        ops: list[tuple[str, int, str | None]],
        client: ClientInfo,
        incremental: bool,
        validate_only: bool,
    ) -> _Change | None:
        """One resource: Kafka's preprocessing, authorization, then validation. Returns the
        change to store (None: nothing to store); raises ``ConfigApiError``."""
        # ConfigAdminManager.preprocess
        names = [n for n, _, _ in ops]
        if len(set(names)) != len(names):
            raise invalid_request("Error due to duplicate config keys")
        nulls = [n for n, op, v in ops if v is None and op != DELETE]
        if nulls:
            raise invalid_request("Null value not supported for : " + ", ".join(nulls))
        if rtype == BROKER_LOGGER and incremental:
            # RuntimeLoggerManager: ALTER_CONFIGS on the cluster first.
            if not self._allowed(client, AclOperation.ALTER_CONFIGS, BROKER_LOGGER, name):
                raise ConfigApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
            alter_loggers(self.settings.node_id, name, ops, validate_only)
            return None
        if rtype == BROKER:
            check_broker_change(self.settings, name, ops)
        elif rtype not in (TOPIC, GROUP, CLIENT_METRICS):
            raise invalid_request(f"Unknown resource type {rtype}")
        for _name, op, _value in ops:
            if op not in OP_NAMES:
                raise invalid_request(f"Unknown operations type {op}")
        # ControllerApis.authorizeAlterResource
        if not self._allowed(client, AclOperation.ALTER_CONFIGS, rtype, name):
            raise self._denial(rtype)
        if rtype == BROKER:
            return None  # only DELETEs got here: kgc has no dynamic broker config to remove
        if rtype == CLIENT_METRICS:
            raise invalid_request("kgc does not serve client metrics subscriptions (KIP-714)")
        if rtype == GROUP:
            return self._group_change(name, ops, incremental)
        return self._topic_change(name, ops, incremental)

    def _topic_change(
        self, name: str, ops: list[tuple[str, int, str | None]], incremental: bool
    ) -> _Change | None:
        info = self.catalog.get(name)
        current = dict(info.configs) if info is not None else {}
        if incremental:
            try:
                new = topic_configs.apply_incremental(current, ops)
            except InvalidConfigError as e:
                raise ConfigApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
        else:
            new = {n: v for n, _, v in ops if v is not None}
        # ControllerConfigurationValidator, then the existence check.
        if not name:
            raise invalid_request("Default topic resources are not allowed.")
        why = kafka_topic_error(name)
        if why is not None:
            raise ConfigApiError(ErrorCode.INVALID_TOPIC, why)
        try:
            topic_configs.validate(dict(new))
        except InvalidConfigError as e:
            raise ConfigApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
        if name == OFFSETS_TOPIC:
            raise ConfigApiError(
                ErrorCode.INVALID_CONFIG,
                f"kgc does not change the configs of {OFFSETS_TOPIC} (they follow offsets.* settings)",
            )
        if info is None:
            raise ConfigApiError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
        if info.offline is not None:
            raise ConfigApiError(ErrorCode.KAFKA_STORAGE_ERROR, info.offline)
        if new == current:
            return None
        return _Change(TOPIC, name, new)

    def _group_change(
        self, name: str, ops: list[tuple[str, int, str | None]], incremental: bool
    ) -> _Change | None:
        current = self.groups.get(name)
        if incremental:
            new = dict(current)
            for n, op, v in ops:
                if op == SET:
                    assert v is not None
                    new[n] = v
                elif op == DELETE:
                    new.pop(n, None)
                else:
                    try:
                        new[n] = topic_configs.list_op(
                            n, op, v or "", new.get(n), group_configs.GROUP_CONFIGS
                        )
                    except InvalidConfigError as e:
                        raise ConfigApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
        else:
            new = {n: v for n, _, v in ops if v is not None}
        if not name:
            raise invalid_request("Default group resources are not allowed.")
        try:
            group_configs.validate(self.settings, dict(new))
        except InvalidConfigError as e:
            raise ConfigApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
        if new == current:
            return None
        return _Change(GROUP, name, new)

    async def _store(self, change: _Change) -> None:
        if change.rtype == GROUP:
            await self.groups.set(change.name, change.configs)
            log.info("configs of group %s are now %s", change.name, change.configs)
            return
        try:
            await self.topics.alter_configs(change.name, change.configs)
        except UnknownTopicError:  # deleted meanwhile
            raise ConfigApiError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"The topic '{change.name}' does not exist.",
            ) from None
        log.info("configs of topic %s are now %s", change.name, change.configs or "{}")
