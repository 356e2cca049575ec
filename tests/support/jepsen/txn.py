"""Workload: transactions, checked for aborted reads, torn or lost commits and read_committed order.

How this works. Stock clients (confluent-kafka / librdkafka: its transactional producer and
read_committed consumer are what applications run) against topic ``tx`` of ``PARTITIONS``
partitions. Every blocking client call runs in the workload's own thread pool; the history
is written from the event loop only.

- producers: each thread owns ``transactional.id`` ``jtx-<i>`` and runs transaction after
  transaction: ``txn`` op, invoke value ``{"id": n, "decision": "commit"|"abort",
  "records": [[partition, value], ...]}`` with 2-4 records on at least two partitions, values
  ``"<n>:<j>"`` unique in the run. A commit that returned is ``ok``; one refused with an
  abortable error and then aborted is ``fail`` (certainly not committed); anything else
  (timeout, fatal, fenced) is ``info``: the producer is closed, the process retired, and the
  next producer's InitProducerId with the same transactional.id completes or aborts it. An
  abort-decision op is ``ok`` once aborted, else ``info``: either way never committed.
- readers: consumers with ``isolation.level=read_committed`` assigned every partition from
  the beginning; ``read`` ok value ``[[partition, offset, value], ...]`` per poll. A reader
  process keeps its consumer for the whole run (its per-partition order is checked).
- ``final``: after the heal, a fresh read_committed consumer reads every partition from the
  beginning until every committed transaction is seen and nothing new came for a while
  (bounded), one ``final`` op.

``check_txn`` (pure; planted histories in ``tests/jepsen/test_txn_checker.py``):
``aborted-read`` (a value of an abort-decision or failed transaction read), ``phantom`` (a
value no transaction wrote), ``torn`` (a committed or unknown transaction of which the final
read holds some records but not all), ``lost`` (an acknowledged commit of which the final read
holds none), ``duplicate`` (one value at two offsets), ``inconsistent-offset`` (one offset
read with two values), ``nonmonotonic`` (a reader's offsets in a partition not increasing)
and ``skip`` (a reader passed a committed record of the final read: it read a later offset
of that partition without having read the earlier one, which read_committed must never do).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from support.jepsen.checks import Anomaly
from support.jepsen.history import FAIL, OK, Op
from support.jepsen.workload import Ctx, Thread, pace

TOPIC = "tx"
PARTITIONS = 3
T = TypeVar("T")


def bootstrap(ctx: Ctx) -> str:
    return ",".join(f"{h}:{p}" for h, p in sorted(ctx.topology.addresses()))


class Transactions:
    name = "transactions"

    def __init__(self, producers: int = 3, readers: int = 2, abort_p: float = 0.3) -> None:
        self.producers, self.readers, self.abort_p = producers, readers, abort_p
        self.counter = itertools.count(1)
        self.committed: set[int] = set()
        self.pool = ThreadPoolExecutor(producers + readers + 2, thread_name_prefix="jtx")

    async def _blocking(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn)

    async def setup(self, ctx: Ctx) -> None:
        await ctx.create_topic(TOPIC, PARTITIONS)

    async def run(self, ctx: Ctx) -> None:
        stride = self.producers + self.readers
        try:
            await asyncio.gather(
                *(self._producer(ctx, Thread(i, stride), i) for i in range(self.producers)),
                *(
                    self._reader(ctx, Thread(self.producers + i, stride))
                    for i in range(self.readers)
                ),
            )
        except BaseException:
            self.pool.shutdown(wait=False, cancel_futures=True)
            raise

    # -- producers

    def _new_producer(self, ctx: Ctx, i: int) -> Any:
        from confluent_kafka import Producer

        p = Producer(
            {
                "bootstrap.servers": bootstrap(ctx),
                "transactional.id": f"jtx-{i}",
                "transaction.timeout.ms": 10000,
                "message.timeout.ms": 8000,
                "socket.timeout.ms": 5000,
                "linger.ms": 1,
                "log_level": 0,
            }
        )
        p.init_transactions(10)
        return p

    def _one(self, producer: Any, decision: str, records: list[list[Any]]) -> None:
        producer.begin_transaction()
        for partition, value in records:
            producer.produce(TOPIC, value=value.encode(), partition=partition)
        if decision == "commit":
            producer.commit_transaction(10)
        else:
            producer.abort_transaction(10)

    async def _producer(self, ctx: Ctx, t: Thread, i: int) -> None:
        from confluent_kafka import KafkaException

        producer: Any = None
        while ctx.running():
            if producer is None:
                try:
                    producer = await self._blocking(lambda: self._new_producer(ctx, i))
                except KafkaException:
                    await pace(ctx, 0.5)  # coordinator not there yet: not an op of the history
                    continue
            n = next(self.counter)
            parts = ctx.rng.sample(range(PARTITIONS), ctx.rng.randint(2, PARTITIONS))
            records = [
                [p, f"{n}:{j}"] for j, p in enumerate(parts + parts[: ctx.rng.randint(0, 1)])
            ]
            decision = "abort" if ctx.rng.random() < self.abort_p else "commit"
            ctx.history.invoke(
                t.process, "txn", None, {"id": n, "decision": decision, "records": records}
            )
            p = producer
            try:
                await self._blocking(partial(self._one, p, decision, records))
                ctx.history.ok(t.process)
                if decision == "commit":
                    self.committed.add(n)
            except KafkaException as exc:
                err = exc.args[0]
                if decision == "commit" and err.txn_requires_abort() and not err.fatal():
                    try:
                        await self._blocking(partial(p.abort_transaction, 10))
                        ctx.history.fail(t.process, {"error": str(err.name())})
                        await pace(ctx, 0.05)
                        continue
                    except KafkaException:
                        pass
                ctx.history.info(t.process, {"error": str(err.name())})
                t.retire()
                with contextlib.suppress(KafkaException):
                    await self._blocking(partial(p.flush, 0))
                producer = None
            await pace(ctx, 0.05)

    # -- readers

    def _new_consumer(self, ctx: Ctx, name: str) -> Any:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": bootstrap(ctx),
                "group.id": f"jtx-reader-{name}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "socket.timeout.ms": 5000,
                "fetch.wait.max.ms": 200,
                "log_level": 0,
            }
        )
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        return c

    @staticmethod
    def _poll(c: Any, timeout: float) -> list[list[Any]]:
        out = []
        for m in c.consume(500, timeout):
            if m.error() is None and m.value() is not None:
                out.append([m.partition(), m.offset(), m.value().decode()])
        return out

    async def _reader(self, ctx: Ctx, t: Thread) -> None:
        c = await self._blocking(lambda: self._new_consumer(ctx, str(t.process)))
        try:
            while ctx.running():
                ctx.history.invoke(t.process, "read", None)
                got = await self._blocking(lambda: self._poll(c, 0.5))
                ctx.history.ok(t.process, got)
        finally:
            await self._blocking(c.close)

    async def final(self, ctx: Ctx, timeout: float = 60.0) -> None:
        ok_ids = {str(n) for n in self.committed}
        c = await self._blocking(lambda: self._new_consumer(ctx, "final"))
        process = 10**6
        ctx.history.invoke(process, "final", None)
        seen: list[list[Any]] = []
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        try:
            while time.monotonic() < deadline:
                got = await self._blocking(lambda: self._poll(c, 0.5))
                seen += got
                if got:
                    quiet_since = time.monotonic()
                ids = {v.split(":")[0] for _, _, v in seen}
                if time.monotonic() - quiet_since > (3.0 if ok_ids <= ids else 10.0):
                    break
            ctx.history.ok(process, seen)
        finally:
            await self._blocking(c.close)
            self.pool.shutdown(wait=False, cancel_futures=True)

    def check(self, ops: list[Op]) -> dict[str, Any]:
        found = check_txn(ops)
        return {
            "ops": sum(1 for o in ops if o.f in ("txn", "read", "final")),
            "anomalies": sorted({a.kind for a in found}),
            "detail": [f"{a.kind}: {a.detail}" for a in found[:50]],
        }


def check_txn(ops: list[Op]) -> list[Anomaly]:
    """The anomalies of a transactions history (see the module's docstring)."""
    found: list[Anomaly] = []
    txns: dict[str, Op] = {}
    writer: dict[str, str] = {}
    for op in ops:
        if op.f == "txn":
            v = op.invoke_value
            txns[str(v["id"])] = op
            for _, value in v["records"]:
                writer[value] = str(v["id"])
    never = {
        n for n, op in txns.items() if op.invoke_value["decision"] == "abort" or op.status == FAIL
    }
    reads = [op for op in ops if op.f in ("read", "final") and op.status == OK]
    at: dict[tuple[int, int], str] = {}
    offsets_of: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for op in reads:
        for p, offset, value in op.value or []:
            n = writer.get(value)
            if n is None:
                found.append(Anomaly("phantom", [op], f"{value} at {p}/{offset}"))
            elif n in never:
                found.append(Anomaly("aborted-read", [op, txns[n]], f"{value} at {p}/{offset}"))
            if at.setdefault((p, offset), value) != value:
                found.append(
                    Anomaly(
                        "inconsistent-offset", [op], f"{p}/{offset}: {at[(p, offset)]} and {value}"
                    )
                )
            offsets_of[value].add((p, offset))
    for value, places in offsets_of.items():
        if len(places) > 1:
            found.append(Anomaly("duplicate", [], f"{value} at {sorted(places)}"))
    finals = [op for op in reads if op.f == "final"]
    if finals:
        final = finals[-1]
        final_values = {value for _, _, value in final.value or []}
        for n, op in txns.items():
            if n in never:
                continue
            mine = {value for _, value in op.invoke_value["records"]}
            seen = mine & final_values
            if seen and seen != mine:
                found.append(
                    Anomaly("torn", [op, final], f"txn {n}: {sorted(seen)} of {sorted(mine)}")
                )
            elif not seen and op.status == OK:
                found.append(Anomaly("lost", [op, final], f"txn {n} committed, none read"))
        found += _order(reads, final)
    return found


def _order(reads: list[Op], final: Op) -> list[Anomaly]:
    """Per reader process and partition: offsets increase and no committed record is passed."""
    committed: dict[int, list[int]] = defaultdict(list)
    for p, offset, _ in final.value or []:
        committed[p].append(offset)
    for offsets in committed.values():
        offsets.sort()
    found: list[Anomaly] = []
    last: dict[tuple[int, int], int] = {}
    for op in reads:
        for p, offset, value in op.value or []:
            before = last.get((op.process, p), -1)
            if offset <= before:
                found.append(
                    Anomaly("nonmonotonic", [op], f"p{op.process} {p}: {before} then {offset}")
                )
                continue
            passed = [o for o in committed.get(p, []) if before < o < offset]
            if passed:
                found.append(
                    Anomaly(
                        "skip",
                        [op],
                        f"p{op.process} {p}: {before} then {offset} ({value}), passed {passed[:5]}",
                    )
                )
            last[(op.process, p)] = offset
    return found
