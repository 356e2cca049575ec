"""Shared by the fault suite: how each fault test says what it did.

Every test in ``tests/faults/`` injects one fault and then verifies what survived. It calls
``report(injected=..., verified=...)`` so that ``KGC_TEST_JOBS=0 ./scripts/test tests/faults
-s`` (or a failure's captured output) reads as a table of fault → outcome, with the count of
acknowledged records and commits lost (which must be 0).

Fast cases run with the README's test command; crash loops and long soaks are marked
``slow``. ``produce_acked`` produces with acks=all and returns what the server acknowledged,
``second_serve`` runs a second ``kgc serve`` on a data directory (it must exit by itself),
``metadata_of`` reads one topic's Metadata.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from coordinator.tools.client import Connection
from protocol.messages import metadata
from support.kgc_process import free_port


def report(test: str, *, injected: str, verified: str, lost: int = 0) -> None:
    """Print one line: the fault, what was checked afterwards, acknowledged items lost."""
    print(
        f"[fault] {test}: injected: {injected} | verified: {verified} | acknowledged lost: {lost}"
    )


def produce_acked(
    bootstrap: str, topic: str, values: list[bytes], partition: int = 0
) -> list[bytes]:
    """Produce with acks=all; returns the values the server acknowledged."""
    acked: list[bytes] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked.append(msg.value())  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for v in values:
        p.produce(topic, v, partition=partition, on_delivery=on_delivery)
    assert p.flush(30) == 0
    return acked


def second_serve(data_dir: Path, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    """Run another ``kgc serve`` on ``data_dir``; it must exit by itself."""
    args = [
        sys.executable,
        "-m",
        "coordinator",
        "serve",
        "--data-dir",
        str(data_dir),
        "--port",
        str(free_port()),
        "--metrics-port",
        "0",
    ]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"a second kgc started on a data directory in use:\n{err[-3000:]}")
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def metadata_of(bootstrap: str, topic: str) -> metadata.MetadataResponseTopic:
    with Connection.to(bootstrap) as c:
        _, resp = c.request(
            metadata.API_KEY,
            metadata.Request(
                topics=[metadata.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
            ),
        )
    [t] = resp.topics
    return t
