"""The built-in server-side assignors (``uniform``, ``range``): Kafka's example cases and properties.

Exact outputs are asserted where Kafka's own tests fix them independently of Java hash
order: every range case (RangeAssignorTest), every heterogeneous uniform case
(UniformHeterogeneousAssignmentBuilderTest: members in TreeMap order A, B, C, topics by a
total comparator), and homogeneous uniform cases computed by hand from Kafka 4.1's rules.
Everything else is asserted as invariants over hypothesis-generated groups.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.group.consumer.assignors import BUILTIN_ASSIGNORS, assignor
from coordinator.group.consumer.assignors._common import match_to_racks, uuid_key
from coordinator.group.consumer.assignors.range import RangeAssignor, sorted_member_ids
from coordinator.group.consumer.assignors.spec import (
    Assignment,
    GroupSpec,
    MemberSpec,
    SubscriptionType,
)
from coordinator.group.consumer.assignors.uniform import UniformAssignor

HOMO = SubscriptionType.HOMOGENEOUS
HETERO = SubscriptionType.HETEROGENEOUS


def kafka_uuid(s: str) -> bytes:
    """Kafka ``Uuid.fromString``: 22 characters of URL-safe base64 without padding."""
    return base64.urlsafe_b64decode(s + "==")


# The topic ids of Kafka's assignor tests.
T1 = kafka_uuid("T1-A4s3VTwiI5CTbEp6POw")
T2 = kafka_uuid("T2-B4s3VTwiI5YHbPp6YUe")
T3 = kafka_uuid("T3-CU8fVTLCz5YMkLoDQsa")
T4 = kafka_uuid("T4-Tw9fVTLCz5HbPp6YQsa")


class Topics:
    """A SubscribedTopics over plain dicts; unknown topics answer -1."""

    def __init__(
        self,
        counts: Mapping[bytes, int],
        racks: Mapping[tuple[bytes, int], frozenset[str]] | None = None,
    ) -> None:
        self.counts = dict(counts)
        self.racks = dict(racks or {})
        self.rack_calls = 0

    def num_partitions(self, topic_id: bytes) -> int:
        return self.counts.get(topic_id, -1)

    def racks_for_partition(self, topic_id: bytes, partition: int) -> frozenset[str]:
        self.rack_calls += 1
        return self.racks.get((topic_id, partition), frozenset())


def member(
    subs: Iterable[bytes],
    prev: Mapping[bytes, Iterable[int]] | None = None,
    *,
    instance_id: str | None = None,
    rack: str | None = None,
) -> MemberSpec:
    return MemberSpec(
        subscribed_topic_ids=frozenset(subs),
        assigned_partitions={t: frozenset(ps) for t, ps in (prev or {}).items()},
        rack_id=rack,
        instance_id=instance_id,
    )


def group(members: Mapping[str, MemberSpec], kind: SubscriptionType = HOMO) -> GroupSpec:
    inverted: dict[bytes, dict[int, str]] = {}
    for mid, m in members.items():
        for t, ps in m.assigned_partitions.items():
            for p in ps:
                inverted.setdefault(t, {})[p] = mid
    return GroupSpec(members=dict(members), subscription_type=kind, inverted_target=inverted)


def mk(**topics: Iterable[int]) -> Assignment:
    names = {"t1": T1, "t2": T2, "t3": T3, "t4": T4}
    return {names[k]: frozenset(v) for k, v in topics.items()}


def normal(result: Mapping[str, Assignment]) -> dict[str, dict[bytes, frozenset[int]]]:
    return {m: {t: frozenset(ps) for t, ps in a.items() if ps} for m, a in result.items()}


def assert_valid(spec: GroupSpec, topics: Topics, result: Mapping[str, Assignment]) -> None:
    """Every member present; every partition of a subscribed topic assigned exactly once, to
    a member subscribed to it; no empty topic entries; values are frozensets."""
    assert list(result) == list(spec.members) or set(result) == set(spec.members)
    owner: dict[tuple[bytes, int], str] = {}
    for mid, a in result.items():
        for t, ps in a.items():
            assert isinstance(ps, frozenset)
            assert ps, f"empty entry for {mid}"
            assert t in spec.members[mid].subscribed_topic_ids, f"{mid} not subscribed"
            for p in ps:
                assert 0 <= p < topics.num_partitions(t)
                assert (t, p) not in owner, f"{(t, p)} twice"
                owner[(t, p)] = mid
    subscribed = {t for m in spec.members.values() for t in m.subscribed_topic_ids}
    for t in subscribed:
        for p in range(max(topics.num_partitions(t), 0)):
            assert (t, p) in owner, f"{(t, p)} unassigned"


def sizes(result: Mapping[str, Assignment]) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def moved(spec: GroupSpec, result: Mapping[str, Assignment]) -> int:
    """Partitions of a remaining member's previous target now owned by someone else."""
    n = 0
    for mid, m in spec.members.items():
        for t, ps in m.assigned_partitions.items():
            n += len(ps - result[mid].get(t, frozenset()))
    return n


uniform = UniformAssignor()
range_ = RangeAssignor()


# --------------------------------------------------------------------------------------
# Registry and common behaviour
# --------------------------------------------------------------------------------------


def test_registry_lists_uniform_then_range() -> None:
    assert list(BUILTIN_ASSIGNORS) == ["uniform", "range"]
    for name, a in BUILTIN_ASSIGNORS.items():
        assert a.name == name
        assert assignor(name) is a
    assert assignor("sticky") is None


def test_uuid_key_is_kafka_signed_order() -> None:
    neg = bytes([0x80]) + bytes(15)  # msb is the smallest int64
    zero = bytes(16)
    low_neg = bytes(8) + bytes([0xFF]) * 8  # lsb -1
    assert sorted([zero, neg, low_neg], key=uuid_key) == [neg, low_neg, zero]


@pytest.mark.parametrize("a", [uniform, range_], ids=["uniform", "range"])
def test_empty_group_gives_empty_assignment(a: UniformAssignor | RangeAssignor) -> None:
    assert a.assign(GroupSpec(members={}), Topics({T1: 3})) == {}


@pytest.mark.parametrize("a", [uniform, range_], ids=["uniform", "range"])
@pytest.mark.parametrize("kind", [HOMO, HETERO])
def test_no_topics_or_nonexistent_topic_gives_every_member_nothing(
    a: UniformAssignor | RangeAssignor, kind: SubscriptionType
) -> None:
    # Kafka raises for a topic missing from the metadata; we skip it (names are resolved
    # against the image before the assignor runs, so it only races a deletion).
    spec = group({"A": member([]), "B": member([])}, kind)
    assert a.assign(spec, Topics({T1: 3})) == {"A": {}, "B": {}}
    spec = group({"A": member([T2], {T2: [0]}), "B": member([T2])}, kind)
    assert a.assign(spec, Topics({T1: 3})) == {"A": {}, "B": {}}


# --------------------------------------------------------------------------------------
# Range: Kafka's RangeAssignorTest, exactly
# --------------------------------------------------------------------------------------


def test_range_first_assignment_two_members_two_topics() -> None:
    spec = group({"A": member([T1, T3]), "B": member([T1, T3])})
    got = range_.assign(spec, Topics({T1: 3, T3: 2}))
    assert normal(got) == {"A": mk(t1=[0, 1], t3=[0]), "B": mk(t1=[2], t3=[1])}


def test_range_first_assignment_different_subscriptions() -> None:
    spec = group({"A": member([T1, T2]), "B": member([T3]), "C": member([T2, T3])}, HETERO)
    got = range_.assign(spec, Topics({T1: 3, T2: 3, T3: 2}))
    assert normal(got) == {
        "A": mk(t1=[0, 1, 2], t2=[0, 1]),
        "B": mk(t3=[0]),
        "C": mk(t2=[2], t3=[1]),
    }


def test_range_more_members_than_partitions() -> None:
    spec = group({m: member([T1, T3]) for m in "ABC"})
    got = range_.assign(spec, Topics({T1: 3, T3: 2}))
    assert normal(got) == {"A": mk(t1=[0], t3=[0]), "B": mk(t1=[1], t3=[1]), "C": mk(t1=[2])}


def test_range_member_added_more_members_than_partitions_gets_nothing() -> None:
    spec = group(
        {
            "A": member([T1, T2], {T1: [0], T2: [0]}),
            "B": member([T1, T2], {T1: [1], T2: [1]}),
            "C": member([T1, T2]),
        }
    )
    got = range_.assign(spec, Topics({T1: 2, T2: 2}))
    assert got["C"] == {}
    assert normal(got) == {"A": mk(t1=[0], t2=[0]), "B": mk(t1=[1], t2=[1]), "C": {}}


def test_range_partitions_added() -> None:
    spec = group(
        {
            "A": member([T1, T2], {T1: [0, 1], T2: [0, 1]}),
            "B": member([T1, T2], {T1: [2], T2: [2]}),
        }
    )
    got = range_.assign(spec, Topics({T1: 4, T2: 4}))
    assert normal(got) == {"A": mk(t1=[0, 1], t2=[0, 1]), "B": mk(t1=[2, 3], t2=[2, 3])}


def test_range_member_added() -> None:
    spec = group(
        {
            "A": member([T1, T2], {T1: [0, 1], T2: [0, 1]}),
            "B": member([T1, T2], {T1: [2], T2: [2]}),
            "C": member([T1, T2]),
        }
    )
    got = range_.assign(spec, Topics({T1: 3, T2: 3}))
    assert normal(got) == {
        "A": mk(t1=[0], t2=[0]),
        "B": mk(t1=[1], t2=[1]),
        "C": mk(t1=[2], t2=[2]),
    }


def test_range_member_added_and_partition_added_heterogeneous() -> None:
    spec = group(
        {
            "A": member([T1, T2], {T1: [0, 1], T2: [0, 1]}),
            "B": member([T1, T2], {T1: [2], T2: [2]}),
            "C": member([T1]),
        },
        HETERO,
    )
    got = range_.assign(spec, Topics({T1: 4, T2: 3}))
    assert normal(got) == {
        "A": mk(t1=[0, 1], t2=[0, 1]),
        "B": mk(t1=[2], t2=[2]),
        "C": mk(t1=[3]),
    }


def test_range_member_removed() -> None:
    spec = group({"B": member([T1, T2], {T1: [2], T2: [2]})})
    got = range_.assign(spec, Topics({T1: 3, T2: 3}))
    assert normal(got) == {"B": mk(t1=[0, 1, 2], t2=[0, 1, 2])}


def test_range_subscriptions_changed_heterogeneous() -> None:
    spec = group(
        {
            "A": member([T1], {T1: [0, 1, 2], T2: [0]}),
            "B": member([T1, T2, T3], {T2: [1]}),
            "C": member([T2], {T2: [2], T3: [0, 1]}),
        },
        HETERO,
    )
    got = range_.assign(spec, Topics({T1: 3, T2: 3, T3: 2}))
    assert normal(got) == {
        "A": mk(t1=[0, 1]),
        "B": mk(t1=[2], t2=[0, 1], t3=[0, 1]),
        "C": mk(t2=[2]),
    }


def test_range_static_members_sort_first_and_keep_their_ranges() -> None:
    # testStaticMembership / testMixedStaticMembership: a static member rejoining under a new
    # member id keeps its range, because static members sort by instance id, first.
    topics = Topics({T1: 5})
    before = range_.assign(
        group(
            {
                "A": member([T1], instance_id="instanceA"),
                "C": member([T1], instance_id="instanceC"),
                "B": member([T1]),
            }
        ),
        topics,
    )
    after = range_.assign(
        group(
            {
                "C": member([T1], instance_id="instanceC"),
                "B": member([T1]),
                "memberA1": member([T1], instance_id="instanceA"),
            }
        ),
        topics,
    )
    assert after["memberA1"] == before["A"]
    assert after["B"] == before["B"]
    assert after["C"] == before["C"]
    # Static first (A, C by instance id), then dynamic B: 2, 2, 1.
    assert normal(before) == {"A": mk(t1=[0, 1]), "C": mk(t1=[2, 3]), "B": mk(t1=[4])}


def test_range_member_order_is_java_string_order() -> None:
    # U+FF5E sorts after U+1F600 in Python (code points) but before it in Java (UTF-16
    # units: U+1F600 is the surrogate pair D83D DE00).
    members = {"\U0001f600": member([T1]), "\uff5e": member([T1]), "a": member([T1])}
    assert sorted_member_ids(members) == ["a", "\U0001f600", "\uff5e"]
    static = {
        "z": member([T1], instance_id="b"),
        "y": member([T1]),
        "x": member([T1], instance_id="a"),
    }
    assert sorted_member_ids(static) == ["x", "z", "y"]


def test_range_co_partitions_topics_with_equal_counts() -> None:
    ts = [bytes([i]) * 16 for i in range(1, 5)]
    spec = group({f"m{i}": member(ts) for i in range(3)})
    got = range_.assign(spec, Topics(dict.fromkeys(ts, 7)))
    for a in got.values():
        assert len({a[t] for t in ts}) == 1  # the same partition ids of every topic
    assert_valid(spec, Topics(dict.fromkeys(ts, 7)), got)


# --------------------------------------------------------------------------------------
# Uniform heterogeneous: Kafka's UniformHeterogeneousAssignmentBuilderTest, exactly
# --------------------------------------------------------------------------------------


def check_hetero(
    members: dict[str, MemberSpec], counts: dict[bytes, int], want: dict[str, Assignment]
) -> None:
    spec = group(members, HETERO)
    topics = Topics(counts)
    got = uniform.assign(spec, topics)
    assert normal(got) == want
    assert_valid(spec, topics, got)


def test_hetero_first_assignment_two_members_two_topics() -> None:
    check_hetero(
        {"A": member([T1, T3]), "B": member([T3])},
        {T1: 3, T3: 6},
        {"A": mk(t1=[0, 1, 2], t3=[4]), "B": mk(t3=[0, 1, 2, 3, 5])},
    )


def test_hetero_more_members_than_partitions() -> None:
    check_hetero(
        {"A": member([T3]), "B": member([T3]), "C": member([T1])},
        {T3: 1, T1: 2},
        {"A": mk(t3=[0]), "B": {}, "C": mk(t1=[0, 1])},
    )


def test_hetero_unbalanced_previous_assignment() -> None:
    check_hetero(
        {
            "A": member([T1], {T1: [0, 1, 2]}),
            "B": member([T1, T2], {T1: [3], T2: [0]}),
            "C": member([T1, T2, T3], {T1: [4, 5], T2: [1, 2, 3], T3: [0, 1, 2, 3]}),
        },
        {T1: 6, T2: 4, T3: 4},
        {
            "A": mk(t1=[0, 1, 2, 5]),
            "B": mk(t1=[3], t2=[0, 1, 2, 3]),
            "C": mk(t1=[4], t3=[0, 1, 2, 3]),
        },
    )


def test_hetero_partitions_added() -> None:
    check_hetero(
        {
            "A": member([T1, T3], {T1: [0, 1, 2, 3], T3: [0, 1]}),
            "B": member([T1, T2, T3, T4], {T2: [0, 1, 2], T4: [0, 1, 2]}),
        },
        {T1: 6, T2: 5, T3: 3, T4: 3},
        {"A": mk(t1=[0, 1, 2, 3, 4, 5], t3=[0, 1, 2]), "B": mk(t2=[0, 1, 2, 3, 4], t4=[0, 1, 2])},
    )


def test_hetero_member_added_and_partitions_added() -> None:
    check_hetero(
        {
            "A": member([T1], {T1: [0, 2], T2: [0]}),
            "B": member([T1, T2], {T1: [1], T2: [1, 2]}),
            "C": member([T1, T2]),
        },
        {T1: 6, T2: 7},
        {
            "A": mk(t1=[0, 2, 3, 4, 5]),
            "B": mk(t1=[1], t2=[1, 2, 6]),
            "C": mk(t2=[0, 3, 4, 5]),
        },
    )


def test_hetero_member_removed() -> None:
    check_hetero(
        {
            "A": member([T1, T3], {T1: [0, 1, 2], T3: [0, 1]}),
            "B": member([T2], {T2: [3, 4, 5, 6]}),
        },
        {T1: 3, T2: 8, T3: 3},
        {"A": mk(t1=[0, 1, 2], t3=[0, 1, 2]), "B": mk(t2=range(8))},
    )


def test_hetero_subscription_removed() -> None:
    check_hetero(
        {
            "A": member([T1], {T1: [0, 2], T2: [1, 3]}),
            "B": member([T1, T2], {T1: [1], T2: [0, 2, 4]}),
        },
        {T1: 3, T2: 5},
        {"A": mk(t1=[0, 1, 2]), "B": mk(t2=range(5))},
    )


def test_hetero_partitions_run_out_before_balance() -> None:
    check_hetero(
        {
            "A": member([T1, T2, T3], {T1: [0, 1], T2: [0, 1], T3: [0, 1]}),
            "B": member([T1, T2, T3]),
        },
        {T1: 2, T2: 2, T3: 2},
        {"A": mk(t2=[0], t3=[0, 1]), "B": mk(t1=[0, 1], t2=[1])},
    )


def test_hetero_member_without_subscription() -> None:
    check_hetero(
        {"A": member([T1]), "B": member([])},
        {T1: 3},
        {"A": mk(t1=[0, 1, 2]), "B": {}},
    )


def test_hetero_overlapping_subscriptions_documented_imbalance_is_bounded() -> None:
    # Kafka's Javadoc example: members 1,2 on topic X, members 2,3 on topic Y. Each topic's
    # subscribers end within one of each other.
    x, y = bytes([1]) * 16, bytes([2]) * 16
    spec = group({"m1": member([x]), "m2": member([x, y]), "m3": member([y])}, HETERO)
    topics = Topics({x: 20, y: 10})
    got = uniform.assign(spec, topics)
    assert_valid(spec, topics, got)
    s = sizes(got)
    assert abs(s["m1"] - s["m2"]) <= 1 and abs(s["m2"] - s["m3"]) <= 1


# --------------------------------------------------------------------------------------
# Uniform homogeneous: Kafka 4.1's rules, worked by hand
# --------------------------------------------------------------------------------------


def test_homo_first_assignment_extras_go_to_the_last_members() -> None:
    # 5 partitions, 2 members: quotas 2 and 3. A holds nothing, so it gives its extra back
    # (B remains to take it). Unassigned in topic-id order: T1 0..2, T3 0..1.
    assert sorted([T1, T3], key=uuid_key) == [T1, T3]
    spec = group({"A": member([T1, T3]), "B": member([T1, T3])})
    topics = Topics({T1: 3, T3: 2})
    got = uniform.assign(spec, topics)
    assert normal(got) == {"A": mk(t1=[0, 1]), "B": mk(t1=[2], t3=[0, 1])}
    assert_valid(spec, topics, got)


def test_homo_unbalanced_previous_assignment_keeps_lowest_ids() -> None:
    # A holds 4 of 6, quota 3: keeps T1 {0, 1} whole, then the lowest id of T2; T2 1 moves.
    spec = group(
        {
            "A": member([T1, T2], {T1: [0, 1], T2: [0, 1]}),
            "B": member([T1, T2], {T1: [2], T2: [2]}),
        }
    )
    got = uniform.assign(spec, Topics({T1: 3, T2: 3}))
    assert normal(got) == {"A": mk(t1=[0, 1], t2=[0]), "B": mk(t1=[2], t2=[1, 2])}


def test_homo_member_added_moves_only_what_balance_needs() -> None:
    # 6 partitions over 3: everyone 2. A and B each revoke their overflow.
    spec = group(
        {
            "A": member([T1, T2], {T1: [0, 2], T2: [0]}),
            "B": member([T1, T2], {T1: [1], T2: [1, 2]}),
            "C": member([T1, T2]),
        }
    )
    got = uniform.assign(spec, Topics({T1: 3, T2: 3}))
    assert normal(got) == {"A": mk(t1=[0, 2]), "B": mk(t1=[1], t2=[1]), "C": mk(t2=[0, 2])}
    assert moved(spec, got) == 2


def test_homo_member_removed() -> None:
    spec = group(
        {
            "A": member([T1, T2], {T1: [0], T2: [0]}),
            "B": member([T1, T2], {T1: [1], T2: [1]}),
        }
    )
    got = uniform.assign(spec, Topics({T1: 3, T2: 3}))
    # The removed member's T1 2 and T2 2 are dealt in topic-id order: A then B.
    assert normal(got) == {"A": mk(t1=[0, 2], t2=[0]), "B": mk(t1=[1], t2=[1, 2])}
    assert moved(spec, got) == 0


def test_homo_subscription_removed_drops_the_topic() -> None:
    spec = group(
        {
            "A": member([T2], {T1: [0], T2: [0]}),
            "B": member([T2], {T1: [1], T2: [1]}),
        }
    )
    got = uniform.assign(spec, Topics({T1: 2, T2: 2}))
    assert normal(got) == {"A": mk(t2=[0]), "B": mk(t2=[1])}


def test_homo_give_back_keeps_extras_with_their_holders() -> None:
    # 7 partitions, 3 members: quotas 2, 2, 3 in some arrangement. A holds 2 (its extra
    # slot unfilled, two members remain for one extra: given back), B holds 3 (fills it),
    # C holds 2. 4.0 would have given A the extra and revoked one of B's.
    spec = group(
        {
            "A": member([T1], {T1: [0, 1]}),
            "B": member([T1], {T1: [2, 3, 4]}),
            "C": member([T1], {T1: [5, 6]}),
        }
    )
    got = uniform.assign(spec, Topics({T1: 7}))
    assert normal(got) == {"A": mk(t1=[0, 1]), "B": mk(t1=[2, 3, 4]), "C": mk(t1=[5, 6])}


def test_homo_mislabelled_spec_falls_back_to_heterogeneous() -> None:
    spec = group({"A": member([T1]), "B": member([T2])}, HOMO)
    topics = Topics({T1: 2, T2: 2})
    got = uniform.assign(spec, topics)
    assert normal(got) == {"A": mk(t1=[0, 1]), "B": mk(t2=[0, 1])}


def test_inconsistent_previous_targets_are_cleaned() -> None:
    # Two members claiming one partition, and an id beyond the topic: nothing twice.
    for kind in (HOMO, HETERO):
        spec = group(
            {"A": member([T1], {T1: [0, 1, 9]}), "B": member([T1], {T1: [1, 2]})},
            kind,
        )
        topics = Topics({T1: 4})
        got = uniform.assign(spec, topics)
        assert_valid(spec, topics, got)


# --------------------------------------------------------------------------------------
# Properties (hypothesis)
# --------------------------------------------------------------------------------------

TOPIC_POOL = [bytes([0x80 if i % 2 else 0x10, i]) + bytes(14) for i in range(6)]


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool) -> tuple[GroupSpec, Topics]:
    """A group with random subscriptions and a random (consistent) previous target."""
    ntopics = draw(st.integers(1, 4))
    ts = TOPIC_POOL[:ntopics]
    counts = {t: draw(st.integers(0, 12)) for t in ts}
    if draw(st.booleans()):
        counts[ts[0]] = -1  # deleted since
    nmembers = draw(st.integers(1, 7))
    mids = [f"m{i}" for i in range(nmembers)]
    if homogeneous:
        sub = frozenset(draw(st.sets(st.sampled_from(ts), min_size=1)))
        subs = {m: sub for m in mids}
    else:
        subs = {m: frozenset(draw(st.sets(st.sampled_from(ts)))) for m in mids}
    prev: dict[str, dict[bytes, set[int]]] = {m: {} for m in mids}
    for t, n in counts.items():
        for p in range(max(n, 0)):
            owner = draw(st.sampled_from([*mids, None]))
            if owner is not None:  # previous targets may include unsubscribed topics
                prev[owner].setdefault(t, set()).add(p)
    members = {m: member(subs[m], prev[m]) for m in mids}
    return group(members, HOMO if homogeneous else HETERO), Topics(counts)


PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(st.booleans().flatmap(groups), st.sampled_from(["uniform", "range"]))
def test_every_subscribed_partition_assigned_once_to_a_subscriber(
    case: tuple[GroupSpec, Topics], name: str
) -> None:
    spec, topics = case
    a = assignor(name)
    assert a is not None
    got = a.assign(spec, topics)
    assert_valid(spec, topics, got)
    # Deterministic: a second run, with previous targets iterated in another order, agrees.
    shuffled = GroupSpec(
        members={
            m: MemberSpec(
                s.subscribed_topic_ids,
                dict(reversed(list(s.assigned_partitions.items()))),
                s.rack_id,
                s.instance_id,
            )
            for m, s in spec.members.items()
        },
        subscription_type=spec.subscription_type,
        inverted_target=spec.inverted_target,
    )
    assert normal(a.assign(shuffled, topics)) == normal(got)


@PROPS
@given(groups(homogeneous=True))
def test_uniform_homogeneous_sizes_within_one(case: tuple[GroupSpec, Topics]) -> None:
    spec, topics = case
    got = uniform.assign(spec, topics)
    s = sizes(got).values()
    assert max(s) - min(s) <= 1


def balanced_target(spec: GroupSpec, topics: Topics, rotate: int = 0) -> GroupSpec:
    """The spec with every member's previous target replaced by uniform's answer, computed
    with the member order rotated by ``rotate`` (so the members holding the extra
    partitions are not always the last ones)."""
    items = list(spec.members.items())
    k = rotate % len(items) if items else 0
    got = uniform.assign(group(dict(items[k:] + items[:k]), spec.subscription_type), topics)
    return group(
        {m: member(s.subscribed_topic_ids, got[m]) for m, s in spec.members.items()},
        spec.subscription_type,
    )


@PROPS
@given(st.booleans().flatmap(groups), st.integers(0, 6))
def test_uniform_balanced_and_unchanged_means_no_movement(
    case: tuple[GroupSpec, Topics], rotate: int
) -> None:
    spec, topics = case
    again = balanced_target(spec, topics, rotate)
    got = uniform.assign(again, topics)
    assert normal(got) == {
        m: {t: ps for t, ps in s.assigned_partitions.items() if ps}
        for m, s in again.members.items()
    }


@PROPS
@given(groups(homogeneous=True), st.integers(0, 7), st.integers(0, 6))
def test_uniform_join_moves_the_minimum(
    case: tuple[GroupSpec, Topics], at: int, rotate: int
) -> None:
    spec, topics = case
    base = balanced_target(spec, topics, rotate)
    sub = next(iter(base.members.values())).subscribed_topic_ids
    items = list(base.members.items())
    items.insert(min(at, len(items)), ("new", member(sub)))
    joined = group(dict(items))
    got = uniform.assign(joined, topics)
    assert_valid(joined, topics, got)
    total = sum(max(topics.num_partitions(t), 0) for t in sub)
    m = len(joined.members)
    # Balance forces the newcomer to take at least floor(P/M) partitions, all moved from
    # others; the assignor moves exactly what it receives, and never more than ceil(P/M).
    assert moved(joined, got) == sizes(got)["new"]
    assert total // m <= sizes(got)["new"] <= math.ceil(total / m)
    if at >= len(spec.members):  # joining last, it never takes an extra someone holds
        assert sizes(got)["new"] == total // m


@PROPS
@given(groups(homogeneous=True), st.integers(0, 6), st.integers(0, 6))
def test_uniform_leave_moves_only_the_leavers_partitions(
    case: tuple[GroupSpec, Topics], which: int, rotate: int
) -> None:
    spec, topics = case
    if len(spec.members) < 2:
        return
    base = balanced_target(spec, topics, rotate)
    leaver = list(base.members)[which % len(base.members)]
    left = group({m: s for m, s in base.members.items() if m != leaver})
    got = uniform.assign(left, topics)
    assert_valid(left, topics, got)
    assert moved(left, got) == 0
    s = sizes(got).values()
    assert max(s) - min(s) <= 1


@PROPS
@given(groups(homogeneous=False))
def test_uniform_heterogeneous_topic_subscribers_balanced_from_scratch(
    case: tuple[GroupSpec, Topics],
) -> None:
    # With identical subscriptions per topic-sharing set (here: from scratch, one topic
    # per member at most) Kafka's balancing leaves each topic's subscribers within one.
    spec, topics = case
    single = group(
        {
            m: member(sorted(s.subscribed_topic_ids, key=uuid_key)[:1])
            for m, s in spec.members.items()
        },
        HETERO,
    )
    got = uniform.assign(single, topics)
    assert_valid(single, topics, got)
    sz = sizes(got)
    per_topic: dict[bytes, list[int]] = {}
    for m, s in single.members.items():
        for t in s.subscribed_topic_ids:
            if topics.num_partitions(t) >= 0:
                per_topic.setdefault(t, []).append(sz[m])
    for counts in per_topic.values():
        assert max(counts) - min(counts) <= 1


# --------------------------------------------------------------------------------------
# Rack awareness
# --------------------------------------------------------------------------------------

RACKS = ["r0", "r1", "r2"]


def rack_local(result: Mapping[str, Assignment], spec: GroupSpec, topics: Topics) -> int:
    n = 0
    for m, a in result.items():
        rack = spec.members[m].rack_id
        for t, ps in a.items():
            n += sum(1 for p in ps if rack in topics.racks.get((t, p), frozenset()))
    return n


def with_racks(spec: GroupSpec, racks: list[str]) -> GroupSpec:
    return GroupSpec(
        members={
            m: MemberSpec(s.subscribed_topic_ids, s.assigned_partitions, racks[i % len(racks)])
            for i, (m, s) in enumerate(spec.members.items())
        },
        subscription_type=spec.subscription_type,
        inverted_target=spec.inverted_target,
    )


@st.composite
def racked_groups(draw: st.DrawFn) -> tuple[GroupSpec, GroupSpec, Topics]:
    spec, topics = draw(st.booleans().flatmap(groups))
    member_racks = draw(st.lists(st.sampled_from(RACKS), min_size=1, max_size=3))
    racks: dict[tuple[bytes, int], frozenset[str]] = {}
    for t, n in topics.counts.items():
        for p in range(max(n, 0)):
            racks[(t, p)] = frozenset(draw(st.sets(st.sampled_from(RACKS), max_size=2)))
    return spec, with_racks(spec, member_racks), Topics(topics.counts, racks)


@PROPS
@given(racked_groups())
def test_rack_aware_keeps_counts_and_stickiness_and_is_never_less_local(
    case: tuple[GroupSpec, GroupSpec, Topics],
) -> None:
    plain_spec, spec, topics = case
    plain = uniform.assign(plain_spec, topics)
    racked = uniform.assign(spec, topics)
    assert_valid(spec, topics, racked)
    assert sizes(racked) == sizes(plain)
    # Stickiness unchanged: every member keeps exactly the same partitions.
    for m, s in spec.members.items():
        for t, ps in s.assigned_partitions.items():
            assert ps & racked[m].get(t, frozenset()) == ps & plain[m].get(t, frozenset())
    assert moved(spec, racked) == moved(plain_spec, plain)
    # The partitions moving in go to the same receivers per topic, re-matched by a maximum
    # matching: never fewer rack-local placements than the rack-blind result.
    assert rack_local(racked, spec, topics) >= rack_local(plain, spec, topics)


@pytest.mark.parametrize("kind", [HOMO, HETERO])
def test_rack_aware_places_partitions_in_their_racks(kind: SubscriptionType) -> None:
    # 6 partitions, replicas of p in rack r{p % 3}; members A (r2), B (r1), C (r0).
    # Rack-blind: A gets 0,1 B 2,3 C 4,5 -> only partition... few local. Rack-aware: all.
    racks = {(T1, p): frozenset({f"r{p % 3}"}) for p in range(6)}
    topics = Topics({T1: 6}, racks)
    names = {"A": "r2", "B": "r1", "C": "r0"}
    spec = group({m: member([T1], rack=r) for m, r in names.items()}, kind)
    blind = group({m: member([T1]) for m in names}, kind)
    got = uniform.assign(spec, topics)
    plain = uniform.assign(blind, topics)
    assert sizes(got) == sizes(plain) == {"A": 2, "B": 2, "C": 2}
    assert rack_local(got, spec, topics) == 6
    assert rack_local(plain, spec, topics) < 6
    assert normal(got) == {"A": mk(t1=[2, 5]), "B": mk(t1=[1, 4]), "C": mk(t1=[0, 3])}


def test_rack_aware_needs_every_member_racked() -> None:
    racks = {(T1, p): frozenset({f"r{p % 3}"}) for p in range(6)}
    topics = Topics({T1: 6}, racks)
    spec = group({"A": member([T1], rack="r2"), "B": member([T1]), "C": member([T1], rack="r0")})
    got = uniform.assign(spec, topics)
    assert normal(got) == {"A": mk(t1=[0, 1]), "B": mk(t1=[2, 3]), "C": mk(t1=[4, 5])}
    assert topics.rack_calls == 0


def test_range_ignores_racks() -> None:
    racks = {(T1, p): frozenset({f"r{p % 3}"}) for p in range(6)}
    topics = Topics({T1: 6}, racks)
    spec = group({m: member([T1], rack=r) for m, r in {"A": "r2", "B": "r1", "C": "r0"}.items()})
    got = range_.assign(spec, topics)
    assert normal(got) == {"A": mk(t1=[0, 1]), "B": mk(t1=[2, 3]), "C": mk(t1=[4, 5])}


def test_match_to_racks_finds_augmenting_paths() -> None:
    # Item 0 could go to a or b, item 1 only to a, capacity one each: greedy would put item
    # 0 on a and strand item 1; the augmenting path moves item 0 to b.
    assert match_to_racks([{"a", "b"}, {"a"}], {"a": 1, "b": 1}) == ["b", "a"]
    # Longer chain a -> b -> c.
    got = match_to_racks([{"a", "b"}, {"b", "c"}, {"a"}], {"a": 1, "b": 1, "c": 1})
    assert got == ["b", "c", "a"]
    assert match_to_racks([{"x"}, set()], {"a": 2}) == [None, None]
