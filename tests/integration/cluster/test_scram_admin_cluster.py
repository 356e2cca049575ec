"""Cluster mode: SCRAM credentials live in PostgreSQL, shared by every node, durable.

A credential altered through one node is described by another after that node's next
heartbeat (the 'scram' change version moved); the credentials survive SIGKILL of every node;
confluent-kafka's admin calls work against the cluster.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from support.clusterkit import Cluster
from support.groupkit import wait_until
from support.kgc_process import KgcProcess

from coordinator.security.credentials import salted_password
from coordinator.tools.client import Connection
from protocol.messages import alter_user_scram_credentials as alter_api
from protocol.messages import describe_user_scram_credentials as describe_api

pytestmark = [pytest.mark.postgres, pytest.mark.integration, pytest.mark.slow]


def sessions_expired(url: str) -> bool:
    async def ask() -> bool:
        conn = await asyncpg.connect(url)
        try:
            return bool(
                await conn.fetchval(
                    "SELECT bool_and(last_heartbeat < clock_timestamp() - interval '3100 ms') "
                    "FROM kgc_node"
                )
            )
        finally:
            await conn.close()

    return asyncio.run(ask())


def describe(node: KgcProcess) -> dict[str, list[tuple[int, int]]]:
    with Connection.to(node.bootstrap) as conn:
        resp = conn.call(describe_api.API_KEY, 0, describe_api.Request(users=None))
    assert resp.error_code == 0
    return {r.user: [(i.mechanism, i.iterations) for i in r.credential_infos] for r in resp.results}


def upsert(node: KgcProcess, user: str, password: str, iterations: int) -> None:
    salt = b"salt-of-" + user.encode()
    up = alter_api.ScramCredentialUpsertion(
        user, 2, iterations, salt, salted_password("SCRAM-SHA-512", password, salt, iterations)
    )
    with Connection.to(node.bootstrap) as conn:
        resp = conn.call(alter_api.API_KEY, 0, alter_api.Request(upsertions=[up]))
    assert [(r.user, r.error_code) for r in resp.results] == [(user, 0)]


def test_credentials_are_shared_by_nodes_and_survive_sigkill(tmp_path: Path, pg_url: str) -> None:
    with Cluster(tmp_path, pg_url, nodes=2, offsets_partitions=4) as cluster:
        cluster.start_all()
        one, two = cluster.nodes[1], cluster.nodes[2]
        assert describe(one) == {} and describe(two) == {}
        upsert(one, "alice", "alice-secret", 8192)
        assert describe(one) == {"alice": [(2, 8192)]}  # the writer answers at once
        started = time.monotonic()
        wait_until(lambda: describe(two) == {"alice": [(2, 8192)]}, timeout=10,
                   what="node 2 sees alice")  # fmt: skip
        # Within about one heartbeat (500 ms here), never the session timeout.
        assert time.monotonic() - started < 3
        # confluent-kafka against the cluster.
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        futures = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob"
                )
            ]
        )
        futures["bob"].result(timeout=10)
        expected = {"alice": [(2, 8192)], "bob": [(1, 4096)]}
        for node in (one, two):
            wait_until(lambda n=node: describe(n) == expected, timeout=10, what="bob everywhere")  # type: ignore[misc]
        for n in (1, 2):
            cluster.kill(n)
        # A killed node's id is taken until its session expires (NodeIdInUseError).
        wait_until(lambda: sessions_expired(pg_url), timeout=20, what="sessions expired")
        for n in (1, 2):
            cluster.start(n, wait=False)
        cluster.wait_ready()
        assert describe(one) == expected and describe(two) == expected
