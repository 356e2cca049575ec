"""Proxy mode: three real ``kgc serve`` nodes and a PostgreSQL, every link through a proxy.

Nodes advertise their client proxies (Metadata, FindCoordinator); a cut client link makes a
request indefinite and a healed one serves again; a node cut from PostgreSQL loses its
partitions to the others; ``close`` ends every process the topology started, by pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

import pytest
from support import pgserver
from support.jepsen.client import Indefinite, RawClient
from support.jepsen.proxy import BLACKHOLE, DROP, PASS
from support.jepsen.topology import ProxyTopology, faketime_library
from support.jepsen.workload import create_topic

from protocol.messages import find_coordinator, metadata, offset_commit

pytestmark = [
    pytest.mark.integration,
    pytest.mark.postgres,
    pytest.mark.skipif(not pgserver.available(), reason="no PostgreSQL binaries"),
]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie is gone too: it only waits to be reaped.
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


async def _coordinator(client: RawClient, group: str) -> tuple[str, int]:
    resp = await client.call(
        find_coordinator.API_KEY,
        4,
        find_coordinator.Request(key_type=0, coordinator_keys=[group]),
    )
    (coord,) = resp.coordinators
    assert coord.error_code == 0
    return coord.host, coord.port


def _commit(group: str, value: int) -> offset_commit.Request:
    return offset_commit.Request(
        group_id=group,
        topics=[
            offset_commit.OffsetCommitRequestTopic(
                name="t0",
                partitions=[
                    offset_commit.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=value
                    )
                ],
            )
        ],
    )


# Slow (9 s): the slow suite's Jepsen runs use this topology; test_cluster_failover.py's
# paused coordinator covers a node losing PostgreSQL.
@pytest.mark.slow
async def test_proxy_topology_advertises_its_proxies_and_cuts_links(tmp_path: Path) -> None:
    topo = ProxyTopology(tmp_path, offsets_partitions=6)
    clock = faketime_library() is not None
    if clock:
        topo.enable_clock_faults()
    pids: list[int] = []
    try:
        await topo.start()
        assert topo.cluster is not None
        pids = [p.proc.pid for p in topo.cluster.nodes.values() if p.proc is not None]
        if clock:  # every node runs under libfaketime, each with its own offset file
            for n, pid in enumerate(pids, 1):
                assert "libfaketime" in Path(f"/proc/{pid}/maps").read_text()
                assert topo.clock_file(n).read_text().strip() == "+0"
        pg_pid = topo.pg.postmaster_pid()
        assert pg_pid is not None
        pids.append(pg_pid)
        allowed = topo.addresses()
        via = RawClient(*sorted(allowed)[0], allowed=allowed, timeout=2)
        resp = await via.call(metadata.API_KEY, 12, metadata.Request(topics=None))
        assert {(b.host, b.port) for b in resp.brokers} == allowed
        coordinator = await _coordinator(via, "g")
        assert coordinator in allowed

        # The commit's topic must exist (Kafka answers UNKNOWN_TOPIC_OR_PARTITION).
        await create_topic(topo, "t0", 1)
        client = RawClient(*coordinator, allowed=allowed, timeout=1)
        ok = await client.call(offset_commit.API_KEY, 8, _commit("g", 1))
        assert ok.topics[0].partitions[0].error_code == 0

        node = topo.node_of_address(*coordinator)
        topo.client[node].set_mode(BLACKHOLE)
        with pytest.raises(Indefinite):
            await client.call(offset_commit.API_KEY, 8, _commit("g", 2))
        topo.client[node].set_mode(PASS)
        again = await client.call(offset_commit.API_KEY, 8, _commit("g", 3))
        assert again.topics[0].partitions[0].error_code == 0

        # Cut from PostgreSQL past its session, the node's partitions move to the others
        # (asked of another node: the cut one cannot know yet).
        topo.db[node].set_mode(DROP)
        other = RawClient(*sorted(allowed - {coordinator})[0], allowed=allowed, timeout=2)
        deadline = time.monotonic() + 60
        moved = coordinator
        while moved == coordinator and time.monotonic() < deadline:
            with contextlib.suppress(Indefinite, AssertionError):
                moved = await _coordinator(other, "g")
            if moved == coordinator:
                await asyncio.sleep(0.2)  # polled: the move happens at the node's next beat
        assert moved != coordinator, "the group never moved off the cut node"
        other.close()
        topo.db[node].set_mode(PASS)
        client.close()
        via.close()
    finally:
        await topo.close()
    assert pids and all(_gone(pid) for pid in pids)
    assert not (tmp_path / "pids").exists()
