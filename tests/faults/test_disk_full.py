"""A full disk under a real ``kgc serve``: refused cleanly, nothing acknowledged lost.

The data directory lives on a small tmpfs that also holds a filler file. A real producer
(confluent-kafka, acks=all, no retries so every failure reports the broker's code) writes
until the disk is full. Every failed produce must carry KAFKA_STORAGE_ERROR (never a closed
connection), every acknowledged record must be readable (and nothing else, nothing corrupt),
an OffsetCommit must get an error code rather than a closed connection. Then the filler is
deleted: produce and commit work again without a restart. Finally kgc is SIGKILLed and
restarted on the same tmpfs, and every acknowledged record and commit is still there.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from support.crashkit import read_all_confluent
from support.faultkit import report
from support.groupkit import commit_offset, create_topic
from support.kgc_process import KgcProcess

from coordinator.tools.client import Connection
from protocol.messages import api_versions, offset_fetch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "full"
PARTITIONS = 2
VALUE = 2000  # bytes per record: a few per tmpfs page


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


class Acked:
    def __init__(self) -> None:
        self.values: set[bytes] = set()
        self.errors: list[KafkaError] = []

    def __call__(self, err: KafkaError | None, msg: object) -> None:
        if err is None:
            self.values.add(msg.value())  # type: ignore[attr-defined]
        else:
            self.errors.append(err)


def producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "retries": 0,  # report each failure with the broker's error code
            "linger.ms": 5,
            "message.timeout.ms": 30_000,
        }
    )


def committed_offset(bootstrap: str) -> int:
    deadline = time.monotonic() + 30
    with Connection.to(bootstrap) as c:
        while True:
            _, resp = c.request(
                offset_fetch.API_KEY,
                offset_fetch.Request(
                    groups=[offset_fetch.OffsetFetchRequestGroup(group_id="g", topics=None)]
                ),
                version=8,
            )
            g = resp.groups[0]
            if g.error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert g.error_code == 0, g
    parts = [p.committed_offset for t in g.topics for p in t.partitions]
    return parts[0] if parts else -1


def test_full_disk_refuses_cleanly_and_recovers_without_restart(small_disk: Path) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\xff" * (1 << 20))  # freed later to let kgc write again
    kgc = KgcProcess(small_disk / "data")
    kgc.start()
    try:
        create_topic(kgc.bootstrap, TOPIC, PARTITIONS)
        acked = Acked()
        p = producer(kgc.bootstrap)
        i = 0
        # Fill the disk: stop once a good number of produces have been refused.
        deadline = time.monotonic() + 120
        while len(acked.errors) < 40:
            assert time.monotonic() < deadline, f"disk never filled ({len(acked.values)} acked)"
            for _ in range(20):
                p.produce(TOPIC, value=b"%08d" % i + b"x" * VALUE, on_delivery=acked)
                i += 1
            p.flush(30)
        codes = {e.code() for e in acked.errors}
        assert codes == {KafkaError.KAFKA_STORAGE_ERROR}, [str(e) for e in acked.errors[:5]]
        assert kgc.alive()
        # Everything acknowledged, and nothing else, is readable; nothing corrupt served.
        got = {v for _p, _k, v in read_all_confluent(kgc.bootstrap, TOPIC, PARTITIONS)}
        assert acked.values <= got, f"{len(acked.values - got)} acknowledged records missing"
        assert got <= acked.values, f"{len(got - acked.values)} refused records served"
        # An OffsetCommit on a full disk: an error code, never a closed connection.
        commit_codes = []
        acked_commit = -1
        with Connection.to(kgc.bootstrap) as c:
            for off in range(1, 6):
                code = commit_offset(c, "g", TOPIC, off, metadata="m" * 4000)
                commit_codes.append(code)
                if code == 0:
                    acked_commit = off
            c.request(api_versions.API_KEY, api_versions.Request("t", "1"))  # still open
        assert any(code != 0 for code in commit_codes), commit_codes
        # Space returns: kgc serves again without a restart.
        filler.unlink()
        again = Acked()
        p2 = producer(kgc.bootstrap)
        for j in range(20):
            p2.produce(TOPIC, value=b"again-%03d" % j, on_delivery=again)
        assert p2.flush(30) == 0
        assert len(again.values) == 20 and not again.errors, again.errors
        acked.values |= again.values
        with Connection.to(kgc.bootstrap) as c:
            assert commit_offset(c, "g", TOPIC, 100, metadata="after") == 0
        acked_commit = 100
        # A crash now must lose nothing that was acknowledged.
        kgc.kill()
        kgc.start()
        got = {v for _p, _k, v in read_all_confluent(kgc.bootstrap, TOPIC, PARTITIONS)}
        lost = len(acked.values - got)
        assert lost == 0, f"{lost} acknowledged records lost"
        assert committed_offset(kgc.bootstrap) == acked_commit
    finally:
        if kgc.alive():
            kgc.stop()
    report(
        "full disk",
        injected="tmpfs data dir filled by produce until 40 refusals; then 1 MiB freed; SIGKILL",
        verified=f"{len(acked.values)} acked records readable, refusals all KAFKA_STORAGE_ERROR, "
        f"OffsetCommit codes {commit_codes}; produce+commit work after freeing; after SIGKILL",
        lost=lost,
    )
