"""Exactly-once consume-transform-produce with confluent-kafka through a SIGKILL of kgc.

A processor reads ``in`` (read_committed, group ``eos``), writes each value to ``out`` and
commits its input positions with ``send_offsets_to_transaction``, one transaction per poll
batch. kgc is SIGKILLed in the middle and restarted on the same port; on any error the
processor aborts what it can and starts over with a new consumer and producer (the same
transactional.id fences the old one and aborts its open transaction), resuming from the
committed offsets. Every input must appear exactly once in ``out`` under read_committed,
and the group's committed offsets must be the end of ``in``.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from support.dataplanekit import create_topic
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration

N = 3000
PARTITIONS = 3


def _consumer(kgc: KgcProcess) -> Consumer:
    c = Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": "eos",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe(["in"])
    return c


def _producer(kgc: KgcProcess) -> Producer:
    p = Producer({"bootstrap.servers": kgc.bootstrap, "transactional.id": "eos-1", "linger.ms": 5})
    p.init_transactions(60)
    return p


def _process(kgc: KgcProcess, done: int, kill_at: int, killed: list[bool]) -> int:
    """Run one processor until the input is consumed or an error; returns inputs done."""
    c = _consumer(kgc)
    p: Producer | None = None
    try:
        p = _producer(kgc)
        idle_since = time.monotonic()
        while done < N:
            msgs = c.consume(200, 1.0)
            msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                if time.monotonic() - idle_since > 30:
                    raise AssertionError(f"no input for 30 s at {done}")
                continue
            idle_since = time.monotonic()
            p.begin_transaction()
            for m in msgs:
                p.produce("out", key=m.key(), value=m.value())
            p.send_offsets_to_transaction(
                c.position(c.assignment()), c.consumer_group_metadata(), 30
            )
            if not killed[0] and done + len(msgs) >= kill_at:
                # Killed with the transaction open: it must be aborted, its inputs redone.
                p.flush(30)
                kgc.kill()
                killed[0] = True
                kgc.start()
                raise KafkaException("kgc was killed mid-transaction")
            p.commit_transaction(60)
            done += len(msgs)
        return done
    except KafkaException:
        if p is not None:
            with contextlib.suppress(KafkaException):
                p.abort_transaction(30)
        return -1
    finally:
        c.close()


def _read_out(kgc: KgcProcess) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": kgc.bootstrap,
            "group.id": "verify",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    out: list[bytes] = []
    try:
        c.assign([TopicPartition("out", p, 0) for p in range(PARTITIONS)])
        eof: set[int] = set()
        deadline = time.monotonic() + 60
        while (len(eof) < PARTITIONS or len(out) < N) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:
                    eof.add(m.partition())
                continue
            out.append(m.value())
    finally:
        c.close()
    return out


def test_consume_transform_produce_is_exactly_once_through_a_sigkill(tmp_path: Path) -> None:
    kgc = KgcProcess(tmp_path / "data")
    kgc.start()
    try:
        create_topic(kgc.bootstrap, "in", PARTITIONS)
        create_topic(kgc.bootstrap, "out", PARTITIONS)
        src = Producer({"bootstrap.servers": kgc.bootstrap, "enable.idempotence": True})
        for i in range(N):
            src.produce("in", key=b"%d" % (i % 97), value=b"v%d" % i)
        src.flush(60)
        killed = [False]
        done = 0
        for _ in range(10):
            got = _process(kgc, done, N // 3, killed)
            if got == N:
                break
            # Restarted: the committed offsets say where to resume; count from them.
            done = _committed(kgc)
        assert killed[0]
        out = _read_out(kgc)
        counts = Counter(out)
        assert len(counts) == N, f"missing {N - len(counts)} inputs"
        assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1][:5]
        assert _committed(kgc) == N
    finally:
        kgc.stop()


def _committed(kgc: KgcProcess) -> int:
    c = Consumer({"bootstrap.servers": kgc.bootstrap, "group.id": "eos"})
    try:
        parts = c.committed([TopicPartition("in", p) for p in range(PARTITIONS)], timeout=30)
        return sum(max(tp.offset, 0) for tp in parts)
    finally:
        c.close()
