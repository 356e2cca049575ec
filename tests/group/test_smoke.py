from support.group_context import GroupContext

from coordinator.group import ClassicGroupState
from protocol.errors import ErrorCode


def test_two_members_reach_stable_and_replay_matches() -> None:
    h = GroupContext()
    ids, gen = h.stable_group("g", 2)
    assert gen == 1
    assert h.state("g") is ClassicGroupState.STABLE
    assert h.heartbeat("g", ids[0], gen) == ErrorCode.NO_ERROR
    assert h.commit("g", {("t", 0): 5}, member_id=ids[0], generation=gen) == {("t", 0): 0}
    assert h.committed("g", "t", 0) == 5
    h.assert_replay_equivalent()
