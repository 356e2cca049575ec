"""The offsets replay's direct path for offset commits gives the shard's own result.

``replay_partition`` with the ``OffsetMetadataManager`` applies plain offset commits
itself; without it every record goes through ``GroupShard.replay``. Both are run over the
same log, a mix of offset commits (key v0/v1; values v0, v1 with an expire time, v3 with and
without metadata, v4), their tombstones, classic group metadata, consumer group records,
unknown record types and records without a key, cut into batches of any size and replayed
in chunks of any size. The state (offsets, groups, their order) must be equal, and a bad
key or value must fail the same way.
"""

from __future__ import annotations

import functools
import struct
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.group import GroupShard
from coordinator.runtime import replay as replay_mod
from coordinator.runtime.replay import replay_partition
from storage.local.log import LogConfig, PartitionLog
from storage.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    encode_consumer_group_key,
    encode_consumer_group_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

CONFIG = LogConfig(segment_bytes=1 << 20, cleanup_policy="compact", retention_ms=-1)
GROUPS = ["g0", "g1", "g2", "gé"]
TOPICS = ["t0", "topic-1"]
Rec = tuple[bytes | None, bytes | None]


def _s16(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _commit_key(group: str, topic: str, partition: int, version: int) -> bytes:
    key = encode_offset_commit_key(group, topic, partition)
    return key if version == 1 else b"\x00\x00" + key[2:]


def _value(kind: int, offset: int, ts: int) -> bytes:
    if kind == 0:  # v3, empty metadata: what kgc writes
        return encode_offset_commit_value(offset, "", ts, leader_epoch=7)
    if kind == 1:  # v3 with metadata
        return encode_offset_commit_value(offset, "meta", ts, leader_epoch=-1)
    if kind == 2:  # v1: the only version with an expire timestamp
        return encode_offset_commit_value(offset, "", ts, expire_timestamp=ts + 1000)
    if kind == 3:  # v0
        return struct.pack(">hq", 0, offset) + _s16("m0") + struct.pack(">q", ts)
    # v4 (flexible): compact string metadata, then an empty tagged-field section
    return struct.pack(">hqi", 4, offset, 3) + b"\x03ab" + struct.pack(">q", ts) + b"\x00"


@st.composite
def records(draw: Any) -> list[Rec]:
    out: list[Rec] = []
    for i in range(draw(st.integers(1, 60))):
        kind = draw(st.integers(0, 9))
        g = draw(st.sampled_from(GROUPS))
        if kind <= 4:
            key = _commit_key(
                g,
                draw(st.sampled_from(TOPICS)),
                draw(st.integers(0, 2)),
                draw(st.integers(0, 1)),
            )
            out.append((key, _value(draw(st.integers(0, 4)), i * 10, 1000 + i)))
        elif kind == 5:
            key = _commit_key(g, draw(st.sampled_from(TOPICS)), draw(st.integers(0, 2)), 1)
            out.append((key, None))
        elif kind == 6:
            value = (
                None
                if draw(st.booleans())
                else encode_group_metadata_value("consumer", i, "range", None, 1000 + i, [])
            )
            out.append((encode_group_metadata_key(g), value))
        elif kind == 7:
            cg_value = (
                None
                if draw(st.booleans())
                else encode_consumer_group_value(ConsumerGroupMetadataValue(i + 1))
            )
            out.append((encode_consumer_group_key(ConsumerGroupMetadataKey(g)), cg_value))
        elif kind == 8:
            out.append((b"\x00\x63unknown", b"x"))  # a record type nobody here reads
        else:
            out.append((None, b"no key"))
    return out


def _write(d: Path, recs: list[Rec], cuts: list[int]) -> None:
    log = PartitionLog(d, CONFIG)
    start = 0
    for size in [*cuts, len(recs)]:
        part = recs[start : start + size]
        if part:
            log.append_records(part, 1000)
        start += size
        if start >= len(recs):
            break
    log.close()


def _state(shard: GroupShard) -> Any:
    return (
        [(g, list(by_group.items())) for g, by_group in shard.offsets.items()],
        [(gid, g.state, g.generation, list(g.members)) for gid, g in shard.groups.items()],
        list(shard.consumer.groups),
    )


def _load(d: Path, fast: bool) -> tuple[Any, list[int]]:
    log = PartitionLog(d, CONFIG)
    try:
        shard = GroupShard()
        shard.begin_load(0)
        manager = shard.offset_manager if fast else None
        counts = list(replay_partition(log, functools.partial(shard.replay, 0), manager))
    finally:
        log.close()
    return _state(shard), counts


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=records(),
    cuts=st.lists(st.integers(1, 12), max_size=20),
    chunk=st.integers(1, 30),
)
def test_direct_path_state_equals_the_shards_replay(
    recs: list[Rec], cuts: list[int], chunk: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(replay_mod, "CHUNK_RECORDS", chunk)
        d = Path(tmp) / "__consumer_offsets-0"
        _write(d, recs, cuts)
        slow_state, slow_counts = _load(d, fast=False)
        fast_state, fast_counts = _load(d, fast=True)
    assert fast_state == slow_state
    assert fast_counts == slow_counts
    assert sum(fast_counts) == sum(1 for k, _ in recs if k is not None)


def test_mixed_log_example(tmp_path: Path) -> None:
    """A fixed mix: what each record does, checked against the shard's path and by hand."""
    recs: list[Rec] = [
        (_commit_key("g0", "t0", 0, 1), _value(0, 5, 100)),
        (_commit_key("g0", "t0", 1, 0), _value(1, 6, 101)),
        (_commit_key("g1", "t0", 0, 1), _value(2, 7, 102)),
        (_commit_key("g0", "t0", 0, 1), None),  # tombstone
        (encode_group_metadata_key("g1"), None),
        (_commit_key("g2", "topic-1", 2, 1), _value(4, 8, 103)),
        (_commit_key("g2", "topic-1", 2, 1), None),  # g2's only offset: its dict goes
        (None, b"no key"),
    ]
    d = tmp_path / "__consumer_offsets-0"
    _write(d, recs, [3, 2])
    fast, counts = _load(d, fast=True)
    assert (fast, counts) == _load(d, fast=False)
    offsets, groups, _consumer = fast
    assert [(g, [(tp, e.offset, e.metadata) for tp, e in by]) for g, by in offsets] == [
        ("g0", [(("t0", 1), 6, "meta")]),
        ("g1", [(("t0", 0), 7, "")]),
    ]
    assert [g[0] for g in groups] == ["g0", "g1", "g2"]  # simple groups, as Kafka's replay
    assert offsets[1][1][0][1].expire_timestamp_ms == 102 + 1000
    assert sum(counts) == 7


def _corrupt_log(d: Path, rec: Rec) -> None:
    _write(d, [(_commit_key("g0", "t0", 0, 1), _value(0, 1, 1)), rec], [])


@pytest.mark.parametrize(
    "rec",
    [
        (b"\x00\x01\x00\x05g0", _value(0, 1, 1)),  # key shorter than its group length
        (_commit_key("g0", "t0", 0, 1) + b"x", _value(0, 1, 1)),  # trailing key byte
        (b"\x00\x01\x00\x02\xff\xfe\x00\x02t0\x00\x00\x00\x00", _value(0, 1, 1)),  # not UTF-8
        # group and topic both not UTF-8 (a topic not seen yet): the group's error first
        (b"\x00\x01\x00\x02\xff\xfe\x00\x02\xff\xfd\x00\x00\x00\x00", _value(0, 1, 1)),
        # a group not UTF-8 (its topic seen) with a bad value: the key's error first
        (b"\x00\x01\x00\x02\xff\xfe\x00\x02t0\x00\x00\x00\x00", b"\x00\x09" + bytes(22)),
        (b"\x00\x01\x00\x02\xff\xfe\x00\x02t0\x00\x00\x00\x00", None),  # its tombstone
        (_commit_key("g0", "t0", 0, 1)[:-1], _value(0, 1, 1)),  # a seen topic, partition cut
        (_commit_key("g0", "t0", 0, 1), b"\x00\x03\x00"),  # truncated value
        (_commit_key("g0", "t0", 0, 1), b"\x00\x09" + bytes(22)),  # unknown value version
        (b"\x00", b"v"),  # key shorter than its version
    ],
)
def test_bad_records_fail_the_same_way(tmp_path: Path, rec: Rec) -> None:
    d = tmp_path / "__consumer_offsets-0"
    _corrupt_log(d, rec)
    errors = []
    for fast in (False, True):
        with pytest.raises(Exception) as info:
            _load(d, fast)
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]


def test_gc_is_enabled_again_between_chunks(tmp_path: Path) -> None:
    import gc

    d = tmp_path / "__consumer_offsets-0"
    _write(d, [(_commit_key("g0", "t0", i, 1), _value(0, i, 1)) for i in range(5)], [1, 1, 1])
    log = PartitionLog(d, CONFIG)
    try:
        shard = GroupShard()
        shard.begin_load(0)
        seen = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(replay_mod, "CHUNK_RECORDS", 1)
            for _n in replay_partition(
                log, functools.partial(shard.replay, 0), shard.offset_manager
            ):
                seen.append(gc.isenabled())
    finally:
        log.close()
    assert gc.isenabled()
    assert seen and all(seen)
