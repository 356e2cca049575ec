"""The fencing audit: what the cluster made durable in PostgreSQL, read back after a run.

How this works. kgc's cluster engine appends every batch of every partition (the offsets
partitions included) as a row of ``kgc_record_log`` stamped with the lease epoch its writer
held, and only where that epoch still held (``kgc_partition.epoch``). ``audit(url)`` reads
every row in log order per partition and reports, as strings:

- ``epoch-back``: a batch written under a lower epoch than the batch before it -- a writer
  that had lost its lease appended after the next owner did (the split brain fencing must
  prevent);
- ``overlap``: a batch starting at or below the previous batch's last offset (two writers
  gave out the same offsets);
- ``epoch-ahead``: a batch under an epoch above the partition's current one.

Compaction may delete rows, so gaps between batches are not anomalies.
"""

from __future__ import annotations

import asyncpg


async def audit(url: str, timeout: float = 60.0) -> tuple[list[str], int]:
    """The anomalies found, and how many batches were audited."""
    conn = await asyncpg.connect(url, timeout=timeout)
    try:
        current = {
            (r["topic"], r["partition"]): r["epoch"]
            for r in await conn.fetch("SELECT topic, partition, epoch FROM kgc_partition")
        }
        rows = await conn.fetch(
            "SELECT topic, partition, base_offset, last_offset, epoch FROM kgc_record_log "
            "ORDER BY topic, partition, base_offset",
            timeout=timeout,
        )
    finally:
        await conn.close()
    found: list[str] = []
    prev = None
    for r in rows:
        key = (r["topic"], r["partition"])
        where = f"{key[0]}-{key[1]}@{r['base_offset']}"
        if prev is not None and (prev["topic"], prev["partition"]) == key:
            if r["epoch"] < prev["epoch"]:
                found.append(f"epoch-back {where}: epoch {r['epoch']} after {prev['epoch']}")
            if r["base_offset"] <= prev["last_offset"]:
                found.append(f"overlap {where}: previous batch ends at {prev['last_offset']}")
        if r["epoch"] > current.get(key, r["epoch"]):
            found.append(f"epoch-ahead {where}: epoch {r['epoch']} > {current[key]}")
        prev = r
    return found, len(rows)
