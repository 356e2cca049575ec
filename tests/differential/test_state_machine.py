"""Generated scenarios, Kafka vs kgc: hypothesis draws a list of moves by three simulated
members of one group -- classic: join, rejoin, sync, heartbeat, commit, leave, wait past the
rebalance timeout; KIP-848: join, heartbeat, acknowledge, change subscription, leave, a stale
epoch -- and the same list is played on both servers, every answer compared.

How this works: the moves are drawn first (``st.lists`` of (move, member)), then played by
one scenario function on each side, so both receive the same sequence; what a move sends
(member id, generation, whether it leads) comes from that side's own earlier answers. Moves
run one after the other: a join or sync that has to wait for others is released by the
rebalance timeout (1 s), so the outcome does not depend on timing. Sessions (30 s) outlive a
whole sequence: no member expires between moves (expiry has its scripted scenario). Both
sides play at once. A shrunk counter-example belongs in a scripted scenario.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.diffkit import Runner, Side
from support.groupops import (
    CG_DESCRIBE,
    CG_HEARTBEAT,
    HEARTBEAT,
    JOIN,
    LEAVE,
    OFFSET_COMMIT,
    SYNC,
    cg_describe_req,
    cg_req,
    commit_req,
    hb_req,
    join_req,
    leave_req,
    sync_req,
    synchronous_assignment,
    wait_topic_assignable,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

SESSION, REBALANCE = 30000, 1000
MOVES = ["join", "rejoin", "sync", "heartbeat", "commit", "leave", "wait"]
MEMBERS = ["a", "b", "c"]


@dataclass
class Seen:
    """What one member knows from its own answers."""

    member_id: str = ""
    generation: int = -1
    leader: bool = False
    members: list[str] = field(default_factory=list)


def play(moves: list[tuple[str, str]]) -> Any:
    def scenario(side: Side) -> None:
        group = side.name("gen")
        topic = side.name("gen-t")
        side.create_topic(topic, 2)
        side.wait_coordinator(group)
        seen = {m: Seen() for m in MEMBERS}
        for i, (move, who) in enumerate(moves):
            m, s = side.member(who), seen[who]
            step = f"{i}.{who}.{move}"
            kw = {"session": SESSION, "rebalance": REBALANCE}
            if move in ("join", "rejoin"):
                mid = s.member_id if move == "rejoin" else ""
                r = m.call(JOIN, 9, join_req(group, mid, **kw), step=step)  # type: ignore[arg-type]
                if r.error_code == 79:
                    r = m.call(JOIN, 9, join_req(group, r.member_id, **kw), step=step + "2")  # type: ignore[arg-type]
                if r.error_code == 0:
                    s.member_id, s.generation = r.member_id, r.generation_id
                    s.leader = r.leader == r.member_id
                    s.members = [x.member_id for x in r.members]
            elif move == "sync":
                assignments = {x: b"p" for x in s.members} if s.leader else {}
                m.call(
                    SYNC,
                    5,
                    sync_req(group, s.generation, s.member_id, assignments=assignments),
                    step=step,
                )
            elif move == "heartbeat":
                m.call(HEARTBEAT, 4, hb_req(group, s.generation, s.member_id), step=step)
            elif move == "commit":
                m.call(
                    OFFSET_COMMIT,
                    9,
                    commit_req(
                        group, {topic: {0: i}}, generation=s.generation, member_id=s.member_id
                    ),
                    step=step,
                )
            elif move == "leave":
                m.call(LEAVE, 5, leave_req(group, s.member_id or "nobody"), step=step)
            else:
                time.sleep(REBALANCE * 1.5 / 1000)  # past the rebalance timeout
        side.call(
            JOIN,
            9,
            join_req(group, "ghost", **kw),
            step="final.unknown_member",  # type: ignore[arg-type]
        )

    return scenario


moves_strategy = st.lists(
    st.tuples(st.sampled_from(MOVES), st.sampled_from(MEMBERS)), min_size=3, max_size=9
)


# KGC_DIFF_EXAMPLES=n: n random examples (a hunt) instead of the CI's fixed few.
HUNT = int(os.environ.get("KGC_DIFF_EXAMPLES", "0"))


@settings(
    max_examples=HUNT or 5,
    deadline=None,
    derandomize=not HUNT,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(moves=moves_strategy)
def test_generated_classic_moves(diff_shared: Runner, moves: list[tuple[str, str]]) -> None:
    diff_shared(
        play(moves), name="generated:" + ",".join(f"{w}.{m}" for m, w in moves), parallel=True
    )


CG_MOVES = ["join", "beat", "ack", "subscribe_both", "subscribe_one", "leave", "stale"]


@dataclass
class CgSeen:
    epoch: int = 0
    owned: list[Any] = field(default_factory=list)
    joined: bool = False


def play_consumer(moves: list[tuple[str, str]]) -> Any:
    """KIP-848 moves of three members: join, a partial heartbeat, an acknowledging one (full
    owned set), a subscription change, leave, a heartbeat at a stale epoch. A first member
    joins without a subscription (see test_consumer_kafka44.py) and stays."""

    def scenario(side: Side) -> None:
        group = side.name("gen-cg")
        t, u, v = side.name("gen-cg-t"), side.name("gen-cg-u"), side.name("gen-cg-v")
        for topic, n in ((t, 3), (u, 2), (v, 1)):
            side.create_topic(topic, n)
            wait_topic_assignable(side, topic, n)
        side.wait_coordinator(group)
        synchronous_assignment(side, group)
        # The anchor makes range the group's assignor: the uniform assignor breaks ties by
        # topic id, and topic ids are each server's own. It joins unsubscribed, then names
        # range and a topic of its own in one heartbeat: one epoch bump on both servers.
        r = side.call(
            CG_HEARTBEAT,
            1,
            cg_req(group, "anchor", 0, rebalance=30000, topics=[], owned=[]),
            step="anchor",
        )
        side.call(
            CG_HEARTBEAT,
            1,
            cg_req(group, "anchor", r.member_epoch, topics=[v], assignor="range"),
            step="anchor.range",
        )
        seen = {m: CgSeen() for m in MEMBERS}

        def note(s: CgSeen, r: Any) -> None:
            if r.error_code:
                return
            s.epoch = r.member_epoch
            if r.assignment is not None:
                s.owned = [(x.topic_id, list(x.partitions)) for x in r.assignment.topic_partitions]

        for i, (move, who) in enumerate(moves):
            s, mid, step = seen[who], f"cg-{who}", f"{i}.{who}.{move}"

            def beat(step: str = step, mid: str = mid, **kw: Any) -> Any:
                return side.call(CG_HEARTBEAT, 1, cg_req(group, mid, **kw), step=step)

            if move == "join" or not s.joined:
                r = beat(epoch=0, rebalance=30000, topics=[t], owned=[])
                s.joined, s.owned = r.error_code == 0, []
                note(s, r)
            elif move == "beat":
                note(s, beat(epoch=s.epoch))
            elif move == "ack":
                note(s, beat(epoch=s.epoch, owned=s.owned))
            elif move in ("subscribe_both", "subscribe_one"):
                topics = [t, u] if move == "subscribe_both" else [t]
                note(s, beat(epoch=s.epoch, topics=topics, owned=s.owned))
            elif move == "leave":
                beat(epoch=-1)
                s.joined, s.epoch, s.owned = False, 0, []
            else:
                beat(epoch=s.epoch + 1)
        side.call(CG_DESCRIBE, 1, cg_describe_req(group), step="final.describe")

    return scenario


@settings(
    max_examples=HUNT or 5,
    deadline=None,
    derandomize=not HUNT,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    moves=st.lists(
        st.tuples(st.sampled_from(CG_MOVES), st.sampled_from(MEMBERS)), min_size=3, max_size=12
    )
)
def test_generated_consumer_moves(diff_shared: Runner, moves: list[tuple[str, str]]) -> None:
    diff_shared(
        play_consumer(moves),
        name="generated-cg:" + ",".join(f"{w}.{m}" for m, w in moves),
        parallel=True,
    )
