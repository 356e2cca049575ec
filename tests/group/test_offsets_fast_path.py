"""OffsetCommit's fast path answers exactly as the general path: same replies, same records,
same offsets and timers, over random requests (known and unknown topics and partitions,
duplicates, long metadata, every version, valid and invalid members, retention)."""

from __future__ import annotations

import random
from functools import partial
from typing import Any

import pytest
from support.group_context import GroupContext

from coordinator.group import GroupConfig
from coordinator.group.offsets import commit
from protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)

PARTITIONS = {"t": 3, "u": 1}


def _topic_partitions(name: str) -> int | None:
    return PARTITIONS.get(name)


def _request(rng: random.Random, members: dict[str, tuple[str, int]]) -> OffsetCommitRequest:
    group = rng.choice(["g", "g", "g", "simple", "fresh", "", "gone"])
    member, generation = rng.choice([("", -1), *members.values(), ("nobody", 1)])
    if rng.random() < 0.2:
        generation += 1  # a stale or future generation
    topics = []
    for _ in range(rng.choice([0, 1, 1, 1, 2])):
        name = rng.choice(["t", "t", "u", "missing"])
        parts = [
            OffsetCommitRequestPartition(
                partition_index=rng.choice([0, 0, 1, 2, 3, -1]),
                committed_offset=rng.randrange(1000),
                committed_leader_epoch=rng.choice([-1, 5]),
                commit_timestamp=rng.choice([-1, -1, 123]),
                committed_metadata=rng.choice(["", "", "", None, "m", "x" * 2000, "é" * 600]),
            )
            for _ in range(rng.choice([1, 1, 2, 3]))
        ]
        topics.append(OffsetCommitRequestTopic(name=name, partitions=parts))
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=None,
        retention_time_ms=rng.choice([-1, -1, 60000]),
        topics=topics,
    )


def _state(h: GroupContext) -> Any:
    offsets = {g: dict(tps) for g, tps in h.shard.offsets.items()}
    # Session deadlines (a commit moves them in place) and the group states.
    sessions = {
        (g, m.member_id): None if m.session_timer is None else m.session_timer.deadline_ms
        for g, group in h.shard.groups.items()
        for m in group.members.values()
    }
    states = {g: group.state for g, group in h.shard.groups.items()}
    return offsets, states, sessions, h.timers


@pytest.mark.parametrize("seed", range(8))
def test_fast_path_matches_general_path(seed: int) -> None:
    config = GroupConfig(offset_metadata_max_bytes=1000)
    fast = GroupContext(config=config, topic_partitions=_topic_partitions)
    slow = GroupContext(config=config, topic_partitions=_topic_partitions)
    # A third copy takes the fast path explicitly, to count the requests it answers (no
    # method is replaced: the group core may be compiled, and compiled methods cannot be).
    probe = GroupContext(config=config, topic_partitions=_topic_partitions)
    taken = []
    # The general path alone on one side.
    slow.shard.offset_commit = partial(commit.commit_general, slow.shard.offset_manager)
    members: dict[str, tuple[str, int]] = {}
    for h in (fast, slow, probe):
        (a, b), gen = h.stable_group("g", 2, session=60000)
        members = {"a": (a, gen), "b": (b, gen)}
        h.commit("simple", {("t", 0): 1})
    rng = random.Random(seed)
    moved = 0  # commits that moved a member's session deadline: the case must occur
    for _ in range(300):
        req = _request(rng, members)
        version = rng.randrange(0, 10)
        sessions = _state(fast)[2]
        results = []
        for h in (fast, slow):
            ctx = h.ctx(version)
            out = h.apply(h.shard.offset_commit(ctx, req, h.now))
            results.append((out.records, out.replies[0][1], out.wakeup))
        assert results[0] == results[1], req
        assert _state(fast) == _state(slow)
        ctx = probe.ctx(version)
        manager = probe.shard.offset_manager
        quick = commit.commit_fast(manager, ctx, req, probe.now) if 1 <= version < 10 else None
        taken.append(quick is not None)
        probe.apply(
            quick if quick is not None else commit.commit_general(manager, ctx, req, probe.now)
        )
        assert _state(probe) == _state(fast)
        moved += _state(fast)[2] != sessions
        if rng.random() < 0.3:  # time passes: commits move session deadlines, members expire
            for h in (fast, slow, probe):
                h.advance(1000)
    assert fast.records == slow.records
    assert moved
    assert any(taken) and not all(taken)
