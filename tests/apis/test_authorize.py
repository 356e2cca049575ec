"""Each API's authorization in front of its handler (coordinator/apis: each check beside its
handler, bound by the API table).

The handlers here are stand-ins that answer what they were asked (so a test sees which part
of a request reached them); the authorizer is the real one with real bindings.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from coordinator.apis import authorized
from coordinator.apis.authorize import ApiAuthorizer
from coordinator.security import KafkaPrincipal
from coordinator.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
)
from coordinator.server.handler import ClientInfo, Deferred
from protocol.error_responses import error_response
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import (
    BY_KEY,
    create_topics,
    describe_group_history,
    describe_groups,
    heartbeat,
    join_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    produce,
    txn_offset_commit,
)

ALICE = ClientInfo("c", "10.0.0.1", 1, 1, principal=KafkaPrincipal("User", "alice"))


def allow(
    rtype: ResourceType, name: str, op: AclOperation, pattern: PatternType = PatternType.LITERAL
) -> AclBinding:
    return AclBinding(rtype, name, pattern, "User:alice", "*", op, AclPermissionType.ALLOW)


def wrapped(handlers: dict[int, Any], *bindings: AclBinding) -> dict[int, Any]:
    return authorized(ApiAuthorizer(Authorizer(bindings)), handlers)


def call(handlers: dict[int, Any], key: int, version: int, body: Any) -> Any:
    return handlers[key](RequestHeader(key, version, 1, "c"), body, ALICE)


def test_join_group_needs_read_on_the_group() -> None:
    reached: list[str] = []

    def join(h: RequestHeader, req: Any, c: ClientInfo) -> Any:
        reached.append(req.group_id)
        return join_group.Response(member_id="m")

    hs = wrapped({join_group.API_KEY: join}, allow(ResourceType.GROUP, "ok", AclOperation.READ))
    assert call(hs, join_group.API_KEY, 9, join_group.Request(group_id="ok")).error_code == 0
    denied = call(hs, join_group.API_KEY, 9, join_group.Request(group_id="other"))
    assert denied.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert reached == ["ok"]


def commit_request(*topics: str) -> Any:
    return offset_commit.Request(
        group_id="g",
        topics=[
            offset_commit.OffsetCommitRequestTopic(
                name=t,
                partitions=[offset_commit.OffsetCommitRequestPartition(partition_index=0)],
            )
            for t in topics
        ],
    )


def echo_commit(h: RequestHeader, req: Any, c: ClientInfo) -> Any:
    return offset_commit.Response(
        topics=[
            offset_commit.OffsetCommitResponseTopic(
                name=t.name,
                partitions=[offset_commit.OffsetCommitResponsePartition(partition_index=0)],
            )
            for t in req.topics
        ]
    )


def test_offset_commit_refuses_only_the_topics_it_may_not_read() -> None:
    hs = wrapped(
        {offset_commit.API_KEY: echo_commit},
        allow(ResourceType.GROUP, "g", AclOperation.READ),
        allow(ResourceType.TOPIC, "pub-", AclOperation.READ, PatternType.PREFIXED),
    )
    resp = call(hs, offset_commit.API_KEY, 9, commit_request("pub-a", "secret"))
    codes = {t.name: t.partitions[0].error_code for t in resp.topics}
    assert codes == {"pub-a": 0, "secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    no_group = wrapped({offset_commit.API_KEY: echo_commit})
    resp = call(no_group, offset_commit.API_KEY, 9, commit_request("pub-a"))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_a_deferred_answer_is_merged_when_it_arrives() -> None:
    async def run() -> Any:
        def later(h: RequestHeader, req: Any, c: ClientInfo) -> Any:
            fut = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(fut.set_result, echo_commit(h, req, c))
            return Deferred(fut)

        hs = wrapped(
            {offset_commit.API_KEY: later},
            allow(ResourceType.GROUP, "g", AclOperation.READ),
            allow(ResourceType.TOPIC, "a", AclOperation.READ),
        )
        result = call(hs, offset_commit.API_KEY, 9, commit_request("a", "b"))
        assert type(result) is Deferred
        return await result

    resp = asyncio.run(run())
    assert [(t.name, t.partitions[0].error_code) for t in resp.topics] == [
        ("a", 0),
        ("b", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    ]


def test_list_groups_shows_only_describable_groups_unless_cluster_describe() -> None:
    def lister(h: RequestHeader, req: Any, c: ClientInfo) -> Any:
        return list_groups.Response(
            groups=[list_groups.ListedGroup(group_id=g) for g in ("mine", "theirs")]
        )

    hs = wrapped(
        {list_groups.API_KEY: lister}, allow(ResourceType.GROUP, "mine", AclOperation.READ)
    )
    assert [g.group_id for g in call(hs, list_groups.API_KEY, 4, list_groups.Request()).groups] == [
        "mine"
    ]
    admin = wrapped(
        {list_groups.API_KEY: lister},
        allow(ResourceType.CLUSTER, "kafka-cluster", AclOperation.DESCRIBE),
    )
    assert len(call(admin, list_groups.API_KEY, 4, list_groups.Request()).groups) == 2


def test_describe_groups_per_group_and_authorized_operations() -> None:
    def describer(h: RequestHeader, req: Any, c: ClientInfo) -> Any:
        return describe_groups.Response(
            groups=[
                describe_groups.DescribedGroup(group_id=g, group_state="Stable") for g in req.groups
            ]
        )

    hs = wrapped(
        {describe_groups.API_KEY: describer}, allow(ResourceType.GROUP, "mine", AclOperation.READ)
    )
    resp = call(
        hs,
        describe_groups.API_KEY,
        5,
        describe_groups.Request(groups=["theirs", "mine"], include_authorized_operations=True),
    )
    assert [(g.group_id, g.error_code) for g in resp.groups] == [
        ("theirs", ErrorCode.GROUP_AUTHORIZATION_FAILED),
        ("mine", 0),
    ]
    ops = resp.groups[1].authorized_operations
    assert ops & (1 << AclOperation.READ) and ops & (1 << AclOperation.DESCRIBE)
    assert not ops & (1 << AclOperation.DELETE)


@pytest.mark.parametrize("named", [True, False])
def test_metadata_hides_topics_and_refuses_named_ones(named: bool) -> None:
    def meta(h: RequestHeader, req: Any, c: ClientInfo) -> Any:
        names = ["a", "b"] if req.topics is None else [t.name for t in req.topics]
        return metadata.Response(topics=[metadata.MetadataResponseTopic(name=n) for n in names])

    hs = wrapped({metadata.API_KEY: meta}, allow(ResourceType.TOPIC, "a", AclOperation.DESCRIBE))
    topics = (
        [metadata.MetadataRequestTopic(name="a"), metadata.MetadataRequestTopic(name="b")]
        if named
        else None
    )
    resp = call(hs, metadata.API_KEY, 12, metadata.Request(topics=topics))
    got = {t.name: t.error_code for t in resp.topics}
    if named:
        assert got == {"a": 0, "b": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    else:
        assert got == {"a": 0}
    assert dataclasses.is_dataclass(resp)


def test_an_api_without_an_authorization_check_is_refused_at_start() -> None:
    # Fail closed: a handler added without its check must not be served to everyone.
    with pytest.raises(ValueError, match=r"\[9999\]"):
        wrapped({9999: lambda h, b, c: None})  # an API nobody wrote a check for
    assert 18 in wrapped({18: lambda h, b, c: None})  # ApiVersions needs none


def test_group_read_decisions_follow_acl_changes_on_a_connection() -> None:
    # The heartbeat path remembers READ per connection: an ACL change must still apply
    # to the very next request, both ways.
    authorizer = Authorizer([allow(ResourceType.GROUP, "g", AclOperation.READ)])
    denied: list[str] = []
    authorizer.on_denied = lambda p, h, op, rt, name: denied.append(name)
    handlers = authorized(
        ApiAuthorizer(authorizer),
        {heartbeat.API_KEY: lambda h, b, c: heartbeat.Response(error_code=0)},
    )
    client = dataclasses.replace(ALICE)
    req = heartbeat.Request(group_id="g", generation_id=1, member_id="m")

    def beat() -> int:
        header = RequestHeader(heartbeat.API_KEY, 4, 1, "c")
        return int(handlers[heartbeat.API_KEY](header, req, client).error_code)

    assert beat() == beat() == 0
    authorizer.update([])
    assert beat() == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert beat() == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert denied == ["g", "g"]  # every denial is logged and counted, remembered or not
    authorizer.update([allow(ResourceType.GROUP, "g", AclOperation.READ)])
    assert beat() == 0


def _two_topics(key: int) -> Any:
    """A request of ``key`` naming topics "a" (allowed) and "b" (refused), partition 0."""
    if key == produce.API_KEY:
        part = produce.PartitionProduceData(index=0)
        return produce.Request(
            transactional_id=None,
            topic_data=[produce.TopicProduceData(name=n, partition_data=[part]) for n in "ab"],
        )
    if key == create_topics.API_KEY:
        return create_topics.Request(topics=[create_topics.CreatableTopic(name=n) for n in "ab"])
    mod = {
        list_offsets.API_KEY: (list_offsets, "ListOffsetsTopic", "ListOffsetsPartition"),
        offset_commit.API_KEY: (offset_commit, "OffsetCommitRequestTopic", None),
        txn_offset_commit.API_KEY: (txn_offset_commit, "TxnOffsetCommitRequestTopic", None),
    }[key]
    module, topic_cls, part_cls = mod
    if part_cls is None:
        part_cls = next(n for n in dir(module) if n.endswith("RequestPartition"))
    part = getattr(module, part_cls)(partition_index=0)
    topics = [getattr(module, topic_cls)(name=n, partitions=[part]) for n in "ab"]
    fields = {f.name for f in dataclasses.fields(module.Request)}
    ids = {"group_id": "g", "transactional_id": "t"}
    return module.Request(topics=topics, **{k: v for k, v in ids.items() if k in fields})


@pytest.mark.parametrize(
    ("key", "op"),
    [
        (produce.API_KEY, AclOperation.WRITE),
        (list_offsets.API_KEY, AclOperation.DESCRIBE),
        (offset_commit.API_KEY, AclOperation.READ),
        (txn_offset_commit.API_KEY, AclOperation.READ),
        (create_topics.API_KEY, AclOperation.CREATE),
    ],
)
def test_refused_topics_are_answered_in_the_apis_error_shape(key: int, op: AclOperation) -> None:
    reached: list[list[str]] = []

    def stand_in(h: RequestHeader, req: Any, c: ClientInfo) -> Any:
        names = [t.name for t in (req.topic_data if key == produce.API_KEY else req.topics)]
        reached.append(names)
        return error_response(key, h.api_version, req, ErrorCode.NO_ERROR)

    bindings = [
        allow(ResourceType.TOPIC, "a", op),
        allow(ResourceType.GROUP, "g", AclOperation.READ),
        allow(ResourceType.TRANSACTIONAL_ID, "t", AclOperation.WRITE),
    ]
    version = max(v for v in BY_KEY[key].REQUEST_DECODERS if v <= 5)
    resp = call(wrapped({key: stand_in}, *bindings), key, version, _two_topics(key))
    assert reached == [["a"]]
    entries = resp.responses if key == produce.API_KEY else resp.topics
    assert [t.name for t in entries] == ["a", "b"]
    refused = entries[1]
    if key == create_topics.API_KEY:
        assert (refused.error_code, refused.error_message) == (
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            None,
        )
        return
    parts = refused.partition_responses if key == produce.API_KEY else refused.partitions
    assert [p.error_code for p in parts] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]


def test_a_groups_history_needs_describe_on_it_and_each_topic_for_its_entries() -> None:
    """OffsetFetch's rule (docs/history.md): DESCRIBE on the group for the request, DESCRIBE
    on a topic for its offset changes and current offsets; membership changes come with the
    group's DESCRIBE."""
    dgh = describe_group_history
    reached: list[str] = []

    def history(h: RequestHeader, req: Any, c: ClientInfo) -> Any:
        reached.append(req.group_id)
        return dgh.Response(
            offset_changes=[dgh.OffsetChange(topic=t, committed_offset=5) for t in ("a", "b")],
            membership_changes=[dgh.MembershipChange(kind="stable")],
            partitions=[dgh.CurrentPartition(topic=t, committed_offset=5) for t in ("a", "b")],
        )

    hs = wrapped(
        {dgh.API_KEY: history},
        allow(ResourceType.GROUP, "g", AclOperation.DESCRIBE),
        allow(ResourceType.TOPIC, "a", AclOperation.DESCRIBE),
    )
    denied = call(hs, dgh.API_KEY, 0, dgh.Request(group_id="other"))
    assert denied.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert reached == []
    seen = call(hs, dgh.API_KEY, 0, dgh.Request(group_id="g"))
    assert seen.error_code == 0 and reached == ["g"]
    assert [c.topic for c in seen.offset_changes] == ["a"]
    assert [c.topic for c in seen.partitions] == ["a"]
    assert [m.kind for m in seen.membership_changes] == ["stable"]
