"""The transaction runtime on the in-memory engine: records durable before memory changes,
markers through the MarkerWriter seam until every partition has them, Complete* after,
replay on restart (markers re-driven from Prepare*), the timeout sweep, a failed fsync."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support.txn_context import Clock, Writer, runtime, settled

from coordinator.runtime.txn_runtime import InProcessMarkers, TxnRuntime
from coordinator.txn.markers import TxnMarker
from coordinator.txn.records import TRANSACTION_STATE_TOPIC
from coordinator.txn.state import TransactionState
from protocol.errors import ErrorCode
from storage.interface import LogConfig
from storage.local.durability import Flusher
from storage.local.manager import LogManager
from storage.memory import MemoryDurability, MemoryLogs
from storage.records.offsets import partition_for

E = ErrorCode
S = TransactionState
TP = ("foo", 0)
TP2 = ("bar", 3)


async def markers_idle(rt: TxnRuntime) -> None:
    """Wait until no marker delivery task is left (only the two sweeps run)."""
    for _ in range(500):
        if len(rt.tasks) == 2:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("marker delivery never ended")


async def test_commit_goes_through_markers_to_complete_commit_and_survives_restart() -> None:
    logs, writer, clock = MemoryLogs(), Writer(), Clock()
    rt = await runtime(logs, writer, clock)
    init = await rt.init_producer_id("t", 60_000, -1, -1)
    assert (init.error, init.producer_id, init.producer_epoch) == (E.NO_ERROR, 5000, 0)
    assert (await rt.add_partitions("t", 5000, 0, [TP, TP2])).error is E.NO_ERROR
    assert (await rt.add_offsets("t", 5000, 0, "g")).error is E.NO_ERROR
    end = await rt.end_txn("t", 5000, 0, True)
    assert end.error is E.NO_ERROR
    await settled(rt, "t", S.COMPLETE_COMMIT)
    (call,) = writer.calls
    assert (call.commit, call.producer_id, call.producer_epoch, call.coordinator_epoch) == (
        True,
        5000,
        0,
        0,
    )
    assert set(call.partitions) == {TP, TP2, ("__consumer_offsets", partition_for("g", 50))}
    plog = logs.get(TRANSACTION_STATE_TOPIC, rt.coordinator.partition_for("t"))
    assert plog is not None and plog.log_end_offset == 5  # Empty, Ongoing x2, Prepare, Complete
    await rt.stop()
    again = await runtime(logs, Writer(), clock)
    md = again.coordinator.metadata("t")
    assert md is not None and (md.state, md.producer_id, md.producer_epoch) == (
        S.COMPLETE_COMMIT,
        5000,
        0,
    )
    await again.stop()


async def test_restart_mid_prepare_commit_re_sends_markers_until_complete() -> None:
    logs, writer, clock = MemoryLogs(), Writer(), Clock()
    rt = await runtime(logs, writer, clock)
    await rt.init_producer_id("t", 60_000, -1, -1)
    await rt.add_partitions("t", 5000, 0, [TP])
    writer.hold = asyncio.Event()  # the markers never come back: the node dies first
    assert (await rt.end_txn("t", 5000, 0, True)).error is E.NO_ERROR
    await writer.called.wait()
    await rt.stop()
    second = Writer()
    again = await runtime(logs, second, clock)
    await settled(again, "t", S.COMPLETE_COMMIT)
    (call,) = second.calls
    assert (call.commit, call.partitions) == (True, (TP,))
    await again.stop()


async def test_retriable_marker_results_are_sent_again_fenced_stops() -> None:
    logs, writer, clock = MemoryLogs(), Writer(), Clock()
    rt = await runtime(logs, writer, clock)
    await rt.init_producer_id("t", 60_000, -1, -1)
    await rt.add_partitions("t", 5000, 0, [TP, TP2])
    writer.script = [{TP: E.NOT_LEADER_FOR_PARTITION}]
    await rt.end_txn("t", 5000, 0, False)
    await settled(rt, "t", S.COMPLETE_ABORT)
    assert [c.partitions for c in writer.calls] == [(TP2, TP), (TP,)]
    # A fenced answer leaves the transaction prepared (the next owner re-drives it).
    await rt.add_partitions("t", 5000, 0, [TP])
    writer.script = [{TP: E.TRANSACTION_COORDINATOR_FENCED}]
    await rt.end_txn("t", 5000, 0, True)
    await markers_idle(rt)
    md = rt.coordinator.metadata("t")
    assert md is not None and md.state is S.PREPARE_COMMIT
    assert (await rt.init_producer_id("t", 60_000, -1, -1)).error is E.CONCURRENT_TRANSACTIONS
    await rt.stop()


async def test_timed_out_transaction_is_aborted_with_an_epoch_bump() -> None:
    logs, writer, clock = MemoryLogs(), Writer(), Clock()
    rt = await runtime(logs, writer, clock)
    await rt.init_producer_id("t", 5_000, -1, -1)
    await rt.add_partitions("t", 5000, 0, [TP])
    clock.now += 5_001
    await rt.abort_timed_out()
    await settled(rt, "t", S.COMPLETE_ABORT)
    (call,) = writer.calls
    assert (call.commit, call.producer_epoch) == (False, 1)
    assert (await rt.end_txn("t", 5000, 0, True)).error is E.PRODUCER_FENCED
    await rt.stop()


async def test_failed_fsync_answers_not_coordinator_and_changes_nothing() -> None:
    logs, writer, clock = MemoryLogs(), Writer(), Clock()
    flusher = MemoryDurability()
    rt = await runtime(logs, writer, clock, flusher)
    await rt.init_producer_id("t", 60_000, -1, -1)
    flusher.failing = OSError(5, "Input/output error")
    assert (await rt.add_partitions("t", 5000, 0, [TP])).error is E.NOT_COORDINATOR
    md = rt.coordinator.metadata("t")
    assert md is not None and (md.state, md.pending_state, md.partitions) == (S.EMPTY, None, set())
    flusher.failing = None
    assert (await rt.add_partitions("t", 5000, 0, [TP])).error is E.NO_ERROR
    await rt.stop()


async def test_in_process_markers_write_every_partition_and_a_raise_is_retriable() -> None:
    calls: list[tuple[str, int, int, int, int, bool, int]] = []

    async def write(
        topic: str, partition: int, pid: int, epoch: int, coord: int, commit: bool, tv: int
    ) -> ErrorCode:
        calls.append((topic, partition, pid, epoch, coord, commit, tv))
        if partition == 3:
            raise OSError("disk")
        return E.NO_ERROR

    got = await InProcessMarkers(write).write_markers(TxnMarker(7, 2, 5, True, (TP, TP2)))
    assert got == {TP: E.NO_ERROR, TP2: E.KAFKA_STORAGE_ERROR}
    assert sorted(calls) == [("bar", 3, 7, 2, 5, True, 0), ("foo", 0, 7, 2, 5, True, 0)]


async def test_on_disk_a_prepared_commit_is_finished_after_a_restart(tmp_path: Path) -> None:
    """The local engine with real fsyncs: a transaction left in PrepareCommit by a node that
    stopped before its markers is rebuilt from the segment files and completed."""
    cfg = LogConfig(cleanup_policy="compact")
    flusher = Flusher()
    flusher.start()
    logs = LogManager(tmp_path, flusher=flusher)
    writer, clock = Writer(), Clock()
    rt = await runtime(logs, writer, clock, flusher, cfg)
    await rt.init_producer_id("t", 60_000, -1, -1)
    await rt.add_partitions("t", 5000, 0, [TP, TP2])
    writer.hold = asyncio.Event()
    assert (await rt.end_txn("t", 5000, 0, True)).error is E.NO_ERROR
    await writer.called.wait()
    await rt.stop()
    await flusher.stop()
    logs.close_all()

    flusher = Flusher()
    flusher.start()
    logs = LogManager(tmp_path, flusher=flusher)
    logs.open_all(lambda topic, partition: cfg)
    second = Writer()
    again = await runtime(logs, second, clock, flusher, cfg)
    await settled(again, "t", S.COMPLETE_COMMIT)
    assert [c.partitions for c in second.calls] == [(TP2, TP)]
    await again.stop()
    await flusher.stop()
    logs.close_all()
