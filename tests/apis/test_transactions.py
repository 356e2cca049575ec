"""The transaction coordinator's API handlers over a TxnRuntime on the in-memory engine:
the wire shapes of InitProducerId, AddPartitionsToTxn (v0-3 and v4 verify-only),
AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions, Kafka's version
translations and the per-partition failures of AddPartitionsToTxn."""

from __future__ import annotations

from typing import Any

from support.txn_context import Clock, Writer, runtime, settled

from coordinator.apis.parts import Parts
from coordinator.apis.transactions import Transactions
from coordinator.catalog import TopicCatalog
from coordinator.server.handler import ClientInfo, Deferred
from coordinator.txn.state import TransactionState
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
from storage.memory import MemoryLogs

E = ErrorCode
APT = add_partitions_to_txn
CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)


async def answer(result: Any) -> Any:
    return await result if isinstance(result, Deferred) else result


async def txns() -> tuple[Transactions, Any]:
    rt = await runtime(MemoryLogs(), Writer(), Clock())
    catalog = TopicCatalog(None)
    catalog.create("foo", 2)
    return Transactions(rt, catalog, Parts()), rt


def hdr(key: int, version: int) -> RequestHeader:
    return RequestHeader(key, version, 1, "test")


async def init(t: Transactions, version: int = 4, **kw: Any) -> Any:
    req = init_producer_id.Request(
        transactional_id="t", transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
    )
    for k, v in kw.items():
        setattr(req, k, v)
    return await answer(t.init_producer_id(hdr(init_producer_id.API_KEY, version), req, CLIENT))


async def add_v3(
    t: Transactions, pid: int, epoch: int, parts: dict[str, list[int]], version: int = 3
) -> dict[tuple[str, int], int]:
    req = APT.Request(
        v3_and_below_transactional_id="t",
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            APT.AddPartitionsToTxnRequestAddPartitionsToTxnTopic(name=n, partitions=ps)
            for n, ps in parts.items()
        ],
    )
    resp = await answer(t.add_partitions_to_txn(hdr(APT.API_KEY, version), req, CLIENT))
    return {
        (r.name, p.partition_index): p.partition_error_code
        for r in resp.results_by_topic_v3_and_below
        for p in r.results_by_partition
    }


async def test_a_transaction_through_the_handlers() -> None:
    t, rt = await txns()
    r = await init(t)
    assert (r.error_code, r.producer_epoch) == (0, 0)
    pid = r.producer_id
    assert await add_v3(t, pid, 0, {"foo": [0, 1]}) == {("foo", 0): 0, ("foo", 1): 0}
    r = await answer(
        t.add_offsets_to_txn(
            hdr(add_offsets_to_txn.API_KEY, 3),
            add_offsets_to_txn.Request(
                transactional_id="t", producer_id=pid, producer_epoch=0, group_id="g"
            ),
            CLIENT,
        )
    )
    assert r.error_code == 0
    d = t.describe_transactions(
        hdr(describe_transactions.API_KEY, 0),
        describe_transactions.Request(transactional_ids=["t", "nope"]),
        CLIENT,
    )
    st, missing = d.transaction_states
    assert (st.error_code, st.transaction_state, st.producer_id, st.transaction_timeout_ms) == (
        0,
        "Ongoing",
        pid,
        60_000,
    )
    assert {x.topic: x.partitions for x in st.topics}["foo"] == [0, 1]
    assert missing.error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    lt = t.list_transactions(
        hdr(list_transactions.API_KEY, 1),
        list_transactions.Request(state_filters=["Ongoing", "Nope"]),
        CLIENT,
    )
    assert (lt.error_code, lt.unknown_state_filters) == (0, ["Nope"])
    assert [(x.transactional_id, x.transaction_state) for x in lt.transaction_states] == [
        ("t", "Ongoing")
    ]
    r = await answer(
        t.end_txn(
            hdr(end_txn.API_KEY, 3),
            end_txn.Request(
                transactional_id="t", producer_id=pid, producer_epoch=0, committed=True
            ),
            CLIENT,
        )
    )
    assert r.error_code == 0
    await settled(rt, "t", TransactionState.COMPLETE_COMMIT)
    await rt.stop()


async def test_add_partitions_failures_and_operation_not_attempted() -> None:
    t, rt = await txns()
    r = await init(t)
    got = await add_v3(t, r.producer_id, 0, {"foo": [0, 7], "bar": [0], "__consumer_offsets": [1]})
    assert got == {
        ("foo", 0): E.OPERATION_NOT_ATTEMPTED,
        ("foo", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("bar", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("__consumer_offsets", 1): E.TOPIC_AUTHORIZATION_FAILED,
    }
    md = rt.coordinator.metadata("t")
    assert md is not None and md.partitions == set()  # nothing was written
    await rt.stop()


async def test_producer_fenced_becomes_invalid_producer_epoch_for_old_versions() -> None:
    t, rt = await txns()
    r = await init(t)
    pid = r.producer_id
    await init(t)  # a new instance: epoch 1
    assert await add_v3(t, pid, 0, {"foo": [0]}, version=1) == {
        ("foo", 0): E.INVALID_PRODUCER_EPOCH
    }
    assert await add_v3(t, pid, 0, {"foo": [0]}, version=2) == {("foo", 0): E.PRODUCER_FENCED}
    stale = await init(t, version=3, producer_id=pid, producer_epoch=0)
    assert (stale.error_code, stale.producer_id, stale.producer_epoch) == (
        E.INVALID_PRODUCER_EPOCH,
        -1,
        -1,
    )
    assert (
        await init(t, version=4, producer_id=pid, producer_epoch=0)
    ).error_code == E.PRODUCER_FENCED
    assert (await init(t, producer_id=pid)).error_code == E.INVALID_REQUEST
    for version, code in ((1, E.INVALID_PRODUCER_EPOCH), (2, E.PRODUCER_FENCED)):
        r = await answer(
            t.end_txn(
                hdr(end_txn.API_KEY, version),
                end_txn.Request(
                    transactional_id="t", producer_id=pid, producer_epoch=0, committed=True
                ),
                CLIENT,
            )
        )
        assert r.error_code == code
    await rt.stop()


async def test_verify_only_from_a_broker() -> None:
    t, rt = await txns()
    r = await init(t)
    await add_v3(t, r.producer_id, 0, {"foo": [0]})
    req = APT.Request(
        transactions=[
            APT.AddPartitionsToTxnTransaction(
                transactional_id="t",
                producer_id=r.producer_id,
                producer_epoch=0,
                verify_only=True,
                topics=[APT.AddPartitionsToTxnTopic(name="foo", partitions=[0, 1])],
            )
        ]
    )
    resp = await answer(t.add_partitions_to_txn(hdr(APT.API_KEY, 4), req, CLIENT))
    (res,) = resp.results_by_transaction
    got = {
        (x.name, p.partition_index): p.partition_error_code
        for x in res.topic_results
        for p in x.results_by_partition
    }
    assert got == {("foo", 0): 0, ("foo", 1): E.TRANSACTION_ABORTABLE}
    await rt.stop()


async def test_tv2_add_from_a_broker() -> None:
    """AddPartitionsToTxn v5 with VerifyOnly false: another node's leader adds its partition
    to a TV2 transaction (asked once: the leader retries CONCURRENT_TRANSACTIONS); v4's add
    is not served."""
    t, rt = await txns()
    r = await init(t)
    pid = r.producer_id

    def req(epoch: int, parts: list[int]) -> Any:
        return APT.Request(
            transactions=[
                APT.AddPartitionsToTxnTransaction(
                    transactional_id="t",
                    producer_id=pid,
                    producer_epoch=epoch,
                    verify_only=False,
                    topics=[APT.AddPartitionsToTxnTopic(name="foo", partitions=parts)],
                )
            ]
        )

    async def codes(version: int, epoch: int, parts: list[int]) -> dict[tuple[str, int], int]:
        resp = await answer(
            t.add_partitions_to_txn(hdr(APT.API_KEY, version), req(epoch, parts), CLIENT)
        )
        assert resp.error_code == 0
        (res,) = resp.results_by_transaction
        return {
            (x.name, p.partition_index): p.partition_error_code
            for x in res.topic_results
            for p in x.results_by_partition
        }

    assert await codes(4, 0, [0]) == {("foo", 0): E.UNSUPPORTED_VERSION}
    assert await codes(5, 1, [0]) == {("foo", 0): E.PRODUCER_FENCED}  # not translated
    assert await codes(5, 0, [0, 1]) == {("foo", 0): 0, ("foo", 1): 0}
    md = rt.coordinator.describe("t")[1]
    assert md is not None and md.state is TransactionState.ONGOING
    assert md.client_transaction_version == 2
    assert sorted(md.partitions) == [("foo", 0), ("foo", 1)]
    await rt.stop()
