"""DescribeGroups, ListGroups, DeleteGroups."""

from support.group_context import GroupContext

from coordinator.group import ClassicGroupState
from protocol.errors import ErrorCode
from protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from storage.records import GroupMetadataKey, OffsetCommitKey, decode_key


def describe(
    h: GroupContext, *groups: str, version: int = 5, ops: bool = False
) -> DescribeGroupsResponse:
    ctx = h.ctx(version)
    h.apply(h.shard.describe_groups(ctx, DescribeGroupsRequest(list(groups), ops), h.now))
    r = h.reply(ctx.reply_to)
    assert isinstance(r, DescribeGroupsResponse)
    return r


def list_groups(
    h: GroupContext,
    states: list[str] | None = None,
    types: list[str] | None = None,
    version: int = 5,
) -> ListGroupsResponse:
    ctx = h.ctx(version)
    h.apply(h.shard.list_groups(ctx, ListGroupsRequest(states or [], types or []), h.now))
    r = h.reply(ctx.reply_to)
    assert isinstance(r, ListGroupsResponse)
    return r


def delete(h: GroupContext, *groups: str) -> dict[str, int]:
    ctx = h.ctx(2)
    h.apply(h.shard.delete_groups(ctx, DeleteGroupsRequest(list(groups)), h.now))
    r = h.reply(ctx.reply_to)
    assert isinstance(r, DeleteGroupsResponse)
    return {x.group_id: x.error_code for x in r.results}


def test_describe_unknown_group_is_dead_without_error() -> None:
    h = GroupContext()
    g = describe(h, "nope").groups[0]
    assert (g.group_id, g.group_state, g.error_code, g.members) == ("nope", "Dead", 0, [])


def test_describe_stable_group_has_metadata_and_protocol() -> None:
    h = GroupContext()
    (a, b), _ = h.stable_group("g", 2)
    g = describe(h, "g").groups[0]
    assert (g.group_state, g.protocol_type, g.protocol_data) == ("Stable", "consumer", "range")
    assert [m.member_id for m in g.members] == [a, b]
    assert g.members[0].member_metadata != b"" and g.members[0].member_assignment == a.encode()
    assert g.members[0].client_host == "/10.0.0.1" and g.members[0].client_id == "c"
    assert g.authorized_operations == -2147483648


def test_describe_during_rebalance_omits_metadata_and_protocol() -> None:
    h = GroupContext()
    (a, _b), _ = h.stable_group("g", 2)
    h.join("g", a)
    g = describe(h, "g").groups[0]
    assert g.group_state == "PreparingRebalance" and g.protocol_data == ""
    assert all(m.member_metadata == b"" for m in g.members)
    assert g.members[0].member_assignment == a.encode()  # assignments are still shown


def test_describe_authorized_operations_v3() -> None:
    h = GroupContext()
    h.stable_group("g", 1)
    assert (
        describe(h, "g", version=3, ops=True).groups[0].authorized_operations == 3400
    )  # READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
    assert describe(h, "g", version=2, ops=True).groups[0].authorized_operations == -2147483648


def test_list_groups_by_state_and_type() -> None:
    h = GroupContext()
    h.stable_group("stable", 1)
    h.commit("simple", {("t", 0): 1})
    h.join_new("preparing")
    listed = {
        g.group_id: (g.group_state, g.group_type, g.protocol_type) for g in list_groups(h).groups
    }
    assert listed == {
        "stable": ("Stable", "classic", "consumer"),
        "simple": ("Empty", "classic", ""),
        "preparing": ("PreparingRebalance", "classic", "consumer"),
    }
    assert {g.group_id for g in list_groups(h, ["stable", "EMPTY"]).groups} == {"stable", "simple"}
    assert list_groups(h, types=["consumer"]).groups == []
    assert len(list_groups(h, types=["Classic"]).groups) == 3
    # v3 has no states filter: it is ignored.
    assert len(list_groups(h, ["stable"], version=3).groups) == 3


def test_delete_non_empty_group_is_non_empty_group() -> None:
    h = GroupContext()
    h.stable_group("g", 1)
    assert delete(h, "g") == {"g": ErrorCode.NON_EMPTY_GROUP}
    assert h.state("g") is ClassicGroupState.STABLE


def test_delete_empty_group_with_offsets_tombstones_offsets_then_metadata() -> None:
    h = GroupContext()
    (a,), gen = h.stable_group("g", 1)
    h.commit("g", {("t", 0): 1, ("t", 1): 2}, member_id=a, generation=gen)
    h.leave("g", (a, None))
    n = len(h.records)
    assert delete(h, "g", "unknown") == {"g": 0, "unknown": ErrorCode.GROUP_ID_NOT_FOUND}
    new = h.records[n:]
    assert all(v is None for _, _, v in new)
    keys = [decode_key(k) for _, k, _ in new]
    assert [type(k) for k in keys] == [OffsetCommitKey, OffsetCommitKey, GroupMetadataKey]
    assert "g" not in h.shard.groups and "g" not in h.shard.offsets
    assert describe(h, "g").groups[0].group_state == "Dead"
    assert "g" not in h.mirror.groups and "g" not in h.mirror.offsets


def test_empty_group_id_is_served_by_describe_and_delete() -> None:
    h = GroupContext()
    assert describe(h, "").groups[0].group_state == "Dead"
    assert delete(h, "") == {"": ErrorCode.GROUP_ID_NOT_FOUND}


def test_snapshot_reports_each_group() -> None:
    h = GroupContext()
    h.stable_group("g", 2)
    h.commit("s", {("t", 0): 1})
    assert sorted(h.shard.groups_snapshot()) == [
        ("g", "Stable", 2, "consumer", "range"),
        ("s", "Empty", 0, "", ""),
    ]
