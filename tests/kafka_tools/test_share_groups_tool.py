"""kafka-share-groups (ShareGroupCommand) against Kafka and kgc, outputs compared.

The same share group is set up on both servers with kgc's wire client speaking
ShareGroupHeartbeat as a share consumer does (fixed member ids, so the tool's CONSUMER-ID
columns compare): two members on a one-partition topic, both assigned the partition (the
simple assignor shares it), once each server has initialized its share state. The tool
then lists, describes (members, state, offsets) and deletes the group: refused while it
has members, done once they left.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.tools_kit import Server, compare, run_pair
from support.tools_setup import create_topic

from coordinator.tools.client import Connection
from protocol.messages import consumer_group_heartbeat as cgh
from protocol.messages import find_coordinator
from protocol.messages import share_group_describe as sgd
from protocol.messages import share_group_heartbeat as sgh

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
MEMBERS = ("member-a", "member-b")


def heartbeat(conn: Connection, group: str, member: str, epoch: int, topics: Any = None) -> Any:
    _, r = conn.request(
        sgh.API_KEY,
        sgh.ShareGroupHeartbeatRequest(
            group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics
        ),
    )
    assert r.error_code == 0, r
    return r


def wait_topic_known(conn: Connection, topic: str) -> None:
    """Kafka's group coordinator learns of a new topic a moment after creating it (and a
    group subscribed meanwhile bumps its epoch once more when it does): a throwaway
    consumer group joins until it is given the partition."""
    deadline = time.monotonic() + 60
    attempt = 0
    while True:
        attempt += 1
        probe = f"probe-{attempt}-{topic}-p"
        req = cgh.ConsumerGroupHeartbeatRequest(
            group_id=probe,
            member_id="probe",
            member_epoch=0,
            rebalance_timeout_ms=30000,
            subscribed_topic_names=[topic],
            topic_partitions=[],
        )
        _, r = conn.request(cgh.API_KEY, req)
        got = r.assignment is not None and bool(r.assignment.topic_partitions)
        if r.error_code == 0:
            leave = cgh.ConsumerGroupHeartbeatRequest(
                group_id=probe, member_id="probe", member_epoch=-1
            )
            conn.request(cgh.API_KEY, leave)
        if got:
            return
        assert time.monotonic() < deadline, f"{topic} never assignable"
        time.sleep(0.2)


def join_both(server: Server, group: str, topic: str) -> dict[str, int]:
    """Both members joined, heartbeating until the group is settled with each holding the
    partition (the share state is initialized asynchronously on both servers)."""
    with Connection.to(server.bootstrap) as conn:
        deadline = time.monotonic() + 60
        while True:  # a new Kafka creates its offsets topic on the first FindCoordinator
            _, fc = conn.request(
                find_coordinator.API_KEY,
                find_coordinator.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]),
            )
            _, probe = conn.request(sgd.API_KEY, sgd.ShareGroupDescribeRequest(group_ids=[group]))
            if fc.coordinators[0].error_code == 0 and probe.groups[0].error_code == 69:
                break
            assert time.monotonic() < deadline, f"{server}: no coordinator for {group}"
            time.sleep(0.2)
        wait_topic_known(conn, topic)
        # member-a alone until its partition is initialized and assigned (the share state
        # is initialized asynchronously on both servers), then member-b: the same epochs.
        first, second = MEMBERS
        epoch = heartbeat(conn, group, first, 0, [topic]).member_epoch
        while True:
            r = heartbeat(conn, group, first, epoch)
            epoch = r.member_epoch
            if r.assignment is not None and r.assignment.topic_partitions:
                break
            assert time.monotonic() < deadline, f"{server}: {first} never assigned"
            time.sleep(0.1)
        epochs = {first: epoch, second: heartbeat(conn, group, second, 0, [topic]).member_epoch}
        deadline = time.monotonic() + 30
        while True:
            for m in MEMBERS:
                epochs[m] = heartbeat(conn, group, m, epochs[m]).member_epoch
            _, resp = conn.request(sgd.API_KEY, sgd.ShareGroupDescribeRequest(group_ids=[group]))
            d = resp.groups[0]
            held = [[tp.partitions for tp in m.assignment.topic_partitions] for m in d.members]
            epochs_now = {m.member_epoch for m in d.members}
            if held == [[[0]], [[0]]] and epochs_now == {d.group_epoch} == {d.assignment_epoch}:
                return epochs
            assert time.monotonic() < deadline, f"{server}: never settled: {d}"
            time.sleep(0.2)


@contextlib.contextmanager
def kept_alive(joined: dict[Server, dict[str, int]], group: str) -> Iterator[None]:
    """Both members heartbeat on every server (every second, within Kafka's 5 s interval)
    while the tools run: a run of six JVM tools on a loaded machine outlasts the 45 s
    share session, and a group whose members expired is Empty, so the "non-empty" delete
    would succeed and the leave heartbeat get GROUP_ID_NOT_FOUND."""
    stop = threading.Event()
    failed: list[BaseException] = []

    def beat() -> None:
        conns = {s: Connection.to(s.bootstrap) for s in joined}
        try:
            while not stop.wait(1.0):
                for s, epochs in joined.items():
                    for m in MEMBERS:
                        epochs[m] = heartbeat(conns[s], group, m, epochs[m]).member_epoch
        except BaseException as e:
            failed.append(e)
        finally:
            for c in conns.values():
                c.close()

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
    assert not failed, failed


def leave_both(server: Server, group: str) -> None:
    with Connection.to(server.bootstrap) as conn:
        for m in MEMBERS:
            heartbeat(conn, group, m, -1)


def sg(pair: list[Server], *args: str) -> list:  # type: ignore[type-arg]
    return run_pair(SHARE_GROUPS, ["--bootstrap-server", "{bootstrap}", *args], pair)


def test_share_groups_list_describe_delete(pair: list[Server]) -> None:
    topic, group = "sgtool.t", "sgtool.g"
    for s in pair:
        create_topic(s.bootstrap, topic, 1)
    joined = {s: join_both(s, group, topic) for s in pair}
    with kept_alive(joined, group):
        compare(
            "tools.share-groups.list",
            sg(pair, "--list"),
            transform=lambda ls: [ln for ln in ls if group in ln],
        )
        compare("tools.share-groups.members", sg(pair, "--describe", "--group", group, "--members"))
        compare(
            "tools.share-groups.members-verbose",
            sg(pair, "--describe", "--group", group, "--members", "--verbose"),
        )
        compare("tools.share-groups.state", sg(pair, "--describe", "--group", group, "--state"))
        compare(
            "tools.share-groups.state-verbose",
            sg(pair, "--describe", "--group", group, "--state", "--verbose"),
        )
        compare("tools.share-groups.offsets", sg(pair, "--describe", "--group", group))
        compare("tools.share-groups.delete-non-empty", sg(pair, "--delete", "--group", group))
    for s in pair:
        leave_both(s, group)
    compare("tools.share-groups.state-empty", sg(pair, "--describe", "--group", group, "--state"))
    compare("tools.share-groups.delete", sg(pair, "--delete", "--group", group))
    compare(
        "tools.share-groups.describe-deleted", sg(pair, "--describe", "--group", group, "--state")
    )
