"""Cluster mode with SASL and the StandardAuthorizer: ACLs and SCRAM users are the cluster's.

How this works: two real ``kgc serve`` nodes on the session's PostgreSQL, each with one
SASL_PLAINTEXT listener offering PLAIN (``admin``, from a JAAS line, the super user) and
SCRAM-SHA-512 (users stored in the database), the StandardAuthorizer and no ACL at first
(``allow.everyone.if.no.acl.found`` is false). Requests are sent with kgc's own client to
one chosen node, so "created through node 1, enforced by node 2" is exactly that: the admin
adds ``alice``'s SCRAM credential and her READ ACLs through node 1, and alice, authenticated
at node 2, is denied there until node 2 has the ACLs — which must take under a second from
the CreateAcls answer — then consumes with a real client bootstrapped from node 2. The
second test SIGKILLs both nodes, restarts them, and checks that alice still authenticates
at each node and that each node still enforces exactly her ACLs.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from confluent_kafka import Consumer, Producer
from support.groupkit import wait_until
from support.kgc_process import KgcProcess, free_port

from coordinator.security.credentials import salted_password
from coordinator.tools.client import AuthenticationFailed, ClientSecurity, Connection
from protocol.errors import ErrorCode
from protocol.messages import alter_user_scram_credentials as alter_api
from protocol.messages import create_acls, create_topics, describe_acls, find_coordinator, metadata

pytestmark = [pytest.mark.postgres, pytest.mark.integration, pytest.mark.slow]
OFFSETS_PARTITIONS = 4
# admin is also the nodes' own login to each other (the inter-broker listener is this one).
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)
ADMIN = {"sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"}
ALICE = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "a-secret"}
# Kafka's enum codes (AclOperation, AclPermissionType, ResourceType, PatternType)
TOPIC, GROUP, READ, ALLOW, LITERAL = 2, 3, 3, 3, 3


class Nodes:
    def __init__(self, base: Path, pg_url: str) -> None:
        self.pg_url = pg_url
        self.procs: dict[int, KgcProcess] = {}
        for node_id in (1, 2):
            port = free_port()
            proc = KgcProcess(
                base / f"node-{node_id}" / "data",
                "--node-id", str(node_id),
                "--storage-url", pg_url,
                "--broker-heartbeat-interval-ms", "500",
                "--broker-session-timeout-ms", "3000",
                "--offsets-topic-num-partitions", str(OFFSETS_PARTITIONS),
                "--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}",
                "--sasl-enabled-mechanisms", "PLAIN,SCRAM-SHA-512",
                "--sasl-jaas-config", JAAS,
                "--sasl-mechanism-inter-broker-protocol", "PLAIN",
                "--authorizer-class-name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "--super-users", "User:admin",
                "--group-initial-rebalance-delay-ms", "0",
                port=port,
            )  # fmt: skip
            proc.data_dir.mkdir(parents=True, exist_ok=True)
            self.procs[node_id] = proc

    def start(self) -> None:
        for proc in self.procs.values():
            proc.start(timeout=60)
        # Ready when each node lists both as brokers (each has registered and heartbeated).
        for n in self.procs:
            wait_until(
                lambda n=n: brokers(self.procs[n]) == {1, 2},  # type: ignore[misc]
                timeout=60,
                what=f"node {n} lists both nodes",
            )

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.alive():
                proc.stop()


@pytest.fixture
def nodes(tmp_path: Path, pg_url: str) -> Iterator[Nodes]:
    n = Nodes(tmp_path, pg_url)
    try:
        n.start()
        yield n
    finally:
        n.close()


def conn(proc: KgcProcess, who: dict[str, str]) -> Connection:
    security = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", **who})
    return Connection.to(proc.bootstrap, timeout=10, security=security)


def brokers(proc: KgcProcess) -> set[int]:
    try:
        with conn(proc, ADMIN) as c:
            resp = c.call(metadata.API_KEY, 12, metadata.Request(topics=[]))
    except OSError:
        return set()
    return {b.node_id for b in resp.brokers}


def add_alice(proc: KgcProcess) -> None:
    """AlterUserScramCredentials for alice (SCRAM-SHA-512), as the admin, through ``proc``."""
    salt, iterations = b"alice-salt", 4096
    hashed = salted_password("SCRAM-SHA-512", ALICE["sasl.password"], salt, iterations)
    up = alter_api.ScramCredentialUpsertion("alice", 2, iterations, salt, hashed)
    with conn(proc, ADMIN) as c:
        resp = c.call(alter_api.API_KEY, 0, alter_api.Request(upsertions=[up]))
    assert [(r.user, r.error_code) for r in resp.results] == [("alice", 0)]


def create_topic(proc: KgcProcess, topic: str) -> None:
    req = create_topics.Request(
        topics=[create_topics.CreatableTopic(name=topic, num_partitions=2, replication_factor=1)]
    )
    with conn(proc, ADMIN) as c:
        resp = c.call(create_topics.API_KEY, 5, req)
    assert resp.topics[0].error_code == 0, resp


def grant_alice_read(proc: KgcProcess, topic: str, group: str) -> None:
    """CreateAcls through ``proc``: alice may READ ``topic`` and ``group``."""
    creations = [
        create_acls.AclCreation(rtype, name, LITERAL, "User:alice", "*", READ, ALLOW)
        for rtype, name in ((TOPIC, topic), (GROUP, group))
    ]
    with conn(proc, ADMIN) as c:
        resp = c.call(create_acls.API_KEY, 3, create_acls.Request(creations=creations))
    assert [r.error_code for r in resp.results] == [0, 0], resp


def alice_may(proc: KgcProcess, topic: str, group: str) -> tuple[int, int]:
    """(Metadata's error for ``topic``, FindCoordinator's for ``group``) for alice at ``proc``."""
    with conn(proc, ALICE) as c:
        md = c.call(
            metadata.API_KEY,
            12,
            metadata.Request(
                topics=[metadata.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
            ),
        )
        fc = c.call(
            find_coordinator.API_KEY,
            4,
            find_coordinator.Request(key_type=0, coordinator_keys=[group]),
        )
    return int(md.topics[0].error_code), int(fc.coordinators[0].error_code)


DENIED = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED)
ALLOWED = (0, 0)


def alice_consumes(proc: KgcProcess, topic: str, group: str, want: int) -> int:
    """Records alice reads with a confluent-kafka group bootstrapped from ``proc`` only."""
    conf: dict[str, Any] = {
        "bootstrap.servers": proc.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        **ALICE,
    }
    c = Consumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    got = 0
    errors: list[str] = []
    try:
        c.subscribe([topic])

        def read() -> bool:
            nonlocal got
            msg = c.poll(0.2)
            if msg is not None:
                if msg.error() is None:
                    got += 1
                else:
                    errors.append(str(msg.error()))
            return got >= want

        wait_until(read, timeout=60, interval=0, what=f"alice read {want} ({errors[-3:]})")
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def produce(proc: KgcProcess, topic: str, n: int) -> None:
    p = Producer(
        {"bootstrap.servers": proc.bootstrap, "security.protocol": "SASL_PLAINTEXT", **ADMIN}
    )
    for i in range(n):
        p.produce(topic, value=b"r%d" % i, partition=i % 2)
    assert p.flush(30) == 0


def test_acl_created_through_one_node_is_enforced_by_the_other_within_a_second(
    nodes: Nodes,
) -> None:
    one, two = nodes.procs[1], nodes.procs[2]
    suffix = uuid.uuid4().hex[:6]
    topic, group = f"orders-{suffix}", f"billing-{suffix}"
    create_topic(one, topic)
    produce(one, topic, 10)
    add_alice(one)
    # SCRAM users are the cluster's: alice, added through node 1, gets in at node 2, where
    # nothing is granted to her yet.
    wait_until(lambda: _authenticates(two), timeout=10, what="alice known to node 2")
    assert alice_may(two, topic, group) == DENIED
    assert alice_may(one, topic, group) == DENIED

    # The group has a live coordinator (as the admin sees it), so what is timed below is
    # the ACL reaching node 2, not the offsets partitions being taken after start-up.
    wait_until(lambda: admin_find_coordinator(two, group) == 0, timeout=30,
               what="a coordinator for the group")  # fmt: skip
    grant_alice_read(one, topic, group)
    granted = time.monotonic()
    wait_until(lambda: alice_may(two, topic, group) == ALLOWED, timeout=10, interval=0.02,
               what="node 2 enforces the new ACLs")  # fmt: skip
    took = time.monotonic() - granted
    assert took < 1.0, f"node 2 took {took:.2f} s to enforce an ACL created through node 1"
    assert alice_may(one, topic, group) == ALLOWED
    # Another group and topic stay denied at node 2.
    assert alice_may(two, f"other-{suffix}", f"other-{suffix}") == DENIED
    assert alice_consumes(two, topic, group, 10) == 10


def admin_find_coordinator(proc: KgcProcess, group: str) -> int:
    with conn(proc, ADMIN) as c:
        fc = c.call(
            find_coordinator.API_KEY,
            4,
            find_coordinator.Request(key_type=0, coordinator_keys=[group]),
        )
    return int(fc.coordinators[0].error_code)


def _authenticates(proc: KgcProcess) -> bool:
    try:
        conn(proc, ALICE).close()
        return True
    except AuthenticationFailed:
        return False


def sessions_expired(url: str) -> bool:
    async def ask() -> bool:
        c = await asyncpg.connect(url)
        try:
            return bool(
                await c.fetchval(
                    "SELECT bool_and(last_heartbeat < clock_timestamp() - interval '3100 ms') "
                    "FROM kgc_node"
                )
            )
        finally:
            await c.close()

    return asyncio.run(ask())


def test_scram_users_and_acls_survive_sigkill_of_both_nodes(nodes: Nodes) -> None:
    one, two = nodes.procs[1], nodes.procs[2]
    suffix = uuid.uuid4().hex[:6]
    topic, group = f"orders-{suffix}", f"billing-{suffix}"
    create_topic(one, topic)
    produce(one, topic, 6)
    add_alice(one)
    grant_alice_read(two, topic, group)
    for proc in (one, two):
        wait_until(lambda p=proc: _authenticates(p) and alice_may(p, topic, group) == ALLOWED,  # type: ignore[misc]
                   timeout=10, what="alice and her ACLs everywhere")  # fmt: skip

    for proc in (one, two):
        proc.kill()
    # A killed node's id is taken until its session expires (NodeIdInUseError).
    wait_until(lambda: sessions_expired(nodes.pg_url), timeout=20, what="sessions expired")
    nodes.start()

    for proc in (one, two):
        assert _authenticates(proc), "alice's SCRAM credential was lost"
        # Authorized at once; FindCoordinator may answer COORDINATOR_NOT_AVAILABLE until
        # the restarted nodes have taken the offsets partitions again.
        assert alice_may(proc, topic, group)[0] == 0
        wait_until(lambda p=proc: alice_may(p, topic, group) == ALLOWED, timeout=30,  # type: ignore[misc]
                   what="the group's coordinator after the restart")  # fmt: skip
        assert alice_may(proc, f"other-{suffix}", f"other-{suffix}") == DENIED
        with pytest.raises(AuthenticationFailed):  # and the password is still checked
            conn(proc, {**ALICE, "sasl.password": "wrong"}).close()
    with conn(two, ADMIN) as c:
        resp = c.call(
            describe_acls.API_KEY,
            3,
            describe_acls.Request(
                resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                principal_filter="User:alice", host_filter=None, operation=1, permission_type=1,
            ),
        )  # fmt: skip
    assert resp.error_code == 0
    assert sorted((r.resource_type, r.resource_name) for r in resp.resources) == [
        (TOPIC, topic),
        (GROUP, group),
    ]
    assert alice_consumes(two, topic, group, 6) == 6


def test_a_transaction_across_the_nodes_with_their_sasl_login(nodes: Nodes) -> None:
    # The coordinator's markers to the other node and that node's verification questions
    # travel over the SASL listener as the JAAS line's admin, a super user (CLUSTER_ACTION).
    one, two = nodes.procs[1], nodes.procs[2]
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    req = create_topics.Request(
        topics=[create_topics.CreatableTopic(name=topic, num_partitions=6, replication_factor=1)]
    )
    with conn(one, ADMIN) as c:
        assert c.call(create_topics.API_KEY, 5, req).topics[0].error_code == 0

    def leaders() -> set[int]:
        with conn(two, ADMIN) as c:
            resp = c.call(
                metadata.API_KEY,
                12,
                metadata.Request(topics=[metadata.MetadataRequestTopic(name=topic)]),
            )
        return {p.leader_id for t in resp.topics for p in t.partitions}

    wait_until(lambda: {1, 2} >= leaders() != set(), timeout=30, what="the partitions led")
    led = leaders()

    def coordinator(txn_id: str) -> int:
        req = find_coordinator.Request(key_type=1, coordinator_keys=[txn_id])
        with conn(one, ADMIN) as c:
            (found,) = c.call(find_coordinator.API_KEY, 4, req).coordinators
        return found.node_id if found.error_code == 0 else -1

    # A transactional id whose coordinator does not lead all the partitions: some markers
    # (and verifications) cross between the nodes.
    txn_id = ""

    def found_one() -> bool:
        nonlocal txn_id
        for i in range(50):
            candidate = f"tx-{topic}-{i}"
            node = coordinator(candidate)
            if node in (1, 2) and led != {node}:
                txn_id = candidate
                return True
        return False

    wait_until(found_one, timeout=30, what="a coordinator on another node than a leader")
    sasl = {
        "bootstrap.servers": f"{one.bootstrap},{two.bootstrap}",
        "security.protocol": "SASL_PLAINTEXT",
        **ADMIN,
    }
    p = Producer({**sasl, "transactional.id": txn_id})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(12):
        p.produce(topic, value=b"c%d" % i, partition=i % 6)
    p.commit_transaction(30)
    c = Consumer(
        {
            **sasl,
            "group.id": f"r-{topic}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([topic])
    got: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(got) < 12 and time.monotonic() < deadline:
            for m in c.consume(20, 0.5):
                if m.error() is None and m.value() is not None:
                    got.add(m.value())
    finally:
        c.close()
    assert got == {b"c%d" % i for i in range(12)}
