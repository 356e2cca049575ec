"""What the KIP-951 leader hints (apis/leaders.py) cost per Produce and per Fetch, counted.

How this works: ``kgc serve --kgc-workers 2`` (where every Produce and Fetch handler is
wrapped by ``leaders.hinted``) runs under valgrind's cachegrind, which counts the
instructions the supervisor and both workers execute (user space; a fork is followed, each
process writes its own ``cachegrind.out.<pid>``, the counts are summed): a count, the same
on a loaded machine as on a quiet one. The wrapper is on (the product) or off: the server
is started through this script's ``--serve off``, which replaces ``leaders.hinted`` by the
bare handler before ``kgc serve`` builds its API table -- an ablation for this benchmark
only, not a setting.

The load goes to worker 0 only, on a partition it leads (the common case: no hint to give,
so what is counted is the wrapper's toll on answers that need none), one connection, one
request in flight:

* **produce**: Produce v12, acks=-1, one batch of one 100-byte record (answered once the
  batch is fsynced: a deferred answer);
* **fetch**: a consumer reading as records arrive: a long-polling Fetch v17 (sessionless,
  max_wait 10 s, min_bytes 1) at the log end, then on the same connection the Produce that
  wakes it (the connection hands requests over in order, so the Fetch is parked first);
  a pair's count less a produce's is the Fetch's.

Three servers a mode, (P produces, F pairs) = (n, n), (3n, n), (n, 3n): the differences of
their counts over 2n cancel start-up, topic creation and shutdown. Background work that
runs by the clock is not cancelled (the server is slowed about 50 times under valgrind, and
more on a loaded machine): the workers' poll of their shared files, every 100 ms, made a
mode's runs differ by ~100,000 instructions a request, so the launcher polls once a
minute (the supervisor's nudge tells the other worker of the new topic anyway); what is
left (timers of seconds) is why the rounds alternate the modes and medians are reported.

Usage: ``python bench/count_leader_hints.py [--rounds 3] [--requests 200] [--modes off,on]``
(``--modes on``: the hints on only, to compare checkouts: the off mode is the same code in
every checkout where ``hinted`` is what the API table wraps with).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cachegrind
import checkout  # puts this checkout and tests/ on the import path
from aioclient import AsyncConn
from results import record
from support.workerskit import Workers, partition_on

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import create_topics, fetch, metadata, produce
from storage.record_batch import encode_batch

TOPIC = "hints"
PARTITIONS = 4


class CountedWorkers(Workers):
    """``kgc serve --kgc-workers 2`` under cachegrind, the hints on or off."""

    def __init__(self, data_dir: Path, out_dir: Path, hints: bool) -> None:
        super().__init__(data_dir, "--kgc-log-level", "WARNING", workers=2)
        self.out_dir = out_dir
        self.hints = hints

    def spawn(self, flags: list[str], log: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            cachegrind.command(
                f"{self.out_dir}/cachegrind.out.%p",
                [sys.executable, __file__, "--serve", "on" if self.hints else "off", *flags],
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=cachegrind.ENV,
        )

    def instructions(self) -> int:
        """The summed count of every process (after ``stop``)."""
        outs = list(self.out_dir.glob("cachegrind.out.*"))
        assert len(outs) == 3, f"expected the supervisor's and 2 workers' counts: {outs}"
        return sum(cachegrind.instructions(out) for out in outs)


def serve(hints: str, flags: list[str]) -> int:
    """``kgc serve flags``, with ``leaders.hinted`` replaced by the bare handler when off."""
    from coordinator.apis import leaders
    from coordinator.cli import main
    from coordinator.node.workers import shared

    # The workers' poll of the shared files (every 100 ms) runs by the clock, not by the
    # requests: under valgrind, where a request takes tens of ms, it outweighed the hints'
    # toll (a mode's runs differed by ~100,000 instructions a request). Once a minute
    # here: the supervisor's nudge still tells the other worker of the topic at once.
    shared.SharedFiles.__init__.__defaults__ = (60_000,)
    if hints == "off":
        leaders.hinted = lambda api_key, handler, placement, names: handler
    return main(["serve", *flags])


def setup(node: Workers) -> tuple[int, bytes]:
    """The bench topic; (the partition worker 0 leads, the topic's id)."""
    with Connection.to(node.bootstrap) as c:
        c.request(
            create_topics.API_KEY,
            create_topics.Request(
                topics=[
                    create_topics.CreatableTopic(
                        name=TOPIC, num_partitions=PARTITIONS, replication_factor=1
                    )
                ]
            ),
        )
    node.wait_topic(TOPIC, PARTITIONS, timeout=120)
    with Connection.to(node.bootstrap_of(0)) as c:
        _, meta = c.request(
            metadata.API_KEY,
            metadata.Request(topics=[metadata.MetadataRequestTopic(name=TOPIC)]),
        )
    return partition_on(TOPIC, PARTITIONS, 0, 2), meta.topics[0].topic_id


def produce_request(partition: int) -> produce.Request:
    batch = encode_batch(0, [(None, b"v" * 100)], timestamp_ms=int(time.time() * 1000))
    return produce.Request(
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            produce.TopicProduceData(
                name=TOPIC,
                partition_data=[produce.PartitionProduceData(index=partition, records=batch)],
            )
        ],
    )


def fetch_request(partition: int, topic_id: bytes, offset: int) -> fetch.Request:
    return fetch.Request(
        max_wait_ms=10_000,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            fetch.FetchTopic(
                topic_id=topic_id,
                partitions=[
                    fetch.FetchPartition(
                        partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )


async def load(port: int, partition: int, topic_id: bytes, produces: int, pairs: int) -> None:
    conn = await AsyncConn.open("127.0.0.1", port)
    try:
        offset = 0
        for _ in range(produces):
            res = await conn.call(produce.API_KEY, 12, produce_request(partition))
            assert res.responses[0].partition_responses[0].error_code == 0, res
            offset += 1
        for _ in range(pairs):
            fetched = conn.send(fetch.API_KEY, 17, fetch_request(partition, topic_id, offset))
            produced = conn.send(produce.API_KEY, 12, produce_request(partition))
            f, p = await fetched, await produced
            assert p.responses[0].partition_responses[0].error_code == 0, p
            part = f.responses[0].partitions[0]
            assert part.error_code == ErrorCode.NO_ERROR and part.records, f
            offset += 1
    finally:
        await conn.close()


def count(hints: bool, produces: int, pairs: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        node = CountedWorkers(Path(tmp) / "data", Path(tmp), hints)
        node.start(timeout=600)
        try:
            node.wait_loaded(timeout=600)
            partition, topic_id = setup(node)
            asyncio.run(load(node.port, partition, topic_id, produces, pairs))
        finally:
            node.stop(timeout=300)
        return node.instructions()


def per_request(hints: bool, n: int) -> tuple[float, float]:
    """(instructions per Produce, per Fetch) of one mode."""
    base = count(hints, n, n)
    produces = count(hints, 3 * n, n)
    pairs = count(hints, n, 3 * n)
    print(
        f"      ({n}, {n}): {base}, ({3 * n}, {n}): {produces}, ({n}, {3 * n}): {pairs}", flush=True
    )
    produce_cost = (produces - base) / (2 * n)
    return produce_cost, (pairs - base) / (2 * n) - produce_cost


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        raise SystemExit(serve(sys.argv[2], sys.argv[3:]))
    # The servers run this checkout's kgc (not whichever an editable install points at).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(checkout.ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=200, help="n (module doc)")
    ap.add_argument(
        "--modes", default="off,on", help="off,on (default) or one of them (another checkout's)"
    )
    args = ap.parse_args()
    modes = [m == "on" for m in args.modes.split(",")]
    got: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    print(f"{'round':>5} {'hints':>6} {'instr/produce':>14} {'instr/fetch':>12}", flush=True)
    for r in range(args.rounds):
        for hints in modes if r % 2 == 0 else modes[::-1]:
            p, f = per_request(hints, args.requests)
            got[hints].append((p, f))
            print(f"{r:>5} {'on' if hints else 'off':>6} {p:>14.0f} {f:>12.0f}", flush=True)
    print()
    for i, what in enumerate(("Produce v12 acks=-1", "Fetch v17 long poll")):
        medians = {h: statistics.median(x[i] for x in got[h]) for h in modes}
        if len(medians) == 1:
            ((h, m),) = medians.items()
            print(f"median instructions per {what}: {'on' if h else 'off'} {m:.0f}")
            continue
        off, on = medians[False], medians[True]
        print(
            f"median instructions per {what}: off {off:.0f}, on {on:.0f} "
            f"({on - off:+.0f}, {(on / off - 1) * 100:+.2f}%)"
        )
        name = what.split()[0].lower()
        record("count_leader_hints", f"{name} instr (hints on)", on, "instr", "lower")
        record("count_leader_hints", f"{name} hint overhead", on - off, "instr", "lower")


if __name__ == "__main__":
    main()
