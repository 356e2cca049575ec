"""The log's transactional duties (Kafka's ProducerStateManager, UnifiedLog, TransactionIndex).

The first half drives ``PartitionProducers`` alone (offsets given by hand, as Kafka's
ProducerStateManagerTest); the second runs the data plane in process on both engines with
a fake transaction coordinator (``Coordinator``: which partitions are in which producer's
transaction), through Produce, WriteTxnMarkers, Fetch, ListOffsets and DescribeProducers,
and a restart on disk that rebuilds everything from the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.planenodekit import Node, batch, values_of

from coordinator.dataplane.producers import PartitionProducers
from coordinator.dataplane.transactions import AbortedTxn, PartitionTxns, parse_marker
from protocol.errors import ErrorCode
from protocol.messages import describe_producers, fetch, list_offsets, produce, write_txn_markers
from storage.record_batch import ATTR_TRANSACTIONAL, encode_batch, iter_batches, parse_header

TXN = ATTR_TRANSACTIONAL


def data(
    t: PartitionProducers, pid: int, epoch: int, seq: int, first: int, last: int, txn: bool = True
) -> None:
    v = t.check(pid, epoch, seq, last - first, txn)
    assert v.error == 0 and v.duplicate is None, v
    t.record(pid, epoch, seq, first, last, 0, txn)


def marker(
    t: PartitionProducers,
    pid: int,
    epoch: int,
    offset: int,
    commit: bool,
    coordinator_epoch: int = 0,
) -> None:
    assert t.check_marker(pid, epoch, coordinator_epoch).error == 0
    t.record_marker(pid, epoch, coordinator_epoch, commit, offset, 0, 0)


# ---------------------------------------------------------------- producer state


def test_open_transaction_pins_the_lso_for_every_producer() -> None:
    t = PartitionProducers()
    data(t, 1, 0, 0, 5, 6)  # pid 1 opens a transaction at 5
    data(t, 2, 0, 0, 7, 10, txn=False)  # then plain idempotent data
    assert t.txns.last_stable_offset(11, 0) == 5
    assert t.txns.last_stable_offset(3, 0) == 3  # never above the high watermark
    marker(t, 1, 0, 11, commit=True)
    # The marker is not below the high watermark yet: still pinned (unreplicated).
    assert t.txns.last_stable_offset(11, 0) == 5
    assert t.txns.last_stable_offset(12, 0) == 12
    assert t.txns.aborted == []


def test_first_unstable_offset_is_raised_to_the_log_start() -> None:
    t = PartitionProducers()
    data(t, 1, 0, 0, 5, 6)
    assert t.txns.last_stable_offset(20, 6) == 6


def test_abort_adds_an_index_entry_with_the_lso_after_it() -> None:
    t = PartitionProducers()
    data(t, 1, 0, 0, 0, 1)
    data(t, 2, 0, 0, 2, 3)
    marker(t, 1, 0, 4, commit=False)  # pid 2 still open: its first offset is the LSO
    data(t, 3, 0, 0, 5, 5)
    marker(t, 2, 0, 6, commit=False)  # pid 3 open
    marker(t, 3, 0, 7, commit=False)  # none open: marker + 1
    assert t.txns.aborted == [
        AbortedTxn(1, 0, 4, 2),
        AbortedTxn(2, 2, 6, 5),
        AbortedTxn(3, 5, 7, 8),
    ]


def test_collect_aborted_transactions() -> None:
    """Kafka's TransactionIndexTest.testCollectAbortedTransactions."""
    txns = PartitionTxns(
        aborted=[
            AbortedTxn(0, 0, 10, 11),
            AbortedTxn(1, 5, 15, 13),
            AbortedTxn(2, 18, 35, 25),
            AbortedTxn(3, 32, 50, 40),
        ]
    )
    a = txns.aborted
    assert txns.aborted_between(0, 100) == a
    assert txns.aborted_between(0, 32) == a[0:3]
    assert txns.aborted_between(0, 35) == a
    assert txns.aborted_between(10, 35) == a
    assert txns.aborted_between(11, 35) == a[1:4]
    assert txns.aborted_between(20, 41) == a[2:4]


def test_non_transactional_batch_inside_a_transaction_is_refused() -> None:
    t = PartitionProducers()
    data(t, 1, 0, 0, 0, 0)
    v = t.check(1, 0, 1, 0, False)
    assert v.error == ErrorCode.INVALID_TXN_STATE
    assert t.check(1, 0, 1, 0, True).error == 0


def test_marker_epoch_and_coordinator_fencing() -> None:
    t = PartitionProducers()
    data(t, 1, 3, 0, 0, 0)
    assert t.check_marker(1, 2, 0).error == ErrorCode.INVALID_PRODUCER_EPOCH
    marker(t, 1, 3, 1, commit=True, coordinator_epoch=5)
    assert t.check_marker(1, 3, 4).error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert t.check_marker(1, 3, 5).error == 0  # a retried marker (TV1: epoch >= current)
    # TV2: an equal epoch only when no transaction is open.
    assert t.check_marker(1, 3, 5, transaction_version=2).error == 0
    data(t, 1, 3, 1, 2, 2)
    assert t.check_marker(1, 3, 5, 2).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert t.check_marker(1, 4, 5, 2).error == 0


def test_control_record_bumps_the_producer_epoch() -> None:
    """A fence marker at epoch+1 (InitProducerId's abort) fences the old epoch's data."""
    t = PartitionProducers()
    data(t, 1, 0, 0, 0, 4)
    marker(t, 1, 1, 5, commit=False)
    assert t.txns.aborted == [AbortedTxn(1, 0, 5, 6)]
    assert t.check(1, 0, 5, 0, True).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert t.check(1, 1, 0, 0, True).error == 0  # the new epoch starts at sequence 0


def test_empty_transaction_marker_leaves_the_lso_alone() -> None:
    t = PartitionProducers()
    data(t, 2, 0, 0, 0, 0)
    marker(t, 1, 0, 1, commit=False)  # pid 1 wrote nothing here
    assert t.txns.aborted == []
    assert t.txns.last_stable_offset(2, 0) == 0  # pid 2's transaction still pins it


def test_producers_with_open_transactions_do_not_expire() -> None:
    t = PartitionProducers()
    data(t, 1, 0, 0, 0, 0)
    data(t, 2, 0, 0, 1, 1, txn=False)
    assert t.prune(log_start_offset=5, now_ms=10**9, expiration_ms=1) == 1
    assert list(t.entries) == [1]


def test_verification_guards_of_producers_that_never_appended_expire() -> None:
    t = PartitionProducers()
    g = t.txns.guard(9, 0, 0, now_ms=1000)
    assert t.txns.guard(9, 0, 5, now_ms=1500) is g and g.lowest_sequence == 0
    t.prune(log_start_offset=0, now_ms=2000, expiration_ms=1000)
    assert t.txns.verifying == {9: g}
    t.prune(log_start_offset=0, now_ms=2001, expiration_ms=1000)
    assert t.txns.verifying == {}


def test_a_verification_guard_outlives_its_producer_forgotten_below_the_log_start() -> None:
    """DeleteRecords (Kafka Streams purges its repartition topics after each commit) moving
    the log start past a producer's last marker forgets the producer here, but the guard
    its next transaction's first batch took while the coordinator adds the partition stays:
    Kafka's onLogStartOffsetIncremented leaves verification states alone (they expire only
    after producer.id.expiration.ms), else that batch is refused INVALID_TXN_STATE."""
    t = PartitionProducers()
    data(t, 7, 0, 0, 0, 4)
    t.record_marker(7, 1, 0, True, 5, 0, 0, transaction_version=2)
    g = t.txns.guard(7, 1, 0, now_ms=0, supports_epoch_bump=True)
    assert t.prune(log_start_offset=6, now_ms=0, expiration_ms=60_000) == 1
    assert t.txns.verifying == {7: g}


def test_next_transaction_verification_guard_not_cleared_by_a_tv2_marker() -> None:
    """Kafka's testNextTransactionVerificationGuardNotCleared: a TV2 marker carries the
    bumped epoch, which the producer's next transaction already uses; a guard taken at that
    epoch (the next transaction's first batch, waiting for the coordinator's add) stays.
    Any other marker clears the guard, as under TV1."""
    t = PartitionProducers()
    data(t, 7, 0, 0, 0, 4)
    g = t.txns.guard(7, 1, 0, now_ms=0)
    assert t.check_marker(7, 1, 0, transaction_version=2).error == 0
    t.record_marker(7, 1, 0, True, 5, 0, 0, transaction_version=2)
    assert t.txns.verifying == {7: g}
    data(t, 8, 0, 0, 6, 6)
    t.txns.guard(8, 0, 0, now_ms=0)
    t.record_marker(8, 0, 0, False, 7, 0, 0)  # TV1: the guard goes
    assert 8 not in t.txns.verifying
    t.txns.guard(8, 1, 0, now_ms=0)
    t.record_marker(8, 2, 0, False, 8, 0, 0, transaction_version=2)  # another epoch
    assert 8 not in t.txns.verifying


def test_marker_batch_round_trip() -> None:
    from coordinator.dataplane.transactions import marker_batch

    b = marker_batch(7, 3, 9, True, 1234, leader_epoch=2)
    h = parse_header(b)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (
        7,
        3,
        -1,
        2,
    )
    assert h.is_control and h.is_transactional and h.records_count == 1
    m = parse_marker(b)
    assert m is not None and (m.commit, m.coordinator_epoch) == (True, 9)
    # Kafka's bytes: key = version 0, type 1 (COMMIT); value = version 0, epoch.
    assert b.endswith(b"\x08\x00\x00\x00\x01\x0c\x00\x00\x00\x00\x00\x09\x00")


# ---------------------------------------------------------------- the data plane


class Coordinator:
    """A fake transaction coordinator: the partitions of each producer's transaction.
    ``hold`` (when set) parks every verification until released."""

    def __init__(self) -> None:
        self.partitions: dict[int, set[tuple[str, int]]] = {}
        self.asked: list[tuple[str, int, int, list[tuple[str, int]]]] = []
        self.hold: asyncio.Event | None = None
        self.arrived = asyncio.Event()

    async def verify(
        self, txn_id: str, pid: int, epoch: int, parts: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        self.asked.append((txn_id, pid, epoch, list(parts)))
        self.arrived.set()
        if self.hold is not None:
            await self.hold.wait()
        mine = self.partitions.get(pid, set())
        return {
            tp: ErrorCode.NO_ERROR if tp in mine else ErrorCode.TRANSACTION_ABORTABLE
            for tp in parts
        }


class TxnNode(Node):
    """A node whose data plane verifies with a fake coordinator."""

    def __init__(self, data_dir: Path, *, engine: str = "local") -> None:
        super().__init__(data_dir, engine=engine)
        self.coordinator = Coordinator()
        self.dp.txn.verify = self.coordinator.verify


@pytest.fixture(params=["memory", "local"])
async def txnode(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TxnNode]:
    n = TxnNode(tmp_path / "data", engine=request.param)
    yield n
    await n.close()


def coord(n: TxnNode) -> Coordinator:
    return n.coordinator


def txn_request(topic: str, batches: dict[int, bytes], txn_id: str = "tx") -> Any:
    """A transactional Produce of one batch per partition."""
    return produce.Request(
        transactional_id=txn_id,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            produce.TopicProduceData(
                name=topic,
                partition_data=[
                    produce.PartitionProduceData(index=p, records=b) for p, b in batches.items()
                ],
            )
        ],
    )


async def txn_produce(
    n: Node,
    topic: str,
    p: int,
    values: list[bytes],
    pid: int,
    seq: int,
    epoch: int = 0,
    version: int = 9,
    txn_id: str = "tx",
) -> Any:
    req_batch = batch(values, pid=pid, epoch=epoch, seq=seq, attributes=TXN)
    req = txn_request(topic, {p: req_batch}, txn_id)
    res = await n.call(produce.API_KEY, version, req)
    return res.responses[0].partition_responses[0]


async def write_marker(
    n: Node,
    topic: str,
    parts: list[int],
    pid: int,
    commit: bool,
    epoch: int = 0,
    coordinator_epoch: int = 0,
) -> list[int]:
    req = write_txn_markers.Request(
        markers=[
            write_txn_markers.WritableTxnMarker(
                producer_id=pid,
                producer_epoch=epoch,
                transaction_result=commit,
                topics=[
                    write_txn_markers.WritableTxnMarkerTopic(name=topic, partition_indexes=parts)
                ],
                coordinator_epoch=coordinator_epoch,
            )
        ]
    )
    resp = await n.call(write_txn_markers.API_KEY, 1, req)
    return [p.error_code for p in resp.markers[0].topics[0].partitions]


async def fetch_p0(n: Node, offset: int, committed: bool, version: int = 12) -> Any:
    req = n.fetch_req("t", [(0, offset)])
    req.isolation_level = 1 if committed else 0
    resp = await n.call(fetch.API_KEY, version, req)
    return resp.responses[0].partitions[0]


async def latest(n: Node, committed: bool) -> int:
    req = list_offsets.Request(
        replica_id=-1,
        isolation_level=1 if committed else 0,
        topics=[
            list_offsets.ListOffsetsTopic(
                name="t",
                partitions=[list_offsets.ListOffsetsPartition(partition_index=0, timestamp=-1)],
            )
        ],
    )
    resp = await n.call(list_offsets.API_KEY, 7, req)
    offset: int = resp.topics[0].partitions[0].offset
    return offset


async def test_unverified_transactional_batch_is_refused(txnode: TxnNode) -> None:
    txnode.create("t", 1)
    r = await txn_produce(txnode, "t", 0, [b"a"], pid=1, seq=0)
    assert r.error_code == ErrorCode.INVALID_TXN_STATE  # Produce v9: the old code
    assert r.error_message == "Partition was not added to the transaction"
    assert r.log_start_offset == -1  # refused before the log, as Kafka's verification
    r = await txn_produce(txnode, "t", 0, [b"a"], pid=1, seq=0, version=11)
    assert r.error_code == ErrorCode.TRANSACTION_ABORTABLE
    assert coord(txnode).asked[0] == ("tx", 1, 0, [("t", 0)])


async def test_commit_and_abort_as_a_read_committed_consumer_sees_them(txnode: TxnNode) -> None:
    txnode.create("t", 1)
    c = coord(txnode)
    c.partitions[1] = {("t", 0)}
    c.partitions[2] = {("t", 0)}
    assert (await txn_produce(txnode, "t", 0, [b"a1", b"a2"], pid=1, seq=0)).base_offset == 0
    assert (await txn_produce(txnode, "t", 0, [b"b1"], pid=2, seq=0)).base_offset == 2
    assert len(c.asked) == 2
    assert (await txn_produce(txnode, "t", 0, [b"a3"], pid=1, seq=2)).base_offset == 3
    assert len(c.asked) == 2  # an open transaction needs no second verification
    p = await txnode.produce("t", 0, batch([b"plain"]))
    assert p.base_offset == 4

    f = await fetch_p0(txnode, 0, committed=True)
    assert (f.high_watermark, f.last_stable_offset, f.records, f.aborted_transactions) == (
        5,
        0,
        b"",
        [],
    )
    f = await fetch_p0(txnode, 0, committed=False)
    assert (f.last_stable_offset, f.aborted_transactions) == (0, None)
    assert values_of(f.records) == [b"a1", b"a2", b"b1", b"a3", b"plain"]
    assert await latest(txnode, committed=True) == 0
    assert await latest(txnode, committed=False) == 5

    assert await write_marker(txnode, "t", [0], pid=2, commit=False) == [0]  # offset 5
    assert await latest(txnode, committed=True) == 0  # pid 1 still open
    assert await write_marker(txnode, "t", [0], pid=1, commit=True) == [0]  # offset 6
    assert await latest(txnode, committed=True) == 7
    f = await fetch_p0(txnode, 0, committed=True)
    assert f.last_stable_offset == 7
    assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(2, 2)]
    # The server filters nothing: aborted data and both markers are returned.
    offsets = [h.base_offset for h, _s, _e in iter_batches(f.records)]
    assert offsets == [0, 2, 3, 4, 5, 6]
    # Fetching past the abort's data still lists it until its marker.
    f = await fetch_p0(txnode, 5, committed=True)
    assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(2, 2)]
    f = await fetch_p0(txnode, 6, committed=True)
    assert f.aborted_transactions == []

    d = await txnode.call(
        describe_producers.API_KEY,
        0,
        describe_producers.Request(
            topics=[describe_producers.TopicRequest(name="t", partition_indexes=[0, 7])]
        ),
    )
    p0, p7 = d.topics[0].partitions
    assert p7.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    states = {s.producer_id: s for s in p0.active_producers}
    assert (states[1].last_sequence, states[1].current_txn_start_offset) == (2, -1)
    assert states[2].current_txn_start_offset == -1


async def test_stale_verification_cannot_open_a_hanging_transaction(txnode: TxnNode) -> None:
    """The ABA case the verification guard exists for: the coordinator said yes, then the
    transaction's marker landed before the batch did."""
    txnode.create("t", 1)
    c = coord(txnode)
    c.partitions[1] = {("t", 0)}
    c.hold = asyncio.Event()
    task = asyncio.ensure_future(txn_produce(txnode, "t", 0, [b"late"], pid=1, seq=0))
    await c.arrived.wait()
    assert await write_marker(txnode, "t", [0], pid=1, commit=False) == [0]
    c.hold.set()
    r = await task
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_TXN_STATE,
        "Record was not part of an ongoing transaction",
    )
    assert await latest(txnode, committed=True) == await latest(txnode, committed=False) == 1


async def test_marker_refusals(txnode: TxnNode) -> None:
    txnode.create("t", 1)
    coord(txnode).partitions[1] = {("t", 0)}
    await txn_produce(txnode, "t", 0, [b"a"], pid=1, seq=0, epoch=4)
    assert await write_marker(txnode, "t", [0], 1, True, epoch=3) == [
        ErrorCode.INVALID_PRODUCER_EPOCH
    ]
    assert await write_marker(txnode, "t", [0, 9], 1, True, epoch=4, coordinator_epoch=2) == [
        0,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    assert await write_marker(txnode, "t", [0], 1, False, epoch=4, coordinator_epoch=1) == [
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    ]
    # Kafka cannot build a marker with a negative epoch: the whole request fails.
    assert await write_marker(txnode, "t", [0], 1, False, epoch=-1) == [ErrorCode.UNKNOWN]
    # The fence marker's epoch now rules: the old epoch's data is refused.
    r = await txn_produce(txnode, "t", 0, [b"b"], pid=1, seq=1, epoch=4)
    assert r.error_code == 0
    assert await write_marker(txnode, "t", [0], 1, False, epoch=5, coordinator_epoch=2) == [0]
    r = await txn_produce(txnode, "t", 0, [b"c"], pid=1, seq=2, epoch=4)
    assert r.error_code == ErrorCode.INVALID_PRODUCER_EPOCH


async def test_long_poll_read_committed_wakes_when_the_marker_moves_the_lso(
    txnode: TxnNode,
) -> None:
    txnode.create("t", 1)
    coord(txnode).partitions[1] = {("t", 0)}
    await txn_produce(txnode, "t", 0, [b"a"], pid=1, seq=0)
    req = txnode.fetch_req("t", [(0, 0)], max_wait=10_000)
    req.isolation_level = 1
    polling = asyncio.ensure_future(txnode.call(fetch.API_KEY, 12, req))
    await asyncio.sleep(0)
    assert not polling.done()
    assert await write_marker(txnode, "t", [0], 1, True) == [0]
    resp = await asyncio.wait_for(polling, 5)
    p = resp.responses[0].partitions[0]
    assert p.last_stable_offset == 2
    assert [h.base_offset for h, _s, _e in iter_batches(p.records)] == [0, 1]  # data, marker


async def test_restart_rebuilds_open_transactions_and_the_aborted_index(tmp_path: Path) -> None:
    first = TxnNode(tmp_path / "data")
    first.coordinator.partitions.update({1: {("t", 0)}, 2: {("t", 0)}})
    n: Node = first
    n.create("t", 1)
    await txn_produce(n, "t", 0, [b"a"], pid=1, seq=0)
    await write_marker(n, "t", [0], 1, False)  # aborted: 0..1
    await txn_produce(n, "t", 0, [b"b"], pid=2, seq=0)  # open from 2
    await n.close()

    n = Node(tmp_path / "data")
    try:
        assert await latest(n, committed=True) == 2
        plog = n.logs.get("t", 0)
        assert plog is not None
        t = n.dp.producers[plog]
        assert t.txns.aborted == [AbortedTxn(1, 0, 1, 2)]
        assert t.entries[2].current_txn_first_offset == 2
        f = await fetch_p0(n, 0, committed=True)
        assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(1, 0)]
        # Without a coordinator now, the open transaction may still be ended by a marker.
        assert await write_marker(n, "t", [0], 2, True) == [0]
        assert await latest(n, committed=True) == 4
    finally:
        await n.close()


async def test_restart_replays_from_the_first_transactional_batch_beyond_the_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Producer state is rebuilt from the newest segments only, unless the partition ever
    held transactional data: then from its first transactional batch, noted on disk."""
    from coordinator.dataplane import producers

    first = TxnNode(tmp_path / "data")
    first.coordinator.partitions[1] = {("t", 0)}
    first.create("t", 1, {"segment.bytes": "1024"})
    for i in range(3):
        await first.produce("t", 0, batch([b"before-%d" % i]))
    await txn_produce(first, "t", 0, [b"aborted"], pid=1, seq=0)  # offset 3
    assert await write_marker(first, "t", [0], 1, False) == [0]  # offset 4
    for i in range(40):  # many segments after it
        await first.produce("t", 0, batch([b"after-%d" % i * 20]))
    plog = first.logs.get("t", 0)
    assert plog is not None and plog.segment_count > 5
    since = plog.dir / producers.TRANSACTIONAL_SINCE_FILE
    assert since.read_text().split() == ["0", "3"]
    await first.close()
    monkeypatch.setattr(producers, "PRODUCER_STATE_SCAN_BYTES", 1)  # the last segment only

    async def aborted_after_restart() -> list[AbortedTxn]:
        n = Node(tmp_path / "data")
        try:
            log = n.logs.get("t", 0)
            assert log is not None
            return n.dp.producers[log].txns.aborted
        finally:
            await n.close()

    assert await aborted_after_restart() == [AbortedTxn(1, 3, 4, 5)]
    since.unlink()  # without the note only the tail is replayed: the abort is lost
    assert await aborted_after_restart() == []


def committed_view(f: Any) -> list[tuple[bytes | None, bytes | None]]:
    """What a read_committed client keeps of a fetched partition: it drops each listed
    producer's batches from the transaction's first offset to its ABORT marker, and every
    control batch (Kafka's Fetcher/librdkafka)."""
    from storage.record_batch import decode_records

    pending = {(a.producer_id, a.first_offset) for a in f.aborted_transactions}
    aborting: set[int] = set()
    out: list[tuple[bytes | None, bytes | None]] = []
    for h, start, end in iter_batches(f.records):
        for pid, first in list(pending):
            if pid == h.producer_id and first <= h.base_offset:
                aborting.add(pid)
                pending.discard((pid, first))
        if h.is_control:
            aborting.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborting:
            continue
        out += [(r.key, r.value) for r in decode_records(f.records[start:end])]
    return out


async def test_compaction_keeps_the_last_committed_value_of_each_key(tmp_path: Path) -> None:
    """Kafka's LogCleanerTest.testBasicTransactionAwareCleaning on a data topic: an aborted
    write never hides the committed value of its key, before or after a cleaner pass."""
    from storage.local.cleaner import LogCleaner

    n = TxnNode(tmp_path / "data")
    try:
        n.coordinator.partitions.update({1: {("t", 0)}, 2: {("t", 0)}})
        n.create("t", 1, {"cleanup.policy": "compact", "segment.bytes": "1024"})

        async def view() -> dict[bytes | None, bytes | None]:
            """The partition read to its LSO as a read_committed consumer reads it (a
            fetch returns one segment at most)."""
            seen: list[tuple[bytes | None, bytes | None]] = []
            offset = 0
            while True:
                req = n.fetch_req("t", [(0, offset)])
                req.isolation_level = 1
                f = (await n.call(fetch.API_KEY, 12, req)).responses[0].partitions[0]
                if not f.records:
                    return dict(seen)
                seen += committed_view(f)
                offset = [h.next_offset for h, _s, _e in iter_batches(f.records)][-1]

        def kv(pid: int, seq: int, value: bytes) -> bytes:
            return encode_batch(
                0,
                [(b"k", value)],
                timestamp_ms=0,
                producer_id=pid,
                producer_epoch=0,
                base_sequence=seq,
                attributes=TXN,
            )

        async def txn(pid: int, seq: int, value: bytes, commit: bool) -> None:
            r = await n.call(
                produce.API_KEY,
                9,
                txn_request("t", {0: kv(pid, seq, value)}),
            )
            assert r.responses[0].partition_responses[0].error_code == 0
            assert await write_marker(n, "t", [0], pid, commit) == [0]

        await txn(1, 0, b"committed", True)
        await txn(2, 0, b"aborted", False)
        for i in range(30):  # roll segments past both transactions
            await n.produce(
                "t", 0, encode_batch(0, [(b"other-%d" % (i % 3), b"x" * 64)], timestamp_ms=0)
            )
        assert (await view())[b"k"] == b"committed"
        plog = n.logs.get("t", 0)
        assert plog is not None
        before = plog.size_bytes
        LogCleaner(plog).clean_all()  # type: ignore[arg-type]
        assert plog.size_bytes < before  # the older values of other-* are gone
        after = await view()
        assert after[b"k"] == b"committed"
        assert after[b"other-0"] == b"x" * 64
    finally:
        await n.close()


async def test_one_request_may_carry_one_transactional_producer(txnode: TxnNode) -> None:
    """Kafka's ReplicaManager: batches of two producers (or epochs) in one transactional
    request fail every partition with INVALID_PRODUCER_ID_MAPPING; a producer's plain batch
    during its open transaction is INVALID_TXN_STATE."""
    txnode.create("t", 2)
    coord(txnode).partitions[1] = {("t", 0), ("t", 1)}
    req = txn_request(
        "t",
        {p: batch([b"x"], pid=pid, epoch=0, seq=0, attributes=TXN) for p, pid in ((0, 1), (1, 2))},
    )
    resp = await txnode.call(produce.API_KEY, 9, req)
    codes = [p.error_code for p in resp.responses[0].partition_responses]
    assert codes == [ErrorCode.INVALID_PRODUCER_ID_MAPPING] * 2
    assert coord(txnode).asked == []
    assert (await txn_produce(txnode, "t", 0, [b"a"], pid=1, seq=0)).error_code == 0
    r = await txnode.produce("t", 0, batch([b"plain"], pid=1, epoch=0, seq=1))
    assert r.error_code == ErrorCode.INVALID_TXN_STATE


@given(
    st.lists(
        st.tuples(st.sampled_from(["data", "txn", "commit", "abort"]), st.integers(1, 4)),
        max_size=40,
    ),
    st.data(),
)
@settings(max_examples=150, deadline=None)
def test_lso_and_aborted_index_against_a_model(ops: list[tuple[str, int]], data: Any) -> None:
    """Random histories of four producers: the LSO is the first offset of the earliest open
    transaction (else the end), and a read_committed reader that drops what the aborted
    list names from any fetch offset keeps exactly the committed and plain records."""
    t = PartitionProducers()
    offset = 0
    open_at: dict[int, int] = {}
    seq: dict[int, int] = {}
    fate: dict[int, str] = {}  # offset -> "plain", "committed", "aborted", "open"
    owner: dict[int, int] = {}
    for op, pid in ops:
        if op in ("data", "txn"):
            txn = op == "txn" or pid in open_at
            if t.check(pid, 0, seq.get(pid, 0), 0, txn).error:
                continue
            t.record(pid, 0, seq.get(pid, 0), offset, offset, 0, txn)
            seq[pid] = seq.get(pid, 0) + 1
            fate[offset] = "open" if txn else "plain"
            owner[offset] = pid
            if txn:
                open_at.setdefault(pid, offset)
        else:
            t.record_marker(pid, 0, 0, op == "commit", offset, 0, 0)
            fate[offset] = "marker"
            owner[offset] = pid
            for o, p in owner.items():
                if p == pid and fate[o] == "open":
                    fate[o] = "committed" if op == "commit" else "aborted"
            open_at.pop(pid, None)
        offset += 1
        assert t.txns.last_stable_offset(offset, 0) == min(open_at.values(), default=offset)
    end = t.txns.last_stable_offset(offset, 0)
    start = data.draw(st.integers(0, max(end, 0)))
    listed = {(a.producer_id, a.first_offset) for a in t.txns.aborted_between(start, end)}
    dropping: set[int] = set()
    kept = []
    for o in range(start, end):
        pid = owner.get(o, -1)
        if any(p == pid and first <= o for p, first in listed):
            dropping.add(pid)
            listed = {(p, f) for p, f in listed if p != pid or f > o}
        if fate[o] == "marker":
            dropping.discard(pid)
            continue
        if fate[o] != "plain" and pid in dropping:
            continue
        kept.append(o)
    assert kept == [o for o in range(start, end) if fate[o] in ("plain", "committed")]


async def test_the_offsets_log_is_followed_for_its_lso(node_engine: str, tmp_path: Path) -> None:
    """__consumer_offsets is written by the group runtime (transactional offset commits and
    their markers), not through the data plane's producer tables: a read_committed reader
    of it still stops at its first open transaction, followed by replaying what was
    appended since the last read."""
    from coordinator.dataplane.transactions import marker_batch

    n = Node(tmp_path / "data", engine=node_engine)
    try:
        plog = n.logs.get_or_create("__consumer_offsets", 0)
        plog.append(batch([b"plain"], pid=-1))
        plog.append(batch([b"pending"], pid=5, epoch=0, seq=0, attributes=TXN))
        plog.append(batch([b"plain"], pid=-1))
        plog.flush()
        assert plog not in n.dp.producers
        assert n.dp.txn.last_stable_offset(plog) == 1
        plog.append(marker_batch(5, 0, 0, False, 0))
        plog.flush()
        assert n.dp.txn.last_stable_offset(plog) == 4  # caught up: the abort closed it
        txns = n.dp.txn.txns_of(plog)()
        assert txns is not None and txns.aborted == [AbortedTxn(5, 1, 3, 4)]
        data_log = n.logs.get_or_create("other", 0)
        assert n.dp.txn.txns_of(data_log)() is None  # a data log without a table: none
    finally:
        await n.close()


@pytest.fixture(params=["memory", "local"])
def node_engine(request: pytest.FixtureRequest) -> str:
    engine: str = request.param
    return engine


async def test_tv2_first_transactional_batch_of_a_new_producer_must_start_at_sequence_0(
    txnode: TxnNode,
) -> None:
    """Under TV2 (Produce v12+, the leader adds the partition) a producer with no state on
    the partition must start at sequence 0 (Kafka's ProducerAppendInfo.checkSequence); under
    TV1 such a producer may start anywhere."""
    txnode.create("t", 2)
    added: list[tuple[str, int]] = []

    async def add(txn_id: str, pid: int, epoch: int, parts: Sequence[tuple[str, int]]) -> ErrorCode:
        added.extend(parts)
        coord(txnode).partitions.setdefault(pid, set()).update(parts)
        return ErrorCode.NO_ERROR

    txnode.dp.txn.add = add
    r = await txn_produce(txnode, "t", 0, [b"a"], pid=1, seq=5, version=12)
    # Kafka 4.4's answer: the code alone (differential test_tv2_first_sequence_must_be_0).
    assert (r.error_code, r.error_message) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    assert added == [("t", 0)]  # added first, refused by the log
    assert await latest(txnode, committed=False) == 0
    r = await txn_produce(txnode, "t", 0, [b"a", b"b"], pid=1, seq=0, version=12)
    assert (r.error_code, r.base_offset) == (ErrorCode.NO_ERROR, 0)
    # The TV2 commit marker carries the bumped epoch, which leaves the producer no batch
    # here at it: the next transaction starts at 0 again.
    marker = write_txn_markers.Request(
        markers=[
            write_txn_markers.WritableTxnMarker(
                producer_id=1,
                producer_epoch=1,
                transaction_result=True,
                topics=[write_txn_markers.WritableTxnMarkerTopic(name="t", partition_indexes=[0])],
                coordinator_epoch=0,
                transaction_version=2,
            )
        ]
    )
    resp = await txnode.call(write_txn_markers.API_KEY, 2, marker)
    assert resp.markers[0].topics[0].partitions[0].error_code == 0
    r = await txn_produce(txnode, "t", 0, [b"c"], pid=1, seq=2, epoch=1, version=12)
    assert r.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    r = await txn_produce(txnode, "t", 0, [b"c"], pid=1, seq=0, epoch=1, version=12)
    assert (r.error_code, r.base_offset) == (ErrorCode.NO_ERROR, 3)
    # TV1 (Produce v11, verified): a producer new to the partition may start anywhere.
    coord(txnode).partitions[2] = {("t", 1)}
    r = await txn_produce(txnode, "t", 1, [b"a"], pid=2, seq=5, version=11)
    assert (r.error_code, r.base_offset) == (ErrorCode.NO_ERROR, 0)
