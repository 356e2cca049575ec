"""``kgc cluster describe`` on one node and on a two-node cluster over PostgreSQL."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from support.clikit import CLI
from support.groupkit import create_topic, wait_until
from support.kgc_process import KgcProcess


def metric_samples(node: KgcProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://127.0.0.1:{node.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_single_node_leads_every_partition(kgc: KgcProcess, cli: CLI) -> None:
    create_topic(kgc.bootstrap, "t", 3)
    run = cli("cluster", "describe", "--bootstrap-server", kgc.bootstrap, "--output", "json")
    assert run.code == 0, run
    (node,) = run.json()["nodes"]
    assert node["node"] == 0 and node["port"] == kgc.port
    assert node["offsets_partitions"] == 50 and node["topic_partitions"] == 3


@pytest.mark.postgres
@pytest.mark.integration
def test_two_nodes_split_the_partitions(tmp_path: Path, pg_url: str, cli: CLI) -> None:
    flags = (
        "--storage-url",
        pg_url,
        "--offsets-topic-num-partitions",
        "8",
        "--broker-heartbeat-interval-ms",
        "200",
        "--broker-session-timeout-ms",
        "2000",
    )
    nodes = [KgcProcess(tmp_path / f"n{i}" / "data", "--node-id", str(i), *flags) for i in (1, 2)]
    for n in nodes:
        (tmp_path / f"n{nodes.index(n) + 1}").mkdir()
        n.start()
    try:
        create_topic(nodes[0].bootstrap, "t", 4)
        rows: list[dict[str, int]] = []

        def settled() -> bool:
            run = cli("cluster", "describe", "--bootstrap-server", nodes[1].bootstrap,
                      "--output", "json")  # fmt: skip
            if run.code != 0:
                return False  # some partition has no leader yet
            rows[:] = run.json()["nodes"]
            return len(rows) == 2 and all(r["offsets_partitions"] > 0 for r in rows)

        wait_until(settled, timeout=30, what="both nodes leading partitions")
        assert sorted(r["node"] for r in rows) == [1, 2]
        assert sum(r["offsets_partitions"] for r in rows) == 8
        assert sum(r["topic_partitions"] for r in rows) == 4
        assert {r["port"] for r in rows} == {n.port for n in nodes}
        # Each node's metrics agree with what the cluster view says it leads.
        for n, row in zip(
            sorted(nodes, key=lambda n: n.port), sorted(rows, key=lambda r: r["port"]), strict=True
        ):
            samples = metric_samples(n)
            assert samples[("kgc_cluster_nodes", ())] == 2
            assert (
                samples[("kgc_cluster_partitions_led", (("kind", "offsets"),))]
                == row["offsets_partitions"]
            )
    finally:
        for n in nodes:
            if n.alive():
                n.stop()
