"""Kafka Streams 4.4.0 against kgc: a word count survives the SIGKILL of one of two instances.

How this works: ``kgc.streams.WordCount`` (tests/jvm) counts words with a repartition topic
(``groupBy`` on the word) and a persistent store logged to a compacted changelog, at-least-once.
Two instances (two JVMs) share the work of one application id: the input and repartition topics
have two partitions each, so there are four tasks, two each. With the classic group protocol
Streams creates its internal topics itself through CreateTopics; with the streams protocol
(KIP-1071, the ``kgc-streams`` case) kgc creates them from the topology and assigns the tasks,
and the killed instance's tasks move once the coordinator's session timeout (6 s here) expires
-- not before: the test checks the takeover took at least the session timeout less one
heartbeat interval after the kill. The final counts are read from the output topic as its
latest value per word.

Where the assertions are exact, and why. At-least-once may count a record twice only when an
instance dies with work done but not committed: its successor re-reads from the last committed
offsets (and restores the changelog, which may already hold the replayed updates). So:

1. batch 1 is produced with both instances up and is waited on until the group's committed
   offsets reach the end of the input and repartition topics (nothing in flight): its counts
   are exact;
2. batch 2 (large, words of its own) is produced and one instance is killed right away, while
   it processes: these words may be counted more than once -- at least their true count, and
   at most three times each of their batch-2 occurrences (the dead instance counted it, the
   survivor re-reads the repartition record, and the survivor re-reads the input record and
   writes a second repartition record, which it counts once);
3. once the survivor runs all four tasks, batch 3 is produced: words of batches 1 and 3 only
   were committed before the kill, so the survivor restores them from the changelog and their
   final counts are exact; words of batch 3 only start from nothing and are exact too. Words
   of batch 1 only keep their count. The instance killed is one that counts (it holds a task
   of the second sub-topology), so the survivor must restore a store from the changelog.

Streams also purges the repartition records it has committed past (DeleteRecords); the test
waits for the repartition topic's log start offsets to move.

The same scenario runs once against the reference Kafka broker (classic protocol), to show it
is a valid one.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.kgc_process import KgcProcess
from support.wordcountkit import (
    ALL_TASKS,
    PARTITIONS,
    Cluster,
    StreamsInstance,
    lines_of,
    repartition_of,
    wait_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

# Word sets by the batches they are in; each set covers both repartition partitions (checked).
BEFORE_ONLY = ["alpha", "bravo"]
RESTORED = ["charlie", "delta", "echo", "foxtrot"]  # batches 1 and 3
IN_FLIGHT = ["golf", "hotel", "india", "juliet"]  # batches 2 and 3
AFTER_ONLY = ["kilo", "lima", "mike", "oscar"]  # batch 3
BATCH_2_EACH = 1500
# The session timeout and heartbeat interval of both protocols here (the classic one's are the
# client's, set by WordCount; the streams protocol's are kgc's group configs).
SESSION_MS = 6000
HEARTBEAT_MS = 1000


@pytest.fixture(params=["kgc", "kafka", pytest.param("kgc-streams", marks=pytest.mark.slow)])
def server(request: Any, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The bootstrap address and the group protocol the instances use."""
    if request.param != "kgc-streams":
        fixture = request.getfixturevalue("kgc" if request.param == "kgc" else "kafka_broker")
        yield str(fixture.bootstrap), "classic"
        return
    ms = {
        "session-timeout-ms": SESSION_MS,
        "min-session-timeout-ms": SESSION_MS,
        "heartbeat-interval-ms": HEARTBEAT_MS,
        "min-heartbeat-interval-ms": HEARTBEAT_MS,
    }
    flags = [a for k, v in ms.items() for a in (f"--group-streams-{k}", str(v))]
    proc = KgcProcess(tmp_path / "data", *flags)
    proc.start()
    try:
        yield proc.bootstrap, "streams"
    finally:
        if proc.alive():
            proc.stop()


def test_wordcount_survives_sigkill_of_one_instance(
    server: tuple[str, str], tmp_path: Path, instances: list[StreamsInstance]
) -> None:
    bootstrap = server[0]
    for words in (BEFORE_ONLY, RESTORED, IN_FLIGHT, AFTER_ONLY):
        assert {repartition_of(w) for w in words} == set(range(PARTITIONS)), words
    suffix = uuid.uuid4().hex[:8]
    app = f"wordcount-{suffix}"
    cluster = Cluster(bootstrap, app, f"lines-{suffix}", f"counts-{suffix}")
    cluster.create_topics()

    batch1 = Counter({w: 5 + i for i, w in enumerate(BEFORE_ONLY + RESTORED)})
    batch2 = Counter({w: BATCH_2_EACH + i for i, w in enumerate(IN_FLIGHT)})
    batch3 = Counter({w: 3 + i for i, w in enumerate(RESTORED + IN_FLIGHT + AFTER_ONLY)})

    topics = (cluster.input, cluster.output)
    for name in ("a", "b"):
        instances.append(StreamsInstance(name, server, app, topics, tmp_path / name))
    wait_until(
        "both instances running with two tasks each",
        lambda: (
            all(i.running() and len(i.tasks()) == 2 for i in instances)
            and instances[0].tasks() | instances[1].tasks() == ALL_TASKS
        ),
        90,
        instances,
    )
    # The victim is an instance with a counting task (sub-topology 1), so the survivor has a
    # store to restore from the changelog.
    victim, survivor = sorted(instances, key=lambda i: -sum(t[0] == "1" for t in i.tasks()))
    internal = cluster.internal_topics()
    assert internal == {
        # What Streams asks for in CreateTopics, as the server keeps it.
        f"{app}-words-repartition": (
            PARTITIONS,
            {
                "cleanup.policy": "delete",
                "message.timestamp.type": "CreateTime",
                "retention.ms": "-1",
                "segment.bytes": "52428800",
            },
        ),
        f"{app}-counts-changelog": (
            PARTITIONS,
            {"cleanup.policy": "compact", "message.timestamp.type": "CreateTime"},
        ),
    }

    # 1. Nothing fails while batch 1 is processed: its counts are exact.
    cluster.produce(lines_of(batch1, seed=1))
    wait_until("batch 1 committed", lambda: cluster.quiesced(), 60, instances)
    assert cluster.counts() == dict(batch1)

    # 2. One instance dies while the two process batch 2: killed once its first counts show.
    cluster.produce(lines_of(batch2, seed=2))
    wait_until(
        "batch 2 being counted",
        lambda: any(w in cluster.counts() for w in IN_FLIGHT),
        60,
        instances,
        poll=0.02,
    )
    victim.kill()
    killed = time.monotonic()
    wait_until(
        "the survivor running all four tasks",
        lambda: survivor.running() and survivor.tasks() == ALL_TASKS,
        90,
        instances,
        poll=0.05,
    )
    # The victim's tasks moved when its session expired, not before (its last heartbeat was
    # at most one interval before the kill).
    took = time.monotonic() - killed
    print(f"takeover {took:.1f} s after the kill")
    assert took >= (SESSION_MS - HEARTBEAT_MS) / 1000, took

    # 3. Batch 3 after the takeover.
    cluster.produce(lines_of(batch3, seed=3))
    wait_until("every batch committed", lambda: cluster.quiesced(), 90, instances)
    final = cluster.counts()

    exact = {w: batch1[w] + batch3[w] for w in BEFORE_ONLY + RESTORED + AFTER_ONLY}
    assert {w: final.get(w) for w in exact} == exact
    assert set(final) == set(exact) | set(IN_FLIGHT)
    for w in IN_FLIGHT:
        assert batch2[w] + batch3[w] <= final[w] <= 3 * batch2[w] + batch3[w], (w, final[w])

    # Streams purged the repartition records it committed past (DeleteRecords).
    wait_until(
        "the repartition topic purged",
        lambda: all(low > 0 for low in cluster.log_starts(f"{app}-words-repartition")),
        30,
        [survivor],
    )
