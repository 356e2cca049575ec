"""Property test: random clients joining, syncing, heartbeating, leaving and committing.

Each simulated client behaves like a (possibly buggy or slow) Kafka consumer:
it keeps the member id and generation from its last JoinGroup answer, and
forgets them on UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID / ILLEGAL_GENERATION.
Leaders assign ``b"<generation>:<member id>"`` to every member, which makes
stale or misdirected assignments visible.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from support.group_context import GroupContext, subscription

from coordinator.group import ClassicGroupState
from protocol.errors import ErrorCode
from protocol.messages.join_group import JoinGroupResponse
from protocol.messages.sync_group import SyncGroupResponse

PROTOCOL_SETS = (
    (("range", subscription("t")), ("roundrobin", subscription("t"))),
    (("roundrobin", subscription("t", "u")),),
)
RESET = {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID, ErrorCode.ILLEGAL_GENERATION}


@dataclass
class Client:
    group: str
    instance: str | None
    member_id: str = ""
    generation: int = -1
    leader: str = ""
    members: list[str] = field(default_factory=list)
    join_handle: int | None = None
    sync_handle: int | None = None
    sync_generation: int = -1
    ids: set[str] = field(default_factory=set)

    def reset(self) -> None:
        self.member_id, self.generation, self.leader, self.members = "", -1, "", []


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = GroupContext()
        self.clients = [
            Client("g0", None),
            Client("g0", None),
            Client("g0", "s1"),
            Client("g0", "s2"),
            Client("g1", None),
            Client("g1", "s3"),
        ]
        self.max_generation: dict[str, int] = {}
        self.leaders: dict[tuple[str, int], str] = {}

    # ------------------------------------------------------------ bookkeeping

    def _collect(self) -> None:
        h = self.h
        for c in self.clients:
            if c.join_handle is not None and c.join_handle in h.replies:
                r = h.replies[c.join_handle]
                c.join_handle = None
                assert isinstance(r, JoinGroupResponse)
                if r.error_code == ErrorCode.NO_ERROR:
                    c.member_id, c.generation = r.member_id, r.generation_id
                    c.leader = r.leader
                    c.members = [m.member_id for m in r.members]
                    c.ids.add(r.member_id)
                    if r.leader == r.member_id and not r.skip_assignment:
                        key = (c.group, r.generation_id)
                        # At most one leader per generation.
                        assert self.leaders.setdefault(key, r.member_id) == r.member_id
                elif r.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                    c.member_id = r.member_id
                    c.ids.add(r.member_id)
                elif r.error_code in RESET:
                    c.reset()
            if c.sync_handle is not None and c.sync_handle in h.replies:
                s = h.replies[c.sync_handle]
                c.sync_handle = None
                assert isinstance(s, SyncGroupResponse)
                if s.error_code == ErrorCode.NO_ERROR:
                    # Only ever an assignment of the generation it synced for, made for it.
                    if s.assignment:
                        gen, _, owner = s.assignment.decode().partition(":")
                        assert int(gen) == c.sync_generation, (s.assignment, c.sync_generation)
                        assert owner in c.ids, (owner, c.ids)
                elif s.error_code in RESET:
                    c.reset()

    def _step(self) -> None:
        self._collect()

    # ------------------------------------------------------------ rules

    @rule(
        i=st.integers(0, 5),
        protocols=st.sampled_from(PROTOCOL_SETS),
        version=st.sampled_from([3, 4, 5, 7, 9]),
        forget=st.booleans(),
    )
    def join(
        self, i: int, protocols: tuple[tuple[str, bytes], ...], version: int, forget: bool
    ) -> None:
        c = self.clients[i]
        if c.join_handle is not None:
            return
        if c.instance is not None:
            version = max(version, 5)
        if forget and c.instance is not None:
            c.reset()  # a restarted static consumer: rejoins with its instance id only
        c.join_handle = self.h.join(
            c.group,
            c.member_id,
            instance=c.instance,
            protocols=protocols,
            version=version,
            session=10000,
            rebalance=20000,
        )
        self._step()

    @rule(i=st.integers(0, 5))
    def sync(self, i: int) -> None:
        c = self.clients[i]
        if c.sync_handle is not None or not c.member_id or c.generation < 0:
            return
        assignments = (
            {m: f"{c.generation}:{m}".encode() for m in c.members}
            if c.leader == c.member_id
            else None
        )
        c.sync_generation = c.generation
        c.sync_handle = self.h.sync(
            c.group, c.member_id, c.generation, assignments, instance=c.instance
        )
        self._step()

    @rule(i=st.integers(0, 5))
    def heartbeat(self, i: int) -> None:
        c = self.clients[i]
        if not c.member_id:
            return
        if self.h.heartbeat(c.group, c.member_id, c.generation, instance=c.instance) in RESET:
            c.reset()
        self._step()

    @rule(i=st.integers(0, 5))
    def leave(self, i: int) -> None:
        c = self.clients[i]
        if not c.member_id:
            return
        self.h.leave(c.group, (c.member_id, c.instance))
        c.reset()
        self._step()

    @rule(i=st.integers(0, 5), offset=st.integers(0, 1000), simple=st.booleans())
    def commit(self, i: int, offset: int, simple: bool) -> None:
        c = self.clients[i]
        if simple:
            self.h.commit(f"simple-{i}", {("t", 0): offset})
        elif c.member_id:
            self.h.commit(
                c.group,
                {("t", i): offset},
                member_id=c.member_id,
                generation=c.generation,
                instance=c.instance,
            )
        self._step()

    def _behave(self, c: Client) -> None:
        """What a well-behaved consumer would do next."""
        if c.join_handle is not None or c.sync_handle is not None:
            return
        i = self.clients.index(c)
        if not c.member_id or c.generation < 0:
            self.join(i, PROTOCOL_SETS[0], 9, False)
            return
        g = self.h.shard.groups.get(c.group)
        if g is not None and g.state is ClassicGroupState.COMPLETING_REBALANCE:
            self.sync(i)
            return
        self.heartbeat(i)
        if g is not None and g.state is ClassicGroupState.PREPARING_REBALANCE:
            self.join(i, PROTOCOL_SETS[0], 9, False)

    @rule(i=st.integers(0, 5))
    def behave(self, i: int) -> None:
        self._behave(self.clients[i])

    @rule(ms=st.sampled_from([0, 1000, 3000]))
    def everybody_behaves(self, ms: int) -> None:
        for c in self.clients:
            self._behave(c)
        self.h.advance(ms)
        self._step()

    @rule(ms=st.sampled_from([1, 500, 2500, 3000, 6000, 10000, 25000]))
    def advance(self, ms: int) -> None:
        self.h.advance(ms)
        self._step()

    # ------------------------------------------------------------ invariants

    @invariant()
    def generations_never_decrease_and_leader_is_a_member(self) -> None:
        for gid, g in self.h.shard.groups.items():
            assert g.generation >= self.max_generation.get(gid, 0)
            self.max_generation[gid] = g.generation
            assert g.leader_id is None or g.leader_id in g.members
            assert g.num_awaiting_join == sum(m.awaiting_join for m in g.members.values())
            believers = {
                i
                for i, c in enumerate(self.clients)
                if c.group == gid and c.generation == g.generation and c.leader == c.member_id
            }
            assert len(believers) <= 1, believers

    @invariant()
    def stable_members_hold_current_generation_assignments(self) -> None:
        for g in self.h.shard.groups.values():
            if g.state is not ClassicGroupState.STABLE:
                continue
            for m in g.members.values():
                gen = m.assignment.decode().partition(":")[0]
                assert m.assignment == b"" or gen == str(g.generation), (m.assignment, g.generation)

    @invariant()
    def no_request_is_lost(self) -> None:
        parked = {
            x
            for g in self.h.shard.groups.values()
            for m in g.members.values()
            for x in (m.join_reply, m.sync_reply)
            if x is not None
        }
        for c in self.clients:
            for x in (c.join_handle, c.sync_handle):
                if x is not None:
                    assert x in parked, f"handle {x} neither answered nor parked"

    @invariant()
    def replay_reproduces_state(self) -> None:
        self.h.assert_replay_equivalent()

    def teardown(self) -> None:
        # With everybody silent, every parked request is eventually answered.
        self.h.advance(1_000_000)
        self._collect()
        for c in self.clients:
            assert c.join_handle is None and c.sync_handle is None
        self.h.assert_replay_equivalent()


GroupMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_group_state_machine = GroupMachine.TestCase
