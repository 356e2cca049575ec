"""SIGKILL under produce and commit load at once: acknowledged-but-lost must be 0.

librdkafka producers (idempotent, acks=all) and committers run together against a real kgc,
which is SIGKILLed at random moments and restarted on the same data directory. After each
restart every acknowledged commit is still there (at least that offset, with its own
metadata); at the end every acknowledged record is readable exactly once and every batch
of every log, topic and offsets alike, passes its CRC check.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
from support.crashkit import (
    BackgroundProducer,
    Committer,
    check_log_integrity,
    committed,
    read_all_confluent,
    wait_acked,
)
from support.faultkit import report
from support.groupkit import create_topic
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration
TOPIC_PARTITIONS = 4


def lost_commits(kgc: KgcProcess, acked: dict[str, dict[int, int]]) -> list[str]:
    """The acknowledged commits the restarted server does not hold (or holds torn)."""
    lost = []
    for group, offsets in acked.items():
        stored = committed(kgc.bootstrap, group)
        for p, offset in offsets.items():
            got, metadata = stored.get(p, (-1, None))
            # librdkafka sends the metadata with its C terminator; kgc stores the bytes sent.
            if got < offset or (metadata or "").rstrip("\x00") != f"m{got}":
                lost.append(f"{group}/{p}: acknowledged {offset}, found {got} {metadata!r}")
    return lost


def crash_loop(kgc: KgcProcess, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    create_topic(kgc.bootstrap, "load", TOPIC_PARTITIONS)
    create_topic(kgc.bootstrap, "crash", 4)
    producer = BackgroundProducer(kgc.bootstrap, "load", **{"enable.idempotence": True})
    committers = [Committer(kgc.bootstrap, f"crash-{i}") for i in range(3)]
    producer.thread.start()
    for c in committers:
        c.start()
    lost: list[str] = []
    try:
        for round_ in range(kills):
            wait_acked(producer, 500 * (round_ + 1), timeout=60)
            time.sleep(rng.uniform(0.1, 0.8))
            kgc.kill()
            acked = {c.group: c.snapshot() for c in committers}
            kgc.start()
            lost += lost_commits(kgc, acked)
        assert all(c.snapshot() for c in committers), "no commit was ever acknowledged"
    finally:
        for c in committers:
            c.close()
    producer.finish()
    values = [v for _, _, v in read_all_confluent(kgc.bootstrap, "load", TOPIC_PARTITIONS)]
    lost_records = producer.acked - set(values)
    dupes = [v for v, n in Counter(values).items() if n > 1]
    commits = sum(len(c.snapshot()) for c in committers)
    report(
        f"crash_loop[{kills} kills]",
        injected=f"{kills} SIGKILLs under produce and commit load",
        verified=(
            f"{len(producer.acked)} acknowledged records all readable once, "
            f"acknowledged commits of {commits} group-partitions held after every restart, "
            "every batch's CRC valid"
        ),
        lost=len(lost_records) + len(lost),
    )
    assert not lost, lost[:5]
    assert not lost_records, f"lost {len(lost_records)} acknowledged records"
    assert not dupes, f"{len(dupes)} duplicates, e.g. {dupes[:3]}"
    assert not producer.failed, producer.failed[:5]
    kgc.stop()
    assert check_log_integrity(kgc.data_dir, pattern="*-*/*.log") > 0


def test_produce_and_commits_survive_sigkills(kgc: KgcProcess) -> None:
    crash_loop(kgc, kills=3, seed=11)


@pytest.mark.long
@pytest.mark.slow
def test_produce_and_commits_survive_fifteen_sigkills(kgc: KgcProcess) -> None:
    crash_loop(kgc, kills=15, seed=12)
