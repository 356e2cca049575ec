"""Transactions: kgc beside Apache Kafka 4.4, with confluent-kafka's transactional producer.

How this works: both brokers run at once (kgc as ``python -m coordinator serve`` on an empty
data directory, Kafka from ``tests/support/kafkaserver.py``: one KRaft node); each round
measures every workload on one broker and then the other, alternating which goes first, and
the summary gives each figure's median over the rounds.

1. **txn/s**: one transactional producer runs transactions back to back for ``--seconds``:
   each sends 10 records over 2 partitions of ``out`` and commits offsets for group
   ``bench`` with ``send_offsets_to_transaction`` (so every transaction has three
   partitions: two data partitions and the group's ``__consumer_offsets`` partition),
   then ``commit_transaction``;
2. **visible ms**: the time from ``begin_transaction`` to a read_committed consumer (already
   assigned and polling at the end of ``out``) receiving the transaction's one record,
   ``--samples`` times; the median and the 95th percentile;
3. **read_committed rec/s**: ``--rc-records`` records of 100 B are written to ``rc`` in
   transactions of 2,000 (one in five aborted), then a read_committed consumer reads ``rc``
   from the start to its end: committed records delivered per second (the aborted ones
   are fetched and dropped by the client, as with Kafka).

Targets (``--targets``, default ``kgc,kafka``): ``kgc`` one process, ``kafka`` Kafka 4.4, and
``kgc3`` a three-node kgc cluster on a PostgreSQL the bench starts (``tests/support/
clusterkit.py``), where a transaction's coordinator, its partitions' leaders and its group's
coordinator are in general different nodes, so its markers travel between them.

Run: ``python bench/bench_txn.py [--rounds 3] [--seconds 10] [--samples 50] [--json F]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from confluent_kafka import Consumer, Producer, TopicPartition
from results import record
from support.clusterkit import Cluster
from support.dataplanekit import create_topic
from support.kafkaserver import running_broker
from support.kgc_process import KgcProcess
from support.pgserver import PgServer

OUT, IN, RC = "out", "in", "rc"
VALUE = b"x" * 100


RETRY_BACKOFF_MS = 100  # librdkafka's default retry.backoff.ms (``--retry-backoff-ms``)


def _producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 0,
            "retry.backoff.ms": RETRY_BACKOFF_MS,
        }
    )
    p.init_transactions(60)
    return p


def txn_rate(bootstrap: str, seconds: float, tag: str) -> tuple[float, int]:
    """Transactions per second and the records written."""
    p = _producer(bootstrap, f"rate-{tag}")
    meta = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    group = meta.consumer_group_metadata()
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        p.begin_transaction()
        for i in range(10):
            p.produce(OUT, value=VALUE, partition=i % 2)
        p.send_offsets_to_transaction([TopicPartition(IN, 0, n + 1)], group, 30)
        p.commit_transaction(30)
        n += 1
    elapsed = time.perf_counter() - start
    meta.close()
    return n / elapsed, n * 10


def visible_latency(bootstrap: str, samples: int, tag: str) -> list[float]:
    """Milliseconds from begin_transaction to the record reaching a read_committed reader."""
    p = _producer(bootstrap, f"latency-{tag}")
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lat-{tag}",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    # From the partition's current end (every earlier transaction is complete).
    _, end = c.get_watermark_offsets(TopicPartition(OUT, 1), timeout=30)
    c.assign([TopicPartition(OUT, 1, end)])
    got: list[float] = []
    for i in range(samples):
        key = f"{tag}-{i}".encode()
        t0 = time.perf_counter()
        p.begin_transaction()
        p.produce(OUT, key=key, value=VALUE, partition=1)
        p.commit_transaction(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None and m.key() == key:
                got.append((time.perf_counter() - t0) * 1000)
                break
        else:
            raise RuntimeError(f"record {i} never became visible")
    c.close()
    return got


def fill_rc(bootstrap: str, records: int, tag: str) -> int:
    """``records`` records into ``rc`` in transactions of 2,000, one in five aborted;
    returns how many were committed."""
    p = _producer(bootstrap, f"fill-{tag}")
    committed = 0
    for t in range(max(1, records // 2000)):
        p.begin_transaction()
        for i in range(2000):
            p.produce(RC, value=VALUE, partition=i % 2)
        if t % 5 == 4:
            # Flushed first: librdkafka aborting while its AddPartitionsToTxn is being
            # retried (CONCURRENT_TRANSACTIONS after the previous commit) may send EndTxn
            # for a transaction the coordinator never opened (INVALID_TXN_STATE, fatal).
            p.flush(60)
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)
            committed += 2000
    return committed


def read_committed_rate(bootstrap: str, expect: int) -> tuple[float, float]:
    """Records/s and MB/s of a read_committed consumer reading ``rc`` to its end."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(RC, p, 0) for p in range(2)])
    eof: set[int] = set()
    n = size = 0
    start: float | None = None
    while len(eof) < 2:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:
                eof.add(m.partition())
            continue
        if start is None:
            start = time.perf_counter()
        n += 1
        size += len(m.value() or b"")
    elapsed = time.perf_counter() - (start or time.perf_counter())
    c.close()
    if n != expect:
        raise RuntimeError(f"read_committed delivered {n} records, {expect} were committed")
    return n / elapsed if elapsed else 0.0, size / elapsed / 1e6 if elapsed else 0.0


@contextlib.contextmanager
def kgc_cluster() -> Iterator[Cluster]:
    """Three kgc nodes on a PostgreSQL of their own, ready (every offsets partition led)."""
    base = Path(tempfile.mkdtemp(prefix="kgc-bench-txn-cluster-"))
    # A directory of its own: as root the server runs as ``postgres``, who cannot enter
    # another 0700 temporary directory.
    pg = PgServer(Path(tempfile.mkdtemp(prefix="kgc-bench-txn-pg-"))).start()
    cluster = Cluster(base, pg.url, nodes=3)
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.close()
        pg.destroy()


def run_round(name: str, bootstrap: str, args: argparse.Namespace, r: int) -> dict[str, Any]:
    tag = f"{name}-{r}"
    rate, written = txn_rate(bootstrap, args.seconds, tag)
    lat = visible_latency(bootstrap, args.samples, tag)
    if r == 0:
        args.committed[name] = fill_rc(bootstrap, args.rc_records, tag)
    rc_rate, rc_mb = read_committed_rate(bootstrap, args.committed[name])
    row = {
        "target": name,
        "round": r,
        "txn_per_s": rate,
        "records": written,
        "visible_p50_ms": statistics.median(lat),
        "visible_p95_ms": sorted(lat)[int(len(lat) * 0.95) - 1],
        "read_committed_records_per_s": rc_rate,
        "read_committed_mb_per_s": rc_mb,
    }
    print(
        f"round {r} {name}: {rate:,.1f} txn/s, visible p50 {row['visible_p50_ms']:.1f} ms "
        f"p95 {row['visible_p95_ms']:.1f} ms, read_committed {rc_rate:,.0f} rec/s",
        flush=True,
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--rc-records", type=int, default=100_000)
    ap.add_argument(
        "--retry-backoff-ms",
        type=int,
        default=100,
        help="the producers' retry.backoff.ms: a transaction's first AddPartitionsToTxn "
        "meets CONCURRENT_TRANSACTIONS while the previous one's markers are written, and "
        "waits this long",
    )
    ap.add_argument("--targets", default="kgc,kafka")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    global RETRY_BACKOFF_MS
    RETRY_BACKOFF_MS = args.retry_backoff_ms
    args.committed = {}
    targets = args.targets.split(",")
    rows: list[dict[str, Any]] = []
    kgc = KgcProcess(Path(tempfile.mkdtemp(prefix="kgc-bench-txn-")) / "data")
    kgc.start()
    try:
        with contextlib.ExitStack() as stack:
            boots = {"kgc": kgc.bootstrap}
            if "kafka" in targets:
                kafka = stack.enter_context(running_broker(prefix="kgc-bench-txn-kafka-"))
                boots["kafka"] = kafka.bootstrap
            if "kgc3" in targets:
                boots["kgc3"] = stack.enter_context(kgc_cluster()).bootstrap
            for name in targets:
                create_topic(boots[name].split(",")[0], OUT, 2)
                create_topic(boots[name].split(",")[0], IN, 1)
                create_topic(boots[name].split(",")[0], RC, 2)
            for r in range(args.rounds):
                order = targets if r % 2 == 0 else list(reversed(targets))
                for name in order:
                    rows.append(run_round(name, boots[name], args, r))
    finally:
        kgc.stop()
    summary: dict[str, dict[str, float]] = {}
    for name in targets:
        mine = [row for row in rows if row["target"] == name]
        summary[name] = {
            k: statistics.median(row[k] for row in mine)
            for k in (
                "txn_per_s",
                "visible_p50_ms",
                "visible_p95_ms",
                "read_committed_records_per_s",
                "read_committed_mb_per_s",
            )
        }
        s = summary[name]
        record("txn", f"{name} transactions", s["txn_per_s"], "txn/s", "higher")
        record("txn", f"{name} begin to visible p50", s["visible_p50_ms"], "ms", "lower")
        record(
            "txn", f"{name} read_committed", s["read_committed_records_per_s"], "rec/s", "higher"
        )
    print(
        f"\nmedians of {args.rounds} rounds; {args.seconds:.0f} s of transactions "
        f"(10 records over 2 partitions + offsets each), {args.samples} latency samples, "
        f"{args.rc_records:,} records read read_committed; "
        f"{os.cpu_count()} CPUs"
    )
    print(f"{'target':<8} {'txn/s':>8} {'visible p50':>12} {'p95':>8} {'read_committed':>16}")
    for name, s in summary.items():
        print(
            f"{name:<8} {s['txn_per_s']:>8,.1f} {s['visible_p50_ms']:>9.1f} ms "
            f"{s['visible_p95_ms']:>5.1f} ms {s['read_committed_records_per_s']:>10,.0f} rec/s"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": rows, "summary": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
