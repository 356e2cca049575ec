"""Failover of a three-node cluster under live groups, with what was acknowledged checked.

Every group member records each commit the cluster acknowledged (``clusterkit.Ledger``);
after the fault the group's committed offsets, fetched from its new coordinator, must be at
or past every acknowledged one (nothing lost, nothing rewound), and no record may be
consumed again below an offset already acknowledged for its partition.

* SIGKILL of a group's coordinator: another node takes the offsets partition after the
  session timeout (3 s here); the time from the kill to the group's first commit
  acknowledged elsewhere is printed.
* SIGSTOP of the coordinator past its session, then SIGCONT: a commit that reached the
  paused node is refused when it resumes, nothing lands in ``kgc_record_log`` at its old
  epoch after the takeover (checked in PostgreSQL directly), and it stops claiming the group.
* PostgreSQL restarted under load (fast, immediate, and down for twice the session
  timeout): nothing acknowledged is lost and the same kgc processes go on serving.
* A rolling restart (SIGTERM, start, one node at a time) under a consuming group.

About 25-40 s each on two cores.
"""

from __future__ import annotations

import time

import pytest
from support.clusterkit import Cluster, GroupMember, Ledger, groups_on_distinct_nodes
from support.crashkit import (
    BackgroundProducer,
    Committer,
    committed,
    fetch_committed,
    read_all_confluent,
    wait_acked,
)
from support.dataplanekit import keyed_messages, produce_confluent
from support.groupkit import create_topic, wait_until
from support.pgserver import PgServer

from coordinator.tools.client import Connection
from protocol.errors import ErrorCode
from protocol.messages import offset_commit
from protocol.messages.offset_commit import (
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

PARTITIONS = 4
# librdkafka waits socket.timeout.ms (60 s by default) for a paused node's answer before it
# looks for the coordinator again; Kafka clients facing a frozen broker are tuned the same way.
FROZEN_BROKER = {"socket.timeout.ms": 4000}


def prepare_topic(cluster: Cluster, topic: str, messages: int) -> dict[int, int]:
    """Create and fill ``topic``; return its end offsets."""
    create_topic(cluster.nodes[min(cluster.live())].bootstrap, topic, PARTITIONS)
    cluster.wait_topic_led(topic)
    produce_confluent(cluster.bootstrap, topic, keyed_messages(messages))
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ends"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        c.close()


class PlacedProducer(BackgroundProducer):
    """A BackgroundProducer that also remembers where each acknowledged record was placed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(bootstrap, topic)
        self.placed: dict[bytes, tuple[int, int]] = {}

    def on_delivery(self, err: object, msg: object) -> None:
        super().on_delivery(err, msg)
        if err is None:
            self.placed[msg.value()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]


def committed_at_coordinator(cluster: Cluster, group: str) -> dict[int, int]:
    """The group's committed offsets as its coordinator answers them. After a PostgreSQL
    outage every lease is taken again, so the node FindCoordinator named a moment ago may
    answer NOT_COORDINATOR: the coordinator is then looked up again, as a client does."""
    found: list[dict[int, int]] = []

    def fetched() -> bool:
        node = cluster.coordinator_of(group)
        error, offsets = fetch_committed(cluster.nodes[node].bootstrap, group)
        if error == ErrorCode.NOT_COORDINATOR:
            return False
        assert error == 0, (group, ErrorCode(error).name)
        found.append({p: o for p, (o, _m) in offsets.items()})
        return True

    wait_until(fetched, timeout=30, interval=0.1, what=f"the committed offsets of {group}")
    return found[-1]


def assert_nothing_lost(cluster: Cluster, group: str, acked: dict[int, int]) -> None:
    got = committed_at_coordinator(cluster, group)
    behind = {p: (got.get(p), o) for p, o in acked.items() if got.get(p, -1) < o}
    assert not behind, f"committed offsets behind acknowledged ones (got, acked): {behind}"


def test_sigkill_of_the_coordinator_moves_the_group_and_rewinds_nothing(
    cluster: Cluster,
) -> None:
    prepare_topic(cluster, "live", 20_000)
    (group,) = groups_on_distinct_nodes(cluster, 1, "live")
    victim = cluster.coordinator_of(group)
    ledger = Ledger()
    member = GroupMember(cluster.all_bootstrap, group, "live", ledger, batch=20, pace=0.02)
    member.start()
    try:
        wait_until(lambda: len(ledger.ack_times) >= 20, timeout=30, what="commits before")
        before = ledger.snapshot()
        cluster.kill(victim)
        killed = time.monotonic()
        wait_until(
            lambda: len(ledger.acks_after(killed)) >= 20,
            timeout=60,
            what="commits acknowledged after the kill",
        )
        failover = ledger.acks_after(killed)[0] - killed
        new = cluster.coordinator_of(group)
        print(
            f"\nSIGKILL of node {victim}: the group's first commit after it was acknowledged "
            f"{failover * 1000:.0f} ms later, by node {new} "
            f"(session timeout {cluster.session_timeout_ms} ms)"
        )
        assert new != victim
        assert failover < 4 * cluster.session_timeout_ms / 1000
        after = ledger.snapshot()
        assert all(after[p] >= o for p, o in before.items())
    finally:
        member.close()
    assert not ledger.rewinds, ledger.rewinds[:10]
    assert_nothing_lost(cluster, group, ledger.snapshot())


def offsets_lease(pg: PgServer, partition: int) -> tuple[int | None, int, int]:
    """(owner node, epoch, next offset) of an offsets partition's lease, read directly."""
    row = pg.psql(
        "kgc",
        "SELECT coalesce(owner_node, -1), epoch, next_offset FROM kgc_partition "
        f"WHERE topic = '__consumer_offsets' AND partition = {partition}",
    ).strip()
    owner, epoch, next_offset = (int(x) for x in row.split("|"))
    return (None if owner < 0 else owner), epoch, next_offset


def test_a_paused_coordinator_is_fenced_when_it_resumes(
    cluster: Cluster, pg_server: PgServer
) -> None:
    prepare_topic(cluster, "paused", 20_000)
    (group,) = groups_on_distinct_nodes(cluster, 1, "paused")
    victim = cluster.coordinator_of(group)
    partition = cluster.offsets_partition(group)
    owner, old_epoch, _ = offsets_lease(pg_server, partition)
    assert owner == victim
    ledger = Ledger()
    member = GroupMember(
        cluster.all_bootstrap, group, "paused", ledger, batch=20, pace=0.02, **FROZEN_BROKER
    )
    member.start()
    late = Connection.to(cluster.nodes[victim].bootstrap, timeout=30)
    try:
        wait_until(lambda: len(ledger.ack_times) >= 20, timeout=30, what="commits before")
        cluster.pause(victim)
        paused = time.monotonic()
        # A commit that reaches the paused node: its kernel takes the bytes, and the node
        # reads them only when it resumes, still believing it owns the partition. It is a
        # simple commit of a memberless group in the same offsets partition (a commit of
        # the live group without its member id would be refused before any write).
        late_group = next(
            g
            for g in (f"late-{i}" for i in range(100_000))
            if cluster.offsets_partition(g) == partition
        )
        late_offset = 10**9
        late_request = offset_commit.Request(
            group_id=late_group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                OffsetCommitRequestTopic(
                    name="paused",
                    partitions=[
                        OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=late_offset,
                            committed_metadata="late",
                        )
                    ],
                )
            ],
        )
        late_cid = late.send(offset_commit.API_KEY, 8, late_request)

        def taken_over() -> bool:
            owner, epoch, _ = offsets_lease(pg_server, partition)
            return owner is not None and owner != victim and epoch > old_epoch

        wait_until(taken_over, timeout=30, what="another node to take the offsets partition")
        wait_until(
            lambda: len(ledger.acks_after(paused)) >= 10,
            timeout=60,
            what="the group's commits at the new coordinator",
        )
        new_owner, new_epoch, _ = offsets_lease(pg_server, partition)
        takeover_offset = int(
            pg_server.psql(
                "kgc",
                "SELECT min(base_offset) FROM kgc_record_log WHERE topic = '__consumer_offsets' "
                f"AND partition = {partition} AND epoch > {old_epoch}",
            ).strip()
        )
        print(
            f"\nnode {victim} paused; node {new_owner} took offsets partition {partition} at "
            f"epoch {new_epoch} (was {old_epoch}), first offset written {takeover_offset}"
        )

        cluster.resume(victim)
        from protocol.framing import decode_response

        got_cid, resp = decode_response(offset_commit.API_KEY, 8, late.recv_frame())
        assert got_cid == late_cid
        late_error = resp.topics[0].partitions[0].error_code
        print(f"the late commit was answered {ErrorCode(late_error).name}")
        assert late_error in (
            ErrorCode.NOT_COORDINATOR,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ), late_error

        # Nothing at the old epoch after the takeover offset, in any offsets partition the
        # paused node held: the database refused its late writes.
        stale_rows = int(
            pg_server.psql(
                "kgc",
                "SELECT count(*) FROM kgc_record_log r WHERE r.topic = '__consumer_offsets' "
                "AND EXISTS (SELECT 1 FROM kgc_record_log n WHERE n.topic = r.topic "
                "AND n.partition = r.partition AND n.epoch > r.epoch "
                "AND n.base_offset < r.base_offset)",
            ).strip()
        )
        assert stale_rows == 0
        assert (
            int(
                pg_server.psql(
                    "kgc",
                    "SELECT count(*) FROM kgc_record_log WHERE topic = '__consumer_offsets' "
                    f"AND partition = {partition} AND epoch = {old_epoch} "
                    f"AND last_offset >= {takeover_offset}",
                ).strip()
            )
            == 0
        )

        # The resumed node steps down: asked directly, it names the new owner.
        def stepped_down() -> bool:
            try:
                err, node = cluster.find_coordinator(group, via=victim)
            except OSError:
                return False
            return err == 0 and node == new_owner

        wait_until(stepped_down, timeout=30, what=f"node {victim} to name node {new_owner}")
        assert cluster.nodes[victim].alive()
        resumed = time.monotonic()
        wait_until(
            lambda: len(ledger.acks_after(resumed)) >= 5, timeout=30, what="commits after resume"
        )
    finally:
        late.close()
        member.close()
    # Its own account of the refusal: the database refused the late write at the old epoch
    # (PgJournal's fence), or the node dropped the partition first when it saw its lease
    # deadline had passed (then the request never reached the database).
    log = cluster.log(victim)
    name = f"__consumer_offsets-{partition}"
    refusals = [
        line
        for line in log.splitlines()
        if f"{name} refused at epoch {old_epoch}" in line
        or f"{name} lost at epoch {old_epoch}" in line
    ]
    print(f"node {victim}'s log:", *refusals, sep="\n| ")
    assert refusals, log[-3000:]
    assert not ledger.rewinds, ledger.rewinds[:10]
    assert_nothing_lost(cluster, group, ledger.snapshot())
    final = committed(cluster.nodes[cluster.coordinator_of(group)].bootstrap, group)
    assert all(o < late_offset and m != "late" for o, m in final.values()), final
    # The late group's commit never landed: its new coordinator has no offset for it.
    assert committed(cluster.nodes[cluster.coordinator_of(late_group)].bootstrap, late_group) == {}


# outage is slow (11 s): fast and immediate restart PostgreSQL under the same load.
@pytest.mark.parametrize(
    "mode", ["fast", "immediate", pytest.param("outage", marks=pytest.mark.slow)]
)
def test_postgres_restart_under_load_loses_nothing_acknowledged(
    cluster: Cluster, pg_server: PgServer, mode: str
) -> None:
    create_topic(cluster.nodes[1].bootstrap, "crash", PARTITIONS)
    create_topic(cluster.nodes[1].bootstrap, "produced", PARTITIONS)
    cluster.wait_topic_led("crash")
    cluster.wait_topic_led("produced")
    pids = {n: p.proc.pid for n, p in cluster.nodes.items() if p.proc is not None}
    groups = groups_on_distinct_nodes(cluster, 3, "pgr")
    committers = [Committer(cluster.bootstrap, g) for g in groups]
    producer = PlacedProducer(cluster.bootstrap, "produced")
    for c in committers:
        c.start()
    producer.thread.start()
    try:
        wait_acked(producer, 2000)
        wait_until(
            lambda: all(len(c.snapshot()) == PARTITIONS for c in committers),
            timeout=30,
            what="commits before the restart",
        )
        if mode == "outage":
            # Down longer than the session timeout: every node's lease deadline passes and
            # it stops serving; the length of the outage is the fault, not a wait.
            pg_server.stop("immediate")
            time.sleep(2 * cluster.session_timeout_ms / 1000)
            pg_server.restart("fast")
        else:
            pg_server.restart(mode)
        restarted = time.monotonic()
        acked_at_restart = len(producer.acked)
        snapshots = [c.snapshot() for c in committers]
        wait_until(
            lambda: all(c.snapshot() != s for c, s in zip(committers, snapshots, strict=True)),
            timeout=60,
            what="every group to commit again after the restart",
        )
        wait_acked(producer, acked_at_restart + 2000, timeout=60)
        print(
            f"\nPostgreSQL restart ({mode}): commits resumed {time.monotonic() - restarted:.1f} s"
        )
    finally:
        for c in committers:
            c.close()
        producer.finish()
    assert {n: p.proc.pid for n, p in cluster.nodes.items() if p.proc is not None} == pids
    assert all(p.alive() for p in cluster.nodes.values())
    for group, c in zip(groups, committers, strict=True):
        assert_nothing_lost(cluster, group, c.snapshot())
    # Every partition must be served again (by its old owner or another node).
    cluster.wait_topic_led("produced")
    values = {v for _p, _k, v in read_all_confluent(cluster.bootstrap, "produced", PARTITIONS)}
    lost = producer.acked - values
    if lost:
        # For the report: where the acknowledgements placed the lost records, and what the
        # leases say each partition's durable end is.
        where: dict[int, list[int]] = {}
        for v in lost:
            part, offset = producer.placed[v]
            where.setdefault(part, []).append(offset)
        by_partition = {
            p: f"{len(offs)} acked at offsets {min(offs)}..{max(offs)}"
            for p, offs in sorted(where.items())
        }
        leases = pg_server.psql(
            "kgc",
            "SELECT partition, owner_node, epoch, next_offset FROM kgc_partition "
            "WHERE topic = 'produced' ORDER BY partition",
        )
        pytest.fail(
            f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}; lost per "
            f"partition {by_partition}; leases (partition|owner|epoch|next_offset):\n"
            f"{leases}"
        )


# Slow (9 s): test_sigkill_of_the_coordinator_moves_the_group_and_rewinds_nothing here and
# tests/cluster/test_cluster.py's graceful stop hand-over.
@pytest.mark.slow
def test_rolling_restart_under_a_consuming_group(cluster: Cluster) -> None:
    ends = prepare_topic(cluster, "roll", 12_000)
    (group,) = groups_on_distinct_nodes(cluster, 1, "roll")
    ledger = Ledger()
    members = [
        GroupMember(cluster.all_bootstrap, group, "roll", ledger, batch=10, pace=0.05)
        for _ in range(2)
    ]
    for m in members:
        m.start()
    try:
        wait_until(lambda: len(ledger.ack_times) >= 20, timeout=30, what="commits before")
        for node in sorted(cluster.nodes):
            held = len(ledger.ack_times)
            t0 = time.monotonic()
            assert cluster.stop(node) == 0, cluster.nodes[node].log()
            cluster.start(node)
            print(f"\nnode {node} restarted, cluster ready in {time.monotonic() - t0:.1f} s")
            wait_until(
                lambda: len(ledger.ack_times) > held + 5,  # noqa: B023 (called at once)
                timeout=30,
                what=f"commits after node {node} came back",
            )
        # The restarts happened while the group still had records to consume.
        assert ledger.distinct_consumed() < sum(ends.values())
        for m in members:
            m.pace = 0
        wait_until(lambda: ledger.snapshot() == ends, timeout=90, what="the group to finish")
    finally:
        for m in members:
            m.close()
    assert not ledger.rewinds, ledger.rewinds[:10]
    everything = {(p, o) for p, end in ends.items() for o in range(end)}
    assert {(p, o) for p, offs in ledger.consumed.items() for o in offs} == everything
    assert committed_at_coordinator(cluster, group) == ends
