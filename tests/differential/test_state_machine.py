"""Generated classic-group scenarios, Kafka vs kgc: hypothesis draws a list of moves by three
simulated members of one group -- join, rejoin, sync, heartbeat, commit, leave, wait past the
rebalance timeout -- and the same list is played on both servers, every answer compared.

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
from diffkit import Runner, Side
from groupops import (
    HEARTBEAT,
    JOIN,
    LEAVE,
    OFFSET_COMMIT,
    SYNC,
    commit_req,
    hb_req,
    join_req,
    leave_req,
    sync_req,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
