"""StreamsGroupHeartbeat and StreamsGroupDescribe, Kafka 4.4 vs kgc (KIP-1071).

The scenarios are the ones whose answers do not depend on timing: every validation error of
the API layer and of the coordinator (texts included), a first join whose source topic is
missing (MISSING_SOURCE_TOPICS beside ASSIGNMENT_DELAYED: the group's initial rebalance delay
of 3 s runs on both), a first join whose internal topics are missing (the detail lists them in
Kafka's HashMap order), describe before anything is assigned, leave, the answers on a
group id of another type, one member's statuses as its source topic is missing, created
(then its internal topics are missing, then none) and deleted, the endpoint lists of a
steady two-process group with a standby replica (that they are the members' tasks, with
standby partitions, and which endpoint lists which partitions: kgc breaks the assignor's
ties as Kafka does), and MISSING_CLIENT_TAGS for a group's rack-aware tags. Target assignments, which Kafka 4.4 computes off the coordinator
thread at most every second, are left to tests/streams (a real Kafka Streams application).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from support.diffkit import Runner, Side
from support.diffstreamskit import LEAVE, SG_HEARTBEAT, join, topology, wait_source_seen
from support.groupops import CG_HEARTBEAT, cg_req

from protocol.messages import delete_topics
from protocol.messages import streams_group_describe as sgd
from protocol.messages import streams_group_heartbeat as sgh

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

SG_DESCRIBE = sgd.API_KEY


def validation(side: Side) -> None:
    group = side.name("sg-valid")
    side.wait_coordinator(group)
    topo = topology(side.name("sg-in"), group)
    cases: dict[str, sgh.StreamsGroupHeartbeatRequest] = {
        "no_rebalance_timeout": join(group, "m", topo, rebalance_timeout_ms=-1),
        "no_topology": join(group, "m", None),
        "active_on_join": join(group, "m", topo, active_tasks=[sgh.TaskIds("0", [0])]),
        "null_standby": join(group, "m", topo, standby_tasks=None),
        "epoch_minus_3": join(
            group,
            "m",
            None,
            member_epoch=-3,
            active_tasks=None,
            standby_tasks=None,
            warmup_tasks=None,
        ),
        "topology_on_heartbeat": join(group, "m", topo, member_epoch=4),
        "mixed_task_lists": join(
            group, "m", None, member_epoch=4, standby_tasks=None, warmup_tasks=None
        ),
        "blank_member": join(group, " ", topo),
        "blank_rack": join(group, "m", topo, rack_id=" "),
        "unknown_group": join(
            group,
            "m",
            None,
            member_epoch=4,
            active_tasks=None,
            standby_tasks=None,
            warmup_tasks=None,
        ),
        "leave_unknown_group": join(
            group,
            "m",
            None,
            member_epoch=-1,
            active_tasks=None,
            standby_tasks=None,
            warmup_tasks=None,
        ),
        "changelog_with_partitions": join(
            group,
            "m",
            sgh.Topology(
                subtopologies=[
                    sgh.Subtopology(
                        subtopology_id="0",
                        source_topics=["x"],
                        state_changelog_topics=[sgh.TopicInfo(name="c", partitions=3)],
                    )
                ]
            ),
        ),
        "kafka_internal_topic": join(
            group,
            "m",
            sgh.Topology(
                subtopologies=[
                    sgh.Subtopology(subtopology_id="0", source_topics=["__consumer_offsets"])
                ]
            ),
        ),
        "invalid_topic_name": join(
            group,
            "m",
            sgh.Topology(
                subtopologies=[
                    sgh.Subtopology(subtopology_id="0", source_topics=["bad name", "ok"])
                ]
            ),
        ),
        "source_regex": join(
            group,
            "m",
            sgh.Topology(
                subtopologies=[sgh.Subtopology(subtopology_id="0", source_topic_regex=["in.*"])]
            ),
        ),
    }
    for step, req in cases.items():
        side.call(SG_HEARTBEAT, 1, req, step=step)


def test_validation(diff_shared: Runner) -> None:
    outcome = diff_shared(validation)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["no_topology"].error_message == "Topology must be non-null when (re-)joining."


def missing_topics(side: Side) -> None:
    group = side.name("sg-missing")
    source = side.name("sg-src")
    side.wait_coordinator(group)
    # The source topic does not exist yet.
    side.call(SG_HEARTBEAT, 1, join(group, "m1", topology(source, group)), step="join_no_source")
    # One group per request: groups on different offsets partitions come back in the order
    # Kafka's per-partition reads complete, which no fixed order reproduces.
    side.call(
        SG_DESCRIBE,
        1,
        sgd.StreamsGroupDescribeRequest(group_ids=[group]),
        step="describe_not_ready",
    )
    side.call(
        SG_DESCRIBE,
        1,
        sgd.StreamsGroupDescribeRequest(group_ids=[side.name("sg-none")]),
        step="describe_unknown",
    )
    side.call(
        SG_HEARTBEAT,
        1,
        join(
            group,
            "m1",
            None,
            member_epoch=-1,
            active_tasks=None,
            standby_tasks=None,
            warmup_tasks=None,
        ),
        step="leave",
    )
    # A group with its source topic: the internal topics are missing (and get created).
    group2 = side.name("sg-internal")
    side.create_topic(source, 2)
    wait_source_seen(side, source)
    side.wait_coordinator(group2)
    side.call(
        SG_HEARTBEAT, 1, join(group2, "m1", topology(source, group2)), step="join_no_internal"
    )


def test_missing_source_and_internal_topics(diff_shared: Runner) -> None:
    outcome = diff_shared(missing_topics)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    codes = [s.status_code for s in steps["join_no_internal"].status]
    assert 3 in codes


def other_group_types(side: Side) -> None:
    group = side.name("sg-cg")
    side.wait_coordinator(group)
    side.call(CG_HEARTBEAT, 1, cg_req(group, "c", 0, rebalance=30000, topics=[], owned=[]))
    side.call(
        SG_HEARTBEAT, 1, join(group, "s", topology("x", group)), step="streams_join_on_consumer"
    )
    side.call(
        SG_DESCRIBE,
        1,
        sgd.StreamsGroupDescribeRequest(group_ids=[group, ""]),
        step="describe_consumer",
    )
    side.call(CG_HEARTBEAT, 1, cg_req(group, "c", -1))
    sgroup = side.name("sg-sg")
    side.wait_coordinator(sgroup)
    side.call(SG_HEARTBEAT, 1, join(sgroup, "s", topology(side.name("nosrc"), sgroup)))
    side.call(
        CG_HEARTBEAT,
        1,
        cg_req(sgroup, "c", 0, rebalance=30000, topics=[], owned=[]),
        step="consumer_join_on_streams",
    )


def test_other_group_types(diff_shared: Runner) -> None:
    diff_shared(other_group_types)


def statuses(resp: sgh.StreamsGroupHeartbeatResponse) -> list[tuple[int, str]]:
    """The answer's statuses without ASSIGNMENT_DELAYED, whose presence depends on when the
    heartbeat falls in the group's initial delay."""
    return [(s.status_code, s.status_detail) for s in resp.status or () if s.status_code != 5]


def status_sequence(side: Side) -> None:
    """One member through its source topic missing, created, then deleted: the statuses of
    each heartbeat, recorded once the server's view has caught up (a loop of unrecorded
    heartbeats waits for it, as Kafka's metadata image follows a creation or deletion)."""
    group, source = side.name("sg-seq"), side.name("sg-seq-src")
    side.wait_coordinator(group)
    conn = side.untimed()
    first = conn.call(SG_HEARTBEAT, 1, join(group, "m1", topology(source, group)))
    side.note("join", SG_HEARTBEAT, 1, [first.error_code, statuses(first)])
    epoch = first.member_epoch
    beat = join(group, "m1", None, member_epoch=epoch, **TASKS_UNCHANGED)
    again = conn.call(SG_HEARTBEAT, 1, beat)
    side.note("still_missing", SG_HEARTBEAT, 1, [again.error_code, statuses(again)])

    def until(what: str, done: Any) -> sgh.StreamsGroupHeartbeatResponse:
        deadline = time.monotonic() + side.timeout
        while time.monotonic() < deadline:
            r = conn.call(
                SG_HEARTBEAT, 1, join(group, "m1", None, member_epoch=epoch, **TASKS_UNCHANGED)
            )
            if r.error_code or done(r):
                return r
            time.sleep(0.1)
        raise AssertionError(f"{side.label}: {what}")

    side.create_topic(source, 2)
    seen = until("the source topic seen", lambda r: 1 not in dict(statuses(r)))
    side.note("source_seen", SG_HEARTBEAT, 1, [seen.error_code, statuses(seen)])
    ready = until("the internal topics seen", lambda r: not statuses(r))
    side.note("ready", SG_HEARTBEAT, 1, [ready.error_code, statuses(ready)])
    conn.call(
        delete_topics.API_KEY,
        6,
        delete_topics.DeleteTopicsRequest(
            topics=[delete_topics.DeleteTopicState(name=source)], timeout_ms=30000
        ),
    )
    gone = until("the deletion seen", lambda r: 1 in dict(statuses(r)))
    side.note("source_deleted", SG_HEARTBEAT, 1, [gone.error_code, statuses(gone)])
    conn.call(SG_HEARTBEAT, 1, join(group, "m1", None, **LEAVE))


TASKS_UNCHANGED: dict[str, Any] = {
    "topology": None,
    "active_tasks": None,
    "standby_tasks": None,
    "warmup_tasks": None,
}


def test_missing_source_topic_status_sequence(diff_shared: Runner) -> None:
    outcome = diff_shared(status_sequence, parallel=True)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert [c for c, _ in steps["join"][1]] == [1]
    assert [c for c, _ in steps["still_missing"][1]] == [1]
    assert [c for c, _ in steps["source_seen"][1]] == [3]
    assert [c for c, _ in steps["source_deleted"][1]] == [1]
    assert steps["ready"] == [0, []]


def missing_client_tags(side: Side) -> None:
    """The group's streams.rack.aware.assignment.tags name two tag keys: a v1 member sending
    one of them is told MISSING_CLIENT_TAGS with the other (on its join and its next
    heartbeat), a v0 member sending none is not told; the group config set, then described."""
    group, source = side.name("sg-tags"), side.name("sg-tags-src")
    side.create_topic(source, 1)
    wait_source_seen(side, source)
    side.wait_coordinator(group)
    entry = ConfigEntry(
        "streams.rack.aware.assignment.tags",
        "zone, rack",
        incremental_operation=AlterConfigOpType.SET,
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": side.bootstrap})
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(30)
    topo = sgh.Topology(subtopologies=[sgh.Subtopology(subtopology_id="0", source_topics=[source])])
    conn = side.untimed()
    tags = [sgh.KeyValue("rack", "r1")]
    first = conn.call(SG_HEARTBEAT, 1, join(group, "m1", topo, client_tags=tags))
    side.note("join_v1", SG_HEARTBEAT, 1, [first.error_code, statuses(first)])
    again = conn.call(
        SG_HEARTBEAT,
        1,
        sgh.StreamsGroupHeartbeatRequest(
            group_id=group, member_id="m1", member_epoch=first.member_epoch
        ),
    )
    side.note("beat_v1", SG_HEARTBEAT, 1, [again.error_code, statuses(again)])
    v0 = conn.call(SG_HEARTBEAT, 0, join(group, "m2", topo))
    side.note("join_v0", SG_HEARTBEAT, 0, [v0.error_code, statuses(v0)])
    for member in ("m1", "m2"):
        conn.call(SG_HEARTBEAT, 1, join(group, member, None, **LEAVE))


def test_missing_client_tags(diff_shared: Runner) -> None:
    outcome = diff_shared(missing_client_tags, parallel=True)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    text = (
        "Missing required client tags for rack-aware standby assignment: [zone]. Configure "
        "them via 'client.tag.<tagKey>' in your Streams config."
    )
    for step in ("join_v1", "beat_v1"):
        assert (6, text) in [tuple(st) for st in steps[step][1]], steps[step]
    assert all(code != 6 for code, _ in steps["join_v0"][1])


class Instance:
    """A streams member that owns what it was last given, as a Kafka Streams client does
    once it has revoked and assigned (warm-up tasks are taken as standbys, none here)."""

    def __init__(self, side: Side, group: str, member: str, port: int) -> None:
        self.side, self.group, self.member = side, group, member
        self.endpoint = sgh.Endpoint("localhost", port)
        self.epoch, self.endpoint_epoch = 0, -1
        self.active: list[sgh.TaskIds] = []
        self.standby: list[sgh.StreamsGroupHeartbeatRequestTaskIds] = []
        self.last = sgh.StreamsGroupHeartbeatResponse()

    def beat(self, topo: sgh.Topology | None = None) -> sgh.StreamsGroupHeartbeatResponse:
        req = join(
            self.group,
            self.member,
            topo,
            member_epoch=self.epoch,
            endpoint_information_epoch=self.endpoint_epoch,
            active_tasks=self.active,
            standby_tasks=self.standby,
            warmup_tasks=[],
            process_id=f"00000000-0000-0000-0000-00000000000{self.member[-1]}",
            user_endpoint=self.endpoint,
        )
        r = self.last = self.side.untimed().call(SG_HEARTBEAT, 1, req)
        assert r.error_code == 0, r
        self.epoch, self.endpoint_epoch = r.member_epoch, r.endpoint_information_epoch
        if r.active_tasks is not None:
            self.active = [sgh.TaskIds(t.subtopology_id, t.partitions) for t in r.active_tasks]
        if r.standby_tasks is not None:
            self.standby = [
                sgh.StreamsGroupHeartbeatRequestTaskIds(t.subtopology_id, t.partitions)
                for t in r.standby_tasks
            ]
        return r


def endpoint_lists(side: Side) -> None:
    """Two members of two processes with endpoints, one standby replica: once the group is
    steady (unrecorded heartbeats until each member's tasks stop changing), each member asks
    for the endpoint list (endpoint epoch -1); recorded: whether the lists are exactly the
    members' active and standby tasks as input partitions, and which endpoint lists which
    partitions."""
    group, source = side.name("sg-ep"), side.name("sg-ep-src")
    side.create_topic(source, 2)
    wait_source_seen(side, source)
    side.wait_coordinator(group)
    entry = ConfigEntry(
        "streams.num.standby.replicas", "1", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": side.bootstrap})
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(30)
    members = [Instance(side, group, f"m{i}", 9000 + i) for i in (1, 2)]
    for m in members:
        m.beat(topology(source, group))
    deadline = time.monotonic() + side.timeout * 2
    quiet = 0
    while quiet < 3:
        assert time.monotonic() < deadline, f"{side.label}: the group never settled"
        time.sleep(0.3)
        answers = [m.beat() for m in members]
        changed = any(a.active_tasks is not None or a.standby_tasks is not None for a in answers)
        held = all(m.active for m in members)
        quiet = quiet + 1 if held and not changed else 0
    # Each task's input partitions: subtopology 0 reads the source, 1 the repartition topic.
    inputs = {"0": source, "1": f"{group}-words-repartition"}

    def partitions(tasks: list[Any]) -> list[tuple[str, list[int]]]:
        return sorted((inputs[t.subtopology_id], sorted(t.partitions)) for t in tasks)

    derived = sorted(
        [("localhost", m.endpoint.port), partitions(m.active), partitions(m.standby)]
        for m in members
    )
    for m in members:
        m.endpoint_epoch = -1
        r = m.beat()
        lists = sorted(
            [
                (e.user_endpoint.host, e.user_endpoint.port),
                sorted((t.topic, sorted(t.partitions)) for t in e.active_partitions),
                sorted((t.topic, sorted(t.partitions)) for t in e.standby_partitions),
            ]
            for e in r.partitions_by_user_endpoint or ()
        )
        side.note(f"lists_are_the_tasks_{m.member}", SG_HEARTBEAT, 1, lists == derived)
        # The placement itself, topics by role: kgc breaks the assignor's ties as Kafka does.
        roles = {source: "source", inputs["1"]: "repartition"}
        placed = [
            [port, [[roles[t], ps] for t, ps in active], [[roles[t], ps] for t, ps in standby]]
            for (_, port), active, standby in lists
        ]
        side.note(f"endpoint_placement_{m.member}", SG_HEARTBEAT, 1, placed)
    for m in members:
        m.side.untimed().call(SG_HEARTBEAT, 1, join(group, m.member, None, **LEAVE))


def test_endpoint_lists_with_standby_partitions(diff_shared: Runner) -> None:
    outcome = diff_shared(endpoint_lists, parallel=True)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["lists_are_the_tasks_m1"] is True and steps["lists_are_the_tasks_m2"] is True
    # Each process: one partition of each subtopology active (2), and the standby of the
    # other process's stateful task (1).
    shape = [
        [sum(len(ps) for _, ps in active), sum(len(ps) for _, ps in standby)]
        for _, active, standby in steps["endpoint_placement_m1"]
    ]
    assert shape == [[2, 1], [2, 1]]
