"""How long a node takes to serve again after each fault it survives.

Builds a data directory with a real ``kgc serve`` (``--groups`` groups committing
``--rounds`` times each, small offsets segments so every partition has older ones, and a
topic with ``--records`` records), then for each scenario copies it, injects the fault,
starts kgc on the copy and times two moments from the spawn: the port accepting, and every
group whose partition is healthy answering OffsetFetch with exactly its acknowledged offset
(and the topic's high watermark back at what was acknowledged). It also counts acknowledged
commits and records lost (must be 0) and the groups the fault took offline.

    python bench/bench_recovery.py [--groups 500] [--rounds 10] [--records 20000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from results import record
from support.groupkit import commit_offset, fetch_offset
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import create_topics, list_offsets, produce
from storage.record_batch import encode_batch

TOPIC = "t"
OFFSETS_PARTITIONS = 50
SEGMENT_BYTES = 1024


def kgc_args() -> tuple[str, ...]:
    return ("--offsets-topic-segment-bytes", str(SEGMENT_BYTES))


def high_watermark(conn: Connection) -> int:
    _, resp = conn.request(
        list_offsets.API_KEY,
        list_offsets.Request(
            replica_id=-1,
            topics=[
                list_offsets.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=[list_offsets.ListOffsetsPartition(partition_index=0, timestamp=-1)],
                )
            ],
        ),
        version=7,
    )
    p = resp.topics[0].partitions[0]
    return int(p.offset) if p.error_code == 0 else -1


def build(data_dir: Path, groups: int, rounds: int, records: int) -> tuple[dict[str, int], int]:
    """A data directory with acknowledged commits and records; returns what was acked."""
    kgc = KgcProcess(data_dir, *kgc_args())
    kgc.start()
    acked: dict[str, int] = {}
    with Connection.to(kgc.bootstrap) as conn:
        conn.request(
            create_topics.API_KEY,
            create_topics.Request(
                topics=[
                    create_topics.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)
                ]
            ),
        )
        for r in range(rounds):
            for i in range(groups):
                assert commit_offset(conn, f"group-{i}", TOPIC, 100 * r + i) == 0
                acked[f"group-{i}"] = 100 * r + i
        n = 0
        while n < records:
            batch = encode_batch(0, [(b"k", b"v" * 100)] * 100, timestamp_ms=1_700_000_000_000)
            _, resp = conn.request(
                produce.API_KEY,
                produce.Request(
                    acks=-1,
                    timeout_ms=5000,
                    topic_data=[
                        produce.TopicProduceData(
                            name=TOPIC,
                            partition_data=[produce.PartitionProduceData(index=0, records=batch)],
                        )
                    ],
                ),
                version=9,
            )
            assert resp.responses[0].partition_responses[0].error_code == 0, resp
            n += 100
    assert kgc.stop() == 0
    return acked, n


def flip_older_offsets_segment(d: Path) -> str:
    part = max(
        (p for p in d.glob("__consumer_offsets-*") if len(list(p.glob("*.log"))) >= 2),
        key=lambda p: len(list(p.glob("*.log"))),
    )
    seg = sorted(part.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    data[70] ^= 0x10
    seg.write_bytes(bytes(data))
    return part.name


def tear_active_offsets_segment(d: Path) -> str:
    part = d / "__consumer_offsets-0"
    seg = sorted(part.glob("*.log"))[-1]
    data = seg.read_bytes()
    with open(seg, "ab") as f:
        # The first bytes of a batch whose write was cut off (never acknowledged), under a
        # clean-shutdown marker that therefore lies about the file.
        f.write(data[:40])
    return part.name


def no_fault(d: Path) -> str:
    return ""


def drop_catalog(d: Path) -> str:
    (d / "topics.json").unlink()
    return ""


SCENARIOS: list[tuple[str, str, Callable[[Path], str]]] = [
    ("clean restart (baseline)", "clean", no_fault),
    ("SIGKILL, then restart", "kill", no_fault),
    ("byte flipped in an older offsets segment", "clean", flip_older_offsets_segment),
    ("torn tail under a clean-shutdown marker", "clean", tear_active_offsets_segment),
    ("topics.json deleted", "clean", drop_catalog),
]


def run(
    base: Path,
    work: Path,
    acked: dict[str, int],
    records: int,
    how: str,
    fault: Callable[[Path], str],
) -> dict[str, float]:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(base, work)
    if how == "kill":
        # A crash: the same data without the clean-shutdown markers (recovery re-reads
        # every segment from its recovery point).
        for marker in work.glob("*/clean-shutdown"):
            marker.unlink()
    damaged = fault(work)
    kgc = KgcProcess(work, *kgc_args())
    t0 = time.perf_counter()
    kgc.start(timeout=120)
    listening = time.perf_counter() - t0
    lost = offline = 0
    try:
        with Connection.to(kgc.bootstrap) as conn:
            pending = dict(acked)
            while pending:
                for g in list(pending):
                    code, offset = fetch_offset(conn, g)
                    if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                        continue
                    if code == ErrorCode.NOT_COORDINATOR and damaged:
                        offline += 1
                    elif code != 0 or offset != pending[g]:
                        lost += 1
                    del pending[g]
            while high_watermark(conn) < 0:
                pass
            serving = time.perf_counter() - t0
            lost += max(0, records - high_watermark(conn))
    finally:
        kgc.stop()
    return {"listening": listening, "serving": serving, "lost": lost, "offline": offline}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kgc-recovery-") as tmp:
        base = Path(tmp) / "base"
        acked, records = build(base, args.groups, args.rounds, args.records)
        commits = args.groups * args.rounds
        print(
            f"{commits} acknowledged commits ({args.groups} groups), {records} acknowledged "
            f"records; median of {args.repeat} runs per scenario\n"
        )
        print(
            f"{'scenario':<44} {'listening s':>11} {'serving s':>10} {'offline groups':>15} {'lost':>5}"
        )
        for name, how, fault in SCENARIOS:
            runs = [
                run(base, Path(tmp) / "work", acked, records, how, fault)
                for _ in range(args.repeat)
            ]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            record("recovery", f"{name}: serving", med["serving"], "s", "lower")
            print(
                f"{name:<44} {med['listening']:>11.2f} {med['serving']:>10.2f} "
                f"{int(med['offline']):>15} {int(max(r['lost'] for r in runs)):>5}"
            )


if __name__ == "__main__":
    main()
