"""A clean stop exits 0, every time, whenever the SIGTERM lands.

How this works: a real ``kgc serve`` is started and sent SIGTERM the first moment its port
accepts connections (polled every millisecond), which is the earliest a supervisor or a
test can know the server is up; and again after it has served commits. Each stop must end
with exit status 0 and "kgc stopped" logged by that run. The quick versions run with the
README's test command; the 30-cycle loops are marked slow.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata, TopicPartition
from support.faultkit import report
from support.groupkit import create_topic
from support.kgc_process import KgcProcess, free_port

pytestmark = pytest.mark.integration


def _start_and_stop_at_once(data_dir: Path, log_path: Path) -> int:
    """Start ``kgc serve``, SIGTERM it the first moment its port accepts, return its status.

    ``KgcProcess.start`` polls every 50 ms; this polls every millisecond, so the signal
    lands as early as any client could know the server is up.
    """
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "coordinator",
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--metrics-port",
        str(free_port()),
    ]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    proc.send_signal(signal.SIGTERM)
                    break
            time.sleep(0.001)
        else:
            raise AssertionError(f"kgc did not start listening: {proc.poll()}")
        return proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _stop_at_once(tmp_path: Path, cycles: int) -> list[int]:
    log_path = tmp_path / "kgc.log"
    statuses = []
    for cycle in range(cycles):
        status = _start_and_stop_at_once(tmp_path / "data", log_path)
        statuses.append(status)
        text = log_path.read_text(errors="replace")
        assert status == 0, f"cycle {cycle} exited {status}:\n{text[-3000:]}"
        # Each run logged its own clean stop (the log file is shared by the cycles).
        assert text.count("kgc stopped") == cycle + 1, text[-3000:]
    return statuses


def test_sigterm_right_after_listening_exits_0(tmp_path: Path) -> None:
    statuses = _stop_at_once(tmp_path, 2)  # the slow suite's variant below runs 30
    report(
        "test_sigterm_right_after_listening_exits_0",
        injected="SIGTERM the moment the port accepts, 2 start/stop cycles",
        verified=f"exit statuses {statuses}, 'kgc stopped' logged by each run",
    )


@pytest.mark.long
@pytest.mark.slow
def test_sigterm_right_after_listening_exits_0_many_times(tmp_path: Path) -> None:
    statuses = _stop_at_once(tmp_path, 30)
    report(
        "test_sigterm_right_after_listening_exits_0_many_times",
        injected="SIGTERM the moment the port accepts, 30 start/stop cycles",
        verified=f"all {len(statuses)} exit statuses 0",
    )


def test_sigterm_after_serving_keeps_commits(tmp_path: Path) -> None:
    kgc = KgcProcess(tmp_path / "data")
    tp = TopicPartition("stopped", 0)
    try:
        for cycle in range(3):
            kgc.start()
            if not cycle:
                create_topic(kgc.bootstrap, "stopped", 1)
            consumer = KafkaConsumer(
                bootstrap_servers=kgc.bootstrap, group_id="clean-stop", enable_auto_commit=False
            )
            try:
                consumer.assign([tp])
                if cycle:
                    # What the previous run acknowledged survived its clean stop.
                    assert consumer.committed(tp) == cycle * 10
                consumer.commit({tp: OffsetAndMetadata((cycle + 1) * 10, "", -1)})
            finally:
                consumer.close()
            started = time.monotonic()
            assert kgc.stop() == 0, kgc.log()
            assert time.monotonic() - started < 10
    finally:
        if kgc.alive():
            kgc.kill()
    report(
        "test_sigterm_after_serving_keeps_commits",
        injected="SIGTERM after a commit, 3 cycles",
        verified="exit status 0 each time, every acknowledged commit read back after restart",
    )
