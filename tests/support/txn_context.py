"""TxnContext: the pure transaction coordinator driven with a fake clock and a fake log.

How this works: the context plays the runtime around a ``TransactionCoordinator`` (Kafka's
TransactionCoordinatorTest with its mocked state manager): every ``TxnWrite`` an API returns
is appended to an in-memory ``__transaction_state`` (per partition) and handed back through
``written``, or failed with a chosen error (``fail_writes``). Markers the coordinator asks
for are kept in ``markers``; ``deliver`` answers each partition with a code and, once all
are done, writes the Complete* record. ``replayed()`` loads the log into a fresh
coordinator, to check that the log rebuilds what memory holds.

For the runtime (``coordinator/runtime/txn_runtime.py``) on the in-memory engine:
``runtime(logs, writer, clock)`` starts one, ``Writer`` is a MarkerWriter that records each
call and answers from a script, ``settled`` waits for an id to reach a state with nothing
pending.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable

from coordinator.runtime.txn_runtime import ProducerIdSpare, TxnRuntime
from coordinator.txn.coordinator import (
    TransactionCoordinator,
    TxnConfig,
    TxnOutcome,
    TxnWrite,
)
from coordinator.txn.markers import TxnMarker, marker_outcome
from coordinator.txn.metadata import TransactionMetadata
from coordinator.txn.state import TransactionState
from protocol.errors import ErrorCode
from storage.interface import Durability, LogConfig, Logs
from storage.memory import MemoryDurability

E = ErrorCode


class TxnContext:
    def __init__(self, config: TxnConfig | None = None, first_pid: int = 1000) -> None:
        self.config = config or TxnConfig()
        self.now = 1_000_000
        self._pids = itertools.count(first_pid)
        self.coord = TransactionCoordinator(self.config, lambda: next(self._pids))
        self.log: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.writes: list[TxnWrite] = []
        self.markers: list[tuple[str, TxnMarker]] = []
        self.fail_writes: ErrorCode | None = None
        for p in range(self.config.transaction_state_log_num_partitions):
            self.coord.begin_load(p, 0)
            self.coord.load_partition(p, 0, [], self.now)

    def sleep(self, ms: int) -> None:
        self.now += ms

    def run(self, outcome: TxnOutcome) -> TxnOutcome:
        """Make ``outcome``'s write durable (or fail it) and return the final answer."""
        if outcome.write is None:
            return outcome
        w = outcome.write
        self.writes.append(w)
        if self.fail_writes is not None:
            return self.coord.written(w, self.fail_writes, self.now)
        self.log.setdefault(w.partition, []).append((w.key, w.value))
        done = self.coord.written(w, E.NO_ERROR, self.now)
        if done.markers is not None:
            self.markers.append((w.transactional_id, done.markers))
        return done

    # -- the APIs, run to their answer
    def init(
        self, txn_id: str, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1
    ) -> TxnOutcome:
        return self.run(self.coord.init_producer_id(txn_id, timeout_ms, pid, epoch, self.now))

    def add(
        self, txn_id: str, pid: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> TxnOutcome:
        return self.run(self.coord.add_partitions(txn_id, pid, epoch, partitions, self.now))

    def end(self, txn_id: str, pid: int, epoch: int, commit: bool) -> TxnOutcome:
        return self.run(self.coord.end_txn(txn_id, pid, epoch, commit, self.now))

    def md(self, txn_id: str) -> TransactionMetadata:
        md = self.coord.metadata(txn_id)
        assert md is not None
        return md

    def deliver(self, code: ErrorCode = E.NO_ERROR) -> list[TxnOutcome]:
        """Answer every outstanding marker's partitions with ``code``; finish the done ones."""
        out = []
        pending, self.markers = self.markers, []
        for txn_id, marker in pending:
            outcome = marker_outcome(code)
            if outcome == "fenced":
                continue
            if outcome == "retry":
                self.markers.append((txn_id, marker))
                continue
            for tp in marker.partitions:
                assert self.coord.marker_partition_done(txn_id, marker, tp)
            w = self.coord.markers_done(txn_id, marker)
            if w is not None:
                out.append(self.run(TxnOutcome(write=w)))
        return out

    def replayed(
        self, coordinator_epoch: int = 1
    ) -> tuple[TransactionCoordinator, list[TxnMarker]]:
        fresh = TransactionCoordinator(self.config, lambda: next(self._pids))
        markers: list[TxnMarker] = []
        for p in range(self.config.transaction_state_log_num_partitions):
            fresh.begin_load(p, coordinator_epoch)
            markers += fresh.load_partition(p, coordinator_epoch, self.log.get(p, []), self.now)
        return fresh, markers


class Writer:
    """A MarkerWriter that records each call and answers from a script (then NONE)."""

    def __init__(self) -> None:
        self.calls: list[TxnMarker] = []
        self.script: list[dict[tuple[str, int], ErrorCode]] = []
        self.called = asyncio.Event()
        self.hold: asyncio.Event | None = None

    async def write_markers(self, marker: TxnMarker) -> dict[tuple[str, int], ErrorCode]:
        self.calls.append(marker)
        self.called.set()
        if self.hold is not None:
            await self.hold.wait()
        answer = self.script.pop(0) if self.script else {}
        return {tp: answer.get(tp, E.NO_ERROR) for tp in marker.partitions}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


async def runtime(
    logs: Logs,
    writer: Writer,
    clock: Clock,
    flusher: Durability | None = None,
    log_config: LogConfig | None = None,
) -> TxnRuntime:
    pids = iter(range(5000, 6000))
    spare = ProducerIdSpare()
    rt = TxnRuntime(
        TransactionCoordinator(TxnConfig(), spare.take),
        logs,
        flusher or MemoryDurability(),
        log_config=log_config or LogConfig(cleanup_policy="compact"),
        markers=writer,
        producer_ids=lambda: next(pids),
        spare=spare,
        clock=clock,
    )
    await rt.load()
    return rt


async def settled(rt: TxnRuntime, txn_id: str, state: TransactionState) -> None:
    """Wait until ``txn_id`` reached ``state`` with nothing pending (markers done)."""
    for _ in range(500):
        md = rt.coordinator.metadata(txn_id)
        if md is not None and md.state is state and md.pending_state is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{txn_id} never reached {state.kafka_name}: {md}")
