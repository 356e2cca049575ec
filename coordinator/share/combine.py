"""Merging persisted state batches, as Kafka's PersisterStateBatchCombiner does.

How this works: the batches already stored and the new ones are pruned against the start
offset (a batch wholly below it dropped, one straddling it cut at it), then every offset
takes the batch that covers it with the highest priority: the higher delivery count, and on
equal counts the higher state id (ARCHIVED 4 > ACKNOWLEDGED 2 > AVAILABLE 0). Neighbouring
offsets with equal (state, count) are then one batch. Kafka reaches the same canonical list
by merging overlapping pairs of a sorted set until none is left; it relies on delivery
counts never going down and terminal states never being left, so a later write of an
offset always has at least the priority of an earlier one.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from coordinator.share.persister import PersisterBatch


def combine(
    so_far: Iterable[PersisterBatch], new: Iterable[PersisterBatch], start_offset: int
) -> list[PersisterBatch]:
    """The non-overlapping, coalesced batches ``so_far`` and ``new`` add up to, sorted."""
    batches: list[PersisterBatch] = []
    for b in (*so_far, *new):
        if start_offset != -1:
            if b.last_offset < start_offset:
                continue
            if b.first_offset < start_offset:
                b = b._replace(first_offset=start_offset)
        batches.append(b)
    if len(batches) < 2:
        return batches
    batches.sort()
    out: list[PersisterBatch] = []
    # Sweep over the offsets: ``live`` holds the batches covering the cursor as
    # (-count, -state, last) so that its top is the winner there.
    live: list[tuple[int, int, int]] = []
    i, n = 0, len(batches)
    cursor = batches[0].first_offset
    while i < n or live:
        if not live:
            cursor = max(cursor, batches[i].first_offset)
        while i < n and batches[i].first_offset <= cursor:
            b = batches[i]
            heapq.heappush(live, (-b.delivery_count, -b.delivery_state, b.last_offset))
            i += 1
        while live and live[0][2] < cursor:
            heapq.heappop(live)
        if not live:
            continue
        neg_count, neg_state, _ = live[0]
        # The winner holds until a live batch ends or a new one starts.
        end = min(e for _, _, e in live if e >= cursor)
        if i < n:
            end = min(end, batches[i].first_offset - 1)
        state, count = -neg_state, -neg_count
        last = out[-1] if out else None
        if (
            last is not None
            and last.last_offset + 1 == cursor
            and last.delivery_state == state
            and last.delivery_count == count
        ):
            out[-1] = last._replace(last_offset=end)
        else:
            out.append(PersisterBatch(cursor, end, state, count))
        cursor = end + 1
    return out
