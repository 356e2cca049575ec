"""StreamsGroupHeartbeat on the pure core with a fake clock (Kafka's GroupMetadataManagerTest
streams cases): joins, statuses, the initial delay, revoke before assign, leave and
timeouts, records and their replay."""

from __future__ import annotations

import dataclasses

from support.group_context import GroupContext

from coordinator.group import GroupConfig
from coordinator.group.streams.group import MemberState, StreamsGroupState
from coordinator.group.timers import streams_initial_delay_key, streams_session_key
from coordinator.group.topics import StaticTopics
from protocol.errors import ErrorCode
from protocol.messages import streams_group_describe as sgd
from protocol.messages import streams_group_heartbeat as sgh
from protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.list_groups import ListGroupsRequest
from storage.records import decode_key

G = "app"


def topology() -> sgh.Topology:
    return sgh.Topology(
        epoch=0,
        subtopologies=[
            sgh.Subtopology(
                subtopology_id="0", source_topics=["input"], repartition_sink_topics=["app-r"]
            ),
            sgh.Subtopology(
                subtopology_id="1",
                repartition_source_topics=[sgh.SubtopologyTopicInfo(name="app-r")],
                state_changelog_topics=[
                    sgh.TopicInfo(
                        name="app-store-changelog",
                        topic_configs=[sgh.KeyValue(key="cleanup.policy", value="compact")],
                    )
                ],
            ),
        ],
    )


def ctx(delay: int = 0, standbys: int = 0, internal: bool = True, **extra: int) -> GroupContext:
    topics = StaticTopics()
    topics.add("input", 3)
    if internal:
        topics.add("app-r", 3)
        topics.add("app-store-changelog", 3)
    config = GroupConfig(
        streams_group_initial_rebalance_delay_ms=delay,
        streams_group_num_standby_replicas=standbys,
        streams_group_assignment_interval_ms=0,
        **extra,  # type: ignore[arg-type]
    )
    return GroupContext(config, topics=topics)


def hb(
    c: GroupContext, req: sgh.StreamsGroupHeartbeatRequest, version: int = 1
) -> sgh.StreamsGroupHeartbeatResponse:
    rctx = c.ctx(version)
    c.apply(c.shard.streams_group_heartbeat(rctx, req, c.now))
    reply = c.replies[rctx.reply_to]
    assert isinstance(reply, sgh.StreamsGroupHeartbeatResponse)
    return reply


def join(member: str, process: str = "p1") -> sgh.StreamsGroupHeartbeatRequest:
    return sgh.StreamsGroupHeartbeatRequest(
        group_id=G,
        member_id=member,
        member_epoch=0,
        endpoint_information_epoch=-1,
        rebalance_timeout_ms=300000,
        topology=topology(),
        active_tasks=[],
        standby_tasks=[],
        warmup_tasks=[],
        process_id=process,
        client_tags=[],
    )


def beat(
    member: str, epoch: int, owned: sgh.StreamsGroupHeartbeatResponse | None = None
) -> sgh.StreamsGroupHeartbeatRequest:
    req = sgh.StreamsGroupHeartbeatRequest(group_id=G, member_id=member, member_epoch=epoch)
    if owned is not None:
        req.active_tasks = [
            sgh.TaskIds(t.subtopology_id, t.partitions) for t in owned.active_tasks or ()
        ]
        req.standby_tasks = [
            sgh.StreamsGroupHeartbeatRequestTaskIds(t.subtopology_id, t.partitions)
            for t in owned.standby_tasks or ()
        ]
        req.warmup_tasks = []
    return req


def tasks(resp: sgh.StreamsGroupHeartbeatResponse) -> set[tuple[str, int]]:
    return {(t.subtopology_id, p) for t in resp.active_tasks or () for p in t.partitions}


def test_first_join_gets_every_task_at_epoch_2_and_record_order() -> None:
    c = ctx()
    r = hb(c, join("m1"))
    assert r.error_code == 0 and r.member_epoch == 2
    assert tasks(r) == {(s, p) for s in "01" for p in range(3)}
    assert r.standby_tasks == [] and r.warmup_tasks == []
    assert r.status == [] and r.heartbeat_interval_ms == 5000
    # A brand-new group answers endpoint information epoch 0.
    assert r.endpoint_information_epoch == 0
    types = [decode_key(k).rtype for _, k, _ in c.records]  # type: ignore[union-attr]
    assert types == [19, 23, 17, 21, 20, 22]
    assert c.shard.streams.groups[G].state is StreamsGroupState.STABLE


def test_missing_internal_topics_not_ready_then_ready_after_creation() -> None:
    c = ctx(internal=False)
    r = hb(c, join("m1"))
    assert r.member_epoch == 2 and tasks(r) == set()
    assert [s.status_code for s in r.status or ()] == [3]
    assert (r.status or [])[0].status_detail.startswith("Internal topics are missing: ")
    assert c.shard.streams_topics_to_create is not None
    create = c.shard.streams_topics_to_create.internal_topics_to_create
    assert {n: t.num_partitions for n, t in create.items()} == {
        "app-r": 3,
        "app-store-changelog": 3,
    }
    assert dict(create["app-store-changelog"].configs) == {"cleanup.policy": "compact"}
    assert c.shard.streams.groups[G].state is StreamsGroupState.NOT_READY
    assert c.topics is not None
    c.topics.add("app-r", 3)
    c.topics.add("app-store-changelog", 3)
    c.apply(c.shard.topics_changed(["app-r", "app-store-changelog"], True, c.now))
    r = hb(c, beat("m1", 2))
    assert r.member_epoch == 3 and len(tasks(r)) == 6 and r.status == []


def test_missing_source_topic_status() -> None:
    c = ctx()
    assert c.topics is not None
    c.topics.remove("input")
    r = hb(c, join("m1"))
    assert [(s.status_code, s.status_detail) for s in r.status or ()] == [
        (1, "Source topics input are missing.")
    ]
    assert tasks(r) == set()


def test_initial_delay_assignment_delayed_then_tasks() -> None:
    c = ctx(delay=3000)
    r = hb(c, join("m1"))
    assert r.member_epoch == 1 and tasks(r) == set()
    assert [s.status_code for s in r.status or ()] == [5]
    c.assert_timer(streams_initial_delay_key(G), 3000)
    c.sleep(3000)
    r = hb(c, beat("m1", 1))
    assert r.member_epoch == 2 and len(tasks(r)) == 6 and r.status == []


def test_second_member_revoke_before_assign() -> None:
    c = ctx()
    r1 = hb(c, join("m1", "p1"))
    r2 = hb(c, join("m2", "p2"))
    # m2 waits: every task it should get is still m1's.
    assert r2.member_epoch == 3 and tasks(r2) == set()
    assert c.shard.streams.groups[G].members["m2"].state == MemberState.UNRELEASED_TASKS
    # m1 learns what to give up and stays at epoch 2 until it reports them revoked.
    r1b = hb(c, beat("m1", 2, r1))
    assert r1b.member_epoch == 2 and len(tasks(r1b)) == 3
    assert c.shard.streams.groups[G].members["m1"].state == MemberState.UNREVOKED_TASKS
    r1c = hb(c, beat("m1", 2, r1b))
    assert r1c.member_epoch == 3
    r2b = hb(c, beat("m2", 3, r2))
    assert len(tasks(r2b)) == 3 and not tasks(r2b) & tasks(r1b)
    assert c.shard.streams.groups[G].state is StreamsGroupState.STABLE


def test_standbys_on_other_process() -> None:
    c = ctx(standbys=1)
    r1 = hb(c, join("m1", "p1"))
    r2 = hb(c, join("m2", "p2"))
    r1 = hb(c, beat("m1", 2, r1))
    r1 = hb(c, beat("m1", 2, r1))
    r2 = hb(c, beat("m2", 3, r2))
    r1 = hb(c, beat("m1", 3, r1))
    group = c.shard.streams.groups[G]
    for m in group.members.values():
        active, standby, _ = m.assigned_tasks()
        for s, ps in standby.items():
            assert s == "1"  # only the stateful subtopology has standbys
            assert not ps & active.get(s, frozenset())


def test_leave_bumps_epoch_and_tombstones() -> None:
    c = ctx()
    hb(c, join("m1"))
    before = len(c.records)
    r = hb(c, beat("m1", -1))
    assert r.member_epoch == -1 and r.status == []
    types = [(decode_key(k).rtype, v is None) for _, k, v in c.records[before:]]  # type: ignore[union-attr]
    assert types == [(22, True), (21, True), (19, True), (17, False)]
    assert c.shard.streams.groups[G].group_epoch == 3
    assert c.shard.streams.groups[G].state is StreamsGroupState.EMPTY


def test_session_timeout_fences() -> None:
    c = ctx()
    hb(c, join("m1"))
    c.assert_timer(streams_session_key(G, "m1"), 45000)
    c.sleep(45000)
    assert not c.shard.streams.groups[G].members


def test_validation_messages() -> None:
    c = ctx()
    bad = dataclasses.replace(join("m1"), rebalance_timeout_ms=-1)
    assert hb(c, bad).error_message == "RebalanceTimeoutMs must be provided in first request."
    bad = dataclasses.replace(join("m1"), topology=None)
    assert hb(c, bad).error_message == "Topology must be non-null when (re-)joining."
    bad = dataclasses.replace(beat("m1", 3), active_tasks=[])
    assert hb(c, bad).error_message == "If one task-type is non-null, all must be non-null."
    r = hb(c, beat("m1", 3))
    assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert r.error_message == f"Streams group {G} not found."
    hb(c, join("m1"))
    r = hb(c, beat("m1", 7))
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    r = hb(c, beat("nobody", 2))
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert r.error_message == f"Member nobody is not a member of group {G}."


def test_replay_rebuilds_the_group() -> None:
    c = ctx(standbys=1)
    r1 = hb(c, join("m1", "p1"))
    r2 = hb(c, join("m2", "p2"))
    hb(c, beat("m1", 2, r1))
    hb(c, beat("m2", 3, r2))
    live = c.shard.streams.groups[G]
    other = c.replayed().streams.groups[G]
    assert other.group_epoch == live.group_epoch
    assert other.assignment_epoch == live.assignment_epoch
    assert other.targets == live.targets
    assert other.members == live.members
    assert other.topology == live.topology
    assert other.last_assignment_configs == {"num.standby.replicas": "1"}


def test_other_group_apis_on_a_streams_group() -> None:
    c = ctx()
    hb(c, join("m1"))
    out = c.apply(c.shard.list_groups(c.ctx(5), ListGroupsRequest(types_filter=["streams"]), c.now))
    listed = out.replies[0][1].groups  # type: ignore[attr-defined]
    assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed] == [
        (G, "streams", "streams", "Stable")
    ]
    # Kafka's quirk: the filter is lower-cased and compared with not_ready and the like.
    out = c.apply(c.shard.list_groups(c.ctx(5), ListGroupsRequest(states_filter=["Stable"]), c.now))
    assert [g.group_id for g in out.replies[0][1].groups] == [G]  # type: ignore[attr-defined]
    out = c.apply(c.shard.delete_groups(c.ctx(2), DeleteGroupsRequest(groups_names=[G]), c.now))
    assert out.replies[0][1].results[0].error_code == ErrorCode.NON_EMPTY_GROUP  # type: ignore[attr-defined]
    cg = c.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest(
            group_id=G,
            member_id="c1",
            member_epoch=0,
            rebalance_timeout_ms=1000,
            subscribed_topic_names=["input"],
            topic_partitions=[],
        )
    )
    assert cg.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert cg.error_message == f"Group {G} is not a consumer group."
    hb(c, beat("m1", -1))
    out = c.apply(c.shard.delete_groups(c.ctx(2), DeleteGroupsRequest(groups_names=[G]), c.now))
    assert out.replies[0][1].results[0].error_code == ErrorCode.NO_ERROR  # type: ignore[attr-defined]
    assert G not in c.shard.streams.groups
    assert G not in c.replayed().streams.groups


def describe(c: GroupContext, *gids: str, version: int = 1) -> list[sgd.DescribedGroup]:
    out = c.shard.streams_group_describe(
        c.ctx(version),
        sgd.StreamsGroupDescribeRequest(group_ids=list(gids), include_topology_description=True),
        c.now,
    )
    return out.replies[0][1].groups  # type: ignore[attr-defined,no-any-return]


def test_describe_configured_and_declared_topology() -> None:
    c = ctx(internal=False)
    hb(c, join("m1"))
    (d,) = describe(c, G)
    assert d.error_code == 0 and d.group_state == "NotReady"
    assert d.topology is not None and d.topology.subtopologies is not None
    # Not ready: the topology as declared (changelog partitions 0).
    assert d.topology.subtopologies[1].state_changelog_topics[0].partitions == 0
    assert d.topology_description_status == 1 and d.assignor_name == "sticky"
    assert c.topics is not None
    c.topics.add("app-r", 3)
    c.topics.add("app-store-changelog", 3)
    c.apply(c.shard.topics_changed(["app-r", "app-store-changelog"], True, c.now))
    hb(c, beat("m1", 2))
    (d,) = describe(c, G)
    assert d.group_state == "Stable" and d.group_epoch == 3 and d.assignment_epoch == 3
    assert d.topology is not None and d.topology.subtopologies is not None
    sub = d.topology.subtopologies[1]
    assert [(t.name, t.partitions) for t in sub.state_changelog_topics] == [
        ("app-store-changelog", 3)
    ]
    assert [(t.name, t.partitions) for t in sub.repartition_source_topics] == [("app-r", 3)]
    (m,) = d.members
    assert m.member_id == "m1" and m.process_id == "p1" and m.member_epoch == 3
    assert sum(len(t.partitions) for t in m.assignment.active_tasks) == 6
    assert m.assignment.active_tasks == [
        sgd.TaskIds(t.subtopology_id, t.partitions) for t in m.target_assignment.active_tasks
    ]
    blank, missing = describe(c, "nope", "")  # Kafka answers the blank id first
    assert (missing.error_code, missing.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group nope not found.",
    )
    assert (blank.group_id, blank.error_code) == ("", ErrorCode.INVALID_GROUP_ID)


def test_group_config_standbys_bump_the_epoch_and_assign_standbys() -> None:
    c = ctx()
    r1 = hb(c, join("m1", "p1"))
    r2 = hb(c, join("m2", "p2"))
    r1 = hb(c, beat("m1", 2, r1))
    r1 = hb(c, beat("m1", 2, r1))
    r2 = hb(c, beat("m2", 3, r2))
    assert c.shard.streams.groups[G].state is StreamsGroupState.STABLE
    assert all(not t.standby_tasks for t in (r1, r2) if t.standby_tasks is not None)
    c.shard.streams.group_configs = {G: {"streams.num.standby.replicas": 1}}
    r1 = hb(c, beat("m1", 3, r1))
    group = c.shard.streams.groups[G]
    assert group.group_epoch == 4
    assert group.last_assignment_configs == {"num.standby.replicas": "1"}
    r2 = hb(c, beat("m2", 3, r2))
    standbys = [t for r in (r1, r2) for t in r.standby_tasks or ()]
    assert {(t.subtopology_id, p) for t in standbys for p in t.partitions} == {
        ("1", p) for p in range(3)
    }


def test_group_configs_validation() -> None:
    from coordinator.config import Settings
    from coordinator.group_configs import InvalidConfigError, streams_overrides, validate

    s = Settings()
    assert validate(s, {"streams.num.standby.replicas": "2"})["streams.num.standby.replicas"] == 2
    for raw, message in (
        (
            {"streams.num.standby.replicas": "3"},
            "streams.num.standby.replicas must be less than or equal to 2",
        ),
        (
            {"streams.heartbeat.interval.ms": "1000"},
            "streams.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive.",
        ),
    ):
        try:
            validate(s, dict(raw))
        except InvalidConfigError as e:
            assert str(e) == message
        else:
            raise AssertionError(f"{raw} accepted")
    assert streams_overrides({"streams.session.timeout.ms": "50000", "x": "1"}) == {
        "streams.session.timeout.ms": 50000
    }


def _tagged(member: str, process: str, **tags: str) -> sgh.StreamsGroupHeartbeatRequest:
    req = join(member, process)
    req.client_tags = [sgh.KeyValue(key=k, value=v) for k, v in tags.items()]
    return req


MISSING = (
    "Missing required client tags for rack-aware standby assignment: {}. Configure them via "
    "'client.tag.<tagKey>' in your Streams config."
)


def test_missing_client_tags_is_told_to_v1_members_only() -> None:
    # Kafka 4.4: the broker's group.streams.rack.aware.assignment.tags names the tag keys
    # every member must send; a v1 member without some gets MISSING_CLIENT_TAGS listing them
    # in the configured order, on every heartbeat, beside the other statuses; the tags
    # join the assignment configs; v0 members, which cannot read code 6, are not told.
    c = ctx(streams_group_rack_aware_assignment_tags=("zone", "rack", "cluster"))  # type: ignore[arg-type]
    r = hb(c, _tagged("m1", "p1", rack="r1"))
    assert [(s.status_code, s.status_detail) for s in r.status or ()] == [
        (6, MISSING.format("[zone, cluster]"))
    ]
    group = c.shard.streams.groups[G]
    assert group.last_assignment_configs == {
        "num.standby.replicas": "0",
        "rack.aware.assignment.tags": "zone,rack,cluster",
    }
    r = hb(c, beat("m1", r.member_epoch, r))
    assert [s.status_code for s in r.status or ()] == [6]
    r2 = hb(c, _tagged("m2", "p2", rack="r1", zone="z", cluster="c"))
    assert all(s.status_code != 6 for s in r2.status or ())
    r0 = hb(c, _tagged("m3", "p3"), version=0)
    assert all(s.status_code != 6 for s in r0.status or ())


def test_group_rack_aware_tags_override_the_broker_and_bump_the_epoch() -> None:
    c = ctx(streams_group_rack_aware_assignment_tags=("zone",))  # type: ignore[arg-type]
    r = hb(c, _tagged("m1", "p1", rack="r1"))
    assert [s.status_code for s in r.status or ()] == [6]
    epoch = c.shard.streams.groups[G].group_epoch
    # The group's own (even empty) list wins over the broker's; a change of the assignment
    # configs is a new group epoch, as a standby count change is.
    c.shard.streams.group_configs = {G: {"streams.rack.aware.assignment.tags": "rack"}}
    r = hb(c, beat("m1", r.member_epoch, r))
    assert not r.status
    assert c.shard.streams.groups[G].group_epoch == epoch + 1
    c.shard.streams.group_configs = {G: {"streams.rack.aware.assignment.tags": ""}}
    r = hb(c, beat("m1", r.member_epoch, r))
    assert not r.status
    assert c.shard.streams.groups[G].last_assignment_configs == {"num.standby.replicas": "0"}


def test_rack_aware_tags_configs_validation() -> None:
    from coordinator.config import Settings
    from coordinator.group_configs import (
        InvalidConfigError,
        effective,
        streams_overrides,
        validate,
    )

    s = Settings(group_streams_rack_aware_assignment_tags=" zone , rack ")
    assert s.streams_rack_aware_assignment_tags == ("zone", "rack")
    assert effective(s, {})["streams.rack.aware.assignment.tags"] == "zone,rack"
    assert (
        effective(s, {"streams.rack.aware.assignment.tags": ""})[
            "streams.rack.aware.assignment.tags"
        ]
        == ""
    )
    validate(s, {"streams.rack.aware.assignment.tags": "a, b"})
    try:
        validate(s, {"streams.rack.aware.assignment.tags": "a, b,a"})
    except InvalidConfigError as e:
        assert str(e) == "streams.rack.aware.assignment.tags must not contain duplicate tag keys."
    else:
        raise AssertionError("duplicate tags accepted")
    assert streams_overrides({"streams.rack.aware.assignment.tags": " a ,b "}) == {
        "streams.rack.aware.assignment.tags": "a,b"
    }
    try:
        Settings(group_streams_rack_aware_assignment_tags="a,a")
    except ValueError as e:
        assert (
            "group.streams.rack.aware.assignment.tags must not contain duplicate tag keys."
            in str(e)
        )
    else:
        raise AssertionError("duplicate broker tags accepted")


def test_streams_interval_and_lag_group_configs() -> None:
    from coordinator.config import Settings
    from coordinator.group_configs import InvalidConfigError, streams_overrides, validate

    s = Settings()
    v = validate(s, {})
    assert (
        v["streams.assignment.interval.ms"],
        v["streams.task.offset.interval.ms"],
        v["streams.acceptable.recovery.lag"],
    ) == (1000, 60000, 10000)
    for raw, message in (
        (
            {"streams.assignment.interval.ms": "15001"},
            "streams.assignment.interval.ms must be in the range 0 to 15000 inclusive.",
        ),
        (
            {"streams.task.offset.interval.ms": "14999"},
            "streams.task.offset.interval.ms must be greater than or equal to 15000",
        ),
        (
            {"streams.acceptable.recovery.lag": "-1"},
            "Invalid value -1 for configuration streams.acceptable.recovery.lag: "
            "Value must be at least 0",
        ),
        (
            {"streams.num.warmup.replicas": "1"},
            "Group config streams.num.warmup.replicas is not supported by kgc",
        ),
    ):
        try:
            validate(s, dict(raw))
        except InvalidConfigError as e:
            assert str(e) == message
        else:
            raise AssertionError(f"{raw} accepted")
    own = streams_overrides(
        {
            "streams.assignment.interval.ms": "0",
            "streams.task.offset.interval.ms": "20000",
            "streams.acceptable.recovery.lag": "5",
        }
    )
    # The heartbeat answers with the group's own interval and lag.
    c = ctx()
    c.shard.streams.group_configs = {G: own}
    r = hb(c, join("m1"))
    assert (r.task_offset_interval_ms, r.acceptable_recovery_lag) == (20000, 5)
    c.shard.streams.group_configs = {}
    r = hb(c, beat("m1", r.member_epoch, r))
    assert (r.task_offset_interval_ms, r.acceptable_recovery_lag) == (60000, 10000)


def test_streams_interval_and_lag_broker_settings() -> None:
    from coordinator.config import Settings
    from coordinator.group_configs import InvalidConfigError, validate

    s = Settings(
        group_streams_task_offset_interval_ms=30000,
        group_streams_min_task_offset_interval_ms=20000,
        group_streams_acceptable_recovery_lag=7,
        group_streams_max_assignment_interval_ms=5000,
    )
    v = validate(s, {})
    assert (v["streams.task.offset.interval.ms"], v["streams.acceptable.recovery.lag"]) == (
        30000,
        7,
    )
    for raw, message in (
        (
            {"streams.task.offset.interval.ms": "19999"},
            "streams.task.offset.interval.ms must be greater than or equal to 20000",
        ),
        (
            {"streams.assignment.interval.ms": "5001"},
            "streams.assignment.interval.ms must be in the range 0 to 5000 inclusive.",
        ),
    ):
        try:
            validate(s, dict(raw))
        except InvalidConfigError as e:
            assert str(e) == message
        else:
            raise AssertionError(f"{raw} accepted")
    for bad, message in (
        (
            {"group_streams_task_offset_interval_ms": 1000},
            "group.streams.task.offset.interval.ms must be greater than or equal to "
            "group.streams.min.task.offset.interval.ms",
        ),
        (
            {"group_streams_max_assignment_interval_ms": 500},
            "group.streams.assignment.interval.ms must be less than or equal to "
            "group.streams.max.assignment.interval.ms",
        ),
    ):
        try:
            Settings(**bad)  # type: ignore[arg-type]
        except ValueError as e:
            assert message in str(e)
        else:
            raise AssertionError(f"{bad} accepted")


def test_offset_commits_of_streams_members() -> None:
    c = ctx()
    r1 = hb(c, join("m1", "p1"))
    ok = ErrorCode.NO_ERROR
    stale = ErrorCode.STALE_MEMBER_EPOCH
    assert c.commit(G, {("input", 0): 5}, member_id="m1", generation=2, version=9) == {
        ("input", 0): ok
    }
    assert c.commit(G, {("input", 0): 5}, member_id="m1", generation=2, version=8) == {
        ("input", 0): ErrorCode.UNSUPPORTED_VERSION
    }
    assert c.commit(G, {("input", 0): 5}, member_id="m1", generation=3, version=9) == {
        ("input", 0): stale
    }
    assert c.commit(G, {("input", 0): 5}, member_id="nobody", generation=2, version=9) == {
        ("input", 0): ErrorCode.UNKNOWN_MEMBER_ID
    }
    assert c.commit(G, {("input", 0): 5}, version=9) == {("input", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    r2 = hb(c, join("m2", "p2"))
    r1 = hb(c, beat("m1", 2, r1))
    r1 = hb(c, beat("m1", 2, r1))
    assert r1.member_epoch == 3
    kept = sorted(c.shard.streams.groups[G].members["m1"].active.get("0", {}))
    gone = sorted(set(range(3)) - set(kept))
    # An older epoch still commits a task held since then, and nothing else (KAFKA-19779).
    assert c.commit(G, {("input", kept[0]): 7}, member_id="m1", generation=2, version=9) == {
        ("input", kept[0]): ok
    }
    assert c.commit(G, {("input", gone[0]): 7}, member_id="m1", generation=2, version=9) == {
        ("input", gone[0]): stale
    }
    assert c.commit(
        G, {("app-store-changelog", 0): 7}, member_id="m1", generation=2, version=9
    ) == {("app-store-changelog", 0): stale}
    del r2


def test_load_rearms_sessions_and_members_keep_their_epochs() -> None:
    c = ctx()
    r1 = hb(c, join("m1", "p1"))
    hb(c, join("m2", "p2"))
    hb(c, beat("m1", 2, r1))  # m1 now owes revocations
    other = c.replayed()
    group = other.streams.groups[G]
    assert group.members["m1"].state == MemberState.UNREVOKED_TASKS
    pending = other.pending_timers()
    assert streams_session_key(G, "m1") in pending and streams_session_key(G, "m2") in pending
    assert f"streams-rebalance-{G}-m1" in pending
    # The configured topology is rebuilt by the next heartbeat, without a new epoch.
    assert group.configured_topology is None
    rctx = c.ctx(1)
    out = other.streams_group_heartbeat(rctx, beat("m2", 3), c.now)
    (reply,) = [r for _, r in out.replies]
    assert reply.error_code == 0 and reply.member_epoch == 3
    assert other.streams.groups[G].group_epoch == 3


def test_txn_offset_commit_older_epoch_is_illegal_generation() -> None:
    from protocol.messages.txn_offset_commit import (
        TxnOffsetCommitRequest,
        TxnOffsetCommitRequestPartition,
        TxnOffsetCommitRequestTopic,
        TxnOffsetCommitResponse,
    )

    c = ctx()
    hb(c, join("m1"))

    def commit(generation: int, member: str) -> int:
        rctx = c.ctx(3)
        req = TxnOffsetCommitRequest(
            transactional_id="tx",
            group_id=G,
            producer_id=1,
            producer_epoch=0,
            generation_id=generation,
            member_id=member,
            topics=[TxnOffsetCommitRequestTopic("input", [TxnOffsetCommitRequestPartition(0, 3)])],
        )
        c.apply(c.shard.txn_offset_commit(rctx, req, c.now))
        r = c.replies[rctx.reply_to]
        assert isinstance(r, TxnOffsetCommitResponse)
        return int(r.topics[0].partitions[0].error_code)

    assert commit(2, "m1") == ErrorCode.NO_ERROR
    assert commit(3, "m1") == ErrorCode.ILLEGAL_GENERATION
    assert commit(2, "nobody") == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(-1, "") == ErrorCode.NO_ERROR


def test_empty_classic_group_is_replaced_by_the_streams_group() -> None:
    c = ctx()
    # A classic Kafka Streams run left offsets and an empty group behind.
    assert c.commit(G, {("input", 0): 42}) == {("input", 0): ErrorCode.NO_ERROR}
    assert G in c.shard.groups
    r = hb(c, join("m1"))
    assert r.error_code == 0 and G not in c.shard.groups and G in c.shard.streams.groups
    first = decode_key(c.records[-6][1])
    assert getattr(first, "rtype", None) == 19
    assert decode_key(c.records[-7][1]).__class__.__name__ == "GroupMetadataKey"
    assert c.records[-7][2] is None
    assert c.committed(G, "input", 0) == 42
    other = c.replayed()
    assert G in other.streams.groups and G not in other.groups


def test_static_member_leaves_for_a_while_and_comes_back() -> None:
    c = ctx()
    r = hb(c, dataclasses.replace(join("m1"), instance_id="i1"))
    before = tasks(r)
    assert len(before) == 6
    # Another member may not take the instance id while it is held.
    taken = hb(c, dataclasses.replace(join("m2"), instance_id="i1"))
    assert taken.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert taken.error_message == (
        "Static member m2 with instance id i1 cannot join the group because the instance id "
        "is owned by m1 member."
    )
    fenced = hb(c, dataclasses.replace(beat("m9", 2), instance_id="i1"))
    assert fenced.error_code == ErrorCode.FENCED_INSTANCE_ID
    away = hb(c, dataclasses.replace(beat("m1", -2), instance_id="i1"))
    assert away.member_epoch == -2 and away.error_code == 0
    epoch = c.shard.streams.groups[G].group_epoch
    back = hb(c, dataclasses.replace(join("m1-again"), instance_id="i1"))
    assert back.error_code == 0 and tasks(back) == before
    group = c.shard.streams.groups[G]
    assert list(group.members) == ["m1-again"] and group.group_epoch == epoch
    assert c.replayed().streams.groups[G].members == group.members
    unknown = hb(c, dataclasses.replace(beat("m1-again", 2), instance_id="nope"))
    assert (unknown.error_code, unknown.error_message) == (
        ErrorCode.UNKNOWN_MEMBER_ID,
        "Instance id nope is unknown.",
    )


def test_metrics_count_streams_groups_by_state() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from coordinator.metrics import Metrics

    c = ctx()
    m = Metrics(process_metrics=False, shard=c.shard)
    hb(c, join("m1"))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(m.render().decode())
        for s in family.samples
    }
    assert samples[("kgc_groups_by_type", (("state", "stable"), ("type", "streams")))] == 1
    assert samples[("kgc_groups_by_type", (("state", "not_ready"), ("type", "streams")))] == 0
    assert samples[("kgc_group_members", (("group", G),))] == 1


def test_shutdown_application_reaches_every_member_until_empty() -> None:
    c = ctx()
    r1 = hb(c, join("m1", "p1"))
    r2 = hb(c, join("m2", "p2"))
    r1 = hb(c, dataclasses.replace(beat("m1", 2, r1), shutdown_application=True))
    text = (
        "Streams group member m1 encountered a fatal error and requested a shutdown for the "
        "entire application."
    )
    assert [(s.status_code, s.status_detail) for s in r1.status or ()] == [(4, text)]
    r2 = hb(c, beat("m2", 3, r2))
    assert (4, text) in [(s.status_code, s.status_detail) for s in r2.status or ()]
    hb(c, dataclasses.replace(beat("m1", r1.member_epoch), member_epoch=-1))
    hb(c, dataclasses.replace(beat("m2", r2.member_epoch), member_epoch=-1))
    r = hb(c, join("m3"))
    assert all(s.status_code != 4 for s in r.status or ())


def test_describe_groups_on_a_streams_group() -> None:
    from protocol.messages.describe_groups import DescribeGroupsRequest

    c = ctx()
    hb(c, join("m1"))
    out = c.shard.describe_groups(c.ctx(6), DescribeGroupsRequest(groups=[G]), c.now)
    (d,) = out.replies[0][1].groups  # type: ignore[attr-defined]
    assert (d.error_code, d.group_state, d.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Dead",
        f"Group {G} is not a classic group.",
    )


def test_join_group_on_streams_groups() -> None:
    from protocol.messages.join_group import JoinGroupResponse

    c = ctx()
    hb(c, join("m1"))
    live = c.reply(c.join(G))
    assert isinstance(live, JoinGroupResponse)
    assert (live.error_code, live.member_id) == (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
    hb(c, beat("m1", -1))
    # An empty streams group gives way to the classic group (offline downgrade).
    first = c.reply(c.join(G))
    assert isinstance(first, JoinGroupResponse)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert G not in c.shard.streams.groups
    assert G not in c.replayed().streams.groups


def test_offset_fetch_and_delete_on_a_streams_group() -> None:
    from support.group_context import offset_delete

    from protocol.messages.offset_fetch import (
        OffsetFetchRequest,
        OffsetFetchRequestGroup,
        OffsetFetchResponse,
    )

    c = ctx()
    hb(c, join("m1"))
    assert c.commit(G, {("input", 0): 5}, member_id="m1", generation=2, version=9) == {
        ("input", 0): ErrorCode.NO_ERROR
    }

    def fetch(member: str | None, epoch: int) -> int:
        rctx = c.ctx(9)
        req = OffsetFetchRequest(
            groups=[
                OffsetFetchRequestGroup(
                    group_id=G, member_id=member, member_epoch=epoch, topics=None
                )
            ]
        )
        c.apply(c.shard.offset_fetch(rctx, req, c.now))
        r = c.replies[rctx.reply_to]
        assert isinstance(r, OffsetFetchResponse)
        return int(r.groups[0].error_code)

    assert fetch("m1", 2) == ErrorCode.NO_ERROR
    assert fetch("m1", 1) == ErrorCode.STALE_MEMBER_EPOCH  # no older-epoch tolerance
    assert fetch("nobody", 2) == ErrorCode.UNKNOWN_MEMBER_ID
    assert fetch(None, -1) == ErrorCode.NO_ERROR  # the admin's fetch
    # A live group's source topics are in use; once Empty their offsets may go.
    r = offset_delete(c, G, {"input": [0]})
    assert r.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    hb(c, beat("m1", -1))
    r = offset_delete(c, G, {"input": [0]})
    assert r.error_code == 0 and r.topics[0].partitions[0].error_code == ErrorCode.NO_ERROR
