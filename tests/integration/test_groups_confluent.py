"""confluent-kafka (librdkafka) groups against a real kgc: eager, cooperative, static."""

from __future__ import annotations

import time

import pytest
from support.groupkit import Member, create_topic, wait_until
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration
PARTITIONS = 6


def settled(members: list[Member], n: int = PARTITIONS) -> bool:
    sets = [m.partitions() for m in members]
    return set().union(*sets) == set(range(n)) and sum(map(len, sets)) == n and all(sets)


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_librdkafka_group_assigns_every_partition_once(kgc: KgcProcess, strategy: str) -> None:
    create_topic(kgc.bootstrap, "orders", PARTITIONS)
    members = [Member(kgc, f"ck-{strategy}", strategy) for _ in range(2)]
    try:
        wait_until(lambda: settled(members), timeout=40, what="two members settled")
        assert sorted(len(m.partitions()) for m in members) == [3, 3]
    finally:
        for m in members:
            m.close()


def test_cooperative_third_member_joins_incrementally(kgc: KgcProcess) -> None:
    create_topic(kgc.bootstrap, "orders", PARTITIONS)
    members = [Member(kgc, "ck-coop", "cooperative-sticky") for _ in range(2)]
    try:
        wait_until(lambda: settled(members), timeout=40, what="two members settled")
        before = [m.partitions() for m in members]
        for m in members:
            m.revoked_ever.clear()
        members.append(Member(kgc, "ck-coop", "cooperative-sticky"))
        wait_until(
            lambda: settled(members) and all(len(m.partitions()) == 2 for m in members),
            timeout=40,
            what="three members settled",
        )
        for m, had in zip(members[:2], before, strict=True):
            # Incremental: each old member gave up exactly one partition and kept the rest.
            revoked = set().union(*m.revoked_ever) if m.revoked_ever else set()
            assert len(revoked) == 1, m.revoked_ever
            assert m.partitions() == had - revoked
    finally:
        for m in members:
            m.close()


def test_static_member_restart_keeps_its_partitions_without_revoking_others(
    kgc: KgcProcess,
) -> None:
    create_topic(kgc.bootstrap, "orders", PARTITIONS)
    steady = Member(kgc, "ck-static", "range", **{"group.instance.id": "steady-1"})
    bouncing = Member(
        kgc, "ck-static", "range", **{"group.instance.id": "bouncer-1", "session.timeout.ms": 10000}
    )
    try:
        wait_until(
            lambda: settled([steady, bouncing]), timeout=40, what="two static members settled"
        )
        had = bouncing.partitions()
        steady_had = steady.partitions()
        steady.revoked_ever.clear()
        # A static member closing does not send LeaveGroup; it comes back within its session timeout.
        bouncing.running = False
        bouncing.thread.join(10)
        bouncing.consumer.close()
        time.sleep(1.0)  # the static member stays away a while (workload shape, not a wait)
        bouncing = Member(
            kgc,
            "ck-static",
            "range",
            **{"group.instance.id": "bouncer-1", "session.timeout.ms": 10000},
        )
        wait_until(
            lambda: bouncing.partitions() == had,
            timeout=30,
            what="the restarted static member to get its partitions back",
        )
        # Both members heartbeat three more times each, answered NONE: a rebalance the
        # rejoin caused would have been signalled to them in those answers.
        beats = kgc.requests_total(api="Heartbeat", error="NONE")
        wait_until(
            lambda: kgc.requests_total(api="Heartbeat", error="NONE") >= beats + 6,
            timeout=30,
            what="three more heartbeats per member",
        )
        assert steady.partitions() == steady_had
        assert steady.revoked_ever == []
    finally:
        steady.close()
        bouncing.close()
