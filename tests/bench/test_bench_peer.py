"""Smoke tests of bench/bench_peer.py: kgc (no Tansu download), and the Kafka target (marked
``kafka``: it needs the pinned Kafka jars), one round, 1-second windows.

How this works: the benchmark runs as a user runs it, as a subprocess, and saves its figures
with ``--json``. Every workload must be in the printed per-run table and the summary, and
must have answered requests at a nonzero rate, used measurable server CPU, and had no
error among the responses it sampled. The summary's comparison pairs are checked directly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_peer import ratio_pairs

ROOT = Path(__file__).resolve().parents[2]

WORKLOADS = ["commit1", "commit50", "fetch", "heartbeat", "mixed", "paced"]


def run_bench_peer(
    tmp_path: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """bench_peer.py run as a user runs it (one round, short windows) with ``args``: the
    finished process and the runs its ``--json`` saved."""
    out = tmp_path / "peer.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_peer.py"),
            "--rounds",
            "1",
            "--seconds",
            "1",
            "--warmup",
            "0.2",
            *args,
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs: list[dict[str, Any]] = json.loads(out.read_text())["runs"]
    return proc, runs


@pytest.mark.slow
@pytest.mark.integration
def test_bench_peer_kgc_only(tmp_path: Path) -> None:
    proc, runs = run_bench_peer(tmp_path, "--targets", "kgc", "--paced-rate", "2000")
    assert sorted(r["workload"] for r in runs) == sorted(WORKLOADS)
    table = proc.stdout.split("run: round 1/1, kgc", 1)[1].split("## Summary", 1)[0]
    for r in runs:
        name = r["workload"]
        assert any(line.startswith(f"{name} ") for line in table.splitlines()), (name, table)
        assert r["target"] == "kgc" and r["round"] == 1
        assert r["requests"] > 0 and r["rate_requests"] > 0, r
        assert r["server_cpu_s"] > 0 and r["server_cpu_us_per_request"] > 0, r
        assert r["loadgen_cpu_s"] > 0, r
        assert r["sampled"] > 0 and r["errors"] == 0, r
        assert r["p50_ms"] > 0 and r["p99_ms"] >= r["p50_ms"], r
        assert r["server_rss_mib"] > 0 and r["server_jit_cpu_s"] == 0, r  # no JIT in kgc
    commit50 = next(r for r in runs if r["workload"] == "commit50")
    assert commit50["rate_units"] == pytest.approx(50 * commit50["rate_requests"])
    paced = next(r for r in runs if r["workload"] == "paced")
    assert paced["offered_rate"] == 2000
    summary = proc.stdout.split("## Summary", 1)[1]
    for title in ("OffsetCommit v8, 1 partition", "50 partitions", "OffsetFetch", "Heartbeat"):
        assert title in summary
    assert "2,000 commits/s offered" in summary


@pytest.mark.slow
@pytest.mark.integration
def test_bench_peer_workers_target(tmp_path: Path) -> None:
    """``kgc/2`` runs kgc with two worker processes and sends each group's load to the
    worker that coordinates it: both workers' ports get load, and nothing errs."""
    _, runs = run_bench_peer(tmp_path, "--targets", "kgc/2", "--workloads", "commit1,heartbeat")
    assert sorted(r["workload"] for r in runs) == ["commit1", "heartbeat"]
    for r in runs:
        assert r["target"] == "kgc/2", r
        ports = r["server_ports"]
        assert len(ports) == 2 and ports[1] == ports[0] + 1, r  # worker i at port + i
        assert r["requests"] > 0 and r["sampled"] > 0 and r["errors"] == 0, r


def test_ratio_pairs_every_kgc_target_to_each_peer() -> None:
    """Kafka targets are peers like Tansu: every kgc target is compared with each of them,
    never used as the kgc baseline."""
    targets = ["kgc", "kgc/2", "tansu", "kafka", "kafka-durable"]
    assert ratio_pairs(targets) == [
        ("kgc", "tansu"),
        ("kgc/2", "tansu"),
        ("kgc", "kafka"),
        ("kgc/2", "kafka"),
        ("kgc", "kafka-durable"),
        ("kgc/2", "kafka-durable"),
        ("kgc/2", "kgc"),
    ]
    assert ratio_pairs(["kafka", "kafka-durable"]) == []
    with pytest.raises(SystemExit):
        ratio_pairs(["kgc", "kafka"], baseline="kafka")


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.integration
def test_bench_peer_kafka_target(tmp_path: Path) -> None:
    """``kafka`` runs Apache Kafka 4.4.0 (C2, G1) through every workload after a short JIT
    warm-up pass: each measured run has a nonzero rate, server CPU and memory of the JVM,
    and no error; the warm-up pass, in which the JIT compiles, is saved apart and kept out
    of the summary."""
    proc, runs = run_bench_peer(
        tmp_path,
        "--targets",
        "kafka",
        "--paced-rate",
        "1000",
        "--jvm-warmup",
        "0.5",
        "--jvm-warmup-passes",
        "1",
    )
    assert sorted(r["workload"] for r in runs) == sorted(WORKLOADS)
    for r in runs:
        assert r["target"] == "kafka" and r["phase"] == "measured", r
        assert r["requests"] > 0 and r["rate_requests"] > 0, r
        assert r["server_cpu_s"] > 0 and r["server_cpu_us_per_request"] > 0, r
        assert r["server_rss_mib"] > 50 and r["server_peak_rss_mib"] >= r["server_rss_mib"], r
        assert r["sampled"] > 0 and r["errors"] == 0, r
    warm = json.loads((tmp_path / "peer.json").read_text())["jvm_warmup_runs"]
    assert sorted(r["workload"] for r in warm) == sorted(WORKLOADS)
    assert all(
        r["phase"] == "jvm-warmup" and r["warmup_pass"] == 1 and r["errors"] == 0 for r in warm
    ), warm
    # The JVM's compiler threads are found: a cold JVM compiles during its warm-up pass.
    assert sum(r["server_jit_cpu_s"] for r in warm) > 0, warm
    assert "JVM warm-up pass 1 (0.5 s a workload" in proc.stdout
    summary = proc.stdout.split("## Summary", 1)[1].split("## Every run", 1)[0]
    assert "| measure | Kafka 4.4.0 (OS flush) |" in summary
    assert "server memory" in summary
