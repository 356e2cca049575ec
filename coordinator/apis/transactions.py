"""The transaction coordinator's APIs: InitProducerId (with a transactional id),
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions.

How this works: each handler authorizes as Kafka's KafkaApis does (TRANSACTIONAL_ID WRITE or
DESCRIBE, topic WRITE per partition for AddPartitionsToTxn, group READ for
AddOffsetsToTxn, CLUSTER_ACTION for the brokers' AddPartitionsToTxn v4+), then
calls the ``TxnRuntime`` (``coordinator/runtime/txn_runtime.py``), which answers once the
coordinator's record is durable. The errors old request versions do not know are
translated as Kafka does: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for InitProducerId
v<4, EndTxn v<2, AddPartitionsToTxn v<2 and AddOffsetsToTxn v<2. InitProducerId without a
transactional id stays the data plane's (``apis/data.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from coordinator.apis.parts import Parts, need
from coordinator.catalog import TopicCatalog
from coordinator.runtime.txn_runtime import TxnRuntime
from coordinator.security.acl import AclOperation as _O
from coordinator.security.acl import ResourceType as _R
from coordinator.server.handler import ClientInfo, Deferred, Handler
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    describe_transactions,
    end_txn,
    init_producer_id,
    list_transactions,
)

__all__ = ["Transactions", "handler", "init_producer_id_handler"]

E = ErrorCode
CLUSTER = "kafka-cluster"
_APT = add_partitions_to_txn
_INTERNAL = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def _fenced(code: ErrorCode, version: int, first_knowing: int) -> ErrorCode:
    """PRODUCER_FENCED for a version that knows it, else INVALID_PRODUCER_EPOCH."""
    if code is E.PRODUCER_FENCED and version < first_knowing:
        return E.INVALID_PRODUCER_EPOCH
    return code


class Transactions:
    def __init__(self, txn: TxnRuntime, catalog: TopicCatalog, parts: Parts) -> None:
        """``parts`` for the authorizer's checks and the data plane (set once built)."""
        self.txn = txn
        self.catalog = catalog
        self.parts = parts

    def _allowed(self, client: ClientInfo, op: _O, rtype: _R, name: str) -> bool:
        checks = self.parts.checks
        return checks is None or checks.allowed(client, op, rtype, name)

    # -- InitProducerId
    def init_producer_id(self, header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        if req.transactional_id is None:
            return need(self.parts.data, "data").init_producer_id(header, req, client)
        if (req.producer_id == -1) != (req.producer_epoch == -1):
            return init_producer_id.Response(
                error_code=E.INVALID_REQUEST, producer_id=-1, producer_epoch=-1
            )
        return Deferred.task(self._init(header.api_version, req))

    async def _init(self, version: int, req: Any) -> Any:
        o = await self.txn.init_producer_id(
            req.transactional_id, req.transaction_timeout_ms, req.producer_id, req.producer_epoch
        )
        if o.error is not E.NO_ERROR:
            return init_producer_id.Response(
                error_code=_fenced(o.error, version, 4), producer_id=-1, producer_epoch=-1
            )
        return init_producer_id.Response(
            error_code=0, producer_id=o.producer_id, producer_epoch=o.producer_epoch
        )

    # -- AddPartitionsToTxn
    def add_partitions_to_txn(self, header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        if header.api_version >= 4:
            return self._batched(header.api_version, req, client)
        return Deferred.task(self._add_v3(header.api_version, req, client))

    def _partition_errors(
        self, client: ClientInfo, txn_id: str, topics: list[Any]
    ) -> tuple[list[tuple[str, int]], dict[tuple[str, int], ErrorCode]]:
        """The partitions, and the authorization/existence failures (Kafka's order)."""
        wanted = [(t.name, p) for t in topics for p in t.partitions]
        if not self._allowed(client, _O.WRITE, _R.TRANSACTIONAL_ID, txn_id):
            return wanted, dict.fromkeys(wanted, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        failed: dict[tuple[str, int], ErrorCode] = {}
        for topic, p in wanted:
            info = self.catalog.get(topic)
            # Kafka's internal topics never join a transaction this way (the offsets
            # partition joins through AddOffsetsToTxn).
            if topic in _INTERNAL or not self._allowed(client, _O.WRITE, _R.TOPIC, topic):
                failed[(topic, p)] = E.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= p < info.num_partitions:
                failed[(topic, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
        if failed:
            for tp in wanted:
                failed.setdefault(tp, E.OPERATION_NOT_ATTEMPTED)
        return wanted, failed

    async def _add_v3(self, version: int, req: Any, client: ClientInfo) -> Any:
        txn_id = req.v3_and_below_transactional_id
        wanted, errors = self._partition_errors(client, txn_id, req.v3_and_below_topics)
        if not errors:
            o = await self.txn.add_partitions(
                txn_id, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch, wanted
            )
            errors = dict.fromkeys(wanted, _fenced(o.error, version, 2))
        by_topic: dict[str, list[Any]] = {}
        for (topic, p), code in errors.items():
            by_topic.setdefault(topic, []).append(
                _APT.AddPartitionsToTxnResponseAddPartitionsToTxnTopicResultAddPartitionsToTxnPartitionResult(
                    partition_index=p, partition_error_code=code
                )
            )
        return _APT.Response(
            results_by_topic_v3_and_below=[
                _APT.AddPartitionsToTxnResponseAddPartitionsToTxnTopicResult(
                    name=t, results_by_partition=rs
                )
                for t, rs in by_topic.items()
            ]
        )

    def _batched(self, version: int, req: Any, client: ClientInfo) -> Any:
        """v4+: from brokers (CLUSTER_ACTION): v4's verify-only form, and v5's add of TV2
        (a partition leader or group coordinator adding its partition)."""
        if not self._allowed(client, _O.CLUSTER_ACTION, _R.CLUSTER, CLUSTER):
            return _APT.Response(error_code=E.CLUSTER_AUTHORIZATION_FAILED)
        if version >= 5 and any(not t.verify_only for t in req.transactions):
            return Deferred.task(self._batched_adds(req))
        return self._batched_response(
            [(t, self._verified_or_refused(t, version)) for t in req.transactions]
        )

    def _verified_or_refused(self, t: Any, version: int) -> dict[tuple[str, int], ErrorCode]:
        wanted = [(x.name, p) for x in t.topics for p in x.partitions]
        if t.verify_only:
            return self.txn.verify(t.transactional_id, t.producer_id, t.producer_epoch, wanted)
        # v4's add (TV0 in Kafka) is never sent by a broker that speaks v5.
        return dict.fromkeys(wanted, E.UNSUPPORTED_VERSION)

    async def _batched_adds(self, req: Any) -> Any:
        answers = []
        for t in req.transactions:
            if t.verify_only:
                answers.append((t, self._verified_or_refused(t, 5)))
                continue
            wanted = [(x.name, p) for x in t.topics for p in x.partitions]
            # Asked once: the leader retries CONCURRENT_TRANSACTIONS itself.
            o = await self.txn.add_partitions(
                t.transactional_id, t.producer_id, t.producer_epoch, wanted, 2
            )
            answers.append((t, dict.fromkeys(wanted, o.error)))
        return self._batched_response(answers)

    @staticmethod
    def _batched_response(answers: list[tuple[Any, dict[tuple[str, int], ErrorCode]]]) -> Any:
        results = []
        for t, codes in answers:
            by_topic: dict[str, list[Any]] = {}
            for (topic, p), code in codes.items():
                by_topic.setdefault(topic, []).append(
                    _APT.AddPartitionsToTxnPartitionResult(
                        partition_index=p, partition_error_code=code
                    )
                )
            results.append(
                _APT.AddPartitionsToTxnResult(
                    transactional_id=t.transactional_id,
                    topic_results=[
                        _APT.AddPartitionsToTxnTopicResult(name=n, results_by_partition=rs)
                        for n, rs in by_topic.items()
                    ],
                )
            )
        return _APT.Response(error_code=0, results_by_transaction=results)

    # -- AddOffsetsToTxn
    def add_offsets_to_txn(self, header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        if not self._allowed(client, _O.WRITE, _R.TRANSACTIONAL_ID, req.transactional_id):
            return add_offsets_to_txn.Response(error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self._allowed(client, _O.READ, _R.GROUP, req.group_id):
            return add_offsets_to_txn.Response(error_code=E.GROUP_AUTHORIZATION_FAILED)
        return Deferred.task(self._add_offsets(header.api_version, req))

    async def _add_offsets(self, version: int, req: Any) -> Any:
        o = await self.txn.add_offsets(
            req.transactional_id, req.producer_id, req.producer_epoch, req.group_id
        )
        return add_offsets_to_txn.Response(error_code=_fenced(o.error, version, 2))

    # -- EndTxn
    def end_txn(self, header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        if not self._allowed(client, _O.WRITE, _R.TRANSACTIONAL_ID, req.transactional_id):
            return end_txn.Response(error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return Deferred.task(self._end(header.api_version, req))

    async def _end(self, version: int, req: Any) -> Any:
        # v5 is TV2's: the epoch bumped at every end, the new identity in the answer.
        o = await self.txn.end_txn(
            req.transactional_id, req.producer_id, req.producer_epoch, req.committed, version >= 5
        )
        if o.error is not E.NO_ERROR:
            return end_txn.Response(error_code=_fenced(o.error, version, 2))
        return end_txn.Response(
            error_code=0, producer_id=o.producer_id, producer_epoch=o.producer_epoch
        )

    # -- DescribeTransactions / ListTransactions
    def describe_transactions(self, header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        DT = describe_transactions
        states = []
        for txn_id in req.transactional_ids:
            st = DT.TransactionState(transactional_id=txn_id)
            if not self._allowed(client, _O.DESCRIBE, _R.TRANSACTIONAL_ID, txn_id):
                st.error_code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            else:
                err, md = self.txn.describe(txn_id)
                st.error_code = err
                if md is not None:
                    by_topic: dict[str, list[int]] = {}
                    for topic, p in sorted(md.partitions):
                        if self._allowed(client, _O.DESCRIBE, _R.TOPIC, topic):
                            by_topic.setdefault(topic, []).append(p)
                    st.transaction_state = md.state.kafka_name
                    st.transaction_timeout_ms = md.txn_timeout_ms
                    st.transaction_start_time_ms = md.txn_start_timestamp
                    st.producer_id = md.producer_id
                    st.producer_epoch = md.producer_epoch
                    st.topics = [DT.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]
            states.append(st)
        return DT.Response(transaction_states=states)

    def list_transactions(self, header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        LT = list_transactions
        err, unknown, mds = self.txn.coordinator.list_transactions(
            req.state_filters,
            req.producer_id_filters,
            req.duration_filter,
            req.transactional_id_pattern,
            self.txn.clock(),
        )
        if err is not E.NO_ERROR:
            return LT.Response(error_code=err)
        return LT.Response(
            error_code=0,
            unknown_state_filters=unknown,
            transaction_states=[
                LT.TransactionState(
                    transactional_id=md.transactional_id,
                    producer_id=md.producer_id,
                    transaction_state=md.state.kafka_name,
                )
                for md in mds
                if self._allowed(client, _O.DESCRIBE, _R.TRANSACTIONAL_ID, md.transactional_id)
            ],
        )


def handler(name: str) -> Callable[[Parts], Handler]:
    """The factory of one API's handler, as an API table entry names it."""

    def factory(parts: Parts) -> Handler:
        txns = Transactions(need(parts.txn, "txn"), need(parts.broker, "broker").catalog, parts)
        return cast(Handler, getattr(txns, name))

    return factory


def init_producer_id_handler(parts: Parts) -> Handler:
    """InitProducerId: the data plane's for a null transactional id, the coordinator's for
    the others; on parts without a transaction coordinator, the data plane's alone (it
    answers a transactional id COORDINATOR_NOT_AVAILABLE)."""
    data = need(parts.data, "data")
    if parts.txn is None:
        return cast(Handler, data.init_producer_id)
    catalog = parts.broker.catalog if parts.broker is not None else TopicCatalog(None)
    return cast(Handler, Transactions(parts.txn, catalog, parts).init_producer_id)
