"""Offsets, Kafka vs kgc: OffsetCommit and OffsetFetch at every version both serve, admin
("simple" group) commits, members' commits and their errors, unknown topics and partitions,
metadata limits, all-partitions and multi-group fetches, OffsetDelete."""

from __future__ import annotations

import pytest
from support.diffkit import Runner, Side
from support.groupops import (
    JOIN,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    assign_all,
    commit_req,
    fetch_groups_req,
    fetch_req,
    join,
    join_req,
    member_id_for,
    offset_delete_req,
    subscription,
    sync,
    wait_state,
)

from protocol.messages import metadata

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

# OffsetCommit 0-1 and OffsetFetch 0 are served by kgc only (Kafka 4 dropped them, KIP-896).
COMMIT_VERSIONS = range(2, 10)
FETCH_VERSIONS = range(1, 8)


def _topic_id(side: Side, topic: str) -> bytes:
    _, meta = side.untimed().request(
        metadata.API_KEY,
        metadata.MetadataRequest(topics=[metadata.MetadataRequestTopic(name=topic)]),
        version=12,
    )
    return bytes(meta.topics[0].topic_id)


def admin_commits(side: Side) -> None:
    topic = side.name("offs-t")
    side.create_topic(topic, 3)
    for v in COMMIT_VERSIONS:
        group = side.name(f"offs-admin-v{v}")
        side.wait_coordinator(group)
        side.call(
            OFFSET_COMMIT,
            v,
            commit_req(
                group, {topic: {0: 10 + v, 1: 20 + v}}, metadata=f"meta-{v}", leader_epoch=3
            ),
            step=f"commit_v{v}",
        )
        # A second commit of partition 0 with null metadata, partition 2 for the first time.
        side.call(
            OFFSET_COMMIT,
            v,
            commit_req(group, {topic: {0: 30 + v, 2: 5}}, metadata=None),
            step=f"commit_null_meta_v{v}",
        )
        for fv in FETCH_VERSIONS:
            side.call(
                OFFSET_FETCH,
                fv,
                fetch_req(group, {topic: [0, 1, 2, 7]}),
                step=f"c{v}.fetch_v{fv}",
            )
        side.call(OFFSET_FETCH, 7, fetch_req(group, None), step=f"c{v}.fetch_all")
    # v10 names topics by id.
    group = side.name("offs-admin-v10")
    side.wait_coordinator(group)
    req = commit_req(group, {"": {0: 99}})
    req.topics[0].topic_id = _topic_id(side, topic)
    side.call(OFFSET_COMMIT, 10, req, step="commit_v10")
    side.call(OFFSET_FETCH, 9, fetch_groups_req({group: None}), step="v10.fetch_all")


def test_admin_commits_and_fetches_at_every_version(diff_shared: Runner) -> None:
    outcome = diff_shared(admin_commits)
    assert {e.version for e in outcome.kafka.exchanges if e.api_key == OFFSET_COMMIT} == set(
        range(2, 11)
    )


def commit_errors(side: Side) -> None:
    topic = side.name("offs-e")
    side.create_topic(topic, 2)
    group = side.name("offs-err")
    fresh = side.name("offs-fresh")
    side.wait_coordinator(group)
    side.wait_coordinator(fresh)
    # Unknown topics and partitions; metadata too large; empty group id.
    side.call(
        OFFSET_COMMIT,
        9,
        commit_req(group, {topic: {0: 1, 5: 1}, side.name("no-such-topic"): {0: 1}}),
        step="unknown_topic_and_partition",
    )
    side.call(OFFSET_COMMIT, 9, commit_req(group, {topic: {0: 1}}, metadata="x" * 4097), step="big")
    side.call(OFFSET_COMMIT, 9, commit_req(group, {topic: {0: 1}}, metadata="x" * 4096), step="max")
    side.call(OFFSET_COMMIT, 9, commit_req("", {topic: {0: 1}}), step="empty_group_id")
    side.call(OFFSET_COMMIT, 9, commit_req(group, {topic: {0: -5}}), step="negative_offset")
    # A generation on an unknown group: ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND from.
    for v in (2, 8, 9):
        side.call(
            OFFSET_COMMIT,
            v,
            commit_req(fresh, {topic: {0: 1}}, generation=1, member_id="m"),
            step=f"unknown_group_generation_v{v}",
        )
    side.call(
        OFFSET_COMMIT,
        9,
        commit_req(fresh, {topic: {0: 1}}, generation=-1, member_id="m"),
        step="unknown_group_member_no_generation",
    )
    side.call(OFFSET_FETCH, 7, fetch_req(fresh, None), step="fresh_fetch_all")
    side.call(OFFSET_FETCH, 7, fetch_req("", {topic: [0]}), step="fetch_empty_group_id")
    # A live group: its member's commits.
    m = side.member("m")
    joined = join(m, group, protocols=[("range", subscription(topic))])
    gen, mid = joined.generation_id, joined.member_id
    side.call(OFFSET_COMMIT, 9, commit_req(group, {topic: {0: 7}}), step="admin_commit_live_group")
    for v in (2, 5, 8, 9):
        side.call(
            OFFSET_COMMIT,
            v,
            commit_req(group, {topic: {0: 7}}, generation=gen, member_id=mid),
            step=f"completing_rebalance_v{v}",
        )
    sync(m, group, joined, assign_all(joined))
    side.call(
        OFFSET_COMMIT,
        9,
        commit_req(group, {topic: {0: 8, 1: 9}}, generation=gen, member_id=mid),
        step="member_commit",
    )
    side.call(
        OFFSET_COMMIT,
        9,
        commit_req(group, {topic: {0: 8}}, generation=gen + 1, member_id=mid),
        step="member_bad_generation",
    )
    side.call(
        OFFSET_COMMIT,
        9,
        commit_req(group, {topic: {0: 8}}, generation=gen, member_id="ghost"),
        step="unknown_member",
    )
    side.call(
        OFFSET_COMMIT,
        9,
        commit_req(group, {topic: {0: 8}}, generation=gen, member_id=mid, instance="i1"),
        step="unknown_instance",
    )
    side.call(
        OFFSET_COMMIT,
        9,
        commit_req(group, {topic: {0: 8}}, generation=-1, member_id=mid),
        step="member_no_generation",
    )
    # A rebalance starts (a second member joins): commits of the old generation.
    n = side.member("n")
    subs = [("range", subscription(topic))]
    nid = member_id_for(n, group, protocols=subs)
    (jn, jm) = side.together(
        [
            lambda: n.call(JOIN, 9, join_req(group, nid, protocols=subs)),
            lambda: (
                wait_state(side, group, "PreparingRebalance"),  # n's join is parked
                side.call(
                    OFFSET_COMMIT,
                    9,
                    commit_req(group, {topic: {1: 10}}, generation=gen, member_id=mid),
                    step="commit_preparing_rebalance",
                ),
                m.call(JOIN, 9, join_req(group, mid, protocols=subs)),
            )[2],
        ],
        stagger=0.2,
    )
    side.together([lambda: sync(n, group, jn), lambda: sync(m, group, jm, assign_all(jm))])
    side.call(OFFSET_FETCH, 7, fetch_req(group, None), step="fetch_all_live")
    side.call(OFFSET_FETCH, 7, fetch_req(group, {topic: [0, 1]}, require_stable=True), step="st")
    # OffsetDelete: the members subscribe to the topic; an unsubscribed one is deletable.
    other = side.name("offs-other")
    side.create_topic(other, 1)
    side.call(
        OFFSET_COMMIT,
        9,
        commit_req(group, {other: {0: 3}}, generation=jm.generation_id, member_id=jm.member_id),
        step="commit_other",
    )
    side.call(OFFSET_DELETE, 0, offset_delete_req(group, {topic: [0], other: [0, 4]}), step="del")
    side.call(OFFSET_DELETE, 0, offset_delete_req(fresh, {topic: [0]}), step="del_unknown_group")
    side.call(OFFSET_DELETE, 0, offset_delete_req("", {topic: [0]}), step="del_empty_group_id")
    side.call(OFFSET_FETCH, 7, fetch_req(group, None), step="fetch_after_delete")


def test_commit_errors_member_commits_and_offset_delete(diff_shared: Runner) -> None:
    outcome = diff_shared(commit_errors)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    codes = {
        (t.name[:6], p.partition_index): p.error_code
        for t in steps["del"].topics
        for p in t.partitions
    }
    assert codes == {("offs-e", 0): 86, ("offs-o", 0): 0, ("offs-o", 4): 3}  # subscribed, unknown


def multi_group_fetch(side: Side) -> None:
    topic = side.name("offs-m")
    side.create_topic(topic, 2)
    g1, g2, g3 = side.name("offs-g1"), side.name("offs-g2"), side.name("offs-g3")
    for g in (g1, g2, g3):
        side.wait_coordinator(g)
    side.call(OFFSET_COMMIT, 9, commit_req(g1, {topic: {0: 1}}), step="commit_g1")
    side.call(OFFSET_COMMIT, 9, commit_req(g2, {topic: {0: 2, 1: 3}}), step="commit_g2")
    for v in (8, 9):
        side.call(
            OFFSET_FETCH,
            v,
            fetch_groups_req({g1: None, g2: {topic: [1, 9]}, g3: None, "": {topic: [0]}}),
            step=f"fetch_groups_v{v}",
        )
        side.call(
            OFFSET_FETCH,
            v,
            fetch_groups_req({g1: {topic: [0]}}, require_stable=True),
            step=f"fetch_stable_v{v}",
        )
    # v9 member fields on a simple (classic, Empty) group.
    side.call(
        OFFSET_FETCH,
        9,
        fetch_groups_req({g1: None}, member_id="ghost", member_epoch=3),
        step="fetch_v9_member_fields",
    )


def test_offset_fetch_of_several_groups(diff_shared: Runner) -> None:
    diff_shared(multi_group_fetch)
