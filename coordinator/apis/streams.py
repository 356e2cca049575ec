"""The streams group APIs (KIP-1071): StreamsGroupHeartbeat, StreamsGroupDescribe and
StreamsGroupTopologyDescriptionUpdate (KIP-1331), as KafkaApis.

How this works: a heartbeat's topology names topics; before the group core sees it, the
API layer refuses Kafka's internal topics and illegal names (STREAMS_INVALID_TOPOLOGY with
Kafka's texts) and, with an authorizer, checks READ on the group and DESCRIBE on every
topic named. The shard then answers (``group/streams/heartbeat.py``); when the group's
internal topics are missing, the answer says so (MISSING_INTERNAL_TOPICS) and this layer
creates them, with the partition counts the coordinator decided and the configs the
client asked for (compaction for changelogs), as Kafka's AutoTopicCreationManager:
never waiting for them in the heartbeat, one creation per topic at a time, a failure
remembered for two heartbeat intervals and reported in the status (``Creation failed:``),
a principal without CREATE told so (``Unauthorized to CREATE on topics``). Once a topic
exists the catalog tells the group core, whose next heartbeat finds the topology ready.

Topology descriptions: kgc, as Kafka without ``group.streams.topology.description.plugin.class``
(its default), stores none. So a heartbeat never asks for one (``TopologyDescriptionRequired``
stays false), a describe that asks gets NOT_STORED, and a pushed description, once READ on
the group is granted, is refused as GroupCoordinatorService refuses it before any group
lookup: UNSUPPORTED_VERSION with Kafka's text.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from typing import Any

from coordinator import topic_configs
from coordinator.apis.authorize import CLUSTER, ApiAuthorizer, answer, then
from coordinator.apis.parts import Parts, need
from coordinator.catalog import TopicExistsError, topic_name_error
from coordinator.group.streams.configure import ConfiguredTopology, Status
from coordinator.security.acl import AclOperation, ResourceType
from coordinator.server.handler import ClientInfo, Handler, HandlerResult
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import streams_group_describe as sgd
from protocol.messages import streams_group_heartbeat as sgh
from protocol.messages import streams_group_topology_description_update as sgtdu

__all__ = [
    "InternalTopicCreator",
    "authorize_streams_group_describe",
    "authorize_streams_group_heartbeat",
    "authorize_streams_group_topology_description_update",
    "streams_group_heartbeat_handler",
    "streams_group_topology_description_update_handler",
]

log = logging.getLogger("kgc.streams")

_O = AclOperation
_R = ResourceType
# Topic.isInternal: the topics of Kafka's own coordinators.
_KAFKA_INTERNAL = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def _topology_topics(req: sgh.StreamsGroupHeartbeatRequest) -> list[str]:
    """Every topic the topology names, distinct, in Kafka's order."""
    names: list[str] = []
    if req.topology is None:
        return names
    for s in req.topology.subtopologies:
        names += s.source_topics
        names += s.repartition_sink_topics
        names += [t.name for t in s.repartition_source_topics]
        names += [t.name for t in s.state_changelog_topics]
    return list(dict.fromkeys(names))


def _names_refusal(
    req: sgh.StreamsGroupHeartbeatRequest,
) -> sgh.StreamsGroupHeartbeatResponse | None:
    names = _topology_topics(req)
    internal = [n for n in names if n in _KAFKA_INTERNAL]
    if internal:
        return sgh.StreamsGroupHeartbeatResponse(
            error_code=ErrorCode.STREAMS_INVALID_TOPOLOGY,
            error_message=f"Use of Kafka internal topics {','.join(internal)} in a Kafka "
            "Streams topology is prohibited.",
        )
    invalid = [n for n in names if topic_name_error(n) is not None]
    if invalid:
        return sgh.StreamsGroupHeartbeatResponse(
            error_code=ErrorCode.STREAMS_INVALID_TOPOLOGY,
            error_message=f"Topic names {','.join(invalid)} are not valid topic names.",
        )
    return None


def authorize_streams_group_heartbeat(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    if not a.allowed(client, _O.READ, _R.GROUP, req.group_id):
        return answer(
            sgh.StreamsGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        )
    refused = _names_refusal(req)
    if refused is not None:
        return answer(refused)
    for name in _topology_topics(req):
        if not a.allowed(client, _O.DESCRIBE, _R.TOPIC, name):
            return answer(
                sgh.StreamsGroupHeartbeatResponse(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            )
    return handler(header, req, client)


def _described_topics(d: sgd.DescribedGroup) -> set[str]:
    names: set[str] = set()
    for s in d.topology.subtopologies or () if d.topology is not None else ():
        names.update(s.source_topics)
        names.update(s.repartition_sink_topics)
        names.update(t.name for t in s.repartition_source_topics)
        names.update(t.name for t in s.state_changelog_topics)
    return names


def authorize_streams_group_describe(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    """DESCRIBE on each group; a group whose topology names a topic the client may not
    DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED without members or topology (KafkaApis)."""
    order = list(req.group_ids)
    denied = {g for g in order if not a.allowed(client, _O.DESCRIBE, _R.GROUP, g)}

    def merge(resp: Any) -> Any:
        got: dict[str, sgd.DescribedGroup] = {}
        for d in resp.groups:
            if d.error_code == 0 and any(
                not a.allowed(client, _O.DESCRIBE, _R.TOPIC, t) for t in _described_topics(d)
            ):
                d = sgd.DescribedGroup(
                    group_id=d.group_id,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message="The described group uses topics that the client is not "
                    "authorized to describe.",
                    topology=None,
                )
            elif d.error_code == 0 and req.include_authorized_operations:
                d = dataclasses.replace(
                    d,
                    authorized_operations=a.authorizer.authorized_operations(
                        client.principal, client.host, _R.GROUP, d.group_id
                    ),
                )
            got[d.group_id] = d
        refused = [
            sgd.DescribedGroup(group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
            for g in order
            if g in denied
        ]
        return dataclasses.replace(resp, groups=refused + [d for g, d in got.items()])

    allowed = [g for g in order if g not in denied]
    if not allowed:
        return answer(merge(sgd.StreamsGroupDescribeResponse()))
    return then(handler(header, dataclasses.replace(req, group_ids=allowed), client), merge)


class InternalTopicCreator:
    """Creates a streams group's missing internal topics, as Kafka's AutoTopicCreationManager."""

    def __init__(self, parts: Parts) -> None:
        self.broker = need(parts.broker, "broker")
        self.checks = parts.checks
        self.inflight: set[str] = set()
        # topic -> (error text, until when it is remembered, monotonic ms)
        self.errors: dict[str, tuple[str, float]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def _unauthorized(self, client: ClientInfo, names: list[str]) -> list[str]:
        a = self.checks
        if a is None or a.quietly(client, _O.CREATE, _R.CLUSTER, CLUSTER):
            return []
        return [n for n in names if not a.allowed(client, _O.CREATE, _R.TOPIC, n)]

    def after_heartbeat(
        self,
        resp: sgh.StreamsGroupHeartbeatResponse,
        configured: ConfiguredTopology,
        client: ClientInfo,
        heartbeat_interval_ms: int,
    ) -> sgh.StreamsGroupHeartbeatResponse:
        topics = configured.internal_topics_to_create
        if resp.error_code or not topics:
            return resp
        status = next(
            (s for s in resp.status or () if s.status_code == Status.MISSING_INTERNAL_TOPICS), None
        )
        unauthorized = self._unauthorized(client, list(topics))
        if unauthorized:
            text = f"Unauthorized to CREATE on topics {', '.join(unauthorized)}."
            if status is not None:
                status.status_detail += "; " + text
            else:
                resp.status = [
                    *(resp.status or []),
                    sgh.Status(Status.MISSING_INTERNAL_TOPICS, text),
                ]
            return resp
        now = time.monotonic() * 1000
        for name, t in topics.items():
            cached = self.errors.get(name)
            if cached is not None and cached[1] <= now:
                del self.errors[name]
            if name in self.inflight or name in self.errors:
                continue
            self.inflight.add(name)
            task = asyncio.get_running_loop().create_task(
                self._create(
                    name,
                    t.num_partitions,
                    dict(t.configs),
                    t.creation_replication_factor(),
                    now + 2 * heartbeat_interval_ms,
                )
            )
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        failed = [(n, self.errors[n][0]) for n in topics if n in self.errors]
        if failed and status is not None:
            listed = ", ".join(f"{n} ({e})" for n, e in failed[:3])
            if len(failed) > 3:
                listed += f" and {len(failed) - 3} more"
            status.status_detail += f"; Creation failed: {listed}."
        return resp

    async def _create(
        self, name: str, partitions: int, configs: dict[str, str], rf: int, remember_until: float
    ) -> None:
        try:
            if rf not in (-1, 1):
                raise ValueError(
                    f"Unable to replicate the partition {rf} time(s): The target replication "
                    f"factor of {rf} cannot be reached because only 1 broker(s) are registered."
                )
            raw: dict[str, str | None] = dict(configs)
            topic_configs.validate(raw)
            shared = self.broker.shared_topics
            if shared is not None:
                await shared.create(name, partitions, configs)
            else:
                # The group's view of the topics can lag a creation just made, so a
                # heartbeat may ask again: the catalog then raises TopicExistsError.
                self.broker.create_topic(name, partitions, configs)
            log.info("created internal topic %s with %d partitions %s", name, partitions, configs)
        except TopicExistsError:
            pass
        except Exception as exc:
            log.warning("creating internal topic %s failed: %s", name, exc)
            self.errors[name] = (str(exc), remember_until)
        finally:
            self.inflight.discard(name)


def streams_group_heartbeat_handler(parts: Parts) -> Handler:
    runtime = need(parts.groups, "groups")
    creator = InternalTopicCreator(parts)
    shard = runtime.shard
    call = functools.partial(runtime.call, shard.streams_group_heartbeat)

    def handle(header: RequestHeader, req: Any, client: ClientInfo) -> HandlerResult:
        refused = _names_refusal(req)
        if refused is not None:
            return answer(refused)
        result = call(header, req, client)
        configured = shard.streams_topics_to_create
        shard.streams_topics_to_create = None
        if configured is None:
            return answer(result)
        interval = shard.streams.heartbeat_interval_ms(req.group_id)
        return then(
            result,
            lambda resp: creator.after_heartbeat(
                dataclasses.replace(resp), configured, client, interval
            ),
        )

    return handle


def authorize_streams_group_topology_description_update(
    a: ApiAuthorizer, handler: Handler, header: RequestHeader, req: Any, client: ClientInfo
) -> HandlerResult:
    """READ on the group, as an offset commit (KIP-1331: a push does not modify the group)."""
    if not a.allowed(client, _O.READ, _R.GROUP, req.group_id):
        return answer(
            sgtdu.StreamsGroupTopologyDescriptionUpdateResponse(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
            )
        )
    return handler(header, req, client)


# GroupCoordinatorService.throwIfStreamsGroupTopologyDescriptionUpdateInvalid, first check.
NO_PLUGIN_MESSAGE = "The broker has no streams group topology description plugin configured."


def streams_group_topology_description_update_handler(parts: Parts) -> Handler:
    """No description plugin: every push refused before the group, its member or the
    description is looked at (so empty ids and a null description get the same answer).
    GroupCoordinatorService answers it: served where the group coordinator runs."""
    need(parts.groups, "groups")

    def handle(header: RequestHeader, req: Any, client: ClientInfo) -> HandlerResult:
        return answer(
            sgtdu.StreamsGroupTopologyDescriptionUpdateResponse(
                error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=NO_PLUGIN_MESSAGE
            )
        )

    return handle
