"""Cluster objects in one test process against a real PostgreSQL, with recorded callbacks.

How this works: ``Node`` wraps one ``coordinator.cluster.Cluster`` (small intervals:
heartbeat 100 ms, session 600 ms unless told) whose ``on_acquire`` / ``on_release`` /
``on_catalog_change`` record what happened, with monotonic times. A shared ``Ledger``
checks what must hold across all nodes at every callback: a node never gets two
overlapping transitions for one partition, and every acquisition of a partition carries
a higher epoch than any before it (the fencing token only moves up). ``settled`` says
when every partition is served by exactly one node and no transition is running.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from coordinator.cluster import Cluster
from storage.interface import Lease

Key = tuple[str, int]
OFFSETS = "__consumer_offsets"


@dataclass
class Ledger:
    max_epoch: dict[Key, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def acquired(self, node_id: int, lease: Lease) -> None:
        key = (lease.topic, lease.partition)
        before = self.max_epoch.get(key, 0)
        if lease.epoch <= before:
            self.errors.append(f"node {node_id} acquired {key} at epoch {lease.epoch} <= {before}")
        self.max_epoch[key] = max(before, lease.epoch)


class Node:
    def __init__(
        self,
        url: str,
        node_id: int,
        ledger: Ledger,
        *,
        heartbeat_interval_ms: int = 100,
        session_timeout_ms: int = 600,
        offsets_partitions: int = 6,
    ) -> None:
        self.node_id = node_id
        self.ledger = ledger
        self.acquired: list[tuple[float, Lease]] = []
        self.acquired_in_pass: dict[tuple[str, int, int], int] = {}  # (topic, p, epoch)
        self.released: list[tuple[float, Key]] = []
        self.catalog_changes: list[float] = []
        self.active: set[Key] = set()  # partitions inside a callback right now
        self.cluster = Cluster(
            url,
            node_id,
            "127.0.0.1",
            19000 + node_id,
            f"PLAINTEXT://127.0.0.1:{19000 + node_id}",
            None,
            heartbeat_interval_ms=heartbeat_interval_ms,
            session_timeout_ms=session_timeout_ms,
            on_acquire=self._on_acquire,
            on_release=self._on_release,
            on_catalog_change=self._on_catalog_change,
            offsets_partitions=offsets_partitions,
        )

    def _enter(self, key: Key) -> None:
        if key in self.active:
            self.ledger.errors.append(f"node {self.node_id}: overlapping transitions of {key}")
        self.active.add(key)

    async def _on_acquire(self, lease: Lease) -> None:
        key = (lease.topic, lease.partition)
        self._enter(key)
        try:
            self.ledger.acquired(self.node_id, lease)
            await asyncio.sleep(0)  # a load yields to the loop, as a real one does
            self.acquired.append((time.monotonic(), lease))
            self.acquired_in_pass[(lease.topic, lease.partition, lease.epoch)] = self.cluster.passes
        finally:
            self.active.discard(key)

    async def _on_release(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        self._enter(key)
        try:
            await asyncio.sleep(0)
            self.released.append((time.monotonic(), key))
        finally:
            self.active.discard(key)

    async def _on_catalog_change(self) -> None:
        self.catalog_changes.append(time.monotonic())

    def idle(self) -> bool:
        return not self.cluster._transitions and not self.active


def settled(nodes: list[Node], keys: set[Key]) -> bool:
    """Every partition served by exactly one of ``nodes``; no transition running."""
    if not all(n.idle() for n in nodes):
        return False
    seen: list[Key] = []
    for n in nodes:
        seen.extend(n.cluster.owned())
    return len(seen) == len(set(seen)) and set(seen) == keys


def owners(nodes: list[Node]) -> dict[Key, int]:
    return {key: n.node_id for n in nodes for key in n.cluster.owned()}


async def lease_rows(url: str) -> dict[Key, Any]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT * FROM kgc_partition")
    finally:
        await conn.close()
    return {(r["topic"], r["partition"]): r for r in rows}
