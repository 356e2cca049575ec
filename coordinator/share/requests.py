"""ShareFetch (78) and ShareAcknowledge (79) as Kafka's KafkaApis handles them.

How this works: a request is checked at the top (the group id, READ on the group, the
member id, v2's renew rules), then its share session is used (``sessions``: epoch 0 opens,
-1 closes, any other must match and moves on at once), then every partition it names is
checked (READ on the topic, the topic id, the partition), acknowledgements are applied
first (validated as ``validate_batches``; one partition's failure leaves the others
alone), then records are acquired (from session epoch 1 on, starting ``epoch % n``
partitions further on each fetch, Kafka's round-robin rotation, so MaxRecords is shared
fairly), and the two results are merged per partition. A fetch waits up to MaxWaitMs
until MinBytes of records could be acquired (measured before acquiring, from each
partition's fetch offset, as Kafka's DelayedShareFetch does), and one that acquires nothing
waits too. Incremental responses (epoch > 0)
list a partition only when it has records, an error, an acknowledgement result, or was just
added to the session. A session closed with epoch -1, or by its connection closing, gives
back every record its member holds; the group's last session gone unloads its partitions.

Membership is not consulted: any member id may fetch any partition whose share state was
initialized; ownership is checked per record when acknowledged (Kafka's design).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from coordinator.security.acl import AclOperation, ResourceType
from coordinator.server.handler import ClientInfo, Deferred, HandlerResult
from coordinator.share.leader import PartitionKey, Served, ShareLeader
from coordinator.share.partition import RENEW
from coordinator.share.sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ShareSession,
    ShareSessionCache,
    TopicPartition,
)
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import share_acknowledge as sa
from protocol.messages import share_fetch as sf

# (client, operation, resource type, name) -> allowed; None: no authorizer.
Allowed = Callable[[ClientInfo, AclOperation, ResourceType, str], bool] | None
AckBatches = list[tuple[int, int, list[int]]]
# A partition's acknowledgement result: its error and Kafka's message for it.
Outcome = tuple[ErrorCode, str | None]

_MAX_MEMBER_ID = 36


def validate_batches(batches: Sequence[Any], version: int, is_renew_ack: bool) -> ErrorCode:
    """Kafka's validateAcknowledgementBatches for one partition's batches."""
    previous_last: int | None = None
    for b in batches:
        if b.first_offset > b.last_offset:
            return ErrorCode.INVALID_REQUEST
        if previous_last is not None and b.first_offset < previous_last:
            return ErrorCode.INVALID_REQUEST
        previous_last = b.last_offset
        types = b.acknowledge_types
        if not types:
            return ErrorCode.INVALID_REQUEST
        if len(types) > 1 and len(types) != b.last_offset - b.first_offset + 1:
            return ErrorCode.INVALID_REQUEST
        top = 4 if version >= 2 else 3
        for t in types:
            if not 0 <= t <= top:
                return ErrorCode.INVALID_REQUEST
            if t == RENEW and not is_renew_ack:
                return ErrorCode.INVALID_REQUEST
    return ErrorCode.NO_ERROR


def rotated(items: list[Any], epoch: int) -> list[Any]:
    """Kafka's PartitionRotateStrategy (round robin): from session epoch 1 on, a fetch
    starts acquiring ``epoch % n`` partitions further on, so MaxRecords is shared fairly
    among a session's partitions over its fetches."""
    n = len(items)
    if n <= 1 or epoch < 1 or epoch % n == 0:
        return items
    k = epoch % n
    return items[k:] + items[:k]


def _member_id_valid(member_id: str | None) -> bool:
    return bool(member_id) and len(member_id or "") <= _MAX_MEMBER_ID


class ShareRequests:
    """ShareFetch and ShareAcknowledge over the leader and the session cache."""

    def __init__(self, leader: ShareLeader, sessions: ShareSessionCache) -> None:
        self.leader = leader
        self.sessions = sessions

    # -- sessions ending
    def connection_closed(self, conn_id: int) -> None:
        for session in self.sessions.connection_closed(conn_id):
            self._ended(session)

    def _close(self, session: ShareSession) -> None:
        if self.sessions.close(session):
            self._ended(session)

    def _ended(self, session: ShareSession) -> None:
        group_id, member_id = session.key
        self.leader.release_member(group_id, member_id)
        if not self.sessions.group_has_sessions(group_id):
            self.leader.unload_group(group_id)

    # -- checks shared by both APIs
    def _top_error(self, allowed: Allowed, req: Any, client: ClientInfo) -> ErrorCode:
        if req.group_id is None:
            return ErrorCode.INVALID_REQUEST
        if allowed is not None and not allowed(
            client, AclOperation.READ, ResourceType.GROUP, req.group_id
        ):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED
        if not _member_id_valid(req.member_id):
            return ErrorCode.INVALID_REQUEST
        return ErrorCode.NO_ERROR

    def _partition_error(
        self, allowed: Allowed, client: ClientInfo, tp: TopicPartition
    ) -> ErrorCode:
        info = self.leader.catalog.by_id.get(tp[0])
        if allowed is not None and (
            info is None or not allowed(client, AclOperation.READ, ResourceType.TOPIC, info.name)
        ):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        _, error = self.leader.log_of(*tp)
        return error

    async def _ack_one(
        self,
        group_id: str,
        member: str,
        tp: TopicPartition,
        batches: Sequence[Any],
        version: int,
        renew: bool,
    ) -> Outcome:
        error = validate_batches(batches, version, renew)
        if error != ErrorCode.NO_ERROR:
            return error, None
        entry = self.leader.loaded((group_id, tp[0], tp[1]))
        if entry is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        if not batches:
            return ErrorCode.NO_ERROR, None
        renewals = [
            (b.first_offset, b.last_offset) for b in batches if b.acknowledge_types == [RENEW]
        ]
        acks: AckBatches = [
            (b.first_offset, b.last_offset, list(b.acknowledge_types))
            for b in batches
            if b.acknowledge_types != [RENEW]
        ]
        if renewals:
            outcome = self.leader.renew(entry, member, renewals)
            if outcome[0] != ErrorCode.NO_ERROR:
                return outcome
        if not acks:
            return ErrorCode.NO_ERROR, None
        return await self.leader.acknowledge(entry, member, acks)

    async def _acknowledge_all(
        self,
        allowed: Allowed,
        client: ClientInfo,
        group_id: str,
        member: str,
        acks: dict[TopicPartition, list[Any]],
        version: int,
        renew: bool,
    ) -> dict[TopicPartition, Outcome]:
        errors: dict[TopicPartition, Outcome] = {}
        work: list[tuple[TopicPartition, asyncio.Future[Outcome]]] = []
        for tp, batches in acks.items():
            error = self._partition_error(allowed, client, tp)
            if error != ErrorCode.NO_ERROR:
                errors[tp] = error, None
                continue
            work.append(
                (
                    tp,
                    asyncio.ensure_future(
                        self._ack_one(group_id, member, tp, batches, version, renew)
                    ),
                )
            )
        for tp, fut in work:
            errors[tp] = await fut
        return errors

    # -- ShareFetch
    def share_fetch(
        self, allowed: Allowed, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        return Deferred.task(self._share_fetch(allowed, header.api_version, req, client))

    async def _share_fetch(
        self, allowed: Allowed, version: int, req: Any, client: ClientInfo
    ) -> Any:
        error = self._top_error(allowed, req, client)
        limits = req.max_wait_ms or req.min_bytes or req.max_bytes or req.max_records
        if error == ErrorCode.NO_ERROR and version >= 2 and req.is_renew_ack and limits:
            return sf.Response(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message="maxBytes must be set to 0, minBytes must be set to 0, "
                "maxWaitMs must be set to 0 and maxRecords must be set to 0 if isRenewAck is true.",
            )
        if error != ErrorCode.NO_ERROR:
            return sf.Response(error_code=error)
        group_id, member, epoch = req.group_id, req.member_id, req.share_session_epoch
        requested: list[TopicPartition] = []
        acks: dict[TopicPartition, list[Any]] = {}
        for t in req.topics:
            for p in t.partitions:
                tp = (t.topic_id, p.partition_index)
                if tp not in acks:
                    requested.append(tp)
                    acks[tp] = []
                acks[tp].extend(p.acknowledgement_batches)
        acks = {tp: bs for tp, bs in acks.items() if bs}
        # The session.
        if epoch == INITIAL_EPOCH:
            if acks:
                return sf.Response(error_code=ErrorCode.INVALID_REQUEST)
            error, session, _ = self.sessions.open((group_id, member), client.conn_id, requested)
            if error != ErrorCode.NO_ERROR:
                await asyncio.sleep(req.max_wait_ms / 1000)  # Kafka answers this after MaxWaitMs
                return sf.Response(error_code=error)
        else:
            error, session = self.sessions.use((group_id, member), epoch)
            if error != ErrorCode.NO_ERROR:
                return sf.Response(error_code=error)
        assert session is not None
        if epoch > 0:
            for tp in requested:
                if tp not in session.partitions:
                    session.partitions[tp] = True
            for ft in req.forgotten_topics_data:
                for p in ft.partitions:
                    session.partitions.pop((ft.topic_id, p), None)
        # Acknowledgements first.
        renew = version >= 2 and req.is_renew_ack
        ack_errors = await self._acknowledge_all(
            allowed, client, group_id, member, acks, version, renew
        )
        # Then the fetch.
        results: dict[TopicPartition, sf.PartitionData] = {}
        if epoch != FINAL_EPOCH and not renew:
            fetch_set = list(session.partitions) if epoch > 0 else requested
            results = await self._fetch(
                allowed, client, req, group_id, member, fetch_set, version, epoch
            )
        response = sf.Response(acquisition_lock_timeout_ms=self.leader.lock_duration_ms(group_id))
        order = list(results) + [tp for tp in ack_errors if tp not in results]
        by_topic: dict[bytes, sf.ShareFetchableTopicResponse] = {}
        for tp in order:
            pd = results.get(tp) or sf.PartitionData(partition_index=tp[1])
            if tp in ack_errors:
                pd.acknowledge_error_code, pd.acknowledge_error_message = ack_errors[tp]
            must = session.partitions.get(tp, False)
            if epoch > 0 and not (must or pd.acquired_records or pd.error_code or tp in ack_errors):
                continue
            if tp in session.partitions:
                session.partitions[tp] = False
            topic = by_topic.get(tp[0])
            if topic is None:
                topic = by_topic[tp[0]] = sf.ShareFetchableTopicResponse(topic_id=tp[0])
                response.responses.append(topic)
            topic.partitions.append(pd)
        if epoch == FINAL_EPOCH:
            self._close(session)
        return response

    async def _fetch(
        self,
        allowed: Allowed,
        client: ClientInfo,
        req: Any,
        group_id: str,
        member: str,
        fetch_set: list[TopicPartition],
        version: int,
        epoch: int = INITIAL_EPOCH,
    ) -> dict[TopicPartition, sf.PartitionData]:
        results: dict[TopicPartition, sf.PartitionData] = {}
        ready: list[tuple[TopicPartition, Served]] = []
        loads: list[tuple[TopicPartition, asyncio.Future[tuple[Served | None, ErrorCode]]]] = []
        for tp in fetch_set:
            pd = results[tp] = sf.PartitionData(partition_index=tp[1])
            error = self._partition_error(allowed, client, tp)
            if error != ErrorCode.NO_ERROR:
                pd.error_code = error
                continue
            key: PartitionKey = (group_id, tp[0], tp[1])
            loads.append((tp, asyncio.ensure_future(self.leader.load(key))))
        for tp, fut in rotated(loads, epoch):  # the order partitions acquire in
            entry, error = await fut
            if entry is None:
                results[tp].error_code = error
            else:
                ready.append((tp, entry))
        if not ready or req.max_records <= 0 or req.max_bytes <= 0:
            return results
        loop = asyncio.get_running_loop()
        deadline = loop.time() + req.max_wait_ms / 1000
        record_limit = version >= 2 and req.share_acquire_mode == 1
        per_partition = max(req.max_bytes // len(ready), 1)
        while True:
            remaining = deadline - loop.time()
            fenced = any(e.fenced for _, e in ready)  # answered at once
            if req.min_bytes > 1 and remaining > 0 and not fenced:
                # Kafka's DelayedShareFetch: nothing is acquired until MinBytes could be,
                # or MaxWaitMs has passed.
                available = 0
                for _, entry in ready:
                    if self.leader.served.get(entry.key) is entry and available < req.min_bytes:
                        available += self.leader.available_bytes(entry, per_partition)
                if available < req.min_bytes:
                    await self.leader.wait([e for _, e in ready], int(remaining * 1000))
                    continue
            budget = req.max_records
            got = False
            unvisited: list[TopicPartition] = []
            for tp, entry in ready:
                if budget <= 0:
                    unvisited.append(tp)
                    continue
                if self.leader.served.get(entry.key) is not entry or entry.sp is None:
                    if entry.fenced:  # this node stopped leading the data partition
                        results[tp].error_code = ErrorCode.NOT_LEADER_FOR_PARTITION
                        got = True
                    continue  # else unloaded meanwhile (its group's last session ended)
                try:
                    data, acquired = self.leader.acquire(
                        entry,
                        member,
                        budget,
                        req.batch_size or req.max_records,
                        per_partition,
                        record_limit,
                    )
                except OSError:  # the log is damaged: Fetch's answer for it
                    results[tp].error_code = ErrorCode.KAFKA_STORAGE_ERROR
                    got = True
                    continue
                if acquired:
                    got = True
                    pd = results[tp]
                    pd.records = data
                    pd.acquired_records = [
                        sf.AcquiredRecords(f, last, c) for f, last, c in acquired
                    ]
                    budget -= sum(last - f + 1 for f, last, _ in acquired)
            remaining = deadline - loop.time()
            if got or remaining <= 0 or req.min_bytes <= 0:
                for tp in unvisited:  # Kafka answers only the partitions it acquired from
                    del results[tp]
                return results
            await self.leader.wait([e for _, e in ready], int(remaining * 1000))

    # -- ShareAcknowledge
    def share_acknowledge(
        self, allowed: Allowed, header: RequestHeader, req: Any, client: ClientInfo
    ) -> HandlerResult:
        return Deferred.task(self._share_acknowledge(allowed, header.api_version, req, client))

    async def _share_acknowledge(
        self, allowed: Allowed, version: int, req: Any, client: ClientInfo
    ) -> Any:
        error = self._top_error(allowed, req, client)
        if error != ErrorCode.NO_ERROR:
            return sa.Response(error_code=error)
        group_id, member, epoch = req.group_id, req.member_id, req.share_session_epoch
        if epoch == INITIAL_EPOCH:
            return sa.Response(error_code=ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        error, session = self.sessions.use((group_id, member), epoch)
        if error != ErrorCode.NO_ERROR:
            return sa.Response(error_code=error)
        assert session is not None
        acks: dict[TopicPartition, list[Any]] = {}
        for t in req.topics:
            for p in t.partitions:
                acks.setdefault((t.topic_id, p.partition_index), []).extend(
                    p.acknowledgement_batches
                )
        renew = version >= 2 and req.is_renew_ack
        errors = await self._acknowledge_all(
            allowed, client, group_id, member, acks, version, renew
        )
        response = sa.Response(acquisition_lock_timeout_ms=self.leader.lock_duration_ms(group_id))
        by_topic: dict[bytes, sa.ShareAcknowledgeTopicResponse] = {}
        for tp, (code, message) in errors.items():
            topic = by_topic.get(tp[0])
            if topic is None:
                topic = by_topic[tp[0]] = sa.ShareAcknowledgeTopicResponse(topic_id=tp[0])
                response.responses.append(topic)
            topic.partitions.append(
                sa.PartitionData(partition_index=tp[1], error_code=code, error_message=message)
            )
        if epoch == FINAL_EPOCH:
            self._close(session)
        return response
